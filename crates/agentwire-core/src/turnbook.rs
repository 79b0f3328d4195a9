//! The turn book: the pure state machine that owns the engine's turn invariants.
//!
//! The async engine calls it under a lock and journals each decision before acting on it:
//!
//! 1. [`TurnBook::submit`] registers a request as `Pending` (or recognises a live duplicate);
//! 2. the engine journals it (insert-if-absent); if the journal already had it, [`TurnBook::forget`],
//!    otherwise [`TurnBook::journaled`], which starts it or leaves it waiting. Turns of one conversation
//!    run in the order they were *submitted*, whatever order their journal writes finish in;
//! 3. [`TurnBook::finish`] decides the one outcome (later finishes are refused), the engine journals it, then
//!    [`TurnBook::ended`] frees the conversation and names the next queued turn to start.
//!
//! The book holds only live turns, so its memory is bounded by the live work, not by history; ended turns
//! are answered from the journal.

use crate::{ConversationId, RequestId};
use std::collections::{HashMap, VecDeque};

/// Most turns one conversation may have waiting (pending or queued) behind its running turn. A client that
/// floods one session would otherwise grow the queue without bound; past this the turn is refused with
/// `SessionLimit`.
pub const MAX_QUEUED_TURNS_PER_CONVERSATION: usize = 64;

/// Where a live turn is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnPhase {
    /// Submitted, being journaled.
    Pending {
        /// A cancel arrived before the journal write finished.
        cancel_requested: bool,
    },
    /// Journaled, waiting for its conversation's running turn to end.
    Queued,
    /// Running in the agent.
    Running {
        /// A cancel was passed to the agent.
        cancel_requested: bool,
    },
    /// Its outcome is decided and being journaled.
    Ending,
}

/// The answer to [`TurnBook::submit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submitted {
    /// A new request: journal it, then call [`TurnBook::journaled`] (or [`TurnBook::forget`]).
    New,
    /// The request is live already: a resend, not to be run again.
    Duplicate(TurnPhase),
    /// The conversation has [`MAX_QUEUED_TURNS_PER_CONVERSATION`] turns waiting.
    ConversationFull,
    /// An exclusive submit found another live turn of the conversation; nothing was registered.
    ConversationBusy,
}

/// What to do with a turn once it is journaled ([`TurnBook::journaled`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Journaled {
    /// Start it now.
    Start,
    /// It waits behind the conversation's running turn.
    Queued,
    /// A cancel came first: its outcome is decided as cancelled; journal that, then call
    /// [`TurnBook::ended`]. It never runs.
    EndCancelled,
    /// The book does not know this id (a driver bug, reported not panicked).
    Unknown,
}

/// What to do with a cancel ([`TurnBook::cancel`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelDecision {
    /// Tell the running agent to stop; it will end the turn as cancelled.
    SignalAgent,
    /// The turn was queued and never started: its outcome is decided as cancelled; journal that, then call
    /// [`TurnBook::ended`].
    EndNow,
    /// Recorded; the turn ends as cancelled once journaled.
    Deferred,
    /// Asked before (idempotent) or the turn has ended or is unknown: nothing to do.
    Ignored,
}

/// The answer to [`TurnBook::finish`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// This outcome is the turn's one outcome: journal it, send it, then call [`TurnBook::ended`].
    Decided,
    /// An outcome was decided before: drop this one.
    AlreadyEnding,
    /// Not a live turn (ended earlier or never seen): drop this outcome.
    Unknown,
}

#[derive(Debug)]
struct Entry {
    conversation: ConversationId,
    phase: TurnPhase,
}

#[derive(Debug, Default)]
struct Lane {
    /// The turn that holds the conversation (running or ending).
    holder: Option<RequestId>,
    /// Turns waiting (pending or queued), in the order they were submitted: the order they will run in.
    queue: VecDeque<RequestId>,
    /// Live turns of this conversation in any phase; the lane is dropped when none is left.
    members: usize,
}

