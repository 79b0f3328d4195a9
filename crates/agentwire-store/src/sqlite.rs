//! The embedded journal: SQLite in the data directory (WAL, `synchronous=FULL`: every commit is synced,
//! except an [`accept_soon`](Journal::accept_soon)'s, which the next synced commit carries), one writer
//! thread with group commit, reads on tokio's blocking pool.

use crate::model::{
    Accepted, ConversationTurn, ConversationView, Finish, NewTurn, StoreError, StoredTurn,
    LOCAL_OWNER,
};
use crate::writer::{self, Durable, Write};
use crate::Journal;
use agentwire_core::{ConversationId, RequestId};
use futures_util::future::BoxFuture;
use rusqlite::{Connection, OptionalExtension, Row};
use std::path::Path;
use std::sync::{mpsc, Arc, Mutex};
use tokio::sync::oneshot;

pub(crate) const COLUMNS: &str =
    "request_id, conversation_id, protocol, route, input, accepted_at, outcome, wire, owner, tool_calls, agent, ended_at";

pub(crate) fn row_to_turn(r: &Row<'_>) -> rusqlite::Result<Result<StoredTurn, StoreError>> {
    let get = |i: usize| r.get::<_, String>(i);
    let (rid, cid, protocol, route, input) = (get(0)?, get(1)?, get(2)?, get(3)?, get(4)?);
    let accepted_at: i64 = r.get(5)?;
    let outcome: Option<String> = r.get(6)?;
    let wire: Option<String> = r.get(7)?;
    let owner: String = r.get(8)?;
    let tool_calls: i64 = r.get(9)?;
    let agent: String = r.get(10)?;
    let ended_at: Option<i64> = r.get(11)?;
    Ok((|| {
        let corrupt = |e: &dyn std::fmt::Display| StoreError::Corrupt(e.to_string());
        let request_id = RequestId::new(rid).map_err(|e| corrupt(&e))?;
        let conversation_id = ConversationId::new(cid).map_err(|e| corrupt(&e))?;
        let input: serde_json::Value = serde_json::from_str(&input).map_err(|e| corrupt(&e))?;
        let input = crate::model::decode_input(input, &request_id, &conversation_id)?;
        Ok(StoredTurn {
            request_id,
            conversation_id,
            protocol,
            owner,
            agent,
            route: serde_json::from_str(&route).map_err(|e| corrupt(&e))?,
            input,
            accepted_at: accepted_at.max(0) as u64,
            outcome: outcome
                .map(|o| serde_json::from_str(&o))
                .transpose()
                .map_err(|e| corrupt(&e))?,
            wire,
            tool_calls: tool_calls.max(0) as u64,
            ended_at: ended_at.map(|e| e.max(0) as u64),
        })
    })())
}

/// The SQLite journal.
pub struct SqliteJournal {
    writes: mpsc::Sender<Write>,
    /// `None` once closed.
    reader: Arc<Mutex<Option<Connection>>>,
    gate: writer::Gate,
}

/// Each connection's page cache, in KiB (SQLite's `cache_size` as a negative number): set, not left to a
/// build's default, so the daemon's memory is known: two connections (the writer and the reader) hold at
/// most this each.
pub(crate) const CACHE_KIB: i64 = 4 * 1024;

fn open_conn(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(path)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "cache_size", -CACHE_KIB)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    Ok(conn)
}

/// Creates the tables, and brings a journal written by an earlier version up to this one, in one
/// transaction (a crash half way leaves the journal as it was).
fn migrate(conn: &Connection) -> Result<(), StoreError> {
    let tx = conn.unchecked_transaction()?;
    migrate_in(&tx)?;
    tx.commit()?;
    Ok(())
}

