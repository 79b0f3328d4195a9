//! The async driver around the engine's pure core ([`EngineCore`]): journal first, then act; one task per
//! running turn, and one timer task that sleeps until the core's next deadline and acts on what falls due.

use crate::agent::{Agent, AskQuestion, Asker, TurnContext, EVENT_QUEUE_DEPTH};
use crate::engine_core::{Action, Admission, Backoff, EngineCore, TurnPolicy, WakeId};
use crate::health::Health;
use agentwire_core::TurnInput;
use agentwire_core::{
    Answer, Asked, CancelDecision, ConversationId, Failure, Finished, Journaled, Outcome, Question,
    Refusal, RequestId, TurnEvent, TurnFailure,
};
use agentwire_store::{
    Accepted, Claim, ConversationView, Finish, Journal, NewTurn, StoreError, StoredTurn,
    LOCAL_OWNER,
};
use futures_util::future::BoxFuture;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};

use agentwire_core::now_secs;

/// Most events of one turn kept for its transcript. A turn that streams more keeps its first ones and a
/// marker: the transcript is for reading a conversation back, and the outcome holds the full answer.
pub const MAX_TRANSCRIPT_EVENTS: usize = 4096;

/// The `retry_after` of a turn refused because the agent is full: long enough for a model turn or two.
pub const AGENT_BUSY_RETRY_AFTER_SECS: u64 = 5;

/// How a front took a question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrontAsk {
    /// Sent to the requester under this id; the answer comes through [`Engine::answer`]. With a window,
    /// the engine closes the question when it ends unanswered ([`Engine::extend_question`] moves it; a
    /// front may also close it itself with [`Engine::question_expired`]).
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

/// The answer to [`Engine::answer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerReply {
    /// The waiting turn took the answer.
    Taken,
    /// No question with that id is open on that turn (never asked, already answered, or its window closed).
    NotWaiting,
    /// The answer does not fit the question (a select option that was not offered, ...).
    DoesNotFit,
}

/// The retry hint given with a turn a crash cut off: long enough for the daemon to be back, short enough
/// that a client retrying soon gets an answer.
pub const INTERRUPTED_RETRY_AFTER_SECS: u64 = 5;

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
    /// The question is settled (answered, expired or cancelled): stop holding it open.
    fn question_closed(&self, _question_id: &str) {}
    /// The request id ran before (a resend): answer it from the journal's record, which is not run again.
    /// The record may have no outcome yet (a turn a crash cut off, which recovery ends). Must not block.
    fn replay(&self, _stored: &StoredTurn) {}
}

/// A validated request, ready for the engine.
pub struct Submission {
    /// The turn's input.
    pub input: TurnInput,
    /// Which front (`nipxx`, ...).
    pub protocol: String,
    /// Who asked (a pubkey, a NATS identity): only they may cancel.
    pub requester: String,
    /// Where the outcome goes, journaled for restarts.
    pub route: serde_json::Value,
    /// The front that serves this turn.
    pub front: Arc<dyn TurnFront>,
    /// How the protocol wants the turn handled.
    pub policy: TurnPolicy,
    /// The conversation's protocol state to journal with the turn, in the same write.
    pub conversation_meta: Option<serde_json::Value>,
    /// The capacity slot taken for it ([`Engine::take_slot`]), kept until the turn ends.
    pub slot: Option<crate::Slot>,
}

/// The answer to [`Engine::submit`].
#[derive(Debug, Clone, PartialEq)]
pub enum SubmitReply {
    /// Journaled; running now or queued behind its conversation.
    Accepted {
        /// Whether it waits behind another turn.
        queued: bool,
    },
    /// The request id is live already: a resend, not run again.
    DuplicateLive,
    /// The journal has this request id: a resend, answered from the journal through
    /// [`TurnFront::replay`].
    DuplicateStored(Box<StoredTurn>),
    /// Refused before acceptance; the failure was journaled and delivered through the front.
    Refused(Failure),
    /// Under an exclusive policy, another turn of the conversation lives. Nothing was journaled or sent:
    /// the front answers it.
    ConversationBusy,
    /// The journal cannot be written, so the turn was not taken: nothing was journaled or sent, and the
    /// front decides (NIP-XX leaves the prompt on the relay for later; fisk-ai refuses it). The text says
    /// why, for logs.
    JournalUnavailable(String),
    /// The engine is draining for a shutdown and takes no new turns. Nothing was journaled or sent.
    Draining,
}

/// The answer to [`Engine::cancel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReply {
    /// The turn will end (or has ended) as cancelled because of this request.
    Cancelling,
    /// Nothing to do: asked before, already ended, unknown, or not the requester's turn.
    Ignored,
}

struct LiveTurn {
    requester: String,
    input: TurnInput,
    front: Arc<dyn TurnFront>,
    cancel: watch::Sender<bool>,
    /// Someone has taken the job of journaling and delivering the decided outcome.
    delivering: bool,
    policy: TurnPolicy,
    /// The question the turn waits on, if any (one at a time); its window is the core's.
    question: Option<OpenQuestion>,
    /// Its capacity slot, freed when the turn leaves the live table.
    _slot: Option<crate::Slot>,
}

struct OpenQuestion {
    id: String,
    question: Question,
    reply: oneshot::Sender<Asked>,
}

#[derive(Default)]
struct State {
    /// The decisions: the book, draining, every timer.
    core: EngineCore,
    live: HashMap<RequestId, LiveTurn>,
    /// The tasks waiting on a wake-up of the core, woken when it falls due.
    wakers: HashMap<WakeId, oneshot::Sender<()>>,
}

/// The driver's clock: tokio's, so that a test on paused time runs the engine's timers too.
fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

/// The engine. Cheap to share (`Arc`).
pub struct Engine {
    /// Itself, for the tasks it spawns (the timer task holds it weakly and ends with it).
    me: Weak<Engine>,
    state: Mutex<State>,
    journal: Arc<dyn Journal>,
    agent: Arc<dyn Agent>,
    /// The agent's name (its card's), recorded with each turn: its history is its own turns only.
    agent_name: String,
    /// The instance name recorded with each turn: recovery ends only this owner's.
    owner: String,
    /// Where every turn's progress is published for watchers (shared by a daemon's engines).
    hub: Arc<crate::WatchHub>,
    health: Health,
    slots: crate::slots::Slots,
    /// Outcomes decided and journaled whose turn has left the live table but which are not yet handed to
    /// their front: a drain waits for them too.
    delivering: std::sync::atomic::AtomicUsize,
    /// Told whenever a live turn ends, for [`Engine::drain`].
    ended: tokio::sync::Notify,
    /// How many turns the agent runs at once, and the permits for them, once limited.
    running: std::sync::OnceLock<(usize, Arc<tokio::sync::Semaphore>)>,
    /// Told when the core's timers change, so the timer task sleeps until the right deadline.
    timers_changed: Arc<tokio::sync::Notify>,
    /// Whether the timer task runs (started with the first timer).
    timer_task: std::sync::OnceLock<()>,
}

