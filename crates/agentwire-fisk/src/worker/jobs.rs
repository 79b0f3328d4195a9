//! The queued-jobs channel: a caller enqueues a `request.prompt` on `choria.fisk-ai.jobs.<identity>`, a
//! JetStream work-queue stream (`FISK_AI_JOBS_<identity>`) holds it until a worker of that identity has a
//! free slot, and the job's reply set goes to the subject its `Fisk-AI-Reply-To` header names.
//!
//! A job is acknowledged only once its turn's outcome is durable (the engine journals an outcome before
//! any front sees it, and the ack follows the reply set's last message); until then the worker tells the
//! server it is still at work. A job delivered again (its worker died, or an ack was lost) is answered
//! from the journal, never run twice: the turn's route holds the job's stream sequence, so the same job is
//! known even when it started a conversation whose token is not kept. A job the worker cannot take now
//! (every slot busy, its conversation's turn running, the worker draining, the journal unreadable or
//! unwritable) goes back to the queue for later; any other request kind, or a message that is not a
//! request, is refused on the reply subject and leaves the queue.

use super::admission::{self, Plan};
use super::replyset::service_error;
use super::turn::{self, Ran};
use super::{OpenSets, Worker, WorkerError, PROTOCOL};
use crate::conversation::conversation_id;
use crate::wire::{self, nats, TaskRequest};
use async_nats::jetstream::{self, consumer, stream, AckKind};
use futures_util::StreamExt;
use std::collections::{HashMap, VecDeque};
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
/// How long a job given back waits before it is delivered again: the slot or turn it waited on is
/// typically free within a second, and a shorter wait would spin on a long turn.
const RETRY_DELAY: Duration = Duration::from_secs(1);
/// How long one pull waits for a job before asking again (and noticing a stop).
const PULL_WAIT: Duration = Duration::from_secs(5);
/// How long the worker waits before pulling again after a pull failed (JetStream away, the connection
/// reconnecting).
const PULL_BACKOFF: Duration = Duration::from_secs(1);
/// How often a worker with every slot busy looks for a free one.
const SLOT_POLL: Duration = Duration::from_millis(100);

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

/// Creates (or finds) the identity's jobs stream and its shared durable consumer.
pub(super) async fn open(
    client: &async_nats::Client,
    identity: &str,
    config: &JobsConfig,
) -> Result<consumer::PullConsumer, WorkerError> {
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
    stream
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
        })
}

