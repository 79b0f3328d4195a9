//! A running turn's events as MCP progress notifications: a counter that goes up by one with each event
//! worth telling (the specification wants `progress` to increase every time), and its `message`, the
//! text delta, the status, or the tool line a person reads. Pure.

use agentwire_core::{tool_result_line, tool_start_line, StatusState, TurnEvent};

/// The most bytes of one progress message: a text delta is sent whole up to this (the answer in the
/// result is always whole); longer ones, and a tool's long output, are cut on a character boundary so
/// that one notification stays a line, not a document.
pub const MAX_PROGRESS_MESSAGE_BYTES: usize = 8 * 1024;

/// One progress notification's content.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The counter: 1 for the first, one more for each after.
    pub progress: f64,
    /// What happened.
    pub message: String,
}

/// Counts the steps of one call.
#[derive(Debug, Default)]
pub struct Progress {
    sent: u64,
}

fn cut(text: &str) -> String {
    if text.len() <= MAX_PROGRESS_MESSAGE_BYTES {
        return text.to_string();
    }
    let mut end = MAX_PROGRESS_MESSAGE_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// What a person reads of `event`, or `None` for what is not told (the agent's reasoning, an empty
/// delta).
pub fn message(event: &TurnEvent) -> Option<String> {
    let text = match event {
        TurnEvent::Text { text } if text.is_empty() => return None,
        TurnEvent::Text { text } => text.clone(),
        TurnEvent::Thinking { .. } => return None,
        TurnEvent::Status { state, info, .. } => match info {
            Some(i) if !i.trim().is_empty() => i.clone(),
            _ => match state {
                StatusState::Thinking => "thinking".into(),
                StatusState::ToolUse => "using a tool".into(),
                StatusState::Done => "done".into(),
            },
        },
        TurnEvent::ToolCall {
            name, arguments, ..
        } => tool_start_line(name, arguments),
        TurnEvent::ToolResult {
            name,
            output,
            success,
            ..
        } => tool_result_line(name, *success, output),
        TurnEvent::AgentCall { name, task, .. } => format!("asked agent {name} ({task})"),
        TurnEvent::Warning { text, .. } => format!("warning: {text}"),
        TurnEvent::File { name, .. } => format!("wrote the file {name}"),
        TurnEvent::Handoff { name } => {
            format!(
                "handed off to {}",
                name.as_deref().unwrap_or("a new thread")
            )
        }
    };
    Some(cut(&text))
}

impl Progress {
    /// The next step for `event`, or `None` when nothing of it is told.
    pub fn step(&mut self, event: &TurnEvent) -> Option<Step> {
        let message = message(event)?;
        self.sent += 1;
        Some(Step {
            progress: self.sent as f64,
            message,
        })
    }

    /// A step of the front's own (a question put to the client).
    pub fn note(&mut self, message: &str) -> Step {
        self.sent += 1;
        Step {
            progress: self.sent as f64,
            message: cut(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_told_event_is_one_more_step() {
        let mut p = Progress::default();
        let events = [
            TurnEvent::Status {
                state: StatusState::Thinking,
                progress: None,
                info: None,
                usage: None,
            },
            TurnEvent::Thinking { text: "hmm".into() },
            TurnEvent::Text {
                text: "tick 1\n".into(),
            },
            TurnEvent::Text {
                text: String::new(),
            },
            TurnEvent::ToolCall {
                call_id: "1".into(),
                name: "calculator".into(),
                arguments: json!({"expression": "6*7"}),
            },
            TurnEvent::ToolResult {
                call_id: "1".into(),
                name: "calculator".into(),
                output: json!({"stdout": "42"}),
                success: true,
                duration_ms: 1,
            },
        ];
        let steps: Vec<Step> = events.iter().filter_map(|e| p.step(e)).collect();
        let counters: Vec<f64> = steps.iter().map(|s| s.progress).collect();
        assert_eq!(counters, vec![1.0, 2.0, 3.0, 4.0]);
        assert_eq!(steps[0].message, "thinking");
        assert_eq!(steps[1].message, "tick 1\n");
        assert!(steps[2].message.contains("calculator"), "{:?}", steps[2]);
        assert!(steps[3].message.contains("42"), "{:?}", steps[3]);
        assert_eq!(p.note("asked the person").progress, 5.0);
    }

    #[test]
    fn a_status_says_its_info_and_a_long_delta_is_cut_on_a_character() {
        let s = TurnEvent::Status {
            state: StatusState::Thinking,
            progress: Some(0),
            info: Some("sleeping 300 ms".into()),
            usage: None,
        };
        assert_eq!(message(&s).unwrap(), "sleeping 300 ms");
        let long = TurnEvent::Text {
            text: "é".repeat(MAX_PROGRESS_MESSAGE_BYTES),
        };
        let m = message(&long).unwrap();
        assert!(
            m.len() <= MAX_PROGRESS_MESSAGE_BYTES + '…'.len_utf8(),
            "{}",
            m.len()
        );
        assert!(m.ends_with('…'));
    }
}
