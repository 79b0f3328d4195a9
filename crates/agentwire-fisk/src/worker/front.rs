//! The fisk-ai side of one turn: the engine's events become `event.*` blocks, its questions
//! `elicit.request.*` with a window, its outcome the `result` or `error` that ends the reply set.

use super::replyset::{ksuid, ReplySet};
use crate::mapping;
use crate::wire::{self, Ack, Reply};
use agentwire_core::{
    Answer, ApproveChoice, Asked, ConversationId, Outcome, Question, QuestionKind, Refusal,
    RequestId, TurnEvent, Usage,
};
use agentwire_engine::StoredTurn;
use agentwire_engine::{Engine, FrontAsk, TurnFront};
use std::sync::{Mutex, Weak};
use std::time::Duration;

struct State {
    acked: bool,
    iteration: u64,
    /// Tool calls this turn made so far.
    tool_calls: u64,
    /// The turn's trace id and whether its content went into it, once its trace began
    /// ([`TurnFront::traced`]): its terminal reports them.
    trace: Option<(String, bool)>,
}

/// What a front needs to know about its turn.
pub(crate) struct TurnSetup {
    pub(crate) request_id: RequestId,
    pub(crate) conversation: ConversationId,
    /// The conversation token the ack hands back (none for a queued job delivered again in a new
    /// conversation: the token is not kept).
    pub(crate) token: Option<String>,
    pub(crate) stream: bool,
    pub(crate) elicit: bool,
    pub(crate) window: Duration,
    pub(crate) approvals: Vec<String>,
    pub(crate) max_tokens: Option<u64>,
    /// Blocks to send right after the ack (a prompt's `replay`).
    pub(crate) replay: Vec<Reply>,
    /// What the conversation's earlier turns spent and their tool calls, read at admission (the
    /// conversation runs one turn at a time, so nothing else adds to it meanwhile).
    pub(crate) prior_usage: (Usage, u64),
    /// The caller's W3C `traceparent` header: the turn's trace continues it.
    pub(crate) traceparent: Option<String>,
}

/// The front of one fisk-ai turn.
pub(crate) struct FiskFront {
    set: ReplySet,
    setup: TurnSetup,
    engine: Weak<Engine>,
    state: Mutex<State>,
}

