//! Taking turns in: capacity slots and admission, submitting (journal first, then start or queue), resends
//! answered from the journal, refusals journaled like outcomes.

use super::*;

impl Engine {
    /// The first step of admitting a request of a protocol with `slots` runs at a time: refuses it while
    /// draining, at capacity, or when its request id is in flight (in that order), else takes a slot
    /// for it. Hand the slot to [`submit`](Self::submit) in the [`Submission`]; dropping it instead (a
    /// refusal) frees it.
    ///
    /// With `exclusive`, a conversation with a live turn is refused too (after the others), as fisk-ai
    /// orders its refusals; [`submit`](Self::submit) checks it again atomically under the same policy.
    pub fn take_slot(
        &self,
        protocol: &str,
        slots: usize,
        request: &RequestId,
        exclusive: Option<&ConversationId>,
    ) -> Result<crate::Slot, crate::SlotRefusal> {
        let st = self.lock();
        if st.core.draining() {
            return Err(crate::SlotRefusal::Draining);
        }
        let live = st.core.is_live(request);
        let slot = crate::slots::take(&self.slots, protocol, slots, request, live)?;
        if exclusive.is_some_and(|c| st.core.book.is_busy(c)) {
            return Err(crate::SlotRefusal::ConversationBusy);
        }
        Ok(slot)
    }

    /// Admits a request of a protocol with `slots` runs at a time, in one step: refused while draining; a
    /// request of `conversation` that the journal holds is a resend ([`Admitted::Resend`], to answer from
    /// the journal whatever runs here now, so no refusal is given for a turn whose terminal the caller may
    /// have); else [`take_slot`](Self::take_slot) decides (capacity, duplicate, and with `exclusive` a
    /// busy conversation). The read is the journal's own (a shared journal's leader).
    pub async fn admit(
        &self,
        protocol: &str,
        slots: usize,
        request: &RequestId,
        conversation: Option<&ConversationId>,
        exclusive: bool,
    ) -> Result<crate::Admitted, crate::AdmitError> {
        if self.draining() {
            return Err(crate::AdmitError::Slot(crate::SlotRefusal::Draining));
        }
        if let Some(conversation) = conversation {
            match self.journal.lookup(request.clone()).await {
                Ok(Some(stored)) if &stored.conversation_id == conversation => {
                    return Ok(crate::Admitted::Resend(Box::new(stored)))
                }
                Ok(_) => {}
                Err(e) => return Err(crate::AdmitError::Journal(e)),
            }
        }
        let busy = conversation.filter(|_| exclusive);
        self.take_slot(protocol, slots, request, busy)
            .map(crate::Admitted::New)
            .map_err(crate::AdmitError::Slot)
    }

    /// How many capacity slots of `protocol` are taken.
    pub fn slots_in_use(&self, protocol: &str) -> usize {
        crate::slots::in_use(&self.slots, protocol)
    }

    /// `sub` with its front beside the hub: what the turn does reaches watchers too.
    pub(super) fn watched(&self, mut sub: Submission) -> Submission {
        let accepted = crate::WatchKind::Accepted {
            queued: false,
            protocol: sub.protocol.clone(),
            agent: self.agent_name.clone(),
            conversation: sub.input.conversation_id.clone(),
            prompt: crate::watch::first_line(&sub.input.message),
            requester: sub.requester.clone(),
        };
        sub.front = Arc::new(crate::watch::WatchedFront {
            inner: sub.front,
            hub: self.hub.clone(),
            turn: sub.input.request_id.clone(),
            accepted,
            answered: Default::default(),
        });
        sub
    }

