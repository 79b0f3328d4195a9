//! The relay's event store: a synchronous SQLite API (insert, query, purge) used by the writer
//! thread and the query pool, and directly by tests.
//!
//! Events are kept as their canonical JSON plus the columns queries need. Every single-letter
//! tag's first value is indexed, so `#p`, `#e`, `#s`, `#d` filters are index lookups. The store
//! trusts its caller: it does not verify ids or signatures, and it does not refuse expired
//! events (it only hides them from queries). Ephemeral kinds are not stored
//! ([`InsertOutcome::NotStored`]).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nostr::event::{Event, EventId, Kind};
use nostr::filter::Filter;
use nostr::key::PublicKey;
use nostr::types::Timestamp;
use rusqlite::{params, params_from_iter, Connection, OpenFlags, OptionalExtension};

use crate::error::RelayError;
use crate::filter_sql::{filter_to_sql, ts_to_sql};
use crate::kind::Retention;
use crate::limits::MAX_PRUNED_PER_PASS;
use crate::retention::{self, KindClass, RetentionPolicy};
use crate::tinyagent::{self, AnswerRefusal};

/// The schema version this build writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 1;

/// How long a connection waits for a lock held by another before failing: 5 s. Only the
/// checkpointer and the writer ever contend; a longer wait means something is stuck.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How many WAL pages the writer lets pile up before it checkpoints them into the database: 16,384
/// (64 MiB at SQLite's 4 KiB pages) rather than SQLite's 1,000. A checkpoint writes each page once however
/// many commits changed it, and a busy relay changes the same index pages (a room's `h` rows, an
/// author's newest events, the B-trees' inner pages) in commit after commit: with the bigger window they
/// are written back and synced once per 64 MiB of WAL instead of once per 4 MiB. On this project's
/// 2-core machine it raised the writer-bound phases of `relay-bench` by a quarter to a half
/// (docs/benchmarks.md). The cost is a WAL file of up to this size and a longer (rarer) checkpoint.
pub const WAL_CHECKPOINT_PAGES: i64 = 16_384;

/// The size the WAL file is cut back to after a checkpoint has emptied it: the checkpoint window, so the
/// relay's disk use stays bounded at the database plus 64 MiB.
pub const WAL_SIZE_LIMIT_BYTES: i64 = WAL_CHECKPOINT_PAGES * 4096;

/// Prepared statements kept per connection: each distinct filter shape is one statement.
const STATEMENT_CACHE: usize = 64;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY,
    id BLOB NOT NULL UNIQUE,
    pubkey BLOB NOT NULL,
    created_at INTEGER NOT NULL,
    kind INTEGER NOT NULL,
    -- replaceable: '', addressable: the d tag, regular: NULL
    address TEXT,
    expires_at INTEGER,
    json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_created_at ON events(created_at DESC, id);
CREATE INDEX IF NOT EXISTS events_pubkey ON events(pubkey, created_at DESC);
CREATE INDEX IF NOT EXISTS events_kind ON events(kind, created_at DESC);
CREATE UNIQUE INDEX IF NOT EXISTS events_address ON events(pubkey, kind, address)
    WHERE address IS NOT NULL;
