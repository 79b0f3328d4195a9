//! The front's life in the daemon: its kind ([`McpFront`], the `[mcp]` section), its plan, the running
//! front the daemon drains and stops, and the side of one turn ([`TurnSide`]) that hands the engine's
//! events, questions and outcome to the call's handler.

use agentwire_core::{Outcome, Question, TurnEvent};
use agentwire_engine::{FrontAsk, TurnFront};
use agentwire_http::front::{
    FrontContext, FrontKind, FrontPlan, FrontSettingError, FrontStartError, HttpRoutes,
    RequestFront, StartedFront,
};
use futures_util::future::BoxFuture;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// The protocol its turns are journaled under, and the front's name (in `expose`, `[mcp]`).
pub const PROTOCOL: &str = "mcp";

/// How long an agent's question stays open for the client's answer: a person reads the form and
/// answers; past this the engine closes it unanswered and the agent goes on (or parks) without it.
/// Shorter than [`crate::routes::SESSION_IDLE`], so the session outlives the question.
pub const QUESTION_WINDOW: Duration = Duration::from_secs(10 * 60);

/// The MCP front, as the binary lists it.
#[derive(Debug, Clone, Copy, Default)]
pub struct McpFront;

impl FrontKind for McpFront {
    fn name(&self) -> &'static str {
        PROTOCOL
    }

    fn about(&self) -> &'static str {
        "an MCP server at /mcp (streamable HTTP): each agent a tool, its questions as elicitations"
    }

    /// `[mcp] enabled` (default: on).
    fn configure(
        &self,
        section: Option<&serde_json::Value>,
    ) -> Result<Box<dyn FrontPlan>, FrontSettingError> {
        agentwire_http::front::on_off(PROTOCOL, section, start)
    }
}

/// Starts the front. Its turns live as long as their calls: after a crash the client's session is gone,
/// so recovery ends them in the journal alone. Stopping ends every session (their calls' turns are
/// cancelled as their handlers end).
fn start(ctx: FrontContext) -> BoxFuture<'static, Result<StartedFront, FrontStartError>> {
    Box::pin(async move {
        let (callers, stop) = crate::routes::router(ctx.agents);
        Ok(StartedFront {
            front: Arc::new(RequestFront::new(PROTOCOL).on_stop(move || stop.stop())),
            routes: Some(HttpRoutes {
                public: axum::Router::new(),
                callers,
                unauthorized: crate::routes::unauthorized,
            }),
        })
    })
}

/// What a turn tells its call's handler.
#[derive(Debug)]
pub(crate) enum Update {
    /// An event (sent only when the client asked for progress).
    Event(TurnEvent),
    /// The agent asks: put it to the client under this id.
    Question(String, Question),
    /// The question of this id is settled (answered, its window closed, the turn cancelled).
    QuestionClosed(String),
    /// The outcome.
    Outcome(Outcome),
}

/// The side of one turn: queues what the engine says for the handler, never blocking. The queue is
/// unbounded but holds only events the client asked for (none without a progress token), a question
/// at a time and the outcome, which the handler drains as it sends them; a client that stops reading is
/// cut off by the server's write-stall bound, which ends the call and so cancels the turn.
pub(crate) struct TurnSide {
    tx: mpsc::UnboundedSender<Update>,
    progress: bool,
    can_ask: bool,
    unanswerable: AtomicBool,
    questions: AtomicU64,
}

impl TurnSide {
    /// A turn's side and the queue its handler reads: `progress`, the client wants the events;
    /// `can_ask`, it declared elicitation.
    pub(crate) fn new(
        progress: bool,
        can_ask: bool,
    ) -> (Arc<TurnSide>, mpsc::UnboundedReceiver<Update>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let side = TurnSide {
            tx,
            progress,
            can_ask,
            unanswerable: AtomicBool::new(false),
            questions: AtomicU64::new(0),
        };
        (Arc::new(side), rx)
    }

    /// Whether the agent asked a question this client cannot be asked.
    pub(crate) fn unanswerable(&self) -> bool {
        self.unanswerable.load(Ordering::SeqCst)
    }
}

impl TurnFront for TurnSide {
    fn accepted(&self, _queued: bool) {}

    fn event(&self, event: TurnEvent) {
        if self.progress {
            let _ = self.tx.send(Update::Event(event));
        }
    }

    fn encode_outcome(&self, _outcome: &Outcome) -> Option<String> {
        None
    }

    fn deliver_outcome(&self, outcome: &Outcome, _wire: Option<&str>) {
        let _ = self.tx.send(Update::Outcome(outcome.clone()));
    }

    /// To a client that declared elicitation, the question is queued for the handler, which sends it as
    /// `elicitation/create`; to another, nobody can answer (the call fails saying so when the turn fails
    /// for it).
    fn ask(&self, question: &Question) -> FrontAsk {
        if !self.can_ask {
            self.unanswerable.store(true, Ordering::SeqCst);
            return FrontAsk::Unavailable;
        }
        let n = self.questions.fetch_add(1, Ordering::SeqCst) + 1;
        let id = format!("q{n}");
        if self
            .tx
            .send(Update::Question(id.clone(), question.clone()))
            .is_err()
        {
            // The handler is gone (its turn is being cancelled): nobody will answer.
            return FrontAsk::Unavailable;
        }
        FrontAsk::Sent {
            question_id: id,
            window: Some(QUESTION_WINDOW),
        }
    }

    fn question_closed(&self, question_id: &str) {
        let _ = self
            .tx
            .send(Update::QuestionClosed(question_id.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire_core::QuestionKind;

    fn question() -> Question {
        Question::new(
            "confirm",
            "c1",
            QuestionKind::Confirm {
                question: "ok?".into(),
            },
        )
    }

    #[test]
    fn a_question_goes_to_a_client_that_can_answer_and_is_unavailable_to_another() {
        let (side, mut rx) = TurnSide::new(false, true);
        let FrontAsk::Sent {
            question_id,
            window,
        } = side.ask(&question())
        else {
            panic!("sent");
        };
        assert_eq!(window, Some(QUESTION_WINDOW));
        assert!(matches!(rx.try_recv(), Ok(Update::Question(id, _)) if id == question_id));
        assert!(!side.unanswerable());

        let (side, mut rx) = TurnSide::new(false, false);
        assert_eq!(side.ask(&question()), FrontAsk::Unavailable);
        assert!(side.unanswerable());
        assert!(rx.try_recv().is_err(), "nothing queued");
    }

    #[test]
    fn events_are_queued_only_when_progress_was_asked_for() {
        let ev = TurnEvent::Text { text: "x".into() };
        let (side, mut rx) = TurnSide::new(false, false);
        side.event(ev.clone());
        assert!(rx.try_recv().is_err());
        let (side, mut rx) = TurnSide::new(true, false);
        side.event(ev);
        assert!(matches!(rx.try_recv(), Ok(Update::Event(_))));
    }
}
