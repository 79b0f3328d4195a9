//! The store's threads: one writer thread that commits inserts in groups, and a small pool of
//! read connections that run queries on blocking threads.
//!
//! The writer drains every pending insert into one transaction (`synchronous=FULL`), commits,
//! then hands each new event to the live fan-out's ring and answers each insert through its
//! oneshot, with the exempt connections the publisher must still hand the event to (`fanout`).
//! So an `OK true` is only ever sent for a committed event, and live subscribers only ever see
//! committed stored events. The writer never waits on a subscriber: the waiting for an exempt
//! connection's queue is done by the publisher's connection task.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;

use nostr::event::Event;
use nostr::filter::Filter;
use nostr::key::Keys;
use nostr::types::Timestamp;
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::error::RelayError;
use crate::fanout::{Fanout, Peers};
use crate::limits::{MAX_CONCURRENT_QUERIES, MAX_WRITE_BATCH};
use crate::notify::{notifications, Notifier};
use crate::retention::RetentionPolicy;
use crate::rooms::{self, Rooms};
use crate::session::Published;
use crate::store::{EventStore, InsertOutcome, StoredEvent};

/// The answer to one insert.
pub(crate) type InsertReply = Result<InsertOutcome, RelayError>;

/// What the writer answers for one insert.
#[derive(Debug)]
pub(crate) struct Committed {
    pub(crate) outcome: InsertReply,
    /// For a new event: the exempt connections it was published to, which the publisher hands it
    /// to. `None` when it is not new or no connection is exempt.
    pub(crate) exempt: Option<Peers>,
}

/// Work for the writer thread.
#[derive(Debug)]
pub(crate) enum WriteOp {
    /// Store an event and answer on `reply` once committed.
    Insert {
        published: Arc<Published>,
        reply: oneshot::Sender<Committed>,
    },
    /// Delete events expired at this time.
    Purge(Timestamp),
}

/// What the writer needs to act on committed room moderation events: the rooms, and the relay's key for
/// their new metadata.
#[derive(Debug)]
pub(crate) struct RoomUpdates {
    pub(crate) rooms: Arc<RwLock<Rooms>>,
    pub(crate) keys: Keys,
    /// The `created_at` of the newest metadata the relay signed: the next is later, so that it replaces
    /// the one before even within the same second (addressable events keep the newest).
    pub(crate) signed_at: std::cell::Cell<u64>,
}

impl RoomUpdates {
    /// A `created_at` for new metadata: now, or a second after the last, whichever is later.
    pub(crate) fn next_signing_time(&self) -> Timestamp {
        let at = Timestamp::now()
            .as_secs()
            .max(self.signed_at.get().saturating_add(1));
        self.signed_at.set(at);
        Timestamp::from_secs(at)
    }
}

/// Starts the writer thread. It ends when every sender of `ops` is gone, after finishing the
/// work already queued.
pub(crate) fn spawn_writer(
    store: EventStore,
    ops: mpsc::Receiver<WriteOp>,
    fanout: Arc<Fanout>,
    rooms: Option<RoomUpdates>,
    retention: RetentionPolicy,
    notifier: Option<Arc<dyn Notifier>>,
) -> Result<JoinHandle<()>, RelayError> {
    std::thread::Builder::new()
        .name("agentwire-relay-writer".to_owned())
        .spawn(move || run_writer(store, ops, fanout, rooms, retention, notifier))
        .map_err(|e| RelayError::Internal(format!("cannot start the writer thread: {e}")))
}

fn run_writer(
    mut store: EventStore,
    mut ops: mpsc::Receiver<WriteOp>,
    fanout: Arc<Fanout>,
    rooms: Option<RoomUpdates>,
    retention: RetentionPolicy,
    notifier: Option<Arc<dyn Notifier>>,
) {
    let mut inserts: Vec<(Arc<Published>, oneshot::Sender<Committed>)> =
        Vec::with_capacity(MAX_WRITE_BATCH);
    let mut purge: Option<Timestamp> = None;
    // When the last retention pass ran, if it left events to prune behind.
    let mut backlog: Option<std::time::Instant> = None;
    let mut last_purge = std::time::Instant::now();
    while let Some(first) = ops.blocking_recv() {
        let mut next = Some(first);
        while let Some(op) = next.take() {
            match op {
                WriteOp::Insert { published, reply } => inserts.push((published, reply)),
                WriteOp::Purge(now) => purge = Some(purge.map_or(now, |p| p.max(now))),
            }
            if inserts.len() < MAX_WRITE_BATCH {
                next = ops.try_recv().ok();
            }
        }
        if !inserts.is_empty() {
            let changed = commit_batch(
                &mut store,
                &mut inserts,
                &fanout,
                rooms.as_ref(),
                notifier.as_deref(),
            );
            if let (Some(rooms), false) = (&rooms, changed.is_empty()) {
                publish_metadata(&mut store, rooms, &changed, &fanout);
            }
        }
        // Under a steady load the queue can be full at every tick, when the tick's purge is not queued:
        // the writer keeps the interval itself too.
        if purge.is_none() && last_purge.elapsed() >= crate::limits::PURGE_INTERVAL {
            purge = Some(Timestamp::now());
        }
        if let Some(now) = purge.take() {
            last_purge = std::time::Instant::now();
            match store.purge_expired(now) {
                Ok(0) => {}
                Ok(n) => tracing::debug!(purged = n, "relay purged expired events"),
                Err(error) => tracing::warn!(%error, "relay could not purge expired events"),
            }
            backlog = prune_pass(&mut store, now, &retention);
        } else if backlog.is_some_and(|at| at.elapsed() >= PRUNE_BACKLOG_PAUSE) {
            // A pass that deleted all it may left more behind: under a steady load more events age out each
            // minute than one pass deletes, so passes follow each other, a pause apart, until it is done.
            backlog = prune_pass(&mut store, Timestamp::now(), &retention);
        }
    }
}

