//! `agentwire serve`: the embedded relay, the journal, the engine and the NIP-XX runtime, wired together.

use crate::config::{self, FileConfig};
use crate::keys;
use agentwire_agents::{DemoAgent, RoostJobAgent};
use agentwire_engine::{Agent, Engine, TurnFront};
use agentwire_fisk::worker::{Worker, WorkerConfig};
use agentwire_nostr::crypto::Crypto;
use agentwire_nostr::nipxx::policy::RateLimit;
use agentwire_nostr::runtime::{Runtime, RuntimeConfig};
use agentwire_relay::RelayConfig;
use agentwire_store::SqliteJournal;
use clap::Args;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// `serve` flags.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Address of the embedded relay (default 127.0.0.1:7777; port 0 picks a free one).
    #[arg(long)]
    relay_listen: Option<SocketAddr>,
    /// Use this external relay (repeatable). With it the embedded relay is off unless --relay-listen is given.
    #[arg(long = "relay", value_parser = config::relay_url)]
    relays: Vec<String>,
    /// A PEM file of CA certificates to trust for wss:// relays, besides Mozilla's roots.
    #[arg(long, env = "AGENTWIRE_RELAY_CA_FILE")]
    relay_ca_file: Option<PathBuf>,
    /// The agent to serve (`demo`).
    #[arg(long)]
    agent: Option<String>,
    /// Only these senders may prompt (hex or npub; repeatable).
    #[arg(long)]
    allow: Vec<String>,
    /// Refuse these senders (hex or npub; repeatable).
    #[arg(long)]
    block: Vec<String>,
    /// Sustained prompts per second per sender.
    #[arg(long)]
    rate_per_second: Option<f64>,
    /// Burst of prompts per sender.
    #[arg(long)]
    rate_burst: Option<f64>,
    /// Serve stored prompts younger than this many seconds that arrived while the agent was down.
    #[arg(long)]
    backlog_horizon_secs: Option<u64>,
    /// Privacy-first profile: also take NIP-59 gift-wrapped prompts and answer them wrapped
    /// (ai.info then says `supports_nip59`).
    #[arg(long)]
    nip59: bool,
    /// Serve the agent as a fisk-ai worker on this NATS server (needs --identity).
    #[arg(long)]
    nats: Option<String>,
    /// The fisk-ai identity: subjects `choria.fisk-ai.*.<identity>` and the queue group.
    #[arg(long)]
    identity: Option<String>,
    /// fisk-ai runs at a time; past it requests are refused with `capacity` (default 1).
    #[arg(long)]
    nats_workers: Option<usize>,
    /// Put the agent's questions to fisk-ai callers (elicit); off refuses approval-gated tools.
    #[arg(long)]
    nats_elicit: bool,
    /// Seconds a fisk-ai question is held open (`request_timeout`, default 120).
    #[arg(long)]
    nats_request_timeout: Option<u64>,
    /// The roost supervisor's socket (default `$XDG_RUNTIME_DIR/agentwire/roost.sock`).
    #[arg(long)]
    roost_socket: Option<PathBuf>,
    /// A roost.json whose `agentProfiles` the supervisor runs (besides `[roost.profiles]`).
    #[arg(long)]
    roost_config: Option<PathBuf>,
}

fn parse_keys(list: &[String]) -> Result<HashSet<nostr::prelude::PublicKey>, String> {
    list.iter().map(|s| keys::parse_public_key(s)).collect()
}

/// The agent named `name`: `demo`, `roost:<profile>`, or an `[agents.<name>]` entry.
fn make_agent(
    name: &str,
    file: &FileConfig,
    profiles: &std::collections::HashMap<String, agentwire_roost::profile::Profile>,
    roost_socket: &std::path::Path,
) -> Result<Arc<dyn Agent>, String> {
    let roost = |profile: &str| -> Result<Arc<dyn Agent>, String> {
        if !profiles.contains_key(profile) {
            return Err(format!(
                "agent {name:?} runs the roost profile {profile:?}, which is not configured ([roost.profiles.{profile}] or --roost-config)"
            ));
        }
        Ok(Arc::new(RoostJobAgent::new(
            roost_socket.to_path_buf(),
            profile,
        )))
    };
    if let Some(profile) = name.strip_prefix("roost:") {
        return roost(profile);
    }
    if let Some(a) = file.agents.get(name) {
        return match (a.kind.as_str(), a.profile.as_deref()) {
            ("roost", Some(profile)) => roost(profile),
            ("roost", None) => Err(format!("[agents.{name}] of kind roost needs a profile")),
            ("demo", _) => Ok(Arc::new(DemoAgent)),
            (k, _) => Err(format!(
                "[agents.{name}] has an unknown kind {k:?}; kinds: demo, roost"
            )),
        };
    }
    match name {
        "demo" => Ok(Arc::new(DemoAgent)),
        other => Err(format!(
            "unknown agent {other:?}; available: demo, roost:<profile>, or an [agents.<name>] entry"
        )),
    }
}

