//! The HTTP server's configuration section, `[http]`, and `--http-listen`: the file shape, the flag's
//! value, the resolution into [`HttpSettings`] (on by default on this host; a listen beyond it only with
//! `allow_remote`, since the token is then all that guards the API), and what `agentwire config` shows.

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
}

/// Where the HTTP server listens: an address, or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpListen {
    /// On this address.
    At(SocketAddr),
    /// Not at all.
    Off,
}

/// Reads a listen value (`--http-listen`'s, `[http] listen`'s): an address, or `off`.
pub fn http_listen(value: &str) -> Result<HttpListen, String> {
    match value.trim() {
        "off" => Ok(HttpListen::Off),
        v => v.parse().map(HttpListen::At).map_err(|_| {
            let port = v.rsplit_once(':').map_or("7780", |(_, p)| p);
            format!("{v:?} is not an IP address and port (such as 127.0.0.1:{port}) or off")
        }),
    }
}

/// The server's settings, resolved and checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpSettings {
    /// Its address.
    pub listen: SocketAddr,
    /// Clients beyond this host are served.
    pub allow_remote: bool,
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
            http_listen(v).map_err(|reason| SettingError {
                setting: "[http] listen",
                reason,
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
    }))
}

/// `[http]` as `agentwire config` prints what is in force: `listen = "off"` when the server is off.
#[derive(Debug, Serialize)]
pub struct HttpView {
    listen: String,
    allow_remote: bool,
}

/// What `agentwire config` shows of `settings`.
pub fn view(settings: Option<&HttpSettings>) -> HttpView {
    match settings {
        Some(h) => HttpView {
            listen: h.listen.to_string(),
            allow_remote: h.allow_remote,
        },
        None => HttpView {
            listen: "off".into(),
            allow_remote: false,
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
}
