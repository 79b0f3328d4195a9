//! The fisk-ai worker: serves the engine's agent on `choria.fisk-ai.task.<identity>` (NATS service API,
//! queue group `<identity>`), with discovery, and per turn a cancel and an elicit subscription made before
//! the ack. Admission, conversations and replay follow the spec; the wire layer is [`crate::wire`].

mod admission;
mod front;
mod jobs;
mod replyset;
mod turn;

pub use crate::stream::TEXT_COALESCE_WINDOW;
pub use front::{SilentFront, ANSWERED_BY_TURN_API, WARNING_QUESTION_ANSWERED};
pub use jobs::{
    JobsConfig, DEFAULT_JOBS_ACK_WAIT, MAX_JOBS_ACK_WAIT_SECS, MAX_JOBS_REPLICAS, MAX_QUEUED_JOBS,
};

use crate::conversation::Fingerprint;
use crate::wire::{self, nats, Identity, Reply};
use admission::Plan;
use agentwire_core::RequestId;
use agentwire_engine::Engine;
use async_nats::service::ServiceExt;
use futures_util::StreamExt;
use std::sync::Arc;
use std::time::Duration;

/// The protocol name under which fisk-ai turns are journaled.
pub const PROTOCOL: &str = "fisk";
/// Default worker slots: the spec's default of one run at a time.
pub const DEFAULT_WORKERS: usize = 1;
/// Default question window (`request_timeout`), as the spec's examples use.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Most worker slots accepted from configuration: each slot is a run in flight with its subscriptions.
pub const MAX_WORKERS: usize = 4096;

/// How the worker is set up.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The NATS servers and how to connect to them.
    pub nats: crate::connection::NatsConnect,
    /// The worker's identity (subjects and queue group).
    pub identity: String,
    /// Runs at a time; past it, requests are refused with `capacity`.
    pub workers: usize,
    /// Questions on (`elicit`); off refuses every approval-gated tool.
    pub elicit: bool,
    /// How long a question is held open (`request_timeout`).
    pub request_timeout: Duration,
    /// The system prompt (part of a conversation's fingerprint).
    pub system_prompt: String,
    /// The worker's token allowance per conversation; a request may only lower it.
    pub max_tokens: Option<u64>,
    /// This instance's name in `sender.instance` (several instances share an identity and a queue group).
    pub instance: Option<String>,
    /// Which callers are served, by `sender.name`.
    pub senders: SenderPolicy,
    /// The queued-jobs channel, when served (`[nats] jobs = true`).
    pub jobs: Option<JobsConfig>,
}

/// Which callers the worker serves, by the `sender.name` of their requests: the rest are refused
/// `rejected`. A caller names itself, so this keeps out callers that say who they are (another team's
/// agents, a retired tool); it is not authentication, which is the NATS server's (its users and their
/// subject permissions).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SenderPolicy {
    /// Only these, when given.
    pub allowed: Option<Vec<String>>,
    /// Never these.
    pub blocked: Vec<String>,
}

/// Why a [`SenderPolicy`] does not serve a caller (the `error`'s message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SenderRefusal {
    /// The caller is among the blocked ones.
    #[error("the sender {0:?} is blocked on this worker")]
    Blocked(String),
    /// Only some callers are served, and this one is not among them.
    #[error("the sender {0:?} is not among the senders this worker serves")]
    NotAllowed(String),
}

impl SenderPolicy {
    /// Whether caller `name` is served; if not, why (for the `error`'s message).
    pub fn admits(&self, name: &str) -> Result<(), SenderRefusal> {
        if self.blocked.iter().any(|b| b == name) {
            return Err(SenderRefusal::Blocked(name.to_owned()));
        }
        match &self.allowed {
            Some(allowed) if !allowed.iter().any(|a| a == name) => {
                Err(SenderRefusal::NotAllowed(name.to_owned()))
            }
            _ => Ok(()),
        }
    }
}

