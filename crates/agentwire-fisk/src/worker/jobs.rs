//! The queued-jobs channel: a caller enqueues a `request.prompt` on `choria.fisk-ai.jobs.<identity>`, a
//! JetStream work-queue stream (`FISK_AI_JOBS_<identity>`) holds it until a worker of that identity has a
//! free slot, and the job's reply set goes to the subject its `Fisk-AI-Reply-To` header names.
//!
//! A job is acknowledged only once its turn's outcome is durable (the engine journals an outcome before
//! any front sees it, and the ack follows the reply set's last message); until then the worker tells the
//! server it is still at work. A job delivered again (its worker died, or an ack was lost) is answered
//! from the journal, never run twice: the turn's route holds the job's stream sequence, so the same job is
//! known even when it started a conversation whose token is not kept. A job the worker cannot take now
//! (every slot busy, the worker draining, the journal unreadable or unwritable, the same job still
//! running) goes back to the queue for later, waiting longer each time; a job of a conversation whose turn
//! runs, or that follows another job of it this worker holds, waits in hand in its conversation's lane,
//! so one conversation's jobs run in their queue order. Any other request kind, or a message that is not
//! a request, is refused on the reply subject and leaves the queue; a job its caller took off the queue
//! before it started (`ask --queue` given up) is dropped unrun.

use super::admission::{self, Plan};
use super::replyset::service_error;
use super::turn::{self, Ran};
use super::{OpenSets, Worker, WorkerError, PROTOCOL};
use crate::conversation::conversation_id;
use crate::wire::{self, nats, TaskRequest};
use async_nats::jetstream::{self, consumer, stream, AckKind};
use futures_util::StreamExt;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The most jobs an identity's queue holds; past it a new job is refused at publish (the stream discards
/// new messages), so a runaway producer gets an error instead of filling the server's disk. Ten thousand
/// is days of work for a worker whose turns take tens of seconds.
pub const MAX_QUEUED_JOBS: i64 = 10_000;
/// How long the server waits for a taken job's ack (or a progress note) before giving it to another
/// worker, when `[nats] jobs_ack_wait_secs` is not set: long enough for a loaded worker's progress notes
/// (every third of it) to arrive, short enough that a dead worker's job moves on within a minute.
pub const DEFAULT_JOBS_ACK_WAIT: Duration = Duration::from_secs(30);
/// The longest `jobs_ack_wait_secs`: an hour before a dead worker's job moves on is already long.
pub const MAX_JOBS_ACK_WAIT_SECS: u64 = 3600;
/// The most replicas of the jobs stream: JetStream's own bound.
pub const MAX_JOBS_REPLICAS: usize = 5;
/// The key of the turn's route holding the job's id (`<stream>:<stream sequence>`).
pub(super) const ROUTE_KEY: &str = "job";
/// How long a job not taken waits before it is tried again the first time: the slot or turn it waited on
/// is typically free within a second. Each further try waits twice as long, up to [`MAX_RETRY_DELAY`].
const RETRY_DELAY: Duration = Duration::from_secs(1);
/// The longest wait between tries of a job not taken: a conversation's turn may hold it for as long as a
/// question stays open (minutes), and trying more often than this only costs journal reads.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(8);
/// The most jobs held waiting behind their conversation's running turn, over all conversations: each is a
/// message in hand with its progress notes, holding no slot. Past it a job goes back to the queue (and
/// its conversation's order is then the queue's redelivery order).
const MAX_JOBS_WAITING: usize = 64;
/// How long one pull waits for a job before asking again (and noticing a stop).
const PULL_WAIT: Duration = Duration::from_secs(5);
/// How long the worker waits before pulling again after a pull failed (JetStream away, the connection
/// reconnecting).
const PULL_BACKOFF: Duration = Duration::from_secs(1);
/// How often a worker with every slot busy looks for a free one.
const SLOT_POLL: Duration = Duration::from_millis(100);
/// How often the worker reads its queue's depth (for `/metrics`): one JetStream API call, and an operator's
/// scrape every 15 s or so sees a figure at most this old.
const DEPTH_EVERY: Duration = Duration::from_secs(5);

/// How the jobs channel is set up (`[nats] jobs = true`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobsConfig {
    /// The consumer's ack wait (see [`DEFAULT_JOBS_ACK_WAIT`]).
    pub ack_wait: Duration,
    /// Replicas of the jobs stream (on a cluster).
    pub replicas: usize,
}

