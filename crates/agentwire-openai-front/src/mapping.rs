//! Between OpenAI's words and the engine's: a request's messages become the turn's message and its earlier
//! turns, the outcome becomes a completion or an error, and a streamed turn's events become chunks in
//! order ([`Chunker`]). Pure: no I/O, time and ids come in as arguments.

use crate::errors::ApiError;
use crate::wire::{
    AssistantMessage, ChatChunk, ChatCompletion, ChatMessage, Choice, ChunkChoice, Delta,
    ErrorBody, Role, WireUsage,
};
use agentwire_core::{Outcome, PastTurn, TurnEvent, TurnResult, Usage};

/// The most earlier turns a request hands the agent: the newest ones, as many as the engine gives an agent
/// from a conversation's own journal ([`agentwire_engine::MAX_HISTORY_TURNS`]); a model's context would not
/// hold more, and the agent's own limits cut further.
pub const MAX_PAST_TURNS: usize = agentwire_engine::MAX_HISTORY_TURNS;

/// The line that opens the caller's instructions (its `system` and `developer` messages) in the turn's
/// message, after the person's words.
pub const INSTRUCTIONS_HEADING: &str = "Instructions sent with this message (its system messages):";

/// A request's messages as a turn: what the person says now, and the exchange before it.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversation {
    /// The turn's message.
    pub message: String,
    /// The earlier turns, oldest first (at most [`MAX_PAST_TURNS`]).
    pub history: Vec<PastTurn>,
}

/// Splits `messages` into the turn and its history.
///
/// The user messages after the last assistant message are the turn's message (joined by a blank line);
/// before it, each run of user messages and the run of assistant messages that follows is one earlier turn
/// (an assistant message with no user message before it, a greeting, is a turn with an empty message).
/// The `system` and `developer` messages, wherever they stand, follow the person's words in the turn's
/// message under [`INSTRUCTIONS_HEADING`]: the agent has its own system prompt, and a turn has one message,
/// which the journal, the hub and an agent reading commands from its first word (the demo's) see starting
/// with what the person said. `None` when the turn's message would be empty.
pub fn conversation(messages: &[ChatMessage]) -> Option<Conversation> {
    let instructions: Vec<&str> = messages
        .iter()
        .filter(|m| m.role.instructs())
        .map(|m| m.text.as_str())
        .filter(|t| !t.trim().is_empty())
        .collect();
    let exchange: Vec<&ChatMessage> = messages.iter().filter(|m| !m.role.instructs()).collect();
    let split = exchange
        .iter()
        .rposition(|m| m.role == Role::Assistant)
        .map_or(0, |i| i + 1);
    let said: Vec<&str> = exchange[split..]
        .iter()
        .map(|m| m.text.as_str())
        .filter(|t| !t.trim().is_empty())
        .collect();
    if said.is_empty() {
        return None;
    }
    let mut message = said.join("\n\n");
    if !instructions.is_empty() {
        message.push_str("\n\n");
        message.push_str(INSTRUCTIONS_HEADING);
        message.push('\n');
        message.push_str(&instructions.join("\n\n"));
    }
    let mut history: Vec<PastTurn> = Vec::new();
    let (mut asked, mut answered): (Vec<&str>, Vec<&str>) = (Vec::new(), Vec::new());
    for m in &exchange[..split] {
        match m.role {
            Role::User => {
                if !answered.is_empty() {
                    history.push(past(&asked, &answered));
                    asked.clear();
                    answered.clear();
                }
                asked.push(&m.text);
            }
            _ => answered.push(&m.text),
        }
    }
    if !answered.is_empty() {
        history.push(past(&asked, &answered));
    }
    let extra = history.len().saturating_sub(MAX_PAST_TURNS);
    history.drain(..extra);
    Some(Conversation { message, history })
}

fn past(asked: &[&str], answered: &[&str]) -> PastTurn {
    PastTurn {
        message: asked.join("\n\n"),
        tools: Vec::new(),
        answer: answered.join("\n\n"),
    }
}

/// Refuses a turn message larger than the agent takes (`max` bytes, its card's `max_prompt_bytes`).
pub fn check_size(message: &str, max: usize) -> Result<(), ApiError> {
    match message.len() > max {
        true => Err(ApiError::message_too_large(message.len(), max)),
        false => Ok(()),
    }
}

