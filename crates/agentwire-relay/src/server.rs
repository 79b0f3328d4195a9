//! Starting and stopping the relay: the configuration, the listener's accept loop, and the
//! handle that shuts it all down.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle as ThreadHandle;
use std::time::Duration;

use nostr::event::Kind;
use nostr::filter::Filter;
use nostr::key::{Keys, PublicKey};
use nostr::types::Timestamp;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::MissedTickBehavior;

use crate::connection;
use crate::error::RelayError;
use crate::fanout::Fanout;
use crate::http::{self, information_document};
use crate::limits::{
    RelayLimits, MAX_PENDING_REFUSALS, PURGE_INTERVAL, SHUTDOWN_GRACE, WRITE_QUEUE_CAPACITY,
};
use crate::own_urls::OwnUrls;
use crate::retention::RetentionPolicy;
use crate::rooms::{
    RoomConfig, Rooms, CREATE_GROUP, EDIT_METADATA, GROUP_ADMINS, GROUP_MEMBERS, GROUP_METADATA,
    PUT_USER, REMOVE_USER,
};
use crate::stats::RelayStats;
use crate::storage_threads::{spawn_writer, ReadPool, RoomUpdates, WriteOp};
use crate::store::EventStore;

/// How to run the relay.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// Where to listen for WebSocket and NIP-11 HTTP requests; port 0 picks a free port.
    pub listen: SocketAddr,
    /// The `ws://` or `wss://` URLs clients reach this relay at besides its listen address (behind a
    /// proxy or a TLS terminator, or by a name). A NIP-42 `AUTH` is taken only for one of these or the
    /// listen address itself (`localhost` too for a loopback address), compared as URLs.
    pub public_urls: Vec<String>,
    /// The web origins (`https://app.example.com`) whose pages may open a WebSocket to the relay besides
    /// its own; an upgrade from any other page's `Origin` gets HTTP 403. A native client sends no `Origin`.
    /// `*` ([`ANY_ORIGIN`](crate::ANY_ORIGIN)) lets every page connect, for a relay that serves
    /// web Nostr clients.
    pub allowed_origins: Vec<String>,
    /// How long a connection with no open subscription may go without sending a message (`REQ`,
    /// `EVENT`, `AUTH`, ...) before it is closed; [`IDLE_TIMEOUT`](crate::limits::IDLE_TIMEOUT) unless a
    /// test shortens it.
    pub idle_timeout: Duration,
    /// The SQLite database file of stored events; created if missing.
    pub db_path: PathBuf,
    /// The configurable bounds.
    pub limits: RelayLimits,
    /// The relay's name in its NIP-11 document.
    pub name: String,
    /// The operator's own agents' keys. A connection that authenticated (NIP-42) as one is exempt: its
    /// events do not count toward [`RelayLimits::max_events_per_second_per_connection`], and it never
    /// loses live events for being slow, publishers wait for it instead (up to
    /// [`EXEMPT_QUEUE_TIMEOUT`](crate::limits::EXEMPT_QUEUE_TIMEOUT)). Sending an event such a key signed
    /// exempts nothing: anyone can resend the agent's public events.
    pub unlimited_authors: HashSet<PublicKey>,
    /// What `GET /health` answers (none: `404`).
    pub health: Option<crate::HealthCheck>,
    /// The rooms (NIP-29 groups addressed by `h`).
    pub rooms: Vec<RoomConfig>,
    /// Keys that may write in every room (the operator's agent).
    pub room_writers: HashSet<PublicKey>,
    /// The relay's own key, which signs room metadata (39000-39002); needed when there are rooms or
    /// admins.
    pub relay_keys: Option<Keys>,
    /// The relay's admins: they may create rooms (9007) and moderate every room (9000-9002, 9005).
    pub admins: HashSet<PublicKey>,
    /// How long stored events are kept.
    pub retention: RetentionPolicy,
    /// Who to tell when a stored event should wake someone ([`crate::notify`]); none: nobody is told.
    pub notifier: Option<std::sync::Arc<dyn crate::notify::Notifier>>,
    /// The signatures this process's own signers made (the daemon's agents): an event carrying one is not
    /// verified a second time. None: every signature is verified.
    pub signed_here: Option<Arc<crate::SignedHere>>,
}

impl RelayConfig {
    /// A configuration with default limits, the name `agentwire`, and no unlimited authors.
    pub fn new(listen: SocketAddr, db_path: impl Into<PathBuf>) -> Self {
        Self {
            listen,
            public_urls: Vec::new(),
            allowed_origins: Vec::new(),
            idle_timeout: crate::limits::IDLE_TIMEOUT,
            db_path: db_path.into(),
            limits: RelayLimits::default(),
            name: "agentwire".to_owned(),
            unlimited_authors: HashSet::new(),
            health: None,
            rooms: Vec::new(),
            room_writers: HashSet::new(),
            relay_keys: None,
            admins: HashSet::new(),
            retention: RetentionPolicy::default(),
            notifier: None,
            signed_here: None,
        }
    }
}

