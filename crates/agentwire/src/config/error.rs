//! Why the configuration could not be settled: one error for the configuration boundary, each variant
//! naming the flag or file key the bad value came from.

use std::path::PathBuf;

/// Where a value came from, as the user wrote it: a flag (`--rate-burst`) or a file key
/// (`[nipxx] rate_burst`).
pub(crate) type Setting = &'static str;

/// A configuration that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum ConfigError {
    /// `[nats]` and its flags, as the fisk-ai front's section refuses them.
    #[error(transparent)]
    Fisk(#[from] agentwire_fisk::settings::SettingError),
    /// `[journal]` settings that cannot be used.
    #[error("{setting}: {reason}")]
    Journal {
        /// Where it came from.
        setting: Setting,
        /// What is wrong.
        reason: String,
    },
    /// A file (the config file, a roost.json) could not be read.
    #[error("cannot read {}: {reason}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        reason: String,
    },
    /// A file is not of the expected shape: not TOML (or JSON), an unknown key, a value of the wrong type.
    /// The reason names the key and its line.
    #[error("{}: {reason}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's reason.
        reason: String,
    },
    /// An `[relay] allowed_origins` entry that is not a web origin.
    #[error("[relay] allowed_origins: {reason}")]
    RelayOrigin {
        /// What is wrong with it (naming the entry).
        reason: String,
    },
    /// A relay that is not a `ws://` or `wss://` URL with a host.
    #[error("{setting}: {url:?} is not a relay URL: {reason}")]
    RelayUrl {
        /// Where it came from.
        setting: Setting,
        /// The value.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A sender key that is neither 64 hex nor an npub.
    #[error("{setting}: {value:?} is not a public key (64 hex or npub1...)")]
    PublicKey {
        /// Where it came from.
        setting: Setting,
        /// The value.
        value: String,
    },
    /// `[nipxx]` or its flags cannot be used.
    #[error(transparent)]
    Nipxx(#[from] agentwire_nostr::settings::SettingError),
    /// An agent name that is not built in and has no `[agents.<name>]` entry.
    #[error(
        "{setting}: unknown agent {name:?}; available: demo, roost:<profile>, or an [agents.<name>] entry"
    )]
    UnknownAgent {
        /// Where it came from.
        setting: Setting,
        /// The name.
        name: String,
    },
    /// An `[agents.<name>]` entry of a kind that does not exist.
    #[error("[agents.{name}] kind: unknown kind {kind:?}; kinds: {kinds}")]
    UnknownAgentKind {
        /// The entry.
        name: String,
        /// Its kind.
        kind: String,
        /// Every kind there is, and what it is.
        kinds: String,
    },
    /// An `[agents.<name>]` key its kind does not read.
    #[error("[agents.{name}] {key}: {reason}")]
    AgentKey {
        /// The entry.
        name: String,
        /// The key, as written.
        key: String,
        /// Which kinds read it, or what its kind reads.
        reason: String,
    },
    /// An `[agents.<name>]` entry with a missing or bad setting.
    #[error("[agents.{name}] {key}: {reason}")]
    AgentSetting {
        /// The entry.
        name: String,
        /// The key.
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The agent runs a roost profile that neither `[roost.profiles]` nor the roost.json defines.
    #[error(
        "agent {agent:?} runs the roost profile {profile:?}, which is not configured ([roost.profiles.{profile}] or --roost-config)"
    )]
    UnknownProfile {
        /// The agent's name.
        agent: String,
        /// The profile.
        profile: String,
    },
    /// A roost profile that cannot run (an empty command).
    #[error("roost profiles: {0}")]
    Profile(String),
    /// The embedded relay's limits contradict each other or are zero.
    /// A `[roost]` setting of the concierge or the schedules.
    #[error("[roost] {0}")]
    Roost(String),
    #[error("[relay.limits]: {0}")]
    RelayLimits(String),
    /// `[relay.retention]` holds a number that is no time.
    #[error("[relay.retention] {0}")]
    RelayRetention(String),
    /// `[http]` or `--http-listen` cannot be used.
    #[error(transparent)]
    Http(#[from] agentwire_http::settings::SettingError),
    /// A plug-in front's section (`[<front>]`) cannot be used.
    #[error("{0}")]
    Front(#[from] agentwire_http::front::FrontSettingError),
    /// `[telemetry]` (or `OTEL_EXPORTER_OTLP_ENDPOINT`) cannot be used.
    #[error("{setting}: {reason}")]
    Telemetry {
        /// Where it came from.
        setting: Setting,
        /// What is wrong.
        reason: String,
    },
    /// `[notify]` cannot be used.
    #[error("[notify] {0}")]
    Notify(String),
    /// `[tasks]` cannot be used.
    #[error(transparent)]
    Tasks(#[from] agentwire_tasks::settings::SettingError),
    /// A room `[tasks]` names is not a `[[rooms]]` entry of the embedded relay the adapter works on.
    #[error(
        "[tasks] names room {0:?}, which is not a [[rooms]] entry: the embedded relay takes a room's events only once it exists (add a [[rooms]] entry with id = {0:?})"
    )]
    TaskRoom(String),
    /// A `[[rooms]]` entry that cannot be used.
    #[error("[[rooms]] entry {index}: {reason}")]
    Room {
        /// Its place in the file, from 0.
        index: usize,
        /// What is wrong.
        reason: String,
    },
}

/// A roost profile the roost front's section refuses.
impl From<agentwire_roost::daemon::profile::ProfileError> for ConfigError {
    fn from(e: agentwire_roost::daemon::profile::ProfileError) -> Self {
        ConfigError::Profile(e.to_string())
    }
}