/// Tokens in OpenAI's words.
pub fn usage(u: Usage) -> WireUsage {
    WireUsage {
        prompt_tokens: u.input_tokens,
        completion_tokens: u.output_tokens,
        total_tokens: u.input_tokens.saturating_add(u.output_tokens),
    }
}

/// OpenAI's `finish_reason` for an agent's stop reason: `length` when it ran out of tokens, else `stop`.
pub fn finish_reason(stop_reason: &str) -> &'static str {
    match stop_reason {
        "length" | "max_tokens" | "max_output_tokens" => "length",
        _ => "stop",
    }
}

/// The completion of a turn that answered.
pub fn completion(id: &str, created: u64, model: &str, result: &TurnResult) -> ChatCompletion {
    ChatCompletion {
        id: id.to_string(),
        object: "chat.completion",
        created,
        model: model.to_string(),
        choices: vec![Choice {
            index: 0,
            message: AssistantMessage {
                role: "assistant",
                content: result.text.clone(),
            },
            finish_reason: finish_reason(&result.stop_reason),
            logprobs: None,
        }],
        usage: usage(result.usage),
    }
}

/// One server-sent event of a streamed answer.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    /// A chunk.
    Chunk(ChatChunk),
    /// The turn failed: the last event (no `[DONE]` follows).
    Error(ErrorBody),
    /// `[DONE]`: the answer is whole.
    Done,
}

impl StreamItem {
    /// The event's `data`.
    pub fn data(&self) -> String {
        match self {
            StreamItem::Chunk(c) => serde_json::to_string(c).unwrap_or_default(),
            StreamItem::Error(e) => serde_json::to_string(e).unwrap_or_default(),
            StreamItem::Done => "[DONE]".into(),
        }
    }
}

/// A streamed answer's chunks, in order: [`opening`](Self::opening) (the role), a chunk per text delta
/// ([`event`](Self::event)), then from the [`outcome`](Self::outcome) the rest of the answer's text, the
/// chunk with `finish_reason`, the usage chunk when asked for, and `[DONE]`; or an error event.
#[derive(Debug)]
pub struct Chunker {
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
    /// The text sent so far.
    streamed: String,
}

impl Chunker {
    /// The chunks of completion `id` of `model`, created at `created`.
    pub fn new(id: &str, created: u64, model: &str, include_usage: bool) -> Chunker {
        Chunker {
            id: id.to_string(),
            created,
            model: model.to_string(),
            include_usage,
            streamed: String::new(),
        }
    }

    fn chunk(&self, delta: Delta, finish_reason: Option<&'static str>) -> ChatChunk {
        ChatChunk {
            id: self.id.clone(),
            object: "chat.completion.chunk",
            created: self.created,
            model: self.model.clone(),
            choices: vec![ChunkChoice {
                index: 0,
                delta,
                finish_reason,
                logprobs: None,
            }],
            usage: self.include_usage.then_some(None),
        }
    }

    fn text(&mut self, text: &str) -> ChatChunk {
        self.streamed.push_str(text);
        self.chunk(
            Delta {
                role: None,
                content: Some(text.to_string()),
            },
            None,
        )
    }

    /// The first chunk: the assistant's role and no text yet.
    pub fn opening(&self) -> StreamItem {
        StreamItem::Chunk(self.chunk(
            Delta {
                role: Some("assistant"),
                content: Some(String::new()),
            },
            None,
        ))
    }

    /// The chunk for an event of the turn: its text deltas (the rest of its activity, tools and status,
    /// is the agent's own and not part of the message).
    pub fn event(&mut self, event: &TurnEvent) -> Option<StreamItem> {
        match event {
            TurnEvent::Text { text } if !text.is_empty() => {
                Some(StreamItem::Chunk(self.text(text)))
            }
            _ => None,
        }
    }

