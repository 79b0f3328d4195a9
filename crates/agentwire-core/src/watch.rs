//! What the engine's watch hub publishes of a turn: what it did ([`WatchKind`], [`WatchEvent`]), where it
//! is ([`TurnState`], [`TurnEnd`]) and its line in a list ([`TurnSummary`]). Plain data, below the hub and
//! its readers (the metrics among them), so that each of them depends on it and not on the other.

use crate::{ConversationId, Outcome, Question, RequestId, TurnEvent};

/// The most of a prompt a turn's acceptance carries: its first line, cut here.
pub const MAX_PROMPT_SHOWN: usize = 200;

/// What a turn did.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum WatchKind {
    /// Journaled and running (or waiting behind its conversation).
    Accepted {
        /// Waiting behind another turn of its conversation.
        queued: bool,
        /// The front that took it (`nipxx`, `fisk`, ...).
        protocol: String,
        /// The agent that runs it.
        agent: String,
        /// Its conversation.
        conversation: ConversationId,
        /// The first line of its prompt, at most [`MAX_PROMPT_SHOWN`] bytes.
        prompt: String,
        /// Who asked (the submission's `requester`): a caller front shows a
        /// caller only its own turns.
        requester: String,
    },
    /// One event of the running turn.
    Event(TurnEvent),
    /// A question put to a person.
    Question {
        /// The question's id.
        id: String,
        /// The question.
        question: Question,
    },
    /// The question was settled (answered, expired, cancelled).
    QuestionClosed {
        /// The question's id.
        id: String,
        /// The answer as a person would say it back ([`agentwire_core::Answer::describe`]), when it was
        /// answered (from any front).
        answer: Option<String>,
    },
    /// The turn's one outcome, durable.
    Outcome(Outcome),
}

/// One thing a turn did, as watchers see it.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchEvent {
    /// Increases across the hub: a stream resumes after it ([`WatchHub::watch_all_since`]).
    pub id: u64,
    /// The turn.
    pub turn: RequestId,
    /// Its place in the turn, from 0.
    pub seq: u64,
    /// When it was published, in Unix milliseconds.
    pub at_ms: u64,
    /// What happened.
    pub kind: WatchKind,
}

/// Where a turn is, as watchers see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnState {
    /// Waiting behind another turn of its conversation.
    Queued,
    /// Running.
    Running,
    /// Waiting for a person's answer.
    Waiting,
    /// Ended with its outcome.
    Ended,
}

impl TurnState {
    /// Its name in the turn API (`queued`, `running`, `waiting`, `ended`).
    pub fn as_str(self) -> &'static str {
        match self {
            TurnState::Queued => "queued",
            TurnState::Running => "running",
            TurnState::Waiting => "waiting",
            TurnState::Ended => "ended",
        }
    }

    /// The state a name in the turn API names.
    pub fn parse(name: &str) -> Option<TurnState> {
        [
            TurnState::Queued,
            TurnState::Running,
            TurnState::Waiting,
            TurnState::Ended,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }
}

/// How an ended turn ended, in the words every client shows (the turn API's `ended_as`, `turns`, the hub):
/// `done` (a result), `cancelled` (its requester or an operator cancelled it), `failed` (any other failure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnEnd {
    /// It ended with a result.
    Done,
    /// It ended with a failure other than a cancellation.
    Failed,
    /// It was cancelled.
    Cancelled,
}

impl TurnEnd {
    /// How `outcome` ended its turn.
    pub fn of(outcome: &Outcome) -> TurnEnd {
        match outcome {
            Outcome::Result(_) => TurnEnd::Done,
            o if o.is_cancelled() => TurnEnd::Cancelled,
            Outcome::Failure(_) => TurnEnd::Failed,
        }
    }

    /// Its name (`done`, `failed`, `cancelled`).
    pub fn as_str(self) -> &'static str {
        match self {
            TurnEnd::Done => "done",
            TurnEnd::Failed => "failed",
            TurnEnd::Cancelled => "cancelled",
        }
    }

    /// The end a name names.
    pub fn parse(name: &str) -> Option<TurnEnd> {
        [TurnEnd::Done, TurnEnd::Failed, TurnEnd::Cancelled]
            .into_iter()
            .find(|e| e.as_str() == name)
    }
}

/// A turn the hub holds, in a line: what a list of turns shows.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnSummary {
    /// The turn.
    pub id: RequestId,
    /// The agent that runs it (empty: the hub saw only its end, as for a turn a crash cut off).
    pub agent: String,
    /// The front that took it.
    pub protocol: String,
    /// Its conversation, once known.
    pub conversation: Option<ConversationId>,
    /// The first line of its prompt.
    pub prompt: String,
    /// Who asked (empty when the hub saw only its end; for a turn of an earlier run, the `requester` its
    /// front journaled in its route, if any).
    pub requester: String,
    /// Where it is.
    pub state: TurnState,
    /// Its question's id while it waits for an answer.
    pub question: Option<String>,
    /// Its outcome, once ended.
    pub outcome: Option<Outcome>,
    /// When the hub first saw it, in Unix milliseconds.
    pub started_ms: u64,
    /// When it ended.
    pub ended_ms: Option<u64>,
    /// The id of its first event: turns are listed newest first by it, and it is a page's cursor.
    pub first_id: u64,
}

impl TurnSummary {
    /// How it ended, once it has.
    pub fn end(&self) -> Option<TurnEnd> {
        self.outcome.as_ref().map(TurnEnd::of)
    }
}

impl TurnSummary {
    /// The summary after `kind` happened at `at_ms`.
    pub fn note(&mut self, kind: &WatchKind, at_ms: u64) {
        let s = self;
        match kind {
            WatchKind::Accepted {
                queued,
                protocol,
                agent,
                conversation,
                prompt,
                requester,
            } => {
                s.requester = requester.clone();
                s.agent = agent.clone();
                s.protocol = protocol.clone();
                s.conversation = Some(conversation.clone());
                s.prompt = prompt.clone();
                s.state = match queued {
                    true => TurnState::Queued,
                    false => TurnState::Running,
                };
            }
            WatchKind::Event(_) => {
                if s.state == TurnState::Queued {
                    s.state = TurnState::Running;
                }
            }
            WatchKind::Question { id, .. } => {
                s.state = TurnState::Waiting;
                s.question = Some(id.clone());
            }
            WatchKind::QuestionClosed { .. } => {
                s.state = TurnState::Running;
                s.question = None;
            }
            WatchKind::Outcome(o) => {
                s.state = TurnState::Ended;
                s.question = None;
                s.outcome = Some(o.clone());
                s.ended_ms = Some(at_ms);
            }
        }
    }
}
