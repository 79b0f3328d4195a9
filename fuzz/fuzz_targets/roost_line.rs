//! roost protocol lines as an agent or a controller writes them to the daemon's socket: the general parser
//! takes any line without panicking, the `report` fast path agrees with it on every line it takes, and a
//! report's fields (state, status, question and choices, prLinks, remoteAt, ...) are validated without
//! panicking, and a request's op is either refused or one of the ops, named back as it came.
#![no_main]

use agentwire_roost::proto::op::Op;
use agentwire_roost::proto::report::Report;
use agentwire_roost::proto::wire;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|line: &[u8]| {
    let general = wire::parse_request(line);
    if wire::parse_report_line(line).is_some() {
        let request = general.as_ref().unwrap_or_else(|bad| {
            panic!("the fast path took a line the general parser refuses: {bad:?}")
        });
        assert_eq!(request.op, "report", "the fast path took another op");
    }
    if let Ok(request) = general {
        if let Ok(op) = Op::parse(&request.op) {
            assert_eq!(
                op.as_str(),
                request.op,
                "an op read back under another name"
            );
        }
        if let Some(report) = request.args.get("report") {
            let _ = Report::parse(report);
        }
    }
});
