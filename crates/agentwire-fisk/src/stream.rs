//! One turn's reply stream as a pure state machine: messages numbered by `sequence` from 1 without gaps,
//! the last marked final, and streamed text coalesced into blocks. No I/O and no clock: time comes in as
//! `now`.
//!
//! The turn's first fragment of text goes out at once, so the caller sees the first words as soon as the
//! agent has them; what follows is coalesced.
//!
//! Inputs are `handle_*` calls; outputs are drained with [`ReplyStream::poll_transmit`], in order. Held
//! text must go out within [`TEXT_COALESCE_WINDOW`] of its first fragment even when the agent pauses, so a
//! driver also sleeps until [`ReplyStream::poll_timeout`] and then calls
//! [`ReplyStream::handle_timeout`] (the quinn-proto shape).
//!
//! ```
//! use agentwire_fisk::stream::{ReplyStream, TEXT_COALESCE_WINDOW};
//! use std::time::{Duration, Instant};
//!
//! let t0 = Instant::now();
//! let mut s = ReplyStream::new(true);
//! s.handle_text("Hel", t0);
//! assert_eq!(s.poll_transmit().unwrap().sequence, 1, "the first words at once");
//! s.handle_text("lo", t0 + Duration::from_millis(10));
//! s.handle_text(" there", t0 + Duration::from_millis(50));
//! assert!(s.poll_transmit().is_none(), "held while more may come");
//! let deadline = t0 + Duration::from_millis(10) + TEXT_COALESCE_WINDOW;
//! assert_eq!(s.poll_timeout(), Some(deadline));
//! s.handle_timeout(deadline);
//! let out = s.poll_transmit().unwrap();
//! assert_eq!((out.sequence, out.last), (2, false));
//! ```

use crate::wire::{self, Block, Reply};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Text fragments that arrive within this long of the first one held are sent as one `event.text` block: a
/// block is a piece of prose, not a token, and fewer, larger blocks are what fisk-ai callers render. It
/// is also the longest a fragment waits when the agent pauses. (The turn's very first fragment is not held.)
pub const TEXT_COALESCE_WINDOW: Duration = Duration::from_millis(200);

/// A message to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    /// Its place in the reply set, from 1.
    pub sequence: u64,
    /// The message.
    pub reply: Reply,
    /// The last of the set (`Fisk-AI-Stream-Final`); nothing follows it.
    pub last: bool,
}

/// The reply stream of one request.
#[derive(Debug)]
pub struct ReplyStream {
    /// Whether text and events are streamed (the request's `stream`); the ack and the terminal always go.
    stream: bool,
    next: u64,
    held: Option<(String, Instant)>,
    /// The turn's first text has gone out.
    first_sent: bool,
    out: VecDeque<Outgoing>,
    finished: bool,
}

impl ReplyStream {
    /// A new stream; `stream`: send text blocks and events, not only the ack and the terminal.
    pub fn new(stream: bool) -> ReplyStream {
        ReplyStream {
            stream,
            next: 1,
            held: None,
            first_sent: false,
            out: VecDeque::new(),
            finished: false,
        }
    }

    fn push(&mut self, reply: Reply, last: bool) {
        if self.finished {
            return;
        }
        self.out.push_back(Outgoing {
            sequence: self.next,
            reply,
            last,
        });
        self.next += 1;
        self.finished = last;
    }

    /// Sends held text as a non-final block.
    fn flush(&mut self) {
        if let Some((text, _)) = self.held.take() {
            self.push(
                Reply::Event(Block::text(wire::trim_block_text(&text), false)),
                false,
            );
        }
    }

    /// A message that is not streamed text (an ack, an event, a question): held text goes first.
    pub fn handle_reply(&mut self, reply: Reply) {
        self.flush();
        self.push(reply, false);
    }

    /// An event block, sent only when streaming; held text goes first.
    pub fn handle_event(&mut self, block: Block) {
        if self.stream {
            self.handle_reply(Reply::Event(block));
        }
    }

