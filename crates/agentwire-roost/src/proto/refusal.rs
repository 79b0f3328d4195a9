//! How the daemon says no: the protocol's error codes and a refusal (a code and a message for people), and
//! the one-line form of the names people give, which every refusal about a name quotes. Below [`wire`]
//! and [`report`](super::report), which both refuse. Pure.
//!
//! [`wire`]: super::wire

/// The error codes of the protocol.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// Malformed.
    BadRequest,
    /// Wrong token: stop speaking for this job.
    Unauthorized,
    /// No such job.
    NotFound,
    /// Too many replies waiting.
    Full,
    /// Try again shortly.
    Busy,
    /// Not for this kind of job or connection.
    Unsupported,
    /// Too many messages from this sender lately (M43: 30 a minute).
    RateLimited,
    /// A task that comes after tasks not yet done (M47).
    Blocked,
    /// A task another live session holds (M47).
    Conflict,
    /// The concierge's policy does not allow it (M45).
    Policy,
    /// A code this version does not know (round-trips).
    Unknown(String),
}

impl ErrorCode {
    /// The code on the wire.
    pub fn as_str(&self) -> &str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Full => "full",
            ErrorCode::Busy => "busy",
            ErrorCode::Unsupported => "unsupported",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::Blocked => "blocked",
            ErrorCode::Conflict => "conflict",
            ErrorCode::Policy => "policy",
            ErrorCode::Unknown(s) => s,
        }
    }

    /// The code of a wire string.
    pub fn parse(s: &str) -> ErrorCode {
        match s {
            "bad_request" => ErrorCode::BadRequest,
            "unauthorized" => ErrorCode::Unauthorized,
            "not_found" => ErrorCode::NotFound,
            "full" => ErrorCode::Full,
            "busy" => ErrorCode::Busy,
            "unsupported" => ErrorCode::Unsupported,
            "rate_limited" => ErrorCode::RateLimited,
            "blocked" => ErrorCode::Blocked,
            "conflict" => ErrorCode::Conflict,
            "policy" => ErrorCode::Policy,
            other => ErrorCode::Unknown(other.to_string()),
        }
    }
}

/// A refusal: a code and a message for people.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct Refusal {
    /// The code.
    pub code: ErrorCode,
    /// What was wrong.
    pub message: String,
}

impl Refusal {
    /// A refusal.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Refusal {
        Refusal {
            code,
            message: message.into(),
        }
    }

    /// A `bad_request`.
    pub fn bad(message: impl Into<String>) -> Refusal {
        Refusal::new(ErrorCode::BadRequest, message)
    }
}

/// A name folded to one line: line breaks, other control characters and bidi controls become spaces,
/// runs of spaces one, trimmed.
pub fn fold_name(name: &str) -> String {
    let spaced: String = name
        .chars()
        .map(|c| match agentwire_core::display::is_unprintable(c) {
            true => ' ',
            false => c,
        })
        .collect();
    spaced.split_whitespace().collect::<Vec<_>>().join(" ")
}