CREATE INDEX IF NOT EXISTS events_expires_at ON events(expires_at)
    WHERE expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS tags (
    name TEXT NOT NULL,
    value TEXT NOT NULL,
    event_seq INTEGER NOT NULL,
    PRIMARY KEY (name, value, event_seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tags_event ON tags(event_seq);
-- Every tiny agent question stored, kept after the question itself expires and is purged, so that a late
-- answer is still refused rather than taken as a plain comment.
CREATE TABLE IF NOT EXISTS questions (
    id BLOB PRIMARY KEY,
    expires_at INTEGER
) WITHOUT ROWID;
-- Events their authors deleted (NIP-09): not stored again when someone publishes them again.
CREATE TABLE IF NOT EXISTS deletions (
    id BLOB NOT NULL,
    author BLOB NOT NULL,
    PRIMARY KEY (id, author)
) WITHOUT ROWID;
-- Which answer settled which tiny agent question: the first valid one (tinyagent::check_answer).
CREATE TABLE IF NOT EXISTS settlements (
    question BLOB PRIMARY KEY,
    answer BLOB NOT NULL
) WITHOUT ROWID;
-- Rooms the relay knew and no longer does (taken out of the configuration): their events are kept and read
-- by nobody until the room is known again (EventStore::retire_rooms).
CREATE TABLE IF NOT EXISTS retired_rooms (
    id TEXT PRIMARY KEY
) WITHOUT ROWID;
";

/// What happened to an inserted event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InsertOutcome {
    /// Stored; it is new.
    Inserted,
    /// Already stored (same id); nothing changed.
    Duplicate,
    /// Stored, and it replaced an older event at the same replaceable or addressable address.
    Replaced,
    /// Not stored: a newer event at the same replaceable or addressable address is kept
    /// (newer by `created_at`, then lowest id, per NIP-01).
    RejectedOlder,
    /// Not stored: its kind is ephemeral.
    NotStored,
    /// Not stored: a reply to a tiny agent question that does not answer it validly, or answers one
    /// already settled.
    Refused(AnswerRefusal),
    /// Not stored: its author deleted it (NIP-09).
    Deleted,
}

impl InsertOutcome {
    /// Whether the event is new to live subscribers (it was stored and is current).
    pub fn is_new(&self) -> bool {
        matches!(self, Self::Inserted | Self::Replaced)
    }
}

/// A stored event as its canonical JSON, with the fields needed to order and deduplicate it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    /// The event id.
    pub id: EventId,
    /// The event's `created_at`.
    pub created_at: Timestamp,
    /// The event's canonical JSON.
    pub json: String,
}

/// One connection to the relay's SQLite database.
#[derive(Debug)]
pub struct EventStore {
    conn: Connection,
    path: PathBuf,
    /// Question cards stored lately, parsed, so that an answer is judged without reading and parsing its
    /// card again.
    cards: CardCache,
}

/// Question cards the writer committed lately, parsed. An entry is used only while the card's row still
/// exists (checked in the answer's transaction), so a card deleted or purged since is judged from the
/// table as before; a card's content never changes (its id is its hash).
#[derive(Debug, Default)]
struct CardCache {
    cards: std::collections::HashMap<EventId, std::sync::Arc<(Event, tinyagent::QuestionCard)>>,
    order: std::collections::VecDeque<EventId>,
}

/// The most parsed question cards kept: the cards that get answered are the recent ones, and 4,096 parsed
/// cards are a few MiB at most.
pub const MAX_CACHED_CARDS: usize = 4096;

impl CardCache {
    fn get(&self, id: &EventId) -> Option<std::sync::Arc<(Event, tinyagent::QuestionCard)>> {
        self.cards.get(id).cloned()
    }

    fn keep(&mut self, event: &Event) {
        let Ok(card) = tinyagent::question(event) else {
            return;
        };
        if self.cards.len() >= MAX_CACHED_CARDS {
            if let Some(old) = self.order.pop_front() {
                self.cards.remove(&old);
            }
        }
        if self
            .cards
            .insert(event.id, std::sync::Arc::new((event.clone(), card)))
            .is_none()
        {
            self.order.push_back(event.id);
        }
    }
}

/// Each connection's page cache, in KiB (SQLite's `cache_size` as a negative number), set rather than left
/// to a build's default so the relay's memory is known: the writer and each of the readers hold at most
/// this (5 connections, 20 MiB in all).
pub const CACHE_KIB: i64 = 4 * 1024;

/// What [`EventStore::retire_rooms`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Retired {
    /// The rooms retired now (their metadata was stored, and they are no longer known), sorted.
    pub now: Vec<String>,
    /// Their metadata events (39000-39003) deleted.
    pub metadata: usize,
    /// Their other events, kept and read by nobody.
    pub events: usize,
    /// Every retired room, those of earlier starts too, sorted.
    pub all: Vec<String>,
}

/// What one retention pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Events deleted.
    pub deleted: usize,
    /// The pass looked at all it may: more may be past their retention.
    pub more: bool,
}

