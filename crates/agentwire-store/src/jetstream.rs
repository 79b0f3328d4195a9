//! The journal on NATS JetStream: one journal that several agentwire instances share, replicated by the
//! NATS cluster underneath. Five key-value buckets (each a JetStream stream), named after a prefix:
//!
//! | bucket              | key                          | value                                              |
//! | ------------------- | ---------------------------- | -------------------------------------------------- |
//! | `<prefix>_TURNS`    | the request id               | the turn: its record, then its one outcome        |
//! | `<prefix>_MEMBERS`  | conversation `.` request id  | the request id: a conversation's turns, in order  |
//! | `<prefix>_RUNNING`  | owner `.` request id         | nothing: a hint that the owner runs the turn      |
//! | `<prefix>_META`     | the conversation             | its protocol state                                 |
//! | `<prefix>_LEASES`   | the request id               | nothing: the turn's lease, renewed while it runs  |
//! |                     | `i.` instance name           | its process's nonce: the name is held (`instance`) |
//! | `<prefix>_CLAIMS`   | the conversation             | the request id of the turn it runs                 |
//!
//! The leases bucket keeps an entry for one lease: an instance renews its running turns' every third of a
//! lease, so a turn whose key is gone lost its instance, and another instance may end it
//! ([`Journal::abandoned`]). An ended turn's lease is left to age out: a turn with an outcome no longer runs.
//!
//! A turn is accepted by *creating* its key (the server refuses a second create, so of any number of
//! accepts of one request id, across instances, exactly one is new), and ended by *updating* it at the
//! revision it was read at with no outcome (so the first outcome wins; a second finds one and is
//! `AlreadyEnded`). The turn's record is the truth; the other buckets are written around it so that a crash
//! between two writes leaves only hints that readers check against it: a conversation's member is written
//! before its turn (a member whose turn is missing is skipped), the running hint before the turn too (one
//! whose turn is missing, ended or another owner's is skipped and dropped), and both keyed so that a
//! resend writes the same key again. A conversation's order is the members' stream order, which is the order
//! of their first writes.
//!
//! A conversation runs one turn at a time across instances ([`Journal::claim`]): its claim names the turn
//! it runs and moves to another turn only by a write at the revision that named a turn that no longer
//! runs (its record has an outcome, or was never written and its lease is gone, seen so twice a grace
//! apart). A turn's lease is written before its claim (a turn carried with its conversation's meta writes
//! it beside the claim, below), so an instance that reads a claim whose turn is still being written finds
//! the lease, or finds it when it looks again.
//!
//! A turn carried with its conversation's meta ([`Journal::claim_accept`] of a turn whose
//! `conversation_meta` is set, whose lease this instance does not renew yet: a new conversation's first
//! turn, and a turn that changes its conversation's meta, which the journal cannot tell apart) creates the
//! claim, the hints and the meta beside the lease and the first reads ([`JetStreamJournal::speculate`]):
//! for a new conversation, two round trips to its ack, that one and the record's create. Its lease may then
//! land just after its claim, so a claim whose turn has neither a record nor a lease is taken for dead only
//! when seen so twice [`CLAIM_GRACE`] apart, and the speculated claim stands only if answered within
//! [`SPECULATION_BOUND`] (or, after the lease is written again, written again at its revision). Of an
//! existing conversation the creates are refused and the turn goes on as any other, its hints written
//! already: a claim that is not taken drops the running hint and purges the member it created. Another
//! claimed turn's way to its ack ([`Journal::claim_accept`]) is three round trips one after another,
//! each a write with what can go beside it: the claim's read, the turn record's read and the lease's write
//! together; the claim's write with the hints (member, running hint, and the meta of a conversation that
//! has none yet, created only if still absent); the record's create. (A claim and an accept called apart
//! take four: the hints then go after the claim.) Its outcome is one: the update at the revision its
//! accept wrote, which this instance remembers ([`known`]); the running hint is purged after.
//!
//! Both conditions are the server's expected last subject sequence, not a `Nats-Msg-Id`: a message id
//! dedupes only within the stream's duplicate window (two minutes by default), so a resend after it would
//! be a second turn, while a subject's sequence is checked however late the resend comes.
//!
//! Keys are the ids hex-encoded, which fits the buckets' key alphabet whatever the ids hold. Ended turns
//! past their retention are removed by [`prune`].

use crate::{
    Accepted, Claim, ClaimAccepted, ConversationTurn, ConversationView, Finish, Journal, NewTurn,
    StoreError, StoredTurn,
};

mod instance;
mod known;
mod prune;
mod remove;
use agentwire_core::{ConversationId, Outcome, RequestId};
use async_nats::jetstream::stream::{DirectGetErrorKind, LastRawMessageErrorKind};
use async_nats::jetstream::{self, kv};
use futures_util::future::BoxFuture;
pub use instance::{HoldError, INSTANCE_TAKEOVER_WAIT_LEASES};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The most times an outcome is tried against a turn another writer changed meanwhile: a turn changes
/// once (its outcome), so a second conflict means something else is wrong.
const MAX_FINISH_CONFLICTS: usize = 8;
/// How long one JetStream request may take: a replicated write on a healthy cluster takes milliseconds,
/// and a journal that cannot answer in this long is treated as one that cannot write.
pub const JETSTREAM_TIMEOUT: Duration = Duration::from_secs(10);
/// The most times a claim is tried against a conversation whose claim other instances move meanwhile:
/// each conflict means another turn took it, and the next read finds that turn running.
const MAX_CLAIM_CONFLICTS: usize = 8;
/// How long a write the leader has refused ours for is given to become readable: it is being committed,
/// which takes a replication round trip.
const SEEN_WRITE_WAIT: Duration = Duration::from_secs(2);
/// How long a prune pass waits for this instance's hint purges under way: each is one replicated write.
const DROPPING_WAIT: Duration = Duration::from_secs(2);
/// How often it looks.
const DROPPING_POLL: Duration = Duration::from_millis(5);
/// How long a claim created beside its turn's lease ([`JetStreamJournal::speculate`]) may take to be
/// answered, with the lease, and stand without a second write: a claim read elsewhere before its lease is
/// in is taken for dead only when seen so again [`CLAIM_GRACE`] later, by which time the lease of a claim
/// answered within this is in. A healthy cluster answers in milliseconds.
const SPECULATION_BOUND: Duration = Duration::from_millis(250);
/// How long a claim whose turn has neither a record nor a lease is left before it is taken for dead: more
/// than [`SPECULATION_BOUND`], with room for two processes' clocks to run at slightly different rates.
const CLAIM_GRACE: Duration = Duration::from_millis(500);
// What the speculation's safety rests on: a reader's second look comes after the lease of a claim that
// stood without a second write, with as much again to spare for clocks.
const _: () = assert!(CLAIM_GRACE.as_millis() >= 2 * SPECULATION_BOUND.as_millis());
/// How long opening waits for new buckets to take writes: a replicated bucket just made elects its
/// leader within seconds.
pub const OPEN_READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How often opening tries a bucket that does not take writes yet.
const OPEN_READY_POLL: Duration = Duration::from_millis(100);

/// The most turns a conversation read returns: past it the oldest are left out (the history an agent
/// gets is far smaller, [`Journal::recent_turns`]).
pub const MAX_CONVERSATION_TURNS: usize = 10_000;

