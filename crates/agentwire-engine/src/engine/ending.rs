//! Turns that end other than by running out: cancels, the recovery pass after a restart, turns of instances
//! that lost their lease, and the drain before a shutdown.

use super::*;

/// When a turn that never started because the daemon stopped may be sent again: a restart takes seconds.
const NOT_STARTED_RETRY_SECS: u64 = 5;

impl Engine {
    /// Stops taking new turns and waits until every live turn has ended or `grace` has passed. Returns
    /// how many turns were still live at the end.
    pub async fn drain(self: &Arc<Self>, grace: Duration) -> usize {
        self.lock().core.handle_drain(grace, now());
        self.timers_changed();
        // Turns waiting behind their conversation never start now: each ends `not_started` at once, so its
        // requester may send it again (here once the daemon is back, or to another instance).
        let queued: Vec<RequestId> = {
            let mut st = self.lock();
            st.core
                .book
                .queued()
                .into_iter()
                .filter(|id| st.core.book.cancel(id) == CancelDecision::EndNow)
                .collect()
        };
        for id in queued {
            let mut f = Failure::new(
                TurnFailure::NotStarted,
                "not started: the agent is stopping; send it again",
            );
            f.retry_after = Some(NOT_STARTED_RETRY_SECS);
            self.record_and_deliver(&id, Outcome::Failure(f)).await;
        }
        // The core's grace ends the wait; this deadline is a backstop that needs no other task.
        let backstop = tokio::time::Instant::now() + grace;
        let left = || {
            let live = self.lock().core.book.live();
            live + self.delivering.load(std::sync::atomic::Ordering::SeqCst)
        };
        loop {
            let notified = self.ended.notified();
            if left() == 0 {
                return 0;
            }
            if self.lock().core.drain_grace_over(now()) {
                return left();
            }
            if tokio::time::timeout_at(backstop, notified).await.is_err() {
                return left();
            }
        }
    }

    /// Cancels a turn on behalf of `requester`. Idempotent; a no-op after the outcome.
    pub async fn cancel(self: &Arc<Self>, id: &RequestId, requester: &str) -> CancelReply {
        self.cancel_as(id, Some(requester)).await
    }

    /// Cancels turn `id` for the daemon's operator (the turn API's token holder), whoever asked for it.
    pub async fn cancel_by_operator(self: &Arc<Self>, id: &RequestId) -> CancelReply {
        self.cancel_as(id, None).await
    }

    /// Whether turn `id` is live in this engine.
    pub fn is_live(&self, id: &RequestId) -> bool {
        self.lock().core.is_live(id)
    }

    /// Enters its live turns into `index`, and every turn that becomes live from now on; an engine joins
    /// one index only (a second is not told).
    pub(crate) fn join_index(&self, index: &Arc<crate::TurnIndex>) {
        let st = self.lock();
        if self.index.set(index.clone()).is_ok() {
            for id in st.live.keys() {
                index.enter(id, self.me.clone());
            }
        }
    }

    /// Turn `id` became live: its index is told (under the engine's lock, so the index never lags).
    pub(super) fn indexed(&self, id: &RequestId) {
        if let Some(index) = self.index.get() {
            index.enter(id, self.me.clone());
        }
    }

    /// Turn `id` left the live table: its index is told (under the engine's lock).
    pub(super) fn unindexed(&self, id: &RequestId) {
        if let Some(index) = self.index.get() {
            index.leave(id);
        }
    }

    pub(super) async fn cancel_as(
        self: &Arc<Self>,
        id: &RequestId,
        requester: Option<&str>,
    ) -> CancelReply {
        let decision = {
            let mut st = self.lock();
            // Who may cancel is the core's rule: the turn's requester, or the operator.
            let d = st.core.handle_cancel(id, requester);
            let mut closed = None;
            if d == CancelDecision::SignalAgent {
                if let Some(t) = st.live.get_mut(id) {
                    // `send_replace` stores the value even while no receiver exists yet (the run task subscribes when it
                    // starts); `send` would drop it and the cancel would be lost.
                    t.cancel.send_replace(true);
                    // A cancel closes the question the turn waits on rather than leaving it blocked.
                    if let Some(reply) = t.asking.take() {
                        let _ = reply.send(Asked::Cancelled);
                    }
                    let front = t.front.clone();
                    let open = st.core.open_question(id).map(|q| q.id.clone());
                    if let Some(qid) = open {
                        st.core.handle_question_settled(id, &qid);
                        closed = Some((front, qid));
                    }
                }
            }
            drop(st);
            if let Some((front, qid)) = closed {
                front.question_closed(&qid);
            }
            d
        };
        match decision {
            CancelDecision::SignalAgent | CancelDecision::Deferred => CancelReply::Cancelling,
            CancelDecision::EndNow => {
                let f = Failure::new(TurnFailure::Cancelled, "cancelled while queued");
                self.record_and_deliver(id, Outcome::Failure(f)).await;
                CancelReply::Cancelling
            }
            CancelDecision::Ignored => CancelReply::Ignored,
        }
    }

