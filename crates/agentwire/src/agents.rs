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
//! | a plug-in front ([`crate::fronts`]: `openai`) | every one that runs | those its `expose` names |
//!
//! [`prepare`] builds the agents and their engines (before the relay and the roost supervisor start, which
//! need their keys and hosted profiles); [`start`] puts each on its fronts and runs its recovery pass.

use crate::config::{AgentKind, ExposedAgent};
use crate::keys;
use agentwire_engine::{Engine, Front, TurnFront, WatchHub};
use agentwire_fisk::worker::{Worker, WorkerConfig};
use agentwire_nostr::crypto::Crypto;
use agentwire_nostr::runtime::{Runtime, RuntimeConfig};
use agentwire_roost::front::RoostHost;
use agentwire_store::Journal;
use agentwire_tasks::{TaskAdapter, TaskConfig};
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
    pub(crate) kind: AgentKind,
    pub(crate) max_concurrent_turns: Option<usize>,
    /// The `--agent` agent: its turns' owner is the instance's bare name, its key the data dir's own.
    pub(crate) default: bool,
    /// On NIP-XX.
    pub(crate) nipxx: bool,
    /// Its NIP-XX key from this file (shared by several instances), not the data dir's.
    pub(crate) key_file: Option<PathBuf>,
    /// On fisk-ai, under this identity.
    pub(crate) fisk_identity: Option<String>,
    /// On roost, as a hosted profile of its name.
    pub(crate) roost: bool,
    /// The task cards' agent.
    pub(crate) tasks: bool,
    /// What its tokens cost, for its ai.info.
    pub(crate) pricing: Option<agentwire_nostr::nipxx::payload::PricingHints>,
    /// The plug-in fronts it is on, by name.
    pub(crate) plug_ins: Vec<&'static str>,
}

