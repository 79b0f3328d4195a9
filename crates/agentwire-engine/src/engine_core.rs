//! The engine's decisions, pure: which turns are live and whose they are, which submitted turn is
//! admitted (draining, the agent's capacity, its conversation), who may cancel a turn, which question each turn waits on (one at a time) and whether an answer fits it, when an
//! open question's window closes, how long a turn waits before it looks at its
//! conversation's claim again, how long a failed journal write waits before the next try, and when a
//! drain's grace is over. Grown from the [`TurnBook`], which it holds.
//!
//! Nothing here reads a clock or runs a timer: the driver (`engine.rs`) tells it what happened with
//! `handle_*(now)`, sleeps until [`EngineCore::poll_timeout`], calls [`EngineCore::handle_timeout`] and
//! acts on each [`EngineCore::poll_action`]. So its tests run on a virtual clock.

pub use agentwire_core::Backoff;
use agentwire_core::{
    Answer, CancelDecision, ConversationId, Question, RequestId, Submitted, TurnBook,
};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

/// First wait before writing again after the journal failed a write: short, so a passing fault (a
/// moment of full disk) costs little latency.
pub const RETRY_FIRST: Duration = Duration::from_millis(100);
/// Longest wait between tries: a journal that stays unwritable is probed this often, so a freed disk is
/// noticed within it.
pub const RETRY_MAX: Duration = Duration::from_secs(2);

/// How often a turn whose conversation runs a turn on another instance (a shared journal's claim) looks
/// again: a turn takes seconds, and a look is a read or two.
pub const CONVERSATION_CLAIM_POLL: Duration = Duration::from_millis(200);

/// Turns that may wait for the agent beyond those it runs at once ([`EngineCore::limit_running`]), across
/// every protocol that waits rather than refuses: past them a turn is refused with `capacity` (NIP-XX
/// `RATE_LIMIT`) and `AGENT_BUSY_RETRY_AFTER_SECS`.
pub const MAX_TURNS_WAITING_FOR_AGENT: usize = 64;

/// How a protocol wants its turns handled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TurnPolicy {
    /// Refuse a turn while another turn of its conversation lives (`SubmitReply::ConversationBusy`)
    /// instead of queueing it.
    pub exclusive: bool,
    /// A cancel asks the agent to park at its next boundary (it ends the turn itself, suspended with a
    /// checkpoint) instead of the engine dropping the turn at once.
    pub park_on_cancel: bool,
    /// Journal the turn's events with its outcome, so the conversation can be read back.
    pub keep_transcript: bool,
    /// When the agent already runs as many turns as it may ([`EngineCore::limit_running`]), refuse the turn
    /// (`capacity`) instead of letting it wait for a turn to end.
    pub refuse_when_full: bool,
    /// The front tells nobody a turn that starts at once was accepted: its peer first hears of it by the
    /// turn's first event, question or outcome (NIP-XX). The engine then journals the acceptance with
    /// [`Journal::accept_soon`](agentwire_store::Journal::accept_soon) and makes it durable before any of
    /// those goes out: the outcome's own durable write carries it, so a short turn waits for one disk
    /// sync instead of two. A front that acknowledges a turn on acceptance (a fisk-ai ack, an HTTP answer)
    /// leaves it `false`, and a turn that waits (queued) is made durable before the front is told.
    pub accepted_silently: bool,
}

/// What [`EngineCore::admit`] decided for a submitted turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Taken: registered in the book, to be journaled.
    New,
    /// The engine is draining for a shutdown.
    Draining,
    /// The agent runs `max` turns at once and as many wait as may: refused with `capacity`.
    AgentFull {
        /// The agent's limit.
        max: usize,
    },
    /// The request id is live already (a resend).
    Duplicate,
    /// Under an exclusive policy, another turn of the conversation lives.
    ConversationBusy,
    /// The conversation has as many turns waiting as it may.
    ConversationFull,
}

/// A waiting task's wake-up, made by [`EngineCore::handle_claim_busy`], [`EngineCore::handle_write_failed`]
/// or [`EngineCore::handle_wait`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WakeId(u64);

