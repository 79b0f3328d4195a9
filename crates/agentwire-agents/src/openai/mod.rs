//! A model behind an OpenAI-compatible chat completions API as the agent (`kind = "openai"`): Ollama,
//! llama.cpp's server, vLLM, LM Studio or a cloud API. Each turn streams a completion (SSE), shows its text
//! and reasoning as they come, runs the tools the model calls and calls the model again with their results,
//! until it answers or [`MAX_TOOL_ITERATIONS`] rounds have passed, or the turn's token budget is spent. The
//! pure parts are beside this driver: [`budget`] (whether another model call may be made), [`sse`]
//! (framing), [`stream`] (chunks into a reply), [`errors`] (refusals into failures), [`history`] (earlier
//! turns fitted to the context window) and [`tools`] (the built-ins); [`shell`] runs the
//! approval-gated `shell` tool; [`roost_tools`] and [`roost_peer`] are the roost tools (`tools = ["roost"]`),
//! and [`concierge_tools`] the roost concierge's (`tools = ["concierge"]`).

pub mod budget;
pub mod concierge_tools;
pub mod delegate;
pub mod errors;
pub mod history;
pub mod mcp;
pub mod roost_peer;
pub mod roost_tools;
pub mod shell;
pub mod sse;
pub mod stream;
pub mod tool_hints;
pub mod tools;

use agentwire_core::{
    Answer, Asked, CallAnswer, Failure, Outcome, Question, QuestionKind, StatusState, TurnEvent,
    TurnFailure, TurnResult, Usage, WarningAbout,
};
use agentwire_engine::metrics::Metrics;
use agentwire_engine::telemetry::{attr, TRACEPARENT};
use agentwire_engine::{
    cancelled, Agent, AgentCard, CancelSignal, ToolSpec, TurnContext, TurnInput, TurnTrace,
};
use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use stream::{Accumulator, Piece, Reply, ToolCall};

/// The most model calls one turn makes: the model answers, or calls tools and is called again with their
/// results, at most this many times. A model that keeps calling tools is stopped rather than left to spin.
pub const MAX_TOOL_ITERATIONS: usize = 8;
/// How long connecting to the model server may take: a server that does not accept a connection in 10 s
/// is down, and the turn says so instead of waiting out the whole request timeout.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most bytes of a non-streamed answer read (a server that ignores `stream`): as large as a streamed
/// reply may grow.
const MAX_PLAIN_BODY_BYTES: usize = stream::MAX_REPLY_BYTES + 64 * 1024;
/// The most bytes of an error body read, for its message.
const MAX_ERROR_BODY_BYTES: usize = 16 * 1024;
/// How long the check at start waits for the model server's `GET /models`: a healthy server answers at
/// once, and a start should not hang on one that does not.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest prompt the agent takes.
const MAX_PROMPT_BYTES: usize = 1024 * 1024;
/// A failed tool call's `error.type` on its `execute_tool` span: the error's text is the tool's words
/// (content), so the span says only that it failed.
const TOOL_ERROR_TYPE: &str = "tool_error";
/// A model call the requester cut short: its `chat` span's `error.type`.
const CANCELLED_ERROR_TYPE: &str = "cancelled";

/// An API key: never shown by `Debug`, so it cannot reach a log line through a config dump.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(pub String);

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// One `kind = "openai"` agent, as the configuration resolved it.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenAiConfig {
    /// The agent's name.
    pub name: String,
    /// The API's base URL, up to and including `/v1` (`…/chat/completions` is added).
    pub base_url: String,
    /// Models offered; the first is the default (not empty).
    pub models: Vec<String>,
    /// The key sent as `Authorization: Bearer`, when the server needs one.
    pub api_key: Option<ApiKey>,
    /// The system prompt, when there is one.
    pub system_prompt: Option<String>,
    /// The built-in tools the model may call (names from [`tools::BUILTIN_TOOLS`]), and
    /// [`roost_tools::ROOST_TOOL`] for the roost tools (offered once [`OpenAiAgent::with_roost`] gave the
    /// connection), [`concierge_tools::CONCIERGE_TOOL`] for the concierge tools (once
    /// [`OpenAiAgent::with_concierge`] gave them).
    pub tools: Vec<String>,
    /// How long one model call (connection, and the whole stream) may take.
    pub request_timeout: Duration,
    /// The context window announced on the agent's card.
    pub max_context_tokens: u64,
    /// Where the `shell` tool runs its commands.
    pub shell_dir: std::path::PathBuf,
    /// What the `shell` tool's commands get in their environment beyond the allowlist (the agent's `env`
    /// and `pass_env`); never the daemon's other variables, its API key among them.
    pub env: agentwire_core::child_env::ChildEnv,
}

/// Serves turns with a model behind an OpenAI-compatible API.
pub struct OpenAiAgent {
    config: Arc<OpenAiConfig>,
    http: reqwest::Client,
    mcp: Option<Arc<mcp::McpServers>>,
    roost: Option<Arc<roost_peer::RoostPeer>>,
    concierge: Option<Arc<concierge_tools::ConciergeTools>>,
    delegates: delegate::Delegates,
    metrics: Option<Arc<Metrics>>,
}