/// Where and how the buckets are made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JetStreamConfig {
    /// The buckets' prefix (`AGENTWIRE`): letters, digits, `-` and `_`.
    pub prefix: String,
    /// Replicas of each bucket: 1 for one server, 3 for a three-node cluster.
    pub replicas: usize,
    /// How long a running turn's instance may be silent before another instance ends the turn: its lease
    /// is renewed every third of it.
    pub lease: Duration,
}

/// The lease of a turn when none is configured: a few seconds of silence is a dead instance, and a
/// renewal every 3 s is a small load.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);

/// The journal on JetStream. Cheap to share.
pub struct JetStreamJournal {
    js: jetstream::Context,
    turns: kv::Store,
    members: kv::Store,
    running: kv::Store,
    meta: kv::Store,
    /// One key a running turn: present while its instance renews it (the bucket's entries age out after a
    /// lease).
    leases: kv::Store,
    /// One key a conversation: the turn it runs.
    claims: kv::Store,
    lease: Duration,
    /// The renewals of this instance's running turns.
    renewing: std::sync::Mutex<std::collections::HashMap<String, tokio::task::AbortHandle>>,
    /// The instance name this process holds, once it holds one.
    held: std::sync::Mutex<Option<instance::Held>>,
    /// Set once the journal is halted (or closed, or has lost its instance's name): nothing writes after.
    halted: std::sync::Arc<AtomicBool>,
    /// Where the next prune pass reads the turns bucket's stream from ([`prune`]).
    prune_from: std::sync::Mutex<u64>,
    /// What this instance knows of its own turns without reading them again ([`known`]).
    known: known::Known,
    /// How many ended turns' hints are being purged now ([`JetStreamJournal::drop_hints`]).
    dropping: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// Tests only: the next speculation is taken as answered late ([`SPECULATION_BOUND`]), and this runs
    /// between its answer and the claim's second write.
    #[cfg(test)]
    late: std::sync::Mutex<Option<BoxFuture<'static, ()>>>,
}

/// How many of the turns bucket's messages [`Journal::latest`] reads at most per turn it returns: a turn
/// has two records (accepted, ended), so twice is enough, and the rest is room for records of other
/// kinds (a resend's rewrite) without reading the whole history.
const LATEST_SCAN_FACTOR: usize = 4;

/// A turn as its bucket holds it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct TurnDoc {
    request_id: String,
    conversation_id: String,
    protocol: String,
    owner: String,
    /// Empty in turns journaled before turns named their agent.
    #[serde(default)]
    agent: String,
    route: serde_json::Value,
    input: serde_json::Value,
    accepted_at: u64,
    #[serde(default)]
    outcome: Option<Outcome>,
    #[serde(default)]
    wire: Option<String>,
    #[serde(default)]
    transcript: Option<serde_json::Value>,
    #[serde(default)]
    tool_calls: u64,
    #[serde(default)]
    ended_at: Option<u64>,
}

impl TurnDoc {
    fn stored(&self) -> Result<StoredTurn, StoreError> {
        let request_id = RequestId::new(self.request_id.clone())
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let conversation_id = ConversationId::new(self.conversation_id.clone())
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let input = crate::model::decode_input(self.input.clone(), &request_id, &conversation_id)?;
        Ok(StoredTurn {
            request_id,
            conversation_id,
            protocol: self.protocol.clone(),
            owner: self.owner.clone(),
            agent: self.agent.clone(),
            route: self.route.clone(),
            input,
            accepted_at: self.accepted_at,
            outcome: self.outcome.clone(),
            wire: self.wire.clone(),
            tool_calls: self.tool_calls,
            ended_at: self.ended_at,
        })
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct MetaDoc {
    protocol: String,
    meta: serde_json::Value,
    updated_at: u64,
}

/// What a conversation's claim holder is doing, as [`JetStreamJournal::holder_runs`] finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holder {
    /// Its record has no outcome, or its lease lives.
    Runs,
    /// Its record has an outcome.
    Ended,
    /// Neither a record nor a lease.
    Unwritten,
}

/// What a turn carried with its conversation's meta created beside its claim's first reads
/// ([`JetStreamJournal::speculate`]): each key's new revision, none where the key was there already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Speculated {
    /// The conversation's claim.
    claim: Option<u64>,
    /// The turn's member of the conversation.
    member: Option<u64>,
    /// The conversation's meta.
    meta: Option<u64>,
}

/// What of a turn's hints its claim wrote beside its own write ([`Journal::claim_accept`]), so its accept
/// writes the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hinted {
    /// None: the accept writes them all.
    No,
    /// The member and the running hint, not the meta (the turn carries none, or it was not created).
    WithoutMeta,
    /// The member, the running hint and the conversation's meta.
    WithMeta,
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The key a request or conversation id is stored under in a bucket: its bytes in hex, since an id may hold
/// characters a NATS subject does not take. Public for operators' tools and tests that reach a bucket.
pub fn bucket_key(id: &str) -> String {
    id.bytes().map(|b| format!("{b:02x}")).collect()
}

/// A write the journal could not make: the cluster is unreachable, has no quorum, or timed out. Worth
/// retrying (the engine holds outcomes back meanwhile).
fn unwritable(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::jetstream(e)
}

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

