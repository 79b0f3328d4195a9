//! Remote agents a model agent may call as tools (`[agents.<name>] delegates`): each delegate is a tool of
//! its own name taking `{"task": "..."}`. A call runs one turn of the remote agent (a NIP-XX agent, a
//! fisk-ai worker, an A2A agent, reached as their client) and gives the model its answer.
//!
//! The call is announced first as the turn's [`TurnEvent::AgentCall`] (a fisk-ai caller sees
//! `event.agent_call`, naming the delegate and the conversation there). One conversation of the model
//! agent is one conversation of each delegate (`delegate:` and a SHA-256 of the two), so a delegate keeps the context of the calls before. A
//! question the delegate asks is asked on the model agent's own front, and the answer goes back; a cancel
//! of the turn cancels the delegate's turn.

use agentwire_core::{ConversationId, Outcome, RequestId, TurnEvent, TurnInput};
use agentwire_engine::{Agent, ToolSpec, TurnContext};
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::mpsc;

/// The largest task a model may hand a delegate, in bytes: a prompt fits one NIP-44 message with room
/// to spare, and a model that writes more is looping.
pub const MAX_TASK_BYTES: usize = 32 * 1024;
/// The most of a delegate's answer the model gets back, in characters: the rest would crowd the model's
/// context (the whole answer is in the delegate's own journal).
pub const MAX_ANSWER_CHARS: usize = 16 * 1024;
/// The events of a delegate's turn held while they are drained (they are not shown as the model agent's
/// own: its text is its answer).
const DELEGATE_EVENTS: usize = 64;

/// A remote agent the model may call.
#[derive(Clone)]
pub struct Delegate {
    /// Its name, the tool's name.
    pub name: String,
    /// The agent.
    pub agent: Arc<dyn Agent>,
}

/// A model agent's delegates.
#[derive(Clone, Default)]
pub struct Delegates(Vec<Delegate>);

impl Delegates {
    /// The delegates, in the order configured.
    pub fn new(delegates: Vec<Delegate>) -> Self {
        Delegates(delegates)
    }

    /// Whether `name` is a delegate's tool.
    pub fn has(&self, name: &str) -> bool {
        self.0.iter().any(|d| d.name == name)
    }

    /// A tool for each delegate: its card's description, a `task` to give it.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.0
            .iter()
            .map(|d| {
                let card = d.agent.card();
                ToolSpec {
                    name: d.name.clone(),
                    description: format!(
                        "Ask the agent {} ({}) to do a task; it answers in text. It remembers the tasks given before in this conversation.",
                        d.name, card.description
                    ),
                    input_schema: json!({
                        "type": "object",
                        "properties": {
                            "task": { "type": "string", "description": "what the agent is asked, in full" }
                        },
                        "required": ["task"],
                    }),
                    requires_approval: false,
                    output_schema: None,
                }
            })
            .collect()
    }

    /// Runs `call` (of the model agent's turn and conversation) of delegate `name` with the model's
    /// `arguments`, in that turn's context `ctx`: its answer for the model, or what went wrong.
    pub async fn call(
        &self,
        name: &str,
        call: Call<'_>,
        arguments: &str,
        ctx: &TurnContext,
    ) -> Result<Value, String> {
        let Some(d) = self.0.iter().find(|d| d.name == name) else {
            return Err(format!("no delegate named {name:?}"));
        };
        // A turn cancelled while the model's calls were still to run starts nothing more there.
        if *ctx.cancel.borrow() {
            return Err("the turn was cancelled".into());
        }
        let task = task_of(arguments)?;
        // Ids of a fixed length whatever the ids here: the conversation there is this conversation's with
        // this delegate, the turn there this turn's call (a model's call ids repeat across turns).
        let there = ConversationId::new(format!("delegate:{}", digest(&[call.conversation, name])))
            .map_err(|e| format!("the conversation there: {e}"))?;
        let request = RequestId::new(format!(
            "delegate:{}",
            digest(&[call.conversation, call.turn, name, call.id])
        ))
        .map_err(|e| format!("the turn there: {e}"))?;
        let call_id = call.id;
        let _ = ctx
            .events
            .send(TurnEvent::AgentCall {
                call_id: call_id.to_string(),
                name: name.to_string(),
                task: there.to_string(),
            })
            .await;
        let (events, mut drained) = mpsc::channel(DELEGATE_EVENTS);
        tokio::spawn(async move { while drained.recv().await.is_some() {} });
        let inner = TurnContext {
            events,
            cancel: ctx.cancel.clone(),
            asker: ctx.asker.clone(),
            token_budget: None,
            trace: ctx.trace.clone(),
        };
        let card = d.agent.card();
        let input = TurnInput::new(request, there, task, card.default_model);
        match d.agent.run(input, inner).await {
            Outcome::Result(r) => Ok(json!({ "answer": cut(&r.text) })),
            Outcome::Failure(f) => Err(format!(
                "the agent {name} failed ({}): {}",
                f.code.as_str(),
                f.message
            )),
        }
    }
}