impl OpenAiAgent {
    /// The agent for `config`, calling the server with `http` (built by [`http_client`]).
    pub fn new(config: OpenAiConfig, http: reqwest::Client) -> Self {
        OpenAiAgent {
            config: Arc::new(config),
            http,
            mcp: None,
            roost: None,
            concierge: None,
            delegates: delegate::Delegates::default(),
            metrics: None,
        }
    }

    /// The agent with remote agents it may call as tools ([`delegate`]).
    pub fn with_delegates(mut self, delegates: delegate::Delegates) -> Self {
        self.delegates = delegates;
        self
    }

    /// The agent timing its model calls into `metrics` (the daemon's): each call's duration and a streamed
    /// call's time to its first token.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The agent with the roost tools, over this connection (when its config lists
    /// [`roost_tools::ROOST_TOOL`]).
    pub fn with_roost(mut self, peer: Arc<roost_peer::RoostPeer>) -> Self {
        self.roost = Some(peer);
        self
    }

    /// The agent with the concierge tools (when its config lists [`concierge_tools::CONCIERGE_TOOL`]).
    pub fn with_concierge(mut self, tools: Arc<concierge_tools::ConciergeTools>) -> Self {
        self.concierge = Some(tools);
        self
    }

    /// The agent with the tools of these MCP servers too.
    pub fn with_mcp(mut self, servers: Arc<mcp::McpServers>) -> Self {
        self.mcp = Some(servers);
        self
    }

    /// Asks the model server what models it has (`GET …/models`), as a check at start: `Err` says why it
    /// would fail a turn (unreachable, refused, not an API), with no secret in it.
    pub async fn probe(&self) -> Result<(), ProbeError> {
        let url = format!("{}/models", self.config.base_url.trim_end_matches('/'));
        let mut request = self.http.get(&url).timeout(PROBE_TIMEOUT);
        if let Some(key) = &self.config.api_key {
            request = request.bearer_auth(&key.0);
        }
        match request.send().await {
            Ok(r) if r.status().is_success() => Ok(()),
            Ok(r) if r.status() == reqwest::StatusCode::NOT_FOUND => Err(ProbeError::NotFound),
            Ok(r) => Err(ProbeError::Status(r.status())),
            Err(e) if e.is_timeout() => Err(ProbeError::TimedOut {
                after: PROBE_TIMEOUT,
                source: e.without_url(),
            }),
            Err(e) if e.is_connect() => Err(ProbeError::CannotConnect(e.without_url())),
            Err(e) => {
                let key = self.config.api_key.as_ref().map_or("", |k| k.0.as_str());
                let words = e.without_url().to_string();
                Err(ProbeError::Failed {
                    words: agentwire_core::redact_secrets(&words, &[key], "[redacted]"),
                })
            }
        }
    }

    /// Where the model server is, for a log line: the base URL's scheme, host, port and path, never a
    /// user-info or a query (either may hold a key).
    pub fn server(&self) -> String {
        match reqwest::Url::parse(&self.config.base_url) {
            Ok(u) => format!(
                "{}://{}{}{}",
                u.scheme(),
                u.host_str().unwrap_or(""),
                u.port().map(|p| format!(":{p}")).unwrap_or_default(),
                u.path().trim_end_matches('/')
            ),
            Err(_) => "(not a URL)".into(),
        }
    }

    /// The built-ins configured, the roost tools and the concierge tools when it has them, its delegates,
    /// then every MCP server's tools (as last listed).
    fn tool_specs(&self) -> Vec<ToolSpec> {
        let mut specs: Vec<ToolSpec> = self
            .config
            .tools
            .iter()
            .filter_map(|t| tools::builtin(t))
            .collect();
        if self.roost.is_some() {
            specs.extend(roost_tools::specs());
        }
        if self.concierge.is_some() {
            specs.extend(concierge_tools::specs());
        }
        specs.extend(self.delegates.specs());
        if let Some(mcp) = &self.mcp {
            specs.extend(mcp.tools());
        }
        specs
    }
}

/// The path of the chat completions call, added to the base URL.
/// The code a call of a tool the agent does not offer carries in its result (NIP-XX's error code for a
/// feature the agent does not have).
const UNSUPPORTED_TOOL: &str = "UNSUPPORTED_FEATURE";

const CHAT_COMPLETIONS: &str = "/chat/completions";

/// Whether `url` can be a model server's base URL: `http://` or `https://` with a host, not already ending
/// in [`CHAT_COMPLETIONS`] (a common paste, which would call `…/chat/completions/chat/completions`).
pub fn check_base_url(url: &str) -> Result<(), BaseUrlError> {
    match reqwest::Url::parse(url) {
        Ok(u) if u.path().trim_end_matches('/').ends_with(CHAT_COMPLETIONS) => {
            Err(BaseUrlError::ChatCompletions)
        }
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => Ok(()),
        // Not the URL itself: its query may hold a key.
        _ => Err(BaseUrlError::NotHttp),
    }
}

