//! The OpenAI chat completions wire: a request as it comes (unknown fields ignored, as the SDKs send new
//! ones), checked into a typed [`ChatRequest`] or a [`RequestError`]; and the completion, chunk, model
//! and error bodies as they go out. Pure: no I/O.

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The most messages one request carries: a long conversation is a few hundred; the 1 MiB body bound
/// ([`agentwire_http::MAX_FRONT_BODY_BYTES`]) comes first for long ones, and this one keeps a body of tiny
/// messages from being tens of thousands of turns to pair up.
pub const MAX_MESSAGES: usize = 1_000;
/// The most content parts one message has: a client splits a message in a few; text parts are joined.
pub const MAX_CONTENT_PARTS: usize = 100;

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Instructions from the caller (`system`).
    System,
    /// Instructions from the caller (`developer`, the newer models' name for `system`).
    Developer,
    /// The person.
    User,
    /// The agent, in an earlier turn.
    Assistant,
}

impl Role {
    /// The role's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::Developer => "developer",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }

    /// Whether the message is instructions rather than a part of the exchange.
    pub fn instructs(self) -> bool {
        matches!(self, Role::System | Role::Developer)
    }
}

/// One message of a request, its content as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    /// Who said it.
    pub role: Role,
    /// What was said (text parts joined by a newline).
    pub text: String,
}

/// A chat completion request, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatRequest {
    /// The agent's name.
    pub model: String,
    /// The conversation, oldest first; the last one is the person's.
    pub messages: Vec<ChatMessage>,
    /// Whether the answer is streamed as server-sent events.
    pub stream: bool,
    /// Whether a streamed answer ends with a usage chunk (`stream_options.include_usage`).
    pub include_usage: bool,
    /// The thinking effort asked for, in the turn's words (`low`, `medium`, `high`, `max`).
    pub thinking: Option<String>,
}

/// Why a request body is not a chat completion request this front takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// Not JSON, a required field missing, or a field of the wrong type.
    #[error("the body is not a chat completion request: {0}")]
    Malformed(String),
    /// `messages` is empty or holds more than [`MAX_MESSAGES`].
    #[error("messages: {0}")]
    Messages(String),
    /// A message that cannot be read.
    #[error("messages[{index}].{field}: {reason}")]
    Message {
        /// Its place in `messages`.
        index: usize,
        /// The field at fault.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// The last message is not the person's: there is nothing to answer.
    #[error(
        "messages: the last message is the one answered, so it is a user message (this one is {0})"
    )]
    LastNotUser(&'static str),
    /// A parameter with a value this front does not serve.
    #[error("{param}: {reason}")]
    Unsupported {
        /// The parameter.
        param: &'static str,
        /// Why, and what it takes.
        reason: String,
    },
}

impl RequestError {
    /// The parameter at fault, as OpenAI's `param` names it.
    pub fn param(&self) -> Option<String> {
        match self {
            RequestError::Malformed(_) => None,
            RequestError::Messages(_) | RequestError::LastNotUser(_) => Some("messages".into()),
            RequestError::Message { index, field, .. } => {
                Some(format!("messages[{index}].{field}"))
            }
            RequestError::Unsupported { param, .. } => Some((*param).into()),
        }
    }

    /// OpenAI's `code` for it.
    pub fn code(&self) -> &'static str {
        match self {
            RequestError::Malformed(_) => "invalid_json",
            RequestError::Messages(_)
            | RequestError::Message { .. }
            | RequestError::LastNotUser(_) => "invalid_value",
            RequestError::Unsupported { .. } => "unsupported_value",
        }
    }
}

#[derive(Deserialize)]
struct RawRequest {
    model: String,
    messages: Vec<RawMessage>,
    stream: Option<bool>,
    stream_options: Option<RawStreamOptions>,
    n: Option<u64>,
    logprobs: Option<bool>,
    tools: Option<Vec<IgnoredAny>>,
    functions: Option<Vec<IgnoredAny>>,
    tool_choice: Option<Value>,
    response_format: Option<RawResponseFormat>,
    reasoning_effort: Option<String>,
}

#[derive(Deserialize)]
struct RawStreamOptions {
    include_usage: Option<bool>,
}

