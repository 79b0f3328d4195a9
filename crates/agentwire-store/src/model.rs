//! What the journal stores and answers: the records every journal implementation shares, and its error.

use agentwire_core::{ConversationId, Outcome, RequestId, TurnEvent, TurnInput, Usage};
use std::sync::Arc;

/// The owner recorded for turns of a journal that one daemon has to itself (the embedded SQLite journal).
/// A shared journal records each instance's own name, so recovery ends only its own turns.
pub const LOCAL_OWNER: &str = "local";

/// Errors at the journal's boundary, each with the error under it where there is one (its
/// [`source`](std::error::Error::source), shared so that one failed batch can fail each write in it).
#[derive(Debug, Clone)]
pub enum StoreError {
    /// SQLite refused an operation (a full disk, an I/O error, a locked database).
    Sqlite(Arc<rusqlite::Error>),
    /// The JetStream cluster could not take or answer an operation (unreachable, no quorum, timed out).
    JetStream(Arc<dyn std::error::Error + Send + Sync>),
    /// The storage could not complete an operation for a reason of its own, with no error under it (a
    /// record that kept changing under a write, a transaction rolled back, an injected fault).
    Unavailable(&'static str),
    /// The journal's own thread or task could not run (the system refused a thread, a read task died).
    Task(Arc<dyn std::error::Error + Send + Sync>),
    /// A row could not be decoded.
    Corrupt(String),
    /// An outcome was written for a turn the journal never accepted.
    UnknownTurn(String),
    /// An outcome was written for a turn that already has one.
    AlreadyEnded(String),
    /// The writer is gone (the journal was halted or its thread stopped).
    WriterGone,
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Sqlite(e) => write!(f, "journal database error: {e}"),
            StoreError::JetStream(e) => write!(f, "journal cluster error: {e}"),
            StoreError::Unavailable(why) => write!(f, "journal unavailable: {why}"),
            StoreError::Task(e) => write!(f, "journal task failed: {e}"),
            StoreError::Corrupt(what) => write!(f, "journal row is corrupt: {what}"),
            StoreError::UnknownTurn(id) => write!(f, "no turn {id} in the journal"),
            StoreError::AlreadyEnded(id) => write!(f, "turn {id} already has an outcome"),
            StoreError::WriterGone => f.write_str("journal writer stopped"),
        }
    }
}

impl std::error::Error for StoreError {
    /// The error under it, as its own type (not the shared pointer), so a caller can downcast it.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Sqlite(e) => Some(e.as_ref()),
            StoreError::JetStream(e) | StoreError::Task(e) => Some(e.as_ref()),
            _ => None,
        }
    }
}

impl StoreError {
    /// Whether the error is about the journal's ability to write (worth retrying once it can again), rather
    /// than about the request (an unknown turn, a second outcome).
    pub fn is_unwritable(&self) -> bool {
        matches!(
            self,
            StoreError::Sqlite(_)
                | StoreError::JetStream(_)
                | StoreError::Unavailable(_)
                | StoreError::Task(_)
                | StoreError::WriterGone
        )
    }

    /// A JetStream error, kept as the source.
    pub fn jetstream(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
        StoreError::JetStream(Arc::new(e))
    }

    /// A failed thread or task of the journal's own, kept as the source.
    pub fn task(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
        StoreError::Task(Arc::new(e))
    }
}

/// Two errors are equal when they are the same kind and say the same (a source compares by its text).
impl PartialEq for StoreError {
    fn eq(&self, other: &Self) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
            && self.to_string() == other.to_string()
    }
}

impl Eq for StoreError {}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Sqlite(Arc::new(e))
    }
}

/// A turn to journal on acceptance.
#[derive(Debug, Clone, PartialEq)]
pub struct NewTurn {
    /// The request id (protocol-prefixed).
    pub request_id: RequestId,
    /// The conversation it belongs to.
    pub conversation_id: ConversationId,
    /// Which protocol front accepted it (`nipxx`, ...).
    pub protocol: String,
    /// The instance that runs it ([`LOCAL_OWNER`] for an embedded journal): recovery ends only its own.
    pub owner: String,
    /// The agent that runs it (its card's name): one daemon serves several agents from one journal, and
    /// an agent is given only its own earlier turns as history.
    pub agent: String,
    /// Where to send its outcome (protocol-specific), kept so an interrupted turn can be answered after a restart.
    pub route: serde_json::Value,
    /// The turn's input (message, model, ...).
    pub input: TurnInput,
    /// Unix seconds of acceptance.
    pub accepted_at: u64,
    /// The conversation's protocol-specific state to set in the same transaction, if it changed (a new
    /// fisk-ai conversation's fingerprint): one durable write instead of two before the ack.
    pub conversation_meta: Option<serde_json::Value>,
}

