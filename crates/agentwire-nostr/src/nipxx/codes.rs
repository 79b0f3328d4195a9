//! NIP-XX error codes and their one mapping to and from the engine's canonical failure codes.

use agentwire_core::{FailureCode, Refusal, TurnFailure};
use std::fmt;

/// An `ai.error` code. Codes this version does not know survive as [`ErrorCode::Unknown`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[allow(missing_docs)]
pub enum ErrorCode {
    UnsupportedEncryption,
    UnsupportedModel,
    UnsupportedSchemaVersion,
    Cancelled,
    RateLimit,
    Unauthorized,
    BlockedSender,
    ModelUnavailable,
    SessionLimit,
    ParseError,
    EmptyResponse,
    ToolError,
    InvalidSchema,
    UnsupportedFeature,
    InvalidSequence,
    InternalError,
    /// A code outside the spec's list.
    Unknown(String),
}

const TABLE: [(ErrorCode, &str); 16] = [
    (ErrorCode::UnsupportedEncryption, "UNSUPPORTED_ENCRYPTION"),
    (ErrorCode::UnsupportedModel, "UNSUPPORTED_MODEL"),
    (
        ErrorCode::UnsupportedSchemaVersion,
        "UNSUPPORTED_SCHEMA_VERSION",
    ),
    (ErrorCode::Cancelled, "CANCELLED"),
    (ErrorCode::RateLimit, "RATE_LIMIT"),
    (ErrorCode::Unauthorized, "UNAUTHORIZED"),
    (ErrorCode::BlockedSender, "BLOCKED_SENDER"),
    (ErrorCode::ModelUnavailable, "MODEL_UNAVAILABLE"),
    (ErrorCode::SessionLimit, "SESSION_LIMIT"),
    (ErrorCode::ParseError, "PARSE_ERROR"),
    (ErrorCode::EmptyResponse, "EMPTY_RESPONSE"),
    (ErrorCode::ToolError, "TOOL_ERROR"),
    (ErrorCode::InvalidSchema, "INVALID_SCHEMA"),
    (ErrorCode::UnsupportedFeature, "UNSUPPORTED_FEATURE"),
    (ErrorCode::InvalidSequence, "INVALID_SEQUENCE"),
    (ErrorCode::InternalError, "INTERNAL_ERROR"),
];

impl ErrorCode {
    /// The code as it goes on the wire.
    pub fn as_str(&self) -> &str {
        if let ErrorCode::Unknown(s) = self {
            return s;
        }
        TABLE
            .iter()
            .find(|(c, _)| c == self)
            .map(|(_, s)| *s)
            .unwrap_or("INTERNAL_ERROR")
    }

    /// Parses a wire code; unknown ones are kept.
    pub fn parse(s: &str) -> ErrorCode {
        TABLE
            .iter()
            .find(|(_, w)| *w == s)
            .map(|(c, _)| c.clone())
            .unwrap_or_else(|| ErrorCode::Unknown(s.into()))
    }