impl Default for JobsConfig {
    fn default() -> Self {
        JobsConfig {
            ack_wait: DEFAULT_JOBS_ACK_WAIT,
            replicas: 1,
        }
    }
}

/// The identity's queue as a worker holds it.
pub(super) struct Queue {
    stream: stream::Stream,
    consumer: consumer::PullConsumer,
}

/// Creates (or finds) the identity's jobs stream and its shared durable consumer. The stream's settings
/// are those of the worker that created it; the consumer's ack wait is the last starting worker's.
pub(super) async fn open(
    client: &async_nats::Client,
    identity: &str,
    config: &JobsConfig,
) -> Result<Queue, WorkerError> {
    let js = jetstream::new(client.clone());
    let stream = js
        .get_or_create_stream(stream::Config {
            name: nats::jobs_stream(identity),
            description: Some(format!("fisk-ai jobs queued for {identity}")),
            subjects: vec![nats::jobs_subject(identity)],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            max_messages: MAX_QUEUED_JOBS,
            max_message_size: wire::MAX_MESSAGE_BYTES as i32,
            discard: stream::DiscardPolicy::New,
            num_replicas: config.replicas,
            ..Default::default()
        })
        .await
        .map_err(|e| WorkerError::Service {
            what: "jobs stream (does the server run JetStream?)",
            source: Box::new(e),
        })?;
    let consumer = stream
        .create_consumer(consumer::pull::Config {
            durable_name: Some(identity.to_string()),
            description: Some(format!("the workers of {identity}")),
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait: config.ack_wait,
            filter_subject: nats::jobs_subject(identity),
            ..Default::default()
        })
        .await
        .map_err(|e| WorkerError::Service {
            what: "jobs consumer",
            source: Box::new(e),
        })?;
    Ok(Queue { stream, consumer })
}

/// Takes jobs while a slot is free, until `halt` changes or the worker drains; `done` says it stopped.
pub(super) async fn serve(
    worker: Arc<Worker>,
    queue: Queue,
    mut halt: tokio::sync::watch::Receiver<bool>,
    done: tokio::sync::oneshot::Sender<()>,
) {
    // The consumer's own ack wait (shared by every instance, the last to start set it), not this
    // worker's setting: progress notes must come within it.
    let ack_wait = match queue.consumer.cached_info().config.ack_wait {
        d if d.is_zero() => DEFAULT_JOBS_ACK_WAIT,
        d => d,
    };
    tokio::spawn(read_depth(
        worker.clone(),
        queue.stream.clone(),
        halt.clone(),
    ));
    let hands = Arc::new(Hands {
        slots: Arc::new(tokio::sync::Semaphore::new(worker.config.workers)),
        worker: worker.clone(),
        stream: queue.stream,
        lanes: std::sync::Mutex::default(),
        waiting: AtomicUsize::new(0),
    });
    let mut failing = false;
    loop {
        if *halt.borrow() || worker.engine.draining() {
            break;
        }
        let permit = tokio::select! {
            p = hands.slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = halt.changed() => break,
        };
        // The request subject shares the engine's slots: no job is taken while they are all busy.
        if worker.engine.slots_in_use(PROTOCOL) >= worker.config.workers {
            drop(permit);
            tokio::select! {
                () = tokio::time::sleep(SLOT_POLL) => continue,
                _ = halt.changed() => break,
            }
        }
        let pulled = tokio::select! {
            b = pull(&queue.consumer) => b,
            _ = halt.changed() => break,
        };
        match pulled {
            Ok(Some(job)) => {
                failing = false;
                hands.clone().arrive(InHand::new(job, ack_wait), permit);
            }
            Ok(None) => failing = false,
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, "could not take a queued job; trying again");
                }
                failing = true;
                tokio::select! {
                    () = tokio::time::sleep(PULL_BACKOFF) => {}
                    _ = halt.changed() => break,
                }
            }
        }
    }
    let _ = done.send(());
}

/// Reads the queue's depth every [`DEPTH_EVERY`] until `halt` changes; a read that fails leaves the last.
async fn read_depth(
    worker: Arc<Worker>,
    stream: stream::Stream,
    mut halt: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        if let Ok(info) = stream.get_info().await {
            let n = i64::try_from(info.state.messages).unwrap_or(i64::MAX);
            worker.jobs_queued.store(n, Ordering::Relaxed);
        }
        tokio::select! {
            () = tokio::time::sleep(DEPTH_EVERY) => {}
            _ = halt.changed() => return,
        }
    }
}

