//! fisk-ai v1 for agentwire: the prompts channel, a NATS request/reply protocol (spec:
//! `shared/specs/fisk-ai-prompts-channel.md`, schemas: `shared/conformance/fisk-ai-v1/`).
//!
//! # A guide
//!
//! [`wire`] is the pure protocol layer: it does no I/O, reads no clock and draws no randomness.
//!
//! * **Inbound** messages are decoded and validated in one step, holding them to exactly what the
//!   v1 JSON Schemas accept: [`wire::decode_task`] (what arrives on `choria.fisk-ai.task.<identity>`),
//!   [`wire::decode_cancel`], [`wire::decode_elicit`] and [`wire::decode_discovery`]. A refusal is a
//!   typed [`wire::WireError`] naming the JSON pointer that failed; a driver sends its `Display` as the
//!   `Nats-Service-Error` text with code [`wire::nats::STATUS_INVALID`].
//! * **Outbound** messages are a [`wire::Header`] (built with [`wire::Header::reply_to`] from the request
//!   it answers) plus a [`wire::Reply`], turned into bytes by [`wire::encode_reply`].
//! * Message ids are [`wire::Ksuid`]s; the caller supplies the time and the random payload, so tests are
//!   deterministic.
//!
//! ```
//! use agentwire_fisk::wire::{self, Ack, Header, Identity, Ksuid, Reply, TaskRequest};
//! use std::time::{Duration, SystemTime};
//!
//! let request = br#"{"protocol":"io.choria.fisk-ai.v1.request.prompt","id":"m1","request":"docs1",
//!   "conversation":"docs1","sequence":0,"time":"2026-08-16T11:00:00Z","sender":{"name":"peer1"},
//!   "prompt":"how many streams are there"}"#;
//! let TaskRequest::Prompt(prompt) = wire::decode_task(request)? else { unreachable!() };
//!
//! let me = Identity::new("nats-worker")?;
//! let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_786_878_250);
//! let header = Header::reply_to(&prompt.header, me, 1, Ksuid::new(now, [7; 16]), now);
//! let bytes = wire::encode_reply(&header, &Reply::Ack(Ack::accepted()));
//! assert!(std::str::from_utf8(&bytes)?.starts_with(r#"{"protocol":"io.choria.fisk-ai.v1.ack","#));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

pub mod client;
pub mod connection;
pub mod context;
pub mod conversation;
pub mod mapping;
pub mod settings;
pub mod stream;
pub mod wire;
pub mod worker;
