//! The one list of fronts the daemon runs, every one behind the same trait ([`DaemonFront`]): names in
//! `expose` are checked against it (an unknown one is refused naming them all), an agent's fronts are a set
//! of its names, and `serve` prepares and starts each front for the agents exposed on it the same way.
//!
//! The four protocols the daemon was built around are entries of their own, one file each
//! ([`nipxx`], [`fisk`], [`roost`], [`tasks`]): their sections and flags are resolved by their crates'
//! `settings` modules. A plug-in front ([`agentwire_http::front::FrontKind`]) is one crate and one line in
//! [`FRONTS`] ([`PlugIn`]): its section of the configuration file (`[<name>]`) is handed to it whole, it
//! resolves and prints it, and it starts for the agents exposed on it (an HTTP front mounts its routes on
//! the one HTTP server).

mod fisk;
mod nipxx;
mod plug_in;
mod roost;
mod tasks;

pub(crate) use plug_in::PlugIn;

use crate::agents::{Prepared, Shared};
use crate::config::{PlugInFront, Resolved};
use agentwire_engine::{Front, WatchHub};
use agentwire_http::front::{FrontKind, HttpRoutes};
use futures_util::future::BoxFuture;
use std::sync::Arc;
use std::time::Duration;

/// A front as the daemon runs it: one entry of [`FRONTS`].
pub(crate) trait DaemonFront: Sync {
    /// Its name: in `expose`, in an agent's fronts, and the protocol its turns are journaled under.
    fn name(&self) -> &'static str;
    /// What it serves, in a few words.
    fn about(&self) -> &'static str;
    /// Whether an agent besides the `--agent` one may be exposed on it.
    fn further(&self) -> bool {
        true
    }
    /// The plug-in behind it, whose `[<name>]` section the configuration file hands over whole.
    fn plug_in(&self) -> Option<&'static dyn FrontKind> {
        None
    }
    /// Whether it serves the `--agent` agent under `config`.
    fn serves_default(&self, config: &Resolved) -> bool;
    /// Its section of the configuration (`[<section>]`) as `agentwire config` prints it (the file's own
    /// keys, nothing secret), when the configuration has it.
    fn section(&self, config: &Resolved) -> Option<(&'static str, serde_json::Value)>;
    /// What an agent exposed on it needs of it before the embedded relay and the roost supervisor start
    /// (which take the agents' keys and hosted profiles).
    fn prepare(&self, _agent: &mut Prepared, _shared: &Shared<'_>) -> Result<(), String> {
        Ok(())
    }
    /// Starts it for `agents`, those exposed on it (the `--agent` one first when it is).
    fn start<'a>(
        &'a self,
        agents: Vec<&'a Prepared>,
        ctx: &'a StartContext<'a>,
    ) -> BoxFuture<'a, Result<Started, String>>;
    /// After the recovery pass of `agent` (exposed on it) has ended the turns a crash cut off.
    fn recovered(&self, _agent: &Prepared) {}
}

/// What the fronts are started with: the daemon's parts that run by then, and the sections resolved.
pub(crate) struct StartContext<'a> {
    /// The whole configuration, resolved.
    pub(crate) config: &'a Resolved,
    /// The relays the Nostr fronts use: the embedded one first when it runs.
    pub(crate) relays: &'a [String],
    /// The embedded relay's URL: it checks ids and signatures before it stores or sends an event.
    pub(crate) embedded: Option<String>,
    /// The signatures this process makes, which the embedded relay does not verify again: an agent's
    /// signer tells it of each (none without the embedded relay).
    pub(crate) signed_here: Option<Arc<agentwire_relay::SignedHere>>,
    /// Every turn's events, for watchers.
    pub(crate) hub: &'a Arc<WatchHub>,
}

impl<'a> StartContext<'a> {
    /// How long ended turns are kept: a request older than this is not served after a restart.
    pub(crate) fn retention(&self) -> Option<Duration> {
        self.config.journal_retention
    }

    /// The plug-in front of name `name`, resolved.
    pub(crate) fn plug_in(&self, name: &str) -> Option<&'a PlugInFront> {
        self.config.fronts.iter().find(|f| f.kind.name() == name)
    }
}

