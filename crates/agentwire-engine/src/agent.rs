//! The Agent trait: something that runs one turn and streams its events.

use agentwire_core::{Asked, CallAnswer, ConversationId, Outcome, Question, RequestId, TurnEvent};
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
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
    /// Set when this turn continues one that stopped part way (suspended or deferred).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<Resume>,
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

/// Puts a running turn's questions to a person, through the turn's protocol.
pub trait AskQuestion: Send + Sync + 'static {
    /// Asks, and resolves when the question is settled.
    fn ask(&self, question: Question) -> BoxFuture<'static, Asked>;
}

/// A turn's way to ask a person: cheap to clone.
#[derive(Clone)]
pub struct Asker(Option<Arc<dyn AskQuestion>>);

impl Asker {
    /// An asker for a protocol that cannot ask: every question is [`Asked::Unavailable`].
    pub fn unavailable() -> Self {
        Asker(None)
    }

    /// An asker backed by `inner`.
    pub fn new(inner: Arc<dyn AskQuestion>) -> Self {
        Asker(Some(inner))
    }

    /// Asks `question`.
    pub async fn ask(&self, question: Question) -> Asked {
        match &self.0 {
            Some(a) => a.ask(question).await,
            None => Asked::Unavailable,
        }
    }
}

impl std::fmt::Debug for Asker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Asker"
        } else {
            "Asker(unavailable)"
        })
    }
}

/// What a running turn has besides its input.
#[derive(Debug)]
pub struct TurnContext {
    /// Where the turn's events go, in order.
    pub events: mpsc::Sender<TurnEvent>,
    /// Set when the requester cancels. Under a parking protocol (fisk-ai) the agent should stop at its next
    /// boundary and end [`TurnFailure::Suspended`](agentwire_core::TurnFailure::Suspended) with a checkpoint;
    /// otherwise the engine drops the turn's future itself.
    pub cancel: CancelSignal,
    /// Asks a person a question.
    pub asker: Asker,
}

/// Tells a running agent that its turn was cancelled. The engine also drops the agent's future, so an agent
/// need not poll this; it is for agents that want to clean up (stop a child process, ...).
pub type CancelSignal = watch::Receiver<bool>;

/// Something that runs turns.
pub trait Agent: Send + Sync + 'static {
    /// The agent's card.
    fn card(&self) -> AgentCard;

    /// Runs one turn, sending its events in order on `ctx.events`, and returns its outcome.
    fn run(&self, input: TurnInput, ctx: TurnContext) -> BoxFuture<'static, Outcome>;
}
