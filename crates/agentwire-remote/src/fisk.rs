//! A fisk-ai worker on some NATS account, reached as its caller (`kind = "fisk"`; spec:
//! `shared/specs/fisk-ai-prompts-channel.md`), served here as an agent on every front.
//!
//! Each turn connects to NATS with this daemon's credentials there and sends a `request.prompt` to the
//! worker's identity through the fisk-ai caller ([`agentwire_fisk::client::Caller`]):
//!
//! * **Conversations.** The worker mints a `conversation_token` on the ack of a conversation's first turn;
//!   it is kept here, in memory, per conversation (at most [`MAX_CONVERSATIONS`], the least recently used
//!   forgotten first), and sent with the conversation's later turns, so that a conversation here is one
//!   conversation there. The token is a credential: it is never logged nor shown. After a restart of this
//!   daemon (or once a conversation was forgotten) its next turn starts a new conversation there; that is
//!   accepted (the worker's journal keeps the old one). A token the worker no longer knows
//!   (`unknown_conversation`) is dropped and the prompt sent again as a new conversation.
//! * **Events.** The reply set streams through as this turn's events as it comes: text blocks as text
//!   deltas (the final block, which repeats the answer, only for what was not streamed yet), thinking,
//!   tool calls and results as tool telemetry, delegations, warnings, statuses (with a model call's usage).
//! * **Outcome.** The `result` is this turn's result (its usage: what the conversation's grew by); an
//!   `error` is this turn's failure, its code mapped to the core code of the same meaning
//!   ([`failure_of`]).
//! * **Questions.** A question the run asks (`elicit.request.*`) is put to this turn's requester through
//!   the turn's asker, and the answer goes back on the question's subject (held open with
//!   `elicit.waiting` meanwhile); the run goes on. Nobody to answer (a front that cannot ask, a window
//!   that closed here) is `no_operator` there: the command stays unrun.
//! * **Cancel and time.** A cancel here (or the turn's future dropped) cancels the run there (it parks,
//!   `suspended`); a turn is bounded by the agent's `request_timeout_secs`, the time a person spends on a
//!   question not counted, and then cancelled there too. NATS that cannot be reached, or no worker serving
//!   the identity, fails the turn at once (`model_unavailable`).
//! * **A crash here.** A turn's `request` tag there is derived from the turn's own ids (`remote_request`),
//!   so after a restart the run a crash cut off is found there without a journal of its own: the engine's
//!   `interrupted` connects and cancels it (it parks, `suspended`), a resend's tag too.
//!
//! Limits: one NATS connection a turn (made when the turn starts, closed when it ends); a turn resumed
//! here (under a front that parks) is sent as a new prompt of the conversation, not as a `request.resume`
//! or `request.answer` there.
//!
//! Everything the worker sends is checked before it is used: strings are bounded (the limits below),
//! a field of the wrong type is as good as absent, and nothing it sends can panic this side. (The file is
//! long for its tests: the reading of the wire is tested beside it, one file an agent kind as for NIP-XX.)

use agentwire_core::{
    Answer, ApproveChoice, Asked, ConversationId, Failure, FailureCode, Outcome, Question,
    QuestionKind, QuestionOption, Refusal, RequestId, StatusState, TurnEvent, TurnFailure,
    TurnResult, Usage, WarningAbout,
};
use agentwire_engine::{cancelled, Agent, AgentCard, TurnContext, TurnInput};
use agentwire_fisk::client::{Answerer, Caller, ClientError, PromptCall, Received, Reply};
use agentwire_fisk::connection::NatsConnect;
use agentwire_fisk::wire::{trim_block_text, ElicitChoice, ErrorCode};
use agentwire_fisk::worker::WARNING_QUESTION_ANSWERED;
use futures_util::future::BoxFuture;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// The most conversations whose token is kept: a token is 128 bytes at most, so 10,000 of them hold about
/// 2 MB; a conversation past this many others since its last turn starts anew there.
pub const MAX_CONVERSATIONS: usize = 10_000;
/// The name this daemon sends as `sender` (a fisk-ai identity).
pub const CALLER_NAME: &str = "agentwire";
/// The model name the card offers: the worker chooses its own model.
pub const REMOTE_MODEL: &str = "fisk";
/// The largest prompt sent: the worker refuses messages over 768 KiB, and a prompt of control characters
/// is six times its size once JSON-escaped.
pub const MAX_PROMPT_BYTES: usize = 120_000;
/// The longest conversation token kept (the schema's `maxLength`): a longer one is not v1, and not kept.
const MAX_TOKEN_CHARS: usize = 128;
/// The longest id or name kept from the worker (a call's id, a tool's, a question's): the schema's bound
/// for `tool_use_id`, which is the longest of them.
const MAX_ID_CHARS: usize = 256;
/// The most bytes of a question's text, of an error's message, of a warning: what a person reads in one
/// card or line.
const MAX_SAID_BYTES: usize = 4096;
/// The most options of a select question put to a person: a list to choose from, not a dump.
const MAX_OPTIONS: usize = 64;
/// The longest option label (the tiny agent card takes 1-200 characters).
const MAX_OPTION_CHARS: usize = 200;
/// The longest text answer sent (the schema's `maxLength` of an elicit value): the worker refuses more.
const MAX_ANSWER_CHARS: usize = 4096;
/// The most tool calls of one turn whose names are remembered (a result names only its call): a run that
/// calls more still streams, its later results named `tool`.
const MAX_TOOL_CALLS: usize = 1024;
/// How often the turn's deadline is looked at while a question is with a person (its clock is stopped
/// then): coarse, as the deadline is in seconds.
const CLOCK_TICK: Duration = Duration::from_millis(250);
/// The most resends of one turn's prompt (after `unknown_conversation`, which is sent as a new conversation
/// and so cannot come again): what a cancel after a restart tries beside the first tag.
const MAX_RESENDS: u32 = 1;

