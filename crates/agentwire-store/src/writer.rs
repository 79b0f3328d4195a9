//! The journal's writer thread: batches pending writes into one durable transaction.

use crate::model::{Accepted, Finish, NewTurn, StoreError};
use crate::sqlite::{row_to_turn, COLUMNS};
use rusqlite::{params, Connection, OptionalExtension};
use std::sync::{mpsc, Arc, Mutex};
use tokio::sync::oneshot;

/// Most writes committed in one transaction. Bounds the latency a single commit adds to the writes queued
/// behind it while still amortising the fsync over many turns.
pub(crate) const MAX_WRITES_PER_COMMIT: usize = 1024;

/// Whether an accept's commit is synced to the disk before it is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durable {
    /// Synced, as every other write.
    Now,
    /// Written and answered unsynced ([`Journal::accept_soon`](crate::Journal::accept_soon)): the next
    /// synced commit, or a [`Write::Sync`], makes it durable.
    Soon,
}

pub(crate) enum Write {
    /// Boxed: a turn's record is far larger than the other writes.
    Accept(
        Box<NewTurn>,
        Durable,
        oneshot::Sender<Result<Accepted, StoreError>>,
    ),
    Finish(Finish, oneshot::Sender<Result<(), StoreError>>),
    PutMeta {
        conversation: String,
        protocol: String,
        meta: String,
        updated_at: u64,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    /// A write that changes no turn: is the journal writable?
    Probe(oneshot::Sender<Result<(), StoreError>>),
    /// Every write answered so far durable: answered at once when none is unsynced, else a probe's write
    /// in a synced commit (SQLite syncs the write-ahead log, and every frame before it, only when a commit
    /// adds a frame).
    Sync(oneshot::Sender<Result<(), StoreError>>),
    /// Forget ended turns (and their transcripts) that ended before a time, of every protocol but those
    /// kept, and the conversations of those protocols left with no turn.
    Prune {
        prune: crate::model::Prune,
        reply: oneshot::Sender<Result<usize, StoreError>>,
    },
    /// Remove a conversation: its turns, their transcripts and its row (an operator's `session rm`).
    RemoveConversation {
        conversation: String,
        reply: oneshot::Sender<Result<usize, StoreError>>,
    },
    /// The last: checkpoint the write-ahead log into the database and close the connection.
    Close(oneshot::Sender<()>),
}

/// Held by the writer for each commit; `true` once the journal is halted, after which nothing commits.
pub(crate) type Gate = Arc<Mutex<bool>>;

pub(crate) fn run(mut conn: Connection, rx: mpsc::Receiver<Write>, gate: Gate) {
    // Whether a commit since the last synced one was left unsynced (an accept_soon's).
    let mut unsynced = false;
    // Whether the connection may be left in `synchronous=NORMAL` (see commit_batch).
    let mut relaxed = false;
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        let mut close = None;
        while batch.len() < MAX_WRITES_PER_COMMIT {
            match rx.try_recv() {
                Ok(w) => batch.push(w),
                Err(_) => break,
            }
        }
        // What came before a close is committed; what comes after it fails (the gate is shut).
        if let Some(at) = batch.iter().position(|w| matches!(w, Write::Close(_))) {
            for w in batch.split_off(at + 1) {
                fail(w, StoreError::WriterGone);
            }
            if let Some(Write::Close(reply)) = batch.pop() {
                close = Some(reply);
            }
        }
        if let Some(reply) = close {
            if !batch.is_empty() && !*gate.lock().unwrap_or_else(|p| p.into_inner()) {
                commit_batch(&mut conn, batch, &mut unsynced, &mut relaxed);
            }
            *gate.lock().unwrap_or_else(|p| p.into_inner()) = true;
            close_connection(conn);
            // Writes sent meanwhile find the channel closed once this thread is gone.
            drop(rx);
            let _ = reply.send(());
            return;
        }
        let halted = gate.lock().unwrap_or_else(|p| p.into_inner());
        if *halted {
            for w in batch {
                fail(w, StoreError::WriterGone);
            }
            continue;
        }
        if !unsynced && batch.iter().all(|w| matches!(w, Write::Sync(_))) {
            // Nothing to make durable: every commit so far was synced.
            for w in batch {
                if let Write::Sync(reply) = w {
                    let _ = reply.send(Ok(()));
                }
            }
            continue;
        }
        commit_batch(&mut conn, batch, &mut unsynced, &mut relaxed);
        drop(halted);
    }
}

