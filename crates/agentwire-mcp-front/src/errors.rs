//! What a call answers besides the agent's answer, in one place: a failed turn as the tool's error result
//! (`isError: true`, its message a person and a model can read), the turns the engine did not take, and
//! the 401 of a request without a token. Pure.
//!
//! MCP has two kinds of errors: a JSON-RPC error for a request that cannot be routed (an unknown tool, a
//! malformed `tools/call`), which clients show opaquely, and a tool result with `isError: true` for
//! everything that happened in the tool, which the client's model reads and may act on. Everything about
//! a turn (its arguments, its refusal, its failure) is the second kind.

use agentwire_core::{Failure, FailureCode, Outcome, Refusal, TurnFailure};
use serde_json::{json, Value};

/// What a caller is told when the agent asked a question and the client cannot answer questions (it
/// did not declare the `elicitation` capability in `initialize`).
pub const NO_ELICITATION_MESSAGE: &str = "the agent asked a question, and this MCP client cannot answer questions: it did not declare the `elicitation` capability when it initialized";

/// The JSON-RPC error code of the 401's body: in the range JSON-RPC leaves to servers (-32000 to -32099).
pub const UNAUTHORIZED_CODE: i64 = -32001;

/// A tool call's result: its text, and whether it is an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolReply {
    /// The one text content.
    pub text: String,
    /// `isError`.
    pub is_error: bool,
}

impl ToolReply {
    /// An error result saying `text`.
    pub fn error(text: impl Into<String>) -> ToolReply {
        ToolReply {
            text: text.into(),
            is_error: true,
        }
    }

    /// The result of a turn that ended with `outcome`; `unanswerable`: the agent asked a question the
    /// client could not be asked.
    pub fn of_outcome(outcome: &Outcome, unanswerable: bool) -> ToolReply {
        match outcome {
            Outcome::Result(r) => ToolReply {
                text: r.text.clone(),
                is_error: false,
            },
            Outcome::Failure(f) => ToolReply::of_failure(f, unanswerable),
        }
    }

    /// The error result of a turn that failed (or was refused) with `failure`.
    pub fn of_failure(failure: &Failure, unanswerable: bool) -> ToolReply {
        if unanswerable && failure.code == TurnFailure::UnsupportedFeature {
            return ToolReply::error(format!(
                "{NO_ELICITATION_MESSAGE} (the agent: {})",
                failure.message
            ));
        }
        let what = match &failure.code {
            FailureCode::Turn(TurnFailure::Cancelled) => "the turn was cancelled",
            FailureCode::Turn(_) | FailureCode::Unknown(_) => "the turn failed",
            FailureCode::Refused(_) => "the agent did not take the call",
        };
        let mut text = format!("{what} ({}): {}", failure.code.as_str(), failure.message);
        if let Some(secs) = failure.retry_after {
            text.push_str(&format!(" (the same call may succeed after {secs} s)"));
        }
        ToolReply::error(text)
    }

    /// The error result of a call not taken because the daemon is stopping.
    pub fn draining() -> ToolReply {
        ToolReply::of_failure(
            &Failure::new(
                Refusal::Draining,
                "the daemon is stopping and takes no new turns",
            ),
            false,
        )
    }

    /// The error result of a call not taken because the journal cannot be written now.
    pub fn journal_unavailable() -> ToolReply {
        ToolReply::error(
            "the daemon cannot take turns now (its journal cannot be written); the same call may succeed in a few seconds",
        )
    }
}

/// The body of the 401: a JSON-RPC error object with no id, as an MCP client reads an HTTP error's body.
pub fn unauthorized_body(why: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": { "code": UNAUTHORIZED_CODE, "message": format!("unauthorized: {why}") },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire_core::{TurnResult, Usage, REFUSALS, TURN_FAILURES};

    #[test]
    fn an_answer_is_the_text_and_a_failure_an_error_naming_its_code() {
        let ok = Outcome::Result(TurnResult {
            text: "84".into(),
            usage: Usage::default(),
            stop_reason: "stop".into(),
        });
        assert_eq!(
            ToolReply::of_outcome(&ok, false),
            ToolReply {
                text: "84".into(),
                is_error: false
            }
        );
        let all = TURN_FAILURES
            .iter()
            .map(|t| FailureCode::from(*t))
            .chain(REFUSALS.iter().map(|r| FailureCode::from(*r)))
            .chain([FailureCode::Unknown("later".into())]);
        for code in all {
            let r =
                ToolReply::of_outcome(&Outcome::Failure(Failure::new(code.clone(), "m")), false);
            assert!(r.is_error, "{code:?}");
            assert!(
                r.text.contains(code.as_str()) && r.text.ends_with(": m"),
                "{}",
                r.text
            );
        }
        let busy = Failure::new(Refusal::Capacity, "full").retry_after(5);
        assert!(ToolReply::of_failure(&busy, false)
            .text
            .contains("after 5 s"));
        let cancelled = Failure::new(TurnFailure::Cancelled, "by request");
        assert!(ToolReply::of_failure(&cancelled, false)
            .text
            .starts_with("the turn was cancelled"));
    }

    #[test]
    fn a_question_the_client_cannot_answer_is_said_to_be_one() {
        let f = Failure::new(TurnFailure::UnsupportedFeature, "cannot ask here");
        let r = ToolReply::of_failure(&f, true);
        assert!(r.is_error);
        assert!(r.text.starts_with(NO_ELICITATION_MESSAGE), "{}", r.text);
        assert!(r.text.contains("cannot ask here"));
        assert!(!ToolReply::of_failure(&f, false)
            .text
            .contains("elicitation"));
    }

    #[test]
    fn the_401_body_is_a_json_rpc_error() {
        let b = unauthorized_body("no bearer token");
        assert_eq!(b["jsonrpc"], "2.0");
        assert_eq!(b["error"]["code"], UNAUTHORIZED_CODE);
        assert!(b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no bearer token"));
        assert!(b["id"].is_null());
    }
}
