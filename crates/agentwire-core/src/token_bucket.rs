//! A token bucket: how often something may happen, on average and in a burst. Every rate of agentwire is
//! one of these: the relay's events per connection, the NIP-XX prompts per sender, the refusals answered
//! across all senders, and the gift wraps opened per relay and in all. Pure: the caller passes `now`, in
//! seconds from any fixed origin of its choosing (a monotonic clock's start, a test's zero).

/// A token's worth of float rounding: a bucket refilled in many small steps (a thousand of a millisecond
/// each) may add up to a hair under a whole token where exact arithmetic gives one; that hair still counts.
const ROUNDING: f64 = 1e-9;

/// `per_second` tokens a second, sustained, and at most `burst` at once; starts full.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenBucket {
    per_second: f64,
    burst: f64,
    tokens: f64,
    /// When `tokens` was counted; `None` until the first call (a new bucket is full whatever the clock).
    at: Option<f64>,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens refilled at `per_second` (negative values count as zero).
    pub fn new(per_second: f64, burst: f64) -> TokenBucket {
        let burst = burst.max(0.0);
        TokenBucket {
            per_second: per_second.max(0.0),
            burst,
            tokens: burst,
            at: None,
        }
    }

    /// The tokens there are at `now`, without taking any. A `now` before the last one counts as no time
    /// passed.
    pub fn available(&self, now: f64) -> f64 {
        match self.at {
            Some(at) if now > at => (self.tokens + (now - at) * self.per_second).min(self.burst),
            _ => self.tokens,
        }
    }

    /// Whether the bucket is full at `now`: its owner has been idle long enough to be forgotten.
    pub fn is_full(&self, now: f64) -> bool {
        self.available(now) >= self.burst
    }

    /// Takes one token at `now` if there is one.
    pub fn try_take(&mut self, now: f64) -> bool {
        self.take_where(now, |_| true)
    }

    /// Takes one token at `now` if there is one and `also` agrees (given the tokens there are); two buckets
    /// that must both have a token ask each other this way, so that neither spends one alone.
    pub fn take_where(&mut self, now: f64, also: impl FnOnce(f64) -> bool) -> bool {
        let tokens = self.available(now);
        self.at = Some(self.at.map_or(now, |at| at.max(now)));
        let taken = tokens + ROUNDING >= 1.0 && also(tokens);
        self.tokens = match taken {
            true => (tokens - 1.0).max(0.0),
            false => tokens,
        };
        taken
    }

    /// Seconds from `now` until a token is there (zero if one is); `None` if the bucket never refills.
    pub fn wait_for_one(&self, now: f64) -> Option<f64> {
        let missing = 1.0 - self.available(now);
        match missing <= ROUNDING {
            true => Some(0.0),
            false if self.per_second > 0.0 => Some(missing / self.per_second),
            false => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate_and_never_more_than_the_burst() {
        let mut b = TokenBucket::new(10.0, 10.0);
        assert_eq!((0..100).filter(|_| b.try_take(5.0)).count(), 10);
        // A tenth of a second buys exactly one token.
        assert!(b.try_take(5.1));
        assert!(!b.try_take(5.1));
        // An hour's pause refills only up to the burst.
        assert_eq!((0..100).filter(|_| b.try_take(3605.1)).count(), 10);
        assert!(b.is_full(4000.0));
    }

    #[test]
    fn the_sustained_rate_holds_over_many_small_steps() {
        let mut b = TokenBucket::new(100.0, 100.0);
        // Ten seconds of tries every millisecond: the burst (100) and 10 s at 100 a second.
        let taken = (0..10_000)
            .filter(|ms| b.try_take(f64::from(*ms) / 1000.0))
            .count();
        assert!((1_099..=1_100).contains(&taken), "{taken}");
    }

    #[test]
    fn time_going_backwards_refills_nothing() {
        let mut b = TokenBucket::new(1.0, 1.0);
        assert!(b.try_take(10.0));
        assert!(!b.try_take(5.0));
        // Nor does the step back count twice when time comes forward again.
        assert!(!b.try_take(10.5));
        assert!(b.try_take(11.0));
    }

    #[test]
    fn the_wait_for_a_token_and_a_bucket_that_never_refills() {
        let mut b = TokenBucket::new(2.0, 1.0);
        assert_eq!(b.wait_for_one(0.0), Some(0.0));
        assert!(b.try_take(0.0));
        assert_eq!(b.wait_for_one(0.0), Some(0.5));
        assert_eq!(b.wait_for_one(0.25), Some(0.25));
        let mut never = TokenBucket::new(0.0, 1.0);
        assert!(never.try_take(0.0));
        assert_eq!(never.wait_for_one(1e9), None);
        assert!(!never.try_take(1e9));
    }

    #[test]
    fn a_refusal_of_the_other_bucket_spends_nothing() {
        let mut b = TokenBucket::new(1.0, 1.0);
        assert!(!b.take_where(0.0, |tokens| {
            assert_eq!(tokens, 1.0);
            false
        }));
        assert!(b.try_take(0.0), "the token is still there");
    }
}
