//! The Agent trait: something that runs one turn and streams its events.

use agentwire_core::{
    Asked, Outcome, PastToolCall, PastTurn, Question, RequestId, TurnEvent, TurnInput,
};
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
    /// JSON Schema of its result, when the tool declares one (an MCP tool's `outputSchema`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
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

/// Most earlier turns given to an agent, and read from the journal for it: a conversation can grow for
/// ever, and a turn's read must not grow with it; 100 turns outgrow the context window of today's models
/// but the largest, and the agent drops the oldest of these further to fit its own window.
pub const MAX_HISTORY_TURNS: usize = 100;

/// A conversation's earlier turns from its journal view, oldest first: those `agent` ran (several agents
/// share one journal, and one conversation id may reach two of them: a NIP-XX session of one client, a
/// daemon restarted with another `--agent`), on any instance, that ended with an answer, before `current`,
/// with their tool calls and results from their transcripts, at most [`MAX_HISTORY_TURNS`] (the newest).
/// A turn journaled before turns named their agent is nobody's history.
pub fn past_turns(
    view: &agentwire_store::ConversationView,
    current: &RequestId,
    agent: &str,
) -> Vec<PastTurn> {
    let mut past: Vec<PastTurn> = view
        .turns
        .iter()
        .take_while(|t| t.turn.request_id != *current)
        .filter(|t| t.turn.agent == agent)
        .filter_map(|t| {
            let Some(Outcome::Result(r)) = &t.turn.outcome else {
                return None;
            };
            let message = t.turn.input.message.clone();
            let mut tools: Vec<PastToolCall> = Vec::new();
            for ev in t.transcript.iter().flatten() {
                match ev.clone() {
                    TurnEvent::ToolCall {
                        call_id,
                        name,
                        arguments,
                    } => tools.push(PastToolCall {
                        call_id,
                        name,
                        arguments,
                        output: serde_json::Value::Null,
                    }),
                    TurnEvent::ToolResult {
                        call_id, output, ..
                    } => {
                        if let Some(c) = tools.iter_mut().rev().find(|c| c.call_id == call_id) {
                            c.output = output;
                        }
                    }
                    _ => {}
                }
            }
            Some(PastTurn {
                message,
                tools,
                answer: r.text.clone(),
            })
        })
        .collect();
    let extra = past.len().saturating_sub(MAX_HISTORY_TURNS);
    past.drain(..extra);
    past
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
    /// The tokens (input and output) this turn may still spend, when its front sets a budget
    /// ([`TurnFront::token_budget`](crate::TurnFront::token_budget)). An agent that counts tokens (a model's)
    /// makes no model call once its turn has spent this many, and ends
    /// [`TurnFailure::OverBudget`](agentwire_core::TurnFailure::OverBudget) with the usage spent; an agent that
    /// spends none ignores it. `None`: no budget.
    pub token_budget: Option<u64>,
    /// The turn's `invoke_agent` span, when traces are exported: a model agent opens its `chat` and
    /// `execute_tool` spans under it and hands its `traceparent` on to the model server and MCP servers.
    pub trace: crate::TurnTrace,
}

/// Tells a running agent that its turn was cancelled. The engine also drops the agent's future, so an agent
/// need not poll this; it is for agents that want to clean up (stop a child process, ...).
pub type CancelSignal = watch::Receiver<bool>;

