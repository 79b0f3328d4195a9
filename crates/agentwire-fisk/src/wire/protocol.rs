//! The `protocol` ids of fisk-ai v1 (`io.choria.fisk-ai.v1.<name>`, `<name>` also naming the schema), the
//! routing of an inbound message by its id, and the one place a message is laid out as JSON.

use super::check::{Obj, Text};
use super::error::WireError;
use super::header::Header;
use serde::Serialize;

/// The namespace every v1 id sits under; an agent card lists it in `protocols`.
pub const PROTOCOL_NAMESPACE: &str = "io.choria.fisk-ai.v1";

/// The full id of `name` (e.g. `request.prompt`), as a compile-time string.
macro_rules! v1 {
    ($name:literal) => {
        concat!("io.choria.fisk-ai.v1.", $name)
    };
}

pub(crate) const REQUEST_PROMPT: &str = v1!("request.prompt");
pub(crate) const REQUEST_ANSWER: &str = v1!("request.answer");
pub(crate) const REQUEST_RESUME: &str = v1!("request.resume");
pub(crate) const REQUEST_READ: &str = v1!("request.read");
pub(crate) const CANCEL: &str = v1!("cancel");
pub(crate) const DISCOVERY_REQUEST: &str = v1!("discovery.request");
pub(crate) const DISCOVERY_REPLY: &str = v1!("discovery.reply");
pub(crate) const ELICIT_REPLY_APPROVE: &str = v1!("elicit.reply.approve");
pub(crate) const ELICIT_REPLY_CONFIRM: &str = v1!("elicit.reply.confirm");
pub(crate) const ELICIT_REPLY_SELECT: &str = v1!("elicit.reply.select");
pub(crate) const ELICIT_REPLY_INPUT: &str = v1!("elicit.reply.input");
pub(crate) const ELICIT_REPLY_NO_OPERATOR: &str = v1!("elicit.reply.no_operator");
pub(crate) const ELICIT_WAITING: &str = v1!("elicit.waiting");
pub(crate) const ELICIT_REQUEST_APPROVE: &str = v1!("elicit.request.approve");
pub(crate) const ELICIT_REQUEST_CONFIRM: &str = v1!("elicit.request.confirm");
pub(crate) const ELICIT_REQUEST_SELECT: &str = v1!("elicit.request.select");
pub(crate) const ELICIT_REQUEST_INPUT: &str = v1!("elicit.request.input");
pub(crate) const ACK: &str = v1!("ack");
pub(crate) const RESULT: &str = v1!("result");
pub(crate) const ERROR: &str = v1!("error");
pub(crate) const EVENT_TEXT: &str = v1!("event.text");
pub(crate) const EVENT_THINKING: &str = v1!("event.thinking");
pub(crate) const EVENT_TOOL_CALL: &str = v1!("event.tool_call");
pub(crate) const EVENT_TOOL_RESULT: &str = v1!("event.tool_result");
pub(crate) const EVENT_AGENT_CALL: &str = v1!("event.agent_call");
pub(crate) const EVENT_WARNING: &str = v1!("event.warning");
pub(crate) const EVENT_PROMPT: &str = v1!("event.prompt");
pub(crate) const EVENT_STATUS: &str = v1!("event.status");

/// The short name of a v1 id (`request.resume` for `io.choria.fisk-ai.v1.request.resume`), as the schemas
/// and error texts name a kind.
pub(crate) fn short(id: &'static str) -> &'static str {
    id.strip_prefix("io.choria.fisk-ai.v1.").unwrap_or(id)
}

/// The `protocol` of a message object, which must be one of `ids`; `expected` says what those are, in
/// words, for the refusal.
pub(crate) fn route(
    o: &Obj<'_>,
    ids: &[&'static str],
    expected: &'static str,
) -> Result<&'static str, WireError> {
    let found = o.req_str("protocol", Text::ANY)?;
    ids.iter()
        .copied()
        .find(|id| *id == found)
        .ok_or_else(|| WireError::UnexpectedProtocol {
            found: found.to_string(),
            expected,
        })
}

/// A message as JSON bytes: `protocol` first, then the header fields, then the body's own fields.
pub(crate) fn encode<B: Serialize>(protocol: &str, header: &Header, body: &B) -> Vec<u8> {
    #[derive(Serialize)]
    struct Message<'a, B> {
        protocol: &'a str,
        #[serde(flatten)]
        header: &'a Header,
        #[serde(flatten)]
        body: &'a B,
    }
    let message = Message {
        protocol,
        header,
        body,
    };
    // Every type encoded here is plain data with string keys, for which serde_json cannot fail.
    serde_json::to_vec(&message).expect("a v1 message serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_sit_in_the_namespace() {
        assert!(REQUEST_PROMPT.starts_with(PROTOCOL_NAMESPACE));
        assert_eq!(short(REQUEST_RESUME), "request.resume");
        assert_eq!(short(EVENT_TOOL_RESULT), "event.tool_result");
    }
}
