//! The configuration file's shape (`--config FILE`, TOML): every key optional, unknown keys refused.
//!
//! Only the shape and the reading live here; which value is in force is decided in [`super::resolve`].

use super::ConfigError;
use agentwire_relay::RelayLimits;
use agentwire_roost::daemon::profile::Profile;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The whole configuration file.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct FileConfig {
    /// The data directory.
    pub(crate) data_dir: Option<PathBuf>,
    /// `serve` settings.
    pub(crate) serve: ServeFile,
    /// NIP-XX runtime settings.
    pub(crate) nipxx: agentwire_nostr::settings::NipxxSection,
    /// Embedded relay settings.
    pub(crate) relay: RelayFile,
    /// fisk-ai on NATS: the front's own section.
    pub(crate) nats: agentwire_fisk::settings::NatsSection,
    /// The roost supervisor.
    pub(crate) roost: agentwire_roost::daemon::settings::RoostSection,
    /// Named agents (`[agents.<name>]`), picked with `--agent <name>`.
    pub(crate) agents: HashMap<String, AgentFile>,
    /// `[[rooms]]`: the embedded relay's rooms (NIP-29 groups addressed by `h`).
    pub(crate) rooms: Vec<RoomFile>,
    /// `[tasks]`: the task-card adapter.
    pub(crate) tasks: agentwire_tasks::settings::TasksSection,
    /// `[notify]`: who the relay tells when an event should wake someone.
    pub(crate) notify: NotifyFile,
    /// `[journal]`: where turns are journaled.
    pub(crate) journal: JournalFile,
    /// `[http]`: the HTTP server.
    pub(crate) http: agentwire_http::settings::HttpSection,
    /// `[log]`: the log's filter and format (read before anything else runs).
    pub(crate) log: crate::logging::LogSection,
    /// `[telemetry]`: where trace spans are exported.
    pub(crate) telemetry: TelemetryFile,
    /// The plug-in fronts' sections (`[<front>]`), each handed whole to its front
    /// ([`crate::fronts::plug_ins`]).
    #[serde(skip)]
    pub(crate) fronts: BTreeMap<String, serde_json::Value>,
}

/// `[telemetry]`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct TelemetryFile {
    /// The OTLP/HTTP collector's base URL (`http://127.0.0.1:4318`); traces go to its `/v1/traces`.
    /// Default: `OTEL_EXPORTER_OTLP_ENDPOINT`, else no traces.
    pub(crate) otlp_endpoint: Option<String>,
    /// Whether spans carry the conversation itself (prompts, answers, tool arguments and results).
    pub(crate) content: Option<bool>,
}

/// `[journal]`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct JournalFile {
    /// `sqlite` (the default: `journal.sqlite` in the data dir) or `jetstream`.
    pub(crate) kind: Option<String>,
    /// The NATS servers of a JetStream journal (default: `[nats] url`); `[nats]` gives the credentials.
    pub(crate) url: Option<String>,
    /// The prefix of its buckets.
    pub(crate) stream: Option<String>,
    /// Replicas of each bucket.
    pub(crate) replicas: Option<usize>,
    /// This instance's name in the shared journal: recovery after a restart ends only its turns.
    pub(crate) instance: Option<String>,
    /// How long a running turn's instance may be silent before another instance ends the turn.
    pub(crate) lease_secs: Option<u64>,
    /// Days an ended NIP-XX, task-card or roost turn is kept (0 keeps them for ever; fisk-ai's are kept
    /// until an operator removes them).
    pub(crate) retention_days: Option<f64>,
}

/// `[notify]`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct NotifyFile {
    /// The URL the embedded relay POSTs each notification to.
    pub(crate) webhook: Option<String>,
}

/// `[[rooms]]`: one room of the embedded relay.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RoomFile {
    /// The `h` tag value.
    pub(crate) id: String,
    /// Its display name (default: the id).
    pub(crate) name: Option<String>,
    /// Writes with its `h` only from members.
    #[serde(default)]
    pub(crate) closed: bool,
    /// Reads need NIP-42 authentication by a member.
    #[serde(default)]
    pub(crate) private: bool,
    /// Members (hex or npub).
    #[serde(default)]
    pub(crate) members: Vec<String>,
    /// Admins (hex or npub), members too.
    #[serde(default)]
    pub(crate) admins: Vec<String>,
}

