//! What a task's agent says between its tool rounds (a model's text before it calls a tool): each stretch
//! is an ordinary assistant message, posted to the task's thread as a kind 12 reply as the spec says, and
//! the final reply then holds only what came after the last of them, so no text is said twice. Pure.

use agentwire_core::TurnEvent;

/// The most bytes one interim message carries: a reply is one relay event, and a stretch of prose between
/// tool calls is far shorter; a longer one is cut (the final reply still leaves all of it out).
pub const MAX_INTERIM_BYTES: usize = 32 * 1024;

/// The text of a task's turn so far, split at its tool calls.
#[derive(Debug, Default)]
pub struct Interim {
    /// Text since the last tool call (or the start).
    pending: String,
    /// Every stretch said already, in order: the start of the agent's final text.
    said: String,
}

impl Interim {
    /// Takes one event of the turn; the message to post when a tool call closes a stretch of text.
    pub fn note(&mut self, event: &TurnEvent) -> Option<String> {
        match event {
            TurnEvent::Text { text } => {
                self.pending.push_str(text);
                None
            }
            TurnEvent::ToolCall { .. } => {
                let stretch = std::mem::take(&mut self.pending);
                self.said.push_str(&stretch);
                let message = stretch.trim();
                if message.is_empty() {
                    return None;
                }
                let cut = message.floor_char_boundary(MAX_INTERIM_BYTES);
                Some(message[..cut].to_string())
            }
            _ => None,
        }
    }

    /// The part of the agent's final `text` not said already: all of it when the agent's answer does not
    /// begin with what it streamed (an agent whose answer is not its streamed text).
    pub fn final_text<'a>(&self, text: &'a str) -> &'a str {
        match text.strip_prefix(self.said.as_str()) {
            Some(rest) if !self.said.is_empty() => rest.trim_start(),
            _ => text,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(t: &str) -> TurnEvent {
        TurnEvent::Text { text: t.into() }
    }

    fn call() -> TurnEvent {
        TurnEvent::ToolCall {
            call_id: "c".into(),
            name: "calculator".into(),
            arguments: serde_json::json!({}),
        }
    }

    #[test]
    fn text_before_a_tool_call_is_a_message_and_the_answer_keeps_the_rest() {
        let mut i = Interim::default();
        assert_eq!(i.note(&text("Let me ")), None);
        assert_eq!(i.note(&text("work that out. ")), None);
        assert_eq!(i.note(&call()).as_deref(), Some("Let me work that out."));
        assert_eq!(
            i.note(&call()),
            None,
            "no text between two calls: nothing to say"
        );
        assert_eq!(i.note(&text("It is 42.")), None);
        assert_eq!(i.final_text("Let me work that out. It is 42."), "It is 42.");
        // An answer that is not the streamed text is kept whole.
        assert_eq!(i.final_text("Something else."), "Something else.");
        // Without tool calls the whole answer is the reply.
        let none = Interim::default();
        assert_eq!(none.final_text("Hello."), "Hello.");
    }

    #[test]
    fn a_long_stretch_is_cut_and_still_left_out_of_the_answer() {
        let mut i = Interim::default();
        let long = "é".repeat(MAX_INTERIM_BYTES);
        i.note(&text(&long));
        let said = i.note(&call()).unwrap();
        assert!(said.len() <= MAX_INTERIM_BYTES && long.starts_with(&said));
        assert_eq!(i.final_text(&format!("{long}done")), "done");
    }
}
