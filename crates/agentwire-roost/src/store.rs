//! The supervisor's durable record: jobs (with their reply ids and seq counters), their pending replies
//! (a row each), the dispatch request ids and the feed, in SQLite in the data dir.
//!
//! What is acknowledged to a controller (a saved reply, a dispatch, an ack that clears replies) is
//! written with `synchronous=FULL` before the answer. A report only changes a row, which the agent sends
//! again after any reconnect, so rows are written lazily (marked dirty, flushed within a second).

use crate::supervisor::{FeedEvent, Job, Pending, Supervisor};
use rusqlite::{params, Connection};
use std::path::Path;

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
#[error("roost store: {0}")]
pub struct StoreError(String);

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError(e.to_string())
    }
}

impl From<serde_json::Error> for StoreError {
    fn from(e: serde_json::Error) -> Self {
        StoreError(e.to_string())
    }
}

/// The store.
pub struct Store {
    conn: Connection,
}

impl Store {
    /// Opens (or creates) the store at `path`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, job TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS dispatch_ids (request_id TEXT PRIMARY KEY, job_id TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY, event TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS pending (job_id TEXT NOT NULL, seq INTEGER NOT NULL,
                 reply TEXT NOT NULL, PRIMARY KEY (job_id, seq)) WITHOUT ROWID;",
        )?;
        Ok(Store { conn })
    }

    /// The supervisor as it was last written.
    pub fn load(&self) -> Result<Supervisor, StoreError> {
        let mut sup = Supervisor::default();
        let mut stmt = self.conn.prepare("SELECT job FROM jobs")?;
        for row in stmt.query_map([], |r| r.get::<_, String>(0))? {
            let job: Job = serde_json::from_str(&row?)?;
            sup.jobs.insert(job.id.clone(), job);
        }
        let mut stmt = self
            .conn
            .prepare("SELECT job_id, reply FROM pending ORDER BY job_id, seq")?;
        for row in stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))? {
            let (job_id, reply) = row?;
            let reply: Pending = serde_json::from_str(&reply)?;
            if let Some(job) = sup.jobs.get_mut(&job_id) {
                // A store from before the pending rows still has them in the job's record.
                if !job.pending.iter().any(|p| p.seq == reply.seq) {
                    job.pending.push_back(reply);
                }
            }
        }
        for job in sup.jobs.values_mut() {
            job.pending.make_contiguous().sort_by_key(|p| p.seq);
        }
        let mut stmt = self
            .conn
            .prepare("SELECT request_id, job_id FROM dispatch_ids")?;
        for row in stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))? {
            let (r, j) = row?;
            sup.dispatch_ids.insert(r, j);
        }
        let mut stmt = self
            .conn
            .prepare("SELECT event FROM events ORDER BY seq DESC LIMIT ?1")?;
        let mut events: Vec<FeedEvent> = Vec::new();
        for row in stmt.query_map([crate::supervisor::MAX_EVENTS as i64], |r| {
            r.get::<_, String>(0)
        })? {
            events.push(serde_json::from_str(&row?)?);
        }
        events.reverse();
        sup.next_event = events.last().map_or(0, |e| e.seq);
        sup.events = events.into();
        Ok(sup)
    }

    /// Writes jobs (and forgets `removed` ones), dispatch ids and new feed events in one transaction.
    pub fn write(
        &mut self,
        jobs: &[&Job],
        removed: &[String],
        dispatch: &[(String, String)],
        events: &[&FeedEvent],
    ) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        for job in jobs {
            tx.prepare_cached(
                "INSERT INTO jobs (id, job) VALUES (?1, ?2) ON CONFLICT(id) DO UPDATE SET job = ?2",
            )?
            .execute(params![job.id, serde_json::to_string(job)?])?;
            // Replies: the acked ones go, the new ones (numbered past every stored one) are added; those
            // stored already are not written again.
            let first_waiting = job.pending.front().map_or(i64::MAX, |p| p.seq as i64);
            tx.prepare_cached("DELETE FROM pending WHERE job_id = ?1 AND seq < ?2")?
                .execute(params![job.id, first_waiting])?;
            let stored: Option<i64> = tx
                .prepare_cached("SELECT MAX(seq) FROM pending WHERE job_id = ?1")?
                .query_row([&job.id], |r| r.get(0))?;
            for p in job.pending.iter().filter(|p| Some(p.seq as i64) > stored) {
                tx.prepare_cached(
                    "INSERT OR IGNORE INTO pending (job_id, seq, reply) VALUES (?1, ?2, ?3)",
                )?
                .execute(params![
                    job.id,
                    p.seq as i64,
                    serde_json::to_string(p)?
                ])?;
            }
        }
        for id in removed {
            tx.prepare_cached("DELETE FROM jobs WHERE id = ?1")?
                .execute([id])?;
            tx.prepare_cached("DELETE FROM pending WHERE job_id = ?1")?
                .execute([id])?;
            tx.prepare_cached("DELETE FROM dispatch_ids WHERE job_id = ?1")?
                .execute([id])?;
        }
        for (r, j) in dispatch {
            tx.prepare_cached(
                "INSERT OR IGNORE INTO dispatch_ids (request_id, job_id) VALUES (?1, ?2)",
            )?
            .execute(params![r, j])?;
        }
        for e in events {
            tx.prepare_cached("INSERT OR IGNORE INTO events (seq, event) VALUES (?1, ?2)")?
                .execute(params![e.seq as i64, serde_json::to_string(e)?])?;
        }
        if !events.is_empty() {
            tx.prepare_cached(
                "DELETE FROM events WHERE seq <= (SELECT MAX(seq) FROM events) - ?1",
            )?
            .execute([crate::supervisor::MAX_EVENTS as i64])?;
        }
        tx.commit()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervisor::Replied;

    #[test]
    fn pending_replies_are_rows_written_once_and_deleted_by_acks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("roost.sqlite");
        let mut store = Store::open(&path).unwrap();
        let mut sup = Supervisor::default();
        sup.add("j1".into(), "t".into(), "p", None, None, None, 1)
            .unwrap();
        for n in 1..=3 {
            sup.reply("j1", &format!("r{n}"), None, None, false, 2)
                .unwrap();
        }
        store.write(&[&sup.jobs["j1"]], &[], &[], &[]).unwrap();
        let seqs = |s: &Supervisor| {
            s.jobs["j1"]
                .pending
                .iter()
                .map(|p| p.seq)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            seqs(&Store::open(&path).unwrap().load().unwrap()),
            [1, 2, 3]
        );
        // The job's own record does not carry the replies' text.
        let record: String = store
            .conn
            .query_row("SELECT job FROM jobs WHERE id = 'j1'", [], |r| r.get(0))
            .unwrap();
        assert!(!record.contains("r2"), "{record}");
        sup.ack("j1", "t", 2).unwrap();
        sup.reply("j1", "r4", None, None, false, 3).unwrap();
        store.write(&[&sup.jobs["j1"]], &[], &[], &[]).unwrap();
        let loaded = Store::open(&path).unwrap().load().unwrap();
        assert_eq!(seqs(&loaded), [3, 4]);
        assert_eq!(loaded.jobs["j1"].pending[1].text, "r4");
        sup.ack("j1", "t", 4).unwrap();
        store.write(&[&sup.jobs["j1"]], &[], &[], &[]).unwrap();
        assert!(seqs(&Store::open(&path).unwrap().load().unwrap()).is_empty());
        // A store written before the pending rows kept them in the job's record: they still load, and the
        // next write moves them into rows.
        let mut old = serde_json::to_value(&sup.jobs["j1"]).unwrap();
        old["pending"] = serde_json::json!([{"seq": 5, "text": "r5", "mode": null}]);
        store
            .conn
            .execute(
                "UPDATE jobs SET job = ?1 WHERE id = 'j1'",
                [old.to_string()],
            )
            .unwrap();
        let mut loaded = Store::open(&path).unwrap().load().unwrap();
        assert_eq!(seqs(&loaded), [5]);
        store.write(&[&loaded.jobs["j1"]], &[], &[], &[]).unwrap();
        assert_eq!(seqs(&Store::open(&path).unwrap().load().unwrap()), [5]);
        loaded.jobs.remove("j1");
        store.write(&[], &["j1".into()], &[], &[]).unwrap();
        let n: i64 = store
            .conn
            .query_row("SELECT COUNT(*) FROM pending", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 0, "a removed job's replies go with it");
    }

    #[test]
    fn jobs_replies_ids_and_the_feed_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("roost.sqlite");
        {
            let mut store = Store::open(&path).unwrap();
            let mut sup = Supervisor::default();
            sup.add(
                "j1".into(),
                "t".into(),
                "p",
                None,
                Some("one"),
                Some("d-1"),
                1,
            )
            .unwrap();
            assert_eq!(
                sup.reply("j1", "hello", None, Some("r-1"), false, 2),
                Ok(Replied::Saved(1))
            );
            let events: Vec<_> = sup.events.iter().collect();
            store
                .write(
                    &[&sup.jobs["j1"]],
                    &[],
                    &[("d-1".into(), "j1".into())],
                    &events,
                )
                .unwrap();
        }
        let store = Store::open(&path).unwrap();
        let mut sup = store.load().unwrap();
        assert_eq!(sup.events.len(), 2, "start and the reply");
        assert_eq!(sup.next_event, 2);
        assert_eq!(sup.jobs["j1"].pending.len(), 1);
        assert_eq!(sup.dispatched("d-1").unwrap().name, "one");
        assert_eq!(
            sup.reply("j1", "hello", None, Some("r-1"), false, 3),
            Ok(Replied::Duplicate)
        );
        assert_eq!(
            sup.reply("j1", "more", None, None, false, 3),
            Ok(Replied::Saved(2)),
            "seq continues"
        );
        assert_eq!(
            sup.events.back().unwrap().seq,
            3,
            "the feed's cursor continues"
        );
    }
}