#[derive(Deserialize)]
struct RawResponseFormat {
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct RawMessage {
    role: String,
    content: Option<Value>,
    tool_calls: Option<Vec<IgnoredAny>>,
    function_call: Option<IgnoredAny>,
}

const TOOLS_ARE_THE_AGENTS: &str =
    "the agent's tools are its own and it runs them itself; this front takes no client tools";

/// Reads and checks a request body.
pub fn parse_request(body: &[u8]) -> Result<ChatRequest, RequestError> {
    let raw: RawRequest =
        serde_json::from_slice(body).map_err(|e| RequestError::Malformed(e.to_string()))?;
    if raw.n.is_some_and(|n| n != 1) {
        return Err(RequestError::Unsupported {
            param: "n",
            reason: "an agent gives one answer a turn: n is 1".into(),
        });
    }
    if raw.logprobs == Some(true) {
        return Err(RequestError::Unsupported {
            param: "logprobs",
            reason: "an agent's answer has no log probabilities: logprobs is false".into(),
        });
    }
    if raw.tools.as_ref().is_some_and(|t| !t.is_empty()) {
        return Err(RequestError::Unsupported {
            param: "tools",
            reason: TOOLS_ARE_THE_AGENTS.into(),
        });
    }
    if raw.functions.as_ref().is_some_and(|f| !f.is_empty()) {
        return Err(RequestError::Unsupported {
            param: "functions",
            reason: TOOLS_ARE_THE_AGENTS.into(),
        });
    }
    match &raw.tool_choice {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s == "none" || s == "auto" => {}
        Some(_) => {
            return Err(RequestError::Unsupported {
                param: "tool_choice",
                reason: format!("{TOOLS_ARE_THE_AGENTS}: tool_choice is \"none\" or \"auto\""),
            })
        }
    }
    if let Some(f) = &raw.response_format {
        if f.kind != "text" {
            return Err(RequestError::Unsupported {
                param: "response_format",
                reason: format!(
                    "the agent answers in its own words, so {:?} cannot be kept to: response_format is {{\"type\": \"text\"}}",
                    f.kind
                ),
            });
        }
    }
    if raw.messages.is_empty() {
        return Err(RequestError::Messages(
            "there are none; the last is the user's message to answer".into(),
        ));
    }
    if raw.messages.len() > MAX_MESSAGES {
        return Err(RequestError::Messages(format!(
            "{} messages; a request carries at most {MAX_MESSAGES}",
            raw.messages.len()
        )));
    }
    let messages = raw
        .messages
        .into_iter()
        .enumerate()
        .map(|(index, m)| message(index, m))
        .collect::<Result<Vec<_>, _>>()?;
    match messages.last().map(|m| m.role) {
        Some(Role::User) | None => {}
        Some(other) => return Err(RequestError::LastNotUser(other.as_str())),
    }
    Ok(ChatRequest {
        model: raw.model,
        messages,
        stream: raw.stream.unwrap_or(false),
        include_usage: raw
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false),
        thinking: raw.reasoning_effort.as_deref().and_then(thinking),
    })
}

/// `reasoning_effort` in the turn's words (the NIP-XX `thinking` levels a model agent reads back as
/// `reasoning_effort`): `low`, `medium` and `high` as they are, `xhigh` as `max`; `none` and `minimal`
/// ask for no thinking, and a level this version does not know is left to the agent's default.
pub fn thinking(effort: &str) -> Option<String> {
    match effort {
        "low" | "medium" | "high" => Some(effort.to_string()),
        "xhigh" => Some("max".into()),
        _ => None,
    }
}

fn message(index: usize, m: RawMessage) -> Result<ChatMessage, RequestError> {
    let at = |field, reason: String| RequestError::Message {
        index,
        field,
        reason,
    };
    let role = match m.role.as_str() {
        "system" => Role::System,
        "developer" => Role::Developer,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" | "function" => {
            return Err(at(
                "role",
                format!("{TOOLS_ARE_THE_AGENTS}, so there are no tool results to give it"),
            ))
        }
        other => {
            return Err(at(
                "role",
                format!("{other:?}: system, developer, user or assistant"),
            ))
        }
    };
    if m.tool_calls.as_ref().is_some_and(|c| !c.is_empty()) || m.function_call.is_some() {
        return Err(at("tool_calls", TOOLS_ARE_THE_AGENTS.into()));
    }
    let text = match m.content {
        // An assistant message may have no content (it had tool calls, refused above).
        None | Some(Value::Null) if role == Role::Assistant => String::new(),
        None | Some(Value::Null) => return Err(at("content", "missing".into())),
        Some(Value::String(s)) => s,
        Some(Value::Array(parts)) => parts_text(parts).map_err(|r| at("content", r.to_string()))?,
        Some(_) => {
            return Err(at(
                "content",
                "a string or an array of {\"type\": \"text\", \"text\": ...} parts".into(),
            ))
        }
    };
    Ok(ChatMessage { role, text })
}