/// Which call of which turn a delegate call is.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The model agent's conversation.
    pub conversation: &'a str,
    /// The model agent's turn (its request id).
    pub turn: &'a str,
    /// The model's id for the call.
    pub id: &'a str,
}

/// 32 hex digits of the SHA-256 of `parts`, each ended by a NUL (so that no two lists give one text).
fn digest(parts: &[&str]) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for p in parts {
        ctx.update(p.as_bytes());
        ctx.update(&[0]);
    }
    ctx.finish().as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The task in a delegate call's `arguments`: `{"task": "..."}`, not empty, at most [`MAX_TASK_BYTES`].
fn task_of(arguments: &str) -> Result<String, String> {
    let v: Value = serde_json::from_str(arguments)
        .map_err(|_| "a delegate takes {\"task\": \"...\"}".to_string())?;
    match v["task"].as_str() {
        Some(t) if !t.trim().is_empty() && t.len() <= MAX_TASK_BYTES => Ok(t.to_string()),
        Some(t) if t.len() > MAX_TASK_BYTES => Err(format!(
            "the task is {} bytes; a delegate takes at most {MAX_TASK_BYTES}",
            t.len()
        )),
        _ => Err("a delegate takes {\"task\": \"...\"} with the task in words".into()),
    }
}

/// `text` cut to [`MAX_ANSWER_CHARS`], saying so when it was.
fn cut(text: &str) -> String {
    match text.char_indices().nth(MAX_ANSWER_CHARS) {
        None => text.to_string(),
        Some((at, _)) => format!("{}… (cut: the answer was longer)", &text[..at]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_there_are_fixed_length_and_differ_per_turn_and_call() {
        let a = digest(&["c", "t1", "far", "call_1"]);
        assert_eq!(a.len(), 32);
        assert_ne!(
            a,
            digest(&["c", "t2", "far", "call_1"]),
            "a call id repeated next turn"
        );
        assert_ne!(digest(&["ab", "c"]), digest(&["a", "bc"]));
        assert_eq!(a, digest(&["c", "t1", "far", "call_1"]));
    }

    #[test]
    fn a_task_is_words_within_the_limit_and_an_answer_is_cut_to_its() {
        assert_eq!(task_of(r#"{"task":"sum 2 and 2"}"#).unwrap(), "sum 2 and 2");
        for bad in ["", "{}", r#"{"task":"  "}"#, r#"{"task":7}"#, "not json"] {
            assert!(task_of(bad).is_err(), "{bad}");
        }
        let long = json!({ "task": "x".repeat(MAX_TASK_BYTES + 1) }).to_string();
        assert!(task_of(&long).unwrap_err().contains("at most"));
        assert_eq!(cut("short"), "short");
        let cut_text = cut(&"é".repeat(MAX_ANSWER_CHARS + 5));
        assert!(cut_text.ends_with("(cut: the answer was longer)"));
        assert_eq!(
            cut_text.chars().filter(|c| *c == 'é').count(),
            MAX_ANSWER_CHARS
        );
    }
}
