//! The front's life in the daemon: its kind ([`A2aFront`], the `[a2a]` section), its plan, the running
//! front the daemon drains and stops, and the side of one turn ([`TurnSide`]). A task outlives the request
//! that made it (a client polls, streams, subscribes or answers later), so what a turn does is read from
//! the watch hub, not queued for one request; the side only takes the agent's questions.

use agentwire_core::{Outcome, Question, TurnEvent};
use agentwire_engine::{FrontAsk, TurnFront};
use agentwire_http::front::{
    FrontContext, FrontKind, FrontPlan, FrontSettingError, FrontStartError, HttpRoutes,
    RequestFront, StartedFront,
};
use futures_util::future::BoxFuture;
use std::sync::Arc;
use std::time::Duration;

pub use crate::mapping::PROTOCOL;

/// How long a task waits in `TASK_STATE_INPUT_REQUIRED` for the client's answer: an hour, time for a
/// person to come back to it; after it the agent hears that nobody answered and the task goes on (or
/// ends) as the agent decides.
pub const INPUT_REQUIRED_WINDOW: Duration = Duration::from_secs(3600);
/// Random bytes in a question's id: 64 bits, never repeated within a task.
const QUESTION_ID_BYTES: usize = 8;

/// The A2A front, as the binary lists it.
#[derive(Debug, Clone, Copy, Default)]
pub struct A2aFront;

impl FrontKind for A2aFront {
    fn name(&self) -> &'static str {
        PROTOCOL
    }

    fn about(&self) -> &'static str {
        "the A2A protocol 1.0 (agent cards, JSON-RPC and HTTP+JSON at /a2a/<agent>)"
    }

    /// `[a2a] enabled` (default: on).
    fn configure(
        &self,
        section: Option<&serde_json::Value>,
    ) -> Result<Box<dyn FrontPlan>, FrontSettingError> {
        agentwire_http::front::on_off(PROTOCOL, section, start)
    }
}

/// Starts the front. A task a crash cut off is ended in the journal by recovery (`TASK_STATE_FAILED`, the
/// agent restarted) and read from there; there is no connection of its own to drain or close.
fn start(ctx: FrontContext) -> BoxFuture<'static, Result<StartedFront, FrontStartError>> {
    Box::pin(async move {
        let served = crate::service::Served::new(ctx.agents, ctx.hub);
        Ok(StartedFront {
            front: Arc::new(RequestFront::new(PROTOCOL)),
            routes: Some(HttpRoutes {
                public: crate::routes::cards(served.clone()),
                callers: crate::routes::router(served),
                unauthorized: crate::routes::unauthorized,
            }),
        })
    })
}

/// The side of one A2A turn. Its events and outcome reach clients through the hub (every stream and poll
/// reads them there); it takes the agent's questions, which the client answers with a message naming the
/// task.
pub(crate) struct TurnSide;

impl TurnFront for TurnSide {
    fn accepted(&self, _queued: bool) {}

    fn event(&self, _event: TurnEvent) {}

    fn encode_outcome(&self, _outcome: &Outcome) -> Option<String> {
        None
    }

    fn deliver_outcome(&self, _outcome: &Outcome, _wire: Option<&str>) {}

    /// The question becomes the task's `TASK_STATE_INPUT_REQUIRED` status (the hub publishes it), open
    /// for [`INPUT_REQUIRED_WINDOW`].
    fn ask(&self, _question: &Question) -> FrontAsk {
        let mut bytes = [0u8; QUESTION_ID_BYTES];
        let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
        let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        FrontAsk::Sent {
            question_id: format!("q-{id}"),
            window: Some(INPUT_REQUIRED_WINDOW),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_question_is_sent_with_the_input_window() {
        let q = Question::new(
            "ask",
            "c",
            agentwire_core::QuestionKind::Confirm {
                question: "ok?".into(),
            },
        );
        let (a, b) = (TurnSide.ask(&q), TurnSide.ask(&q));
        match (a, b) {
            (
                FrontAsk::Sent {
                    question_id: x,
                    window,
                },
                FrontAsk::Sent { question_id: y, .. },
            ) => {
                assert_ne!(x, y, "each question has its own id");
                assert_eq!(window, Some(INPUT_REQUIRED_WINDOW));
            }
            other => panic!("{other:?}"),
        }
    }
}