impl EventStore {
    /// Opens (creating if needed) the database at `path` for writing: WAL journal,
    /// `synchronous=FULL` so a committed event survives power loss, schema created or checked.
    pub fn open(path: &Path) -> Result<Self, RelayError> {
        let open_err = |source| RelayError::Open {
            path: path.to_path_buf(),
            source,
        };
        let conn = Connection::open(path).map_err(open_err)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
            .map_err(open_err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            tracing::warn!(%mode, path = %path.display(), "relay database is not in WAL mode");
        }
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(open_err)?;
        conn.pragma_update(None, "wal_autocheckpoint", WAL_CHECKPOINT_PAGES)
            .map_err(open_err)?;
        conn.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT_BYTES)
            .map_err(open_err)?;
        conn.pragma_update(None, "cache_size", -CACHE_KIB)
            .map_err(open_err)?;
        let found: i64 = conn
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .map_err(open_err)?;
        if found > SCHEMA_VERSION {
            return Err(RelayError::SchemaTooNew {
                found,
                supported: SCHEMA_VERSION,
            });
        }
        conn.execute_batch(SCHEMA).map_err(open_err)?;
        conn.pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(open_err)?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        Ok(Self {
            conn,
            path: path.to_path_buf(),
            cards: CardCache::default(),
        })
    }

    /// Opens a query-only connection to a database that [`EventStore::open`] has created.
    pub fn open_reader(path: &Path) -> Result<Self, RelayError> {
        let open_err = |source| RelayError::Open {
            path: path.to_path_buf(),
            source,
        };
        // Read-write at the file level because WAL readers update the shared-memory index;
        // `query_only` below forbids changes.
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(open_err)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
        conn.pragma_update(None, "query_only", true)
            .map_err(open_err)?;
        conn.pragma_update(None, "cache_size", -CACHE_KIB)
            .map_err(open_err)?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        Ok(Self {
            conn,
            path: path.to_path_buf(),
            cards: CardCache::default(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stores one event in its own transaction. The caller has verified it.
    pub fn insert(&mut self, event: &Event) -> Result<InsertOutcome, RelayError> {
        let json = event_json(event)?;
        let mut outcomes = self.insert_batch_json(&[(event, json.as_str())], Timestamp::now())?;
        Ok(outcomes.remove(0))
    }

    /// Stores several events in one transaction (one fsync); outcomes are in input order. An answer to
    /// a tiny agent question is judged as of now.
    pub fn insert_batch(&mut self, events: &[Event]) -> Result<Vec<InsertOutcome>, RelayError> {
        let jsons = events
            .iter()
            .map(event_json)
            .collect::<Result<Vec<_>, _>>()?;
        let batch: Vec<(&Event, &str)> = events
            .iter()
            .zip(jsons.iter().map(String::as_str))
            .collect();
        self.insert_batch_json(&batch, Timestamp::now())
    }

    /// Like [`EventStore::insert_batch`], with each event's canonical JSON already made, and answers to
    /// tiny agent questions judged as of `now`.
    pub(crate) fn insert_batch_json(
        &mut self,
        batch: &[(&Event, &str)],
        now: Timestamp,
    ) -> Result<Vec<InsertOutcome>, RelayError> {
        let tx = self.conn.transaction()?;
        let mut outcomes = Vec::with_capacity(batch.len());
        for (event, json) in batch {
            outcomes.push(insert_in(&tx, event, json, now, &self.cards)?);
        }
        tx.commit()?;
        // Committed: the new cards may be judged from memory from now on.
        for ((event, _), outcome) in batch.iter().zip(&outcomes) {
            if outcome.is_new() && tinyagent::is_question(event) {
                self.cards.keep(event);
            }
        }
        Ok(outcomes)
    }

    /// The stored events of `kinds`, in the order they were stored (what replaying them needs; `created_at`
    /// ties within a second).
    pub fn in_stored_order(&self, kinds: &[u16]) -> Result<Vec<Event>, RelayError> {
        let list = kinds
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT json FROM events WHERE kind IN ({list}) ORDER BY seq"
        ))?;
        let rows = stmt.query_map([], |row| row.get::<_, String>(0))?;
        rows.map(|json| {
            Event::from_json(json?).map_err(|e| RelayError::CorruptEvent(e.to_string()))
        })
        .collect()
    }

    /// Deletes the events among `ids` that belong to room `room` (their `h` tag), for a NIP-29 9005 by
    /// one of its moderators; returns how many.
    pub fn delete_room_events(&mut self, room: &str, ids: &[EventId]) -> Result<usize, RelayError> {
        let tx = self.conn.transaction()?;
        let mut n = 0;
        for id in ids {
            let seq: Option<i64> = tx
                .prepare_cached(
                    "SELECT e.seq FROM events e JOIN tags t ON t.event_seq = e.seq
                     WHERE e.id = ?1 AND t.name = 'h' AND t.value = ?2",
                )?
                .query_row(params![id.as_bytes().as_slice(), room], |row| row.get(0))
                .optional()?;
            if let Some(seq) = seq {
                delete_event(&tx, seq)?;
                n += 1;
            }
        }
        tx.commit()?;
        Ok(n)
    }

    /// How many stored events match any of `filters` (NIP-45), not counting those expired at `now`.
    /// `limit` is ignored: a count is of everything that matches.
    /// The events of the rooms in `hidden` are not counted.
    pub fn count_matching(
        &self,
        filters: &[Filter],
        now: Timestamp,
        hidden: &[String],
    ) -> Result<u64, RelayError> {
        let mut parts = Vec::with_capacity(filters.len());
        let mut params = Vec::new();
        for filter in filters {
            let mut filter = filter.clone();
            filter.limit = None;
            let query = filter_to_sql(&filter, now, hidden)
                .map_err(|e| RelayError::UnsupportedFilter(e.to_string()))?;
            let Some(query) = query else { continue };
            parts.push(format!("SELECT seq FROM ({})", query.sql));
            params.extend(query.params);
        }
        if parts.is_empty() {
            return Ok(0);
        }
        // UNION (not UNION ALL): an event matching two filters counts once.
        let sql = format!("SELECT COUNT(*) FROM ({})", parts.join(" UNION "));
        let n: i64 = self
            .conn
            .prepare_cached(&sql)?
            .query_row(params_from_iter(params.iter()), |row| row.get(0))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// The stored events matching any of `filters` (each with its own `limit`, uncapped),
    /// excluding those expired at `now`, newest first (by `created_at`, then lowest id).
    pub fn query(&self, filters: &[Filter], now: Timestamp) -> Result<Vec<Event>, RelayError> {
        self.query_json(filters, now, &[])?
            .into_iter()
            .map(|stored| {
                Event::from_json(&stored.json)
                    .map_err(|e| RelayError::CorruptEvent(format!("event {}: {e}", stored.id)))
            })
            .collect()
    }

    /// Like [`EventStore::query`], returning each event's stored JSON without parsing it.
    /// The events of the rooms in `hidden` are left out.
    pub fn query_json(
        &self,
        filters: &[Filter],
        now: Timestamp,
        hidden: &[String],
    ) -> Result<Vec<StoredEvent>, RelayError> {
        let mut seen: HashSet<i64> = HashSet::new();
        let mut out = Vec::new();
        for filter in filters {
            let query = filter_to_sql(filter, now, hidden)
                .map_err(|e| RelayError::UnsupportedFilter(e.to_string()))?;
            let Some(query) = query else { continue };
            let mut stmt = self.conn.prepare_cached(&query.sql)?;
            let mut rows = stmt.query(params_from_iter(query.params.iter()))?;
            while let Some(row) = rows.next()? {
                let seq: i64 = row.get(0)?;
                if !seen.insert(seq) {
                    continue;
                }
                let id: Vec<u8> = row.get(1)?;
                let created_at: i64 = row.get(2)?;
                let id = EventId::from_slice(&id)
                    .map_err(|e| RelayError::CorruptEvent(format!("row {seq}: {e}")))?;
                out.push(StoredEvent {
                    id,
                    created_at: Timestamp::from_secs(u64::try_from(created_at).unwrap_or(0)),
                    json: row.get(3)?,
                });
            }
        }
        if filters.len() > 1 {
            out.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
        }
        Ok(out)
    }

    /// Deletes what the relay stores but no longer takes from a client: room metadata (39000-39003) not
    /// signed by `relay`, and events that name more than one room (`h`). Stored before those rules, they
    /// would go on being served: a forged room name or member list, a stranger's message in a closed or
    /// private room. Without a relay key (no rooms) the metadata is left to
    /// [`retire_rooms`](Self::retire_rooms), which removes it and remembers its rooms. Returns how many.
    pub fn purge_refused(&mut self, relay: Option<&PublicKey>) -> Result<usize, RelayError> {
        let tx = self.conn.transaction()?;
        let mut seqs: Vec<i64> = Vec::new();
        {
            let mut metadata =
                tx.prepare("SELECT seq, pubkey FROM events WHERE kind BETWEEN ?1 AND ?2")?;
            let rows = metadata.query_map(
                params![
                    i64::from(crate::rooms::GROUP_METADATA),
                    i64::from(crate::rooms::GROUP_ROLES)
                ],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?)),
            )?;
            for row in rows {
                let (seq, pubkey) = row?;
                if relay.is_some_and(|k| k.as_bytes().as_slice() != pubkey.as_slice()) {
                    seqs.push(seq);
                }
            }
            let mut rooms = tx.prepare(
                "SELECT event_seq FROM tags WHERE name = 'h' GROUP BY event_seq HAVING COUNT(*) > 1",
            )?;
            for seq in rooms.query_map([], |r| r.get::<_, i64>(0))? {
                seqs.push(seq?);
            }
        }
        seqs.sort_unstable();
        seqs.dedup();
        for seq in &seqs {
            delete_event(&tx, *seq)?;
        }
        tx.commit()?;
        Ok(seqs.len())
    }

    /// Retires the rooms whose relay-signed metadata is stored but that are not in `known` (the rooms the
    /// relay knows as it starts: configured, and created by moderation): their metadata is deleted (it would
    /// still show the room to clients) and their ids are kept, so that their events, which are kept, can be
    /// read by nobody until the room is known again. A room in `known` is no longer retired.
    pub fn retire_rooms(&mut self, known: &[String]) -> Result<Retired, RelayError> {
        let known: HashSet<&str> = known.iter().map(String::as_str).collect();
        let tx = self.conn.transaction()?;
        let mut retired = Retired::default();
        {
            let mut metadata =
                tx.prepare("SELECT seq, address FROM events WHERE kind BETWEEN ?1 AND ?2")?;
            let rows = metadata.query_map(
                params![
                    i64::from(crate::rooms::GROUP_METADATA),
                    i64::from(crate::rooms::GROUP_ROLES)
                ],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Option<String>>(1)?)),
            )?;
            let mut gone = Vec::new();
            for row in rows {
                let (seq, room) = row?;
                let room = room.unwrap_or_default();
                if !known.contains(room.as_str()) {
                    gone.push((seq, room));
                }
            }
            drop(metadata);
            let mut was_retired = tx.prepare("SELECT 1 FROM retired_rooms WHERE id = ?1")?;
            let mut count = tx.prepare(
                "SELECT COUNT(DISTINCT event_seq) FROM tags WHERE name = 'h' AND value = ?1",
            )?;
            for (seq, room) in gone {
                delete_event(&tx, seq)?;
                retired.metadata += 1;
                if !retired.now.contains(&room) && !was_retired.exists([&room])? {
                    retired.events += count.query_row([&room], |r| r.get::<_, i64>(0))? as usize;
                    retired.now.push(room);
                }
            }
        }
        for room in &retired.now {
            tx.execute(
                "INSERT OR IGNORE INTO retired_rooms (id) VALUES (?1)",
                [room],
            )?;
        }
        for room in &known {
            tx.execute("DELETE FROM retired_rooms WHERE id = ?1", [room])?;
        }
        retired.all = tx
            .prepare("SELECT id FROM retired_rooms ORDER BY id")?
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        tx.commit()?;
        retired.now.sort();
        Ok(retired)
    }

    /// Deletes events expired at `now` (their NIP-40 expiration is `now` or earlier); returns how many.
    pub fn purge_expired(&mut self, now: Timestamp) -> Result<usize, RelayError> {
        let now = ts_to_sql(now);
        let tx = self.conn.transaction()?;
        tx.execute(
            "DELETE FROM tags WHERE event_seq IN (SELECT seq FROM events WHERE expires_at <= ?1)",
            [now],
        )?;
        let n = tx.execute("DELETE FROM events WHERE expires_at <= ?1", [now])?;
        tx.commit()?;
        Ok(n)
    }

    /// Deletes the events `policy` says are too old at `now` (at most [`MAX_PRUNED_PER_PASS`], oldest
    /// first), keeping open tiny agent questions; returns how many.
    pub fn prune(&mut self, now: Timestamp, policy: &RetentionPolicy) -> Result<usize, RelayError> {
        self.prune_some(now, policy).map(|p| p.deleted)
    }

    /// One retention pass, as [`EventStore::prune`], saying whether it looked at all it may (so more may
    /// be left: kept events among the oldest count against the pass without being deleted).
    pub fn prune_some(
        &mut self,
        now: Timestamp,
        policy: &RetentionPolicy,
    ) -> Result<Pruned, RelayError> {
        let classes = [KindClass::Agent, KindClass::Rooms, KindClass::Other];
        let Some(oldest_cut) = classes
            .iter()
            .filter_map(|c| policy.prune_before(*c, now))
            .min()
        else {
            return Ok(Pruned::default());
        };
        let tx = self.conn.transaction()?;
        let candidates: Vec<(i64, u16, i64, Vec<u8>)> = tx
            .prepare_cached(
                "SELECT seq, kind, created_at, id FROM events WHERE created_at < ?1
                 ORDER BY created_at LIMIT ?2",
            )?
            .query_map(
                params![ts_to_sql(oldest_cut), MAX_PRUNED_PER_PASS as i64],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
            )?
            .collect::<Result<_, _>>()?;
        let more = candidates.len() >= MAX_PRUNED_PER_PASS;
        let mut n = 0;
        for (seq, kind, created_at, id) in candidates {
            let class = retention::class_of(Kind::from_u16(kind));
            let Some(cut) = policy.prune_before(class, now) else {
                continue;
            };
            if created_at >= ts_to_sql(cut) {
                continue;
            }
            let open_question = kind == 9
                && tx
                    .prepare_cached(
                        "SELECT 1 FROM questions q WHERE q.id = ?1
                         AND NOT EXISTS (SELECT 1 FROM settlements s WHERE s.question = q.id)
                         AND (q.expires_at IS NULL OR q.expires_at > ?2)",
                    )?
                    .exists(params![id, ts_to_sql(now)])?;
            if open_question {
                continue;
            }
            delete_event(&tx, seq)?;
            n += 1;
        }
        tx.commit()?;
        Ok(Pruned { deleted: n, more })
    }

    /// The number of stored events, expired or not.
    pub fn count(&self) -> Result<u64, RelayError> {
        let n: i64 = self
            .conn
            .query_row("SELECT count(*) FROM events", [], |row| row.get(0))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// SQLite's plan for the query of `filter`, one line per step (for tests of index use).
    #[doc(hidden)]
    pub fn explain(&self, filter: &Filter) -> Result<Vec<String>, RelayError> {
        let Some(query) = filter_to_sql(filter, Timestamp::from_secs(0), &[])
            .map_err(|e| RelayError::UnsupportedFilter(e.to_string()))?
        else {
            return Ok(Vec::new());
        };
        let mut stmt = self
            .conn
            .prepare(&format!("EXPLAIN QUERY PLAN {}", query.sql))?;
        let rows = stmt.query_map(params_from_iter(query.params.iter()), |row| row.get(3))?;
        Ok(rows.collect::<Result<Vec<String>, _>>()?)
    }
}

