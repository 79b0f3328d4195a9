//! One running turn: waiting for its conversation and a place at the agent, the agent's run with its events
//! passed to the front, and the one outcome decided, journaled and delivered.

use super::*;

impl Engine {
    pub(super) fn start(self: &Arc<Self>, id: RequestId) {
        let this = self.clone();
        tokio::spawn(async move { this.run(id).await });
    }

    /// Spawns the run of turn `id`, which begins once the returned sender fires (or is dropped).
    pub(super) fn start_held(self: &Arc<Self>, id: RequestId) -> oneshot::Sender<()> {
        let (go, wait) = oneshot::channel::<()>();
        let this = self.clone();
        tokio::spawn(async move {
            let _ = wait.await;
            this.run(id).await
        });
        go
    }

    pub(super) async fn run(self: Arc<Self>, id: RequestId) {
        let (input, front, mut cancel_rx, policy, protocol) = {
            let st = self.lock();
            let Some(t) = st.live.get(&id) else { return };
            (
                t.input.clone(),
                t.front.clone(),
                t.cancel.subscribe(),
                t.policy,
                t.protocol.clone(),
            )
        };
        if *cancel_rx.borrow() {
            let f = Failure::new(TurnFailure::Cancelled, "cancelled");
            self.record_and_deliver(&id, Outcome::Failure(f)).await;
            return;
        }
        if !policy.exclusive {
            let failed = match self.wait_for_conversation(&id, &input, &cancel_rx).await {
                Ok(true) => None,
                Ok(false) => Some(Failure::new(TurnFailure::Cancelled, "cancelled")),
                Err(error) => {
                    tracing::error!(request = %id, conversation = %input.conversation_id, %error, "the conversation's claim could not be read");
                    Some(Failure::new(
                        TurnFailure::Internal,
                        "the conversation's record could not be read",
                    ))
                }
            };
            if let Some(f) = failed {
                self.record_and_deliver(&id, Outcome::Failure(f)).await;
                return;
            }
        }
        // A turn waits here for one of the agent's places when it runs a limited number at once; a cancel
        // while it waits ends it.
        let _permit = match self.running.get() {
            None => None,
            Some((_, permits)) => {
                let permits = permits.clone();
                let mut signal = cancel_rx.clone();
                tokio::select! {
                    p = permits.acquire_owned() => p.ok(),
                    _ = crate::agent::cancelled(&mut signal) => {
                        let f = Failure::new(TurnFailure::Cancelled, "cancelled");
                        self.record_and_deliver(&id, Outcome::Failure(f)).await;
                        return;
                    }
                }
            }
        };
        tracing::info!(
            agent = %self.agent_name, protocol = %protocol, conversation = %input.conversation_id,
            request = %id, "turn started"
        );
        let wants_history = self.agent.wants_history();
        let mut input = input;
        if wants_history {
            // The earlier turns come from the journal, so a restart between two turns loses none of them.
            match self
                .journal
                .recent_turns(
                    input.conversation_id.clone(),
                    crate::agent::MAX_HISTORY_TURNS + 1,
                )
                .await
            {
                Ok(view) => {
                    // A front whose request carries the conversation (an OpenAI `messages[]`) gave its
                    // earlier turns with the input: they follow the journal's own.
                    let given = std::mem::take(&mut input.history);
                    input.history = crate::agent::past_turns(&view, &id, &self.agent_name);
                    input.history.extend(given);
                }
                Err(error) => {
                    tracing::warn!(%error, "could not read the conversation's earlier turns");
                    let f = Failure::new(
                        TurnFailure::Internal,
                        "the conversation's earlier turns could not be read",
                    );
                    self.record_and_deliver(&id, Outcome::Failure(f)).await;
                    return;
                }
            }
        }
        let (ev_tx, mut ev_rx) = mpsc::channel(EVENT_QUEUE_DEPTH);
        let asker = Asker::new(Arc::new(TurnAsker {
            engine: Arc::downgrade(&self),
            id: id.clone(),
        }));
        // The turn's span opens as the agent starts (a turn that ends before has none), under the
        // requester's trace when its front carries one; the front learns the trace id for its terminal.
        let traceparent = front.traceparent();
        let trace = self.telemetry().start_turn(crate::telemetry::TurnSpan {
            agent: &self.agent_name,
            protocol: &protocol,
            conversation: input.conversation_id.as_str(),
            model: &input.model,
            prompt: &input.message,
            traceparent: traceparent.as_deref(),
        });
        if let Some(trace_id) = trace.trace_id() {
            front.traced(&trace_id, trace.content());
        }
        let ctx = TurnContext {
            events: ev_tx,
            cancel: cancel_rx.clone(),
            asker,
            token_budget: front.token_budget(),
            trace: trace.clone(),
        };
        let agent_run = self.agent.run(input, ctx);
        // The agent runs in its own task so that a panic in it is caught as a failure of this turn only.
        let mut handle = tokio::spawn(agent_run);
        let mut events_open = true;
        // Whether the turn's acceptance is known durable (else made so before its first event goes out).
        let mut durable = !self.lock().live.get(&id).is_some_and(|t| t.unsynced);
        // Under a parking policy the agent sees the cancel and ends the turn itself.
        let mut watch_cancel = !policy.park_on_cancel;
        let mut transcript = (policy.keep_transcript || wants_history).then(Vec::new);
        let mut tool_calls = 0u64;
        let mut pass = |ev: TurnEvent| {
            // Each event's kind (and its tool), never its text: at debug an operator sees a turn move.
            tracing::debug!(
                request = %id, event = ev.kind(), tool = ev.tool(),
                "turn event"
            );
            if matches!(ev, TurnEvent::ToolCall { .. }) {
                tool_calls += 1;
            }
            if let Some(t) = transcript.as_mut() {
                if t.len() < MAX_TRANSCRIPT_EVENTS {
                    t.push(ev.clone());
                }
            }
            front.event(ev);
        };
        let outcome = loop {
            tokio::select! {
                biased;
                changed = cancel_rx.changed(), if watch_cancel => {
                    if changed.is_err() {
                        watch_cancel = false;
                    } else if *cancel_rx.borrow() {
                        handle.abort();
                        break Outcome::Failure(Failure::new(TurnFailure::Cancelled, "cancelled by the requester"));
                    }
                }
                ev = ev_rx.recv(), if events_open => match ev {
                    Some(ev) => {
                        if !durable {
                            self.acceptance_durable(&id).await;
                            durable = true;
                        }
                        pass(ev)
                    }
                    None => events_open = false,
                },
                joined = &mut handle => {
                    // Deliver what the agent sent before it returned (its acceptance durable first).
                    while let Ok(ev) = ev_rx.try_recv() {
                        if !durable {
                            self.acceptance_durable(&id).await;
                            durable = true;
                        }
                        pass(ev)
                    }
                    break match joined {
                        Ok(o) => normalise(o),
                        Err(e) => {
                            tracing::error!(request = %id, error = %e, "agent task failed");
                            Outcome::Failure(Failure::new(TurnFailure::Crashed, "the agent crashed while running this turn"))
                        }
                    };
                }
            }
        };
        end_span(&trace, &outcome);
        self.record(&id, outcome, transcript, tool_calls).await;
    }

