//! How agentwire connects to NATS, for every use (the fisk-ai worker, `ask --nats`, `read`, `discover`): one
//! or more servers (a comma-separated list, as NATS clients take it), one way to authenticate (a
//! credentials file, user and password, a token or an nkey seed), TLS with a CA and a client certificate,
//! and reconnection with backoff to any listed or announced server, logged. Secrets are named (a variable,
//! a file) and read only to connect; a password in a URL is redacted wherever the URL is shown.
//!
//! Credentials in the URLs (`nats://user:password@host`, `nats://token@host`) are taken out of them and
//! handed to the client as its user and password (or token): the client sends only those it is given
//! (a URL's own are not sent, so a server that wants them refused the connection), and it logs the
//! addresses it connects to at debug, which then carry no secret.

use async_nats::ServerAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The wait before the second try to connect; it doubles with each failed try up to [`RECONNECT_MAX`].
pub const RECONNECT_FIRST: Duration = Duration::from_millis(100);
/// The longest wait between two reconnect attempts: short enough that a NATS node back from a restart is
/// used within seconds, long enough not to hammer a cluster that is down.
pub const RECONNECT_MAX: Duration = Duration::from_secs(5);
/// How long one attempt to reach a server may take before the next listed one is tried.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Most servers in one list: a cluster's seeds, never a scan.
pub const MAX_SERVERS: usize = 32;
/// The longest inbox prefix: a few subject tokens (`_INBOX.alice`), far below NATS's subject limits, so an
/// inbox built on it stays short.
pub const MAX_INBOX_PREFIX: usize = 64;

/// How to authenticate to NATS. Secrets are named, not held: a variable's name or a file's path, read when
/// the connection is made, so this value can be logged, shown by `config` and kept in memory safely.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum NatsAuth {
    /// None beyond what the URLs carry (`nats://user:password@host` or `nats://token@host`).
    #[default]
    None,
    /// A `.creds` file (a user JWT and its nkey seed), as `nsc` writes it.
    CredsFile(PathBuf),
    /// A user, and the environment variable holding the password.
    UserPassword {
        /// The user.
        user: String,
        /// The variable with the password.
        password_env: String,
    },
    /// The environment variable holding a token.
    TokenEnv(String),
    /// A file holding an nkey seed (`SU...`); the server knows its public key.
    NKeySeedFile(PathBuf),
    /// A user, and the NATS context file (as the `nats` CLI writes it) holding the password.
    ContextPassword {
        /// The user.
        user: String,
        /// The context file.
        context: PathBuf,
    },
    /// The NATS context file (as the `nats` CLI writes it) holding a token.
    ContextToken(PathBuf),
}

/// TLS settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NatsTls {
    /// A CA (PEM) the server's certificate must chain to, beside the system's roots.
    pub ca_file: Option<PathBuf>,
    /// A client certificate (PEM) and its key, for a server that verifies clients.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

impl NatsTls {
    fn any(&self) -> bool {
        self.ca_file.is_some() || self.client_cert.is_some()
    }
}

/// Where and how to connect. `Debug` shows the servers with any credentials in them redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct NatsConnect {
    /// The servers, as given (`nats://`, `tls://`, or `host:port`).
    pub servers: Vec<String>,
    /// How to authenticate.
    pub auth: NatsAuth,
    /// TLS.
    pub tls: NatsTls,
    /// The prefix of this connection's reply subjects (`_INBOX.alice`) instead of `_INBOX`: a server can then
    /// let each user subscribe to its own replies only, so no caller reads another's.
    pub inbox_prefix: Option<String>,
}

impl std::fmt::Debug for NatsConnect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsConnect")
            .field("servers", &self.shown())
            .field("auth", &self.auth)
            .field("tls", &self.tls)
            .field("inbox_prefix", &self.inbox_prefix)
            .finish()
    }
}

/// Why a NATS connection could not be made or its settings are wrong. Never carries a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectError {
    /// The server list is empty, too long, or a server is not an address.
    #[error("NATS servers: {0}")]
    Servers(String),
    /// A file the settings name could not be read.
    #[error("NATS {what} {path}: {reason}")]
    File {
        /// Which setting.
        what: &'static str,
        /// The path.
        path: String,
        /// What failed.
        reason: String,
    },
    /// A secret the settings name is not there.
    #[error("NATS: {0}")]
    Secret(String),
    /// The inbox prefix is not one (told as a servers' setting, as it always was).
    #[error("NATS servers: {0}")]
    InboxPrefix(#[from] InboxPrefixError),
    /// No server took the connection.
    #[error("NATS {servers}: {reason}")]
    Connect {
        /// The servers tried (any credentials in them redacted).
        servers: String,
        /// What failed.
        reason: String,
    },
}

