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

/// What a warning agentwire raises is about, with its values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WarningAbout {
    /// Tool hints the prompt gave name no tool of the agent's, and were left out.
    UnknownToolHints {
        /// Those hints.
        hints: Vec<String>,
    },
    /// The oldest turns of the conversation were left out of the model call to fit its context window.
    HistoryTrimmed {
        /// How many.
        count: u64,
    },
    /// A model call failed, and the next configured model is tried.
    ModelFallback {
        /// The model tried next.
        model: String,
        /// Why the call failed.
        error: String,
    },
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
        /// The warning, worded for people.
        text: String,
        /// What it is about, with its values, when agentwire raised it (a protocol whose warnings name a
        /// kind and carry values, fisk-ai, sends these rather than the words). None for an agent's own.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        about: Option<WarningAbout>,
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
    fn a_warning_journaled_before_it_said_what_it_is_about_still_reads() {
        let old: TurnEvent =
            serde_json::from_str(r#"{"type":"warning","text":"careful"}"#).unwrap();
        assert_eq!(
            old,
            TurnEvent::Warning {
                text: "careful".into(),
                about: None
            }
        );
        let new = TurnEvent::Warning {
            text: "the 3 oldest turns were left out".into(),
            about: Some(WarningAbout::HistoryTrimmed { count: 3 }),
        };
        let json = serde_json::to_string(&new).unwrap();
        assert!(
            json.contains(r#""about":{"kind":"history_trimmed","count":3}"#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<TurnEvent>(&json).unwrap(), new);
    }

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
