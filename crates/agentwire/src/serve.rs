//! `agentwire serve`: the embedded relay, the journal, the engine, the NIP-XX runtime, the task-card
//! adapter, the fisk-ai worker and the roost supervisor, wired together from the one resolved configuration ([`crate::config::Resolved`]).

use crate::config::Resolved;
use crate::keys;
use agentwire_engine::Engine;
use agentwire_store::SqliteJournal;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// The journal of turns and outcomes, in the data directory.
pub(crate) const JOURNAL_FILE: &str = "journal.sqlite";
/// The embedded relay's own key (it signs room metadata), in the data directory.
const RELAY_KEY_FILE: &str = "relay.key";

/// How long a shutdown waits for running turns: long enough for a demo or a short model turn, short
/// enough that a service manager's stop does not hang (systemd's default is 90 s).
const DRAIN_GRACE: Duration = Duration::from_secs(60);

/// Opens the journal `choice` names, and the owner this instance journals its turns under when the journal
/// is shared (`None`: the embedded journal's own).
async fn open_journal(
    choice: &crate::config::JournalChoice,
    data_dir: &Path,
) -> Result<(Arc<dyn agentwire_store::Journal>, Option<String>), String> {
    match choice {
        crate::config::JournalChoice::Sqlite => {
            let j = SqliteJournal::open(&data_dir.join(JOURNAL_FILE)).map_err(|e| e.to_string())?;
            Ok((Arc::new(j), None))
        }
        crate::config::JournalChoice::JetStream(shared) => {
            let crate::config::SharedJournal {
                nats,
                prefix,
                replicas,
                instance,
                lease,
            } = shared.as_ref();
            let setting = instance.setting();
            let instance = instance.in_data_dir(data_dir)?;
            let client = nats
                .connect(&format!("agentwire journal {instance}"))
                .await
                .map_err(|e| format!("[journal] {e}"))?;
            let config = agentwire_store::jetstream::JetStreamConfig {
                prefix: prefix.clone(),
                replicas: *replicas,
                lease: *lease,
            };
            let j = agentwire_store::jetstream::JetStreamJournal::open(client, &config)
                .await
                .map_err(|e| format!("[journal] {e}"))?;
            j.hold_instance(&instance).await.map_err(|e| match e {
                agentwire_store::jetstream::HoldError::Taken { .. } => format!(
                    "{setting}: {e}; every instance sharing a journal needs its own name (leave [journal] instance and [nats] instance unset for one unique to each data dir)"
                ),
                e => format!("[journal] {e}"),
            })?;
            tracing::info!(servers = %nats.shown(), %prefix, replicas, %instance, "journal on JetStream");
            Ok((Arc::new(j), Some(instance)))
        }
    }
}

/// Runs the daemon with `config` until SIGINT or SIGTERM. The data dir is taken first, before any port
/// is opened; a start that fails leaves no data dir it made behind.
pub(crate) async fn run(config: Resolved) -> Result<ExitCode, String> {
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    let data_dir = config.data_dir.clone();
    let made = !data_dir.exists();
    let lock = crate::data_dir_lock::DataDirLock::take(&data_dir)?;
    // Taken before anything starts: a SIGTERM sent on the ready line (or while starting) is a clean
    // stop once the start is done, never the default action that kills the process mid-way.
    let signals = Signals::new();
    crate::fd_limit::raise_and_log();
    match start(config).await {
        Ok(running) => {
            let code = running.serve(signals).await;
            drop(lock);
            code
        }
        Err(e) => {
            // Removed while the lock is held, so that no other `serve` takes the dir meanwhile.
            if made {
                if let Err(error) = std::fs::remove_dir_all(&data_dir) {
                    tracing::warn!(dir = %data_dir.display(), %error, "could not remove the data dir this failed start made");
                }
            }
            drop(lock);
            Err(e)
        }
    }
}