impl JetStreamJournal {
    /// Opens the journal over `client`, making its buckets where they are missing.
    pub async fn open(
        client: async_nats::Client,
        config: &JetStreamConfig,
    ) -> Result<JetStreamJournal, StoreError> {
        let fit = !config.prefix.is_empty()
            && config
                .prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !fit {
            return Err(StoreError::Corrupt(format!(
                "journal prefix {:?}: letters, digits, - and _",
                config.prefix
            )));
        }
        let mut js = jetstream::new(client);
        js.set_timeout(JETSTREAM_TIMEOUT);
        let bucket = |name: &str| kv::Config {
            bucket: format!("{}_{name}", config.prefix),
            history: 1,
            num_replicas: config.replicas.max(1),
            storage: jetstream::stream::StorageType::File,
            ..Default::default()
        };
        let open = |name: &'static str| {
            let js = js.clone();
            let config = bucket(name);
            async move {
                match js.get_key_value(&config.bucket).await {
                    Ok(kv) => Ok(kv),
                    Err(_) => js.create_key_value(config).await.map_err(unwritable),
                }
            }
        };
        let turns = open("TURNS").await?;
        let members = open("MEMBERS").await?;
        let running = open("RUNNING").await?;
        let meta = open("META").await?;
        let claims = open("CLAIMS").await?;
        let lease = config.lease.max(Duration::from_secs(1));
        let leases_config = kv::Config {
            max_age: lease,
            ..bucket("LEASES")
        };
        let leases = match js.get_key_value(&leases_config.bucket).await {
            Ok(kv) => kv,
            Err(_) => js
                .create_key_value(leases_config)
                .await
                .map_err(unwritable)?,
        };
        for bucket in [&turns, &members, &running, &meta, &leases, &claims] {
            takes_writes(bucket).await?;
        }
        // The bucket's age limit is the lease in force, whichever instance made it: renewing on another
        // would let leases (and instance names) age out between two renewals.
        let lease = match leases.status().await.map(|s| s.max_age()) {
            Ok(age) if !age.is_zero() => {
                if age != lease {
                    tracing::warn!(configured = ?lease, bucket = ?age, "the journal's leases bucket has another lease; using the bucket's");
                }
                age
            }
            _ => lease,
        };
        Ok(JetStreamJournal {
            js,
            turns,
            members,
            running,
            meta,
            leases,
            claims,
            lease,
            renewing: Default::default(),
            held: Default::default(),
            halted: Default::default(),
            prune_from: Default::default(),
            known: Default::default(),
            dropping: Default::default(),
            #[cfg(test)]
            late: Default::default(),
        })
    }

    /// Writes `value` under `key` of `bucket` only if the key's last revision is `revision` (0: the key
    /// has none): `true` when this write made it, `false` when the key had moved on. Decided by the server
    /// alone, never by a read, which a lagging replica could answer; only retention removes a turn or a
    /// member ([`prune`]), so a refused create means it is there.
    async fn write_at(
        &self,
        bucket: &kv::Store,
        key: &str,
        value: Vec<u8>,
        revision: u64,
    ) -> Result<bool, StoreError> {
        Ok(self.put_at(bucket, key, value, revision).await?.is_some())
    }

    /// Like [`write_at`](Self::write_at), giving the key's new revision when this write made it.
    async fn put_at(
        &self,
        bucket: &kv::Store,
        key: &str,
        value: Vec<u8>,
        revision: u64,
    ) -> Result<Option<u64>, StoreError> {
        self.writable()?;
        put_at(&self.js, bucket, key, value, revision).await
    }

    /// Renews turn `id`'s lease every third of a lease until it ends (or the journal halts). Once: a turn
    /// renewed already goes on as it is.
    fn renew(&self, id: &str) {
        if self.renewing(id) {
            return;
        }
        let (leases, every, k) = (self.leases.clone(), self.lease / 3, bucket_key(id));
        let halted = self.halted.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                tick.tick().await;
                if halted.load(Ordering::SeqCst) {
                    return;
                }
                if let Err(e) = leases.put(&k, Vec::new().into()).await {
                    tracing::warn!(error = %e, "could not renew a turn's lease");
                }
            }
        });
        lock(&self.renewing).insert(id.to_string(), task.abort_handle());
    }

    fn renewing(&self, id: &str) -> bool {
        lock(&self.renewing).contains_key(id)
    }

    /// Stops renewing turn `id`'s lease: it ages out within a lease.
    fn stop_renewing(&self, id: &str) {
        if let Some(r) = lock(&self.renewing).remove(id) {
            r.abort();
        }
    }

    /// Purges ended turn `id`'s running hint, without waiting: its outcome is journaled already, and a
    /// hint left behind (its purge failed, or the process stopped first) is skipped by its reader. So the
    /// outcome goes out a round trip sooner. Its lease is left to age out within a lease, one write less
    /// a turn: a turn with an outcome runs whatever its lease says.
    fn drop_hints(&self, id: &str, owner: &str) {
        let (running, halted, dropping) = (
            self.running.clone(),
            self.halted.clone(),
            self.dropping.clone(),
        );
        let hint = format!("{}.{}", bucket_key(owner), bucket_key(id));
        dropping.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            if !halted.load(Ordering::SeqCst) {
                if let Err(e) = running.purge(hint).await {
                    tracing::debug!(error = %e, "a running hint stays behind");
                }
            }
            dropping.fetch_sub(1, Ordering::SeqCst);
        });
    }

    /// Waits (up to [`DROPPING_WAIT`]) until no hint purge of this instance is under way: a prune pass
    /// that removed a turn's hint before its purge wrote the purge's marker would leave the marker behind.
    async fn hints_dropped(&self) {
        let deadline = tokio::time::Instant::now() + DROPPING_WAIT;
        while self.dropping.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(DROPPING_POLL).await;
        }
    }

    fn writable(&self) -> Result<(), StoreError> {
        match self.halted.load(Ordering::SeqCst) {
            true => Err(StoreError::WriterGone),
            false => Ok(()),
        }
    }

    async fn turn_entry(&self, id: &str) -> Result<Option<(TurnDoc, u64)>, StoreError> {
        let Some((value, revision)) = leader_get(&self.turns, &bucket_key(id)).await? else {
            return Ok(None);
        };
        let doc: TurnDoc = serde_json::from_slice(&value).map_err(corrupt)?;
        Ok(Some((doc, revision)))
    }

    /// [`Journal::latest`]: the turns bucket's stream read backwards from its last message (a turn's
    /// record is written when it is accepted and again when it ends), each turn once, its newest record,
    /// until `limit` turns or [`LATEST_SCAN_FACTOR`] times as many messages; then ordered by acceptance.
    /// So these are the turns written to most lately: a turn accepted long ago that ended just now is
    /// among them, one accepted earlier whose records lie before the scan is not.
    async fn latest_turns(&self, limit: usize) -> Result<Vec<StoredTurn>, StoreError> {
        let last = self
            .turns
            .stream
            .get_info()
            .await
            .map_err(unwritable)?
            .state
            .last_sequence;
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        let floor = last.saturating_sub((limit * LATEST_SCAN_FACTOR) as u64);
        let mut seq = last;
        while seq > floor && out.len() < limit {
            let got = self
                .turns
                .stream
                .raw_message_builder()
                .sequence(seq)
                .send()
                .await;
            seq -= 1;
            let m = match got {
                Ok(m) => m,
                // Purged or deleted from the stream: not a turn any more.
                Err(e) if matches!(e.kind(), LastRawMessageErrorKind::NoMessageFound) => continue,
                Err(e) => return Err(unwritable(e)),
            };
            let removed = m
                .headers
                .get("KV-Operation")
                .is_some_and(|op| matches!(op.as_str(), "DEL" | "PURGE"));
            // The bucket's readiness marker (`takes_writes`) is no turn: a turn's key is hex.
            let marker = m.subject.as_str() == format!("{}ready", self.turns.prefix);
            if !seen.insert(m.subject.to_string()) || removed || marker {
                continue;
            }
            // A corrupt record is left out of a list (and is a typed error where it is read by id).
            let stored = serde_json::from_slice::<TurnDoc>(&m.payload)
                .map_err(corrupt)
                .and_then(|doc| doc.stored());
            match stored {
                Ok(t) => out.push(t),
                Err(e) => tracing::warn!(error = %e, "a turn record left out of the latest turns"),
            }
        }
        // Read by last write (an ending rewrites a turn's record); listed by acceptance.
        out.sort_by_key(|t| std::cmp::Reverse(t.accepted_at));
        Ok(out)
    }

    /// [`Journal::accept`]. A lease that this instance's claim began renewing goes on only for a turn it
    /// made here: a resend, or a write that failed, stops it.
    async fn accept_turn(&self, turn: NewTurn, hinted: Hinted) -> Result<Accepted, StoreError> {
        let id = turn.request_id.to_string();
        let accepted = self.accept_new_turn(turn, hinted).await;
        if !matches!(accepted, Ok(Accepted::New)) {
            self.stop_renewing(&id);
        }
        accepted
    }

    async fn accept_new_turn(&self, turn: NewTurn, hinted: Hinted) -> Result<Accepted, StoreError> {
        let id = turn.request_id.to_string();
        // A turn whose claim read its record a moment ago, in the claim's own round trip, and found none
        // is not read again: the create below decides, and an accept that raced it comes back from there.
        if !self.known.take_unwritten(&id) {
            if let Some((doc, _)) = self.turn_entry(&id).await? {
                return Ok(Accepted::Existing(Box::new(doc.stored()?)));
            }
        }
        self.writable()?;
        let conv = turn.conversation_id.to_string();
        // Hints first, each under a key a resend writes again: the turn's record decides. They are written
        // at once (one round trip's wait), and the conversation's meta with them, so that a failed write
        // leaves no record behind; the record only once all are in. (A resend comes back as `Existing`
        // from the read above or the claim's, so only accepts racing for one request id each write the
        // meta they carry, which is the same meta.) A claim that carried the turn wrote them with its own
        // write ([`Journal::claim_accept`]); what it left out (the meta, when it could not create it) is
        // written here.
        let meta = async {
            match (&turn.conversation_meta, hinted) {
                (Some(m), Hinted::No | Hinted::WithoutMeta) => {
                    self.put_meta(&conv, &turn.protocol, m.clone(), turn.accepted_at)
                        .await
                }
                _ => Ok(()),
            }
        };
        let hints = async {
            match hinted {
                Hinted::No => self.write_hints(&turn).await.map(|_| ()),
                Hinted::WithoutMeta | Hinted::WithMeta => Ok(()),
            }
        };
        tokio::try_join!(
            meta,
            hints,
            // The lease too, before the turn exists: no other instance may find it without one. A turn
            // this instance claimed has it already, from its claim, and renews it.
            async {
                match self.renewing(&id) {
                    true => Ok(()),
                    false => self.put_lease(&id).await,
                }
            },
        )?;
        let doc = TurnDoc {
            request_id: id.clone(),
            conversation_id: conv.clone(),
            protocol: turn.protocol,
            owner: turn.owner,
            agent: turn.agent,
            route: turn.route,
            input: serde_json::to_value(&turn.input).map_err(corrupt)?,
            accepted_at: turn.accepted_at,
            outcome: None,
            wire: None,
            transcript: None,
            tool_calls: 0,
            ended_at: None,
        };
        let body = serde_json::to_vec(&doc).map_err(corrupt)?;
        self.writable()?;
        let Some(revision) = self.put_at(&self.turns, &bucket_key(&id), body, 0).await? else {
            // Another accept made it first (here or on another instance): its record is the answer. The
            // leader refuses a create against a write it is still committing, so the record may take a
            // moment to be readable.
            let deadline = tokio::time::Instant::now() + SEEN_WRITE_WAIT;
            loop {
                if let Some((doc, _)) = self.turn_entry(&id).await? {
                    return Ok(Accepted::Existing(Box::new(doc.stored()?)));
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(StoreError::Unavailable(
                        "a turn being written elsewhere is not readable yet",
                    ));
                }
                tokio::time::sleep(OPEN_READY_POLL / 5).await;
            }
        };
        self.known.note_accepted(&id, doc, revision);
        self.renew(&id);
        Ok(Accepted::New)
    }

    async fn finish_turn(&self, finish: Finish) -> Result<(), StoreError> {
        let id = finish.request_id.to_string();
        // First at the revision this instance accepted the turn at, without reading it back (a record
        // changes only by its outcome); refused, the turn changed meanwhile (ended elsewhere, or removed),
        // and the read tells how.
        let mut noted = self.known.take_accepted(&id);
        for _ in 0..MAX_FINISH_CONFLICTS {
            let (mut doc, revision) = match noted.take() {
                Some(noted) => noted,
                None => match self.turn_entry(&id).await? {
                    Some(entry) => entry,
                    None => {
                        self.stop_renewing(&id);
                        return Err(StoreError::UnknownTurn(id));
                    }
                },
            };
            if doc.outcome.is_some() {
                // Ended elsewhere (or before): it runs here no more, so its lease is not renewed either.
                self.stop_renewing(&id);
                return Err(StoreError::AlreadyEnded(id));
            }
            doc.outcome = Some(finish.outcome.clone());
            doc.wire = finish.wire.clone();
            doc.transcript = finish
                .transcript
                .as_ref()
                .map(|t| serde_json::to_value(t).unwrap_or_default());
            doc.tool_calls = finish.tool_calls;
            doc.ended_at = Some(finish.ended_at);
            let body = serde_json::to_vec(&doc).map_err(corrupt)?;
            if self
                .write_at(&self.turns, &bucket_key(&id), body, revision)
                .await?
            {
                self.stop_renewing(&id);
                self.drop_hints(&id, &doc.owner);
                return Ok(());
            }
        }
        Err(StoreError::Unavailable(
            "the turn kept changing under its outcome",
        ))
    }

    /// What turn `id`, a conversation's claim holder, is doing: it runs while its record has no outcome,
    /// or while its record is not written yet and its lease lives (its instance is between the claim and
    /// the record).
    async fn holder_runs(&self, id: &str) -> Result<Holder, StoreError> {
        Ok(match self.turn_entry(id).await? {
            Some((doc, _)) if doc.outcome.is_none() => Holder::Runs,
            Some(_) => Holder::Ended,
            None if leader_get(&self.leases, &bucket_key(id)).await?.is_some() => Holder::Runs,
            None => Holder::Unwritten,
        })
    }

    /// A turn that carries its conversation's meta, on its claim's first look (a new conversation's first
    /// turn, or a turn that changes the conversation's meta: the journal cannot tell them apart): its claim
    /// and its meta created at revision 0 (so only where absent), and its hints, all beside the claim's
    /// first reads and the lease; what this created. The lease may land after the claim here, which
    /// readers allow for ([`CLAIM_GRACE`]). The hints are written whatever comes of the claim: a claim
    /// that is not taken drops its running hint and purges the member it created
    /// ([`claim_conversation`](Self::claim_conversation)), and a turn found written takes them back
    /// ([`take_back`](Self::take_back)).
    async fn speculate(&self, claim_key: &str, turn: &NewTurn) -> Result<Speculated, StoreError> {
        let id = turn.request_id.as_str();
        let (claim, meta, member) = tokio::try_join!(
            self.put_at(&self.claims, claim_key, id.as_bytes().to_vec(), 0),
            self.create_meta(turn, 0),
            self.write_hints(turn),
        )?;
        Ok(Speculated {
            claim,
            member,
            meta,
        })
    }

    /// Takes back what [`speculate`](Self::speculate) wrote for a turn whose record `doc` it then found
    /// (a resend): the running hint, unless it is the one the record's unended turn of the same owner is
    /// found by; and in a conversation that is not the record's (one the caller minted for the resend),
    /// the claim, member and meta it created, so that conversation keeps no state. A purge, which
    /// leaves no marker, of the revision written here and nothing after it.
    async fn take_back(
        &self,
        claim_key: &str,
        turn: &NewTurn,
        written: Speculated,
        doc: &TurnDoc,
    ) -> Result<(), StoreError> {
        let id = turn.request_id.as_str();
        if doc.owner != turn.owner || doc.outcome.is_some() {
            self.drop_hints(id, &turn.owner);
        }
        if doc.conversation_id == turn.conversation_id.as_str() {
            return Ok(());
        }
        self.writable()?;
        let member = format!("{claim_key}.{}", bucket_key(id));
        tokio::try_join!(
            purge_written(&self.claims, claim_key, written.claim),
            purge_written(&self.members, &member, written.member),
            purge_written(&self.meta, claim_key, written.meta),
        )?;
        Ok(())
    }

    /// [`Journal::claim`], and with `carry` the turn's hints sent with the claim's write
    /// ([`Journal::claim_accept`]): what was written of them goes in `hinted`.
    async fn claim_conversation(
        &self,
        conv: &str,
        id: &str,
        carry: Option<&NewTurn>,
        hinted: &mut Hinted,
    ) -> Result<Claim, StoreError> {
        self.writable()?;
        let claim_key = bucket_key(conv);
        // Whether this claim began renewing the turn's lease (stopped again unless the claim is taken).
        let mut began = false;
        // The revision of the turn's member, if this claim created it.
        let mut member = None;
        let claim = self
            .claim_loop(&claim_key, id, &mut began, carry, hinted, &mut member)
            .await;
        if !matches!(claim, Ok(Claim::Taken)) {
            self.known.take_unwritten(id);
            if began {
                self.stop_renewing(id);
            }
            // Hints written for a claim that was not taken (beside a claim write that lost a race, or a
            // speculation): the running hint goes, and the member if this claim created it, which nothing
            // would read or prune (prune finds members by their turns), and a later accept of the same
            // request would find made, keeping its place before turns that ran first. (Two deliveries of
            // one request racing on two instances can see the member made by the other's claim, which
            // then purges it: a turn missing from its conversation's list, not a turn run twice.)
            if let (Some(turn), Hinted::WithoutMeta | Hinted::WithMeta) = (carry, *hinted) {
                self.drop_hints(id, &turn.owner);
            }
            if let Some(made) = member.filter(|_| self.writable().is_ok()) {
                let key = format!("{claim_key}.{}", bucket_key(id));
                let purged = purge_written(&self.members, &key, Some(made)).await;
                if let (Ok(_), Err(e)) = (&claim, purged) {
                    return Err(e);
                }
            }
        }
        claim
    }

    /// [`Journal::claim_accept`].
    async fn claim_accept_turn(&self, turn: NewTurn) -> Result<ClaimAccepted, StoreError> {
        let (conv, id) = (
            turn.conversation_id.to_string(),
            turn.request_id.to_string(),
        );
        let mut hinted = Hinted::No;
        let claim = self
            .claim_conversation(&conv, &id, Some(&turn), &mut hinted)
            .await?;
        Ok(match claim {
            Claim::Busy(holder) => ClaimAccepted::Busy(holder),
            Claim::Taken => ClaimAccepted::Taken(self.accept_turn(turn, hinted).await),
        })
    }

    /// Writes the hints turn `turn`'s record is written after, at once: its conversation's member (not
    /// again for a resend: its member was written the first time) and its running hint. The member's
    /// revision if this created it.
    async fn write_hints(&self, turn: &NewTurn) -> Result<Option<u64>, StoreError> {
        let (conv, id) = (turn.conversation_id.as_str(), turn.request_id.as_str());
        let member = format!("{}.{}", bucket_key(conv), bucket_key(id));
        let running = format!("{}.{}", bucket_key(&turn.owner), bucket_key(id));
        let (member, _) = tokio::try_join!(
            self.put_at(&self.members, &member, id.as_bytes().to_vec(), 0),
            async {
                self.running
                    .put(running, Vec::new().into())
                    .await
                    .map_err(unwritable)
            },
        )?;
        Ok(member)
    }

    /// Creates the conversation's meta that `turn` carries if its key is still at `revision`: its new
    /// revision if this did.
    async fn create_meta(&self, turn: &NewTurn, revision: u64) -> Result<Option<u64>, StoreError> {
        let Some(meta) = &turn.conversation_meta else {
            return Ok(None);
        };
        let doc = MetaDoc {
            protocol: turn.protocol.clone(),
            meta: meta.clone(),
            updated_at: turn.accepted_at,
        };
        let body = serde_json::to_vec(&doc).map_err(corrupt)?;
        self.put_at(
            &self.meta,
            &bucket_key(turn.conversation_id.as_str()),
            body,
            revision,
        )
        .await
    }

    async fn claim_loop(
        &self,
        claim_key: &str,
        id: &str,
        began: &mut bool,
        carry: Option<&NewTurn>,
        hinted: &mut Hinted,
        member: &mut Option<u64>,
    ) -> Result<Claim, StoreError> {
        // The claim revision last seen naming a turn with neither a record nor a lease.
        let mut unwritten_seen = None;
        // Whether this claim created the conversation's meta.
        let mut meta_created = false;
        for attempt in 0..MAX_CLAIM_CONFLICTS {
            // One round trip for all the claim needs: the conversation's claim, the turn's record (its
            // accept then need not read it again), and, unless this instance renews it already, the
            // turn's lease. The lease is written whether or not the claim takes the conversation (one
            // that does not take it ages out), so that it is in before the claim's write below: whoever
            // reads the claim before the turn's record is written finds the lease.
            let fresh = !self.renewing(id);
            let lease = async {
                match fresh {
                    true => self.put_lease(id).await,
                    false => Ok(()),
                }
            };
            // The first look asks any replica, which answers without the cluster: a stale answer costs
            // only a refused write below and a look at the leader, or is checked there (a claim already
            // this turn's). A record it does not find yet is created by the accept, which decides.
            let first = attempt == 0;
            // A turn carried with its conversation's meta (a new conversation's first turn, or one that
            // changes the meta): its claim, hints and meta are created beside the first reads
            // ([`speculate`](Self::speculate)).
            let speculating =
                first && fresh && carry.is_some_and(|t| t.conversation_meta.is_some());
            // Another turn carried with its meta reads the meta's revision too: the meta of a
            // conversation with none yet is created with the claim's write.
            let meta_key = carry
                .filter(|t| t.conversation_meta.is_some() && !speculating)
                .map(|t| bucket_key(t.conversation_id.as_str()));
            let meta_revision = async {
                match &meta_key {
                    Some(k) if first => Ok(Some(replica_entry(&self.meta, k).await?.1)),
                    Some(k) => Ok(Some(leader_entry(&self.meta, k).await?.1)),
                    None => Ok(None),
                }
            };
            let speculation = async {
                match carry.filter(|_| speculating) {
                    Some(t) => Ok(Some(self.speculate(claim_key, t).await?)),
                    None => Ok(None),
                }
            };
            let asked = tokio::time::Instant::now();
            let ((holder, revision), turn, (), meta_revision, speculation) = tokio::try_join!(
                self.claim_read(claim_key, first),
                self.turn_read(id, first),
                lease,
                meta_revision,
                speculation
            )?;
            let answered_in = asked.elapsed();
            // Not written as far as this look can tell: only such a turn's hints go with the claim.
            let unwritten = turn.is_none() && !self.known.accepted_here(id);
            if turn.is_some() {
                // Written after all (a replica's earlier miss, or another instance's create): the accept
                // reads it.
                self.known.take_unwritten(id);
            } else if !self.known.accepted_here(id) {
                // A turn accepted here before its claim (one not exclusive) is written, whatever a replica
                // that has not seen the write yet says: a note left for it would let a resend's accept
                // skip its read and write hints nobody purges.
                self.known.note_unwritten(id);
            }
            if let (Some(written), Some(t)) = (speculation, carry) {
                // A request journaled already (a resend): its accept answers from the record, and what
                // the speculation wrote for it is taken back where the record does not need it.
                let record = match unwritten {
                    true => None,
                    false => self.turn_entry(id).await?.map(|(doc, _)| doc),
                };
                if let Some(doc) = record {
                    self.take_back(claim_key, t, written, &doc).await?;
                    if written.claim.is_some() {
                        return Ok(Claim::Taken);
                    }
                } else {
                    meta_created |= written.meta.is_some();
                    *hinted = match meta_created {
                        true => Hinted::WithMeta,
                        false => Hinted::WithoutMeta,
                    };
                    *member = member.or(written.member);
                    if let Some(created) = written.claim {
                        // Answered late, the lease may have landed after a reader saw the claim without
                        // it twice a grace apart and wrote over it, or (the cluster stalled for longer
                        // than a lease) aged out already: it is written again, and then the claim at its
                        // revision, which stands only if no one wrote over it.
                        #[cfg_attr(not(test), allow(unused_mut))]
                        let mut late = answered_in > SPECULATION_BOUND;
                        #[cfg(test)]
                        {
                            let meanwhile = lock(&self.late).take();
                            if let Some(meanwhile) = meanwhile {
                                meanwhile.await;
                                late = true;
                            }
                        }
                        let stands = !late || {
                            self.put_lease(id).await?;
                            self.write_at(&self.claims, claim_key, id.as_bytes().to_vec(), created)
                                .await?
                        };
                        if stands {
                            self.renew(id);
                            *began = true;
                            return Ok(Claim::Taken);
                        }
                        continue;
                    }
                }
            }
            match holder {
                // Claimed before (a resend, or a claim whose accept failed). A turn with a record has its
                // lease from whoever runs it; one without has it from here, written above.
                Some(holder) if holder == id => {
                    if first && self.claim_holder(claim_key).await?.0.as_deref() != Some(id) {
                        continue;
                    }
                    if turn.is_none() && fresh {
                        self.renew(id);
                        *began = true;
                    }
                    return Ok(Claim::Taken);
                }
                Some(holder) => match self.holder_runs(&holder).await? {
                    Holder::Runs => {
                        let holder = RequestId::new(holder).map_err(corrupt)?;
                        return Ok(Claim::Busy(holder));
                    }
                    // Neither a record nor a lease: dead, or a claim made beside its lease that is not in
                    // yet ([`speculate`](Self::speculate)). Dead only when seen so again a grace later.
                    Holder::Unwritten if unwritten_seen != Some(revision) => {
                        unwritten_seen = Some(revision);
                        tokio::time::sleep(CLAIM_GRACE).await;
                        continue;
                    }
                    Holder::Unwritten | Holder::Ended => {}
                },
                None => {}
            }
            let claim = self.write_at(&self.claims, claim_key, id.as_bytes().to_vec(), revision);
            let hinted_already = *hinted != Hinted::No;
            let taken = match carry.filter(|_| unwritten) {
                None => claim.await?,
                // The turn's hints go with the claim's write: they may be written before the record in any
                // order, and a claim that loses drops its running hint. The meta only where the
                // conversation has neither a claim nor meta yet, created at revision 0: of two first turns
                // racing with their meta, the meta of the one that takes the claim stays (its accept
                // writes it again if the other's create came first), and a conversation's meta is never
                // replaced by a turn that does not take it.
                // Hints written already (by the speculation, or a claim write that lost) are not sent
                // again.
                Some(turn) => {
                    let with_meta = revision == 0 && meta_revision == Some(0) && !meta_created;
                    let meta = async {
                        match with_meta {
                            true => self.create_meta(turn, 0).await,
                            false => Ok(None),
                        }
                    };
                    let hints = async {
                        match hinted_already {
                            false => self.write_hints(turn).await,
                            true => Ok(None),
                        }
                    };
                    let (taken, meta, made) = tokio::try_join!(claim, meta, hints)?;
                    meta_created |= meta.is_some();
                    *member = member.or(made);
                    *hinted = match meta_created {
                        true => Hinted::WithMeta,
                        false => Hinted::WithoutMeta,
                    };
                    taken
                }
            };
            if taken {
                if fresh {
                    self.renew(id);
                    *began = true;
                }
                return Ok(Claim::Taken);
            }
        }
        // Other turns kept taking it first: it is theirs.
        match self.claim_holder(claim_key).await?.0 {
            Some(holder) => Ok(Claim::Busy(RequestId::new(holder).map_err(corrupt)?)),
            None => Err(StoreError::Unavailable(
                "the conversation's claim kept moving",
            )),
        }
    }

    /// Writes (or renews) turn `id`'s lease once.
    async fn put_lease(&self, id: &str) -> Result<(), StoreError> {
        self.leases
            .put(bucket_key(id), Vec::new().into())
            .await
            .map(|_| ())
            .map_err(unwritable)
    }

    /// The turn a conversation's claim names (none: never claimed, or its key was deleted), and the
    /// revision a claim must be written at.
    async fn claim_holder(&self, claim_key: &str) -> Result<(Option<String>, u64), StoreError> {
        let (value, revision) = leader_entry(&self.claims, claim_key).await?;
        let holder = value
            .map(|v| String::from_utf8(v).map_err(corrupt))
            .transpose()?;
        Ok((holder, revision))
    }

    /// [`claim_holder`](Self::claim_holder), read from any replica with `replica`.
    async fn claim_read(
        &self,
        claim_key: &str,
        replica: bool,
    ) -> Result<(Option<String>, u64), StoreError> {
        if !replica {
            return self.claim_holder(claim_key).await;
        }
        let (value, revision) = replica_entry(&self.claims, claim_key).await?;
        let holder = value
            .map(|v| String::from_utf8(v).map_err(corrupt))
            .transpose()?;
        Ok((holder, revision))
    }

    /// Whether turn `id`'s record is written, read from any replica with `replica`.
    async fn turn_read(&self, id: &str, replica: bool) -> Result<Option<()>, StoreError> {
        if !replica {
            return Ok(self.turn_entry(id).await?.map(|_| ()));
        }
        Ok(replica_entry(&self.turns, &bucket_key(id))
            .await?
            .0
            .map(|_| ()))
    }

    /// The request ids of a conversation's members, in the order they were first written. Read from the
    /// bucket's leader, so a member just written on another instance is seen.
    async fn member_ids(&self, conv: &str) -> Result<Vec<String>, StoreError> {
        let subject = format!("{}{}.>", self.members.prefix, bucket_key(conv));
        let mut ids: Vec<String> = Vec::new();
        let mut from = 1u64;
        loop {
            let next = self
                .members
                .stream
                .raw_message_builder()
                .next_by_subject(subject.clone())
                .sequence(from)
                .send()
                .await;
            match next {
                Ok(m) => {
                    from = m.sequence + 1;
                    let id = String::from_utf8(m.payload.to_vec()).map_err(corrupt)?;
                    if !id.is_empty() && !ids.contains(&id) {
                        ids.push(id);
                    }
                }
                Err(e) if matches!(e.kind(), LastRawMessageErrorKind::NoMessageFound) => break,
                Err(e) => return Err(unwritable(e)),
            }
        }
        let extra = ids.len().saturating_sub(MAX_CONVERSATION_TURNS);
        ids.drain(..extra);
        Ok(ids)
    }

    async fn read_conversation(
        &self,
        conv: &str,
        transcripts: bool,
        limit: usize,
    ) -> Result<ConversationView, StoreError> {
        let mut ids = self.member_ids(conv).await?;
        let extra = ids.len().saturating_sub(limit);
        ids.drain(..extra);
        let mut turns = Vec::with_capacity(ids.len());
        for id in ids {
            // A member whose turn was never written (a crash between the two) is no turn.
            if let Some((doc, _)) = self.turn_entry(&id).await? {
                let transcript = transcripts
                    .then(|| doc.transcript.clone())
                    .flatten()
                    .map(crate::model::decode_transcript)
                    .transpose()?;
                turns.push(ConversationTurn {
                    turn: doc.stored()?,
                    transcript,
                });
            }
        }
        Ok(ConversationView { turns })
    }

    async fn put_meta(
        &self,
        conv: &str,
        protocol: &str,
        meta: serde_json::Value,
        updated_at: u64,
    ) -> Result<(), StoreError> {
        self.writable()?;
        let doc = MetaDoc {
            protocol: protocol.to_string(),
            meta,
            updated_at,
        };
        let body = serde_json::to_vec(&doc).map_err(corrupt)?;
        self.meta
            .put(bucket_key(conv), body.into())
            .await
            .map_err(unwritable)?;
        Ok(())
    }

    /// The turns without an outcome that a running hint names, of `owner` (every owner's for `None`), in
    /// the order they were accepted; with `abandoned`, only those whose lease has expired.
    async fn unended(
        &self,
        owner: Option<&str>,
        abandoned: bool,
    ) -> Result<Vec<StoredTurn>, StoreError> {
        let prefix = owner.map(|o| format!("{}.", bucket_key(o)));
        let mut keys = self.running.keys().await.map_err(unwritable)?;
        let mut found: Vec<(u64, StoredTurn)> = Vec::new();
        use futures_util::StreamExt;
        while let Some(k) = keys.next().await {
            let k = k.map_err(unwritable)?;
            let hex = match &prefix {
                Some(p) => match k.strip_prefix(p.as_str()) {
                    Some(h) => h,
                    None => continue,
                },
                None => match k.split_once('.') {
                    Some((_, h)) => h,
                    None => continue,
                },
            };
            let Some(id) = unhex(hex) else { continue };
            let Some((doc, revision)) = self.turn_entry(&id).await? else {
                continue;
            };
            if doc.outcome.is_some() || owner.is_some_and(|o| doc.owner != o) {
                continue;
            }
            if abandoned && leader_get(&self.leases, &bucket_key(&id)).await?.is_some() {
                continue;
            }
            // Never updated while it has no outcome: its revision is its acceptance's.
            found.push((revision, doc.stored()?));
        }
        found.sort_by_key(|(revision, _)| *revision);
        found.dedup_by_key(|(revision, _)| *revision);
        Ok(found.into_iter().map(|(_, t)| t).collect())
    }
}