fn migrate_in(conn: &Connection) -> Result<(), StoreError> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS turns (
            request_id TEXT PRIMARY KEY,
            conversation_id TEXT NOT NULL,
            protocol TEXT NOT NULL,
            route TEXT NOT NULL,
            input TEXT NOT NULL,
            accepted_at INTEGER NOT NULL,
            outcome TEXT,
            wire TEXT,
            ended_at INTEGER
        );
        CREATE INDEX IF NOT EXISTS turns_by_conversation ON turns(conversation_id);
        CREATE TABLE IF NOT EXISTS transcripts (
            request_id TEXT PRIMARY KEY,
            events TEXT NOT NULL
        );
        CREATE TABLE IF NOT EXISTS conversations (
            conversation_id TEXT PRIMARY KEY,
            protocol TEXT NOT NULL,
            meta TEXT NOT NULL,
            updated_at INTEGER NOT NULL
        );
        CREATE TABLE IF NOT EXISTS probe (
            id INTEGER PRIMARY KEY,
            at INTEGER NOT NULL
        );",
    )?;
    let has = |column: &str| -> Result<bool, StoreError> {
        let n: i64 = conn.query_row(
            "SELECT COUNT(*) FROM pragma_table_info('turns') WHERE name = ?1",
            [column],
            |r| r.get(0),
        )?;
        Ok(n > 0)
    };
    if !has("owner")? {
        // Journals from before owners were all one daemon's own.
        conn.execute(
            &format!("ALTER TABLE turns ADD COLUMN owner TEXT NOT NULL DEFAULT '{LOCAL_OWNER}'"),
            [],
        )?;
    }
    if !has("tool_calls")? {
        conn.execute(
            "ALTER TABLE turns ADD COLUMN tool_calls INTEGER NOT NULL DEFAULT 0",
            [],
        )?;
        // Journals from before the column counted tool calls from their transcripts when read (events of
        // type `tool_call`, the format they were written in); counted once here instead.
        conn.execute(
            "UPDATE turns SET tool_calls = (
                SELECT COUNT(*) FROM transcripts x, json_each(x.events)
                WHERE x.request_id = turns.request_id AND json_valid(x.events)
                  AND json_type(x.events) = 'array' AND json_each.type = 'object'
                  AND json_extract(json_each.value, '$.type') = 'tool_call')
             WHERE outcome IS NOT NULL",
            [],
        )?;
    }
    if !has("agent")? {
        // Journals from before turns named their agent: no agent, so no agent is given them as history.
        conn.execute(
            "ALTER TABLE turns ADD COLUMN agent TEXT NOT NULL DEFAULT ''",
            [],
        )?;
    }
    conn.execute_batch(
        "DROP INDEX IF EXISTS turns_live;
         CREATE INDEX IF NOT EXISTS turns_open ON turns(owner) WHERE outcome IS NULL;
         CREATE INDEX IF NOT EXISTS turns_ended ON turns(ended_at) WHERE outcome IS NOT NULL;",
    )?;
    Ok(())
}

impl SqliteJournal {
    /// Opens (or creates) the journal at `path`.
    pub fn open(path: &Path) -> Result<SqliteJournal, StoreError> {
        let conn = open_conn(path)?;
        migrate(&conn)?;
        let reader = open_conn(path)?;
        let (tx, rx) = mpsc::channel();
        let gate = writer::Gate::default();
        let writer_gate = gate.clone();
        std::thread::Builder::new()
            .name("journal-writer".into())
            .spawn(move || writer::run(conn, rx, writer_gate))
            .map_err(StoreError::task)?;
        Ok(SqliteJournal {
            writes: tx,
            reader: Arc::new(Mutex::new(Some(reader))),
            gate,
        })
    }

    /// Opens the journal at `path` to read only, beside the daemon that holds it (WAL lets a reader in
    /// while it writes): no migration and no writer, so every write fails with
    /// [`StoreError::WriterGone`]. For an operator's tools (`agentwire session list`). A journal that does
    /// not exist is an error, not made.
    pub fn open_read_only(path: &Path) -> Result<SqliteJournal, StoreError> {
        let conn = Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.pragma_update(None, "cache_size", -CACHE_KIB)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        // A writer that is gone from the start: its receiving end is dropped here.
        let (tx, _) = mpsc::channel();
        Ok(SqliteJournal {
            writes: tx,
            reader: Arc::new(Mutex::new(Some(conn))),
            gate: writer::Gate::default(),
        })
    }