/// The canonical JSON of an event, as stored and sent.
pub(crate) fn event_json(event: &Event) -> Result<String, RelayError> {
    event
        .try_as_json()
        .map_err(|e| RelayError::Serialise(e.to_string()))
}

/// The replaceable address of an event: `''` for replaceable kinds, the first value of the first
/// `d` tag (or `''`) for addressable kinds, `None` for everything else.
fn address(event: &Event, retention: Retention) -> Option<String> {
    match retention {
        Retention::Replaceable => Some(String::new()),
        Retention::Addressable => Some(
            event
                .tags
                .iter()
                .find(|t| t.kind() == "d")
                .and_then(|t| t.content())
                .unwrap_or_default()
                .to_owned(),
        ),
        Retention::Regular | Retention::Ephemeral => None,
    }
}

fn insert_in(
    tx: &Connection,
    event: &Event,
    json: &str,
    now: Timestamp,
    cards: &CardCache,
) -> Result<InsertOutcome, RelayError> {
    let retention = Retention::of(event.kind);
    if !retention.is_stored() {
        return Ok(InsertOutcome::NotStored);
    }
    let id = event.id.as_bytes().as_slice();
    if tx
        .prepare_cached("SELECT 1 FROM events WHERE id = ?1")?
        .exists([id])?
    {
        return Ok(InsertOutcome::Duplicate);
    }
    let pubkey = event.pubkey.as_bytes().as_slice();
    if tx
        .prepare_cached("SELECT 1 FROM deletions WHERE id = ?1 AND author = ?2")?
        .exists(params![id, pubkey])?
    {
        return Ok(InsertOutcome::Deleted);
    }
    for question in tinyagent::named_requests(event) {
        if let Err(refusal) = settle(tx, question, event, now, cards)? {
            return Ok(InsertOutcome::Refused(refusal));
        }
    }
    let kind = i64::from(event.kind.as_u16());
    let created_at = ts_to_sql(event.created_at);
    let address = address(event, retention);
    let mut replaced = false;
    if let Some(address) = &address {
        let existing: Option<(i64, i64, Vec<u8>)> = tx
            .prepare_cached(
                "SELECT seq, created_at, id FROM events WHERE pubkey = ?1 AND kind = ?2 AND address = ?3",
            )?
            .query_row(params![pubkey, kind, address], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?))
            })
            .optional()?;
        if let Some((seq, old_created_at, old_id)) = existing {
            // NIP-01: newest created_at wins; on a tie the lowest id is kept.
            let newer = created_at > old_created_at
                || (created_at == old_created_at && id < old_id.as_slice());
            if !newer {
                return Ok(InsertOutcome::RejectedOlder);
            }
            delete_event(tx, seq)?;
            replaced = true;
        }
    }
    let expires_at = event.tags.expiration().map(ts_to_sql);
    tx.prepare_cached(
        "INSERT INTO events (id, pubkey, created_at, kind, address, expires_at, json)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        id, pubkey, created_at, kind, address, expires_at, json
    ])?;
    let seq = tx.last_insert_rowid();
    if tinyagent::is_question(event) {
        tx.prepare_cached("INSERT OR IGNORE INTO questions (id, expires_at) VALUES (?1, ?2)")?
            .execute(params![id, expires_at])?;
    }
    if event.kind == Kind::EventDeletion {
        delete_by_request(tx, event)?;
    }
    let mut tag_stmt = tx.prepare_cached(
        "INSERT OR IGNORE INTO tags (name, value, event_seq) VALUES (?1, ?2, ?3)",
    )?;
    for tag in event.tags.iter() {
        if let (Some(letter), Some(value)) = (tag.single_letter_tag(), tag.content()) {
            tag_stmt.execute(params![letter.as_str(), value, seq])?;
        }
    }
    Ok(if replaced {
        InsertOutcome::Replaced
    } else {
        InsertOutcome::Inserted
    })
}

