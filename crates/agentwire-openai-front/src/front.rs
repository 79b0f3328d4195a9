//! The front's life in the daemon: its kind ([`OpenAiFront`], the `[openai]` section), its plan, the
//! running front the daemon drains and stops, and the side of one turn ([`TurnSide`]) that hands the
//! engine's events and outcome to the request's handler.

use agentwire_core::{Outcome, Question, TurnEvent};
use agentwire_engine::{Front, FrontAsk, StoredTurn, TurnFront};
use agentwire_http::front::{
    FrontContext, FrontKind, FrontPlan, FrontSettingError, HttpRoutes, StartedFront,
};
use futures_util::future::BoxFuture;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// The protocol its turns are journaled under, and the front's name (in `expose`, `[openai]`).
pub const PROTOCOL: &str = "openai";

/// The OpenAI-compatible chat completions front, as the binary lists it.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenAiFront;

/// The `[openai]` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OpenAiSection {
    /// Whether the front runs (default: yes).
    pub enabled: Option<bool>,
}

impl FrontKind for OpenAiFront {
    fn name(&self) -> &'static str {
        PROTOCOL
    }

    fn about(&self) -> &'static str {
        "the OpenAI-compatible chat completions API (/v1/chat/completions, /v1/models)"
    }

    fn configure(
        &self,
        section: Option<&serde_json::Value>,
    ) -> Result<Box<dyn FrontPlan>, FrontSettingError> {
        let section: OpenAiSection = agentwire_http::front::section(PROTOCOL, section)?;
        Ok(Box::new(OpenAiPlan {
            enabled: section.enabled.unwrap_or(true),
        }))
    }
}

/// The front's settings, resolved.
#[derive(Debug, Clone)]
struct OpenAiPlan {
    enabled: bool,
}

impl FrontPlan for OpenAiPlan {
    fn enabled(&self) -> bool {
        self.enabled
    }

    fn view(&self) -> serde_json::Value {
        serde_json::json!({ "enabled": self.enabled })
    }

    fn start(&self, ctx: FrontContext) -> BoxFuture<'static, Result<StartedFront, String>> {
        Box::pin(async move {
            let served = crate::routes::Served::new(ctx.agents, agentwire_core::now_secs());
            Ok(StartedFront {
                front: Arc::new(Running),
                routes: Some(HttpRoutes {
                    public: axum::Router::new(),
                    callers: crate::routes::router(served),
                    unauthorized: crate::routes::unauthorized,
                }),
            })
        })
    }
}

/// The running front. Its turns live as long as their requests: after a crash the caller's connection is
/// gone, so recovery ends them in the journal alone; there is nothing of its own to drain or leave.
struct Running;

impl Front for Running {
    fn protocol(&self) -> &'static str {
        PROTOCOL
    }

    /// The caller's connection is gone after a crash: the turn is ended in the journal, and the turn
    /// lists (the hub's) show it ended.
    fn recovery_front(&self, _turn: &StoredTurn) -> Option<Arc<dyn TurnFront>> {
        Some(Arc::new(agentwire_engine::Unreachable))
    }

    fn drain(&self, _grace: Duration) -> BoxFuture<'_, usize> {
        Box::pin(async { 0 })
    }

    fn stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_is_on_by_default_and_refuses_unknown_keys() {
        let plan = OpenAiFront.configure(None).unwrap();
        assert!(plan.enabled());
        assert_eq!(plan.view(), serde_json::json!({"enabled": true}));
        let off = serde_json::json!({"enabled": false});
        assert!(!OpenAiFront.configure(Some(&off)).unwrap().enabled());
        let typo = serde_json::json!({"enable": false});
        let e = OpenAiFront.configure(Some(&typo)).unwrap_err();
        assert_eq!(e.section, "openai");
        assert!(e.reason.contains("enable"), "{e}");
    }
}