/// Why a text is not an inbox prefix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InboxPrefixError {
    /// Empty, longer than [`MAX_INBOX_PREFIX`] bytes, or not subject tokens of letters, digits, `-` and
    /// `_` joined by `.` (a wildcard, an empty token).
    #[error(
        "{0:?}: subject tokens (letters, digits, - and _) joined by '.', at most {max} bytes",
        max = MAX_INBOX_PREFIX
    )]
    NotSubjectTokens(String),
}

/// A URL (or a comma-separated list) with any password or token in it replaced, for logs and errors.
pub fn redact_url(url: &str) -> String {
    agentwire_core::redact_userinfo(url, "[redacted]")
}

impl NatsConnect {
    /// One server, no authentication and no TLS.
    pub fn to(url: impl Into<String>) -> NatsConnect {
        NatsConnect {
            servers: vec![url.into()],
            auth: NatsAuth::None,
            tls: NatsTls::default(),
            inbox_prefix: None,
        }
    }

    /// Checks an inbox prefix: subject tokens of letters, digits, `-` and `_` joined by `.`, no wildcard,
    /// at most [`MAX_INBOX_PREFIX`] bytes.
    pub fn check_inbox_prefix(prefix: &str) -> Result<(), InboxPrefixError> {
        let tokens_fit = prefix.split('.').all(|t| {
            !t.is_empty()
                && t.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        });
        match (1..=MAX_INBOX_PREFIX).contains(&prefix.len()) && tokens_fit {
            true => Ok(()),
            false => Err(InboxPrefixError::NotSubjectTokens(prefix.to_owned())),
        }
    }

    /// The servers of a comma-separated list (`nats://a:4222,nats://b:4222`), each checked.
    pub fn parse_servers(list: &str) -> Result<Vec<String>, ConnectError> {
        let servers: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        Self::check_servers(&servers)?;
        Ok(servers)
    }

    /// The servers' addresses without their credentials, and the one set of credentials they carry (every
    /// server that names any names the same).
    fn addresses(servers: &[String]) -> Result<(Vec<ServerAddr>, UrlAuth), ConnectError> {
        let mut auth = UrlAuth::None;
        let mut addrs = Vec::with_capacity(servers.len());
        for addr in Self::check_servers(servers)? {
            let this = UrlAuth::of(&addr);
            match (&auth, &this) {
                (_, UrlAuth::None) => {}
                (UrlAuth::None, _) => auth = this.clone(),
                (a, b) if a == b => {}
                _ => {
                    return Err(ConnectError::Servers(
                        "the servers carry different credentials; give one user and password (or token) for all"
                            .into(),
                    ))
                }
            }
            let mut url = addr.into_inner();
            let _ = url.set_username("");
            let _ = url.set_password(None);
            addrs
                .push(ServerAddr::from_url(url).map_err(|e| ConnectError::Servers(e.to_string()))?);
        }
        Ok((addrs, auth))
    }

    fn check_servers(servers: &[String]) -> Result<Vec<ServerAddr>, ConnectError> {
        if servers.is_empty() {
            return Err(ConnectError::Servers("no server given".into()));
        }
        if servers.len() > MAX_SERVERS {
            return Err(ConnectError::Servers(format!(
                "{} servers; at most {MAX_SERVERS}",
                servers.len()
            )));
        }
        servers
            .iter()
            .map(|s| {
                s.parse::<ServerAddr>()
                    .map_err(|e| ConnectError::Servers(format!("{}: {e}", redact_url(s))))
            })
            .collect()
    }

    /// The servers for a log line or an error, credentials redacted.
    pub fn shown(&self) -> String {
        redact_url(&self.servers.join(","))
    }

