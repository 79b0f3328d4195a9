//! Fronts as plug-ins: what a protocol front gives the daemon so that adding one is a crate and one line
//! in the binary's list of fronts (`crates/agentwire/src/fronts/mod.rs`).
//!
//! A [`FrontKind`] has a name (what `expose` lists, and the protocol its turns are journaled under), reads
//! its own configuration section into a [`FrontPlan`] (refusing what is wrong with the key named), and the
//! plan says what `agentwire config` prints of it and starts the front for the agents exposed on it. An
//! HTTP front hands the one HTTP server its routes ([`HttpRoutes`]): the public ones (an agent card) and
//! the callers' ones, which the server puts behind the callers' and the operator's tokens
//! ([`crate::callers`]) and the same `Host` and `Origin` checks as every route; a front reads who called
//! from the request's [`Caller`](crate::callers::Caller) extension.

use crate::callers::Caller;
use agentwire_core::{Failure, Refusal};
use agentwire_engine::{Engine, Front, Submission, SubmitReply, WatchHub};
use axum::response::Response;
use axum::Router;
use futures_util::future::BoxFuture;
use std::sync::Arc;

/// A kind of front: one entry of the binary's list.
pub trait FrontKind: Send + Sync {
    /// Its name: in `expose`, in `agentwire config`, and the protocol its turns are journaled under.
    fn name(&self) -> &'static str;
    /// What it serves, in a few words (listed when a name in `expose` is not a front's).
    fn about(&self) -> &'static str;
    /// Reads its section of the configuration file (`[<name>]`; `None` when the file has none) into its
    /// settings, or says which key is wrong and why.
    fn configure(
        &self,
        section: Option<&serde_json::Value>,
    ) -> Result<Box<dyn FrontPlan>, FrontSettingError>;
}

/// A front's settings, resolved: what `agentwire config` shows and how it starts.
pub trait FrontPlan: Send + Sync + std::fmt::Debug {
    /// Whether it runs: the `--agent` agent is exposed on every front that is on, a further agent on those
    /// its `expose` names.
    fn enabled(&self) -> bool;
    /// Its section as `agentwire config` prints it (the file's own keys; nothing secret).
    fn view(&self) -> serde_json::Value;
    /// Starts it for `ctx`'s agents.
    fn start(&self, ctx: FrontContext)
        -> BoxFuture<'static, Result<StartedFront, FrontStartError>>;
}

/// What a front is started with.
#[derive(Clone)]
pub struct FrontContext {
    /// The agents exposed on it, the `--agent` one first when it is.
    pub agents: Vec<ExposedAgent>,
    /// Every turn's events, for watchers.
    pub hub: Arc<WatchHub>,
}

/// An agent exposed on a front.
#[derive(Clone)]
pub struct ExposedAgent {
    /// Its name.
    pub name: String,
    /// Its engine: turns are submitted, answered and cancelled there.
    pub engine: Arc<Engine>,
    /// Whether it is the `--agent` agent.
    pub default: bool,
}

/// A started front.
pub struct StartedFront {
    /// Its life in the daemon: recovery, drain and stop.
    pub front: Arc<dyn Front>,
    /// For an HTTP front, the routes it mounts on the one server.
    pub routes: Option<HttpRoutes>,
}

/// The routes an HTTP front mounts on the server (merged at the root: each front keeps to its own paths).
pub struct HttpRoutes {
    /// Served to anyone (an agent card).
    pub public: Router,
    /// Served to a caller's token or the operator's; the request carries the [`Caller`](crate::callers::Caller).
    pub callers: Router,
    /// The answer to a request to `callers` without a token that opens them (status 401), in the front's
    /// own error shape; its argument says what is missing.
    pub unauthorized: fn(&str) -> Response,
}

/// Why a front's section cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[{section}]{}{key}: {reason}", if key.is_empty() { "" } else { " " })]
pub struct FrontSettingError {
    /// The section (the front's name).
    pub section: &'static str,
    /// The key (empty when the section's shape is wrong: the reason names the key).
    pub key: String,
    /// What is wrong.
    pub reason: String,
}