/// The live turns and each conversation's lane.
///
/// Invariant after every call: a conversation with no holder has no journaled (`Queued`) turn at the front
/// of its queue; such a turn has been started.
#[derive(Debug, Default)]
pub struct TurnBook {
    turns: HashMap<RequestId, Entry>,
    lanes: HashMap<ConversationId, Lane>,
}

impl TurnBook {
    /// An empty book.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of live turns.
    pub fn live(&self) -> usize {
        self.turns.len()
    }

    /// The turns waiting behind their conversation's running turn (journaled, never started).
    pub fn queued(&self) -> Vec<RequestId> {
        self.turns
            .iter()
            .filter(|(_, e)| e.phase == TurnPhase::Queued)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The phase of a live turn.
    pub fn phase(&self, id: &RequestId) -> Option<TurnPhase> {
        self.turns.get(id).map(|e| e.phase)
    }

    /// Whether any turn of a conversation is live (pending, queued, running or ending).
    pub fn is_busy(&self, conversation: &ConversationId) -> bool {
        self.lanes.get(conversation).is_some_and(|l| l.members > 0)
    }

    /// The turn holding a conversation (running or ending), if any.
    pub fn holder(&self, conversation: &ConversationId) -> Option<&RequestId> {
        self.lanes.get(conversation).and_then(|l| l.holder.as_ref())
    }

    /// Registers a request; it takes its place in its conversation's order now.
    pub fn submit(&mut self, id: RequestId, conversation: ConversationId) -> Submitted {
        self.submit_with(id, conversation, false)
    }

    /// Registers a request that must not wait: [`Submitted::ConversationBusy`] if any turn of its
    /// conversation is live (for protocols that refuse a second turn rather than queue it, like fisk-ai).
    pub fn submit_exclusive(&mut self, id: RequestId, conversation: ConversationId) -> Submitted {
        self.submit_with(id, conversation, true)
    }

    fn submit_with(
        &mut self,
        id: RequestId,
        conversation: ConversationId,
        exclusive: bool,
    ) -> Submitted {
        if let Some(e) = self.turns.get(&id) {
            return Submitted::Duplicate(e.phase);
        }
        if exclusive && self.lanes.get(&conversation).is_some_and(|l| l.members > 0) {
            return Submitted::ConversationBusy;
        }
        let lane = self.lanes.entry(conversation.clone()).or_default();
        if lane.queue.len() >= MAX_QUEUED_TURNS_PER_CONVERSATION {
            if lane.members == 0 {
                self.lanes.remove(&conversation);
            }
            return Submitted::ConversationFull;
        }
        lane.queue.push_back(id.clone());
        lane.members += 1;
        self.turns.insert(
            id,
            Entry {
                conversation,
                phase: TurnPhase::Pending {
                    cancel_requested: false,
                },
            },
        );
        Submitted::New
    }

    /// Drops a pending request the journal already knew (a resend of an ended turn). Returns a turn of the
    /// conversation that may start now that this one no longer stands in front of it.
    pub fn forget(&mut self, id: &RequestId) -> Option<RequestId> {
        let e = self.turns.get(id)?;
        if !matches!(e.phase, TurnPhase::Pending { .. }) {
            return None;
        }
        let e = self.turns.remove(id).expect("present");
        let lane = self.lanes.get_mut(&e.conversation)?;
        lane.queue.retain(|q| q != id);
        lane.members -= 1;
        self.settle(&e.conversation)
    }

    /// Whether pending request `id` starts at once when [`journaled`](Self::journaled): nothing holds its
    /// conversation and no turn is before it. A turn that would wait is told to its peer as waiting.
    pub fn starts_when_journaled(&self, id: &RequestId) -> bool {
        let Some(e) = self.turns.get(id) else {
            return false;
        };
        self.lanes
            .get(&e.conversation)
            .is_some_and(|lane| lane.holder.is_none() && lane.queue.front() == Some(id))
    }

    /// Moves a pending request on once the journal holds it.
    pub fn journaled(&mut self, id: &RequestId) -> Journaled {
        let Some(e) = self.turns.get_mut(id) else {
            return Journaled::Unknown;
        };
        let TurnPhase::Pending { cancel_requested } = e.phase else {
            return Journaled::Unknown;
        };
        let conversation = e.conversation.clone();
        if cancel_requested {
            // Ends without ever holding the conversation. It keeps its place in the queue until `ended`, so
            // no turn behind it starts before its outcome is out (and none is started by a call that could
            // not report it).
            e.phase = TurnPhase::Ending;
            return Journaled::EndCancelled;
        }
        e.phase = TurnPhase::Queued;
        match self.settle(&conversation) {
            Some(started) if &started == id => Journaled::Start,
            _ => Journaled::Queued,
        }
    }

    /// Handles a cancel for a request.
    pub fn cancel(&mut self, id: &RequestId) -> CancelDecision {
        let Some(e) = self.turns.get_mut(id) else {
            return CancelDecision::Ignored;
        };
        match e.phase {
            TurnPhase::Pending {
                cancel_requested: false,
            } => {
                e.phase = TurnPhase::Pending {
                    cancel_requested: true,
                };
                CancelDecision::Deferred
            }
            TurnPhase::Running {
                cancel_requested: false,
            } => {
                e.phase = TurnPhase::Running {
                    cancel_requested: true,
                };
                CancelDecision::SignalAgent
            }
            TurnPhase::Queued => {
                // It leaves the queue in `ended`.
                e.phase = TurnPhase::Ending;
                CancelDecision::EndNow
            }
            TurnPhase::Pending {
                cancel_requested: true,
            }
            | TurnPhase::Running {
                cancel_requested: true,
            }
            | TurnPhase::Ending => CancelDecision::Ignored,
        }
    }

    /// Decides a turn's outcome. Only the first call for a live turn is [`Finished::Decided`].
    pub fn finish(&mut self, id: &RequestId) -> Finished {
        let Some(e) = self.turns.get_mut(id) else {
            return Finished::Unknown;
        };
        match e.phase {
            TurnPhase::Ending => Finished::AlreadyEnding,
            TurnPhase::Pending { .. } | TurnPhase::Queued => {
                // Refused before it ran (e.g. the journal write failed): it leaves the queue in `ended`.
                e.phase = TurnPhase::Ending;
                Finished::Decided
            }
            TurnPhase::Running { .. } => {
                e.phase = TurnPhase::Ending;
                Finished::Decided
            }
        }
    }

    /// Forgets a turn whose outcome is journaled. Returns the next turn of its conversation to start, if
    /// one is journaled and next in line.
    pub fn ended(&mut self, id: &RequestId) -> Option<RequestId> {
        let e = self.turns.get(id)?;
        if e.phase != TurnPhase::Ending {
            return None;
        }
        let e = self.turns.remove(id).expect("present");
        let lane = self.lanes.get_mut(&e.conversation)?;
        lane.members -= 1;
        if lane.holder.as_ref() == Some(id) {
            lane.holder = None;
        } else {
            lane.queue.retain(|q| q != id);
        }
        self.settle(&e.conversation)
    }

    /// Restores the invariant for one conversation: starts the front turn if it is journaled and nothing
    /// holds the conversation; drops an empty lane.
    fn settle(&mut self, conversation: &ConversationId) -> Option<RequestId> {
        let lane = self.lanes.get_mut(conversation)?;
        let mut next = None;
        if lane.holder.is_none() {
            if let Some(front) = lane.queue.front() {
                if self.turns.get(front).map(|e| e.phase) == Some(TurnPhase::Queued) {
                    let n = lane.queue.pop_front().expect("front exists");
                    lane.holder = Some(n.clone());
                    if let Some(ne) = self.turns.get_mut(&n) {
                        ne.phase = TurnPhase::Running {
                            cancel_requested: false,
                        };
                    }
                    next = Some(n);
                }
            }
        }
        if lane.members == 0 {
            self.lanes.remove(conversation);
        }
        next
    }
}

#[cfg(test)]
mod tests;
