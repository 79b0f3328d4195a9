//! Resolution: each `serve` flag over its config-file key over its default, into one checked [`Resolved`].
//!
//! Pure: the file comes in parsed, what the defaults read from the process (the data and runtime
//! directories) comes in as an [`Environment`], and the one file the configuration names and resolution
//! must read (a roost.json) is read by a function the caller passes. The rules:
//! - a flag beats its file key, which beats the default;
//! - a list flag (`--relay`, `--allow`, `--block`) given at all replaces the file's list;
//! - a switch (`--nip59`, `--nats-elicit`) can only turn its feature on;
//! - a bad value is refused with a [`ConfigError`] naming the flag or the key it came from;
//! - what is not in force is not checked: `[nats]` keys without a NATS URL, `[relay]` with the embedded
//!   relay off.

use super::error::{ConfigError, Setting};
use super::file::FileConfig;
use super::flags::ServeFlags;
use super::Environment;
use agentwire_agents::kind::{AgentPlan, Delegation, EnvUse, KindEntry, KindError};
use agentwire_fisk::connection::NatsConnect;
use agentwire_fisk::settings::{self, FiskFlags};
use agentwire_fisk::wire::Identity;
use agentwire_fisk::worker::WorkerConfig;
use agentwire_nostr::settings::NipxxFlags;
use agentwire_relay::{RelayConfig, RelayError, RoomConfig};
use agentwire_roost::daemon::profile::Profile;
use nostr::prelude::PublicKey;
use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The agent served when neither `--agent` nor `[serve] agent` names one: the offline demo agent, so that a
/// bare `agentwire serve` answers without any model or service.
pub(crate) const DEFAULT_AGENT: &str = "demo";
/// The embedded relay's default address: loopback, so a bare `serve` is not reachable from the network.
pub(crate) const DEFAULT_RELAY_LISTEN: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 7777);
/// The embedded relay's events, in the data directory.
pub(crate) const RELAY_DB_FILE: &str = "relay.sqlite";

/// What resolution reads besides the roost.json.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sources<'a> {
    /// `--data-dir` (or `AGENTWIRE_DATA_DIR`).
    pub(crate) data_dir: Option<&'a Path>,
    /// The `serve` flags.
    pub(crate) flags: &'a ServeFlags,
    /// The parsed `--config` file (all defaults without one).
    pub(crate) file: &'a FileConfig,
    /// The process's environment, for the defaults that depend on it.
    pub(crate) env: &'a Environment,
}

/// The agent served, under the name it was asked for.
#[derive(Debug, Clone)]
pub(crate) struct AgentChoice {
    /// As given: `demo`, `roost:<profile>` or an `[agents.<name>]` entry.
    pub(crate) name: String,
    /// What it runs on: its kind's settings, resolved by the kind ([`crate::agent_kinds`]).
    pub(crate) plan: Arc<dyn AgentPlan>,
    /// Whether the name is an `[agents.<name>]` entry.
    pub(crate) entry: bool,
    /// How many turns it runs at once (`max_concurrent_turns`), when limited.
    pub(crate) max_concurrent_turns: Option<usize>,
    /// What its tokens cost (`pricing_hints`), for its NIP-XX ai.info.
    pub(crate) pricing: Option<agentwire_nostr::nipxx::payload::PricingHints>,
}

/// The range of `max_concurrent_turns`.
pub(crate) const MAX_CONCURRENT_TURNS: std::ops::RangeInclusive<usize> = 1..=1024;

/// The NIP-XX runtime's sender policy and profile (its section's own).
pub(crate) type Nipxx = agentwire_nostr::settings::NipxxSettings;

/// The roost supervisor.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Roost {
    /// Its socket.
    pub(crate) socket: PathBuf,
    /// The roost.json whose profiles were read, if any.
    pub(crate) config: Option<PathBuf>,
    /// `[roost.profiles]` and the roost.json's `agentProfiles` (which win on a shared name).
    pub(crate) profiles: HashMap<String, Profile>,
    /// The engine agents a controller dispatches as profiles of their own names: the `--agent` one
    /// (unless it is a roost job already, or a profile has its name) and every one exposed on `roost`.
    pub(crate) hosted: Vec<String>,
    /// `[roost] concierge`, `concierge_answer`, `concierge_act`.
    pub(crate) concierge: agentwire_roost::daemon::ConciergeSetup,
    /// `[roost] timezone`, else the system's.
    pub(crate) zone: agentwire_roost::proto::when::Zone,
}

/// The task-card adapter's settings (its section's own).
pub(crate) type Tasks = agentwire_tasks::settings::TaskSettings;

