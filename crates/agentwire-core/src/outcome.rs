//! How a turn ends: a result or a failure with a code from one canonical enum.
//!
//! Each protocol maps [`FailureCode`] to its own codes in exactly one place (for NIP-XX:
//! `agentwire_nostr::nipxx::codes`). Codes a peer sends that we do not know survive as
//! [`FailureCode::Unknown`].

use serde::{Deserialize, Serialize};

/// Tokens spent by a turn (or a whole conversation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens read.
    pub input_tokens: u64,
    /// Tokens written.
    pub output_tokens: u64,
}

impl Usage {
    /// The sum of two usages, saturating.
    pub fn plus(self, other: Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens.saturating_add(other.input_tokens),
            output_tokens: self.output_tokens.saturating_add(other.output_tokens),
        }
    }
}

/// A turn that succeeded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnResult {
    /// The complete answer text.
    pub text: String,
    /// Tokens spent.
    pub usage: Usage,
    /// Why the agent stopped (`stop`, `length`, ...).
    pub stop_reason: String,
}

/// The canonical failure codes of the engine.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailureCode {
    /// The turn was cancelled by its requester.
    Cancelled,
    /// The requester sent too much too fast; retry later.
    RateLimited,
    /// The requester is not on the allow list.
    Unauthorized,
    /// The requester is on the block list.
    Blocked,
    /// The requested model is not offered.
    UnsupportedModel,
    /// The requested tool schema version is not offered.
    UnsupportedSchemaVersion,
    /// The requested encryption scheme is not supported.
    UnsupportedEncryption,
    /// A requested feature or tool is not supported.
    UnsupportedFeature,
    /// The request payload could not be parsed.
    ParseError,
    /// The request parsed but broke the schema.
    InvalidSchema,
    /// The conversation has too many turns waiting.
    SessionLimit,
    /// The agent produced no answer text.
    EmptyResponse,
    /// A tool the agent ran failed.
    ToolError,
    /// The model or provider is unavailable.
    ModelUnavailable,
    /// The turn was cut off by a crash or restart of the daemon; it can be sent again.
    Interrupted,
    /// The agent failed on its own terms (e.g. the demo agent's `fail`).
    AgentFailed,
    /// Something unexpected went wrong inside agentwire.
    Internal,
    /// A code a peer sent that this version does not know.
    Unknown(String),
}

/// A turn that failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// What kind of failure.
    pub code: FailureCode,
    /// A message for people.
    pub message: String,
    /// Seconds after which a retry may succeed, for transient failures.
    pub retry_after: Option<u64>,
    /// Tokens spent before the failure.
    pub usage: Usage,
}

impl Failure {
    /// A failure with a code and message, no retry hint and no usage.
    pub fn new(code: FailureCode, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
            retry_after: None,
            usage: Usage::default(),
        }
    }

    /// The same failure with a retry hint.
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }
}

/// How a turn ended: exactly one per turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// The turn succeeded.
    Result(TurnResult),
    /// The turn failed.
    Failure(Failure),
}

impl Outcome {
    /// Whether this outcome is a cancellation.
    pub fn is_cancelled(&self) -> bool {
        matches!(self, Outcome::Failure(f) if f.code == FailureCode::Cancelled)
    }
}
