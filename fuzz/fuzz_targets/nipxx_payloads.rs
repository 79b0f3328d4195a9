//! NIP-XX payloads (the decrypted JSON of every run kind): each parser takes any text without panicking,
//! and what one accepts it writes back so that it reads the same again.
#![no_main]

use agentwire_nostr::nipxx::payload::{
    CancelPayload, DeltaPayload, ErrorPayload, PromptPayload, ResponsePayload, StatusPayload,
    ToolCallPayload,
};
use libfuzzer_sys::fuzz_target;

/// Parses `text`; when it is accepted, writes it and parses that again, which must give the same value.
macro_rules! round_trip {
    ($ty:ty, $text:expr) => {
        if let Ok(first) = <$ty>::parse($text) {
            let written = first.to_json();
            let again = <$ty>::parse(&written)
                .unwrap_or_else(|v| panic!("{written} does not read back: {v:?}"));
            assert_eq!(first, again, "{written}");
        }
    };
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    round_trip!(PromptPayload, text);
    round_trip!(CancelPayload, text);
    round_trip!(ResponsePayload, text);
    round_trip!(DeltaPayload, text);
    round_trip!(StatusPayload, text);
    round_trip!(ToolCallPayload, text);
    round_trip!(ErrorPayload, text);
    if let Ok(call) = ToolCallPayload::parse(text) {
        let _ = call.read_envelope();
    }
});