/// The configuration `serve` runs with, every value settled and checked.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    /// Keys, journal, relay events, roost jobs.
    pub(crate) data_dir: PathBuf,
    /// The agent behind every front.
    pub(crate) agent: AgentChoice,
    /// The embedded relay, when on: without external relays, or with `relay_listen` given.
    pub(crate) relay: Option<RelayConfig>,
    /// External relays.
    pub(crate) relays: Vec<String>,
    /// Extra CAs for `wss://` relays.
    pub(crate) relay_ca_file: Option<PathBuf>,
    /// The NIP-XX runtime.
    pub(crate) nipxx: Nipxx,
    /// The fisk-ai worker, when a NATS URL is given.
    pub(crate) nats: Option<WorkerConfig>,
    /// The roost supervisor (always on).
    pub(crate) roost: Roost,
    /// The task-card adapter, when `[tasks] watch` names rooms.
    pub(crate) tasks: Option<Tasks>,
    /// The webhook the embedded relay posts notifications to.
    pub(crate) notify_webhook: Option<String>,
    /// Further agents served beside `agent`: the `[agents.<name>]` entries with `expose`, by name.
    pub(crate) more_agents: Vec<ExposedAgent>,
    /// Where turns are journaled.
    pub(crate) journal: JournalChoice,
    /// The HTTP server, when on.
    pub(crate) http: Option<HttpChoice>,
    /// The plug-in fronts, each as its section resolved (on or off), in the list's order.
    pub(crate) fronts: Vec<PlugInFront>,
    /// How long ended turns (but fisk-ai's) are kept in the journal: `None` for ever.
    pub(crate) journal_retention: Option<Duration>,
    /// Where trace spans are exported, and whether they carry content.
    pub(crate) telemetry: super::telemetry::TelemetryChoice,
    /// What is allowed but likely a mistake (an `[agents.<name>]` entry nothing serves), each naming its
    /// key: `serve` logs them, `config` prints them on stderr.
    pub(crate) warnings: Vec<String>,
}

/// The HTTP server's settings (its section's own).
pub(crate) type HttpChoice = agentwire_http::settings::HttpSettings;

/// A plug-in front and its section, resolved.
#[derive(Clone)]
pub(crate) struct PlugInFront {
    /// The front.
    pub(crate) kind: &'static dyn agentwire_http::front::FrontKind,
    /// Its settings.
    pub(crate) plan: std::sync::Arc<dyn agentwire_http::front::FrontPlan>,
}

impl std::fmt::Debug for PlugInFront {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlugInFront")
            .field("name", &self.kind.name())
            .field("plan", &self.plan)
            .finish()
    }
}

impl PlugInFront {
    /// Whether it runs: on in its section, with the HTTP server on.
    pub(crate) fn runs(&self, http: bool) -> bool {
        http && self.plan.enabled()
    }
}

/// Every plug-in front's section, resolved by the front itself.
fn plug_in_fronts(file: &FileConfig) -> Result<Vec<PlugInFront>, ConfigError> {
    crate::fronts::plug_ins()
        .map(|kind| {
            let plan = kind.configure(file.fronts.get(kind.name()))?;
            Ok(PlugInFront {
                kind,
                plan: plan.into(),
            })
        })
        .collect()
}

/// The further agents' plug-in fronts are on, and each caller's agents are served.
fn exposed_where_served(
    more: &[ExposedAgent],
    fronts: &[PlugInFront],
    http: Option<&HttpChoice>,
    default: &str,
    env: &super::Environment,
) -> Result<(), ConfigError> {
    for m in more {
        let plug_ins = m
            .fronts
            .iter()
            .filter(|n| crate::fronts::find(n).is_some_and(|f| f.plug_in().is_some()));
        for name in plug_ins {
            let runs = fronts
                .iter()
                .any(|f| f.kind.name() == *name && f.runs(http.is_some()));
            if !runs {
                return Err(ConfigError::AgentSetting {
                    name: m.choice.name.clone(),
                    key: "expose",
                    reason: match http {
                        None => format!("{name} is served by the HTTP server, which is off"),
                        Some(_) => format!("the {name} front is off ([{name}] enabled = false)"),
                    },
                });
            }
        }
    }
    let Some(http) = http else { return Ok(()) };
    let served: BTreeSet<&str> = std::iter::once(default)
        .chain(more.iter().map(|m| m.choice.name.as_str()))
        .collect();
    for c in &http.callers {
        if let Some(a) = c
            .agents
            .iter()
            .flatten()
            .find(|a| !served.contains(a.as_str()))
        {
            return Err(ConfigError::Http(agentwire_http::settings::SettingError {
                setting: "[[http.callers]]",
                reason: format!("caller {:?}: {a:?} is not an agent served here", c.name),
            }));
        }
        if let agentwire_http::settings::TokenSource::Env(var) = &c.token {
            if !env.set_vars.contains(var) {
                return Err(ConfigError::Http(agentwire_http::settings::SettingError {
                    setting: "[[http.callers]]",
                    reason: format!(
                        "caller {:?}: the environment variable {var} is not set (or is empty)",
                        c.name
                    ),
                }));
            }
        }
    }
    Ok(())
}

/// `[http]` and `--http-listen`, resolved by the HTTP server's section.
fn http(flags: &ServeFlags, file: &FileConfig) -> Result<Option<HttpChoice>, ConfigError> {
    Ok(agentwire_http::settings::resolve(
        flags.http_listen,
        &file.http,
    )?)
}

/// Where turns are journaled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum JournalChoice {
    /// `journal.sqlite` in the data dir, this daemon's alone.
    Sqlite,
    /// JetStream key-value buckets, shared by every instance that names them.
    JetStream(Box<SharedJournal>),
}

/// A JetStream journal's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SharedJournal {
    /// The servers and how to connect.
    pub(crate) nats: NatsConnect,
    /// The buckets' prefix.
    pub(crate) prefix: String,
    /// Replicas of each bucket.
    pub(crate) replicas: usize,
    /// This instance's name: the owner of the turns it runs.
    pub(crate) instance: super::InstanceName,
    /// How long a running turn's instance may be silent before another ends the turn.
    pub(crate) lease: Duration,
}