/// How long a shutdown waits for running turns: long enough for a demo or a short model turn, short
/// enough that a service manager's stop does not hang (systemd's default is 90 s).
const DRAIN_GRACE: Duration = Duration::from_secs(60);

/// Runs the daemon until SIGINT or SIGTERM.
pub(crate) async fn run(
    args: ServeArgs,
    file: FileConfig,
    data_dir: PathBuf,
) -> Result<ExitCode, String> {
    keys::ensure_data_dir(&data_dir)?;
    let agent_keys = keys::load_or_create(&data_dir, "agent.key")?;
    let agent_name = args
        .agent
        .or(file.serve.agent.clone())
        .unwrap_or_else(|| "demo".into());
    let mut profiles = file.roost.profiles.clone();
    if let Some(path) = args.roost_config.as_ref().or(file.roost.config.as_ref()) {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let more = agentwire_roost::profile::from_roost_json(&text)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        profiles.extend(more);
    }
    agentwire_roost::profile::check(&profiles).map_err(|e| e.to_string())?;
    let roost_socket = args
        .roost_socket
        .clone()
        .or(file.roost.socket.clone())
        .unwrap_or_else(|| config::default_roost_socket(&data_dir));
    let agent = make_agent(&agent_name, &file, &profiles, &roost_socket)?;
    let external: Vec<String> = if args.relays.is_empty() {
        file.serve.relays.clone()
    } else {
        args.relays.clone()
    };
    for url in &external {
        config::relay_url(url)?;
    }
    config::install_relay_ca_file(
        args.relay_ca_file
            .as_deref()
            .or(file.serve.relay_ca_file.as_deref()),
    )?;
    let listen = args.relay_listen.or(file.serve.relay_listen);
    let embedded = if external.is_empty() || listen.is_some() {
        let addr =
            listen.unwrap_or_else(|| config::DEFAULT_RELAY_LISTEN.parse().expect("valid default"));
        let mut rc = RelayConfig::new(addr, data_dir.join("relay.sqlite"));
        rc.limits = file.relay.limits;
        if let Some(n) = file.relay.name.clone() {
            rc.name = n;
        }
        rc.unlimited_authors.insert(agent_keys.public_key());
        Some(
            agentwire_relay::start(rc)
                .await
                .map_err(|e| format!("embedded relay: {e}"))?,
        )
    } else {
        None
    };
    let mut relays = Vec::new();
    if let Some(r) = &embedded {
        relays.push(r.url());
    }
    relays.extend(external);
    let journal =
        Arc::new(SqliteJournal::open(&data_dir.join("journal.sqlite")).map_err(|e| e.to_string())?);
    let engine = Engine::new(journal, agent);
    let roost = agentwire_roost::daemon::Daemon::start(agentwire_roost::daemon::DaemonConfig {
        socket: roost_socket.clone(),
        data_dir: data_dir.join("roost"),
        profiles,
    })
    .await
    .map_err(|e| e.to_string())?;
    let nats_url = args.nats.clone().or(file.nats.url.clone());
    let fisk = match nats_url {
        None => None,
        Some(url) => {
            let identity = args
                .identity
                .clone()
                .or(file.nats.identity.clone())
                .ok_or("--nats needs --identity NAME (or [nats] identity)")?;
            let config = WorkerConfig {
                url,
                identity,
                workers: args
                    .nats_workers
                    .or(file.nats.workers)
                    .unwrap_or(agentwire_fisk::worker::DEFAULT_WORKERS),
                elicit: args.nats_elicit || file.nats.elicit.unwrap_or(false),
                request_timeout: args
                    .nats_request_timeout
                    .or(file.nats.request_timeout_secs)
                    .map(Duration::from_secs)
                    .unwrap_or(agentwire_fisk::worker::DEFAULT_REQUEST_TIMEOUT),
                system_prompt: file.nats.system_prompt.clone().unwrap_or_default(),
                max_tokens: file.nats.max_tokens,
                instance: file.nats.instance.clone(),
            };
            Some(
                Worker::start(config, engine.clone())
                    .await
                    .map_err(|e| format!("fisk-ai worker: {e}"))?,
            )
        }
    };
    let crypto = Arc::new(Crypto::new(agent_keys.clone()));
    let allow = args.allow.clone();
    let allow = if !allow.is_empty() {
        Some(parse_keys(&allow)?)
    } else {
        file.nipxx.allow.as_deref().map(parse_keys).transpose()?
    };
    let block = if !args.block.is_empty() {
        parse_keys(&args.block)?
    } else {
        parse_keys(&file.nipxx.block)?
    };
    let rate = RateLimit {
        per_second: args
            .rate_per_second
            .or(file.nipxx.rate_per_second)
            .unwrap_or(config::DEFAULT_RATE_PER_SECOND),
        burst: args
            .rate_burst
            .or(file.nipxx.rate_burst)
            .unwrap_or(config::DEFAULT_RATE_BURST),
    };
    let horizon = args
        .backlog_horizon_secs
        .or(file.nipxx.backlog_horizon_secs)
        .unwrap_or(config::DEFAULT_BACKLOG_HORIZON_SECS);
    let runtime = Runtime::start(
        RuntimeConfig {
            relays: relays.clone(),
            allow,
            block,
            rate,
            backlog_horizon: Duration::from_secs(horizon),
            nip59: args.nip59 || file.nipxx.nip59.unwrap_or(false),
            // The embedded relay checks ids and signatures before it stores or sends an event.
            verified_relays: embedded.iter().map(|r| r.url()).collect(),
        },
        crypto,
        engine.clone(),
    )
    .await;
    // One recovery pass for every protocol's turns a crash cut off, whichever fronts are on now: a NIP-XX
    // run's client is told on the relay; a fisk-ai caller's inbox is gone, so its turn is ended in the
    // journal and a resend is answered from there.
    let recovered = engine
        .recover(|t| match t.protocol.as_str() {
            agentwire_nostr::runtime::PROTOCOL => runtime.recovery_front(t),
            agentwire_fisk::worker::PROTOCOL => {
                Some(Arc::new(agentwire_fisk::worker::SilentFront) as Arc<dyn TurnFront>)
            }
            _ => None,
        })
        .await;
    match recovered {
        Ok(0) => {}
        Ok(n) => tracing::warn!(turns = n, "ended turns interrupted by the last shutdown"),
        Err(e) => tracing::error!(error = %e, "could not recover interrupted turns"),
    }
    let pk = agent_keys.public_key();
    let mut ready = serde_json::json!({
        "ready": true,
        "relay": relays.first(),
        "relays": relays,
        "agent": agent_name,
        "agent_pubkey": pk.to_hex(),
        "npub": keys::npub(&pk),
        "data_dir": data_dir,
        "roost_socket": roost_socket,
    });
    if let Some(w) = &fisk {
        ready["nats"] = serde_json::json!({ "url": w.url(), "identity": w.identity() });
    }
    println!("{ready}");
    tracing::info!(agent = %agent_name, pubkey = %pk.to_hex(), "serving");
    wait_for_signal().await;
    tracing::info!("shutting down");
    // Every front drains: running turns finish within the grace; new fisk-ai requests get `draining`, and
    // a new NIP-XX prompt is left on the relay, where the backlog horizon serves it after the restart.
    let fisk_drained = async {
        match &fisk {
            Some(w) => w.shutdown(DRAIN_GRACE).await,
            None => 0,
        }
    };
    let (fisk_left, left) = tokio::join!(fisk_drained, engine.drain(DRAIN_GRACE));
    if left > 0 || fisk_left > 0 {
        tracing::warn!(
            turns = left.max(fisk_left),
            "turns still running after the drain grace"
        );
    }
    roost.shutdown();
    if let Some(r) = embedded {
        r.shutdown().await;
    }
    Ok(ExitCode::SUCCESS)
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {}
    }
}
