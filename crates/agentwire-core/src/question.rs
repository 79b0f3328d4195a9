//! Questions a running turn puts to a person, and their answers.
//!
//! A question is asked through the protocol that carried the turn (fisk-ai `elicit.request.*`, a task-card
//! room's tiny agent question card, a roost job's `blocked` report). Protocols that cannot ask (NIP-XX) answer
//! every question [`Asked::Unavailable`], so an approval-gated tool is refused there.
//!
//! The model is the richest of the protocols' (the tiny agent card's): options with ids and labels, a
//! single, multiple or text selection, optional free text beside the options, the people asked and those to
//! notify, a subject and an expiry. Each front maps it once to what its protocol can carry
//! ([`QuestionKind::options`] gives every kind's options, so an approval and a confirmation are option
//! questions too).

use serde::{Deserialize, Serialize};

/// One option of a question: a stable id (what an answer names) and the label a person reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuestionOption {
    /// What an answer names (the tiny agent card takes 1-64 characters).
    pub id: String,
    /// What a person reads (the card takes 1-200 characters).
    pub label: String,
}

impl QuestionOption {
    /// An option.
    pub fn new(id: impl Into<String>, label: impl Into<String>) -> Self {
        QuestionOption {
            id: id.into(),
            label: label.into(),
        }
    }

    /// Options whose ids are their labels (a protocol that names options only by their text).
    pub fn labelled(labels: impl IntoIterator<Item = String>) -> Vec<QuestionOption> {
        labels
            .into_iter()
            .map(|l| QuestionOption::new(l.clone(), l))
            .collect()
    }
}

/// How a question is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Selection {
    /// Exactly one option.
    Single,
    /// One or more distinct options.
    Multiple,
    /// Free text, no options.
    Text,
}

impl Selection {
    /// The tiny agent card's `selection` value.
    pub fn as_str(&self) -> &'static str {
        match self {
            Selection::Single => "single",
            Selection::Multiple => "multiple",
            Selection::Text => "text",
        }
    }
}

/// What a question is for, as the tiny agent card's `interaction` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Interaction {
    /// An ordinary question.
    Question,
    /// May a gated command run?
    Approval,
    /// Yes or no.
    Confirmation,
}

impl Interaction {
    /// The card's `interaction` value.
    pub fn as_str(&self) -> &'static str {
        match self {
            Interaction::Question => "question",
            Interaction::Approval => "approval",
            Interaction::Confirmation => "confirmation",
        }
    }
}

/// The option ids of an approval, in the order a card shows them.
pub const APPROVE_OPTIONS: [(&str, &str, ApproveChoice); 4] = [
    ("once", "Approve once", ApproveChoice::Once),
    (
        "session",
        "Approve for this session",
        ApproveChoice::Session,
    ),
    ("always", "Always approve", ApproveChoice::Always),
    ("deny", "Deny", ApproveChoice::No),
];

/// The option ids of a confirmation.
pub const CONFIRM_OPTIONS: [(&str, &str, bool); 2] = [("yes", "Yes", true), ("no", "No", false)];

/// What is asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum QuestionKind {
    /// May a gated command run?
    Approve {
        /// The command, short.
        command: String,
        /// The command as it will run, for display.
        display: String,
        /// What triggered the gate, when it can be named.
        tag: Option<String>,
    },
    /// Yes or no.
    Confirm {
        /// The question.
        question: String,
    },
    /// One or more of a list.
    Select {
        /// The question.
        question: String,
        /// The options, in order.
        options: Vec<QuestionOption>,
        /// More than one may be chosen.
        #[serde(default)]
        multiple: bool,
        /// Free text may be given beside (or instead of) the choice.
        #[serde(default)]
        freeform: bool,
    },
    /// A free text value.
    Input {
        /// The question.
        question: String,
        /// A pre-filled value.
        default: Option<String>,
    },
}