impl AgentSpec {
    /// A further agent's spec.
    pub(crate) fn further(m: &ExposedAgent) -> AgentSpec {
        AgentSpec {
            name: m.choice.name.clone(),
            kind: m.choice.kind.clone(),
            max_concurrent_turns: m.choice.max_concurrent_turns,
            default: false,
            nipxx: m.nipxx,
            key_file: m.key_file.clone(),
            fisk_identity: m.fisk_identity.clone(),
            roost: m.roost,
            tasks: false,
            pricing: m.choice.pricing.clone(),
            plug_ins: m.plug_ins.clone(),
        }
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

/// An agent built, not yet on any front.
pub(crate) struct Prepared {
    spec: AgentSpec,
    engine: Arc<Engine>,
    keys: Option<Keys>,
    roost: Option<Arc<RoostHost>>,
}

impl Prepared {
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
        self.spec.tasks
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
    let mut out = Vec::new();
    for spec in specs {
        let agent = crate::serve::make_agent(
            &spec.name,
            &spec.kind,
            s.roost_socket,
            s.hosted,
            s.data_dir,
            s.hub.metrics(),
        )
        .await?;
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
        let keys = match (spec.nipxx, &spec.key_file, spec.default) {
            (false, ..) => None,
            (true, Some(path), _) => Some(keys::load_shared(path)?),
            (true, None, true) => Some(keys::load_or_create(s.data_dir, AGENT_KEY_FILE)?),
            (true, None, false) => Some(keys::load_or_create(
                &s.data_dir.join(AGENT_KEYS_DIR),
                &key_file(&spec.name),
            )?),
        };
        let roost = spec
            .roost
            .then(|| RoostHost::new(engine.clone(), &spec.name, s.hosted.clone()));
        out.push(Prepared {
            spec,
            engine,
            keys,
            roost,
        });
    }
    Ok(out)
}

/// The plug-in fronts that run, started for the agents exposed on each: each front's life in the daemon
/// and the routes it mounts on the HTTP server.
pub(crate) async fn start_plug_ins(
    prepared: &[Prepared],
    fronts: &[crate::config::PlugInFront],
    http_on: bool,
    hub: &Arc<WatchHub>,
) -> Result<(Vec<Arc<dyn Front>>, Vec<agentwire_http::front::HttpRoutes>), String> {
    let (mut started, mut routes) = (Vec::new(), Vec::new());
    for f in fronts.iter().filter(|f| f.runs(http_on)) {
        let name = f.kind.name();
        let agents = prepared
            .iter()
            .filter(|p| p.spec.plug_ins.contains(&name))
            .map(|p| agentwire_http::front::ExposedAgent {
                name: p.spec.name.clone(),
                engine: p.engine.clone(),
                default: p.spec.default,
            })
            .collect();
        let s = f
            .plan
            .start(agentwire_http::front::FrontContext {
                agents,
                hub: hub.clone(),
            })
            .await
            .map_err(|e| format!("the {name} front: {e}"))?;
        started.push(s.front);
        routes.extend(s.routes);
    }
    Ok((started, routes))
}

/// What the fronts of every agent are started with.
pub(crate) struct FrontsConfig<'a> {
    /// The NIP-XX runtime's relays and policy (each agent signs with its own key).
    pub(crate) runtime: &'a RuntimeConfig,
    /// The fisk-ai worker's connection and settings (each agent under its own identity).
    pub(crate) nats: Option<&'a WorkerConfig>,
    /// The task-card adapter's settings.
    pub(crate) tasks: Option<TaskConfig>,
    /// A shared journal's lease: other instances' abandoned turns are swept every half of it.
    pub(crate) lease: Option<std::time::Duration>,
    /// The plug-in fronts, started already: a turn of theirs a crash cut off is ended through them.
    pub(crate) plug_ins: &'a [Arc<dyn Front>],
}

/// An agent on its fronts.
pub(crate) struct Serving {
    spec: AgentSpec,
    engine: Arc<Engine>,
    pubkey: Option<PublicKey>,
    worker: Option<Arc<Worker>>,
    fronts: Vec<Arc<dyn Front>>,
}

/// Starts each prepared agent's fronts and its recovery pass.
pub(crate) async fn start(
    prepared: Vec<Prepared>,
    c: &FrontsConfig<'_>,
) -> Result<Vec<Serving>, String> {
    let mut out = Vec::new();
    for p in prepared {
        let mut fronts: Vec<Arc<dyn Front>> = Vec::new();
        let pubkey = p.keys.as_ref().map(|k| k.public_key());
        let crypto = p.keys.map(|k| Arc::new(Crypto::new(k)));
        let mut worker = None;
        if let (Some(identity), Some(nats)) = (&p.spec.fisk_identity, c.nats) {
            let config = WorkerConfig {
                identity: identity.clone(),
                ..nats.clone()
            };
            let w = Worker::start(config, p.engine.clone()).await.map_err(|e| {
                match p.spec.default {
                    true => format!("fisk-ai worker: {e}"),
                    false => format!("[agents.{}] fisk-ai worker: {e}", p.spec.name),
                }
            })?;
            fronts.push(w.clone());
            worker = Some(w);
        }
        if let (true, Some(config), Some(crypto)) = (p.spec.tasks, &c.tasks, &crypto) {
            fronts.push(TaskAdapter::start(config.clone(), crypto.clone(), p.engine.clone()).await);
        }
        if let Some(crypto) = crypto {
            let config = agentwire_nostr::runtime::RuntimeConfig {
                pricing_hints: p.spec.pricing.clone(),
                ..c.runtime.clone()
            };
            fronts.push(Runtime::start(config, crypto, p.engine.clone()).await);
        }
        let fisk = worker.is_some();
        // The agent's own fronts are drained and stopped with it; the plug-ins (shared by every agent on
        // them) once, after every agent.
        let recovering: Vec<Arc<dyn Front>> = fronts.iter().chain(c.plug_ins).cloned().collect();
        recover(&p.engine, &recovering, fisk, &p.spec.name).await;
        if let Some(lease) = c.lease {
            sweep_abandoned(&p.spec, p.engine.clone(), recovering, fisk, lease);
        }
        if let Some(h) = &p.roost {
            h.recovered();
        }
        out.push(Serving {
            spec: p.spec,
            engine: p.engine,
            pubkey,
            worker,
            fronts,
        });
    }
    Ok(out)
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

impl Serving {
    /// Its name.
    pub(crate) fn name(&self) -> &str {
        &self.spec.name
    }

    /// Its NIP-XX key.
    pub(crate) fn pubkey(&self) -> Option<PublicKey> {
        self.pubkey
    }

    /// Its fisk-ai worker.
    pub(crate) fn worker(&self) -> Option<&Arc<Worker>> {
        self.worker.as_ref()
    }

    /// Its engine.
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Its entry in the ready line.
    pub(crate) fn ready(&self) -> serde_json::Value {
        serde_json::json!({
            "name": self.spec.name,
            "pubkey": self.pubkey.map(|k| k.to_hex()),
            "npub": self.pubkey.map(|k| keys::npub(&k)),
            "identity": self.worker.as_ref().map(|w| w.identity()),
        })
    }

    /// The agent as the turn API shows it.
    pub(crate) fn http_info(&self) -> agentwire_http::AgentInfo {
        let mut fronts: Vec<String> = self
            .fronts
            .iter()
            .map(|f| f.protocol().to_string())
            .collect();
        if self.spec.roost {
            fronts.push("roost".into());
        }
        fronts.extend(self.spec.plug_ins.iter().map(|n| n.to_string()));
        agentwire_http::AgentInfo {
            name: self.spec.name.clone(),
            kind: self.spec.kind.name().into(),
            fronts,
            card: self.engine.card(),
        }
    }

    /// Drains its turns (within `grace`) and takes its fronts off the wire; returns the turns still running.
    pub(crate) async fn shut_down(&self, grace: std::time::Duration) -> usize {
        self.engine.shut_down(&self.fronts, grace).await
    }
}
