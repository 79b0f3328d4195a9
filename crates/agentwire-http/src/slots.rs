//! The HTTP server's places for connections: at most `[http] max_connections` open at once
//! ([`DEFAULT_MAX_CONNECTIONS`]), and of those at most a quarter ([`unauthenticated_share`]) that have not yet sent a request with the token. A connection is
//! unauthenticated from its accept until a request on it presents the valid token (bearer, cookie or the
//! page's `?token=`); from then on, for the rest of its life, it is the token holder's.
//!
//! When a new connection finds no place, the oldest unauthenticated connection is closed to make one (it
//! has had the longest to present the token): sockets opened and held without the token (silent, or a head
//! sent a byte at a time) can then never keep out a client that comes with the token, nor touch the places
//! the token holder's connections (the hub page, its event stream, API clients) already have. Only when
//! every place is held by an authenticated connection is a new one refused (`503`).
//!
//! A caller's token (`[[http.callers]]`, a program of someone else's) is not the operator's: a connection
//! that presents one takes a place of the callers' own pool (half the places, [`callers_share`]; at
//! most an eighth, [`one_callers_share`], for one caller) and is then never closed for room; past those bounds it
//! stays counted as unauthenticated (the oldest of those is closed for a newcomer). So callers together never
//! hold more than their pool, one caller never more than its share of it, and the operator's connections
//! always have the places neither callers nor strangers can take.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// Connections the HTTP server holds open at once by default (`[http] max_connections`): each is a file
/// descriptor, and the server shares the process's descriptors with the relay (512 connections and 64
/// refusals) and the rest of the daemon (see the budget in docs/security.md). Its clients are few: a hub
/// page or two (a browser opens up to six connections to a host), up to 64 event streams
/// ([`DEFAULT_MAX_EVENT_STREAMS`](crate::settings::DEFAULT_MAX_EVENT_STREAMS)), CLI calls and a metrics
/// scraper.
pub const DEFAULT_MAX_CONNECTIONS: usize = 128;

/// The fewest places `[http] max_connections` may give: the shares below are quarters and eighths of it,
/// and each must leave at least one place.
pub const MIN_CONNECTIONS: usize = 8;

/// The most places `[http] max_connections` may give: with the relay's and the roost socket's caps it
/// stays inside the 8,192 descriptors the daemon raises its limit to (docs/security.md, "File
/// descriptors"), leaving about 2,500 for hosted jobs, agents' processes and outbound connections.
pub const MAX_CONNECTIONS_CEILING: usize = 4096;

/// Of the places, the most that may be open without having presented the token: a quarter, so the token
/// holder's connections always have the other three quarters. Anyone who can reach the port can open
/// these; past the cap the oldest is closed for the newcomer (the module's doc).
pub const fn unauthenticated_share(total: usize) -> usize {
    total / 4
}

/// Of the places, the most that callers' connections hold (their streams: A2A subscriptions, MCP sessions,
/// streamed completions): half, so that with the unauthenticated quarter the operator's connections (the
/// hub, the CLI, a scraper) always have a quarter of the places.
pub const fn callers_share(total: usize) -> usize {
    total / 2
}

/// Of the callers' half, the most that one caller holds: a quarter of it, so one program that opens stream
/// after stream leaves the others their places.
pub const fn one_callers_share(total: usize) -> usize {
    callers_share(total) / 4
}

/// [`unauthenticated_share`] at the default cap: 32.
pub const MAX_UNAUTHENTICATED_CONNECTIONS: usize = unauthenticated_share(DEFAULT_MAX_CONNECTIONS);

/// [`callers_share`] at the default cap: 64.
pub const MAX_CALLER_CONNECTIONS: usize = callers_share(DEFAULT_MAX_CONNECTIONS);

/// [`one_callers_share`] at the default cap: 16.
pub const MAX_CONNECTIONS_PER_CALLER: usize = one_callers_share(DEFAULT_MAX_CONNECTIONS);

/// How long a new connection waits for the connection closed to make room for it: the closed one's task
/// only has to drop its socket, which takes microseconds; this bounds a wait that should never be long.
const EVICTION_WAIT: Duration = Duration::from_secs(1);