/// Commits `batch` in one transaction: synced (`synchronous=FULL`) unless every write of it is an
/// accept that may be made durable later (`NORMAL`: in WAL mode a commit then writes the log without
/// syncing it, and SQLite keeps the database whole whatever a crash cuts). `unsynced` follows.
///
/// `relaxed` says the connection may still be in `NORMAL` (a restore that failed): the mode is set only
/// when it changes, so a synced commit runs no extra statement.
fn commit_batch(conn: &mut Connection, batch: Vec<Write>, unsynced: &mut bool, relaxed: &mut bool) {
    let soon = batch
        .iter()
        .all(|w| matches!(w, Write::Accept(_, Durable::Soon, _)));
    if soon || *relaxed {
        let mode = if soon { "NORMAL" } else { "FULL" };
        if let Err(e) = conn.pragma_update(None, "synchronous", mode) {
            let e = StoreError::from(e);
            for w in batch {
                fail(w, e.clone());
            }
            return;
        }
        *relaxed = soon;
    }
    // SQLite syncs the log only when a commit writes something: a synced commit that changed no row (a
    // prune that found nothing, an accept of a turn already there) leaves an earlier unsynced one as it was.
    let changes = conn.total_changes();
    let committed = commit_in(conn, batch);
    if committed && (soon || conn.total_changes() > changes) {
        *unsynced = soon;
    }
    if soon {
        // Back to synced for every other commit (and a checkpoint run by one), whatever happened; a
        // restore that fails is tried again before the next synced commit.
        *relaxed = conn.pragma_update(None, "synchronous", "FULL").is_err();
    }
}

/// One transaction of `batch`, each write answered; `true` when it committed.
fn commit_in(conn: &mut Connection, batch: Vec<Write>) -> bool {
    let tx = match conn.transaction() {
        Ok(tx) => tx,
        Err(e) => {
            let e = StoreError::from(e);
            for w in batch {
                fail(w, e.clone());
            }
            return false;
        }
    };
    let mut results = Vec::with_capacity(batch.len());
    // Each write in a savepoint of its own: a write that fails part way (a turn row in, its conversation
    // row refused) leaves nothing behind. If SQLite gave up the whole transaction (a full disk, an I/O
    // error), nothing of the batch is durable and every write of it fails. A batch of one needs no
    // savepoint: the transaction is its write's, and a failed write rolls it back whole.
    let alone = batch.len() == 1;
    let mut broken: Option<StoreError> = None;
    for w in batch {
        if let Some(e) = &broken {
            results.push((w, Err(e.clone())));
            continue;
        }
        if alone {
            let r = write(&tx, &w);
            if let Err(e) = &r {
                broken = Some(e.clone());
            }
            results.push((w, r));
            continue;
        }
        if let Err(e) = tx
            .prepare_cached("SAVEPOINT one_write")
            .and_then(|mut st| st.execute([]))
        {
            broken = Some(StoreError::from(e));
            results.push((w, Err(broken.clone().expect("set above"))));
            continue;
        }
        let r = write(&tx, &w);
        let r = match r {
            Ok(v) => match tx
                .prepare_cached("RELEASE one_write")
                .and_then(|mut st| st.execute([]))
            {
                Ok(_) => Ok(v),
                Err(e) => Err(StoreError::from(e)),
            },
            Err(e) => {
                if !tx.is_autocommit() {
                    let _ = tx.execute_batch("ROLLBACK TO one_write; RELEASE one_write");
                }
                Err(e)
            }
        };
        if tx.is_autocommit() {
            // The transaction is gone: what the batch wrote so far was rolled back with it.
            let e = match &r {
                Err(e) => e.clone(),
                Ok(_) => StoreError::Unavailable("the journal's transaction was rolled back"),
            };
            broken = Some(e);
        }
        results.push((w, r));
    }
    if let Some(e) = broken {
        for (w, _) in results {
            fail(w, e.clone());
        }
        return false;
    }
    match tx.commit() {
        Ok(()) => {
            for (w, r) in results {
                match (w, r) {
                    (Write::Accept(_, _, reply), Ok(Written::Accepted(a))) => {
                        let _ = reply.send(Ok(a));
                    }
                    (
                        Write::Prune { reply, .. } | Write::RemoveConversation { reply, .. },
                        Ok(Written::Pruned(n)),
                    ) => {
                        let _ = reply.send(Ok(n));
                    }
                    (
                        Write::Finish(_, reply)
                        | Write::Probe(reply)
                        | Write::Sync(reply)
                        | Write::PutMeta { reply, .. },
                        Ok(Written::Nothing),
                    ) => {
                        let _ = reply.send(Ok(()));
                    }
                    (w, Err(e)) => fail(w, e),
                    (w, Ok(_)) => fail(
                        w,
                        StoreError::Unavailable("a write's result of another kind"),
                    ),
                }
            }
            true
        }
        Err(e) => {
            let e = StoreError::from(e);
            for (w, _) in results {
                fail(w, e.clone());
            }
            false
        }
    }
}

/// What one write did, for its reply.
enum Written {
    Nothing,
    Accepted(Accepted),
    /// Turns forgotten (by a prune pass or a removal).
    Pruned(usize),
}

