//! The subscriptions of one relay connection as a pure table: which `REQ`s to send again, with a `since` that
//! covers what was missed, after the relay closed one (`CLOSED`) or the connection came back, and when.
//!
//! For every subscription the table keeps a high-water mark: the newest `created_at` of the events delivered on
//! it (never later than the local clock at delivery, so one event dated next year cannot move it there). A
//! `REQ` sent again asks from `max(original since, high water - CATCH_UP_SLACK)`: the events of the gap come
//! back as stored events, and the few already seen again are duplicates the owner drops by id. After a
//! `CLOSED` the `REQ` is sent again after a delay that starts at [`RESUBSCRIBE_INITIAL_DELAY`], doubles up to
//! [`RESUBSCRIBE_MAX_DELAY`] while the relay keeps refusing (`auth-required:`, `restricted:`), and starts over
//! once events flow on the subscription again. Nothing here does I/O or reads a clock.

use agentwire_core::Backoff;
use nostr::prelude::{ClientMessage, Filter, SubscriptionId, Timestamp};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How far before the high-water mark a `REQ` sent again starts: 5 s.
///
/// `created_at` is the author's clock and has whole seconds: events of the same second as the newest one seen,
/// and events from authors whose clocks run a few seconds behind, can arrive after it. A few seconds of
/// duplicates cost little; a larger window only spends more of the relay's per-filter `limit` on events already
/// delivered.
pub const CATCH_UP_SLACK: Duration = Duration::from_secs(5);

/// The first delay before subscribing again after a `CLOSED`: 1 s.
///
/// A relay that dropped a subscription for being too slow is busy; a second is enough for the burst to move
/// on, and the catch-up `since` fetches what arrived meanwhile.
pub const RESUBSCRIBE_INITIAL_DELAY: Duration = Duration::from_secs(1);

/// The longest delay between re-subscriptions of a subscription the relay keeps closing: 60 s.
///
/// A relay that refuses for good (`auth-required:`, `restricted:`) costs one `REQ` a minute instead of a hot
/// loop, and one that recovers is back in use within a minute.
pub const RESUBSCRIBE_MAX_DELAY: Duration = Duration::from_secs(60);

#[derive(Debug)]
struct Sub {
    /// The filters as the owner asked for them.
    filters: Vec<Filter>,
    /// The newest `created_at` delivered on this subscription, capped at the local clock at delivery.
    high_water: Option<Timestamp>,
    /// The delay before the next re-subscription after a `CLOSED`.
    backoff: Backoff,
    /// When the re-subscription after a `CLOSED` is due; `None` while the subscription is open.
    retry_at: Option<Instant>,
}

/// The subscriptions of one connection, by id.
#[derive(Debug, Default)]
pub(crate) struct Subscriptions {
    subs: HashMap<String, Sub>,
}

/// The filters of a `REQ` sent again: each `since` moved up to `high_water - CATCH_UP_SLACK` when that is later.
/// Without a high-water mark (nothing was delivered yet) the filters are sent as they are.
pub fn catch_up(filters: &[Filter], high_water: Option<Timestamp>) -> Vec<Filter> {
    let Some(high_water) = high_water else {
        return filters.to_vec();
    };
    let from = Timestamp::from(
        high_water
            .as_secs()
            .saturating_sub(CATCH_UP_SLACK.as_secs()),
    );
    filters
        .iter()
        .map(|f| {
            let mut f = f.clone();
            f.since = Some(f.since.map_or(from, |since| since.max(from)));
            f
        })
        .collect()
}

fn req(id: &str, filters: Vec<Filter>) -> String {
    ClientMessage::req(SubscriptionId::new(id), filters).as_json()
}

impl Subscriptions {
    /// Opens (or replaces) subscription `id`: the `REQ` to send. A replaced subscription starts afresh.
    pub(crate) fn open(&mut self, id: &str, filters: Vec<Filter>) -> String {
        let message = req(id, filters.clone());
        self.subs.insert(
            id.to_string(),
            Sub {
                filters,
                high_water: None,
                backoff: Backoff::new(RESUBSCRIBE_INITIAL_DELAY, RESUBSCRIBE_MAX_DELAY),
                retry_at: None,
            },
        );
        message
    }

