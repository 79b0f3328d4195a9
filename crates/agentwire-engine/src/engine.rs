//! The async driver around the turn book: journal first, then act; one task per running turn.

use crate::agent::{Agent, TurnInput, EVENT_QUEUE_DEPTH};
use agentwire_core::{
    CancelDecision, ConversationId, Failure, FailureCode, Finished, Journaled, Outcome, RequestId,
    Submitted, TurnBook, TurnEvent,
};
use agentwire_store::{Accepted, Journal, NewTurn, StoreError, StoredTurn};
use futures_util::future::BoxFuture;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, watch};

/// The retry hint given with a turn a crash cut off: long enough for the daemon to be back, short enough
/// that a client retrying soon gets an answer.
pub const INTERRUPTED_RETRY_AFTER_SECS: u64 = 5;

/// The protocol side of one turn: puts its events and its outcome on the wire.
pub trait TurnFront: Send + Sync + 'static {
    /// The turn is journaled and will run (or waits behind its conversation): acknowledge it on the wire.
    fn accepted(&self, queued: bool);
    /// One event of the running turn, in order. Must not block (queue it).
    fn event(&self, event: TurnEvent);
    /// The wire form of the outcome, journaled with it so a resend is byte-identical.
    fn encode_outcome(&self, outcome: &Outcome) -> Option<String>;
    /// Send the journaled outcome.
    fn deliver_outcome(&self, outcome: &Outcome, wire: Option<&str>);
}

/// A validated request, ready for the engine.
pub struct Submission {
    /// The turn's input.
    pub input: TurnInput,
    /// Which front (`nipxx`, ...).
    pub protocol: String,
    /// Who asked (a pubkey, a NATS identity): only they may cancel.
    pub requester: String,
    /// Where the outcome goes, journaled for restarts.
    pub route: serde_json::Value,
    /// The front that serves this turn.
    pub front: Arc<dyn TurnFront>,
}

/// The answer to [`Engine::submit`].
#[derive(Debug, Clone, PartialEq)]
pub enum SubmitReply {
    /// Journaled; running now or queued behind its conversation.
    Accepted {
        /// Whether it waits behind another turn.
        queued: bool,
    },
    /// The request id is live already: a resend, not run again.
    DuplicateLive,
    /// The journal has this request id: a resend, answered from the journal.
    DuplicateStored(Box<StoredTurn>),
    /// Refused before acceptance; the failure was journaled and delivered through the front.
    Refused(Failure),
}

/// The answer to [`Engine::cancel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReply {
    /// The turn will end (or has ended) as cancelled because of this request.
    Cancelling,
    /// Nothing to do: asked before, already ended, unknown, or not the requester's turn.
    Ignored,
}

struct LiveTurn {
    requester: String,
    input: TurnInput,
    front: Arc<dyn TurnFront>,
    cancel: watch::Sender<bool>,
    /// Someone has taken the job of journaling and delivering the decided outcome.
    delivering: bool,
}

#[derive(Default)]
struct State {
    book: TurnBook,
    live: HashMap<RequestId, LiveTurn>,
}

