//! Every error this front answers with, in OpenAI's shape (`{"error": {"message", "type", "param",
//! "code"}}`) and with its HTTP status: a request it cannot take, and each way a turn can fail, mapped in
//! this one place with exhaustive matches. Pure: the driver turns an [`ApiError`] into a response.
//!
//! Beside the status, an error says whether sending the same request again may succeed: the OpenAI SDKs
//! retry 408, 409, 429 and 5xx answers on their own unless the `x-should-retry` header says `false`, and a
//! turn that failed on its own terms (the agent's failure, a tool's) would only run again and fail again.

use crate::wire::{ErrorBody, ErrorDetail, RequestError};
use agentwire_core::{Failure, FailureCode, Refusal, TurnFailure};

/// What a caller is told when the agent put a question to the person: a question has no place in a chat
/// completion, so the turn fails with this.
pub const ASKED_MESSAGE: &str =
    "the agent asked a question, which the OpenAI chat API cannot carry; use A2A, MCP or the hub";

/// The `retry_after` of an answer that the daemon cannot take turns now (its journal cannot be written):
/// a write that failed is tried again within seconds.
pub const JOURNAL_RETRY_AFTER_SECS: u64 = 5;

/// The class of an error (OpenAI's `type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is at fault, or asks what cannot be served (`invalid_request_error`).
    InvalidRequest,
    /// Too many requests now; later may succeed (`rate_limit_error`).
    RateLimit,
    /// The turn was cancelled (by the daemon's operator: a caller's own cancel is its closed connection,
    /// which nobody reads) (`cancelled`).
    Cancelled,
    /// The daemon, the agent or its model failed (`server_error`).
    Server,
}

impl ErrorKind {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest => "invalid_request_error",
            ErrorKind::RateLimit => "rate_limit_error",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Server => "server_error",
        }
    }
}

/// An error answer: its status, its body, and its retry hints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: u16,
    /// Its class.
    pub kind: ErrorKind,
    /// For programs.
    pub code: String,
    /// For people.
    pub message: String,
    /// The parameter at fault.
    pub param: Option<String>,
    /// Seconds after which the same request may succeed (`Retry-After`).
    pub retry_after: Option<u64>,
    /// `Some(false)`: the same request would fail the same way, so an SDK should not send it again
    /// (`x-should-retry: false`). `None`: the SDK's own rule for the status.
    pub retry: Option<bool>,
}