/// The pause between two retention passes while a backlog is worked off: the writer commits the events
/// waiting meanwhile, and a pass of [`crate::limits::MAX_PRUNED_PER_PASS`] a second keeps up with far more
/// than the relay takes in.
const PRUNE_BACKLOG_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);

/// One retention pass at `now`; `Some(now)` when it looked at all a pass may, so more may be left.
fn prune_pass(
    store: &mut EventStore,
    now: Timestamp,
    retention: &RetentionPolicy,
) -> Option<std::time::Instant> {
    match store.prune_some(now, retention) {
        Ok(p) => {
            if p.deleted > 0 {
                tracing::debug!(
                    pruned = p.deleted,
                    "relay pruned events past their retention"
                );
            }
            p.more.then(std::time::Instant::now)
        }
        Err(error) => {
            tracing::warn!(%error, "relay could not prune old events");
            None
        }
    }
}

/// Commits the batch, applies its room moderation events (before any `OK` goes out, so a client that
/// has its `OK` finds the room changed), and returns the rooms that changed.
fn commit_batch(
    store: &mut EventStore,
    inserts: &mut Vec<(Arc<Published>, oneshot::Sender<Committed>)>,
    fanout: &Fanout,
    rooms: Option<&RoomUpdates>,
    notifier: Option<&dyn Notifier>,
) -> Vec<String> {
    let batch: Vec<(&Event, &str)> = inserts
        .iter()
        .map(|(p, _)| (&p.event, p.json.as_str()))
        .collect();
    let now = Timestamp::now();
    let outcomes: Vec<InsertReply> = match store.insert_batch_json(&batch, now) {
        Ok(outcomes) => outcomes.into_iter().map(Ok).collect(),
        Err(error) => {
            // The whole transaction was rolled back. Retry one by one so that a single event
            // the database refuses does not fail the others.
            tracing::warn!(%error, events = batch.len(), "relay batch insert failed; retrying one by one");
            batch
                .iter()
                .map(|one| {
                    store
                        .insert_batch_json(std::slice::from_ref(one), now)
                        .map(|mut o| o.remove(0))
                })
                .collect()
        }
    };
    drop(batch);
    let is_new = |outcome: &InsertReply| matches!(outcome, Ok(o) if o.is_new());
    // One ring send per new event, all under one lock of the fan-out.
    let peers = fanout.publish(
        inserts
            .iter()
            .zip(&outcomes)
            .filter(|(_, outcome)| is_new(outcome))
            .map(|((published, _), _)| published),
    );
    if let Some(notifier) = notifier {
        // Durable now; the notifier queues and returns.
        for ((published, _), _) in inserts.iter().zip(&outcomes).filter(|(_, o)| is_new(o)) {
            for n in notifications(&published.event) {
                notifier.notify(n);
            }
        }
    }
    let moderated: Vec<&Event> = inserts
        .iter()
        .zip(&outcomes)
        .filter(|((p, _), outcome)| is_new(outcome) && rooms::is_moderation(p.event.kind))
        .map(|((p, _), _)| &p.event)
        .collect();
    let changed = match rooms {
        Some(rooms) if !moderated.is_empty() => apply_moderation(store, rooms, &moderated),
        _ => Vec::new(),
    };
    for ((published, reply), outcome) in inserts.drain(..).zip(outcomes) {
        let exempt = if is_new(&outcome) {
            peers.clone()
        } else {
            None
        };
        // The connection may be gone; the event is stored all the same, and handed to the exempt
        // connections here as far as their queues have room (the writer never waits).
        if let Err(Committed {
            exempt: Some(peers),
            ..
        }) = reply.send(Committed { outcome, exempt })
        {
            for peer in peers.iter() {
                peer.try_deliver(Arc::clone(&published));
            }
        }
    }
    changed
}