    /// The last events, from the turn's outcome (`asked`: the agent put a question in it).
    ///
    /// The answer's text is the message: what of it was not streamed follows in one chunk. An agent whose
    /// deltas were not its answer (progress, as the demo's `sleep` streams) gets its answer after them,
    /// after a blank line, so the message ends with the whole answer.
    pub fn outcome(&mut self, outcome: &Outcome, asked: bool) -> Vec<StreamItem> {
        match outcome {
            Outcome::Result(r) => {
                let mut items = Vec::new();
                let rest = match r.text.strip_prefix(self.streamed.as_str()) {
                    Some(rest) => rest.to_string(),
                    None => format!("\n\n{}", r.text),
                };
                if !rest.is_empty() {
                    items.push(StreamItem::Chunk(self.text(&rest)));
                }
                items.push(StreamItem::Chunk(
                    self.chunk(Delta::default(), Some(finish_reason(&r.stop_reason))),
                ));
                if self.include_usage {
                    let mut last = self.chunk(Delta::default(), None);
                    last.choices.clear();
                    last.usage = Some(Some(usage(r.usage)));
                    items.push(StreamItem::Chunk(last));
                }
                items.push(StreamItem::Done);
                items
            }
            Outcome::Failure(f) => vec![StreamItem::Error(ApiError::of_failure(f, asked).body())],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire_core::{Failure, TurnFailure};
    use serde_json::{json, Value};

    fn m(role: Role, text: &str) -> ChatMessage {
        ChatMessage {
            role,
            text: text.into(),
        }
    }

    fn turn(message: &str, answer: &str) -> PastTurn {
        PastTurn {
            message: message.into(),
            tools: vec![],
            answer: answer.into(),
        }
    }

    #[test]
    fn one_user_message_is_the_turn_with_no_history() {
        let c = conversation(&[m(Role::User, "calc 1 + 2")]).unwrap();
        assert_eq!(c.message, "calc 1 + 2");
        assert!(c.history.is_empty());
    }

    #[test]
    fn earlier_pairs_are_history_and_instructions_follow_the_message() {
        let c = conversation(&[
            m(Role::System, "be brief"),
            m(Role::User, "hi"),
            m(Role::Assistant, "hello"),
            m(Role::Developer, "in French"),
            m(Role::User, "what is 2+2"),
            m(Role::User, "and 3+3"),
            m(Role::Assistant, "4"),
            m(Role::Assistant, "6"),
            m(Role::User, "thanks"),
            m(Role::User, "bye"),
        ])
        .unwrap();
        assert_eq!(
            c.message,
            format!("thanks\n\nbye\n\n{INSTRUCTIONS_HEADING}\nbe brief\n\nin French")
        );
        assert_eq!(
            c.history,
            vec![
                turn("hi", "hello"),
                turn("what is 2+2\n\nand 3+3", "4\n\n6")
            ]
        );
    }

    #[test]
    fn a_greeting_first_is_a_turn_with_no_message_and_empty_turns_are_none() {
        let c =
            conversation(&[m(Role::Assistant, "How can I help?"), m(Role::User, "hi")]).unwrap();
        assert_eq!(c.history, vec![turn("", "How can I help?")]);
        assert_eq!(conversation(&[m(Role::User, "  ")]), None);
        assert_eq!(conversation(&[m(Role::System, "x")]), None);
    }

    #[test]
    fn only_the_newest_past_turns_are_kept() {
        let mut msgs = Vec::new();
        for i in 0..MAX_PAST_TURNS + 5 {
            msgs.push(m(Role::User, &format!("q{i}")));
            msgs.push(m(Role::Assistant, &format!("a{i}")));
        }
        msgs.push(m(Role::User, "now"));
        let c = conversation(&msgs).unwrap();
        assert_eq!(c.history.len(), MAX_PAST_TURNS);
        assert_eq!(c.history[0].message, "q5");
    }

    #[test]
    fn a_message_larger_than_the_agent_takes_is_refused() {
        assert!(check_size("abc", 3).is_ok());
        let e = check_size("abcd", 3).unwrap_err();
        assert_eq!(
            (e.status, e.code.as_str()),
            (400, "context_length_exceeded")
        );
    }

    fn result(text: &str, stop: &str) -> Outcome {
        Outcome::Result(TurnResult {
            text: text.into(),
            usage: Usage {
                input_tokens: 3,
                output_tokens: 2,
            },
            stop_reason: stop.into(),
        })
    }

    #[test]
    fn a_completion_has_the_answer_and_its_usage() {
        let Outcome::Result(r) = result("84", "stop") else {
            unreachable!()
        };
        let v = serde_json::to_value(completion("chatcmpl-1", 9, "demo", &r)).unwrap();
        assert_eq!(
            v,
            json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 9, "model": "demo",
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": "84"},
                                "finish_reason": "stop", "logprobs": null}],
                   "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})
        );
        assert_eq!(finish_reason("length"), "length");
        assert_eq!(finish_reason("end_turn"), "stop");
    }

