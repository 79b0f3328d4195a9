//! fisk-ai wire messages as a caller sends them over NATS (task requests, cancels, discovery, elicitation
//! replies): each decoder takes any bytes without panicking, and what it accepts, encoded again, decodes to
//! the same message.
#![no_main]

use agentwire_fisk::wire;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(task) = wire::decode_task(data) {
        let written = task.to_bytes();
        let again = wire::decode_task(&written).expect("a task request reads back");
        assert_eq!(task, again);
    }
    if let Ok(cancel) = wire::decode_cancel(data) {
        let again = wire::decode_cancel(&cancel.to_bytes()).expect("a cancel reads back");
        assert_eq!(cancel, again);
    }
    if let Ok(discovery) = wire::decode_discovery(data) {
        let again =
            wire::decode_discovery(&discovery.to_bytes()).expect("a discovery request reads back");
        assert_eq!(discovery, again);
    }
    if let Ok(elicit) = wire::decode_elicit(data) {
        let again = wire::decode_elicit(&elicit.to_bytes()).expect("an elicitation reads back");
        assert_eq!(elicit, again);
    }
});