/// Why a front did not start: the front, and what failed.
#[derive(Debug, thiserror::Error)]
#[error("the {front} front: {source}")]
pub struct FrontStartError {
    /// The front (its name, as [`FrontKind::name`]).
    pub front: &'static str,
    /// What failed.
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

impl FrontStartError {
    /// Front `front` did not start because of `source`.
    pub fn new(
        front: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        FrontStartError {
            front,
            source: source.into(),
        }
    }
}

/// The most turns one caller of `[[http.callers]]` has live on one agent at once: 8. A turn that waits for
/// an answer (an A2A task in `INPUT_REQUIRED`, open for an hour) holds its place among the agent's
/// `max_concurrent_turns`; without this one program could hold them all and keep every other caller, and
/// every other front, waiting. The operator is not held to it.
pub const MAX_LIVE_TURNS_PER_CALLER: usize = 8;

/// The `retry_after` of a turn refused because its caller has [`MAX_LIVE_TURNS_PER_CALLER`] live.
pub const CALLER_BUSY_RETRY_AFTER_SECS: u64 = 5;

/// Submits `sub` to `engine` for `caller`: a caller with [`MAX_LIVE_TURNS_PER_CALLER`] turns live on the
/// agent has the turn refused (`capacity`, journaled and delivered through its front as any refusal), checked
/// as each turn is taken. Every caller front submits through this.
pub async fn submit_for(engine: &Arc<Engine>, caller: &Caller, sub: Submission) -> SubmitReply {
    if let Caller::Program(_) = caller {
        if engine.live_turns_of(&sub.requester) >= MAX_LIVE_TURNS_PER_CALLER {
            let f = Failure::new(
                Refusal::Capacity,
                format!(
                    "this caller has {MAX_LIVE_TURNS_PER_CALLER} turns running on this agent, the most one caller may; wait for one to end"
                ),
            )
            .retry_after(CALLER_BUSY_RETRY_AFTER_SECS);
            return engine.refuse(sub, f).await;
        }
    }
    engine.submit(sub).await
}

/// Reads section `value` of front `section` into its serde shape `T` (defaults when absent); an unknown or
/// ill-typed key is refused by name.
pub fn section<T: serde::de::DeserializeOwned + Default>(
    section: &'static str,
    value: Option<&serde_json::Value>,
) -> Result<T, FrontSettingError> {
    match value {
        None => Ok(T::default()),
        Some(v) => serde_json::from_value(v.clone()).map_err(|e| FrontSettingError {
            section,
            key: String::new(),
            reason: e.to_string(),
        }),
    }
}

/// The section of a front whose one setting is whether it runs: `[<name>] enabled` (default: yes).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OnOffSection {
    /// Whether the front runs (default: yes).
    pub enabled: Option<bool>,
}

/// How a front starts for its agents.
pub type StartFront = fn(FrontContext) -> BoxFuture<'static, Result<StartedFront, FrontStartError>>;

/// Reads section `value` of front `name`, whose one setting is whether it runs, into its plan; the front
/// starts with `start`. An unknown key (a typo of `enabled`) is refused by name.
pub fn on_off(
    name: &'static str,
    value: Option<&serde_json::Value>,
    start: StartFront,
) -> Result<Box<dyn FrontPlan>, FrontSettingError> {
    let s: OnOffSection = section(name, value)?;
    Ok(Box::new(OnOffPlan {
        enabled: s.enabled.unwrap_or(true),
        start,
    }))
}

/// The plan of a front whose one setting is whether it runs.
struct OnOffPlan {
    enabled: bool,
    start: StartFront,
}

impl std::fmt::Debug for OnOffPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnOffPlan")
            .field("enabled", &self.enabled)
            .finish()
    }
}

impl FrontPlan for OnOffPlan {
    fn enabled(&self) -> bool {
        self.enabled
    }