/// How a remote fisk-ai worker is reached.
#[derive(Clone)]
pub struct FiskRemoteSettings {
    /// The NATS servers and this daemon's credentials there.
    pub connect: NatsConnect,
    /// The worker's fisk-ai identity.
    pub identity: String,
    /// How long a turn may take there.
    pub timeout: Duration,
}

/// A remote fisk-ai worker.
pub struct FiskRemote {
    name: String,
    settings: FiskRemoteSettings,
    conversations: Arc<Mutex<Conversations>>,
}

impl FiskRemote {
    /// The agent `name`, reached as `settings` say.
    pub fn new(name: impl Into<String>, settings: FiskRemoteSettings) -> Self {
        FiskRemote {
            name: name.into(),
            settings,
            conversations: Default::default(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A conversation's standing there: its token, and the usage the worker last reported for it (the
/// conversation's, from which a turn's own is the growth).
#[derive(Debug, Clone, PartialEq, Eq)]
struct There {
    token: String,
    usage: Usage,
}

/// The conversations' tokens, at most [`MAX_CONVERSATIONS`], the least recently used forgotten first.
#[derive(Default)]
struct Conversations {
    by_id: HashMap<String, (u64, There)>,
    by_use: BTreeMap<u64, String>,
    clock: u64,
}

impl Conversations {
    fn get(&mut self, id: &str) -> Option<There> {
        self.clock += 1;
        let (used, there) = self.by_id.get_mut(id)?;
        self.by_use.remove(used);
        *used = self.clock;
        self.by_use.insert(self.clock, id.to_string());
        Some(there.clone())
    }

    fn put(&mut self, id: &str, there: There) {
        self.forget(id);
        while self.by_id.len() >= MAX_CONVERSATIONS {
            let Some((_, oldest)) = self.by_use.pop_first() else {
                break;
            };
            self.by_id.remove(&oldest);
        }
        self.clock += 1;
        self.by_use.insert(self.clock, id.to_string());
        self.by_id.insert(id.to_string(), (self.clock, there));
    }

    fn forget(&mut self, id: &str) {
        if let Some((used, _)) = self.by_id.remove(id) {
            self.by_use.remove(&used);
        }
    }
}

/// A string field of `v`, when it is one.
fn text<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// `s` cut to at most `max` bytes on a character boundary.
fn cut(s: &str, max: usize) -> &str {
    &s[..s.floor_char_boundary(max)]
}

/// An id or a name from the worker: 1 to [`MAX_ID_CHARS`] characters, or none.
fn id_of(v: &Value, key: &str) -> Option<String> {
    text(v, key)
        .filter(|s| !s.is_empty() && s.chars().count() <= MAX_ID_CHARS)
        .map(String::from)
}

/// A conversation token as the schema has it (`^[a-zA-Z0-9_-]+$`, at most 128 characters), or none.
fn token_of(ack: &Value) -> Option<String> {
    text(ack, "conversation_token")
        .filter(|t| {
            (1..=MAX_TOKEN_CHARS).contains(&t.len())
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        .map(String::from)
}

/// A `usage` object's tokens (missing counts are zero).
fn usage_of(v: &Value) -> Usage {
    let n = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
    Usage {
        input_tokens: n("input_tokens"),
        output_tokens: n("output_tokens"),
    }
}

/// What a conversation spent between two of its usages.
fn spent(before: Usage, now: Usage) -> Usage {
    Usage {
        input_tokens: now.input_tokens.saturating_sub(before.input_tokens),
        output_tokens: now.output_tokens.saturating_sub(before.output_tokens),
    }
}

/// A reply set as read so far: what the ack said, the tools called, the text streamed.
#[derive(Debug, Default)]
struct Reading {
    /// The ack: accepted or not, and the conversation's token when accepted with a valid one.
    accepted: Option<bool>,
    token: Option<String>,
    /// Tool names by call id (a result names only its call).
    tools: HashMap<String, String>,
    /// The text streamed since the last tool call or thought, at most what one final block holds (all it
    /// is compared with), and whether there was more.
    shown: String,
    shown_more: bool,
}

impl Reading {
    fn show(&mut self, t: &str) {
        let room = agentwire_fisk::wire::MAX_BLOCK_TEXT_BYTES.saturating_sub(self.shown.len());
        let kept = cut(t, room);
        self.shown.push_str(kept);
        self.shown_more |= kept.len() < t.len();
    }

    fn unshow(&mut self) {
        self.shown.clear();
        self.shown_more = false;
    }

    /// What of final text block `answer` was not streamed yet (the answer repeats what streamed since the
    /// last tool call or thought).
    fn unshown<'a>(&self, answer: &'a str) -> &'a str {
        if self.shown_more && self.shown.starts_with(answer) {
            return "";
        }
        answer.strip_prefix(self.shown.as_str()).unwrap_or(answer)
    }

    /// This turn's events for message `m` of the reply set.
    fn events(&mut self, m: &Received) -> Vec<TurnEvent> {
        let json = &m.json;
        let block = &json["block"];
        let mut out = Vec::new();
        match m.kind() {
            "ack" => {
                let accepted = json.get("accepted").and_then(Value::as_bool) == Some(true);
                self.accepted = Some(accepted);
                if accepted {
                    self.token = token_of(json);
                }
            }
            "event.text" => {
                let t = text(block, "text").unwrap_or("");
                let t = trim_block_text(t);
                let fresh = match block.get("final").and_then(Value::as_bool) == Some(true) {
                    true => self.unshown(t),
                    false => t,
                };
                if !fresh.is_empty() {
                    out.push(TurnEvent::Text { text: fresh.into() });
                }
                self.show(fresh);
            }
            "event.thinking" => {
                self.unshow();
                let t = trim_block_text(text(block, "text").unwrap_or(""));
                if !t.is_empty() {
                    out.push(TurnEvent::Thinking { text: t.into() });
                }
            }
            "event.tool_call" => {
                self.unshow();
                if let (Some(call_id), Some(name)) = (id_of(block, "id"), id_of(block, "name")) {
                    if self.tools.len() < MAX_TOOL_CALLS {
                        self.tools.insert(call_id.clone(), name.clone());
                    }
                    let arguments = match block.get("input") {
                        Some(Value::Object(o)) => Value::Object(o.clone()),
                        _ => serde_json::json!({}),
                    };
                    out.push(TurnEvent::ToolCall {
                        call_id,
                        name,
                        arguments,
                    });
                }
            }
            "event.tool_result" => {
                if let Some(call_id) = id_of(block, "call_id") {
                    let said = match block.get("output") {
                        Some(Value::String(s)) => trim_block_text(s).to_string(),
                        Some(Value::Null) | None => String::new(),
                        Some(other) => trim_block_text(&other.to_string()).to_string(),
                    };
                    let failed = block.get("is_error").and_then(Value::as_bool) == Some(true);
                    // As a command's output: what it said on stdout, or on stderr when it failed.
                    let output = match failed {
                        false => serde_json::json!({ "stdout": said }),
                        true => serde_json::json!({ "stdout": "", "stderr": said }),
                    };
                    let name = self
                        .tools
                        .get(&call_id)
                        .cloned()
                        .unwrap_or_else(|| "tool".into());
                    out.push(TurnEvent::ToolResult {
                        call_id,
                        name,
                        output,
                        success: !failed,
                        duration_ms: 0,
                    });
                }
            }
            "event.agent_call" => {
                if let (Some(call_id), Some(name)) = (id_of(block, "id"), id_of(block, "name")) {
                    out.push(TurnEvent::AgentCall {
                        call_id,
                        name,
                        task: id_of(block, "task").unwrap_or_default(),
                    });
                }
            }
            "event.warning" => out.push(TurnEvent::Warning {
                text: warning_text(block),
                about: warning_about(block),
            }),
            "event.status" => {
                let state = match text(block, "phase") {
                    Some("tool_use") => StatusState::ToolUse,
                    Some("done") => StatusState::Done,
                    // The markers around a replay: this caller asks for none.
                    Some("replay_start" | "replay_end") => return out,
                    _ => StatusState::Thinking,
                };
                out.push(TurnEvent::Status {
                    state,
                    progress: None,
                    info: None,
                    usage: block.get("usage").filter(|u| u.is_object()).map(usage_of),
                });
            }
            // A prompt block comes only in a replay; questions are asked, terminals end the turn; kinds a
            // newer worker sends are left out (events are advisory).
            _ => {}
        }
        out
    }
}

/// A warning block as a line: the worker gives its kind and values, the words are ours.
/// What a worker's warning is about, for the kinds agentwire's own workers send with values, so this
/// daemon's fronts pass them on by kind too.
fn warning_about(block: &Value) -> Option<WarningAbout> {
    use agentwire_fisk::mapping::{
        WARNING_HISTORY_TRIMMED, WARNING_MODEL_FALLBACK, WARNING_UNKNOWN_TOOL_HINTS,
    };
    let kind = text(block, "kind")?;
    if kind == WARNING_UNKNOWN_TOOL_HINTS {
        let hints = block.get("params")?.as_array()?;
        return Some(WarningAbout::UnknownToolHints {
            hints: hints
                .iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect(),
        });
    }
    if kind == WARNING_HISTORY_TRIMMED {
        let count = block.get("count")?.as_u64()?;
        return Some(WarningAbout::HistoryTrimmed { count });
    }
    if kind == WARNING_MODEL_FALLBACK {
        return Some(WarningAbout::ModelFallback {
            model: text(block, "name")?.to_string(),
            error: text(block, "error").unwrap_or_default().to_string(),
        });
    }
    None
}

fn warning_text(block: &Value) -> String {
    let params: Vec<&str> = block
        .get("params")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let kind = text(block, "kind").unwrap_or("warning");
    let said = if kind == WARNING_QUESTION_ANSWERED {
        format!(
            "the question was answered on the worker by {}",
            params.first().copied().unwrap_or("somebody")
        )
    } else {
        let mut s = format!("the worker warns: {kind}");
        for p in text(block, "name").into_iter().chain(params) {
            s.push(' ');
            s.push_str(p);
        }
        if let Some(e) = text(block, "error") {
            s.push_str(": ");
            s.push_str(e);
        }
        s
    };
    cut(&said, MAX_SAID_BYTES).to_string()
}

/// This turn's failure for the worker's `error` code: the core code of the same meaning where there is
/// one; others fail the agent, naming the code. `accepted`: the ack took the prompt (a budget that ran out
/// part way through a turn is the turn's, not a refusal).
pub fn failure_of(code: &ErrorCode, message: &str, accepted: bool) -> Failure {
    let same: Option<FailureCode> = match code {
        ErrorCode::Suspended => Some(TurnFailure::Suspended.into()),
        ErrorCode::Deferred => Some(TurnFailure::Deferred.into()),
        // Stopped by the worker (a restart cut it off), not by the caller: it can be sent again.
        ErrorCode::Canceled => Some(TurnFailure::Interrupted.into()),
        ErrorCode::NotStarted => Some(TurnFailure::NotStarted.into()),
        ErrorCode::Failed => Some(TurnFailure::AgentFailed.into()),
        ErrorCode::Crashed => Some(TurnFailure::Crashed.into()),
        ErrorCode::ProviderBusy => Some(TurnFailure::ProviderBusy.into()),
        ErrorCode::ProviderRefused => Some(TurnFailure::ProviderRefused.into()),
        ErrorCode::ContextExceeded => Some(TurnFailure::ContextExceeded.into()),
        ErrorCode::BudgetExhausted if accepted => Some(TurnFailure::OverBudget.into()),
        ErrorCode::BudgetExhausted => Some(Refusal::BudgetExhausted.into()),
        ErrorCode::Capacity => Some(Refusal::Capacity.into()),
        ErrorCode::Draining => Some(Refusal::Draining.into()),
        ErrorCode::ConversationBusy => Some(Refusal::ConversationBusy.into()),
        ErrorCode::UnknownConversation => Some(Refusal::UnknownConversation.into()),
        ErrorCode::TurnNotTaken => Some(Refusal::TurnNotTaken.into()),
        ErrorCode::ConfigDrift => Some(Refusal::ConfigDrift.into()),
        _ => None,
    };
    match same {
        Some(c) => Failure::new(c, message),
        None => Failure::new(
            TurnFailure::AgentFailed,
            format!(
                "the fisk-ai worker answered {}: {message}",
                code_shown(code)
            ),
        ),
    }
}

/// A code for a message: the worker's words, cut.
fn code_shown(code: &ErrorCode) -> String {
    code.as_str().chars().take(64).collect()
}

/// This turn's outcome for the reply set's terminal `last`; `before`: the conversation's usage before the
/// turn. With the conversation's usage now, when the terminal says it.
fn outcome_of(last: &Value, kind: &str, before: Usage, accepted: bool) -> (Outcome, Option<Usage>) {
    let now = last.get("usage").filter(|u| u.is_object()).map(usage_of);
    let turn = now.map(|n| spent(before, n)).unwrap_or_default();
    let outcome = match kind {
        "result" => match text(last, "text") {
            Some(t) => Outcome::Result(TurnResult {
                text: t.to_string(),
                usage: turn,
                stop_reason: match text(last, "stop_reason") {
                    None | Some("end_turn") => "stop".into(),
                    Some(r) => r.chars().take(64).collect(),
                },
            }),
            None => fail(
                TurnFailure::AgentFailed,
                "the fisk-ai worker sent a result without text",
            ),
        },
        "error" => {
            let code = ErrorCode::parse(text(last, "code").unwrap_or("failed"));
            let message = cut(text(last, "error").unwrap_or(""), MAX_SAID_BYTES);
            Outcome::Failure(failure_of(&code, message, accepted).with_usage(turn))
        }
        other => fail(
            TurnFailure::AgentFailed,
            format!(
                "the fisk-ai worker ended its reply with {:?}, not a result or an error",
                cut(other, 64)
            ),
        ),
    };
    (outcome, now)
}

fn fail(code: TurnFailure, message: impl Into<String>) -> Outcome {
    Outcome::Failure(Failure::new(code, message))
}

/// The question an `elicit.request.*` message asks, for this turn's asker; `tools`: the names of the calls
/// seen (an approval names its call, not its tool). None when it is not a question this side can put.
fn question_of(q: &Value, tools: &HashMap<String, String>) -> Option<Question> {
    let said = |k: &str| text(q, k).map(|s| cut(s, MAX_SAID_BYTES).to_string());
    let kind_name = text(q, "protocol")?.rsplit('.').next()?;
    let kind = match kind_name {
        "approve" => QuestionKind::Approve {
            command: said("command").unwrap_or_default(),
            display: said("display").or_else(|| said("command"))?,
            tag: said("tag"),
        },
        "confirm" => QuestionKind::Confirm {
            question: said("question")?,
        },
        "input" => QuestionKind::Input {
            question: said("question")?,
            default: said("default"),
        },
        "select" => {
            let options: Vec<QuestionOption> = q
                .get("options")?
                .as_array()?
                .iter()
                .take(MAX_OPTIONS)
                .enumerate()
                .map(|(i, o)| {
                    let label: String = o
                        .as_str()
                        .unwrap_or("")
                        .chars()
                        .take(MAX_OPTION_CHARS)
                        .collect();
                    let label = if label.trim().is_empty() {
                        format!("option {}", i + 1)
                    } else {
                        label
                    };
                    // By position: what the worker's answer names.
                    QuestionOption::new((i + 1).to_string(), label)
                })
                .collect();
            if options.is_empty() {
                return None;
            }
            QuestionKind::Select {
                question: said("question")?,
                options,
                multiple: false,
                freeform: false,
            }
        }
        _ => return None,
    };
    let call = id_of(q, "tool_use_id").or_else(|| id_of(q, "question_id"))?;
    let tool = tools
        .get(&call)
        .cloned()
        .unwrap_or_else(|| kind.name().to_string());
    Some(Question::new(tool, call, kind))
}

/// The reply that goes back for `asked`; None when the turn was cancelled meanwhile (the cancel there
/// closes the question). Nobody to answer is `no_operator`: the command stays unrun.
fn reply_of(asked: Asked, kind: &QuestionKind) -> Option<Reply> {
    let answer = match asked {
        Asked::Answered(a) => a,
        Asked::Cancelled => return None,
        Asked::Unanswered | Asked::Unavailable => return Some(Reply::NoOperator),
    };
    let position = |id: &str| {
        id.parse::<u64>()
            .ok()
            .and_then(|n| n.checked_sub(1))
            .map(Reply::Select)
    };
    Some(
        match (answer, kind) {
            (Answer::Approve { choice }, QuestionKind::Approve { .. }) => {
                Some(Reply::Approve(match choice {
                    ApproveChoice::No => ElicitChoice::No,
                    ApproveChoice::Once => ElicitChoice::Once,
                    // A conversation here is one there: standing for the session is for the conversation.
                    ApproveChoice::Session | ApproveChoice::Always => ElicitChoice::Always,
                }))
            }
            (Answer::Confirm { confirmed }, QuestionKind::Confirm { .. }) => {
                Some(Reply::Confirm(confirmed))
            }
            (Answer::Select { value }, QuestionKind::Select { .. }) => position(&value),
            (Answer::Choices { choices, .. }, QuestionKind::Select { .. }) => {
                choices.first().and_then(|c| position(c))
            }
            (Answer::Input { value }, QuestionKind::Input { .. }) => {
                Some(Reply::Input(value.chars().take(MAX_ANSWER_CHARS).collect()))
            }
            _ => None,
        }
        .unwrap_or(Reply::NoOperator),
    )
}

/// A turn's clock: it runs for the agent's timeout, stopped while a question is with a person.
struct Clock {
    start: Instant,
    timeout: Duration,
    /// Questions open, since when the first was, and how long the clock stood still before.
    stopped: Mutex<(u32, Option<Instant>, Duration)>,
}

impl Clock {
    fn new(timeout: Duration) -> Arc<Clock> {
        Arc::new(Clock {
            start: Instant::now(),
            timeout,
            stopped: Mutex::new((0, None, Duration::ZERO)),
        })
    }

    /// Stops the clock until the guard is dropped.
    fn stop(self: &Arc<Self>) -> Stopped {
        let mut s = lock(&self.stopped);
        s.0 += 1;
        if s.1.is_none() {
            s.1 = Some(Instant::now());
        }
        Stopped(self.clone())
    }

    /// Resolves once the turn's time is up.
    async fn up(&self) {
        loop {
            let due = {
                let s = lock(&self.stopped);
                (s.0 == 0).then(|| self.start + self.timeout + s.2)
            };
            let now = Instant::now();
            match due {
                Some(due) if now >= due => return,
                Some(due) => tokio::time::sleep((due - now).min(CLOCK_TICK)).await,
                None => tokio::time::sleep(CLOCK_TICK).await,
            }
        }
    }
}

/// The clock stopped while a question is open.
struct Stopped(Arc<Clock>);

impl Drop for Stopped {
    fn drop(&mut self) {
        let mut s = lock(&self.0.stopped);
        s.0 = s.0.saturating_sub(1);
        if s.0 == 0 {
            if let Some(since) = s.1.take() {
                s.2 += since.elapsed();
            }
        }
    }
}

/// Why the caller was told to stop following the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Cancelled,
    TimedOut,
}

/// Cancels the request there when the engine stops waiting for this turn (its future dropped).
struct CancelOnDrop(Option<(Arc<Caller>, String, String)>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some((caller, identity, request)) = self.0.take() else {
            return;
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = caller.cancel(&identity, &request).await {
                    tracing::info!(error = %e, "could not cancel a remote fisk-ai run");
                }
            });
        }
    }
}