/// A turn's one outcome, to journal.
#[derive(Debug, Clone, PartialEq)]
pub struct Finish {
    /// The turn.
    pub request_id: RequestId,
    /// Its outcome.
    pub outcome: Outcome,
    /// The outcome as sent on the wire (e.g. the signed terminal event), for byte-identical resends.
    pub wire: Option<String>,
    /// The turn's events, kept for reading the conversation back.
    pub transcript: Option<Vec<TurnEvent>>,
    /// How many tool calls the turn made (counted by the engine from its events).
    pub tool_calls: u64,
    /// Unix seconds of the end.
    pub ended_at: u64,
}

impl Finish {
    /// An outcome with nothing else to keep (no wire form, transcript or tool calls).
    pub fn new(request_id: RequestId, outcome: Outcome, ended_at: u64) -> Finish {
        Finish {
            request_id,
            outcome,
            wire: None,
            transcript: None,
            tool_calls: 0,
            ended_at,
        }
    }

    /// With the wire form of the outcome.
    pub fn wire(mut self, wire: Option<String>) -> Finish {
        self.wire = wire;
        self
    }
}

/// A turn as the journal holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredTurn {
    /// The request id.
    pub request_id: RequestId,
    /// The conversation.
    pub conversation_id: ConversationId,
    /// The protocol front.
    pub protocol: String,
    /// The instance that ran it.
    pub owner: String,
    /// The agent that ran it (empty: journaled before turns named their agent).
    pub agent: String,
    /// Where its outcome goes.
    pub route: serde_json::Value,
    /// Its input.
    pub input: TurnInput,
    /// Unix seconds of acceptance.
    pub accepted_at: u64,
    /// Its outcome, once decided and journaled.
    pub outcome: Option<Outcome>,
    /// Unix seconds of its end, once its outcome is journaled: with `accepted_at`, how long a turn of an
    /// earlier run took.
    pub ended_at: Option<u64>,
    /// The outcome as sent on the wire (e.g. the signed terminal event), for byte-identical resends.
    pub wire: Option<String>,
    /// Tool calls the turn made (0 until it ends).
    pub tool_calls: u64,
}

/// A journaled input as a [`TurnInput`]; the turn's own ids fill an input journaled without them.
pub(crate) fn decode_input(
    mut input: serde_json::Value,
    request_id: &RequestId,
    conversation_id: &ConversationId,
) -> Result<TurnInput, StoreError> {
    if let Some(o) = input.as_object_mut() {
        o.entry("request_id")
            .or_insert_with(|| request_id.as_str().into());
        o.entry("conversation_id")
            .or_insert_with(|| conversation_id.as_str().into());
    }
    serde_json::from_value(input).map_err(|e| StoreError::Corrupt(format!("a turn's input: {e}")))
}

impl StoredTurn {
    /// The tokens the turn spent (zero until it ends).
    pub fn usage(&self) -> Usage {
        match &self.outcome {
            Some(Outcome::Result(r)) => r.usage,
            Some(Outcome::Failure(f)) => f.usage,
            None => Usage::default(),
        }
    }
}

/// One turn of a conversation read back, with its transcript when one was asked for and kept.
#[derive(Debug, Clone, PartialEq)]
pub struct ConversationTurn {
    /// The turn.
    pub turn: StoredTurn,
    /// Its events, if asked for and kept.
    pub transcript: Option<Vec<TurnEvent>>,
}

