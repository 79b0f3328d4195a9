//! The task-card adapter: people give the agent long tasks in Nostr rooms (kind 43001) and watch each as a
//! card (43002 accepted, 43003 progress, 43004 result or 43006 error), while the agent replies in the
//! task's thread (kind 12), opens handoff threads (kind 11), and asks questions as tiny agent cards whose
//! answers (kind 1111) go back into the turn. A 43005 from the requester, or `!cancel` from an allowed user,
//! stops a task.
//!
//! The rules are pure ([`card`], [`progress`], [`ask`]); this module is the driver: one relay
//! subscription, the engine, and one [`TaskFront`] per turn. Each request is its own turn and its own
//! conversation, so requests that share a thread keep separate cards. Before running a request the
//! adapter looks on the relay for its result, error or cancel (a restart does not run a finished task
//! again), and the journal runs a request id once whatever the relay shows.

pub mod ask;
pub mod card;
mod front;
pub mod interim;
pub mod legacy;
pub mod progress;
pub mod recent;
pub mod settings;

pub use front::{TaskFront, TaskRoute, ANSWERED_OUTSIDE_THE_ROOM};

use agentwire_core::{now_secs, ApproveChoice, ConversationId, QuestionKind, RequestId};
use agentwire_engine::StoredTurn;
use agentwire_engine::{
    AnswerReply, Engine, SlotRefusal, Submission, SubmitReply, TurnFront, TurnInput, TurnPolicy,
};
use agentwire_nostr::crypto::Crypto;
use agentwire_nostr::relay_conn::{Incoming, RelayConn};
use agentwire_nostr::runtime::Outbox;
use agentwire_tinyagent as tinyagent;
use card::{Acceptance, Stopper, TaskRequest, TASK_CANCEL, TASK_ERROR, TASK_REQUEST, TASK_RESULT};
use nostr::prelude::{Event, EventId, Filter, Kind, SingleLetterTag, Timestamp};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// The protocol name under which task turns are journaled.
pub const PROTOCOL: &str = "tasks";
/// The request ids of task turns: this prefix and the request event's id.
pub const REQUEST_PREFIX: &str = "task:";
/// Tasks that run at once; more wait (unaccepted, with no 43002 yet) until one ends. A few long tasks at a
/// time keep one agent from being swamped by a busy room.
pub const DEFAULT_MAX_RUNNING_TASKS: usize = 4;
/// Tasks waiting for a slot. Past this a request is ended at once with a 43006 saying so, so a flood in a
/// room cannot grow the adapter's memory.
pub const MAX_WAITING_TASKS: usize = 256;
/// How long a question card stays open when the agent gives no window: long enough for a person to look
/// at their phone, short enough that a task does not hang for a day.
pub const DEFAULT_QUESTION_WINDOW: Duration = Duration::from_secs(15 * 60);
/// How a request folded into another ends (its 43006), the other's id after it.
const MERGED_INTO: &str = "Merged into task ";
/// Requests folded into one waiting request: a few follow-ups, not a conversation held back from its turn.
const MAX_FOLDED: usize = 8;
/// The longest prompt folding makes: past it the request waits for its own turn.
const MAX_FOLDED_PROMPT_BYTES: usize = 64 * 1024;
/// How often waiting tasks are tried again (for a slot, or for a journal that could not write).
const RETRY_TICK: Duration = Duration::from_secs(1);
/// The relay subscription of the adapter.
const SUBSCRIPTION: &str = "tasks";