/// Resolves once the turn is cancelled; never, when its canceller is gone without cancelling. The guard
/// `wait_for` gives is dropped inside, so the future stays `Send` across the caller's awaits.
pub async fn cancelled(signal: &mut CancelSignal) {
    if signal.wait_for(|c| *c).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Something that runs turns.
pub trait Agent: Send + Sync + 'static {
    /// The agent's card.
    fn card(&self) -> AgentCard;

    /// Runs one turn, sending its events in order on `ctx.events`, and returns its outcome.
    fn run(&self, input: TurnInput, ctx: TurnContext) -> BoxFuture<'static, Outcome>;

    /// Whether the agent wants its conversation's earlier turns in [`TurnInput::history`] (a model does; an
    /// agent that keeps its own state, or none, does not). The engine then also keeps each turn's tool
    /// calls and results in the journal, for the turns after it.
    fn wants_history(&self) -> bool {
        false
    }

    /// Ends what the agent runs beside its turns (a process it keeps), once the engine has drained at the
    /// daemon's stop. Default: nothing.
    fn stop(&self) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }

    /// Told after a restart of a turn a crash cut off (the engine has ended it `interrupted`, once): an
    /// agent that started work for it elsewhere (a remote agent's run) stops that work where its protocol
    /// allows. Called once per such turn in a task of its own (twice, rarely, when a resend of the turn
    /// races the recovery pass: it must be harmless to do twice). Default: nothing.
    fn interrupted(&self, _turn: &TurnInput) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire_core::{Failure, TurnFailure, TurnResult, Usage};
    use agentwire_store::{ConversationTurn, ConversationView, StoredTurn};
    use serde_json::json;

    fn stored(
        n: usize,
        outcome: Option<Outcome>,
        transcript: Option<Vec<TurnEvent>>,
    ) -> ConversationTurn {
        ConversationTurn {
            turn: StoredTurn {
                request_id: RequestId::new(format!("r{n}")).unwrap(),
                conversation_id: agentwire_core::ConversationId::new("c").unwrap(),
                protocol: "test".into(),
                owner: format!("host-{}", n % 2),
                agent: "local".into(),
                route: json!({}),
                input: TurnInput::new(
                    RequestId::new(format!("r{n}")).unwrap(),
                    agentwire_core::ConversationId::new("c").unwrap(),
                    format!("m{n}"),
                    "m",
                ),
                accepted_at: 0,
                outcome,
                ended_at: None,
                wire: None,
                tool_calls: 0,
            },
            transcript,
        }
    }

    fn answer(text: &str) -> Option<Outcome> {
        Some(Outcome::Result(TurnResult {
            text: text.into(),
            usage: Usage::default(),
            stop_reason: "stop".into(),
        }))
    }

    #[test]
    fn past_turns_are_the_answered_ones_before_this_one_with_their_tools() {
        let tools = vec![
            TurnEvent::Text { text: "x".into() },
            TurnEvent::ToolCall {
                call_id: "c1".into(),
                name: "clock".into(),
                arguments: json!({}),
            },
            TurnEvent::ToolResult {
                call_id: "c1".into(),
                name: "clock".into(),
                output: json!({"unix": 1}),
                success: true,
                duration_ms: 0,
            },
        ];
        let view = ConversationView {
            turns: vec![
                stored(1, answer("a1"), Some(tools)),
                stored(
                    2,
                    Some(Outcome::Failure(Failure::new(
                        TurnFailure::AgentFailed,
                        "x",
                    ))),
                    None,
                ),
                stored(3, None, None),
                stored(4, answer("a4"), None),
                stored(5, None, None),
                stored(6, answer("after"), None),
            ],
        };
        let past = past_turns(&view, &RequestId::new("r5").unwrap(), "local");
        assert!(past_turns(&view, &RequestId::new("r5").unwrap(), "other").is_empty());
        assert_eq!(
            past.len(),
            2,
            "failed, unfinished and later turns are left out"
        );
        assert_eq!(
            (past[0].message.as_str(), past[0].answer.as_str()),
            ("m1", "a1")
        );
        assert_eq!(past[0].tools[0].output, json!({"unix": 1}));
        assert_eq!(past[1].answer, "a4", "whichever instance ran it");
        let mut mixed = view.clone();
        mixed.turns[3].turn.agent = "demo".into();
        mixed.turns[0].turn.agent = String::new();
        assert!(
            past_turns(&mixed, &RequestId::new("r5").unwrap(), "local").is_empty(),
            "another agent's turns, and turns of no agent, are not this agent's history"
        );
        let many = ConversationView {
            turns: (0..MAX_HISTORY_TURNS + 5)
                .map(|n| stored(n, answer("a"), None))
                .collect(),
        };
        let past = past_turns(&many, &RequestId::new("none").unwrap(), "local");
        assert_eq!(past.len(), MAX_HISTORY_TURNS);
        assert_eq!(past[0].message, "m5", "the oldest are dropped");
    }
}
