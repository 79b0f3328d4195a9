//! A task's 43003 progress, throttled: the newest line of the agent's text and the newest tool line, each
//! clipped, published at most once per interval and only when it changed. Pure; time (ms) is passed in.

use super::card::clip;
use agentwire_core::TurnEvent;

/// The most bytes of a turn's streamed text kept to find its newest line: a line longer than this is
/// clipped to 200 characters anyway, so the rest of a long answer need not be held.
pub const MAX_KEPT_TEXT_BYTES: usize = 4096;

/// The progress of one task.
#[derive(Debug, Clone)]
pub struct Progress {
    interval_ms: u64,
    /// The tail of the text streamed so far.
    text: String,
    tool: Option<String>,
    /// When the last 43003 went out, and what it said.
    sent: Option<(u64, String)>,
}

impl Progress {
    /// Progress published at most every `interval_ms`.
    pub fn new(interval_ms: u64) -> Self {
        Progress {
            interval_ms,
            text: String::new(),
            tool: None,
            sent: None,
        }
    }

    /// Takes one event of the turn into account.
    pub fn note(&mut self, event: &TurnEvent) {
        match event {
            TurnEvent::Text { text } => {
                self.text.push_str(text);
                if self.text.len() > MAX_KEPT_TEXT_BYTES {
                    let cut = self
                        .text
                        .ceil_char_boundary(self.text.len() - MAX_KEPT_TEXT_BYTES);
                    self.text.drain(..cut);
                }
            }
            TurnEvent::ToolCall {
                name, arguments, ..
            } => self.tool = Some(clip(&agentwire_core::tool_line(name, arguments))),
            TurnEvent::ToolResult { name, success, .. } => {
                let how = if *success { "done" } else { "failed" };
                self.tool = Some(clip(&format!("{name} {how}")));
            }
            _ => {}
        }
    }

    /// What a 43003 would say now.
    fn content(&self) -> String {
        let text = self
            .text
            .lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(clip);
        text.into_iter()
            .chain(self.tool.clone())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The content of a 43003 due at `now_ms`: something changed since the last one, which is at least an
    /// interval ago. Taking it counts it as sent.
    pub fn poll(&mut self, now_ms: u64) -> Option<String> {
        let content = self.content();
        if content.is_empty() {
            return None;
        }
        if let Some((at, last)) = &self.sent {
            if *last == content || now_ms < at.saturating_add(self.interval_ms) {
                return None;
            }
        }
        self.sent = Some((now_ms, content.clone()));
        Some(content)
    }

    /// When to poll next for a change that is waiting out the interval (none when nothing waits).
    pub fn next_due(&self) -> Option<u64> {
        let (at, last) = self.sent.as_ref()?;
        let content = self.content();
        (!content.is_empty() && content != *last).then(|| at.saturating_add(self.interval_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(t: &str) -> TurnEvent {
        TurnEvent::Text { text: t.into() }
    }

    #[test]
    fn the_first_change_goes_out_then_at_most_once_an_interval() {
        let mut p = Progress::new(15_000);
        assert_eq!(p.poll(0), None, "nothing yet");
        p.note(&text("reading the files\n"));
        assert_eq!(p.poll(10).as_deref(), Some("reading the files"));
        p.note(&text("now writing"));
        assert_eq!(p.poll(5_000), None, "within the interval");
        assert_eq!(p.next_due(), Some(15_010));
        assert_eq!(p.poll(15_010).as_deref(), Some("now writing"));
        assert_eq!(p.poll(40_000), None, "nothing changed");
        assert_eq!(p.next_due(), None);
    }

    #[test]
    fn tool_calls_are_one_line_the_newest_and_lines_are_clipped() {
        let mut p = Progress::new(1);
        p.note(&text(&"x".repeat(500)));
        for i in 0..5 {
            p.note(&TurnEvent::ToolCall {
                call_id: format!("c{i}"),
                name: "calculator".into(),
                arguments: serde_json::json!({ "expr": format!("{i}+1") }),
            });
        }
        let out = p.poll(0).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert_eq!(lines[0].chars().count(), 200);
        assert!(lines[1].contains("4+1"), "the newest tool call: {out}");
    }

    #[test]
    fn kept_text_is_bounded_on_a_character_boundary() {
        let mut p = Progress::new(1);
        for _ in 0..3000 {
            p.note(&text("é"));
        }
        assert!(p.text.len() <= MAX_KEPT_TEXT_BYTES);
        assert!(p.poll(0).is_some());
    }
}
