//! An A2A agent behind a URL, reached as its client (`kind = "a2a"`): its card read (cached for
//! [`CARD_TTL`]), each turn here one task there sent with `SendStreamingMessage` on the card's JSON-RPC
//! interface (A2A 1.0), its text streamed through as it comes, its questions (`TASK_STATE_INPUT_REQUIRED`)
//! put to a person here and answered in the same task, its end this turn's outcome.
//!
//! - A conversation here is one context there: [`context_of`] (a SHA-256 of the conversation id), the same
//!   after a restart.
//! - A cancel here (or the engine dropping the turn) is a `CancelTask` there; a stream that drops before
//!   the task ends is followed again with `SubscribeToTask`, at most [`MAX_RESUBSCRIBES`] times in a row.
//! - A turn a crash here cut off is told after the restart (`interrupted`): the tasks of its conversation's
//!   context there that have not ended (`ListTasks` filtered on the context) are cancelled (`CancelTask`).
//! - A card or endpoint that cannot be reached fails the turn at once (`model_unavailable`); a turn takes
//!   at most its `request_timeout_secs` (time waiting for a person's answer not counted), then is cancelled
//!   there.
//! - Every byte from the peer is bounded ([`MAX_CARD_BYTES`], [`MAX_SSE_EVENT_BYTES`], [`MAX_ANSWER_BYTES`])
//!   and checked before it is kept. The bearer token goes only in the JSON-RPC requests' `Authorization`
//!   header (never to the card, a log line or an error), and a text the peer wrote has it redacted.
//!
//! [`Progress`] is the pure part (a stream's events in, this turn's steps out); [`A2aRemote::run`] drives it
//! over HTTP. One file of both, as the crate keeps one file per remote kind.

use agentwire_a2a_front::wire::{self, Message, Part, Role, TaskState};
use agentwire_agents::openai::HttpClientError;
use agentwire_core::{
    redact_secrets, redact_userinfo, Answer, ApproveChoice, Asked, ConversationId, Failure,
    FailureCode, Outcome, Question, QuestionKind, QuestionOption, Refusal, StatusState, TurnEvent,
    TurnFailure, TurnResult, APPROVE_OPTIONS,
};
use agentwire_engine::{cancelled, Agent, AgentCard, TurnContext, TurnInput};
use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a remote agent's card is believed before it is read again: five minutes, as a NIP-XX agent's
/// ai.info.
pub const CARD_TTL: Duration = Duration::from_secs(300);
/// The largest card read: a card is a few KiB (its skills, interfaces and schemes); past 256 KiB it is not a
/// card, and it must not grow memory without bound.
pub const MAX_CARD_BYTES: usize = 256 * 1024;
/// The largest server-sent event (or JSON-RPC answer) read: a task event carries the whole answer so far and
/// the task's history, so room for a long answer; past it the peer is broken or hostile.
pub const MAX_SSE_EVENT_BYTES: usize = 4 * 1024 * 1024;
/// The most answer text one turn keeps (every artifact's text together): a turn's answer, not a download.
pub const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;
/// The most artifacts of one task kept apart: the remote agentwire sends one (`answer`); a few more are
/// an agent's files or sections, and past this they are joined into the last.
pub const MAX_ARTIFACTS: usize = 64;
/// The most options of a question taken (more are left out): a person reads them all.
pub const MAX_OPTIONS: usize = 64;
/// The most characters of a text the peer wrote that an error, status or question quotes.
pub const MAX_QUOTED_CHARS: usize = 2000;
/// Times in a row a dropped stream is followed again (`SubscribeToTask`) before the turn fails: a blip or
/// two of the network, not a peer that keeps hanging up.
pub const MAX_RESUBSCRIBES: u32 = 3;
/// The wait before following a dropped stream again, times the attempt: 1 + 2 + 3 s in all, time for the
/// peer's process to come back after a restart.
pub const RESUBSCRIBE_BACKOFF: Duration = Duration::from_secs(1);
/// How long a stream may stay silent before it is taken as dropped: the remote agentwire sends a comment
/// every 15 s, so four of them missed.
pub const STREAM_IDLE: Duration = Duration::from_secs(60);
/// How long connecting to the peer may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request that is not a stream (the card, `CancelTask`, `GetTask`) may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a cancel there has before this turn ends cancelled anyway.
pub const CANCEL_GRACE: Duration = Duration::from_secs(5);
/// The largest prompt sent: the remote agentwire takes request bodies of 1 MiB, and the text goes
/// JSON-escaped inside one.
pub const DEFAULT_MAX_PROMPT_BYTES: usize = 256 * 1024;
/// The model name the card offers.
pub const REMOTE_MODEL: &str = "a2a";
/// The most tasks a `ListTasks` after a restart asks for (the spec's largest page): a context there runs
/// one turn at a time, so its live tasks are a few.
pub const MAX_LISTED_TASKS: usize = 100;
/// A2A's `TaskNotCancelableError`: the task has ended.
const TASK_NOT_CANCELABLE: i64 = -32002;
/// What a secret is replaced with in a text the peer wrote.
const REDACTED: &str = "[redacted]";

/// How a remote A2A agent is reached.
#[derive(Clone)]
pub struct A2aRemoteSettings {
    /// Its agent card's URL.
    pub card_url: String,
    /// The bearer token its card asks for, when it asks for one (read from `token_env` at start).
    pub token: Option<String>,
    /// How long a turn may take there.
    pub timeout: Duration,
}

/// What this client takes from a remote agent's card.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteCard {
    /// Its name.
    pub name: String,
    /// Its JSON-RPC endpoint (A2A 1.0).
    pub rpc_url: String,
}

/// A remote A2A agent.
pub struct A2aRemote {
    name: String,
    card_url: String,
    rpc: Rpc,
    timeout: Duration,
    card: CachedCard,
}

/// The card read last, and when.
type CachedCard = Arc<Mutex<Option<(Instant, RemoteCard)>>>;

/// The HTTP client and the token: requests to one peer. No `Debug`: the token is in it.
#[derive(Clone)]
struct Rpc {
    http: Result<reqwest::Client, Arc<HttpClientError>>,
    token: Option<Arc<str>>,
}

/// The HTTP client: our own rustls (ring) config with the webpki roots, as everywhere in agentwire; no
/// whole-request timeout (a stream lasts the turn), [`CONNECT_TIMEOUT`] to connect.
fn http_client() -> Result<reqwest::Client, Arc<HttpClientError>> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| Arc::new(HttpClientError::Tls(e)))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .tls_backend_preconfigured(tls)
        .build()
        .map_err(|e| Arc::new(HttpClientError::Build(e)))
}

impl A2aRemote {
    /// The agent `name`, reached as `settings` say.
    pub fn new(name: impl Into<String>, settings: A2aRemoteSettings) -> Self {
        A2aRemote {
            name: name.into(),
            card_url: settings.card_url,
            rpc: Rpc {
                http: http_client(),
                token: settings.token.map(Arc::from),
            },
            timeout: settings.timeout,
            card: Default::default(),
        }
    }
}

/// The context a conversation is there: the same for every turn of it, after a restart too.
pub fn context_of(conversation: &ConversationId) -> String {
    format!("agentwire-{}", digest_hex(conversation.as_str()))
}