/// What the adapter needs to know.
#[derive(Debug, Clone)]
pub struct TaskConfig {
    /// The relay the rooms live on.
    pub relay: String,
    /// The rooms watched.
    pub watch: HashSet<String>,
    /// Who may give tasks and send `!cancel`.
    pub allowed: HashSet<nostr::prelude::PublicKey>,
    /// Where handoff threads open (the task's own room when unset).
    pub home: Option<String>,
    /// The least time between two 43003 of one task.
    pub progress_interval: Duration,
    /// How long a question card stays open when the agent gives no window.
    pub question_window: Duration,
    /// Requests younger than this that arrived while the agent was down are served on start.
    pub backlog_horizon: Duration,
    /// Tasks that run at once.
    pub max_running: usize,
    /// Fold a requester's second request in a thread into their first while it waits for a slot
    /// (`[tasks] merge_waiting`).
    pub merge_waiting: bool,
    /// Questions as plain kind 12 messages answered by a reply in the thread (`[tasks] cards = "legacy"`),
    /// for clients that cannot show question cards.
    pub legacy_cards: bool,
    /// The relay checks every event's id and signature before it sends it (the embedded relay).
    pub verified_relay: bool,
    /// Requests older than this are never run, however they arrive: the journal forgets a task's turn
    /// after its retention, so a request re-published after that must not run again. `None`: the journal
    /// keeps every turn.
    pub max_request_age: Option<Duration>,
}

/// A question card waiting for its answer.
pub(crate) struct OpenCard {
    pub(crate) card: Event,
    /// The card as the relay's rules read it (parsed once, when it is posted).
    pub(crate) parsed: tinyagent::QuestionCard,
    pub(crate) request_id: RequestId,
    pub(crate) task: EventId,
    pub(crate) room: String,
    pub(crate) tool: String,
    pub(crate) kind: QuestionKind,
    pub(crate) option_ids: Vec<(String, String)>,
}

/// A question asked as a plain message in a task's thread (`cards = "legacy"`).
pub(crate) struct LegacyQuestion {
    pub(crate) request_id: RequestId,
    pub(crate) task: EventId,
    pub(crate) room: String,
    pub(crate) tool: String,
    pub(crate) kind: QuestionKind,
    /// The thread it was asked in: a reply there answers it.
    pub(crate) root: EventId,
    /// Who may answer (the requester when the agent named nobody).
    pub(crate) asked: Vec<nostr::prelude::PublicKey>,
    /// When it was asked: an older message is no answer.
    pub(crate) at: Timestamp,
}

/// What the adapter and its fronts share.
pub(crate) struct Shared {
    pub(crate) crypto: Arc<Crypto>,
    pub(crate) relay: RelayConn,
    pub(crate) outbox: Arc<Outbox>,
    pub(crate) config: TaskConfig,
    engine: Arc<Engine>,
    cards: Mutex<HashMap<EventId, OpenCard>>,
    /// Questions asked as plain messages (legacy), by the message's id.
    legacy: Mutex<HashMap<EventId, LegacyQuestion>>,
    running: Mutex<HashMap<EventId, Arc<TaskFront>>>,
    /// Tools approved "always" per room (kept while the daemon runs).
    room_standing: Mutex<HashMap<String, HashSet<String>>>,
    /// Questions an answer from the room is being given to the engine for, with that answer as said back:
    /// any other answer the engine takes came from outside the room (the hub, the turn API, in between),
    /// and the room is told.
    answering_from_room: Mutex<HashMap<EventId, String>>,
    ended: mpsc::UnboundedSender<EventId>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    pub(crate) fn open_card(&self, card: OpenCard) {
        lock(&self.cards).insert(card.card.id, card);
    }

    pub(crate) fn close_card(&self, id: &EventId) {
        lock(&self.cards).remove(id);
        lock(&self.legacy).remove(id);
    }

    /// The question `id` as it stands in the room, if it is open: the kind it was asked as (a card, or a
    /// plain message in legacy mode) and its room.
    pub(crate) fn open_question(&self, id: &EventId) -> Option<(Kind, String)> {
        if let Some(c) = lock(&self.cards).get(id) {
            return Some((c.card.kind, c.room.clone()));
        }
        lock(&self.legacy)
            .get(id)
            .map(|q| (card::THREAD_REPLY, q.room.clone()))
    }

    /// Whether the answer the engine took for question `id`, `said` as said back, is the one from the room.
    pub(crate) fn answered_from_room(&self, id: &EventId, said: &str) -> bool {
        lock(&self.answering_from_room).get(id).map(String::as_str) == Some(said)
    }

    /// The kind of the open question `id`.
    fn question_kind(&self, id: &EventId) -> Option<QuestionKind> {
        if let Some(c) = lock(&self.cards).get(id) {
            return Some(c.kind.clone());
        }
        lock(&self.legacy).get(id).map(|q| q.kind.clone())
    }