    /// Closes subscription `id`: the `CLOSE` to send.
    pub(crate) fn close(&mut self, id: &str) -> String {
        self.subs.remove(id);
        ClientMessage::close(SubscriptionId::new(id)).as_json()
    }

    /// An event created at `created_at` was delivered on `id`; `now` is the local wall clock.
    pub(crate) fn on_event(&mut self, id: &str, created_at: Timestamp, now: Timestamp) {
        if let Some(sub) = self.subs.get_mut(id) {
            let seen = created_at.min(now);
            sub.high_water = Some(sub.high_water.map_or(seen, |h| h.max(seen)));
            sub.backoff.reset();
        }
    }

    /// The relay closed `id` at `now`: schedules the re-subscription and returns its delay, or `None` for a
    /// subscription that is not ours (any more).
    pub(crate) fn on_closed(&mut self, id: &str, now: Instant) -> Option<Duration> {
        let sub = self.subs.get_mut(id)?;
        let delay = sub.backoff.take();
        sub.retry_at = Some(now + delay);
        Some(delay)
    }

    /// When the next re-subscription is due, if one is waiting.
    pub(crate) fn next_retry(&self) -> Option<Instant> {
        self.subs.values().filter_map(|s| s.retry_at).min()
    }

    /// The catch-up `REQ`s of the subscriptions whose re-subscription is due at `now`.
    pub(crate) fn due(&mut self, now: Instant) -> Vec<String> {
        self.subs
            .iter_mut()
            .filter(|(_, s)| s.retry_at.is_some_and(|at| at <= now))
            .map(|(id, s)| {
                s.retry_at = None;
                req(id, catch_up(&s.filters, s.high_water))
            })
            .collect()
    }

