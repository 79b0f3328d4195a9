//! The Agent trait: something that runs one turn and streams its events.

use agentwire_core::{ConversationId, Outcome, RequestId, TurnEvent};
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

/// Events an agent may have in flight before it waits for the front to take them: backpressure so a fast
/// agent cannot grow memory without bound while a slow relay drains.
pub const EVENT_QUEUE_DEPTH: usize = 256;

/// A tool an agent offers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of its input.
    pub input_schema: serde_json::Value,
    /// Whether a person must approve each call.
    pub requires_approval: bool,
}

/// What an agent says about itself; fronts publish it (NIP-XX ai.info, fisk-ai discovery).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentCard {
    /// Short name.
    pub name: String,
    /// Version of the agent.
    pub version: String,
    /// One line for people.
    pub description: String,
    /// Models it can run.
    pub models: Vec<String>,
    /// The model used when a prompt names none.
    pub default_model: String,
    /// Tools it runs.
    pub tools: Vec<ToolSpec>,
    /// Largest prompt it takes, in bytes.
    pub max_prompt_bytes: usize,
    /// Largest context it can hold, in tokens.
    pub max_context_tokens: u64,
}

/// One turn's input, as every front reduces its request to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnInput {
    /// The request id.
    pub request_id: RequestId,
    /// The conversation.
    pub conversation_id: ConversationId,
    /// The person's message.
    pub message: String,
    /// The model to use (already checked against the card).
    pub model: String,
    /// Requested thinking effort, if any.
    pub thinking: Option<String>,
}

/// Tells a running agent that its turn was cancelled. The engine also drops the agent's future, so an agent
/// need not poll this; it is for agents that want to clean up (stop a child process, ...).
pub type CancelSignal = watch::Receiver<bool>;

/// Something that runs turns.
pub trait Agent: Send + Sync + 'static {
    /// The agent's card.
    fn card(&self) -> AgentCard;

    /// Runs one turn, sending events in order on `events`, and returns its outcome.
    fn run(
        &self,
        input: TurnInput,
        events: mpsc::Sender<TurnEvent>,
        cancel: CancelSignal,
    ) -> BoxFuture<'static, Outcome>;
}