/// Why the worker did not start.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The identity is not a valid fisk-ai identity.
    #[error("identity {0:?} must be letters, digits, '-' and '_'")]
    Identity(String),
    /// Slots out of range.
    #[error("workers must be 1 to {MAX_WORKERS}, not {0}")]
    Workers(usize),
    /// No NATS server took the connection (or its settings are wrong).
    #[error(transparent)]
    Connect(#[from] crate::connection::ConnectError),
    /// The NATS service or one of its endpoints could not be started (`what`: which).
    #[error("nats: could not start the {what}: {source}")]
    Service {
        /// The service or the endpoint.
        what: &'static str,
        /// The client's error.
        #[source]
        source: async_nats::Error,
    },
}

/// The parts of the agent's card that every turn's admission reads.
struct AgentProfile {
    fingerprint: Fingerprint,
    tools: Vec<String>,
    model: String,
}

/// A running worker.
pub struct Worker {
    client: async_nats::Client,
    config: WorkerConfig,
    me: Identity,
    engine: Arc<Engine>,
    /// What admission needs of the agent's card, taken once at start: a card describes the agent as
    /// configured, and building it per request cost more than the rest of admission.
    profile: AgentProfile,
    service: tokio::sync::Mutex<Option<async_nats::service::Service>>,
    /// Requests being answered (their reply sets not yet ended), for a shutdown to wait on.
    open_sets: Arc<OpenSets>,
    /// Tells the endpoint loops to unsubscribe and end.
    stop: tokio::sync::watch::Sender<bool>,
    /// Each endpoint loop's end, after its unsubscribe.
    stopped: tokio::sync::Mutex<Vec<tokio::sync::oneshot::Receiver<()>>>,
    /// The jobs in the queue as last read (negative: not read yet, or no jobs served).
    jobs_queued: std::sync::atomic::AtomicI64,
}