/// The first 32 hex digits of `text`'s SHA-256.
fn digest_hex(text: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    digest.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// At most [`MAX_QUOTED_CHARS`] of a text the peer wrote, control characters but newlines out.
fn quote(text: &str) -> String {
    text.chars()
        .filter(|c| *c == '\n' || !c.is_control())
        .take(MAX_QUOTED_CHARS)
        .collect()
}

fn fail(code: impl Into<FailureCode>, message: impl Into<String>) -> Outcome {
    Outcome::Failure(Failure::new(code, message))
}

/// Why an agent card cannot be used by this client ([`parse_card`]).
#[derive(Debug, thiserror::Error)]
pub enum CardError {
    /// The card is not JSON.
    #[error("the card is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    /// `capabilities.streaming` is not `true`.
    #[error("its card does not offer streaming, which this client needs")]
    NoStreaming,
    /// No `supportedInterfaces` list (an A2A 0.x card).
    #[error("the card lists no supportedInterfaces (an A2A 1.0 card does)")]
    NoInterfaces,
    /// No `JSONRPC` interface of A2A 1.x at an http(s) URL.
    #[error("the card names no JSON-RPC interface of A2A 1.0 with an http(s) URL")]
    NoJsonRpc,
}

/// Reads a card: its name, and the URL of its JSON-RPC interface of A2A 1.x. `Err` says what is wrong.
pub fn parse_card(bytes: &[u8]) -> Result<RemoteCard, CardError> {
    let card: Value = serde_json::from_slice(bytes).map_err(CardError::NotJson)?;
    let name = card
        .get("name")
        .and_then(Value::as_str)
        .map(quote)
        .unwrap_or_default();
    if card.pointer("/capabilities/streaming") != Some(&Value::Bool(true)) {
        return Err(CardError::NoStreaming);
    }
    let interfaces = card
        .get("supportedInterfaces")
        .and_then(Value::as_array)
        .ok_or(CardError::NoInterfaces)?;
    let rpc_url = interfaces
        .iter()
        .take(MAX_OPTIONS)
        .filter(|i| {
            i.get("protocolBinding")
                .and_then(Value::as_str)
                .is_some_and(|b| b.eq_ignore_ascii_case("JSONRPC"))
        })
        .filter(|i| match i.get("protocolVersion").and_then(Value::as_str) {
            None => true,
            Some(v) => v == "1" || v.starts_with("1."),
        })
        .filter_map(|i| i.get("url").and_then(Value::as_str))
        .find(|u| {
            u.parse::<reqwest::Url>()
                .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
        })
        .ok_or(CardError::NoJsonRpc)?;
    Ok(RemoteCard {
        name,
        rpc_url: rpc_url.to_string(),
    })
}

/// Why an event's data (or an answer) the peer sent is not A2A as this client reads it ([`decode`]).
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// It is not JSON.
    #[error("not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    /// A JSON-RPC response with neither `result` nor `error`.
    #[error("neither a result nor an error")]
    NoResult,
    /// A task, status or message id that is not 1 to [`wire::MAX_ID_CHARS`] visible ASCII characters.
    #[error("{field} is not 1 to {} visible ASCII characters", wire::MAX_ID_CHARS)]
    BadId {
        /// The id's field.
        field: &'static str,
    },
    /// A task without its `id`.
    #[error("task.id is missing")]
    NoTaskId,
    /// `parts` is not a list.
    #[error("parts is not a list")]
    PartsNotList,
    /// More than [`wire::MAX_PARTS`] parts.
    #[error("more than {} parts", wire::MAX_PARTS)]
    TooManyParts,
    /// A part's `text` that is not a string.
    #[error("a part's text is not a string")]
    TextNotString,
    /// An `artifactUpdate` without its `artifact`.
    #[error("artifactUpdate has no artifact")]
    NoArtifact,
    /// A `result` that is none of the `StreamResponse` kinds this client reads.
    #[error("a result that is no task, status, artifact or message")]
    UnknownResult,
}

/// A task, status or message id the peer sent: 1 to [`wire::MAX_ID_CHARS`] visible ASCII characters.
fn id_of(v: Option<&Value>, field: &'static str) -> Result<Option<String>, DecodeError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s))
            if !s.is_empty()
                && s.len() <= wire::MAX_ID_CHARS
                && s.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            Ok(Some(s.clone()))
        }
        Some(_) => Err(DecodeError::BadId { field }),
    }
}

/// A state the peer sent: A2A 1.0's name (or 0.3's lower-case one); `None` for one this version does not
/// know, which is then passed over.
fn state_of(v: Option<&Value>) -> Option<TaskState> {
    let name = v?.as_str()?;
    TaskState::parse(name).or(match name {
        "submitted" => Some(TaskState::Submitted),
        "working" => Some(TaskState::Working),
        "completed" => Some(TaskState::Completed),
        "failed" => Some(TaskState::Failed),
        "canceled" => Some(TaskState::Canceled),
        "input-required" => Some(TaskState::InputRequired),
        "rejected" => Some(TaskState::Rejected),
        "auth-required" => Some(TaskState::AuthRequired),
        _ => None,
    })
}

/// The text parts of `parts` (joined by `sep`) and its first data part. Other parts are passed over.
fn parts_of(parts: Option<&Value>, sep: &str) -> Result<(String, Option<Value>), DecodeError> {
    let Some(parts) = parts else {
        return Ok((String::new(), None));
    };
    let parts = parts.as_array().ok_or(DecodeError::PartsNotList)?;
    if parts.len() > wire::MAX_PARTS {
        return Err(DecodeError::TooManyParts);
    }
    let (mut texts, mut data) = (Vec::new(), None);
    for p in parts {
        match p.get("text") {
            Some(Value::String(t)) => texts.push(t.as_str()),
            Some(_) => return Err(DecodeError::TextNotString),
            None => {
                if data.is_none() {
                    data = p.get("data").filter(|d| d.is_object()).cloned();
                }
            }
        }
    }
    Ok((texts.join(sep), data))
}

/// A message the peer sent, as this client reads it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Said {
    /// Its id.
    pub id: Option<String>,
    /// Its text parts, joined by a newline.
    pub text: String,
    /// Its first data part (a question's options, from a remote agentwire).
    pub data: Option<Value>,
    /// The failure code in its `metadata.code` (a remote agentwire's).
    pub code: Option<String>,
}

fn said_of(v: Option<&Value>) -> Result<Option<Said>, DecodeError> {
    let Some(m) = v.filter(|m| !m.is_null()) else {
        return Ok(None);
    };
    let (text, data) = parts_of(m.get("parts"), "\n")?;
    Ok(Some(Said {
        id: id_of(m.get("messageId"), "messageId")?,
        text,
        data,
        code: m
            .pointer("/metadata/code")
            .and_then(Value::as_str)
            .filter(|c| c.len() <= wire::MAX_ID_CHARS)
            .map(str::to_string),
    }))
}

/// One event of a stream, read.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// The task as it stands: its id, context, state, status message and artifacts' text.
    Task {
        /// Its id.
        id: String,
        /// Its state, when known.
        state: Option<TaskState>,
        /// Its status message.
        said: Option<Said>,
        /// Its artifacts: id and text.
        artifacts: Vec<(String, String)>,
    },
    /// A change of the task's status.
    Status {
        /// The task.
        task: Option<String>,
        /// The state, when known.
        state: Option<TaskState>,
        /// The status message.
        said: Option<Said>,
    },
    /// A piece of an artifact.
    Artifact {
        /// The task.
        task: Option<String>,
        /// The artifact.
        id: String,
        /// Its text.
        text: String,
        /// Whether it follows what was sent of the artifact (else it replaces it).
        append: bool,
    },
    /// A message instead of a task: the agent's whole answer.
    Message(Said),
    /// A JSON-RPC error.
    Error {
        /// Its code.
        code: i64,
        /// Its message.
        message: String,
    },
}

/// Reads one event's data (a JSON-RPC response whose result is a `StreamResponse`, or a `SendMessage`
/// answer). `Err` says why it is not one.
pub fn decode(data: &str) -> Result<Incoming, DecodeError> {
    let v: Value = serde_json::from_str(data).map_err(DecodeError::NotJson)?;
    if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
        return Ok(Incoming::Error {
            code: e.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: e
                .get("message")
                .and_then(Value::as_str)
                .map(quote)
                .unwrap_or_default(),
        });
    }
    let r = v.get("result").ok_or(DecodeError::NoResult)?;
    if let Some(t) = r.get("task") {
        let id = id_of(t.get("id"), "task.id")?.ok_or(DecodeError::NoTaskId)?;
        let status = t.get("status");
        let mut artifacts = Vec::new();
        if let Some(list) = t.get("artifacts").and_then(Value::as_array) {
            for a in list.iter().take(MAX_ARTIFACTS) {
                let aid = id_of(a.get("artifactId"), "artifactId")?.unwrap_or_default();
                artifacts.push((aid, parts_of(a.get("parts"), "")?.0));
            }
        }
        return Ok(Incoming::Task {
            id,
            state: status.and_then(|s| state_of(s.get("state"))),
            said: said_of(status.and_then(|s| s.get("message")))?,
            artifacts,
        });
    }
    if let Some(s) = r.get("statusUpdate") {
        let status = s.get("status");
        return Ok(Incoming::Status {
            task: id_of(s.get("taskId"), "taskId")?,
            state: status.and_then(|st| state_of(st.get("state"))),
            said: said_of(status.and_then(|st| st.get("message")))?,
        });
    }
    if let Some(a) = r.get("artifactUpdate") {
        let art = a.get("artifact").ok_or(DecodeError::NoArtifact)?;
        return Ok(Incoming::Artifact {
            task: id_of(a.get("taskId"), "taskId")?,
            id: id_of(art.get("artifactId"), "artifactId")?.unwrap_or_default(),
            text: parts_of(art.get("parts"), "")?.0,
            append: a.get("append").and_then(Value::as_bool).unwrap_or(false),
        });
    }
    if let Some(m) = r.get("message") {
        return Ok(Incoming::Message(said_of(Some(m))?.unwrap_or_default()));
    }
    Err(DecodeError::UnknownResult)
}

