//! agentwire's embedded Nostr relay: NIP-01 over WebSocket, NIP-11 over HTTP on the same port,
//! NIP-09 deletion, NIP-40 expiration, NIP-42 authentication, NIP-45 counts, NIP-70 protected events,
//! durable SQLite storage, notifications through a webhook ([`notify`]) and a named bound on everything a
//! client can ask for.
//!
//! # Starting a relay
//!
//! ```no_run
//! # async fn run() -> Result<(), agentwire_relay::RelayError> {
//! use agentwire_relay::{start, RelayConfig};
//!
//! let config = RelayConfig::new("127.0.0.1:0".parse().unwrap(), "/tmp/relay.sqlite");
//! let relay = start(config).await?;
//! println!("relay at {}", relay.url());
//! relay.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # What it keeps
//!
//! Regular events are stored; replaceable (0, 3, 10000-19999) and addressable (30000-39999)
//! events keep only the newest per address; ephemeral events (20000-29999) are only broadcast,
//! except the NIP-XX kinds 25802, 25803 and 25805, which are stored so runs can be replayed
//! ([`kind::Retention`]). An `OK true` for a stored event is sent only after its transaction has
//! committed (`synchronous=FULL`); a single writer thread commits all pending inserts together.
//!
//! # Tiny agent questions
//!
//! A kind 9 room message with `["request","question"]` and `["tinyagent","1"]` is a question card: one
//! that breaks a rule of the spec is refused (`OK false`, `invalid:` naming the rule). A kind 1111 reply
//! (one root `E`, one parent `e`) naming a stored card as either must answer it validly (asked key, in time, NIP-22 tags, content fit
//! for the selection); the first valid answer settles the card, durably in the same transaction, and any
//! later one is refused with `duplicate:` ([`tinyagent`]).
//!
//! # Counters
//!
//! [`RelayHandle::stats`] reads the WebSocket connections open and the `EVENT`s answered by result
//! ([`stats`]), for the embedding daemon's metrics.
//!
//! # Bounds
//!
//! The configurable bounds are [`RelayLimits`] (defaults in the `DEFAULT_*` constants); the
//! fixed internal ones are the other constants in [`limits`]. Each is enforced with a NIP-01
//! machine-readable message (`invalid:`, `rate-limited:`, `error:`) or an HTTP status.
//!
//! # Layout
//!
//! The protocol decisions do no I/O: [`kind`], `rate` (token bucket), `filter_sql`, `wire`,
//! `http` and `session` take time as an argument. The drivers (`server`, `connection`,
//! `storage_threads`, `fanout`) only move bytes and run the [`store`].
//!
//! # Slow subscribers
//!
//! Live events reach ordinary connections through a shared ring of [`limits::LIVE_QUEUE_CAPACITY`];
//! one that falls further behind has its subscriptions closed (`CLOSED "error: too slow"`) rather
//! than slowing anybody down. A connection that authenticated (NIP-42) as an unlimited author (the
//! operator's agent) is exempt: its live events come through a bounded queue of its own, and publishers wait while it is
//! full (up to [`limits::EXEMPT_QUEUE_TIMEOUT`]), so a burst addressed to the agent slows its
//! senders down instead of making the agent lose events.

#![warn(missing_docs)]

mod connection;
mod error;
mod fanout;
mod filter_sql;
#[doc(hidden)]
pub mod fuzzing;
mod health;
mod http;
pub mod kind;
pub mod limits;
pub mod notify;
mod own_urls;
pub mod retention;
pub mod rooms;
mod server;
mod session;
mod signed_here;
pub mod stats;
mod storage_threads;
pub mod store;
/// The question card and answer rules (their own pure crate, shared with the task-card adapter).
pub use agentwire_tinyagent as tinyagent;
mod wire;

pub use error::RelayError;
pub use health::{HealthCheck, HealthReport};
pub use limits::RelayLimits;
pub use own_urls::{
    check_allowed_origin, check_public_url, OriginError, RelayUrlError, ANY_ORIGIN,
};
pub use retention::RetentionPolicy;
pub use rooms::RoomConfig;
pub use server::{start, RelayConfig, RelayHandle};
pub use signed_here::{SignedHere, MAX_REMEMBERED_SIGNATURES};
pub use stats::{EventResult, RelayStats};
