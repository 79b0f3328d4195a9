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

/// How a turn ended badly once it was taken: the agent's, the model's or the engine's failure, or a stop
/// the requester or a restart caused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TurnFailure {
    /// The turn was cancelled by its requester.
    Cancelled,
    /// A feature the turn needed is not supported where it runs (a question over a protocol that cannot ask).
    UnsupportedFeature,
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
    /// The turn stopped at a point where it can be resumed (a park-cancel, an unanswered approval).
    Suspended,
    /// The turn is parked on a question nobody answered in time; the message names the waiting calls.
    Deferred,
    /// The model provider had no capacity or rate-limited the call; send the same work again later.
    ProviderBusy,
    /// The model provider refused the agent (credentials, model name): an operator has to fix it.
    ProviderRefused,
    /// The conversation is larger than the model's context window.
    ContextExceeded,
    /// The turn spent the token budget its front gave it (the engine's `TurnContext::token_budget`) and
    /// stopped before its next model call: under fisk-ai, the conversation's allowance ran out part way
    /// through the turn.
    OverBudget,
    /// The turn was taken but never ran: it waited for its conversation (or a slot) when the daemon began
    /// to stop. Nothing of it ran, so it can be sent again, here later or to another instance.
    NotStarted,
}

/// Why a request was refused before it ran: a protocol's admission said no.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
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
    /// A requested feature or tool is not supported (a plain prompt to a privacy-first agent).
    UnsupportedFeature,
    /// The request payload could not be parsed.
    ParseError,
    /// The request parsed but broke the schema.
    InvalidSchema,
    /// The conversation has too many turns waiting.
    SessionLimit,
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
    /// An answer names no call that waits for one.
    UnknownCall,
    /// The call already has an answer.
    AlreadyAnswered,
    /// The answer is larger than the protocol takes.
    AnswerTooLarge,
}

/// Every turn failure, for tests that walk each through every protocol's mapping.
pub const TURN_FAILURES: [TurnFailure; 16] = [
    TurnFailure::Cancelled,
    TurnFailure::UnsupportedFeature,
    TurnFailure::EmptyResponse,
    TurnFailure::ToolError,
    TurnFailure::ModelUnavailable,
    TurnFailure::Interrupted,
    TurnFailure::AgentFailed,
    TurnFailure::Internal,
    TurnFailure::Crashed,
    TurnFailure::Suspended,
    TurnFailure::Deferred,
    TurnFailure::ProviderBusy,
    TurnFailure::ProviderRefused,
    TurnFailure::ContextExceeded,
    TurnFailure::OverBudget,
    TurnFailure::NotStarted,
];

/// Every refusal, for tests that walk each through every protocol's mapping.
pub const REFUSALS: [Refusal; 21] = [
    Refusal::RateLimited,
    Refusal::Unauthorized,
    Refusal::Blocked,
    Refusal::UnsupportedModel,
    Refusal::UnsupportedSchemaVersion,
    Refusal::UnsupportedEncryption,
    Refusal::UnsupportedFeature,
    Refusal::ParseError,
    Refusal::InvalidSchema,
    Refusal::SessionLimit,
    Refusal::Capacity,
    Refusal::Draining,
    Refusal::DuplicateRequest,
    Refusal::ConversationBusy,
    Refusal::UnknownConversation,
    Refusal::TurnNotTaken,
    Refusal::ConfigDrift,
    Refusal::BudgetExhausted,
    Refusal::UnknownCall,
    Refusal::AlreadyAnswered,
    Refusal::AnswerTooLarge,
];

impl TurnFailure {
    /// The journaled name (snake_case), stable across versions.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnFailure::Cancelled => "cancelled",
            TurnFailure::UnsupportedFeature => "unsupported_feature",
            TurnFailure::EmptyResponse => "empty_response",
            TurnFailure::ToolError => "tool_error",
            TurnFailure::ModelUnavailable => "model_unavailable",
            TurnFailure::Interrupted => "interrupted",
            TurnFailure::AgentFailed => "agent_failed",
            TurnFailure::Internal => "internal",
            TurnFailure::Crashed => "crashed",
            TurnFailure::Suspended => "suspended",
            TurnFailure::Deferred => "deferred",
            TurnFailure::ProviderBusy => "provider_busy",
            TurnFailure::ProviderRefused => "provider_refused",
            TurnFailure::ContextExceeded => "context_exceeded",
            TurnFailure::OverBudget => "over_budget",
            TurnFailure::NotStarted => "not_started",
        }
    }
}

