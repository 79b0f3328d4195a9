//! NIP-XX AI Agent Messages: kinds, error codes, payloads, tags and the compatibility text envelope.
//!
//! Everything here is pure: it parses, validates and builds, and does no I/O. Spec:
//! `shared/specs/nip-xx-ai-agent-messages.md`.

pub mod admission;
pub mod budget;
pub mod codes;
pub mod envelope;
pub mod kinds;
pub mod mapping;
pub mod message;
pub mod payload;
pub mod policy;
pub mod tags;

pub use codes::ErrorCode;
pub use message::Message;
pub use payload::{
    CancelPayload, DeltaPayload, ErrorPayload, InfoPayload, PromptPayload, ResponsePayload,
    StatusPayload, ToolCallPayload, Usage,
};
pub use tags::{RunTags, TagError};

/// A rule of the spec that an incoming message broke, with the code the spec names for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Violation {
    /// The spec's error code.
    pub code: ErrorCode,
    /// What was wrong, for people.
    pub message: String,
}

impl Violation {
    /// A violation with a code and a message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Violation {
            code,
            message: message.into(),
        }
    }
}