/// What every connection of one relay shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) limits: RelayLimits,
    pub(crate) unlimited_authors: Arc<HashSet<PublicKey>>,
    pub(crate) writer: mpsc::Sender<WriteOp>,
    pub(crate) readers: Arc<ReadPool>,
    /// The live fan-out: the ring, and the queues of exempt connections.
    pub(crate) fanout: Arc<Fanout>,
    /// The NIP-11 document, built once.
    pub(crate) document: String,
    pub(crate) name: String,
    pub(crate) health: Option<crate::HealthCheck>,
    pub(crate) rooms: Arc<RwLock<Rooms>>,
    /// The URLs a NIP-42 `AUTH` may name, and the `Host` and `Origin` a WebSocket upgrade may.
    pub(crate) own_urls: Arc<OwnUrls>,
    /// [`RelayConfig::idle_timeout`].
    pub(crate) idle_timeout: Duration,
    /// The connections open and the `EVENT`s answered.
    pub(crate) stats: Arc<RelayStats>,
    /// [`RelayConfig::signed_here`].
    pub(crate) signed_here: Option<Arc<crate::SignedHere>>,
}

/// A running relay. Dropping it stops the relay in the background; [`RelayHandle::shutdown`]
/// stops it and waits until the database is closed.
#[derive(Debug)]
pub struct RelayHandle {
    local_addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    server: Option<JoinHandle<()>>,
    writer: Option<ThreadHandle<()>>,
    stats: Arc<RelayStats>,
}

/// Opens (or creates) the database, binds the listener and starts serving.
///
/// Expired events are purged before the first connection is accepted.
pub async fn start(config: RelayConfig) -> Result<RelayHandle, RelayError> {
    config.limits.validate()?;
    for url in &config.public_urls {
        crate::own_urls::check_public_url(url).map_err(RelayError::InvalidPublicUrl)?;
    }
    for origin in &config.allowed_origins {
        crate::own_urls::check_allowed_origin(origin).map_err(RelayError::InvalidOrigin)?;
    }
    let mut rooms = Rooms::new(&config.rooms)
        .map_err(|e| RelayError::InvalidRooms(e.to_string()))?
        .with_relay_admins(config.admins.iter().copied())
        .with_relay_key(config.relay_keys.as_ref().map(Keys::public_key));
    for key in &config.room_writers {
        rooms.add_member_everywhere(*key);
    }
    let rooms_on = !rooms.is_empty() || !config.admins.is_empty();
    if rooms_on && config.relay_keys.is_none() {
        return Err(RelayError::InvalidRooms(
            "rooms and relay admins need a relay key to sign room metadata".into(),
        ));
    }
    let path = config.db_path.clone();
    let keys = config.relay_keys.clone();
    let writers = config.room_writers.clone();
    let retention = config.retention;
    let (store, rooms, signed_at) = tokio::task::spawn_blocking(move || {
        let mut rooms = rooms;
        let mut signed_at = 0;
        let mut store = EventStore::open(&path)?;
        store.purge_expired(Timestamp::now())?;
        store.prune(Timestamp::now(), &retention)?;
        let relay_key = keys.as_ref().map(Keys::public_key);
        let refused = store.purge_refused(relay_key.as_ref())?;
        if refused > 0 {
            tracing::warn!(
                events = refused,
                "removed stored events the relay refuses: room metadata not signed by its key, and events naming more than one room"
            );
        }
        let keys = keys.filter(|_| rooms_on);
        if keys.is_some() {
            // Rooms created and changed by moderation events since, replayed in order.
            let moderation =
                store.in_stored_order(&[PUT_USER, REMOVE_USER, EDIT_METADATA, CREATE_GROUP])?;
            // (9005 deletions are not replayed: what they deleted is gone from the store.)
            for event in &moderation {
                if let Ok(Some(change)) = rooms.moderate(event) {
                    rooms.apply(&change);
                }
            }
            for key in &writers {
                rooms.add_member_everywhere(*key);
            }
        }
        let retired = store.retire_rooms(&rooms.ids())?;
        if !retired.now.is_empty() {
            tracing::info!(
                rooms = %retired.now.join(", "),
                metadata_events = retired.metadata,
                events_kept = retired.events,
                "rooms no longer in the configuration were taken off the relay: their metadata is removed, and \
                 their events are kept but read by nobody until a room of that id is configured again (or \
                 retention removes them)"
            );
        }
        let rooms = rooms.with_retired(retired.all);
        if let Some(keys) = keys {
            // The rooms' metadata as they are now (addressable: each replaces the one before, so it is
            // dated after the newest the relay signed).
            let newest = store
                .query(
                    &[Filter::new()
                        .kinds([GROUP_METADATA, GROUP_ADMINS, GROUP_MEMBERS].map(Kind::from_u16))
                        .author(keys.public_key())
                        .limit(1)],
                    Timestamp::now(),
                )?
                .first()
                .map_or(0, |e| e.created_at.as_secs());
            let at = Timestamp::now().as_secs().max(newest.saturating_add(1));
            store.insert_batch(&rooms.metadata(&keys, Timestamp::from_secs(at)))?;
            signed_at = at;
        }
        Ok::<_, RelayError>((store, rooms, signed_at))
    })
    .await
    .map_err(|e| RelayError::Internal(format!("opening the database panicked: {e}")))??;
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| RelayError::Bind {
            addr: config.listen,
            source,
        })?;
    let local_addr = listener.local_addr()?;
    let own_urls = OwnUrls::new(local_addr, &config.public_urls)
        .map_err(RelayError::InvalidPublicUrl)?
        .with_allowed_origins(&config.allowed_origins)
        .map_err(RelayError::InvalidOrigin)?;

    let fanout = Fanout::new();
    let (writer_tx, writer_rx) = mpsc::channel(WRITE_QUEUE_CAPACITY);
    let rooms = Arc::new(RwLock::new(rooms));
    let moderation = match (&config.relay_keys, rooms_on) {
        (Some(keys), true) => Some(RoomUpdates {
            rooms: Arc::clone(&rooms),
            keys: keys.clone(),
            signed_at: std::cell::Cell::new(signed_at),
        }),
        _ => None,
    };
    let writer = spawn_writer(
        store,
        writer_rx,
        Arc::clone(&fanout),
        moderation,
        config.retention,
        config.notifier.clone(),
    )?;
    let shared = Arc::new(Shared {
        limits: config.limits,
        unlimited_authors: Arc::new(config.unlimited_authors),
        writer: writer_tx,
        readers: ReadPool::new(config.db_path),
        fanout,
        document: information_document(
            &config.name,
            &config.limits,
            config.relay_keys.as_ref().map(Keys::public_key).as_ref(),
        ),
        name: config.name,
        health: config.health,
        rooms,
        own_urls: Arc::new(own_urls),
        idle_timeout: config.idle_timeout,
        stats: Arc::default(),
        signed_here: config.signed_here,
    });
    let stats = Arc::clone(&shared.stats);
    let (shutdown, shutdown_rx) = watch::channel(false);
    let server = tokio::spawn(accept_loop(listener, shared, shutdown_rx));
    tracing::info!(%local_addr, "relay listening");
    Ok(RelayHandle {
        local_addr,
        shutdown,
        server: Some(server),
        writer: Some(writer),
        stats,
    })
}

