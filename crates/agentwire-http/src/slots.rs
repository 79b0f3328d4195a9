//! The HTTP server's places for connections: at most [`MAX_CONNECTIONS`] open at once, and of those at most
//! [`MAX_UNAUTHENTICATED_CONNECTIONS`] that have not yet sent a request with the token. A connection is
//! unauthenticated from its accept until a request on it presents the valid token (bearer, cookie or the
//! page's `?token=`); from then on, for the rest of its life, it is the token holder's.
//!
//! When a new connection finds no place, the oldest unauthenticated connection is closed to make one (it
//! has had the longest to present the token): sockets opened and held without the token (silent, or a head
//! sent a byte at a time) can then never keep out a client that comes with the token, nor touch the places
//! the token holder's connections (the hub page, its event stream, API clients) already have. Only when
//! every place is held by an authenticated connection is a new one refused (`503`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// Connections the HTTP server holds open at once: each is a file descriptor, and the server shares the
/// process's descriptors with the relay (512 connections and 64 refusals) and the rest of the daemon (see
/// the budget in docs/security.md). Its clients are few: a hub page or two (a browser opens up to six
/// connections to a host), up to 64 event streams (`MAX_EVENT_STREAMS`), CLI calls and a metrics scraper.
pub const MAX_CONNECTIONS: usize = 128;

/// Of [`MAX_CONNECTIONS`], the most that may be open without having presented the token: a quarter, so the
/// token holder's connections always have the other three quarters. Anyone who can reach the port can open
/// these; past the cap the oldest is closed for the newcomer (the module's doc).
pub const MAX_UNAUTHENTICATED_CONNECTIONS: usize = 32;

/// How long a new connection waits for the connection closed to make room for it: the closed one's task
/// only has to drop its socket, which takes microseconds; this bounds a wait that should never be long.
const EVICTION_WAIT: Duration = Duration::from_secs(1);

/// Every connection's place, and the unauthenticated ones by age.
pub(crate) struct Slots {
    total: Arc<Semaphore>,
    unauthenticated: Arc<Semaphore>,
    /// Unauthenticated connections by id (ids grow: the first is the oldest).
    waiting: Mutex<BTreeMap<u64, Arc<Notify>>>,
    next_id: AtomicU64,
}

/// One connection's place, given back when dropped (its task ended).
pub(crate) struct Place {
    id: u64,
    slots: Arc<Slots>,
    _total: OwnedSemaphorePermit,
    /// Held until the connection presents the token.
    unauthenticated: Mutex<Option<OwnedSemaphorePermit>>,
    /// Told when the connection is closed to make room for a newer one.
    evicted: Arc<Notify>,
}

impl Slots {
    pub(crate) fn new(total: usize, unauthenticated: usize) -> Arc<Slots> {
        Arc::new(Slots {
            total: Arc::new(Semaphore::new(total)),
            unauthenticated: Arc::new(Semaphore::new(unauthenticated.min(total))),
            waiting: Mutex::default(),
            next_id: AtomicU64::new(0),
        })
    }

    /// A place for a new (unauthenticated) connection, closing the oldest unauthenticated one when there is
    /// none; `None` when every place is an authenticated connection's. Called by the accept loop alone, one
    /// connection at a time.
    pub(crate) async fn admit(self: &Arc<Self>) -> Option<Place> {
        let total = self.take(&self.total).await?;
        let unauthenticated = self.take(&self.unauthenticated).await?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let evicted = Arc::new(Notify::new());
        self.lock().insert(id, Arc::clone(&evicted));
        Some(Place {
            id,
            slots: Arc::clone(self),
            _total: total,
            unauthenticated: Mutex::new(Some(unauthenticated)),
            evicted,
        })
    }

    /// A permit of `pool`, after closing the oldest unauthenticated connection if there is none free.
    async fn take(&self, pool: &Arc<Semaphore>) -> Option<OwnedSemaphorePermit> {
        if let Ok(p) = Arc::clone(pool).try_acquire_owned() {
            return Some(p);
        }
        let (_, oldest) = self.lock().pop_first()?;
        // `notify_one` keeps the notice if the connection's task is not waiting on it yet.
        oldest.notify_one();
        tokio::time::timeout(EVICTION_WAIT, Arc::clone(pool).acquire_owned())
            .await
            .ok()?
            .ok()
    }

    /// Unauthenticated connections open now.
    #[cfg(test)]
    fn unauthenticated(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<Notify>>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Place {
    /// The connection sent a request with the valid token: it is no longer counted as unauthenticated, and
    /// is never closed to make room. One already chosen to be closed stays chosen.
    pub(crate) fn authenticated(&self) {
        if self.slots.lock().remove(&self.id).is_some() {
            self.unauthenticated
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
        }
    }

    /// Resolves when the connection is to be closed for a newer one.
    pub(crate) async fn evicted(&self) {
        self.evicted.notified().await;
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.slots.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn the_oldest_unauthenticated_connection_makes_room_for_a_new_one() {
        now(async {
            let slots = Slots::new(4, 2);
            let first = slots.admit().await.unwrap();
            let second = slots.admit().await.unwrap();
            assert_eq!(slots.unauthenticated(), 2);
            // The first is told to close; its task drops its place, and the third gets it.
            let closing = {
                let first = first;
                async move {
                    first.evicted().await;
                    drop(first);
                }
            };
            let (third, ()) = tokio::join!(slots.admit(), closing);
            assert!(third.is_some());
            assert_eq!(slots.unauthenticated(), 2);
            drop(second);
            assert_eq!(slots.unauthenticated(), 1);
        });
    }

    #[test]
    fn authenticated_connections_are_never_closed_for_room_and_past_them_a_newcomer_is_refused() {
        now(async {
            let slots = Slots::new(3, 1);
            let mut held = Vec::new();
            for _ in 0..3 {
                let p = slots.admit().await.unwrap();
                p.authenticated();
                held.push(p);
            }
            assert_eq!(slots.unauthenticated(), 0);
            assert!(
                slots.admit().await.is_none(),
                "every place is the token holder's"
            );
            held.pop();
            let p = slots.admit().await.unwrap();
            assert_eq!(slots.unauthenticated(), 1);
            p.authenticated();
            assert_eq!(slots.unauthenticated(), 0);
        });
    }

    #[test]
    fn a_connection_that_never_closes_when_told_keeps_its_place_and_the_newcomer_is_refused() {
        now(async {
            let slots = Slots::new(2, 1);
            let _stuck = slots.admit().await.unwrap();
            let started = tokio::time::Instant::now();
            assert!(slots.admit().await.is_none());
            assert!(started.elapsed() >= EVICTION_WAIT);
        });
    }
}
