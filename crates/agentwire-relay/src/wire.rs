//! The relay-to-client messages (NIP-01) as JSON text frames.
//!
//! All are encoded by `nostr::RelayMessage`, except `EVENT`, which splices the event's stored
//! canonical JSON into the envelope so a stored or broadcast event is never re-serialised per
//! subscriber. A test checks the splice against `RelayMessage`.

use std::borrow::Cow;

use nostr::event::EventId;
use nostr::message::{RelayMessage, SubscriptionId};

/// The longest human-readable text the relay puts in a message, in bytes; longer texts (parser
/// errors quoting input, echoed verbs) are cut so an error never amplifies its input.
pub(crate) const MAX_MESSAGE_TEXT: usize = 256;

fn encode(message: &RelayMessage<'_>) -> String {
    // Serialising these variants cannot fail (strings, booleans and ids only); an empty frame
    // would be dropped by the client rather than crash the relay.
    message.try_as_json().unwrap_or_default()
}

/// `["OK", id, accepted, message]`.
pub(crate) fn ok(event_id: EventId, accepted: bool, message: &str) -> String {
    encode(&RelayMessage::Ok {
        event_id,
        status: accepted,
        message: Cow::Borrowed(message),
    })
}

/// `["AUTH", challenge]` (NIP-42).
pub(crate) fn auth(challenge: &str) -> String {
    encode(&RelayMessage::Auth {
        challenge: Cow::Borrowed(challenge),
    })
}

/// `["COUNT", subscription, {"count": n}]` (NIP-45).
pub(crate) fn count(subscription_id: &SubscriptionId, count: u64) -> String {
    encode(&RelayMessage::Count {
        subscription_id: Cow::Borrowed(subscription_id),
        count: usize::try_from(count).unwrap_or(usize::MAX),
    })
}

/// `["NOTICE", message]`.
pub(crate) fn notice(message: &str) -> String {
    encode(&RelayMessage::Notice(Cow::Borrowed(message)))
}

/// `["CLOSED", subscription, message]`.
pub(crate) fn closed(subscription_id: &SubscriptionId, message: &str) -> String {
    encode(&RelayMessage::Closed {
        subscription_id: Cow::Borrowed(subscription_id),
        message: Cow::Borrowed(message),
    })
}

/// `["EOSE", subscription]`.
pub(crate) fn eose(subscription_id: &SubscriptionId) -> String {
    encode(&RelayMessage::EndOfStoredEvents(Cow::Borrowed(
        subscription_id,
    )))
}

/// `["NEG-ERR", subscription, message]`.
pub(crate) fn neg_err(subscription_id: &SubscriptionId, message: &str) -> String {
    encode(&RelayMessage::NegErr {
        subscription_id: Cow::Borrowed(subscription_id),
        message: Cow::Borrowed(message),
    })
}

/// `["EVENT", subscription, event]` from the event's canonical JSON.
pub(crate) fn event(subscription_id: &SubscriptionId, event_json: &str) -> String {
    event_after(&event_head(subscription_id), event_json)
}

/// The part of a subscription's `EVENT` frames before the event: `["EVENT",<subscription>,`. A live
/// subscription keeps it, so that its id is escaped once rather than once for every event.
pub(crate) fn event_head(subscription_id: &SubscriptionId) -> String {
    let sub = serde_json::to_string(subscription_id.as_str()).unwrap_or_default();
    let mut head = String::with_capacity(10 + sub.len());
    head.push_str("[\"EVENT\",");
    head.push_str(&sub);
    head.push(',');
    head
}

/// An `EVENT` frame from its [`event_head`] and the event's canonical JSON.
pub(crate) fn event_after(head: &str, event_json: &str) -> String {
    let mut frame = String::with_capacity(head.len() + event_json.len() + 1);
    frame.push_str(head);
    frame.push_str(event_json);
    frame.push(']');
    frame
}

/// `text` cut to at most [`MAX_MESSAGE_TEXT`] bytes, on a character boundary.
pub(crate) fn truncate(text: &str) -> &str {
    &text[..text.floor_char_boundary(MAX_MESSAGE_TEXT)]
}

#[cfg(test)]
mod tests {
    use nostr::event::{EventBuilder, FinalizeEvent, Kind};
    use nostr::key::Keys;

    use super::*;

    #[test]
    fn spliced_event_frame_is_a_relay_message() {
        let e = EventBuilder::new(Kind::from_u16(1), "hi \"there\"\n")
            .finalize(&Keys::generate())
            .unwrap();
        let sub = SubscriptionId::new("a \"quoted\" \\ sub");
        let frame = event(&sub, &e.as_json());
        assert_eq!(
            RelayMessage::from_json(&frame).unwrap(),
            RelayMessage::event(sub.clone(), e.clone())
        );
        assert_eq!(frame, RelayMessage::event(sub, e).as_json());
    }

    #[test]
    fn frames_round_trip() {
        let sub = SubscriptionId::new("s");
        let id = EventId::from_byte_array([7; 32]);
        assert_eq!(
            RelayMessage::from_json(ok(id, false, "invalid: x")).unwrap(),
            RelayMessage::ok(id, false, "invalid: x")
        );
        assert_eq!(notice("n"), r#"["NOTICE","n"]"#);
        assert_eq!(closed(&sub, "error: x"), r#"["CLOSED","s","error: x"]"#);
        assert_eq!(eose(&sub), r#"["EOSE","s"]"#);
    }

    #[test]
    fn truncate_respects_char_boundaries() {
        let long = "é".repeat(MAX_MESSAGE_TEXT);
        let cut = truncate(&long);
        assert!(cut.len() <= MAX_MESSAGE_TEXT);
        assert!(cut.chars().all(|c| c == 'é'));
        assert_eq!(truncate("short"), "short");
    }
}
