//! A turn's input as every front reduces its request to, and as the journal keeps it: typed, so that every
//! reader gets the record decoded, never JSON to take apart.

use crate::{CallAnswer, ConversationId, RequestId};
use serde::{Deserialize, Serialize};

/// One turn's input, as every front reduces its request to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnInput {
    /// The request id.
    pub request_id: RequestId,
    /// The conversation.
    pub conversation_id: ConversationId,
    /// The person's message.
    #[serde(default)]
    pub message: String,
    /// The model to use (already checked against the card).
    #[serde(default)]
    pub model: String,
    /// Requested thinking effort, if any.
    pub thinking: Option<String>,
    /// Models to try in order when `model` turns out to be unavailable (all on the card).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallback_models: Vec<String>,
    /// Tools the requester suggests for this turn (fisk-ai's `tool_hints`): an agent with tools tells its
    /// model which of them were suggested; a hint naming no tool of the agent's is ignored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_hints: Vec<String>,
    /// Set when this turn continues one that stopped part way (suspended or deferred).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<Resume>,
    /// The conversation's earlier turns, oldest first, for an agent that asks for them
    /// (an agent's `wants_history`): filled by the engine from the journal when the turn starts, and never
    /// journaled with the turn (each turn's own record holds its own part).
    #[serde(skip)]
    pub history: Vec<PastTurn>,
}

impl TurnInput {
    /// A turn of `message` in `conversation_id` on `model`, with nothing else asked: no thinking effort,
    /// fallback models or tool hints, not a resume, and no history (the engine fills that in). A front sets
    /// what its request carries beside these with struct update syntax.
    pub fn new(
        request_id: RequestId,
        conversation_id: ConversationId,
        message: impl Into<String>,
        model: impl Into<String>,
    ) -> TurnInput {
        TurnInput {
            request_id,
            conversation_id,
            message: message.into(),
            model: model.into(),
            thinking: None,
            fallback_models: Vec::new(),
            tool_hints: Vec::new(),
            resume: None,
            history: Vec::new(),
        }
    }
}

/// One earlier turn of a conversation that ended with an answer.
#[derive(Debug, Clone, PartialEq)]
pub struct PastTurn {
    /// The person's message.
    pub message: String,
    /// The tools the agent ran in it, in order.
    pub tools: Vec<PastToolCall>,
    /// The answer.
    pub answer: String,
}

/// A tool call of an earlier turn and its result.
#[derive(Debug, Clone, PartialEq)]
pub struct PastToolCall {
    /// The call's id.
    pub call_id: String,
    /// The tool.
    pub name: String,
    /// Its arguments.
    pub arguments: serde_json::Value,
    /// What it returned.
    pub output: serde_json::Value,
}

/// Where a resumed turn picks up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resume {
    /// The checkpoint the parked turn ended with (the agent's own format).
    pub checkpoint: serde_json::Value,
    /// Answers given since, to the calls the parked turn was waiting on.
    #[serde(default)]
    pub answers: Vec<CallAnswer>,
}
