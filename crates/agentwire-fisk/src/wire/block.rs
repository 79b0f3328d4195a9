//! Event blocks (`event.<kind>`): one block per event, its kind travelling as the protocol id.

use super::protocol as p;
use super::reply::Usage;
use serde::Serialize;
use serde_json::{Map, Value};

/// The status `phase` that opens a replayed conversation.
pub const PHASE_REPLAY_START: &str = "replay_start";
/// The status `phase` that closes one, with `count`, `truncated` and the conversation's `usage`.
pub const PHASE_REPLAY_END: &str = "replay_end";

/// The model's prose (`event.text`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TextBlock {
    /// The text (trim with [`trim_block_text`](super::trim_block_text)).
    pub text: String,
    /// Marks the answer: the text of the turn that ended the run, which the `result` repeats.
    #[serde(rename = "final")]
    pub is_final: bool,
}

/// The model's reasoning (`event.thinking`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThinkingBlock {
    /// The reasoning text.
    pub text: String,
    /// Opaque provider signature; display or audit only (the fisk-ai worker never sends it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// The provider that signed it, e.g. `anthropic`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
}

/// A tool the run is about to invoke (`event.tool_call`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCallBlock {
    /// The call's id; a question about it carries the same `tool_use_id`.
    pub id: String,
    /// The tool.
    pub name: String,
    /// Its arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<Map<String, Value>>,
}

/// Command metadata of a shell tool's result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ExecResult {
    /// The command line run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Its exit code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// Whether its output was cut.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
}

/// What a tool call returned (`event.tool_result`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolResultBlock {
    /// The id of the call this answers.
    pub call_id: String,
    /// The output (trim with [`trim_block_text`](super::trim_block_text)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// The tool did not run cleanly (a harness failure, not a non-zero exit).
    pub is_error: bool,
    /// Command metadata, for shell tools.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec: Option<ExecResult>,
}

/// A question delegated to a peer agent (`event.agent_call`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentCallBlock {
    /// The call's id.
    pub id: String,
    /// The peer agent.
    pub name: String,
    /// The request id of the spawned sub-task (its messages carry it as `parent`).
    pub task: String,
}

/// An advisory the run raised (`event.warning`): the values, not a sentence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WarningBlock {
    /// What it is about; not empty (the schema's `minLength: 1`).
    pub kind: String,
    /// The tool, key or setting it is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A count, where the kind has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// Further values.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<String>,
    /// The failure it reports, as display text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A turn somebody asked for (`event.prompt`); sent only in a replay.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PromptBlock {
    /// The prompt.
    pub text: String,
}

/// Progress (`event.status`), and the markers around a replay.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StatusBlock {
    /// The loop iteration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iteration: Option<u64>,
    /// E.g. `calling-llm`, or [`PHASE_REPLAY_START`] / [`PHASE_REPLAY_END`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// On an iteration, what that one model call used; on `replay_end`, the whole conversation's use.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// On `replay_end`, how many blocks were sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// On `replay_end`, whether older blocks were left behind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
}

/// The block of one event.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum Block {
    /// `event.text`.
    Text(TextBlock),
    /// `event.thinking`.
    Thinking(ThinkingBlock),
    /// `event.tool_call`.
    ToolCall(ToolCallBlock),
    /// `event.tool_result`.
    ToolResult(ToolResultBlock),
    /// `event.agent_call`.
    AgentCall(AgentCallBlock),
    /// `event.warning`.
    Warning(WarningBlock),
    /// `event.prompt`.
    Prompt(PromptBlock),
    /// `event.status`.
    Status(StatusBlock),
}

impl Block {
    /// Prose; `is_final` marks the answer.
    pub fn text(text: impl Into<String>, is_final: bool) -> Block {
        Block::Text(TextBlock {
            text: text.into(),
            is_final,
        })
    }

    /// Reasoning.
    pub fn thinking(text: impl Into<String>) -> Block {
        Block::Thinking(ThinkingBlock {
            text: text.into(),
            signature: None,
            provider: None,
        })
    }

    /// A question delegated to a peer agent.
    pub fn agent_call(
        id: impl Into<String>,
        name: impl Into<String>,
        task: impl Into<String>,
    ) -> Block {
        Block::AgentCall(AgentCallBlock {
            id: id.into(),
            name: name.into(),
            task: task.into(),
        })
    }

    /// A tool the run is about to invoke.
    pub fn tool_call(
        id: impl Into<String>,
        name: impl Into<String>,
        input: Map<String, Value>,
    ) -> Block {
        Block::ToolCall(ToolCallBlock {
            id: id.into(),
            name: name.into(),
            input: Some(input),
        })
    }

    /// What call `call_id` returned.
    pub fn tool_result(
        call_id: impl Into<String>,
        output: impl Into<String>,
        is_error: bool,
    ) -> Block {
        Block::ToolResult(ToolResultBlock {
            call_id: call_id.into(),
            output: Some(output.into()),
            is_error,
            exec: None,
        })
    }

    /// A warning of `kind` (not empty), with no values yet.
    pub fn warning(kind: impl Into<String>) -> Block {
        Block::Warning(WarningBlock {
            kind: kind.into(),
            name: None,
            count: None,
            params: Vec::new(),
            error: None,
        })
    }

    /// A replayed prompt.
    pub fn prompt(text: impl Into<String>) -> Block {
        Block::Prompt(PromptBlock { text: text.into() })
    }

    /// Progress at `iteration`, with what that model call used.
    pub fn iteration(iteration: u64, phase: impl Into<String>, usage: Option<Usage>) -> Block {
        Block::Status(StatusBlock {
            iteration: Some(iteration),
            phase: Some(phase.into()),
            usage,
            ..StatusBlock::default()
        })
    }

    /// The marker opening a replay.
    pub fn replay_start() -> Block {
        Block::Status(StatusBlock {
            phase: Some(PHASE_REPLAY_START.into()),
            ..StatusBlock::default()
        })
    }

    /// The marker closing a replay: `count` blocks sent, `truncated` if older ones were left, and what the
    /// conversation has used so far.
    pub fn replay_end(count: u64, truncated: bool, usage: Usage) -> Block {
        Block::Status(StatusBlock {
            phase: Some(PHASE_REPLAY_END.into()),
            usage: Some(usage),
            count: Some(count),
            truncated: Some(truncated),
            ..StatusBlock::default()
        })
    }

    /// The protocol id of the event carrying this block, e.g. `io.choria.fisk-ai.v1.event.text`.
    pub fn protocol(&self) -> &'static str {
        match self {
            Block::Text(_) => p::EVENT_TEXT,
            Block::Thinking(_) => p::EVENT_THINKING,
            Block::ToolCall(_) => p::EVENT_TOOL_CALL,
            Block::ToolResult(_) => p::EVENT_TOOL_RESULT,
            Block::AgentCall(_) => p::EVENT_AGENT_CALL,
            Block::Warning(_) => p::EVENT_WARNING,
            Block::Prompt(_) => p::EVENT_PROMPT,
            Block::Status(_) => p::EVENT_STATUS,
        }
    }
}
