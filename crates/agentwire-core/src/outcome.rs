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
    /// The agent panicked: a bug; the detail stays in the log.
    Crashed,
    /// Every slot for running turns is taken; retry, or ask another instance.
    Capacity,
    /// The daemon is shutting down and did not start this turn.
    Draining,
    /// A turn with this request id is already in flight.
    DuplicateRequest,
    /// A turn of this conversation is running, and this protocol refuses rather than queues.
    ConversationBusy,
    /// The conversation named by the request does not exist here.
    UnknownConversation,
    /// The conversation could not take the turn (it waits on a deferred call); the prompt did not run.
    TurnNotTaken,
    /// The agent's configuration changed under the conversation; the message says what changed.
    ConfigDrift,
    /// The conversation has spent its token allowance.
    BudgetExhausted,
    /// The turn stopped at a point where it can be resumed (a park-cancel, an unanswered approval).
    Suspended,
    /// The turn is parked on a question nobody answered in time; the message names the waiting calls.
    Deferred,
    /// An answer names no call that waits for one.
    UnknownCall,
    /// The call already has an answer.
    AlreadyAnswered,
    /// The answer is larger than the protocol takes.
    AnswerTooLarge,
    /// The model provider had no capacity or rate-limited the call; send the same work again later.
    ProviderBusy,
    /// The model provider refused the agent (credentials, model name): an operator has to fix it.
    ProviderRefused,
    /// The conversation is larger than the model's context window.
    ContextExceeded,
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
    /// Where a suspended or deferred turn stopped, in the agent's own terms, so a resume can continue it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<serde_json::Value>,
}

impl Failure {
    /// A failure with a code and message, no retry hint and no usage.
    pub fn new(code: FailureCode, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
            retry_after: None,
            usage: Usage::default(),
            checkpoint: None,
        }
    }

    /// The same failure with the usage spent.
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = usage;
        self
    }

    /// The same failure with a checkpoint to resume from.
    pub fn with_checkpoint(mut self, checkpoint: serde_json::Value) -> Self {
        self.checkpoint = Some(checkpoint);
        self
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