/// How one prompt sent there went.
enum Sent {
    /// The reply set ended with `last`; what was read of it.
    Ended(Received, Reading),
    /// Told to stop; the cancel went there.
    Stopped(Stop),
    /// The call failed.
    Failed(ClientError),
}

/// Sends `message` (with `token`, the conversation's there) and streams the reply set into `ctx`'s events.
async fn send(
    caller: &Arc<Caller>,
    identity: &str,
    message: &str,
    token: Option<&str>,
    ctx: &TurnContext,
    clock: &Arc<Clock>,
    request: String,
) -> Sent {
    let reading = Arc::new(Mutex::new(Reading::default()));
    // Events go out here as the reply set comes; the caller reads no further while one is being sent, so
    // this holds at most what one read of the subscription brought.
    let (tx, mut rx) = mpsc::unbounded_channel::<TurnEvent>();
    let on = {
        let reading = reading.clone();
        move |m: &Received| {
            for ev in lock(&reading).events(m) {
                let _ = tx.send(ev);
            }
        }
    };
    let answerer: Answerer = {
        let (asker, reading, clock) = (ctx.asker.clone(), reading.clone(), clock.clone());
        Box::new(move |q: Value| {
            let (asker, reading, clock) = (asker.clone(), reading.clone(), clock.clone());
            Box::pin(async move {
                let question = question_of(&q, &lock(&reading).tools);
                let Some(question) = question else {
                    tracing::info!("a fisk-ai question this side cannot put: no operator");
                    return Reply::NoOperator;
                };
                let kind = question.kind.clone();
                let _stopped = clock.stop();
                match reply_of(asker.ask(question).await, &kind) {
                    Some(r) => r,
                    // Cancelled: the cancel there closes the question.
                    None => std::future::pending().await,
                }
            })
        })
    };
    let why = Arc::new(std::sync::OnceLock::new());
    let stop = {
        let (mut cancel, clock, why) = (ctx.cancel.clone(), clock.clone(), why.clone());
        async move {
            let w = tokio::select! {
                () = cancelled(&mut cancel) => Stop::Cancelled,
                () = clock.up() => Stop::TimedOut,
            };
            let _ = why.set(w);
        }
    };
    let call = PromptCall {
        identity,
        request: &request,
        prompt: message,
        token,
        // Each next message: the turn's clock is what gives up on the whole.
        timeout: clock.timeout,
    };
    let mut guard = CancelOnDrop(Some((
        caller.clone(),
        identity.to_string(),
        request.clone(),
    )));
    let prompting = caller.prompt_until(call, stop, on, answerer);
    tokio::pin!(prompting);
    let result = loop {
        tokio::select! {
            biased;
            Some(ev) = rx.recv() => {
                let _ = ctx.events.send(ev).await;
            }
            r = &mut prompting => break r,
        }
    };
    guard.0 = None;
    while let Ok(ev) = rx.try_recv() {
        let _ = ctx.events.send(ev).await;
    }
    if let Some(w) = why.get() {
        return Sent::Stopped(*w);
    }
    match result {
        Ok(mut p) if p.ended => match p.messages.pop() {
            Some(last) => {
                let reading = std::mem::take(&mut *lock(&reading));
                Sent::Ended(last, reading)
            }
            None => Sent::Failed(ClientError::SubscriptionEnded),
        },
        Ok(_) => Sent::Failed(ClientError::SubscriptionEnded),
        Err(e) => Sent::Failed(e),
    }
}