/// Why a URL cannot be a model server's base URL ([`check_base_url`]). Neither says the URL: its
/// user-info or query may hold a key.
#[derive(Debug, thiserror::Error)]
pub enum BaseUrlError {
    /// It already ends in [`CHAT_COMPLETIONS`], which the agent adds itself.
    #[error(
        "ends in {CHAT_COMPLETIONS}: give the API's base (such as http://127.0.0.1:8080/v1); the agent adds {CHAT_COMPLETIONS} itself"
    )]
    ChatCompletions,
    /// Not a URL, or not `http://` or `https://` with a host.
    #[error("not an http:// or https:// URL with a host")]
    NotHttp,
}

/// Why the check at start ([`OpenAiAgent::probe`]) says a turn would fail: in words with no secret in
/// them (no URL, no key).
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// `GET …/models` answered 404 Not Found.
    #[error("answered 404 Not Found: base_url may be wrong, or the server has no /models")]
    NotFound,
    /// `GET …/models` answered another status that is not a success.
    #[error("answered {0}")]
    Status(reqwest::StatusCode),
    /// No answer within the probe's timeout.
    #[error("no answer within {after:?}")]
    TimedOut {
        /// How long it waited.
        after: Duration,
        /// The client's error (its URL left out).
        #[source]
        source: reqwest::Error,
    },
    /// No connection to the server.
    #[error("cannot connect")]
    CannotConnect(#[source] reqwest::Error),
    /// The request failed otherwise: the client's words, without the URL and with the key redacted
    /// (so not the client's error itself).
    #[error("{words}")]
    Failed {
        /// The client's error, said safely.
        words: String,
    },
}

/// Why no HTTP client for model servers ([`http_client`]) could be built.
#[derive(Debug, thiserror::Error)]
pub enum HttpClientError {
    /// rustls refused its safe default protocol versions with the ring provider.
    #[error("{0}")]
    Tls(#[source] rustls::Error),
    /// reqwest could not build the client.
    #[error("cannot build the HTTP client: {0}")]
    Build(#[source] reqwest::Error),
}

/// An HTTP client for model servers: rustls with the ring provider and the webpki roots (as everywhere in
/// agentwire), [`CONNECT_TIMEOUT`] to connect and `timeout` for a whole call.
pub fn http_client(timeout: Duration) -> Result<reqwest::Client, HttpClientError> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(HttpClientError::Tls)?
    .with_root_certificates(roots)
    .with_no_client_auth();
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(timeout)
        .tls_backend_preconfigured(tls)
        .build()
        .map_err(HttpClientError::Build)
}

impl Agent for OpenAiAgent {
    fn card(&self) -> AgentCard {
        AgentCard {
            name: self.config.name.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: format!("{} over an OpenAI-compatible API", self.config.models[0]),
            models: self.config.models.clone(),
            default_model: self.config.models[0].clone(),
            tools: self.tool_specs(),
            max_prompt_bytes: MAX_PROMPT_BYTES,
            max_context_tokens: self.config.max_context_tokens,
        }
    }

    fn wants_history(&self) -> bool {
        true
    }

    fn run(&self, input: TurnInput, ctx: TurnContext) -> BoxFuture<'static, Outcome> {
        let tools = self.tool_specs();
        // The tools this turn may call, MCP servers' among them, are the metrics' tool labels; a name the
        // model makes up is not.
        if let Some(m) = &self.metrics {
            m.name_tools(tools.iter().map(|t| t.name.as_str()));
        }
        let turn = Turn {
            config: self.config.clone(),
            http: self.http.clone(),
            tools,
            mcp: self.mcp.clone(),
            roost: self.roost.clone(),
            concierge: self.concierge.clone(),
            delegates: self.delegates.clone(),
            metrics: self.metrics.clone(),
            conversation: input.conversation_id.to_string(),
            request: input.request_id.to_string(),
            ctx,
        };
        Box::pin(turn.run(input))
    }
}

/// NIP-XX `thinking` levels as `reasoning_effort`: the API's levels are low, medium and high.
fn reasoning_effort(thinking: Option<&str>) -> Option<&'static str> {
    match thinking? {
        "low" => Some("low"),
        "medium" => Some("medium"),
        "high" | "max" => Some("high"),
        _ => None,
    }
}

fn fail(code: TurnFailure, message: impl Into<String>, usage: Usage) -> Outcome {
    let mut f = Failure::new(code, message);
    f.usage = usage;
    Outcome::Failure(f)
}

/// How one model call ended, when it gave no reply.
enum CallEnd {
    /// The turn ends with this.
    Failed(Failure),
    /// The model itself is unavailable; the next model may be tried.
    NextModel(Failure),
    /// The requester cancelled.
    Cancelled,
}

struct Turn {
    config: Arc<OpenAiConfig>,
    http: reqwest::Client,
    tools: Vec<ToolSpec>,
    mcp: Option<Arc<mcp::McpServers>>,
    roost: Option<Arc<roost_peer::RoostPeer>>,
    concierge: Option<Arc<concierge_tools::ConciergeTools>>,
    delegates: delegate::Delegates,
    metrics: Option<Arc<Metrics>>,
    /// The turn's conversation: a hosted roost job's (`roost:<job id>`) makes the roost tools the job's,
    /// and the concierge tools work only there.
    conversation: String,
    /// The turn's request id (a delegate's turn there is named after it).
    request: String,
    ctx: TurnContext,
}

