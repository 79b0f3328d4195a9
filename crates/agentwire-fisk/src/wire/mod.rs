//! The fisk-ai v1 wire layer: message types, validating decoders and encoders; pure (no I/O, no clock).
//!
//! Which message is which travels as its `protocol` id (`io.choria.fisk-ai.v1.<name>`), and each id has a
//! JSON Schema. Inbound decoders accept exactly what that schema accepts (open schemas: unknown fields
//! are ignored; fields of a sibling kind are refused) and return a typed [`WireError`] otherwise. The
//! `time` field is kept as the string that arrived: under JSON Schema 2020-12 `format` is an annotation
//! (neither the fisk-ai worker nor the schema asserts it), and the spec calls the field advisory.
//!
//! Integers are JSON Schema integers: `1.0` is one. Every integer an inbound schema has has a minimum of
//! 0 or 1, so they are read as `u64`, and a value past `u64::MAX` (which only a float can spell) saturates
//! there. Each such field is a count or a limit for which that is the same answer (a replay is capped at
//! [`REPLAY_CAP`], a budget above the worker's own is ignored, an index past the options is no choice).

mod block;
mod check;
mod codes;
mod elicit;
mod error;
mod header;
mod ksuid;
mod limits;
pub mod nats;
mod protocol;
mod reply;
mod request;
mod time;

#[cfg(test)]
mod decode_tests;

pub use block::{
    AgentCallBlock, Block, ExecResult, PromptBlock, StatusBlock, TextBlock, ThinkingBlock,
    ToolCallBlock, ToolResultBlock, WarningBlock, PHASE_REPLAY_END, PHASE_REPLAY_START,
};
pub use codes::{ErrorCode, StopReason};
pub use elicit::{
    decode_elicit, Ask, ElicitAnswer, ElicitChoice, ElicitKind, ElicitMessage, Question,
    QuestionKind,
};
pub use error::{JsonType, WireError};
pub use header::{Header, Identity};
pub use ksuid::{Ksuid, NotAKsuid, KSUID_EPOCH};
pub use limits::{
    trim_block_text, MAX_ANSWER_BYTES, MAX_BLOCK_TEXT_BYTES, MAX_MESSAGE_BYTES, REPLAY_CAP,
};
pub use protocol::PROTOCOL_NAMESPACE;
pub use reply::{
    encode_reply, Ack, AgentCard, Reply, ToolBehavior, ToolDescriptor, TurnError, TurnResult, Usage,
};
pub use request::{
    decode_cancel, decode_discovery, decode_task, Answer, AnswerField, AnswerRequest, Budget,
    Cancel, Decision, DiscoveryRequest, PromptRequest, ReadRequest, ResumeRequest, TaskRequest,
};
pub use time::format_time;