    /// Waits until turn `id` holds its conversation in the journal ([`Journal::claim`]): in a shared journal,
    /// another instance may run a turn of it. `false` when the turn was cancelled meanwhile. A journal that
    /// cannot answer is asked again, as one whose conversation is busy; one that answers with a corrupt
    /// record is an error, which asking again would not change.
    pub(super) async fn wait_for_conversation(
        &self,
        id: &RequestId,
        input: &TurnInput,
        cancel: &watch::Receiver<bool>,
    ) -> Result<bool, StoreError> {
        // Each is logged once, not every look.
        let (mut told, mut failed) = (false, false);
        loop {
            let claim = self
                .journal
                .claim(input.conversation_id.clone(), id.clone())
                .await;
            self.note_claim(&claim);
            match claim {
                Ok(Claim::Taken) => return Ok(true),
                Ok(Claim::Busy(holder)) if !told => {
                    tracing::info!(request = %id, %holder, "waiting for the conversation's running turn");
                    told = true;
                }
                Ok(Claim::Busy(_)) => {}
                Err(e) if !e.is_unwritable() => return Err(e),
                Err(e) if !failed => {
                    tracing::warn!(request = %id, error = %e, "could not claim the conversation; trying again");
                    failed = true;
                }
                Err(_) => {}
            }
            let mut signal = cancel.clone();
            tokio::select! {
                _ = self.wait_for(|core, now| core.handle_claim_busy(now)) => {}
                _ = crate::agent::cancelled(&mut signal) => return Ok(false),
            }
        }
    }

    /// Decides, journals and delivers a turn's one outcome, then starts its conversation's next turn.
    pub(super) async fn record_and_deliver(self: &Arc<Self>, id: &RequestId, outcome: Outcome) {
        self.record(id, outcome, None, 0).await
    }