    /// After a restart: ends every turn of this engine's owner that a crash cut off, whatever its protocol,
    /// through the front `make_front` builds from the journaled turn (none: the outcome is journaled and a
    /// resend is answered from it). Returns how many were ended. An outcome the journal cannot take yet is
    /// retried in the background and delivered once it is durable.
    pub async fn recover<F>(self: &Arc<Self>, make_front: F) -> Result<usize, StoreError>
    where
        F: Fn(&StoredTurn) -> Option<Arc<dyn TurnFront>>,
    {
        let turns = self.journal.interrupted(self.owner.clone()).await?;
        // The fronts may be serving already: a turn this process has taken is live, not interrupted.
        let turns: Vec<StoredTurn> = {
            let st = self.lock();
            turns
                .into_iter()
                .filter(|t| !st.core.is_live(&t.request_id))
                .collect()
        };
        Ok(self.end_interrupted(turns, make_front).await)
    }

    /// In a shared journal: ends the turns of other instances of this agent (their owners pass
    /// `same_agent`) that lost their lease (their instance died or lost the journal for longer than it),
    /// each as a crash ends a turn, once across every instance that sweeps (the first outcome wins; one
    /// that lost the race says nothing). Returns how many it ended.
    pub async fn end_abandoned<F>(
        self: &Arc<Self>,
        same_agent: impl Fn(&str) -> bool,
        make_front: F,
    ) -> Result<usize, StoreError>
    where
        F: Fn(&StoredTurn) -> Option<Arc<dyn TurnFront>>,
    {
        let turns = self.journal.abandoned().await?;
        let turns: Vec<StoredTurn> = {
            let st = self.lock();
            turns
                .into_iter()
                .filter(|t| t.owner != self.owner && same_agent(&t.owner))
                .filter(|t| !st.core.is_live(&t.request_id))
                .collect()
        };
        for t in &turns {
            tracing::warn!(request = %t.request_id, owner = %t.owner, "ending a turn whose instance lost its lease");
        }
        Ok(self.end_interrupted(turns, make_front).await)
    }

    /// Ends `turns`, which a crash cut off, as interrupted through the fronts `make_front` gives.
    pub(super) async fn end_interrupted<F>(
        self: &Arc<Self>,
        turns: Vec<StoredTurn>,
        make_front: F,
    ) -> usize
    where
        F: Fn(&StoredTurn) -> Option<Arc<dyn TurnFront>>,
    {
        let n = turns.len();
        for t in turns {
            // What the agent started for it elsewhere is stopped there (a remote run cancelled).
            tokio::spawn(self.agent.interrupted(&t.input));
            let outcome = interrupted();
            let front = make_front(&t).map(|inner| {
                let accepted = crate::WatchKind::Accepted {
                    queued: false,
                    protocol: t.protocol.clone(),
                    agent: t.agent.clone(),
                    conversation: t.conversation_id.clone(),
                    prompt: crate::watch::first_line(&t.input.message),
                    requester: crate::watch::route_requester(&t.route),
                };
                Arc::new(crate::watch::WatchedFront {
                    inner,
                    hub: self.hub.clone(),
                    turn: t.request_id.clone(),
                    accepted,
                    answered: Default::default(),
                })
            });
            let wire = front.as_ref().and_then(|f| f.encode_outcome(&outcome));
            let finish = Finish::new(t.request_id.clone(), outcome, now_secs()).wire(wire);
            if self.health.writable() {
                // One try here; a journal that cannot take it is retried in the background, so a failing
                // disk never holds the daemon's start.
                let r = self
                    .journal_write(self.journal.finish(finish.clone()))
                    .await;
                match r {
                    Ok(()) => {
                        if let Some(f) = front {
                            f.recovered(&finish.outcome, finish.wire.as_deref());
                        }
                        continue;
                    }
                    // Ended meanwhile, and told so by its own front.
                    Err(StoreError::AlreadyEnded(_)) => continue,
                    Err(e) if e.is_unwritable() => {}
                    Err(e) => {
                        tracing::error!(request = %t.request_id, error = %e, "could not end an interrupted turn");
                        continue;
                    }
                }
            }
            let this = self.clone();
            tokio::spawn(async move {
                let (outcome, wire, ours) = this.finish_durably_or_found(finish).await;
                // A turn that ended meanwhile was told its outcome by its own front.
                if let (Some(f), true) = (front, ours) {
                    f.recovered(&outcome, wire.as_deref());
                }
            });
        }
        n
    }
}

/// The outcome of a turn a crash cut off.
pub(super) fn interrupted() -> Outcome {
    Outcome::Failure(
        Failure::new(
            TurnFailure::Interrupted,
            "the agent restarted while this run was in progress",
        )
        .retry_after(INTERRUPTED_RETRY_AFTER_SECS),
    )
}
