//! The further agents `serve` runs beside the one `--agent` names: every `[agents.<name>]` with `expose`.
//! Each has its own engine (its own `max_concurrent_turns`) over the one journal, journaling its turns
//! under its own owner so that a restart's recovery pass of one agent never ends another's; on NIP-XX its
//! own key (`agents/<name>.key` in the data dir, created once, 0600) and so its own ai.info; on fisk-ai its
//! own identity; on roost a hosted profile of its name.

use crate::config::ExposedAgent;
use crate::keys;
use agentwire_engine::{Engine, Front, TurnFront};
use agentwire_fisk::worker::{Worker, WorkerConfig};
use agentwire_nostr::crypto::Crypto;
use agentwire_nostr::runtime::{Runtime, RuntimeConfig};
use agentwire_roost::front::RoostHost;
use agentwire_store::Journal;
use nostr::prelude::{Keys, PublicKey};
use std::path::Path;
use std::sync::Arc;

/// Where the further agents' keys are, in the data dir.
pub(crate) const AGENT_KEYS_DIR: &str = "agents";

/// The key file of agent `name` in [`AGENT_KEYS_DIR`].
pub(crate) fn key_file(name: &str) -> String {
    format!("{name}.key")
}

/// A further agent, built but not yet on any front.
pub(crate) struct Prepared {
    name: String,
    kind: &'static str,
    keys: Option<Keys>,
    engine: Arc<Engine>,
    fisk_identity: Option<String>,
    /// Its hosted roost profile, when it is exposed there.
    roost: Option<Arc<RoostHost>>,
}

impl Prepared {
    /// Its hosted roost profile (named as the agent), when it is exposed there.
    pub(crate) fn roost_host(&self) -> Option<(String, Arc<RoostHost>)> {
        self.roost.clone().map(|h| (self.name.clone(), h))
    }

    /// Its NIP-XX key, when it is exposed there (the embedded relay lets it write without a rate).
    pub(crate) fn public_key(&self) -> Option<PublicKey> {
        self.keys.as_ref().map(|k| k.public_key())
    }
}

/// Builds each further agent and its engine.
pub(crate) async fn prepare(
    more: &[ExposedAgent],
    data_dir: &Path,
    roost_socket: &Path,
    journal: &Arc<dyn Journal>,
    instance: Option<&str>,
    hub: &Arc<agentwire_engine::WatchHub>,
) -> Result<Vec<Prepared>, String> {
    let mut out = Vec::new();
    for m in more {
        let name = &m.choice.name;
        let agent = crate::serve::make_agent(name, &m.choice.kind, roost_socket, data_dir).await?;
        // In a shared journal, the instance's name too: each instance recovers only its own.
        let owner = match instance {
            Some(i) => format!("{i}/agent:{name}"),
            None => format!("agent:{name}"),
        };
        let engine = Engine::with_hub(journal.clone(), agent, owner, hub.clone());
        if let Some(n) = m.choice.max_concurrent_turns {
            engine.limit_running(n);
        }
        let keys = match (m.nipxx, &m.key_file) {
            (true, Some(path)) => Some(keys::load_shared(path)?),
            (true, None) => Some(keys::load_or_create(
                &data_dir.join(AGENT_KEYS_DIR),
                &key_file(name),
            )?),
            (false, _) => None,
        };
        let roost = m.roost.then(|| RoostHost::new(engine.clone(), name));
        out.push(Prepared {
            name: name.clone(),
            kind: m.choice.kind.name(),
            keys,
            engine,
            fisk_identity: m.fisk_identity.clone(),
            roost,
        });
    }
    Ok(out)
}

/// A further agent on its fronts.
pub(crate) struct Serving {
    name: String,
    kind: &'static str,
    /// Exposed on roost as a hosted profile.
    roost: bool,
    pubkey: Option<PublicKey>,
    identity: Option<String>,
    engine: Arc<Engine>,
    fronts: Vec<Arc<dyn Front>>,
}