impl Agent for FiskRemote {
    fn card(&self) -> AgentCard {
        AgentCard {
            name: self.name.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: format!(
                "the fisk-ai worker {} on {}",
                self.settings.identity,
                self.settings.connect.shown()
            ),
            models: vec![REMOTE_MODEL.into()],
            default_model: REMOTE_MODEL.into(),
            tools: vec![],
            max_prompt_bytes: MAX_PROMPT_BYTES,
            max_context_tokens: 0,
        }
    }

    fn interrupted(&self, turn: &TurnInput) -> BoxFuture<'static, ()> {
        let (name, settings) = (self.name.clone(), self.settings.clone());
        let (conversation, request) = (turn.conversation_id.clone(), turn.request_id.clone());
        Box::pin(async move {
            match cancel_interrupted(&settings, &conversation, &request).await {
                Ok(true) => {
                    tracing::info!(agent = %name, %request, "cancelled the remote fisk-ai run of a turn a crash cut off")
                }
                Ok(false) => {
                    tracing::debug!(agent = %name, %request, "the remote fisk-ai run of a turn a crash cut off had ended")
                }
                Err(why) => {
                    tracing::warn!(agent = %name, %request, %why, "could not cancel the remote fisk-ai run of a turn a crash cut off")
                }
            }
        })
    }

    fn run(&self, input: TurnInput, ctx: TurnContext) -> BoxFuture<'static, Outcome> {
        let (settings, conversations) = (self.settings.clone(), self.conversations.clone());
        Box::pin(async move {
            let identity = settings.identity.as_str();
            let caller = match Caller::connect_with(&settings.connect, CALLER_NAME).await {
                Ok(c) => Arc::new(c),
                Err(e) => {
                    return fail(
                        TurnFailure::ModelUnavailable,
                        format!("the fisk-ai worker {identity} cannot be reached: {e}"),
                    )
                }
            };
            let clock = Clock::new(settings.timeout);
            let id = conversation_key(&input.conversation_id);
            let mut there = lock(&conversations).get(&id);
            let mut attempt = 0;
            loop {
                let token = there.as_ref().map(|t| t.token.as_str());
                let request = remote_request(&input.conversation_id, &input.request_id, attempt);
                let sent = send(
                    &caller,
                    identity,
                    &input.message,
                    token,
                    &ctx,
                    &clock,
                    request,
                );
                let sent = sent.await;
                let (last, reading) = match sent {
                    Sent::Ended(last, reading) => (last, reading),
                    Sent::Stopped(Stop::Cancelled) => {
                        return fail(TurnFailure::Cancelled, "cancelled (and cancelled there)")
                    }
                    Sent::Stopped(Stop::TimedOut) => {
                        return fail(
                            TurnFailure::ModelUnavailable,
                            format!(
                                "the fisk-ai worker {identity} did not finish within {} s; its run \
                                 was cancelled",
                                settings.timeout.as_secs()
                            ),
                        )
                    }
                    Sent::Failed(e) => return failed_call(identity, e),
                };
                let kind = last.kind().to_string();
                let accepted = reading.accepted == Some(true);
                if kind == "error"
                    && !accepted
                    && there.is_some()
                    && text(&last.json, "code") == Some(ErrorCode::UnknownConversation.as_str())
                {
                    // The worker no longer knows the conversation: it starts anew there.
                    lock(&conversations).forget(&id);
                    there = None;
                    attempt += 1;
                    continue;
                }
                let before = there.as_ref().map(|t| t.usage).unwrap_or_default();
                let (outcome, now) = outcome_of(&last.json, &kind, before, accepted);
                if let Some(token) = reading.token.or(there.map(|t| t.token)) {
                    let usage = now.unwrap_or(before);
                    lock(&conversations).put(&id, There { token, usage });
                }
                return outcome;
            }
        })
    }
}