impl ApiError {
    fn new(status: u16, kind: ErrorKind, code: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            kind,
            code: code.to_string(),
            message: message.into(),
            param: None,
            retry_after: None,
            retry: None,
        }
    }

    fn final_(mut self) -> ApiError {
        self.retry = Some(false);
        self
    }

    /// The body.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                message: self.message.clone(),
                kind: self.kind.as_str(),
                param: self.param.clone(),
                code: Some(self.code.clone()),
            },
        }
    }

    /// 401: no token, or one the server does not know.
    pub fn unauthorized(why: &str) -> ApiError {
        ApiError::new(401, ErrorKind::InvalidRequest, "invalid_api_key", why)
    }

    /// 404: no agent of that name that the caller may call (one it may not is not told apart).
    pub fn model_not_found(model: &str) -> ApiError {
        let mut e = ApiError::new(
            404,
            ErrorKind::InvalidRequest,
            "model_not_found",
            format!("the model {model:?} does not exist or you do not have access to it (GET /v1/models lists the agents you may call)"),
        );
        e.param = Some("model".into());
        e
    }

    /// 400: a body that is not a request this front takes.
    pub fn request(e: &RequestError) -> ApiError {
        let mut out = ApiError::new(400, ErrorKind::InvalidRequest, e.code(), e.to_string());
        out.param = e.param();
        out
    }

    /// 400: the turn's message is larger than the agent takes (its card's `max_prompt_bytes`).
    pub fn message_too_large(bytes: usize, max: usize) -> ApiError {
        let mut e = ApiError::new(
            400,
            ErrorKind::InvalidRequest,
            "context_length_exceeded",
            format!("the message to answer (the last user messages, with the system messages) is {bytes} bytes; this agent takes at most {max}"),
        );
        e.param = Some("messages".into());
        e
    }

    /// 415: a body that does not say it is JSON.
    pub fn not_json() -> ApiError {
        ApiError::new(
            415,
            ErrorKind::InvalidRequest,
            "unsupported_media_type",
            "the body is JSON: Content-Type: application/json",
        )
    }

    /// 405: a method the route does not take.
    pub fn method_not_allowed(allowed: &str) -> ApiError {
        ApiError::new(
            405,
            ErrorKind::InvalidRequest,
            "method_not_allowed",
            format!("this route takes {allowed}"),
        )
    }

    /// 503: the daemon is shutting down.
    pub fn draining() -> ApiError {
        ApiError::new(
            503,
            ErrorKind::Server,
            "draining",
            "the daemon is shutting down and takes no new turns; try again when it is back",
        )
    }

    /// 503: the journal cannot be written, so no turn is taken.
    pub fn journal_unavailable() -> ApiError {
        let mut e = ApiError::new(
            503,
            ErrorKind::Server,
            "journal_unavailable",
            "the daemon cannot take turns now (its journal cannot be written); try again shortly",
        );
        e.retry_after = Some(JOURNAL_RETRY_AFTER_SECS);
        e
    }

    /// 500: something that should not happen did.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(500, ErrorKind::Server, "internal", message)
    }

    /// The answer to a turn that ended in `failure` (or a request the engine refused with it); `asked`:
    /// the agent had put a question to the person in that turn.
    pub fn of_failure(failure: &Failure, asked: bool) -> ApiError {
        use ErrorKind::{Cancelled, InvalidRequest, RateLimit, Server};
        let code = failure.code.as_str();
        // (status, class, OpenAI's code where it has one for the same thing, whether a retry may help)
        let (status, kind, openai_code, may_retry): (u16, ErrorKind, Option<&str>, bool) =
            match &failure.code {
                FailureCode::Turn(t) => match t {
                    TurnFailure::Cancelled => (499, Cancelled, None, false),
                    TurnFailure::UnsupportedFeature => (400, InvalidRequest, None, false),
                    TurnFailure::EmptyResponse => (502, Server, None, false),
                    TurnFailure::ToolError => (500, Server, None, false),
                    TurnFailure::ModelUnavailable => (502, Server, None, true),
                    TurnFailure::Interrupted => (503, Server, None, true),
                    TurnFailure::AgentFailed => (500, Server, None, false),
                    TurnFailure::Internal => (500, Server, None, true),
                    TurnFailure::Crashed => (500, Server, None, false),
                    TurnFailure::Suspended => (500, Server, None, false),
                    TurnFailure::Deferred => (500, Server, None, false),
                    TurnFailure::ProviderBusy => (503, Server, None, true),
                    TurnFailure::ProviderRefused => (502, Server, None, false),
                    TurnFailure::ContextExceeded => {
                        (400, InvalidRequest, Some("context_length_exceeded"), false)
                    }
                    TurnFailure::OverBudget => (429, RateLimit, Some("insufficient_quota"), false),
                    TurnFailure::NotStarted => (503, Server, None, true),
                },
                FailureCode::Refused(r) => match r {
                    Refusal::RateLimited => (429, RateLimit, Some("rate_limit_exceeded"), true),
                    Refusal::Unauthorized | Refusal::Blocked => (403, InvalidRequest, None, false),
                    Refusal::UnsupportedModel => {
                        (404, InvalidRequest, Some("model_not_found"), false)
                    }
                    Refusal::UnsupportedSchemaVersion
                    | Refusal::UnsupportedEncryption
                    | Refusal::UnsupportedFeature
                    | Refusal::ParseError
                    | Refusal::InvalidSchema
                    | Refusal::UnknownCall
                    | Refusal::AlreadyAnswered
                    | Refusal::AnswerTooLarge => (400, InvalidRequest, None, false),
                    Refusal::SessionLimit | Refusal::Capacity => (429, RateLimit, None, true),
                    Refusal::Draining => (503, Server, None, true),
                    Refusal::DuplicateRequest
                    | Refusal::ConversationBusy
                    | Refusal::ConfigDrift => (409, InvalidRequest, None, false),
                    Refusal::UnknownConversation => (404, InvalidRequest, None, false),
                    Refusal::TurnNotTaken => (500, Server, None, false),
                    Refusal::BudgetExhausted => (429, RateLimit, Some("insufficient_quota"), false),
                },
                FailureCode::Unknown(_) => (500, Server, None, true),
            };
        let mut e = ApiError::new(status, kind, openai_code.unwrap_or(code), &failure.message);
        if asked && failure.code == TurnFailure::UnsupportedFeature {
            e.message = format!("{ASKED_MESSAGE} (the agent: {})", failure.message);
            e.code = "question_unsupported".into();
        }
        e.retry_after = failure.retry_after;
        if !may_retry {
            e = e.final_();
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire_core::{REFUSALS, TURN_FAILURES};

    #[test]
    fn every_failure_has_an_error_status_and_a_code() {
        let all = TURN_FAILURES
            .iter()
            .map(|t| FailureCode::from(*t))
            .chain(REFUSALS.iter().map(|r| FailureCode::from(*r)))
            .chain([FailureCode::Unknown("later".into())]);
        for code in all {
            let e = ApiError::of_failure(&Failure::new(code.clone(), "m"), false);
            assert!((400..600).contains(&e.status), "{code:?}: {}", e.status);
            assert!(!e.code.is_empty() && e.message == "m", "{code:?}");
            // The SDKs retry a 409 on their own: none of ours would go differently a second time.
            if e.status == 409 {
                assert_eq!(e.retry, Some(false), "{code:?}");
            }
        }
    }

    #[test]
    fn the_body_is_openais_shape_and_the_hints_follow_the_failure() {
        let busy = Failure::new(Refusal::Capacity, "full").retry_after(5);
        let e = ApiError::of_failure(&busy, false);
        assert_eq!((e.status, e.retry_after, e.retry), (429, Some(5), None));
        let v = serde_json::to_value(e.body()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"error": {"message": "full", "type": "rate_limit_error", "param": null, "code": "capacity"}})
        );
        for own in [
            TurnFailure::AgentFailed,
            TurnFailure::ToolError,
            TurnFailure::Crashed,
        ] {
            let failed = ApiError::of_failure(&Failure::new(own, "boom"), false);
            assert_eq!((failed.status, failed.retry), (500, Some(false)), "{own:?}");
        }
        let too_long =
            ApiError::of_failure(&Failure::new(TurnFailure::ContextExceeded, "x"), false);
        assert_eq!(too_long.code, "context_length_exceeded");
    }

    #[test]
    fn a_question_is_said_to_be_one() {
        let f = Failure::new(TurnFailure::UnsupportedFeature, "cannot ask here");
        let e = ApiError::of_failure(&f, true);
        assert_eq!((e.status, e.code.as_str()), (400, "question_unsupported"));
        assert!(e.message.starts_with(ASKED_MESSAGE), "{}", e.message);
        assert!(e.message.contains("cannot ask here"));
        let e = ApiError::of_failure(&f, false);
        assert_eq!(e.code, "unsupported_feature");
    }

    #[test]
    fn request_errors_name_their_parameter() {
        let e = ApiError::request(&RequestError::LastNotUser("assistant"));
        assert_eq!((e.status, e.param.as_deref()), (400, Some("messages")));
        let v = serde_json::to_value(ApiError::unauthorized("no token").body()).unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["code"], "invalid_api_key");
    }
}
