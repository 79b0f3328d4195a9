//! A2A JSON-RPC params as a client sends them (`message/send`, `tasks/get`, `tasks/list`, task ids, times):
//! every parser takes any JSON without panicking.
#![no_main]

use agentwire_a2a_front::wire;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = wire::parse_timestamp(text);
    }
    let Ok(params) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let _ = wire::parse_send(&params);
    let _ = wire::parse_get(&params, None);
    let _ = wire::parse_get(&params, Some("task-1"));
    let _ = wire::parse_task_id(&params, None);
    let _ = wire::parse_list(&params);
});
