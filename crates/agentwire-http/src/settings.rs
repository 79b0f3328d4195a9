//! The HTTP server's configuration section, `[http]`, and `--http-listen`: the file shape, the flag's
//! value, the resolution into [`HttpSettings`] (on by default on this host; a listen beyond it only with
//! `allow_remote`, since the token is then all that guards the API), and what `agentwire config` shows.

use crate::slots::{DEFAULT_MAX_CONNECTIONS, MAX_CONNECTIONS_CEILING, MIN_CONNECTIONS};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Where the HTTP server listens by default: this host only, next to the relay's 7777.
pub const DEFAULT_HTTP_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 7780);

/// `[http]` in the configuration file.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpSection {
    /// Its address, or `off`.
    pub listen: Option<String>,
    /// Serve clients beyond this host.
    pub allow_remote: Option<bool>,
    /// `[[http.callers]]`: programs with tokens of their own for the caller fronts.
    pub callers: Vec<CallerSection>,
    /// Connections open at once.
    pub max_connections: Option<usize>,
    /// Event streams (`/api/v1/events`) open at once.
    pub max_event_streams: Option<usize>,
}

/// `[[http.callers]]`: one caller of the caller fronts (A2A, the OpenAI-compatible API, MCP).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallerSection {
    /// Its name: recorded as each of its turns' requester (`caller:<name>`).
    pub name: String,
    /// The environment variable holding its token.
    pub token_env: Option<String>,
    /// The file holding its token (readable by its owner only).
    pub token_file: Option<std::path::PathBuf>,
    /// The agents it may call (default: every agent exposed on the front).
    pub agents: Option<Vec<String>>,
}

/// Where a caller's token is read from when the server starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// This environment variable.
    Env(String),
    /// This file.
    File(std::path::PathBuf),
}

/// A caller, resolved: its token is read when the server starts, never kept in the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerSetting {
    /// Its name.
    pub name: String,
    /// Where its token is.
    pub token: TokenSource,
    /// The agents it may call (`None`: every agent on the front).
    pub agents: Option<Vec<String>>,
}

/// Where the HTTP server listens: an address, or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpListen {
    /// On this address.
    At(SocketAddr),
    /// Not at all.
    Off,
}

/// Why a listen value (`--http-listen`'s, `[http] listen`'s) is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListenError {
    /// It is neither `off` nor an IP address with a port (a host name, or an address without its port).
    #[error("{value:?} is not an IP address and port (such as 127.0.0.1:{port}) or off")]
    NotAnAddress {
        /// The value given (trimmed).
        value: String,
        /// The port the example shows: the value's own, else the default's.
        port: String,
        /// Why it did not parse as an address.
        source: std::net::AddrParseError,
    },
}

/// Reads a listen value (`--http-listen`'s, `[http] listen`'s): an address, or `off`.
pub fn http_listen(value: &str) -> Result<HttpListen, ListenError> {
    match value.trim() {
        "off" => Ok(HttpListen::Off),
        v => v
            .parse()
            .map(HttpListen::At)
            .map_err(|source| ListenError::NotAnAddress {
                value: v.to_string(),
                port: v.rsplit_once(':').map_or("7780", |(_, p)| p).to_string(),
                source,
            }),
    }
}

/// The server's settings, resolved and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSettings {
    /// Its address.
    pub listen: SocketAddr,
    /// Clients beyond this host are served.
    pub allow_remote: bool,
    /// The callers of the caller fronts.
    pub callers: Vec<CallerSetting>,
    /// Its connection caps.
    pub limits: HttpLimits,
}

/// Event streams open at once by default (`[http] max_event_streams`): each holds a connection and a
/// receiver of the hub's ring (about 20 KiB of memory in all, measured by the `memory` benchmark); a hub
/// page, a few CLIs following runs and a collector are far fewer.
pub const DEFAULT_MAX_EVENT_STREAMS: usize = 64;

/// The HTTP server's caps, from `[http]`: connections open at once (the unauthenticated, callers' and each
/// caller's shares follow from it, [`crate::slots`]) and, of those, event streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Connections open at once, [`MIN_CONNECTIONS`]..=[`MAX_CONNECTIONS_CEILING`].
    pub max_connections: usize,
    /// Event streams open at once, 1..=`max_connections`.
    pub max_event_streams: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_event_streams: DEFAULT_MAX_EVENT_STREAMS,
        }
    }
}

/// `[http] max_connections` and `max_event_streams` checked: the connections within their bounds, the
/// event streams at least one and no more than the connections (by default 64, or half the connections
/// when those are fewer than 128).
fn limits(section: &HttpSection) -> Result<HttpLimits, SettingError> {
    let max_connections = section.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS);
    if !(MIN_CONNECTIONS..=MAX_CONNECTIONS_CEILING).contains(&max_connections) {
        return Err(SettingError {
            setting: "[http] max_connections",
            reason: format!(
                "{max_connections}: between {MIN_CONNECTIONS} and {MAX_CONNECTIONS_CEILING} (each is a file descriptor; docs/security.md has the budget)"
            ),
        });
    }
    let max_event_streams = section
        .max_event_streams
        .unwrap_or(DEFAULT_MAX_EVENT_STREAMS.min(max_connections / 2));
    if !(1..=max_connections).contains(&max_event_streams) {
        return Err(SettingError {
            setting: "[http] max_event_streams",
            reason: format!(
                "{max_event_streams}: between 1 and max_connections ({max_connections}; each stream is a connection)"
            ),
        });
    }
    Ok(HttpLimits {
        max_connections,
        max_event_streams,
    })
}

