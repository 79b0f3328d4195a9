//! The journal's retention: ended turns of NIP-XX, task cards and roost are forgotten once older than
//! `[journal] retention_days`, in bounded passes on a timer; fisk-ai's stay (its conversations are kept
//! until an operator removes them, as the channel's spec says).

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
                ended_before: now.saturating_sub(retention.as_secs()),
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

    #[test]
    fn the_pass_interval_follows_the_retention_within_bounds() {
        assert_eq!(interval(Duration::from_secs(30 * 86_400)), PRUNE_EVERY);
        assert_eq!(interval(Duration::from_secs(400)), Duration::from_secs(100));
        assert_eq!(interval(Duration::from_secs(2)), PRUNE_AT_MOST_EVERY);
    }
}