    /// Submits a validated request: journals it, then runs or queues it.
    ///
    /// The turn is registered (and a live duplicate recognised) before this returns, so a cancel handled
    /// after this call finds it even while the returned future is still journaling it.
    pub fn submit(self: &Arc<Self>, sub: Submission) -> BoxFuture<'static, SubmitReply> {
        let sub = self.watched(sub);
        self.submit_watched(sub)
    }

    pub(super) fn submit_watched(
        self: &Arc<Self>,
        mut sub: Submission,
    ) -> BoxFuture<'static, SubmitReply> {
        let id = sub.input.request_id.clone();
        let conv = sub.input.conversation_id.clone();
        let (cancel_tx, _) = watch::channel(false);
        if !self.health.writable() {
            return Box::pin(async {
                SubmitReply::JournalUnavailable("the journal cannot be written".into())
            });
        }
        {
            let mut st = self.lock();
            match st.core.admit(&id, &conv, sub.policy, &sub.requester) {
                Admission::New => {}
                Admission::Draining => return Box::pin(async { SubmitReply::Draining }),
                Admission::Duplicate => return Box::pin(async { SubmitReply::DuplicateLive }),
                Admission::ConversationBusy => {
                    return Box::pin(async { SubmitReply::ConversationBusy })
                }
                Admission::AgentFull { max } => {
                    drop(st);
                    let f = Failure::new(
                        Refusal::Capacity,
                        format!(
                            "the agent runs {max} turns at a time and is full; try again shortly"
                        ),
                    )
                    .retry_after(AGENT_BUSY_RETRY_AFTER_SECS);
                    let this = self.clone();
                    return Box::pin(async move { this.refuse_watched(sub, f).await });
                }
                Admission::ConversationFull => {
                    drop(st);
                    let f = Failure::new(
                        Refusal::SessionLimit,
                        format!(
                            "conversation has {} turns waiting; wait for them to end",
                            agentwire_core::MAX_QUEUED_TURNS_PER_CONVERSATION
                        ),
                    )
                    .retry_after(10);
                    let this = self.clone();
                    return Box::pin(async move { this.refuse_watched(sub, f).await });
                }
            }
            st.live.insert(
                id.clone(),
                LiveTurn {
                    input: sub.input.clone(),
                    front: sub.front.clone(),
                    cancel: cancel_tx,
                    delivering: false,
                    policy: sub.policy,
                    asking: None,
                    _slot: sub.slot.take(),
                    protocol: sub.protocol.clone(),
                    taken: now(),
                    unsynced: false,
                },
            );
            self.indexed(&id);
        }
        let this = self.clone();
        Box::pin(async move { this.journal_and_start(sub, id).await })
    }

    /// Drops a turn the journal did not take as new (a resend, or a refused write): out of the live table
    /// and the book, and its conversation's next turn starts.
    pub(super) fn forget(self: &Arc<Self>, id: &RequestId) {
        let next = {
            let mut st = self.lock();
            st.live.remove(id);
            self.unindexed(id);
            st.core.handle_turn_left(id);
            st.core.book.forget(id)
        };
        self.ended.notify_waiters();
        if let Some(next) = next {
            self.start(next);
        }
    }

    pub(super) async fn journal_and_start(
        self: Arc<Self>,
        sub: Submission,
        id: RequestId,
    ) -> SubmitReply {
        // What the journal answered the turn's accept, when its claim made it.
        let mut taken = None;
        if sub.policy.exclusive {
            // Across instances too: a shared journal knows whether another instance runs a turn of this
            // conversation. A resend of a request the journal knows is answered from it, not refused. The
            // claim and the accept are one call, so a shared journal writes them with fewer round trips.
            let asked = std::time::Instant::now();
            let claim = match self.journal.claim_accept(self.new_turn(&sub)).await {
                Ok(agentwire_store::ClaimAccepted::Taken(accepted)) => {
                    if accepted.is_ok() {
                        self.hub.metrics().journal_commit(asked.elapsed());
                    }
                    self.note_write(&accepted);
                    taken = Some(accepted);
                    Ok(Claim::Taken)
                }
                Ok(agentwire_store::ClaimAccepted::Busy(holder)) => Ok(Claim::Busy(holder)),
                Err(e) => Err(e),
            };
            self.note_claim(&claim);
            let known = match &claim {
                Ok(Claim::Busy(_)) => self.journal.lookup(id.clone()).await.map(|t| t.is_some()),
                _ => Ok(true),
            };
            let fault = |e: &StoreError| match e.is_unwritable() {
                true => JournalFault::Unwritable,
                false => JournalFault::Corrupt,
            };
            let verdict = claim_verdict(
                claim
                    .as_ref()
                    .map(|c| matches!(c, Claim::Taken))
                    .map_err(fault),
                known.as_ref().copied().map_err(fault),
            );
            let error = claim.err().or(known.err());
            let said = || error.as_ref().map(|e| e.to_string()).unwrap_or_default();
            match verdict {
                ClaimVerdict::Go => {}
                ClaimVerdict::ConversationBusy => {
                    self.forget(&id);
                    return SubmitReply::ConversationBusy;
                }
                // A corrupt record stays corrupt however often it is asked, on any instance: the turn is not
                // taken (a refusal journaled and delivered), rather than refused as if the journal might take
                // it soon.
                ClaimVerdict::Corrupt => {
                    tracing::error!(request = %id, conversation = %sub.input.conversation_id, error = %said(), "the journal holds a corrupt record for this turn or its conversation");
                    self.forget(&id);
                    let failure = Failure::new(
                        Refusal::TurnNotTaken,
                        "the journal holds a corrupt record for this turn or its conversation; an operator has to remove it",
                    );
                    return self.refuse_watched(sub, failure).await;
                }
                ClaimVerdict::Unavailable => {
                    tracing::error!(request = %id, error = %said(), "journal could not claim a conversation");
                    self.forget(&id);
                    return SubmitReply::JournalUnavailable(said());
                }
            }
        }
        // A turn nobody is told of until its first event may be journaled unsynced (see
        // TurnPolicy::accepted_silently) when it starts at once; one that will wait is told it waits, so
        // its accept is synced (and an exclusive one was claimed and accepted above). Nothing can go
        // before it meanwhile: a conversation's turns start in the order they were submitted.
        let soon = taken.is_none()
            && sub.policy.accepted_silently
            && self.lock().core.book.starts_when_journaled(&id);
        let accepted = match taken {
            Some(accepted) => accepted,
            None if soon => {
                self.journal_write(self.journal.accept_soon(self.new_turn(&sub)))
                    .await
            }
            None => {
                self.journal_write(self.journal.accept(self.new_turn(&sub)))
                    .await
            }
        };
        match accepted {
            Ok(Accepted::New) if soon => {
                if let Some(t) = self.lock().live.get_mut(&id) {
                    t.unsynced = true;
                }
            }
            Ok(Accepted::New) => {}
            Ok(Accepted::Existing(stored)) => {
                self.forget(&id);
                return self.answer_stored(&sub, stored).await;
            }
            Err(e) => {
                // Not journaled, so not taken: nothing goes on the wire (an answer now could be contradicted
                // by the same request served later), and the front decides what its peer is told.
                tracing::error!(request = %id, error = %e, "journal refused a turn");
                self.forget(&id);
                return SubmitReply::JournalUnavailable(e.to_string());
            }
        }
        let next = self.lock().core.book.journaled(&id);
        match next {
            Journaled::Start => {
                // The run is spawned before the front is told and begins after. Spawned after, it would
                // take the runtime's next slot ahead of the task the front just woke (the one that sends
                // a fisk-ai ack), and the acknowledgement would wait for the agent.
                let go = self.start_held(id);
                sub.front.accepted(false);
                let _ = go.send(());
                SubmitReply::Accepted { queued: false }
            }
            Journaled::Queued => {
                // Its acceptance was synced: only a turn that starts at once is accepted unsynced.
                sub.front.accepted(true);
                SubmitReply::Accepted { queued: true }
            }
            Journaled::EndCancelled => {
                let f = Failure::new(TurnFailure::Cancelled, "cancelled before it started");
                self.record_and_deliver(&id, Outcome::Failure(f)).await;
                SubmitReply::Accepted { queued: false }
            }
            Journaled::Unknown => SubmitReply::DuplicateLive,
        }
    }

    /// Answers a request the journal already holds as `stored` (a resend, found by [`admit`](Self::admit))
    /// from the journal, without taking a place in its conversation or a capacity slot: a resend of a
    /// finished turn gets its journaled terminal whatever runs here now, and holds up no other turn of the
    /// conversation while it is answered.
    pub async fn answer_resend(
        self: &Arc<Self>,
        sub: Submission,
        stored: Box<StoredTurn>,
    ) -> SubmitReply {
        // Not published to watchers: the turn was, when it ran.
        self.answer_stored(&sub, stored).await
    }

    /// Answers a request the journal holds as `stored` (not live here): its journaled outcome, the refusal a
    /// request still in flight gets, or, for a turn of this instance a crash cut off, its one ending.
    pub(super) async fn answer_stored(
        self: &Arc<Self>,
        sub: &Submission,
        stored: Box<StoredTurn>,
    ) -> SubmitReply {
        let id = stored.request_id.clone();
        let live_here = self.lock().core.is_live(&id);
        if stored.outcome.is_none() && stored.owner == self.owner && !live_here {
            // A turn of ours that a crash cut off, sent again before the recovery pass reached it (which
            // skips turns live here, as this one may have been for a moment): it ends here, once, when the
            // journal can take its outcome (else the recovery pass ends it later).
            if !self.health.writable() {
                return SubmitReply::JournalUnavailable("the journal cannot be written".into());
            }
            // What the agent started for it elsewhere is stopped there, as the recovery pass does.
            tokio::spawn(self.agent.interrupted(&stored.input));
            let outcome = interrupted();
            let wire = sub.front.encode_outcome(&outcome);
            let finish = Finish::new(id, outcome, now_secs()).wire(wire);
            let (outcome, wire) = self.finish_durably(finish).await;
            sub.front.deliver_outcome(&outcome, wire.as_deref());
        } else {
            sub.front.replay(&stored);
        }
        SubmitReply::DuplicateStored(stored)
    }

    /// Refuses a request before it runs (bad input, policy): the refusal is journaled under the request id,
    /// so a resend gets the same answer without being judged again, then delivered.
    pub async fn refuse(self: &Arc<Self>, sub: Submission, failure: Failure) -> SubmitReply {
        let sub = self.watched(sub);
        self.refuse_watched(sub, failure).await
    }

    pub(super) async fn refuse_watched(
        self: &Arc<Self>,
        sub: Submission,
        failure: Failure,
    ) -> SubmitReply {
        if !self.health.writable() {
            return SubmitReply::JournalUnavailable("the journal cannot be written".into());
        }
        let id = sub.input.request_id.clone();
        let accepted = self
            .journal_write(self.journal.accept(self.new_turn(&sub)))
            .await;
        match accepted {
            Ok(Accepted::Existing(stored)) => {
                sub.front.replay(&stored);
                SubmitReply::DuplicateStored(stored)
            }
            Ok(Accepted::New) => {
                let outcome = Outcome::Failure(failure.clone());
                let wire = sub.front.encode_outcome(&outcome);
                let (outcome, wire) = self
                    .finish_durably(Finish::new(id, outcome, now_secs()).wire(wire))
                    .await;
                sub.front.deliver_outcome(&outcome, wire.as_deref());
                SubmitReply::Refused(failure)
            }
            Err(e) => {
                tracing::error!(request = %id, error = %e, "journal refused a refusal");
                SubmitReply::JournalUnavailable(e.to_string())
            }
        }
    }
}

