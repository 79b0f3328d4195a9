//! A NATS context as the `nats` CLI writes it (`nats context save NAME`): a JSON file
//! `$XDG_CONFIG_HOME/nats/context/NAME.json` (`~/.config/nats/context/NAME.json` without the variable)
//! holding the servers, one way to authenticate and TLS files, so users of the `nats` CLI connect with
//! what they have (`--nats-context NAME`, `[nats] context`). The fields read are the CLI's own names:
//! `url`, `user` and `password`, `token`, `creds`, `nkey` (a seed file), `cert`, `key`, `ca` and
//! `inbox_prefix`; the rest (`description`, `jetstream_domain`, ...) are left alone.
//!
//! A context holds its password or token in the file itself. They are not kept: the connection is told
//! which file holds them and reads them when it connects ([`NatsAuth::ContextPassword`],
//! [`NatsAuth::ContextToken`]), so they never reach a log, an error or `config` output.
//!
//! [`NatsAuth::ContextPassword`]: crate::connection::NatsAuth::ContextPassword
//! [`NatsAuth::ContextToken`]: crate::connection::NatsAuth::ContextToken

use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The most bytes of a context file: a few paths and names, never more.
const MAX_CONTEXT_BYTES: u64 = 64 * 1024;

/// Why a context cannot be used; each names the file (or says why there is none). Never carries a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    /// The name is not a context name (a path, empty).
    #[error(
        "NATS context {0:?}: a context's name, as `nats context ls` lists it (no '/', not empty)"
    )]
    Name(String),
    /// Neither `$XDG_CONFIG_HOME` nor `$HOME` says where contexts are.
    #[error("NATS context {0:?}: neither XDG_CONFIG_HOME nor HOME is set, so there is no context directory")]
    NoDirectory(String),
    /// The file could not be read.
    #[error("NATS context {name:?}: {path}: {reason}")]
    Unreadable {
        /// The context's name.
        name: String,
        /// Its file.
        path: String,
        /// What failed.
        reason: String,
    },
    /// The file is not a context.
    #[error("NATS context {name:?}: {path} is not a NATS context file: {reason}")]
    Malformed {
        /// The context's name.
        name: String,
        /// Its file.
        path: String,
        /// What is wrong (never the file's text).
        reason: String,
    },
}

/// What a context says, secrets left in the file: whether it has a password or a token, not what they are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NatsContext {
    /// The context's name.
    pub name: String,
    /// Its file.
    pub path: PathBuf,
    /// `url`: a server or a comma-separated list.
    pub url: Option<String>,
    /// `user`.
    pub user: Option<String>,
    /// `password` is set (read from [`NatsContext::path`] when connecting).
    pub has_password: bool,
    /// `token` is set (read from [`NatsContext::path`] when connecting).
    pub has_token: bool,
    /// `creds`: a `.creds` file.
    pub creds: Option<PathBuf>,
    /// `nkey`: a file holding an nkey seed.
    pub nkey: Option<PathBuf>,
    /// `cert`: a client certificate (PEM).
    pub cert: Option<PathBuf>,
    /// `key`: the client certificate's key (PEM).
    pub key: Option<PathBuf>,
    /// `ca`: a CA (PEM).
    pub ca: Option<PathBuf>,
    /// `inbox_prefix`.
    pub inbox_prefix: Option<String>,
}

/// The file as the `nats` CLI writes it; every field a string, empty when unset. No `Debug`: it holds
/// the secrets.
#[derive(Deserialize, Default)]
#[serde(default)]
struct ContextFile {
    url: String,
    user: String,
    password: String,
    token: String,
    creds: String,
    nkey: String,
    cert: String,
    key: String,
    ca: String,
    inbox_prefix: String,
}

/// The directory the `nats` CLI keeps contexts in: `$XDG_CONFIG_HOME/nats/context`, else
/// `$HOME/.config/nats/context`.
pub fn directory() -> Option<PathBuf> {
    let nonempty = |v: &str| {
        std::env::var_os(v)
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
    };
    nonempty("XDG_CONFIG_HOME")
        .or_else(|| nonempty("HOME").map(|h| h.join(".config")))
        .map(|c| c.join("nats").join("context"))
}

/// The file of context `name`.
pub fn path_of(name: &str) -> Result<PathBuf, ContextError> {
    if name.is_empty() || name.contains(['/', '\\']) || name == "." || name == ".." {
        return Err(ContextError::Name(name.to_string()));
    }
    let dir = directory().ok_or_else(|| ContextError::NoDirectory(name.to_string()))?;
    Ok(dir.join(format!("{name}.json")))
}

fn read(name: &str, path: &Path) -> Result<ContextFile, ContextError> {
    let unreadable = |reason: String| ContextError::Unreadable {
        name: name.to_string(),
        path: path.display().to_string(),
        reason,
    };
    let size = std::fs::metadata(path)
        .map_err(|e| unreadable(e.to_string()))?
        .len();
    if size > MAX_CONTEXT_BYTES {
        return Err(unreadable(format!(
            "{size} bytes; a context is at most {MAX_CONTEXT_BYTES}"
        )));
    }
    let text = std::fs::read(path).map_err(|e| unreadable(e.to_string()))?;
    serde_json::from_slice(&text).map_err(|e| ContextError::Malformed {
        name: name.to_string(),
        path: path.display().to_string(),
        // serde_json's message names a line and column and what it expected, never the value.
        reason: e.to_string(),
    })
}

/// A path from a context: `~/` is the home directory, as the `nats` CLI reads it.
fn expand(p: &str) -> PathBuf {
    match (p.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(p),
    }
}

/// Reads context `name`.
pub fn load(name: &str) -> Result<NatsContext, ContextError> {
    let path = path_of(name)?;
    let f = read(name, &path)?;
    let text = |s: String| Some(s.trim().to_string()).filter(|s| !s.is_empty());
    let file = |s: String| text(s).map(|s| expand(&s));
    Ok(NatsContext {
        name: name.to_string(),
        url: text(f.url),
        user: text(f.user),
        has_password: !f.password.is_empty(),
        has_token: !f.token.is_empty(),
        creds: file(f.creds),
        nkey: file(f.nkey),
        cert: file(f.cert),
        key: file(f.key),
        ca: file(f.ca),
        inbox_prefix: text(f.inbox_prefix),
        path,
    })
}

/// The password (`secret = Password`) or token of the context in `path`, read when connecting.
pub(crate) fn secret(path: &Path, which: Secret) -> Result<String, ContextError> {
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let f = read(&name, path)?;
    let (value, field) = match which {
        Secret::Password => (f.password, "password"),
        Secret::Token => (f.token, "token"),
    };
    if value.is_empty() {
        return Err(ContextError::Malformed {
            name,
            path: path.display().to_string(),
            reason: format!("its {field} is gone"),
        });
    }
    Ok(value)
}

/// Which secret of a context.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Secret {
    Password,
    Token,
}