/// The engine. Cheap to share (`Arc`).
pub struct Engine {
    state: Mutex<State>,
    journal: Arc<Journal>,
    agent: Arc<dyn Agent>,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Engine {
    /// An engine over a journal and an agent.
    pub fn new(journal: Arc<Journal>, agent: Arc<dyn Agent>) -> Arc<Engine> {
        Arc::new(Engine {
            state: Mutex::new(State::default()),
            journal,
            agent,
        })
    }

    /// The agent this engine runs.
    pub fn agent(&self) -> &Arc<dyn Agent> {
        &self.agent
    }

    /// The journal.
    pub fn journal(&self) -> &Arc<Journal> {
        &self.journal
    }

    /// Number of live (pending, queued, running or ending) turns.
    pub fn live_turns(&self) -> usize {
        self.lock().book.live()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the book half-updated (each method is one step), so a
        // poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Submits a validated request: journals it, then runs or queues it.
    ///
    /// The turn is registered (and a live duplicate recognised) before this returns, so a cancel handled
    /// after this call finds it even while the returned future is still journaling it.
    pub fn submit(self: &Arc<Self>, sub: Submission) -> BoxFuture<'static, SubmitReply> {
        let id = sub.input.request_id.clone();
        let conv = sub.input.conversation_id.clone();
        let (cancel_tx, _) = watch::channel(false);
        {
            let mut st = self.lock();
            match st.book.submit(id.clone(), conv.clone()) {
                Submitted::New => {}
                Submitted::Duplicate(_) => return Box::pin(async { SubmitReply::DuplicateLive }),
                Submitted::ConversationFull => {
                    drop(st);
                    let f = Failure::new(
                        FailureCode::SessionLimit,
                        format!(
                            "conversation has {} turns waiting; wait for them to end",
                            agentwire_core::MAX_QUEUED_TURNS_PER_CONVERSATION
                        ),
                    )
                    .retry_after(10);
                    let this = self.clone();
                    return Box::pin(async move { this.refuse(sub, f).await });
                }
            }
            st.live.insert(
                id.clone(),
                LiveTurn {
                    requester: sub.requester.clone(),
                    input: sub.input.clone(),
                    front: sub.front.clone(),
                    cancel: cancel_tx,
                    delivering: false,
                },
            );
        }
        let this = self.clone();
        Box::pin(async move { this.journal_and_start(sub, id, conv).await })
    }

    async fn journal_and_start(
        self: Arc<Self>,
        sub: Submission,
        id: RequestId,
        conv: ConversationId,
    ) -> SubmitReply {
        let accepted = self
            .journal
            .accept(NewTurn {
                request_id: id.clone(),
                conversation_id: conv,
                protocol: sub.protocol.clone(),
                route: sub.route.clone(),
                input: serde_json::to_value(&sub.input).unwrap_or_default(),
                accepted_at: now_secs(),
            })
            .await;
        match accepted {
            Ok(Accepted::New) => {}
            Ok(Accepted::Existing(stored)) => {
                let next = {
                    let mut st = self.lock();
                    st.live.remove(&id);
                    st.book.forget(&id)
                };
                if let Some(next) = next {
                    self.start(next);
                }
                return SubmitReply::DuplicateStored(stored);
            }
            Err(e) => {
                tracing::error!(request = %id, error = %e, "journal refused a turn");
                // Not journaled, so not acknowledged: answer it, but it is not in the journal to resend.
                let f = Failure::new(
                    FailureCode::Internal,
                    "the journal could not record the turn",
                )
                .retry_after(5);
                let decided = self.lock().book.finish(&id) == Finished::Decided;
                if decided {
                    let wire = sub.front.encode_outcome(&Outcome::Failure(f.clone()));
                    sub.front
                        .deliver_outcome(&Outcome::Failure(f.clone()), wire.as_deref());
                    let next = {
                        let mut st = self.lock();
                        st.live.remove(&id);
                        st.book.ended(&id)
                    };
                    if let Some(next) = next {
                        self.start(next);
                    }
                }
                return SubmitReply::Refused(f);
            }
        }
        let next = self.lock().book.journaled(&id);
        match next {
            Journaled::Start => {
                sub.front.accepted(false);
                self.start(id);
                SubmitReply::Accepted { queued: false }
            }
            Journaled::Queued => {
                sub.front.accepted(true);
                SubmitReply::Accepted { queued: true }
            }
            Journaled::EndCancelled => {
                let f = Failure::new(FailureCode::Cancelled, "cancelled before it started");
                self.record_and_deliver(&id, Outcome::Failure(f)).await;
                SubmitReply::Accepted { queued: false }
            }
            Journaled::Unknown => SubmitReply::DuplicateLive,
        }
    }

    /// Refuses a request before it runs (bad input, policy): the refusal is journaled under the request id,
    /// so a resend gets the same answer without being judged again, then delivered.
    pub async fn refuse(self: &Arc<Self>, sub: Submission, failure: Failure) -> SubmitReply {
        let id = sub.input.request_id.clone();
        let accepted = self
            .journal
            .accept(NewTurn {
                request_id: id.clone(),
                conversation_id: sub.input.conversation_id.clone(),
                protocol: sub.protocol.clone(),
                route: sub.route.clone(),
                input: serde_json::to_value(&sub.input).unwrap_or_default(),
                accepted_at: now_secs(),
            })
            .await;
        let outcome = Outcome::Failure(failure.clone());
        let wire = sub.front.encode_outcome(&outcome);
        match accepted {
            Ok(Accepted::Existing(stored)) => return SubmitReply::DuplicateStored(stored),
            Ok(Accepted::New) => {
                if let Err(e) = self
                    .journal
                    .finish(&id, &outcome, wire.clone(), now_secs())
                    .await
                {
                    tracing::error!(request = %id, error = %e, "journal refused a refusal");
                }
            }
            Err(e) => tracing::error!(request = %id, error = %e, "journal refused a refusal"),
        }
        sub.front.deliver_outcome(&outcome, wire.as_deref());
        SubmitReply::Refused(failure)
    }

    /// Cancels a turn on behalf of `requester`. Idempotent; a no-op after the outcome.
    pub async fn cancel(self: &Arc<Self>, id: &RequestId, requester: &str) -> CancelReply {
        let decision = {
            let mut st = self.lock();
            match st.live.get(id) {
                Some(t) if t.requester == requester => {}
                _ => return CancelReply::Ignored,
            }
            let d = st.book.cancel(id);
            if d == CancelDecision::SignalAgent {
                if let Some(t) = st.live.get(id) {
                    let _ = t.cancel.send(true);
                }
            }
            d
        };
        match decision {
            CancelDecision::SignalAgent | CancelDecision::Deferred => CancelReply::Cancelling,
            CancelDecision::EndNow => {
                let f = Failure::new(FailureCode::Cancelled, "cancelled while queued");
                self.record_and_deliver(id, Outcome::Failure(f)).await;
                CancelReply::Cancelling
            }
            CancelDecision::Ignored => CancelReply::Ignored,
        }
    }

    /// After a restart: ends every turn of `protocol` that a crash cut off, through the front `make_front`
    /// builds from the journaled route. Returns how many were ended.
    pub async fn recover<F>(
        self: &Arc<Self>,
        protocol: &str,
        make_front: F,
    ) -> Result<usize, StoreError>
    where
        F: Fn(&StoredTurn) -> Option<Arc<dyn TurnFront>>,
    {
        let turns = self.journal.interrupted(protocol)?;
        let mut n = 0;
        for t in turns {
            let outcome = Outcome::Failure(
                Failure::new(
                    FailureCode::Interrupted,
                    "the agent restarted while this run was in progress",
                )
                .retry_after(INTERRUPTED_RETRY_AFTER_SECS),
            );
            let front = make_front(&t);
            let wire = front.as_ref().and_then(|f| f.encode_outcome(&outcome));
            match self
                .journal
                .finish(&t.request_id, &outcome, wire.clone(), now_secs())
                .await
            {
                Ok(()) | Err(StoreError::AlreadyEnded(_)) => {}
                Err(e) => return Err(e),
            }
            if let Some(f) = front {
                f.deliver_outcome(&outcome, wire.as_deref());
            }
            n += 1;
        }
        Ok(n)
    }

    fn start(self: &Arc<Self>, id: RequestId) {
        let this = self.clone();
        tokio::spawn(async move { this.run(id).await });
    }

    async fn run(self: Arc<Self>, id: RequestId) {
        let (input, front, mut cancel_rx) = {
            let st = self.lock();
            let Some(t) = st.live.get(&id) else { return };
            (t.input.clone(), t.front.clone(), t.cancel.subscribe())
        };
        if *cancel_rx.borrow() {
            let f = Failure::new(FailureCode::Cancelled, "cancelled");
            self.record_and_deliver(&id, Outcome::Failure(f)).await;
            return;
        }
        let (ev_tx, mut ev_rx) = mpsc::channel(EVENT_QUEUE_DEPTH);
        let agent_run = self.agent.run(input, ev_tx, cancel_rx.clone());
        // The agent runs in its own task so that a panic in it is caught as a failure of this turn only.
        let mut handle = tokio::spawn(agent_run);
        let mut events_open = true;
        let outcome = loop {
            tokio::select! {
                biased;
                changed = cancel_rx.changed() => {
                    if changed.is_ok() && *cancel_rx.borrow() {
                        handle.abort();
                        break Outcome::Failure(Failure::new(FailureCode::Cancelled, "cancelled by the requester"));
                    }
                }
                ev = ev_rx.recv(), if events_open => match ev {
                    Some(ev) => front.event(ev),
                    None => events_open = false,
                },
                joined = &mut handle => {
                    // Deliver what the agent sent before it returned.
                    while let Ok(ev) = ev_rx.try_recv() { front.event(ev) }
                    break match joined {
                        Ok(o) => normalise(o),
                        Err(e) => {
                            tracing::error!(request = %id, error = %e, "agent task failed");
                            Outcome::Failure(Failure::new(FailureCode::Internal, "the agent crashed while running this turn"))
                        }
                    };
                }
            }
        };
        self.record_and_deliver(&id, outcome).await;
    }

    /// Decides, journals and delivers a turn's one outcome, then starts its conversation's next turn.
    async fn record_and_deliver(self: &Arc<Self>, id: &RequestId, outcome: Outcome) {
        let front = {
            let mut st = self.lock();
            let State { book, live } = &mut *st;
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
            turn.front.clone()
        };
        let wire = front.encode_outcome(&outcome);
        if let Err(e) = self
            .journal
            .finish(id, &outcome, wire.clone(), now_secs())
            .await
        {
            tracing::error!(request = %id, error = %e, "journal refused an outcome");
        }
        front.deliver_outcome(&outcome, wire.as_deref());
        let next = {
            let mut st = self.lock();
            st.live.remove(id);
            st.book.ended(id)
        };
        if let Some(next) = next {
            self.start(next);
        }
    }
}

fn normalise(o: Outcome) -> Outcome {
    match o {
        Outcome::Result(r) if r.text.is_empty() => Outcome::Failure(Failure {
            code: FailureCode::EmptyResponse,
            message: "the agent produced no response text".into(),
            retry_after: None,
            usage: r.usage,
        }),
        o => o,
    }
}
