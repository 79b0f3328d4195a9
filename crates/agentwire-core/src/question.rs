//! Questions a running turn puts to a person, and their answers.
//!
//! A question is asked through the protocol that carried the turn (fisk-ai `elicit.request.*`, a task-card
//! room's question card, a roost job's `blocked` report). Protocols that cannot ask (NIP-XX) answer every
//! question [`Asked::Unavailable`], so an approval-gated tool is refused there.

use serde::{Deserialize, Serialize};

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
    /// One of a list.
    Select {
        /// The question.
        question: String,
        /// The options, in order.
        options: Vec<String>,
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
}

/// A question from a running turn.
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
}

/// The decision on an approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApproveChoice {
    /// Do not run it.
    No,
    /// Run it this once.
    Once,
    /// Run it, and stop asking about this tool for the rest of the conversation.
    Always,
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
    /// To a selection: the chosen option's text.
    Select {
        /// The option.
        value: String,
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
    /// Whether this answer fits a question of `kind`.
    pub fn fits(&self, kind: &QuestionKind) -> bool {
        match (self, kind) {
            (Answer::NoOperator, _) => true,
            (Answer::Approve { .. }, QuestionKind::Approve { .. })
            | (Answer::Confirm { .. }, QuestionKind::Confirm { .. })
            | (Answer::Input { .. }, QuestionKind::Input { .. }) => true,
            (Answer::Select { value }, QuestionKind::Select { options, .. }) => {
                options.contains(value)
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