    pub(crate) fn open_legacy(&self, id: EventId, q: LegacyQuestion) {
        lock(&self.legacy).insert(id, q);
    }

    pub(crate) fn room_approves(&self, room: &str, tool: &str) -> bool {
        lock(&self.room_standing)
            .get(room)
            .is_some_and(|t| t.contains(tool))
    }

    pub(crate) fn task_ended(&self, id: &EventId) {
        // A card still open when its task ends (the turn ended while it asked) is answered by nobody now.
        lock(&self.cards).retain(|_, c| c.task != *id);
        let _ = self.ended.send(*id);
    }
}

/// The running adapter.
pub struct TaskAdapter {
    shared: Arc<Shared>,
}

impl agentwire_engine::Front for TaskAdapter {
    fn protocol(&self) -> &'static str {
        PROTOCOL
    }

    fn recovery_front(&self, turn: &StoredTurn) -> Option<Arc<dyn TurnFront>> {
        let route: TaskRoute = serde_json::from_value(turn.route.clone()).ok()?;
        let task = route.task()?;
        Some(TaskFront::start(&self.shared, task, turn.request_id.clone()) as Arc<dyn TurnFront>)
    }

    fn drain(&self, grace: Duration) -> futures_util::future::BoxFuture<'_, usize> {
        Box::pin(self.shared.outbox.flush(grace))
    }

    fn stop(&self) -> futures_util::future::BoxFuture<'_, ()> {
        Box::pin(async move { self.shared.relay.unsubscribe(SUBSCRIPTION) })
    }
}

/// The turn request id of the task requested by `event`.
pub fn request_id(event: &EventId) -> RequestId {
    RequestId::new(format!("{REQUEST_PREFIX}{}", event.to_hex())).expect("a short id")
}

impl TaskAdapter {
    /// Connects to the rooms' relay and starts taking tasks.
    pub async fn start(config: TaskConfig, crypto: Arc<Crypto>, engine: Arc<Engine>) -> Arc<Self> {
        let (relay, incoming) = RelayConn::connect_authenticated(&config.relay, crypto.clone());
        let (ended_tx, ended_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            crypto,
            relay,
            outbox: Arc::default(),
            config,
            engine,
            cards: Mutex::default(),
            legacy: Mutex::default(),
            running: Mutex::default(),
            room_standing: Mutex::default(),
            answering_from_room: Mutex::default(),
            ended: ended_tx,
        });
        let since = Timestamp::from_secs(
            now_secs().saturating_sub(shared.config.backlog_horizon.as_secs()),
        );
        shared
            .relay
            .subscribe(SUBSCRIPTION, filters(&shared, since));
        let driver = Driver {
            shared: shared.clone(),
            acceptance: Acceptance {
                agent: shared.crypto.public_key(),
                watch: shared.config.watch.clone(),
                allowed: shared.config.allowed.clone(),
            },
            caught_up: false,
            held: Vec::new(),
            merged: HashMap::new(),
            to_fold: HashMap::new(),
            finished: Default::default(),
            cancelled: Default::default(),
            waiting: VecDeque::new(),
        };
        tokio::spawn(driver.run(incoming, ended_rx));
        let _ = shared.relay.wait_connected(Duration::from_secs(5)).await;
        Arc::new(TaskAdapter { shared })
    }

    /// Tasks running now.
    pub fn running(&self) -> usize {
        lock(&self.shared.running).len()
    }
}

