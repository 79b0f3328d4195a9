//! The route, a thin driver around rmcp's streamable HTTP server ([`StreamableHttpService`]): `/mcp`
//! behind the server's token gate, each session bound to the caller that opened it, at most
//! [`MAX_SESSIONS`] of them, and each request told when its connection is gone (so a call whose client
//! went away cancels its turn).

use crate::handler::Session;
use agentwire_http::callers::Caller;
use agentwire_http::front::ExposedAgent;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::{Extension, Json, Router};
use futures_util::StreamExt;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// The front's one path.
pub const PATH: &str = "/mcp";

/// The most sessions open at once: each holds a server task and its streams until the client ends it
/// or it idles out; 256 clients of one daemon is a large deployment, and a client that opens sessions
/// in a loop meets a 503 instead of exhausting memory.
pub const MAX_SESSIONS: usize = 256;

/// The most sessions one caller of `[[http.callers]]` holds open at once: an eighth of
/// [`MAX_SESSIONS`], so one program that opens sessions in a loop leaves the others (and the operator,
/// who is held to [`MAX_SESSIONS`] alone) their places.
pub const MAX_SESSIONS_PER_CALLER: usize = 32;

/// How long a session may pass with no message either way before it is closed: long enough for an
/// agent's long turn that sends nothing (a call without a progress token) and for a person answering a
/// question ([`crate::front::QUESTION_WINDOW`] is shorter); a client that left without ending its
/// session frees its place after this.
pub const SESSION_IDLE: Duration = Duration::from_secs(30 * 60);

/// A comment sent on a quiet stream this often, so that proxies and clients see it alive.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The header that names a session.
const SESSION_HEADER: &str = "mcp-session-id";

/// A tool the front serves.
pub(crate) struct ServedTool {
    /// `ask_<agent>`.
    pub(crate) name: String,
    /// From the agent's card.
    pub(crate) description: String,
    /// Its input schema.
    pub(crate) schema: Map<String, Value>,
    /// The agent.
    pub(crate) agent: ExposedAgent,
}

/// The tools, one per agent exposed on the front.
pub(crate) struct Served {
    pub(crate) tools: Vec<ServedTool>,
}

impl Served {
    /// A tool for each of `agents` (two agents whose names make the same tool name: the first keeps it,
    /// and the second is logged and not served).
    pub(crate) fn new(agents: Vec<ExposedAgent>) -> Served {
        let mut tools: Vec<ServedTool> = Vec::new();
        for agent in agents {
            let name = crate::tools::tool_name(&agent.name);
            if tools.iter().any(|t| t.name == name) {
                tracing::warn!(agent = %agent.name, tool = %name, "two agents make the same MCP tool name: this one is not served over MCP");
                continue;
            }
            let card = agent.engine.card();
            tools.push(ServedTool {
                description: crate::tools::description(&agent.name, &card.description),
                schema: crate::tools::input_schema(card.max_prompt_bytes),
                name,
                agent,
            });
        }
        Served { tools }
    }

    /// Tool `name`, when `caller` may call its agent.
    pub(crate) fn tool(&self, name: &str, caller: &Caller) -> Option<&ServedTool> {
        self.tools
            .iter()
            .find(|t| t.name == name && caller.may_call(&t.agent.name))
    }
}

/// Tells a call when its HTTP request's connection is gone: the sender lives in the response body, so
/// it drops when the client closes the stream (or the stream ends).
#[derive(Clone)]
pub(crate) struct Hangup(watch::Receiver<()>);

impl Hangup {
    /// Resolves when the response is gone.
    pub(crate) async fn gone(mut self) {
        while self.0.changed().await.is_ok() {}
    }
}

/// Ends every session (the daemon stops).
pub(crate) struct Stop(Box<dyn Fn() + Send + Sync>);

impl Stop {
    pub(crate) fn stop(&self) {
        (self.0)()
    }
}

#[derive(Clone)]
struct Mounted {
    service: StreamableHttpService<Session, LocalSessionManager>,
    sessions: Arc<LocalSessionManager>,
    /// Each session's opener's requester.
    owners: Arc<Mutex<HashMap<String, String>>>,
    /// Sessions being opened now (counted against the bounds before rmcp makes them), by requester.
    opening: Arc<Mutex<HashMap<String, usize>>>,
}

/// A place held for a session being opened, given back when the request is answered (the session is then
/// in `owners`, or was not made).
struct Opening {
    opening: Arc<Mutex<HashMap<String, usize>>>,
    requester: String,
}

impl Drop for Opening {
    fn drop(&mut self) {
        let mut o = self.opening.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = o.get_mut(&self.requester) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                o.remove(&self.requester);
            }
        }
    }
}