/// Whether a conditional write was refused because the key had moved on: the server's "wrong last
/// sequence", under either of its codes (async-nats names only the older one).
fn moved_on(e: &jetstream::context::PublishError) -> bool {
    if e.kind() == jetstream::context::PublishErrorKind::WrongLastSequence {
        return true;
    }
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<jetstream::Error>())
        .is_some_and(|j| {
            j.error_code() == jetstream::ErrorCode::STREAM_WRONG_LAST_SEQUENCE
                || j.error_code() == jetstream::ErrorCode::STREAM_WRONG_LAST_SEQUENCE_CONSTANT
        })
}

/// Writes `value` under `key` of `bucket` only if the key's last revision is `revision`: the key's new
/// revision, or `None` when the key had moved on.
async fn put_at(
    js: &jetstream::Context,
    bucket: &kv::Store,
    key: &str,
    value: Vec<u8>,
    revision: u64,
) -> Result<Option<u64>, StoreError> {
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(
        "Nats-Expected-Last-Subject-Sequence",
        revision.to_string().as_str(),
    );
    let ack = js
        .publish_with_headers(format!("{}{key}", bucket.prefix), headers, value.into())
        .await
        .map_err(unwritable)?;
    match ack.await {
        Ok(ack) => Ok(Some(ack.sequence)),
        Err(e) if moved_on(&e) => Ok(None),
        Err(e) => Err(unwritable(e)),
    }
}