/// A started daemon: what its shutdown stops, in order.
struct Running {
    served: Vec<crate::agents::Serving>,
    /// The plug-in fronts, drained and stopped after every agent.
    plug_ins: Vec<Arc<dyn agentwire_engine::Front>>,
    http_server: Option<agentwire_http::HttpServer>,
    roost: Arc<agentwire_roost::daemon::Daemon>,
    embedded: Option<agentwire_relay::RelayHandle>,
    journal: Arc<dyn agentwire_store::Journal>,
    /// The journal's retention pass, stopped before the journal closes.
    pruning: Option<tokio::task::JoinHandle<()>>,
    /// `serving.json` in the data dir.
    serving: std::path::PathBuf,
    /// The trace exporter, flushed last.
    exporter: Option<crate::telemetry::Exporter>,
}

/// Starts every part `config` names, prints the ready line and writes `serving.json`.
async fn start(config: Resolved) -> Result<Running, String> {
    let Resolved {
        data_dir,
        agent,
        relay,
        relays: external,
        relay_ca_file,
        nipxx,
        nats,
        roost,
        tasks,
        notify_webhook,
        more_agents,
        journal: journal_choice,
        http,
        warnings: _,
        journal_retention,
        telemetry,
        fronts: _,
    } = &config;
    // Before any agent: every engine is handed the tracer (off when the exporter could not be set up).
    let (telemetry, exporter) = crate::telemetry::start(telemetry);
    keys::ensure_data_dir(data_dir)?;
    let roost_socket = roost.socket.clone();
    crate::config::install_relay_ca_file(relay_ca_file.as_deref())?;
    let (journal, owner) = open_journal(journal_choice, data_dir).await?;
    // Every agent on one path: the `--agent` one first, then every further one.
    let mut specs = vec![crate::agents::AgentSpec {
        name: agent.name.clone(),
        plan: agent.plan.clone(),
        max_concurrent_turns: agent.max_concurrent_turns,
        default: true,
        fronts: crate::fronts::of_default(&config),
        key_file: nipxx.key_file.clone(),
        fisk_identity: nats.as_ref().map(|n| n.identity.clone()),
        pricing: agent.pricing.clone(),
    }];
    specs.extend(more_agents.iter().map(crate::agents::AgentSpec::further));
    // One hub for every agent's turns: a watcher sees them all.
    let hub = agentwire_engine::WatchHub::new();
    // The GenAI metrics' `model`: each model agent's default model (the first it offers).
    hub.metrics().set_models(
        specs
            .iter()
            .filter_map(|s| {
                let model = s.plan.default_model()?;
                Some((s.name.clone(), model.to_string()))
            })
            .collect(),
    );
    // The turn list goes on where the last run left it: filled before any turn (a recovered one
    // included) is published, so the journal's turns are listed as older than every turn of this run.
    match journal.latest(agentwire_engine::RECENT_TURNS_KEPT).await {
        Ok(turns) => hub.remember(&turns),
        Err(e) => tracing::warn!(error = %e, "could not read the latest turns for the turn list"),
    }
    let prepared = crate::agents::prepare(
        specs,
        &crate::agents::Shared {
            data_dir,
            roost_socket: &roost_socket,
            hosted: &Default::default(),
            journal: &journal,
            instance: owner.as_deref(),
            hub: &hub,
            telemetry: &telemetry,
        },
    )
    .await?;
    let default_engine = prepared[0].engine().clone();
    let signed_here = Arc::new(agentwire_relay::SignedHere::new());
    let embedded = match relay.clone() {
        Some(mut rc) => {
            rc.signed_here = Some(signed_here.clone());
            // Every agent on NIP-XX may write without a rate; the task cards' agent in every room.
            for p in &prepared {
                if let Some(k) = p.keys() {
                    rc.unlimited_authors.insert(k.public_key());
                    if p.serves_tasks() {
                        rc.room_writers.insert(k.public_key());
                    }
                }
            }
            rc.health = Some(health_check(&default_engine));
            if let Some(url) = &notify_webhook {
                let notifier = agentwire_relay::notify::WebhookNotifier::start(url)
                    .map_err(|e| format!("[notify] {e}"))?;
                rc.notifier = Some(notifier);
            }
            if !rc.rooms.is_empty() || !rc.admins.is_empty() || tasks.is_some() {
                rc.relay_keys = Some(keys::load_or_create(data_dir, RELAY_KEY_FILE)?);
            }
            Some(agentwire_relay::start(rc).await.map_err(|e| match &e {
                agentwire_relay::RelayError::Bind { source, .. } => {
                    crate::config::bind_failed("--relay-listen", &e, source)
                }
                _ => format!("embedded relay: {e}"),
            })?)
        }
        None => None,
    };
    let mut relays = Vec::new();
    if let Some(r) = &embedded {
        relays.push(r.url());
    }
    relays.extend(external.iter().cloned());
    // The engine agents a roost controller dispatches: each job of their profile is a conversation with
    // them. Their jobs take replies once their engine's recovery pass has run.
    let hosted: std::collections::HashMap<String, Arc<dyn agentwire_roost::daemon::hosted::Host>> =
        prepared
            .iter()
            .filter_map(|p| p.roost_host())
            .map(|(name, h)| (name, h as Arc<dyn agentwire_roost::daemon::hosted::Host>))
            .collect();
    let mut hosted_names: Vec<String> = hosted.keys().cloned().collect();
    hosted_names.sort();
    // What `jobs profiles` lists: each profile's program (not its arguments, which may carry a secret) and
    // every engine agent a job can be dispatched to.
    let mut profile_list: Vec<serde_json::Value> = roost
        .profiles
        .iter()
        .map(|(name, p)| {
            let program = p.command.first().map(|c| {
                Path::new(c)
                    .file_name()
                    .map_or(c.clone(), |f| f.to_string_lossy().into_owned())
            });
            serde_json::json!({
                "name": name, "kind": "process", "program": program,
                "task": match p.task { agentwire_roost::daemon::profile::TaskMode::Type => "type", agentwire_roost::daemon::profile::TaskMode::Argv => "argv" },
                "protocol": p.protocol,
            })
        })
        .chain(
            hosted_names
                .iter()
                .map(|name| serde_json::json!({ "name": name, "kind": "agent" })),
        )
        .collect();
    profile_list.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    let roost = agentwire_roost::daemon::Daemon::start(agentwire_roost::daemon::DaemonConfig {
        socket: roost_socket.clone(),
        data_dir: data_dir.join("roost"),
        profiles: roost.profiles.clone(),
        hosted: agentwire_roost::daemon::hosted::Hosted(hosted),
        // Jobs serving turns go with their turns' retention.
        retention: *journal_retention,
        // Terminal agents' terminals are held by this same binary (`agentwire roost-term`).
        terminal_holder: crate::roost_term::holder(),
        concierge: roost.concierge.clone(),
        calendar: agentwire_roost::daemon::Calendar {
            zone: roost.zone,
            ..Default::default()
        },
    })
    .await
    .map(Arc::new)
    .map_err(|e| e.to_string())?;
    let started = crate::agents::start(
        prepared,
        &crate::fronts::StartContext {
            config: &config,
            relays: &relays,
            embedded: embedded.as_ref().map(|r| r.url()),
            signed_here: embedded.as_ref().map(|_| signed_here),
            hub: &hub,
        },
    )
    .await?;
    let crate::agents::Started {
        served,
        shared: plug_ins,
        routes,
        ready: fronts_ready,
        scrapes,
    } = started;
    let default = &served[0];
    let http_server = match &http {
        Some(choice) => {
            let token = crate::http_front::load_or_create_token(data_dir)?;
            let agents = served.iter().map(|a| a.http_info()).collect();
            let engines =
                agentwire_engine::Engines::new(served.iter().map(|a| a.engine().clone()).collect());
            let jobs = Arc::downgrade(&roost);
            let roost_jobs: crate::http_front::RoostJobs =
                Arc::new(move || jobs.upgrade().map(|r| r.job_states()).unwrap_or_default());
            let server = crate::http_front::start(
                choice,
                data_dir,
                token.clone(),
                crate::http_front::Serves {
                    hub: hub.clone(),
                    engines,
                    agents,
                    routes,
                    roost_socket: roost.socket(),
                    scraped: crate::http_front::Scraped {
                        roost_jobs,
                        relay: embedded.as_ref().map(|r| r.stats()),
                        fronts: scrapes,
                    },
                },
            )
            .await?;
            Some((server, token))
        }
        None => None,
    };
    let pk = default
        .pubkey()
        .ok_or("the default agent has no NIP-XX key")?;
    let mut ready = serde_json::json!({
        "ready": true,
        "relay": relays.first(),
        "relays": relays,
        "agent": default.name(),
        "agent_pubkey": pk.to_hex(),
        "npub": keys::npub(&pk),
        "data_dir": data_dir,
        "roost_socket": roost_socket,
        "roost_profiles": hosted_names,
        "profiles": profile_list,
    });
    for (key, value) in fronts_ready {
        ready[key] = value;
    }
    if let Some((server, token)) = &http_server {
        // The token is the operator's, who reads the ready line; it is in the data dir too.
        ready["http"] = server.url().into();
        ready["http_token"] = token.reveal().into();
    }
    // Every agent the daemon serves, the `--agent` one first.
    ready["agents"] = served.iter().map(|a| a.ready()).collect::<Vec<_>>().into();
    // What this daemon serves, for the client commands on the same data dir (no secret: the token has a
    // file of its own). Written before the ready line: a script that waits for the line finds the file.
    let serving = match crate::serving::Serving::write(data_dir, &ready) {
        Ok(path) => path,
        Err(e) => {
            tracing::warn!(error = %e, "could not write what this daemon serves; client commands need flags to find it");
            data_dir.join(crate::serving::SERVING_FILE)
        }
    };
    println!("{ready}");
    // What an operator needs to reach it, in one line (the ready line on stdout has it all, as JSON).
    tracing::info!(
        agent = %default.name(),
        pubkey = %pk.to_hex(),
        relay = relays.first().map(String::as_str).unwrap_or("none"),
        http = ready["http"].as_str().unwrap_or("off"),
        nats = ready["nats"]["url"].as_str().unwrap_or("off"),
        identity = ready["nats"]["identity"].as_str(),
        jobs = ready["nats"]["jobs"].as_str(),
        roost_socket = %roost_socket.display(),
        "serving"
    );
    // Started last: a start that fails before here leaves nothing holding the journal.
    let pruning = journal_retention.map(|r| crate::pruning::start(journal.clone(), r));
    Ok(Running {
        served,
        plug_ins,
        http_server: http_server.map(|(server, _)| server),
        roost,
        embedded,
        journal,
        pruning,
        serving,
        exporter,
    })
}