/// Why a message's `content` array of parts is not text the agent takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum PartsError {
    /// More parts than [`MAX_CONTENT_PARTS`].
    #[error("{parts} parts; a message has at most {MAX_CONTENT_PARTS}")]
    TooMany {
        /// The parts the message has.
        parts: usize,
    },
    /// A part of type `text` without its `text` string.
    #[error("part {index}: a text part has a \"text\" string")]
    NoText {
        /// The part's place in the array.
        index: usize,
    },
    /// A part of another type than `text` (an image, audio, a file).
    #[error("part {index} is {kind:?}: the agent takes text only (parts of type \"text\")")]
    NotText {
        /// The part's place in the array.
        index: usize,
        /// Its `type`.
        kind: String,
    },
    /// A part without a `type`.
    #[error("part {index}: a part has a \"type\"")]
    NoType {
        /// The part's place in the array.
        index: usize,
    },
}

fn parts_text(parts: Vec<Value>) -> Result<String, PartsError> {
    if parts.len() > MAX_CONTENT_PARTS {
        return Err(PartsError::TooMany { parts: parts.len() });
    }
    let mut texts = Vec::with_capacity(parts.len());
    for (index, p) in parts.iter().enumerate() {
        match (p["type"].as_str(), p["text"].as_str()) {
            (Some("text"), Some(t)) => texts.push(t),
            (Some("text"), None) => return Err(PartsError::NoText { index }),
            (Some(other), _) => {
                return Err(PartsError::NotText {
                    index,
                    kind: other.to_string(),
                })
            }
            (None, _) => return Err(PartsError::NoType { index }),
        }
    }
    Ok(texts.join("\n"))
}

/// Tokens in OpenAI's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WireUsage {
    /// Tokens read.
    pub prompt_tokens: u64,
    /// Tokens written.
    pub completion_tokens: u64,
    /// Their sum.
    pub total_tokens: u64,
}

/// The answer to a request that is not streamed (`chat.completion`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatCompletion {
    /// `chatcmpl-...`.
    pub id: String,
    /// `chat.completion`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// The agent's name.
    pub model: String,
    /// The one answer.
    pub choices: Vec<Choice>,
    /// Tokens the turn spent.
    pub usage: WireUsage,
}

/// An answer of a completion.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Choice {
    /// 0.
    pub index: u32,
    /// The agent's message.
    pub message: AssistantMessage,
    /// `stop` or `length`.
    pub finish_reason: &'static str,
    /// Always null.
    pub logprobs: Option<()>,
}

/// The agent's message in a completion.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AssistantMessage {
    /// `assistant`.
    pub role: &'static str,
    /// The answer's text.
    pub content: String,
}

/// One chunk of a streamed answer (`chat.completion.chunk`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatChunk {
    /// The completion's id, the same in every chunk.
    pub id: String,
    /// `chat.completion.chunk`.
    pub object: &'static str,
    /// Unix seconds, the same in every chunk.
    pub created: u64,
    /// The agent's name.
    pub model: String,
    /// One choice; none in the usage chunk.
    pub choices: Vec<ChunkChoice>,
    /// With `include_usage`: null in every chunk but the last, which has the usage (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<WireUsage>>,
}

/// The choice of a chunk.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChunkChoice {
    /// 0.
    pub index: u32,
    /// What it adds.
    pub delta: Delta,
    /// Null until the last chunk of the choice.
    pub finish_reason: Option<&'static str>,
    /// Always null.
    pub logprobs: Option<()>,
}

/// What a chunk adds to the message.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct Delta {
    /// `assistant`, in the first chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    /// Text to append.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelList {
    /// `list`.
    pub object: &'static str,
    /// The models (agents).
    pub data: Vec<Model>,
}