impl JournalChoice {
    /// The lease of a shared journal's running turns (none for the embedded journal).
    pub(crate) fn lease(&self) -> Option<Duration> {
        match self {
            JournalChoice::Sqlite => None,
            JournalChoice::JetStream(j) => Some(j.lease),
        }
    }
}

/// The longest lease: an hour of silence before another instance takes over is already more than a user
/// waits for a turn.
const MAX_LEASE_SECS: u64 = 3600;

/// The default prefix of a JetStream journal's buckets.
pub(crate) const DEFAULT_JOURNAL_STREAM: &str = "AGENTWIRE";
/// Days an ended turn is kept in the journal by default: as long as the embedded relay keeps an agent's
/// run events by default, so a resend of anything the relay still holds is recognised.
pub(crate) const DEFAULT_JOURNAL_RETENTION_DAYS: f64 =
    agentwire_relay::retention::DEFAULT_AGENT_DAYS;
/// Most replicas of a bucket: JetStream's own bound.
const MAX_JOURNAL_REPLICAS: usize = 5;

/// A further agent and the fronts it is reachable on.
#[derive(Debug, Clone)]
pub(crate) struct ExposedAgent {
    /// The agent.
    pub(crate) choice: AgentChoice,
    /// The fronts it is on, in the order of [`crate::fronts::FRONTS`] (as `expose` named them).
    pub(crate) fronts: Vec<&'static str>,
    /// Its NIP-XX key from this file (shared by several instances), not the data dir's.
    pub(crate) key_file: Option<PathBuf>,
    /// On fisk-ai, under this identity.
    pub(crate) fisk_identity: Option<String>,
}

impl ExposedAgent {
    /// Whether it is on front `name`.
    pub(crate) fn on(&self, name: &str) -> bool {
        self.fronts.contains(&name)
    }
}

/// Resolves `sources`; `read_roost_json` gives the profiles of the roost.json the configuration names.
pub(crate) fn resolve(
    sources: Sources<'_>,
    read_roost_json: impl FnOnce(&Path) -> Result<HashMap<String, Profile>, ConfigError>,
) -> Result<Resolved, ConfigError> {
    let Sources {
        data_dir,
        flags,
        file,
        env,
    } = sources;
    let data_dir = super::data_dir(data_dir, file, env);
    let agent = agent(flags, file)?;
    let relays = external_relays(flags, file)?;
    let listen = flags.relay_listen.or(file.serve.relay_listen);
    let relay = if relays.is_empty() || listen.is_some() {
        Some(embedded_relay(
            listen.unwrap_or(DEFAULT_RELAY_LISTEN),
            &data_dir,
            file,
        )?)
    } else {
        None
    };
    let relay_on = relay.is_some();
    let (config, profiles) = roost_profiles(flags, file, &agent, read_roost_json)?;
    let nats = nats(flags, file, &agent.name)?;
    let more_agents = more_agents(file, &agent.name, nats.as_ref())?;
    let mut hosted = Vec::new();
    if agent.plan.roost_profile().is_none() && !profiles.contains_key(&agent.name) {
        hosted.push(agent.name.clone());
    }
    for more in &more_agents {
        if let Some(profile) = more.choice.plan.roost_profile() {
            if !profiles.contains_key(profile) {
                return Err(ConfigError::UnknownProfile {
                    agent: more.choice.name.clone(),
                    profile: profile.to_string(),
                });
            }
        }
        if more.on("roost") {
            let bad = |reason: &str| ConfigError::AgentSetting {
                name: more.choice.name.clone(),
                key: "expose",
                reason: reason.into(),
            };
            if more.choice.plan.roost_profile().is_some() {
                return Err(bad("a roost agent's jobs are roost jobs already"));
            }
            if profiles.contains_key(&more.choice.name) {
                return Err(bad("a roost profile has this agent's name"));
            }
            hosted.push(more.choice.name.clone());
        }
    }
    let roost = Roost {
        socket: agentwire_roost::daemon::settings::socket(
            &file.roost,
            flags.roost_socket.as_deref(),
            env.default_roost_socket(&data_dir),
        ),
        config,
        profiles,
        hosted,
        concierge: agentwire_roost::daemon::settings::concierge(&file.roost),
        zone: agentwire_roost::daemon::settings::zone(&file.roost)
            .map_err(|e| ConfigError::Roost(format!("timezone: {e}")))?,
    };
    if let Some(c) = &roost.concierge.launch {
        if !roost.profiles.contains_key(c) && !roost.hosted.contains(c) {
            return Err(ConfigError::Roost(format!(
                "concierge: {c:?} is neither a roost profile nor an agent exposed on roost"
            )));
        }
    }
    // Every entry's plan, read once: for the secrets check and for which entries a model agent serves.
    let plans = entry_plans(file)?;
    secrets_not_passed(&plans, file, &roost.profiles)?;
    let served = std::iter::once(&agent).chain(more_agents.iter().map(|m| &m.choice));
    for choice in served {
        required_vars_set(choice, env)?;
    }
    let mut warnings = unused_agents(file, &agent.name, &plans)?;
    let telemetry = super::telemetry::resolve(&file.telemetry, env, &mut warnings)?;
    let nipxx = nipxx(flags, file)?;
    let journal = journal(flags, file, env)?;
    let journal_retention = journal_retention(file, &nipxx, relay.as_ref())?;
    let tasks = watched_rooms_exist(tasks(file)?, relay.as_ref(), &relays)?;
    let http = http(flags, file)?;
    let fronts = plug_in_fronts(file)?;
    exposed_where_served(&more_agents, &fronts, http.as_ref(), &agent.name, env)?;
    Ok(Resolved {
        journal_retention,
        telemetry,
        relay,
        relays,
        relay_ca_file: flags
            .relay_ca_file
            .clone()
            .or_else(|| file.serve.relay_ca_file.clone()),
        nipxx,
        more_agents,
        nats,
        roost,
        tasks,
        notify_webhook: notify_webhook(file, relay_on)?,
        journal,
        http,
        fronts,
        data_dir,
        agent,
        warnings,
    })
}