/// Starts each prepared agent's fronts (the NIP-XX runtime on `runtime`'s relays, the fisk-ai worker on
/// `nats` under its identity) and its recovery pass.
pub(crate) async fn start(
    prepared: Vec<Prepared>,
    runtime: &RuntimeConfig,
    nats: Option<&WorkerConfig>,
    lease: Option<std::time::Duration>,
) -> Result<Vec<Serving>, String> {
    let mut out = Vec::new();
    for p in prepared {
        let mut fronts: Vec<Arc<dyn Front>> = Vec::new();
        let pubkey = p.public_key();
        if let Some(keys) = p.keys {
            let crypto = Arc::new(Crypto::new(keys));
            fronts.push(Runtime::start(runtime.clone(), crypto, p.engine.clone()).await);
        }
        let mut fisk = false;
        if let (Some(identity), Some(nats)) = (&p.fisk_identity, nats) {
            let config = WorkerConfig {
                identity: identity.clone(),
                ..nats.clone()
            };
            let worker = Worker::start(config, p.engine.clone())
                .await
                .map_err(|e| format!("[agents.{}] fisk-ai worker: {e}", p.name))?;
            fronts.push(worker);
            fisk = true;
        }
        recover(&p.engine, &fronts, fisk, &p.name).await;
        if let Some(lease) = lease {
            sweep_abandoned(
                p.engine.clone(),
                fronts.clone(),
                fisk,
                p.name.clone(),
                false,
                lease,
            );
        }
        if let Some(h) = &p.roost {
            h.recovered();
        }
        out.push(Serving {
            name: p.name,
            kind: p.kind,
            roost: p.roost.is_some(),
            pubkey,
            identity: p.fisk_identity,
            engine: p.engine,
            fronts,
        });
    }
    Ok(out)
}

/// One recovery pass of `engine` (agent `name`) for every protocol's turns a crash cut off, whichever
/// fronts are on now: a NIP-XX run's client is told on the relay; a fisk-ai caller's inbox is gone, so its
/// turn is ended in the journal and a resend is answered from there (also when fisk-ai is off now).
pub(crate) async fn recover(
    engine: &Arc<Engine>,
    fronts: &[Arc<dyn Front>],
    fisk_on: bool,
    name: &str,
) {
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

/// In a shared journal: ends, every half lease, the turns of agent `name`'s other instances that lost
/// their lease (`default`: the `--agent` agent, whose owners are bare instance names; else a further
/// agent's, `<instance>/agent:<name>`). Runs until the process ends.
pub(crate) fn sweep_abandoned(
    engine: Arc<Engine>,
    fronts: Vec<Arc<dyn Front>>,
    fisk_on: bool,
    name: String,
    default: bool,
    lease: std::time::Duration,
) {
    tokio::spawn(async move {
        let suffix = format!("/agent:{name}");
        let same_agent = |owner: &str| match default {
            true => !owner.contains("/agent:"),
            false => owner.ends_with(&suffix),
        };
        let mut tick = tokio::time::interval(lease / 2);
        loop {
            tick.tick().await;
            match engine
                .end_abandoned(same_agent, |t| front_for_ending(t, &fronts, fisk_on))
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
    /// Its entry in the ready line.
    pub(crate) fn ready(&self) -> serde_json::Value {
        serde_json::json!({
            "name": self.name,
            "pubkey": self.pubkey.map(|k| k.to_hex()),
            "npub": self.pubkey.map(|k| keys::npub(&k)),
            "identity": self.identity,
        })
    }

    /// Its engine.
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The agent as the turn API shows it.
    pub(crate) fn http_info(&self) -> agentwire_http::AgentInfo {
        let mut fronts: Vec<String> = self
            .fronts
            .iter()
            .map(|f| f.protocol().to_string())
            .collect();
        if self.roost {
            fronts.push("roost".into());
        }
        agentwire_http::AgentInfo {
            name: self.name.clone(),
            kind: self.kind.into(),
            fronts,
            card: self.engine.card(),
        }
    }

    /// Drains its turns (within `grace`) and takes its fronts off the wire; returns the turns still running.
    pub(crate) async fn shut_down(&self, grace: std::time::Duration) -> usize {
        self.engine.shut_down(&self.fronts, grace).await
    }
}
