//! The demo agent's questions: `ask` (select one), `choose` (select several), `confirm`, `input`, and
//! `approve` (the gated `shell` tool).
//!
//! Each calls a tool (telemetry: tool call, then a result once answered), puts its question through the
//! turn's asker, and replies with what it got. An answer carried by a resume is used without asking again.
//! Nobody answering parks the turn: an approval ends suspended, another question deferred; both carry the
//! call id in their checkpoint so the resumed turn asks about (or takes the answer to) the same call.

use super::{failure, parked, reply, DEMO_SHELL_TOOL};
use agentwire_core::{
    Answer, Asked, Outcome, Question, QuestionKind, QuestionOption, Refusal, TurnEvent, TurnFailure,
};
use agentwire_engine::{TurnContext, TurnInput};
use std::time::Instant;

/// The call id of this turn's question: the parked turn's own when resuming, else one named after the
/// request (unique per worker, so unique in a conversation).
fn call_id(input: &TurnInput) -> String {
    if let Some(id) = input
        .resume
        .as_ref()
        .and_then(|r| r.checkpoint.get("call_id"))
        .and_then(serde_json::Value::as_str)
    {
        return id.to_string();
    }
    let tail: String = input
        .request_id
        .as_str()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("call_{tail}")
}

/// Why a question word's text makes no question: the turn fails with this, as an invalid schema.
#[derive(Debug, thiserror::Error)]
enum QuestionError {
    /// The word came alone.
    #[error("{word} needs text after it")]
    NoText {
        /// The question word.
        word: String,
    },
    /// `ask` or `choose` without a question and at least two options.
    #[error("{word} takes a question and at least two options: {word} <q> | a | b")]
    TooFewOptions {
        /// The question word.
        word: String,
    },
}

fn question(word: &str, rest: &str) -> Result<(&'static str, QuestionKind), QuestionError> {
    if rest.is_empty() {
        return Err(QuestionError::NoText { word: word.into() });
    }
    Ok(match word {
        "approve" => (
            DEMO_SHELL_TOOL,
            QuestionKind::Approve {
                command: rest.split_whitespace().next().unwrap_or(rest).to_string(),
                display: rest.to_string(),
                tag: Some("ai:confirm".into()),
            },
        ),
        "confirm" => (
            "confirm",
            QuestionKind::Confirm {
                question: rest.to_string(),
            },
        ),
        "input" => (
            "input",
            QuestionKind::Input {
                question: rest.to_string(),
                default: None,
            },
        ),
        _ => {
            let mut parts = rest.split('|').map(str::trim);
            let q = parts.next().unwrap_or_default().to_string();
            let options: Vec<String> = parts.filter(|p| !p.is_empty()).map(String::from).collect();
            if q.is_empty() || options.len() < 2 {
                return Err(QuestionError::TooFewOptions { word: word.into() });
            }
            (
                "select",
                QuestionKind::Select {
                    question: q,
                    options: QuestionOption::labelled(options),
                    multiple: word == "choose",
                    freeform: false,
                },
            )
        }
    })
}

/// Runs one question word.
pub(super) async fn run(word: &str, rest: &str, input: &TurnInput, ctx: &TurnContext) -> Outcome {
    let (tool, kind) = match question(word, rest) {
        Ok(q) => q,
        Err(e) => return failure(input, Refusal::InvalidSchema, e.to_string()),
    };
    let call_id = call_id(input);
    let arguments = match &kind {
        QuestionKind::Approve { display, .. } => serde_json::json!({ "command": display }),
        _ => serde_json::json!({ "question": rest }),
    };
    let _ = ctx
        .events
        .send(TurnEvent::ToolCall {
            call_id: call_id.clone(),
            name: tool.into(),
            arguments,
        })
        .await;
    let started = Instant::now();
    let given = input
        .resume
        .as_ref()
        .and_then(|r| r.answers.iter().find(|a| a.call_id == call_id))
        .map(|a| a.answer.clone());
    let asked = match given {
        Some(a) => Asked::Answered(a),
        None => {
            ctx.asker
                .ask(Question::new(tool, call_id.clone(), kind.clone()))
                .await
        }
    };
    let is_approval = matches!(kind, QuestionKind::Approve { .. });
    let result = |output: &str, success: bool| TurnEvent::ToolResult {
        call_id: call_id.clone(),
        name: tool.into(),
        output: serde_json::json!({ "stdout": output }),
        success,
        duration_ms: started.elapsed().as_millis() as u64,
    };
    let text = match asked {
        Asked::Answered(answer) => match (answer, &kind) {
            (Answer::Approve { choice }, QuestionKind::Approve { display, .. }) => {
                if choice.approves() {
                    format!("ran {display}")
                } else {
                    "declined".to_string()
                }
            }
            (Answer::NoOperator, QuestionKind::Approve { .. }) => "declined".into(),
            (Answer::Input { value }, _) if value.is_empty() => "(empty)".into(),
            (a @ Answer::Approve { .. }, _) => {
                return failure(
                    input,
                    TurnFailure::Internal,
                    format!("an answer of the wrong kind reached {word}: {a:?}"),
                )
            }
            (other, _) if other.fits(&kind) => other.describe(&kind),
            (other, _) => {
                return failure(
                    input,
                    TurnFailure::Internal,
                    format!("an answer of the wrong kind reached {word}: {other:?}"),
                )
            }
        },
        Asked::Unavailable if is_approval => {
            let _ = ctx
                .events
                .send(result("no one can approve commands here", false))
                .await;
            return reply(input, "declined".into());
        }
        Asked::Unavailable => {
            return failure(
                input,
                TurnFailure::UnsupportedFeature,
                "this protocol cannot put questions to a person".into(),
            )
        }
        Asked::Unanswered if is_approval => {
            return parked(
                input,
                TurnFailure::Suspended,
                format!("nobody approved {rest:?} in time; the command did not run"),
                serde_json::json!({ "call_id": call_id }),
            )
        }
        Asked::Unanswered => {
            return parked(
                input,
                TurnFailure::Deferred,
                format!("waiting for an answer to call {call_id}"),
                serde_json::json!({ "call_id": call_id }),
            )
        }
        Asked::Cancelled => {
            return parked(
                input,
                TurnFailure::Suspended,
                format!("cancelled while waiting for an answer to call {call_id}"),
                serde_json::json!({ "call_id": call_id }),
            )
        }
    };
    let ok = !(is_approval && text == "declined");
    let _ = ctx.events.send(result(&text, ok)).await;
    let _ = ctx
        .events
        .send(TurnEvent::Text { text: text.clone() })
        .await;
    reply(input, text)
}