/// The variables a served agent needs set at start (a model agent's `api_key_env`) are set: `serve` reads
/// them at start, and `config` refuses what `serve` would.
fn required_vars_set(choice: &AgentChoice, env: &super::Environment) -> Result<(), ConfigError> {
    match choice
        .plan
        .env_use()
        .required
        .into_iter()
        .find(|(_, var)| !env.set_vars.contains(*var))
    {
        Some((key, var)) => Err(ConfigError::AgentSetting {
            name: choice.name.clone(),
            key,
            reason: format!("the environment variable {var} is not set (or is empty)"),
        }),
        None => Ok(()),
    }
}

/// Every `[agents.<name>]` entry is checked, served or not (a wrong kind or a missing key is an error now,
/// not when it is first served); one that nothing serves (not the `--agent` one, no `expose`) is a warning
/// naming it.
fn unused_agents(
    file: &FileConfig,
    default: &str,
    plans: &EntryPlans<'_>,
) -> Result<Vec<String>, ConfigError> {
    let mut names: Vec<&String> = file.agents.keys().collect();
    names.sort();
    // A model agent's delegate is served through it.
    let delegated: BTreeSet<&str> = plans.iter().flat_map(|(_, p)| p.delegates()).collect();
    let mut warnings = Vec::new();
    for name in names {
        let entry = &file.agents[name];
        if name == default || entry.expose.is_some() {
            continue;
        }
        entry_choice(name.clone(), entry, &file.agents)?;
        if delegated.contains(name.as_str()) {
            continue;
        }
        warnings.push(format!(
            "[agents.{name}] is not served: it is not --agent (or [serve] agent) and has no expose"
        ));
    }
    Ok(warnings)
}

/// `[journal] retention_days`: default [`DEFAULT_JOURNAL_RETENTION_DAYS`], 0 for ever; never shorter than
/// the time a resend must be recognised within: the NIP-XX backlog horizon (stored prompts that young are
/// served after a restart) and the embedded relay's retention of prompts (it refuses a prompt it still
/// has as a duplicate; one it forgot comes through again).
fn journal_retention(
    file: &FileConfig,
    nipxx: &Nipxx,
    relay: Option<&RelayConfig>,
) -> Result<Option<Duration>, ConfigError> {
    let days = file
        .journal
        .retention_days
        .unwrap_or(DEFAULT_JOURNAL_RETENTION_DAYS);
    let bad = |reason: String| ConfigError::Journal {
        setting: "[journal] retention_days",
        reason,
    };
    if !days.is_finite() || days < 0.0 {
        return Err(bad(format!(
            "{days} is not a number of days (0 keeps for ever)"
        )));
    }
    let Some(secs) = agentwire_relay::retention::days_to_secs(days) else {
        return Ok(None);
    };
    let horizon = nipxx.backlog_horizon.as_secs();
    if secs < horizon {
        return Err(bad(format!(
            "{days} days is shorter than the NIP-XX backlog horizon ({horizon} s): a prompt served after a restart must still be known"
        )));
    }
    if let Some(relay_secs) =
        relay.and_then(|r| agentwire_relay::retention::days_to_secs(r.retention.agent_days))
    {
        if secs < relay_secs {
            return Err(bad(format!(
                "{days} days is shorter than the relay's [relay.retention] agent_days ({}): a prompt the relay still has must still be known",
                relay.map_or(0.0, |r| r.retention.agent_days)
            )));
        }
    }
    Ok(Some(Duration::from_secs(secs)))
}