/// A model: an agent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Model {
    /// The agent's name.
    pub id: String,
    /// `model`.
    pub object: &'static str,
    /// Unix seconds: when the front started.
    pub created: u64,
    /// `agentwire`.
    pub owned_by: &'static str,
}

impl Model {
    /// Agent `name` as a model, listed since `created`.
    pub fn agent(name: &str, created: u64) -> Model {
        Model {
            id: name.to_string(),
            object: "model",
            created,
            owned_by: "agentwire",
        }
    }
}

/// An error body: `{"error": {...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// An error in OpenAI's shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorDetail {
    /// For people.
    pub message: String,
    /// Its class (`invalid_request_error`, `rate_limit_error`, `server_error`, ...).
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The parameter at fault, if one is.
    pub param: Option<String>,
    /// A code for programs.
    pub code: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<ChatRequest, RequestError> {
        parse_request(v.to_string().as_bytes())
    }

    fn user(text: &str) -> Value {
        json!({"role": "user", "content": text})
    }

    #[test]
    fn a_plain_request_reads_with_its_options_and_unknown_fields_ignored() {
        let r = parse(json!({
            "model": "demo", "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            ],
            "stream": true, "stream_options": {"include_usage": true},
            "temperature": 0.2, "top_p": 1, "max_tokens": 10, "max_completion_tokens": 10, "n": 1,
            "stop": ["x"], "user": "u", "seed": 1, "presence_penalty": 0, "frequency_penalty": 0,
            "logprobs": false, "response_format": {"type": "text"}, "tools": [], "tool_choice": "auto",
            "metadata": {"a": "b"}, "store": false, "parallel_tool_calls": true, "reasoning_effort": "high",
            "a_field_from_next_year": {"x": 1},
        }))
        .unwrap();
        assert_eq!(r.model, "demo");
        assert!(r.stream && r.include_usage);
        assert_eq!(r.thinking.as_deref(), Some("high"));
        assert_eq!(
            r.messages,
            vec![
                ChatMessage {
                    role: Role::System,
                    text: "be brief".into()
                },
                ChatMessage {
                    role: Role::User,
                    text: "a\nb".into()
                },
            ]
        );
        let plain =
            parse(json!({"model": "demo", "messages": [user("hi")], "stream": null})).unwrap();
        assert!(!plain.stream && !plain.include_usage && plain.thinking.is_none());
    }

    #[test]
    fn what_cannot_be_served_is_refused_naming_the_parameter() {
        let refused = |v: Value| parse(v).unwrap_err();
        let m = || json!([user("hi")]);
        let e = refused(json!({"model": "demo", "messages": m(), "n": 2}));
        assert_eq!(
            (e.param().as_deref(), e.code()),
            (Some("n"), "unsupported_value")
        );
        let e = refused(json!({"model": "demo", "messages": m(), "logprobs": true}));
        assert_eq!(e.param().as_deref(), Some("logprobs"));
        let e = refused(json!({"model": "demo", "messages": m(), "tools": [{"type": "function"}]}));
        assert_eq!(e.param().as_deref(), Some("tools"));
        assert!(e.to_string().contains("tools are its own"), "{e}");
        let e = refused(json!({"model": "demo", "messages": m(), "tool_choice": "required"}));
        assert_eq!(e.param().as_deref(), Some("tool_choice"));
        let e = refused(
            json!({"model": "demo", "messages": m(), "response_format": {"type": "json_schema"}}),
        );
        assert_eq!(e.param().as_deref(), Some("response_format"));
    }

    #[test]
    fn malformed_bodies_and_messages_are_told_apart() {
        let e = parse_request(b"{not json").unwrap_err();
        assert_eq!((e.param(), e.code()), (None, "invalid_json"));
        let e = parse(json!({"model": "demo"})).unwrap_err();
        assert!(
            matches!(e, RequestError::Malformed(ref m) if m.contains("messages")),
            "{e}"
        );
        let e = parse(json!({"model": 3, "messages": [user("x")]})).unwrap_err();
        assert!(matches!(e, RequestError::Malformed(_)), "{e}");
        let e = parse(json!({"model": "demo", "messages": []})).unwrap_err();
        assert_eq!(e.param().as_deref(), Some("messages"));
        let many: Vec<Value> = (0..=MAX_MESSAGES).map(|_| user("x")).collect();
        assert!(matches!(
            parse(json!({"model": "demo", "messages": many})).unwrap_err(),
            RequestError::Messages(_)
        ));
        let e = parse(json!({"model": "demo", "messages": [user("x"), {"role": "assistant", "content": "y"}]}))
            .unwrap_err();
        assert_eq!(e, RequestError::LastNotUser("assistant"));
        let image = json!({"model": "demo", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "x"}}]}]});
        let e = parse(image).unwrap_err();
        assert_eq!(e.param().as_deref(), Some("messages[0].content"));
        assert!(e.to_string().contains("image_url"), "{e}");
        let e = parse(json!({"model": "demo", "messages": [{"role": "tool", "content": "r", "tool_call_id": "c"}, user("x")]}))
            .unwrap_err();
        assert_eq!(e.param().as_deref(), Some("messages[0].role"));
        let e = parse(json!({"model": "demo", "messages": [{"role": "wizard", "content": "r"}]}))
            .unwrap_err();
        assert!(e.to_string().contains("wizard"), "{e}");
        let e = parse(json!({"model": "demo", "messages": [{"role": "user"}]})).unwrap_err();
        assert_eq!(e.param().as_deref(), Some("messages[0].content"));
        let e = parse(json!({"model": "demo", "messages": [{"role": "user", "content": 7}]}))
            .unwrap_err();
        assert_eq!(e.param().as_deref(), Some("messages[0].content"));
        let calls = json!({"model": "demo", "messages": [user("a"),
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c"}]}, user("b")]});
        assert_eq!(
            parse(calls).unwrap_err().param().as_deref(),
            Some("messages[1].tool_calls")
        );
        let silent = json!({"model": "demo", "messages": [user("a"), {"role": "assistant", "content": null}, user("b")]});
        assert_eq!(parse(silent).unwrap().messages[1].text, "");
    }

    #[test]
    fn content_parts_are_text_parts_each_refusal_naming_the_part() {
        let refused = |parts: Value| {
            let Value::Array(parts) = parts else {
                unreachable!()
            };
            parts_text(parts).unwrap_err().to_string()
        };
        assert_eq!(
            parts_text(vec![
                json!({"type": "text", "text": "a"}),
                json!({"type": "text", "text": "b"})
            ]),
            Ok("a\nb".to_string())
        );
        let many: Vec<Value> = (0..=MAX_CONTENT_PARTS)
            .map(|_| json!({"type": "text", "text": "x"}))
            .collect();
        assert_eq!(
            refused(Value::Array(many)),
            "101 parts; a message has at most 100"
        );
        assert_eq!(
            refused(json!([{"type": "text", "text": "a"}, {"type": "text"}])),
            "part 1: a text part has a \"text\" string"
        );
        assert_eq!(
            refused(json!([{"type": "image_url"}])),
            "part 0 is \"image_url\": the agent takes text only (parts of type \"text\")"
        );
        assert_eq!(
            refused(json!([{"text": "a"}])),
            "part 0: a part has a \"type\""
        );
        let e = parse(
            json!({"model": "demo", "messages": [{"role": "user", "content": [{"text": "a"}]}]}),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "messages[0].content: part 0: a part has a \"type\""
        );
    }

    #[test]
    fn reasoning_effort_becomes_thinking() {
        assert_eq!(thinking("low").as_deref(), Some("low"));
        assert_eq!(thinking("xhigh").as_deref(), Some("max"));
        assert_eq!(thinking("minimal"), None);
        assert_eq!(thinking("none"), None);
        assert_eq!(thinking("ludicrous"), None);
    }

    #[test]
    fn chunks_carry_usage_null_or_not_at_all() {
        let chunk = |usage| ChatChunk {
            id: "chatcmpl-1".into(),
            object: "chat.completion.chunk",
            created: 1,
            model: "demo".into(),
            choices: vec![],
            usage,
        };
        let v = serde_json::to_value(chunk(None)).unwrap();
        assert!(v.get("usage").is_none(), "{v}");
        let v = serde_json::to_value(chunk(Some(None))).unwrap();
        assert_eq!(v["usage"], Value::Null);
        assert!(v.as_object().unwrap().contains_key("usage"));
    }
}
