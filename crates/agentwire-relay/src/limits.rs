//! The relay's bounds: the configurable [`RelayLimits`] with their defaults, and the fixed
//! internal bounds.
//!
//! Every bound is a named constant with the reason for its value beside it. The configurable ones
//! are the fields of [`RelayLimits`]; the rest size internal queues and timeouts.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::RelayError;

/// Default [`RelayLimits::max_event_bytes`]: 128 KiB.
///
/// A NIP-44 v2 payload carries at most 65,535 bytes of plaintext, which is about 87 KiB once
/// padded, authenticated and base64-encoded; a NIP-XX response (25803) carrying a maximal payload
/// plus its tags must fit, with room to spare.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 128 * 1024;

/// Default [`RelayLimits::max_message_bytes`]: 256 KiB.
///
/// An `EVENT` message holding the largest allowed event, or a `REQ` with the largest allowed
/// number of filters each naming a few hundred ids, fits; anything bigger is not a sensible
/// client message and would only cost memory.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// Default [`RelayLimits::max_subscriptions_per_connection`]: 128.
///
/// A NIP-XX client holds one subscription per run it follows plus a few for discovery; 128
/// concurrent runs on one connection is generous, while each subscription costs a filter match
/// for every live event.
pub const DEFAULT_MAX_SUBSCRIPTIONS_PER_CONNECTION: usize = 128;

/// Default [`RelayLimits::max_filters_per_req`]: 16.
///
/// Every filter is a separate SQL query when the subscription opens; real clients send one to
/// three filters per `REQ`.
pub const DEFAULT_MAX_FILTERS_PER_REQ: usize = 16;

/// Default [`RelayLimits::max_connections`]: 512.
///
/// Each connection holds a file descriptor; 512 stays well under the common soft limit of 1,024
/// descriptors per process, leaving room for the database files, the journal and outbound
/// connections of the rest of the binary.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// Default [`RelayLimits::max_connections_per_address`]: 128.
///
/// One address may hold only part of the relay's slots, so that sockets left half-open from one host (a
/// slowloris) cannot take them all: at the default [`DEFAULT_MAX_CONNECTIONS`] of 512, a quarter, and three
/// other addresses always find room. An IPv6 address counts by its /64, the block one host is given.
///
/// Loopback (127.0.0.0/8, `::1`) is under no per-address cap, only [`RelayLimits::max_connections`]:
/// everything local arrives from it (the daemon's own agents, every local client, and every client of a
/// TLS proxy in front of the relay), so one local process holding its share would shut every other local
/// client out while the relay had room. What keeps a local hoarder from holding sockets it does not use is
/// [`IDLE_TIMEOUT`].
pub const DEFAULT_MAX_CONNECTIONS_PER_ADDRESS: usize = 128;

/// How long a WebSocket connection with no open subscription may go without sending a message (`REQ`,
/// `EVENT`, `AUTH`, `COUNT`, `CLOSE`) before the relay closes it: 60 s.
///
/// A client connects to do something: it answers the NIP-42 challenge, subscribes or publishes within a
/// second of connecting. A socket that does none of these only holds one of the relay's places (and, from
/// loopback, which has no per-address cap, could hold them all); closing it after a minute gives the place
/// back while a client that publishes now and then just reconnects. WebSocket pings do not count: they cost
/// the holder nothing. A connection with a subscription open is never idle: it is waiting for events.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// How far ahead of the relay's clock an event's `created_at` may be: 900 s (15 minutes).
///
/// A client's clock is off by seconds, a phone's by a minute or two; an event dated further ahead is wrong
/// or meant to stay on top: newest-first queries would show it first for as long as it is dated ahead, and
/// retention, which counts from `created_at`, would keep it that much longer. Refused with
/// `invalid: created_at is too far in the future`. The NIP-XX agent holds prompts from any relay to the same
/// bound (`agentwire_nostr::nipxx::admission::MAX_FUTURE_SKEW`).
pub const MAX_FUTURE_SKEW_SECS: u64 = 900;

