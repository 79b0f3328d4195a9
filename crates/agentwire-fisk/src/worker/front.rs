//! The fisk-ai side of one turn: the engine's events become `event.*` blocks, its questions
//! `elicit.request.*` with a window, its outcome the `result` or `error` that ends the reply set. A
//! question somebody else settles (through the turn API, or another sender on the elicit subject) is
//! told to the caller with an `event.warning` of kind [`WARNING_QUESTION_ANSWERED`], so a caller holding
//! it on screen takes it off.

use super::replyset::{ksuid, ReplySet};
use crate::mapping;
use crate::wire::{self, Ack, Block, Reply};
use agentwire_core::{
    Answer, ApproveChoice, Asked, ConversationId, Outcome, Question, QuestionKind, Refusal,
    RequestId, TurnEvent, Usage,
};
use agentwire_engine::StoredTurn;
use agentwire_engine::{Engine, FrontAsk, TurnFront};
use std::sync::{Mutex, Weak};
use std::time::{Duration, Instant};

/// The `event.warning` kind that tells the caller its open question was settled by somebody else: `name`
/// is the question's id, `params` who answered and, when the worker knows it, the answer as said back.
/// The spec has no message for this (the reply set is silent while the worker holds a question); a
/// warning is the event it lets a worker add, and a client that does not know the kind shows its fields.
pub const WARNING_QUESTION_ANSWERED: &str = "question_answered";

/// Who answered, in the warning, when the answer came through the daemon's turn API (the hub page, or a
/// client holding its HTTP token): the engine takes such an answer without saying what it was.
pub const ANSWERED_BY_TURN_API: &str = "the turn API (the hub)";

/// The most characters of an answer the warning says back: enough to recognise it (an option's label, the
/// start of a text); the whole of it is the run's business, and an input answer may be 4,096 characters.
pub(crate) const MAX_SAID_CHARS: usize = 200;

/// The question a turn has open on the wire, as this front follows it to tell the caller when somebody
/// else settles it.
struct Asking {
    id: String,
    /// When its window closes, as last set here: at or before the engine's own deadline, which the engine
    /// sets just after (so a question the engine closes at its deadline is past this one).
    closes_at: Instant,
    /// An `elicit.reply.*` on the run's own subject being given to the engine: its sender's name and the
    /// answer as said back.
    answering: Option<(String, String)>,
    /// The answer the engine took, as said back (whichever front gave it): what the warning says when
    /// the answer came from elsewhere.
    said: Option<String>,
}

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
    /// The `sender.name` of the request: its own answers on the elicit subject need no telling.
    caller: String,
    state: Mutex<State>,
    /// The question open on the wire. A lock of its own, never held while calling the engine: the engine
    /// calls [`TurnFront::ask`] with its own lock held, which takes this one.
    asking: Mutex<Option<Asking>>,
}

