//! Configuration: the `serve` flags, the TOML file (`--config`) and the defaults, resolved in one place
//! into the [`Resolved`] configuration that `serve` runs with and `config` prints.
//!
//! - [`file`]: the file's shape and reading it;
//! - [`flags`]: the `serve` flags;
//! - [`resolve`]: flags over file over defaults, checked (pure); [`telemetry`] its `[telemetry]` part;
//! - [`error`]: why a configuration cannot be used, naming the flag or key.

mod error;
mod file;
mod flags;
mod instance;
mod resolve;
mod telemetry;

pub(crate) use error::ConfigError;
pub(crate) use file::{load, FileConfig};
pub(crate) use flags::ServeFlags;
pub(crate) use instance::InstanceName;
pub(crate) use resolve::{
    AgentChoice, ExposedAgent, HttpChoice, JournalChoice, PlugInFront, Resolved, SharedJournal,
    Sources,
};
pub(crate) use telemetry::TelemetryChoice;

use agentwire_nostr::relay_conn::RelayTls;
use std::path::{Path, PathBuf};

pub(crate) use agentwire_http::settings::{http_listen, HttpListen};

/// The OpenTelemetry variable naming the OTLP collector, read when `[telemetry] otlp_endpoint` is not set.
pub(crate) const OTLP_ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// What the defaults read from the process, read once so that resolution itself is pure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Environment {
    /// The data directory when neither `--data-dir` nor `data_dir` names one.
    pub(crate) data_dir: PathBuf,
    /// `$XDG_RUNTIME_DIR`, when set and not empty.
    pub(crate) runtime_dir: Option<PathBuf>,
    /// The host's name (the first part of a shared journal's default instance name).
    pub(crate) host_name: String,
    /// The names of the environment variables that are set and not empty (never their values): a model
    /// agent's `api_key_env` must name one of them.
    pub(crate) set_vars: std::collections::BTreeSet<String>,
    /// `$OTEL_EXPORTER_OTLP_ENDPOINT`, when set and not empty: the trace collector when the file names none.
    pub(crate) otlp_endpoint: Option<String>,
}

impl Environment {
    /// This process's: `$XDG_DATA_HOME/agentwire` (or the platform's equivalent) and `$XDG_RUNTIME_DIR`.
    pub(crate) fn from_process() -> Self {
        Environment {
            data_dir: dirs::data_dir()
                .unwrap_or_else(|| PathBuf::from("."))
                .join("agentwire"),
            runtime_dir: std::env::var_os("XDG_RUNTIME_DIR")
                .filter(|d| !d.is_empty())
                .map(PathBuf::from),
            host_name: host_name(),
            set_vars: std::env::vars_os()
                .filter(|(_, value)| !value.is_empty())
                .filter_map(|(name, _)| name.into_string().ok())
                .collect(),
            otlp_endpoint: std::env::var(OTLP_ENDPOINT_ENV)
                .ok()
                .filter(|v| !v.trim().is_empty()),
        }
    }

    /// The default roost socket: under `$XDG_RUNTIME_DIR` (per user, owner-only, cleared at logout), else
    /// in the data dir.
    pub(crate) fn default_roost_socket(&self, data_dir: &Path) -> PathBuf {
        match &self.runtime_dir {
            Some(d) => d.join("agentwire").join("roost.sock"),
            None => data_dir.join("run").join("roost.sock"),
        }
    }
}

/// The host's name, fit for an instance name (other characters become `-`); `localhost` when unknown.
fn host_name() -> String {
    let name: String = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_default()
        .trim()
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    match name.is_empty() {
        true => "localhost".into(),
        false => name,
    }
}

/// The data directory: `--data-dir`, else the file's `data_dir`, else the environment's default.
pub(crate) fn data_dir(flag: Option<&Path>, file: &FileConfig, env: &Environment) -> PathBuf {
    flag.map(Path::to_path_buf)
        .or_else(|| file.data_dir.clone())
        .unwrap_or_else(|| env.data_dir.clone())
}