impl Drop for Engine {
    fn drop(&mut self) {
        // The timer task finds the engine gone and ends.
        self.timers_changed.notify_one();
    }
}

impl Engine {
    /// An engine over a journal and an agent, owning the turns it journals as [`LOCAL_OWNER`].
    pub fn new(journal: Arc<dyn Journal>, agent: Arc<dyn Agent>) -> Arc<Engine> {
        Self::with_owner(journal, agent, LOCAL_OWNER)
    }

    /// An engine whose turns are journaled as `owner`'s (an instance's name on a shared journal).
    pub fn with_owner(
        journal: Arc<dyn Journal>,
        agent: Arc<dyn Agent>,
        owner: impl Into<String>,
    ) -> Arc<Engine> {
        Self::with_hub(journal, agent, owner, crate::WatchHub::new())
    }

    /// Like [`with_owner`](Self::with_owner), publishing its turns to `hub` (one hub for every engine of a
    /// daemon, so that one watcher sees every agent's turns).
    pub fn with_hub(
        journal: Arc<dyn Journal>,
        agent: Arc<dyn Agent>,
        owner: impl Into<String>,
        hub: Arc<crate::WatchHub>,
    ) -> Arc<Engine> {
        Arc::new_cyclic(|me| Engine {
            me: me.clone(),
            hub,
            state: Mutex::new(State::default()),
            journal,
            agent_name: agent.card().name,
            agent,
            owner: owner.into(),
            health: Health::default(),
            slots: Default::default(),
            delivering: std::sync::atomic::AtomicUsize::new(0),
            ended: tokio::sync::Notify::new(),
            running: std::sync::OnceLock::new(),
            timers_changed: Arc::new(tokio::sync::Notify::new()),
            timer_task: std::sync::OnceLock::new(),
        })
    }

    /// Tells the timer task that the core's timers changed (starting it the first time).
    fn timers_changed(&self) {
        self.timer_task.get_or_init(|| {
            tokio::spawn(drive_timers(self.me.clone(), self.timers_changed.clone()));
        });
        self.timers_changed.notify_one();
    }

    /// Acts on every timer of the core due now: closes expired questions, wakes waiting tasks, ends a
    /// drain's wait.
    fn fire_due_timers(&self) {
        let (mut closes, mut drain_over) = (Vec::new(), false);
        {
            let mut st = self.lock();
            st.core.handle_timeout(now());
            while let Some(action) = st.core.poll_action() {
                match action {
                    Action::CloseQuestion { turn, question } => closes.push((turn, question)),
                    Action::Wake(id) => {
                        if let Some(waker) = st.wakers.remove(&id) {
                            let _ = waker.send(());
                        }
                    }
                    Action::DrainGraceOver => drain_over = true,
                }
            }
        }
        for (turn, question) in closes.drain(..) {
            self.question_expired(&turn, &question);
        }
        if drain_over {
            self.ended.notify_waiters();
        }
    }