    /// Connects as `name` (what the server shows for this connection). The first listed server that
    /// answers is used; afterwards the client reconnects on its own, with backoff, to any listed server or
    /// one the cluster announced, and says so in the log.
    pub async fn connect(&self, name: &str) -> Result<async_nats::Client, ConnectError> {
        let (addrs, url_auth) = Self::addresses(&self.servers)?;
        let shown = self.shown();
        let logged = shown.clone();
        let lost = Arc::new(AtomicBool::new(false));
        let mut options = async_nats::ConnectOptions::new()
            .name(name)
            .connection_timeout(CONNECT_TIMEOUT)
            .max_reconnects(None)
            .reconnect_delay_callback(reconnect_delay)
            .event_callback(move |event| {
                let servers = logged.clone();
                let lost = lost.clone();
                async move { log_event(&servers, &lost, event) }
            });
        options = match &self.auth {
            NatsAuth::None => match url_auth {
                UrlAuth::None => options,
                UrlAuth::UserPassword(user, password) => options.user_and_password(user, password),
                UrlAuth::Token(token) => options.token(token),
            },
            _ if url_auth != UrlAuth::None => {
                return Err(ConnectError::Servers(
                    "credentials in a server URL and in the settings: give one way to authenticate"
                        .into(),
                ))
            }
            NatsAuth::CredsFile(path) => {
                options
                    .credentials_file(path)
                    .await
                    .map_err(|e| ConnectError::File {
                        what: "credentials file",
                        path: path.display().to_string(),
                        reason: e.to_string(),
                    })?
            }
            NatsAuth::UserPassword { user, password_env } => {
                options.user_and_password(user.clone(), secret_from_env(password_env)?)
            }
            NatsAuth::TokenEnv(var) => options.token(secret_from_env(var)?),
            NatsAuth::ContextPassword { user, context } => options.user_and_password(
                user.clone(),
                crate::context::secret(context, crate::context::Secret::Password)
                    .map_err(|e| ConnectError::Secret(e.to_string()))?,
            ),
            NatsAuth::ContextToken(context) => options.token(
                crate::context::secret(context, crate::context::Secret::Token)
                    .map_err(|e| ConnectError::Secret(e.to_string()))?,
            ),
            NatsAuth::NKeySeedFile(path) => {
                let seed = std::fs::read_to_string(path).map_err(|e| ConnectError::File {
                    what: "nkey seed file",
                    path: path.display().to_string(),
                    reason: e.to_string(),
                })?;
                options.nkey(seed.trim().to_string())
            }
        };
        if let Some(prefix) = &self.inbox_prefix {
            Self::check_inbox_prefix(prefix)?;
            options = options.custom_inbox_prefix(prefix.clone());
        }
        if self.tls.any() {
            options = options.require_tls(true);
        }
        if let Some(ca) = &self.tls.ca_file {
            readable("TLS CA file", ca)?;
            options = options.add_root_certificates(ca.clone());
        }
        if let Some((cert, key)) = &self.tls.client_cert {
            readable("TLS client certificate", cert)?;
            readable("TLS client key", key)?;
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
        options
            .connect(addrs)
            .await
            .map_err(|e| ConnectError::Connect {
                servers: shown,
                reason: e.to_string(),
            })
    }
}

/// Credentials a server URL carries, percent-decoded. No `Debug`: it holds the secret.
#[derive(Clone, PartialEq, Eq)]
enum UrlAuth {
    None,
    UserPassword(String, String),
    Token(String),
}

impl UrlAuth {
    fn of(addr: &ServerAddr) -> UrlAuth {
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        };
        match (addr.username(), addr.password()) {
            (Some(user), Some(password)) => UrlAuth::UserPassword(decode(user), decode(password)),
            (Some(token), None) => UrlAuth::Token(decode(token)),
            // `nats://:secret@host`: no user, so the secret is a token rather than dropped.
            (None, Some(token)) if !token.is_empty() => UrlAuth::Token(decode(token)),
            (None, _) => UrlAuth::None,
        }
    }
}

fn secret_from_env(var: &str) -> Result<String, ConnectError> {
    std::env::var(var)
        .ok()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| ConnectError::Secret(format!("the environment variable {var} is not set")))
}

fn readable(what: &'static str, path: &std::path::Path) -> Result<(), ConnectError> {
    std::fs::metadata(path)
        .map(|_| ())
        .map_err(|e| ConnectError::File {
            what,
            path: path.display().to_string(),
            reason: e.to_string(),
        })
}

/// The wait before connect attempt `attempts`, as the client counts them (from 1, the first connect and
/// the first try after a drop): none for the first, then [`RECONNECT_FIRST`] doubling. (Waiting before the
/// first try too put 100 ms in front of every connection: every command and every remote fisk-ai turn.)
fn reconnect_delay(attempts: usize) -> Duration {
    if attempts <= 1 {
        return Duration::ZERO;
    }
    let doublings = attempts.saturating_sub(2).min(16) as u32;
    RECONNECT_FIRST
        .saturating_mul(2u32.saturating_pow(doublings))
        .min(RECONNECT_MAX)
}