impl QuestionKind {
    /// The kind's name: `approve`, `confirm`, `select` or `input`.
    pub fn name(&self) -> &'static str {
        match self {
            QuestionKind::Approve { .. } => "approve",
            QuestionKind::Confirm { .. } => "confirm",
            QuestionKind::Select { .. } => "select",
            QuestionKind::Input { .. } => "input",
        }
    }

    /// What the question is for.
    pub fn interaction(&self) -> Interaction {
        match self {
            QuestionKind::Approve { .. } => Interaction::Approval,
            QuestionKind::Confirm { .. } => Interaction::Confirmation,
            QuestionKind::Select { .. } | QuestionKind::Input { .. } => Interaction::Question,
        }
    }

    /// How it is answered.
    pub fn selection(&self) -> Selection {
        match self {
            QuestionKind::Select { multiple: true, .. } => Selection::Multiple,
            QuestionKind::Input { .. } => Selection::Text,
            _ => Selection::Single,
        }
    }

    /// Whether free text may come beside the options.
    pub fn freeform(&self) -> bool {
        matches!(self, QuestionKind::Select { freeform: true, .. })
    }

    /// The options a person chooses from (an approval's and a confirmation's fixed ones included; none
    /// for input).
    pub fn options(&self) -> Vec<QuestionOption> {
        match self {
            QuestionKind::Approve { .. } => APPROVE_OPTIONS
                .iter()
                .map(|(id, label, _)| QuestionOption::new(*id, *label))
                .collect(),
            QuestionKind::Confirm { .. } => CONFIRM_OPTIONS
                .iter()
                .map(|(id, label, _)| QuestionOption::new(*id, *label))
                .collect(),
            QuestionKind::Select { options, .. } => options.clone(),
            QuestionKind::Input { .. } => Vec::new(),
        }
    }

    /// The text a person reads: the question, or for an approval the command that waits.
    pub fn text(&self) -> String {
        match self {
            QuestionKind::Approve { display, .. } => format!("May I run `{display}`?"),
            QuestionKind::Confirm { question }
            | QuestionKind::Select { question, .. }
            | QuestionKind::Input { question, .. } => question.clone(),
        }
    }

    /// The answer that chose `choices` (option ids) and/or gave `text`, or `None` when it does not fit
    /// this question (an unknown id, several ids for a single choice, text where none is taken).
    pub fn answer_from(&self, choices: &[String], text: Option<&str>) -> Option<Answer> {
        let answer = match self {
            QuestionKind::Approve { .. } => match (choices, text) {
                ([id], None) => Answer::Approve {
                    choice: APPROVE_OPTIONS.iter().find(|o| o.0 == id)?.2,
                },
                _ => return None,
            },
            QuestionKind::Confirm { .. } => match (choices, text) {
                ([id], None) => Answer::Confirm {
                    confirmed: CONFIRM_OPTIONS.iter().find(|o| o.0 == id)?.2,
                },
                _ => return None,
            },
            QuestionKind::Input { .. } => match (choices, text) {
                ([], Some(t)) => Answer::Input { value: t.into() },
                _ => return None,
            },
            QuestionKind::Select { .. } => match (choices, text) {
                ([id], None) if !self.selection_is_multiple() => {
                    Answer::Select { value: id.clone() }
                }
                _ => Answer::Choices {
                    choices: choices.to_vec(),
                    text: text.map(String::from),
                },
            },
        };
        answer.fits(self).then_some(answer)
    }

    fn selection_is_multiple(&self) -> bool {
        self.selection() == Selection::Multiple
    }
}

/// A question from a running turn.
///
/// `asked`, `mention`, `subject` and `expires_in_secs` are the agent's wishes; a front fills what its
/// protocol needs that the agent left out (a task card asks its requester, and expires with the engine's
/// window).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Question {
    /// The tool the question is about (an approval names the gated tool; standing approvals are kept per
    /// tool).
    pub tool: String,
    /// The tool call the question belongs to (the gated call, or the human-in-the-loop tool's call). An
    /// answer given after the turn ended names this call.
    pub call_id: String,
    /// What is asked.
    pub kind: QuestionKind,
    /// Who may answer, in the front's terms (hex public keys on Nostr); empty: the turn's requester.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub asked: Vec<String>,
    /// Who of the asked to notify (a device is woken only for them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mention: Vec<String>,
    /// A short subject line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// How long the question stays open, when the agent wants a window of its own (the front's default
    /// otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in_secs: Option<u64>,
}

impl Question {
    /// A question about `tool`'s call `call_id`, asking the requester, with the front's window.
    pub fn new(tool: impl Into<String>, call_id: impl Into<String>, kind: QuestionKind) -> Self {
        Question {
            tool: tool.into(),
            call_id: call_id.into(),
            kind,
            asked: Vec::new(),
            mention: Vec::new(),
            subject: None,
            expires_in_secs: None,
        }
    }
}

/// The decision on an approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApproveChoice {
    /// Do not run it.
    No,
    /// Run it this once.
    Once,
    /// Run it, and stop asking about this tool for the rest of this session (the conversation; for a task
    /// card, the task).
    Session,
    /// Run it, and stop asking about this tool for the rest of the conversation (a task card's adapter
    /// keeps it for the room).
    Always,
}

