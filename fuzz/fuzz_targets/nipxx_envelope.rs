//! The compatibility text envelope (`key=value|...`, values percent-encoded): reading it as each event's
//! envelope never panics, and the fields it parses to, written again, parse to the same fields.
#![no_main]

use agentwire_nostr::nipxx::envelope::{self, Envelope, EnvelopeOf};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for of in [
        EnvelopeOf::Response,
        EnvelopeOf::Delta,
        EnvelopeOf::ToolCall,
        EnvelopeOf::Error,
    ] {
        if let Ok(e) = Envelope::read(text, of) {
            assert_eq!(e.get("event"), Some(of.event()));
        }
    }
    let fields = envelope::parse(text);
    let written = envelope::encode(fields.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    assert_eq!(envelope::parse(&written), fields, "{written}");
    if let Some(decoded) = envelope::decode(text) {
        assert_eq!(
            envelope::decode(&envelope::encode_value(&decoded)),
            Some(decoded)
        );
    }
});