/// Purges what this instance wrote under `key` of `bucket` at `revision`, if it wrote anything, and
/// nothing written after it. A purge leaves no marker (a key-value purge leaves one).
async fn purge_written(
    bucket: &kv::Store,
    key: &str,
    revision: Option<u64>,
) -> Result<(), StoreError> {
    let Some(revision) = revision else {
        return Ok(());
    };
    bucket
        .stream
        .purge()
        .filter(format!("{}{key}", bucket.prefix))
        .sequence(revision + 1)
        .await
        .map(|_| ())
        .map_err(unwritable)
}

/// A key's value and revision, read from the bucket's leader (a replica may lag behind a write another
/// instance just made). A deleted or purged key is none.
async fn leader_get(bucket: &kv::Store, key: &str) -> Result<Option<(Vec<u8>, u64)>, StoreError> {
    let (value, revision) = leader_entry(bucket, key).await?;
    Ok(value.map(|v| (v, revision)))
}

/// The value under `key` as the bucket's leader has it, and the key's last revision (`0`: never written). A
/// deleted or purged key has no value but keeps the revision of its marker, which a conditional write
/// (`Nats-Expected-Last-Subject-Sequence`) must name.
async fn leader_entry(bucket: &kv::Store, key: &str) -> Result<(Option<Vec<u8>>, u64), StoreError> {
    let got = bucket
        .stream
        .raw_message_builder()
        .last_by_subject(format!("{}{key}", bucket.prefix))
        .send()
        .await;
    match got {
        Ok(m) => {
            let removed = m
                .headers
                .get("KV-Operation")
                .is_some_and(|op| matches!(op.as_str(), "DEL" | "PURGE"));
            Ok(((!removed).then(|| m.payload.to_vec()), m.sequence))
        }
        Err(e) if matches!(e.kind(), LastRawMessageErrorKind::NoMessageFound) => Ok((None, 0)),
        Err(e) => Err(unwritable(e)),
    }
}

