//! The relay's running counters, for whoever embeds it to read (the daemon's `/metrics`): the WebSocket
//! connections open now, and the `EVENT`s answered by result. Atomics, counted as the relay answers; this
//! crate exports no metrics itself.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// How the relay answered an `EVENT`, as its `OK` says: by the NIP-01 machine-readable prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventResult {
    /// `OK true`: stored (or, ephemeral, passed on).
    Accepted,
    /// `OK true "duplicate: ..."`: already stored, or older than the replaceable event stored.
    Duplicate,
    /// `OK false "rate-limited: ..."`: the connection sent too many.
    RateLimited,
    /// `OK false` for the event itself: invalid, blocked, restricted, or waiting for an `AUTH`.
    Rejected,
    /// `OK false "error: ..."`: the relay could not store it.
    Error,
}

impl EventResult {
    /// Every result, in this order.
    pub const ALL: [EventResult; 5] = [
        EventResult::Accepted,
        EventResult::Duplicate,
        EventResult::RateLimited,
        EventResult::Rejected,
        EventResult::Error,
    ];

    /// The result of an `OK` with this status and message.
    pub fn of(accepted: bool, message: &str) -> EventResult {
        match (accepted, message.split_once(':').map(|(prefix, _)| prefix)) {
            (true, Some("duplicate")) => EventResult::Duplicate,
            (true, _) => EventResult::Accepted,
            (false, Some("rate-limited")) => EventResult::RateLimited,
            (false, Some("error")) => EventResult::Error,
            (false, _) => EventResult::Rejected,
        }
    }

    /// Its name, in snake case (a metric's label).
    pub fn as_str(self) -> &'static str {
        match self {
            EventResult::Accepted => "accepted",
            EventResult::Duplicate => "duplicate",
            EventResult::RateLimited => "rate_limited",
            EventResult::Rejected => "rejected",
            EventResult::Error => "error",
        }
    }
}

/// The counters of one relay ([`RelayHandle::stats`](crate::RelayHandle::stats)).
#[derive(Debug, Default)]
pub struct RelayStats {
    connections: AtomicU64,
    events: [AtomicU64; EventResult::ALL.len()],
}

impl RelayStats {
    /// The WebSocket connections open now.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// How many `EVENT`s were answered with `result` since the relay started.
    pub fn events(&self, result: EventResult) -> u64 {
        self.events[result as usize].load(Ordering::Relaxed)
    }

    /// Counts an `EVENT` answered with `result`.
    pub(crate) fn answered(&self, result: EventResult) {
        self.events[result as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection open until the guard is dropped.
    pub(crate) fn open(self: &Arc<Self>) -> OpenConnection {
        self.connections.fetch_add(1, Ordering::Relaxed);
        OpenConnection(Arc::clone(self))
    }
}

/// A connection counted as open; dropping it counts it closed.
#[derive(Debug)]
pub(crate) struct OpenConnection(Arc<RelayStats>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ok_reads_as_its_result() {
        assert_eq!(EventResult::of(true, ""), EventResult::Accepted);
        assert_eq!(
            EventResult::of(true, "duplicate: already have this event"),
            EventResult::Duplicate
        );
        assert_eq!(
            EventResult::of(false, "rate-limited: at most 10 events per second"),
            EventResult::RateLimited
        );
        assert_eq!(
            EventResult::of(false, "error: could not store the event"),
            EventResult::Error
        );
        for refusal in [
            "invalid: bad signature",
            "blocked: its author deleted this event (NIP-09)",
            "restricted: only members may write here",
            "auth-required: this event is protected (NIP-70)",
            "no prefix at all",
        ] {
            assert_eq!(EventResult::of(false, refusal), EventResult::Rejected);
        }
    }

    #[test]
    fn a_connection_counts_while_it_is_open() {
        let stats = Arc::new(RelayStats::default());
        let one = stats.open();
        let two = stats.open();
        assert_eq!(stats.connections(), 2);
        drop(one);
        assert_eq!(stats.connections(), 1);
        drop(two);
        assert_eq!(stats.connections(), 0);
        stats.answered(EventResult::Duplicate);
        assert_eq!(stats.events(EventResult::Duplicate), 1);
        assert_eq!(stats.events(EventResult::Accepted), 0);
    }
}