/// The `request` tag attempt `attempt` of turn `request` of `conversation` is sent under there: `aw-` and
/// 32 hex digits of a SHA-256 of the two, then `-<attempt>` for a resend within the turn (after
/// `unknown_conversation`; the worker answers a tag it has seen from its journal). The same after a
/// restart, so a run a crash cut off is found there without a journal of its own; within the wire's
/// `^[a-zA-Z0-9_-]+$` and 64 characters.
fn remote_request(conversation: &ConversationId, request: &RequestId, attempt: u32) -> String {
    let seed = format!("{}\n{}", conversation.as_str(), request.as_str());
    let digest = ring::digest::digest(&ring::digest::SHA256, seed.as_bytes());
    let hex: String = digest.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    match attempt {
        0 => format!("aw-{hex}"),
        n => format!("aw-{hex}-{n}"),
    }
}

/// Why the run of a turn a crash cut off could not be cancelled there ([`cancel_interrupted`]).
#[derive(Debug, thiserror::Error)]
enum CancelError {
    /// No connection to NATS as the caller.
    #[error("cannot connect: {0}")]
    Connect(#[source] ClientError),
    /// A cancel was not taken (other than no worker running it).
    #[error("{0}")]
    Cancel(#[source] ClientError),
}

/// Cancels the run a turn a crash cut off left there: its tag's, and a resend's. `Ok(false)` when no
/// worker runs either any longer (the run ended meanwhile).
async fn cancel_interrupted(
    settings: &FiskRemoteSettings,
    conversation: &ConversationId,
    request: &RequestId,
) -> Result<bool, CancelError> {
    let identity = settings.identity.as_str();
    let caller = Caller::connect_with(&settings.connect, CALLER_NAME)
        .await
        .map_err(CancelError::Connect)?;
    let mut cancelled = false;
    for attempt in 0..=MAX_RESENDS {
        let tag = remote_request(conversation, request, attempt);
        match caller.cancel(identity, &tag).await {
            Ok(()) => cancelled = true,
            // Not running there (ended, or never sent).
            Err(ClientError::NoResponders(_)) => {}
            Err(e) => return Err(CancelError::Cancel(e)),
        }
    }
    Ok(cancelled)
}

/// The key a conversation is kept under.
fn conversation_key(c: &ConversationId) -> String {
    c.as_str().to_string()
}

/// This turn's failure for a call that failed: the worker cannot be reached, or broke the protocol.
fn failed_call(identity: &str, e: ClientError) -> Outcome {
    match e {
        ClientError::Garbled(_) => fail(
            TurnFailure::AgentFailed,
            format!("the fisk-ai worker {identity} sent a reply that is not JSON"),
        ),
        ClientError::Service { code, text } => fail(
            TurnFailure::AgentFailed,
            format!(
                "the fisk-ai worker {identity} refused the request ({}): {}",
                cut(&code, 16),
                cut(&text, MAX_SAID_BYTES)
            ),
        ),
        ClientError::NoResponders(_) => fail(
            TurnFailure::ModelUnavailable,
            format!("no fisk-ai worker answers as {identity}"),
        ),
        ClientError::Timeout(_) => fail(
            TurnFailure::ModelUnavailable,
            format!("the fisk-ai worker {identity} did not answer in time"),
        ),
        other => fail(
            TurnFailure::ModelUnavailable,
            format!("the fisk-ai worker {identity} cannot be reached: {other}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msg(kind: &str, body: Value) -> Received {
        let mut json = body;
        json["protocol"] = json!(format!("io.choria.fisk-ai.v1.{kind}"));
        Received { json, last: false }
    }

    #[test]
    fn streamed_text_is_not_repeated_by_the_final_block() {
        let mut r = Reading::default();
        let mut texts = Vec::new();
        for (t, fin) in [
            ("You said: ", false),
            ("hello", false),
            ("You said: hello", true),
        ] {
            for ev in r.events(&msg(
                "event.text",
                json!({"block": {"text": t, "final": fin}}),
            )) {
                if let TurnEvent::Text { text } = ev {
                    texts.push(text);
                }
            }
        }
        assert_eq!(texts, ["You said: ", "hello"]);
        // After a tool call the final block is the answer again, whole.
        r.events(&msg(
            "event.tool_call",
            json!({"block": {"id": "c1", "name": "calculator", "input": {"expr": "1+1"}}}),
        ));
        let evs = r.events(&msg(
            "event.text",
            json!({"block": {"text": "2", "final": true}}),
        ));
        assert_eq!(evs, [TurnEvent::Text { text: "2".into() }]);
    }

    #[test]
    fn tool_results_are_named_by_their_call_and_bad_blocks_are_dropped() {
        let mut r = Reading::default();
        r.events(&msg(
            "event.tool_call",
            json!({"block": {"id": "c1", "name": "calculator", "input": {"expr": "2+3"}}}),
        ));
        let evs = r.events(&msg(
            "event.tool_result",
            json!({"block": {"call_id": "c1", "output": "5", "is_error": false}}),
        ));
        assert!(
            matches!(&evs[..], [TurnEvent::ToolResult { name, success: true, output, .. }]
                if name == "calculator" && output["stdout"] == "5"),
            "{evs:?}"
        );
        let long = "x".repeat(MAX_ID_CHARS + 1);
        for bad in [
            json!({"block": {"id": 7, "name": "n"}}),
            json!({"block": {"id": long, "name": "n"}}),
            json!({"block": "not an object"}),
            json!({}),
        ] {
            assert!(r.events(&msg("event.tool_call", bad)).is_empty());
        }
    }

    #[test]
    fn only_a_token_of_the_schema_is_kept() {
        let mut r = Reading::default();
        r.events(&msg(
            "ack",
            json!({"accepted": true, "conversation_token": "3Hzmp8Vq_r-1"}),
        ));
        assert_eq!(r.token.as_deref(), Some("3Hzmp8Vq_r-1"));
        for bad in ["", "a b", "../x", &"t".repeat(MAX_TOKEN_CHARS + 1)] {
            let mut r = Reading::default();
            r.events(&msg(
                "ack",
                json!({"accepted": true, "conversation_token": bad}),
            ));
            assert_eq!(r.token, None, "{bad:?}");
        }
    }

    #[test]
    fn error_codes_keep_their_meaning() {
        let code = |c: &str, accepted| failure_of(&ErrorCode::parse(c), "m", accepted).code;
        assert_eq!(
            code("suspended", true),
            FailureCode::from(TurnFailure::Suspended)
        );
        assert_eq!(
            code("provider_busy", true),
            FailureCode::from(TurnFailure::ProviderBusy)
        );
        assert_eq!(
            code("capacity", false),
            FailureCode::from(Refusal::Capacity)
        );
        assert_eq!(
            code("budget_exhausted", true),
            FailureCode::from(TurnFailure::OverBudget)
        );
        let f = failure_of(&ErrorCode::parse("brand_new"), "boom", true);
        assert_eq!(f.code, FailureCode::from(TurnFailure::AgentFailed));
        assert!(f.message.contains("brand_new") && f.message.contains("boom"));
    }

    #[test]
    fn a_result_is_the_outcome_with_what_the_conversation_grew_by() {
        let before = Usage {
            input_tokens: 10,
            output_tokens: 4,
        };
        let (o, now) = outcome_of(
            &json!({"text": "hi", "stop_reason": "end_turn",
                    "usage": {"input_tokens": 13, "output_tokens": 6}}),
            "result",
            before,
            true,
        );
        match o {
            Outcome::Result(r) => {
                assert_eq!((r.text.as_str(), r.stop_reason.as_str()), ("hi", "stop"));
                assert_eq!((r.usage.input_tokens, r.usage.output_tokens), (3, 2));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(now.map(|u| u.input_tokens), Some(13));
        let (o, _) = outcome_of(&json!({"text": 5}), "result", before, true);
        assert!(matches!(o, Outcome::Failure(_)));
    }

    #[test]
    fn questions_are_put_here_and_answers_go_back_in_the_workers_terms() {
        let mut tools = HashMap::new();
        tools.insert("call_1".to_string(), "shell".to_string());
        let q = question_of(
            &json!({"protocol": "io.choria.fisk-ai.v1.elicit.request.approve", "question_id": "q1",
                    "tool_use_id": "call_1", "command": "rm", "display": "rm x", "tag": "ai:confirm"}),
            &tools,
        )
        .unwrap();
        assert_eq!((q.tool.as_str(), q.call_id.as_str()), ("shell", "call_1"));
        let once = Asked::Answered(Answer::Approve {
            choice: ApproveChoice::Once,
        });
        assert_eq!(
            reply_of(once, &q.kind),
            Some(Reply::Approve(ElicitChoice::Once))
        );
        assert_eq!(
            reply_of(Asked::Unavailable, &q.kind),
            Some(Reply::NoOperator)
        );
        assert_eq!(reply_of(Asked::Cancelled, &q.kind), None);

        let s = question_of(
            &json!({"protocol": "io.choria.fisk-ai.v1.elicit.request.select", "question_id": "q2",
                    "question": "which?", "options": ["red", "", 3]}),
            &tools,
        )
        .unwrap();
        assert_eq!(s.kind.options().len(), 3);
        let picked = Asked::Answered(Answer::Select { value: "2".into() });
        assert_eq!(reply_of(picked, &s.kind), Some(Reply::Select(1)));
        assert!(question_of(
            &json!({"protocol": "io.choria.fisk-ai.v1.elicit.request.select", "question_id": "q3",
                    "question": "which?", "options": []}),
            &tools
        )
        .is_none());
        assert!(question_of(&json!({"protocol": 1}), &tools).is_none());
    }

    #[test]
    fn a_turns_request_tag_there_is_the_same_after_a_restart_and_within_the_wire() {
        let c = ConversationId::new("nipxx:abc:s1").unwrap();
        let r = RequestId::new("nipxx:0123").unwrap();
        let first = remote_request(&c, &r, 0);
        assert_eq!(first, remote_request(&c, &r, 0), "derived, not drawn");
        let resend = remote_request(&c, &r, 1);
        assert_eq!(resend, format!("{first}-1"));
        let other = RequestId::new("nipxx:0124").unwrap();
        assert_ne!(first, remote_request(&c, &other, 0));
        let elsewhere = ConversationId::new("nipxx:abc:s2").unwrap();
        assert_ne!(first, remote_request(&elsewhere, &r, 0));
        for tag in [&first, &resend] {
            assert!(tag.len() <= 64, "{tag}");
            assert!(
                tag.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
                "{tag}"
            );
        }
    }

    #[test]
    fn the_least_recently_used_conversation_is_forgotten_first() {
        let mut c = Conversations::default();
        let there = |t: &str| There {
            token: t.into(),
            usage: Usage::default(),
        };
        for i in 0..MAX_CONVERSATIONS {
            c.put(&format!("c{i}"), there("t"));
        }
        assert!(c.get("c0").is_some());
        c.put("new", there("n"));
        assert_eq!(c.by_id.len(), MAX_CONVERSATIONS);
        assert!(c.get("c0").is_some(), "used lately: kept");
        assert!(c.get("c1").is_none(), "the least recently used: gone");
        c.forget("new");
        assert!(c.get("new").is_none());
        assert_eq!(c.by_id.len(), c.by_use.len());
    }
}