/// A transcript as the journal keeps it (a JSON array of events) decoded for readers. Each event is decoded
/// on its own, and one this build does not know (written by a newer one) is left out: a transcript is for
/// reading a conversation back, and the outcome holds the answer. Anything but an array is corrupt.
pub(crate) fn decode_transcript(kept: serde_json::Value) -> Result<Vec<TurnEvent>, StoreError> {
    match kept {
        serde_json::Value::Array(events) => Ok(events
            .into_iter()
            .filter_map(|e| serde_json::from_value(e).ok())
            .collect()),
        other => Err(StoreError::Corrupt(format!(
            "a transcript is a {}, not a list of events",
            match other {
                serde_json::Value::Object(_) => "object",
                serde_json::Value::String(_) => "string",
                serde_json::Value::Number(_) => "number",
                serde_json::Value::Bool(_) => "boolean",
                _ => "null",
            }
        ))),
    }
}

/// A conversation's turns in the order they were accepted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConversationView {
    /// The turns, oldest first.
    pub turns: Vec<ConversationTurn>,
}

impl ConversationView {
    /// What the conversation's ended turns spent, and how many tool calls they made.
    pub fn usage(&self) -> (Usage, u64) {
        self.turns
            .iter()
            .map(|t| &t.turn)
            .filter(|t| t.outcome.is_some())
            .fold((Usage::default(), 0u64), |(u, n), t| {
                (u.plus(t.usage()), n.saturating_add(t.tool_calls))
            })
    }

    /// The last turn, if any.
    pub fn last(&self) -> Option<&StoredTurn> {
        self.turns.last().map(|t| &t.turn)
    }
}

/// The answer to [`Journal::accept`](crate::Journal::accept).
#[derive(Debug, Clone, PartialEq)]
pub enum Accepted {
    /// The turn is new and now journaled.
    New,
    /// The journal knew this request id: a resend, answered from here and not run again.
    Existing(Box<StoredTurn>),
}

/// The answer to [`Journal::claim`](crate::Journal::claim).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The turn is now the one its conversation runs (or already was).
    Taken,
    /// Another turn of the conversation runs (on this instance or another): this one.
    Busy(RequestId),
}

/// The answer to [`Journal::claim_accept`](crate::Journal::claim_accept): a claim and, when it is taken, the
/// accept's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimAccepted {
    /// The turn holds its conversation (or the journal needs no claim): what the accept answered, or the
    /// error it failed with (the claim itself succeeded).
    Taken(Result<Accepted, StoreError>),
    /// Another turn of the conversation runs: this one. The turn was not journaled.
    Busy(RequestId),
}

#[cfg(test)]
mod transcript_tests {
    use super::*;

    #[test]
    fn a_transcript_is_read_event_by_event_and_an_unknown_event_is_left_out() {
        let kept = serde_json::json!([
            {"type": "text", "text": "hi"},
            {"type": "a_kind_from_a_newer_build", "x": 1},
            {"type": "thinking", "text": "hm"},
        ]);
        assert_eq!(
            decode_transcript(kept),
            Ok(vec![
                TurnEvent::Text { text: "hi".into() },
                TurnEvent::Thinking { text: "hm".into() },
            ])
        );
        assert!(matches!(
            decode_transcript(serde_json::json!({"type": "text"})),
            Err(StoreError::Corrupt(_))
        ));
    }
}

/// What [`crate::Journal::prune`] forgets: turns that ended before `ended_before` (Unix seconds), of every
/// protocol but `keep`, in passes bounded by `limit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prune {
    /// Turns that ended before this (Unix seconds) are forgotten.
    pub ended_before: u64,
    /// Protocols whose turns are kept whatever their age (fisk-ai: its conversations stay until an
    /// operator removes them).
    pub keep: Vec<String>,
    /// The most turns one pass looks at (SQLite: forgets; a pass is one transaction and holds the writer
    /// that long. JetStream: reads, one request each, in the order they were last written).
    pub limit: usize,
}

/// What one [`crate::Journal::prune`] pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Turns forgotten.
    pub forgotten: usize,
    /// Whether the pass stopped at its limit with more to look at: the caller goes on with another pass.
    pub more: bool,
}

/// The answer to [`crate::Journal::remove_conversation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removed {
    /// The conversation is gone from the journal: its turns (how many), their transcripts and its state.
    /// Zero turns: the journal had none of it (its state, if it had one, went too).
    Gone {
        /// Turns removed.
        turns: usize,
    },
    /// A turn of it runs (on some instance of a shared journal): nothing was removed.
    Busy(RequestId),
}