fn write(tx: &rusqlite::Transaction<'_>, w: &Write) -> Result<Written, StoreError> {
    match w {
        // Never in a batch: `run` takes it out first.
        Write::Close(_) => Err(StoreError::WriterGone),
        Write::Accept(t, _, _) => accept(tx, t).map(Written::Accepted),
        Write::Finish(f, _) => finish(tx, f).map(|_| Written::Nothing),
        Write::Prune { prune: p, .. } => crate::sqlite::prune(tx, p).map(Written::Pruned),
        Write::RemoveConversation { conversation, .. } => {
            crate::sqlite::remove_conversation(tx, conversation).map(Written::Pruned)
        }
        Write::Probe(_) | Write::Sync(_) => tx
            .prepare_cached(
                "INSERT INTO probe (id, at) VALUES (1, 0) ON CONFLICT(id) DO UPDATE SET at = at + 1",
            )
            .and_then(|mut stmt| stmt.execute([]))
            .map(|_| Written::Nothing)
            .map_err(StoreError::from),
        Write::PutMeta {
            conversation,
            protocol,
            meta,
            updated_at,
            ..
        } => tx
            .prepare_cached(
                "INSERT INTO conversations (conversation_id, protocol, meta, updated_at)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(conversation_id) DO UPDATE SET meta = ?3, updated_at = ?4",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![conversation, protocol, meta, *updated_at as i64])
            })
            .map(|_| Written::Nothing)
            .map_err(StoreError::from),
    }
}

/// Moves the write-ahead log into the database and closes the connection: the last connection to close
/// removes the `-wal` and `-shm` files.
fn close_connection(conn: Connection) {
    if let Err(e) = conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)") {
        tracing::warn!(error = %e, "the journal's write-ahead log was not checkpointed at close");
    }
    if let Err((_, e)) = conn.close() {
        tracing::warn!(error = %e, "the journal's writer connection did not close cleanly");
    }
}

fn fail(w: Write, e: StoreError) {
    match w {
        Write::Accept(_, _, reply) => {
            let _ = reply.send(Err(e));
        }
        Write::Finish(_, reply)
        | Write::Probe(reply)
        | Write::Sync(reply)
        | Write::PutMeta { reply, .. } => {
            let _ = reply.send(Err(e));
        }
        Write::Prune { reply, .. } | Write::RemoveConversation { reply, .. } => {
            let _ = reply.send(Err(e));
        }
        // A close after another close: the journal is closed already.
        Write::Close(reply) => {
            let _ = reply.send(());
        }
    }
}

fn accept(conn: &Connection, t: &NewTurn) -> Result<Accepted, StoreError> {
    // Cached statements: compiling the SQL anew cost about as much as executing it, on the path every
    // turn takes twice (accept, then finish) before anything goes on the wire.
    let inserted = conn
        .prepare_cached(
            "INSERT INTO turns (request_id, conversation_id, protocol, route, input, accepted_at, owner, agent)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT(request_id) DO NOTHING",
        )?
        .execute(params![
            t.request_id.as_str(),
            t.conversation_id.as_str(),
            t.protocol,
            t.route.to_string(),
            serde_json::to_string(&t.input).map_err(|e| StoreError::Corrupt(e.to_string()))?,
            t.accepted_at as i64,
            t.owner,
            t.agent,
        ])?;
    if inserted == 1 {
        if let Some(meta) = &t.conversation_meta {
            conn.prepare_cached(
                "INSERT INTO conversations (conversation_id, protocol, meta, updated_at)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(conversation_id) DO UPDATE SET meta = ?3, updated_at = ?4",
            )?
            .execute(params![
                t.conversation_id.as_str(),
                t.protocol,
                meta.to_string(),
                t.accepted_at as i64
            ])?;
        }
        return Ok(Accepted::New);
    }
    let existing = conn
        .query_row(
            &format!("SELECT {COLUMNS} FROM turns WHERE request_id = ?1"),
            [t.request_id.as_str()],
            row_to_turn,
        )
        .optional()?
        .ok_or(StoreError::Unavailable("conflicting row vanished"))?;
    Ok(Accepted::Existing(Box::new(existing?)))
}

fn finish(conn: &Connection, f: &Finish) -> Result<(), StoreError> {
    let id = f.request_id.as_str();
    let json = serde_json::to_string(&f.outcome).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    // Only the first outcome sticks: the engine decides one, and a journal that already holds one keeps it.
    let n = conn
        .prepare_cached(
            "UPDATE turns SET outcome = ?2, wire = ?3, ended_at = ?4, tool_calls = ?5
             WHERE request_id = ?1 AND outcome IS NULL",
        )?
        .execute(params![
            id,
            json,
            f.wire.as_deref(),
            f.ended_at as i64,
            f.tool_calls.min(i64::MAX as u64) as i64
        ])?;
    if n == 0 {
        let exists: Option<i64> = conn
            .query_row("SELECT 1 FROM turns WHERE request_id = ?1", [id], |r| {
                r.get(0)
            })
            .optional()?;
        if exists.is_none() {
            return Err(StoreError::UnknownTurn(id.to_string()));
        }
        return Err(StoreError::AlreadyEnded(id.to_string()));
    }
    if let Some(t) = &f.transcript {
        conn.prepare_cached(
            "INSERT OR IGNORE INTO transcripts (request_id, events) VALUES (?1, ?2)",
        )?
        .execute(params![id, serde_json::to_string(t).unwrap_or_default()])?;
    }
    Ok(())
}
