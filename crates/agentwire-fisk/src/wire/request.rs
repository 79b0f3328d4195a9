//! What a caller asks: the four task requests (prompt, answer, resume, read), cancel and discovery.

use super::check::{parse, Obj, Text};
use super::elicit::{ElicitChoice, QuestionKind};
use super::error::WireError;
use super::header::Header;
use super::limits::{MAX_ELICIT_VALUE_CHARS, MAX_TOKEN_CHARS, MAX_TOOL_USE_ID_CHARS};
use super::protocol::{self as p, encode, route, short};
use serde::Serialize;
use std::fmt;

/// A `conversation_token`: an id of at most 128 characters. A credential: never log or display it.
const TOKEN: Text = Text::id_max(MAX_TOKEN_CHARS);

/// What arrives on `choria.fisk-ai.task.<identity>`: one of the four requests.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TaskRequest {
    /// `request.prompt`: run a turn.
    Prompt(PromptRequest),
    /// `request.answer`: a question answered after its run ended, and the run resumed.
    Answer(AnswerRequest),
    /// `request.resume`: a run that stopped part way continued.
    Resume(ResumeRequest),
    /// `request.read`: the conversation read back, no turn taken.
    Read(ReadRequest),
}

/// A turn's token limits; a request may only lower the worker's own (a higher value is ignored).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Budget {
    /// Tokens the conversation may use in total.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Model calls the run may make.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<u64>,
    /// Per model call, as a Go duration string (e.g. `60s`); kept as sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_timeout: Option<String>,
}

fn is_true(b: &bool) -> bool {
    *b
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// `request.prompt`: the agent runs `prompt`, as a new conversation or, with a token, its next turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PromptRequest {
    /// The header.
    #[serde(skip)]
    pub header: Header,
    /// The prompt (at least one character).
    pub prompt: String,
    /// Supporting material offered alongside the prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// Tools the caller suggests.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_hints: Vec<String>,
    /// Lower limits than the worker's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// False asks for the terminal message without the event stream (absent is true).
    #[serde(skip_serializing_if = "is_true")]
    pub stream: bool,
    /// Joins the conversation the token names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conversation_token: Option<String>,
    /// Stored blocks to send before the first new event (at least 1; capped at [`REPLAY_CAP`]).
    ///
    /// [`REPLAY_CAP`]: super::REPLAY_CAP
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay: Option<u64>,
    /// Continue across a changed configuration, dropping standing approvals.
    #[serde(skip_serializing_if = "is_false")]
    pub force: bool,
}

/// `request.answer`: a question the conversation still waits on, answered after its run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AnswerRequest {
    /// The header.
    #[serde(skip)]
    pub header: Header,
    /// The conversation.
    pub conversation_token: String,
    /// The answer.
    pub answer: Answer,
    /// Lower limits than the worker's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// False asks for no event stream.
    #[serde(skip_serializing_if = "is_true")]
    pub stream: bool,
    /// Stored blocks to send first (at least 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay: Option<u64>,
    /// Continue across a changed configuration.
    #[serde(skip_serializing_if = "is_false")]
    pub force: bool,
}

/// `request.resume`: continue a run that stopped part way (after a `suspended` ending).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResumeRequest {
    /// The header.
    #[serde(skip)]
    pub header: Header,
    /// The conversation.
    pub conversation_token: String,
    /// Lower limits than the worker's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// False asks for no event stream.
    #[serde(skip_serializing_if = "is_true")]
    pub stream: bool,
    /// Continue across a changed configuration.
    #[serde(skip_serializing_if = "is_false")]
    pub force: bool,
}

/// `request.read`: send `replay` stored blocks of the conversation and end the set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReadRequest {
    /// The header.
    #[serde(skip)]
    pub header: Header,
    /// The conversation.
    pub conversation_token: String,
    /// How many blocks, counted back from the end (at least 1; capped at [`REPLAY_CAP`]).
    ///
    /// [`REPLAY_CAP`]: super::REPLAY_CAP
    pub replay: u64,
}

/// Which field of an [`Answer`] holds the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AnswerField {
    /// `choice`, for an approve question.
    Choice,
    /// `confirmed`, for a confirm question.
    Confirmed,
    /// `value`, for a select (the option's text) or an input question.
    Value,
    /// Nobody is there to answer, whatever the question.
    NoOperator,
}

impl AnswerField {
    /// Every field, in the order of [`AnswerField::WIRE`].
    const ALL: [AnswerField; 4] = [
        AnswerField::Choice,
        AnswerField::Confirmed,
        AnswerField::Value,
        AnswerField::NoOperator,
    ];
    /// The wire names (the schema's `enum`).
    const WIRE: &'static [&'static str] = &["choice", "confirmed", "value", "no_operator"];

    /// The wire name.
    pub fn as_str(&self) -> &'static str {
        Self::WIRE[*self as usize]
    }
}

