//! An agent's `report`: a full snapshot of its row, validated against the spec's fields and bounds. Pure.

use crate::field::Field;
use crate::wire::{fold_name, Refusal};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Longest `summary` (the row's text).
pub const MAX_SUMMARY_CHARS: usize = 500;
/// Longest `question`.
pub const MAX_QUESTION_CHARS: usize = 2000;
/// Most `choices`.
pub const MAX_CHOICES: usize = 20;
/// Longest choice.
pub const MAX_CHOICE_CHARS: usize = 200;
/// Longest `tool`.
pub const MAX_TOOL_CHARS: usize = 100;
/// Longest `error`.
pub const MAX_ERROR_CHARS: usize = 1000;
/// Longest `name`.
pub const MAX_NAME_CHARS: usize = 200;
/// Longest `model` or `thinking`: a model id or an effort level; the spec gives no bound, this keeps a row
/// small.
pub const MAX_MODEL_CHARS: usize = 200;

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// At work.
    Working,
    /// Waits for the user.
    Blocked,
    /// Finished.
    Done,
    /// Failed.
    Failed,
}

impl JobState {
    /// The state on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Working => "working",
            JobState::Blocked => "blocked",
            JobState::Done => "done",
            JobState::Failed => "failed",
        }
    }

    fn parse(s: &str) -> Option<JobState> {
        Some(match s {
            "working" => JobState::Working,
            "blocked" => JobState::Blocked,
            "done" => JobState::Done,
            "failed" => JobState::Failed,
            _ => return None,
        })
    }
}

/// One report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// `working`, `blocked`, `done`, `failed`.
    pub state: JobState,
    /// `busy`, `waiting`, `idle`.
    pub status: Option<String>,
    /// With `blocked`: `question`, `dialog`, `first-prompt`.
    pub waiting_for: Option<String>,
    /// The row's text.
    pub summary: Option<String>,
    /// What it asks.
    pub question: Option<String>,
    /// The answers it offers.
    pub choices: Vec<String>,
    /// The tool running.
    pub tool: Option<String>,
    /// What went wrong (with `failed`).
    pub error: Option<String>,
    /// The session's name (folded to one line).
    pub name: Option<String>,
    /// The model it runs.
    pub model: Option<String>,
    /// Its thinking level.
    pub thinking: Option<String>,
    /// `{tokens, window, percent}` (the `context` capability).
    pub context: Option<Value>,
    /// Usage (the `usage` capability).
    pub usage: Option<Value>,
    /// It takes peer items.
    pub agent_items: bool,
}

impl Report {
    /// A report in `state` with nothing else said.
    pub fn new(state: JobState) -> Report {
        Report {
            state,
            status: None,
            waiting_for: None,
            summary: None,
            question: None,
            choices: Vec::new(),
            tool: None,
            error: None,
            name: None,
            model: None,
            thinking: None,
            context: None,
            usage: None,
            agent_items: false,
        }
    }
}

/// A report as read off the wire, before validation: every field takes any JSON, so that a wrong type is
/// refused by [`ReportFields::validate`] with the field's name whichever way the report was read (from the
/// line directly on the hot path, or from a JSON tree).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct ReportFields<'a> {
    #[serde(borrow)]
    state: Field<'a>,
    #[serde(borrow)]
    status: Field<'a>,
    #[serde(borrow)]
    waiting_for: Field<'a>,
    #[serde(borrow)]
    summary: Field<'a>,
    #[serde(borrow)]
    question: Field<'a>,
    #[serde(borrow)]
    choices: Field<'a>,
    #[serde(borrow)]
    tool: Field<'a>,
    #[serde(borrow)]
    error: Field<'a>,
    #[serde(borrow)]
    name: Field<'a>,
    #[serde(borrow)]
    model: Field<'a>,
    #[serde(borrow)]
    thinking: Field<'a>,
    #[serde(borrow)]
    context: Field<'a>,
    #[serde(borrow)]
    usage: Field<'a>,
    #[serde(borrow)]
    agent_items: Field<'a>,
}

fn text(key: &str, f: &Field<'_>, max: usize) -> Result<Option<String>, Refusal> {
    match f {
        Field::Null => Ok(None),
        Field::Str(s) if s.chars().count() <= max => Ok(Some(s.to_string())),
        Field::Str(_) => Err(Refusal::bad(format!(
            "report.{key} is longer than {max} characters"
        ))),
        _ => Err(Refusal::bad(format!("report.{key} is a string"))),
    }
}

fn one_of(key: &str, f: &Field<'_>, allowed: &[&str]) -> Result<Option<String>, Refusal> {
    match text(key, f, 64)? {
        None => Ok(None),
        Some(s) if allowed.contains(&s.as_str()) => Ok(Some(s)),
        Some(s) => Err(Refusal::bad(format!(
            "report.{key} {s:?} is not one of {allowed:?}"
        ))),
    }
}

fn object(key: &str, f: Field<'_>) -> Result<Option<Value>, Refusal> {
    match f {
        Field::Null => Ok(None),
        Field::Object(o) => Ok(Some(Value::Object(o))),
        _ => Err(Refusal::bad(format!("report.{key} is an object"))),
    }
}

