//! The daemon's HTTP server as `serve` starts it: its token (made once in the data dir, `http.token`, mode
//! 0600), the agents it shows, and the health it reports (the engine's, as the relay's `/health`).

use agentwire_engine::WatchHub;
use agentwire_http::{AgentInfo, HttpConfig, HttpContext, HttpServer, Token};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

/// The token's file in the data dir.
pub(crate) const TOKEN_FILE: &str = "http.token";

/// The data dir's token, made on first use. A file others may read is refused, as a key file is.
pub(crate) fn load_or_create_token(data_dir: &Path) -> Result<Token, String> {
    let path = data_dir.join(TOKEN_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let mode = std::fs::metadata(&path)
                .map_err(|e| format!("{}: {e}", path.display()))?
                .permissions()
                .mode()
                & 0o777;
            if mode & 0o077 != 0 {
                return Err(format!(
                    "{} may be read by others (mode {mode:o}): chmod 600 it",
                    path.display()
                ));
            }
            Token::parse(&text)
                .map_err(|e| format!("{}: {e}; remove it to make a new one", path.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let token = Token::generate().map_err(|e| e.to_string())?;
            std::fs::create_dir_all(data_dir)
                .map_err(|e| format!("cannot create {}: {e}", data_dir.display()))?;
            let part = data_dir.join(format!("{TOKEN_FILE}.part"));
            let written = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&part)
                .and_then(|mut f| f.write_all(format!("{}\n", token.reveal()).as_bytes()))
                .and_then(|()| std::fs::rename(&part, &path));
            written.map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            Ok(token)
        }
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// The roost jobs by state, as `/metrics` reads them when scraped.
pub(crate) type RoostJobs = Arc<dyn Fn() -> Vec<(&'static str, i64)> + Send + Sync>;

/// What `/metrics` reads from the daemon's other parts when scraped, beside the engine's journal health.
pub(crate) struct Scraped {
    /// The roost jobs by state.
    pub(crate) roost_jobs: RoostJobs,
    /// The embedded relay's counters, when it runs.
    pub(crate) relay: Option<Arc<agentwire_relay::RelayStats>>,
    /// What the fronts give (the fisk-ai jobs queues' depth).
    pub(crate) fronts: Vec<agentwire_http::Scrape>,
}

/// The hub page's way to the roost supervisor: each request's ops on a controller's connection of its
/// own, so the page is held to a controller's rules and a slow request holds up no other.
fn roost_ops(socket: &Path) -> agentwire_http::RoostCall {
    let socket = socket.to_path_buf();
    Arc::new(move |ops| {
        let socket = socket.clone();
        Box::pin(async move {
            let refused = |code: &str, message: String| agentwire_http::RoostRefusal {
                code: code.into(),
                message,
            };
            let mut c = agentwire_roost::client::Controller::connect(&socket)
                .await
                .map_err(|e| refused("unavailable", format!("the roost supervisor: {e}")))?;
            let mut answers = Vec::with_capacity(ops.len());
            for (op, args) in ops {
                answers.push(c.call(op, args).await.map_err(|e| match e {
                    agentwire_roost::client::ClientError::Refused { code, message } => {
                        refused(code.as_str(), message)
                    }
                    other => refused("unavailable", format!("the roost supervisor: {other}")),
                })?);
            }
            Ok(answers)
        })
    })
}

/// The callers' tokens, read from their variables and files (a file others may read is refused, as the
/// operator's is); a token that is another's too is refused.
fn caller_tokens(
    choice: &crate::config::HttpChoice,
    operator: &Token,
    base: &Path,
) -> Result<Vec<agentwire_http::callers::CallerToken>, String> {
    use agentwire_http::settings::TokenSource;
    let mut out: Vec<agentwire_http::callers::CallerToken> = Vec::new();
    for c in &choice.callers {
        let named = |e: String| format!("[[http.callers]] {:?}: {e}", c.name);
        let text = match &c.token {
            TokenSource::Env(var) => std::env::var(var)
                .map_err(|_| named(format!("the environment variable {var} is not set")))?,
            TokenSource::File(f) => {
                let path = base.join(f);
                let mode = std::fs::metadata(&path)
                    .map_err(|e| named(format!("{}: {e}", path.display())))?
                    .permissions()
                    .mode()
                    & 0o777;
                if mode & 0o077 != 0 {
                    return Err(named(format!(
                        "{} may be read by others (mode {mode:o}): chmod 600 it",
                        path.display()
                    )));
                }
                std::fs::read_to_string(&path)
                    .map_err(|e| named(format!("{}: {e}", path.display())))?
            }
        };
        let token =
            agentwire_http::callers::caller_token(&text).map_err(|e| named(e.to_string()))?;
        let taken =
            operator.matches(token.reveal()) || out.iter().any(|o| o.token.matches(token.reveal()));
        if taken {
            return Err(named(
                "its token is another caller's or the operator's too: each caller needs its own"
                    .into(),
            ));
        }
        out.push(agentwire_http::callers::CallerToken {
            token,
            grant: Arc::new(agentwire_http::callers::CallerGrant {
                name: c.name.clone(),
                agents: c.agents.as_ref().map(|a| a.iter().cloned().collect()),
            }),
        });
    }
    Ok(out)
}

/// What the HTTP server serves.
pub(crate) struct Serves<'a> {
    /// Every turn's events.
    pub(crate) hub: Arc<WatchHub>,
    /// The agents' engines, the `--agent` agent's first, with the index of their live turns.
    pub(crate) engines: agentwire_engine::Engines,
    /// The agents as the turn API lists them.
    pub(crate) agents: Vec<AgentInfo>,
    /// The HTTP fronts' routes.
    pub(crate) routes: Vec<agentwire_http::front::HttpRoutes>,
    /// The roost supervisor's socket, for the hub page's roost ops.
    pub(crate) roost_socket: &'a Path,
    /// What `/metrics` reads when scraped.
    pub(crate) scraped: Scraped,
}

/// Starts the HTTP server as `choice` says for what `serves` names, behind the operator's `token`; a
/// caller's `token_file` is relative to `data_dir`.
pub(crate) async fn start(
    choice: &crate::config::HttpChoice,
    data_dir: &Path,
    token: Token,
    serves: Serves<'_>,
) -> Result<HttpServer, String> {
    let Serves {
        hub,
        engines,
        agents,
        routes,
        roost_socket,
        scraped,
    } = serves;
    let first = engines.first().map(Arc::downgrade);
    let engine = first.clone();
    let scrape: agentwire_http::Scrape = Arc::new(move |m| {
        let writable = engine
            .as_ref()
            .and_then(|e| e.upgrade())
            .is_some_and(|e| e.journal_writable());
        m.set_journal_writable(writable);
        m.set_roost_jobs(&(scraped.roost_jobs)());
        for front in &scraped.fronts {
            front(m);
        }
        if let Some(relay) = &scraped.relay {
            let events: Vec<(&str, u64)> = agentwire_relay::EventResult::ALL
                .iter()
                .map(|r| (r.as_str(), relay.events(*r)))
                .collect();
            m.set_relay(relay.connections(), &events);
        }
    });
    let health: agentwire_http::HealthCheck =
        Arc::new(move || crate::serve::health(first.as_ref().and_then(|e| e.upgrade())));
    let callers = caller_tokens(choice, &token, data_dir)?;
    agentwire_http::start(
        HttpConfig {
            listen: choice.listen,
            allow_remote: choice.allow_remote,
            token,
            callers,
            limits: choice.limits,
        },
        HttpContext {
            hub,
            engines,
            agents,
            health,
            scrape,
            roost: Some(roost_ops(roost_socket)),
        },
        routes,
    )
    .await
    .map_err(|e| match &e {
        agentwire_http::HttpError::Bind { source, .. } => {
            crate::config::bind_failed("--http-listen", &e, source)
        }
        _ => format!("--http-listen: {e}"),
    })
}