    /// Sends a write to the writer thread and waits for its durable commit.
    async fn write<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Write,
    ) -> Result<T, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.writes
            .send(make(tx))
            .map_err(|_| StoreError::WriterGone)?;
        rx.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Runs a read on the blocking pool with the reader connection.
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let reader = self.reader.clone();
        tokio::task::spawn_blocking(move || {
            let conn = reader.lock().map_err(|_| StoreError::WriterGone)?;
            f(conn.as_ref().ok_or(StoreError::WriterGone)?)
        })
        .await
        .map_err(StoreError::task)?
    }
}

/// The turns matching `clause` (with `?1` bound to `param`), in the order they were accepted.
fn turns_where(
    conn: &Connection,
    clause: &str,
    param: &str,
) -> Result<Vec<StoredTurn>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM turns WHERE {clause} ORDER BY accepted_at, rowid"
    ))?;
    let rows = stmt.query_map([param], row_to_turn)?;
    let mut out = Vec::new();
    for r in rows {
        out.push(r??);
    }
    Ok(out)
}

fn conversation_with_transcripts(
    conn: &Connection,
    conversation: &str,
    limit: Option<usize>,
) -> Result<ConversationView, StoreError> {
    let cols: Vec<String> = COLUMNS.split(", ").map(|c| format!("t.{c}")).collect();
    // The newest `limit` turns (all without one), read oldest first.
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT * FROM (SELECT {}, x.events, t.rowid AS r FROM turns t
             LEFT JOIN transcripts x ON x.request_id = t.request_id
             WHERE t.conversation_id = ?1 ORDER BY t.accepted_at DESC, t.rowid DESC LIMIT ?2)
         ORDER BY accepted_at, r",
        cols.join(", ")
    ))?;
    let limit = limit.map_or(-1i64, |l| l.min(i64::MAX as usize) as i64);
    let rows = stmt.query_map(rusqlite::params![conversation, limit], |r| {
        let turn = row_to_turn(r)?;
        // The column after the turn's own.
        let events: Option<String> = r.get(COLUMNS.split(", ").count())?;
        Ok((turn, events))
    })?;
    let mut turns = Vec::new();
    for r in rows {
        let (turn, events) = r?;
        let transcript = events
            .map(|e| serde_json::from_str(&e).map_err(|e| StoreError::Corrupt(e.to_string())))
            .transpose()?
            .map(crate::model::decode_transcript)
            .transpose()?;
        turns.push(ConversationTurn {
            turn: turn?,
            transcript,
        });
    }
    Ok(ConversationView { turns })
}

