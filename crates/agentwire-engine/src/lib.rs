//! The engine: runs turns on an [`Agent`] and keeps the engine's promises for every protocol front.
//!
//! A front (NIP-XX, fisk-ai, ...) validates what a peer sent, then hands the engine a [`Submission`] with a
//! [`TurnFront`] that knows how to put that turn's events and outcome on its wire. The engine:
//! journals the turn before the front acknowledges it, runs one turn at a time per conversation (later ones
//! queue in order), answers a resent request id from the journal instead of running it again, treats cancel
//! as idempotent, decides exactly one outcome, journals it (with its wire form) before the front sends it,
//! and after a restart gives every interrupted turn a defined end.

mod agent;
mod engine;
pub mod engine_core;
mod engines;
mod front;
mod health;
mod lifecycle;
/// The daemon's Prometheus metrics, a crate of their own that the hub feeds as it publishes.
pub use agentwire_metrics as metrics;
mod slots;
pub mod telemetry;
pub mod watch;

pub use agent::{
    cancelled, past_turns, Agent, AgentCard, AskQuestion, Asker, CancelSignal, ToolSpec,
    TurnContext, EVENT_QUEUE_DEPTH, MAX_HISTORY_TURNS,
};
/// A turn's input (typed in the core, as the journal keeps it).
pub use agentwire_core::{PastToolCall, PastTurn, Resume, TurnInput};
/// The journal's records as the engine hands them to fronts (a front depends on the engine's API, never on
/// the journal).
pub use agentwire_store::{ConversationTurn, ConversationView, StoreError, StoredTurn};
pub use engine::{
    AnswerReply, CancelReply, Engine, Submission, SubmitReply, AGENT_BUSY_RETRY_AFTER_SECS,
    INTERRUPTED_RETRY_AFTER_SECS, MAX_TRANSCRIPT_EVENTS,
};
pub use engine_core::{
    TurnPolicy, CONVERSATION_CLAIM_POLL, MAX_TURNS_WAITING_FOR_AGENT, RETRY_FIRST, RETRY_MAX,
};
pub use engines::{Engines, TurnIndex};
pub use front::{FrontAsk, TurnFront};
pub use lifecycle::{Front, Unreachable};
pub use slots::{AdmitError, Admitted, Slot, SlotRefusal};
pub use telemetry::{Telemetry, TurnTrace};
pub use watch::{
    AllWatch, Missed, TurnEnd, TurnFilter, TurnState, TurnSummary, TurnWatch, WatchEvent, WatchHub,
    WatchKind, MAX_WATCHED_EVENTS_PER_TURN, RECENT_TURNS_KEPT, WATCH_QUEUE_CAPACITY,
};
