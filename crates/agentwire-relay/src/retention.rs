//! How long the relay keeps stored events (`[relay.retention]`), by class of kind, so a long-running
//! daemon's data dir does not grow without bound. Pure: which class a kind is in, and the cut-off times.
//!
//! Never pruned by age: replaceable and addressable events (ai.info, room metadata: one per address
//! anyway), deletion requests, room moderation (replayed at every start) and open tiny agent questions.

use nostr::event::Kind;
use nostr::types::Timestamp;
use serde::{Deserialize, Serialize};

use crate::kind::Retention;

/// Seconds in a day.
const DAY_SECS: u64 = 86_400;

/// The NIP-XX run kinds the relay stores (prompt, response, error) and NIP-59 gift wraps: an agent's
/// traffic, replayed only within the backlog horizon (hours), kept a while for people to look back.
pub const AGENT_KINDS: [u16; 4] = [25_802, 25_803, 25_805, 1_059];
/// Room chat, threads, comments (answers) and task cards: what people come back to.
pub const ROOM_KINDS: [u16; 10] = [
    9, 11, 12, 1_111, 43_001, 43_002, 43_003, 43_004, 43_005, 43_006,
];
/// Kinds kept whatever their age: deletion requests and NIP-29 moderation (9000-9020).
pub const KEPT_KINDS: std::ops::RangeInclusive<u16> = 9_000..=9_020;

/// Default days an agent's run events are kept.
pub const DEFAULT_AGENT_DAYS: f64 = 30.0;
/// Default days room events are kept: 0, forever (a room's history is its users').
pub const DEFAULT_ROOMS_DAYS: f64 = 0.0;
/// Default days every other regular event is kept.
pub const DEFAULT_OTHER_DAYS: f64 = 90.0;

/// Days each class of stored events is kept; 0 keeps it forever. A fraction of a day is a shorter time
/// (`0.25` is six hours): a soak test levels the data dir off within its run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionPolicy {
    /// NIP-XX run events and gift wraps ([`AGENT_KINDS`]).
    pub agent_days: f64,
    /// Room chat, threads, comments and task cards ([`ROOM_KINDS`]); open questions are kept.
    pub rooms_days: f64,
    /// Every other regular event.
    pub other_days: f64,
}

impl Default for RetentionPolicy {
    fn default() -> Self {
        Self {
            agent_days: DEFAULT_AGENT_DAYS,
            rooms_days: DEFAULT_ROOMS_DAYS,
            other_days: DEFAULT_OTHER_DAYS,
        }
    }
}

/// The class of a kind, for retention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KindClass {
    /// [`AGENT_KINDS`].
    Agent,
    /// [`ROOM_KINDS`].
    Rooms,
    /// Any other regular kind.
    Other,
    /// Never pruned by age.
    Kept,
}

/// Which class `kind` is in.
pub fn class_of(kind: Kind) -> KindClass {
    let k = kind.as_u16();
    if AGENT_KINDS.contains(&k) {
        return KindClass::Agent;
    }
    if ROOM_KINDS.contains(&k) {
        return KindClass::Rooms;
    }
    if k == 5 || KEPT_KINDS.contains(&k) || Retention::of(kind) != Retention::Regular {
        return KindClass::Kept;
    }
    KindClass::Other
}

fn cutoff(days: f64, now: Timestamp) -> Option<Timestamp> {
    let secs = days_to_secs(days)?;
    Some(Timestamp::from_secs(now.as_secs().saturating_sub(secs)))
}

/// `days` as whole seconds; `None` for 0 (forever) or a value that is no time (negative, not finite).
pub fn days_to_secs(days: f64) -> Option<u64> {
    (days.is_finite() && days > 0.0).then(|| (days * DAY_SECS as f64).round().max(1.0) as u64)
}

/// Why a [`RetentionPolicy`] cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RetentionError {
    /// A key holds a negative or non-finite number of days.
    #[error("{key}: {days} is not a number of days (0 keeps for ever)")]
    NotDays {
        /// The key (`agent_days`, `rooms_days`, `other_days`).
        key: &'static str,
        /// Its value.
        days: f64,
    },
}

impl RetentionPolicy {
    /// Why this policy cannot be used (a negative or non-finite number of days), naming the key.
    pub fn check(&self) -> Result<(), RetentionError> {
        for (key, days) in [
            ("agent_days", self.agent_days),
            ("rooms_days", self.rooms_days),
            ("other_days", self.other_days),
        ] {
            if !days.is_finite() || days < 0.0 {
                return Err(RetentionError::NotDays { key, days });
            }
        }
        Ok(())
    }

    /// Events of `class` created before the returned time are pruned at `now` (none: kept).
    pub fn prune_before(&self, class: KindClass, now: Timestamp) -> Option<Timestamp> {
        match class {
            KindClass::Agent => cutoff(self.agent_days, now),
            KindClass::Rooms => cutoff(self.rooms_days, now),
            KindClass::Other => cutoff(self.other_days, now),
            KindClass::Kept => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_fall_in_their_classes_and_the_kept_ones_are_never_cut() {
        let of = |k: u16| class_of(Kind::from_u16(k));
        assert_eq!(of(25_802), KindClass::Agent);
        assert_eq!(of(1_059), KindClass::Agent);
        assert_eq!(of(9), KindClass::Rooms);
        assert_eq!(of(43_004), KindClass::Rooms);
        assert_eq!(of(1), KindClass::Other);
        for kept in [0, 3, 5, 9_000, 9_007, 10_002, 31_340, 39_000] {
            assert_eq!(of(kept), KindClass::Kept, "kind {kept}");
        }
        let p = RetentionPolicy::default();
        let now = Timestamp::from_secs(100 * DAY_SECS);
        assert_eq!(
            p.prune_before(KindClass::Agent, now),
            Some(Timestamp::from_secs(70 * DAY_SECS))
        );
        assert_eq!(p.prune_before(KindClass::Rooms, now), None);
        assert_eq!(p.prune_before(KindClass::Kept, now), None);
    }
}