impl Journal for SqliteJournal {
    fn accept(&self, turn: NewTurn) -> BoxFuture<'_, Result<Accepted, StoreError>> {
        Box::pin(self.write(|reply| Write::Accept(Box::new(turn), Durable::Now, reply)))
    }

    fn accept_soon(&self, turn: NewTurn) -> BoxFuture<'_, Result<Accepted, StoreError>> {
        Box::pin(self.write(|reply| Write::Accept(Box::new(turn), Durable::Soon, reply)))
    }

    fn sync(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.write(Write::Sync))
    }

    fn finish(&self, finish: Finish) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.write(|reply| Write::Finish(finish, reply)))
    }

    fn lookup(&self, id: RequestId) -> BoxFuture<'_, Result<Option<StoredTurn>, StoreError>> {
        Box::pin(self.read(move |conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM turns WHERE request_id = ?1"
            ))?;
            let found = stmt.query_row([id.as_str()], row_to_turn).optional()?;
            found.transpose()
        }))
    }

    fn recent_turns(
        &self,
        conversation: ConversationId,
        limit: usize,
    ) -> BoxFuture<'_, Result<ConversationView, StoreError>> {
        Box::pin(self.read(move |conn| {
            conversation_with_transcripts(conn, conversation.as_str(), Some(limit))
        }))
    }

    fn conversation(
        &self,
        conversation: ConversationId,
        transcripts: bool,
    ) -> BoxFuture<'_, Result<ConversationView, StoreError>> {
        Box::pin(self.read(move |conn| {
            if transcripts {
                return conversation_with_transcripts(conn, conversation.as_str(), None);
            }
            let turns = turns_where(conn, "conversation_id = ?1", conversation.as_str())?;
            Ok(ConversationView {
                turns: turns
                    .into_iter()
                    .map(|turn| ConversationTurn {
                        turn,
                        transcript: None,
                    })
                    .collect(),
            })
        }))
    }

    fn conversation_meta(
        &self,
        conversation: ConversationId,
    ) -> BoxFuture<'_, Result<Option<serde_json::Value>, StoreError>> {
        Box::pin(self.read(move |conn| {
            let meta: Option<String> = conn
                .prepare_cached("SELECT meta FROM conversations WHERE conversation_id = ?1")?
                .query_row([conversation.as_str()], |r| r.get(0))
                .optional()?;
            meta.map(|m| serde_json::from_str(&m))
                .transpose()
                .map_err(|e| StoreError::Corrupt(e.to_string()))
        }))
    }

    fn prune(
        &self,
        prune: crate::model::Prune,
    ) -> BoxFuture<'_, Result<crate::model::Pruned, StoreError>> {
        let limit = prune.limit;
        let pass = self.write(move |reply| Write::Prune { prune, reply });
        Box::pin(async move {
            let forgotten = pass.await?;
            Ok(crate::model::Pruned {
                forgotten,
                more: forgotten == limit,
            })
        })
    }

    fn put_conversation_meta(
        &self,
        conversation: ConversationId,
        protocol: String,
        meta: serde_json::Value,
        updated_at: u64,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.write(move |reply| Write::PutMeta {
            conversation: conversation.to_string(),
            protocol,
            meta: meta.to_string(),
            updated_at,
            reply,
        }))
    }

    fn latest(&self, limit: usize) -> BoxFuture<'_, Result<Vec<StoredTurn>, StoreError>> {
        let limit = limit.min(crate::MAX_LATEST_TURNS);
        Box::pin(self.read(move |conn| {
            // Rows are inserted as turns are accepted: the rowid is the order of acceptance, and its
            // index reads the newest first without a sort.
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM turns ORDER BY rowid DESC LIMIT ?1"
            ))?;
            let rows = stmt.query_map([limit as i64], row_to_turn)?;
            let mut out = Vec::new();
            for r in rows {
                // A corrupt row is left out of a list (and is a typed error where it is read by id).
                match r? {
                    Ok(t) => out.push(t),
                    Err(e) => tracing::warn!(error = %e, "a turn row left out of the latest turns"),
                }
            }
            Ok(out)
        }))
    }

    fn interrupted(&self, owner: String) -> BoxFuture<'_, Result<Vec<StoredTurn>, StoreError>> {
        Box::pin(self.read(move |conn| turns_where(conn, "outcome IS NULL AND owner = ?1", &owner)))
    }

    fn conversations(
        &self,
        protocol: String,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<ConversationId>, StoreError>> {
        Box::pin(self.read(move |conn| {
            // A conversation's turns, and its row for one with state but no turn left.
            let mut stmt = conn.prepare_cached(
                "SELECT conversation_id FROM (
                     SELECT conversation_id, MAX(accepted_at) AS at FROM turns WHERE protocol = ?1
                     GROUP BY conversation_id
                     UNION ALL
                     SELECT conversation_id, updated_at AS at FROM conversations WHERE protocol = ?1)
                 GROUP BY conversation_id ORDER BY MAX(at) DESC, conversation_id LIMIT ?2",
            )?;
            let limit = limit.min(i64::MAX as usize) as i64;
            let rows = stmt.query_map(rusqlite::params![protocol, limit], |r| {
                r.get::<_, String>(0)
            })?;
            let mut out = Vec::new();
            for r in rows {
                out.push(ConversationId::new(r?).map_err(|e| StoreError::Corrupt(e.to_string()))?);
            }
            Ok(out)
        }))
    }

    fn remove_conversation(
        &self,
        conversation: ConversationId,
    ) -> BoxFuture<'_, Result<crate::Removed, StoreError>> {
        let removal = self.write(move |reply| Write::RemoveConversation {
            conversation: conversation.to_string(),
            reply,
        });
        Box::pin(async move {
            let turns = removal.await?;
            Ok(crate::Removed::Gone { turns })
        })
    }

    fn probe(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.write(Write::Probe))
    }

    fn halt(&self) {
        *self.gate.lock().unwrap_or_else(|p| p.into_inner()) = true;
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            if self.writes.send(Write::Close(tx)).is_ok() {
                let _ = rx.await;
            }
            let reader = self.reader.clone();
            let _ = tokio::task::spawn_blocking(move || {
                let taken = reader.lock().unwrap_or_else(|p| p.into_inner()).take();
                if let Some(conn) = taken {
                    // The last connection to close checkpoints and removes the -wal and -shm files.
                    if let Err((_, e)) = conn.close() {
                        tracing::warn!(error = %e, "the journal's reader connection did not close cleanly");
                    }
                }
            })
            .await;
        })
    }
}

