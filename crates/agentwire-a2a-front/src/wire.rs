//! The A2A 1.0 wire: the JSON of `a2a.proto` as the spec's ProtoJSON names it (camelCase fields, enums by
//! their names, timestamps as ISO 8601 UTC), the bodies this front sends, and each request it takes read
//! and checked before anything else sees it. Pure.
//!
//! A request is read leniently where ProtoJSON is (unknown fields are ignored, an integer may come as a
//! JSON number or a string, as query parameters always do) and strictly where a value is kept: every id,
//! part and count is bounded here ([`MAX_ID_CHARS`], [`MAX_PARTS`], [`MAX_PAGE_SIZE`]), and a message of
//! anything but text is refused as a content type the agents do not take.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The A2A protocol version served (`A2A-Version`, and each interface's `protocolVersion`).
pub const PROTOCOL_VERSION: &str = "1.0";
/// The most characters of an id a client sends (`messageId`, `contextId`, `taskId`): a UUID is 36, and a
/// client's own scheme has room; the conversation id made from a context stays under the journal's
/// [`agentwire_core::MAX_ID_LEN`].
pub const MAX_ID_CHARS: usize = 128;
/// The most parts one message carries: a message is a prompt, and a few text parts are what clients send;
/// past this it is not a message a person wrote.
pub const MAX_PARTS: usize = 64;
/// Tasks in a `ListTasks` page when the request names no `pageSize` (the spec's default).
pub const DEFAULT_PAGE_SIZE: usize = 50;
/// The most tasks in one `ListTasks` page (the spec's maximum): a client pages on with `nextPageToken`.
pub const MAX_PAGE_SIZE: usize = 100;
/// The most output modes a request lists (`acceptedOutputModes`): media types, a handful in practice.
pub const MAX_OUTPUT_MODES: usize = 32;

/// A task's state (`TaskState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskState {
    /// Taken, waiting behind another task of its context.
    #[serde(rename = "TASK_STATE_SUBMITTED")]
    Submitted,
    /// Running.
    #[serde(rename = "TASK_STATE_WORKING")]
    Working,
    /// Ended with the agent's answer.
    #[serde(rename = "TASK_STATE_COMPLETED")]
    Completed,
    /// Ended in a failure.
    #[serde(rename = "TASK_STATE_FAILED")]
    Failed,
    /// Cancelled.
    #[serde(rename = "TASK_STATE_CANCELED")]
    Canceled,
    /// Waiting for the client's answer to the agent's question.
    #[serde(rename = "TASK_STATE_INPUT_REQUIRED")]
    InputRequired,
    /// Refused before it ran (capacity, a message too large for the agent, ...).
    #[serde(rename = "TASK_STATE_REJECTED")]
    Rejected,
    /// Never used here: the bearer token is checked before a task exists.
    #[serde(rename = "TASK_STATE_AUTH_REQUIRED")]
    AuthRequired,
}

impl TaskState {
    /// Its wire name.
    pub fn name(self) -> &'static str {
        match self {
            TaskState::Submitted => "TASK_STATE_SUBMITTED",
            TaskState::Working => "TASK_STATE_WORKING",
            TaskState::Completed => "TASK_STATE_COMPLETED",
            TaskState::Failed => "TASK_STATE_FAILED",
            TaskState::Canceled => "TASK_STATE_CANCELED",
            TaskState::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            TaskState::Rejected => "TASK_STATE_REJECTED",
            TaskState::AuthRequired => "TASK_STATE_AUTH_REQUIRED",
        }
    }

    /// The state named `name`, if it is one.
    pub fn parse(name: &str) -> Option<TaskState> {
        [
            TaskState::Submitted,
            TaskState::Working,
            TaskState::Completed,
            TaskState::Failed,
            TaskState::Canceled,
            TaskState::InputRequired,
            TaskState::Rejected,
            TaskState::AuthRequired,
        ]
        .into_iter()
        .find(|s| s.name() == name)
    }

    /// Completed, failed, canceled or rejected: nothing more happens to the task.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Failed | TaskState::Canceled | TaskState::Rejected
        )
    }

    /// Terminal, or waiting for the client (input or auth required): where a blocking `SendMessage`
    /// returns and a `SendStreamingMessage` stream closes.
    pub fn is_interrupted_or_terminal(self) -> bool {
        self.is_terminal() || matches!(self, TaskState::InputRequired | TaskState::AuthRequired)
    }
}

