//! The async driver around the engine's pure core ([`EngineCore`]): journal first, then act; one task per
//! running turn, and one timer task that sleeps until the core's next deadline and acts on what falls due.

use crate::agent::{Agent, AskQuestion, Asker, TurnContext, EVENT_QUEUE_DEPTH};
use crate::engine_core::{
    claim_verdict, journal_backoff, Action, Admission, ClaimVerdict, EngineCore, JournalFault,
    TurnPolicy, WakeId,
};
use crate::front::{FrontAsk, TurnFront};
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

mod admission;
mod ending;
mod journal;
mod questions;
mod run;
mod timers;

use ending::interrupted;
use questions::TurnAsker;
use timers::now;

/// Most events of one turn kept for its transcript. A turn that streams more keeps its first ones and a
/// marker: the transcript is for reading a conversation back, and the outcome holds the full answer.
pub const MAX_TRANSCRIPT_EVENTS: usize = 4096;

/// The `retry_after` of a turn refused because the agent is full: long enough for a model turn or two.
pub const AGENT_BUSY_RETRY_AFTER_SECS: u64 = 5;

/// The answer to [`Engine::answer`]: the core decides it.
pub use crate::engine_core::AnswerReply;

/// The retry hint given with a turn a crash cut off: long enough for the daemon to be back, short enough
/// that a client retrying soon gets an answer.
pub const INTERRUPTED_RETRY_AFTER_SECS: u64 = 5;

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

/// What the driver holds of a live turn besides the core's record of it (its requester, its question):
/// the handles to act on it.
struct LiveTurn {
    input: TurnInput,
    front: Arc<dyn TurnFront>,
    cancel: watch::Sender<bool>,
    /// Someone has taken the job of journaling and delivering the decided outcome.
    delivering: bool,
    policy: TurnPolicy,
    /// Where the answer to the question it waits on goes (the question itself, and whether one is open,
    /// are the core's).
    asking: Option<oneshot::Sender<Asked>>,
    /// Its capacity slot, freed when the turn leaves the live table.
    _slot: Option<crate::Slot>,
    /// The front that took it (`nipxx`, ...), for the operator's log.
    protocol: String,
    /// When it was taken, for the duration in the operator's log.
    taken: std::time::Instant,
    /// Its acceptance was journaled with `accept_soon` and may not be durable yet: made so before the
    /// first thing about the turn goes out ([`Engine::acceptance_durable`]).
    unsynced: bool,
}

#[derive(Default)]
struct State {
    /// The decisions: the book, draining, every timer.
    core: EngineCore,
    live: HashMap<RequestId, LiveTurn>,
    /// The tasks waiting on a wake-up of the core, woken when it falls due.
    wakers: HashMap<WakeId, oneshot::Sender<()>>,
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
    /// The tracer of every turn's spans (set once, before the first turn; off until then).
    telemetry: std::sync::OnceLock<crate::Telemetry>,
    /// Told when the core's timers change, so the timer task sleeps until the right deadline.
    timers_changed: Arc<tokio::sync::Notify>,
    /// The timer task, started with the first timer.
    timer_task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The index its live turns are entered in, once it joined a daemon's [`crate::Engines`].
    index: std::sync::OnceLock<Arc<crate::TurnIndex>>,
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
        let card = agent.card();
        // The agent's own tools are the tool labels of the metrics (a model agent adds its MCP tools).
        hub.metrics()
            .name_tools(card.tools.iter().map(|t| t.name.as_str()));
        Arc::new_cyclic(|me| Engine {
            me: me.clone(),
            hub,
            state: Mutex::new(State::default()),
            journal,
            agent_name: card.name,
            agent,
            owner: owner.into(),
            health: Health::default(),
            slots: Default::default(),
            delivering: std::sync::atomic::AtomicUsize::new(0),
            ended: tokio::sync::Notify::new(),
            running: std::sync::OnceLock::new(),
            telemetry: std::sync::OnceLock::new(),
            timers_changed: Arc::new(tokio::sync::Notify::new()),
            timer_task: Mutex::new(None),
            index: std::sync::OnceLock::new(),
        })
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

    /// Traces this engine's turns through `telemetry`. Set once, before the first turn; a second call
    /// changes nothing.
    pub fn set_telemetry(&self, telemetry: crate::Telemetry) {
        let _ = self.telemetry.set(telemetry);
    }

    /// The tracer of this engine's turns: what a front says of them (fisk-ai's card) is read off it.
    pub fn telemetry(&self) -> crate::Telemetry {
        self.telemetry.get().cloned().unwrap_or_default()
    }

    /// The instance name its turns are journaled under (recovery ends only this owner's).
    pub fn owner(&self) -> &str {
        &self.owner
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

    /// Whether the engine is draining for a shutdown.
    pub fn draining(&self) -> bool {
        self.lock().core.draining()
    }

    /// Number of live (pending, queued, running or ending) turns.
    pub fn live_turns(&self) -> usize {
        self.lock().core.book.live()
    }

    /// Number of live turns `requester` asked for.
    pub fn live_turns_of(&self, requester: &str) -> usize {
        self.lock().core.live_turns_of(requester)
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
}