    /// The catch-up `REQ`s of every subscription, for a connection that just came (back) up. Waiting
    /// re-subscriptions are sent now; their backoff is kept, so a relay that closes them again waits longer.
    pub(crate) fn restore(&mut self) -> Vec<String> {
        self.subs
            .iter_mut()
            .map(|(id, s)| {
                s.retry_at = None;
                req(id, catch_up(&s.filters, s.high_water))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::Kind;

    fn prompts(since: u64) -> Vec<Filter> {
        vec![Filter::new()
            .kind(Kind::Custom(25802))
            .since(Timestamp::from(since))]
    }

    /// The `since` of each filter of a `REQ` message.
    fn sinces(req: &str) -> (String, Vec<Option<u64>>) {
        match ClientMessage::from_json(req).unwrap() {
            ClientMessage::Req {
                subscription_id,
                filters,
            } => (
                subscription_id.to_string(),
                filters
                    .iter()
                    .map(|f| f.since.map(|s| s.as_secs()))
                    .collect(),
            ),
            other => panic!("not a REQ: {other:?}"),
        }
    }

    #[test]
    fn catch_up_moves_since_to_the_high_water_mark_less_the_slack() {
        let slack = CATCH_UP_SLACK.as_secs();
        let hw = Some(Timestamp::from(10_000));
        let f = catch_up(&prompts(1_000), hw);
        assert_eq!(f[0].since, Some(Timestamp::from(10_000 - slack)));
        // An original since later than the mark wins.
        let f = catch_up(&prompts(9_999), hw);
        assert_eq!(f[0].since, Some(Timestamp::from(9_999)));
        // A filter without since gets one; the rest of the filter is kept.
        let f = catch_up(&[Filter::new().kind(Kind::Custom(1)).limit(7)], hw);
        assert_eq!(f[0].since, Some(Timestamp::from(10_000 - slack)));
        assert_eq!(f[0].limit, Some(7));
        // Nothing delivered yet: the filters as they were.
        assert_eq!(catch_up(&prompts(1_000), None), prompts(1_000));
        // A mark within the slack of the epoch does not underflow.
        let f = catch_up(&[Filter::new()], Some(Timestamp::from(2)));
        assert_eq!(f[0].since, Some(Timestamp::from(0)));
    }

    #[test]
    fn the_high_water_mark_is_the_newest_delivered_and_never_past_the_clock() {
        let mut t = Subscriptions::default();
        t.open("p", prompts(100));
        let now = Timestamp::from(5_000);
        t.on_event("p", Timestamp::from(4_000), now);
        t.on_event("p", Timestamp::from(3_000), now);
        let (_, s) = sinces(&t.restore()[0]);
        assert_eq!(s, vec![Some(4_000 - CATCH_UP_SLACK.as_secs())]);
        // An event dated far in the future counts as delivered now, not then.
        t.on_event("p", Timestamp::from(9_999_999), now);
        let (_, s) = sinces(&t.restore()[0]);
        assert_eq!(s, vec![Some(5_000 - CATCH_UP_SLACK.as_secs())]);
        // Events on other subscriptions do not count.
        t.on_event("other", Timestamp::from(4_999), now);
        assert_eq!(t.restore().len(), 1);
    }

    #[test]
    fn a_closed_subscription_is_sent_again_with_a_doubling_backoff() {
        let mut t = Subscriptions::default();
        let first = t.open("p", prompts(100));
        assert_eq!(sinces(&first), ("p".to_string(), vec![Some(100)]));
        t.on_event("p", Timestamp::from(2_000), Timestamp::from(2_000));
        let start = Instant::now();
        let mut now = start;
        let mut delays = Vec::new();
        for _ in 0..9 {
            let delay = t.on_closed("p", now).expect("ours");
            delays.push(delay.as_secs());
            assert_eq!(t.next_retry(), Some(now + delay));
            assert!(t.due(now + delay - Duration::from_millis(1)).is_empty());
            now += delay;
            let again = t.due(now);
            assert_eq!(again.len(), 1);
            assert_eq!(
                sinces(&again[0]),
                (
                    "p".to_string(),
                    vec![Some(2_000 - CATCH_UP_SLACK.as_secs())]
                )
            );
            assert_eq!(t.next_retry(), None, "sent once");
            assert!(t.due(now).is_empty());
        }
        assert_eq!(delays, vec![1, 2, 4, 8, 16, 32, 60, 60, 60]);
        // Events flowing again start the backoff over.
        t.on_event("p", Timestamp::from(2_001), Timestamp::from(2_001));
        assert_eq!(t.on_closed("p", now), Some(RESUBSCRIBE_INITIAL_DELAY));
    }

    #[test]
    fn only_our_open_subscriptions_are_sent_again() {
        let mut t = Subscriptions::default();
        t.open("a", prompts(1));
        t.open("b", prompts(2));
        let now = Instant::now();
        assert_eq!(t.on_closed("unknown", now), None);
        let close = t.close("b");
        assert!(matches!(
            ClientMessage::from_json(&close).unwrap(),
            ClientMessage::Close(id) if id.as_str() == "b"
        ));
        assert_eq!(t.on_closed("b", now), None, "closed by us");
        assert_eq!(t.next_retry(), None);
        let restored: Vec<_> = t.restore().iter().map(|r| sinces(r).0).collect();
        assert_eq!(restored, vec!["a".to_string()]);
    }

    #[test]
    fn a_reconnect_sends_waiting_subscriptions_at_once_and_keeps_their_backoff() {
        let mut t = Subscriptions::default();
        t.open("a", prompts(1));
        let now = Instant::now();
        assert_eq!(t.on_closed("a", now), Some(Duration::from_secs(1)));
        assert_eq!(t.restore().len(), 1);
        assert_eq!(t.next_retry(), None, "the restore sent it");
        assert_eq!(t.on_closed("a", now), Some(Duration::from_secs(2)));
        // Replacing a subscription starts it afresh.
        t.open("a", prompts(1));
        assert_eq!(t.next_retry(), None);
        assert_eq!(t.on_closed("a", now), Some(RESUBSCRIBE_INITIAL_DELAY));
    }
}