/// This turn's failure for a task that ended `state` there, with the failure code its status message
/// carried (a remote agentwire's): the same meaning where there is one.
pub fn failure_of(state: TaskState, code: Option<&str>, message: &str) -> Failure {
    if state == TaskState::Canceled {
        return Failure::new(TurnFailure::Cancelled, "the task was cancelled there");
    }
    let said = match message.is_empty() {
        true => "no reason given".to_string(),
        false => message.to_string(),
    };
    let kept = |t: TurnFailure| {
        matches!(
            t,
            TurnFailure::Cancelled
                | TurnFailure::ModelUnavailable
                | TurnFailure::ProviderBusy
                | TurnFailure::ProviderRefused
                | TurnFailure::ToolError
                | TurnFailure::EmptyResponse
                | TurnFailure::UnsupportedFeature
                | TurnFailure::ContextExceeded
                | TurnFailure::AgentFailed
                | TurnFailure::Interrupted
        )
    };
    match code.map(FailureCode::parse) {
        Some(FailureCode::Turn(t)) if kept(t) => Failure::new(t, said),
        Some(FailureCode::Refused(
            Refusal::Capacity
            | Refusal::RateLimited
            | Refusal::Draining
            | Refusal::SessionLimit
            | Refusal::ConversationBusy,
        )) => Failure::new(
            TurnFailure::ProviderBusy,
            format!("the remote agent is busy: {said}"),
        ),
        Some(other) => Failure::new(
            TurnFailure::AgentFailed,
            format!("the remote agent answered {}: {said}", other.as_str()),
        ),
        None if state == TaskState::Rejected => Failure::new(
            TurnFailure::AgentFailed,
            format!("the remote agent rejected the task: {said}"),
        ),
        None => Failure::new(
            TurnFailure::AgentFailed,
            format!("the remote agent's task failed: {said}"),
        ),
    }
}

/// The question a status message asks: a remote agentwire's data part read back as the question it was
/// (an approval, a confirmation, a choice, an input); any other agent's text as an input question.
pub fn question_of(agent: &str, task: &str, said: &Said) -> Question {
    let data = said.data.as_ref();
    let field = |k: &str| data.and_then(|d| d.get(k)).and_then(Value::as_str);
    let text = field("question")
        .map(quote)
        .unwrap_or_else(|| quote(&said.text));
    let text = match text.trim().is_empty() {
        true => "The remote agent asks for input.".to_string(),
        false => text,
    };
    let options: Vec<QuestionOption> = data
        .and_then(|d| d.get("options"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .take(MAX_OPTIONS)
        .filter_map(|o| {
            let id = o.get("id")?.as_str()?;
            let label = o.get("label").and_then(Value::as_str).unwrap_or(id);
            (!id.is_empty() && id.len() <= 64).then(|| {
                QuestionOption::new(quote(id), label.chars().take(200).collect::<String>())
            })
        })
        .collect();
    let flag = |k: &str| data.and_then(|d| d.get(k)).and_then(Value::as_bool) == Some(true);
    let kind = match field("kind") {
        Some("approve") => {
            let display = text
                .strip_prefix("May I run `")
                .and_then(|t| t.strip_suffix("`?"))
                .unwrap_or(&text)
                .to_string();
            QuestionKind::Approve {
                command: display
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_string(),
                display,
                tag: None,
            }
        }
        Some("confirm") => QuestionKind::Confirm { question: text },
        Some("select") if options.len() >= 2 => QuestionKind::Select {
            question: text,
            options,
            multiple: flag("multiple"),
            freeform: flag("freeform"),
        },
        _ => QuestionKind::Input {
            question: text,
            default: field("default").map(quote),
        },
    };
    let call = field("questionId")
        .filter(|q| q.len() <= wire::MAX_ID_CHARS)
        .map(str::to_string)
        .or_else(|| said.id.clone())
        .unwrap_or_else(|| format!("{task}-question"));
    Question::new(agent, call, kind)
}

/// Why an answer here is none to send there ([`answer_text`]).
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    /// Nobody here can answer, and the question is neither an approval nor a confirmation (whose no
    /// would be sent).
    #[error("nobody here can answer the remote agent's question")]
    NoOperator,
}

/// The text that answers a question of `kind` there: an option's id (ids joined by `, `), or the text.
/// `Err`: the answer is none to send (nobody can answer but an approval or a confirmation, which is no).
pub fn answer_text(kind: &QuestionKind, answer: &Answer) -> Result<String, AnswerError> {
    Ok(match answer {
        Answer::Approve { choice } => APPROVE_OPTIONS
            .iter()
            .find(|o| o.2 == *choice)
            .map(|o| o.0.to_string())
            .unwrap_or_else(|| "deny".into()),
        Answer::Confirm { confirmed } => if *confirmed { "yes" } else { "no" }.into(),
        Answer::Select { value } => value.clone(),
        Answer::Choices { choices, text } => match (choices.is_empty(), text) {
            (true, Some(t)) => t.clone(),
            _ => choices.join(", "),
        },
        Answer::Input { value } => value.clone(),
        Answer::NoOperator => match kind {
            QuestionKind::Approve { .. } => APPROVE_OPTIONS
                .iter()
                .find(|o| o.2 == ApproveChoice::No)
                .map(|o| o.0.to_string())
                .unwrap_or_else(|| "deny".into()),
            QuestionKind::Confirm { .. } => "no".into(),
            _ => return Err(AnswerError::NoOperator),
        },
    })
}

/// What the driver does next for an event.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Send this event of the turn.
    Emit(TurnEvent),
    /// Put this question to a person; its answer goes back to the task (the key names the question).
    Ask(String, Question),
    /// The turn is over.
    End(Outcome),
}

/// A turn's task there as its events make it. Pure: events in, [`Step`]s out.
#[derive(Debug, Clone)]
pub struct Progress {
    agent: String,
    task: Option<String>,
    artifacts: Vec<(String, String)>,
    bytes: usize,
    last_status: Option<String>,
    last_said: String,
    answered: Option<String>,
    /// The task ended there (a terminal state seen, or a message instead of a task).
    ended: bool,
}

impl Progress {
    /// A task not yet named, of agent `agent` here.
    pub fn new(agent: &str) -> Progress {
        Progress {
            agent: agent.to_string(),
            task: None,
            artifacts: Vec::new(),
            bytes: 0,
            last_status: None,
            last_said: String::new(),
            answered: None,
            ended: false,
        }
    }

    /// The task's id, once the peer has named it.
    pub fn task(&self) -> Option<&str> {
        self.task.as_deref()
    }

    /// Whether the task has ended there: a turn that ends here before it did cancels it there.
    pub fn ended_there(&self) -> bool {
        self.ended
    }

    /// The question named `key` has been answered: the same question seen again is not asked again.
    pub fn answered(&mut self, key: String) {
        self.answered = Some(key);
    }

    /// The answer: every artifact's text, else the last status message's.
    fn answer(&self) -> String {
        let text: String = self.artifacts.iter().map(|(_, t)| t.as_str()).collect();
        match text.is_empty() {
            true => self.last_said.clone(),
            false => text,
        }
    }

    /// Adds `text` to artifact `id` (`append`) or puts it in its place; the delta streamed, if any.
    fn artifact(
        &mut self,
        id: &str,
        text: &str,
        append: bool,
    ) -> Result<Option<String>, Box<Outcome>> {
        let i = match self.artifacts.iter().position(|(a, _)| a == id) {
            Some(i) => i,
            None if self.artifacts.len() < MAX_ARTIFACTS => {
                self.artifacts.push((id.to_string(), String::new()));
                self.artifacts.len() - 1
            }
            None => self.artifacts.len() - 1,
        };
        let had = self.artifacts[i].1.len();
        let grows = if append {
            text.len()
        } else {
            text.len().saturating_sub(had)
        };
        if self.bytes + grows > MAX_ANSWER_BYTES {
            return Err(Box::new(fail(
                TurnFailure::AgentFailed,
                format!("the remote agent's answer is over {MAX_ANSWER_BYTES} bytes"),
            )));
        }
        let slot = &mut self.artifacts[i].1;
        let delta = if append || slot.is_empty() {
            slot.push_str(text);
            Some(text.to_string())
        } else if let Some(rest) = text.strip_prefix(slot.as_str()) {
            // The whole artifact again, with more: the more is new.
            let rest = rest.to_string();
            slot.push_str(&rest);
            Some(rest)
        } else {
            // A replacement: what was streamed was progress; the outcome has the answer.
            *slot = text.to_string();
            None
        };
        self.bytes = self.artifacts.iter().map(|(_, t)| t.len()).sum();
        Ok(delta.filter(|d| !d.is_empty()))
    }