/// What the driver does when a timer is due.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    /// The question's window closed with no answer: close it (the agent is told `Unanswered`).
    CloseQuestion {
        /// The turn that asked.
        turn: RequestId,
        /// The question's id on the wire.
        question: String,
    },
    /// Wake the task waiting on this.
    Wake(WakeId),
    /// The drain's grace is over: the drain stops waiting.
    DrainGraceOver,
}

/// Waits between tries of something that failed for the journal's reasons: [`RETRY_FIRST`], doubling up
/// to [`RETRY_MAX`].
pub fn journal_backoff() -> Backoff {
    Backoff::new(RETRY_FIRST, RETRY_MAX)
}

/// How an answer meets the question it names ([`EngineCore::check_answer`]; `Engine::answer`'s reply).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerReply {
    /// The waiting turn took the answer.
    Taken,
    /// No question with that id is open on that turn (never asked, already answered, or its window closed).
    NotWaiting,
    /// The answer does not fit the question (a select option that was not offered, ...).
    DoesNotFit,
}

/// How a journal call failed, as the engine tells failures apart: the storage cannot write now (worth
/// waiting for), or a record itself is wrong (corrupt: no retry, on any instance, mends it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalFault {
    /// The storage could not write or answer (a full disk, an unreachable cluster, a closed writer).
    Unwritable,
    /// A record is not what the journal should hold.
    Corrupt,
}

/// What an exclusive turn's claim on its conversation decides ([`claim_verdict`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimVerdict {
    /// Claimed, or the journal has the turn (a resend, answered from it): the turn goes on.
    Go,
    /// Another turn of the conversation holds it and the journal does not know this one.
    ConversationBusy,
    /// A record is corrupt: the turn is refused for good (journaled and delivered), not left to retry.
    Corrupt,
    /// The journal cannot answer now: nothing is taken, and the front decides what its peer hears.
    Unavailable,
}

/// The verdict of a claim that was `claimed` (`Ok(true)`: taken; `Ok(false)`: another turn holds it) and,
/// when another holds it, of the journal's answer to whether it `known`s this turn (`Ok(true)` else).
pub fn claim_verdict(
    claimed: Result<bool, JournalFault>,
    known: Result<bool, JournalFault>,
) -> ClaimVerdict {
    match (claimed, known) {
        (Err(JournalFault::Corrupt), _) | (_, Err(JournalFault::Corrupt)) => ClaimVerdict::Corrupt,
        (Err(JournalFault::Unwritable), _) | (_, Err(JournalFault::Unwritable)) => {
            ClaimVerdict::Unavailable
        }
        (Ok(true), Ok(_)) | (Ok(false), Ok(true)) => ClaimVerdict::Go,
        (Ok(false), Ok(false)) => ClaimVerdict::ConversationBusy,
    }
}

/// A question a turn put to its requester and waits on.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenQuestion {
    /// Its id, as the front named it.
    pub id: String,
    /// What was asked.
    pub question: Question,
}

/// The engine's pure state: the turn book, the open questions, draining, and every timer.
#[derive(Default)]
pub struct EngineCore {
    /// Which turn of a conversation runs, queues or ends.
    pub(crate) book: TurnBook,
    /// The live turns (admitted, not yet left: waiting, running or ending), each with its requester.
    live: HashMap<RequestId, String>,
    /// The question each turn waits on: one at a time.
    questions: HashMap<RequestId, OpenQuestion>,
    draining: bool,
    drain_deadline: Option<Instant>,
    running_limit: Option<usize>,
    /// Timers by deadline; the sequence number keeps equal deadlines in the order they were set.
    timers: BTreeMap<(Instant, u64), Action>,
    /// Where each action's timer is, so that it can be moved or dropped.
    scheduled: HashMap<Action, (Instant, u64)>,
    seq: u64,
    due: VecDeque<Action>,
}

impl EngineCore {
    /// Lets the agent run at most `max` turns at once. Set once; a second call changes nothing.
    pub fn limit_running(&mut self, max: usize) {
        self.running_limit.get_or_insert(max.max(1));
    }

    /// The agent's limit of turns at once, if it has one.
    pub fn running_limit(&self) -> Option<usize> {
        self.running_limit
    }

    /// Whether the engine is draining for a shutdown.
    pub fn draining(&self) -> bool {
        self.draining
    }