    /// A fragment of streamed text: the turn's first goes out at once; a later one joins the held block
    /// while it is younger than the window.
    pub fn handle_text(&mut self, text: &str, now: Instant) {
        if !self.stream || self.finished || text.is_empty() {
            return;
        }
        if !self.first_sent {
            self.first_sent = true;
            self.flush();
            self.push(
                Reply::Event(Block::text(wire::trim_block_text(text), false)),
                false,
            );
            return;
        }
        match self.held.as_mut() {
            Some((held, since)) if now.saturating_duration_since(*since) < TEXT_COALESCE_WINDOW => {
                held.push_str(text)
            }
            _ => {
                self.flush();
                self.held = Some((text.to_string(), now));
            }
        }
    }

    /// The turn's answer and its terminal: exactly one final text block, and it is the answer (the held
    /// text itself when it is the whole answer), then the terminal.
    pub fn handle_answer(&mut self, answer: &str, terminal: Reply) {
        if self.stream {
            match self.held.take() {
                Some((text, _)) if text == answer => {}
                held => {
                    self.held = held;
                    self.flush();
                }
            }
            self.push(
                Reply::Event(Block::text(wire::trim_block_text(answer), true)),
                false,
            );
        }
        self.push(terminal, true);
    }

    /// The last message (an error, a refusal): held text goes first; nothing is sent after it.
    pub fn handle_final(&mut self, reply: Reply) {
        self.flush();
        self.push(reply, true);
    }

    /// The clock reached `now`: held text whose window has closed goes out.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self
            .held
            .as_ref()
            .is_some_and(|(_, since)| now.saturating_duration_since(*since) >= TEXT_COALESCE_WINDOW)
        {
            self.flush();
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called next, if anything waits on time.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.held
            .as_ref()
            .map(|(_, since)| *since + TEXT_COALESCE_WINDOW)
    }

    /// The next message to publish, in order.
    pub fn poll_transmit(&mut self) -> Option<Outgoing> {
        self.out.pop_front()
    }

    /// Whether the last message has been queued.
    pub fn is_finished(&self) -> bool {
        self.finished
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Ack, StopReason, TurnResult};

    fn drain(s: &mut ReplyStream) -> Vec<Outgoing> {
        std::iter::from_fn(|| s.poll_transmit()).collect()
    }

    fn text_of(o: &Outgoing) -> Option<(&str, bool)> {
        match &o.reply {
            Reply::Event(Block::Text(t)) => Some((t.text.as_str(), t.is_final)),
            _ => None,
        }
    }

    fn result(text: &str) -> Reply {
        Reply::Result(TurnResult::new(StopReason::EndTurn, text.to_string()))
    }

    /// A virtual clock: the driver's loop, with time advanced by hand.
    struct Clock {
        t0: Instant,
    }
    impl Clock {
        fn at(&self, ms: u64) -> Instant {
            self.t0 + Duration::from_millis(ms)
        }
    }

    #[test]
    fn the_first_words_go_at_once_and_what_follows_is_coalesced() {
        let c = Clock { t0: Instant::now() };
        let mut s = ReplyStream::new(true);
        s.handle_reply(Reply::Ack(Ack::accepted()));
        s.handle_text("The", c.at(0));
        let out = drain(&mut s);
        assert_eq!(
            out.len(),
            2,
            "the ack, then the first words without waiting"
        );
        assert_eq!(text_of(&out[1]), Some(("The", false)));
        assert_eq!(s.poll_timeout(), None);
        s.handle_text(" first", c.at(5));
        s.handle_text(" words", c.at(120));
        assert!(drain(&mut s).is_empty(), "later fragments are held");
        assert_eq!(s.poll_timeout(), Some(c.at(205)));
    }