/// `[journal]`: SQLite unless `kind = "jetstream"`, whose servers default to `--nats` / `[nats] url` and
/// whose instance name defaults to `[nats] instance`, then the host's name and the data dir's id. Also
/// what `agentwire session` opens, with its own `--nats` as the flag.
pub(crate) fn journal(
    flags: &ServeFlags,
    file: &FileConfig,
    env: &super::Environment,
) -> Result<JournalChoice, ConfigError> {
    let j = &file.journal;
    let bad = |setting: Setting, reason: String| ConfigError::Journal { setting, reason };
    match j.kind.as_deref() {
        None | Some("sqlite") => {
            let stray = [
                ("url", j.url.is_some()),
                ("stream", j.stream.is_some()),
                ("replicas", j.replicas.is_some()),
                ("instance", j.instance.is_some()),
                ("lease_secs", j.lease_secs.is_some()),
            ];
            if let Some((key, _)) = stray.iter().find(|(_, set)| *set) {
                return Err(bad(
                    "[journal]",
                    format!("{key} is for kind = \"jetstream\""),
                ));
            }
            Ok(JournalChoice::Sqlite)
        }
        Some("jetstream") => {
            let context = flags.nats_context.as_deref();
            let context_url = settings::context(context, &file.nats)?.and_then(|c| c.url);
            let (list, setting) = match (&j.url, &flags.nats, &file.nats.url, context_url) {
                (Some(u), ..) => (u.clone(), "[journal] url"),
                (None, Some(u), ..) => (u.clone(), "--nats"),
                (None, None, Some(u), _) => (u.clone(), "[nats] url"),
                (None, None, None, Some(u)) => (u, "the NATS context's url"),
                (None, None, None, None) => return Err(bad(
                    "[journal] url",
                    "a JetStream journal needs NATS servers: [journal] url, --nats, [nats] url or a NATS context's url"
                        .into(),
                )),
            };
            let nats = settings::connect_as(&list, setting, &file.nats, context)?;
            let prefix = j
                .stream
                .clone()
                .unwrap_or_else(|| DEFAULT_JOURNAL_STREAM.to_string());
            let fit = !prefix.is_empty()
                && prefix.len() <= 32
                && prefix
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !fit {
                return Err(bad(
                    "[journal] stream",
                    format!("{prefix:?}: 1-32 of A-Z a-z 0-9 - _"),
                ));
            }
            let replicas = j.replicas.unwrap_or(1);
            if replicas == 0 || replicas > MAX_JOURNAL_REPLICAS {
                return Err(bad(
                    "[journal] replicas",
                    format!("{replicas}: 1 to {MAX_JOURNAL_REPLICAS}"),
                ));
            }
            let named = match (&j.instance, &file.nats.instance) {
                (Some(n), _) => Some((n.clone(), "[journal] instance")),
                (None, Some(n)) => Some((n.clone(), "[nats] instance")),
                (None, None) => None,
            };
            let instance = match named {
                Some((name, setting)) => {
                    let fit = (1..=super::instance::MAX_INSTANCE_NAME).contains(&name.len())
                        && name
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
                    if !fit {
                        return Err(bad(setting, format!("{name:?}: 1-64 of A-Z a-z 0-9 - _ .")));
                    }
                    super::InstanceName::Named { name, setting }
                }
                None => super::InstanceName::PerDataDir {
                    host: env.host_name.clone(),
                },
            };
            let lease = match j.lease_secs {
                None => agentwire_store::jetstream::DEFAULT_LEASE,
                Some(n) if (1..=MAX_LEASE_SECS).contains(&n) => Duration::from_secs(n),
                Some(n) => {
                    return Err(bad(
                        "[journal] lease_secs",
                        format!("{n}: 1 to {MAX_LEASE_SECS}"),
                    ))
                }
            };
            Ok(JournalChoice::JetStream(Box::new(SharedJournal {
                nats,
                prefix,
                replicas,
                instance,
                lease,
            })))
        }
        Some(other) => Err(bad(
            "[journal] kind",
            format!("{other:?}: sqlite or jetstream"),
        )),
    }
}

fn notify_webhook(file: &FileConfig, relay_on: bool) -> Result<Option<String>, ConfigError> {
    let Some(url) = &file.notify.webhook else {
        return Ok(None);
    };
    agentwire_relay::notify::check_webhook_url(url)
        .map_err(|e| ConfigError::Notify(e.to_string()))?;
    if !relay_on {
        return Err(ConfigError::Notify(
            "webhook: the embedded relay sends notifications, and it is off (external relays without relay_listen)"
                .into(),
        ));
    }
    Ok(Some(url.clone()))
}

fn tasks(file: &FileConfig) -> Result<Option<Tasks>, ConfigError> {
    Ok(agentwire_tasks::settings::resolve(&file.tasks)?)
}

/// The rooms the task-card adapter watches (and its `home`) exist when it works on the embedded relay alone:
/// that relay takes a room's events only once the room is in `[[rooms]]`, so a room missing there would
/// leave the adapter waiting for tasks nobody can post.
fn watched_rooms_exist(
    tasks: Option<Tasks>,
    relay: Option<&RelayConfig>,
    relays: &[String],
) -> Result<Option<Tasks>, ConfigError> {
    let (Some(t), Some(relay), true) = (&tasks, relay, relays.is_empty()) else {
        return Ok(tasks);
    };
    let missing = t
        .watch
        .iter()
        .chain(&t.home)
        .find(|id| !relay.rooms.iter().any(|r| &r.id == *id));
    match missing {
        Some(id) => Err(ConfigError::TaskRoom(id.clone())),
        None => Ok(tasks),
    }
}

/// The roost.json in force and the profiles: `[roost.profiles]` and the roost.json's, checked, with the
/// agent's profile among them.
fn roost_profiles(
    flags: &ServeFlags,
    file: &FileConfig,
    agent: &AgentChoice,
    read_roost_json: impl FnOnce(&Path) -> Result<HashMap<String, Profile>, ConfigError>,
) -> Result<(Option<PathBuf>, HashMap<String, Profile>), ConfigError> {
    let (config, profiles) = agentwire_roost::daemon::settings::profiles(
        &file.roost,
        flags.roost_config.as_deref(),
        read_roost_json,
    )?;
    if let Some(profile) = agent.plan.roost_profile() {
        if !profiles.contains_key(profile) {
            return Err(ConfigError::UnknownProfile {
                agent: agent.name.clone(),
                profile: profile.to_string(),
            });
        }
    }
    Ok((config, profiles))
}