/// Who wrote a message (`Role`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// The client.
    #[serde(rename = "ROLE_USER")]
    User,
    /// The agent.
    #[serde(rename = "ROLE_AGENT")]
    Agent,
}

/// A part of a message or an artifact (`Part`): text, or structured data (a question's options).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Part {
    /// Text content.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Structured content.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// Its media type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
}

impl Part {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Part {
        Part {
            text: Some(text.into()),
            data: None,
            media_type: None,
        }
    }

    /// A JSON data part.
    pub fn data(data: Value) -> Part {
        Part {
            text: None,
            data: Some(data),
            media_type: Some("application/json".into()),
        }
    }
}

/// A message (`Message`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// Its id.
    pub message_id: String,
    /// Its context.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    /// Its task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Who wrote it.
    pub role: Role,
    /// Its content.
    pub parts: Vec<Part>,
    /// What a client may read beside the text (a failure's code).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// A task's status (`TaskStatus`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    /// The state.
    pub state: TaskState,
    /// What the agent says with it (its question, progress, the failure).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    /// When the task came to it, ISO 8601 UTC.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
}

/// An output of a task (`Artifact`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    /// Its id, unique in the task.
    pub artifact_id: String,
    /// Its name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its content.
    pub parts: Vec<Part>,
}

/// A task (`Task`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// Its id.
    pub id: String,
    /// Its context.
    pub context_id: String,
    /// Its status.
    pub status: TaskStatus,
    /// Its outputs (left out where a request did not ask for them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub artifacts: Option<Vec<Artifact>>,
    /// Its messages (left out where none were asked for).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history: Option<Vec<Message>>,
}

/// A change of a task's status, streamed (`TaskStatusUpdateEvent`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatusUpdateEvent {
    /// The task.
    pub task_id: String,
    /// Its context.
    pub context_id: String,
    /// The new status.
    pub status: TaskStatus,
}

/// A piece of a task's output, streamed (`TaskArtifactUpdateEvent`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskArtifactUpdateEvent {
    /// The task.
    pub task_id: String,
    /// Its context.
    pub context_id: String,
    /// The artifact, or the part of it that follows what was sent.
    pub artifact: Artifact,
    /// Whether it follows what was sent of the same artifact (`false`: it replaces it).
    pub append: bool,
    /// Whether it is the artifact's last piece.
    pub last_chunk: bool,
}

/// One event of a stream (`StreamResponse`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum StreamResponse {
    /// The task as it stands (a stream's first event).
    Task(Task),
    /// A status change.
    StatusUpdate(TaskStatusUpdateEvent),
    /// Output.
    ArtifactUpdate(TaskArtifactUpdateEvent),
}

/// The answer to `ListTasks` (`ListTasksResponse`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTasksResponse {
    /// The page, newest first.
    pub tasks: Vec<Task>,
    /// The next page's token; empty on the last page (always present).
    pub next_page_token: String,
    /// The page size used.
    pub page_size: i32,
    /// How many tasks match, over every page.
    pub total_size: i32,
}

/// Why a request cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// A field is missing, mistyped or out of its bounds.
    #[error("{0}")]
    Invalid(String),
    /// The message has a part that is not text.
    #[error("{0}")]
    ContentType(String),
    /// The request asks for push notifications.
    #[error("push notifications are not supported: poll with GetTask or stream with SendStreamingMessage / SubscribeToTask")]
    PushNotifications,
}

fn invalid(why: impl Into<String>) -> RequestError {
    RequestError::Invalid(why.into())
}

/// An integer as ProtoJSON gives one: a number, or a string of digits (query parameters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct IntLike(i64);