/// One job from the queue, waiting up to [`PULL_WAIT`] for it.
async fn pull(
    consumer: &consumer::PullConsumer,
) -> Result<Option<jetstream::Message>, async_nats::Error> {
    let mut batch = consumer
        .batch()
        .max_messages(1)
        .expires(PULL_WAIT)
        .messages()
        .await?;
    match batch.next().await {
        Some(Ok(m)) => Ok(Some(m)),
        Some(Err(e)) => Err(e),
        None => Ok(None),
    }
}

/// A job taken off the queue and not yet settled, with the progress notes that keep it this worker's
/// while it waits or runs (they stop when it is dropped, and the job is then delivered again after the
/// ack wait).
struct InHand {
    job: Arc<jetstream::Message>,
    progress: tokio::task::JoinHandle<()>,
}

impl InHand {
    fn new(job: jetstream::Message, ack_wait: Duration) -> InHand {
        let job = Arc::new(job);
        let progress = tokio::spawn(keep_taken(job.clone(), ack_wait));
        InHand { job, progress }
    }

    /// How many times the job was delivered (1 the first time).
    fn delivered(&self) -> u32 {
        self.job
            .info()
            .map(|i| i.delivered.clamp(1, i64::from(u32::MAX)) as u32)
            .unwrap_or(1)
    }
}

impl Drop for InHand {
    fn drop(&mut self) {
        self.progress.abort();
    }
}

/// How a job's handling ended.
enum Taken {
    /// Acked, given back or dropped with the server.
    Settled,
    /// Not taken now (see [`Plan::Refuse`]'s `transient`): still in hand, for the caller to try again or
    /// give back.
    Later(InHand),
}

/// The wait before try `attempt` (0 the first) of a job not taken.
fn retry_delay(attempt: u32) -> Duration {
    RETRY_DELAY
        .saturating_mul(1u32 << attempt.min(8))
        .min(MAX_RETRY_DELAY)
}

/// What the pull loop shares with the jobs it took.
struct Hands {
    worker: Arc<Worker>,
    stream: stream::Stream,
    /// A job being handled holds one: with the engine's slots it keeps the worker from taking more than
    /// it can run. A job waiting in a lane holds none.
    slots: Arc<tokio::sync::Semaphore>,
    /// The jobs in hand of each conversation (by its id) after the one being handled, in the order they
    /// came off the queue.
    lanes: std::sync::Mutex<HashMap<String, VecDeque<InHand>>>,
    /// How many jobs wait in lanes.
    waiting: AtomicUsize,
}

impl Hands {
    fn lanes(&self) -> std::sync::MutexGuard<'_, HashMap<String, VecDeque<InHand>>> {
        self.lanes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Handles a job just pulled (holding `permit`): at once, or behind its conversation's jobs in hand.
    fn arrive(self: Arc<Self>, hand: InHand, permit: tokio::sync::OwnedSemaphorePermit) {
        let Some(lane) = lane_of(&hand.job.payload) else {
            tokio::spawn(self.run_alone(hand, permit));
            return;
        };
        let mut lanes = self.lanes();
        if let Some(waiting) = lanes.get_mut(&lane) {
            drop(permit);
            if self.waiting.load(Ordering::SeqCst) >= MAX_JOBS_WAITING {
                drop(lanes);
                let delay = retry_delay(hand.delivered() - 1);
                tokio::spawn(async move { settle(&hand.job, AckKind::Nak(Some(delay))).await });
                return;
            }
            // A job of this conversation is in hand: this one follows it.
            self.waiting.fetch_add(1, Ordering::SeqCst);
            waiting.push_back(hand);
            return;
        }
        lanes.insert(lane.clone(), VecDeque::new());
        drop(lanes);
        tokio::spawn(self.run_lane(lane, hand, permit));
    }

    /// A job of no conversation yet: handled, and given back when not taken now.
    async fn run_alone(self: Arc<Self>, hand: InHand, permit: tokio::sync::OwnedSemaphorePermit) {
        if let Taken::Later(hand) = self.take(hand).await {
            let delay = retry_delay(hand.delivered() - 1);
            settle(&hand.job, AckKind::Nak(Some(delay))).await;
        }
        drop(permit);
    }

