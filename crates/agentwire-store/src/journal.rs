//! The journal's public face: open, accept, finish, look up, and list interrupted turns.

use crate::writer::{self, Write};
use agentwire_core::{ConversationId, Outcome, RequestId};
use rusqlite::{Connection, OptionalExtension, Row};
use std::path::Path;
use std::sync::{mpsc, Mutex};
use tokio::sync::oneshot;

/// Errors at the journal's boundary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// SQLite refused an operation.
    #[error("journal database error: {0}")]
    Sqlite(String),
    /// A row could not be decoded.
    #[error("journal row is corrupt: {0}")]
    Corrupt(String),
    /// An outcome was written for a turn the journal never accepted.
    #[error("no turn {0} in the journal")]
    UnknownTurn(String),
    /// An outcome was written for a turn that already has one.
    #[error("turn {0} already has an outcome")]
    AlreadyEnded(String),
    /// The writer thread is gone (the journal was closed or panicked).
    #[error("journal writer stopped")]
    WriterGone,
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Sqlite(e.to_string())
    }
}

/// A turn to journal on acceptance.
#[derive(Debug, Clone, PartialEq)]
pub struct NewTurn {
    /// The request id (protocol-prefixed).
    pub request_id: RequestId,
    /// The conversation it belongs to.
    pub conversation_id: ConversationId,
    /// Which protocol front accepted it (`nipxx`, ...).
    pub protocol: String,
    /// Where to send its outcome (protocol-specific), kept so an interrupted turn can be answered after a restart.
    pub route: serde_json::Value,
    /// The turn's input (message, model, ...).
    pub input: serde_json::Value,
    /// Unix seconds of acceptance.
    pub accepted_at: u64,
    /// The conversation's protocol-specific state to set in the same transaction, if it changed (a new
    /// fisk-ai conversation's fingerprint): one durable write instead of two before the ack.
    pub conversation_meta: Option<serde_json::Value>,
}

/// A turn as the journal holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredTurn {
    /// The request id.
    pub request_id: RequestId,
    /// The conversation.
    pub conversation_id: ConversationId,
    /// The protocol front.
    pub protocol: String,
    /// Where its outcome goes.
    pub route: serde_json::Value,
    /// Its input.
    pub input: serde_json::Value,
    /// Unix seconds of acceptance.
    pub accepted_at: u64,
    /// Its outcome, once decided and journaled.
    pub outcome: Option<Outcome>,
    /// The outcome as sent on the wire (e.g. the signed terminal event), for byte-identical resends.
    pub wire: Option<String>,
}

/// The answer to [`Journal::accept`].
#[derive(Debug, Clone, PartialEq)]
pub enum Accepted {
    /// The turn is new and now journaled.
    New,
    /// The journal knew this request id: a resend, answered from here and not run again.
    Existing(Box<StoredTurn>),
}

pub(crate) const COLUMNS: &str =
    "request_id, conversation_id, protocol, route, input, accepted_at, outcome, wire";

pub(crate) fn row_to_turn(r: &Row<'_>) -> rusqlite::Result<Result<StoredTurn, StoreError>> {
    let get = |i: usize| r.get::<_, String>(i);
    let (rid, cid, protocol, route, input) = (get(0)?, get(1)?, get(2)?, get(3)?, get(4)?);
    let accepted_at: i64 = r.get(5)?;
    let outcome: Option<String> = r.get(6)?;
    let wire: Option<String> = r.get(7)?;
    Ok((|| {
        let corrupt = |e: &dyn std::fmt::Display| StoreError::Corrupt(e.to_string());
        Ok(StoredTurn {
            request_id: RequestId::new(rid).map_err(|e| corrupt(&e))?,
            conversation_id: ConversationId::new(cid).map_err(|e| corrupt(&e))?,
            protocol,
            route: serde_json::from_str(&route).map_err(|e| corrupt(&e))?,
            input: serde_json::from_str(&input).map_err(|e| corrupt(&e))?,
            accepted_at: accepted_at.max(0) as u64,
            outcome: outcome
                .map(|o| serde_json::from_str(&o))
                .transpose()
                .map_err(|e| corrupt(&e))?,
            wire,
        })
    })())
}

