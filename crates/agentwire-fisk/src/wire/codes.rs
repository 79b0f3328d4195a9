//! The `code` of a terminal `error` and the `stop_reason` of a terminal message; unknown values survive.

use serde::{Serialize, Serializer};
use std::fmt;

/// An `error.code`: what a caller branches on. Codes this version does not know are kept as
/// [`ErrorCode::Unknown`], since a receiver that cannot act on one still shows the message beside it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// Admission refused the caller; the message says why.
    Rejected,
    /// Every worker slot is busy; retry, or ask another instance.
    Capacity,
    /// A run with this `request` id is already in flight here.
    DuplicateRequest,
    /// The worker is shutting down and never started this run.
    Draining,
    /// The prompt was taken and the worker stopped before running it.
    NotStarted,
    /// The run ran and failed; the message says how.
    Failed,
    /// A bug in this software; the detail stays in the worker's log.
    Crashed,
    /// The run was stopped before it finished, by the worker rather than by the caller.
    Canceled,
    /// The run stopped at a resumable point, which is what a caller's own cancel reaches.
    Suspended,
    /// A tool will answer later, so the run is parked.
    Deferred,
    /// The `conversation_token` names no conversation here.
    UnknownConversation,
    /// A turn of this conversation is running here; wait for its terminal message.
    ConversationBusy,
    /// The conversation could not take the turn, and the prompt did not run.
    TurnNotTaken,
    /// The agent's configuration changed under the stored conversation, so the resume was refused.
    ConfigDrift,
    /// The conversation has used its whole token allowance and is finished.
    BudgetExhausted,
    /// The model provider had no capacity or refused a rate-limited call; send the same work again later.
    ProviderBusy,
    /// The agent cannot use its model provider at all; an operator has to fix it.
    ProviderRefused,
    /// The conversation holds more than the model's context window takes.
    ContextExceeded,
    /// No such call is waiting for an answer.
    UnknownCall,
    /// The call already has an answer.
    AlreadyAnswered,
    /// The answer is over [`MAX_ANSWER_BYTES`](super::MAX_ANSWER_BYTES).
    AnswerTooLarge,
    /// A code outside the spec's table.
    Unknown(String),
}

const CODES: [(ErrorCode, &str); 21] = [
    (ErrorCode::Rejected, "rejected"),
    (ErrorCode::Capacity, "capacity"),
    (ErrorCode::DuplicateRequest, "duplicate_request"),
    (ErrorCode::Draining, "draining"),
    (ErrorCode::NotStarted, "not_started"),
    (ErrorCode::Failed, "failed"),
    (ErrorCode::Crashed, "crashed"),
    (ErrorCode::Canceled, "canceled"),
    (ErrorCode::Suspended, "suspended"),
    (ErrorCode::Deferred, "deferred"),
    (ErrorCode::UnknownConversation, "unknown_conversation"),
    (ErrorCode::ConversationBusy, "conversation_busy"),
    (ErrorCode::TurnNotTaken, "turn_not_taken"),
    (ErrorCode::ConfigDrift, "config_drift"),
    (ErrorCode::BudgetExhausted, "budget_exhausted"),
    (ErrorCode::ProviderBusy, "provider_busy"),
    (ErrorCode::ProviderRefused, "provider_refused"),
    (ErrorCode::ContextExceeded, "context_exceeded"),
    (ErrorCode::UnknownCall, "unknown_call"),
    (ErrorCode::AlreadyAnswered, "already_answered"),
    (ErrorCode::AnswerTooLarge, "answer_too_large"),
];

impl ErrorCode {
    /// The code as it goes on the wire.
    pub fn as_str(&self) -> &str {
        if let ErrorCode::Unknown(s) = self {
            return s;
        }
        CODES
            .iter()
            .find(|(c, _)| c == self)
            .map_or("failed", |(_, s)| s)
    }

