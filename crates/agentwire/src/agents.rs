//! The agents `serve` runs, every one on the same path: the one `--agent` names (the *default* agent) and
//! every `[agents.<name>]` with `expose`. Each has its own engine (its own `max_concurrent_turns`) over the
//! one journal and the one watch hub, journaling its turns under its own owner, so a restart's recovery of
//! one agent never ends another's; then the fronts it is exposed on:
//!
//! | front | the default agent | a further agent |
//! | --- | --- | --- |
//! | NIP-XX | always, with the data dir's `agent.key` (or `[nipxx] key_file`) | `expose = ["nipxx"]`, with `agents/<name>.key` (or its `key_file`) |
//! | fisk-ai | with `--nats`, under `[nats] identity` | `expose = ["fisk"]`, under its `nats_identity` |
//! | roost | unless a roost profile has its name | `expose = ["roost"]` |
//! | task cards | with `[tasks]` | never |
//! | a plug-in front (`openai`, `mcp`, `a2a`) | every one that runs | those its `expose` names |
//!
//! Each front is an entry of [`crate::fronts::FRONTS`], which decides when it serves the `--agent` agent.
//! [`prepare`] builds the agents and their engines and lets each front prepare what the embedded relay and
//! the roost supervisor start with (the agents' keys, their hosted profiles); [`start`] starts every front
//! for the agents exposed on it and runs each agent's recovery pass.

use crate::config::ExposedAgent;
use crate::keys;
use agentwire_agents::kind::{AgentPlan, BuildContext};
use agentwire_engine::{Engine, Front, TurnFront, WatchHub};
use agentwire_roost::front::RoostHost;
use agentwire_store::Journal;
use nostr::prelude::{Keys, PublicKey};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where the further agents' keys are, in the data dir.
pub(crate) const AGENT_KEYS_DIR: &str = "agents";
/// The default agent's key, in the data dir.
pub(crate) const AGENT_KEY_FILE: &str = "agent.key";

/// The key file of further agent `name` in [`AGENT_KEYS_DIR`].
pub(crate) fn key_file(name: &str) -> String {
    format!("{name}.key")
}

/// An agent to serve and the fronts it is on, as the configuration says.
pub(crate) struct AgentSpec {
    pub(crate) name: String,
    /// What it runs on.
    pub(crate) plan: Arc<dyn AgentPlan>,
    pub(crate) max_concurrent_turns: Option<usize>,
    /// The `--agent` agent: its turns' owner is the instance's bare name, its key the data dir's own.
    pub(crate) default: bool,
    /// The fronts it is on, by name, in the order of [`crate::fronts::FRONTS`].
    pub(crate) fronts: Vec<&'static str>,
    /// Its NIP-XX key from this file (shared by several instances), not the data dir's.
    pub(crate) key_file: Option<PathBuf>,
    /// Its fisk-ai identity, when it is on fisk-ai.
    pub(crate) fisk_identity: Option<String>,
    /// What its tokens cost, for its ai.info.
    pub(crate) pricing: Option<agentwire_nostr::nipxx::payload::PricingHints>,
}

impl AgentSpec {
    /// A further agent's spec.
    pub(crate) fn further(m: &ExposedAgent) -> AgentSpec {
        AgentSpec {
            name: m.choice.name.clone(),
            plan: m.choice.plan.clone(),
            max_concurrent_turns: m.choice.max_concurrent_turns,
            default: false,
            fronts: m.fronts.clone(),
            key_file: m.key_file.clone(),
            fisk_identity: m.fisk_identity.clone(),
            pricing: m.choice.pricing.clone(),
        }
    }

    /// Whether it is on front `name`.
    pub(crate) fn on(&self, name: &str) -> bool {
        self.fronts.contains(&name)
    }

    /// The owner its turns are journaled under: in a shared journal the instance's name too, so each
    /// instance recovers only its own.
    fn owner(&self, instance: Option<&str>) -> String {
        match (self.default, instance) {
            (true, Some(i)) => i.to_string(),
            (true, None) => agentwire_store::LOCAL_OWNER.to_string(),
            (false, Some(i)) => format!("{i}/agent:{}", self.name),
            (false, None) => format!("agent:{}", self.name),
        }
    }
}

/// Whether turn owner `owner` is agent `name`'s (the default agent's when `default`) on some instance.
fn owns(default: bool, name: &str, owner: &str) -> bool {
    match default {
        true => !owner.contains("/agent:"),
        false => owner.ends_with(&format!("/agent:{name}")),
    }
}

/// An agent built, not yet on any front: what its fronts prepared for it (before the embedded relay and
/// the roost supervisor start) is kept here for their start.
pub(crate) struct Prepared {
    pub(crate) spec: AgentSpec,
    pub(crate) engine: Arc<Engine>,
    /// Its NIP-XX key, when it is on NIP-XX.
    pub(crate) keys: Option<Keys>,
    /// Its hosted roost profile, when it is on roost.
    pub(crate) roost: Option<Arc<RoostHost>>,
}

impl Prepared {
    /// Its name.
    pub(crate) fn name(&self) -> &str {
        &self.spec.name
    }