fn filters(shared: &Shared, since: Timestamp) -> Vec<Filter> {
    let agent = shared.crypto.public_key();
    let h = SingleLetterTag::from_char('h').expect("h is a single letter");
    let rooms: Vec<String> = shared.config.watch.iter().cloned().collect();
    let mut filters = vec![
        // Requests and the requesters' cancels.
        Filter::new()
            .kinds([TASK_REQUEST, TASK_CANCEL])
            .custom_tags(h, rooms.clone())
            .since(since),
        // The adapter's own terminals: a request that has one is not run again.
        Filter::new()
            .kinds([TASK_RESULT, TASK_ERROR])
            .author(agent)
            .custom_tags(h, rooms.clone())
            .since(since),
        // The rooms' messages, for `!cancel` (which may name the agent by its npub in the text alone).
        Filter::new()
            .kinds([card::CHAT, card::THREAD_REPLY])
            .custom_tags(h, rooms)
            .since(Timestamp::now()),
        // Answers to question cards, which name the agent as the card's author.
        Filter::new()
            .kind(tinyagent::COMMENT)
            .pubkey(agent)
            .since(since),
    ];
    if shared.config.legacy_cards {
        // Plain NIP-22 replies to a question asked as a message (kind 12): a plain reply names its parent's
        // kind (`k`) and need not name the agent, the room or anything else.
        let k = SingleLetterTag::from_char('k').expect("k is a single letter");
        filters.push(
            Filter::new()
                .kind(tinyagent::COMMENT)
                .custom_tags(k, [card::THREAD_REPLY.as_u16().to_string()])
                .since(Timestamp::now()),
        );
    }
    filters
}

struct Driver {
    shared: Arc<Shared>,
    acceptance: Acceptance,
    /// The stored events of the subscription have all arrived (its first EOSE).
    caught_up: bool,
    /// Requests that arrived before that, run once it is known which have ended.
    held: Vec<Event>,
    /// Requests folded into a waiting one, as the adapter's own `Merged into task` errors say (the one
    /// folded into, and those folded in): after a restart they are folded in again.
    merged: HashMap<EventId, Vec<EventId>>,
    /// At catch-up: the stored requests to fold into each request not yet run.
    to_fold: HashMap<EventId, Vec<Event>>,
    /// Requests the relay shows a result or error for (the newest ones).
    finished: recent::RecentSet<EventId>,
    /// Requests their requester cancelled (request, requester; the newest ones).
    cancelled: recent::RecentSet<(EventId, nostr::prelude::PublicKey)>,
    /// Tasks waiting for a slot or for the journal.
    waiting: VecDeque<TaskRequest>,
}

impl Driver {
    async fn run(
        mut self,
        mut incoming: mpsc::Receiver<Incoming>,
        mut ended: mpsc::UnboundedReceiver<EventId>,
    ) {
        let mut tick = tokio::time::interval(RETRY_TICK);
        loop {
            tokio::select! {
                m = incoming.recv() => match m {
                    Some(Incoming::Event { event, .. }) => self.on_event(*event).await,
                    Some(Incoming::Eose(_)) if !self.caught_up => {
                        self.caught_up = true;
                        let mut held = std::mem::take(&mut self.held);
                        held.sort_by_key(|e| e.created_at);
                        // Requests folded into another before a restart go with it again.
                        for ev in &held {
                            if let Some((into, _)) = self.merged.iter().find(|(_, ids)| ids.contains(&ev.id)) {
                                self.to_fold.entry(*into).or_default().push(ev.clone());
                            }
                        }
                        for ev in held {
                            self.on_request(ev).await;
                        }
                    }
                    Some(Incoming::Closed { message, .. }) => {
                        tracing::warn!(relay = self.shared.relay.url(), %message, "the relay closed the task subscription");
                    }
                    Some(_) => {}
                    None => return,
                },
                Some(id) = ended.recv() => {
                    lock(&self.shared.running).remove(&id);
                    self.start_waiting().await;
                }
                _ = tick.tick() => self.start_waiting().await,
            }
        }
    }

