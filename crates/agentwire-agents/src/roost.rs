//! A roost job as the agent behind any protocol: a conversation's first turn dispatches a job of the
//! profile (the prompt is its task), later turns are replies to that job. The job's reports drive the
//! turn: `working` becomes status (summary, tool), `blocked` waiting for a question becomes a question to
//! the person where the protocol can ask (its answer is the next reply), and where it cannot (NIP-XX) the
//! turn's answer, so the conversation's next prompt is the reply; `done` ends the turn with the summary,
//! `failed` with its error.
//!
//! Which job serves a conversation is kept where the job lives: the job is dispatched with the
//! conversation id as its `conversation` label, in the job's own durable record in the roost store, and
//! each turn asks the daemon for it (`conversation {profile, conversation}`, answered from memory). So a
//! restart of the daemon between two turns reaches the same job, the mapping goes with the job when it is
//! removed, and there is no second copy here to drift from it. A job that can take no more turns
//! ([`takes_turns`]: stopped, ended without an answer, failed, removed) is left behind, and the
//! conversation's next turn dispatches a new one, which is found from then on.

use agentwire_core::{
    Answer, Asked, ConversationId, Failure, FailureCode, Outcome, Question, QuestionKind,
    QuestionOption, StatusState, TurnEvent, TurnFailure, TurnResult, Usage,
};
use agentwire_engine::{Agent, AgentCard, TurnContext, TurnInput};
use agentwire_roost::client::{ClientError, Controller};
use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

/// How long a turn waits for its job to finish: long-running agents are the point of roost, so this is
/// generous; a job that goes quiet for longer ends the turn in failure rather than holding it for ever.
pub const ROOST_TURN_TIMEOUT: Duration = Duration::from_secs(3600);
/// Largest prompt passed to a job (a reply's own bound).
const MAX_PROMPT_BYTES: usize = 1024 * 1024;

/// Serves turns with jobs of one roost profile.
pub struct RoostJobAgent {
    socket: PathBuf,
    profile: String,
}

impl RoostJobAgent {
    /// An agent running `profile` on the supervisor at `socket`.
    pub fn new(socket: PathBuf, profile: impl Into<String>) -> Self {
        RoostJobAgent {
            socket,
            profile: profile.into(),
        }
    }
}

/// Whether the job whose row this is can take a conversation's next turn (as a reply). A stopped job (by
/// a person or a cancelled turn), one that ended without an answer, a failed one and a removed one cannot:
/// the turn goes to a new job. One that ended after its answer (`done`) can: a reply starts it again.
fn takes_turns(row: &Value) -> bool {
    row.is_object()
        && row["removed"] != true
        && !matches!(row["state"].as_str(), Some("stopped" | "exited" | "failed"))
}

/// The job serving `conversation`, if it can take its next turn.
async fn conversation_job(
    c: &mut Controller,
    profile: &str,
    conversation: &ConversationId,
) -> Result<Option<String>, ClientError> {
    let found = c
        .call(
            "conversation",
            json!({ "profile": profile, "conversation": conversation.as_str() }),
        )
        .await?;
    let row = &found["job"];
    Ok(row["id"]
        .as_str()
        .filter(|_| takes_turns(row))
        .map(String::from))
}

/// The stop reason of a turn that ended by asking the job's question as its answer.
const QUESTION_STOP_REASON: &str = "question";

/// A job's question as the answer of a turn where the protocol cannot ask: the question, and its choices
/// when it has them, so the person knows what the next prompt should say.
fn question_as_text(question: &str, choices: &[String]) -> String {
    match choices.is_empty() {
        true => question.to_string(),
        false => format!("{question}\n(reply with one of: {})", choices.join(", ")),
    }
}

fn fail(code: impl Into<FailureCode>, message: impl Into<String>) -> Outcome {
    Outcome::Failure(Failure::new(code, message))
}

/// An answer as the job's reply text.
fn answer_text(answer: &Answer) -> String {
    match answer {
        Answer::Select { value } | Answer::Input { value } => value.clone(),
        Answer::Choices { choices, text } => {
            let mut parts = choices.clone();
            parts.extend(text.clone());
            parts.join(", ")
        }
        Answer::Confirm { confirmed } => if *confirmed { "yes" } else { "no" }.into(),
        Answer::Approve { choice } => if choice.approves() { "yes" } else { "no" }.into(),
        Answer::NoOperator => "no operator is available".into(),
    }
}

