//! The journal of turns: every accepted turn and its one outcome, behind one trait that every backend
//! implements and one conformance suite ([`conformance`]) that every backend passes.
//!
//! The engine writes a turn here *before* it acknowledges the turn on the wire, and the outcome *before*
//! it sends it, so on restart nothing finished runs again and every interrupted turn can be given a defined
//! end. Fronts never talk to the journal: they ask the engine.
//!
//! - [`SqliteJournal`]: the embedded journal in the data directory. Writes go through one writer thread
//!   that commits everything waiting in one transaction (group commit) with `synchronous=FULL` in WAL
//!   mode; reads run on tokio's blocking pool, never on a runtime thread.
//! - [`jetstream::JetStreamJournal`]: the journal several instances share, in JetStream key-value buckets
//!   replicated by the NATS cluster.
//! - [`FaultyJournal`]: a wrapper that fails writes on demand, for tests of what a failing disk does.

pub mod conformance;
mod faults;
pub mod jetstream;
mod model;
pub mod probe;
mod sqlite;
mod writer;

pub use faults::{FaultyJournal, FAULT_MESSAGE};
pub use model::{
    Accepted, Claim, ClaimAccepted, ConversationTurn, ConversationView, Finish, NewTurn, Prune,
    Pruned, Removed, StoreError, StoredTurn, LOCAL_OWNER,
};
pub use sqlite::SqliteJournal;

use agentwire_core::{ConversationId, RequestId};
use futures_util::future::BoxFuture;

/// The most turns [`Journal::latest`] reads: a turn list's worth (a page of the turn API is at most 200),
/// one bounded read at start.
pub const MAX_LATEST_TURNS: usize = 1000;