    async fn on_event(&mut self, ev: Event) {
        if !self.shared.config.verified_relay && ev.verify().is_err() {
            tracing::debug!(event = %ev.id, "a task event with a bad signature");
            return;
        }
        match ev.kind {
            k if k == TASK_REQUEST => {
                let floor = self
                    .shared
                    .config
                    .max_request_age
                    .map_or(0, |age| now_secs().saturating_sub(age.as_secs()));
                if ev.created_at.as_secs() < floor {
                    tracing::debug!(request = %ev.id, "a task request older than the journal remembers turns: not run");
                    return;
                }
                if self.caught_up {
                    self.on_request(ev).await;
                } else {
                    self.held.push(ev);
                }
            }
            k if k == TASK_RESULT || k == TASK_ERROR => {
                if ev.pubkey == self.shared.crypto.public_key() {
                    if let Some(r) = card::request_of(&ev) {
                        self.finished.insert(r);
                        if let Some(into) = merged_into(&ev.content) {
                            let folded = self.merged.entry(into).or_default();
                            if folded.len() < MAX_FOLDED && !folded.contains(&r) {
                                folded.push(r);
                            }
                        }
                    }
                }
            }
            k if k == TASK_CANCEL => self.on_requester_cancel(&ev).await,
            k if k == tinyagent::COMMENT => self.on_answer(&ev),
            _ => {
                if let Some(named) = self.acceptance.cancel_command(&ev) {
                    self.on_cancel_command(&ev, &named).await;
                } else if ev.kind == card::THREAD_REPLY {
                    self.on_legacy_reply(&ev);
                }
            }
        }
    }

    async fn on_request(&mut self, ev: Event) {
        let mut task = match self.acceptance.accept(&ev) {
            Ok(t) => t,
            Err(why) => {
                tracing::debug!(event = %ev.id, ?why, "not a task for this agent");
                return;
            }
        };
        if self.finished.contains(&task.id) || self.cancelled.contains(&(task.id, task.requester)) {
            return;
        }
        if lock(&self.shared.running).contains_key(&task.id)
            || self.waiting.iter().any(|w| w.id == task.id)
        {
            return;
        }
        // Folded into this one before a restart: in again, in the order they came.
        for folded in self.to_fold.remove(&task.id).unwrap_or_default() {
            if let Ok(f) = self.acceptance.accept(&folded) {
                task.prompt = fold(&task.prompt, &f.prompt);
            }
        }
        if self.shared.config.merge_waiting && self.fold_into_waiting(&task).await {
            return;
        }
        if !self.waiting.is_empty() {
            self.wait(task).await;
            return;
        }
        if let Err(task) = self.try_start(task).await {
            self.wait(task).await;
        }
    }

    /// Folds `task` into its requester's request waiting for a slot in the same thread, when there is one
    /// with room for it: one turn, both prompts in order; `task` ends with a 43006 `Merged into task <id>`.
    async fn fold_into_waiting(&mut self, task: &TaskRequest) -> bool {
        let Some(first) = self.waiting.iter_mut().find(|w| {
            w.requester == task.requester
                && w.room == task.room
                && w.thread.root == task.thread.root
                && w.id != task.id
        }) else {
            return false;
        };
        let folded = self.merged.entry(first.id).or_default();
        let prompt = fold(&first.prompt, &task.prompt);
        if folded.len() >= MAX_FOLDED || prompt.len() > MAX_FOLDED_PROMPT_BYTES {
            return false;
        }
        folded.push(task.id);
        first.prompt = prompt;
        let into = first.id;
        let front = TaskFront::start(&self.shared, task.clone(), request_id(&task.id));
        let f = agentwire_core::Failure::new(
            agentwire_core::Refusal::TurnNotTaken,
            format!("{MERGED_INTO}{}", into.to_hex()),
        );
        let sub = self.submission(task, front);
        let _ = self.shared.engine.refuse(sub, f).await;
        true
    }

    async fn wait(&mut self, task: TaskRequest) {
        if self.waiting.len() >= MAX_WAITING_TASKS {
            let front = TaskFront::start(&self.shared, task.clone(), request_id(&task.id));
            let f = agentwire_core::Failure::new(
                agentwire_core::Refusal::Capacity,
                format!(
                    "the agent has {MAX_WAITING_TASKS} tasks waiting already; send it again later"
                ),
            );
            let sub = self.submission(&task, front);
            let _ = self.shared.engine.refuse(sub, f).await;
            return;
        }
        self.waiting.push_back(task);
    }

    async fn start_waiting(&mut self) {
        while let Some(task) = self.waiting.pop_front() {
            if let Err(task) = self.try_start(task).await {
                self.waiting.push_front(task);
                return;
            }
        }
    }