    /// How many turns are live.
    pub fn live_turns(&self) -> usize {
        self.live.len()
    }

    /// How many live turns `requester` asked for.
    pub fn live_turns_of(&self, requester: &str) -> usize {
        self.live.values().filter(|r| *r == requester).count()
    }

    /// Whether turn `id` is live.
    pub fn is_live(&self, id: &RequestId) -> bool {
        self.live.contains_key(id)
    }

    /// Decides on turn `id` of `conversation`, submitted by `requester`: draining first, then the agent's
    /// capacity counted over the live turns (a resend of a live turn goes on to be answered as a
    /// duplicate), then the book. A new turn is live from here until [`EngineCore::handle_turn_left`].
    pub fn admit(
        &mut self,
        id: &RequestId,
        conversation: &ConversationId,
        policy: TurnPolicy,
        requester: &str,
    ) -> Admission {
        let admitted = self.decide(id, conversation, policy);
        if admitted == Admission::New {
            self.live.insert(id.clone(), requester.to_string());
        }
        admitted
    }

    /// Cancels turn `id` for `requester` (`None`: the operator, who may cancel any turn). Only the turn's
    /// own requester may; anyone else, or a turn that is not live, is [`CancelDecision::Ignored`].
    pub fn handle_cancel(&mut self, id: &RequestId, requester: Option<&str>) -> CancelDecision {
        match self.live.get(id) {
            Some(theirs) if requester.is_none_or(|r| r == theirs) => self.book.cancel(id),
            _ => CancelDecision::Ignored,
        }
    }

    fn decide(
        &mut self,
        id: &RequestId,
        conversation: &ConversationId,
        policy: TurnPolicy,
    ) -> Admission {
        let (live, already_live) = (self.live.len(), self.live.contains_key(id));
        if self.draining {
            return Admission::Draining;
        }
        if let Some(max) = self.running_limit {
            // Every live turn (running, or waiting for the agent or its conversation) counts.
            let bound = if policy.refuse_when_full {
                max
            } else {
                max + MAX_TURNS_WAITING_FOR_AGENT
            };
            if live >= bound && !already_live {
                return Admission::AgentFull { max };
            }
        }
        let submitted = if policy.exclusive {
            self.book.submit_exclusive(id.clone(), conversation.clone())
        } else {
            self.book.submit(id.clone(), conversation.clone())
        };
        match submitted {
            Submitted::New => Admission::New,
            Submitted::Duplicate(_) => Admission::Duplicate,
            Submitted::ConversationBusy => Admission::ConversationBusy,
            Submitted::ConversationFull => Admission::ConversationFull,
        }
    }

    /// Starts draining: no new turns; the drain waits for live ones until `grace` from `now` (an earlier
    /// drain's deadline stands if it is sooner).
    pub fn handle_drain(&mut self, grace: Duration, now: Instant) {
        self.draining = true;
        let at = now + grace;
        if self.drain_deadline.is_none_or(|d| at < d) {
            self.drain_deadline = Some(at);
            self.set(Action::DrainGraceOver, at);
        }
    }

    /// Whether a drain's grace is over at `now`.
    pub fn drain_grace_over(&self, now: Instant) -> bool {
        self.drain_deadline.is_some_and(|d| now >= d)
    }

    /// Whether turn `turn` may put a question to its requester now: one open at a time.
    pub fn may_ask(&self, turn: &RequestId) -> bool {
        !self.questions.contains_key(turn)
    }

    /// The question turn `turn` waits on.
    pub fn open_question(&self, turn: &RequestId) -> Option<&OpenQuestion> {
        self.questions.get(turn)
    }

    /// Turn `turn` put `question` (named `id` by its front) to its requester, open for `window` from `now`
    /// when it has one (else until answered or cancelled). Refused (`false`, nothing changes) while another
    /// question of the turn is open.
    pub fn handle_question_asked(
        &mut self,
        turn: &RequestId,
        id: &str,
        question: Question,
        window: Option<Duration>,
        now: Instant,
    ) -> bool {
        if !self.may_ask(turn) {
            return false;
        }
        let open = OpenQuestion {
            id: id.to_string(),
            question,
        };
        self.questions.insert(turn.clone(), open);
        if let Some(window) = window {
            self.set(close_question(turn, id), now + window);
        }
        true
    }