impl FiskFront {
    pub(crate) fn new(set: ReplySet, setup: TurnSetup, engine: Weak<Engine>) -> Self {
        FiskFront {
            set,
            setup,
            engine,
            state: Mutex::new(State {
                acked: false,
                iteration: 0,
                tool_calls: 0,
                trace: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The open question's kind and tool, if `question_id` names it: the engine's, which alone holds it.
    pub(crate) fn open_question(&self, question_id: &str) -> Option<(QuestionKind, String)> {
        let engine = self.engine.upgrade()?;
        engine
            .waiting_question(&self.setup.request_id, question_id)
            .map(|q| (q.kind, q.tool))
    }

    /// Restarts the open question's window (an `elicit.waiting`). Returns whether it was open.
    pub(crate) fn hold_open(&self, question_id: &str) -> bool {
        // The engine keeps the window.
        self.engine.upgrade().is_some_and(|e| {
            e.extend_question(&self.setup.request_id, question_id, self.setup.window)
        })
    }

    /// The request id this front serves.
    pub(crate) fn request_id(&self) -> &RequestId {
        &self.setup.request_id
    }

    fn ack(&self) -> Reply {
        let mut ack = Ack::accepted();
        if let Some(token) = &self.setup.token {
            ack = ack.with_conversation_token(token.clone());
        }
        if let Some(m) = self.setup.max_tokens {
            ack = ack.with_max_tokens(m);
        }
        Reply::Ack(ack)
    }
}

impl TurnFront for FiskFront {
    fn replay(&self, stored: &StoredTurn) {
        let mut st = self.lock();
        st.acked = true;
        if stored.conversation_id != self.setup.conversation {
            // The tag ran before in another conversation (or the resend carries no token): its answer is
            // that conversation's, and only its token holder may read it.
            self.set.send(Reply::Ack(Ack::refused("duplicate request")));
            return self.set.finish(mapping::refusal(
                Refusal::DuplicateRequest,
                "the request already ran in another conversation; use a new request tag",
            ));
        }
        // Answered from the journal, not run again. The conversation's usage read at admission holds this
        // turn already.
        let (tokens, calls) = self.setup.prior_usage;
        match &stored.outcome {
            Some(o) => {
                self.set.send(self.ack());
                self.set
                    .finish(mapping::terminal(o, mapping::usage_with(tokens, calls)))
            }
            None => {
                // Journaled without an outcome yet (a crash cut it off; recovery ends it): refused.
                self.set.send(Reply::Ack(Ack::refused("duplicate request")));
                self.set.finish(mapping::refusal(
                    Refusal::DuplicateRequest,
                    "a run with this request is already in flight",
                ))
            }
        }
    }

    fn accepted(&self, _queued: bool) {
        let mut st = self.lock();
        if !st.acked {
            st.acked = true;
            self.set.send(self.ack());
            for r in &self.setup.replay {
                self.set.send(r.clone());
            }
        }
    }

    fn event(&self, event: TurnEvent) {
        let mut st = self.lock();
        match &event {
            // Coalesced into blocks by the reply stream.
            TurnEvent::Text { text } => return self.set.text(text.clone()),
            TurnEvent::Status { .. } => st.iteration += 1,
            TurnEvent::ToolCall { .. } => st.tool_calls += 1,
            _ => {}
        }
        self.set.event(mapping::block(&event, st.iteration));
    }

    fn token_budget(&self) -> Option<u64> {
        // The allowance is the conversation's: what its earlier turns used is gone from this one's. (Admission
        // refused the turn when nothing was left.)
        let (before, _) = self.setup.prior_usage;
        let used = before.input_tokens.saturating_add(before.output_tokens);
        self.setup.max_tokens.map(|m| m.saturating_sub(used))
    }

    fn traceparent(&self) -> Option<String> {
        self.setup.traceparent.clone()
    }

    fn traced(&self, trace_id: &str, content: bool) {
        self.lock().trace = Some((trace_id.to_string(), content));
    }

    fn encode_outcome(&self, _outcome: &Outcome) -> Option<String> {
        // A resend is renumbered as a reply set of its own, so it is rebuilt from the outcome.
        None
    }

    fn deliver_outcome(&self, outcome: &Outcome, _wire: Option<&str>) {
        let mut st = self.lock();
        if !st.acked {
            // Refused after all (the journal failed): the ack says so.
            st.acked = true;
            let reason = match outcome {
                Outcome::Failure(f) => f.message.clone(),
                Outcome::Result(_) => String::new(),
            };
            self.set.send(Reply::Ack(Ack::refused(reason)));
        }
        // The conversation's usage, this turn's included.
        let (before, calls_before) = self.setup.prior_usage;
        let spent = match outcome {
            Outcome::Result(r) => r.usage,
            Outcome::Failure(f) => f.usage,
        };
        let usage = mapping::usage_with(
            before.plus(spent),
            calls_before.saturating_add(st.tool_calls),
        );
        let mut terminal = mapping::terminal(outcome, usage);
        if let Some((trace_id, content)) = &st.trace {
            mapping::with_trace(&mut terminal, trace_id, *content);
        }
        match outcome {
            // Exactly one final text block, and it is the answer.
            Outcome::Result(r) => self.set.answer(r.text.clone(), terminal),
            Outcome::Failure(_) => self.set.finish(terminal),
        }
    }

    fn ask(&self, question: &Question) -> FrontAsk {
        if !self.setup.elicit {
            return FrontAsk::Unavailable;
        }
        if matches!(question.kind, QuestionKind::Approve { .. })
            && self.setup.approvals.contains(&question.tool)
        {
            return FrontAsk::Settled(Asked::Answered(Answer::Approve {
                choice: ApproveChoice::Always,
            }));
        }
        let id = ksuid().to_string();
        let wait_ms = self.setup.window.as_millis() as u64;
        self.set.send(Reply::Question(wire::Question {
            question_id: id.clone(),
            tool_use_id: Some(question.call_id.clone()),
            wait_ms: Some(wait_ms),
            ask: mapping::ask(&question.kind),
        }));
        // The window is the engine's: it closes the question unless an `elicit.waiting` moves it.
        FrontAsk::Sent {
            question_id: id,
            window: Some(self.setup.window),
        }
    }
}

/// A front for turns recovered after a restart: their callers' inboxes are gone, so nothing is sent; the
/// journal gets the outcome, and a resend of the request is answered from it.
pub struct SilentFront;

impl TurnFront for SilentFront {
    fn accepted(&self, _queued: bool) {}
    fn event(&self, _event: TurnEvent) {}
    fn encode_outcome(&self, _outcome: &Outcome) -> Option<String> {
        None
    }
    fn deliver_outcome(&self, _outcome: &Outcome, _wire: Option<&str>) {}
}
