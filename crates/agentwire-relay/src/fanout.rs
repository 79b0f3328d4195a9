//! The live fan-out: the shared broadcast ring every ordinary connection reads, and one bounded queue per
//! exempt connection (the operator's agent), on which publishers wait instead of letting the agent lose
//! events.
//!
//! An ordinary connection that falls more than [`LIVE_QUEUE_CAPACITY`] events behind the ring loses its
//! subscriptions (`CLOSED "error: too slow"`), so one slow reader never slows anybody down. The agent's
//! connection must not lose what is addressed to it, so once a connection is exempt it stops reading the ring:
//! every live event is handed to its queue ([`EXEMPT_QUEUE_CAPACITY`]) by the connection task that published
//! it (for a stored event, once the writer has committed it), and that task waits while the queue is full.
//! The flooding publisher's connection stops reading its socket meanwhile, so a burst slows its senders down
//! instead of overflowing the agent. Waits are bounded by [`EXEMPT_QUEUE_TIMEOUT`], after which the event
//! counts as missed and the old behaviour applies (the agent's subscriptions are closed as too slow).
//!
//! Each event reaches an exempt connection exactly once: every ring send happens under the lock that guards
//! the list of exempt connections, so registering splits the ring in two. Ring events sent before the
//! registration (its backlog, counted under the lock) are read from the ring; every later one is handed to
//! the queue, and its ring copy is never read because the connection drops its ring receiver once the backlog
//! is read. The counting is pure and lives in `Session`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{broadcast, mpsc};
use tokio::time::timeout;

use crate::limits::{EXEMPT_QUEUE_CAPACITY, EXEMPT_QUEUE_TIMEOUT, LIVE_QUEUE_CAPACITY};
use crate::session::Published;

/// The exempt connections an event was published to, as of its ring send.
pub(crate) type Peers = Arc<[Arc<ExemptPeer>]>;

/// The queue of one exempt connection, as the publishers see it.
#[derive(Debug)]
pub(crate) struct ExemptPeer {
    id: u64,
    queue: mpsc::Sender<Arc<Published>>,
    /// Events that could not be queued; the connection closes its subscriptions as too slow when it sees
    /// this above zero, and resets it.
    missed: AtomicU64,
}

impl ExemptPeer {
    /// Tells this connection's queue from the others.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Whether events were missed since the connection last looked: publishers do not wait on it meanwhile.
    pub(crate) fn is_behind(&self) -> bool {
        self.missed.load(Ordering::Acquire) > 0
    }

    /// How many events were missed since the last call, for the connection itself.
    pub(crate) fn take_missed(&self) -> u64 {
        self.missed.swap(0, Ordering::AcqRel)
    }

    /// Queues `published`; with `wait`, waits up to [`EXEMPT_QUEUE_TIMEOUT`] for room. An event that is not
    /// queued is counted as missed. A connection that is gone needs nothing.
    pub(crate) async fn deliver(&self, published: Arc<Published>, wait: bool) {
        let queued = if wait {
            match timeout(EXEMPT_QUEUE_TIMEOUT, self.queue.send(published)).await {
                Ok(_) => true,
                Err(_) => {
                    tracing::warn!(
                        timeout = ?EXEMPT_QUEUE_TIMEOUT,
                        "the agent's connection took no live event for too long; closing its subscriptions as too slow"
                    );
                    false
                }
            }
        } else {
            return self.try_deliver(published);
        };
        if !queued {
            self.missed.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Queues `published` if there is room now; if not, it is counted as missed.
    pub(crate) fn try_deliver(&self, published: Arc<Published>) {
        if let Err(mpsc::error::TrySendError::Full(_)) = self.queue.try_send(published) {
            self.missed.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// The ring and the exempt connections' queues.
#[derive(Debug)]
pub(crate) struct Fanout {
    ring: broadcast::Sender<Arc<Published>>,
    /// The exempt connections. Every ring send holds this lock, which orders it against registrations.
    exempt: Mutex<Registry>,
}

#[derive(Debug)]
struct Registry {
    next_id: u64,
    peers: Peers,
}

/// An exempt connection's side of its queue; unregistered when dropped.
#[derive(Debug)]
pub(crate) struct Registration {
    fanout: Arc<Fanout>,
    pub(crate) peer: Arc<ExemptPeer>,
    pub(crate) queue: mpsc::Receiver<Arc<Published>>,
    /// Ring events sent before the registration that the connection had not read yet.
    pub(crate) backlog: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut registry = self.fanout.lock();
        let id = self.peer.id;
        registry.peers = registry
            .peers
            .iter()
            .filter(|p| p.id != id)
            .cloned()
            .collect();
    }
}

impl Fanout {
    /// A fan-out with a ring of [`LIVE_QUEUE_CAPACITY`] and no exempt connection.
    pub(crate) fn new() -> Arc<Self> {
        let (ring, _) = broadcast::channel(LIVE_QUEUE_CAPACITY);
        Arc::new(Self {
            ring,
            exempt: Mutex::new(Registry {
                next_id: 0,
                peers: Arc::new([]),
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.exempt.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A receiver of the ring, for a new connection.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Arc<Published>> {
        self.ring.subscribe()
    }

    /// Sends each event to the ring; returns the exempt connections the publisher must hand them to, if any.
    pub(crate) fn publish<'a>(
        &self,
        events: impl IntoIterator<Item = &'a Arc<Published>>,
    ) -> Option<Peers> {
        let registry = self.lock();
        for published in events {
            // No receivers is fine: nobody is subscribed.
            let _ = self.ring.send(Arc::clone(published));
        }
        (!registry.peers.is_empty()).then(|| Arc::clone(&registry.peers))
    }

    /// Registers the connection that reads `ring` (if it reads it) as exempt: from now on its live events
    /// come through the returned queue, except the ring backlog counted here.
    pub(crate) fn register(
        self: &Arc<Self>,
        ring: Option<&broadcast::Receiver<Arc<Published>>>,
    ) -> Registration {
        let (tx, queue) = mpsc::channel(EXEMPT_QUEUE_CAPACITY);
        let mut registry = self.lock();
        registry.next_id += 1;
        let peer = Arc::new(ExemptPeer {
            id: registry.next_id,
            queue: tx,
            missed: AtomicU64::new(0),
        });
        registry.peers = registry
            .peers
            .iter()
            .cloned()
            .chain([Arc::clone(&peer)])
            .collect();
        // Exact: no ring send can happen while the lock is held.
        let backlog = ring.map_or(0, |ring| ring.len() as u64);
        drop(registry);
        Registration {
            fanout: Arc::clone(self),
            peer,
            queue,
            backlog,
        }
    }
}
