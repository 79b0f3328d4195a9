//! The header every v1 message carries (`common.json#/$defs/header`), and the identity in it.

use super::check::{is_id, Obj, Text, ID_PATTERN};
use super::error::WireError;
use super::ksuid::Ksuid;
use super::limits::MAX_REQUEST_CHARS;
use super::time::format_time;
use serde::Serialize;
use std::time::SystemTime;

/// An agent's identity: a logical `name` and, optionally, the running `instance` of it. Both match
/// `^[a-zA-Z0-9_-]+$` (a worker builds subjects from them), which the constructor checks.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Identity {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    instance: Option<String>,
}

impl Identity {
    /// The identity `name` with no instance; refused ([`WireError::Pattern`] at `/name`) unless it
    /// matches the id pattern.
    pub fn new(name: impl Into<String>) -> Result<Identity, WireError> {
        let name = name.into();
        if !is_id(&name) {
            return Err(WireError::Pattern {
                pointer: "/name".into(),
                pattern: ID_PATTERN,
            });
        }
        Ok(Identity {
            name,
            instance: None,
        })
    }

    /// This identity naming one running `instance`; refused (at `/instance`) unless it matches the id
    /// pattern.
    pub fn with_instance(mut self, instance: impl Into<String>) -> Result<Identity, WireError> {
        let instance = instance.into();
        if !is_id(&instance) {
            return Err(WireError::Pattern {
                pointer: "/instance".into(),
                pattern: ID_PATTERN,
            });
        }
        self.instance = Some(instance);
        Ok(self)
    }

    /// The logical name (what subjects are built from).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The running instance, when named.
    pub fn instance(&self) -> Option<&str> {
        self.instance.as_deref()
    }

    fn decode(o: &Obj<'_>) -> Result<Identity, WireError> {
        Ok(Identity {
            name: o.req_str("name", Text::ID)?.to_string(),
            instance: o.opt_str("instance", Text::ID)?.map(str::to_string),
        })
    }
}

/// The header of a message, all but its `protocol` (which the message's type stands for).
///
/// Decoded headers hold what the schema allows; a header built here for sending is valid when `request`
/// and `conversation` came from a decoded one (which [`Header::reply_to`] does).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Header {
    /// Names this message; fresh on every message, a resend included (`^[a-zA-Z0-9_-]+$`).
    pub id: String,
    /// Names the turn; every reply echoes it (`^[a-zA-Z0-9_-]+$`, at most 64 characters).
    pub request: String,
    /// The caller's tag across the turns of one conversation (`^[a-zA-Z0-9_-]+$`).
    pub conversation: String,
    /// The request that spawned this one, for multi-hop calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Per reply set, from 1 (the ack) with no gaps; requests, cancels and elicit replies carry 0.
    pub sequence: u64,
    /// When it was sent, RFC 3339; advisory only and kept as the text that arrived.
    pub time: String,
    /// Who sent it (unauthenticated).
    pub sender: Identity,
    /// Who it is for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recipient: Option<Identity>,
    /// When true, a receiver that does not understand the protocol id must fail closed.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub must_understand: bool,
    /// W3C trace context of the span that sent it; unauthenticated, never constrained.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

impl Header {
    /// A header sent by `sender` at `now` as message `id`, number `sequence` of the set for `request` in
    /// `conversation`.
    pub fn new(
        id: Ksuid,
        request: impl Into<String>,
        conversation: impl Into<String>,
        sequence: u64,
        now: SystemTime,
        sender: Identity,
    ) -> Header {
        Header {
            id: id.to_string(),
            request: request.into(),
            conversation: conversation.into(),
            parent: None,
            sequence,
            time: format_time(now),
            sender,
            recipient: None,
            must_understand: false,
            traceparent: None,
        }
    }

    /// The header of a message `sender` sends in answer to the message headed `to`: the same `request`
    /// and `conversation`, addressed to its sender.
    pub fn reply_to(
        to: &Header,
        sender: Identity,
        sequence: u64,
        id: Ksuid,
        now: SystemTime,
    ) -> Header {
        Header::new(id, &to.request, &to.conversation, sequence, now, sender)
            .with_recipient(to.sender.clone())
    }

    /// This header addressed to `recipient`.
    pub fn with_recipient(mut self, recipient: Identity) -> Header {
        self.recipient = Some(recipient);
        self
    }

    /// This header carrying the W3C trace context `traceparent`.
    pub fn with_traceparent(mut self, traceparent: impl Into<String>) -> Header {
        self.traceparent = Some(traceparent.into());
        self
    }

    /// Reads and validates the header fields of a message object.
    pub(crate) fn decode(o: &Obj<'_>) -> Result<Header, WireError> {
        Ok(Header {
            id: o.req_str("id", Text::ID)?.to_string(),
            request: o
                .req_str("request", Text::id_max(MAX_REQUEST_CHARS))?
                .to_string(),
            conversation: o.req_str("conversation", Text::ID)?.to_string(),
            parent: o.opt_str("parent", Text::ANY)?.map(str::to_string),
            sequence: o.req_uint("sequence", 0)?,
            time: o.req_str("time", Text::ANY)?.to_string(),
            sender: Identity::decode(&o.req_obj("sender")?)?,
            recipient: o
                .opt_obj("recipient")?
                .map(|r| Identity::decode(&r))
                .transpose()?,
            must_understand: o.opt_bool("must_understand")?.unwrap_or(false),
            traceparent: o.opt_str("traceparent", Text::ANY)?.map(str::to_string),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn identities_are_checked() {
        assert!(Identity::new("nats-worker").is_ok());
        assert_eq!(Identity::new("a.b").unwrap_err().pointer(), "/name");
        let e = Identity::new("w").unwrap().with_instance("").unwrap_err();
        assert_eq!(e.pointer(), "/instance");
        let i = Identity::new("w").unwrap().with_instance("i-1").unwrap();
        assert_eq!((i.name(), i.instance()), ("w", Some("i-1")));
    }

    #[test]
    fn a_reply_header_echoes_the_request_and_addresses_its_sender() {
        let now = UNIX_EPOCH + Duration::from_secs(1_786_879_450);
        let to = Header::new(
            Ksuid::from_parts(1, [0; 16]),
            "docs1",
            "conv",
            0,
            now,
            Identity::new("peer1").unwrap(),
        );
        let me = Identity::new("nats-worker").unwrap();
        let h = Header::reply_to(&to, me.clone(), 3, Ksuid::from_parts(2, [0; 16]), now);
        assert_eq!(
            (h.request.as_str(), h.conversation.as_str()),
            ("docs1", "conv")
        );
        assert_eq!(h.sender, me);
        assert_eq!(h.recipient, Some(to.sender.clone()));
        assert_eq!(h.sequence, 3);
        assert_eq!(h.time, "2026-08-16T11:24:10.000000Z");
        assert_eq!(h.id.len(), 27);
    }
}
