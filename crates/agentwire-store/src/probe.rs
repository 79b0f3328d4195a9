//! The cost of one journal commit, measured alone: a SQLite journal of its own on the same disk as the
//! daemon's, one new conversation's first turn (the size of a benchmark's prompt) journaled a call. What a
//! turn waits for before it is acknowledged and run; the benchmarks take it in the same run as their
//! figures, as the floor those stand on.

use crate::{Journal, NewTurn, SqliteJournal, StoreError, LOCAL_OWNER};
use agentwire_core::{ConversationId, RequestId, TurnInput};
use std::path::Path;
use std::time::{Duration, Instant};

/// Journal commits, one a call to [`CommitProbe::once`].
pub struct CommitProbe {
    journal: SqliteJournal,
    protocol: &'static str,
    n: u64,
}

impl CommitProbe {
    /// A probe journaling turns of `protocol` in `commit-probe.sqlite` in `dir`.
    pub fn open(dir: &Path, protocol: &'static str) -> Result<CommitProbe, StoreError> {
        Ok(CommitProbe {
            journal: SqliteJournal::open(&dir.join("commit-probe.sqlite"))?,
            protocol,
            n: 0,
        })
    }

    /// Journals one more turn durably; the time its commit took.
    pub async fn once(&mut self) -> Result<Duration, StoreError> {
        let i = self.n;
        self.n += 1;
        let p = self.protocol;
        // Fit ids for any protocol name the crates use; a name that is not one is refused as a bad record.
        let bad =
            |e: agentwire_core::IdError| StoreError::Corrupt(format!("a probe turn's id: {e}"));
        let request_id = RequestId::new(format!("{p}:probe{i}")).map_err(bad)?;
        let conversation_id = ConversationId::new(format!("{p}:{i:064}")).map_err(bad)?;
        let turn = NewTurn {
            request_id: request_id.clone(),
            conversation_id: conversation_id.clone(),
            protocol: p.into(),
            owner: LOCAL_OWNER.into(),
            agent: "demo".into(),
            route: serde_json::json!({ "request": format!("probe{i}") }),
            input: TurnInput::new(request_id, conversation_id, "quick hi", "demo"),
            accepted_at: 0,
            conversation_meta: Some(
                serde_json::json!({"fingerprint": {"model": "demo"}, "tools": ["calculator", "shell"]}),
            ),
        };
        let t = Instant::now();
        self.journal.accept(turn).await?;
        Ok(t.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn each_call_journals_one_more_turn() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = CommitProbe::open(dir.path(), "fisk").unwrap();
        for _ in 0..3 {
            p.once().await.unwrap();
        }
        let id = RequestId::new("fisk:probe2").unwrap();
        assert!(p.journal.lookup(id).await.unwrap().is_some());
    }
}
