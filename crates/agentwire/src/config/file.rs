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

/// `[agents.<name>]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentFile {
    /// `demo`, `roost`, `cmd`, `openai`, `acp`, or a remote agent's `nipxx`, `fisk` or `a2a`.
    pub(crate) kind: String,
    /// For `roost`: the profile whose jobs serve the turns.
    pub(crate) profile: Option<String>,
    /// For `cmd`: the program and its arguments, run once a turn; for `acp`: the agent's program and
    /// arguments, run once and kept.
    pub(crate) command: Option<Vec<String>>,
    /// For `nipxx`: the remote agent's public key (hex or npub).
    pub(crate) pubkey: Option<String>,
    /// For `nipxx`: the relays the remote agent is on.
    pub(crate) relays: Option<Vec<String>>,
    /// For `fisk`: the NATS server(s) the worker is on (as `[nats] url`); for `a2a`: the agent card's URL.
    pub(crate) url: Option<String>,
    /// For `fisk`: the worker's fisk-ai identity.
    pub(crate) identity: Option<String>,
    /// For `fisk`: this daemon's credentials and TLS on that NATS account, as `[nats]` takes them
    /// (`creds_file`, `user` with `password_env`, `token_env`, `nkey_seed_file`, `tls_*`, `inbox_prefix`).
    pub(crate) nats: Option<agentwire_fisk::settings::NatsSection>,
    /// For `a2a`: the environment variable holding the bearer token the agent's card asks for.
    pub(crate) token_env: Option<String>,
    /// For `openai`: remote agents (`[agents.<name>]` of kind nipxx, fisk or a2a) the model may call as
    /// tools, each under its name.
    pub(crate) delegates: Option<Vec<String>>,
    /// For `acp`: the agent's working directory and its sessions' `cwd` (absolute; default
    /// `<data dir>/work/<name>`).
    pub(crate) cwd: Option<PathBuf>,
    /// For `cmd`: how long a turn may run; for `openai`: one model call, in seconds.
    pub(crate) request_timeout_secs: Option<u64>,
    /// For `openai`: the API's base URL (up to `/v1`).
    pub(crate) base_url: Option<String>,
    /// For `openai`: the models offered, the first the default.
    pub(crate) models: Option<Vec<String>>,
    /// For `openai`: the environment variable holding the API key.
    pub(crate) api_key_env: Option<String>,
    /// For `openai`: the system prompt.
    pub(crate) system_prompt: Option<String>,
    /// For `openai`: the built-in tools the model may call.
    pub(crate) tools: Option<Vec<String>>,
    /// For `openai`: the context window on the agent's card, in tokens.
    pub(crate) max_context_tokens: Option<u64>,
    /// For `openai`: where the `shell` tool runs commands (default `<data dir>/work/<name>`).
    pub(crate) shell_dir: Option<PathBuf>,
    /// Any kind: how many turns the agent runs at once.
    pub(crate) max_concurrent_turns: Option<usize>,
    /// Any kind: the fronts a further agent (not the `--agent` one) is reachable on: `nipxx`, `fisk`.
    pub(crate) expose: Option<Vec<String>>,
    /// Any kind: a further agent's fisk-ai identity (default: its name).
    pub(crate) nats_identity: Option<String>,
    /// For `openai`: MCP servers whose tools the model may call (`[[agents.<name>.mcp]]`).
    pub(crate) mcp: Option<Vec<McpFile>>,
    /// Any kind exposed on `nipxx`: a further agent's secret key (hex or nsec), read from this file
    /// instead of `agents/<name>.key` in the data dir: one key that several instances serve.
    pub(crate) key_file: Option<PathBuf>,
    /// For `cmd` and `openai`: variables set in the command's (the `shell` tool's) environment, beside the
    /// allowlist every child gets.
    pub(crate) env: Option<BTreeMap<String, String>>,
    /// For `cmd` and `openai`: the daemon's variables passed on to the command by name; no other is.
    pub(crate) pass_env: Option<Vec<String>>,
    /// Any kind on NIP-XX: what its tokens cost, published in its ai.info's `pricing_hints`.
    pub(crate) pricing_hints: Option<PricingFile>,
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

/// `[[agents.<name>.mcp]]`: an MCP server over stdio.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct McpFile {
    /// Its name: its tools are `<name>__<tool>`.
    pub(crate) name: String,
    /// The program and its arguments.
    pub(crate) command: Vec<String>,
    /// How long it may take to answer the handshake, and then to list its tools (1-600; default 20).
    pub(crate) start_timeout_secs: Option<u64>,
    /// Variables set in its environment, beside the allowlist every child gets.
    pub(crate) env: Option<BTreeMap<String, String>>,
    /// The daemon's variables passed on to it by name (a token it needs); no other is.
    pub(crate) pass_env: Option<Vec<String>>,
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