/// Every connection's place, and the unauthenticated ones by age.
pub(crate) struct Slots {
    total: Arc<Semaphore>,
    unauthenticated: Arc<Semaphore>,
    /// The callers' pool.
    callers: Arc<Semaphore>,
    /// Places each caller holds, by name.
    per_caller: Mutex<std::collections::HashMap<String, usize>>,
    per_caller_max: usize,
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
    /// The caller whose connection it is, and its place in the callers' pool.
    caller: Mutex<Option<(String, OwnedSemaphorePermit)>>,
    /// Told when the connection is closed to make room for a newer one.
    evicted: Arc<Notify>,
}

impl Slots {
    /// The places of a server capped at `total` connections, with its shares.
    pub(crate) fn for_total(total: usize) -> Arc<Slots> {
        Slots::new(
            total,
            unauthenticated_share(total),
            callers_share(total),
            one_callers_share(total),
        )
    }

    pub(crate) fn new(
        total: usize,
        unauthenticated: usize,
        callers: usize,
        per_caller: usize,
    ) -> Arc<Slots> {
        Arc::new(Slots {
            total: Arc::new(Semaphore::new(total)),
            unauthenticated: Arc::new(Semaphore::new(unauthenticated.min(total))),
            callers: Arc::new(Semaphore::new(callers.min(total))),
            per_caller: Mutex::default(),
            per_caller_max: per_caller,
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
            caller: Mutex::new(None),
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

    /// The connection sent a request with caller `name`'s token: it takes a place of the callers' pool
    /// when one is free and the caller holds fewer than its share, and is then never closed for room;
    /// otherwise it stays counted as unauthenticated. One authenticated already stays as it is.
    pub(crate) fn caller_authenticated(&self, name: &str) {
        if !self.slots.lock().contains_key(&self.id) {
            return;
        }
        let mut held = self
            .slots
            .per_caller
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let n = held.entry(name.to_string()).or_default();
        if *n >= self.slots.per_caller_max {
            return;
        }
        let Ok(permit) = Arc::clone(&self.slots.callers).try_acquire_owned() else {
            return;
        };
        if self.slots.lock().remove(&self.id).is_some() {
            *n += 1;
            self.unauthenticated
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            *self.caller.lock().unwrap_or_else(PoisonError::into_inner) =
                Some((name.to_string(), permit));
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
        let caller = self
            .caller
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some((name, _permit)) = caller {
            let mut held = self
                .slots
                .per_caller
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(n) = held.get_mut(&name) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    held.remove(&name);
                }
            }
        }
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
            let slots = Slots::new(4, 2, 2, 1);
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
            let slots = Slots::new(3, 1, 1, 1);
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
            let slots = Slots::new(2, 1, 1, 1);
            let _stuck = slots.admit().await.unwrap();
            let started = tokio::time::Instant::now();
            assert!(slots.admit().await.is_none());
            assert!(started.elapsed() >= EVICTION_WAIT);
        });
    }

    #[test]
    fn callers_hold_at_most_their_pool_and_each_its_share_and_the_rest_stay_closable() {
        now(async {
            // 6 places, 2 unauthenticated, callers 3 in all and 2 each.
            let slots = Slots::new(6, 2, 3, 2);
            let a1 = slots.admit().await.unwrap();
            a1.caller_authenticated("alice");
            let a2 = slots.admit().await.unwrap();
            a2.caller_authenticated("alice");
            assert_eq!(slots.unauthenticated(), 0, "alice's two are hers");
            let a3 = slots.admit().await.unwrap();
            a3.caller_authenticated("alice");
            assert_eq!(slots.unauthenticated(), 1, "her third is past her share");
            let b1 = slots.admit().await.unwrap();
            b1.caller_authenticated("bob");
            assert_eq!(slots.unauthenticated(), 1, "bob's first has a place");
            let b2 = slots.admit().await.unwrap();
            b2.caller_authenticated("bob");
            assert_eq!(slots.unauthenticated(), 2, "the callers' pool is full");
            // The operator still gets in: the oldest of the unauthenticated (alice's third) makes room.
            let closing = {
                let a3 = a3;
                async move {
                    a3.evicted().await;
                    drop(a3);
                }
            };
            let (op, ()) = tokio::join!(slots.admit(), closing);
            let op = op.expect("the operator's connection gets a place");
            op.authenticated();
            // A caller's place given back is another's to take.
            drop(a1);
            b2.caller_authenticated("bob");
            assert_eq!(slots.unauthenticated(), 0);
            drop((a2, b1, b2, op));
            assert!(slots.per_caller.lock().unwrap().is_empty());
        });
    }
}