    #[test]
    fn held_text_goes_out_when_the_window_closes_though_the_agent_pauses() {
        let c = Clock { t0: Instant::now() };
        let mut s = ReplyStream::new(true);
        s.handle_reply(Reply::Ack(Ack::accepted()));
        s.handle_text("Hi, ", c.at(0));
        s.handle_text("first ", c.at(0));
        s.handle_text("words", c.at(120));
        // The agent pauses for seconds: the driver wakes at the deadline, not at the next event.
        let wake = s.poll_timeout().expect("a deadline while text is held");
        assert_eq!(wake, c.at(200));
        s.handle_timeout(c.at(199));
        assert_eq!(
            drain(&mut s).len(),
            2,
            "the ack and the first words before the deadline"
        );
        s.handle_timeout(wake);
        let out = drain(&mut s);
        assert_eq!(out.len(), 1);
        assert_eq!(text_of(&out[0]), Some(("first words", false)));
        assert_eq!(out[0].sequence, 3);
        assert_eq!(s.poll_timeout(), None, "nothing held, nothing to wait for");
    }

    #[test]
    fn fragments_past_the_window_start_a_new_block_and_events_flush_first() {
        let c = Clock { t0: Instant::now() };
        let mut s = ReplyStream::new(true);
        s.handle_text("a", c.at(0));
        s.handle_text("b", c.at(10));
        s.handle_text("b", c.at(260));
        s.handle_event(Block::thinking("hm"));
        s.handle_text("c", c.at(300));
        s.handle_answer("abbc", result("abbc"));
        let out = drain(&mut s);
        let seqs: Vec<u64> = out.iter().map(|o| o.sequence).collect();
        assert_eq!(
            seqs,
            vec![1, 2, 3, 4, 5, 6, 7],
            "numbered from 1 without gaps"
        );
        assert_eq!(text_of(&out[0]), Some(("a", false)), "the first at once");
        assert_eq!(text_of(&out[1]), Some(("b", false)));
        assert_eq!(text_of(&out[2]), Some(("b", false)), "past the window");
        assert!(matches!(out[3].reply, Reply::Event(Block::Thinking(_))));
        assert_eq!(
            text_of(&out[4]),
            Some(("c", false)),
            "held text is not the answer"
        );
        assert_eq!(
            text_of(&out[5]),
            Some(("abbc", true)),
            "one final block: the answer"
        );
        assert!(out[6].last && matches!(out[6].reply, Reply::Result(_)));
        assert!(out[..6].iter().all(|o| !o.last));
    }

    #[test]
    fn held_text_that_is_the_answer_becomes_its_one_final_block() {
        let c = Clock { t0: Instant::now() };
        let mut s = ReplyStream::new(true);
        s.handle_text("You said: ", c.at(0));
        s.handle_text("hi", c.at(10));
        s.handle_text(" there", c.at(20));
        s.handle_answer("hi there", result("You said: hi there"));
        let out = drain(&mut s);
        assert_eq!(out.len(), 3);
        assert_eq!(text_of(&out[0]), Some(("You said: ", false)));
        assert_eq!(text_of(&out[1]), Some(("hi there", true)));
        assert!(out[2].last);
    }

    #[test]
    fn without_streaming_only_the_ack_and_the_terminal_go_and_nothing_follows_the_last() {
        let c = Clock { t0: Instant::now() };
        let mut s = ReplyStream::new(false);
        s.handle_reply(Reply::Ack(Ack::accepted()));
        s.handle_text("x", c.at(0));
        s.handle_event(Block::thinking("hm"));
        assert_eq!(s.poll_timeout(), None);
        s.handle_answer("x", result("x"));
        s.handle_reply(Reply::Ack(Ack::accepted()));
        s.handle_final(result("again"));
        let out = drain(&mut s);
        assert_eq!(out.len(), 2);
        assert!(out[1].last);
        assert!(s.is_finished());
    }

    #[test]
    fn a_final_error_flushes_held_text_first() {
        let c = Clock { t0: Instant::now() };
        let mut s = ReplyStream::new(true);
        s.handle_text("partial", c.at(0));
        s.handle_final(Reply::Error(wire::TurnError::new(
            wire::ErrorCode::Failed,
            "boom".to_string(),
        )));
        let out = drain(&mut s);
        assert_eq!(text_of(&out[0]), Some(("partial", false)));
        assert!(out[1].last);
    }
}
