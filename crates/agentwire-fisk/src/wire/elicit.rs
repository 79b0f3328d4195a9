//! Questions a run puts to its caller (`elicit.request.*`) and what comes back on
//! `choria.fisk-ai.elicit.<identity>.<request>`: the five answers (`elicit.reply.*`) and `elicit.waiting`.

use super::check::{parse, Obj, Text};
use super::error::WireError;
use super::header::Header;
use super::limits::MAX_ELICIT_VALUE_CHARS;
use super::protocol::{self as p, encode, route, short};
use serde::Serialize;
use std::fmt;

/// The four kinds of question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum QuestionKind {
    /// Whether a confirmation-gated command may run.
    Approve,
    /// A yes or no question.
    Confirm,
    /// One of a list.
    Select,
    /// A free text value.
    Input,
}

impl QuestionKind {
    /// Every kind, in the order of [`QuestionKind::WIRE`].
    pub(crate) const ALL: [QuestionKind; 4] = [
        QuestionKind::Approve,
        QuestionKind::Confirm,
        QuestionKind::Select,
        QuestionKind::Input,
    ];
    /// The wire names (the schema's `enum`).
    pub(crate) const WIRE: &'static [&'static str] = &["approve", "confirm", "select", "input"];

    /// The wire name.
    pub fn as_str(&self) -> &'static str {
        Self::WIRE[*self as usize]
    }
}

impl fmt::Display for QuestionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The answer to an approve question. The schema closes this set, so there is no unknown value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ElicitChoice {
    /// Leave the command unrun, and tell the model the refusal is final.
    No,
    /// Run it this one time.
    Once,
    /// Stop asking about that tool for the rest of the conversation.
    Always,
}

impl ElicitChoice {
    /// Every choice, in the order of [`ElicitChoice::WIRE`].
    pub(crate) const ALL: [ElicitChoice; 3] =
        [ElicitChoice::No, ElicitChoice::Once, ElicitChoice::Always];
    /// The wire names (the schema's `enum`).
    pub(crate) const WIRE: &'static [&'static str] = &["no", "once", "always"];

    /// The wire name.
    pub fn as_str(&self) -> &'static str {
        Self::WIRE[*self as usize]
    }
}

/// An answer given while the run waits (`elicit.reply.*`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ElicitAnswer {
    /// `elicit.reply.approve`.
    Approve(ElicitChoice),
    /// `elicit.reply.confirm`; `false` is an answer.
    Confirm(bool),
    /// `elicit.reply.select`: a position in the options sent (one outside them is no choice).
    Select(u64),
    /// `elicit.reply.input`: any text of at most 4096 characters, empty included.
    Input(String),
    /// `elicit.reply.no_operator`: nobody is there; fails closed.
    NoOperator,
}

/// What an elicit message says about the question.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ElicitKind {
    /// It answers the question.
    Answer(ElicitAnswer),
    /// `elicit.waiting`: somebody is looking at it; restart its window. Not an answer.
    Waiting,
}

/// A message on the elicit subject: an answer to, or a keepalive for, question `question_id` of the turn
/// `header.request`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElicitMessage {
    /// The header.
    pub header: Header,
    /// The question.
    pub question_id: String,
    /// Answer or keepalive.
    pub kind: ElicitKind,
}

const ELICIT_IDS: [&str; 6] = [
    p::ELICIT_REPLY_APPROVE,
    p::ELICIT_REPLY_CONFIRM,
    p::ELICIT_REPLY_SELECT,
    p::ELICIT_REPLY_INPUT,
    p::ELICIT_REPLY_NO_OPERATOR,
    p::ELICIT_WAITING,
];

/// The answer fields; each message kind refuses those of its siblings (`false` in its schema).
const ANSWER_KEYS: [&str; 4] = ["choice", "confirmed", "index", "value"];

/// Decodes and validates an `elicit.reply.*` or `elicit.waiting` against its schema.
pub fn decode_elicit(bytes: &[u8]) -> Result<ElicitMessage, WireError> {
    let doc = parse(bytes)?;
    let o = Obj::root(&doc)?;
    let id = route(
        &o,
        &ELICIT_IDS,
        "an elicit reply (elicit.reply.approve, .confirm, .select, .input, .no_operator) or elicit.waiting",
    )?;
    let own = match id {
        p::ELICIT_REPLY_APPROVE => Some("choice"),
        p::ELICIT_REPLY_CONFIRM => Some("confirmed"),
        p::ELICIT_REPLY_SELECT => Some("index"),
        p::ELICIT_REPLY_INPUT => Some("value"),
        _ => None,
    };
    for key in ANSWER_KEYS.iter().filter(|k| Some(**k) != own) {
        o.forbid(key, short(id))?;
    }
    let header = Header::decode(&o)?;
    let question_id = o.req_str("question_id", Text::ID)?.to_string();
    let answer = match id {
        p::ELICIT_REPLY_APPROVE => {
            ElicitAnswer::Approve(ElicitChoice::ALL[o.req_enum("choice", ElicitChoice::WIRE)?])
        }
        p::ELICIT_REPLY_CONFIRM => ElicitAnswer::Confirm(o.req_bool("confirmed")?),
        p::ELICIT_REPLY_SELECT => ElicitAnswer::Select(o.req_uint("index", 0)?),
        p::ELICIT_REPLY_INPUT => ElicitAnswer::Input(
            o.req_str("value", Text::max(MAX_ELICIT_VALUE_CHARS))?
                .to_string(),
        ),
        p::ELICIT_REPLY_NO_OPERATOR => ElicitAnswer::NoOperator,
        _ => {
            return Ok(ElicitMessage {
                header,
                question_id,
                kind: ElicitKind::Waiting,
            })
        }
    };
    Ok(ElicitMessage {
        header,
        question_id,
        kind: ElicitKind::Answer(answer),
    })
}

