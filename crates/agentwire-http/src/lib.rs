//! agentwire's HTTP server: one listener in the daemon for what is not a protocol front of its own: the
//! turn API and its server-sent events, `/metrics`, and the hub page that shows and steers it all.
//!
//! | route | what |
//! | --- | --- |
//! | `GET /health` | `200` while the daemon takes turns, `503` otherwise (no token) |
//! | `GET /metrics` | Prometheus metrics, OpenMetrics text ([`agentwire_engine::metrics`]; no token) |
//! | `GET /?token=T` | sets the token cookie a browser then sends, and goes to `/` |
//! | `GET /` | the hub page ([`page`]), to a browser holding the token |
//! | `GET /api/v1/roost[?after=N]` | the roost sessions, task board, concierge, orders and feed |
//! | `POST /api/v1/roost/{op}` | one of the controller's ops the page takes ([`roost::PAGE_OPS`]) |
//! | `GET /api/v1/agents` | every agent: its name, kind, fronts and card |
//! | `GET /api/v1/turns?agent=&protocol=&requester=&state=&limit=&cursor=` | recent turns, newest first, and the next page's cursor |
//! | `GET /api/v1/turns/{id}` | one turn, its events and outcome |
//! | `GET /api/v1/events[?turn=ID]` | server-sent events: every turn live (resumed after `Last-Event-ID`), or one from its start |
//! | `POST /api/v1/turns/{id}/cancel` | cancels a running turn, as its requester could |
//! | `POST /api/v1/turns/{id}/answer` | answers its open question (`{"choices": [...], "text": ...}`) |
//!
//! Every `/api/` request needs the operator's token ([`access`]); every request names an allowed `Host`; a
//! request that changes state and comes from another site's page (its `Origin`) is refused. Refusals are
//! JSON `{"error": ...}` with 400, 401, 403, 404, 409 or 503.
//!
//! The HTTP fronts (A2A, the OpenAI-compatible API, MCP) mount their routes beside these ([`front`]):
//! their callers present a caller's token or the operator's ([`callers`]); a caller's token opens nothing
//! else (`403` on `/api/`).
//!
//! Connections are bounded (`connections.rs`): a request head within [`HEADER_READ_TIMEOUT`] (also the idle
//! keep-alive time), answers the client takes within [`WRITE_STALL_TIMEOUT`], at most `[http] max_connections`
//! open ([`DEFAULT_MAX_CONNECTIONS`]) and a quarter of them without the token, so the server never takes the
//! descriptors the relay and the rest of the daemon need.

pub mod access;
pub mod answer;
mod api;
pub mod callers;
mod connections;
mod events;
pub mod front;
mod front_auth;
pub mod page;
pub mod roost;
pub mod settings;
mod slots;
mod stall;

use agentwire_engine::WatchHub;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;

pub use access::{Token, TokenError, WRONG_TOKEN_LOG_INTERVAL};
pub use api::MAX_FRONT_BODY_BYTES;
pub use connections::{HEADER_READ_TIMEOUT, MAX_PENDING_REFUSALS, SHUTDOWN_GRACE};
pub use roost::{RoostCall, RoostRefusal};
pub use settings::{HttpLimits, DEFAULT_MAX_EVENT_STREAMS};
pub use slots::{
    callers_share, one_callers_share, unauthenticated_share, DEFAULT_MAX_CONNECTIONS,
    MAX_CALLER_CONNECTIONS, MAX_CONNECTIONS_CEILING, MAX_CONNECTIONS_PER_CALLER,
    MAX_UNAUTHENTICATED_CONNECTIONS, MIN_CONNECTIONS,
};
pub use stall::WRITE_STALL_TIMEOUT;