/// Default [`RelayLimits::max_events_per_second_per_connection`]: 200.
///
/// A remote agent streaming NIP-XX deltas publishes tens of events per second; 200 (with a burst
/// of the same size) lets that through while one connection cannot saturate the single writer
/// thread. The operator's own agent is exempt once it authenticates (NIP-42) as one of
/// `RelayConfig::unlimited_authors`.
pub const DEFAULT_MAX_EVENTS_PER_SECOND_PER_CONNECTION: u32 = 200;

/// Default [`RelayLimits::max_query_limit`]: 500.
///
/// Caps how many stored events one filter returns (and the default when a filter has no
/// `limit`), so one `REQ` cannot make the relay read and send the whole database.
pub const DEFAULT_MAX_QUERY_LIMIT: usize = 500;

/// Default [`RelayLimits::max_subscription_id_len`]: 64.
///
/// NIP-01 defines a subscription id as a non-empty string of at most 64 characters.
pub const DEFAULT_MAX_SUBSCRIPTION_ID_LEN: usize = 64;

/// How many live events may wait for one connection before it is considered too slow: 1,024.
///
/// This is the capacity of the live fan-out ring. A connection that falls further behind loses
/// its live subscriptions (each gets `CLOSED`) instead of slowing the publishers; at the largest
/// event size the ring holds at most 128 MiB, in practice a few hundred KiB. An exempt connection
/// (the operator's agent) does not read the ring: see [`EXEMPT_QUEUE_CAPACITY`].
pub const LIVE_QUEUE_CAPACITY: usize = 1024;

/// How many live events may wait in the queue of one exempt connection (the operator's agent,
/// authenticated as one of `RelayConfig::unlimited_authors`) before publishers wait for room: 1,024.
///
/// An exempt connection does not read the shared ring: every live event reaches it through this queue, and a
/// publisher whose event finds it full waits (up to [`EXEMPT_QUEUE_TIMEOUT`]), so a burst slows its publishers
/// down instead of making the agent lose events. The same size as the ring: enough for an agent busy with a
/// burst to keep pulling without publishers waiting on every event, and a bounded memory cost like the ring's.
pub const EXEMPT_QUEUE_CAPACITY: usize = 1024;

/// How long a publisher waits for room in an exempt connection's queue before giving up on it: 5 s.
///
/// An agent drains its queue at thousands of events per second, so a wait this long means it is stuck (it
/// stopped reading its socket, or is gone without a close). Then the old behaviour applies: the event is
/// counted as missed and the exempt connection's subscriptions are closed as too slow (the agent subscribes
/// again from where it left off), and publishers stop waiting on it until it has caught up. Well below
/// [`SEND_TIMEOUT`], so a stuck agent holds a publisher for less time than a stuck socket would.
pub const EXEMPT_QUEUE_TIMEOUT: Duration = Duration::from_secs(5);

/// The read buffer of each WebSocket connection: 8 KiB.
///
/// tungstenite zero-fills the free part of its read buffer before every socket read, and its
/// default buffer is 128 KiB: a 128 KiB memset per client message, which was 15% of the daemon's
/// CPU time with 50 clients (`agentwire-bench`), and 128 KiB of resident memory per connection.
/// Nostr client messages are a few hundred bytes to a few KiB; a larger frame still gets room for
/// its whole length, which the codec reserves from the frame header.
pub const READ_BUFFER_BYTES: usize = 8 * 1024;

/// How many inserts the writer thread commits in one transaction at most: 1,024.
///
/// Group commit pays one fsync per batch; past about a thousand events the fsync is no longer
/// the cost and a larger batch only delays the first `OK` in it.
pub const MAX_WRITE_BATCH: usize = 1024;

/// How many inserts may wait for the writer thread in all: 8,192.
///
/// Bounded so a burst of publishers gets back-pressure instead of unbounded memory; eight
/// batches of work is enough to keep the writer busy.
pub const WRITE_QUEUE_CAPACITY: usize = 8192;

/// How many `EVENT`s one connection may have waiting for their `OK` before the relay stops
/// reading from it: 1,024.
///
/// Lets a publisher pipeline a full group-commit batch without waiting for each `OK`, while a
/// connection cannot fill the whole write queue alone.
pub const MAX_PENDING_WRITES_PER_CONNECTION: usize = 1024;