impl RelayHandle {
    /// The address the relay listens on (with the real port when port 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The WebSocket URL of the relay, e.g. `ws://127.0.0.1:7447`. A wildcard listen address
    /// is given as the loopback address.
    pub fn url(&self) -> String {
        let ip = match self.local_addr.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        format!("ws://{}", SocketAddr::new(ip, self.local_addr.port()))
    }

    /// The relay's counters (connections open, `EVENT`s answered by result), read as they change.
    pub fn stats(&self) -> Arc<RelayStats> {
        Arc::clone(&self.stats)
    }

    /// Stops accepting, closes every connection (after at most [`SHUTDOWN_GRACE`]), lets the
    /// writer commit what it was given, and closes the database.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(server) = self.server.take() {
            if let Err(error) = server.await {
                tracing::warn!(%error, "relay accept loop ended abnormally");
            }
        }
        if let Some(writer) = self.writer.take() {
            let joined = tokio::task::spawn_blocking(move || writer.join()).await;
            if !matches!(joined, Ok(Ok(()))) {
                tracing::warn!("relay writer thread ended abnormally");
            }
        }
    }
}

impl Drop for RelayHandle {
    fn drop(&mut self) {
        // Tells the accept loop and the connections to stop; the writer thread ends once they
        // have, after committing what it was given.
        let _ = self.shutdown.send(true);
    }
}

/// The connections each address holds, under `max_connections_per_address`.
#[derive(Debug)]
struct AddressSlots {
    cap: usize,
    held: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection's place under its address's cap; given back when dropped. A loopback connection's holds
/// no place (`address` none): loopback has no per-address cap.
#[derive(Debug)]
pub(crate) struct AddressSlot {
    slots: Arc<AddressSlots>,
    address: Option<IpAddr>,
}

/// The address a peer counts under: an IPv4-mapped IPv6 address as the IPv4 address, any other IPv6
/// address by its /64 (one host is given a whole /64, and could otherwise take a new address per
/// connection).
fn counted_address(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(prefix))
        }
        v4 => v4,
    }
}

