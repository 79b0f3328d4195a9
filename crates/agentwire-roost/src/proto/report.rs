//! An agent's `report`: a full snapshot of its row, validated against the spec's fields and bounds. Pure.

use crate::proto::field::Field;
use crate::proto::refusal::{fold_name, Refusal};
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
/// Most `prLinks`: the spec gives no bound; a row lists the pull requests of one session's work, and every
/// row goes to every subscribed hub on each change, so a handful is what a row can carry and show.
pub const MAX_PR_LINKS: usize = 20;
/// Longest PR link: a pull request's URL is well under 200 characters; this leaves room for long hosts and
/// paths while keeping twenty of them to a few KiB of a row.
pub const MAX_PR_LINK_CHARS: usize = 500;
/// Longest `remoteAt`: where the session can be reached from elsewhere (a URL, a host); the spec gives no
/// bound, this is the PR link's, for the same reason.
pub const MAX_REMOTE_AT_CHARS: usize = 500;

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
    /// The pull requests its work opened (`http` or `https` URLs; the `prLinks` capability field). Kept
    /// with the row, which the hub shows as links. Absent from a record written before it: none.
    #[serde(default)]
    pub pr_links: Vec<String>,
    /// Where the session can be reached from elsewhere (the `remoteAt` capability field: a URL or a host,
    /// one line), shown as text.
    #[serde(default)]
    pub remote_at: Option<String>,
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
            pr_links: Vec::new(),
            remote_at: None,
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
    #[serde(borrow)]
    pr_links: Field<'a>,
    #[serde(borrow)]
    remote_at: Field<'a>,
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

/// `prLinks`: null or an array of at most [`MAX_PR_LINKS`] `http`/`https` URLs of at most
/// [`MAX_PR_LINK_CHARS`] characters each, with no spaces or control characters. The scheme is checked
/// because the hub makes each a link: a `javascript:` one would run in the person's page.
fn pr_links(f: &Field<'_>) -> Result<Vec<String>, Refusal> {
    let links = match f {
        Field::Null => return Ok(Vec::new()),
        Field::Array(a) => a,
        _ => return Err(Refusal::bad("report.prLinks is an array of URLs")),
    };
    if links.len() > MAX_PR_LINKS {
        return Err(Refusal::bad(format!(
            "report.prLinks has {} entries; at most {MAX_PR_LINKS}",
            links.len()
        )));
    }
    links
        .iter()
        .map(|l| match l {
            Field::Str(s) if s.chars().count() > MAX_PR_LINK_CHARS => Err(Refusal::bad(format!(
                "a report.prLinks entry is longer than {MAX_PR_LINK_CHARS} characters"
            ))),
            Field::Str(s) if is_web_link(s) => Ok(s.to_string()),
            Field::Str(s) => Err(Refusal::bad(format!(
                "report.prLinks entry {:?} is not an http or https URL (one word, no spaces)",
                s.chars().take(80).collect::<String>()
            ))),
            _ => Err(Refusal::bad("report.prLinks entries are strings (URLs)")),
        })
        .collect()
}

/// Whether `s` is an `http://` or `https://` URL with a host, and no whitespace or control characters.
fn is_web_link(s: &str) -> bool {
    let lower = s.get(..8).unwrap_or(s).to_ascii_lowercase();
    let rest = if lower.starts_with("https://") {
        &s[8..]
    } else if lower.starts_with("http://") {
        &s[7..]
    } else {
        return false;
    };
    !rest.is_empty()
        && !rest.starts_with('/')
        && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// `remoteAt`: null or one line of at most [`MAX_REMOTE_AT_CHARS`] characters (it is shown in a row).
fn remote_at(f: &Field<'_>) -> Result<Option<String>, Refusal> {
    let at = text("remoteAt", f, MAX_REMOTE_AT_CHARS)?;
    match at {
        Some(s) if s.chars().any(char::is_control) => Err(Refusal::bad(
            "report.remoteAt is one line (no control characters)",
        )),
        Some(s) if s.trim().is_empty() => Ok(None),
        other => Ok(other),
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
            pr_links: pr_links(&self.pr_links)?,
            remote_at: remote_at(&self.remote_at)?,
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
            (
                json!({"state": "working", "prLinks": "https://x.test/pull/1"}),
                "prLinks",
            ),
            (json!({"state": "working", "prLinks": [1]}), "prLinks"),
            (
                json!({"state": "working", "prLinks": vec!["https://x.test/pull/1"; 21]}),
                "prLinks",
            ),
            (
                json!({"state": "working", "prLinks": [format!("https://x.test/{}", "p".repeat(490))]}),
                "prLinks",
            ),
            (
                json!({"state": "working", "prLinks": ["javascript:alert(1)"]}),
                "prLinks",
            ),
            (
                json!({"state": "working", "prLinks": ["https://"]}),
                "prLinks",
            ),
            (
                json!({"state": "working", "prLinks": ["https://x.test/a b"]}),
                "prLinks",
            ),
            (json!({"state": "working", "remoteAt": 5}), "remoteAt"),
            (
                json!({"state": "working", "remoteAt": "x".repeat(501)}),
                "remoteAt",
            ),
            (json!({"state": "working", "remoteAt": "a\nb"}), "remoteAt"),
        ];
        for (v, field) in cases {
            let e = Report::parse(&v).unwrap_err();
            assert!(e.message.contains(field), "{v}: {}", e.message);
        }
        // At the bounds is fine (characters, not bytes).
        assert!(Report::parse(&json!({"state": "working", "summary": "é".repeat(500)})).is_ok());
    }

    #[test]
    fn pr_links_and_remote_at_are_kept_and_survive_a_round_trip() {
        let r = Report::parse(&json!({
            "state": "working",
            "prLinks": ["https://github.com/o/r/pull/7", "HTTP://git.test/o/r/-/merge_requests/2"],
            "remoteAt": "https://pi.example/s/abc",
        }))
        .unwrap();
        assert_eq!(
            r.pr_links,
            [
                "https://github.com/o/r/pull/7",
                "HTTP://git.test/o/r/-/merge_requests/2"
            ]
        );
        assert_eq!(r.remote_at.as_deref(), Some("https://pi.example/s/abc"));
        // As the store keeps it (a job's record), and as a record from before the fields reads.
        let stored = serde_json::to_value(&r).unwrap();
        assert_eq!(serde_json::from_value::<Report>(stored).unwrap(), r);
        let mut old = serde_json::to_value(Report::new(JobState::Done)).unwrap();
        old.as_object_mut().unwrap().remove("prLinks");
        old.as_object_mut().unwrap().remove("remoteAt");
        let read: Report = serde_json::from_value(old).unwrap();
        assert_eq!((read.pr_links.len(), read.remote_at), (0, None));
        // At the bounds is fine.
        let most = vec![format!("https://x.test/{}", "p".repeat(485)); MAX_PR_LINKS];
        let r = Report::parse(
            &json!({"state": "working", "prLinks": most, "remoteAt": "é".repeat(500)}),
        )
        .unwrap();
        assert_eq!(r.pr_links.len(), MAX_PR_LINKS);
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