    fn data(items: &[StreamItem]) -> Vec<Value> {
        items
            .iter()
            .map(|i| serde_json::from_str(&i.data()).unwrap_or(Value::String(i.data())))
            .collect()
    }

    #[test]
    fn a_stream_is_the_role_the_deltas_the_finish_the_usage_and_done() {
        let mut c = Chunker::new("chatcmpl-1", 9, "demo", true);
        let mut items = vec![c.opening()];
        items.extend(c.event(&TurnEvent::Text {
            text: "You said: ".into(),
        }));
        items.extend(c.event(&TurnEvent::Warning {
            text: "w".into(),
            about: None,
        }));
        items.extend(c.event(&TurnEvent::Text { text: "".into() }));
        items.extend(c.event(&TurnEvent::Text { text: "hi".into() }));
        items.extend(c.outcome(&result("You said: hi", "stop"), false));
        let v = data(&items);
        assert_eq!(v.len(), 6, "{v:?}");
        assert_eq!(
            v[0]["choices"][0]["delta"],
            json!({"role": "assistant", "content": ""})
        );
        assert_eq!(v[0]["usage"], Value::Null);
        assert_eq!(
            v[1]["choices"][0]["delta"],
            json!({"content": "You said: "})
        );
        assert_eq!(v[2]["choices"][0]["delta"], json!({"content": "hi"}));
        assert_eq!(v[3]["choices"][0]["delta"], json!({}));
        assert_eq!(v[3]["choices"][0]["finish_reason"], "stop");
        assert_eq!(v[4]["choices"], json!([]));
        assert_eq!(v[4]["usage"]["total_tokens"], 5);
        assert_eq!(v[5], "[DONE]");
        for chunk in &v[..5] {
            assert_eq!(chunk["id"], "chatcmpl-1");
            assert_eq!(chunk["object"], "chat.completion.chunk");
            assert_eq!(chunk["created"], 9);
        }
        assert!(v[1]["choices"][0]["finish_reason"].is_null());
    }

    #[test]
    fn the_unstreamed_rest_of_the_answer_follows_and_a_different_answer_after_a_blank_line() {
        let mut c = Chunker::new("c", 1, "demo", false);
        let v = data(&c.outcome(&result("84", "length"), false));
        assert_eq!(v[0]["choices"][0]["delta"]["content"], "84");
        assert!(v[0].get("usage").is_none());
        assert_eq!(v[1]["choices"][0]["finish_reason"], "length");
        assert_eq!(v.len(), 3);
        let mut c = Chunker::new("c", 1, "demo", false);
        c.event(&TurnEvent::Text { text: "Hel".into() });
        let v = data(&c.outcome(&result("Hello", "stop"), false));
        assert_eq!(v[0]["choices"][0]["delta"]["content"], "lo");
        let mut c = Chunker::new("c", 1, "demo", false);
        c.event(&TurnEvent::Text {
            text: "tick 1\n".into(),
        });
        let v = data(&c.outcome(&result("slept 100 ms", "stop"), false));
        assert_eq!(v[0]["choices"][0]["delta"]["content"], "\n\nslept 100 ms");
    }

    #[test]
    fn a_failed_turn_ends_the_stream_with_an_error_and_no_done() {
        let mut c = Chunker::new("c", 1, "demo", true);
        let f = Failure::new(TurnFailure::UnsupportedFeature, "cannot ask");
        let items = c.outcome(&Outcome::Failure(f), true);
        assert_eq!(items.len(), 1);
        let v = data(&items);
        assert!(v[0]["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with(crate::errors::ASKED_MESSAGE));
    }
}
