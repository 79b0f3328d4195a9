//! How an engine turn shows on a hosted job's row, and how a reply answers a question. Pure: the reports
//! it builds go out through the agent client, and the time it throttles by is passed in.
//!
//! | turn                  | report                                                           |
//! | --------------------- | ---------------------------------------------------------------- |
//! | accepted              | `working`, status `busy` (a queued turn says so in its summary)   |
//! | status, text          | `working` with the status text or the answer so far's last line  |
//! | tool call / result    | `working` with `tool` set while it runs                          |
//! | question              | `blocked`, waiting for `question`, with the options as `choices` |
//! | result                | `done`, the answer as `summary`, `usage`                         |
//! | failure               | `failed`, `error` `"<code>: <message>"`                          |

use agentwire_core::{Answer, Outcome, Question, QuestionKind, TurnEvent};
use serde_json::{json, Value};

/// The least time between two reports of streamed text: a row is for people, and a model streams many
/// deltas a second.
pub const TEXT_REPORT_INTERVAL_MS: u64 = 250;

/// A row's `summary` for the answer so far: its last non-empty line (the daemon keeps 500 characters).
fn last_line(text: &str) -> &str {
    text.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
}

/// The row of a running turn, as its events arrive.
#[derive(Debug, Default)]
pub struct TurnRow {
    /// The answer so far.
    text: String,
    /// The tool running, if any.
    tool: Option<String>,
    /// The last status text.
    status: Option<String>,
    /// When streamed text was last reported (ms).
    text_reported_at: Option<u64>,
    model: Option<String>,
}

impl TurnRow {
    /// A turn of `model` taken by the engine; `queued` when it waits behind the conversation's turn under
    /// way.
    pub fn accepted(model: &str, queued: bool) -> (TurnRow, Value) {
        let row = TurnRow {
            model: Some(model.to_string()).filter(|m| !m.is_empty()),
            status: Some(if queued { "queued" } else { "working" }.into()),
            ..TurnRow::default()
        };
        let report = row.working();
        (row, report)
    }

    fn working(&self) -> Value {
        let summary = match (&self.tool, self.text.is_empty()) {
            (Some(t), _) => format!("running {t}"),
            (None, false) => last_line(&self.text).to_string(),
            (None, true) => self.status.clone().unwrap_or_default(),
        };
        json!({
            "state": "working",
            "status": "busy",
            "summary": summary,
            "tool": self.tool,
            "model": self.model,
        })
    }

    /// The report an event calls for at `now_ms`, if any. Text is reported at most every
    /// [`TEXT_REPORT_INTERVAL_MS`]: what is held back shows in the next report, and the whole answer in
    /// the outcome's.
    pub fn event(&mut self, event: &TurnEvent, now_ms: u64) -> Option<Value> {
        match event {
            TurnEvent::Status { info, .. } => {
                self.status = info.clone().or(self.status.take());
            }
            TurnEvent::Text { text } => {
                self.text.push_str(text);
                let due = self
                    .text_reported_at
                    .is_none_or(|at| now_ms.saturating_sub(at) >= TEXT_REPORT_INTERVAL_MS);
                if !due {
                    return None;
                }
            }
            TurnEvent::ToolCall { name, .. } => self.tool = Some(name.clone()),
            TurnEvent::ToolResult { .. } => self.tool = None,
            TurnEvent::Warning { text, .. } => self.status = Some(text.clone()),
            _ => return None,
        }
        self.text_reported_at = Some(now_ms);
        Some(self.working())
    }
}

/// The report of a job whose agent waits for its first prompt.
pub fn first_prompt() -> Value {
    json!({ "state": "blocked", "status": "waiting", "waitingFor": "first-prompt" })
}

/// The report of a question put to the person.
pub fn question(q: &Question) -> Value {
    let choices: Vec<String> = q.kind.options().into_iter().map(|o| o.label).collect();
    json!({
        "state": "blocked",
        "status": "waiting",
        "waitingFor": "question",
        "summary": q.kind.text(),
        "question": q.kind.text(),
        "choices": choices,
        "tool": Some(q.tool.clone()).filter(|t| !t.is_empty()),
    })
}

/// The report of a reply that did not answer the open question: still blocked, saying what fits.
pub fn not_an_answer(q: &Question, reply: &str) -> Value {
    let mut report = question(q);
    let options: Vec<String> = q.kind.options().into_iter().map(|o| o.label).collect();
    let cut: String = reply.chars().take(60).collect();
    report["summary"] = json!(format!(
        "{cut:?} does not answer this; reply with {}",
        if options.is_empty() {
            "the text".to_string()
        } else {
            format!("one of: {}", options.join(", "))
        }
    ));
    report
}

/// The report of a turn's outcome.
pub fn outcome(o: &Outcome) -> Value {
    match o {
        Outcome::Result(r) => json!({
            "state": "done",
            "status": "idle",
            "summary": r.text,
            "usage": { "inputTokens": r.usage.input_tokens, "outputTokens": r.usage.output_tokens },
        }),
        Outcome::Failure(f) => json!({
            "state": "failed",
            "status": "idle",
            "summary": f.message,
            "error": format!("{}: {}", f.code.as_str(), f.message),
        }),
    }
}