    fn submission(&self, task: &TaskRequest, front: Arc<TaskFront>) -> Submission {
        let card = self.shared.engine.agent().card();
        let id = request_id(&task.id);
        Submission {
            input: TurnInput::new(
                id.clone(),
                ConversationId::new(id.as_str()).expect("a short id"),
                task.prompt.clone(),
                card.default_model,
            ),
            protocol: PROTOCOL.into(),
            requester: task.requester.to_hex(),
            route: serde_json::to_value(TaskRoute::of(task)).unwrap_or_default(),
            front,
            policy: TurnPolicy {
                exclusive: false,
                park_on_cancel: false,
                keep_transcript: true,
                refuse_when_full: false,
                accepted_silently: false,
            },
            conversation_meta: None,
            slot: None,
        }
    }

    /// Starts `task` now, or gives it back to wait (no slot free, or the journal cannot write).
    async fn try_start(&mut self, task: TaskRequest) -> Result<(), TaskRequest> {
        let id = request_id(&task.id);
        let slot = match self.shared.engine.take_slot(
            PROTOCOL,
            self.shared.config.max_running.max(1),
            &id,
            None,
        ) {
            Ok(s) => s,
            Err(SlotRefusal::Capacity { .. }) => return Err(task),
            // Draining: the request stays on the relay for the next start. Duplicate: it is running.
            Err(_) => return Ok(()),
        };
        let front = TaskFront::start(&self.shared, task.clone(), id.clone());
        let mut sub = self.submission(&task, front.clone());
        sub.slot = Some(slot);
        lock(&self.shared.running).insert(task.id, front);
        match self.shared.engine.submit(sub).await {
            SubmitReply::Accepted { .. } => Ok(()),
            SubmitReply::JournalUnavailable(why) => {
                lock(&self.shared.running).remove(&task.id);
                tracing::warn!(task = %task.id, %why, "the journal cannot take a task yet; it waits");
                Err(task)
            }
            _ => {
                // A resend the journal answered, a refusal it delivered, or a shutdown: not running here.
                lock(&self.shared.running).remove(&task.id);
                Ok(())
            }
        }
    }

    async fn on_requester_cancel(&mut self, ev: &Event) {
        let Some(request) = card::request_of(ev) else {
            return;
        };
        self.cancelled.insert((request, ev.pubkey));
        let front = lock(&self.shared.running).get(&request).cloned();
        let Some(front) = front.filter(|f| f.task().requester == ev.pubkey) else {
            self.waiting
                .retain(|w| !(w.id == request && w.requester == ev.pubkey));
            return;
        };
        front.stop(Stopper::Requester);
        self.shared
            .engine
            .cancel(front.request_id(), &ev.pubkey.to_hex())
            .await;
    }

    async fn on_cancel_command(&mut self, ev: &Event, named: &[EventId]) {
        let room = card::room_of(ev);
        let fronts: Vec<Arc<TaskFront>> = lock(&self.shared.running)
            .values()
            .filter(|f| {
                let t = f.task();
                if named.is_empty() {
                    room.as_deref() == Some(t.room.as_str())
                } else {
                    named.contains(&t.id) || named.contains(&t.thread.root)
                }
            })
            .cloned()
            .collect();
        for f in fronts {
            f.stop(Stopper::Command(ev.pubkey));
            let requester = f.task().requester.to_hex();
            self.shared.engine.cancel(f.request_id(), &requester).await;
        }
    }

    /// A reply in a thread where a legacy question waits, from a person it asked: its answer.
    fn on_legacy_reply(&mut self, ev: &Event) {
        let root = ev.tags.iter().find_map(|t| match t.as_slice() {
            [name, id, _, marker, ..] if name == "e" && marker == "root" => {
                EventId::from_hex(id).ok()
            }
            _ => None,
        });
        let Some(root) = root else { return };
        self.settle_legacy(ev, |_, q| q.root == root);
    }

    /// A plain NIP-22 reply (kind 1111) naming a legacy question as its root or parent, from a person it
    /// asked: its answer, read as a thread reply is. The spec keeps "the existing approve, deny and freeform
    /// reply behavior" for requests without the native tags, which a legacy question is; whether it was
    /// one.
    fn on_legacy_comment(&mut self, ev: &Event) -> bool {
        let named = tinyagent::named_requests(ev);
        let asks = {
            let legacy = lock(&self.shared.legacy);
            named.iter().any(|id| legacy.contains_key(id))
        };
        if asks {
            self.settle_legacy(ev, |id, _| named.contains(id));
        }
        asks
    }