/// Where the server listens, and who it serves.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// The listen address (`127.0.0.1:7780` by default; port 0 picks one).
    pub listen: SocketAddr,
    /// Serve clients beyond this host (a listen that is not loopback, and any `Host`).
    pub allow_remote: bool,
    /// The operator's token: the turn API, the hub, the roost ops and every caller front.
    pub token: Token,
    /// The callers' tokens (`[[http.callers]]`): the caller fronts only.
    pub callers: Vec<callers::CallerToken>,
    /// Connections and event streams open at most (`[http] max_connections`, `max_event_streams`).
    pub limits: HttpLimits,
}

/// An agent as `GET /api/v1/agents` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AgentInfo {
    /// Its name.
    pub name: String,
    /// Its kind (`demo`, `openai`, `cmd`, `roost`).
    pub kind: String,
    /// The fronts it is exposed on (`nipxx`, `fisk`, `roost`, `tasks`).
    pub fronts: Vec<String>,
    /// Its card.
    pub card: agentwire_engine::AgentCard,
}

/// Whether the daemon takes turns, and the body `GET /health` gives.
pub type HealthCheck = Arc<dyn Fn() -> (bool, serde_json::Value) + Send + Sync>;

/// What the server serves.
#[derive(Clone)]
pub struct HttpContext {
    /// Every turn's events.
    pub hub: Arc<WatchHub>,
    /// The engines, one an agent, and the index of their live turns: a turn is cancelled or answered in
    /// the one it is live in.
    pub engines: agentwire_engine::Engines,
    /// The agents.
    pub agents: Vec<AgentInfo>,
    /// The daemon's health.
    pub health: HealthCheck,
    /// Sets the metrics read at scrape time (the journal's health, the embedded relay's counters, the roost
    /// jobs) before `/metrics` answers.
    pub scrape: Scrape,
    /// The roost supervisor's controller ops, when one runs (the page's sessions, board and concierge).
    pub roost: Option<RoostCall>,
}

impl std::fmt::Debug for front::HttpRoutes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HttpRoutes")
    }
}

/// Sets the metrics that are read when `/metrics` is scraped.
pub type Scrape = Arc<dyn Fn(&agentwire_engine::metrics::Metrics) + Send + Sync>;

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// A listen beyond this host without `allow_remote`.
    #[error("{0} is not a loopback address: the HTTP server listens beyond this host only with [http] allow_remote = true")]
    Remote(SocketAddr),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// The running server.
pub struct HttpServer {
    local_addr: SocketAddr,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl HttpServer {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// `http://<address>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.local_addr)
    }

    /// Stops taking requests, ends open event streams, and waits for the server to close (connections
    /// still open after [`SHUTDOWN_GRACE`] are closed).
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Starts the server, with the routes of the HTTP fronts (`fronts`) beside its own.
pub async fn start(
    config: HttpConfig,
    ctx: HttpContext,
    fronts: Vec<front::HttpRoutes>,
) -> Result<HttpServer, HttpError> {
    if !config.allow_remote && !access::is_local(config.listen) {
        return Err(HttpError::Remote(config.listen));
    }
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| HttpError::Bind {
            addr: config.listen,
            source,
        })?;
    let local_addr = listener.local_addr().map_err(|source| HttpError::Bind {
        addr: config.listen,
        source,
    })?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let ctx = Arc::new(ctx);
    let callers = Arc::new(config.callers);
    let gate = Arc::new(connections::Gatekeeper {
        token: config.token.clone(),
        callers: Arc::clone(&callers),
        ctx: Arc::clone(&ctx),
        wrong: std::sync::Mutex::default(),
    });
    let app = api::router(
        api::State {
            ctx,
            token: config.token,
            callers,
            listen: local_addr,
            allow_remote: config.allow_remote,
            stopped: stopped.clone(),
            streams: Arc::default(),
            max_event_streams: config.limits.max_event_streams,
        },
        fronts,
    );
    let slots = slots::Slots::for_total(config.limits.max_connections);
    let task = tokio::spawn(connections::serve(listener, app, gate, slots, stopped));
    Ok(HttpServer {
        local_addr,
        stop,
        task,
    })
}