/// The flag's value if given, else the file key's, with the name of whichever was used; else the default.
fn pick<T>(
    flag: Option<T>,
    flag_name: Setting,
    key: Option<T>,
    key_name: Setting,
    default: T,
) -> (T, Setting) {
    match (flag, key) {
        (Some(v), _) => (v, flag_name),
        (None, Some(v)) => (v, key_name),
        (None, None) => (default, "the default"),
    }
}

fn agent(flags: &ServeFlags, file: &FileConfig) -> Result<AgentChoice, ConfigError> {
    let (name, setting) = pick(
        flags.agent.clone(),
        "--agent",
        file.serve.agent.clone(),
        "[serve] agent",
        DEFAULT_AGENT.to_string(),
    );
    if let Some(profile) = name.strip_prefix("roost:") {
        let plan = agentwire_agents::kinds::roost::plan(profile);
        return Ok(AgentChoice {
            name,
            plan,
            entry: false,
            max_concurrent_turns: None,
            pricing: None,
        });
    }
    if let Some(entry) = file.agents.get(&name) {
        return entry_choice(name, entry, &file.agents);
    }
    if name == "demo" {
        return Ok(AgentChoice {
            name,
            plan: agentwire_agents::kinds::demo::plan(),
            entry: false,
            max_concurrent_turns: None,
            pricing: None,
        });
    }
    Err(ConfigError::UnknownAgent { setting, name })
}

/// The further agents: every `[agents.<name>]` with `expose`, but the one served as `default`.
fn more_agents(
    file: &FileConfig,
    default: &str,
    nats: Option<&WorkerConfig>,
) -> Result<Vec<ExposedAgent>, ConfigError> {
    let mut names: Vec<&String> = file.agents.keys().collect();
    names.sort();
    let mut identities: BTreeSet<String> = nats.map(|n| n.identity.clone()).into_iter().collect();
    let mut out = Vec::new();
    for name in names {
        let entry = &file.agents[name];
        let Some(expose) = &entry.expose else {
            continue;
        };
        let bad = |reason: String| ConfigError::AgentSetting {
            name: name.clone(),
            key: "expose",
            reason,
        };
        for e in expose {
            crate::fronts::exposable(e).map_err(bad)?;
        }
        if name == default {
            if entry.key_file.is_some() {
                return Err(ConfigError::AgentSetting {
                    name: name.clone(),
                    key: "key_file",
                    reason: "the --agent agent's key is [nipxx] key_file".into(),
                });
            }
            continue;
        }
        let fisk_identity = if expose.iter().any(|e| e == "fisk") {
            if nats.is_none() {
                return Err(bad("fisk needs a NATS server: --nats or [nats] url".into()));
            }
            let identity = entry.nats_identity.clone().unwrap_or_else(|| name.clone());
            Identity::new(identity.clone()).map_err(|_| ConfigError::AgentSetting {
                name: name.clone(),
                key: "nats_identity",
                reason: format!(
                    "{identity:?} is not a fisk-ai identity (letters, digits, - and _)"
                ),
            })?;
            if !identities.insert(identity.clone()) {
                return Err(ConfigError::AgentSetting {
                    name: name.clone(),
                    key: "nats_identity",
                    reason: format!("{identity:?} is another agent's identity too"),
                });
            }
            Some(identity)
        } else {
            None
        };
        let nipxx = expose.iter().any(|e| e == "nipxx");
        if entry.key_file.is_some() && !nipxx {
            return Err(ConfigError::AgentSetting {
                name: name.clone(),
                key: "key_file",
                reason: "is the agent's NIP-XX key: add \"nipxx\" to expose".into(),
            });
        }
        out.push(ExposedAgent {
            choice: entry_choice(name.clone(), entry, &file.agents)?,
            fronts: crate::fronts::in_order(expose),
            key_file: entry.key_file.clone(),
            fisk_identity,
        });
    }
    Ok(out)
}

/// The agent of entry `[agents.<name>]`, checked.
fn entry_choice(
    name: String,
    entry: &super::file::AgentFile,
    agents: &HashMap<String, super::file::AgentFile>,
) -> Result<AgentChoice, ConfigError> {
    {
        // The name becomes a key file's and a directory's name: no path in it.
        let fit = (1..=64).contains(&name.len())
            && !name.starts_with('.')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !fit {
            return Err(ConfigError::AgentSetting {
                name: name.clone(),
                key: "name",
                reason: "1-64 of A-Z a-z 0-9 - _ . (not starting with .)".into(),
            });
        }
        let plan = entry_plan(&name, entry, agents)?;
        let max_concurrent_turns = match entry.max_concurrent_turns {
            None => None,
            Some(n) if MAX_CONCURRENT_TURNS.contains(&n) => Some(n),
            Some(n) => {
                return Err(ConfigError::AgentSetting {
                    name,
                    key: "max_concurrent_turns",
                    reason: format!(
                        "{n} is out of range ({}-{})",
                        MAX_CONCURRENT_TURNS.start(),
                        MAX_CONCURRENT_TURNS.end()
                    ),
                })
            }
        };
        let pricing = match &entry.pricing_hints {
            None => None,
            Some(p) => Some(
                agentwire_nostr::nipxx::payload::PricingHints::new(
                    &p.currency,
                    p.per_1k_prompt_tokens,
                    p.per_1k_output_tokens,
                )
                .map_err(|reason| ConfigError::AgentSetting {
                    name: name.clone(),
                    key: "pricing_hints",
                    reason: reason.to_string(),
                })?,
            ),
        };
        Ok(AgentChoice {
            name,
            plan,
            entry: true,
            max_concurrent_turns,
            pricing,
        })
    }
}