/// A roost `requestId` from a turn's request id (1-64 of `A-Z a-z 0-9 _ . : -`).
fn request_id(id: &str) -> String {
    let cleaned: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_.:-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let start = cleaned.len().saturating_sub(64);
    cleaned[start..].to_string()
}

impl Agent for RoostJobAgent {
    fn card(&self) -> AgentCard {
        AgentCard {
            name: format!("roost:{}", self.profile),
            version: env!("CARGO_PKG_VERSION").into(),
            description: format!(
                "turns served by jobs of the roost profile {:?}",
                self.profile
            ),
            models: vec!["roost".into()],
            default_model: "roost".into(),
            tools: vec![],
            max_prompt_bytes: MAX_PROMPT_BYTES,
            max_context_tokens: 0,
        }
    }

    fn run(&self, input: TurnInput, ctx: TurnContext) -> BoxFuture<'static, Outcome> {
        let (socket, profile) = (self.socket.clone(), self.profile.clone());
        Box::pin(async move {
            match tokio::time::timeout(ROOST_TURN_TIMEOUT, turn(socket, profile, input, ctx)).await
            {
                Ok(Ok(o)) => o,
                Ok(Err(e)) => fail(
                    TurnFailure::ModelUnavailable,
                    format!("the roost supervisor: {e}"),
                ),
                Err(_) => fail(TurnFailure::AgentFailed, "the job did not finish in time"),
            }
        })
    }
}