    /// Whether it is the `--agent` agent.
    pub(crate) fn is_default(&self) -> bool {
        self.spec.default
    }

    /// Its hosted roost profile (named as the agent), when it is exposed there.
    pub(crate) fn roost_host(&self) -> Option<(String, Arc<RoostHost>)> {
        self.roost.clone().map(|h| (self.spec.name.clone(), h))
    }

    /// Its NIP-XX key, when it is on NIP-XX.
    pub(crate) fn keys(&self) -> Option<&Keys> {
        self.keys.as_ref()
    }

    /// Whether it is the task cards' agent.
    pub(crate) fn serves_tasks(&self) -> bool {
        self.spec.on(agentwire_tasks::PROTOCOL)
    }

    /// Its engine.
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }
}

/// What every agent shares.
pub(crate) struct Shared<'a> {
    pub(crate) data_dir: &'a Path,
    pub(crate) roost_socket: &'a Path,
    /// The hosted roost jobs served here: a model agent serving one's turn speaks as the job.
    pub(crate) hosted: &'a Arc<agentwire_roost::front::HostedSessions>,
    pub(crate) journal: &'a Arc<dyn Journal>,
    pub(crate) instance: Option<&'a str>,
    pub(crate) hub: &'a Arc<WatchHub>,
    /// The tracer every engine's turns are traced through (off without an exporter).
    pub(crate) telemetry: &'a agentwire_engine::Telemetry,
}

/// Builds each agent and its engine.
pub(crate) async fn prepare(
    specs: Vec<AgentSpec>,
    s: &Shared<'_>,
) -> Result<Vec<Prepared>, String> {
    let built = BuildContext {
        data_dir: s.data_dir.to_path_buf(),
        roost_socket: s.roost_socket.to_path_buf(),
        hosted: s.hosted.clone(),
        metrics: s.hub.metrics().clone(),
    };
    let mut out = Vec::new();
    for spec in specs {
        let agent = spec
            .plan
            .build(&spec.name, &built)
            .await
            .map_err(|e| e.to_string())?;
        let engine = Engine::with_hub(
            s.journal.clone(),
            agent,
            spec.owner(s.instance),
            s.hub.clone(),
        );
        if let Some(n) = spec.max_concurrent_turns {
            engine.limit_running(n);
        }
        engine.set_telemetry(s.telemetry.clone());
        let mut p = Prepared {
            spec,
            engine,
            keys: None,
            roost: None,
        };
        for front in crate::fronts::FRONTS {
            if p.spec.on(front.name()) {
                front.prepare(&mut p, s)?;
            }
        }
        out.push(p);
    }
    Ok(out)
}