impl<'de> Deserialize<'de> for IntLike {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::Number(n) => n
                .as_i64()
                .map(IntLike)
                .ok_or_else(|| serde::de::Error::custom("an integer")),
            Value::String(s) => s
                .trim()
                .parse()
                .map(IntLike)
                .map_err(|_| serde::de::Error::custom(format!("{s:?} is not an integer"))),
            other => Err(serde::de::Error::custom(format!(
                "{other} is not an integer"
            ))),
        }
    }
}

/// A boolean as ProtoJSON gives one: `true`/`false`, or their text (query parameters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BoolLike(bool);

impl<'de> Deserialize<'de> for BoolLike {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::Bool(b) => Ok(BoolLike(b)),
            Value::String(s) if s == "true" => Ok(BoolLike(true)),
            Value::String(s) if s == "false" => Ok(BoolLike(false)),
            other => Err(serde::de::Error::custom(format!(
                "{other} is not a boolean"
            ))),
        }
    }
}

/// Reads `params` (an object) as `T`, naming the problem.
fn read<T: serde::de::DeserializeOwned>(params: &Value) -> Result<T, RequestError> {
    if !params.is_object() {
        return Err(invalid("the parameters are a JSON object"));
    }
    serde_json::from_value(params.clone()).map_err(|e| invalid(e.to_string()))
}

/// An id a client sent in `field`: 1 to [`MAX_ID_CHARS`] visible ASCII characters.
fn checked_id(field: &str, id: &str) -> Result<String, RequestError> {
    if id.is_empty() || id.len() > MAX_ID_CHARS || !id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(invalid(format!(
            "{field} is 1 to {MAX_ID_CHARS} visible ASCII characters"
        )));
    }
    Ok(id.to_string())
}

/// A `historyLength`: unset, or 0 and up.
fn history_length(n: Option<IntLike>) -> Result<Option<usize>, RequestError> {
    match n {
        None => Ok(None),
        Some(IntLike(n)) if n >= 0 => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
        Some(IntLike(n)) => Err(invalid(format!("historyLength is 0 or more, not {n}"))),
    }
}

