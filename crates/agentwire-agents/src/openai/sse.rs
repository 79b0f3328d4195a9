//! Server-sent events as an OpenAI-compatible server streams them: the `data` of each event, split out of
//! the bytes as they arrive. Pure: bytes in, events out.
//!
//! Chat completion streams use only `data:` lines, each event ended by a blank line, and `data: [DONE]` at
//! the end; comments (`:` lines, keep-alives) and other fields are skipped. Lines end with `\n` or `\r\n`.

/// The most bytes one event may hold before its blank line: a chunk of a chat completion is a few hundred
/// bytes, so 1 MiB means a broken or hostile server, and it must not grow memory without bound.
pub const MAX_SSE_EVENT_BYTES: usize = 1024 * 1024;

/// An event larger than [`MAX_SSE_EVENT_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the model server sent an event of more than {MAX_SSE_EVENT_BYTES} bytes")]
pub struct SseTooLarge;

/// Splits a byte stream into its events' data.
#[derive(Debug, Default)]
pub struct SseFramer {
    /// The bytes of the line being read.
    line: Vec<u8>,
    /// The data lines of the event being read, joined by `\n`.
    data: Option<String>,
    /// Bytes held for the event being read.
    held: usize,
}

impl SseFramer {
    /// Takes the next bytes; returns the data of every event they complete, in order.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<String>, SseTooLarge> {
        let mut events = Vec::new();
        for part in bytes.split_inclusive(|b| *b == b'\n') {
            let (body, ends) = match part.strip_suffix(b"\n") {
                Some(body) => (body, true),
                None => (part, false),
            };
            self.held += body.len();
            if self.held > MAX_SSE_EVENT_BYTES {
                return Err(SseTooLarge);
            }
            self.line.extend_from_slice(body);
            if !ends {
                continue;
            }
            let line = std::mem::take(&mut self.line);
            let line = line.strip_suffix(b"\r").unwrap_or(&line);
            if line.is_empty() {
                self.held = 0;
                events.extend(self.data.take());
                continue;
            }
            let line = String::from_utf8_lossy(line);
            let (field, value) = match line.split_once(':') {
                Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                None => (line.as_ref(), ""),
            };
            if field == "data" {
                match &mut self.data {
                    Some(d) => {
                        d.push('\n');
                        d.push_str(value);
                    }
                    None => self.data = Some(value.to_string()),
                }
            }
        }
        Ok(events)
    }

    /// The data of an event the stream ended without its blank line.
    pub fn finish(&mut self) -> Option<String> {
        if !self.line.is_empty() {
            let _ = self.push(b"\n");
        }
        self.held = 0;
        self.data.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_anywhere_come_out_whole() {
        let stream = b": keep-alive\n\ndata: {\"a\":1}\n\ndata: one\r\ndata:two\r\n\r\nevent: x\nid: 3\ndata: [DONE]\n\n";
        for cut in 0..stream.len() {
            let mut f = SseFramer::default();
            let mut got = f.push(&stream[..cut]).unwrap();
            got.extend(f.push(&stream[cut..]).unwrap());
            assert_eq!(got, vec!["{\"a\":1}", "one\ntwo", "[DONE]"], "cut at {cut}");
        }
    }

    #[test]
    fn an_unended_event_is_given_at_the_end_and_a_huge_one_refused() {
        let mut f = SseFramer::default();
        assert!(f.push(b"data: last").unwrap().is_empty());
        assert_eq!(f.finish().as_deref(), Some("last"));
        let mut f = SseFramer::default();
        let big = vec![b'x'; MAX_SSE_EVENT_BYTES / 2];
        assert!(f.push(b"data: ").is_ok());
        assert!(f.push(&big).is_ok());
        assert_eq!(f.push(&big), Err(SseTooLarge));
        // Many small events never add up to the limit.
        let mut f = SseFramer::default();
        for _ in 0..10_000 {
            assert_eq!(
                f.push(&[b"data: ".as_slice(), &big[..200], b"\n\n"].concat())
                    .unwrap()
                    .len(),
                1
            );
        }
    }
}