/// Entry `[agents.<name>]`'s plan, read by its kind ([`crate::agent_kinds`]): a key of another kind is
/// refused naming the kinds that read it, a key no kind reads as unknown.
fn entry_plan(
    name: &str,
    entry: &super::file::AgentFile,
    agents: &HashMap<String, super::file::AgentFile>,
) -> Result<Arc<dyn AgentPlan>, ConfigError> {
    let Some(kind) = crate::agent_kinds::kind(&entry.kind) else {
        return Err(ConfigError::UnknownAgentKind {
            name: name.to_string(),
            kind: entry.kind.clone(),
            kinds: crate::agent_kinds::listed(),
        });
    };
    for key in entry.own.keys() {
        if kind.keys().contains(&key.as_str()) {
            continue;
        }
        let others = crate::agent_kinds::KINDS.iter();
        let of: Vec<&str> = others
            .filter(|k| k.keys().contains(&key.as_str()))
            .map(|k| k.name())
            .collect();
        return Err(ConfigError::AgentKey {
            name: name.to_string(),
            key: key.clone(),
            reason: match of.is_empty() {
                true => format!(
                    "not a setting of any kind; kind {:?} takes {}",
                    entry.kind,
                    match kind.keys() {
                        [] => "none of its own".to_string(),
                        keys => keys.join(", "),
                    }
                ),
                false => format!(
                    "not a setting of kind {:?} (only of {})",
                    entry.kind,
                    of.join(", ")
                ),
            },
        });
    }
    let delegate = |d: &str| -> Result<Arc<dyn AgentPlan>, Delegation> {
        let Some(other) = agents.get(d) else {
            return Err(Delegation::NotAnEntry);
        };
        // Checked before the entry is resolved: a model agent named back would resolve this one again.
        if !crate::agent_kinds::kind(&other.kind).is_some_and(|k| k.served_elsewhere()) {
            return Err(Delegation::ServedHere {
                kind: other.kind.clone(),
            });
        }
        entry_plan(d, other, agents).map_err(|e| Delegation::Refused(Box::new(e)))
    };
    let section = serde_json::Value::Object(entry.own.clone());
    let read = KindEntry {
        name,
        section: &section,
        delegate: &delegate,
    };
    kind.resolve(&read).map_err(|e| match e {
        KindError::Setting { key, reason } => ConfigError::AgentSetting {
            name: name.to_string(),
            key,
            reason,
        },
        KindError::Delegate(e) => match e.downcast::<ConfigError>() {
            Ok(e) => *e,
            Err(e) => ConfigError::AgentSetting {
                name: name.to_string(),
                key: "delegates",
                reason: e.to_string(),
            },
        },
    })
}

/// Every `[agents.<name>]` entry's plan, by name, in name order.
type EntryPlans<'a> = Vec<(&'a String, Arc<dyn AgentPlan>)>;

/// Every `[agents.<name>]` entry's plan, read once.
fn entry_plans(file: &FileConfig) -> Result<EntryPlans<'_>, ConfigError> {
    let mut names: Vec<&String> = file.agents.keys().collect();
    names.sort();
    names
        .into_iter()
        .map(|n| Ok((n, entry_plan(n, &file.agents[n], &file.agents)?)))
        .collect()
}