    /// Handles `first`, then each job of its conversation that came in meanwhile, in order, until none
    /// waits. A job not taken now keeps its place (the ones behind it wait) and is tried again, unless the
    /// worker drains: then it and the rest go back to the queue.
    async fn run_lane(
        self: Arc<Self>,
        lane: String,
        first: InHand,
        permit: tokio::sync::OwnedSemaphorePermit,
    ) {
        let _guard = LaneGuard {
            hands: self.clone(),
            lane: lane.clone(),
        };
        let (mut hand, mut permit, mut attempt) = (first, Some(permit), 0u32);
        loop {
            let slot = match permit.take() {
                Some(p) => p,
                None => match self.slots.clone().acquire_owned().await {
                    Ok(p) => p,
                    Err(_) => return,
                },
            };
            match self.take(hand).await {
                Taken::Settled => attempt = 0,
                Taken::Later(h) if self.worker.engine.draining() => {
                    settle(&h.job, AckKind::Nak(None)).await;
                }
                Taken::Later(h) => {
                    drop(slot);
                    tokio::time::sleep(retry_delay(attempt)).await;
                    attempt = attempt.saturating_add(1);
                    hand = h;
                    continue;
                }
            }
            drop(slot);
            let mut lanes = self.lanes();
            match lanes.get_mut(&lane).and_then(VecDeque::pop_front) {
                Some(next) => {
                    self.waiting.fetch_sub(1, Ordering::SeqCst);
                    hand = next;
                }
                None => {
                    lanes.remove(&lane);
                    return;
                }
            }
        }
    }

    /// Handles one job to its ack (answered), its removal (not a job the channel takes, or taken back by
    /// its caller), or [`Taken::Later`].
    async fn take(&self, hand: InHand) -> Taken {
        let worker = &self.worker;
        let _open = OpenSets::enter(&worker.open_sets);
        let job = hand.job.clone();
        let (id, sequence) = match job.info() {
            Ok(info) => (
                format!("{}:{}", info.stream, info.stream_sequence),
                info.stream_sequence,
            ),
            Err(e) => {
                tracing::warn!(error = %e, "a queued job without its stream position was dropped");
                settle(&job, AckKind::Term).await;
                return Taken::Settled;
            }
        };
        let reply_to = match job
            .headers
            .as_ref()
            .and_then(|h| h.get(nats::HEADER_REPLY_TO))
        {
            Some(s) if nats::valid_reply_subject(s.as_str()) => {
                Some(async_nats::Subject::from(s.as_str()))
            }
            Some(s) => {
                tracing::warn!(job = %id, bytes = s.as_str().len(), "a queued job's {} is not a subject a reply can go to; the job was dropped", nats::HEADER_REPLY_TO);
                settle(&job, AckKind::Term).await;
                return Taken::Settled;
            }
            // Run all the same: its outcome is journaled, and a conversation it joined can be read back.
            None => None,
        };
        let refuse = |text: String| {
            let (client, reply_to, job_id) = (worker.client.clone(), reply_to.clone(), id.clone());
            worker
                .engine
                .watch_hub()
                .metrics()
                .refused_invalid(super::PROTOCOL);
            async move {
                tracing::info!(job = %job_id, reason = %text, "refused a queued job");
                if let Some(r) = reply_to {
                    service_error(&client, r, nats::STATUS_INVALID, &text).await;
                }
            }
        };
        let task = match wire::decode_task(&job.payload) {
            Ok(TaskRequest::Prompt(p)) => TaskRequest::Prompt(p),
            Ok(other) => {
                refuse(format!(
                    "the queued-jobs channel takes request.prompt only; send {} to {}",
                    other.protocol(),
                    nats::task_subject(&worker.config.identity)
                ))
                .await;
                settle(&job, AckKind::Term).await;
                return Taken::Settled;
            }
            Err(e) => {
                refuse(e.to_string()).await;
                settle(&job, AckKind::Term).await;
                return Taken::Settled;
            }
        };
        let run = match admission::plan(worker, &task, Some(&id)).await {
            Plan::Run(run) => run,
            Plan::Refuse {
                transient: true, ..
            } => return Taken::Later(hand),
            Plan::Refuse { code, message, .. } => {
                admission::refuse(worker, reply_to, task.header().clone(), code, message).await;
                settle(&job, AckKind::Ack).await;
                return Taken::Settled;
            }
            Plan::Invalid(e) => {
                refuse(e.to_string()).await;
                settle(&job, AckKind::Term).await;
                return Taken::Settled;
            }
            // A prompt is never a read.
            Plan::Read(_) => {
                settle(&job, AckKind::Term).await;
                return Taken::Settled;
            }
        };
        if let Some(stored) = &run.resend {
            let elsewhere = stored.owner != worker.engine.owner();
            if stored.outcome.is_none() && (elsewhere || worker.engine.is_live(&stored.request_id))
            {
                // Still running (here, its ack wait passed; or on another instance of a shared
                // journal): its own reply set answers it, and this delivery waits until it has ended.
                return Taken::Later(hand);
            }
        } else if self.taken_back(sequence).await {
            // Its caller gave up on it and took it off the queue while this worker held it.
            tracing::info!(job = %id, "a queued job was taken back by its caller before it started");
            settle(&job, AckKind::Term).await;
            return Taken::Settled;
        }
        match turn::run(worker.clone(), reply_to, *run, Some(id.clone())).await {
            Ran::Answered => {
                // The outcome is durable: the job leaves the queue. An ack that is lost only means one
                // more delivery, answered from the journal.
                if let Err(e) = job.double_ack().await {
                    tracing::warn!(job = %id, error = %e, "could not confirm a finished job's ack; a redelivery is answered from the journal");
                }
                Taken::Settled
            }
            Ran::NotTaken => Taken::Later(hand),
        }
    }

