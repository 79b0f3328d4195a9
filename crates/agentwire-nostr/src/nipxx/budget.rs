//! The budget of gift-wrap unwrapping. A wrap's sender is unknown until it is opened, and opening one
//! costs about 250 µs of CPU (two ECDH, two NIP-44 decryptions, two signature checks), so no per-sender
//! rate can apply before the work is done: a flood of wraps from throwaway keys would otherwise take the
//! runtime's time from real prompts. Each relay connection and the runtime as a whole get a token bucket
//! of unwraps; a wrap past either is dropped unopened (and stays on the relay). Pure: `now` comes in.

use agentwire_core::TokenBucket;

/// Unwraps a second from one relay connection: far above what people send, a small share of a core.
pub const UNWRAPS_PER_SECOND_PER_RELAY: f64 = 50.0;
/// Unwraps one relay connection may spend at once (a backlog of wrapped prompts after a restart).
pub const UNWRAP_BURST_PER_RELAY: f64 = 100.0;
/// Unwraps a second over every relay: about 2.5% of a core at 250 µs each.
pub const UNWRAPS_PER_SECOND: f64 = 100.0;
/// Unwraps the runtime may spend at once over every relay.
pub const UNWRAP_BURST: f64 = 200.0;

/// The unwrap budgets of one runtime.
#[derive(Debug, Clone)]
pub struct UnwrapBudget {
    relays: Vec<TokenBucket>,
    global: TokenBucket,
    dropped: u64,
}

impl UnwrapBudget {
    /// Budgets for `relays` relay connections.
    pub fn new(relays: usize) -> UnwrapBudget {
        UnwrapBudget {
            relays: vec![
                TokenBucket::new(UNWRAPS_PER_SECOND_PER_RELAY, UNWRAP_BURST_PER_RELAY);
                relays
            ],
            global: TokenBucket::new(UNWRAPS_PER_SECOND, UNWRAP_BURST),
            dropped: 0,
        }
    }

    /// Whether a wrap from relay `relay` may be opened at `now` (seconds); takes one unwrap if so.
    pub fn take(&mut self, relay: usize, now: f64) -> bool {
        let global = &mut self.global;
        let opened = self
            .relays
            .get_mut(relay)
            .is_some_and(|r| r.take_where(now, |_| global.try_take(now)));
        if !opened {
            self.dropped += 1;
        }
        opened
    }

    /// How many wraps were dropped unopened so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_on_one_relay_spends_its_own_budget_and_leaves_the_rest_for_others() {
        let mut b = UnwrapBudget::new(2);
        let taken = (0..10_000).filter(|_| b.take(0, 0.0)).count();
        assert_eq!(taken, UNWRAP_BURST_PER_RELAY as usize);
        // The other relay still has its own burst (within the global one).
        let other = (0..10_000).filter(|_| b.take(1, 0.0)).count();
        assert_eq!(other, (UNWRAP_BURST - UNWRAP_BURST_PER_RELAY) as usize);
        assert_eq!(b.dropped(), 20_000 - taken as u64 - other as u64);
        // A second later each relay has refilled its rate, bounded by the global rate.
        let later = (0..10_000).filter(|_| b.take(0, 1.0)).count();
        assert_eq!(later, UNWRAPS_PER_SECOND_PER_RELAY as usize);
    }

    #[test]
    fn the_budget_refills_over_time_and_not_past_its_burst() {
        let mut b = UnwrapBudget::new(1);
        for _ in 0..UNWRAP_BURST_PER_RELAY as usize {
            assert!(b.take(0, 10.0));
        }
        assert!(!b.take(0, 10.0));
        // Refilled at its rate (two unwraps' worth of time, clear of rounding).
        assert!(b.take(0, 10.0 + 2.0 / UNWRAPS_PER_SECOND_PER_RELAY));
        let after_an_hour = (0..10_000).filter(|_| b.take(0, 3610.0)).count();
        assert_eq!(after_an_hour, UNWRAP_BURST_PER_RELAY as usize);
        assert!(!b.take(7, 3610.0), "an unknown relay gets nothing");
    }
}