impl fmt::Display for AnswerField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `answer` object of a `request.answer`: what an operator said, naming the call it is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Answer {
    /// The tool call the question named (at most 256 characters).
    pub tool_use_id: String,
    /// The kind of question that was asked.
    pub kind: QuestionKind,
    /// Which field below holds the decision.
    pub answer: AnswerField,
    /// For an approve question.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub choice: Option<ElicitChoice>,
    /// For a confirm question.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confirmed: Option<bool>,
    /// For an input question, or the chosen option's text for a select (at most 4096 characters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// The decision an [`Answer`] carries, once checked against its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decision {
    /// An approve question's choice.
    Approve(ElicitChoice),
    /// A confirm question's yes or no.
    Confirm(bool),
    /// The text of the option a select question's answer chose (an option, not a position).
    Select(String),
    /// An input question's text (empty is an answer).
    Input(String),
    /// Nobody is there to answer: fails closed, like `no`.
    NoOperator,
}

impl Answer {
    /// The decision, if the named field answers the question's kind and is present: the check the schema
    /// leaves to the worker ("a 400 means the answer does not fit its kind").
    pub fn decision(&self) -> Result<Decision, WireError> {
        let missing = |field: &str| WireError::Missing {
            pointer: format!("/answer/{field}"),
        };
        match (self.kind, self.answer) {
            (_, AnswerField::NoOperator) => Ok(Decision::NoOperator),
            (QuestionKind::Approve, AnswerField::Choice) => self
                .choice
                .map(Decision::Approve)
                .ok_or_else(|| missing("choice")),
            (QuestionKind::Confirm, AnswerField::Confirmed) => self
                .confirmed
                .map(Decision::Confirm)
                .ok_or_else(|| missing("confirmed")),
            (QuestionKind::Select, AnswerField::Value) => self
                .value
                .clone()
                .map(Decision::Select)
                .ok_or_else(|| missing("value")),
            (QuestionKind::Input, AnswerField::Value) => self
                .value
                .clone()
                .map(Decision::Input)
                .ok_or_else(|| missing("value")),
            (kind, answer) => Err(WireError::AnswerDoesNotFit { kind, answer }),
        }
    }

    fn decode(o: &Obj<'_>) -> Result<Answer, WireError> {
        Ok(Answer {
            tool_use_id: o
                .req_str("tool_use_id", Text::max(MAX_TOOL_USE_ID_CHARS))?
                .to_string(),
            kind: QuestionKind::ALL[o.req_enum("kind", QuestionKind::WIRE)?],
            answer: AnswerField::ALL[o.req_enum("answer", AnswerField::WIRE)?],
            choice: o
                .opt_enum("choice", ElicitChoice::WIRE)?
                .map(|i| ElicitChoice::ALL[i]),
            confirmed: o.opt_bool("confirmed")?,
            value: o
                .opt_str("value", Text::max(MAX_ELICIT_VALUE_CHARS))?
                .map(str::to_string),
        })
    }
}

fn budget(o: &Obj<'_>) -> Result<Option<Budget>, WireError> {
    let Some(b) = o.opt_obj("budget")? else {
        return Ok(None);
    };
    Ok(Some(Budget {
        max_tokens: b.opt_uint("max_tokens", 0)?,
        max_iterations: b.opt_uint("max_iterations", 0)?,
        call_timeout: b.opt_str("call_timeout", Text::ANY)?.map(str::to_string),
    }))
}

fn stream(o: &Obj<'_>) -> Result<bool, WireError> {
    // The schema's default: a caller that says nothing gets the event stream.
    Ok(o.opt_bool("stream")?.unwrap_or(true))
}

fn force(o: &Obj<'_>) -> Result<bool, WireError> {
    Ok(o.opt_bool("force")?.unwrap_or(false))
}

fn forbid(o: &Obj<'_>, protocol: &'static str, keys: &[&str]) -> Result<(), WireError> {
    keys.iter().try_for_each(|k| o.forbid(k, short(protocol)))
}

const TASK_IDS: [&str; 4] = [
    p::REQUEST_PROMPT,
    p::REQUEST_ANSWER,
    p::REQUEST_RESUME,
    p::REQUEST_READ,
];