/// The agents on their fronts, and what the fronts give the rest of the daemon.
pub(crate) struct Started {
    /// Every agent, the `--agent` one first.
    pub(crate) served: Vec<Serving>,
    /// The fronts shared by their agents (the plug-ins), drained and stopped after every agent.
    pub(crate) shared: Vec<Arc<dyn Front>>,
    /// The HTTP fronts' routes, for the one HTTP server.
    pub(crate) routes: Vec<agentwire_http::front::HttpRoutes>,
    /// What the fronts add to the ready line, by key.
    pub(crate) ready: Vec<(&'static str, serde_json::Value)>,
    /// What `/metrics` reads from the fronts when scraped.
    pub(crate) scrapes: Vec<agentwire_http::Scrape>,
}

/// Starts every front of [`crate::fronts::FRONTS`] for the agents exposed on it, then runs each agent's
/// recovery pass (through whichever of its fronts ended a turn's protocol).
pub(crate) async fn start(
    prepared: Vec<Prepared>,
    ctx: &crate::fronts::StartContext<'_>,
) -> Result<Started, String> {
    let mut own: Vec<Vec<Arc<dyn Front>>> = prepared.iter().map(|_| Vec::new()).collect();
    let mut fields: Vec<serde_json::Map<String, serde_json::Value>> =
        prepared.iter().map(|_| serde_json::Map::new()).collect();
    let mut all = Started {
        served: Vec::new(),
        shared: Vec::new(),
        routes: Vec::new(),
        ready: Vec::new(),
        scrapes: Vec::new(),
    };
    for front in crate::fronts::FRONTS {
        let on: Vec<&Prepared> = prepared
            .iter()
            .filter(|p| p.spec.on(front.name()))
            .collect();
        if on.is_empty() {
            continue;
        }
        let s = front.start(on, ctx).await?;
        let index = |name: &str| prepared.iter().position(|p| p.spec.name == name);
        for (name, f) in s.own {
            if let Some(i) = index(&name) {
                own[i].push(f);
            }
        }
        for (name, more) in s.ready_of_agent {
            if let Some(i) = index(&name) {
                fields[i].extend(more);
            }
        }
        all.shared.extend(s.shared);
        all.routes.extend(s.routes);
        all.ready.extend(s.ready);
        all.scrapes.extend(s.scrape);
    }
    for ((p, fronts), ready) in prepared.into_iter().zip(own).zip(fields) {
        let fisk = p.spec.on(agentwire_fisk::worker::PROTOCOL);
        // The agent's own fronts are drained and stopped with it; the shared ones once, after every agent.
        let recovering: Vec<Arc<dyn Front>> = fronts.iter().chain(&all.shared).cloned().collect();
        recover(&p.engine, &recovering, fisk, &p.spec.name).await;
        if let Some(lease) = ctx.config.journal.lease() {
            sweep_abandoned(&p.spec, p.engine.clone(), recovering, fisk, lease);
        }
        for front in crate::fronts::FRONTS.iter().filter(|f| p.spec.on(f.name())) {
            front.recovered(&p);
        }
        all.served.push(Serving {
            pubkey: p.keys.as_ref().map(|k| k.public_key()),
            spec: p.spec,
            engine: p.engine,
            ready,
            fronts,
        });
    }
    Ok(all)
}

/// One recovery pass of `engine` (agent `name`) for every protocol's turns a crash cut off, whichever
/// fronts are on now: a NIP-XX run's client is told on the relay; a fisk-ai caller's inbox is gone, so its
/// turn is ended in the journal and a resend is answered from there (also when fisk-ai is off now).
async fn recover(engine: &Arc<Engine>, fronts: &[Arc<dyn Front>], fisk_on: bool, name: &str) {
    let recovered = engine
        .recover(|t| front_for_ending(t, fronts, fisk_on))
        .await;
    match recovered {
        Ok(0) => {}
        Ok(n) => {
            tracing::warn!(agent = %name, turns = n, "ended turns interrupted by the last shutdown")
        }
        Err(e) => tracing::error!(agent = %name, error = %e, "could not recover interrupted turns"),
    }
}

/// The front that tells turn `t`'s requester how a crash ended it: the protocol's recovery front, or for
/// fisk-ai with no worker here the journal alone (a resend is answered from there).
fn front_for_ending(
    t: &agentwire_store::StoredTurn,
    fronts: &[Arc<dyn Front>],
    fisk_on: bool,
) -> Option<Arc<dyn TurnFront>> {
    match t.protocol.as_str() {
        agentwire_fisk::worker::PROTOCOL if !fisk_on => {
            Some(Arc::new(agentwire_fisk::worker::SilentFront) as Arc<dyn TurnFront>)
        }
        _ => fronts
            .iter()
            .find(|f| f.protocol() == t.protocol)
            .and_then(|f| f.recovery_front(t)),
    }
}

/// In a shared journal: ends, every half lease, the turns of this agent's other instances that lost their
/// lease. Runs until the process ends.
fn sweep_abandoned(
    spec: &AgentSpec,
    engine: Arc<Engine>,
    fronts: Vec<Arc<dyn Front>>,
    fisk_on: bool,
    lease: std::time::Duration,
) {
    let (name, default) = (spec.name.clone(), spec.default);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(lease / 2);
        loop {
            tick.tick().await;
            match engine
                .end_abandoned(
                    |o| owns(default, &name, o),
                    |t| front_for_ending(t, &fronts, fisk_on),
                )
                .await
            {
                Ok(0) => {}
                Ok(n) => {
                    tracing::warn!(agent = %name, turns = n, "ended turns of an instance that lost its lease")
                }
                Err(e) => {
                    tracing::warn!(agent = %name, error = %e, "could not look for abandoned turns")
                }
            }
        }
    });
}

/// An agent on its fronts.
pub(crate) struct Serving {
    spec: AgentSpec,
    engine: Arc<Engine>,
    pubkey: Option<PublicKey>,
    /// What its fronts add to its entry of the ready line.
    ready: serde_json::Map<String, serde_json::Value>,
    fronts: Vec<Arc<dyn Front>>,
}

impl Serving {
    /// Its name.
    pub(crate) fn name(&self) -> &str {
        &self.spec.name
    }

    /// Its NIP-XX key.
    pub(crate) fn pubkey(&self) -> Option<PublicKey> {
        self.pubkey
    }

    /// Its engine.
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Its entry in the ready line.
    pub(crate) fn ready(&self) -> serde_json::Value {
        let mut ready = serde_json::json!({
            "name": self.spec.name,
            "pubkey": self.pubkey.map(|k| k.to_hex()),
            "npub": self.pubkey.map(|k| keys::npub(&k)),
            "identity": null,
        });
        if let Some(fields) = ready.as_object_mut() {
            fields.extend(self.ready.clone());
        }
        ready
    }

    /// The agent as the turn API shows it.
    pub(crate) fn http_info(&self) -> agentwire_http::AgentInfo {
        agentwire_http::AgentInfo {
            name: self.spec.name.clone(),
            kind: self.spec.plan.kind().into(),
            fronts: self.spec.fronts.iter().map(|n| n.to_string()).collect(),
            card: self.engine.card(),
        }
    }

    /// Drains its turns (within `grace`) and takes its fronts off the wire; returns the turns still running.
    pub(crate) async fn shut_down(&self, grace: std::time::Duration) -> usize {
        self.engine.shut_down(&self.fronts, grace).await
    }
}