impl Engine {
    /// What the journal records of a submission.
    pub(super) fn new_turn(&self, sub: &Submission) -> NewTurn {
        NewTurn {
            request_id: sub.input.request_id.clone(),
            conversation_id: sub.input.conversation_id.clone(),
            protocol: sub.protocol.clone(),
            owner: self.owner.clone(),
            agent: self.agent_name.clone(),
            route: route_with_requester(&sub.route, &sub.requester),
            input: sub.input.clone(),
            accepted_at: now_secs(),
            conversation_meta: sub.conversation_meta.clone(),
        }
    }
}

/// Turn route `route` with `"requester"` set to `requester` (when the route is an object that has none):
/// every turn's requester is journaled, so the turn lists name it after a restart too
/// ([`crate::route_requester`]). A front's own route types ignore the extra key.
fn route_with_requester(route: &serde_json::Value, requester: &str) -> serde_json::Value {
    let mut route = route.clone();
    if let Some(fields) = route.as_object_mut() {
        if !requester.is_empty() && !fields.contains_key("requester") {
            fields.insert("requester".into(), requester.into());
        }
    }
    route
}

#[cfg(test)]
mod route_tests {
    use super::*;

    #[test]
    fn the_requester_is_journaled_in_the_route_unless_the_front_put_one_there() {
        let r = route_with_requester(&serde_json::json!({"job": "j1"}), "alice");
        assert_eq!(r, serde_json::json!({"job": "j1", "requester": "alice"}));
        assert_eq!(crate::watch::route_requester(&r), "alice");
        let own = serde_json::json!({"requester": "caller:ci"});
        assert_eq!(route_with_requester(&own, "other"), own);
        assert_eq!(
            route_with_requester(&serde_json::Value::Null, "a"),
            serde_json::Value::Null
        );
        assert_eq!(
            route_with_requester(&serde_json::json!({}), ""),
            serde_json::json!({})
        );
    }
}
