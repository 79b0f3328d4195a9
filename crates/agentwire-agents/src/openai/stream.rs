//! One streamed chat completion, put together from its chunks: the answer's text and reasoning as they come
//! (for the turn's events), tool calls whose names and arguments arrive in pieces, why the model stopped,
//! and the usage. Pure: each event's data in, pieces out.

use agentwire_core::Usage;
use serde::Deserialize;

/// The most tool calls one model reply may ask for: more is a runaway model, not a plan.
pub const MAX_TOOL_CALLS_PER_REPLY: usize = 16;
/// The most bytes of a tool call's name: tool names are at most 64 characters in the chat APIs.
pub const MAX_TOOL_NAME_BYTES: usize = 256;
/// The most bytes of one tool call's arguments: tool inputs are small JSON documents.
pub const MAX_TOOL_ARGUMENT_BYTES: usize = 64 * 1024;
/// The most bytes of one reply's text (and, separately, of its reasoning): far past any answer a person reads,
/// and a bound on what a server that never stops can make us hold.
pub const MAX_REPLY_BYTES: usize = 1024 * 1024;

/// A piece of the reply for the turn's events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Answer text.
    Text(String),
    /// Reasoning (`reasoning_content` or `reasoning`).
    Thinking(String),
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The call's id (the model's, or `call_<n>` when it gave none).
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// Its arguments, as the JSON text the model wrote.
    pub arguments: String,
}

/// One whole model reply.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reply {
    /// The answer text.
    pub text: String,
    /// The tool calls, in the model's order.
    pub tool_calls: Vec<ToolCall>,
    /// Why the model stopped (`stop`, `length`, `tool_calls`, ...), when it said.
    pub finish_reason: Option<String>,
    /// Tokens of this call, when the server reported them.
    pub usage: Usage,
}

/// What went wrong in a stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// A chunk that is not a chat completion chunk. The parser's words (which may quote the chunk) are kept
    /// for a `debug` log line, not put in the message.
    #[error("the model server sent a chunk that is not JSON of a chat completion")]
    Malformed(String),
    /// The server reported an error inside the stream. Its words (kept for a `debug` log line) are not in the
    /// message: they may echo the request, its key included.
    #[error("the model server reported an error in its stream")]
    Provider(String),
    /// More than the limits allow.
    #[error("the model's reply is too large: {0}")]
    TooLarge(&'static str),
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<CallDelta>>,
}

#[derive(Deserialize)]
struct CallDelta {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

/// A reply being put together.
#[derive(Debug, Default)]
pub struct Accumulator {
    reply: Reply,
    reasoning_bytes: usize,
    /// Calls by the index the server gave them.
    calls: Vec<(usize, ToolCall)>,
    done: bool,
}

impl Accumulator {
    /// Whether the stream said `[DONE]`.
    pub fn done(&self) -> bool {
        self.done
    }

    /// Whether the server said the reply was finished: `[DONE]`, or a choice's `finish_reason` (some servers
    /// close the stream after it without `[DONE]`). A stream that ends with neither was cut short.
    pub fn finished(&self) -> bool {
        self.done || self.reply.finish_reason.is_some()
    }

    /// Bytes of answer text so far.
    pub fn text_bytes(&self) -> usize {
        self.reply.text.len()
    }

    /// Whether the model has said anything yet: text, reasoning or a tool call (its first token came).
    pub fn started(&self) -> bool {
        !self.reply.text.is_empty() || self.reasoning_bytes > 0 || !self.calls.is_empty()
    }