/// The answer a reply's text gives to a question of `kind`, or `None` when it does not fit. An option is
/// named by its id or its label, in any case; several (comma-separated) where several may be chosen; free
/// text where the question takes it. An approval also takes `yes` (approve once) and `no` (deny), which
/// is what agentwire's roost-backed agent replies.
pub fn answer(kind: &QuestionKind, reply: &str) -> Option<Answer> {
    let reply = reply.trim();
    let options = kind.options();
    let named = |part: &str| {
        let part = part.trim();
        options
            .iter()
            .find(|o| o.id.eq_ignore_ascii_case(part) || o.label.eq_ignore_ascii_case(part))
            .map(|o| o.id.clone())
            .or_else(|| match (kind, part.to_ascii_lowercase().as_str()) {
                (QuestionKind::Approve { .. }, "yes") => Some("once".into()),
                (QuestionKind::Approve { .. }, "no") => Some("deny".into()),
                _ => None,
            })
    };
    match kind {
        QuestionKind::Input { .. } => kind.answer_from(&[], Some(reply)),
        QuestionKind::Select { multiple, .. } => {
            let parts: Vec<&str> = match multiple {
                true => reply.split(',').collect(),
                false => vec![reply],
            };
            match parts
                .iter()
                .map(|p| named(p))
                .collect::<Option<Vec<String>>>()
            {
                Some(ids) => kind.answer_from(&ids, None),
                None => kind.answer_from(&[], Some(reply)),
            }
        }
        _ => kind.answer_from(&[named(reply)?], None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire_core::{ApproveChoice, Failure, QuestionOption, TurnFailure, TurnResult, Usage};

    fn select(multiple: bool, freeform: bool) -> QuestionKind {
        QuestionKind::Select {
            question: "Which?".into(),
            options: vec![
                QuestionOption::new("red", "Red paint"),
                QuestionOption::new("blue", "Blue paint"),
            ],
            multiple,
            freeform,
        }
    }

    #[test]
    fn replies_answer_by_id_or_label_and_what_does_not_fit_is_none() {
        let approve = QuestionKind::Approve {
            command: "ls".into(),
            display: "ls".into(),
            tag: None,
        };
        assert_eq!(
            answer(&approve, " always approve "),
            Some(Answer::Approve {
                choice: ApproveChoice::Always
            })
        );
        assert_eq!(
            answer(&approve, "yes"),
            Some(Answer::Approve {
                choice: ApproveChoice::Once
            })
        );
        assert_eq!(
            answer(&approve, "NO"),
            Some(Answer::Approve {
                choice: ApproveChoice::No
            })
        );
        assert_eq!(answer(&approve, "perhaps"), None);
        let confirm = QuestionKind::Confirm {
            question: "Ship?".into(),
        };
        assert_eq!(
            answer(&confirm, "Yes"),
            Some(Answer::Confirm { confirmed: true })
        );
        assert_eq!(answer(&confirm, "ship it"), None);
        assert_eq!(
            answer(&select(false, false), "blue paint"),
            Some(Answer::Select {
                value: "blue".into()
            })
        );
        assert_eq!(answer(&select(false, false), "green"), None);
        assert_eq!(
            answer(&select(true, false), "red, Blue paint"),
            Some(Answer::Choices {
                choices: vec!["red".into(), "blue".into()],
                text: None
            })
        );
        assert_eq!(
            answer(&select(false, true), "green, please"),
            Some(Answer::Choices {
                choices: vec![],
                text: Some("green, please".into())
            })
        );
        let input = QuestionKind::Input {
            question: "Name?".into(),
            default: None,
        };
        assert_eq!(
            answer(&input, "Ada"),
            Some(Answer::Input {
                value: "Ada".into()
            })
        );
    }

    #[test]
    fn streamed_text_is_reported_at_most_every_interval_and_the_next_report_shows_it_all() {
        let (mut row, first) = TurnRow::accepted("m1", true);
        assert_eq!(first["summary"], "queued");
        assert_eq!(first["model"], "m1");
        let text = |t: &str| TurnEvent::Text { text: t.into() };
        let r = row.event(&text("hello "), 1_000).expect("the first is due");
        assert_eq!(r["summary"], "hello");
        assert!(row.event(&text("world\nsecond"), 1_100).is_none());
        let r = row.event(&text(" line"), 1_250).expect("due");
        assert_eq!(r["summary"], "second line");
        let call = TurnEvent::ToolCall {
            call_id: "c".into(),
            name: "calculator".into(),
            arguments: json!({}),
        };
        let r = row.event(&call, 2_001).unwrap();
        assert_eq!(r["tool"], "calculator");
        assert_eq!(r["summary"], "running calculator");
    }

    #[test]
    fn outcomes_become_done_or_failed_and_a_question_lists_its_options() {
        let done = outcome(&Outcome::Result(TurnResult {
            text: "42".into(),
            usage: Usage {
                input_tokens: 3,
                output_tokens: 1,
            },
            stop_reason: "stop".into(),
        }));
        assert_eq!(done["state"], "done");
        assert_eq!(done["summary"], "42");
        let failed = outcome(&Outcome::Failure(Failure::new(
            TurnFailure::Cancelled,
            "stopped",
        )));
        assert_eq!(failed["state"], "failed");
        assert!(failed["error"].as_str().unwrap().ends_with(": stopped"));
        let q = Question::new("select", "c1", select(false, false));
        let r = question(&q);
        assert_eq!(r["state"], "blocked");
        assert_eq!(r["waitingFor"], "question");
        assert_eq!(r["choices"], json!(["Red paint", "Blue paint"]));
        let r = not_an_answer(&q, "green");
        assert!(r["summary"]
            .as_str()
            .unwrap()
            .contains("Red paint, Blue paint"));
        for r in [done, failed, first_prompt()] {
            crate::proto::report::Report::parse(&r).expect("a report the daemon takes");
        }
    }
}