impl Worker {
    /// Connects and starts serving. (Turns a crash cut off are ended by the engine's recovery pass, with
    /// [`SilentFront`] for this protocol.)
    pub async fn start(
        config: WorkerConfig,
        engine: Arc<Engine>,
    ) -> Result<Arc<Worker>, WorkerError> {
        let mut me = Identity::new(config.identity.clone())
            .map_err(|_| WorkerError::Identity(config.identity.clone()))?;
        if let Some(i) = &config.instance {
            me = me
                .with_instance(i.clone())
                .map_err(|_| WorkerError::Identity(i.clone()))?;
        }
        if config.workers == 0 || config.workers > MAX_WORKERS {
            return Err(WorkerError::Workers(config.workers));
        }
        let client = config
            .nats
            .connect(&format!("agentwire {}", config.identity))
            .await?;
        let service = client
            .service_builder()
            .description("agentwire fisk-ai worker")
            .queue_group(&config.identity)
            .start("agentwire", env!("CARGO_PKG_VERSION"))
            .await
            .map_err(|source| WorkerError::Service {
                what: "service",
                source,
            })?;
        let mut tasks = service
            .endpoint_builder()
            .name("task")
            .add(nats::task_subject(&config.identity))
            .await
            .map_err(|source| WorkerError::Service {
                what: "task endpoint",
                source,
            })?;
        let mut discovery = service
            .endpoint_builder()
            .name("discovery")
            .add(nats::discovery_subject(&config.identity))
            .await
            .map_err(|source| WorkerError::Service {
                what: "discovery endpoint",
                source,
            })?;
        let jobs = match &config.jobs {
            Some(j) => Some(jobs::open(&client, &config.identity, j).await?),
            None => None,
        };
        // The subscriptions are live at the server before anyone is told the worker is up. A server that
        // does not echo (a worker account without rights on its own inboxes) only loses that promise.
        if let Err(e) = server_sync(&client).await {
            tracing::warn!(error = %e, "could not confirm the worker's subscriptions with the server");
        }
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let (tasks_done, tasks_stopped) = tokio::sync::oneshot::channel();
        let (discovery_done, discovery_stopped) = tokio::sync::oneshot::channel();
        let card = engine.agent().card();
        let profile = AgentProfile {
            fingerprint: Fingerprint {
                model: card.default_model.clone(),
                system_prompt: config.system_prompt.clone(),
                thinking: String::new(),
                effort: String::new(),
            },
            tools: card.tools.into_iter().map(|t| t.name).collect(),
            model: card.default_model,
        };
        let worker = Arc::new(Worker {
            client,
            config,
            me,
            engine,
            profile,
            service: tokio::sync::Mutex::new(Some(service)),
            open_sets: Arc::default(),
            stop,
            stopped: tokio::sync::Mutex::new(vec![tasks_stopped, discovery_stopped]),
            jobs_queued: std::sync::atomic::AtomicI64::new(-1),
        });
        let (w, mut halt) = (worker.clone(), stop_rx.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    req = tasks.next() => match req {
                        Some(req) => {
                            let w = w.clone();
                            tokio::spawn(async move { w.handle_task(req).await });
                        }
                        None => break,
                    },
                    _ = halt.changed() => {
                        let _ = tasks.stop().await;
                        break;
                    }
                }
            }
            let _ = tasks_done.send(());
        });
        if let Some(queue) = jobs {
            let (jobs_done, jobs_stopped) = tokio::sync::oneshot::channel();
            worker.stopped.lock().await.push(jobs_stopped);
            tokio::spawn(jobs::serve(
                worker.clone(),
                queue,
                stop_rx.clone(),
                jobs_done,
            ));
        }
        let (w, mut halt) = (worker.clone(), stop_rx);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    req = discovery.next() => match req {
                        Some(req) => w.handle_discovery(req).await,
                        None => break,
                    },
                    _ = halt.changed() => {
                        let _ = discovery.stop().await;
                        break;
                    }
                }
            }
            let _ = discovery_done.send(());
        });
        Ok(worker)
    }

    /// The worker's identity.
    pub fn identity(&self) -> &str {
        &self.config.identity
    }

    /// Where it takes queued jobs (`choria.fisk-ai.jobs.<identity>`), when it serves them.
    pub fn jobs_subject(&self) -> Option<String> {
        self.config
            .jobs
            .as_ref()
            .map(|_| nats::jobs_subject(&self.config.identity))
    }

    /// The jobs in its queue, waiting or taken and not yet acknowledged, as last read (every few seconds);
    /// none when it serves no jobs or has not read the queue yet.
    pub fn jobs_queued(&self) -> Option<u64> {
        u64::try_from(self.jobs_queued.load(std::sync::atomic::Ordering::Relaxed)).ok()
    }

    /// The NATS server URL.
    pub fn url(&self) -> String {
        self.config.nats.shown()
    }

    /// Stops taking new runs (they are refused with `draining`) and waits for those in flight to finish,
    /// up to `grace`. The engine drains, so its other fronts take no new turns either. Returns how many
    /// turns were still running when it gave up.
    pub async fn drain(&self, grace: Duration) -> usize {
        self.engine.drain(grace).await
    }

    /// Drains (see [`drain`](Self::drain)) and then leaves the queue group: another instance takes the
    /// next request. Returns how many runs were still in flight.
    pub async fn shutdown(&self, grace: Duration) -> usize {
        let left = self.drain(grace).await;
        self.open_sets.wait_idle(grace).await;
        self.leave().await;
        left
    }

    /// Leaves the queue group: unsubscribes the endpoints and waits until the server has applied it.
    async fn leave(&self) {
        // Unsubscribe the endpoints and wait until the server has applied it, so that once this returns
        // the server routes no request here.
        self.stop.send_replace(true);
        for stopped in self.stopped.lock().await.drain(..) {
            let _ = stopped.await;
        }
        if let Some(service) = self.service.lock().await.take() {
            if let Err(e) = service.stop().await {
                tracing::warn!(error = %e, "could not stop the fisk-ai service cleanly");
            }
        }
        if let Err(e) = server_sync(&self.client).await {
            tracing::warn!(error = %e, "could not confirm that the server dropped the worker's subscriptions");
        }
    }

    async fn handle_discovery(&self, req: async_nats::service::Request) {
        let header = match wire::decode_discovery(&req.message.payload) {
            Ok(d) => d.header,
            Err(e) => {
                self.refuse_invalid(&req, &e).await;
                return;
            }
        };
        let card = self.engine.agent().card();
        let mut c = wire::AgentCard::new(self.config.identity.clone(), card.version.clone());
        c.description = Some(card.description.clone());
        c.model = Some(card.default_model.clone());
        c.protocols = vec![wire::PROTOCOL_NAMESPACE.trim_end_matches('.').to_string()];
        // `tools` are the tools this worker serves to peers (`tool.request`), and it serves none: the
        // agent's own tools are its business (NIP-XX's ai.info lists them), not a peer's to call. So
        // `c.tools` stays empty, as the spec says for an agent that serves no tools.
        // `telemetry` and `telemetry_content` are read off the engine's tracer, which exists only once its
        // exporter was set up: an endpoint that failed to set up does not make the card promise an export.
        let telemetry = self.engine.telemetry();
        c.telemetry = telemetry.exporting();
        c.telemetry_content = telemetry.content();
        let h = wire::Header::reply_to(
            &header,
            self.me.clone(),
            1,
            replyset::ksuid(),
            std::time::SystemTime::now(),
        );
        let bytes = wire::encode_reply(&h, &Reply::Discovery(c));
        let _ = req.respond(Ok(bytes.into())).await;
    }

    async fn handle_task(self: Arc<Self>, req: async_nats::service::Request) {
        let _open = OpenSets::enter(&self.open_sets);
        if let Some(header) = oversized_answer(&req.message.payload) {
            // Refused after an ack like any admission refusal, not as a malformed message: the size is
            // what is wrong, and sending the same answer again reaches the same reply.
            if let Some(inbox) = req.message.reply.clone() {
                admission::refuse(
                    &self,
                    Some(inbox),
                    header,
                    agentwire_core::Refusal::AnswerTooLarge,
                    format!("the answer is over {} KB", wire::MAX_ANSWER_BYTES / 1024),
                )
                .await;
            }
            return;
        }
        let task = match wire::decode_task(&req.message.payload) {
            Ok(t) => t,
            Err(e) => {
                self.refuse_invalid(&req, &e).await;
                return;
            }
        };
        let Some(inbox) = req.message.reply.clone() else {
            tracing::debug!("a fisk-ai request without a reply inbox was ignored");
            return;
        };
        match admission::plan(&self, &task, None).await {
            Plan::Invalid(e) => {
                self.refuse_invalid(&req, &e).await;
            }
            Plan::Refuse { code, message, .. } => {
                admission::refuse(&self, Some(inbox), task.header().clone(), code, message).await;
            }
            Plan::Read(read) => admission::read(&self, inbox, *read).await,
            Plan::Run(run) => {
                turn::run(self.clone(), Some(inbox), *run, None).await;
            }
        }
    }
}

