//! Tinyagent question cards, their answers and task requests as a room's members post them (event JSON; an
//! answer after a newline): reading a card, checking a comment and an answer, and taking a task request never
//! panic.
#![no_main]

use agentwire_tasks::card::Acceptance;
use libfuzzer_sys::fuzz_target;
use nostr::prelude::{Event, Keys, SecretKey, Timestamp};
use std::collections::HashSet;

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(2, |b| *b == b'\n');
    let Some(Ok(request)) = parts.next().map(Event::from_json) else {
        return;
    };
    let _ = agentwire_tinyagent::check_comment(&request);
    let _ = agentwire_tinyagent::answered_request(&request);
    let _ = agentwire_tinyagent::named_requests(&request);
    let agent =
        Keys::new(SecretKey::from_slice(&[9; 32]).expect("a valid secret key")).public_key();
    let acceptance = Acceptance {
        agent,
        watch: HashSet::from(["lab".to_string()]),
        allowed: HashSet::from([request.pubkey]),
    };
    let _ = acceptance.accept(&request);
    let _ = acceptance.cancel_command(&request);
    if let Ok(card) = agentwire_tinyagent::question(&request) {
        if let Some(Ok(answer)) = parts.next().map(Event::from_json) {
            let _ = agentwire_tinyagent::check_comment(&answer);
            let _ = agentwire_tinyagent::check_answer(
                &request,
                &card,
                &answer,
                Timestamp::from(1_771_402_416),
            );
        }
    }
});
