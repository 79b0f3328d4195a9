//! Who may prompt the agent and how often: allow and block lists, a per-sender token bucket, and one
//! bucket for the refusals the agent answers, across all senders.
//!
//! Pure: the caller passes `now` (seconds, as f64) in.

use super::{ErrorCode, Violation};
use agentwire_core::TokenBucket;
use nostr::prelude::PublicKey;
use std::collections::{HashMap, HashSet};

/// Most senders whose buckets are tracked at once. Past this the fullest (idle) buckets are forgotten,
/// which only ever errs towards letting a sender through.
pub const MAX_TRACKED_SENDERS: usize = 100_000;

/// Refusals answered per second, sustained, across all senders the allow list does not name (all senders,
/// without an allow list; a listed sender is bounded by its own rate). Each refusal of a prompt that never ran is
/// journaled (so that the relay's copy, delivered again, gets the same answer and never a second terminal)
/// and answered with a signed, stored error event: senders the allow list does not know, one per throwaway
/// key, would otherwise fill the journal and the relay without bound. Past the budget a refused prompt is
/// dropped unanswered, as if never seen: the relay's copy is judged again when it comes back.
pub const REFUSALS_PER_SECOND: f64 = 20.0;
/// Refusals answered in a burst before [`REFUSALS_PER_SECOND`] applies: a client misconfigured on a few
/// keys still hears why at once.
pub const REFUSAL_BURST: f64 = 200.0;

/// Per-sender rate: `per_second` prompts sustained, bursts up to `burst`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// Tokens added per second.
    pub per_second: f64,
    /// Bucket size.
    pub burst: f64,
}

/// The sender policy.
#[derive(Debug, Clone)]
pub struct SenderPolicy {
    /// When set, only these senders may prompt (others get UNAUTHORIZED).
    pub allow: Option<HashSet<PublicKey>>,
    /// These senders get BLOCKED_SENDER.
    pub block: HashSet<PublicKey>,
    /// The per-sender rate.
    pub rate: RateLimit,
    buckets: HashMap<PublicKey, TokenBucket>,
    /// The refusal budget, across all senders.
    refusals: TokenBucket,
}

impl SenderPolicy {
    /// A policy.
    pub fn new(
        allow: Option<HashSet<PublicKey>>,
        block: HashSet<PublicKey>,
        rate: RateLimit,
    ) -> Self {
        SenderPolicy {
            allow,
            block,
            rate,
            buckets: HashMap::new(),
            refusals: TokenBucket::new(REFUSALS_PER_SECOND, REFUSAL_BURST),
        }
    }

    /// Whether a refusal may be answered (journaled and sent) at `now`: takes one from the budget shared
    /// by all senders ([`REFUSALS_PER_SECOND`], [`REFUSAL_BURST`]).
    pub fn answer_refusal(&mut self, now: f64) -> bool {
        self.refusals.try_take(now)
    }

    /// Admits one prompt from `sender` at `now`, or says why not (with `retry_after` for RATE_LIMIT).
    pub fn admit(&mut self, sender: &PublicKey, now: f64) -> Result<(), (Violation, Option<u64>)> {
        if self.block.contains(sender) {
            return Err((
                Violation::new(ErrorCode::BlockedSender, "sender is blocked by policy"),
                None,
            ));
        }
        if let Some(allow) = &self.allow {
            if !allow.contains(sender) {
                return Err((
                    Violation::new(
                        ErrorCode::Unauthorized,
                        "sender is not on this agent's allow list",
                    ),
                    None,
                ));
            }
        }
        if self.buckets.len() >= MAX_TRACKED_SENDERS && !self.buckets.contains_key(sender) {
            self.buckets.retain(|_, bucket| !bucket.is_full(now));
        }
        let rate = self.rate;
        let bucket = self
            .buckets
            .entry(*sender)
            .or_insert_with(|| TokenBucket::new(rate.per_second, rate.burst));
        if bucket.try_take(now) {
            Ok(())
        } else {
            // A sender whose rate is zero is told to come back in a minute.
            let wait = bucket.wait_for_one(now).map_or(60.0, f64::ceil);
            Err((
                Violation::new(
                    ErrorCode::RateLimit,
                    format!("sender exceeds {} prompts per second", self.rate.per_second),
                ),
                Some((wait as u64).max(1)),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::Keys;

    #[test]
    fn block_allow_and_rate() {
        let a = Keys::generate().public_key();
        let b = Keys::generate().public_key();
        let mut p = SenderPolicy::new(
            None,
            [b].into(),
            RateLimit {
                per_second: 1.0,
                burst: 2.0,
            },
        );
        assert_eq!(
            p.admit(&b, 0.0).unwrap_err().0.code,
            ErrorCode::BlockedSender
        );
        assert!(p.admit(&a, 0.0).is_ok());
        assert!(p.admit(&a, 0.0).is_ok());
        let (v, retry) = p.admit(&a, 0.0).unwrap_err();
        assert_eq!(v.code, ErrorCode::RateLimit);
        assert_eq!(retry, Some(1));
        assert!(p.admit(&a, 1.1).is_ok());
        let mut only = SenderPolicy::new(
            Some([a].into()),
            HashSet::new(),
            RateLimit {
                per_second: 1.0,
                burst: 1.0,
            },
        );
        assert_eq!(
            only.admit(&b, 0.0).unwrap_err().0.code,
            ErrorCode::Unauthorized
        );
        assert!(only.admit(&a, 0.0).is_ok());
    }

    #[test]
    fn refusals_are_answered_within_one_budget_for_all_senders() {
        let mut p = SenderPolicy::new(
            Some(HashSet::new()),
            HashSet::new(),
            RateLimit {
                per_second: 1.0,
                burst: 1.0,
            },
        );
        let answered = (0..1_000).filter(|_| p.answer_refusal(10.0)).count();
        assert_eq!(answered, REFUSAL_BURST as usize);
        assert!(!p.answer_refusal(10.0));
        let later = (0..1_000).filter(|_| p.answer_refusal(11.0)).count();
        assert_eq!(later, REFUSALS_PER_SECOND as usize, "refilled at its rate");
    }
}