/// A reply naming `question` as its root or parent: when that is a stored native question card, the reply
/// must answer it validly and first, and then settles it (in the same transaction as the reply's insert).
/// Replies to anything else are plain comments.
fn settle(
    tx: &Connection,
    question: EventId,
    answer: &Event,
    now: Timestamp,
    cards: &CardCache,
) -> Result<Result<(), AnswerRefusal>, RelayError> {
    let key = question.as_bytes().as_slice();
    let cached = match cards.get(&question) {
        Some(c)
            if tx
                .prepare_cached("SELECT 1 FROM events WHERE id = ?1")?
                .exists([key])? =>
        {
            Some(c)
        }
        _ => None,
    };
    let parsed = match cached {
        Some(c) => c,
        None => {
            let json: Option<String> = tx
                .prepare_cached("SELECT json FROM events WHERE id = ?1 AND kind = 9")?
                .query_row([key], |row| row.get(0))
                .optional()?;
            let Some(request) = json.and_then(|j| Event::from_json(j).ok()) else {
                let expired: Option<Option<i64>> = tx
                    .prepare_cached("SELECT expires_at FROM questions WHERE id = ?1")?
                    .query_row([key], |row| row.get(0))
                    .optional()?;
                return Ok(match expired {
                    // A question that is gone takes no answer any more: it expired and was purged, or it
                    // was deleted.
                    Some(Some(at)) if at <= ts_to_sql(now) => Err(AnswerRefusal::Expired(
                        Timestamp::from_secs(at.max(0) as u64),
                    )),
                    Some(_) => Err(AnswerRefusal::Deleted),
                    None => Ok(()),
                });
            };
            if !tinyagent::is_question(&request) {
                return Ok(Ok(()));
            }
            let Ok(card) = tinyagent::question(&request) else {
                // Stored before the relay judged questions: a plain message, as its author's client meant
                // nothing the relay can hold it to.
                return Ok(Ok(()));
            };
            std::sync::Arc::new((request, card))
        }
    };
    let (request, card) = &*parsed;
    if let Err(refusal) = tinyagent::check_answer(request, card, answer, now) {
        return Ok(Err(refusal));
    }
    // The first valid answer takes the row; a later one finds it taken.
    let taken = tx
        .prepare_cached("INSERT OR IGNORE INTO settlements (question, answer) VALUES (?1, ?2)")?
        .execute(params![key, answer.id.as_bytes().as_slice()])?;
    if taken == 0 {
        let by: Vec<u8> = tx
            .prepare_cached("SELECT answer FROM settlements WHERE question = ?1")?
            .query_row([key], |row| row.get(0))?;
        let by = EventId::from_slice(&by).map_err(|e| RelayError::Internal(e.to_string()))?;
        return Ok(Err(AnswerRefusal::Settled(by)));
    }
    Ok(Ok(()))
}