/// A front started.
#[derive(Default)]
pub(crate) struct Started {
    /// Each agent's own front, by the agent's name: drained and stopped with the agent.
    pub(crate) own: Vec<(String, Arc<dyn Front>)>,
    /// One front for all its agents: drained and stopped after every agent.
    pub(crate) shared: Option<Arc<dyn Front>>,
    /// For an HTTP front, the routes it mounts on the one server.
    pub(crate) routes: Option<HttpRoutes>,
    /// What it adds to an agent's entry of the ready line, by the agent's name.
    pub(crate) ready_of_agent: Vec<(String, serde_json::Map<String, serde_json::Value>)>,
    /// What it adds to the ready line itself (its own key).
    pub(crate) ready: Option<(&'static str, serde_json::Value)>,
    /// What `/metrics` reads from it when scraped.
    pub(crate) scrape: Option<agentwire_http::Scrape>,
}

/// Every front, in the order an agent's fronts are listed, started and stopped.
pub(crate) const FRONTS: &[&dyn DaemonFront] = &[
    &nipxx::Nipxx,
    &fisk::Fisk,
    &roost::Roost,
    &tasks::Tasks,
    &PlugIn(&agentwire_openai_front::OpenAiFront),
    &PlugIn(&agentwire_mcp_front::McpFront),
    &PlugIn(&agentwire_a2a_front::A2aFront),
];

/// The plug-in fronts.
pub(crate) fn plug_ins() -> impl Iterator<Item = &'static dyn FrontKind> {
    FRONTS.iter().filter_map(|f| f.plug_in())
}

/// The front named `name`.
pub(crate) fn find(name: &str) -> Option<&'static dyn DaemonFront> {
    FRONTS.iter().copied().find(|f| f.name() == name)
}

/// The fronts of `names`, in the list's order (what `expose` names, as an agent's fronts).
pub(crate) fn in_order(names: &[impl AsRef<str>]) -> Vec<&'static str> {
    FRONTS
        .iter()
        .map(|f| f.name())
        .filter(|n| names.iter().any(|m| m.as_ref() == *n))
        .collect()
}

/// Every front's section as `agentwire config` prints it, by section name.
pub(crate) fn sections(config: &Resolved) -> Vec<(&'static str, serde_json::Value)> {
    FRONTS.iter().filter_map(|f| f.section(config)).collect()
}

/// Its section's view as a JSON value (a view that cannot be one is a bug: printed as its error).
fn view_value(view: impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(view).unwrap_or_else(|e| serde_json::Value::String(e.to_string()))
}

/// The fronts the `--agent` agent is on under `config`.
pub(crate) fn of_default(config: &Resolved) -> Vec<&'static str> {
    FRONTS
        .iter()
        .filter(|f| f.serves_default(config))
        .map(|f| f.name())
        .collect()
}

/// Whether a further agent may be exposed on front `name` (it is one, and not the `--agent` agent's only).
pub(crate) fn exposable(name: &str) -> Result<(), String> {
    match find(name) {
        Some(f) if !f.further() => Err(format!("{name:?} serves the --agent agent only")),
        Some(_) => Ok(()),
        None => Err(format!(
            "{name:?} is not a front; fronts: {}",
            FRONTS
                .iter()
                .filter(|f| f.further())
                .map(|f| format!("{} ({})", f.name(), f.about()))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_an_unknown_one_is_refused_naming_them_all() {
        let mut names: Vec<_> = FRONTS.iter().map(|f| f.name()).collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n, "one entry a name");
        assert!(exposable("nipxx").is_ok() && exposable("openai").is_ok());
        let e = exposable("smtp").unwrap_err();
        for name in ["nipxx", "fisk", "roost", "openai", "mcp", "a2a"] {
            assert!(e.contains(name), "{e}");
        }
        assert!(exposable("tasks")
            .unwrap_err()
            .contains("--agent agent only"));
    }

    #[test]
    fn an_agents_fronts_are_in_the_lists_order() {
        assert_eq!(
            in_order(&["a2a", "roost", "nipxx", "smtp"]),
            ["nipxx", "roost", "a2a"]
        );
    }
}