impl Running {
    /// Serves until a signal, then drains and stops every part.
    async fn serve(self, mut signals: Signals) -> Result<ExitCode, String> {
        let Running {
            served,
            plug_ins,
            http_server,
            roost,
            embedded,
            journal,
            pruning,
            serving,
            exporter,
        } = self;
        // A signal, or a roost controller's `shutdown` (then a signal still stops at once).
        let signal = tokio::select! {
            signal = signals.next() => signal,
            () = roost.shutdown_asked() => "the roost shutdown op",
        };
        let again = match signal {
            "SIGTERM" => "SIGTERM",
            _ => "Ctrl-C",
        };
        let running: usize = served.iter().map(|a| a.engine().live_turns()).sum();
        match running {
            0 => tracing::info!(%signal, "shutting down"),
            n => tracing::info!(
                %signal,
                "shutting down: waiting for {n} running turn{}, up to {} s; {again} again to stop now",
                if n == 1 { "" } else { "s" },
                DRAIN_GRACE.as_secs()
            ),
        }
        // Every front drains through the engine: running turns finish within the grace; new fisk-ai requests
        // get `draining`, and a new NIP-XX prompt is left on the relay, where the backlog horizon serves it
        // after the restart. Then each front sends what it still has (NIP-XX terminals and their retries) and
        // leaves the wire.
        // Every agent drains at once, so the grace is one grace however many agents there are.
        let engines: Vec<_> = served.iter().map(|a| a.engine().clone()).collect();
        let drains: Vec<_> = served
            .into_iter()
            .map(|a| tokio::spawn(async move { a.shut_down(DRAIN_GRACE).await }))
            .collect();
        let roost = &roost;
        // The whole stop, from the drain to the journal's close, yields to a second signal.
        let stopping = async {
            let mut left = 0;
            for d in drains {
                left += d.await.unwrap_or(0);
            }
            if left > 0 {
                tracing::warn!(turns = left, "turns still running after the drain grace");
            }
            for f in &plug_ins {
                let unsent = f.drain(DRAIN_GRACE).await;
                if unsent > 0 {
                    tracing::warn!(
                        protocol = f.protocol(),
                        unsent,
                        "answers still going out after the drain grace"
                    );
                }
                f.stop().await;
            }
            if let Some(server) = http_server {
                server.shutdown().await;
            }
            roost.shutdown();
            if let Some(r) = embedded {
                r.shutdown().await;
            }
            if let Some(p) = &pruning {
                p.abort();
            }
            // Nothing writes any more: the journal checkpoints and closes its files (or gives up the
            // instance's name on a shared journal).
            journal.close().await;
            // The turns' last spans go out (bounded: a collector that is down does not hold the stop).
            if let Some(e) = exporter {
                e.shutdown().await;
            }
        };
        tokio::select! {
            () = stopping => {}
            again = signals.next() => {
                // The turns still running end as after a crash: the next start records each as interrupted
                // (and a NIP-XX requester gets its terminal then). The journal's files are safe at any point.
                let running: usize = engines.iter().map(|e| e.live_turns()).sum();
                tracing::warn!(
                    signal = %again, turns = running,
                    "stopping now; running turns end as interrupted on the next start"
                );
                // The supervisor writes its rows and leaves its socket (jobs outlive the daemon).
                roost.shutdown();
                let _ = std::fs::remove_file(&serving);
                return Ok(ExitCode::from(EXIT_STOPPED_NOW));
            }
        }
        let _ = std::fs::remove_file(&serving);
        tracing::info!("stopped");
        Ok(ExitCode::SUCCESS)
    }
}