/// A journal backend. Every method is async: reads and writes may wait on a disk or a network, never on a
/// runtime thread. Object safe (`Arc<dyn Journal>`).
pub trait Journal: Send + Sync + 'static {
    /// Journals a new turn durably (insert-if-absent), or returns the journal's record of a request id it
    /// knows (a resend, not run again).
    fn accept(&self, turn: NewTurn) -> BoxFuture<'_, Result<Accepted, StoreError>>;

    /// Journals a turn's one outcome durably: the first outcome wins, a second is
    /// [`StoreError::AlreadyEnded`] and changes nothing.
    fn finish(&self, finish: Finish) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The journal's record of a request id.
    fn lookup(&self, id: RequestId) -> BoxFuture<'_, Result<Option<StoredTurn>, StoreError>>;

    /// A conversation's turns in the order they were accepted; their transcripts only when asked for.
    fn conversation(
        &self,
        conversation: ConversationId,
        transcripts: bool,
    ) -> BoxFuture<'_, Result<ConversationView, StoreError>>;

    /// The newest `limit` turns of a conversation with their transcripts, oldest first: a bounded read for
    /// an agent's history, however long the conversation has grown.
    fn recent_turns(
        &self,
        conversation: ConversationId,
        limit: usize,
    ) -> BoxFuture<'_, Result<ConversationView, StoreError>> {
        Box::pin(async move {
            let mut view = self.conversation(conversation, true).await?;
            let extra = view.turns.len().saturating_sub(limit);
            view.turns.drain(..extra);
            Ok(view)
        })
    }

    /// A conversation's protocol-specific state, if any was set.
    fn conversation_meta(
        &self,
        conversation: ConversationId,
    ) -> BoxFuture<'_, Result<Option<serde_json::Value>, StoreError>>;

    /// Durably sets a conversation's protocol-specific state (a fisk-ai fingerprint and approvals, ...).
    fn put_conversation_meta(
        &self,
        conversation: ConversationId,
        protocol: String,
        meta: serde_json::Value,
        updated_at: u64,
    ) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The newest `limit` turns across every conversation, agent and protocol, newest accepted first (turns
    /// accepted in the same second in no set order): what ran lately, for the turn list after a restart (at
    /// most [`MAX_LATEST_TURNS`]).
    fn latest(&self, limit: usize) -> BoxFuture<'_, Result<Vec<StoredTurn>, StoreError>>;

    /// Turns of `owner` that were accepted but have no outcome, every protocol's, in the order they were
    /// accepted: after a restart, the ones a crash cut off.
    fn interrupted(&self, owner: String) -> BoxFuture<'_, Result<Vec<StoredTurn>, StoreError>>;

    /// In a journal several instances share: the turns without an outcome whose owner's lease has expired
    /// (its instance died, or lost the journal for longer than a lease), every owner's, in the order they
    /// were accepted. A journal one daemon has to itself has none: its own restart ends its turns
    /// ([`Journal::interrupted`]).
    fn abandoned(&self) -> BoxFuture<'_, Result<Vec<StoredTurn>, StoreError>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// [`accept`](Self::accept), except that the journal may answer once the record is written and
    /// visible to every reader, before it is durable: the journal's next durable write, or
    /// [`sync`](Self::sync), makes it durable. A crash of the process loses nothing (the record is in the
    /// operating system's hands); a crash of the machine before that write may lose it. For a turn nobody
    /// is told was accepted until its first event, question or outcome, each of which is sent only once the
    /// acceptance is durable: the outcome's own durable write then carries the acceptance with it (one disk
    /// sync on a short turn's path where there were two). A journal whose every write is durable accepts
    /// as [`accept`](Self::accept) does.
    fn accept_soon(&self, turn: NewTurn) -> BoxFuture<'_, Result<Accepted, StoreError>> {
        self.accept(turn)
    }

    /// Makes every write this journal has answered durable (a record [`accept_soon`](Self::accept_soon)
    /// wrote): at once when they already are.
    fn sync(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }

    /// In a journal several instances share: makes turn `id` the one its conversation runs, unless another
    /// turn of the conversation still runs, on any instance (`Busy` names it). A turn runs until its
    /// record has an outcome; one whose record is not written yet runs while its lease lives. Claiming
    /// again for the turn that holds the conversation is `Taken`. A journal one daemon has to itself always
    /// answers `Taken`: the engine's turn book orders that daemon's conversations.
    fn claim(
        &self,
        _conversation: ConversationId,
        _id: RequestId,
    ) -> BoxFuture<'_, Result<Claim, StoreError>> {
        Box::pin(async { Ok(Claim::Taken) })
    }

    /// [`claim`](Self::claim) turn `turn` its conversation and, when it is taken, [`accept`](Self::accept)
    /// it, in one call: what an exclusive policy does before a turn's ack. A shared journal sends the
    /// turn's hints with the claim's write instead of after it (one replicated write less before the
    /// ack); every other journal claims, then accepts. `Busy` journals nothing; a resend of a known request
    /// finds its record through [`lookup`](Self::lookup) as after [`claim`](Self::claim).
    fn claim_accept(&self, turn: NewTurn) -> BoxFuture<'_, Result<ClaimAccepted, StoreError>> {
        Box::pin(async move {
            let claim = self
                .claim(turn.conversation_id.clone(), turn.request_id.clone())
                .await?;
            Ok(match claim {
                Claim::Busy(holder) => ClaimAccepted::Busy(holder),
                Claim::Taken => ClaimAccepted::Taken(self.accept(turn).await),
            })
        })
    }

    /// Forgets ended turns past their retention ([`Prune`]): their records and transcripts, and the
    /// conversations of the pruned protocols left with no turn. Never a turn without an outcome. One pass
    /// looks at most at `prune.limit` turns; call again while it says there is [`Pruned::more`]. A backend
    /// that keeps everything forgets nothing.
    fn prune(&self, _prune: Prune) -> BoxFuture<'_, Result<Pruned, StoreError>> {
        Box::pin(async { Ok(Pruned::default()) })
    }

    /// The conversations of `protocol`, each once, the most recently active first where the backend can
    /// tell (the embedded journal by its turns' acceptance; a shared one in no set order): at most
    /// `limit`. For an operator's list (`agentwire session list`), not for a request's path. A shared
    /// journal finds them by their protocol state, which every fisk-ai conversation has.
    fn conversations(
        &self,
        protocol: String,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<ConversationId>, StoreError>>;

    /// Removes a conversation for good: its turns, their transcripts and its protocol state, so that a
    /// later turn naming it finds no conversation. An operator's act (`agentwire session rm`). A shared
    /// journal first claims the conversation as a turn would ([`Journal::claim`]), so no instance starts a
    /// turn of it meanwhile, and refuses ([`Removed::Busy`]) while one runs. The embedded journal removes
    /// it whatever its turns' state: its caller holds the journal alone (no daemon serves it).
    fn remove_conversation(
        &self,
        conversation: ConversationId,
    ) -> BoxFuture<'_, Result<Removed, StoreError>>;

    /// One durable write that changes no turn: succeeds once the journal can write again.
    fn probe(&self) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Stops the journal: when this returns, no write commits any more (writes in flight or sent later fail
    /// with [`StoreError::WriterGone`]). What a crash does to a process, for tests that simulate one.
    fn halt(&self);

    /// Closes the journal on a clean exit, once nothing writes any more: an embedded journal checkpoints
    /// its write-ahead log into the database and closes its files (so no `-wal` or `-shm` file is left
    /// behind); a shared one gives up what this instance holds in it (its instance name), so a restart
    /// takes it at once. Writes after it fail with [`StoreError::WriterGone`].
    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}
