//! How the relay keeps each event kind: stored, replaced by address, or only broadcast.
//!
//! NIP-01 ranges, plus the NIP-XX exception: kinds 25802 (prompt), 25803 (response) and 25805
//! (error) lie in the ephemeral range but the draft asks relays to keep them, so that runs can be
//! replayed after a restart.

use nostr::event::Kind;

/// NIP-XX `ai.prompt`: in the ephemeral range, stored on the draft's request.
pub const KIND_AI_PROMPT: u16 = 25802;
/// NIP-XX `ai.response`: in the ephemeral range, stored on the draft's request.
pub const KIND_AI_RESPONSE: u16 = 25803;
/// NIP-XX `ai.error`: in the ephemeral range, stored on the draft's request.
pub const KIND_AI_ERROR: u16 = 25805;

/// The ephemeral kinds that the relay stores anyway.
pub const STORED_EPHEMERAL_KINDS: [u16; 3] = [KIND_AI_PROMPT, KIND_AI_RESPONSE, KIND_AI_ERROR];

/// What the relay does with an event of a given kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Retention {
    /// Stored; every event is kept.
    Regular,
    /// Stored; only the newest per (author, kind) is kept (kinds 0, 3, 10000-19999).
    Replaceable,
    /// Stored; only the newest per (author, kind, `d` tag) is kept (kinds 30000-39999).
    Addressable,
    /// Broadcast to live subscribers and never stored (kinds 20000-29999, except
    /// [`STORED_EPHEMERAL_KINDS`]).
    Ephemeral,
}

impl Retention {
    /// Classifies a kind according to NIP-01 and the NIP-XX exception.
    pub fn of(kind: Kind) -> Self {
        match kind.as_u16() {
            0 | 3 | 10_000..=19_999 => Self::Replaceable,
            k if STORED_EPHEMERAL_KINDS.contains(&k) => Self::Regular,
            20_000..=29_999 => Self::Ephemeral,
            30_000..=39_999 => Self::Addressable,
            _ => Self::Regular,
        }
    }

    /// Whether events of this kind are written to the database.
    pub fn is_stored(self) -> bool {
        !matches!(self, Self::Ephemeral)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(k: u16) -> Retention {
        Retention::of(Kind::from_u16(k))
    }

    #[test]
    fn nip01_ranges() {
        assert_eq!(of(1), Retention::Regular);
        assert_eq!(of(0), Retention::Replaceable);
        assert_eq!(of(3), Retention::Replaceable);
        // Kind 41 is replaceable in old NIP-28 readings; NIP-01 does not list it.
        assert_eq!(of(41), Retention::Regular);
        assert_eq!(of(9_999), Retention::Regular);
        assert_eq!(of(10_000), Retention::Replaceable);
        assert_eq!(of(19_999), Retention::Replaceable);
        assert_eq!(of(20_000), Retention::Ephemeral);
        assert_eq!(of(29_999), Retention::Ephemeral);
        assert_eq!(of(30_000), Retention::Addressable);
        assert_eq!(of(39_999), Retention::Addressable);
        assert_eq!(of(40_000), Retention::Regular);
        assert_eq!(of(u16::MAX), Retention::Regular);
    }

    #[test]
    fn room_chat_threads_comments_and_task_cards_are_kept() {
        for k in [
            9, 11, 12, 1111, 43_001, 43_002, 43_003, 43_004, 43_005, 43_006,
        ] {
            assert_eq!(of(k), Retention::Regular, "kind {k}");
        }
    }

    #[test]
    fn nip_xx_kinds() {
        for k in [25_800, 25_801, 25_804, 25_806] {
            assert_eq!(of(k), Retention::Ephemeral, "{k}");
            assert!(!of(k).is_stored());
        }
        for k in STORED_EPHEMERAL_KINDS {
            assert_eq!(of(k), Retention::Regular, "{k}");
            assert!(of(k).is_stored());
        }
        assert_eq!(of(31_340), Retention::Addressable);
    }
}