    /// Waits for the wake-up `schedule` sets in the core. Dropping the future drops its timer.
    async fn wait_for(&self, schedule: impl FnOnce(&mut EngineCore, std::time::Instant) -> WakeId) {
        let (id, woken) = {
            let mut st = self.lock();
            let id = schedule(&mut st.core, now());
            let (tx, rx) = oneshot::channel();
            st.wakers.insert(id, tx);
            (id, rx)
        };
        self.timers_changed();
        struct Unwait<'a>(&'a Engine, WakeId);
        impl Drop for Unwait<'_> {
            fn drop(&mut self) {
                let mut st = self.0.lock();
                st.wakers.remove(&self.1);
                st.core.handle_wake_dropped(self.1);
            }
        }
        let _unwait = Unwait(self, id);
        let _ = woken.await;
    }

    /// Lets the agent run at most `max` turns at once (an agent's `max_concurrent_turns`): more wait, up to
    /// [`MAX_TURNS_WAITING_FOR_AGENT`], or are refused under a [`TurnPolicy::refuse_when_full`] policy. Set
    /// once, before the first turn; a second call changes nothing.
    pub fn limit_running(&self, max: usize) {
        let max = max.max(1);
        if self
            .running
            .set((max, Arc::new(tokio::sync::Semaphore::new(max))))
            .is_ok()
        {
            self.lock().core.limit_running(max);
        }
    }

    /// The agent this engine runs.
    pub fn agent(&self) -> &Arc<dyn Agent> {
        &self.agent
    }

    /// Whether the journal can be written now: while it cannot, the engine takes no new turns and holds
    /// decided outcomes back until they are durable.
    pub fn journal_writable(&self) -> bool {
        self.health.writable()
    }

    /// Watches [`journal_writable`](Self::journal_writable) as it changes.
    pub fn watch_journal_writable(&self) -> watch::Receiver<bool> {
        self.health.watch()
    }

    /// The first step of admitting a request of a protocol with `slots` runs at a time: refuses it while
    /// draining, at capacity, or when its request id is in flight (in that order), else takes a slot
    /// for it. Hand the slot to [`submit`](Self::submit) in the [`Submission`]; dropping it instead (a
    /// refusal) frees it.
    ///
    /// With `exclusive`, a conversation with a live turn is refused too (after the others), as fisk-ai
    /// orders its refusals; [`submit`](Self::submit) checks it again atomically under the same policy.
    pub fn take_slot(
        &self,
        protocol: &str,
        slots: usize,
        request: &RequestId,
        exclusive: Option<&ConversationId>,
    ) -> Result<crate::Slot, crate::SlotRefusal> {
        let st = self.lock();
        if st.core.draining() {
            return Err(crate::SlotRefusal::Draining);
        }
        let live = st.live.contains_key(request);
        let slot = crate::slots::take(&self.slots, protocol, slots, request, live)?;
        if exclusive.is_some_and(|c| st.core.book.is_busy(c)) {
            return Err(crate::SlotRefusal::ConversationBusy);
        }
        Ok(slot)
    }

    /// Admits a request of a protocol with `slots` runs at a time, in one step: refused while draining; a
    /// request of `conversation` that the journal holds is a resend ([`Admitted::Resend`], to answer from
    /// the journal whatever runs here now, so no refusal is given for a turn whose terminal the caller may
    /// have); else [`take_slot`](Self::take_slot) decides (capacity, duplicate, and with `exclusive` a
    /// busy conversation). The read is the journal's own (a shared journal's leader).
    pub async fn admit(
        &self,
        protocol: &str,
        slots: usize,
        request: &RequestId,
        conversation: Option<&ConversationId>,
        exclusive: bool,
    ) -> Result<crate::Admitted, crate::AdmitError> {
        if self.draining() {
            return Err(crate::AdmitError::Slot(crate::SlotRefusal::Draining));
        }
        if let Some(conversation) = conversation {
            match self.journal.lookup(request.clone()).await {
                Ok(Some(stored)) if &stored.conversation_id == conversation => {
                    return Ok(crate::Admitted::Resend(Box::new(stored)))
                }
                Ok(_) => {}
                Err(e) => return Err(crate::AdmitError::Journal(e)),
            }
        }
        let busy = conversation.filter(|_| exclusive);
        self.take_slot(protocol, slots, request, busy)
            .map(crate::Admitted::New)
            .map_err(crate::AdmitError::Slot)
    }

    /// How many capacity slots of `protocol` are taken.
    pub fn slots_in_use(&self, protocol: &str) -> usize {
        crate::slots::in_use(&self.slots, protocol)
    }

    /// Whether the engine is draining for a shutdown.
    pub fn draining(&self) -> bool {
        self.lock().core.draining()
    }

    /// The journal's record of a request id.
    pub async fn lookup(&self, id: &RequestId) -> Result<Option<StoredTurn>, StoreError> {
        self.journal.lookup(id.clone()).await
    }

    /// A conversation's newest journaled turn, if it has any: one bounded read however long it is.
    pub async fn last_turn(
        &self,
        conversation: &ConversationId,
    ) -> Result<Option<StoredTurn>, StoreError> {
        let view = self.journal.recent_turns(conversation.clone(), 1).await?;
        Ok(view.turns.into_iter().next_back().map(|t| t.turn))
    }

    /// A conversation's journaled turns, oldest first; their transcripts only when asked for.
    pub async fn conversation(
        &self,
        conversation: &ConversationId,
        transcripts: bool,
    ) -> Result<ConversationView, StoreError> {
        self.journal
            .conversation(conversation.clone(), transcripts)
            .await
    }

    /// A conversation's protocol-specific state, if any was set.
    pub async fn conversation_meta(
        &self,
        conversation: &ConversationId,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        self.journal.conversation_meta(conversation.clone()).await
    }

    /// Durably sets a conversation's protocol-specific state.
    pub async fn put_conversation_meta(
        &self,
        conversation: &ConversationId,
        protocol: &str,
        meta: &serde_json::Value,
    ) -> Result<(), StoreError> {
        let r = self
            .journal
            .put_conversation_meta(
                conversation.clone(),
                protocol.to_string(),
                meta.clone(),
                now_secs(),
            )
            .await;
        self.note_write(&r);
        r
    }

    /// Stops the journal (no write commits any more): for tests that simulate a crash in-process.
    pub fn halt_journal(&self) {
        self.journal.halt();
    }

    /// A claim that failed for the journal's reasons marks it unwritable, as a failed write does. A claim
    /// that succeeded says nothing: in a journal one daemon has to itself it writes nothing.
    fn note_claim(&self, r: &Result<Claim, StoreError>) {
        if let Err(e) = r {
            self.note_write::<()>(&Err(e.clone()));
        }
    }

    /// Records how a write went: a failure that says the journal cannot write marks it unwritable (and
    /// starts probing it); a success marks it writable.
    fn note_write<T>(&self, r: &Result<T, StoreError>) {
        match r {
            Ok(_) => {
                self.health.set_writable(true);
            }
            Err(e) if e.is_unwritable() => {
                if self.health.set_writable(false) {
                    tracing::error!(error = %e, "the journal cannot be written: taking no new turns until it can");
                    self.spawn_probe();
                }
            }
            Err(_) => {}
        }
    }

    /// Probes the journal with backoff until a write succeeds again.
    fn spawn_probe(&self) {
        let Some(this) = self.me.upgrade() else {
            return;
        };
        tokio::spawn(async move {
            let mut backoff = Backoff::default();
            while !this.health.writable() {
                this.wait_for(|core, now| core.handle_write_failed(&mut backoff, now))
                    .await;
                match this.journal.probe().await {
                    Ok(()) => {
                        tracing::info!("the journal can be written again");
                        this.health.set_writable(true);
                    }
                    Err(e) => tracing::debug!(error = %e, "the journal still cannot be written"),
                }
            }
        });
    }

    /// Journals an outcome, retrying with backoff until it is durable, and returns what to deliver: this
    /// outcome and wire form, or the one the journal already holds (the first outcome wins, and the wire
    /// must never contradict the journal).
    async fn finish_durably(&self, finish: Finish) -> (Outcome, Option<String>) {
        let (outcome, wire, _) = self.finish_durably_or_found(finish).await;
        (outcome, wire)
    }

    /// Like [`finish_durably`](Self::finish_durably); also says whether the outcome is this one (`true`)
    /// or one the journal held already (`false`: somebody else decided and delivered it).
    async fn finish_durably_or_found(&self, finish: Finish) -> (Outcome, Option<String>, bool) {
        let mut backoff = Backoff::default();
        loop {
            let r = self.journal.finish(finish.clone()).await;
            self.note_write(&r);
            match r {
                Ok(()) => return (finish.outcome, finish.wire, true),
                Err(StoreError::AlreadyEnded(_)) => {
                    match self.journal.lookup(finish.request_id.clone()).await {
                        Ok(Some(StoredTurn {
                            outcome: Some(o),
                            wire,
                            ..
                        })) => return (o, wire, false),
                        Ok(_) => return (finish.outcome, finish.wire, true),
                        Err(e) => {
                            tracing::warn!(request = %finish.request_id, error = %e, "could not read a journaled outcome; retrying")
                        }
                    }
                }
                Err(e) if e.is_unwritable() => {
                    tracing::warn!(request = %finish.request_id, error = %e, retry_in = ?backoff.peek(), "the outcome is not durable yet; holding it back");
                }
                Err(e) => {
                    // The journal refuses this outcome for good (it never knew the turn): nothing a restart
                    // could contradict, so it goes out.
                    tracing::error!(request = %finish.request_id, error = %e, "journal refused an outcome");
                    return (finish.outcome, finish.wire, true);
                }
            }
            self.wait_for(|core, now| core.handle_write_failed(&mut backoff, now))
                .await;
        }
    }

    /// Stops taking new turns and waits until every live turn has ended or `grace` has passed. Returns
    /// how many turns were still live at the end.
    pub async fn drain(&self, grace: Duration) -> usize {
        self.lock().core.handle_drain(grace, now());
        self.timers_changed();
        let left = || {
            let live = self.lock().core.book.live();
            live + self.delivering.load(std::sync::atomic::Ordering::SeqCst)
        };
        loop {
            let notified = self.ended.notified();
            if left() == 0 {
                return 0;
            }
            if self.lock().core.drain_grace_over(now()) {
                return left();
            }
            notified.await;
        }
    }

    /// Number of live (pending, queued, running or ending) turns.
    pub fn live_turns(&self) -> usize {
        self.lock().core.book.live()
    }

    /// Whether a turn of `conversation` is live here.
    pub fn conversation_busy(&self, conversation: &ConversationId) -> bool {
        self.lock().core.book.is_busy(conversation)
    }

    /// The live turns and their phases, for diagnostics.
    pub fn live_phases(&self) -> Vec<(RequestId, agentwire_core::TurnPhase)> {
        let st = self.lock();
        st.live
            .keys()
            .filter_map(|id| st.core.book.phase(id).map(|p| (id.clone(), p)))
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the book half-updated (each method is one step), so a
        // poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The agent's card.
    pub fn card(&self) -> crate::AgentCard {
        self.agent.card()
    }

    /// The hub this engine publishes its turns to.
    pub fn watch_hub(&self) -> &Arc<crate::WatchHub> {
        &self.hub
    }

    /// `sub` with its front beside the hub: what the turn does reaches watchers too.
    fn watched(&self, mut sub: Submission) -> Submission {
        let accepted = crate::WatchKind::Accepted {
            queued: false,
            protocol: sub.protocol.clone(),
            agent: self.agent_name.clone(),
            conversation: sub.input.conversation_id.clone(),
            prompt: crate::watch::first_line(&sub.input.message),
        };
        sub.front = Arc::new(crate::watch::WatchedFront {
            inner: sub.front,
            hub: self.hub.clone(),
            turn: sub.input.request_id.clone(),
            accepted,
        });
        sub
    }

    /// Submits a validated request: journals it, then runs or queues it.
    ///
    /// The turn is registered (and a live duplicate recognised) before this returns, so a cancel handled
    /// after this call finds it even while the returned future is still journaling it.
    pub fn submit(self: &Arc<Self>, sub: Submission) -> BoxFuture<'static, SubmitReply> {
        let sub = self.watched(sub);
        self.submit_watched(sub)
    }

    fn submit_watched(self: &Arc<Self>, mut sub: Submission) -> BoxFuture<'static, SubmitReply> {
        let id = sub.input.request_id.clone();
        let conv = sub.input.conversation_id.clone();
        let (cancel_tx, _) = watch::channel(false);
        if !self.health.writable() {
            return Box::pin(async {
                SubmitReply::JournalUnavailable("the journal cannot be written".into())
            });
        }
        {
            let mut st = self.lock();
            let live = st.live.len();
            let already_live = st.live.contains_key(&id);
            match st.core.admit(&id, &conv, sub.policy, live, already_live) {
                Admission::New => {}
                Admission::Draining => return Box::pin(async { SubmitReply::Draining }),
                Admission::Duplicate => return Box::pin(async { SubmitReply::DuplicateLive }),
                Admission::ConversationBusy => {
                    return Box::pin(async { SubmitReply::ConversationBusy })
                }
                Admission::AgentFull { max } => {
                    drop(st);
                    let f = Failure::new(
                        Refusal::Capacity,
                        format!(
                            "the agent runs {max} turns at a time and is full; try again shortly"
                        ),
                    )
                    .retry_after(AGENT_BUSY_RETRY_AFTER_SECS);
                    let this = self.clone();
                    return Box::pin(async move { this.refuse_watched(sub, f).await });
                }
                Admission::ConversationFull => {
                    drop(st);
                    let f = Failure::new(
                        Refusal::SessionLimit,
                        format!(
                            "conversation has {} turns waiting; wait for them to end",
                            agentwire_core::MAX_QUEUED_TURNS_PER_CONVERSATION
                        ),
                    )
                    .retry_after(10);
                    let this = self.clone();
                    return Box::pin(async move { this.refuse_watched(sub, f).await });
                }
            }
            st.live.insert(
                id.clone(),
                LiveTurn {
                    requester: sub.requester.clone(),
                    input: sub.input.clone(),
                    front: sub.front.clone(),
                    cancel: cancel_tx,
                    delivering: false,
                    policy: sub.policy,
                    question: None,
                    _slot: sub.slot.take(),
                },
            );
        }
        let this = self.clone();
        Box::pin(async move { this.journal_and_start(sub, id).await })
    }

    /// Drops a turn the journal did not take as new (a resend, or a refused write): out of the live table
    /// and the book, and its conversation's next turn starts.
    fn forget(self: &Arc<Self>, id: &RequestId) {
        let next = {
            let mut st = self.lock();
            st.live.remove(id);
            st.core.handle_turn_left(id);
            st.core.book.forget(id)
        };
        self.ended.notify_waiters();
        if let Some(next) = next {
            self.start(next);
        }
    }

    async fn journal_and_start(self: Arc<Self>, sub: Submission, id: RequestId) -> SubmitReply {
        if sub.policy.exclusive {
            // Across instances too: a shared journal knows whether another instance runs a turn of this
            // conversation. A resend of a request the journal knows is answered from it, not refused.
            let claim = self
                .journal
                .claim(sub.input.conversation_id.clone(), id.clone())
                .await;
            self.note_claim(&claim);
            let known = match &claim {
                Ok(Claim::Busy(_)) => self.journal.lookup(id.clone()).await.map(|t| t.is_some()),
                _ => Ok(true),
            };
            match (claim, known) {
                (Ok(_), Ok(true)) => {}
                (Ok(_), Ok(false)) => {
                    self.forget(&id);
                    return SubmitReply::ConversationBusy;
                }
                // A corrupt record stays corrupt however often it is asked, on any instance: the turn is not
                // taken (a refusal journaled and delivered), rather than refused as if the journal might take
                // it soon.
                (Err(e), _) | (_, Err(e)) if !e.is_unwritable() => {
                    tracing::error!(request = %id, conversation = %sub.input.conversation_id, error = %e, "the journal holds a corrupt record for this turn or its conversation");
                    self.forget(&id);
                    let failure = Failure::new(
                        Refusal::TurnNotTaken,
                        "the journal holds a corrupt record for this turn or its conversation; an operator has to remove it",
                    );
                    return self.refuse_watched(sub, failure).await;
                }
                (Err(e), _) | (_, Err(e)) => {
                    tracing::error!(request = %id, error = %e, "journal could not claim a conversation");
                    self.forget(&id);
                    return SubmitReply::JournalUnavailable(e.to_string());
                }
            }
        }
        let accepted = self.journal.accept(self.new_turn(&sub)).await;
        self.note_write(&accepted);
        match accepted {
            Ok(Accepted::New) => {}
            Ok(Accepted::Existing(stored)) => {
                self.forget(&id);
                return self.answer_stored(&sub, stored).await;
            }
            Err(e) => {
                // Not journaled, so not taken: nothing goes on the wire (an answer now could be contradicted
                // by the same request served later), and the front decides what its peer is told.
                tracing::error!(request = %id, error = %e, "journal refused a turn");
                self.forget(&id);
                return SubmitReply::JournalUnavailable(e.to_string());
            }
        }
        let next = self.lock().core.book.journaled(&id);
        match next {
            Journaled::Start => {
                // The run is spawned before the front is told and begins after. Spawned after, it would
                // take the runtime's next slot ahead of the task the front just woke (the one that sends
                // a fisk-ai ack), and the acknowledgement would wait for the agent.
                let go = self.start_held(id);
                sub.front.accepted(false);
                let _ = go.send(());
                SubmitReply::Accepted { queued: false }
            }
            Journaled::Queued => {
                sub.front.accepted(true);
                SubmitReply::Accepted { queued: true }
            }
            Journaled::EndCancelled => {
                let f = Failure::new(TurnFailure::Cancelled, "cancelled before it started");
                self.record_and_deliver(&id, Outcome::Failure(f)).await;
                SubmitReply::Accepted { queued: false }
            }
            Journaled::Unknown => SubmitReply::DuplicateLive,
        }
    }

    /// Answers a request the journal already holds as `stored` (a resend, found by [`admit`](Self::admit))
    /// from the journal, without taking a place in its conversation or a capacity slot: a resend of a
    /// finished turn gets its journaled terminal whatever runs here now, and holds up no other turn of the
    /// conversation while it is answered.
    pub async fn answer_resend(
        self: &Arc<Self>,
        sub: Submission,
        stored: Box<StoredTurn>,
    ) -> SubmitReply {
        // Not published to watchers: the turn was, when it ran.
        self.answer_stored(&sub, stored).await
    }

    /// Answers a request the journal holds as `stored` (not live here): its journaled outcome, the refusal a
    /// request still in flight gets, or, for a turn of this instance a crash cut off, its one ending.
    async fn answer_stored(
        self: &Arc<Self>,
        sub: &Submission,
        stored: Box<StoredTurn>,
    ) -> SubmitReply {
        let id = stored.request_id.clone();
        let live_here = self.lock().live.contains_key(&id);
        if stored.outcome.is_none() && stored.owner == self.owner && !live_here {
            // A turn of ours that a crash cut off, sent again before the recovery pass reached it (which
            // skips turns live here, as this one may have been for a moment): it ends here, once, when the
            // journal can take its outcome (else the recovery pass ends it later).
            if !self.health.writable() {
                return SubmitReply::JournalUnavailable("the journal cannot be written".into());
            }
            let outcome = interrupted();
            let wire = sub.front.encode_outcome(&outcome);
            let finish = Finish::new(id, outcome, now_secs()).wire(wire);
            let (outcome, wire) = self.finish_durably(finish).await;
            sub.front.deliver_outcome(&outcome, wire.as_deref());
        } else {
            sub.front.replay(&stored);
        }
        SubmitReply::DuplicateStored(stored)
    }

    /// Refuses a request before it runs (bad input, policy): the refusal is journaled under the request id,
    /// so a resend gets the same answer without being judged again, then delivered.
    pub async fn refuse(self: &Arc<Self>, sub: Submission, failure: Failure) -> SubmitReply {
        let sub = self.watched(sub);
        self.refuse_watched(sub, failure).await
    }

    async fn refuse_watched(self: &Arc<Self>, sub: Submission, failure: Failure) -> SubmitReply {
        if !self.health.writable() {
            return SubmitReply::JournalUnavailable("the journal cannot be written".into());
        }
        let id = sub.input.request_id.clone();
        let accepted = self.journal.accept(self.new_turn(&sub)).await;
        self.note_write(&accepted);
        match accepted {
            Ok(Accepted::Existing(stored)) => {
                sub.front.replay(&stored);
                SubmitReply::DuplicateStored(stored)
            }
            Ok(Accepted::New) => {
                let outcome = Outcome::Failure(failure.clone());
                let wire = sub.front.encode_outcome(&outcome);
                let (outcome, wire) = self
                    .finish_durably(Finish::new(id, outcome, now_secs()).wire(wire))
                    .await;
                sub.front.deliver_outcome(&outcome, wire.as_deref());
                SubmitReply::Refused(failure)
            }
            Err(e) => {
                tracing::error!(request = %id, error = %e, "journal refused a refusal");
                SubmitReply::JournalUnavailable(e.to_string())
            }
        }
    }

    /// Cancels a turn on behalf of `requester`. Idempotent; a no-op after the outcome.
    pub async fn cancel(self: &Arc<Self>, id: &RequestId, requester: &str) -> CancelReply {
        self.cancel_as(id, Some(requester)).await
    }

    /// Cancels turn `id` for the daemon's operator (the turn API's token holder), whoever asked for it.
    pub async fn cancel_by_operator(self: &Arc<Self>, id: &RequestId) -> CancelReply {
        self.cancel_as(id, None).await
    }

    /// Whether turn `id` is live in this engine.
    pub fn is_live(&self, id: &RequestId) -> bool {
        self.lock().live.contains_key(id)
    }

    async fn cancel_as(self: &Arc<Self>, id: &RequestId, requester: Option<&str>) -> CancelReply {
        let decision = {
            let mut st = self.lock();
            match st.live.get(id) {
                Some(t) if requester.is_none_or(|r| t.requester == r) => {}
                _ => return CancelReply::Ignored,
            }
            let d = st.core.book.cancel(id);
            let mut closed = None;
            if d == CancelDecision::SignalAgent {
                if let Some(t) = st.live.get_mut(id) {
                    // `send_replace` stores the value even while no receiver exists yet (the run task subscribes when it
                    // starts); `send` would drop it and the cancel would be lost.
                    t.cancel.send_replace(true);
                    // A cancel closes the question the turn waits on rather than leaving it blocked.
                    if let Some(q) = t.question.take() {
                        let _ = q.reply.send(Asked::Cancelled);
                        closed = Some((t.front.clone(), q.id));
                    }
                    if let Some((_, qid)) = &closed {
                        st.core.handle_question_settled(id, qid);
                    }
                }
            }
            drop(st);
            if let Some((front, qid)) = closed {
                front.question_closed(&qid);
            }
            d
        };
        match decision {
            CancelDecision::SignalAgent | CancelDecision::Deferred => CancelReply::Cancelling,
            CancelDecision::EndNow => {
                let f = Failure::new(TurnFailure::Cancelled, "cancelled while queued");
                self.record_and_deliver(id, Outcome::Failure(f)).await;
                CancelReply::Cancelling
            }
            CancelDecision::Ignored => CancelReply::Ignored,
        }
    }

    /// After a restart: ends every turn of this engine's owner that a crash cut off, whatever its protocol,
    /// through the front `make_front` builds from the journaled turn (none: the outcome is journaled and a
    /// resend is answered from it). Returns how many were ended. An outcome the journal cannot take yet is
    /// retried in the background and delivered once it is durable.
    pub async fn recover<F>(self: &Arc<Self>, make_front: F) -> Result<usize, StoreError>
    where
        F: Fn(&StoredTurn) -> Option<Arc<dyn TurnFront>>,
    {
        let turns = self.journal.interrupted(self.owner.clone()).await?;
        // The fronts may be serving already: a turn this process has taken is live, not interrupted.
        let turns: Vec<StoredTurn> = {
            let st = self.lock();
            turns
                .into_iter()
                .filter(|t| !st.live.contains_key(&t.request_id))
                .collect()
        };
        Ok(self.end_interrupted(turns, make_front).await)
    }

    /// In a shared journal: ends the turns of other instances of this agent (their owners pass
    /// `same_agent`) that lost their lease (their instance died or lost the journal for longer than it),
    /// each as a crash ends a turn, once across every instance that sweeps (the first outcome wins; one
    /// that lost the race says nothing). Returns how many it ended.
    pub async fn end_abandoned<F>(
        self: &Arc<Self>,
        same_agent: impl Fn(&str) -> bool,
        make_front: F,
    ) -> Result<usize, StoreError>
    where
        F: Fn(&StoredTurn) -> Option<Arc<dyn TurnFront>>,
    {
        let turns = self.journal.abandoned().await?;
        let turns: Vec<StoredTurn> = {
            let st = self.lock();
            turns
                .into_iter()
                .filter(|t| t.owner != self.owner && same_agent(&t.owner))
                .filter(|t| !st.live.contains_key(&t.request_id))
                .collect()
        };
        for t in &turns {
            tracing::warn!(request = %t.request_id, owner = %t.owner, "ending a turn whose instance lost its lease");
        }
        Ok(self.end_interrupted(turns, make_front).await)
    }

    /// Ends `turns`, which a crash cut off, as interrupted through the fronts `make_front` gives.
    async fn end_interrupted<F>(self: &Arc<Self>, turns: Vec<StoredTurn>, make_front: F) -> usize
    where
        F: Fn(&StoredTurn) -> Option<Arc<dyn TurnFront>>,
    {
        let n = turns.len();
        for t in turns {
            let outcome = interrupted();
            let front = make_front(&t).map(|inner| {
                let accepted = crate::WatchKind::Accepted {
                    queued: false,
                    protocol: t.protocol.clone(),
                    agent: t.agent.clone(),
                    conversation: t.conversation_id.clone(),
                    prompt: crate::watch::first_line(&t.input.message),
                };
                Arc::new(crate::watch::WatchedFront {
                    inner,
                    hub: self.hub.clone(),
                    turn: t.request_id.clone(),
                    accepted,
                }) as Arc<dyn TurnFront>
            });
            let wire = front.as_ref().and_then(|f| f.encode_outcome(&outcome));
            let finish = Finish::new(t.request_id.clone(), outcome, now_secs()).wire(wire);
            if self.health.writable() {
                // One try here; a journal that cannot take it is retried in the background, so a failing
                // disk never holds the daemon's start.
                let r = self.journal.finish(finish.clone()).await;
                self.note_write(&r);
                match r {
                    Ok(()) => {
                        if let Some(f) = front {
                            f.deliver_outcome(&finish.outcome, finish.wire.as_deref());
                        }
                        continue;
                    }
                    // Ended meanwhile, and told so by its own front.
                    Err(StoreError::AlreadyEnded(_)) => continue,
                    Err(e) if e.is_unwritable() => {}
                    Err(e) => {
                        tracing::error!(request = %t.request_id, error = %e, "could not end an interrupted turn");
                        continue;
                    }
                }
            }
            let this = self.clone();
            tokio::spawn(async move {
                let (outcome, wire, ours) = this.finish_durably_or_found(finish).await;
                // A turn that ended meanwhile was told its outcome by its own front.
                if let (Some(f), true) = (front, ours) {
                    f.deliver_outcome(&outcome, wire.as_deref());
                }
            });
        }
        n
    }

    /// An answer to the question turn `id` waits on.
    pub fn answer(&self, id: &RequestId, question_id: &str, answer: Answer) -> AnswerReply {
        let closed = {
            let mut st = self.lock();
            let Some(t) = st.live.get_mut(id) else {
                return AnswerReply::NotWaiting;
            };
            match &t.question {
                Some(q) if q.id == question_id => {
                    if !answer.fits(&q.question.kind) {
                        return AnswerReply::DoesNotFit;
                    }
                }
                _ => return AnswerReply::NotWaiting,
            }
            let q = t.question.take().expect("checked above");
            let _ = q.reply.send(Asked::Answered(answer));
            let front = t.front.clone();
            st.core.handle_question_settled(id, &q.id);
            (front, q.id)
        };
        closed.0.question_closed(&closed.1);
        AnswerReply::Taken
    }

    /// The question's window closed with no answer. Returns whether it was still open.
    pub fn question_expired(&self, id: &RequestId, question_id: &str) -> bool {
        let closed = {
            let mut st = self.lock();
            let Some(t) = st.live.get_mut(id) else {
                return false;
            };
            if t.question.as_ref().map(|q| q.id.as_str()) != Some(question_id) {
                return false;
            }
            let q = t.question.take().expect("checked above");
            let _ = q.reply.send(Asked::Unanswered);
            let front = t.front.clone();
            st.core.handle_question_settled(id, &q.id);
            (front, q.id)
        };
        closed.0.question_closed(&closed.1);
        true
    }

    /// Restarts the window of the question turn `id` waits on, from now (fisk-ai `elicit.waiting`).
    /// Returns whether that question is open.
    pub fn extend_question(&self, id: &RequestId, question_id: &str, window: Duration) -> bool {
        let mut st = self.lock();
        let open = st
            .live
            .get(id)
            .and_then(|t| t.question.as_ref())
            .is_some_and(|q| q.id == question_id);
        if open
            && st
                .core
                .handle_question_extended(id, question_id, window, now())
        {
            drop(st);
            self.timers_changed();
        }
        open
    }

    /// The question turn `id` waits on, if `question_id` names it: what a front checks an answer against,
    /// so that it keeps no copy of the engine's open question.
    pub fn waiting_question(&self, id: &RequestId, question_id: &str) -> Option<Question> {
        let st = self.lock();
        st.live
            .get(id)
            .and_then(|t| t.question.as_ref())
            .filter(|q| q.id == question_id)
            .map(|q| q.question.clone())
    }

    /// Whether turn `id` waits on question `question_id`.
    pub fn is_waiting_on(&self, id: &RequestId, question_id: &str) -> bool {
        let st = self.lock();
        st.live
            .get(id)
            .and_then(|t| t.question.as_ref())
            .is_some_and(|q| q.id == question_id)
    }

    fn open_question(
        self: &Arc<Self>,
        id: &RequestId,
        question: Question,
    ) -> BoxFuture<'static, Asked> {
        let mut st = self.lock();
        let Some(t) = st.live.get_mut(id) else {
            return Box::pin(async { Asked::Cancelled });
        };
        if *t.cancel.borrow() {
            return Box::pin(async { Asked::Cancelled });
        }
        if t.question.is_some() {
            // One question at a time: an agent that asks again before the first is settled gets no second.
            return Box::pin(async { Asked::Unavailable });
        }
        match t.front.ask(&question) {
            FrontAsk::Unavailable => Box::pin(async { Asked::Unavailable }),
            FrontAsk::Settled(a) => Box::pin(async move { a }),
            FrontAsk::Sent {
                question_id,
                window,
            } => {
                let (tx, rx) = oneshot::channel();
                t.question = Some(OpenQuestion {
                    id: question_id.clone(),
                    question,
                    reply: tx,
                });
                if let Some(w) = window {
                    st.core.handle_question_asked(id, &question_id, w, now());
                    drop(st);
                    self.timers_changed();
                }
                Box::pin(async move { rx.await.unwrap_or(Asked::Cancelled) })
            }
        }
    }

    fn start(self: &Arc<Self>, id: RequestId) {
        let this = self.clone();
        tokio::spawn(async move { this.run(id).await });
    }

    /// Spawns the run of turn `id`, which begins once the returned sender fires (or is dropped).
    fn start_held(self: &Arc<Self>, id: RequestId) -> oneshot::Sender<()> {
        let (go, wait) = oneshot::channel::<()>();
        let this = self.clone();
        tokio::spawn(async move {
            let _ = wait.await;
            this.run(id).await
        });
        go
    }

    async fn run(self: Arc<Self>, id: RequestId) {
        let (input, front, mut cancel_rx, policy) = {
            let st = self.lock();
            let Some(t) = st.live.get(&id) else { return };
            (
                t.input.clone(),
                t.front.clone(),
                t.cancel.subscribe(),
                t.policy,
            )
        };
        if *cancel_rx.borrow() {
            let f = Failure::new(TurnFailure::Cancelled, "cancelled");
            self.record_and_deliver(&id, Outcome::Failure(f)).await;
            return;
        }
        if !policy.exclusive {
            let failed = match self.wait_for_conversation(&id, &input, &cancel_rx).await {
                Ok(true) => None,
                Ok(false) => Some(Failure::new(TurnFailure::Cancelled, "cancelled")),
                Err(error) => {
                    tracing::error!(request = %id, conversation = %input.conversation_id, %error, "the conversation's claim could not be read");
                    Some(Failure::new(
                        TurnFailure::Internal,
                        "the conversation's record could not be read",
                    ))
                }
            };
            if let Some(f) = failed {
                self.record_and_deliver(&id, Outcome::Failure(f)).await;
                return;
            }
        }
        // A turn waits here for one of the agent's places when it runs a limited number at once; a cancel
        // while it waits ends it.
        let _permit = match self.running.get() {
            None => None,
            Some((_, permits)) => {
                let permits = permits.clone();
                let mut signal = cancel_rx.clone();
                tokio::select! {
                    p = permits.acquire_owned() => p.ok(),
                    _ = crate::agent::cancelled(&mut signal) => {
                        let f = Failure::new(TurnFailure::Cancelled, "cancelled");
                        self.record_and_deliver(&id, Outcome::Failure(f)).await;
                        return;
                    }
                }
            }
        };
        let wants_history = self.agent.wants_history();
        let mut input = input;
        if wants_history {
            // The earlier turns come from the journal, so a restart between two turns loses none of them.
            match self
                .journal
                .recent_turns(
                    input.conversation_id.clone(),
                    crate::agent::MAX_HISTORY_TURNS + 1,
                )
                .await
            {
                Ok(view) => input.history = crate::agent::past_turns(&view, &id, &self.agent_name),
                Err(error) => {
                    tracing::warn!(%error, "could not read the conversation's earlier turns");
                    let f = Failure::new(
                        TurnFailure::Internal,
                        "the conversation's earlier turns could not be read",
                    );
                    self.record_and_deliver(&id, Outcome::Failure(f)).await;
                    return;
                }
            }
        }
        let (ev_tx, mut ev_rx) = mpsc::channel(EVENT_QUEUE_DEPTH);
        let asker = Asker::new(Arc::new(TurnAsker {
            engine: Arc::downgrade(&self),
            id: id.clone(),
        }));
        let ctx = TurnContext {
            events: ev_tx,
            cancel: cancel_rx.clone(),
            asker,
        };
        let agent_run = self.agent.run(input, ctx);
        // The agent runs in its own task so that a panic in it is caught as a failure of this turn only.
        let mut handle = tokio::spawn(agent_run);
        let mut events_open = true;
        // Under a parking policy the agent sees the cancel and ends the turn itself.
        let mut watch_cancel = !policy.park_on_cancel;
        let mut transcript = (policy.keep_transcript || wants_history).then(Vec::new);
        let mut tool_calls = 0u64;
        let mut pass = |ev: TurnEvent| {
            if matches!(ev, TurnEvent::ToolCall { .. }) {
                tool_calls += 1;
            }
            if let Some(t) = transcript.as_mut() {
                if t.len() < MAX_TRANSCRIPT_EVENTS {
                    t.push(ev.clone());
                }
            }
            front.event(ev);
        };
        let outcome = loop {
            tokio::select! {
                biased;
                changed = cancel_rx.changed(), if watch_cancel => {
                    if changed.is_err() {
                        watch_cancel = false;
                    } else if *cancel_rx.borrow() {
                        handle.abort();
                        break Outcome::Failure(Failure::new(TurnFailure::Cancelled, "cancelled by the requester"));
                    }
                }
                ev = ev_rx.recv(), if events_open => match ev {
                    Some(ev) => pass(ev),
                    None => events_open = false,
                },
                joined = &mut handle => {
                    // Deliver what the agent sent before it returned.
                    while let Ok(ev) = ev_rx.try_recv() { pass(ev) }
                    break match joined {
                        Ok(o) => normalise(o),
                        Err(e) => {
                            tracing::error!(request = %id, error = %e, "agent task failed");
                            Outcome::Failure(Failure::new(TurnFailure::Crashed, "the agent crashed while running this turn"))
                        }
                    };
                }
            }
        };
        self.record(&id, outcome, transcript, tool_calls).await;
    }

    /// Waits until turn `id` holds its conversation in the journal ([`Journal::claim`]): in a shared journal,
    /// another instance may run a turn of it. `false` when the turn was cancelled meanwhile. A journal that
    /// cannot answer is asked again, as one whose conversation is busy; one that answers with a corrupt
    /// record is an error, which asking again would not change.
    async fn wait_for_conversation(
        &self,
        id: &RequestId,
        input: &TurnInput,
        cancel: &watch::Receiver<bool>,
    ) -> Result<bool, StoreError> {
        // Each is logged once, not every look.
        let (mut told, mut failed) = (false, false);
        loop {
            let claim = self
                .journal
                .claim(input.conversation_id.clone(), id.clone())
                .await;
            self.note_claim(&claim);
            match claim {
                Ok(Claim::Taken) => return Ok(true),
                Ok(Claim::Busy(holder)) if !told => {
                    tracing::info!(request = %id, %holder, "waiting for the conversation's running turn");
                    told = true;
                }
                Ok(Claim::Busy(_)) => {}
                Err(e) if !e.is_unwritable() => return Err(e),
                Err(e) if !failed => {
                    tracing::warn!(request = %id, error = %e, "could not claim the conversation; trying again");
                    failed = true;
                }
                Err(_) => {}
            }
            let mut signal = cancel.clone();
            tokio::select! {
                _ = self.wait_for(|core, now| core.handle_claim_busy(now)) => {}
                _ = crate::agent::cancelled(&mut signal) => return Ok(false),
            }
        }
    }

    /// Decides, journals and delivers a turn's one outcome, then starts its conversation's next turn.
    async fn record_and_deliver(self: &Arc<Self>, id: &RequestId, outcome: Outcome) {
        self.record(id, outcome, None, 0).await
    }

    async fn record(
        self: &Arc<Self>,
        id: &RequestId,
        outcome: Outcome,
        transcript: Option<Vec<TurnEvent>>,
        tool_calls: u64,
    ) {
        let front = {
            let mut st = self.lock();
            let State { core, live, .. } = &mut *st;
            let book = &mut core.book;
            let Some(turn) = live.get_mut(id) else { return };
            // The book decides the one outcome; `EndNow` and `EndCancelled` decide it inside the book, so the
            // caller that follows them finds `AlreadyEnding` with nobody delivering yet and takes it.
            let mine = match book.finish(id) {
                Finished::Decided => true,
                Finished::AlreadyEnding => !turn.delivering,
                Finished::Unknown => false,
            };
            if !mine {
                return;
            }
            turn.delivering = true;
            turn.front.clone()
        };
        let wire = front.encode_outcome(&outcome);
        let finish = Finish {
            request_id: id.clone(),
            outcome,
            wire,
            transcript: transcript.map(|t| serde_json::to_value(t).unwrap_or_default()),
            tool_calls,
            ended_at: now_secs(),
        };
        // Delivered only once durable: a terminal the journal lacks would be contradicted after a restart.
        let (outcome, wire) = self.finish_durably(finish).await;
        // The turn leaves the live table (and frees its slot) before its terminal goes out, so a caller
        // that resends at once is answered from the journal rather than told the request is in flight.
        let next = {
            let mut st = self.lock();
            self.delivering
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            st.live.remove(id);
            st.core.handle_turn_left(id);
            st.core.book.ended(id)
        };
        front.deliver_outcome(&outcome, wire.as_deref());
        self.delivering
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        self.ended.notify_waiters();
        if let Some(next) = next {
            self.start(next);
        }
    }
}

