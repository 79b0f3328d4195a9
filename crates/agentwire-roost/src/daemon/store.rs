//! The supervisor's durable record: jobs (with their reply ids, seq counters and the conversation each
//! serves), their pending replies (a row each), the dispatch request ids, the feed, and the pending stop
//! escalations, in SQLite in the data dir.
//!
//! What is acknowledged to a controller (a saved reply, a dispatch, an ack that clears replies, a stop
//! and its escalation) is written with `synchronous=FULL` before the answer. A report only changes a row,
//! which the agent sends again after any reconnect, so rows are written lazily (marked dirty, flushed
//! within a second).
//!
//! A store written by an earlier version opens as it is: tables it lacks are created empty, and fields a
//! job record lacks take their defaults.

use crate::proto::escalation::Escalation;
use crate::proto::feed::FeedEvent;
use crate::proto::supervisor::{Job, Pending, Supervisor};
use rusqlite::{params, Connection, OptionalExtension};
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

/// Stop escalations to journal and to forget, written in the same transaction as the rest.
#[derive(Debug, Default, Clone, Copy)]
pub struct Escalations<'a> {
    /// New ones (a process just sent SIGTERM).
    pub armed: &'a [Escalation],
    /// Done or moot ones (the process is gone, or the pid is another process's now).
    pub done: &'a [Escalation],
}

/// The records written whole, each only when it changed (none: as stored).
#[derive(Debug, Default, Clone, Copy)]
pub struct Records<'a> {
    /// Every watch held now, in place of those stored.
    pub watches: Option<&'a [crate::proto::watch::Watch]>,
    /// The task board.
    pub board: Option<&'a crate::proto::board::Board>,
    /// The concierge's record.
    pub concierge: Option<&'a crate::proto::concierge::Concierge>,
    /// The schedules.
    pub schedules: Option<&'a crate::proto::schedule::Schedules>,
}

/// The `kept` row of the concierge's record.
const CONCIERGE: &str = "concierge";
/// The `kept` row of the schedules.
const SCHEDULES: &str = "schedules";

/// The store.
pub struct Store {
    conn: Connection,
}

/// The connection's page cache, in KiB (SQLite's `cache_size` as a negative number): set rather than left
/// to a build's default, so the supervisor's memory is known.
const CACHE_KIB: i64 = 2 * 1024;