/// A `tenant`: this server declares none, so none is taken.
fn no_tenant(tenant: &Option<String>) -> Result<(), RequestError> {
    match tenant.as_deref() {
        None | Some("") => Ok(()),
        Some(_) => Err(invalid(
            "tenant: this agent's interfaces declare no tenant; leave it out",
        )),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawSend {
    tenant: Option<String>,
    message: Option<RawMessage>,
    configuration: Option<RawConfiguration>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawMessage {
    message_id: Option<String>,
    context_id: Option<String>,
    task_id: Option<String>,
    role: Option<String>,
    parts: Option<Vec<Value>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawConfiguration {
    accepted_output_modes: Option<Vec<String>>,
    task_push_notification_config: Option<Value>,
    history_length: Option<IntLike>,
    return_immediately: Option<BoolLike>,
}

/// A `SendMessage` / `SendStreamingMessage` request, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendRequest {
    /// The message's text: its text parts, joined by a newline.
    pub text: String,
    /// The client's id of the message.
    pub message_id: String,
    /// The context it continues, if it names one.
    pub context_id: Option<String>,
    /// The task it answers, if it names one.
    pub task_id: Option<String>,
    /// `returnImmediately`: answer with the task at once instead of when it ends or asks.
    pub return_immediately: bool,
    /// The most history messages the answer's task carries.
    pub history_length: Option<usize>,
}

/// Whether `modes` (a request's `acceptedOutputModes`) take text: empty (anything), or a text or wildcard
/// media type among them.
fn takes_text(modes: &[String]) -> bool {
    modes.is_empty()
        || modes.iter().any(|m| {
            let m = m.trim().to_ascii_lowercase();
            m == "*/*" || m == "*" || m == "text" || m.starts_with("text/")
        })
}

/// Reads a `SendMessageRequest`.
pub fn parse_send(params: &Value) -> Result<SendRequest, RequestError> {
    let raw: RawSend = read(params)?;
    no_tenant(&raw.tenant)?;
    let Some(m) = raw.message else {
        return Err(invalid("message is required"));
    };
    let message_id = checked_id("message.messageId", m.message_id.as_deref().unwrap_or(""))?;
    match m.role.as_deref() {
        Some("ROLE_USER") => {}
        Some(other) => {
            return Err(invalid(format!(
                "message.role is ROLE_USER (the client's message), not {other:?}"
            )))
        }
        None => return Err(invalid("message.role is required (ROLE_USER)")),
    }
    let parts = m.parts.unwrap_or_default();
    if parts.is_empty() {
        return Err(invalid("message.parts: at least one part is required"));
    }
    if parts.len() > MAX_PARTS {
        return Err(invalid(format!(
            "message.parts: at most {MAX_PARTS} parts, not {}",
            parts.len()
        )));
    }
    let mut texts = Vec::with_capacity(parts.len());
    for (i, p) in parts.iter().enumerate() {
        let Some(obj) = p.as_object() else {
            return Err(invalid(format!("message.parts[{i}] is an object")));
        };
        match obj.get("text") {
            Some(Value::String(t)) => texts.push(t.as_str()),
            Some(_) => return Err(invalid(format!("message.parts[{i}].text is a string"))),
            None => {
                let kind = ["raw", "url", "data"]
                    .into_iter()
                    .find(|k| obj.contains_key(*k))
                    .unwrap_or("empty");
                return Err(RequestError::ContentType(format!(
                    "message.parts[{i}] is a {kind} part: this agent takes text parts only (text/plain)"
                )));
            }
        }
    }
    let text = texts.join("\n");
    if text.trim().is_empty() {
        return Err(invalid("message.parts: the text is empty"));
    }
    let opt_id = |field: &str, v: Option<String>| -> Result<Option<String>, RequestError> {
        match v.as_deref() {
            None | Some("") => Ok(None),
            Some(id) => checked_id(field, id).map(Some),
        }
    };
    let context_id = opt_id("message.contextId", m.context_id)?;
    let task_id = opt_id("message.taskId", m.task_id)?;
    let (mut return_immediately, mut history) = (false, None);
    if let Some(c) = raw.configuration {
        if c.task_push_notification_config
            .is_some_and(|v| !v.is_null())
        {
            return Err(RequestError::PushNotifications);
        }
        let modes = c.accepted_output_modes.unwrap_or_default();
        if modes.len() > MAX_OUTPUT_MODES {
            return Err(invalid(format!(
                "configuration.acceptedOutputModes: at most {MAX_OUTPUT_MODES}"
            )));
        }
        if !takes_text(&modes) {
            return Err(RequestError::ContentType(format!(
                "configuration.acceptedOutputModes {modes:?}: this agent answers in text/plain"
            )));
        }
        return_immediately = c.return_immediately.is_some_and(|b| b.0);
        history = history_length(c.history_length)?;
    }
    Ok(SendRequest {
        text,
        message_id,
        context_id,
        task_id,
        return_immediately,
        history_length: history,
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawGet {
    tenant: Option<String>,
    id: Option<String>,
    history_length: Option<IntLike>,
}

/// A `GetTaskRequest`, checked: the task's id (as sent; an id that names no task is not found) and the
/// most history messages wanted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetRequest {
    /// The task's id.
    pub id: String,
    /// The most history messages in the answer.
    pub history_length: Option<usize>,
}

/// Reads a `GetTaskRequest` (the id may come from the path: `path_id`).
pub fn parse_get(params: &Value, path_id: Option<&str>) -> Result<GetRequest, RequestError> {
    let raw: RawGet = read(params)?;
    no_tenant(&raw.tenant)?;
    let id = path_id.map(str::to_string).or(raw.id).unwrap_or_default();
    if id.is_empty() {
        return Err(invalid("id is required"));
    }
    Ok(GetRequest {
        id,
        history_length: history_length(raw.history_length)?,
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawId {
    tenant: Option<String>,
    id: Option<String>,
}

/// Reads a `CancelTaskRequest` or a `SubscribeToTaskRequest`: the task's id (from the path when given).
pub fn parse_task_id(params: &Value, path_id: Option<&str>) -> Result<String, RequestError> {
    let raw: RawId = read(params)?;
    no_tenant(&raw.tenant)?;
    let id = path_id.map(str::to_string).or(raw.id).unwrap_or_default();
    if id.is_empty() {
        return Err(invalid("id is required"));
    }
    Ok(id)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawList {
    tenant: Option<String>,
    context_id: Option<String>,
    status: Option<String>,
    page_size: Option<IntLike>,
    page_token: Option<String>,
    history_length: Option<IntLike>,
    status_timestamp_after: Option<String>,
    include_artifacts: Option<BoolLike>,
}

/// A `ListTasksRequest`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListRequest {
    /// Only this context's tasks.
    pub context_id: Option<String>,
    /// Only tasks in this state.
    pub status: Option<TaskState>,
    /// Tasks per page, 1 to [`MAX_PAGE_SIZE`].
    pub page_size: usize,
    /// Tasks older than this cursor (a page token this front gave).
    pub before: Option<u64>,
    /// The most history messages per task (none unless asked for).
    pub history_length: Option<usize>,
    /// Only tasks whose status changed at or after this time, in Unix milliseconds.
    pub after_ms: Option<u64>,
    /// Whether each task carries its artifacts.
    pub include_artifacts: bool,
}

/// Reads a `ListTasksRequest`.
pub fn parse_list(params: &Value) -> Result<ListRequest, RequestError> {
    let raw: RawList = read(params)?;
    no_tenant(&raw.tenant)?;
    let context_id = match raw.context_id.as_deref() {
        None | Some("") => None,
        Some(c) => Some(checked_id("contextId", c)?),
    };
    let status = match raw.status.as_deref() {
        None | Some("") | Some("TASK_STATE_UNSPECIFIED") => None,
        Some(s) => Some(TaskState::parse(s).ok_or_else(|| {
            invalid(format!(
                "status {s:?} is not a task state (TASK_STATE_SUBMITTED, TASK_STATE_WORKING, TASK_STATE_COMPLETED, TASK_STATE_FAILED, TASK_STATE_CANCELED, TASK_STATE_INPUT_REQUIRED, TASK_STATE_REJECTED, TASK_STATE_AUTH_REQUIRED)"
            ))
        })?),
    };
    let page_size = match raw.page_size {
        None => DEFAULT_PAGE_SIZE,
        Some(IntLike(n)) if (1..=MAX_PAGE_SIZE as i64).contains(&n) => n as usize,
        Some(IntLike(n)) => {
            return Err(invalid(format!(
                "pageSize is 1 to {MAX_PAGE_SIZE}, not {n}"
            )))
        }
    };
    let before = match raw.page_token.as_deref() {
        None | Some("") => None,
        Some(t) => Some(
            t.parse::<u64>()
                .map_err(|_| invalid("pageToken is not one this server gave"))?,
        ),
    };
    let after_ms = match raw.status_timestamp_after.as_deref() {
        None | Some("") => None,
        Some(t) => Some(parse_timestamp(t).ok_or_else(|| {
            invalid(format!(
                "statusTimestampAfter {t:?} is not an ISO 8601 UTC time (2025-10-28T10:30:00Z)"
            ))
        })?),
    };
    Ok(ListRequest {
        context_id,
        status,
        page_size,
        before,
        history_length: history_length(raw.history_length)?,
        after_ms,
        include_artifacts: raw.include_artifacts.is_some_and(|b| b.0),
    })
}

/// Unix milliseconds as the spec's timestamp: `YYYY-MM-DDTHH:mm:ss.sssZ` (an instant past chrono's last,
/// years after 262,000, as that last one).
pub fn timestamp(ms: u64) -> String {
    let at = i64::try_from(ms)
        .ok()
        .and_then(DateTime::<Utc>::from_timestamp_millis)
        .unwrap_or(DateTime::<Utc>::MAX_UTC);
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// An ISO 8601 UTC time (`YYYY-MM-DDTHH:mm:ss[.fff]Z`, as RFC 3339 writes it) as Unix milliseconds; `None`
/// when it is not one: another offset than `Z` (the spec allows none), a date that does not exist, or an
/// instant before 1970.
pub fn parse_timestamp(t: &str) -> Option<u64> {
    if !t.ends_with(['Z', 'z']) {
        return None;
    }
    let at = DateTime::parse_from_rfc3339(t).ok()?;
    u64::try_from(at.timestamp_millis()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_timestamp_out_of_range_is_refused_not_overflowed() {
        assert!(parse_timestamp("2026-12-07T01:02:03.5Z").is_some());
        for bad in [
            "99999999999999-01-01T00:00:00Z",
            "999999999999999999-01-01T00:00:00Z",
            "10000-01-01T00:00:00Z",
            "0-01-01T00:00:00Z",
            "2026-12-07T-5:00:00Z",
            "2026-12-07T01:-1:00Z",
            "2026-12-07T01:00:-1Z",
            "2026-02-30T00:00:00Z",
            "1969-12-31T23:59:59Z",
        ] {
            assert_eq!(parse_timestamp(bad), None, "{bad}");
        }
    }

    fn send(message: Value) -> Result<SendRequest, RequestError> {
        parse_send(&json!({ "message": message }))
    }

    #[test]
    fn a_text_message_is_read_and_its_parts_joined() {
        let r = send(json!({
            "messageId": "m-1", "role": "ROLE_USER", "contextId": "ctx",
            "parts": [{"text": "calc (1 + 2)"}, {"text": "* 28", "mediaType": "text/plain"}],
            "unknownField": {"ignored": true}
        }))
        .unwrap();
        assert_eq!(r.text, "calc (1 + 2)\n* 28");
        assert_eq!(r.context_id.as_deref(), Some("ctx"));
        assert_eq!(r.task_id, None);
        assert!(!r.return_immediately);
    }

    #[test]
    fn a_message_that_cannot_be_a_prompt_is_refused_naming_why() {
        let e = send(json!({"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "x"}]}));
        assert!(matches!(e, Err(RequestError::Invalid(w)) if w.contains("ROLE_USER")));
        let e = send(json!({"role": "ROLE_USER", "parts": [{"text": "x"}]}));
        assert!(matches!(e, Err(RequestError::Invalid(w)) if w.contains("messageId")));
        let e = send(json!({"messageId": "m", "role": "ROLE_USER", "parts": []}));
        assert!(matches!(e, Err(RequestError::Invalid(w)) if w.contains("at least one part")));
        let many: Vec<Value> = (0..=MAX_PARTS).map(|_| json!({"text": "x"})).collect();
        let e = send(json!({"messageId": "m", "role": "ROLE_USER", "parts": many}));
        assert!(matches!(e, Err(RequestError::Invalid(w)) if w.contains("at most 64 parts")));
        let e =
            send(json!({"messageId": "m", "role": "ROLE_USER", "parts": [{"url": "https://x"}]}));
        assert!(matches!(e, Err(RequestError::ContentType(w)) if w.contains("url part")));
        let e = send(
            json!({"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}], "contextId": "a b"}),
        );
        assert!(matches!(e, Err(RequestError::Invalid(w)) if w.contains("contextId")));
        let long = "c".repeat(MAX_ID_CHARS + 1);
        let e = send(
            json!({"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}], "taskId": long}),
        );
        assert!(matches!(e, Err(RequestError::Invalid(w)) if w.contains("taskId")));
        assert!(matches!(
            parse_send(&json!([1])),
            Err(RequestError::Invalid(w)) if w.contains("object")
        ));
        assert!(matches!(
            parse_send(&json!({"message": {"messageId": 5}})),
            Err(RequestError::Invalid(_))
        ));
    }

    #[test]
    fn the_configuration_is_read_and_what_cannot_be_kept_refused() {
        let base = json!({"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]});
        let r = parse_send(&json!({"message": base, "configuration": {
            "returnImmediately": true, "historyLength": "3", "acceptedOutputModes": ["text/plain"]
        }}))
        .unwrap();
        assert!(r.return_immediately);
        assert_eq!(r.history_length, Some(3));
        let e = parse_send(&json!({"message": base, "configuration": {
            "taskPushNotificationConfig": {"url": "https://hook"}
        }}));
        assert_eq!(e, Err(RequestError::PushNotifications));
        let e = parse_send(&json!({"message": base, "configuration": {
            "acceptedOutputModes": ["image/png"]
        }}));
        assert!(matches!(e, Err(RequestError::ContentType(_))));
        let modes: Vec<String> = (0..=MAX_OUTPUT_MODES)
            .map(|i| format!("text/x{i}"))
            .collect();
        let e =
            parse_send(&json!({"message": base, "configuration": {"acceptedOutputModes": modes}}));
        assert!(matches!(e, Err(RequestError::Invalid(w)) if w.contains("acceptedOutputModes")));
        let e = parse_send(&json!({"message": base, "configuration": {"historyLength": -1}}));
        assert!(matches!(e, Err(RequestError::Invalid(w)) if w.contains("historyLength")));
        let e = parse_send(&json!({"message": base, "tenant": "t1"}));
        assert!(matches!(e, Err(RequestError::Invalid(w)) if w.contains("tenant")));
    }

    #[test]
    fn list_requests_are_bounded() {
        let r = parse_list(&json!({})).unwrap();
        assert_eq!(r.page_size, DEFAULT_PAGE_SIZE);
        let r = parse_list(&json!({"pageSize": "100", "status": "TASK_STATE_WORKING",
            "pageToken": "17", "includeArtifacts": "true", "contextId": "c"}))
        .unwrap();
        assert_eq!(
            (r.page_size, r.status, r.before, r.include_artifacts),
            (100, Some(TaskState::Working), Some(17), true)
        );
        for bad in [
            json!({"pageSize": 101}),
            json!({"pageSize": 0}),
            json!({"status": "TASK_STATE_RUNNING"}),
            json!({"pageToken": "not-ours"}),
            json!({"historyLength": -5}),
            json!({"statusTimestampAfter": "yesterday"}),
        ] {
            assert!(
                matches!(parse_list(&bad), Err(RequestError::Invalid(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn timestamps_are_iso_8601_utc_and_read_back() {
        assert_eq!(timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(timestamp(1_761_647_433_142), "2025-10-28T10:30:33.142Z");
        assert_eq!(timestamp(951_782_400_000), "2000-02-29T00:00:00.000Z");
        for ms in [0, 1_761_647_433_142, 951_782_400_000, 4_102_444_799_999] {
            assert_eq!(parse_timestamp(&timestamp(ms)), Some(ms));
        }
        assert_eq!(
            parse_timestamp("2025-10-28T10:30:33Z"),
            Some(1_761_647_433_000)
        );
        assert_eq!(parse_timestamp("2025-10-28T10:30:33+01:00"), None);
        assert_eq!(parse_timestamp("2025-13-28T10:30:33Z"), None);
    }

    #[test]
    fn stream_events_carry_the_specs_names() {
        let ev = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: "t".into(),
            context_id: "c".into(),
            status: TaskStatus {
                state: TaskState::InputRequired,
                message: None,
                timestamp: None,
            },
        });
        assert_eq!(
            serde_json::to_value(ev).unwrap(),
            json!({"statusUpdate": {"taskId": "t", "contextId": "c",
                "status": {"state": "TASK_STATE_INPUT_REQUIRED"}}})
        );
        assert!(TaskState::Rejected.is_terminal() && !TaskState::InputRequired.is_terminal());
        assert!(TaskState::InputRequired.is_interrupted_or_terminal());
    }
}