/// Applies committed moderation events to the rooms (and a 9005's deletions to the store), in commit
/// order; returns the rooms that changed. An event the rooms no longer allow (a room created twice in one
/// batch) is stored but changes nothing.
fn apply_moderation(
    store: &mut EventStore,
    updates: &RoomUpdates,
    events: &[&Event],
) -> Vec<String> {
    let mut changed: Vec<String> = Vec::new();
    let mut rooms = updates
        .rooms
        .write()
        .unwrap_or_else(PoisonError::into_inner);
    for event in events {
        if let Ok(Some(change)) = rooms.moderate(event) {
            if let rooms::Moderation::Delete { room, events } = &change {
                if let Err(error) = store.delete_room_events(room, events) {
                    tracing::warn!(%error, "relay could not delete a room's events");
                }
                continue;
            }
            rooms.apply(&change);
            if !changed.iter().any(|r| r == change.room()) {
                changed.push(change.room().to_owned());
            }
        }
    }
    changed
}

/// Stores and publishes the new metadata (39000-39002) of the rooms that changed.
fn publish_metadata(
    store: &mut EventStore,
    updates: &RoomUpdates,
    changed: &[String],
    fanout: &Fanout,
) {
    let now = updates.next_signing_time();
    let metadata: Vec<Event> = {
        let rooms = updates.rooms.read().unwrap_or_else(PoisonError::into_inner);
        changed
            .iter()
            .flat_map(|id| rooms.room_metadata(id, &updates.keys, now))
            .collect()
    };
    let published: Vec<Arc<Published>> = metadata
        .into_iter()
        .filter_map(|event| {
            let json = crate::store::event_json(&event).ok()?;
            Some(Arc::new(Published { event, json }))
        })
        .collect();
    let batch: Vec<(&Event, &str)> = published
        .iter()
        .map(|p| (&p.event, p.json.as_str()))
        .collect();
    match store.insert_batch_json(&batch, now) {
        Ok(outcomes) => {
            let new: Vec<&Arc<Published>> = published
                .iter()
                .zip(outcomes)
                .filter(|(_, o)| o.is_new())
                .map(|(p, _)| p)
                .collect();
            // No connection published these: the exempt connections get them as far as their queues
            // have room (the writer never waits).
            if let Some(peers) = fanout.publish(new.iter().copied()) {
                for p in &new {
                    for peer in peers.iter() {
                        peer.try_deliver(Arc::clone(p));
                    }
                }
            }
        }
        Err(error) => tracing::warn!(%error, "relay could not store new room metadata"),
    }
}

/// Read connections for queries, opened on demand and kept for reuse.
#[derive(Debug)]
pub(crate) struct ReadPool {
    path: PathBuf,
    idle: Mutex<Vec<EventStore>>,
    permits: Arc<Semaphore>,
}

impl ReadPool {
    /// A pool over the database at `path` (already created by the writer's [`EventStore::open`]).
    pub(crate) fn new(path: PathBuf) -> Arc<Self> {
        Arc::new(Self {
            path,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(MAX_CONCURRENT_QUERIES)),
        })
    }

    /// Runs `filters` on a blocking thread, at most [`MAX_CONCURRENT_QUERIES`] at a time.
    pub(crate) async fn query(
        self: Arc<Self>,
        filters: Vec<Filter>,
        now: Timestamp,
        hidden: Vec<String>,
    ) -> Result<Vec<StoredEvent>, RelayError> {
        self.run(move |store| store.query_json(&filters, now, &hidden))
            .await
    }

    /// Counts the events matching `filters` (NIP-45) on a blocking thread, sharing the query budget.
    pub(crate) async fn count(
        self: Arc<Self>,
        filters: Vec<Filter>,
        now: Timestamp,
        hidden: Vec<String>,
    ) -> Result<u64, RelayError> {
        self.run(move |store| store.count_matching(&filters, now, &hidden))
            .await
    }

    /// Runs `read` with a read connection on a blocking thread, within the query budget.
    async fn run<T: Send + 'static>(
        self: Arc<Self>,
        read: impl FnOnce(&EventStore) -> Result<T, RelayError> + Send + 'static,
    ) -> Result<T, RelayError> {
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| RelayError::Internal("query pool closed".to_owned()))?;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let store = self.take()?;
            let result = read(&store);
            self.give_back(store);
            result
        })
        .await
        .map_err(|e| RelayError::Internal(format!("query task failed: {e}")))?
    }

    fn take(&self) -> Result<EventStore, RelayError> {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        match idle {
            Some(store) => Ok(store),
            None => EventStore::open_reader(&self.path),
        }
    }

    fn give_back(&self, store: EventStore) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < MAX_CONCURRENT_QUERIES {
            idle.push(store);
        }
    }
}
