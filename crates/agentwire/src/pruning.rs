//! The journal's retention: ended turns of NIP-XX, task cards and roost are forgotten once they ended more
//! than `[journal] retention_days` and the skew a prompt may be dated ahead ago, in bounded passes on a
//! timer; fisk-ai's stay (its conversations are kept until an operator removes them, as the channel's spec
//! says).
//!
//! A turn is remembered so that its request, delivered again, is answered from the journal instead of run
//! again. A NIP-XX prompt is served while its `created_at` is within the retention of now, and may be dated
//! up to [`future_skew`] ahead (`MAX_FUTURE_SKEW`, or the retention when shorter); so it stays servable up
//! to the retention plus the skew after its turn began, and the turn is kept that long ([`ended_before`]).

use agentwire_nostr::nipxx::admission::future_skew;
use agentwire_store::{Journal, Prune};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The protocols whose ended turns are never pruned.
const KEPT_PROTOCOLS: [&str; 1] = [agentwire_fisk::worker::PROTOCOL];
/// The most turns one pass looks at: on SQLite a pass is one transaction on the journal's writer, which
/// holds the turns behind it (about 10 ms of deletes here); on JetStream a pass reads one turn a request.
const PRUNE_BATCH: usize = 1000;
/// How often the journal is pruned at most: a day's retention is kept to within minutes.
const PRUNE_EVERY: Duration = Duration::from_secs(600);
/// How often at least: a pass more often than this gains nothing.
const PRUNE_AT_MOST_EVERY: Duration = Duration::from_secs(1);

/// How often to prune for `retention`: a quarter of it, within [`PRUNE_AT_MOST_EVERY`]..[`PRUNE_EVERY`].
fn interval(retention: Duration) -> Duration {
    (retention / 4).clamp(PRUNE_AT_MOST_EVERY, PRUNE_EVERY)
}

/// The turns to forget at `now` (Unix seconds): those that ended more than `retention` and the skew a
/// prompt may be dated ahead with it ([`future_skew`]) ago. A prompt still servable at `now` was made at most
/// the retention ago and, when its turn began, at most that skew ahead: its turn ended after `now` minus
/// both.
fn ended_before(now: u64, retention: Duration) -> u64 {
    let retention = retention.as_secs();
    now.saturating_sub(retention)
        .saturating_sub(future_skew(Some(retention)))
}

/// Starts pruning `journal` of turns that ended more than `retention` ago; the task ends when aborted.
pub(crate) fn start(journal: Arc<dyn Journal>, retention: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval(retention));
        loop {
            tick.tick().await;
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs();
            let prune = Prune {
                ended_before: ended_before(now, retention),
                keep: KEPT_PROTOCOLS.iter().map(|p| p.to_string()).collect(),
                limit: PRUNE_BATCH,
            };
            let mut forgotten = 0;
            loop {
                match journal.prune(prune.clone()).await {
                    Ok(pass) => {
                        forgotten += pass.forgotten;
                        if !pass.more {
                            break;
                        }
                        // Let the turns queued behind a full pass write before the next one.
                        tokio::task::yield_now().await;
                    }
                    Err(error) => {
                        tracing::warn!(%error, "could not prune the journal's old turns; trying again later");
                        break;
                    }
                }
            }
            if forgotten > 0 {
                tracing::debug!(
                    turns = forgotten,
                    "pruned ended turns past the journal's retention"
                );
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use agentwire_nostr::nipxx::admission::{dated_within, MAX_FUTURE_SKEW};

    /// Run once: a prompt the NIP-XX runtime would still serve is never one whose turn the journal has
    /// forgotten. For any prompt served at `begun` (its turn ending at `ended`, later) and offered again at
    /// `again`, with the retention the daemon gives both (`max_prompt_age` = the journal's retention).
    #[test]
    fn a_prompt_that_can_still_be_served_has_its_turn_remembered() {
        let skew = MAX_FUTURE_SKEW.as_secs();
        let begun = 1_800_000_000u64;
        for retention in [4u64, 60, 3_600, 86_400, 30 * 86_400] {
            let r = Duration::from_secs(retention);
            let step = (retention / 300).max(1) as usize;
            // Made from before the retention to past the skew around when it was first served, the edges
            // themselves included.
            let made = (begun - retention - 60..=begun + skew + 60)
                .step_by(step)
                .chain([begun - retention, begun, begun + skew - 1, begun + skew]);
            for created_at in made {
                if !dated_within(created_at, begun, 0, Some(retention)) {
                    continue;
                }
                for ran_for in [0, 1, 59, 600, 3_600] {
                    let ended = begun + ran_for;
                    // Offered again any time after, and at the last second it is servable.
                    let again = (0..=retention + 2 * skew + 120)
                        .step_by(step)
                        .map(|later| ended + later)
                        .chain([created_at + retention]);
                    for again in again.filter(|a| *a >= ended) {
                        if dated_within(created_at, again, 0, Some(retention)) {
                            assert!(
                                ended >= ended_before(again, r),
                                "retention {retention}: made {created_at}, ended {ended}, offered again {again}: forgotten while servable"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_pass_interval_follows_the_retention_within_bounds() {
        assert_eq!(interval(Duration::from_secs(30 * 86_400)), PRUNE_EVERY);
        assert_eq!(interval(Duration::from_secs(400)), Duration::from_secs(100));
        assert_eq!(interval(Duration::from_secs(2)), PRUNE_AT_MOST_EVERY);
    }
}