impl Refusal {
    /// The journaled name (snake_case), stable across versions.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::RateLimited => "rate_limited",
            Refusal::Unauthorized => "unauthorized",
            Refusal::Blocked => "blocked",
            Refusal::UnsupportedModel => "unsupported_model",
            Refusal::UnsupportedSchemaVersion => "unsupported_schema_version",
            Refusal::UnsupportedEncryption => "unsupported_encryption",
            // Journaled as a turn failure of the same name before the split; read back as that.
            Refusal::UnsupportedFeature => "unsupported_feature_refused",
            Refusal::ParseError => "parse_error",
            Refusal::InvalidSchema => "invalid_schema",
            Refusal::SessionLimit => "session_limit",
            Refusal::Capacity => "capacity",
            Refusal::Draining => "draining",
            Refusal::DuplicateRequest => "duplicate_request",
            Refusal::ConversationBusy => "conversation_busy",
            Refusal::UnknownConversation => "unknown_conversation",
            Refusal::TurnNotTaken => "turn_not_taken",
            Refusal::ConfigDrift => "config_drift",
            Refusal::BudgetExhausted => "budget_exhausted",
            Refusal::UnknownCall => "unknown_call",
            Refusal::AlreadyAnswered => "already_answered",
            Refusal::AnswerTooLarge => "answer_too_large",
        }
    }
}

/// The canonical failure code of an outcome: a turn's own failure, a refusal before it ran, or a code a
/// peer sent that this version does not know. Each protocol maps it to its codes in exactly one place, with
/// exhaustive matches (no catch-all arm), so a new code does not compile until every protocol maps it.
/// Journaled as its snake_case name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FailureCode {
    /// The turn ran (or was taken) and failed.
    Turn(TurnFailure),
    /// The request was refused before it ran.
    Refused(Refusal),
    /// A code a peer sent that this version does not know.
    Unknown(String),
}

impl FailureCode {
    /// The journaled name.
    pub fn as_str(&self) -> &str {
        match self {
            FailureCode::Turn(t) => t.as_str(),
            FailureCode::Refused(r) => r.as_str(),
            FailureCode::Unknown(s) => s,
        }
    }

    /// Reads a journaled name; unknown ones are kept.
    pub fn parse(s: &str) -> FailureCode {
        if let Some(t) = TURN_FAILURES.iter().find(|t| t.as_str() == s) {
            return FailureCode::Turn(*t);
        }
        if let Some(r) = REFUSALS.iter().find(|r| r.as_str() == s) {
            return FailureCode::Refused(*r);
        }
        FailureCode::Unknown(s.to_string())
    }
}

impl From<TurnFailure> for FailureCode {
    fn from(t: TurnFailure) -> FailureCode {
        FailureCode::Turn(t)
    }
}

impl From<Refusal> for FailureCode {
    fn from(r: Refusal) -> FailureCode {
        FailureCode::Refused(r)
    }
}

impl PartialEq<TurnFailure> for FailureCode {
    fn eq(&self, other: &TurnFailure) -> bool {
        *self == FailureCode::Turn(*other)
    }
}

impl PartialEq<Refusal> for FailureCode {
    fn eq(&self, other: &Refusal) -> bool {
        *self == FailureCode::Refused(*other)
    }
}

impl Serialize for FailureCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for FailureCode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<FailureCode, D::Error> {
        // Journals from before the split wrote `{"unknown": "..."}` for unknown codes.
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Wire {
            Name(String),
            Unknown { unknown: String },
        }
        Ok(match Wire::deserialize(d)? {
            Wire::Name(s) => FailureCode::parse(&s),
            Wire::Unknown { unknown } => FailureCode::Unknown(unknown),
        })
    }
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
    pub fn new(code: impl Into<FailureCode>, message: impl Into<String>) -> Self {
        Failure {
            code: code.into(),
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
        matches!(self, Outcome::Failure(f) if f.code == TurnFailure::Cancelled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_one_journaled_name_and_reads_back() {
        let mut names = std::collections::HashSet::new();
        let all = TURN_FAILURES
            .iter()
            .map(|t| FailureCode::from(*t))
            .chain(REFUSALS.iter().map(|r| FailureCode::from(*r)));
        for code in all {
            assert!(
                names.insert(code.as_str().to_string()),
                "{code:?} shares a name"
            );
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(serde_json::from_str::<FailureCode>(&json).unwrap(), code);
        }
        assert_eq!(names.len(), TURN_FAILURES.len() + REFUSALS.len());
    }

    #[test]
    fn journals_from_before_the_split_read_the_same() {
        let f: Failure = serde_json::from_str(
            r#"{"code":"suspended","message":"m","retry_after":null,"usage":{"input_tokens":1,"output_tokens":2}}"#,
        )
        .unwrap();
        assert_eq!(f.code, TurnFailure::Suspended);
        let c: FailureCode = serde_json::from_str(r#"{"unknown":"later_code"}"#).unwrap();
        assert_eq!(c, FailureCode::Unknown("later_code".into()));
        let c: FailureCode = serde_json::from_str(r#""capacity""#).unwrap();
        assert_eq!(c, Refusal::Capacity);
        assert_eq!(
            serde_json::to_string(&FailureCode::Unknown("x".into())).unwrap(),
            r#""x""#
        );
    }
}