    fn view(&self) -> serde_json::Value {
        serde_json::json!({ "enabled": self.enabled })
    }

    fn start(
        &self,
        ctx: FrontContext,
    ) -> BoxFuture<'static, Result<StartedFront, FrontStartError>> {
        (self.start)(ctx)
    }
}

/// The running front of an HTTP front whose turns are its callers' requests (or read back from the
/// journal): after a crash the caller's connection is gone, so recovery ends a turn in the journal alone
/// ([`agentwire_engine::Unreachable`]: the turn lists show it ended) and there is nothing of its own to
/// drain. Stopping runs its `on_stop` (ending the sessions it holds).
pub struct RequestFront {
    protocol: &'static str,
    on_stop: Option<Box<dyn Fn() + Send + Sync>>,
}

impl RequestFront {
    /// The running front of protocol `protocol`.
    pub fn new(protocol: &'static str) -> Self {
        RequestFront {
            protocol,
            on_stop: None,
        }
    }

    /// Runs `f` when the daemon stops the front.
    pub fn on_stop(mut self, f: impl Fn() + Send + Sync + 'static) -> Self {
        self.on_stop = Some(Box::new(f));
        self
    }
}

impl Front for RequestFront {
    fn protocol(&self) -> &'static str {
        self.protocol
    }

    fn recovery_front(
        &self,
        _turn: &agentwire_engine::StoredTurn,
    ) -> Option<Arc<dyn agentwire_engine::TurnFront>> {
        Some(Arc::new(agentwire_engine::Unreachable))
    }

    fn drain(&self, _grace: std::time::Duration) -> BoxFuture<'_, usize> {
        Box::pin(async { 0 })
    }

    fn stop(&self) -> BoxFuture<'_, ()> {
        if let Some(f) = &self.on_stop {
            f();
        }
        Box::pin(async {})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn never(_: FrontContext) -> BoxFuture<'static, Result<StartedFront, FrontStartError>> {
        Box::pin(async { Err(FrontStartError::new("openai", "not started in this test")) })
    }

    #[test]
    fn a_front_that_does_not_start_is_named_with_its_reason() {
        let ctx = FrontContext {
            agents: Vec::new(),
            hub: WatchHub::new(),
        };
        let plan = on_off("openai", None, never).unwrap();
        let Some(Err(e)) = futures_util::FutureExt::now_or_never(plan.start(ctx)) else {
            panic!("the test front does not start")
        };
        assert_eq!(e.to_string(), "the openai front: not started in this test");
        assert_eq!(e.front, "openai");
        let source = std::error::Error::source(&e).expect("the reason is kept");
        assert_eq!(source.to_string(), "not started in this test");
    }

    #[test]
    fn an_on_off_section_is_on_by_default_and_refuses_unknown_keys() {
        let plan = on_off("openai", None, never).unwrap();
        assert!(plan.enabled());
        assert_eq!(plan.view(), serde_json::json!({"enabled": true}));
        let off = serde_json::json!({"enabled": false});
        assert!(!on_off("openai", Some(&off), never).unwrap().enabled());
        let typo = serde_json::json!({"enable": false});
        let e = on_off("openai", Some(&typo), never).unwrap_err();
        assert_eq!(e.section, "openai");
        assert!(e.reason.contains("enable"), "{e}");
        let bad = serde_json::json!({"enabled": "yes"});
        assert!(on_off("openai", Some(&bad), never).is_err());
    }

    #[test]
    fn a_request_front_ends_crashed_turns_in_the_journal_and_runs_its_stop() {
        let stopped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stopped.clone();
        let f = RequestFront::new("mcp")
            .on_stop(move || s.store(true, std::sync::atomic::Ordering::SeqCst));
        assert_eq!(f.protocol(), "mcp");
        futures_util::FutureExt::now_or_never(f.stop()).unwrap();
        assert!(stopped.load(std::sync::atomic::Ordering::SeqCst));
    }
}