/// Forgets up to `p.limit` ended turns that ended before `p.ended_before`, of protocols not in `p.keep`,
/// with their transcripts; then the conversations of those protocols left with no turn.
pub(crate) fn prune(tx: &Connection, p: &crate::model::Prune) -> Result<usize, StoreError> {
    let keep = serde_json::to_string(&p.keep).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let ids: Vec<String> = tx
        .prepare_cached(
            "SELECT request_id FROM turns
             WHERE outcome IS NOT NULL AND ended_at < ?1
               AND protocol NOT IN (SELECT value FROM json_each(?2))
             ORDER BY ended_at LIMIT ?3",
        )?
        .query_map(
            rusqlite::params![p.ended_before as i64, keep, p.limit as i64],
            |r| r.get(0),
        )?
        .collect::<Result<_, _>>()?;
    for id in &ids {
        tx.prepare_cached("DELETE FROM transcripts WHERE request_id = ?1")?
            .execute([id])?;
        tx.prepare_cached("DELETE FROM turns WHERE request_id = ?1")?
            .execute([id])?;
    }
    if !ids.is_empty() {
        tx.prepare_cached(
            "DELETE FROM conversations
             WHERE protocol NOT IN (SELECT value FROM json_each(?1)) AND updated_at < ?2
               AND NOT EXISTS (SELECT 1 FROM turns t WHERE t.conversation_id = conversations.conversation_id)",
        )?
        .execute(rusqlite::params![keep, p.ended_before as i64])?;
    }
    Ok(ids.len())
}

/// Removes conversation `conversation`: its turns, their transcripts and its row; how many turns went.
pub(crate) fn remove_conversation(
    tx: &Connection,
    conversation: &str,
) -> Result<usize, StoreError> {
    tx.prepare_cached(
        "DELETE FROM transcripts WHERE request_id IN
             (SELECT request_id FROM turns WHERE conversation_id = ?1)",
    )?
    .execute([conversation])?;
    let turns = tx
        .prepare_cached("DELETE FROM turns WHERE conversation_id = ?1")?
        .execute([conversation])?;
    tx.prepare_cached("DELETE FROM conversations WHERE conversation_id = ?1")?
        .execute([conversation])?;
    Ok(turns)
}