    /// Whether the spec lists this code.
    pub fn is_known(&self) -> bool {
        !matches!(self, ErrorCode::Unknown(_))
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&FailureCode> for ErrorCode {
    fn from(c: &FailureCode) -> ErrorCode {
        match c {
            FailureCode::Turn(t) => ErrorCode::from(*t),
            FailureCode::Refused(r) => ErrorCode::from(*r),
            FailureCode::Unknown(s) => ErrorCode::Unknown(s.clone()),
        }
    }
}

impl From<TurnFailure> for ErrorCode {
    fn from(t: TurnFailure) -> ErrorCode {
        // Exhaustive: a new failure does not compile until it is mapped here.
        match t {
            TurnFailure::Cancelled => ErrorCode::Cancelled,
            TurnFailure::UnsupportedFeature => ErrorCode::UnsupportedFeature,
            TurnFailure::EmptyResponse => ErrorCode::EmptyResponse,
            TurnFailure::ToolError => ErrorCode::ToolError,
            TurnFailure::ModelUnavailable | TurnFailure::ProviderRefused => {
                ErrorCode::ModelUnavailable
            }
            TurnFailure::ProviderBusy => ErrorCode::RateLimit,
            // A NIP-XX run is never parked: a cancel is CANCELLED, and there is no way to answer later.
            TurnFailure::Suspended | TurnFailure::Deferred => ErrorCode::Cancelled,
            // A run cut off by a restart cannot continue its stream: the spec's nearest code, with
            // retry_after.
            TurnFailure::Interrupted
            | TurnFailure::AgentFailed
            | TurnFailure::Internal
            | TurnFailure::Crashed
            | TurnFailure::ContextExceeded => ErrorCode::InternalError,
            // A NIP-XX front gives a turn no token budget, so its turns never stop on one.
            TurnFailure::OverBudget => ErrorCode::InternalError,
            // Never ran because the agent is stopping: the spec's nearest code, with retry_after.
            TurnFailure::NotStarted => ErrorCode::InternalError,
        }
    }
}

impl From<Refusal> for ErrorCode {
    fn from(r: Refusal) -> ErrorCode {
        // Exhaustive: a new refusal does not compile until it is mapped here.
        match r {
            Refusal::RateLimited | Refusal::Capacity => ErrorCode::RateLimit,
            Refusal::Unauthorized => ErrorCode::Unauthorized,
            Refusal::Blocked => ErrorCode::BlockedSender,
            Refusal::UnsupportedModel => ErrorCode::UnsupportedModel,
            Refusal::UnsupportedSchemaVersion => ErrorCode::UnsupportedSchemaVersion,
            Refusal::UnsupportedEncryption => ErrorCode::UnsupportedEncryption,
            Refusal::UnsupportedFeature => ErrorCode::UnsupportedFeature,
            Refusal::ParseError => ErrorCode::ParseError,
            Refusal::InvalidSchema => ErrorCode::InvalidSchema,
            Refusal::SessionLimit | Refusal::ConversationBusy => ErrorCode::SessionLimit,
            // fisk-ai's own refusals; a NIP-XX front never makes them.
            Refusal::Draining
            | Refusal::DuplicateRequest
            | Refusal::UnknownConversation
            | Refusal::TurnNotTaken
            | Refusal::ConfigDrift
            | Refusal::BudgetExhausted
            | Refusal::UnknownCall
            | Refusal::AlreadyAnswered
            | Refusal::AnswerTooLarge => ErrorCode::InternalError,
        }
    }
}

/// The core code of a NIP-XX refusal (a prompt that broke a rule of the spec).
impl From<&ErrorCode> for FailureCode {
    fn from(c: &ErrorCode) -> FailureCode {
        match c {
            ErrorCode::Cancelled => TurnFailure::Cancelled.into(),
            ErrorCode::RateLimit => Refusal::RateLimited.into(),
            ErrorCode::Unauthorized => Refusal::Unauthorized.into(),
            ErrorCode::BlockedSender => Refusal::Blocked.into(),
            ErrorCode::UnsupportedModel => Refusal::UnsupportedModel.into(),
            ErrorCode::UnsupportedSchemaVersion => Refusal::UnsupportedSchemaVersion.into(),
            ErrorCode::UnsupportedEncryption => Refusal::UnsupportedEncryption.into(),
            ErrorCode::UnsupportedFeature => Refusal::UnsupportedFeature.into(),
            ErrorCode::ParseError => Refusal::ParseError.into(),
            ErrorCode::InvalidSchema | ErrorCode::InvalidSequence => Refusal::InvalidSchema.into(),
            ErrorCode::SessionLimit => Refusal::SessionLimit.into(),
            ErrorCode::EmptyResponse => TurnFailure::EmptyResponse.into(),
            ErrorCode::ToolError => TurnFailure::ToolError.into(),
            ErrorCode::ModelUnavailable => TurnFailure::ModelUnavailable.into(),
            ErrorCode::InternalError => TurnFailure::Internal.into(),
            ErrorCode::Unknown(s) => FailureCode::Unknown(s.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_code_and_keeps_unknown() {
        for (c, s) in TABLE.iter() {
            assert_eq!(ErrorCode::parse(s), *c);
            assert_eq!(c.as_str(), *s);
        }
        assert_eq!(ErrorCode::parse("NEW_CODE").as_str(), "NEW_CODE");
        assert!(!ErrorCode::parse("NEW_CODE").is_known());
    }

    #[test]
    fn every_core_code_maps_to_a_code_of_the_spec_and_refusals_come_back() {
        for t in agentwire_core::TURN_FAILURES {
            assert!(ErrorCode::from(&FailureCode::from(t)).is_known(), "{t:?}");
        }
        for r in agentwire_core::REFUSALS {
            let code = ErrorCode::from(&FailureCode::from(r));
            assert!(code.is_known(), "{r:?}");
        }
        // Every code of the spec has a core meaning, and the spec's refusals read back as refusals.
        for (c, _) in TABLE.iter() {
            let core = FailureCode::from(c);
            assert!(!matches!(core, FailureCode::Unknown(_)), "{c:?}");
            let back = ErrorCode::from(&core);
            if *c != ErrorCode::InvalidSequence {
                assert_eq!(&back, c, "{c:?} -> {core:?} -> {back:?}");
            }
        }
        let unknown = FailureCode::from(&ErrorCode::parse("NEW_CODE"));
        assert_eq!(ErrorCode::from(&unknown).as_str(), "NEW_CODE");
    }
}