impl Turn {
    async fn send(&self, event: TurnEvent) {
        let _ = self.ctx.events.send(event).await;
    }

    async fn run(self, input: TurnInput) -> Outcome {
        // A resumed turn picks up where it was parked: the messages up to its last finished step, and the
        // text already streamed.
        let resumed = input.resume.as_ref().map(|r| &r.checkpoint);
        let mut messages: Vec<Value> = match resumed.and_then(|c| c["messages"].as_array()) {
            Some(m) => m.clone(),
            None => {
                let names: Vec<&str> = self.tools.iter().map(|t| t.name.as_str()).collect();
                let (system, unknown) = tool_hints::with_hints(
                    self.config.system_prompt.as_deref(),
                    &input.tool_hints,
                    &names,
                );
                if !unknown.is_empty() {
                    self.send(TurnEvent::Warning {
                        text: format!(
                            "tool hints naming no tool of this agent's, left out: {}",
                            unknown.join(", ")
                        ),
                        about: Some(WarningAbout::UnknownToolHints { hints: unknown }),
                    })
                    .await;
                }
                let (m, dropped) = history::messages(
                    system.as_deref(),
                    &input.history,
                    &input.message,
                    self.config.max_context_tokens,
                );
                if dropped > 0 {
                    self.send(TurnEvent::Warning {
                        text: format!(
                            "the {dropped} oldest turns of this conversation were left out to fit the context window"
                        ),
                        about: Some(WarningAbout::HistoryTrimmed {
                            count: dropped as u64,
                        }),
                    })
                    .await;
                }
                m
            }
        };
        let mut text = resumed
            .and_then(|c| c["text"].as_str())
            .unwrap_or_default()
            .to_string();
        let mut usage = Usage::default();
        let mut models: Vec<String> = std::iter::once(input.model.clone())
            .chain(input.fallback_models.iter().cloned())
            .collect();
        models.dedup();
        let effort = reasoning_effort(input.thinking.as_deref());
        let mut cancel = self.ctx.cancel.clone();
        let answers: &[CallAnswer] = input
            .resume
            .as_ref()
            .map(|r| r.answers.as_slice())
            .unwrap_or(&[]);
        let mut last_tool_error = None::<String>;
        // Calls a parked turn had not run yet (one was waiting for its approval) run first.
        let pending: Vec<ToolCall> = resumed
            .and_then(|c| c["pending"].as_array())
            .map(|calls| calls.iter().filter_map(call_from_json).collect())
            .unwrap_or_default();
        if !pending.is_empty() {
            // The calls' results go to the next model call only.
            if let Some(f) = budget::exhausted(self.ctx.token_budget, usage) {
                return Outcome::Failure(f);
            }
            if let Err(parked) = self
                .run_tools(&pending, &mut messages, answers, &mut last_tool_error)
                .await
            {
                return parked.outcome(messages, text, usage);
            }
        }
        for _ in 0..MAX_TOOL_ITERATIONS {
            if let Some(f) = budget::exhausted(self.ctx.token_budget, usage) {
                return Outcome::Failure(f);
            }
            let reply = loop {
                let model = models[0].clone();
                match self.call(&model, &messages, effort, &mut cancel).await {
                    Ok(reply) => break reply,
                    Err(CallEnd::NextModel(f)) if models.len() > 1 => {
                        models.remove(0);
                        self.send(TurnEvent::Warning {
                            text: format!("{}; trying {}", f.message, models[0]),
                            about: Some(WarningAbout::ModelFallback {
                                model: models[0].clone(),
                                error: f.message,
                            }),
                        })
                        .await;
                    }
                    Err(CallEnd::NextModel(mut f) | CallEnd::Failed(mut f)) => {
                        f.usage = usage;
                        return Outcome::Failure(f);
                    }
                    Err(CallEnd::Cancelled) => {
                        let mut f = Failure::new(
                            TurnFailure::Suspended,
                            "stopped: the turn was cancelled while the model answered",
                        );
                        f.usage = usage;
                        f.checkpoint = Some(json!({ "messages": messages, "text": text }));
                        return Outcome::Failure(f);
                    }
                }
            };
            usage = usage.plus(reply.usage);
            text.push_str(&reply.text);
            if reply.tool_calls.is_empty() {
                if text.trim().is_empty() {
                    return match last_tool_error {
                        Some(e) => fail(
                            TurnFailure::ToolError,
                            format!("no answer after a tool failed: {e}"),
                            usage,
                        ),
                        None => fail(
                            TurnFailure::EmptyResponse,
                            "the model answered nothing",
                            usage,
                        ),
                    };
                }
                return Outcome::Result(TurnResult {
                    text,
                    usage,
                    stop_reason: reply.finish_reason.unwrap_or_else(|| "stop".into()),
                });
            }
            // A tool round feeds the next model call only: none is run once the budget forbids that call.
            if let Some(f) = budget::exhausted(self.ctx.token_budget, usage) {
                return Outcome::Failure(f);
            }
            // The call that asked for tools has ended: what it consumed, as the spec's status carries it.
            self.send(TurnEvent::Status {
                state: StatusState::ToolUse,
                progress: None,
                info: None,
                usage: Some(reply.usage),
            })
            .await;
            messages.push(assistant_calls(&reply));
            last_tool_error = None;
            if let Err(parked) = self
                // Answers given to a parked turn are for its pending calls only: a later round's calls
                // (whose ids a server may number anew) are asked about afresh.
                .run_tools(&reply.tool_calls, &mut messages, &[], &mut last_tool_error)
                .await
            {
                return parked.outcome(messages, text, usage);
            }
        }
        let rounds =
            format!("the model was still calling tools after {MAX_TOOL_ITERATIONS} rounds");
        match last_tool_error {
            Some(e) => fail(
                TurnFailure::ToolError,
                format!("{rounds}, the last failing: {e}"),
                usage,
            ),
            None => fail(
                TurnFailure::AgentFailed,
                format!("{rounds}; stopped"),
                usage,
            ),
        }
    }