    /// Whether an event about `task` is about this turn's task (naming it if it was not yet named).
    fn ours(&mut self, task: Option<&String>) -> bool {
        match (task, &self.task) {
            (Some(t), Some(mine)) => t == mine,
            (Some(t), None) => {
                self.task = Some(t.clone());
                true
            }
            (None, _) => true,
        }
    }

    /// The steps for one event.
    pub fn handle(&mut self, ev: Incoming) -> Vec<Step> {
        let mut out = Vec::new();
        match ev {
            Incoming::Error { code, message } => out.push(Step::End(rpc_failure(code, &message))),
            Incoming::Message(said) => {
                self.ended = true;
                out.push(Step::End(Outcome::Result(TurnResult {
                    text: said.text,
                    usage: Default::default(),
                    stop_reason: "stop".into(),
                })));
            }
            Incoming::Artifact {
                task,
                id,
                text,
                append,
            } => {
                if !self.ours(task.as_ref()) {
                    return out;
                }
                match self.artifact(&id, &text, append) {
                    Ok(Some(text)) => out.push(Step::Emit(TurnEvent::Text { text })),
                    Ok(None) => {}
                    Err(o) => out.push(Step::End(*o)),
                }
            }
            Incoming::Task {
                id,
                state,
                said,
                artifacts,
            } => {
                if !self.ours(Some(&id)) {
                    return out;
                }
                // The task as it stands: what was streamed and missed (a stream followed again) is new;
                // an artifact unlike what was streamed replaces it.
                for (aid, text) in artifacts {
                    match self.artifact(&aid, &text, false) {
                        Ok(Some(text)) => out.push(Step::Emit(TurnEvent::Text { text })),
                        Ok(None) => {}
                        Err(o) => {
                            out.push(Step::End(*o));
                            return out;
                        }
                    }
                }
                out.extend(self.status(state, said));
            }
            Incoming::Status { task, state, said } => {
                if self.ours(task.as_ref()) {
                    out.extend(self.status(state, said));
                }
            }
        }
        out
    }

    fn status(&mut self, state: Option<TaskState>, said: Option<Said>) -> Vec<Step> {
        let Some(state) = state else {
            return Vec::new();
        };
        let said = said.unwrap_or_default();
        let key = said
            .id
            .clone()
            .unwrap_or_else(|| format!("text:{}", digest_hex(&said.text)));
        if !said.text.is_empty() {
            self.last_said = redact_secrets(&quote(&said.text), &[], REDACTED);
        }
        match state {
            TaskState::Submitted | TaskState::Working => {
                if said.text.is_empty() || self.last_status.as_ref() == Some(&key) {
                    return Vec::new();
                }
                self.last_status = Some(key);
                vec![Step::Emit(TurnEvent::Status {
                    state: StatusState::Thinking,
                    progress: None,
                    info: Some(quote(&said.text)),
                    usage: None,
                })]
            }
            TaskState::InputRequired => {
                if self.answered.as_ref() == Some(&key) {
                    return Vec::new();
                }
                let task = self.task.clone().unwrap_or_default();
                vec![Step::Ask(key, question_of(&self.agent, &task, &said))]
            }
            TaskState::AuthRequired => vec![Step::End(fail(
                TurnFailure::ProviderRefused,
                "the remote agent asks for an authentication this daemon cannot give",
            ))],
            TaskState::Completed => {
                self.ended = true;
                vec![Step::End(Outcome::Result(TurnResult {
                    text: self.answer(),
                    usage: Default::default(),
                    stop_reason: "stop".into(),
                }))]
            }
            TaskState::Failed | TaskState::Rejected | TaskState::Canceled => {
                self.ended = true;
                vec![Step::End(Outcome::Failure(failure_of(
                    state,
                    said.code.as_deref(),
                    &quote(&said.text),
                )))]
            }
        }
    }
}

/// This turn's failure for a JSON-RPC error the peer answered.
fn rpc_failure(code: i64, message: &str) -> Outcome {
    let code_of = match code {
        // Content type, version, push notifications, unsupported operation: what this client asks for is
        // not offered there.
        -32005 | -32009 | -32003 | -32004 => TurnFailure::UnsupportedFeature,
        _ => TurnFailure::AgentFailed,
    };
    fail(
        code_of,
        format!("the remote agent answered error {code}: {message}"),
    )
}

/// Why a stream of server-sent events cannot be read on ([`SseFramer::push`]).
#[derive(Debug, thiserror::Error)]
pub enum SseError {
    /// One event is over [`MAX_SSE_EVENT_BYTES`].
    #[error("the remote agent sent an event of more than {MAX_SSE_EVENT_BYTES} bytes")]
    TooLarge,
}

/// Splits a byte stream into its server-sent events' data (`data:` lines joined by newlines; comments
/// and other fields skipped; lines end with `\n` or `\r\n`). Pure.
#[derive(Debug, Default)]
pub struct SseFramer {
    line: Vec<u8>,
    data: Option<String>,
    held: usize,
}