/// How long start and shutdown wait for a round trip to the server: one takes well under a millisecond on
/// a healthy connection, and a server that is away (async-nats reconnecting) must not hold a shutdown.
const SERVER_SYNC_TIMEOUT: Duration = Duration::from_secs(2);

/// Waits until the server has applied everything this connection sent so far. A message to ourselves comes
/// back only after the server processed the subscriptions and unsubscriptions sent before it; a flush only
/// writes them to the socket, and another connection's request may still reach the server first.
async fn server_sync(client: &async_nats::Client) -> Result<(), SyncError> {
    let echo = async {
        let inbox = client.new_inbox();
        let mut sub = client.subscribe(inbox.clone()).await?;
        client.publish(inbox, Vec::new().into()).await?;
        client.flush().await?;
        sub.next().await.map(|_| ()).ok_or(SyncError::Closed)
    };
    // Every step is bounded: while async-nats reconnects, even a flush waits.
    tokio::time::timeout(SERVER_SYNC_TIMEOUT, echo)
        .await
        .map_err(|_| SyncError::TimedOut)?
}

/// Why [`server_sync`] could not confirm that the server applied what this connection sent.
#[derive(Debug, thiserror::Error)]
enum SyncError {
    /// Subscribing to the echo inbox failed.
    #[error(transparent)]
    Subscribe(#[from] async_nats::SubscribeError),
    /// Publishing the echo failed.
    #[error(transparent)]
    Publish(#[from] async_nats::PublishError),
    /// Flushing the connection failed.
    #[error(transparent)]
    Flush(#[from] async_nats::client::FlushError),
    /// The connection closed before the echo came back.
    #[error("the connection closed")]
    Closed,
    /// No echo within [`SERVER_SYNC_TIMEOUT`].
    #[error("no answer from the server in {:?}", SERVER_SYNC_TIMEOUT)]
    TimedOut,
}

/// Refuses a request that failed validation, before any ack: a NATS service error with code 400 naming
/// what failed.
impl Worker {
    /// Refuses a request that is not the protocol's shape with a 400 (counted as a refusal).
    async fn refuse_invalid(&self, req: &async_nats::service::Request, e: &wire::WireError) {
        self.engine.watch_hub().metrics().refused_invalid(PROTOCOL);
        refuse_invalid(req, e).await;
    }
}

async fn refuse_invalid(req: &async_nats::service::Request, e: &wire::WireError) {
    let _ = req
        .respond(Err(async_nats::service::error::Error {
            status: e.to_string(),
            code: nats::STATUS_INVALID as usize,
        }))
        .await;
}

/// A fresh message id (a KSUID).
pub fn message_id() -> String {
    replyset::ksuid().to_string()
}

/// The request id under which a fisk-ai `request` tag is journaled.
impl agentwire_engine::Front for Worker {
    fn protocol(&self) -> &'static str {
        PROTOCOL
    }

    fn recovery_front(
        &self,
        _turn: &agentwire_engine::StoredTurn,
    ) -> Option<Arc<dyn agentwire_engine::TurnFront>> {
        // The caller's inbox is gone with the crash: the outcome is journaled, and a resend is answered
        // from there.
        Some(Arc::new(SilentFront))
    }

    fn drain(&self, grace: Duration) -> futures_util::future::BoxFuture<'_, usize> {
        // A turn's final message is published by its reply set after the engine is done with the turn.
        Box::pin(self.open_sets.wait_idle(grace))
    }

    fn stop(&self) -> futures_util::future::BoxFuture<'_, ()> {
        Box::pin(self.leave())
    }
}

