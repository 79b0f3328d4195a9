//! A journal wrapper that fails writes on demand: what a full or failing disk does, for tests of the
//! engine's promises under it. Reads pass through.

use crate::{Accepted, Claim, ConversationView, Finish, Journal, NewTurn, StoreError, StoredTurn};
use agentwire_core::{ConversationId, RequestId};
use futures_util::future::BoxFuture;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Wraps a journal; while [`fail_writes`](Self::fail_writes) is on, every write fails with
/// [`StoreError::Sqlite`] without reaching the inner journal.
pub struct FaultyJournal {
    inner: Arc<dyn Journal>,
    failing: AtomicBool,
    refused: AtomicU64,
    /// While on, [`Journal::sync`] alone fails (a disk that fails the sync of writes it took).
    failing_syncs: AtomicBool,
    /// Syncs asked of the inner journal.
    syncs: AtomicU64,
}

/// The error a failing write returns: what SQLite says on a full disk.
pub const FAULT_MESSAGE: &str = "database or disk is full (injected)";

impl FaultyJournal {
    /// Wraps `inner`, writing normally until told otherwise.
    pub fn new(inner: Arc<dyn Journal>) -> Arc<FaultyJournal> {
        Arc::new(FaultyJournal {
            inner,
            failing: AtomicBool::new(false),
            refused: AtomicU64::new(0),
            failing_syncs: AtomicBool::new(false),
            syncs: AtomicU64::new(0),
        })
    }

    /// Fails every write from now on (`true`), or writes again (`false`).
    pub fn fail_writes(&self, on: bool) {
        self.failing.store(on, Ordering::SeqCst);
    }

    /// Fails every [`Journal::sync`] from now on (`true`), other writes going through, or syncs again.
    pub fn fail_syncs(&self, on: bool) {
        self.failing_syncs.store(on, Ordering::SeqCst);
    }

    /// How many syncs reached the inner journal so far.
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::SeqCst)
    }

    /// How many writes were refused so far.
    pub fn refused_writes(&self) -> u64 {
        self.refused.load(Ordering::SeqCst)
    }

    fn check(&self) -> Result<(), StoreError> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(self.refuse());
        }
        Ok(())
    }

    /// A refused write, counted.
    fn refuse(&self) -> StoreError {
        self.refused.fetch_add(1, Ordering::SeqCst);
        StoreError::from(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
            Some(FAULT_MESSAGE.into()),
        ))
    }
}

impl Journal for FaultyJournal {
    fn accept(&self, turn: NewTurn) -> BoxFuture<'_, Result<Accepted, StoreError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.accept(turn).await
        })
    }

    fn accept_soon(&self, turn: NewTurn) -> BoxFuture<'_, Result<Accepted, StoreError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.accept_soon(turn).await
        })
    }

    fn sync(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            self.check()?;
            if self.failing_syncs.load(Ordering::SeqCst) {
                return Err(self.refuse());
            }
            self.syncs.fetch_add(1, Ordering::SeqCst);
            self.inner.sync().await
        })
    }

    fn finish(&self, finish: Finish) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.finish(finish).await
        })
    }

    fn lookup(&self, id: RequestId) -> BoxFuture<'_, Result<Option<StoredTurn>, StoreError>> {
        self.inner.lookup(id)
    }

    fn conversation(
        &self,
        conversation: ConversationId,
        transcripts: bool,
    ) -> BoxFuture<'_, Result<ConversationView, StoreError>> {
        self.inner.conversation(conversation, transcripts)
    }

    fn recent_turns(
        &self,
        conversation: ConversationId,
        limit: usize,
    ) -> BoxFuture<'_, Result<ConversationView, StoreError>> {
        self.inner.recent_turns(conversation, limit)
    }

    fn conversation_meta(
        &self,
        conversation: ConversationId,
    ) -> BoxFuture<'_, Result<Option<serde_json::Value>, StoreError>> {
        self.inner.conversation_meta(conversation)
    }

    fn put_conversation_meta(
        &self,
        conversation: ConversationId,
        protocol: String,
        meta: serde_json::Value,
        updated_at: u64,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            self.check()?;
            self.inner
                .put_conversation_meta(conversation, protocol, meta, updated_at)
                .await
        })
    }

    fn latest(&self, limit: usize) -> BoxFuture<'_, Result<Vec<StoredTurn>, StoreError>> {
        self.inner.latest(limit)
    }

    fn interrupted(&self, owner: String) -> BoxFuture<'_, Result<Vec<StoredTurn>, StoreError>> {
        self.inner.interrupted(owner)
    }

    fn abandoned(&self) -> BoxFuture<'_, Result<Vec<StoredTurn>, StoreError>> {
        self.inner.abandoned()
    }

    fn claim(
        &self,
        conversation: ConversationId,
        id: RequestId,
    ) -> BoxFuture<'_, Result<Claim, StoreError>> {
        // A claim writes only in a shared journal; the wrapped one is a local disk's.
        self.inner.claim(conversation, id)
    }

    fn conversations(
        &self,
        protocol: String,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<ConversationId>, StoreError>> {
        self.inner.conversations(protocol, limit)
    }

    fn remove_conversation(
        &self,
        conversation: ConversationId,
    ) -> BoxFuture<'_, Result<crate::Removed, StoreError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.remove_conversation(conversation).await
        })
    }

    fn probe(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.probe().await
        })
    }

    fn prune(
        &self,
        prune: crate::model::Prune,
    ) -> BoxFuture<'_, Result<crate::model::Pruned, StoreError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.prune(prune).await
        })
    }

    fn halt(&self) {
        self.inner.halt()
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Journal, SqliteJournal};

    #[tokio::test]
    async fn a_failed_write_says_what_refused_it_and_keeps_it_as_its_source() {
        let dir = tempfile::tempdir().unwrap();
        let inner = Arc::new(SqliteJournal::open(&dir.path().join("j.sqlite")).unwrap());
        let faulty = FaultyJournal::new(inner);
        faulty.fail_writes(true);
        let e = faulty.probe().await.expect_err("writes fail while failing");
        assert!(e.is_unwritable());
        assert!(e.to_string().contains(FAULT_MESSAGE), "{e}");
        let source = std::error::Error::source(&e).expect("a source");
        match source.downcast_ref::<rusqlite::Error>() {
            Some(rusqlite::Error::SqliteFailure(f, _)) => {
                assert_eq!(f.code, rusqlite::ErrorCode::DiskFull)
            }
            other => panic!("not SQLite's disk-full error: {other:?}"),
        }
        assert_eq!(e.clone(), e, "a clone is the same error");
        assert_ne!(e, StoreError::Unavailable(FAULT_MESSAGE), "of another kind");
    }
}