    /// Runs `calls` in order, adding each result to `messages`. Stops at a `shell` call nobody approved in
    /// time (or a cancel while its question was open): the turn parks with the calls not yet run.
    async fn run_tools(
        &self,
        calls: &[ToolCall],
        messages: &mut Vec<Value>,
        answers: &[CallAnswer],
        last_error: &mut Option<String>,
    ) -> Result<(), Parked> {
        for (at, call) in calls.iter().enumerate() {
            let arguments: Value = serde_json::from_str(&call.arguments)
                .unwrap_or_else(|_| Value::String(call.arguments.clone()));
            self.send(TurnEvent::Status {
                state: StatusState::ToolUse,
                progress: None,
                info: Some(call.name.clone()),
                usage: None,
            })
            .await;
            self.send(TurnEvent::ToolCall {
                call_id: call.id.clone(),
                name: call.name.clone(),
                arguments,
            })
            .await;
            let started = Instant::now();
            let span = self.ctx.trace.execute_tool(&call.name, &call.id);
            span.set_content(attr::TOOL_ARGUMENTS, || call.arguments.clone());
            let result = match self.tool_result(call, answers, &span).await {
                Ok(r) => r,
                Err(why) => {
                    // Not run: the span ends without a result, and the resumed turn runs it anew.
                    span.end();
                    return Err(Parked {
                        why,
                        pending: calls[at..].to_vec(),
                    });
                }
            };
            let (output, success) = match result {
                Ok(v) => (v, true),
                // A tool the agent does not offer (not in its ai.info's tool_names): never run, refused
                // back to the model, and its telemetry says UNSUPPORTED_FEATURE.
                Err(e) if !self.tools.iter().any(|t| t.name == call.name) => {
                    *last_error = Some(format!("{}: {e}", call.name));
                    span.fail(UNSUPPORTED_TOOL);
                    (json!({ "error": e, "code": UNSUPPORTED_TOOL }), false)
                }
                Err(e) => {
                    *last_error = Some(format!("{}: {e}", call.name));
                    span.fail(TOOL_ERROR_TYPE);
                    (json!({ "error": e }), false)
                }
            };
            span.set_content(attr::TOOL_RESULT, || output.to_string());
            span.end();
            if success {
                if let Some((name, task)) =
                    roost_tools::delegation(&call.name, &call.arguments, &output)
                {
                    self.send(TurnEvent::AgentCall {
                        call_id: call.id.clone(),
                        name,
                        task,
                    })
                    .await;
                }
            }
            self.send(TurnEvent::ToolResult {
                call_id: call.id.clone(),
                name: call.name.clone(),
                output: output.clone(),
                success,
                duration_ms: started.elapsed().as_millis() as u64,
            })
            .await;
            messages.push(json!({
                "role": "tool",
                "tool_call_id": call.id,
                "content": output.to_string(),
            }));
        }
        Ok(())
    }

