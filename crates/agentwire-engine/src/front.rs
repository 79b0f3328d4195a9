//! The protocol side of a turn as the engine sees it: [`TurnFront`], what each front (NIP-XX, fisk-ai, the
//! HTTP fronts, ...) implements to put a turn's acceptance, events, questions and outcome on its wire, and
//! [`FrontAsk`], how it took a question. Below the engine and the watch hub, which both call fronts.

use agentwire_core::{Asked, Outcome, Question, TurnEvent};
use agentwire_store::StoredTurn;
use std::time::Duration;

/// How a front took a question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrontAsk {
    /// Sent to the requester under this id; the answer comes through
    /// [`Engine::answer`](crate::Engine::answer). With a window, the engine closes the question when it
    /// ends unanswered ([`Engine::extend_question`](crate::Engine::extend_question) moves it; a front may
    /// also close it itself with [`Engine::question_expired`](crate::Engine::question_expired)).
    Sent {
        /// The question's id on the wire.
        question_id: String,
        /// How long the question stays open without an answer.
        window: Option<Duration>,
    },
    /// Settled without asking (a standing approval, an operator-less worker).
    Settled(Asked),
    /// This protocol cannot ask.
    Unavailable,
}

/// The protocol side of one turn: puts its events and its outcome on the wire.
pub trait TurnFront: Send + Sync + 'static {
    /// The turn is journaled and will run (or waits behind its conversation): acknowledge it on the wire.
    fn accepted(&self, queued: bool);
    /// One event of the running turn, in order. Must not block (queue it).
    fn event(&self, event: TurnEvent);
    /// The wire form of the outcome, journaled with it so a resend is byte-identical.
    fn encode_outcome(&self, outcome: &Outcome) -> Option<String>;
    /// Send the journaled outcome.
    fn deliver_outcome(&self, outcome: &Outcome, wire: Option<&str>);
    /// Puts a question to the requester. Called with the engine's lock held: it must only queue the
    /// question for sending and must not call back into the engine. Default: this protocol cannot ask.
    fn ask(&self, _question: &Question) -> FrontAsk {
        FrontAsk::Unavailable
    }
    /// The open question was answered, through whichever front took the answer (this one, the turn API,
    /// another protocol): `said` is the answer as a person would say it back
    /// ([`Answer::describe`](agentwire_core::Answer::describe)).
    /// [`question_closed`](Self::question_closed) follows. Must not block. Default: nothing.
    fn question_answered(&self, _question_id: &str, _said: &str) {}
    /// The question is settled (answered, expired or cancelled): stop holding it open.
    fn question_closed(&self, _question_id: &str) {}
    /// The request id ran before (a resend): answer it from the journal's record, which is not run again.
    /// The record may have no outcome yet (a turn a crash cut off, which recovery ends). Must not block.
    fn replay(&self, _stored: &StoredTurn) {}
    /// The tokens this turn may still spend, given to the agent as
    /// [`TurnContext::token_budget`](crate::TurnContext::token_budget) (fisk-ai: the conversation's
    /// allowance less what its earlier turns used). Default: no budget.
    fn token_budget(&self) -> Option<u64> {
        None
    }
    /// The W3C `traceparent` the requester sent (fisk-ai's header): the turn's trace continues it.
    /// Default: none, and a traced turn starts a trace of its own.
    fn traceparent(&self) -> Option<String> {
        None
    }
    /// The turn's trace began, as `trace_id` (when traces are exported), carrying the conversation's text
    /// when `content`: for a terminal that reports them (fisk-ai's `trace_id` and `content_exported`).
    /// Called before the agent runs, never for a turn that ends before it runs. Must not block.
    fn traced(&self, _trace_id: &str, _content: bool) {}
}