/// What `GET /health` says, on the HTTP listener and on the embedded relay's port alike: healthy (`200`)
/// while the engine takes turns, not (`503`) while its journal cannot be written, it is draining for a
/// shutdown or it is gone, with the facts as JSON.
pub(crate) fn health(engine: Option<Arc<Engine>>) -> (bool, serde_json::Value) {
    let Some(e) = engine else {
        return (false, serde_json::json!({"ok": false, "stopping": true}));
    };
    let (writable, draining) = (e.journal_writable(), e.draining());
    let ok = writable && !draining;
    let facts = serde_json::json!({
        "ok": ok,
        "journal_writable": writable,
        "draining": draining,
        "live_turns": e.live_turns(),
    });
    (ok, facts)
}

/// `GET /health` on the embedded relay's port ([`health`]).
fn health_check(engine: &Arc<Engine>) -> agentwire_relay::HealthCheck {
    let engine = Arc::downgrade(engine);
    agentwire_relay::HealthCheck::new(move || {
        let (ok, facts) = health(engine.upgrade());
        agentwire_relay::HealthReport {
            ok,
            body: facts.to_string(),
        }
    })
}

/// Exit code when a second signal stopped `serve` before its turns ended (128 + SIGINT, as shells say).
const EXIT_STOPPED_NOW: u8 = 130;

/// The signals that stop `serve`: SIGINT (Ctrl-C) and SIGTERM (a service manager's stop).
struct Signals {
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn new() -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        Signals {
            term: signal(SignalKind::terminate()).ok(),
            int: signal(SignalKind::interrupt()).ok(),
        }
    }

    /// Waits for the next one, and names it as a person would press or send it.
    async fn next(&mut self) -> &'static str {
        async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        }
        tokio::select! {
            _ = recv(&mut self.int) => "Ctrl-C",
            _ = recv(&mut self.term) => "SIGTERM",
        }
    }
}