    /// Settles the legacy question `which` picks that `ev` answers: from a person it asked, not older than
    /// the question, and an answer to its kind.
    fn settle_legacy(&mut self, ev: &Event, which: impl Fn(&EventId, &LegacyQuestion) -> bool) {
        let settled = {
            let legacy = lock(&self.shared.legacy);
            legacy.iter().find_map(|(id, q)| {
                let asks = which(id, q) && q.asked.contains(&ev.pubkey) && ev.created_at >= q.at;
                if !asks {
                    return None;
                }
                let answer = legacy::answer(&q.kind, &ev.content)?;
                Some((
                    *id,
                    answer,
                    q.request_id.clone(),
                    q.task,
                    q.room.clone(),
                    q.tool.clone(),
                ))
            })
        };
        let Some((id, answer, request_id, task, room, tool)) = settled else {
            tracing::debug!(reply = %ev.id, "a thread reply that answers no open question");
            return;
        };
        self.settle(&id, answer, &request_id, task, room, tool, &ev.id);
    }

    fn on_answer(&mut self, ev: &Event) {
        if self.on_legacy_comment(ev) {
            return;
        }
        let Some(card_id) = tinyagent::answered_request(ev) else {
            return;
        };
        let settled = {
            let cards = lock(&self.shared.cards);
            let Some(open) = cards.get(&card_id) else {
                return;
            };
            match tinyagent::check_answer(&open.card, &open.parsed, ev, Timestamp::now()) {
                Ok(s) => ask::answer(&open.kind, &open.option_ids, &s.choices, s.text.as_deref())
                    .map(|a| {
                        (
                            a,
                            open.request_id.clone(),
                            open.task,
                            open.room.clone(),
                            open.tool.clone(),
                        )
                    }),
                Err(why) => {
                    tracing::debug!(answer = %ev.id, %why, "not an answer to the card");
                    None
                }
            }
        };
        let Some((answer, request_id, task, room, tool)) = settled else {
            return;
        };
        self.settle(&card_id, answer, &request_id, task, room, tool, &ev.id);
    }

    /// Gives `answer` to question `question` of the turn `request_id`, and keeps a standing approval it
    /// grants (for the task, or for the room).
    #[allow(clippy::too_many_arguments)]
    fn settle(
        &self,
        question: &EventId,
        answer: agentwire_core::Answer,
        request_id: &RequestId,
        task: EventId,
        room: String,
        tool: String,
        by: &EventId,
    ) {
        let card_id = question;
        let stands = match &answer {
            agentwire_core::Answer::Approve { choice } => Some(*choice),
            _ => None,
        };
        let said = self
            .shared
            .question_kind(card_id)
            .map(|kind| answer.describe(&kind))
            .unwrap_or_default();
        lock(&self.shared.answering_from_room).insert(*card_id, said);
        let taken = self
            .shared
            .engine
            .answer(request_id, &card_id.to_hex(), answer);
        lock(&self.shared.answering_from_room).remove(card_id);
        match taken {
            AnswerReply::Taken => match stands {
                Some(ApproveChoice::Session) => {
                    if let Some(f) = lock(&self.shared.running).get(&task) {
                        f.approve_for_task(&tool);
                    }
                }
                Some(ApproveChoice::Always) => {
                    lock(&self.shared.room_standing)
                        .entry(room)
                        .or_default()
                        .insert(tool);
                }
                _ => {}
            },
            other => tracing::debug!(answer = %by, ?other, "the answer was not taken"),
        }
    }
}

/// Two prompts as one turn's, in the order they came.
fn fold(first: &str, then: &str) -> String {
    format!("{first}\n\n{then}")
}

/// The request a `Merged into task <id>` error names.
fn merged_into(content: &str) -> Option<EventId> {
    EventId::from_hex(content.strip_prefix(MERGED_INTO)?.trim()).ok()
}