impl Engine {
    /// What the journal records of a submission.
    fn new_turn(&self, sub: &Submission) -> NewTurn {
        NewTurn {
            request_id: sub.input.request_id.clone(),
            conversation_id: sub.input.conversation_id.clone(),
            protocol: sub.protocol.clone(),
            owner: self.owner.clone(),
            agent: self.agent_name.clone(),
            route: sub.route.clone(),
            input: sub.input.clone(),
            accepted_at: now_secs(),
            conversation_meta: sub.conversation_meta.clone(),
        }
    }
}

/// The outcome of a turn a crash cut off.
fn interrupted() -> Outcome {
    Outcome::Failure(
        Failure::new(
            TurnFailure::Interrupted,
            "the agent restarted while this run was in progress",
        )
        .retry_after(INTERRUPTED_RETRY_AFTER_SECS),
    )
}

fn normalise(o: Outcome) -> Outcome {
    match o {
        Outcome::Result(r) if r.text.is_empty() => Outcome::Failure(
            Failure::new(
                TurnFailure::EmptyResponse,
                "the agent produced no response text",
            )
            .with_usage(r.usage),
        ),
        o => o,
    }
}

/// A running turn's [`AskQuestion`]: questions go to the turn's front through the engine.
struct TurnAsker {
    engine: Weak<Engine>,
    id: RequestId,
}

impl AskQuestion for TurnAsker {
    fn ask(&self, question: Question) -> BoxFuture<'static, Asked> {
        match self.engine.upgrade() {
            Some(engine) => engine.open_question(&self.id, question),
            None => Box::pin(async { Asked::Cancelled }),
        }
    }
}

/// The timer task: sleeps until the core's next deadline (or a change of its timers), then fires what is
/// due. Ends when the engine is gone.
async fn drive_timers(engine: Weak<Engine>, changed: Arc<tokio::sync::Notify>) {
    loop {
        let next = match engine.upgrade() {
            Some(e) => e.lock().core.poll_timeout(),
            None => return,
        };
        match next {
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(tokio::time::Instant::from_std(at)) => {}
                    _ = changed.notified() => {}
                }
            }
            None => changed.notified().await,
        }
        match engine.upgrade() {
            Some(e) => e.fire_due_timers(),
            None => return,
        }
    }
}
