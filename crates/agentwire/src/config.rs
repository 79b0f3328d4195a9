//! Configuration: a TOML file (`--config`) whose keys flags can override.

use agentwire_nostr::relay_conn::RelayTls;
use agentwire_relay::RelayLimits;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The default address of the embedded relay.
pub(crate) const DEFAULT_RELAY_LISTEN: &str = "127.0.0.1:7777";
/// The default relay clients talk to.
pub(crate) const DEFAULT_RELAY_URL: &str = "ws://127.0.0.1:7777";
/// Prompts stored while the agent was down are served on start if younger than this (one hour): old enough
/// to cover a restart or an upgrade, young enough that nobody is surprised by an answer to yesterday's prompt.
pub(crate) const DEFAULT_BACKLOG_HORIZON_SECS: u64 = 3600;
/// Default sustained prompts per second per sender.
pub(crate) const DEFAULT_RATE_PER_SECOND: f64 = 50.0;
/// Default burst of prompts per sender.
pub(crate) const DEFAULT_RATE_BURST: f64 = 100.0;

/// The whole configuration file.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct FileConfig {
    /// The data directory.
    pub(crate) data_dir: Option<PathBuf>,
    /// `serve` settings.
    pub(crate) serve: ServeFile,
    /// NIP-XX runtime settings.
    pub(crate) nipxx: NipxxFile,
    /// Embedded relay settings.
    pub(crate) relay: RelayFile,
    /// fisk-ai on NATS.
    pub(crate) nats: NatsFile,
    /// The roost supervisor.
    pub(crate) roost: RoostFile,
    /// Named agents (`[agents.<name>]`), picked with `--agent <name>`.
    pub(crate) agents: std::collections::HashMap<String, AgentFile>,
}

/// `[agents.<name>]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentFile {
    /// `demo` or `roost`.
    pub(crate) kind: String,
    /// For `roost`: the profile whose jobs serve the turns.
    pub(crate) profile: Option<String>,
}

/// `[roost]`: the roost supervisor.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RoostFile {
    /// The socket (default `$XDG_RUNTIME_DIR/agentwire/roost.sock`).
    pub(crate) socket: Option<PathBuf>,
    /// A roost.json whose `agentProfiles` are read too.
    pub(crate) config: Option<PathBuf>,
    /// `[roost.profiles.<name>]`.
    pub(crate) profiles: std::collections::HashMap<String, agentwire_roost::profile::Profile>,
}

/// The default roost socket: under `$XDG_RUNTIME_DIR` (per user, owner-only, cleared at logout), else in the
/// data dir.
pub(crate) fn default_roost_socket(data_dir: &Path) -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("agentwire").join("roost.sock"),
        _ => data_dir.join("run").join("roost.sock"),
    }
}

/// `[nats]`: the fisk-ai worker.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct NatsFile {
    /// The NATS server URL; the worker runs when set.
    pub(crate) url: Option<String>,
    /// The fisk-ai identity.
    pub(crate) identity: Option<String>,
    /// Runs at a time.
    pub(crate) workers: Option<usize>,
    /// Questions on.
    pub(crate) elicit: Option<bool>,
    /// The question window in seconds.
    pub(crate) request_timeout_secs: Option<u64>,
    /// The system prompt (part of a conversation's fingerprint).
    pub(crate) system_prompt: Option<String>,
    /// The token allowance per conversation.
    pub(crate) max_tokens: Option<u64>,
    /// This instance's name (`sender.instance`).
    pub(crate) instance: Option<String>,
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

/// `[nipxx]`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct NipxxFile {
    /// Only these senders (hex or npub) may prompt.
    pub(crate) allow: Option<Vec<String>>,
    /// These senders are refused.
    pub(crate) block: Vec<String>,
    /// Sustained prompts per second per sender.
    pub(crate) rate_per_second: Option<f64>,
    /// Burst per sender.
    pub(crate) rate_burst: Option<f64>,
    /// Backlog horizon in seconds.
    pub(crate) backlog_horizon_secs: Option<u64>,
    /// The privacy-first profile (NIP-59 gift wrap in and out).
    pub(crate) nip59: Option<bool>,
}

/// `[relay]`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RelayFile {
    /// The relay's name in its NIP-11 document.
    pub(crate) name: Option<String>,
    /// The relay's limits.
    pub(crate) limits: RelayLimits,
}

/// Reads a config file.
pub(crate) fn load(path: &Path) -> Result<FileConfig, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Checks a relay URL (`ws://` or `wss://` with a host); also the `--relay` flags' value parser.
pub(crate) fn relay_url(url: &str) -> Result<String, String> {
    agentwire_nostr::relay_conn::check_relay_url(url)
        .map(|_| url.to_string())
        .map_err(|e| e.to_string())
}

/// Trusts the CA certificates in `ca_file` (PEM) for every `wss://` relay of this process, besides
/// Mozilla's roots. Without a file, Mozilla's roots alone are used.
pub(crate) fn install_relay_ca_file(ca_file: Option<&Path>) -> Result<(), String> {
    let Some(path) = ca_file else {
        return Ok(());
    };
    let tls = RelayTls::new(Some(path)).map_err(|e| e.to_string())?;
    tracing::debug!(
        file = %path.display(),
        certificates = tls.extra_roots(),
        "trusting extra relay CAs"
    );
    tls.install_default()
        .map_err(|_| "the relay TLS configuration was already set".to_string())
}

/// The default data directory: `$XDG_DATA_HOME/agentwire` (or the platform's equivalent).
pub(crate) fn default_data_dir() -> PathBuf {
    dirs::data_dir()
        .unwrap_or_else(|| PathBuf::from("."))
        .join("agentwire")
}