impl Mounted {
    /// A place for a new session of `caller`'s, or the 503 that says which bound is reached. The sessions
    /// rmcp has closed since (ended, idled out) leave `owners` first.
    async fn open(&self, caller: &Caller) -> Result<Opening, Response> {
        let live: std::collections::HashSet<String> = self
            .sessions
            .sessions
            .read()
            .await
            .keys()
            .map(|k| k.to_string())
            .collect();
        let requester = caller.requester();
        let mut owners = self.owners.lock().unwrap_or_else(|p| p.into_inner());
        owners.retain(|k, _| live.contains(k));
        let mut opening = self.opening.lock().unwrap_or_else(|p| p.into_inner());
        let total = owners.len() + opening.values().sum::<usize>();
        let mine = owners.values().filter(|o| **o == requester).count()
            + opening.get(&requester).copied().unwrap_or(0);
        let full = |why: String| {
            let mut r = refused(StatusCode::SERVICE_UNAVAILABLE, &why);
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("60"));
            r
        };
        if total >= MAX_SESSIONS {
            return Err(full(format!(
                "the server has {MAX_SESSIONS} sessions open; end one (DELETE) or try again later"
            )));
        }
        if matches!(caller, Caller::Program(_)) && mine >= MAX_SESSIONS_PER_CALLER {
            return Err(full(format!(
                "this caller has {MAX_SESSIONS_PER_CALLER} sessions open, the most one caller may; end one (DELETE)"
            )));
        }
        *opening.entry(requester.clone()).or_default() += 1;
        Ok(Opening {
            opening: Arc::clone(&self.opening),
            requester,
        })
    }
}

/// The callers' routes for `agents`, and the stop of their sessions.
pub(crate) fn router(agents: Vec<ExposedAgent>) -> (Router, Stop) {
    let served = Arc::new(Served::new(agents));
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(SESSION_IDLE);
    // No priming events: a stream cut off is not resumed, its call is cancelled (see the crate doc).
    manager.session_config.sse_retry = None;
    let sessions = Arc::new(manager);
    let config = StreamableHttpServerConfig::default()
        // The daemon's server checks `Host` (and `Origin` on a POST) before any front's route, with its
        // own rule (localhost and its address, or any host once `allow_remote`); rmcp's loopback-only
        // list would refuse what the operator allowed.
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_sse_retry(None)
        .with_sse_keep_alive(Some(KEEP_ALIVE))
        .with_max_request_body_bytes(agentwire_http::MAX_FRONT_BODY_BYTES);
    let token = config.cancellation_token.clone();
    let service = StreamableHttpService::new(
        move || Ok(Session::new(served.clone())),
        sessions.clone(),
        config,
    );
    let mounted = Mounted {
        service,
        sessions,
        owners: Arc::new(Mutex::new(HashMap::new())),
        opening: Arc::new(Mutex::new(HashMap::new())),
    };
    let router = Router::new().route(PATH, any(mcp)).with_state(mounted);
    (router, Stop(Box::new(move || token.cancel())))
}

/// The 401 the server gives a request without a token that opens the route: a JSON-RPC error body, and
/// `WWW-Authenticate: Bearer`.
pub(crate) fn unauthorized(why: &str) -> Response {
    let mut r = (
        StatusCode::UNAUTHORIZED,
        Json(crate::errors::unauthorized_body(why)),
    )
        .into_response();
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

fn refused(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": { "code": -32000, "message": message },
    });
    (status, Json(body)).into_response()
}

fn session_of(req: &Request) -> Option<String> {
    req.headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(String::from)
}

async fn mcp(
    State(m): State<Mounted>,
    Extension(caller): Extension<Caller>,
    mut req: Request,
) -> Response {
    let session = session_of(&req);
    // A session is its opener's: another caller's request naming it is told it does not exist.
    if let Some(id) = &session {
        let owner = m
            .owners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned();
        if owner.is_some_and(|o| !caller.owns(&o)) {
            return refused(StatusCode::NOT_FOUND, "Not Found: Session not found");
        }
    }
    // A POST naming no session opens one: its place is held (against the bounds) until it is answered.
    let _opening = match (&session, req.method() == Method::POST) {
        (None, true) => match m.open(&caller).await {
            Ok(o) => Some(o),
            Err(refusal) => return refusal,
        },
        _ => None,
    };
    let (gone_tx, gone_rx) = watch::channel(());
    let delete = req.method() == Method::DELETE;
    req.extensions_mut().insert(Hangup(gone_rx));
    let mut response = m.service.handle(req).await;
    if delete && response.status() == StatusCode::ACCEPTED {
        // The session is ended, not queued for ending: 204, which the SDKs take as done (the Python
        // one warns of a failed termination on rmcp's 202).
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    if session.is_none() {
        if let Some(id) = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
        {
            let mut owners = m.owners.lock().unwrap_or_else(|p| p.into_inner());
            owners.insert(id.to_string(), caller.requester());
        }
    }
    let (parts, body) = response.into_parts();
    // The body carries the sender: dropped with it when the client goes away or the stream ends.
    let body = Body::new(body).into_data_stream().map(move |chunk| {
        let _held = &gone_tx;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(body))
}