/// How many `REQ` queries one connection may have waiting before the relay stops reading from
/// it: 32.
///
/// Opening subscriptions in a burst is normal; an endless stream of `REQ`s (each re-querying the
/// database) should wait for its own results instead of piling up.
pub const MAX_PENDING_QUERIES_PER_CONNECTION: usize = 32;

/// How many stored-event queries run at once across all connections: 4.
///
/// Queries run on blocking threads with their own SQLite connections; the machines this runs on
/// have two cores, so more would only queue inside the OS.
pub const MAX_CONCURRENT_QUERIES: usize = 4;

/// How many values (ids, authors, kinds, tag values) one filter may list in all: 4,096.
///
/// Each value is an SQL parameter and SQLite allows 32,766 per statement; 4,096 is far above any
/// real filter and keeps one query's cost bounded.
pub const MAX_FILTER_VALUES: usize = 4096;

/// The largest HTTP request head the relay reads before deciding between NIP-11 and a WebSocket
/// upgrade: 8 KiB, the common limit of HTTP servers; browsers send well under 2 KiB.
pub const MAX_HTTP_HEAD_BYTES: usize = 8 * 1024;

/// The most header lines a request head may carry: 64. Browsers send about 15 and Nostr clients fewer;
/// the parser keeps one slot a header on the stack, and a head with more is answered 400.
pub const MAX_HTTP_HEADERS: usize = 64;

/// How long a new connection may take to send its whole request head: 3 s. A browser or Nostr client
/// sends it in one packet right after connecting (well under a second even on a slow mobile link); a
/// head dripped in slowly only holds a slot (slowloris), and is closed once this has passed.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(3);

/// How long the WebSocket handshake may take once the request head is in: 10 s. Longer only helps idle
/// connections hold a slot.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one write to a client may block before the connection is dropped: 30 s.
///
/// A client that reads nothing for this long is gone or hostile; its slot is worth more.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// How often expired events (NIP-40) are deleted: every 60 s. Queries already hide them; the
/// purge only reclaims space, so there is no hurry.
pub const PURGE_INTERVAL: Duration = Duration::from_secs(60);

/// How long `RelayHandle::shutdown` waits for connections to close before aborting them: 5 s.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How many over-limit connections may be waiting for their 503 answer at once: 64. Past that
/// they are closed without an answer, so a flood cannot turn the refusals into a load of its own.
pub const MAX_PENDING_REFUSALS: usize = 64;

/// How long to read and discard what a client still sends after the relay closed on it (an
/// oversized message, an HTTP request): 2 s, so the close is not turned into a TCP reset that
/// could destroy the answer before the client reads it.
pub const LINGER_TIMEOUT: Duration = Duration::from_secs(2);

/// How many bytes to read and discard while lingering: 1 MiB.
pub const LINGER_MAX_BYTES: usize = 1024 * 1024;

/// The configurable limits of the relay.
///
/// Every field has a default (the `DEFAULT_*` constants) and can be set from TOML: missing fields
/// take their default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RelayLimits {
    /// Largest event, measured as its canonical JSON, in bytes (`OK false "invalid: event too large"`).
    pub max_event_bytes: usize,
    /// Largest WebSocket message in bytes; a bigger one gets a `NOTICE` and the connection closes
    /// with code 1009.
    pub max_message_bytes: usize,
    /// Most open subscriptions on one connection (`CLOSED "error: too many subscriptions"`).
    pub max_subscriptions_per_connection: usize,
    /// Most filters in one `REQ` (`CLOSED "error: too many filters"`).
    pub max_filters_per_req: usize,
    /// Most simultaneous TCP connections; past it a connection gets HTTP 503.
    pub max_connections: usize,
    /// Most simultaneous TCP connections from one address (an IPv6 address counts by its /64); past it a
    /// connection from that address gets HTTP 503 while other addresses are still served. Loopback is not
    /// capped per address (see [`DEFAULT_MAX_CONNECTIONS_PER_ADDRESS`]).
    pub max_connections_per_address: usize,
    /// Events one connection may publish per second, with a burst of the same size
    /// (`OK false "rate-limited: ..."`). Zero turns the limit off.
    pub max_events_per_second_per_connection: u32,
    /// Most stored events one filter returns; also the default when a filter has no `limit`.
    pub max_query_limit: usize,
    /// Longest subscription id in characters (`CLOSED "invalid: ..."`).
    pub max_subscription_id_len: usize,
}