impl SseFramer {
    /// Takes the next bytes; the data of every event they complete, in order. `Err` when one event is over
    /// [`MAX_SSE_EVENT_BYTES`].
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<String>, SseError> {
        let mut events = Vec::new();
        for part in bytes.split_inclusive(|b| *b == b'\n') {
            let (body, ends) = match part.strip_suffix(b"\n") {
                Some(body) => (body, true),
                None => (part, false),
            };
            self.held += body.len();
            if self.held > MAX_SSE_EVENT_BYTES {
                return Err(SseError::TooLarge);
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
}

/// Why a request to the peer did not give a stream. Its text is what went wrong, for a log line.
#[derive(Debug, thiserror::Error)]
enum Trouble {
    /// Nothing answered (connection refused, DNS, TLS, a timeout).
    #[error("the remote agent cannot be reached: {0}")]
    Unreachable(String),
    /// The peer answered an HTTP status that is no answer.
    #[error("the remote agent answered HTTP {0}")]
    Status(u16),
    /// What it sent is not A2A.
    #[error("the remote agent sent what is not A2A: {0}")]
    Bad(String),
}

impl Trouble {
    fn outcome(self) -> Outcome {
        match self {
            Trouble::Unreachable(e) => fail(
                TurnFailure::ModelUnavailable,
                format!("the remote agent cannot be reached: {e}"),
            ),
            Trouble::Status(s @ (401 | 403)) => fail(
                TurnFailure::ProviderRefused,
                format!("the remote agent refused this daemon's credentials (HTTP {s}): set token_env to a token it takes"),
            ),
            Trouble::Status(429) => fail(
                TurnFailure::ProviderBusy,
                "the remote agent is busy (HTTP 429)",
            ),
            Trouble::Status(s) => fail(
                TurnFailure::ModelUnavailable,
                format!("the remote agent answered HTTP {s}"),
            ),
            Trouble::Bad(e) => fail(
                TurnFailure::AgentFailed,
                format!("the remote agent sent what is not A2A: {e}"),
            ),
        }
    }
}

fn unreachable(e: reqwest::Error) -> Trouble {
    Trouble::Unreachable(said_by(e))
}

/// An HTTP error as people read it: its kind and its causes ("connection refused"), without the URL (a
/// query of the operator's could hold a secret).
fn said_by(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(&e);
    // A cause's chain is a few links; the bound keeps a strange one short.
    for _ in 0..8 {
        let Some(c) = cause else { break };
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    quote(&text)
}

/// A response's events: a stream's as they come, or a JSON answer as its one event.
struct Events {
    resp: Option<reqwest::Response>,
    framer: SseFramer,
    ready: VecDeque<String>,
}

impl Events {
    /// The next event's data; `Ok(None)` when the stream ended; `Err(false)` when it dropped (an error, or
    /// silent for [`STREAM_IDLE`]), `Err(true)` with the reason when an event is too large.
    async fn next(&mut self) -> Result<Option<String>, (bool, String)> {
        loop {
            if let Some(d) = self.ready.pop_front() {
                return Ok(Some(d));
            }
            let Some(resp) = self.resp.as_mut() else {
                return Ok(None);
            };
            match tokio::time::timeout(STREAM_IDLE, resp.chunk()).await {
                Ok(Ok(Some(bytes))) => {
                    let events = self
                        .framer
                        .push(&bytes)
                        .map_err(|e| (true, e.to_string()))?;
                    self.ready.extend(events);
                }
                Ok(Ok(None)) => {
                    self.resp = None;
                    self.ready
                        .extend(self.framer.push(b"\n\n").unwrap_or_default());
                }
                Ok(Err(e)) => return Err((false, said_by(e))),
                Err(_) => return Err((false, format!("silent for {} s", STREAM_IDLE.as_secs()))),
            }
        }
    }
}

/// At most `max` bytes of `resp`'s body.
async fn body_of(resp: &mut reqwest::Response, max: usize) -> Result<Vec<u8>, Trouble> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(unreachable)? {
        if body.len() + chunk.len() > max {
            return Err(Trouble::Bad(format!("an answer of more than {max} bytes")));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

impl Rpc {
    fn http(&self) -> Result<&reqwest::Client, Trouble> {
        self.http
            .as_ref()
            .map_err(|e| Trouble::Unreachable(e.to_string()))
    }

    /// Reads the card at `url` (no token: a card is public).
    async fn card(&self, url: &str) -> Result<RemoteCard, Trouble> {
        let req = self
            .http()?
            .get(url)
            .header("A2A-Version", wire::PROTOCOL_VERSION);
        let mut resp = tokio::time::timeout(REQUEST_TIMEOUT, req.send())
            .await
            .map_err(|_| Trouble::Unreachable("no answer in time".into()))?
            .map_err(unreachable)?;
        if !resp.status().is_success() {
            return Err(Trouble::Status(resp.status().as_u16()));
        }
        let body = tokio::time::timeout(REQUEST_TIMEOUT, body_of(&mut resp, MAX_CARD_BYTES))
            .await
            .map_err(|_| Trouble::Unreachable("the card did not arrive in time".into()))??;
        parse_card(&body).map_err(|e| Trouble::Bad(e.to_string()))
    }

    /// Calls `method` with `params` at `url`: its events (a stream's, or the JSON answer as one).
    async fn call(&self, url: &str, method: &str, params: Value) -> Result<Events, Trouble> {
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
        let mut req = self
            .http()?
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "text/event-stream, application/json")
            .header("A2A-Version", wire::PROTOCOL_VERSION)
            .body(body.to_string());
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let mut resp = tokio::time::timeout(REQUEST_TIMEOUT, req.send())
            .await
            .map_err(|_| Trouble::Unreachable("no answer in time".into()))?
            .map_err(unreachable)?;
        let status = resp.status().as_u16();
        if !resp.status().is_success() {
            return Err(Trouble::Status(status));
        }
        let sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.to_ascii_lowercase().starts_with("text/event-stream"));
        if sse {
            return Ok(Events {
                resp: Some(resp),
                framer: SseFramer::default(),
                ready: VecDeque::new(),
            });
        }
        let body = tokio::time::timeout(REQUEST_TIMEOUT, body_of(&mut resp, MAX_SSE_EVENT_BYTES))
            .await
            .map_err(|_| Trouble::Unreachable("the answer did not arrive in time".into()))??;
        Ok(Events {
            resp: None,
            framer: SseFramer::default(),
            ready: VecDeque::from([String::from_utf8_lossy(&body).into_owned()]),
        })
    }

    /// `CancelTask` for `task`, within [`CANCEL_GRACE`]; what it answers is not needed.
    async fn cancel(&self, url: &str, task: &str) {
        let call = async {
            if let Ok(mut ev) = self.call(url, "CancelTask", json!({ "id": task })).await {
                let _ = ev.next().await;
            }
        };
        if tokio::time::timeout(CANCEL_GRACE, call).await.is_err() {
            tracing::info!("a remote A2A task's cancel was not answered in time");
        }
    }
}

/// Sends the task a `CancelTask` when the engine stops waiting for it (its turn cancelled, its future
/// dropped) before it ended.
struct CancelOnDrop(Option<(Rpc, String, String)>);

impl CancelOnDrop {
    /// Cancels the task there now, in a task of its own: it is sent even when the engine drops this turn
    /// (as it does on a cancel) while it waits for the answer, at most [`CANCEL_GRACE`].
    async fn cancel_now(&mut self) {
        if let Some((rpc, url, task)) = self.0.take() {
            let _ = tokio::spawn(async move { rpc.cancel(&url, &task).await }).await;
        }
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some((rpc, url, task)) = self.0.take() {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move { rpc.cancel(&url, &task).await });
            }
        }
    }
}

/// A user message of `text` in `context` (and in `task`, for an answer), its id made from `seed`.
fn user_message(seed: &str, text: &str, context: &str, task: Option<&str>) -> Value {
    let m = Message {
        message_id: format!("m-{}", digest_hex(seed)),
        context_id: Some(context.to_string()),
        task_id: task.map(str::to_string),
        role: Role::User,
        parts: vec![Part::text(text)],
        metadata: None,
    };
    json!({
        "message": m,
        "configuration": { "acceptedOutputModes": ["text/plain"] },
    })
}

/// The remote agent's card: the one read last while it is fresh ([`CARD_TTL`]), else read again (and kept).
async fn card_of(rpc: &Rpc, url: &str, cached: &CachedCard) -> Result<RemoteCard, Trouble> {
    let fresh = cached
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .filter(|(at, _)| at.elapsed() < CARD_TTL)
        .map(|(_, c)| c);
    if let Some(c) = fresh {
        return Ok(c);
    }
    let c = rpc.card(url).await?;
    // The token goes where the card says the endpoint is: only to the card's own origin, so a card (or a
    // card swapped on its way over plain http) cannot send it to another host.
    if rpc.token.is_some() && !same_origin(url, &c.rpc_url) {
        return Err(Trouble::Bad(format!(
            "its card puts its JSON-RPC endpoint on another origin ({}) than the card's; the token is not sent there",
            origin_shown(&c.rpc_url)
        )));
    }
    *cached.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), c.clone()));
    Ok(c)
}

/// Whether URLs `a` and `b` have one origin (scheme, host, port).
fn same_origin(a: &str, b: &str) -> bool {
    match (a.parse::<reqwest::Url>(), b.parse::<reqwest::Url>()) {
        (Ok(a), Ok(b)) => a.origin() == b.origin(),
        _ => false,
    }
}

/// The origin of `url` for a message: scheme, host and port, nothing that could hold a secret.
fn origin_shown(url: &str) -> String {
    url.parse::<reqwest::Url>()
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_else(|_| "not a URL".into())
}

/// Why a `ListTasks` or `CancelTask` answer cannot be read ([`live_tasks_of`]).
#[derive(Debug, thiserror::Error)]
pub enum TaskAnswerError {
    /// It is not JSON.
    #[error("not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    /// The peer answered a JSON-RPC error.
    #[error("{method} failed ({code}): {message}")]
    Failed {
        /// The method called.
        method: &'static str,
        /// The error's code.
        code: i64,
        /// The error's message, quoted.
        message: String,
    },
    /// A `ListTasks` result without its `tasks`.
    #[error("a ListTasks answer without its tasks")]
    NoTasks,
    /// A `CancelTask` result that is no task.
    #[error("a CancelTask answer that is no task")]
    NotATask,
    /// A task whose id is not one.
    #[error("{0}")]
    BadId(#[from] DecodeError),
}

/// The tasks a `ListTasks` answer (`data`) lists in `context` that have not ended: submitted, working, or
/// waiting for an answer. A task of another context (a peer that does not filter) is passed over; `Err`
/// says why the answer cannot be read.
pub fn live_tasks_of(data: &str, context: &str) -> Result<Vec<String>, TaskAnswerError> {
    let v: Value = serde_json::from_str(data).map_err(TaskAnswerError::NotJson)?;
    if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
        let message = e.get("message").and_then(Value::as_str).unwrap_or("");
        let code = e.get("code").and_then(Value::as_i64).unwrap_or(0);
        return Err(TaskAnswerError::Failed {
            method: "ListTasks",
            code,
            message: quote(message),
        });
    }
    let tasks = v
        .pointer("/result/tasks")
        .and_then(Value::as_array)
        .ok_or(TaskAnswerError::NoTasks)?;
    let mut live = Vec::new();
    for t in tasks.iter().take(MAX_LISTED_TASKS) {
        if t.get("contextId").and_then(Value::as_str) != Some(context) {
            continue;
        }
        let Some(state) = state_of(t.pointer("/status/state")) else {
            continue;
        };
        if state.is_terminal() {
            continue;
        }
        if let Some(id) = id_of(t.get("id"), "task.id")? {
            live.push(id);
        }
    }
    Ok(live)
}

