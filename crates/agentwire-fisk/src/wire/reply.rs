//! What a worker sends: the ack, events, questions, the terminal result or error, and the discovery card.

use super::block::Block;
use super::codes::{ErrorCode, StopReason};
use super::elicit::Question;
use super::header::Header;
use super::protocol::{self as p, encode, PROTOCOL_NAMESPACE};
use serde::Serialize;
use serde_json::{Map, Value};

/// What a task consumed (`common.json#/$defs/usage`): tokens are what it cost, calls what it did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Input tokens, cached and uncached together.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Input tokens served from the prompt cache (included in `input_tokens`).
    pub cache_read_tokens: u64,
    /// Input tokens written into the prompt cache (included in `input_tokens`).
    pub cache_create_tokens: u64,
    /// Output tokens spent reasoning (included in `output_tokens`).
    pub thinking_tokens: u64,
    /// Model calls.
    pub llm_calls: u64,
    /// Tool invocations.
    pub tool_calls: u64,
}

/// `ack`: first in every reply set (and the answer to a cancel or an elicit message), saying whether the
/// message was taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ack {
    /// Whether it was taken.
    pub accepted: bool,
    /// Why not, when refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The conversation's handle, on an ack that accepts a prompt (`^[a-zA-Z0-9_-]+$`, at most 128).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conversation_token: Option<String>,
    /// Tokens the conversation may use in total; absent when the agent sets no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

impl Ack {
    /// An ack that takes the message.
    pub fn accepted() -> Ack {
        Ack {
            accepted: true,
            reason: None,
            conversation_token: None,
            max_tokens: None,
        }
    }

    /// An ack that refuses it, saying why (an `error` with the code follows and closes the set).
    pub fn refused(reason: impl Into<String>) -> Ack {
        Ack {
            accepted: false,
            reason: Some(reason.into()),
            conversation_token: None,
            max_tokens: None,
        }
    }

    /// This ack handing back the conversation's token.
    pub fn with_conversation_token(mut self, token: impl Into<String>) -> Ack {
        self.conversation_token = Some(token.into());
        self
    }

    /// This ack stating the conversation's token allowance.
    pub fn with_max_tokens(mut self, max_tokens: u64) -> Ack {
        self.max_tokens = Some(max_tokens);
        self
    }
}

/// `result`: the answer, ending the set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TurnResult {
    /// Why the run ended.
    pub stop_reason: StopReason,
    /// The final answer (the text the `final` text event carried).
    pub text: String,
    /// What the whole conversation has used (read from the journal).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The trace the run recorded; absent when the worker exports no telemetry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// Whether this turn's conversation itself reached a telemetry collector.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub content_exported: bool,
}

impl TurnResult {
    /// A result with `text`, ending for `stop_reason`.
    pub fn new(stop_reason: StopReason, text: impl Into<String>) -> TurnResult {
        TurnResult {
            stop_reason,
            text: text.into(),
            usage: None,
            trace_id: None,
            content_exported: false,
        }
    }
}

/// `error`: the set's end when the run produced no result; refusals after the ack end this way too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TurnError {
    /// How the run ended; every error has one beside its code.
    pub stop_reason: StopReason,
    /// What a person reads.
    pub error: String,
    /// What a caller branches on.
    pub code: ErrorCode,
    /// What the run spent before it ended, for an ending that ran (a suspended run needs it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The trace the run recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// Whether this turn's conversation itself reached a telemetry collector.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub content_exported: bool,
}

impl TurnError {
    /// An error with `code` and its message, its stop reason the one [`ErrorCode::stop_reason`] names.
    pub fn new(code: ErrorCode, error: impl Into<String>) -> TurnError {
        TurnError {
            stop_reason: code.stop_reason(),
            error: error.into(),
            code,
            usage: None,
            trace_id: None,
            content_exported: false,
        }
    }
}

/// What the serving agent says calling a tool does; hints it asserts, never guarantees.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ToolBehavior {
    /// The call does not modify its environment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// It may destroy or overwrite state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destructive: Option<bool>,
    /// Repeating it has no further effect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
    /// It reaches an open set of external entities.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_world: Option<bool>,
}

/// A tool the agent serves to peers, as its card lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolDescriptor {
    /// The tool's name.
    pub name: String,
    /// What it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The JSON schema of its input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Map<String, Value>>,
    /// What calling it does to the world.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub behavior: Option<ToolBehavior>,
}

/// `discovery.reply`: the agent card.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentCard {
    /// The agent's identity.
    pub name: String,
    /// The agent's version.
    pub version: String,
    /// What it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The model it answers prompts with, as configured (at most 128 characters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Protocol namespaces it speaks.
    pub protocols: Vec<String>,
    /// Tools it serves to peers; empty for an agent that serves none.
    pub tools: Vec<ToolDescriptor>,
    /// It exports traces of what it does.
    pub telemetry: bool,
    /// Those traces carry the conversation itself.
    pub telemetry_content: bool,
}

impl AgentCard {
    /// A card for `name` at `version` speaking v1, with no tools and no telemetry.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> AgentCard {
        AgentCard {
            name: name.into(),
            version: version.into(),
            description: None,
            model: None,
            protocols: vec![PROTOCOL_NAMESPACE.to_string()],
            tools: Vec::new(),
            telemetry: false,
            telemetry_content: false,
        }
    }
}

/// A message a worker sends, less its header.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Reply {
    /// `ack`.
    Ack(Ack),
    /// `event.<kind>`.
    Event(Block),
    /// `elicit.request.<kind>`.
    Question(Question),
    /// `result`.
    Result(TurnResult),
    /// `error`.
    Error(TurnError),
    /// `discovery.reply`.
    Discovery(AgentCard),
}

impl Reply {
    /// The protocol id, e.g. `io.choria.fisk-ai.v1.event.text`.
    pub fn protocol(&self) -> &'static str {
        match self {
            Reply::Ack(_) => p::ACK,
            Reply::Event(b) => b.protocol(),
            Reply::Question(q) => q.protocol(),
            Reply::Result(_) => p::RESULT,
            Reply::Error(_) => p::ERROR,
            Reply::Discovery(_) => p::DISCOVERY_REPLY,
        }
    }

    /// Whether it ends its reply set (a `result` or an `error`): the message to mark with the
    /// [`HEADER_STREAM_FINAL`](super::nats::HEADER_STREAM_FINAL) NATS header.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Reply::Result(_) | Reply::Error(_))
    }
}

/// `reply` under `header`, as the JSON bytes to publish. Text fields are sent as given: trim block text
/// with [`trim_block_text`](super::trim_block_text) first.
pub fn encode_reply(header: &Header, reply: &Reply) -> Vec<u8> {
    #[derive(Serialize)]
    struct Event<'a> {
        block: &'a Block,
    }
    let protocol = reply.protocol();
    match reply {
        Reply::Ack(a) => encode(protocol, header, a),
        Reply::Event(block) => encode(protocol, header, &Event { block }),
        Reply::Question(q) => encode(protocol, header, q),
        Reply::Result(r) => encode(protocol, header, r),
        Reply::Error(e) => encode(protocol, header, e),
        Reply::Discovery(c) => encode(protocol, header, c),
    }
}