    pub(super) async fn record(
        self: &Arc<Self>,
        id: &RequestId,
        outcome: Outcome,
        transcript: Option<Vec<TurnEvent>>,
        tool_calls: u64,
    ) {
        let front = {
            let mut st = self.lock();
            let State { core, live, .. } = &mut *st;
            let book = &mut core.book;
            let Some(turn) = live.get_mut(id) else { return };
            // The book decides the one outcome; `EndNow` and `EndCancelled` decide it inside the book, so the
            // caller that follows them finds `AlreadyEnding` with nobody delivering yet and takes it.
            let mine = match book.finish(id) {
                Finished::Decided => true,
                Finished::AlreadyEnding => !turn.delivering,
                Finished::Unknown => false,
            };
            if !mine {
                return;
            }
            turn.delivering = true;
            log_ended(&self.agent_name, id, turn, &outcome);
            turn.front.clone()
        };
        let wire = front.encode_outcome(&outcome);
        let finish = Finish {
            request_id: id.clone(),
            outcome,
            wire,
            transcript,
            tool_calls,
            ended_at: now_secs(),
        };
        // Delivered only once durable: a terminal the journal lacks would be contradicted after a restart.
        let (outcome, wire) = self.finish_durably(finish).await;
        // The turn leaves the live table (and frees its slot) before its terminal goes out, so a caller
        // that resends at once is answered from the journal rather than told the request is in flight.
        let next = {
            let mut st = self.lock();
            self.delivering
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            st.live.remove(id);
            self.unindexed(id);
            st.core.handle_turn_left(id);
            st.core.book.ended(id)
        };
        front.deliver_outcome(&outcome, wire.as_deref());
        self.delivering
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        self.ended.notify_waiters();
        if let Some(next) = next {
            self.start(next);
        }
    }
}

/// The operator's line for a turn's end: `info` with its outcome (or code), duration and tokens; `warn` with
/// the cause when it failed for the agent's reasons (its model server unreachable, refusing, or answering
/// what cannot be read; the agent failing or crashing). Never the prompt or the answer.
fn log_ended(agent: &str, id: &RequestId, turn: &LiveTurn, outcome: &Outcome) {
    let duration_ms = turn.taken.elapsed().as_millis() as u64;
    let (protocol, conversation) = (&turn.protocol, &turn.input.conversation_id);
    match outcome {
        Outcome::Result(r) => tracing::info!(
            %agent, %protocol, %conversation, request = %id, outcome = %"result", duration_ms,
            input_tokens = r.usage.input_tokens, output_tokens = r.usage.output_tokens,
            "turn ended"
        ),
        Outcome::Failure(f) => {
            let code = f.code.as_str();
            let tokens = f.usage.input_tokens + f.usage.output_tokens;
            if agents_fault(&f.code) {
                tracing::warn!(
                    %agent, %protocol, %conversation, request = %id, outcome = %code, duration_ms,
                    tokens, cause = %f.message, "turn failed for the agent's reasons"
                );
            } else {
                tracing::info!(
                    %agent, %protocol, %conversation, request = %id, outcome = %code, duration_ms,
                    tokens, "turn ended"
                );
            }
        }
    }
}

/// Whether a failure is the agent's doing (or its model server's), which an operator should look into,
/// rather than the requester's (a cancel, a refusal, a budget) or the daemon's lifecycle (a restart).
fn agents_fault(code: &agentwire_core::FailureCode) -> bool {
    use agentwire_core::FailureCode;
    matches!(
        code,
        FailureCode::Turn(
            TurnFailure::ModelUnavailable
                | TurnFailure::AgentFailed
                | TurnFailure::Crashed
                | TurnFailure::EmptyResponse
                | TurnFailure::ProviderBusy
                | TurnFailure::ProviderRefused
                | TurnFailure::ToolError
                | TurnFailure::Internal
        )
    )
}

/// Ends a turn's `invoke_agent` span with its outcome: the tokens, the stop reason, or the failure's code
/// as `error.type`; the answer only when the trace carries content.
fn end_span(trace: &crate::TurnTrace, outcome: &Outcome) {
    use crate::telemetry::attr;
    match outcome {
        Outcome::Result(r) => {
            trace.set_usage(r.usage.input_tokens, r.usage.output_tokens);
            trace.set_strs(attr::FINISH_REASONS, &[r.stop_reason.as_str()]);
            trace.set_answer(&r.text);
        }
        Outcome::Failure(f) => {
            trace.set_usage(f.usage.input_tokens, f.usage.output_tokens);
            trace.fail(f.code.as_str());
        }
    }
    trace.end();
}

fn normalise(o: Outcome) -> Outcome {
    match o {
        Outcome::Result(r) if r.text.is_empty() => Outcome::Failure(
            Failure::new(
                TurnFailure::EmptyResponse,
                "the agent produced no response text",
            )
            .with_usage(r.usage),
        ),
        o => o,
    }
}