/// `[agents.<name>]`: the keys every entry has, whatever its kind; the rest of the entry is its kind's
/// ([`crate::agent_kinds`]), which refuses a key it does not read.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct AgentFile {
    /// The kind of agent: one of [`crate::agent_kinds::KINDS`].
    pub(crate) kind: String,
    /// How many turns the agent runs at once.
    pub(crate) max_concurrent_turns: Option<usize>,
    /// The fronts a further agent (not the `--agent` one) is reachable on: `nipxx`, `fisk`, ...
    pub(crate) expose: Option<Vec<String>>,
    /// A further agent's fisk-ai identity (default: its name).
    pub(crate) nats_identity: Option<String>,
    /// On `nipxx`: a further agent's secret key (hex or nsec), read from this file instead of
    /// `agents/<name>.key` in the data dir: one key that several instances serve.
    pub(crate) key_file: Option<PathBuf>,
    /// On NIP-XX: what its tokens cost, published in its ai.info's `pricing_hints`.
    pub(crate) pricing_hints: Option<PricingFile>,
    /// The kind's own keys, handed to it whole.
    #[serde(flatten)]
    pub(crate) own: serde_json::Map<String, serde_json::Value>,
}

/// `[agents.<name>.pricing_hints]`: what the agent's tokens cost, as the NIP-XX ai.info says it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PricingFile {
    /// The currency (ISO 4217, `USD`).
    pub(crate) currency: String,
    /// Per 1,000 prompt tokens.
    pub(crate) per_1k_prompt_tokens: f64,
    /// Per 1,000 output tokens.
    pub(crate) per_1k_output_tokens: f64,
}

/// `[serve]`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct ServeFile {
    /// The embedded relay's address.
    pub(crate) relay_listen: Option<SocketAddr>,
    /// External relays to use.
    pub(crate) relays: Vec<String>,
    /// The agent to serve.
    pub(crate) agent: Option<String>,
    /// A PEM file of extra CA certificates trusted for `wss://` relays, besides Mozilla's roots.
    pub(crate) relay_ca_file: Option<PathBuf>,
}

/// `[relay]`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RelayFile {
    /// The relay's name in its NIP-11 document.
    pub(crate) name: Option<String>,
    /// Who may create rooms and moderate every room (hex or npub).
    pub(crate) admins: Vec<String>,
    /// The `ws://`/`wss://` URLs clients reach the relay at besides its listen address (behind a proxy or
    /// TLS terminator): a NIP-42 `AUTH` naming one of these is taken.
    pub(crate) public_urls: Vec<String>,
    /// The web origins (`https://app.example.com`) whose pages may open a WebSocket to the relay besides its
    /// own; an upgrade from any other page gets HTTP 403.
    pub(crate) allowed_origins: Vec<String>,
    /// The relay's limits.
    pub(crate) limits: RelayLimits,
    /// How long stored events are kept.
    pub(crate) retention: agentwire_relay::RetentionPolicy,
}

/// Parses a config file's text; `path` only names it in the error (whose reason names the key and line).
/// A plug-in front's section is taken out whole for its front; the rest is read into [`FileConfig`], whose
/// unknown keys are refused.
pub(crate) fn parse(path: &Path, text: &str) -> Result<FileConfig, ConfigError> {
    let failed = |e: toml::de::Error| ConfigError::Parse {
        path: path.to_path_buf(),
        reason: e.to_string().trim_end().to_string(),
    };
    let root = toml::de::DeTable::parse(text).map_err(failed)?;
    let is_front = |key: &str| crate::fronts::plug_ins().any(|f| f.name() == key);
    let span = root.span();
    let rest: toml::de::DeTable = root
        .into_inner()
        .into_iter()
        .filter(|(k, _)| !is_front(k.get_ref()))
        .collect();
    let mut file =
        FileConfig::deserialize(toml::de::Deserializer::from(toml::Spanned::new(span, rest)))
            .map_err(|mut e| {
                e.set_input(Some(text));
                failed(e)
            })?;
    let whole: toml::Table = toml::from_str(text).map_err(failed)?;
    for (key, value) in whole.into_iter().filter(|(k, _)| is_front(k)) {
        let value = serde_json::to_value(value).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            reason: format!("[{key}]: {e}"),
        })?;
        file.fronts.insert(key, value);
    }
    Ok(file)
}

/// Reads a config file.
pub(crate) fn load(path: &Path) -> Result<FileConfig, ConfigError> {
    parse(path, &read(path)?)
}

/// The `agentProfiles` of a roost.json (`--roost-config`, `[roost] config`).
pub(crate) fn read_roost_json(path: &Path) -> Result<HashMap<String, Profile>, ConfigError> {
    agentwire_roost::daemon::profile::from_roost_json(&read(path)?).map_err(|e| {
        ConfigError::Parse {
            path: path.to_path_buf(),
            reason: e.to_string(),
        }
    })
}

fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}
