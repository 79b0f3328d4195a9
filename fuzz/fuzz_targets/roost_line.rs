//! roost protocol lines as an agent or a controller writes them to the daemon's socket: the general parser
//! takes any line without panicking, and the `report` fast path agrees with it on every line it takes.
#![no_main]

use agentwire_roost::wire;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|line: &[u8]| {
    let general = wire::parse_request(line);
    if let Some(fast) = wire::parse_report_line(line) {
        let request = general.unwrap_or_else(|bad| {
            panic!("the fast path took a line the general parser refuses: {bad:?}")
        });
        assert_eq!(request.op, "report", "the fast path took another op");
        let _ = fast;
    }
});