/// Refuses a `pass_env` (of an agent, an MCP server or a roost profile) that names a variable the
/// configuration holds a secret in (a model agent's `api_key_env`, `[nats] password_env` or `token_env`, a
/// remote agent's `token_env` and its `nats` credentials' variables): a child never gets the daemon's
/// secrets. Every entry's kind says which variables it reads secrets from and which it passes on.
fn secrets_not_passed(
    plans: &EntryPlans<'_>,
    file: &FileConfig,
    profiles: &HashMap<String, Profile>,
) -> Result<(), ConfigError> {
    let uses: Vec<(&String, EnvUse<'_>)> = plans.iter().map(|(n, p)| (*n, p.env_use())).collect();
    let secrets: BTreeSet<&str> = uses
        .iter()
        .flat_map(|(_, u)| u.secrets.iter().copied())
        .chain(file.nats.password_env.as_deref())
        .chain(file.nats.token_env.as_deref())
        .collect();
    let reason = |var: &str| {
        format!("{var} holds a secret this configuration names (api_key_env, a password_env or token_env): it is never passed to a child")
    };
    for (name, used) in &uses {
        if let Some(var) = used.passed.iter().find(|v| secrets.contains(*v)) {
            return Err(ConfigError::AgentSetting {
                name: name.to_string(),
                key: "pass_env",
                reason: reason(var),
            });
        }
    }
    for (name, p) in profiles {
        if let Some(var) = p.pass_env.iter().find(|v| secrets.contains(v.as_str())) {
            return Err(ConfigError::Profile(format!(
                "profile {name:?}: pass_env: {}",
                reason(var)
            )));
        }
    }
    Ok(())
}

fn external_relays(flags: &ServeFlags, file: &FileConfig) -> Result<Vec<String>, ConfigError> {
    let (urls, setting) = if flags.relays.is_empty() {
        (&file.serve.relays, "[serve] relays")
    } else {
        (&flags.relays, "--relay")
    };
    for url in urls {
        agentwire_nostr::relay_conn::check_relay_url(url).map_err(|e| ConfigError::RelayUrl {
            setting,
            url: url.clone(),
            reason: e.to_string(),
        })?;
    }
    Ok(urls.clone())
}

fn embedded_relay(
    listen: SocketAddr,
    data_dir: &Path,
    file: &FileConfig,
) -> Result<RelayConfig, ConfigError> {
    let mut relay = RelayConfig::new(listen, data_dir.join(RELAY_DB_FILE));
    relay.limits = file.relay.limits;
    relay.limits.validate().map_err(|e| {
        ConfigError::RelayLimits(match e {
            RelayError::InvalidLimits(reason) => reason,
            other => other.to_string(),
        })
    })?;
    if let Some(name) = &file.relay.name {
        relay.name = name.clone();
    }
    file.relay
        .retention
        .check()
        .map_err(|e| ConfigError::RelayRetention(e.to_string()))?;
    relay.retention = file.relay.retention;
    for url in &file.relay.public_urls {
        agentwire_relay::check_public_url(url).map_err(|reason| ConfigError::RelayUrl {
            setting: "[relay] public_urls",
            url: url.clone(),
            reason: reason.to_string(),
        })?;
    }
    relay.public_urls = file.relay.public_urls.clone();
    for origin in &file.relay.allowed_origins {
        agentwire_relay::check_allowed_origin(origin).map_err(|e| ConfigError::RelayOrigin {
            reason: e.to_string(),
        })?;
    }
    relay.allowed_origins = file.relay.allowed_origins.clone();
    relay.rooms = rooms(&file.rooms)?;
    relay.admins = public_keys(&file.relay.admins, "[relay] admins")?
        .into_iter()
        .collect();
    agentwire_relay::rooms::Rooms::new(&relay.rooms).map_err(|e| {
        let id = match &e {
            agentwire_relay::rooms::RoomError::Id(id)
            | agentwire_relay::rooms::RoomError::Duplicate(id)
            | agentwire_relay::rooms::RoomError::Name(id) => id,
        };
        ConfigError::Room {
            index: file.rooms.iter().rposition(|r| &r.id == id).unwrap_or(0),
            reason: e.to_string(),
        }
    })?;
    Ok(relay)
}

fn rooms(files: &[super::file::RoomFile]) -> Result<Vec<RoomConfig>, ConfigError> {
    files
        .iter()
        .enumerate()
        .map(|(index, r)| {
            let keys = |list: &[String], what: &str| {
                list.iter()
                    .map(|s| {
                        PublicKey::parse(s).map_err(|_| ConfigError::Room {
                            index,
                            reason: format!("{what} entry {s:?} is not a public key (hex or npub)"),
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()
            };
            Ok(RoomConfig {
                id: r.id.clone(),
                name: r.name.clone().unwrap_or_else(|| r.id.clone()),
                closed: r.closed,
                private: r.private,
                members: keys(&r.members, "members")?,
                admins: keys(&r.admins, "admins")?,
            })
        })
        .collect()
}

fn public_keys(list: &[String], setting: Setting) -> Result<BTreeSet<PublicKey>, ConfigError> {
    list.iter()
        .map(|s| {
            PublicKey::parse(s).map_err(|_| ConfigError::PublicKey {
                setting,
                value: s.clone(),
            })
        })
        .collect()
}

/// `[nipxx]` and its flags, resolved by the NIP-XX front's section.
fn nipxx(flags: &ServeFlags, file: &FileConfig) -> Result<Nipxx, ConfigError> {
    let nipxx = NipxxFlags {
        allow: &flags.allow,
        block: &flags.block,
        rate_per_second: flags.rate_per_second,
        rate_burst: flags.rate_burst,
        backlog_horizon_secs: flags.backlog_horizon_secs,
        nip59: flags.nip59,
    };
    Ok(agentwire_nostr::settings::resolve(nipxx, &file.nipxx)?)
}

/// `[nats]` and its flags, resolved by the fisk-ai front's section; the served agent's own
/// `[agents.<name>] nats_identity` is the identity when neither `--identity` nor `[nats] identity` gives one.
fn nats(
    flags: &ServeFlags,
    file: &FileConfig,
    agent: &str,
) -> Result<Option<WorkerConfig>, ConfigError> {
    let own = file
        .agents
        .get(agent)
        .and_then(|e| e.nats_identity.as_deref());
    let fisk = FiskFlags {
        nats: flags.nats.as_deref(),
        identity: flags.identity.as_deref(),
        workers: flags.nats_workers,
        request_timeout_secs: flags.nats_request_timeout,
        elicit: flags.nats_elicit,
        jobs: flags.nats_jobs,
        context: flags.nats_context.as_deref(),
    };
    Ok(settings::resolve(fisk, &file.nats, own)?)
}

/// The NATS connection of server list `list` (from `setting`) with `[nats]`'s credentials and TLS: for
/// a JetStream journal and every client command.
pub(crate) fn nats_connect(
    list: &str,
    setting: Setting,
    nats: &settings::NatsSection,
) -> Result<NatsConnect, ConfigError> {
    Ok(settings::connect(list, setting, nats)?)
}

#[cfg(test)]
#[path = "resolve_tests.rs"]
mod tests;
