//! OpenAI-compatible request bodies as a client posts them (`/v1/chat/completions`): the parser takes any
//! bytes without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    let _ = agentwire_openai_front::wire::parse_request(body);
});