impl Default for RelayLimits {
    fn default() -> Self {
        Self {
            max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_subscriptions_per_connection: DEFAULT_MAX_SUBSCRIPTIONS_PER_CONNECTION,
            max_filters_per_req: DEFAULT_MAX_FILTERS_PER_REQ,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_address: DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
            max_events_per_second_per_connection: DEFAULT_MAX_EVENTS_PER_SECOND_PER_CONNECTION,
            max_query_limit: DEFAULT_MAX_QUERY_LIMIT,
            max_subscription_id_len: DEFAULT_MAX_SUBSCRIPTION_ID_LEN,
        }
    }
}

impl RelayLimits {
    /// Checks that the limits make sense together: every bound but the rate is at least one, and
    /// a message can hold an event of the largest allowed size.
    pub fn validate(&self) -> Result<(), RelayError> {
        let positive = [
            ("max_event_bytes", self.max_event_bytes),
            ("max_message_bytes", self.max_message_bytes),
            (
                "max_subscriptions_per_connection",
                self.max_subscriptions_per_connection,
            ),
            ("max_filters_per_req", self.max_filters_per_req),
            ("max_connections", self.max_connections),
            (
                "max_connections_per_address",
                self.max_connections_per_address,
            ),
            ("max_query_limit", self.max_query_limit),
            ("max_subscription_id_len", self.max_subscription_id_len),
        ];
        for (name, value) in positive {
            if value == 0 {
                return Err(RelayError::InvalidLimits(format!(
                    "{name} must be at least 1"
                )));
            }
        }
        if self.max_message_bytes < self.max_event_bytes {
            return Err(RelayError::InvalidLimits(format!(
                "max_message_bytes ({}) must be at least max_event_bytes ({}): an EVENT message carries the event",
                self.max_message_bytes, self.max_event_bytes
            )));
        }
        Ok(())
    }
}

/// How far an AUTH event's `created_at` may be from the relay's clock (NIP-42 suggests about ten
/// minutes): enough for a phone's clock, too little to replay an old one (its challenge is per
/// connection anyway).
pub const AUTH_MAX_SKEW_SECS: u64 = 600;

/// Most `AUTH` messages one connection may send: 64. A NIP-42 client answers its connection's one challenge
/// once per key (at most [`MAX_AUTHED_KEYS_PER_CONNECTION`]); each answer costs a signature check, so past
/// this many the connection is only trying keys. Counted apart from the event rate: an agent that sent a
/// burst of events before its `AUTH` arrived must not find the `AUTH` refused for them, or its connection
/// would stay unexempt.
pub const MAX_AUTH_MESSAGES_PER_CONNECTION: usize = 64;

/// Most keys one connection may authenticate as (NIP-42 allows several). Each is a signature check and
/// an entry kept for the connection's life.
pub const MAX_AUTHED_KEYS_PER_CONNECTION: usize = 16;

/// Most events one retention pass deletes (one pass per [`PURGE_INTERVAL`]): bounds how long the pass
/// holds the writer thread (tens of milliseconds); a backlog is worked off over several passes.
pub const MAX_PRUNED_PER_PASS: usize = 10_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        RelayLimits::default().validate().unwrap();
    }

    #[test]
    fn zero_bounds_are_refused() {
        let limits = RelayLimits {
            max_connections: 0,
            ..RelayLimits::default()
        };
        assert!(matches!(
            limits.validate(),
            Err(RelayError::InvalidLimits(m)) if m.contains("max_connections")
        ));
    }

    #[test]
    fn message_must_hold_an_event() {
        let limits = RelayLimits {
            max_message_bytes: 1000,
            max_event_bytes: 2000,
            ..RelayLimits::default()
        };
        assert!(limits.validate().is_err());
    }

    #[test]
    fn missing_fields_take_their_default() {
        let limits: RelayLimits =
            serde_json::from_str(r#"{"max_connections": 3, "max_query_limit": 7}"#).unwrap();
        assert_eq!(
            limits,
            RelayLimits {
                max_connections: 3,
                max_query_limit: 7,
                ..RelayLimits::default()
            }
        );
    }
}