impl AddressSlots {
    fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self {
            cap,
            held: Mutex::new(HashMap::new()),
        })
    }

    /// A place for a connection from `ip`, if its address holds fewer than the cap; always for loopback,
    /// which every local client and a TLS proxy's clients share (see
    /// [`DEFAULT_MAX_CONNECTIONS_PER_ADDRESS`](crate::limits::DEFAULT_MAX_CONNECTIONS_PER_ADDRESS)).
    fn try_take(self: &Arc<Self>, ip: IpAddr) -> Option<AddressSlot> {
        if ip.to_canonical().is_loopback() {
            return Some(AddressSlot {
                slots: Arc::clone(self),
                address: None,
            });
        }
        let address = counted_address(ip);
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let count = held.entry(address).or_insert(0);
        if *count >= self.cap {
            return None;
        }
        *count += 1;
        Some(AddressSlot {
            slots: Arc::clone(self),
            address: Some(address),
        })
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let Some(address) = self.address else { return };
        let mut held = self
            .slots
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = held.get_mut(&address) {
            *count -= 1;
            if *count == 0 {
                // Only addresses with connections are kept: the map is bounded by `max_connections`.
                held.remove(&address);
            }
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(shared.limits.max_connections));
    let address_slots = AddressSlots::new(shared.limits.max_connections_per_address);
    let refusals = Arc::new(Semaphore::new(MAX_PENDING_REFUSALS));
    let mut tasks = JoinSet::new();
    let mut purge =
        tokio::time::interval_at(tokio::time::Instant::now() + PURGE_INTERVAL, PURGE_INTERVAL);
    purge.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = connection::stopped(&mut shutdown) => break,
            _ = purge.tick() => {
                // If the queue is full the writer is busy; the next tick will do.
                let _ = shared.writer.try_send(WriteOp::Purge(Timestamp::now()));
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let slot = Arc::clone(&slots).try_acquire_owned().ok();
                    let address_slot = address_slots.try_take(peer.ip());
                    match (slot, address_slot) {
                        (Some(slot), Some(address_slot)) => {
                            let shared = Arc::clone(&shared);
                            let shutdown = shutdown.clone();
                            tasks.spawn(connection::serve(
                                stream,
                                peer,
                                shared,
                                shutdown,
                                slot,
                                address_slot,
                            ));
                        }
                        (slot, _) => {
                            let response = if slot.is_none() {
                                tracing::debug!(%peer, "relay at its connection limit");
                                http::service_unavailable()
                            } else {
                                tracing::debug!(%peer, "address at its connection limit");
                                http::too_many_from_address()
                            };
                            if let Ok(permit) = Arc::clone(&refusals).try_acquire_owned() {
                                tasks.spawn(connection::refuse(stream, response, permit));
                            }
                        }
                    }
                }
                Err(error) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(%error, "relay accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
    drop(listener);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_holds_at_most_its_cap_and_gets_places_back() {
        let slots = AddressSlots::new(2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let first = slots.try_take(a).unwrap();
        let _second = slots.try_take(a).unwrap();
        assert!(slots.try_take(a).is_none());
        assert!(slots.try_take(b).is_some());
        drop(first);
        assert!(slots.try_take(a).is_some());
    }

    #[test]
    fn loopback_has_no_per_address_cap() {
        let slots = AddressSlots::new(1);
        let held: Vec<_> = [
            "127.0.0.1",
            "127.0.0.1",
            "127.0.0.2",
            "::1",
            "::ffff:127.0.0.1",
        ]
        .iter()
        .map(|ip| {
            slots
                .try_take(ip.parse().unwrap())
                .expect("a loopback place")
        })
        .collect();
        assert!(slots.held.lock().unwrap().is_empty());
        drop(held);
        let remote: IpAddr = "192.0.2.7".parse().unwrap();
        let _one = slots.try_take(remote).unwrap();
        assert!(slots.try_take(remote).is_none());
    }

    #[test]
    fn ipv6_counts_by_its_64_and_mapped_ipv4_as_ipv4() {
        let host = |s: &str| counted_address(s.parse().unwrap());
        assert_eq!(host("2001:db8:1:2::1"), host("2001:db8:1:2:ffff::9"));
        assert_ne!(host("2001:db8:1:2::1"), host("2001:db8:1:3::1"));
        assert_eq!(host("::ffff:192.0.2.7"), host("192.0.2.7"));
        assert_eq!(host("127.0.0.1"), "127.0.0.1".parse::<IpAddr>().unwrap());
    }
}