/// NIP-09: deletes what a kind 5 request names (`e`: event ids, `a`: `kind:pubkey:d` addresses up to the
/// request's `created_at`), only the request's own author's events and never deletion requests, and
/// remembers the ids so they are not stored again.
fn delete_by_request(tx: &Connection, request: &Event) -> Result<(), RelayError> {
    let author = request.pubkey.as_bytes().as_slice();
    for tag in request.tags.iter().map(|t| t.as_slice()) {
        match (tag.first().map(String::as_str), tag.get(1)) {
            (Some("e"), Some(value)) => {
                let Ok(id) = EventId::from_hex(value) else {
                    continue;
                };
                let id = id.as_bytes().as_slice();
                tx.prepare_cached("INSERT OR IGNORE INTO deletions (id, author) VALUES (?1, ?2)")?
                    .execute(params![id, author])?;
                let seq: Option<i64> = tx
                    .prepare_cached(
                        "SELECT seq FROM events WHERE id = ?1 AND pubkey = ?2 AND kind != 5",
                    )?
                    .query_row(params![id, author], |row| row.get(0))
                    .optional()?;
                if let Some(seq) = seq {
                    delete_event(tx, seq)?;
                }
            }
            (Some("a"), Some(value)) => {
                let mut parts = value.splitn(3, ':');
                let (Some(kind), Some(pubkey), Some(d)) =
                    (parts.next(), parts.next(), parts.next())
                else {
                    continue;
                };
                let (Ok(kind), Ok(pubkey)) = (kind.parse::<u16>(), PublicKey::from_hex(pubkey))
                else {
                    continue;
                };
                if pubkey != request.pubkey || kind == 5 {
                    continue;
                }
                let seqs: Vec<i64> = tx
                    .prepare_cached(
                        "SELECT seq FROM events WHERE pubkey = ?1 AND kind = ?2 AND address = ?3
                         AND created_at <= ?4",
                    )?
                    .query_map(
                        params![author, i64::from(kind), d, ts_to_sql(request.created_at)],
                        |row| row.get(0),
                    )?
                    .collect::<Result<_, _>>()?;
                for seq in seqs {
                    delete_event(tx, seq)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn delete_event(tx: &Connection, seq: i64) -> Result<(), RelayError> {
    tx.prepare_cached("DELETE FROM tags WHERE event_seq = ?1")?
        .execute([seq])?;
    tx.prepare_cached("DELETE FROM events WHERE seq = ?1")?
        .execute([seq])?;
    Ok(())
}