    /// Reads a wire code; unknown ones are kept.
    pub fn parse(s: &str) -> ErrorCode {
        CODES
            .iter()
            .find(|(_, w)| *w == s)
            .map_or_else(|| ErrorCode::Unknown(s.to_string()), |(c, _)| c.clone())
    }

    /// Whether the spec's table lists this code.
    pub fn is_known(&self) -> bool {
        !matches!(self, ErrorCode::Unknown(_))
    }

    /// The `stop_reason` an error with this code carries (every `error` has one beside its code): how the
    /// run ended for the endings that name one, `error` for the rest.
    pub fn stop_reason(&self) -> StopReason {
        match self {
            ErrorCode::Suspended => StopReason::Suspended,
            ErrorCode::Canceled => StopReason::Canceled,
            ErrorCode::BudgetExhausted => StopReason::BudgetExhausted,
            _ => StopReason::Error,
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Why a task ended (`common.json#/$defs/stop_reason`). The schema accepts reasons outside the named set
/// (bounded: 1 to 64 characters of `^[a-z][a-z0-9_]*$`), kept as [`StopReason::Unknown`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StopReason {
    /// The model ended its turn: the normal ending.
    EndTurn,
    /// The model hit its output token limit.
    MaxTokens,
    /// The model refused.
    Refusal,
    /// The run was canceled.
    Canceled,
    /// The run failed.
    Error,
    /// The conversation's token budget ran out part way through the turn.
    BudgetExhausted,
    /// The run stopped at a resumable point.
    Suspended,
    /// The run reached its iteration limit.
    MaxIterations,
    /// A reason outside this version's set.
    Unknown(String),
}

const REASONS: [(StopReason, &str); 8] = [
    (StopReason::EndTurn, "end_turn"),
    (StopReason::MaxTokens, "max_tokens"),
    (StopReason::Refusal, "refusal"),
    (StopReason::Canceled, "canceled"),
    (StopReason::Error, "error"),
    (StopReason::BudgetExhausted, "budget_exhausted"),
    (StopReason::Suspended, "suspended"),
    (StopReason::MaxIterations, "max_iterations"),
];

impl StopReason {
    /// The reason as it goes on the wire.
    pub fn as_str(&self) -> &str {
        if let StopReason::Unknown(s) = self {
            return s;
        }
        REASONS
            .iter()
            .find(|(r, _)| r == self)
            .map_or("error", |(_, s)| s)
    }

    /// Reads a wire reason; unknown ones are kept.
    pub fn parse(s: &str) -> StopReason {
        REASONS
            .iter()
            .find(|(_, w)| *w == s)
            .map_or_else(|| StopReason::Unknown(s.to_string()), |(r, _)| r.clone())
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for StopReason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_and_unknown_ones_survive() {
        for (c, s) in CODES.iter() {
            assert_eq!(ErrorCode::parse(s), *c);
            assert_eq!(c.as_str(), *s);
            assert!(c.is_known());
        }
        let new = ErrorCode::parse("quota_moved");
        assert_eq!(new, ErrorCode::Unknown("quota_moved".into()));
        assert_eq!(new.to_string(), "quota_moved");
        assert!(!new.is_known());
    }

    #[test]
    fn every_reason_round_trips_and_unknown_ones_survive() {
        for (r, s) in REASONS.iter() {
            assert_eq!(StopReason::parse(s), *r);
            assert_eq!(r.to_string(), *s);
        }
        assert_eq!(StopReason::parse("paused").as_str(), "paused");
        assert_eq!(
            serde_json::to_string(&StopReason::EndTurn).unwrap(),
            "\"end_turn\""
        );
    }

    #[test]
    fn endings_carry_their_own_stop_reason() {
        assert_eq!(ErrorCode::Suspended.stop_reason(), StopReason::Suspended);
        assert_eq!(ErrorCode::Canceled.stop_reason(), StopReason::Canceled);
        assert_eq!(
            ErrorCode::BudgetExhausted.stop_reason(),
            StopReason::BudgetExhausted
        );
        assert_eq!(ErrorCode::Capacity.stop_reason(), StopReason::Error);
    }
}
