//! A NIP-XX event as a relay delivers it (event JSON): its tags read as a prompt's, a cancel's and a run
//! event's, and a prompt's admission (tags, decryption, payload, negotiation) never panics.
//!
//! So that generated events reach past the checks a fuzzer cannot guess, `AGENT` and `SENDER` in the input
//! stand for the two keys' hex, and a content `PLAIN:<text>` is `<text>` encrypted from the sender to the
//! agent (signatures are not checked here: the relay checks them before this code sees an event).
#![no_main]

use agentwire_nostr::crypto::Crypto;
use agentwire_nostr::nipxx::admission::{self, Offer};
use agentwire_nostr::nipxx::{tags, Message};
use libfuzzer_sys::fuzz_target;
use nostr::prelude::{Event, Keys, SecretKey};
use std::sync::OnceLock;

fn keys() -> &'static (Crypto, Crypto) {
    static KEYS: OnceLock<(Crypto, Crypto)> = OnceLock::new();
    KEYS.get_or_init(|| {
        let key = |b: u8| Keys::new(SecretKey::from_slice(&[b; 32]).expect("a valid secret key"));
        (Crypto::new(key(7)), Crypto::new(key(8)))
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (agent, sender) = keys();
    let me = agent.public_key();
    let text = text
        .replace("AGENT", &me.to_hex())
        .replace("SENDER", &sender.public_key().to_hex());
    let Ok(mut event) = Event::from_json(&text) else {
        return;
    };
    if let Some(plain) = event.content.strip_prefix("PLAIN:") {
        if let Ok(sealed) = sender.encrypt(&me, plain) {
            event.content = sealed;
        }
    }
    let message = Message::signed(event);
    let _ = tags::session(&message);
    let _ = tags::prompt_tags(&message, &me);
    let _ = tags::cancel_tags(&message, &me);
    let _ = tags::run_event_tags(&message, &me);
    let models = ["demo-1".to_string()];
    let offer = Offer {
        models: &models,
        default_model: "demo-1",
        max_prompt_bytes: 32_000,
        wrapped_only: false,
    };
    let _ = admission::admit(
        &message,
        &me,
        None,
        |peer, content| agent.decrypt(peer, content),
        offer,
        1_771_402_416.0,
    );
});