/// Like [`leader_entry`], from whichever replica answers first (a bucket's replicas serve direct gets): it
/// may lag behind a write just made, so only for a look that a conditional write or a leader read checks.
async fn replica_entry(
    bucket: &kv::Store,
    key: &str,
) -> Result<(Option<Vec<u8>>, u64), StoreError> {
    let got = bucket
        .stream
        .direct_get_last_for_subject(format!("{}{key}", bucket.prefix))
        .await;
    match got {
        Ok(m) => {
            let removed = m
                .headers
                .get("KV-Operation")
                .is_some_and(|op| matches!(op.as_str(), "DEL" | "PURGE"));
            Ok(((!removed).then(|| m.payload.to_vec()), m.sequence))
        }
        Err(e) if matches!(e.kind(), DirectGetErrorKind::NotFound) => Ok((None, 0)),
        Err(e) => Err(unwritable(e)),
    }
}

/// Waits (up to [`OPEN_READY_TIMEOUT`]) until `bucket` takes a write: one under a key no turn uses.
async fn takes_writes(bucket: &kv::Store) -> Result<(), StoreError> {
    let deadline = tokio::time::Instant::now() + OPEN_READY_TIMEOUT;
    loop {
        match bucket.put("ready", Vec::new().into()).await {
            Ok(_) => return Ok(()),
            Err(e) if tokio::time::Instant::now() >= deadline => return Err(unwritable(e)),
            Err(e) => {
                tracing::debug!(bucket = %bucket.name, error = %e, "bucket not taking writes yet");
                tokio::time::sleep(OPEN_READY_POLL).await;
            }
        }
    }
}

fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

impl Journal for JetStreamJournal {
    fn accept(&self, turn: NewTurn) -> BoxFuture<'_, Result<Accepted, StoreError>> {
        Box::pin(self.accept_turn(turn, Hinted::No))
    }

    fn finish(&self, finish: Finish) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.finish_turn(finish))
    }

    fn lookup(&self, id: RequestId) -> BoxFuture<'_, Result<Option<StoredTurn>, StoreError>> {
        Box::pin(async move {
            match self.turn_entry(id.as_str()).await? {
                Some((doc, _)) => Ok(Some(doc.stored()?)),
                None => Ok(None),
            }
        })
    }

    fn conversation(
        &self,
        conversation: ConversationId,
        transcripts: bool,
    ) -> BoxFuture<'_, Result<ConversationView, StoreError>> {
        Box::pin(async move {
            self.read_conversation(conversation.as_str(), transcripts, usize::MAX)
                .await
        })
    }

    fn recent_turns(
        &self,
        conversation: ConversationId,
        limit: usize,
    ) -> BoxFuture<'_, Result<ConversationView, StoreError>> {
        Box::pin(async move {
            self.read_conversation(conversation.as_str(), true, limit)
                .await
        })
    }

    fn conversation_meta(
        &self,
        conversation: ConversationId,
    ) -> BoxFuture<'_, Result<Option<serde_json::Value>, StoreError>> {
        Box::pin(async move {
            let Some((value, _)) =
                leader_get(&self.meta, &bucket_key(conversation.as_str())).await?
            else {
                return Ok(None);
            };
            let doc: MetaDoc = serde_json::from_slice(&value).map_err(corrupt)?;
            Ok(Some(doc.meta))
        })
    }

    fn put_conversation_meta(
        &self,
        conversation: ConversationId,
        protocol: String,
        meta: serde_json::Value,
        updated_at: u64,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            self.put_meta(conversation.as_str(), &protocol, meta, updated_at)
                .await
        })
    }

    fn latest(&self, limit: usize) -> BoxFuture<'_, Result<Vec<StoredTurn>, StoreError>> {
        Box::pin(self.latest_turns(limit.min(crate::MAX_LATEST_TURNS)))
    }

    fn interrupted(&self, owner: String) -> BoxFuture<'_, Result<Vec<StoredTurn>, StoreError>> {
        Box::pin(async move { self.unended(Some(&owner), false).await })
    }

    fn abandoned(&self) -> BoxFuture<'_, Result<Vec<StoredTurn>, StoreError>> {
        Box::pin(async move { self.unended(None, true).await })
    }

    fn claim(
        &self,
        conversation: ConversationId,
        id: RequestId,
    ) -> BoxFuture<'_, Result<Claim, StoreError>> {
        Box::pin(async move {
            self.claim_conversation(conversation.as_str(), id.as_str(), None, &mut Hinted::No)
                .await
        })
    }

    fn claim_accept(&self, turn: NewTurn) -> BoxFuture<'_, Result<ClaimAccepted, StoreError>> {
        Box::pin(self.claim_accept_turn(turn))
    }

    fn prune(&self, prune: crate::Prune) -> BoxFuture<'_, Result<crate::Pruned, StoreError>> {
        Box::pin(self.prune_turns(prune))
    }

    fn conversations(
        &self,
        protocol: String,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<ConversationId>, StoreError>> {
        Box::pin(async move { self.protocol_conversations(&protocol, limit).await })
    }

    fn remove_conversation(
        &self,
        conversation: ConversationId,
    ) -> BoxFuture<'_, Result<crate::Removed, StoreError>> {
        Box::pin(async move { self.remove(&conversation).await })
    }

    fn probe(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            self.writable()?;
            self.meta
                .put("ready", Vec::new().into())
                .await
                .map_err(unwritable)?;
            Ok(())
        })
    }

    fn halt(&self) {
        self.halted.store(true, Ordering::SeqCst);
        // As a crash would: nothing renews this instance's leases, or its name, any more.
        for (_, r) in lock(&self.renewing).drain() {
            r.abort();
        }
        if let Some(held) = lock(&self.held).take() {
            held.renewal.abort();
        }
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.release_instance().await;
            // As after a halt: a turn still running past the drain renews and writes nothing more.
            self.halt();
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_hex_and_read_back() {
        for id in ["nipxx:1", "task:ab.c/ d", "é"] {
            let k = bucket_key(id);
            assert!(k.chars().all(|c| c.is_ascii_hexdigit()));
            assert_eq!(unhex(&k).as_deref(), Some(id));
        }
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
    }

    async fn open_journal(url: &str, prefix: &str) -> JetStreamJournal {
        let client = async_nats::connect(url).await.expect("nats reachable");
        let config = JetStreamConfig {
            prefix: prefix.into(),
            replicas: 1,
            lease: DEFAULT_LEASE,
        };
        JetStreamJournal::open(client, &config)
            .await
            .expect("the buckets open")
    }

    /// A new conversation's first turn.
    fn first_turn() -> NewTurn {
        let mut t = crate::conformance::turn(1);
        t.conversation_meta = Some(serde_json::json!({ "m": 1 }));
        t
    }

    async fn last_sequence(bucket: &kv::Store) -> u64 {
        bucket.stream.get_info().await.unwrap().state.last_sequence
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_first_turn_answered_late_writes_its_lease_again_and_then_its_claim() {
        let dir = tempfile::tempdir().unwrap();
        let nats = agentwire_testkit::NatsServer::start_jetstream(dir.path());
        let j = open_journal(&nats.url, "LATE").await;
        let t = first_turn();
        let (leases, claims) = (
            last_sequence(&j.leases).await,
            last_sequence(&j.claims).await,
        );
        *lock(&j.late) = Some(Box::pin(async {}));
        assert_eq!(
            j.claim_accept_turn(t.clone()).await.unwrap(),
            ClaimAccepted::Taken(Ok(Accepted::New))
        );
        assert!(lock(&j.late).is_none(), "the speculation was taken as late");
        // The lease beside the claim's create, and again before the claim's second write (a stall longer
        // than a lease would have aged the first out); nothing else writes it before a third of a lease.
        assert_eq!(last_sequence(&j.leases).await - leases, 2);
        // The claim created, then written again at its revision, and it names the turn.
        assert_eq!(last_sequence(&j.claims).await - claims, 2);
        let conv = bucket_key(t.conversation_id.as_str());
        assert_eq!(
            j.claim_holder(&conv).await.unwrap().0.as_deref(),
            Some(t.request_id.as_str())
        );
        assert!(j.renewing(t.request_id.as_str()));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_late_first_turn_whose_claim_was_taken_meanwhile_is_busy_and_takes_its_hints_back() {
        let dir = tempfile::tempdir().unwrap();
        let nats = agentwire_testkit::NatsServer::start_jetstream(dir.path());
        let j = open_journal(&nats.url, "MOVED").await;
        let t = first_turn();
        let (id, conv) = (
            t.request_id.as_str(),
            bucket_key(t.conversation_id.as_str()),
        );
        let other = RequestId::new("other:1").unwrap();
        // Between the speculation's late answer and its second write, another instance (one that saw
        // the claim without a lease twice) takes the conversation, and its turn runs.
        let (claims, leases, key, holder) = (
            j.claims.clone(),
            j.leases.clone(),
            conv.clone(),
            other.to_string(),
        );
        *lock(&j.late) = Some(Box::pin(async move {
            leases
                .put(bucket_key(&holder), Vec::new().into())
                .await
                .unwrap();
            claims.put(key, holder.into_bytes().into()).await.unwrap();
        }));
        assert_eq!(
            j.claim_accept_turn(t.clone()).await.unwrap(),
            ClaimAccepted::Busy(other)
        );
        assert!(!j.renewing(id));
        // No member left, not even a purge's marker; the running hint dropped.
        let member = format!("{conv}.{}", bucket_key(id));
        assert_eq!(leader_entry(&j.members, &member).await.unwrap(), (None, 0));
        j.hints_dropped().await;
        let running = format!("{}.{}", bucket_key(&t.owner), bucket_key(id));
        assert_eq!(leader_get(&j.running, &running).await.unwrap(), None);
        assert_eq!(j.turn_entry(id).await.unwrap().map(|_| ()), None);
    }
}