    /// Takes one event's data; returns what it adds to the text and the reasoning.
    pub fn feed(&mut self, data: &str) -> Result<Vec<Piece>, StreamError> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(Vec::new());
        }
        let chunk: Chunk =
            serde_json::from_str(data).map_err(|e| StreamError::Malformed(e.to_string()))?;
        if let Some(error) = chunk.error {
            let message = error["message"]
                .as_str()
                .map(String::from)
                .unwrap_or_else(|| error.to_string());
            return Err(StreamError::Provider(message));
        }
        if let Some(u) = chunk.usage {
            self.reply.usage = Usage {
                input_tokens: u.prompt_tokens,
                output_tokens: u.completion_tokens,
            };
        }
        let mut pieces = Vec::new();
        for choice in chunk.choices.into_iter().take(1) {
            if let Some(reason) = choice.finish_reason {
                self.reply.finish_reason = Some(reason);
            }
            let Some(delta) = choice.delta else { continue };
            for thought in [delta.reasoning_content, delta.reasoning]
                .into_iter()
                .flatten()
            {
                if !thought.is_empty() {
                    self.reasoning_bytes += thought.len();
                    if self.reasoning_bytes > MAX_REPLY_BYTES {
                        return Err(StreamError::TooLarge("more reasoning than 1 MiB"));
                    }
                    pieces.push(Piece::Thinking(thought));
                }
            }
            if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                if self.reply.text.len() + text.len() > MAX_REPLY_BYTES {
                    return Err(StreamError::TooLarge("more text than 1 MiB"));
                }
                self.reply.text.push_str(&text);
                pieces.push(Piece::Text(text));
            }
            for call in delta.tool_calls.into_iter().flatten() {
                self.call_delta(call)?;
            }
        }
        Ok(pieces)
    }

    fn call_delta(&mut self, d: CallDelta) -> Result<(), StreamError> {
        // A server that numbers no calls sends each call whole, one after the other.
        let index = d.index.unwrap_or(self.calls.len());
        let at = match self.calls.iter().position(|(i, _)| *i == index) {
            Some(at) => at,
            None => {
                if self.calls.len() >= MAX_TOOL_CALLS_PER_REPLY {
                    return Err(StreamError::TooLarge(
                        "more than 16 tool calls in one reply",
                    ));
                }
                self.calls.push((
                    index,
                    ToolCall {
                        id: String::new(),
                        name: String::new(),
                        arguments: String::new(),
                    },
                ));
                self.calls.len() - 1
            }
        };
        let call = &mut self.calls[at].1;
        if let Some(id) = d.id.filter(|i| !i.is_empty()) {
            call.id = id;
        }
        if let Some(f) = d.function {
            if let Some(name) = f.name {
                if call.name.len() + name.len() > MAX_TOOL_NAME_BYTES {
                    return Err(StreamError::TooLarge("a tool name over 256 bytes"));
                }
                call.name.push_str(&name);
            }
            if let Some(args) = f.arguments {
                if call.arguments.len() + args.len() > MAX_TOOL_ARGUMENT_BYTES {
                    return Err(StreamError::TooLarge("tool call arguments over 64 KiB"));
                }
                call.arguments.push_str(&args);
            }
        }
        Ok(())
    }

    /// The whole reply.
    pub fn finish(mut self) -> Reply {
        self.calls.sort_by_key(|(i, _)| *i);
        self.reply.tool_calls = self
            .calls
            .into_iter()
            .enumerate()
            .map(|(n, (_, mut c))| {
                if c.id.is_empty() {
                    c.id = format!("call_{}", n + 1);
                }
                c
            })
            .collect();
        self.reply
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_has_started_at_the_first_text_reasoning_or_tool_call() {
        let role_only = r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#;
        for first in [
            r#"{"choices":[{"delta":{"content":"Hi"}}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":"hmm"}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"clock"}}]}}]}"#,
        ] {
            let mut a = Accumulator::default();
            a.feed(role_only).unwrap();
            assert!(!a.started(), "a role and empty content are no token");
            a.feed(first).unwrap();
            assert!(a.started(), "{first}");
        }
    }

    fn feed_all(chunks: &[&str]) -> (Vec<Piece>, Reply) {
        let mut a = Accumulator::default();
        let mut pieces = Vec::new();
        for c in chunks {
            pieces.extend(a.feed(c).unwrap());
        }
        assert!(a.done());
        (pieces, a.finish())
    }

    #[test]
    fn text_reasoning_and_usage() {
        let (pieces, reply) = feed_all(&[
            r#"{"choices":[{"delta":{"role":"assistant","reasoning_content":"hmm"}}]}"#,
            r#"{"choices":[{"delta":{"reasoning":" ok"}}]}"#,
            r#"{"choices":[{"delta":{"content":"Hel"}}]}"#,
            r#"{"choices":[{"delta":{"content":"lo"},"finish_reason":"stop"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}"#,
            "[DONE]",
        ]);
        assert_eq!(
            pieces,
            vec![
                Piece::Thinking("hmm".into()),
                Piece::Thinking(" ok".into()),
                Piece::Text("Hel".into()),
                Piece::Text("lo".into())
            ]
        );
        assert_eq!(reply.text, "Hello");
        assert_eq!(reply.finish_reason.as_deref(), Some("stop"));
        assert_eq!(reply.usage.input_tokens, 12);
        assert_eq!(reply.usage.output_tokens, 3);
    }

    #[test]
    fn tool_calls_arrive_in_pieces_and_interleaved() {
        let (_, reply) = feed_all(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"calcu","arguments":""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"call_b","function":{"name":"clock","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"lator","arguments":"{\"expr"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"ession\":\"2+3\"}"}}]},"finish_reason":"tool_calls"}]}"#,
            "[DONE]",
        ]);
        assert_eq!(
            reply.tool_calls,
            vec![
                ToolCall {
                    id: "call_a".into(),
                    name: "calculator".into(),
                    arguments: r#"{"expression":"2+3"}"#.into()
                },
                ToolCall {
                    id: "call_b".into(),
                    name: "clock".into(),
                    arguments: "{}".into()
                }
            ]
        );
        assert_eq!(reply.finish_reason.as_deref(), Some("tool_calls"));
    }

    #[test]
    fn errors_and_limits() {
        let mut a = Accumulator::default();
        assert!(matches!(
            a.feed("{not json"),
            Err(StreamError::Malformed(_))
        ));
        assert_eq!(
            a.feed(r#"{"error":{"message":"overloaded"}}"#),
            Err(StreamError::Provider("overloaded".into()))
        );
        let mut a = Accumulator::default();
        for i in 0..MAX_TOOL_CALLS_PER_REPLY {
            a.feed(&format!(r#"{{"choices":[{{"delta":{{"tool_calls":[{{"index":{i},"function":{{"name":"clock"}}}}]}}}}]}}"#))
                .unwrap();
        }
        assert!(matches!(
            a.feed(r#"{"choices":[{"delta":{"tool_calls":[{"index":99,"function":{"name":"clock"}}]}}]}"#),
            Err(StreamError::TooLarge(_))
        ));
        let mut a = Accumulator::default();
        let big = "x".repeat(MAX_TOOL_ARGUMENT_BYTES / 2 + 1);
        let chunk = format!(
            r#"{{"choices":[{{"delta":{{"tool_calls":[{{"index":0,"function":{{"arguments":"{big}"}}}}]}}}}]}}"#
        );
        a.feed(&chunk).unwrap();
        assert!(matches!(a.feed(&chunk), Err(StreamError::TooLarge(_))));
        // A name sent in pieces is bounded as a whole.
        let mut a = Accumulator::default();
        let half = "n".repeat(MAX_TOOL_NAME_BYTES / 2);
        let piece = format!(
            r#"{{"choices":[{{"delta":{{"tool_calls":[{{"index":0,"function":{{"name":"{half}"}}}}]}}}}]}}"#
        );
        a.feed(&piece).unwrap();
        a.feed(&piece).unwrap();
        assert_eq!(
            a.feed(&piece),
            Err(StreamError::TooLarge("a tool name over 256 bytes"))
        );
    }
}
