//! What `agentwire session` reads of a conversation: its turns, what it is doing now (idle, running, parked
//! on a call and the question that call asked), as a table's cells or JSON.

use agentwire_core::{ConversationId, Outcome, TurnEvent};
use agentwire_fisk::conversation::parked;
use agentwire_fisk::wire;
use agentwire_store::{ConversationView, Journal, StoredTurn};
use serde_json::{json, Value};
use std::time::{Duration, UNIX_EPOCH};

/// The call a parked conversation waits on, with the question as the call's tool was given it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Waiting {
    /// `deferred`, `suspended` or `cancelled`: how the run parked.
    pub(super) code: String,
    pub(super) call_id: Option<String>,
    /// The tool that asked, and its arguments (the question), when the transcript holds the call.
    pub(super) tool: Option<String>,
    pub(super) question: Option<Value>,
}

/// What a conversation is doing now.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum State {
    /// No turn of it (only its state is journaled).
    Empty,
    /// Its last turn ended: it takes a turn.
    Idle,
    /// A turn of it has no outcome yet, and may be running (its request id).
    Running(String),
    /// A turn of it has no outcome, and no daemon serves the journal: the next `serve` ends it.
    Interrupted(String),
    /// Its last run parked, waiting on a call or a resume.
    Parked(Waiting),
}

impl State {
    pub(super) fn of(view: &ConversationView, live: bool) -> State {
        let Some(last) = view.turns.last() else {
            return State::Empty;
        };
        let turn = &last.turn;
        let Some(outcome) = &turn.outcome else {
            let id = turn.request_id.to_string();
            return match live {
                true => State::Running(id),
                false => State::Interrupted(id),
            };
        };
        let Some(p) = parked(Some(outcome)) else {
            return State::Idle;
        };
        let call = last.transcript.iter().flatten().find_map(|e| match e {
            TurnEvent::ToolCall {
                call_id,
                name,
                arguments,
            } if Some(call_id) == p.call_id.as_ref() => Some((name.clone(), arguments.clone())),
            _ => None,
        });
        State::Parked(Waiting {
            code: p.code.as_str().to_string(),
            call_id: p.call_id,
            tool: call.as_ref().map(|c| c.0.clone()),
            question: call.map(|c| c.1),
        })
    }

    pub(super) fn word(&self) -> String {
        match self {
            State::Empty => "empty".into(),
            State::Idle => "idle".into(),
            State::Running(_) => "running".into(),
            State::Interrupted(_) => "interrupted".into(),
            State::Parked(w) => w.code.clone(),
        }
    }

    /// The state for a table: the word and what it waits on.
    pub(super) fn line(&self) -> String {
        match self {
            State::Parked(Waiting {
                code,
                call_id: Some(call),
                ..
            }) => format!("{code} (call {call})"),
            other => other.word(),
        }
    }

    pub(super) fn json(&self) -> Value {
        let mut v = json!({ "state": self.word() });
        match self {
            State::Running(id) | State::Interrupted(id) => v["request"] = id.as_str().into(),
            State::Parked(w) => {
                v["waiting"] = json!({
                    "call_id": w.call_id, "tool": w.tool, "question": w.question,
                })
            }
            _ => {}
        }
        v
    }
}

/// One conversation read back.
pub(super) struct Read {
    pub(super) id: ConversationId,
    pub(super) view: ConversationView,
    pub(super) meta: Option<Value>,
    pub(super) state: State,
}

impl Read {
    /// Unix seconds of its newest turn's acceptance (0: none).
    pub(super) fn last_activity(&self) -> u64 {
        self.view
            .turns
            .iter()
            .map(|t| t.turn.accepted_at)
            .max()
            .unwrap_or(0)
    }

    pub(super) fn summary(&self) -> Value {
        let (usage, tool_calls) = self.view.usage();
        let mut v = json!({
            "conversation": self.id.as_str(),
            "turns": self.view.turns.len(),
            "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens},
            "tool_calls": tool_calls,
            "last_activity": time(self.last_activity()),
        });
        if let (Some(o), Value::Object(s)) = (v.as_object_mut(), self.state.json()) {
            o.extend(s);
        }
        v
    }
}

pub(super) async fn read(j: &dyn Journal, id: ConversationId, live: bool) -> Result<Read, String> {
    let view = j
        .conversation(id.clone(), true)
        .await
        .map_err(|e| format!("cannot read conversation {id}: {e}"))?;
    let meta = j
        .conversation_meta(id.clone())
        .await
        .map_err(|e| format!("cannot read conversation {id}: {e}"))?;
    let state = State::of(&view, live);
    Ok(Read {
        id,
        view,
        meta,
        state,
    })
}

/// Unix seconds as RFC 3339 (UTC), to the second (the journal keeps no finer time).
pub(super) fn time(secs: u64) -> String {
    let t = wire::format_time(UNIX_EPOCH + Duration::from_secs(secs));
    match t.split_once('.') {
        Some((whole, _)) => format!("{whole}Z"),
        None => t,
    }
}

/// One turn for `show`: its prompt's first line (or the call it answered), and its outcome.
pub(super) fn turn_json(t: &StoredTurn) -> Value {
    let answered: Vec<&str> = t
        .input
        .resume
        .iter()
        .flat_map(|r| r.answers.iter().map(|a| a.call_id.as_str()))
        .collect();
    let prompt = match (answered.first(), &t.input.resume) {
        (Some(call), _) => format!("(answer to call {call})"),
        (None, Some(_)) => "(resumed)".to_string(),
        (None, None) => t.input.message.lines().next().unwrap_or("").to_string(),
    };
    let usage = t.usage();
    let outcome = match &t.outcome {
        None => "(no outcome yet)".to_string(),
        Some(Outcome::Result(r)) => format!("result: {}", r.text.lines().next().unwrap_or("")),
        Some(Outcome::Failure(f)) => format!("{}: {}", f.code.as_str(), f.message),
    };
    json!({
        "request": t.request_id.as_str(),
        "accepted_at": time(t.accepted_at),
        "prompt": prompt,
        "outcome": outcome,
        "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens},
        "tool_calls": t.tool_calls,
    })
}