/// How many requests are being answered, and a wake-up when none is.
#[derive(Default)]
struct OpenSets {
    n: std::sync::atomic::AtomicUsize,
    idle: tokio::sync::Notify,
}

/// One request being answered; leaves its count when dropped.
struct OpenSet(Arc<OpenSets>);

impl OpenSets {
    fn enter(this: &Arc<OpenSets>) -> OpenSet {
        this.n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        OpenSet(this.clone())
    }

    /// Waits until no request is being answered, up to `grace`; returns how many still were.
    async fn wait_idle(&self, grace: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            let notified = self.idle.notified();
            let n = self.n.load(std::sync::atomic::Ordering::SeqCst);
            if n == 0 {
                return 0;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.n.load(std::sync::atomic::Ordering::SeqCst);
            }
        }
    }
}

impl Drop for OpenSet {
    fn drop(&mut self) {
        if self.0.n.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

pub(crate) fn request_id(request: &str) -> RequestId {
    RequestId::new(format!("{PROTOCOL}:{request}")).expect("a 64-character tag makes a valid id")
}

/// The header of a `request.answer` whose answer is over [`wire::MAX_ANSWER_BYTES`] but which is otherwise
/// a valid message (checked with the answer's text emptied).
fn oversized_answer(payload: &[u8]) -> Option<wire::Header> {
    if payload.len() <= wire::MAX_ANSWER_BYTES {
        return None;
    }
    let mut v: serde_json::Value = serde_json::from_slice(payload).ok()?;
    let answer = v.get_mut("answer")?;
    if answer.to_string().len() <= wire::MAX_ANSWER_BYTES {
        return None;
    }
    if let Some(value) = answer.get_mut("value") {
        *value = serde_json::Value::String(String::new());
    }
    match wire::decode_task(v.to_string().as_bytes()) {
        Ok(wire::TaskRequest::Answer(a)) => Some(a.header),
        _ => None,
    }
}
