//! What a turn emits while it runs: status, streamed text, thinking, tool telemetry, warnings, files it
//! posts and handoffs.

use serde::{Deserialize, Serialize};

/// A coarse state of a running turn (NIP-XX `ai.status` `state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StatusState {
    /// The agent is working on the answer.
    Thinking,
    /// The agent is running a tool.
    ToolUse,
    /// The agent has finished producing output.
    Done,
}

/// One event of a running turn, in the order the agent produced it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TurnEvent {
    /// Progress of the turn.
    Status {
        /// The coarse state.
        state: StatusState,
        /// Percent done, when the agent knows it (0-100).
        progress: Option<u8>,
        /// Free text about what is happening.
        info: Option<String>,
        /// What the model call that just ended consumed, when this status follows one (a call that asked
        /// for tools: the call that ends the turn has its usage in the outcome instead).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<crate::Usage>,
    },
    /// A fragment of the answer text, streamed in order.
    Text {
        /// The fragment.
        text: String,
    },
    /// A fragment of the agent's reasoning.
    Thinking {
        /// The fragment.
        text: String,
    },
    /// The agent started a tool.
    ToolCall {
        /// The call's id, unique within the turn.
        call_id: String,
        /// The tool's name.
        name: String,
        /// The tool's arguments.
        arguments: serde_json::Value,
    },
    /// A tool the agent ran returned.
    ToolResult {
        /// The id of the call this answers.
        call_id: String,
        /// The tool's name.
        name: String,
        /// What the tool returned.
        output: serde_json::Value,
        /// Whether the tool succeeded.
        success: bool,
        /// How long the tool ran.
        duration_ms: u64,
    },
    /// The agent delegated to another agent (a model's roost `send` or `spawn`): the call, the peer, and
    /// the peer's id for what it was given (the session messaged, the job spawned).
    AgentCall {
        /// The tool call that delegated.
        call_id: String,
        /// The peer agent (its name).
        name: String,
        /// The peer's id for the delegated work.
        task: String,
    },
    /// Something the person should know that does not end the turn.
    Warning {
        /// The warning.
        text: String,
    },
    /// A file the agent posts for the person (a task card posts it as a thread message and links it from
    /// the result; other protocols say it in their status).
    File {
        /// The file's name.
        name: String,
        /// Its text.
        text: String,
    },
    /// The agent hands the rest of the turn to a new thread (a task card opens a kind 11 thread in its home
    /// room and continues there; other protocols say it in their status).
    Handoff {
        /// The handoff's name, when it has one.
        name: Option<String>,
    },
}

impl TurnEvent {
    /// The event's kind, as its JSON `type` names it (for a log line that must not carry its text).
    pub fn kind(&self) -> &'static str {
        match self {
            TurnEvent::Status { .. } => "status",
            TurnEvent::Text { .. } => "text",
            TurnEvent::Thinking { .. } => "thinking",
            TurnEvent::ToolCall { .. } => "tool_call",
            TurnEvent::ToolResult { .. } => "tool_result",
            TurnEvent::Warning { .. } => "warning",
            TurnEvent::File { .. } => "file",
            TurnEvent::Handoff { .. } => "handoff",
            TurnEvent::AgentCall { .. } => "agent_call",
        }
    }

    /// The tool an event is about, if it is tool telemetry.
    pub fn tool(&self) -> Option<&str> {
        match self {
            TurnEvent::ToolCall { name, .. } | TurnEvent::ToolResult { name, .. } => Some(name),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_is_the_json_type() {
        let events = [
            TurnEvent::Text { text: "a".into() },
            TurnEvent::ToolCall {
                call_id: "1".into(),
                name: "shell".into(),
                arguments: serde_json::json!({}),
            },
            TurnEvent::Handoff { name: None },
            TurnEvent::AgentCall {
                call_id: "c".into(),
                name: "peer".into(),
                task: "j1".into(),
            },
        ];
        for ev in events {
            let json = serde_json::to_value(&ev).unwrap();
            assert_eq!(json["type"], ev.kind());
        }
    }
}