impl Store {
    /// Opens (or creates) the store at `path`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "cache_size", -CACHE_KIB)?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, job TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS dispatch_ids (request_id TEXT PRIMARY KEY, job_id TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY, event TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS pending (job_id TEXT NOT NULL, seq INTEGER NOT NULL,
                 reply TEXT NOT NULL, PRIMARY KEY (job_id, seq)) WITHOUT ROWID;
             -- Keyed by the process, not the job: a removed job's process is still escalated, and a
             -- respawned job's old process has an escalation of its own beside the new one.
             -- The watches sessions hold (M43), written whole when they change: at most 20 a session.
             CREATE TABLE IF NOT EXISTS watches (n INTEGER PRIMARY KEY, watch TEXT NOT NULL);
             -- The task board (M47), written whole when it changes: at most 200 tasks.
             CREATE TABLE IF NOT EXISTS board (n INTEGER PRIMARY KEY CHECK (n = 1), board TEXT NOT NULL);
             -- Records written whole when they change, by name: the concierge's (M44-M46, with at most
             -- 50 orders) and the schedules (at most 100).
             CREATE TABLE IF NOT EXISTS kept (name TEXT PRIMARY KEY, doc TEXT NOT NULL) WITHOUT ROWID;
             CREATE TABLE IF NOT EXISTS escalations (pid INTEGER NOT NULL, identity TEXT NOT NULL,
                 job_id TEXT NOT NULL, deadline_ms INTEGER NOT NULL,
                 PRIMARY KEY (pid, identity)) WITHOUT ROWID;",
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
        for row in stmt.query_map([crate::proto::supervisor::MAX_EVENTS as i64], |r| {
            r.get::<_, String>(0)
        })? {
            events.push(serde_json::from_str(&row?)?);
        }
        events.reverse();
        sup.next_event = events.last().map_or(0, |e| e.seq);
        sup.events = events.into();
        if let Some(board) = self
            .conn
            .query_row("SELECT board FROM board WHERE n = 1", [], |r| {
                r.get::<_, String>(0)
            })
            .optional()?
        {
            sup.board = serde_json::from_str(&board)?;
        }
        let kept = |name: &str| -> Result<Option<String>, StoreError> {
            Ok(self
                .conn
                .query_row("SELECT doc FROM kept WHERE name = ?1", [name], |r| {
                    r.get::<_, String>(0)
                })
                .optional()?)
        };
        if let Some(doc) = kept(CONCIERGE)? {
            sup.concierge = serde_json::from_str(&doc)?;
        }
        if let Some(doc) = kept(SCHEDULES)? {
            sup.schedules = serde_json::from_str(&doc)?;
        }
        let mut stmt = self.conn.prepare("SELECT watch FROM watches ORDER BY n")?;
        for row in stmt.query_map([], |r| r.get::<_, String>(0))? {
            sup.watches.push(serde_json::from_str(&row?)?);
        }
        sup.index_conversations();
        Ok(sup)
    }

    /// The pending stop escalations, as last written.
    pub fn escalations(&self) -> Result<Vec<Escalation>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT job_id, pid, identity, deadline_ms FROM escalations ORDER BY deadline_ms",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(Escalation {
                job: r.get(0)?,
                pid: r.get(1)?,
                identity: r.get(2)?,
                deadline_ms: r.get::<_, i64>(3)?.max(0) as u64,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Writes jobs (and forgets `removed` ones), dispatch ids, new feed events and stop escalations in one
    /// transaction ([`write_all`](Self::write_all) without watches).
    pub fn write(
        &mut self,
        jobs: &[&Job],
        removed: &[String],
        dispatch: &[(String, String)],
        events: &[&FeedEvent],
        escalations: Escalations<'_>,
    ) -> Result<(), StoreError> {
        self.write_all(
            jobs,
            removed,
            dispatch,
            events,
            escalations,
            Records::default(),
        )
    }

    /// Like [`write`](Self::write), and with the [`Records`] that changed.
    pub fn write_all(
        &mut self,
        jobs: &[&Job],
        removed: &[String],
        dispatch: &[(String, String)],
        events: &[&FeedEvent],
        escalations: Escalations<'_>,
        records: Records<'_>,
    ) -> Result<(), StoreError> {
        let Records {
            watches,
            board,
            concierge,
            schedules,
        } = records;
        let tx = self.conn.transaction()?;
        // Forgotten before the new ones are added: a pid reused at once has a record of its own (another
        // identity), which this never deletes.
        for e in escalations.done {
            tx.prepare_cached("DELETE FROM escalations WHERE pid = ?1 AND identity = ?2")?
                .execute(params![e.pid, e.identity])?;
        }
        for e in escalations.armed {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO escalations (pid, identity, job_id, deadline_ms)
                 VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![
                e.pid,
                e.identity,
                e.job,
                e.deadline_ms.min(i64::MAX as u64) as i64
            ])?;
        }
        for job in jobs {
            tx.prepare_cached(
                "INSERT INTO jobs (id, job) VALUES (?1, ?2) ON CONFLICT(id) DO UPDATE SET job = ?2",
            )?
            .execute(params![job.id, serde_json::to_string(job)?])?;
            // Replies: the acked ones go (a peer item is acked by itself, so one may go from between
            // others), the new ones (numbered past every stored one) are added; those stored already are
            // not written again.
            let waiting: Vec<u64> = job.pending.iter().map(|p| p.seq).collect();
            tx.prepare_cached(
                "DELETE FROM pending WHERE job_id = ?1
                 AND seq NOT IN (SELECT value FROM json_each(?2))",
            )?
            .execute(params![job.id, serde_json::to_string(&waiting)?])?;
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
            // An event is written again when what it says was completed after (who caused it).
            tx.prepare_cached("INSERT OR REPLACE INTO events (seq, event) VALUES (?1, ?2)")?
                .execute(params![e.seq as i64, serde_json::to_string(e)?])?;
        }
        if !events.is_empty() {
            tx.prepare_cached(
                "DELETE FROM events WHERE seq <= (SELECT MAX(seq) FROM events) - ?1",
            )?
            .execute([crate::proto::supervisor::MAX_EVENTS as i64])?;
        }
        if let Some(board) = board {
            tx.prepare_cached("INSERT OR REPLACE INTO board (n, board) VALUES (1, ?1)")?
                .execute([serde_json::to_string(board)?])?;
        }
        if let Some(c) = concierge {
            tx.prepare_cached("INSERT OR REPLACE INTO kept (name, doc) VALUES (?1, ?2)")?
                .execute([CONCIERGE, &serde_json::to_string(c)?])?;
        }
        if let Some(s) = schedules {
            tx.prepare_cached("INSERT OR REPLACE INTO kept (name, doc) VALUES (?1, ?2)")?
                .execute([SCHEDULES, &serde_json::to_string(s)?])?;
        }
        if let Some(watches) = watches {
            tx.prepare_cached("DELETE FROM watches")?.execute([])?;
            for w in watches {
                tx.prepare_cached("INSERT INTO watches (watch) VALUES (?1)")?
                    .execute([serde_json::to_string(w)?])?;
            }
        }
        tx.commit()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::supervisor::Replied;

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
        store
            .write(&[&sup.jobs["j1"]], &[], &[], &[], Escalations::default())
            .unwrap();
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
        sup.ack("j1", "t", 2, false).unwrap();
        sup.reply("j1", "r4", None, None, false, 3).unwrap();
        store
            .write(&[&sup.jobs["j1"]], &[], &[], &[], Escalations::default())
            .unwrap();
        let loaded = Store::open(&path).unwrap().load().unwrap();
        assert_eq!(seqs(&loaded), [3, 4]);
        assert_eq!(loaded.jobs["j1"].pending[1].text, "r4");
        sup.ack("j1", "t", 4, false).unwrap();
        store
            .write(&[&sup.jobs["j1"]], &[], &[], &[], Escalations::default())
            .unwrap();
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
        store
            .write(&[&loaded.jobs["j1"]], &[], &[], &[], Escalations::default())
            .unwrap();
        assert_eq!(seqs(&Store::open(&path).unwrap().load().unwrap()), [5]);
        loaded.jobs.remove("j1");
        store
            .write(&[], &["j1".into()], &[], &[], Escalations::default())
            .unwrap();
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
                    Escalations::default(),
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

    #[test]
    fn escalations_are_journaled_forgotten_by_process_and_kept_past_their_jobs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("roost.sqlite");
        let mut store = Store::open(&path).unwrap();
        let a = Escalation::new("j1", 100, "boot:1", 1_000);
        let b = Escalation::new("j2", 200, "boot:2", 2_000);
        store
            .write(
                &[],
                &[],
                &[],
                &[],
                Escalations {
                    armed: &[a.clone(), b.clone()],
                    done: &[],
                },
            )
            .unwrap();
        // Removing a job leaves its process's escalation.
        store
            .write(&[], &["j1".into()], &[], &[], Escalations::default())
            .unwrap();
        assert_eq!(
            Store::open(&path).unwrap().escalations().unwrap(),
            [a.clone(), b.clone()]
        );
        // The pid reused by another process: its record stands beside the old one, and forgetting the
        // old one leaves it.
        let reused = Escalation::new("j3", 100, "boot:9", 3_000);
        store
            .write(
                &[],
                &[],
                &[],
                &[],
                Escalations {
                    armed: std::slice::from_ref(&reused),
                    done: std::slice::from_ref(&a),
                },
            )
            .unwrap();
        assert_eq!(
            Store::open(&path).unwrap().escalations().unwrap(),
            [b.clone(), reused.clone()]
        );
        store
            .write(
                &[],
                &[],
                &[],
                &[],
                Escalations {
                    armed: &[],
                    done: &[b, reused],
                },
            )
            .unwrap();
        assert!(Store::open(&path)
            .unwrap()
            .escalations()
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_jobs_conversation_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("roost.sqlite");
        let mut store = Store::open(&path).unwrap();
        let mut sup = Supervisor::default();
        sup.add("j1".into(), "t".into(), "p", None, None, None, 1)
            .unwrap();
        sup.serve_conversation("j1", "nipxx:abc");
        sup.add("j2".into(), "t".into(), "p", None, None, None, 2)
            .unwrap();
        store
            .write(
                &[&sup.jobs["j1"], &sup.jobs["j2"]],
                &[],
                &[],
                &[],
                Escalations::default(),
            )
            .unwrap();
        let loaded = Store::open(&path).unwrap().load().unwrap();
        assert_eq!(
            loaded
                .conversation_job("p", "nipxx:abc")
                .map(|j| j.id.as_str()),
            Some("j1")
        );
        assert_eq!(loaded.jobs["j2"].conversation, None);
    }

    #[test]
    fn a_store_written_by_the_version_before_opens_and_takes_the_new_records() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("roost.sqlite");
        {
            // The previous version's schema, and a job record as it wrote it (no conversation, no
            // dispatch cursor).
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE jobs (id TEXT PRIMARY KEY, job TEXT NOT NULL);
                 CREATE TABLE dispatch_ids (request_id TEXT PRIMARY KEY, job_id TEXT NOT NULL);
                 CREATE TABLE events (seq INTEGER PRIMARY KEY, event TEXT NOT NULL);
                 CREATE TABLE pending (job_id TEXT NOT NULL, seq INTEGER NOT NULL,
                     reply TEXT NOT NULL, PRIMARY KEY (job_id, seq)) WITHOUT ROWID;",
            )
            .unwrap();
            let old = serde_json::json!({"id": "j1", "token": "t", "name": "n", "profile": "p",
                "task": null, "report": null, "capabilities": [], "next_seq": 2, "reply_ids": [],
                "life": "running", "pid": 4242, "pid_identity": "boot:1", "output": null, "reports": 3});
            conn.execute(
                "INSERT INTO jobs (id, job) VALUES ('j1', ?1)",
                [old.to_string()],
            )
            .unwrap();
        }
        let mut store = Store::open(&path).unwrap();
        let mut sup = store.load().unwrap();
        let job = &sup.jobs["j1"];
        assert_eq!((job.conversation.as_deref(), job.reports), (None, 3));
        assert!(store.escalations().unwrap().is_empty());
        // The new records are written to it and read back.
        sup.serve_conversation("j1", "c:1");
        let e = Escalation::new("j1", 4242, "boot:1", 5);
        store
            .write(
                &[&sup.jobs["j1"]],
                &[],
                &[],
                &[],
                Escalations {
                    armed: std::slice::from_ref(&e),
                    done: &[],
                },
            )
            .unwrap();
        let store = Store::open(&path).unwrap();
        assert_eq!(store.escalations().unwrap(), [e]);
        assert!(store.load().unwrap().conversation_job("p", "c:1").is_some());
    }
}