    /// Whether `answer` is one turn `turn` takes for question `question_id`: the question must be the one
    /// open, and the answer must fit it (an offered option, the kind's shape).
    pub fn check_answer(
        &self,
        turn: &RequestId,
        question_id: &str,
        answer: &Answer,
    ) -> AnswerReply {
        match self.questions.get(turn) {
            Some(q) if q.id == question_id => match answer.fits(&q.question.kind) {
                true => AnswerReply::Taken,
                false => AnswerReply::DoesNotFit,
            },
            _ => AnswerReply::NotWaiting,
        }
    }

    /// Restarts the window of an open question from `now`. Returns whether it is open with a window.
    pub fn handle_question_extended(
        &mut self,
        turn: &RequestId,
        question: &str,
        window: Duration,
        now: Instant,
    ) -> bool {
        let action = close_question(turn, question);
        if !self.scheduled.contains_key(&action) {
            return false;
        }
        self.set(action, now + window);
        true
    }

    /// Question `question` of turn `turn` is settled (answered, cancelled, or closed unanswered): it is no
    /// longer open, and its window is dropped. Returns it when it was the one open.
    pub fn handle_question_settled(
        &mut self,
        turn: &RequestId,
        question: &str,
    ) -> Option<OpenQuestion> {
        self.unset(&close_question(turn, question));
        match self.questions.get(turn) {
            Some(q) if q.id == question => self.questions.remove(turn),
            _ => None,
        }
    }

    /// Turn `turn` left the engine (ended, or forgotten as a resend): it is no longer live, and its
    /// question and any window of it go with it.
    pub fn handle_turn_left(&mut self, turn: &RequestId) {
        self.live.remove(turn);
        self.questions.remove(turn);
        let windows: Vec<Action> = self
            .scheduled
            .keys()
            .filter(|a| matches!(a, Action::CloseQuestion { turn: t, .. } if t == turn))
            .cloned()
            .collect();
        for a in windows {
            self.unset(&a);
        }
    }

    /// A turn found its conversation held by another turn: it looks again [`CONVERSATION_CLAIM_POLL`]
    /// from `now`, woken by the returned id.
    pub fn handle_claim_busy(&mut self, now: Instant) -> WakeId {
        self.handle_wait(CONVERSATION_CLAIM_POLL, now)
    }

    /// A journal write (or probe) failed for the journal's reasons: the next try is after `backoff`'s wait
    /// from `now`, woken by the returned id.
    pub fn handle_write_failed(&mut self, backoff: &mut Backoff, now: Instant) -> WakeId {
        let wait = backoff.take();
        self.handle_wait(wait, now)
    }

    /// A wake-up `wait` from `now`.
    pub fn handle_wait(&mut self, wait: Duration, now: Instant) -> WakeId {
        self.seq += 1;
        let id = WakeId(self.seq);
        self.set(Action::Wake(id), now + wait);
        id
    }

    /// The task waiting on `id` stopped waiting (it was cancelled): its timer goes.
    pub fn handle_wake_dropped(&mut self, id: WakeId) {
        self.unset(&Action::Wake(id));
    }

    /// The next deadline, if any timer is set: the driver sleeps until then (or until told of a change).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.keys().next().map(|(at, _)| *at)
    }

    /// Moves every timer due at `now` to the actions, in deadline order.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(entry) = self.timers.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let action = entry.remove();
            self.scheduled.remove(&action);
            self.due.push_back(action);
        }
    }

    /// The next thing to do, if a timer fell due.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.due.pop_front()
    }

    fn set(&mut self, action: Action, at: Instant) {
        self.unset(&action);
        self.seq += 1;
        let key = (at, self.seq);
        self.timers.insert(key, action.clone());
        self.scheduled.insert(action, key);
    }

    fn unset(&mut self, action: &Action) {
        if let Some(key) = self.scheduled.remove(action) {
            self.timers.remove(&key);
        }
    }
}

fn close_question(turn: &RequestId, question: &str) -> Action {
    Action::CloseQuestion {
        turn: turn.clone(),
        question: question.to_string(),
    }
}