    /// What `call` returns (its output, or an error for the model), or why the turn parks before it runs.
    async fn tool_result(
        &self,
        call: &ToolCall,
        answers: &[CallAnswer],
        span: &TurnTrace,
    ) -> Result<Result<Value, String>, ParkReason> {
        if !self.tools.iter().any(|t| t.name == call.name) {
            return Ok(Err(format!("this agent has no tool named {:?}", call.name)));
        }
        if let (Some(peer), true) = (&self.roost, roost_tools::is_roost_tool(&call.name)) {
            return Ok(peer
                .run(&call.name, &call.arguments, &self.conversation)
                .await);
        }
        if let (Some(concierge), true) = (
            &self.concierge,
            concierge_tools::is_concierge_tool(&call.name),
        ) {
            return Ok(concierge
                .run(&call.name, &call.arguments, &self.conversation)
                .await);
        }
        if self.delegates.has(&call.name) {
            let which = delegate::Call {
                conversation: &self.conversation,
                turn: &self.request,
                id: &call.id,
            };
            return Ok(self
                .delegates
                .call(&call.name, which, &call.arguments, &self.ctx)
                .await);
        }
        if !self.config.tools.contains(&call.name) {
            let called = match &self.mcp {
                Some(mcp) => {
                    let traceparent = span.traceparent();
                    mcp.call(&call.name, &call.arguments, traceparent.as_deref())
                        .await
                }
                None => None,
            };
            return Ok(called.unwrap_or_else(|| Err(format!("no tool named {:?}", call.name))));
        }
        if call.name != tools::SHELL_TOOL {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            return Ok(tools::run_builtin(&call.name, &call.arguments, now));
        }
        let command = match tools::parse_arguments(&call.arguments)
            .map(|a| a["command"].as_str().map(String::from))
        {
            Ok(Some(c)) if !c.trim().is_empty() => c,
            Ok(_) => return Ok(Err("shell takes {\"command\": \"...\"}".into())),
            Err(e) => return Ok(Err(e)),
        };
        // An answer given to the parked turn counts; otherwise a person is asked, each call (a front that
        // keeps standing approvals settles the question itself).
        let given = answers
            .iter()
            .find(|a| a.call_id == call.id)
            .map(|a| a.answer.clone());
        let asked = match given {
            Some(a) => Asked::Answered(a),
            None => {
                let kind = QuestionKind::Approve {
                    command: command.split_whitespace().next().unwrap_or("").to_string(),
                    display: command.clone(),
                    tag: None,
                };
                self.ctx
                    .asker
                    .ask(Question::new(tools::SHELL_TOOL, call.id.clone(), kind))
                    .await
            }
        };
        match asked {
            Asked::Answered(Answer::Approve { choice }) if choice.approves() => Ok(shell::run(
                &command,
                &self.config.shell_dir,
                shell::SHELL_TIMEOUT,
                &self.config.env,
            )
            .await),
            Asked::Answered(_) => Ok(Err("the person declined to run it".into())),
            Asked::Unavailable => Ok(Err(
                "not run: no one can approve commands over this protocol".into(),
            )),
            Asked::Unanswered => Err(ParkReason::Unanswered(command)),
            Asked::Cancelled => Err(ParkReason::Cancelled),
        }
    }