impl ApproveChoice {
    /// Whether the command runs.
    pub fn approves(&self) -> bool {
        !matches!(self, ApproveChoice::No)
    }

    /// Whether it stands for later calls of the same tool.
    pub fn stands(&self) -> bool {
        matches!(self, ApproveChoice::Session | ApproveChoice::Always)
    }
}

/// A person's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum Answer {
    /// To an approval.
    Approve {
        /// The decision.
        choice: ApproveChoice,
    },
    /// To a yes/no question.
    Confirm {
        /// Yes or no.
        confirmed: bool,
    },
    /// To a single selection: the chosen option's id.
    Select {
        /// The option's id.
        value: String,
    },
    /// To a selection of several, or with free text: the chosen option ids (distinct, in the order given)
    /// and the text.
    Choices {
        /// The option ids (empty when only text was given).
        choices: Vec<String>,
        /// The free text, when given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
    },
    /// To an input question.
    Input {
        /// The text (empty is an answer).
        value: String,
    },
    /// Nobody is there to answer: the command stays unrun, and that is final.
    NoOperator,
}

impl Answer {
    /// The answer as a person would say it back: an option's label (labels joined by `, `), the text, or
    /// `yes` / `no` / the approval's decision.
    pub fn describe(&self, kind: &QuestionKind) -> String {
        let options = kind.options();
        let label = |id: &str| {
            options
                .iter()
                .find(|o| o.id == id)
                .map_or_else(|| id.to_string(), |o| o.label.clone())
        };
        match self {
            Answer::Approve { choice } => match choice {
                ApproveChoice::No => "no".into(),
                ApproveChoice::Once => "once".into(),
                ApproveChoice::Session => "session".into(),
                ApproveChoice::Always => "always".into(),
            },
            Answer::Confirm { confirmed } => if *confirmed { "yes" } else { "no" }.into(),
            Answer::Select { value } => label(value),
            Answer::Choices { choices, text } => {
                let mut parts: Vec<String> = choices.iter().map(|c| label(c)).collect();
                if let Some(t) = text {
                    parts.push(t.clone());
                }
                parts.join(", ")
            }
            Answer::Input { value } => value.clone(),
            Answer::NoOperator => "no operator".into(),
        }
    }

    /// Whether this answer fits a question of `kind`.
    pub fn fits(&self, kind: &QuestionKind) -> bool {
        match (self, kind) {
            (Answer::NoOperator, _) => true,
            (Answer::Approve { .. }, QuestionKind::Approve { .. })
            | (Answer::Confirm { .. }, QuestionKind::Confirm { .. })
            | (Answer::Input { .. }, QuestionKind::Input { .. }) => true,
            (
                Answer::Select { value },
                QuestionKind::Select {
                    options,
                    multiple: false,
                    ..
                },
            ) => options.iter().any(|o| &o.id == value),
            (
                Answer::Choices { choices, text },
                QuestionKind::Select {
                    options,
                    multiple,
                    freeform,
                    ..
                },
            ) => {
                let known = choices.iter().all(|c| options.iter().any(|o| &o.id == c));
                let distinct = choices
                    .iter()
                    .enumerate()
                    .all(|(i, c)| !choices[..i].contains(c));
                let count_ok = match (choices.len(), *multiple) {
                    (0, _) => text.is_some(),
                    (1, _) => true,
                    (_, m) => m,
                };
                let text_ok = match text {
                    Some(t) => *freeform && !t.is_empty(),
                    None => true,
                };
                known && distinct && count_ok && text_ok
            }
            _ => false,
        }
    }
}

/// How asking went, as the agent sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    /// A person answered.
    Answered(Answer),
    /// Nobody answered within the window: an approval leaves the turn suspended, another question deferred.
    Unanswered,
    /// The turn's protocol cannot put questions to a person.
    Unavailable,
    /// The turn was cancelled while the question was open.
    Cancelled,
}

/// An answer to a call of an earlier, parked turn, carried into the turn that resumes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallAnswer {
    /// The call the question named.
    pub call_id: String,
    /// The answer.
    pub answer: Answer,
}