/// Decodes and validates a task request: `request.prompt`, `request.answer`, `request.resume` or
/// `request.read`, against its schema. Anything else, or anything its schema refuses, is a [`WireError`].
pub fn decode_task(bytes: &[u8]) -> Result<TaskRequest, WireError> {
    let doc = parse(bytes)?;
    let o = Obj::root(&doc)?;
    let id = route(
        &o,
        &TASK_IDS,
        "a request (request.prompt, request.answer, request.resume or request.read)",
    )?;
    // Refuse a sibling kind's field first: it says the most about what went wrong.
    match id {
        p::REQUEST_PROMPT => {
            forbid(&o, id, &["answer"])?;
            Ok(TaskRequest::Prompt(PromptRequest {
                header: Header::decode(&o)?,
                prompt: o.req_str("prompt", Text::min(1))?.to_string(),
                context: o.opt_str("context", Text::ANY)?.map(str::to_string),
                tool_hints: o.opt_str_array("tool_hints")?,
                budget: budget(&o)?,
                stream: stream(&o)?,
                conversation_token: o.opt_str("conversation_token", TOKEN)?.map(str::to_string),
                replay: o.opt_uint("replay", 1)?,
                force: force(&o)?,
            }))
        }
        p::REQUEST_ANSWER => {
            forbid(&o, id, &["prompt"])?;
            Ok(TaskRequest::Answer(AnswerRequest {
                header: Header::decode(&o)?,
                conversation_token: o.req_str("conversation_token", TOKEN)?.to_string(),
                answer: Answer::decode(&o.req_obj("answer")?)?,
                budget: budget(&o)?,
                stream: stream(&o)?,
                replay: o.opt_uint("replay", 1)?,
                force: force(&o)?,
            }))
        }
        p::REQUEST_RESUME => {
            forbid(&o, id, &["prompt", "answer", "replay"])?;
            Ok(TaskRequest::Resume(ResumeRequest {
                header: Header::decode(&o)?,
                conversation_token: o.req_str("conversation_token", TOKEN)?.to_string(),
                budget: budget(&o)?,
                stream: stream(&o)?,
                force: force(&o)?,
            }))
        }
        _ => {
            forbid(&o, id, &["prompt", "answer"])?;
            Ok(TaskRequest::Read(ReadRequest {
                header: Header::decode(&o)?,
                conversation_token: o.req_str("conversation_token", TOKEN)?.to_string(),
                replay: o.req_uint("replay", 1)?,
            }))
        }
    }
}

impl TaskRequest {
    /// The header.
    pub fn header(&self) -> &Header {
        match self {
            TaskRequest::Prompt(r) => &r.header,
            TaskRequest::Answer(r) => &r.header,
            TaskRequest::Resume(r) => &r.header,
            TaskRequest::Read(r) => &r.header,
        }
    }

    /// The protocol id, e.g. `io.choria.fisk-ai.v1.request.prompt`.
    pub fn protocol(&self) -> &'static str {
        match self {
            TaskRequest::Prompt(_) => p::REQUEST_PROMPT,
            TaskRequest::Answer(_) => p::REQUEST_ANSWER,
            TaskRequest::Resume(_) => p::REQUEST_RESUME,
            TaskRequest::Read(_) => p::REQUEST_READ,
        }
    }

    /// The conversation it joins, if any (every kind but a first prompt has one).
    pub fn conversation_token(&self) -> Option<&str> {
        match self {
            TaskRequest::Prompt(r) => r.conversation_token.as_deref(),
            TaskRequest::Answer(r) => Some(&r.conversation_token),
            TaskRequest::Resume(r) => Some(&r.conversation_token),
            TaskRequest::Read(r) => Some(&r.conversation_token),
        }
    }

    /// The message as JSON bytes, as a caller sends it (unknown fields that arrived are not kept).
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            TaskRequest::Prompt(r) => encode(p::REQUEST_PROMPT, &r.header, r),
            TaskRequest::Answer(r) => encode(p::REQUEST_ANSWER, &r.header, r),
            TaskRequest::Resume(r) => encode(p::REQUEST_RESUME, &r.header, r),
            TaskRequest::Read(r) => encode(p::REQUEST_READ, &r.header, r),
        }
    }
}

/// A `cancel`, on `choria.fisk-ai.cancel.<identity>.<request>`: asks the run named by `header.request` to
/// stop where the conversation can continue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cancel {
    /// The header; `request` names the turn.
    #[serde(skip)]
    pub header: Header,
    /// Why, for people.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Cancel {
    /// The message as JSON bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        encode(p::CANCEL, &self.header, self)
    }
}

/// Decodes and validates a `cancel`.
pub fn decode_cancel(bytes: &[u8]) -> Result<Cancel, WireError> {
    let doc = parse(bytes)?;
    let o = Obj::root(&doc)?;
    route(&o, &[p::CANCEL], "a cancel")?;
    Ok(Cancel {
        header: Header::decode(&o)?,
        reason: o.opt_str("reason", Text::ANY)?.map(str::to_string),
    })
}

/// A `discovery.request`: asks the agent for its card.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DiscoveryRequest {
    /// The header.
    #[serde(skip)]
    pub header: Header,
}

impl DiscoveryRequest {
    /// The message as JSON bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        encode(p::DISCOVERY_REQUEST, &self.header, self)
    }
}

/// Decodes and validates a `discovery.request`.
pub fn decode_discovery(bytes: &[u8]) -> Result<DiscoveryRequest, WireError> {
    let doc = parse(bytes)?;
    let o = Obj::root(&doc)?;
    route(&o, &[p::DISCOVERY_REQUEST], "a discovery request")?;
    Ok(DiscoveryRequest {
        header: Header::decode(&o)?,
    })
}
