//! NIP-XX error codes and their one mapping to and from the engine's canonical failure codes.

use agentwire_core::FailureCode;
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
            FailureCode::Cancelled => ErrorCode::Cancelled,
            FailureCode::RateLimited => ErrorCode::RateLimit,
            FailureCode::Unauthorized => ErrorCode::Unauthorized,
            FailureCode::Blocked => ErrorCode::BlockedSender,
            FailureCode::UnsupportedModel => ErrorCode::UnsupportedModel,
            FailureCode::UnsupportedSchemaVersion => ErrorCode::UnsupportedSchemaVersion,
            FailureCode::UnsupportedEncryption => ErrorCode::UnsupportedEncryption,
            FailureCode::UnsupportedFeature => ErrorCode::UnsupportedFeature,
            FailureCode::ParseError => ErrorCode::ParseError,
            FailureCode::InvalidSchema => ErrorCode::InvalidSchema,
            FailureCode::SessionLimit => ErrorCode::SessionLimit,
            FailureCode::EmptyResponse => ErrorCode::EmptyResponse,
            FailureCode::ToolError => ErrorCode::ToolError,
            FailureCode::ModelUnavailable => ErrorCode::ModelUnavailable,
            FailureCode::Capacity | FailureCode::ProviderBusy => ErrorCode::RateLimit,
            FailureCode::ConversationBusy => ErrorCode::SessionLimit,
            FailureCode::ProviderRefused => ErrorCode::ModelUnavailable,
            // A NIP-XX run is never parked: a cancel is CANCELLED, and there is no way to answer later.
            FailureCode::Suspended | FailureCode::Deferred => ErrorCode::Cancelled,
            FailureCode::Interrupted
            | FailureCode::AgentFailed
            | FailureCode::Internal
            | FailureCode::Crashed
            | FailureCode::Draining
            | FailureCode::DuplicateRequest
            | FailureCode::UnknownConversation
            | FailureCode::TurnNotTaken
            | FailureCode::ConfigDrift
            | FailureCode::BudgetExhausted
            | FailureCode::UnknownCall
            | FailureCode::AlreadyAnswered
            | FailureCode::AnswerTooLarge
            // A run cut off by a restart cannot continue its stream: the spec's nearest code, with retry_after.
            | FailureCode::ContextExceeded => {
                ErrorCode::InternalError
            }
            FailureCode::Unknown(s) => ErrorCode::Unknown(s.clone()),
            _ => ErrorCode::InternalError,
        }
    }
}

impl From<&ErrorCode> for FailureCode {
    fn from(c: &ErrorCode) -> FailureCode {
        match c {
            ErrorCode::Cancelled => FailureCode::Cancelled,
            ErrorCode::RateLimit => FailureCode::RateLimited,
            ErrorCode::Unauthorized => FailureCode::Unauthorized,
            ErrorCode::BlockedSender => FailureCode::Blocked,
            ErrorCode::UnsupportedModel => FailureCode::UnsupportedModel,
            ErrorCode::UnsupportedSchemaVersion => FailureCode::UnsupportedSchemaVersion,
            ErrorCode::UnsupportedEncryption => FailureCode::UnsupportedEncryption,
            ErrorCode::UnsupportedFeature => FailureCode::UnsupportedFeature,
            ErrorCode::ParseError => FailureCode::ParseError,
            ErrorCode::InvalidSchema | ErrorCode::InvalidSequence => FailureCode::InvalidSchema,
            ErrorCode::SessionLimit => FailureCode::SessionLimit,
            ErrorCode::EmptyResponse => FailureCode::EmptyResponse,
            ErrorCode::ToolError => FailureCode::ToolError,
            ErrorCode::ModelUnavailable => FailureCode::ModelUnavailable,
            ErrorCode::InternalError => FailureCode::Internal,
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
}
