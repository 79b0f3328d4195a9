//! The front's life in the daemon: its kind ([`OpenAiFront`], the `[openai]` section), its plan, the
//! running front the daemon drains and stops, and the side of one turn ([`TurnSide`]) that hands the
//! engine's events and outcome to the request's handler.

use agentwire_core::{Outcome, Question, TurnEvent};
use agentwire_engine::{FrontAsk, TurnFront};
use agentwire_http::front::{
    FrontContext, FrontKind, FrontPlan, FrontSettingError, FrontStartError, HttpRoutes,
    RequestFront, StartedFront,
};
use futures_util::future::BoxFuture;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;

/// The protocol its turns are journaled under, and the front's name (in `expose`, `[openai]`).
pub const PROTOCOL: &str = "openai";

/// The OpenAI-compatible chat completions front, as the binary lists it.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenAiFront;

impl FrontKind for OpenAiFront {
    fn name(&self) -> &'static str {
        PROTOCOL
    }

    fn about(&self) -> &'static str {
        "the OpenAI-compatible chat completions API (/v1/chat/completions, /v1/models)"
    }

    /// `[openai] enabled` (default: on).
    fn configure(
        &self,
        section: Option<&serde_json::Value>,
    ) -> Result<Box<dyn FrontPlan>, FrontSettingError> {
        agentwire_http::front::on_off(PROTOCOL, section, start)
    }
}

/// Starts the front: its turns live as long as their requests, so the running front has nothing of its
/// own to drain or leave.
fn start(ctx: FrontContext) -> BoxFuture<'static, Result<StartedFront, FrontStartError>> {
    Box::pin(async move {
        let served = crate::routes::Served::new(ctx.agents, agentwire_core::now_secs());
        Ok(StartedFront {
            front: Arc::new(RequestFront::new(PROTOCOL)),
            routes: Some(HttpRoutes {
                public: axum::Router::new(),
                callers: crate::routes::router(served),
                unauthorized: crate::routes::unauthorized,
            }),
        })
    })
}

/// What a turn tells its request's handler.
#[derive(Debug)]
pub(crate) enum Update {
    /// A text delta (streamed requests only).
    Event(TurnEvent),
    /// The outcome, and whether the agent had asked a question in the turn.
    Outcome(Outcome, bool),
}

/// The side of one turn: queues what the engine says for the handler, never blocking. The queue is
/// unbounded but holds only the answer's text deltas (none for a request not streamed) and the outcome,
/// which the handler drains as fast as the client reads; a client that stops reading is cut off by the
/// server's write-stall bound, which drops the stream and so cancels the turn.
pub(crate) struct TurnSide {
    tx: mpsc::UnboundedSender<Update>,
    stream: bool,
    asked: AtomicBool,
}

impl TurnSide {
    /// A turn's side, and the queue its handler reads.
    pub(crate) fn new(stream: bool) -> (Arc<TurnSide>, mpsc::UnboundedReceiver<Update>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let side = TurnSide {
            tx,
            stream,
            asked: AtomicBool::new(false),
        };
        (Arc::new(side), rx)
    }
}

impl TurnFront for TurnSide {
    fn accepted(&self, _queued: bool) {}

    fn event(&self, event: TurnEvent) {
        if self.stream && matches!(event, TurnEvent::Text { .. }) {
            let _ = self.tx.send(Update::Event(event));
        }
    }

    fn encode_outcome(&self, _outcome: &Outcome) -> Option<String> {
        None
    }

    fn deliver_outcome(&self, outcome: &Outcome, _wire: Option<&str>) {
        let asked = self.asked.load(Ordering::SeqCst);
        let _ = self.tx.send(Update::Outcome(outcome.clone(), asked));
    }

    /// A chat completion has no place for a question: the agent hears that nobody can answer, and a turn
    /// that fails for it is answered with [`crate::errors::ASKED_MESSAGE`].
    fn ask(&self, _question: &Question) -> FrontAsk {
        self.asked.store(true, Ordering::SeqCst);
        FrontAsk::Unavailable
    }
}