/// What a `CancelTask` answer (`data`, a JSON-RPC response whose result is the task) says of the cancel.
fn cancel_answer(data: &str) -> Result<Cancelled, TaskAnswerError> {
    let v: Value = serde_json::from_str(data).map_err(TaskAnswerError::NotJson)?;
    if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
        let code = e.get("code").and_then(Value::as_i64).unwrap_or(0);
        if code == TASK_NOT_CANCELABLE {
            return Ok(Cancelled::Ended);
        }
        let message = e.get("message").and_then(Value::as_str).unwrap_or("");
        return Err(TaskAnswerError::Failed {
            method: "CancelTask",
            code,
            message: quote(message),
        });
    }
    match v.get("result") {
        Some(t) if t.is_object() => Ok(Cancelled::Yes),
        _ => Err(TaskAnswerError::NotATask),
    }
}

/// What a cancel of a turn a crash cut off did to one task there.
#[derive(Debug, PartialEq)]
enum Cancelled {
    /// The task was cancelled.
    Yes,
    /// It had ended meanwhile (`TaskNotCancelableError`).
    Ended,
}

/// Why a `ListTasks` or `CancelTask` call (for a turn a crash cut off) gave no answer to act on.
#[derive(Debug, thiserror::Error)]
enum TaskCallError {
    /// The call gave no stream.
    #[error("{0}")]
    Call(#[source] Trouble),
    /// The stream ended before its answer.
    #[error("{method} was answered with nothing")]
    Nothing {
        /// The method called.
        method: &'static str,
    },
    /// The stream dropped: why.
    #[error("{0}")]
    Dropped(String),
    /// No answer within [`REQUEST_TIMEOUT`].
    #[error("{method} was not answered in time")]
    NotInTime {
        /// The method called.
        method: &'static str,
    },
    /// The answer cannot be read.
    #[error("{0}")]
    Answer(#[from] TaskAnswerError),
}

impl Rpc {
    /// The tasks of `context` at `url` that have not ended (the first page of `ListTasks`, newest first: a
    /// context runs one turn at a time, so there are a few at most).
    async fn live_tasks(&self, url: &str, context: &str) -> Result<Vec<String>, TaskCallError> {
        const METHOD: &str = "ListTasks";
        let params = json!({ "contextId": context, "pageSize": MAX_LISTED_TASKS });
        let listed = async {
            let mut ev = self
                .call(url, METHOD, params)
                .await
                .map_err(TaskCallError::Call)?;
            match ev.next().await {
                Ok(Some(data)) => Ok(live_tasks_of(&data, context)?),
                Ok(None) => Err(TaskCallError::Nothing { method: METHOD }),
                Err((_, e)) => Err(TaskCallError::Dropped(e)),
            }
        };
        tokio::time::timeout(REQUEST_TIMEOUT, listed)
            .await
            .unwrap_or(Err(TaskCallError::NotInTime { method: METHOD }))
    }

    /// `CancelTask` for `task`, its answer read (within [`REQUEST_TIMEOUT`]).
    async fn cancel_checked(&self, url: &str, task: &str) -> Result<Cancelled, TaskCallError> {
        const METHOD: &str = "CancelTask";
        let call = async {
            let mut ev = self
                .call(url, METHOD, json!({ "id": task }))
                .await
                .map_err(TaskCallError::Call)?;
            let data = match ev.next().await {
                Ok(Some(d)) => d,
                Ok(None) => return Err(TaskCallError::Nothing { method: METHOD }),
                Err((_, e)) => return Err(TaskCallError::Dropped(e)),
            };
            Ok(cancel_answer(&data)?)
        };
        tokio::time::timeout(REQUEST_TIMEOUT, call)
            .await
            .unwrap_or(Err(TaskCallError::NotInTime { method: METHOD }))
    }
}

impl Agent for A2aRemote {
    fn interrupted(&self, turn: &TurnInput) -> BoxFuture<'static, ()> {
        let (name, card_url, rpc, cached) = (
            self.name.clone(),
            self.card_url.clone(),
            self.rpc.clone(),
            self.card.clone(),
        );
        let (context, request) = (context_of(&turn.conversation_id), turn.request_id.clone());
        Box::pin(async move {
            let secrets: Vec<String> = rpc.token.iter().map(|t| t.to_string()).collect();
            let clean = |why: String| {
                let s: Vec<&str> = secrets.iter().map(String::as_str).collect();
                redact_secrets(&why, &s, REDACTED)
            };
            let tasks = match card_of(&rpc, &card_url, &cached).await {
                Ok(card) => rpc
                    .live_tasks(&card.rpc_url, &context)
                    .await
                    .map(|tasks| (card, tasks)),
                Err(t) => Err(TaskCallError::Call(t)),
            };
            let (card, tasks) = match tasks {
                Ok(t) => t,
                Err(why) => {
                    let why = clean(why.to_string());
                    tracing::warn!(agent = %name, %request, %why, "could not cancel the remote A2A task of a turn a crash cut off");
                    return;
                }
            };
            if tasks.is_empty() {
                tracing::debug!(agent = %name, %request, "no remote A2A task of a turn a crash cut off was still running");
            }
            for task in tasks {
                match rpc.cancel_checked(&card.rpc_url, &task).await {
                    Ok(Cancelled::Yes) => {
                        tracing::info!(agent = %name, %request, %task, "cancelled the remote A2A task of a turn a crash cut off")
                    }
                    Ok(Cancelled::Ended) => {
                        tracing::debug!(agent = %name, %request, %task, "the remote A2A task of a turn a crash cut off had ended")
                    }
                    Err(why) => {
                        let why = clean(why.to_string());
                        tracing::warn!(agent = %name, %request, %task, %why, "could not cancel the remote A2A task of a turn a crash cut off")
                    }
                }
            }
        })
    }

    fn card(&self) -> AgentCard {
        let remote = self
            .card
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .map(|(_, c)| c.name)
            .filter(|n| !n.is_empty());
        let url = redact_userinfo(&self.card_url, REDACTED);
        AgentCard {
            name: self.name.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: match remote {
                Some(n) => format!("the A2A agent {n} at {url}"),
                None => format!("the A2A agent at {url}"),
            },
            models: vec![REMOTE_MODEL.into()],
            default_model: REMOTE_MODEL.into(),
            tools: vec![],
            max_prompt_bytes: DEFAULT_MAX_PROMPT_BYTES,
            max_context_tokens: 0,
        }
    }

    fn run(&self, input: TurnInput, ctx: TurnContext) -> BoxFuture<'static, Outcome> {
        let (name, card_url, rpc, timeout, cached) = (
            self.name.clone(),
            self.card_url.clone(),
            self.rpc.clone(),
            self.timeout,
            self.card.clone(),
        );
        Box::pin(async move {
            let card = match card_of(&rpc, &card_url, &cached).await {
                Ok(c) => c,
                Err(Trouble::Bad(e)) => {
                    return fail(
                        TurnFailure::ModelUnavailable,
                        format!("the remote agent's card cannot be used: {e}"),
                    )
                }
                Err(t) => return t.outcome(),
            };
            let secrets: Vec<String> = rpc.token.iter().map(|t| t.to_string()).collect();
            let clean = |o: Outcome| match o {
                Outcome::Failure(mut f) => {
                    let s: Vec<&str> = secrets.iter().map(String::as_str).collect();
                    f.message = redact_secrets(&f.message, &s, REDACTED);
                    Outcome::Failure(f)
                }
                r => r,
            };
            let outcome = drive(&name, &card.rpc_url, &rpc, timeout, input, ctx).await;
            clean(outcome)
        })
    }
}