impl ElicitMessage {
    /// The protocol id, e.g. `io.choria.fisk-ai.v1.elicit.reply.approve`.
    pub fn protocol(&self) -> &'static str {
        match &self.kind {
            ElicitKind::Answer(ElicitAnswer::Approve(_)) => p::ELICIT_REPLY_APPROVE,
            ElicitKind::Answer(ElicitAnswer::Confirm(_)) => p::ELICIT_REPLY_CONFIRM,
            ElicitKind::Answer(ElicitAnswer::Select(_)) => p::ELICIT_REPLY_SELECT,
            ElicitKind::Answer(ElicitAnswer::Input(_)) => p::ELICIT_REPLY_INPUT,
            ElicitKind::Answer(ElicitAnswer::NoOperator) => p::ELICIT_REPLY_NO_OPERATOR,
            ElicitKind::Waiting => p::ELICIT_WAITING,
        }
    }

    /// The message as JSON bytes, as a caller sends it.
    pub fn to_bytes(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct Body<'a> {
            question_id: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            choice: Option<ElicitChoice>,
            #[serde(skip_serializing_if = "Option::is_none")]
            confirmed: Option<bool>,
            #[serde(skip_serializing_if = "Option::is_none")]
            index: Option<u64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            value: Option<&'a str>,
        }
        let mut body = Body {
            question_id: &self.question_id,
            choice: None,
            confirmed: None,
            index: None,
            value: None,
        };
        match &self.kind {
            ElicitKind::Answer(ElicitAnswer::Approve(c)) => body.choice = Some(*c),
            ElicitKind::Answer(ElicitAnswer::Confirm(b)) => body.confirmed = Some(*b),
            ElicitKind::Answer(ElicitAnswer::Select(i)) => body.index = Some(*i),
            ElicitKind::Answer(ElicitAnswer::Input(v)) => body.value = Some(v),
            ElicitKind::Answer(ElicitAnswer::NoOperator) | ElicitKind::Waiting => {}
        }
        encode(self.protocol(), &self.header, &body)
    }
}

/// What a question asks, by kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum Ask {
    /// `elicit.request.approve`: may a gated command run?
    Approve {
        /// The command path, e.g. `stream rm`.
        command: String,
        /// The full command line to show, already sanitized.
        display: String,
        /// The tag that gated it (e.g. `ai:confirm`); absent when the gate could name none.
        #[serde(skip_serializing_if = "Option::is_none")]
        tag: Option<String>,
    },
    /// `elicit.request.confirm`: yes or no.
    Confirm {
        /// The text to put to the operator.
        question: String,
    },
    /// `elicit.request.select`: one of `options`, answered by position.
    Select {
        /// The text to put to the operator.
        question: String,
        /// The choices, in the order to show them.
        options: Vec<String>,
    },
    /// `elicit.request.input`: a free text value.
    Input {
        /// The text to put to the operator.
        question: String,
        /// The value to pre-fill, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        default: Option<String>,
    },
}

impl Ask {
    /// The kind of question.
    pub fn kind(&self) -> QuestionKind {
        match self {
            Ask::Approve { .. } => QuestionKind::Approve,
            Ask::Confirm { .. } => QuestionKind::Confirm,
            Ask::Select { .. } => QuestionKind::Select,
            Ask::Input { .. } => QuestionKind::Input,
        }
    }
}

/// A question on the reply set (`elicit.request.*`), after the ack and before the terminal message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Question {
    /// Names the question within the task; an answer echoes it (`^[a-zA-Z0-9_-]+$`, e.g. a KSUID).
    pub question_id: String,
    /// The tool call it is about (at most 256 characters): what an answer after the run ended names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_use_id: Option<String>,
    /// How long it is held open, in ms; a caller restarts the window with `elicit.waiting`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// What it asks.
    #[serde(flatten)]
    pub ask: Ask,
}

impl Question {
    /// The protocol id, e.g. `io.choria.fisk-ai.v1.elicit.request.approve`.
    pub fn protocol(&self) -> &'static str {
        match self.ask.kind() {
            QuestionKind::Approve => p::ELICIT_REQUEST_APPROVE,
            QuestionKind::Confirm => p::ELICIT_REQUEST_CONFIRM,
            QuestionKind::Select => p::ELICIT_REQUEST_SELECT,
            QuestionKind::Input => p::ELICIT_REQUEST_INPUT,
        }
    }
}