async fn turn(
    socket: PathBuf,
    profile: String,
    input: TurnInput,
    ctx: TurnContext,
) -> Result<Outcome, ClientError> {
    if input.message.starts_with('/') {
        // A reply starting with `/` is a command to the job (`/stop`, `/model`); a remote peer's prompt is
        // not one.
        return Ok(fail(
            TurnFailure::UnsupportedFeature,
            "a prompt starting with / would be a command to the roost job; not taken",
        ));
    }
    let mut c = Controller::connect(&socket).await?;
    c.call("subscribe", json!({})).await?;
    let rid = request_id(input.request_id.as_str());
    // Only rows newer than this turn's reply (more reports than when it was saved) can end the turn: the
    // job's row still shows the previous turn's `done` until its agent reports again.
    // A turn resumed with the answer to the question the job asked (its call deferred): the answer is
    // that job's next reply. Resumed without one, it goes back to the same job, which asks again. The job
    // is named in the checkpoint, so this holds across a restart too.
    let resumed = input.resume.as_ref().and_then(|r| {
        let job = r.checkpoint.get("job")?.as_str()?.to_string();
        let answer = r.answers.first().map(|a| answer_text(&a.answer));
        Some((job, answer))
    });
    let known = match resumed {
        Some(_) => None,
        None => conversation_job(&mut c, &profile, &input.conversation_id).await?,
    };
    let (job, mut since) = match (resumed, known) {
        (Some((job, answer)), _) => {
            match answer {
                Some(text) => {
                    let r = c
                        .call(
                            "reply",
                            json!({ "id": job, "text": text, "requestId": rid }),
                        )
                        .await?;
                    (job, r["reports"].as_u64().unwrap_or(0))
                }
                // Nothing sent: the job's row as it stands (blocked on its question) counts.
                None => (job, 0),
            }
        }
        (None, Some(job)) => {
            let r = c
                .call(
                    "reply",
                    json!({ "id": job, "text": input.message, "requestId": rid }),
                )
                .await?;
            (job, r["reports"].as_u64().unwrap_or(0))
        }
        (None, None) => {
            let r = c
                .call(
                    "dispatch",
                    json!({ "profile": profile, "task": input.message, "requestId": rid,
                        "conversation": input.conversation_id.as_str() }),
                )
                .await?;
            let job = r["id"].as_str().unwrap_or_default().to_string();
            (job, r["reports"].as_u64().unwrap_or(0))
        }
    };
    let mut last_summary = None::<String>;
    let mut asked_for = None::<String>;
    let mut rows = c.call("rows", json!({})).await?["rows"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    loop {
        for row in rows.drain(..).filter(|r| r["id"] == job.as_str()) {
            if row["removed"] == true {
                return Ok(fail(TurnFailure::AgentFailed, "the job was removed"));
            }
            // Settled: this turn's replies are acked and the agent has reported since they were sent.
            let settled = row["pending"] == 0 && row["reports"].as_u64().unwrap_or(0) > since;
            let summary = row["summary"].as_str().map(String::from);
            match row["state"].as_str().unwrap_or("") {
                "working" | "starting" if summary.is_some() && summary != last_summary => {
                    let tool = row["tool"].as_str().map(String::from);
                    let _ = ctx
                        .events
                        .send(TurnEvent::Status {
                            state: if tool.is_some() {
                                StatusState::ToolUse
                            } else {
                                StatusState::Thinking
                            },
                            progress: None,
                            info: summary.clone(),
                            usage: None,
                        })
                        .await;
                    last_summary = summary;
                }
                "done" if settled => {
                    return Ok(Outcome::Result(TurnResult {
                        text: summary.unwrap_or_default(),
                        usage: Usage::default(),
                        stop_reason: "stop".into(),
                    }))
                }
                "failed" => {
                    return Ok(fail(
                        TurnFailure::AgentFailed,
                        row["error"]
                            .as_str()
                            .unwrap_or("the job failed")
                            .to_string(),
                    ));
                }
                "blocked" if settled && row["waitingFor"] == "question" => {
                    let question = row["question"].as_str().unwrap_or("").to_string();
                    if asked_for.as_deref() == Some(question.as_str()) {
                        continue;
                    }
                    asked_for = Some(question.clone());
                    let choices: Vec<String> = row["choices"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(|x| x.as_str().map(String::from))
                                .collect()
                        })
                        .unwrap_or_default();
                    let kind = if choices.is_empty() {
                        QuestionKind::Input {
                            question: question.clone(),
                            default: None,
                        }
                    } else {
                        // A roost choice is its own id: the reply names it by its text.
                        QuestionKind::Select {
                            question: question.clone(),
                            options: QuestionOption::labelled(choices.clone()),
                            multiple: false,
                            freeform: false,
                        }
                    };
                    let call_id = format!("{job}-{rid}");
                    let asked = ctx
                        .asker
                        .ask(Question::new("roost", call_id.clone(), kind))
                        .await;
                    let text = match asked {
                        Asked::Answered(answer) => answer_text(&answer),
                        Asked::Unavailable => {
                            // A protocol with no question of its own (NIP-XX): the question is the turn's
                            // answer, and the person's next prompt in the conversation is the job's next
                            // reply (the job stays blocked on it), as in a chat.
                            return Ok(Outcome::Result(TurnResult {
                                text: question_as_text(&question, &choices),
                                usage: Usage::default(),
                                stop_reason: QUESTION_STOP_REASON.into(),
                            }));
                        }
                        Asked::Unanswered => {
                            // The job keeps waiting; an answer sent later (a resume carrying it) becomes
                            // its next reply.
                            return Ok(Outcome::Failure(
                                Failure::new(
                                    TurnFailure::Deferred,
                                    format!("waiting for an answer to call {call_id}: {question}"),
                                )
                                .with_checkpoint(json!({ "call_id": call_id, "job": job })),
                            ));
                        }
                        Asked::Cancelled => return Ok(fail(TurnFailure::Cancelled, "cancelled")),
                    };
                    let r = c.call("reply", json!({ "id": job, "text": text })).await?;
                    since = r["reports"].as_u64().unwrap_or(since);
                }
                "stopped" | "exited" => {
                    return Ok(fail(
                        TurnFailure::AgentFailed,
                        "the job ended without an answer",
                    ));
                }
                _ => {}
            }
        }
        if *ctx.cancel.borrow() {
            // Under a parking protocol: the job stops here; the conversation's next turn starts a new one
            // (a stopped job takes no more turns).
            let _ = c.call("reply", json!({ "id": job, "text": "/stop" })).await;
            return Ok(fail(TurnFailure::Cancelled, "cancelled"));
        }
        let event = tokio::time::timeout(Duration::from_millis(500), c.next_event()).await;
        match event {
            Ok(Ok(e)) if e["event"] == "row" => rows.push(e["row"].clone()),
            Ok(Ok(_)) | Err(_) => {}
            Ok(Err(e)) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_takes_the_next_turn_unless_it_was_stopped_ended_unanswered_failed_or_removed() {
        for state in ["starting", "working", "blocked", "done"] {
            assert!(takes_turns(&json!({"id": "j", "state": state})), "{state}");
        }
        for state in ["stopped", "exited", "failed"] {
            assert!(!takes_turns(&json!({"id": "j", "state": state})), "{state}");
        }
        assert!(!takes_turns(&json!({"id": "j", "removed": true})));
        assert!(!takes_turns(&Value::Null), "no job");
    }

    #[test]
    fn request_ids_keep_their_last_64_allowed_characters() {
        assert_eq!(request_id("nipxx:ab cd"), "nipxx:ab_cd");
        let long = format!("x{}", "y".repeat(70));
        assert_eq!(request_id(&long), "y".repeat(64));
    }
}