/// One turn as one task there, from its first message to its end.
async fn drive(
    name: &str,
    url: &str,
    rpc: &Rpc,
    timeout: Duration,
    input: TurnInput,
    ctx: TurnContext,
) -> Outcome {
    let context = context_of(&input.conversation_id);
    let seed = input.request_id.as_str().to_string();
    let first = user_message(&seed, &input.message, &context, None);
    let mut events = match rpc.call(url, "SendStreamingMessage", first).await {
        Ok(e) => e,
        Err(t) => return t.outcome(),
    };
    let mut progress = Progress::new(name);
    let mut guard = CancelOnDrop(None);
    let mut deadline = tokio::time::Instant::now() + timeout;
    let mut cancel = ctx.cancel.clone();
    let (mut resubscribes, mut answers) = (0u32, 0u64);
    loop {
        let next = tokio::select! {
            biased;
            _ = cancelled(&mut cancel) => {
                guard.cancel_now().await;
                return fail(TurnFailure::Cancelled, "cancelled");
            }
            _ = tokio::time::sleep_until(deadline) => {
                guard.cancel_now().await;
                return fail(
                    TurnFailure::ModelUnavailable,
                    format!("the remote agent did not answer within {} s", timeout.as_secs()),
                );
            }
            n = events.next() => n,
        };
        let data = match next {
            Ok(Some(d)) => d,
            Err((true, e)) => {
                guard.cancel_now().await;
                return fail(TurnFailure::AgentFailed, e);
            }
            Ok(None) | Err((false, _)) => {
                // The stream ended (or dropped) before the task did: followed again, a few times.
                let Some(task) = progress.task().map(str::to_string) else {
                    return fail(
                        TurnFailure::ModelUnavailable,
                        "the remote agent's stream ended before it named its task",
                    );
                };
                if resubscribes >= MAX_RESUBSCRIBES {
                    guard.cancel_now().await;
                    return fail(
                        TurnFailure::ModelUnavailable,
                        format!(
                            "the remote agent's stream dropped {MAX_RESUBSCRIBES} times in a row"
                        ),
                    );
                }
                resubscribes += 1;
                tokio::time::sleep(RESUBSCRIBE_BACKOFF * resubscribes).await;
                events = match rpc
                    .call(url, "SubscribeToTask", json!({ "id": task }))
                    .await
                {
                    Ok(e) => e,
                    Err(Trouble::Bad(_)) | Err(Trouble::Status(_)) => continue,
                    Err(Trouble::Unreachable(_)) => continue,
                };
                // A task that ended meanwhile cannot be subscribed to: it is read instead.
                if let Some(first) = events.ready.front() {
                    if matches!(decode(first), Ok(Incoming::Error { .. })) {
                        events = match rpc.call(url, "GetTask", json!({ "id": task })).await {
                            Ok(mut e) => {
                                let wrapped = e.ready.pop_front().and_then(|d| {
                                    let v: Value = serde_json::from_str(&d).ok()?;
                                    match v.get("result") {
                                        Some(t) => Some(json!({"result": {"task": t}}).to_string()),
                                        None => Some(d),
                                    }
                                });
                                e.ready = wrapped.into_iter().collect();
                                e
                            }
                            Err(_) => continue,
                        };
                    }
                }
                continue;
            }
        };
        let ev = match decode(&data) {
            Ok(ev) => ev,
            Err(e) => {
                guard.cancel_now().await;
                return fail(
                    TurnFailure::AgentFailed,
                    format!("the remote agent sent what is not A2A: {e}"),
                );
            }
        };
        resubscribes = 0;
        let steps = progress.handle(ev);
        if guard.0.is_none() {
            if let Some(t) = progress.task() {
                guard.0 = Some((rpc.clone(), url.to_string(), t.to_string()));
            }
        }
        for step in steps {
            match step {
                Step::Emit(e) => {
                    let _ = ctx.events.send(e).await;
                }
                Step::End(o) => {
                    // Ended here first (an error, an answer too large): the task there is cancelled.
                    match progress.ended_there() {
                        true => guard.0 = None,
                        false => guard.cancel_now().await,
                    }
                    return o;
                }
                Step::Ask(key, question) => {
                    let asked_at = tokio::time::Instant::now();
                    let asked = ctx.asker.ask(question.clone()).await;
                    // Time waiting for a person is not the remote agent's.
                    deadline += asked_at.elapsed();
                    let text = match asked {
                        Asked::Answered(a) => answer_text(&question.kind, &a)
                            .map_err(|why| (TurnFailure::UnsupportedFeature, why.to_string())),
                        Asked::Unanswered => Err((
                            TurnFailure::Deferred,
                            "nobody answered the remote agent's question in time".to_string(),
                        )),
                        Asked::Unavailable => Err((
                            TurnFailure::UnsupportedFeature,
                            "this turn's protocol cannot put the remote agent's question to a person"
                                .to_string(),
                        )),
                        Asked::Cancelled => {
                            guard.cancel_now().await;
                            return fail(
                                TurnFailure::Cancelled,
                                "cancelled while the remote agent's question was open",
                            );
                        }
                    };
                    let text = match text {
                        Ok(t) => t,
                        Err((code, why)) => {
                            guard.cancel_now().await;
                            return fail(code, format!("{why}; the task was cancelled there"));
                        }
                    };
                    progress.answered(key);
                    answers += 1;
                    let task = progress.task().map(str::to_string);
                    let msg = user_message(
                        &format!("{seed}/answer-{answers}"),
                        &text,
                        &context,
                        task.as_deref(),
                    );
                    events = match rpc.call(url, "SendStreamingMessage", msg).await {
                        Ok(e) => e,
                        Err(t) => {
                            guard.cancel_now().await;
                            return t.outcome();
                        }
                    };
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_token_goes_only_to_the_cards_own_origin() {
        let card = "https://a.example/a2a/x/.well-known/agent-card.json";
        assert!(same_origin(card, "https://a.example/a2a/x"));
        assert!(!same_origin(card, "http://a.example/a2a/x"));
        assert!(!same_origin(card, "https://evil.example/a2a/x"));
        assert!(!same_origin(card, "https://a.example:8443/a2a/x"));
        assert_eq!(
            origin_shown("https://u:p@a.example/x?key=1"),
            "https://a.example"
        );
    }

    use super::*;

    fn ev(result: Value) -> Incoming {
        decode(&json!({ "jsonrpc": "2.0", "id": 1, "result": result }).to_string()).unwrap()
    }

    #[test]
    fn a_conversation_is_one_context_there_and_another_is_another() {
        let a = ConversationId::new("nipxx:abc").unwrap();
        let b = ConversationId::new("fisk:abc").unwrap();
        assert_eq!(context_of(&a), context_of(&a));
        assert_ne!(context_of(&a), context_of(&b));
        assert!(context_of(&a).len() <= wire::MAX_ID_CHARS);
    }

    #[test]
    fn after_a_crash_only_the_contexts_live_tasks_are_cancelled() {
        let c = "agentwire-0123";
        let task = |id: &str, ctx: &str, state: &str| json!({"id": id, "contextId": ctx, "status": {"state": state}});
        let listed = json!({"jsonrpc": "2.0", "id": 1, "result": {"tasks": [
            task("t1", c, "TASK_STATE_WORKING"),
            task("t2", c, "TASK_STATE_COMPLETED"),
            task("t3", c, "input-required"),
            task("t4", "another", "TASK_STATE_WORKING"),
            task("t5", c, "TASK_STATE_CANCELED"),
            task("t6", c, "TASK_STATE_SOMETHING_NEW"),
        ], "nextPageToken": "", "pageSize": 100, "totalSize": 6}});
        assert_eq!(live_tasks_of(&listed.to_string(), c).unwrap(), ["t1", "t3"]);
        let refused =
            json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "no"}});
        assert_eq!(
            live_tasks_of(&refused.to_string(), c)
                .unwrap_err()
                .to_string(),
            "ListTasks failed (-32601): no"
        );
        assert!(live_tasks_of("{\"result\": {}}", c).is_err());
        let bad_id = json!({"result": {"tasks": [task("a b", c, "TASK_STATE_WORKING")]}});
        assert_eq!(
            live_tasks_of(&bad_id.to_string(), c)
                .unwrap_err()
                .to_string(),
            "task.id is not 1 to 128 visible ASCII characters"
        );

        let cancelled =
            json!({"jsonrpc": "2.0", "id": 1, "result": task("t1", c, "TASK_STATE_CANCELED")});
        assert_eq!(
            cancel_answer(&cancelled.to_string()).unwrap(),
            Cancelled::Yes
        );
        let ended =
            json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32002, "message": "ended"}});
        assert_eq!(cancel_answer(&ended.to_string()).unwrap(), Cancelled::Ended);
        let gone = json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32001, "message": "gone"}});
        assert_eq!(
            cancel_answer(&gone.to_string()).unwrap_err().to_string(),
            "CancelTask failed (-32001): gone"
        );
    }

    #[test]
    fn a_card_gives_its_json_rpc_url_and_a_bad_one_says_why() {
        let card = json!({"name": "demo", "capabilities": {"streaming": true},
            "supportedInterfaces": [
                {"url": "http://h/a2a/demo", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
                {"url": "http://h/a2a/demo", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]});
        let c = parse_card(card.to_string().as_bytes()).unwrap();
        assert_eq!(c.rpc_url, "http://h/a2a/demo");
        let old = json!({"name": "x", "capabilities": {"streaming": true}, "url": "http://h"});
        assert!(parse_card(old.to_string().as_bytes()).is_err());
        let no_stream =
            json!({"capabilities": {}, "supportedInterfaces": card["supportedInterfaces"]});
        assert!(parse_card(no_stream.to_string().as_bytes())
            .unwrap_err()
            .to_string()
            .contains("streaming"));
        assert!(parse_card(b"\xff not json").is_err());
        let file = json!({"capabilities": {"streaming": true}, "supportedInterfaces": [
            {"url": "file:///etc/passwd", "protocolBinding": "JSONRPC"}]});
        assert!(parse_card(file.to_string().as_bytes()).is_err());
    }

    #[test]
    fn sse_events_are_framed_across_chunks_and_bounded() {
        let mut f = SseFramer::default();
        assert!(f.push(b": keep-alive\n\ndata: {\"a\"").unwrap().is_empty());
        assert_eq!(f.push(b":1}\r\n\r\ndata: x\n").unwrap(), vec!["{\"a\":1}"]);
        assert_eq!(f.push(b"data: y\n\n").unwrap(), vec!["x\ny"]);
        let big = vec![b'a'; MAX_SSE_EVENT_BYTES + 1];
        assert!(SseFramer::default().push(&big).is_err());
    }

    #[test]
    fn deltas_stream_and_the_end_is_the_answer() {
        let mut p = Progress::new("far");
        let steps = p.handle(ev(json!({"task": {"id": "t1", "contextId": "c",
            "status": {"state": "TASK_STATE_SUBMITTED"}}})));
        assert!(steps.is_empty());
        assert_eq!(p.task(), Some("t1"));
        let art = |text: &str, append: bool| {
            ev(
                json!({"artifactUpdate": {"taskId": "t1", "contextId": "c", "append": append,
                "artifact": {"artifactId": "answer", "parts": [{"text": text}]}}}),
            )
        };
        assert_eq!(
            p.handle(art("You said: ", false)),
            vec![Step::Emit(TurnEvent::Text {
                text: "You said: ".into()
            })]
        );
        assert_eq!(
            p.handle(art("hi", true)),
            vec![Step::Emit(TurnEvent::Text { text: "hi".into() })]
        );
        // Another task's events are not this turn's.
        let other = ev(json!({"artifactUpdate": {"taskId": "t2", "contextId": "c",
            "artifact": {"artifactId": "answer", "parts": [{"text": "x"}]}}}));
        assert!(p.handle(other).is_empty());
        let end = p.handle(ev(json!({"statusUpdate": {"taskId": "t1", "contextId": "c",
            "status": {"state": "TASK_STATE_COMPLETED", "message": {"messageId": "m", "role": "ROLE_AGENT",
            "parts": [{"text": "You said: hi"}]}}}})));
        match &end[..] {
            [Step::End(Outcome::Result(r))] => assert_eq!(r.text, "You said: hi"),
            other => panic!("{other:?}"),
        }
        assert!(p.ended_there(), "nothing to cancel there");
    }

    #[test]
    fn a_replacing_artifact_is_not_a_delta_and_a_resubscribed_task_fills_the_gap() {
        let mut p = Progress::new("far");
        let art = |text: &str, append: bool| {
            ev(json!({"artifactUpdate": {"taskId": "t", "append": append,
                "artifact": {"artifactId": "answer", "parts": [{"text": text}]}}}))
        };
        p.handle(art(".", false));
        assert!(p.handle(art("slept 1 ms", false)).is_empty());
        let mut q = Progress::new("far");
        q.handle(art("You ", false));
        let again = ev(json!({"task": {"id": "t", "contextId": "c",
            "status": {"state": "TASK_STATE_WORKING"},
            "artifacts": [{"artifactId": "answer", "parts": [{"text": "You said: x"}]}]}}));
        assert_eq!(
            q.handle(again),
            vec![Step::Emit(TurnEvent::Text {
                text: "said: x".into()
            })]
        );
    }

    #[test]
    fn an_agentwire_approval_is_asked_as_one_and_answered_by_its_option_id() {
        let mut p = Progress::new("far");
        let asked = p.handle(ev(json!({"statusUpdate": {"taskId": "t", "contextId": "c",
            "status": {"state": "TASK_STATE_INPUT_REQUIRED", "message": {"messageId": "t-question-1",
            "role": "ROLE_AGENT", "parts": [{"text": "May I run `rm /tmp/x`?\nOptions: ..."},
            {"data": {"questionId": "q-1", "kind": "approve", "question": "May I run `rm /tmp/x`?",
              "options": [{"id": "once", "label": "Approve once"}, {"id": "deny", "label": "Deny"}]}}]}}}})));
        let [Step::Ask(key, q)] = &asked[..] else {
            panic!("{asked:?}")
        };
        match &q.kind {
            QuestionKind::Approve {
                display, command, ..
            } => {
                assert_eq!((display.as_str(), command.as_str()), ("rm /tmp/x", "rm"))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(q.call_id, "q-1");
        let once = Answer::Approve {
            choice: ApproveChoice::Once,
        };
        assert_eq!(answer_text(&q.kind, &once).unwrap(), "once");
        assert_eq!(answer_text(&q.kind, &Answer::NoOperator).unwrap(), "deny");
        p.answered(key.clone());
        // The same question seen again (the answer's stream starts with the task as it stood) is not asked.
        let same = ev(
            json!({"task": {"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_INPUT_REQUIRED",
            "message": {"messageId": "t-question-1", "role": "ROLE_AGENT", "parts": [{"text": "?"}]}}}}),
        );
        assert!(p.handle(same).is_empty());
        // Any other agent's question is a text input.
        let plain = Said {
            text: "Which city?".into(),
            ..Default::default()
        };
        assert!(matches!(
            question_of("far", "t", &plain).kind,
            QuestionKind::Input { .. }
        ));
    }

    #[test]
    fn remote_failures_keep_their_meaning() {
        assert_eq!(
            failure_of(TaskState::Canceled, None, "").code,
            TurnFailure::Cancelled
        );
        assert_eq!(
            failure_of(TaskState::Failed, Some("model_unavailable"), "x").code,
            TurnFailure::ModelUnavailable
        );
        assert_eq!(
            failure_of(TaskState::Rejected, Some("capacity"), "x").code,
            TurnFailure::ProviderBusy
        );
        let f = failure_of(TaskState::Failed, Some("crashed"), "boom");
        assert_eq!(f.code, TurnFailure::AgentFailed);
        assert!(f.message.contains("crashed") && f.message.contains("boom"));
        let f = failure_of(TaskState::Rejected, None, "too big");
        assert!(f.message.contains("rejected"), "{}", f.message);
        assert!(matches!(
            decode(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32005,"message":"no"}}"#),
            Ok(Incoming::Error { code: -32005, .. })
        ));
    }

    #[test]
    fn bad_bytes_from_the_peer_are_refused_not_panicked_on() {
        for bad in [
            "",
            "[]",
            "{}",
            r#"{"result": 5}"#,
            r#"{"result": {"task": {"id": 5}}}"#,
            r#"{"result": {"task": {"id": "a b"}}}"#,
            r#"{"result": {"artifactUpdate": {"artifact": {"parts": "x"}}}}"#,
            r#"{"result": {"statusUpdate": {"status": {"message": {"parts": [{"text": 1}]}}}}}"#,
        ] {
            assert!(decode(bad).is_err(), "{bad}");
        }
        let many: Vec<Value> = (0..=wire::MAX_PARTS)
            .map(|_| json!({"text": "x"}))
            .collect();
        let r = json!({"result": {"message": {"parts": many}}}).to_string();
        assert!(decode(&r).is_err());
        let mut p = Progress::new("far");
        let huge = "x".repeat(MAX_ANSWER_BYTES + 1);
        let steps = p.handle(Incoming::Artifact {
            task: None,
            id: "a".into(),
            text: huge,
            append: true,
        });
        assert!(matches!(&steps[..], [Step::End(Outcome::Failure(_))]));
        assert!(!p.ended_there(), "ended here first: cancelled there");
    }
}
