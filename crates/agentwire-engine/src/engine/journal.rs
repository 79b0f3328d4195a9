//! The engine and its journal: reads for fronts, the journal's health (a failed write stops new turns and
//! starts a probe), and outcomes made durable with backoff before anyone is told them.

use super::*;

impl Engine {
    /// The journal's record of a request id.
    pub async fn lookup(&self, id: &RequestId) -> Result<Option<StoredTurn>, StoreError> {
        self.journal.lookup(id.clone()).await
    }

    /// A conversation's newest journaled turn, if it has any: one bounded read however long it is.
    pub async fn last_turn(
        &self,
        conversation: &ConversationId,
    ) -> Result<Option<StoredTurn>, StoreError> {
        let view = self.journal.recent_turns(conversation.clone(), 1).await?;
        Ok(view.turns.into_iter().next_back().map(|t| t.turn))
    }

    /// A conversation's journaled turns, oldest first; their transcripts only when asked for.
    pub async fn conversation(
        &self,
        conversation: &ConversationId,
        transcripts: bool,
    ) -> Result<ConversationView, StoreError> {
        self.journal
            .conversation(conversation.clone(), transcripts)
            .await
    }

    /// A conversation's protocol-specific state, if any was set.
    pub async fn conversation_meta(
        &self,
        conversation: &ConversationId,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        self.journal.conversation_meta(conversation.clone()).await
    }

    /// Durably sets a conversation's protocol-specific state.
    pub async fn put_conversation_meta(
        &self,
        conversation: &ConversationId,
        protocol: &str,
        meta: &serde_json::Value,
    ) -> Result<(), StoreError> {
        self.journal_write(self.journal.put_conversation_meta(
            conversation.clone(),
            protocol.to_string(),
            meta.clone(),
            now_secs(),
        ))
        .await
    }

    /// Stops the journal (no write commits any more): for tests that simulate a crash in-process.
    pub fn halt_journal(&self) {
        self.journal.halt();
    }

    /// A claim that failed for the journal's reasons marks it unwritable, as a failed write does. A claim
    /// that succeeded says nothing: in a journal one daemon has to itself it writes nothing.
    pub(super) fn note_claim(&self, r: &Result<Claim, StoreError>) {
        if let Err(e) = r {
            self.note_write::<()>(&Err(e.clone()));
        }
    }

    /// Awaits one durable journal write, notes how it went ([`note_write`](Self::note_write)) and, when it
    /// committed, how long it took (`agentwire_journal_commit_seconds`; a failure shows as the journal not
    /// writable instead).
    pub(super) async fn journal_write<T>(
        &self,
        write: BoxFuture<'_, Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let asked = std::time::Instant::now();
        let r = write.await;
        if r.is_ok() {
            self.hub.metrics().journal_commit(asked.elapsed());
        }
        self.note_write(&r);
        r
    }

    /// Records how a write went: a failure that says the journal cannot write marks it unwritable (and
    /// starts probing it); a success marks it writable.
    pub(super) fn note_write<T>(&self, r: &Result<T, StoreError>) {
        match r {
            Ok(_) => {
                self.health.set_writable(true);
            }
            Err(e) if e.is_unwritable() => {
                if self.health.set_writable(false) {
                    tracing::error!(error = %e, "the journal cannot be written: taking no new turns until it can");
                    self.spawn_probe();
                }
            }
            Err(_) => {}
        }
    }

    /// Probes the journal with backoff until a write succeeds again.
    pub(super) fn spawn_probe(&self) {
        let me = self.me.clone();
        tokio::spawn(async move {
            let mut backoff = journal_backoff();
            // The engine is held for one try at a time: a probe keeps no engine alive that its owner let go.
            loop {
                let Some(this) = me.upgrade() else { return };
                if this.health.writable() {
                    return;
                }
                this.wait_for(|core, now| core.handle_write_failed(&mut backoff, now))
                    .await;
                match this.journal.probe().await {
                    Ok(()) => {
                        tracing::info!("the journal can be written again");
                        this.health.set_writable(true);
                    }
                    Err(e) => tracing::debug!(error = %e, "the journal still cannot be written"),
                }
            }
        });
    }

    /// Makes turn `id`'s acceptance durable before the first thing about it goes out (its first event,
    /// a question, a queued notice): at once when it is (journaled durably, or made so since by any
    /// durable write); else the journal is synced, retried with backoff as an outcome is while the journal
    /// cannot write (the turn waits for the disk, as its outcome would).
    pub(super) async fn acceptance_durable(&self, id: &RequestId) {
        let unsynced = self.lock().live.get(id).is_some_and(|t| t.unsynced);
        if !unsynced {
            return;
        }
        let mut backoff = journal_backoff();
        loop {
            match self.journal_write(self.journal.sync()).await {
                Ok(()) => break,
                Err(e) if e.is_unwritable() => {
                    tracing::warn!(request = %id, error = %e, retry_in = ?backoff.peek(), "the turn's acceptance is not durable yet; holding back its first event");
                }
                Err(e) => {
                    // Not the storage's failure: the journal is closing (its writer gone), so no later
                    // write of this turn will be durable either; the turn ends as interrupted at the next
                    // start, and what the process wrote is still in the system's cache.
                    tracing::error!(request = %id, error = %e, "the journal could not be synced");
                    return;
                }
            }
            self.wait_for(|core, now| core.handle_write_failed(&mut backoff, now))
                .await;
        }
        if let Some(t) = self.lock().live.get_mut(id) {
            t.unsynced = false;
        }
    }

    /// Journals an outcome, retrying with backoff until it is durable, and returns what to deliver: this
    /// outcome and wire form, or the one the journal already holds (the first outcome wins, and the wire
    /// must never contradict the journal).
    pub(super) async fn finish_durably(&self, finish: Finish) -> (Outcome, Option<String>) {
        let (outcome, wire, _) = self.finish_durably_or_found(finish).await;
        (outcome, wire)
    }

    /// Like [`finish_durably`](Self::finish_durably); also says whether the outcome is this one (`true`)
    /// or one the journal held already (`false`: somebody else decided and delivered it).
    pub(super) async fn finish_durably_or_found(
        &self,
        finish: Finish,
    ) -> (Outcome, Option<String>, bool) {
        let mut backoff = journal_backoff();
        loop {
            let r = self
                .journal_write(self.journal.finish(finish.clone()))
                .await;
            match r {
                Ok(()) => return (finish.outcome, finish.wire, true),
                Err(StoreError::AlreadyEnded(_)) => {
                    match self.journal.lookup(finish.request_id.clone()).await {
                        Ok(Some(StoredTurn {
                            outcome: Some(o),
                            wire,
                            ..
                        })) => return (o, wire, false),
                        Ok(_) => return (finish.outcome, finish.wire, true),
                        Err(e) => {
                            tracing::warn!(request = %finish.request_id, error = %e, "could not read a journaled outcome; retrying")
                        }
                    }
                }
                Err(e) if e.is_unwritable() => {
                    tracing::warn!(request = %finish.request_id, error = %e, retry_in = ?backoff.peek(), "the outcome is not durable yet; holding it back");
                }
                Err(e) => {
                    // The journal refuses this outcome for good (it never knew the turn): nothing a restart
                    // could contradict, so it goes out.
                    tracing::error!(request = %finish.request_id, error = %e, "journal refused an outcome");
                    return (finish.outcome, finish.wire, true);
                }
            }
            self.wait_for(|core, now| core.handle_write_failed(&mut backoff, now))
                .await;
        }
    }
}