/// Takes jobs while a slot is free, until `halt` changes or the worker drains; `done` says it stopped.
pub(super) async fn serve(
    worker: Arc<Worker>,
    consumer: consumer::PullConsumer,
    mut halt: tokio::sync::watch::Receiver<bool>,
    done: tokio::sync::oneshot::Sender<()>,
) {
    // A job in hand holds one of these from its pull to its ack: with the engine's slots (which the
    // request channel shares) it keeps the worker from pulling more than it can run.
    let in_hand = Arc::new(tokio::sync::Semaphore::new(worker.config.workers));
    let ack_wait = worker.config.jobs.clone().unwrap_or_default().ack_wait;
    let lanes: Lanes = Arc::default();
    let mut failing = false;
    loop {
        if *halt.borrow() || worker.engine.draining() {
            break;
        }
        let permit = tokio::select! {
            p = in_hand.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = halt.changed() => break,
        };
        if worker.engine.slots_in_use(PROTOCOL) >= worker.config.workers {
            drop(permit);
            tokio::select! {
                () = tokio::time::sleep(SLOT_POLL) => continue,
                _ = halt.changed() => break,
            }
        }
        let pulled = tokio::select! {
            b = pull(&consumer) => b,
            _ = halt.changed() => break,
        };
        match pulled {
            Ok(Some(job)) => {
                failing = false;
                let hand = InHand::new(job, permit, ack_wait);
                let Some(lane) = lane_of(&hand.job.payload) else {
                    tokio::spawn(take(worker.clone(), hand));
                    continue;
                };
                {
                    let mut lanes = lanes.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(waiting) = lanes.get_mut(&lane) {
                        // A job of this conversation is in hand: this one follows it.
                        waiting.push_back(hand);
                        continue;
                    }
                    lanes.insert(lane.clone(), VecDeque::new());
                }
                tokio::spawn(run_lane(worker.clone(), lanes.clone(), lane, hand));
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

/// A job taken off the queue and not yet settled: its slot permit, and the progress notes that keep it
/// this worker's while it waits or runs.
struct InHand {
    job: Arc<jetstream::Message>,
    _permit: tokio::sync::OwnedSemaphorePermit,
    progress: tokio::task::JoinHandle<()>,
}

impl InHand {
    fn new(
        job: jetstream::Message,
        permit: tokio::sync::OwnedSemaphorePermit,
        ack_wait: Duration,
    ) -> InHand {
        let job = Arc::new(job);
        let progress = tokio::spawn(keep_taken(job.clone(), ack_wait));
        InHand {
            job,
            _permit: permit,
            progress,
        }
    }
}

impl Drop for InHand {
    fn drop(&mut self) {
        self.progress.abort();
    }
}

/// The jobs in hand of each conversation (by its id) after the one being handled, in the order they came
/// off the queue: a conversation's jobs run in their queue order, not racing for its one turn at a time.
type Lanes = Arc<std::sync::Mutex<HashMap<String, VecDeque<InHand>>>>;

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

/// Handles `first` and then each job of its conversation that came in meanwhile, until none waits.
async fn run_lane(worker: Arc<Worker>, lanes: Lanes, lane: String, first: InHand) {
    let mut hand = first;
    loop {
        take(worker.clone(), hand).await;
        let mut all = lanes.lock().unwrap_or_else(|p| p.into_inner());
        match all.get_mut(&lane).and_then(VecDeque::pop_front) {
            Some(next) => hand = next,
            None => {
                all.remove(&lane);
                return;
            }
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

/// Handles one job to its ack (answered), its return to the queue (not taken now) or its removal (not a
/// job the channel takes).
async fn take(worker: Arc<Worker>, hand: InHand) {
    let _open = OpenSets::enter(&worker.open_sets);
    let job = hand.job.clone();
    let id = match job.info() {
        Ok(info) => format!("{}:{}", info.stream, info.stream_sequence),
        Err(e) => {
            tracing::warn!(error = %e, "a queued job without its stream position was dropped");
            return settle(&job, AckKind::Term).await;
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
            return settle(&job, AckKind::Term).await;
        }
        // Run all the same: its outcome is journaled, and a conversation it joined can be read back.
        None => None,
    };
    let refuse = |text: String| {
        let (client, reply_to, job_id) = (worker.client.clone(), reply_to.clone(), id.clone());
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
            return settle(&job, AckKind::Term).await;
        }
        Err(e) => {
            refuse(e.to_string()).await;
            return settle(&job, AckKind::Term).await;
        }
    };
    let plan = admission::plan(&worker, &task, Some(&id)).await;
    let run = match plan {
        Plan::Run(run) => run,
        Plan::Refuse {
            transient: true, ..
        } => return settle(&job, AckKind::Nak(Some(RETRY_DELAY))).await,
        Plan::Refuse { code, message, .. } => {
            admission::refuse(&worker, reply_to, task.header().clone(), code, message).await;
            return settle(&job, AckKind::Ack).await;
        }
        Plan::Invalid(e) => {
            refuse(e.to_string()).await;
            return settle(&job, AckKind::Term).await;
        }
        // A prompt is never a read.
        Plan::Read(_) => return settle(&job, AckKind::Term).await,
    };
    if let Some(stored) = &run.resend {
        let elsewhere = stored.owner != worker.engine.owner();
        if stored.outcome.is_none() && (elsewhere || worker.engine.is_live(&stored.request_id)) {
            // Still running (here, its ack wait passed; or on another instance of a shared journal): its
            // own reply set answers it, and this delivery goes back until it has ended.
            return settle(&job, AckKind::Nak(Some(RETRY_DELAY))).await;
        }
    }
    let ran = turn::run(worker.clone(), reply_to, *run, Some(id.clone())).await;
    match ran {
        Ran::Answered => {
            // The outcome is durable: the job leaves the queue. An ack that is lost only means one more
            // delivery, answered from the journal.
            if let Err(e) = job.double_ack().await {
                tracing::warn!(job = %id, error = %e, "could not confirm a finished job's ack; a redelivery is answered from the journal");
            }
        }
        Ran::NotTaken => settle(&job, AckKind::Nak(Some(RETRY_DELAY))).await,
    }
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