/// The option a person typed at a terminal among `labels`: a label as it is, else in any case, else its
/// number from 1. Its index.
pub fn typed_option<S: AsRef<str>>(typed: &str, labels: &[S]) -> Option<usize> {
    let typed = typed.trim();
    labels
        .iter()
        .position(|l| l.as_ref() == typed)
        .or_else(|| {
            labels
                .iter()
                .position(|l| l.as_ref().eq_ignore_ascii_case(typed))
        })
        .or_else(|| {
            let n: usize = typed.parse().ok()?;
            n.checked_sub(1).filter(|i| *i < labels.len())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(multiple: bool, freeform: bool) -> QuestionKind {
        QuestionKind::Select {
            question: "which?".into(),
            options: vec![
                QuestionOption::new("a", "Alpha"),
                QuestionOption::new("b", "Beta"),
            ],
            multiple,
            freeform,
        }
    }

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_single_choice_names_one_known_id() {
        let k = pick(false, false);
        assert_eq!(
            k.answer_from(&ids(&["b"]), None),
            Some(Answer::Select { value: "b".into() })
        );
        assert_eq!(k.answer_from(&ids(&["z"]), None), None, "unknown id");
        assert_eq!(k.answer_from(&ids(&["a", "b"]), None), None, "two ids");
        assert_eq!(
            k.answer_from(&[], Some("why")),
            None,
            "text without freeform"
        );
        assert_eq!(k.selection(), Selection::Single);
        assert_eq!(k.interaction(), Interaction::Question);
    }

    #[test]
    fn a_multiple_choice_takes_distinct_known_ids() {
        let k = pick(true, false);
        let a = k.answer_from(&ids(&["b", "a"]), None).unwrap();
        assert_eq!(a.describe(&k), "Beta, Alpha");
        assert_eq!(k.answer_from(&ids(&["a", "a"]), None), None, "repeated");
        assert_eq!(k.answer_from(&[], None), None, "nothing chosen");
        assert_eq!(k.selection(), Selection::Multiple);
    }

    #[test]
    fn freeform_takes_text_beside_or_instead_of_the_choice() {
        let k = pick(false, true);
        assert!(k.freeform());
        assert!(k.answer_from(&[], Some("neither")).is_some());
        let both = k.answer_from(&ids(&["a"]), Some("because")).unwrap();
        assert_eq!(both.describe(&k), "Alpha, because");
        assert_eq!(k.answer_from(&[], Some("")), None, "empty text");
        assert_eq!(k.answer_from(&ids(&["a", "b"]), Some("x")), None);
    }

    #[test]
    fn approvals_and_confirmations_are_option_questions() {
        let approve = QuestionKind::Approve {
            command: "ls".into(),
            display: "ls -l".into(),
            tag: None,
        };
        assert_eq!(approve.interaction(), Interaction::Approval);
        let ids_of: Vec<String> = approve.options().into_iter().map(|o| o.id).collect();
        assert_eq!(ids_of, ids(&["once", "session", "always", "deny"]));
        assert_eq!(
            approve.answer_from(&ids(&["session"]), None),
            Some(Answer::Approve {
                choice: ApproveChoice::Session
            })
        );
        assert!(!ApproveChoice::No.approves() && ApproveChoice::Session.stands());
        let confirm = QuestionKind::Confirm {
            question: "sure?".into(),
        };
        assert_eq!(confirm.interaction(), Interaction::Confirmation);
        assert_eq!(
            confirm.answer_from(&ids(&["no"]), None),
            Some(Answer::Confirm { confirmed: false })
        );
        assert_eq!(confirm.answer_from(&ids(&["maybe"]), None), None);
        let input = QuestionKind::Input {
            question: "name?".into(),
            default: None,
        };
        assert_eq!(input.selection(), Selection::Text);
        assert!(input.options().is_empty());
        assert_eq!(
            input.answer_from(&[], Some("Ada")),
            Some(Answer::Input {
                value: "Ada".into()
            })
        );
    }

    #[test]
    fn an_older_journal_answer_still_reads() {
        let a: Answer = serde_json::from_str(r#"{"answer":"select","value":"b"}"#).unwrap();
        assert_eq!(a, Answer::Select { value: "b".into() });
        let q: Question = serde_json::from_str(
            r#"{"tool":"t","call_id":"c","kind":{"kind":"select","question":"q","options":[{"id":"a","label":"A"}]}}"#,
        )
        .unwrap();
        assert_eq!(q.kind.selection(), Selection::Single);
        assert!(q.asked.is_empty());
    }

    #[test]
    fn an_option_is_typed_by_its_label_in_any_case_or_by_its_number() {
        let labels = ["Yes", "no", "2"];
        assert_eq!(typed_option(" yes ", &labels), Some(0));
        assert_eq!(typed_option("NO", &labels), Some(1));
        assert_eq!(
            typed_option("2", &labels),
            Some(2),
            "a label before a number"
        );
        assert_eq!(typed_option("1", &labels), Some(0));
        assert_eq!(typed_option("4", &labels), None);
        assert_eq!(typed_option("0", &labels), None);
        assert_eq!(typed_option("maybe", &labels), None);
    }
}