/// Why `[http]` or `--http-listen` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting}: {reason}")]
pub struct SettingError {
    /// The flag or key.
    pub setting: &'static str,
    /// What is wrong.
    pub reason: String,
}

/// The server's settings from `flag` (`--http-listen`) over `section` over the default, or `None` when it
/// is off.
pub fn resolve(
    flag: Option<HttpListen>,
    section: &HttpSection,
) -> Result<Option<HttpSettings>, SettingError> {
    let (listen, setting) = match (flag, &section.listen) {
        (Some(l), _) => (l, "--http-listen"),
        (None, Some(v)) => (
            http_listen(v).map_err(|e| SettingError {
                setting: "[http] listen",
                reason: e.to_string(),
            })?,
            "[http] listen",
        ),
        (None, None) => (HttpListen::At(DEFAULT_HTTP_LISTEN), "[http] listen"),
    };
    let HttpListen::At(listen) = listen else {
        return Ok(None);
    };
    let allow_remote = section.allow_remote.unwrap_or(false);
    if !listen.ip().is_loopback() && !allow_remote {
        return Err(SettingError {
            setting,
            reason: format!(
                "{listen} is not a loopback address: listening beyond this host needs [http] allow_remote = true (the token guards the API)"
            ),
        });
    }
    Ok(Some(HttpSettings {
        listen,
        allow_remote,
        callers: callers(&section.callers)?,
        limits: limits(section)?,
    }))
}

/// The longest caller name: it is journaled in every turn of the caller's and shown in lists.
pub const MAX_CALLER_NAME_CHARS: usize = 64;

/// `[[http.callers]]` checked: a name each (`[A-Za-z0-9_.-]`, 1-64, unique), exactly one of `token_env`
/// and `token_file`, at most [`MAX_CALLERS`](crate::callers::MAX_CALLERS).
fn callers(sections: &[CallerSection]) -> Result<Vec<CallerSetting>, SettingError> {
    let bad = |reason: String| SettingError {
        setting: "[[http.callers]]",
        reason,
    };
    if sections.len() > crate::callers::MAX_CALLERS {
        return Err(bad(format!(
            "{} callers: at most {}",
            sections.len(),
            crate::callers::MAX_CALLERS
        )));
    }
    let mut names = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for c in sections {
        let fit = (1..=MAX_CALLER_NAME_CHARS).contains(&c.name.len())
            && c.name
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '-' | '_' | '.'));
        if !fit {
            return Err(bad(format!("name {:?}: 1-64 of A-Z a-z 0-9 - _ .", c.name)));
        }
        if !names.insert(c.name.clone()) {
            return Err(bad(format!("name {:?} is given twice", c.name)));
        }
        let token = match (&c.token_env, &c.token_file) {
            (Some(v), None) if !v.is_empty() => TokenSource::Env(v.clone()),
            (None, Some(f)) => TokenSource::File(f.clone()),
            _ => {
                return Err(bad(format!(
                    "caller {:?}: give its token as token_env (a variable's name) or token_file, one of them",
                    c.name
                )))
            }
        };
        out.push(CallerSetting {
            name: c.name.clone(),
            token,
            agents: c.agents.clone(),
        });
    }
    Ok(out)
}

/// `[http]` as `agentwire config` prints what is in force: `listen = "off"` when the server is off.
#[derive(Debug, Serialize)]
pub struct HttpView {
    listen: String,
    allow_remote: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_connections: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_event_streams: Option<usize>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    callers: Vec<CallerView>,
}

/// A caller as `agentwire config` shows it: where its token is, never the token.
#[derive(Debug, Serialize)]
struct CallerView {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    token_env: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    token_file: Option<std::path::PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    agents: Option<Vec<String>>,
}