/// The configuration in force: `sources` resolved, reading the roost.json they name.
pub(crate) fn in_force(sources: Sources<'_>) -> Result<Resolved, ConfigError> {
    resolve::resolve(sources, file::read_roost_json)
}

/// The journal `serve` would open with this file (and `nats`, as its `--nats`): for `agentwire session`.
pub(crate) fn journal_in_force(
    nats: Option<&str>,
    file: &FileConfig,
    env: &Environment,
) -> Result<JournalChoice, String> {
    let flags = ServeFlags {
        nats: nats.map(str::to_string),
        ..ServeFlags::default()
    };
    resolve::journal(&flags, file, env).map_err(|e| e.to_string())
}

/// The NATS connection of a client command (`ask --nats`, `read`, `discover`): the servers its `--nats`
/// lists, with the configuration file's `[nats]` credentials and TLS, as the worker uses them.
pub(crate) fn client_nats(
    list: &str,
    file: &FileConfig,
) -> Result<agentwire_fisk::connection::NatsConnect, String> {
    resolve::nats_connect(list, "--nats", &file.nats).map_err(|e| e.to_string())
}

/// Puts a client command's `--nats-context NAME` in `file`'s `[nats] context`, which the flag overrides,
/// so that every connection the command makes reads it. The context is read first, so that one missing
/// or malformed is told as the flag's, naming its file.
pub(crate) fn use_nats_context(file: &mut FileConfig, flag: Option<&str>) -> Result<(), String> {
    let Some(name) = flag else {
        return Ok(());
    };
    agentwire_fisk::settings::context(Some(name), &file.nats).map_err(|e| e.to_string())?;
    file.nats.context = Some(name.to_string());
    Ok(())
}

/// The NATS connection of a fisk-ai client command given its servers or a context: the servers as `serve`
/// picks its own (`flag`, its `--nats`, else `[nats] url`, else the NATS context's url), with
/// [`client_nats`]'s credentials and TLS.
pub(crate) fn client_nats_in_force(
    flag: Option<&str>,
    file: &FileConfig,
) -> Result<agentwire_fisk::connection::NatsConnect, String> {
    let (list, setting) = match (flag, &file.nats.url) {
        (Some(u), _) => (u.to_string(), "--nats"),
        (None, Some(u)) => (u.clone(), "[nats] url"),
        (None, None) => {
            let context =
                agentwire_fisk::settings::context(None, &file.nats).map_err(|e| e.to_string())?;
            match context {
                Some(agentwire_fisk::context::NatsContext { url: Some(u), .. }) => {
                    (u, "the NATS context's url")
                }
                Some(c) => {
                    return Err(format!(
                        "no NATS servers: the NATS context {:?} ({}) has no url; give --nats URL or [nats] url",
                        c.name,
                        c.path.display()
                    ))
                }
                None => {
                    return Err("no NATS servers: give --nats URL, [nats] url or a NATS context with a url (--nats-context NAME)".into())
                }
            }
        }
    };
    resolve::nats_connect(&list, setting, &file.nats).map_err(|e| e.to_string())
}

/// A listen address as `--relay-listen` takes it: an IP address and a port. A host name is refused with
/// the fix (it is not looked up: `localhost` may mean two addresses, or none).
pub(crate) fn listen_addr(value: &str) -> Result<std::net::SocketAddr, String> {
    value.trim().parse().map_err(|_| {
        let port = value.rsplit_once(':').map_or("7777", |(_, p)| p);
        format!("{value:?} is not an IP address and port: give one such as 127.0.0.1:{port}")
    })
}

/// Why a listen address could not be bound, with the fix when another program has it.
pub(crate) fn bind_failed(
    flag: &str,
    error: &dyn std::fmt::Display,
    source: &std::io::Error,
) -> String {
    match source.kind() {
        std::io::ErrorKind::AddrInUse => format!(
            "{flag}: {error}; another program listens there: stop it, or give {flag} another port (port 0 picks a free one)"
        ),
        std::io::ErrorKind::PermissionDenied => {
            format!("{flag}: {error}; ports below 1024 need privileges: give a port above 1023")
        }
        _ => format!("{flag}: {error}"),
    }
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