/// Logs what became of a connection: the first connect at `debug` (the caller says what it serves), a
/// connection lost and found again as news an operator wants, a close at `debug`, anything else as a
/// warning. `lost` is set
/// while the connection is down.
fn log_event(servers: &str, lost: &AtomicBool, event: async_nats::Event) {
    use async_nats::Event;
    match event {
        Event::Connected if lost.swap(false, Ordering::Relaxed) => {
            tracing::info!(%servers, "NATS connected again")
        }
        Event::Connected => tracing::debug!(%servers, "NATS connected"),
        Event::Disconnected => {
            lost.store(true, Ordering::Relaxed);
            tracing::warn!(%servers, "NATS disconnected; reconnecting with backoff")
        }
        // The client's own close: a command or a daemon leaving as it meant to.
        Event::Closed => tracing::debug!(%servers, "NATS connection closed"),
        Event::LameDuckMode => {
            tracing::warn!(%servers, "the NATS server is going away (lame duck); moving")
        }
        other => tracing::warn!(%servers, event = %other, "NATS"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_split_checked_and_bounded() {
        assert_eq!(
            NatsConnect::parse_servers("nats://127.0.0.1:4222, tls://127.0.0.1:4223,").unwrap(),
            ["nats://127.0.0.1:4222", "tls://127.0.0.1:4223"]
        );
        assert!(NatsConnect::parse_servers(" , ").is_err());
        assert!(NatsConnect::parse_servers("nats://a:1,http://[::1").is_err());
        let many = vec!["nats://127.0.0.1:4222"; MAX_SERVERS + 1].join(",");
        assert!(NatsConnect::parse_servers(&many).is_err());
    }

    #[test]
    fn secrets_stay_out_of_what_is_shown() {
        let c = NatsConnect {
            servers: vec!["nats://alice:pw-in-url@127.0.0.1:4222".into()],
            auth: NatsAuth::TokenEnv("AW_TOKEN".into()),
            tls: NatsTls::default(),
            inbox_prefix: None,
        };
        let shown = format!("{} {c:?}", c.shown());
        assert!(!shown.contains("pw-in-url"), "{shown}");
        assert!(shown.contains("127.0.0.1:4222"));
        let err = NatsConnect::parse_servers("nats://bob:hunter2@:bad:port").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    #[test]
    fn credentials_leave_the_urls_for_the_client_options() {
        let (addrs, auth) = NatsConnect::addresses(&[
            "nats://alice:p%40ss%3Aword@127.0.0.1:4222".into(),
            "nats://127.0.0.1:4223".into(),
        ])
        .unwrap();
        assert!(auth == UrlAuth::UserPassword("alice".into(), "p@ss:word".into()));
        for a in &addrs {
            assert!(!a.as_url_str().contains("alice") && !a.as_url_str().contains("p%40ss"));
        }
        assert_eq!(addrs[0].as_url_str(), "nats://127.0.0.1:4222");
        let (_, auth) = NatsConnect::addresses(&["nats://s3cret@127.0.0.1:4222".into()]).unwrap();
        assert!(auth == UrlAuth::Token("s3cret".into()));
        let e = NatsConnect::addresses(&[
            "nats://a:x@127.0.0.1:1".into(),
            "nats://b:y@127.0.0.1:2".into(),
        ])
        .err()
        .expect("two sets of credentials are refused");
        assert!(
            !e.to_string().contains(":x@") && !e.to_string().contains(":y@"),
            "{e}"
        );
    }

    #[test]
    fn an_inbox_prefix_is_subject_tokens_without_wildcards() {
        for good in ["_INBOX.alice", "inbox", "a-b_c.d1"] {
            assert!(NatsConnect::check_inbox_prefix(good).is_ok(), "{good}");
        }
        let long = "a".repeat(MAX_INBOX_PREFIX + 1);
        for bad in [
            "",
            "_INBOX.>",
            "_INBOX.*",
            "a..b",
            ".a",
            "a b",
            long.as_str(),
        ] {
            assert!(NatsConnect::check_inbox_prefix(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn reconnects_back_off_to_the_ceiling() {
        assert_eq!(
            reconnect_delay(1),
            Duration::ZERO,
            "the first try is at once"
        );
        assert_eq!(reconnect_delay(2), RECONNECT_FIRST);
        assert_eq!(reconnect_delay(3), RECONNECT_FIRST * 2);
        assert_eq!(reconnect_delay(100), RECONNECT_MAX);
    }
}