impl ReportFields<'_> {
    /// Checks every field against the spec's kinds and bounds.
    pub(crate) fn validate(self) -> Result<Report, Refusal> {
        let state = match &self.state {
            Field::Str(s) => JobState::parse(s).ok_or_else(|| {
                Refusal::bad(format!(
                    "report.state {s:?} is not one of working, blocked, done, failed"
                ))
            })?,
            _ => return Err(Refusal::bad("report.state is required")),
        };
        let choices = match &self.choices {
            Field::Null => vec![],
            Field::Array(a) => {
                if a.len() > MAX_CHOICES {
                    return Err(Refusal::bad(format!(
                        "report.choices has {} entries; at most {MAX_CHOICES}",
                        a.len()
                    )));
                }
                a.iter()
                    .map(|c| match c {
                        Field::Str(s) if s.chars().count() <= MAX_CHOICE_CHARS => Ok(s.to_string()),
                        Field::Str(_) => Err(Refusal::bad(format!(
                            "a report choice is longer than {MAX_CHOICE_CHARS} characters"
                        ))),
                        _ => Err(Refusal::bad("report.choices are strings")),
                    })
                    .collect::<Result<_, _>>()?
            }
            _ => return Err(Refusal::bad("report.choices is an array")),
        };
        Ok(Report {
            state,
            status: one_of("status", &self.status, &["busy", "waiting", "idle"])?,
            waiting_for: one_of(
                "waitingFor",
                &self.waiting_for,
                &["question", "dialog", "first-prompt"],
            )?,
            summary: text("summary", &self.summary, MAX_SUMMARY_CHARS)?,
            question: text("question", &self.question, MAX_QUESTION_CHARS)?,
            choices,
            tool: text("tool", &self.tool, MAX_TOOL_CHARS)?,
            error: text("error", &self.error, MAX_ERROR_CHARS)?,
            name: text("name", &self.name, MAX_NAME_CHARS)?.map(|n| fold_name(&n)),
            model: text("model", &self.model, MAX_MODEL_CHARS)?,
            thinking: text("thinking", &self.thinking, MAX_MODEL_CHARS)?,
            context: object("context", self.context)?,
            usage: object("usage", self.usage)?,
            agent_items: self.agent_items == Field::Bool(true),
        })
    }
}

impl Report {
    /// Validates a report object.
    pub fn parse(v: &Value) -> Result<Report, Refusal> {
        if !v.is_object() {
            return Err(Refusal::bad("`report` is an object"));
        }
        ReportFields::deserialize(v)
            .map_err(|e| Refusal::bad(format!("report: {e}")))?
            .validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn a_full_report_parses_and_unknown_fields_are_ignored() {
        let r = Report::parse(&json!({
            "state": "blocked", "status": "waiting", "waitingFor": "question",
            "summary": "which one?", "question": "red or green?", "choices": ["red", "green"],
            "tool": null, "error": null, "name": "my\nagent", "model": "m1", "somethingNew": 1
        }))
        .unwrap();
        assert_eq!(r.state, JobState::Blocked);
        assert_eq!(r.choices, vec!["red", "green"]);
        assert_eq!(r.name.as_deref(), Some("my agent"));
        assert_eq!(r.waiting_for.as_deref(), Some("question"));
    }

    #[test]
    fn every_bound_and_enum_is_enforced_and_named() {
        let cases = [
            (json!({}), "state"),
            (json!({"state": "sleeping"}), "state"),
            (json!({"state": "working", "status": "napping"}), "status"),
            (
                json!({"state": "blocked", "waitingFor": "godot"}),
                "waitingFor",
            ),
            (
                json!({"state": "working", "summary": "x".repeat(501)}),
                "summary",
            ),
            (
                json!({"state": "working", "question": "x".repeat(2001)}),
                "question",
            ),
            (
                json!({"state": "working", "choices": vec!["a"; 21]}),
                "choices",
            ),
            (
                json!({"state": "working", "choices": ["x".repeat(201)]}),
                "choice",
            ),
            (json!({"state": "working", "tool": "x".repeat(101)}), "tool"),
            (
                json!({"state": "failed", "error": "x".repeat(1001)}),
                "error",
            ),
            (json!({"state": "working", "name": "x".repeat(201)}), "name"),
            (json!({"state": "working", "summary": 5}), "summary"),
            (json!({"state": "working", "context": 5}), "context"),
        ];
        for (v, field) in cases {
            let e = Report::parse(&v).unwrap_err();
            assert!(e.message.contains(field), "{v}: {}", e.message);
        }
        // At the bounds is fine (characters, not bytes).
        assert!(Report::parse(&json!({"state": "working", "summary": "é".repeat(500)})).is_ok());
    }

    proptest! {
        #[test]
        fn any_json_parses_or_refuses(s in ".{0,200}") {
            if let Ok(v) = serde_json::from_str::<Value>(&s) {
                let _ = Report::parse(&v);
            }
            let _ = Report::parse(&json!({"state": "working", "summary": s}));
        }
    }
}