    /// One streamed model call, timed into the metrics (when the agent has them) unless it was cancelled.
    async fn call(
        &self,
        model: &str,
        messages: &[Value],
        effort: Option<&str>,
        cancel: &mut CancelSignal,
    ) -> Result<Reply, CallEnd> {
        self.send(TurnEvent::Status {
            state: StatusState::Thinking,
            progress: None,
            info: Some(format!("asking {model}")),
            usage: None,
        })
        .await;
        let mut body = json!({
            "model": model,
            "messages": messages,
            "stream": true,
            "stream_options": { "include_usage": true },
        });
        if !self.tools.is_empty() {
            body["tools"] = self
                .tools
                .iter()
                .map(|t| {
                    json!({ "type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.input_schema,
                    }})
                })
                .collect();
        }
        if let Some(effort) = effort {
            body["reasoning_effort"] = json!(effort);
        }
        let url = format!(
            "{}{CHAT_COMPLETIONS}",
            self.config.base_url.trim_end_matches('/')
        );
        let mut request = self
            .http
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .body(body.to_string());
        if let Some(key) = &self.config.api_key {
            request = request.bearer_auth(&key.0);
        }
        // The call's span, named to the model server through `traceparent` (W3C trace context).
        let span = self.ctx.trace.chat(model);
        if let Some(tp) = span.traceparent() {
            request = request.header(TRACEPARENT, tp);
        }
        let timer = CallTimer {
            sent: Instant::now(),
            model: self.model_label(model),
        };
        let ended = self.exchange(request, model, cancel, &timer).await;
        match &ended {
            Ok(reply) => {
                span.set_usage(reply.usage.input_tokens, reply.usage.output_tokens);
                let reason = match (&reply.finish_reason, reply.tool_calls.is_empty()) {
                    (Some(r), _) => r.as_str(),
                    (None, false) => "tool_calls",
                    (None, true) => "stop",
                };
                span.set_strs(attr::FINISH_REASONS, &[reason]);
                span.set_answer(&reply.text);
            }
            Err(CallEnd::Failed(f) | CallEnd::NextModel(f)) => span.fail(f.code.as_str()),
            Err(CallEnd::Cancelled) => span.fail(CANCELLED_ERROR_TYPE),
        }
        span.end();
        // A call the requester cut short says nothing about the model server.
        if let (Some(m), false) = (&self.metrics, matches!(ended, Err(CallEnd::Cancelled))) {
            m.model_call(&self.config.name, timer.model, timer.sent.elapsed());
        }
        ended
    }

    /// The model's label in the metrics: a model this agent offers by its name, any other `other` (a
    /// front that passes a requester's model unchecked must not add series).
    fn model_label<'a>(&'a self, model: &'a str) -> &'a str {
        match self.config.models.iter().any(|m| m == model) {
            true => model,
            false => "other",
        }
    }

    /// Sends one model call and reads its answer: streamed, or whole from a server that ignores `stream`.
    async fn exchange(
        &self,
        request: reqwest::RequestBuilder,
        model: &str,
        cancel: &mut CancelSignal,
        timer: &CallTimer<'_>,
    ) -> Result<Reply, CallEnd> {
        let timeout = self.config.request_timeout;
        let response = tokio::select! {
            r = request.send() => r.map_err(|e| CallEnd::Failed(transport_failure(e, timeout)))?,
            _ = cancelled(cancel) => return Err(CallEnd::Cancelled),
        };
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .map(String::from);
            let body = tokio::select! {
                b = read_capped(response, MAX_ERROR_BODY_BYTES) => b.unwrap_or_default(),
                _ = cancelled(cancel) => return Err(CallEnd::Cancelled),
            };
            // The body is the server's words, which may echo the request (its key): classified, not
            // passed on; kept for the operator at `debug`, without the key or any bearer token.
            tracing::debug!(
                agent = %self.config.name,
                status,
                body = %self.redacted(&body),
                "the model server refused a call"
            );
            let refused = errors::refused(status, retry_after.as_deref(), &body, model);
            return Err(if refused.try_next_model {
                CallEnd::NextModel(refused.failure)
            } else {
                CallEnd::Failed(refused.failure)
            });
        }
        let streamed = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("text/event-stream"));
        if !streamed {
            // A server that ignored `stream`: one whole completion, read as a single chunk.
            let body = tokio::select! {
                b = read_capped(response, MAX_PLAIN_BODY_BYTES) => b.map_err(|e| CallEnd::Failed(transport_failure(e, timeout)))?,
                _ = cancelled(cancel) => return Err(CallEnd::Cancelled),
            };
            let mut acc = Accumulator::default();
            let pieces = acc
                .feed(&as_chunk(&body))
                .map_err(|e| self.stream_failure(e))?;
            self.send_pieces(pieces).await;
            return Ok(acc.finish());
        }
        let mut response = response;
        let mut framer = sse::SseFramer::default();
        let mut acc = Accumulator::default();
        let mut first_token = self.metrics.as_ref();
        loop {
            let next = tokio::select! {
                c = response.chunk() => c.map_err(|e| CallEnd::Failed(transport_failure(e, timeout)))?,
                // Dropping the response closes the connection: the server stops generating.
                _ = cancelled(cancel) => return Err(CallEnd::Cancelled),
            };
            let ended = next.is_none();
            let events = match next {
                Some(bytes) => framer.push(&bytes).map_err(|e| {
                    CallEnd::Failed(Failure::new(TurnFailure::AgentFailed, e.to_string()))
                })?,
                None => framer.finish().into_iter().collect(),
            };
            for data in events {
                let pieces = acc.feed(&data).map_err(|e| self.stream_failure(e))?;
                if acc.started() {
                    if let Some(m) = first_token.take() {
                        m.first_token(&self.config.name, timer.model, timer.sent.elapsed());
                    }
                }
                self.send_pieces(pieces).await;
            }
            if acc.done() || (ended && acc.finished()) {
                return Ok(acc.finish());
            }
            if ended {
                return Err(self.cut_short(&acc));
            }
        }
    }

    /// A stream the server closed before the reply was finished (no `finish_reason`, no `[DONE]`): the model
    /// server died or a proxy cut it. What had streamed stays with the turn as what was said; the turn is a
    /// failure, never a result a caller would take as the whole answer.
    fn cut_short(&self, acc: &Accumulator) -> CallEnd {
        tracing::warn!(
            agent = %self.config.name,
            text_bytes = acc.text_bytes(),
            "the model server closed its stream before the answer was finished; the turn fails"
        );
        CallEnd::Failed(Failure::new(
            TurnFailure::ModelUnavailable,
            format!(
                "the model server closed the stream before the answer was finished ({} bytes of text had come)",
                acc.text_bytes()
            ),
        ))
    }

    /// `text` from the model server with this agent's API key and any bearer token replaced: for a log line.
    fn redacted(&self, text: &str) -> String {
        let key = self.config.api_key.as_ref().map_or("", |k| k.0.as_str());
        agentwire_core::redact_secrets(text, &[key], "[redacted]")
    }

    /// A stream that went wrong, as the turn's failure. What the server said (an error inside the stream, a
    /// chunk that does not parse) may echo the request: logged at `debug` without secrets, not passed on.
    fn stream_failure(&self, e: stream::StreamError) -> CallEnd {
        if let stream::StreamError::Provider(words) | stream::StreamError::Malformed(words) = &e {
            tracing::debug!(
                agent = %self.config.name,
                detail = %self.redacted(words),
                "{e}"
            );
        }
        CallEnd::Failed(Failure::new(
            match e {
                stream::StreamError::Provider(_) => TurnFailure::ProviderBusy,
                _ => TurnFailure::AgentFailed,
            },
            e.to_string(),
        ))
    }

    async fn send_pieces(&self, pieces: Vec<Piece>) {
        for piece in pieces {
            self.send(match piece {
                Piece::Text(text) => TurnEvent::Text { text },
                Piece::Thinking(text) => TurnEvent::Thinking { text },
            })
            .await;
        }
    }
}