impl FiskFront {
    pub(crate) fn new(set: ReplySet, setup: TurnSetup, engine: Weak<Engine>, caller: &str) -> Self {
        FiskFront {
            set,
            setup,
            engine,
            caller: caller.to_string(),
            state: Mutex::new(State {
                acked: false,
                iteration: 0,
                tool_calls: 0,
                trace: None,
            }),
            asking: Mutex::new(None),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn asking(&self) -> std::sync::MutexGuard<'_, Option<Asking>> {
        self.asking.lock().unwrap_or_else(|p| p.into_inner())
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
        // The engine keeps the window; this front's copy moves first, so it stays at or before the engine's.
        if let Some(a) = self.asking().as_mut().filter(|a| a.id == question_id) {
            a.closes_at = Instant::now() + self.setup.window;
        }
        self.engine.upgrade().is_some_and(|e| {
            e.extend_question(&self.setup.request_id, question_id, self.setup.window)
        })
    }

    /// The request id this front serves.
    pub(crate) fn request_id(&self) -> &RequestId {
        &self.setup.request_id
    }

    /// An `elicit.reply.*` from `sender` saying `answer` is about to be given to the engine for
    /// `question_id`; `None` once the engine did not take it. (An answer through the turn API landing in
    /// between is then told as this one: the caller learns the question is gone either way.)
    pub(crate) fn answering(&self, question_id: &str, by: Option<(&str, String)>) {
        if let Some(a) = self.asking().as_mut().filter(|a| a.id == question_id) {
            a.answering = by.map(|(sender, answer)| (sender.to_string(), answer));
        }
    }

    /// The open question is settled: when somebody other than the caller settled it, the caller is told
    /// who, and what when this front knows. Nothing for the caller's own answer, a cancel (the terminal
    /// says it) or a window that ran out (the run goes on without the answer, as the spec says). At the
    /// turn's `ending` only an answer seen on the elicit subject is told: a question still open then went
    /// with the turn.
    fn settled(&self, question_id: &str, ending: bool) {
        let Some(asking) = self.asking().take_if(|a| a.id == question_id) else {
            return;
        };
        let (by, answer) = match asking.answering {
            Some((sender, _)) if sender == self.caller => return,
            Some((sender, answer)) => (format!("fisk-ai caller {sender}"), Some(answer)),
            None => {
                let answered = asking.said.is_some();
                if !answered && (ending || Instant::now() >= asking.closes_at || self.cancelling())
                {
                    return;
                }
                (ANSWERED_BY_TURN_API.to_string(), asking.said)
            }
        };
        self.set
            .event(answered_elsewhere(&asking.id, &by, answer.as_deref()));
    }

    /// Whether a cancel reached this turn (the engine closes its question with it).
    fn cancelling(&self) -> bool {
        self.engine.upgrade().is_some_and(|e| {
            e.live_phases().iter().any(|(id, phase)| {
                id == &self.setup.request_id
                    && matches!(
                        phase,
                        agentwire_core::TurnPhase::Running {
                            cancel_requested: true
                        } | agentwire_core::TurnPhase::Pending {
                            cancel_requested: true
                        }
                    )
            })
        })
    }

    /// The question this front still counts open, when the engine has closed it: the agent went on (an
    /// event) or the turn ended before [`TurnFront::question_closed`] came, so the caller is told first.
    fn settle_if_closed(&self, ending: bool) {
        let Some(id) = self.asking().as_ref().map(|a| a.id.clone()) else {
            return;
        };
        let open = self
            .engine
            .upgrade()
            .is_some_and(|e| e.is_waiting_on(&self.setup.request_id, &id));
        if !open {
            self.settled(&id, ending);
        }
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
        // The engine hands the answer to the agent before it tells this front: the agent's next event may
        // come first, and the caller hears of the question's end before it.
        self.settle_if_closed(false);
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
        self.settle_if_closed(true);
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
        *self.asking() = Some(Asking {
            id: id.clone(),
            closes_at: Instant::now() + self.setup.window,
            answering: None,
            said: None,
        });
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

    fn question_answered(&self, question_id: &str, said: &str) {
        if let Some(a) = self.asking().as_mut().filter(|a| a.id == question_id) {
            // An elicit reply on its way to the engine lost to another answer (the turn API's, taken in
            // between): it is not who answered, and the caller is told who was first.
            if a.answering
                .as_ref()
                .is_some_and(|(_, theirs)| theirs != said)
            {
                a.answering = None;
            }
            a.said = Some(said.to_string());
        }
    }

    fn question_closed(&self, question_id: &str) {
        self.settled(question_id, false);
    }
}

/// The warning that question `question_id` was answered `by` somebody else, with `answer` as said back
/// (cut to [`MAX_SAID_CHARS`]) when known.
fn answered_elsewhere(question_id: &str, by: &str, answer: Option<&str>) -> Block {
    let mut block = Block::warning(WARNING_QUESTION_ANSWERED);
    if let Block::Warning(w) = &mut block {
        w.name = Some(question_id.to_string());
        w.params = std::iter::once(by.to_string())
            .chain(answer.map(|a| a.chars().take(MAX_SAID_CHARS).collect()))
            .collect();
    }
    block
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_warning_names_the_question_who_answered_and_what_cut_to_its_bound() {
        let Block::Warning(w) = answered_elsewhere("q1", ANSWERED_BY_TURN_API, None) else {
            panic!("a warning")
        };
        assert_eq!(
            (w.kind.as_str(), w.name.as_deref(), w.params.as_slice()),
            (
                WARNING_QUESTION_ANSWERED,
                Some("q1"),
                [ANSWERED_BY_TURN_API.to_string()].as_slice()
            )
        );
        let long = "é".repeat(MAX_SAID_CHARS + 50);
        let Block::Warning(w) = answered_elsewhere("q2", "fisk-ai caller ops", Some(&long)) else {
            panic!("a warning")
        };
        assert_eq!(w.params[0], "fisk-ai caller ops");
        assert_eq!(w.params[1].chars().count(), MAX_SAID_CHARS);
    }
}