/// What `agentwire config` shows of `settings`.
pub fn view(settings: Option<&HttpSettings>) -> HttpView {
    match settings {
        Some(h) => HttpView {
            listen: h.listen.to_string(),
            allow_remote: h.allow_remote,
            max_connections: Some(h.limits.max_connections),
            max_event_streams: Some(h.limits.max_event_streams),
            callers: h
                .callers
                .iter()
                .map(|c| CallerView {
                    name: c.name.clone(),
                    token_env: match &c.token {
                        TokenSource::Env(v) => Some(v.clone()),
                        TokenSource::File(_) => None,
                    },
                    token_file: match &c.token {
                        TokenSource::File(f) => Some(f.clone()),
                        TokenSource::Env(_) => None,
                    },
                    agents: c.agents.clone(),
                })
                .collect(),
        },
        None => HttpView {
            listen: "off".into(),
            allow_remote: false,
            max_connections: None,
            max_event_streams: None,
            callers: Vec::new(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_this_host_by_default_off_by_choice_and_beyond_it_only_when_allowed() {
        let none = HttpSection::default();
        assert_eq!(
            resolve(None, &none).unwrap().unwrap().listen,
            DEFAULT_HTTP_LISTEN
        );
        assert_eq!(resolve(Some(HttpListen::Off), &none), Ok(None));
        let off = HttpSection {
            listen: Some("off".into()),
            ..Default::default()
        };
        assert_eq!(resolve(None, &off), Ok(None));
        let at = http_listen("127.0.0.1:9000").unwrap();
        assert_eq!(
            resolve(Some(at), &off).unwrap().unwrap().listen.port(),
            9000,
            "the flag wins"
        );
        let wide = http_listen("0.0.0.0:9000").unwrap();
        let e = resolve(Some(wide), &none).unwrap_err();
        assert_eq!(e.setting, "--http-listen");
        assert!(e.reason.contains("allow_remote"), "{e}");
        let allowed = HttpSection {
            allow_remote: Some(true),
            ..Default::default()
        };
        assert!(resolve(Some(wide), &allowed).unwrap().unwrap().allow_remote);
        let bad = HttpSection {
            listen: Some("here".into()),
            ..Default::default()
        };
        assert_eq!(resolve(None, &bad).unwrap_err().setting, "[http] listen");
    }

    #[test]
    fn a_listen_value_is_an_address_and_port_or_off() {
        assert_eq!(http_listen(" off "), Ok(HttpListen::Off));
        assert_eq!(
            http_listen("here").unwrap_err().to_string(),
            "\"here\" is not an IP address and port (such as 127.0.0.1:7780) or off"
        );
        let e = http_listen("localhost:9000").unwrap_err();
        assert_eq!(
            e.to_string(),
            "\"localhost:9000\" is not an IP address and port (such as 127.0.0.1:9000) or off"
        );
        assert!(
            std::error::Error::source(&e).is_some(),
            "the parse error is kept"
        );
        let bad = HttpSection {
            listen: Some("127.0.0.1".into()),
            ..Default::default()
        };
        assert_eq!(
            resolve(None, &bad).unwrap_err().to_string(),
            "[http] listen: \"127.0.0.1\" is not an IP address and port (such as 127.0.0.1:7780) or off"
        );
    }

    #[test]
    fn callers_have_a_name_and_one_token_source() {
        let with = |callers: Vec<CallerSection>| HttpSection {
            callers,
            ..Default::default()
        };
        let alice = CallerSection {
            name: "alice".into(),
            token_env: Some("ALICE_TOKEN".into()),
            agents: Some(vec!["demo".into()]),
            ..Default::default()
        };
        let got = resolve(None, &with(vec![alice.clone()])).unwrap().unwrap();
        assert_eq!(got.callers[0].token, TokenSource::Env("ALICE_TOKEN".into()));
        let twice = resolve(None, &with(vec![alice.clone(), alice.clone()])).unwrap_err();
        assert!(twice.reason.contains("twice"), "{twice}");
        let neither = CallerSection {
            name: "bob".into(),
            ..Default::default()
        };
        let e = resolve(None, &with(vec![neither])).unwrap_err();
        assert!(e.reason.contains("token_env"), "{e}");
        let both = CallerSection {
            token_file: Some("/x".into()),
            ..alice.clone()
        };
        assert!(resolve(None, &with(vec![both])).is_err());
        let bad_name = CallerSection {
            name: "a b".into(),
            ..alice
        };
        assert!(resolve(None, &with(vec![bad_name])).is_err());
    }

    #[test]
    fn connection_and_event_stream_caps_default_and_are_bounded() {
        let caps = |c: Option<usize>, e: Option<usize>| {
            resolve(
                None,
                &HttpSection {
                    max_connections: c,
                    max_event_streams: e,
                    ..Default::default()
                },
            )
            .map(|s| s.unwrap().limits)
        };
        assert_eq!(caps(None, None).unwrap(), HttpLimits::default());
        assert_eq!(
            caps(Some(1100), Some(1000)).unwrap(),
            HttpLimits {
                max_connections: 1100,
                max_event_streams: 1000
            }
        );
        assert_eq!(
            caps(Some(40), None).unwrap().max_event_streams,
            20,
            "fewer connections than 128: half of them by default"
        );
        for (c, e, setting) in [
            (Some(MIN_CONNECTIONS - 1), None, "[http] max_connections"),
            (
                Some(MAX_CONNECTIONS_CEILING + 1),
                None,
                "[http] max_connections",
            ),
            (None, Some(0), "[http] max_event_streams"),
            (Some(100), Some(101), "[http] max_event_streams"),
        ] {
            let e = caps(c, e).unwrap_err();
            assert_eq!(e.setting, setting, "{e}");
        }
    }
}
