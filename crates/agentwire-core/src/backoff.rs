//! The wait between tries of something that failed: a first wait, doubled after each try up to a most, and
//! back to the first once a try works. Every retry loop of agentwire (a relay's reconnect and its
//! re-subscriptions, a roost agent's reconnect, a reply the journal could not take, an MCP server's restart,
//! the engine's journal writes) waits by one of these. Pure: the caller sleeps.

use std::time::Duration;

/// Doubling waits from `first` up to `most`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    first: Duration,
    most: Duration,
    next: Duration,
}

impl Backoff {
    /// Waits starting at `first` and doubling up to `most` (`first` when `most` is less).
    pub fn new(first: Duration, most: Duration) -> Backoff {
        Backoff {
            first,
            most: most.max(first),
            next: first,
        }
    }

    /// The wait before the next try.
    pub fn peek(&self) -> Duration {
        self.next
    }

    /// Takes the wait before the next try, and doubles the one after it (up to the most).
    pub fn take(&mut self) -> Duration {
        let d = self.next;
        self.next = d.saturating_mul(2).min(self.most);
        d
    }

    /// A try worked: the next wait is the first again.
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_most_and_start_over_after_a_reset() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(100), ms(500));
        let waits: Vec<_> = (0..5).map(|_| b.take()).collect();
        assert_eq!(waits, [ms(100), ms(200), ms(400), ms(500), ms(500)]);
        b.reset();
        assert_eq!((b.peek(), b.take(), b.peek()), (ms(100), ms(100), ms(200)));
        // A most below the first is the first; a huge wait does not overflow.
        let mut odd = Backoff::new(ms(300), ms(10));
        assert_eq!((odd.take(), odd.take()), (ms(300), ms(300)));
        let mut huge = Backoff::new(Duration::MAX, Duration::MAX);
        assert_eq!((huge.take(), huge.take()), (Duration::MAX, Duration::MAX));
    }
}
