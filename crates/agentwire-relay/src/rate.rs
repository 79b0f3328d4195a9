//! A token bucket for the per-connection event rate, with time passed in (no clock inside).

use std::time::{Duration, Instant};

/// Allows `rate` events per second on average and bursts of up to `rate` events.
///
/// A rate of zero means unlimited. Time is passed in by the caller so the bucket can be tested
/// with any clock.
#[derive(Debug, Clone)]
pub(crate) struct TokenBucket {
    rate: u32,
    /// Whole tokens available now, scaled by [`NANOS_PER_SEC`] so refills stay exact in integers.
    tokens_nanos: u128,
    last: Instant,
}

const NANOS_PER_SEC: u128 = 1_000_000_000;

impl TokenBucket {
    /// A full bucket for `rate` events per second, as of `now`.
    pub(crate) fn new(rate: u32, now: Instant) -> Self {
        Self {
            rate,
            tokens_nanos: u128::from(rate) * NANOS_PER_SEC,
            last: now,
        }
    }

    /// Takes one token if there is one. `now` earlier than the last call counts as no time passed.
    pub(crate) fn try_take(&mut self, now: Instant) -> bool {
        if self.rate == 0 {
            return true;
        }
        let capacity = u128::from(self.rate) * NANOS_PER_SEC;
        let elapsed: Duration = now.saturating_duration_since(self.last);
        self.last = self.last.max(now);
        // Each elapsed nanosecond adds `rate` nano-tokens: rate tokens per second.
        let refill = elapsed.as_nanos().saturating_mul(u128::from(self.rate));
        self.tokens_nanos = self.tokens_nanos.saturating_add(refill).min(capacity);
        if self.tokens_nanos >= NANOS_PER_SEC {
            self.tokens_nanos -= NANOS_PER_SEC;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_refill() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(10, t0);
        for _ in 0..10 {
            assert!(bucket.try_take(t0));
        }
        assert!(!bucket.try_take(t0));
        // A tenth of a second buys exactly one token.
        let t1 = t0 + Duration::from_millis(100);
        assert!(bucket.try_take(t1));
        assert!(!bucket.try_take(t1));
        // A long pause refills only up to the burst size.
        let t2 = t1 + Duration::from_secs(3600);
        for _ in 0..10 {
            assert!(bucket.try_take(t2));
        }
        assert!(!bucket.try_take(t2));
    }

    #[test]
    fn zero_rate_is_unlimited() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(0, t0);
        for _ in 0..100_000 {
            assert!(bucket.try_take(t0));
        }
    }

    #[test]
    fn time_going_backwards_does_not_refill() {
        let t0 = Instant::now() + Duration::from_secs(10);
        let mut bucket = TokenBucket::new(1, t0);
        assert!(bucket.try_take(t0));
        assert!(!bucket.try_take(t0 - Duration::from_secs(5)));
        assert!(!bucket.try_take(t0));
        assert!(bucket.try_take(t0 + Duration::from_secs(1)));
    }

    #[test]
    fn sustained_rate_matches() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(100, t0);
        let mut taken = 0;
        // Ten seconds of attempts every millisecond: burst (100) + 10 s * 100/s.
        for ms in 0..10_000u64 {
            if bucket.try_take(t0 + Duration::from_millis(ms)) {
                taken += 1;
            }
        }
        assert!((1_099..=1_100).contains(&taken), "{taken}");
    }
}