    /// Whether job `sequence` is gone from the stream (its caller deleted it): a job in hand stays in a
    /// work queue until acked. A check that fails says no: the job runs.
    async fn taken_back(&self, sequence: u64) -> bool {
        match self.stream.get_raw_message(sequence).await {
            Ok(_) => false,
            Err(e) => matches!(e.kind(), stream::LastRawMessageErrorKind::NoMessageFound),
        }
    }
}

/// Ends a lane whose task panicked: its waiting jobs are dropped (their progress notes stop, so the
/// queue delivers them again after the ack wait) and the conversation's next job starts a lane anew.
struct LaneGuard {
    hands: Arc<Hands>,
    lane: String,
}

impl Drop for LaneGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Some(waiting) = self.hands.lanes().remove(&self.lane) {
                self.hands
                    .waiting
                    .fetch_sub(waiting.len(), Ordering::SeqCst);
            }
        }
    }
}

/// The conversation a job joins (none for a job that starts one, or one that is not a request), read
/// before it is validated: it only orders the job behind the conversation's others.
fn lane_of(payload: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Joins<'a> {
        #[serde(borrow)]
        conversation_token: Option<std::borrow::Cow<'a, str>>,
    }
    let joins: Joins<'_> = serde_json::from_slice(payload).ok()?;
    joins
        .conversation_token
        .map(|t| conversation_id(&t).to_string())
}

/// Tells the server every third of `ack_wait` that the job is still being worked on.
async fn keep_taken(job: Arc<jetstream::Message>, ack_wait: Duration) {
    let every = ack_wait / 3;
    loop {
        tokio::time::sleep(every).await;
        if let Err(e) = job.ack_with(AckKind::Progress).await {
            tracing::debug!(error = %e, "could not note a job's progress");
        }
    }
}

/// Acks, gives back or drops a job, saying so in the log when the server is not told.
async fn settle(job: &jetstream::Message, kind: AckKind) {
    if let Err(e) = job.ack_with(kind).await {
        tracing::warn!(error = %e, "could not settle a queued job with the server; it is delivered again after the ack wait");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_not_taken_waits_longer_each_try_up_to_the_bound() {
        let waits: Vec<u64> = (0..6).map(|a| retry_delay(a).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 8, 8]);
        assert_eq!(retry_delay(u32::MAX), MAX_RETRY_DELAY);
    }

    #[test]
    fn a_job_joins_the_lane_of_its_conversation_token() {
        let job = |token: &str| {
            format!(
                r#"{{"protocol":"io.choria.fisk-ai.v1.request.prompt","conversation_token":{token}}}"#
            )
        };
        let a = lane_of(job("\"abc\"").as_bytes()).unwrap();
        assert_eq!(a, conversation_id("abc").to_string());
        assert_ne!(Some(a), lane_of(job("\"abd\"").as_bytes()));
        assert_eq!(lane_of(job("null").as_bytes()), None);
        assert_eq!(lane_of(b"{\"prompt\":\"hi\"}"), None);
        assert_eq!(lane_of(b"not json"), None);
        assert_eq!(lane_of(job("7").as_bytes()), None, "not a token: no lane");
    }
}