/// The journal of turns.
pub struct Journal {
    writes: mpsc::Sender<Write>,
    reader: Mutex<Connection>,
    gate: writer::Gate,
}

fn open_conn(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(path)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    Ok(conn)
}

impl Journal {
    /// Opens (or creates) the journal at `path`.
    pub fn open(path: &Path) -> Result<Journal, StoreError> {
        let conn = open_conn(path)?;
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
            CREATE INDEX IF NOT EXISTS turns_live ON turns(protocol) WHERE outcome IS NULL;
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
            );",
        )?;
        let reader = open_conn(path)?;
        let (tx, rx) = mpsc::channel();
        let gate = writer::Gate::default();
        let writer_gate = gate.clone();
        std::thread::Builder::new()
            .name("journal-writer".into())
            .spawn(move || writer::run(conn, rx, writer_gate))
            .map_err(|e| StoreError::Sqlite(format!("cannot start the writer thread: {e}")))?;
        Ok(Journal {
            writes: tx,
            reader: Mutex::new(reader),
            gate,
        })
    }

    /// Stops the journal: when this returns, no write commits any more (writes in flight or sent later
    /// fail with [`StoreError::WriterGone`]). What a crash does to a process, for a shutdown that must not
    /// record anything further, and for tests that simulate a crash in-process.
    pub fn halt(&self) {
        *self.gate.lock().unwrap_or_else(|p| p.into_inner()) = true;
    }

    /// Journals a new turn durably, or returns the journal's record if the request id is known.
    pub async fn accept(&self, turn: NewTurn) -> Result<Accepted, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.writes
            .send(Write::Accept(turn, tx))
            .map_err(|_| StoreError::WriterGone)?;
        rx.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Journals a turn's one outcome durably (and its wire form, for resends).
    pub async fn finish(
        &self,
        id: &RequestId,
        outcome: &Outcome,
        wire: Option<String>,
        ended_at: u64,
    ) -> Result<(), StoreError> {
        self.finish_with_transcript(id, outcome, wire, None, ended_at)
            .await
    }

    /// Like [`finish`](Self::finish), with the turn's events (a JSON array) journaled in the same
    /// transaction, for reading the conversation back later.
    pub async fn finish_with_transcript(
        &self,
        id: &RequestId,
        outcome: &Outcome,
        wire: Option<String>,
        transcript: Option<serde_json::Value>,
        ended_at: u64,
    ) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        self.writes
            .send(Write::Finish {
                id: id.clone(),
                outcome: outcome.clone(),
                wire,
                transcript: transcript.map(|t| t.to_string()),
                ended_at,
                reply: tx,
            })
            .map_err(|_| StoreError::WriterGone)?;
        rx.await.map_err(|_| StoreError::WriterGone)?
    }

    /// The journal's record of a request id.
    pub fn lookup(&self, id: &RequestId) -> Result<Option<StoredTurn>, StoreError> {
        let conn = self.reader.lock().map_err(|_| StoreError::WriterGone)?;
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM turns WHERE request_id = ?1"
        ))?;
        let found = stmt.query_row([id.as_str()], row_to_turn).optional()?;
        found.transpose()
    }

    /// Turns of a protocol that were accepted but have no outcome: after a restart, the ones a crash cut off.
    pub fn interrupted(&self, protocol: &str) -> Result<Vec<StoredTurn>, StoreError> {
        self.turns_where("outcome IS NULL AND protocol = ?1", protocol)
    }

    /// The turns matching `clause` (with `?1` bound to `param`), in the order they were accepted.
    fn turns_where(&self, clause: &str, param: &str) -> Result<Vec<StoredTurn>, StoreError> {
        let conn = self.reader.lock().map_err(|_| StoreError::WriterGone)?;
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

    /// A conversation's turns in the order they were accepted, each with its transcript if one was kept.
    pub fn conversation_record(
        &self,
        conversation: &ConversationId,
    ) -> Result<Vec<(StoredTurn, Option<serde_json::Value>)>, StoreError> {
        let conn = self.reader.lock().map_err(|_| StoreError::WriterGone)?;
        let cols: Vec<String> = COLUMNS.split(", ").map(|c| format!("t.{c}")).collect();
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {}, x.events FROM turns t LEFT JOIN transcripts x ON x.request_id = t.request_id
             WHERE t.conversation_id = ?1 ORDER BY t.accepted_at, t.rowid",
            cols.join(", ")
        ))?;
        let rows = stmt.query_map([conversation.as_str()], |r| {
            let turn = row_to_turn(r)?;
            let events: Option<String> = r.get(8)?;
            Ok((turn, events))
        })?;
        let mut out = Vec::new();
        for r in rows {
            let (turn, events) = r?;
            let events = events
                .map(|e| serde_json::from_str(&e))
                .transpose()
                .map_err(|e| StoreError::Corrupt(e.to_string()))?;
            out.push((turn?, events));
        }
        Ok(out)
    }

    /// A conversation's turns in the order they were accepted, without their transcripts: what deciding
    /// on the next turn needs, read without the conversation's whole text.
    pub fn conversation_history(
        &self,
        conversation: &ConversationId,
    ) -> Result<Vec<StoredTurn>, StoreError> {
        self.turns_where("conversation_id = ?1", conversation.as_str())
    }

    /// What a conversation has used: every ended turn's outcome (their tokens) and the number of tool calls
    /// in its kept transcripts, counted inside SQLite so that no transcript is read into memory.
    pub fn conversation_usage(
        &self,
        conversation: &ConversationId,
    ) -> Result<(Vec<Outcome>, u64), StoreError> {
        let conn = self.reader.lock().map_err(|_| StoreError::WriterGone)?;
        let mut stmt = conn.prepare_cached(
            "SELECT t.outcome,
                    CASE WHEN json_valid(x.events) AND json_type(x.events) = 'array' THEN
                        (SELECT COUNT(*) FROM json_each(x.events)
                         WHERE json_each.type = 'object'
                           AND json_extract(json_each.value, '$.type') = 'tool_call')
                    ELSE 0 END
             FROM turns t LEFT JOIN transcripts x ON x.request_id = t.request_id
             WHERE t.conversation_id = ?1 AND t.outcome IS NOT NULL",
        )?;
        let rows = stmt.query_map([conversation.as_str()], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
        })?;
        let (mut outcomes, mut tool_calls) = (Vec::new(), 0u64);
        for r in rows {
            let (outcome, calls) = r?;
            outcomes.push(
                serde_json::from_str(&outcome).map_err(|e| StoreError::Corrupt(e.to_string()))?,
            );
            tool_calls += calls.max(0) as u64;
        }
        Ok((outcomes, tool_calls))
    }

    /// Durably sets a conversation's protocol-specific state (a fisk-ai fingerprint and approvals, ...).
    pub async fn put_conversation_meta(
        &self,
        conversation: &ConversationId,
        protocol: &str,
        meta: &serde_json::Value,
        updated_at: u64,
    ) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        self.writes
            .send(Write::PutMeta {
                conversation: conversation.to_string(),
                protocol: protocol.to_string(),
                meta: meta.to_string(),
                updated_at,
                reply: tx,
            })
            .map_err(|_| StoreError::WriterGone)?;
        rx.await.map_err(|_| StoreError::WriterGone)?
    }

    /// A conversation's protocol-specific state, if any was set.
    pub fn conversation_meta(
        &self,
        conversation: &ConversationId,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let conn = self.reader.lock().map_err(|_| StoreError::WriterGone)?;
        let meta: Option<String> = conn
            .prepare_cached("SELECT meta FROM conversations WHERE conversation_id = ?1")?
            .query_row([conversation.as_str()], |r| r.get(0))
            .optional()?;
        meta.map(|m| serde_json::from_str(&m))
            .transpose()
            .map_err(|e| StoreError::Corrupt(e.to_string()))
    }

    /// Number of journaled turns of a conversation (ended or not).
    pub fn conversation_turns(&self, conversation: &ConversationId) -> Result<u64, StoreError> {
        let conn = self.reader.lock().map_err(|_| StoreError::WriterGone)?;
        let n: i64 = conn
            .prepare_cached("SELECT COUNT(*) FROM turns WHERE conversation_id = ?1")?
            .query_row([conversation.as_str()], |r| r.get(0))?;
        Ok(n.max(0) as u64)
    }
}