/// When a model call was sent, and its model's label, for the metrics.
struct CallTimer<'a> {
    sent: Instant,
    model: &'a str,
}

/// Why a turn parks at a tool call.
enum ParkReason {
    /// Nobody approved the `shell` command in time.
    Unanswered(String),
    /// The turn was cancelled while the approval was open.
    Cancelled,
}

/// A turn parked at a tool call, with the calls it has not run yet.
struct Parked {
    why: ParkReason,
    pending: Vec<ToolCall>,
}

impl Parked {
    /// The turn's suspended outcome, with a checkpoint `request.resume` continues from.
    fn outcome(self, messages: Vec<Value>, text: String, usage: Usage) -> Outcome {
        let message = match &self.why {
            ParkReason::Unanswered(command) => {
                format!("waiting for a person to approve the shell command {command:?}")
            }
            ParkReason::Cancelled => {
                "stopped: the turn was cancelled while asking for approval".into()
            }
        };
        let pending: Vec<Value> = self
            .pending
            .iter()
            .map(|c| json!({ "id": c.id, "name": c.name, "arguments": c.arguments }))
            .collect();
        let mut f = Failure::new(TurnFailure::Suspended, message);
        f.usage = usage;
        f.checkpoint = Some(json!({ "messages": messages, "pending": pending, "text": text }));
        Outcome::Failure(f)
    }
}

fn call_from_json(v: &Value) -> Option<ToolCall> {
    Some(ToolCall {
        id: v["id"].as_str()?.to_string(),
        name: v["name"].as_str()?.to_string(),
        arguments: v["arguments"].as_str()?.to_string(),
    })
}

/// The model's message asking for `reply`'s tool calls, as the next call sends it back.
fn assistant_calls(reply: &Reply) -> Value {
    json!({
        "role": "assistant",
        "content": if reply.text.is_empty() { Value::Null } else { Value::String(reply.text.clone()) },
        "tool_calls": reply.tool_calls.iter().map(|c| json!({
            "id": c.id,
            "type": "function",
            "function": { "name": c.name, "arguments": c.arguments },
        })).collect::<Vec<_>>(),
    })
}

/// A whole (non-streamed) completion as one chunk: its `message` read as a `delta`.
fn as_chunk(body: &str) -> String {
    let Ok(mut v) = serde_json::from_str::<Value>(body) else {
        return body.to_string();
    };
    if let Some(choices) = v.get_mut("choices").and_then(|c| c.as_array_mut()) {
        for choice in choices {
            if let Some(message) = choice.get_mut("message").map(Value::take) {
                choice["delta"] = message;
            }
        }
    }
    v.to_string()
}

/// A failure to reach the server or to read its answer. The URL (which may carry a key in its query) is
/// left out of the message.
fn transport_failure(e: reqwest::Error, timeout: Duration) -> Failure {
    if e.is_timeout() {
        return Failure::new(
            TurnFailure::ProviderBusy,
            format!(
                "the model server did not answer within {} s",
                timeout.as_secs()
            ),
        );
    }
    if e.is_connect() {
        return Failure::new(
            TurnFailure::ModelUnavailable,
            "cannot reach the model server",
        );
    }
    let e = e.without_url();
    Failure::new(
        TurnFailure::ModelUnavailable,
        format!("the model server: {e}"),
    )
}

/// The body of `response`, at most `cap` bytes of it.
async fn read_capped(
    mut response: reqwest::Response,
    cap: usize,
) -> Result<String, reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = cap.saturating_sub(body.len());
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= cap {
            break;
        }
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_are_refused_in_words_without_the_url() {
        assert!(check_base_url("http://127.0.0.1:8080/v1").is_ok());
        assert_eq!(
            check_base_url("https://api.example/v1/chat/completions/?key=sk-x")
                .unwrap_err()
                .to_string(),
            "ends in /chat/completions: give the API's base (such as http://127.0.0.1:8080/v1); \
             the agent adds /chat/completions itself"
        );
        assert_eq!(
            check_base_url("ftp://h/?key=sk-x").unwrap_err().to_string(),
            "not an http:// or https:// URL with a host"
        );
    }

    #[test]
    fn thinking_levels_become_reasoning_effort() {
        assert_eq!(reasoning_effort(Some("low")), Some("low"));
        assert_eq!(reasoning_effort(Some("max")), Some("high"));
        assert_eq!(reasoning_effort(None), None);
        assert_eq!(
            format!("{:?}", ApiKey("sk-secret".into())),
            "ApiKey(<redacted>)"
        );
    }

    #[test]
    fn a_whole_completion_reads_as_one_chunk() {
        let mut acc = Accumulator::default();
        let body = r#"{"choices":[{"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":1}}"#;
        acc.feed(&as_chunk(body)).unwrap();
        let reply = acc.finish();
        assert_eq!(reply.text, "hi");
        assert_eq!(reply.usage.output_tokens, 1);
    }
}
