//! Relay client messages as a client sends them over one connection (`EVENT`, `REQ`, `CLOSE`, `COUNT`,
//! `AUTH`; one text frame per line of the input): the session reads and validates each, and the filters of
//! the queries it asks for become SQL, without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;

/// Frames read from one input: a connection's first messages are what the fuzzer explores.
const MAX_FRAMES: usize = 64;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    agentwire_relay::fuzzing::client_messages(text.split('\n').take(MAX_FRAMES));
});
