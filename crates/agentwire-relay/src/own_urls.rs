//! Which names are this relay's: the URLs a NIP-42 `AUTH` event's `relay` tag may name, the `Host` a
//! WebSocket upgrade may name, and the `Origin` (web page) it may come from. Its listen address and the
//! public URLs and allowed origins its operator configures, compared as URLs. Pure: the address and the
//! lists are passed in.
//!
//! NIP-42 binds a signed `AUTH` to one relay by that tag. A relay that took any `ws://` URL would take an
//! `AUTH` a member's client signed for another relay (one that served this relay's challenge as its own),
//! replayed here: whoever replays it reads what the member may read.
//!
//! A web page on any site can open a WebSocket to `ws://127.0.0.1:7777`: the browser sends the page's
//! `Origin` and lets it through whatever the relay is. Left open, a page the operator visits reads the
//! rooms, writes in them and gets the agent's signed answers, from the operator's own machine. So an
//! upgrade carrying an `Origin` is taken only from this relay's own origins or the allowed ones; a native
//! client sends no `Origin` and is not affected. The `Host` check closes DNS rebinding (a name of the
//! attacker's that resolves to 127.0.0.1 makes the page same-origin with it): a name in `Host` must be
//! this relay's own.
//!
//! <https://github.com/nostr-protocol/nips/blob/master/42.md>,
//! <https://www.rfc-editor.org/rfc/rfc6455#section-10.2>

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};

use nostr::types::url::{ParseError, Url};

/// Why a text is not a URL of a relay (a `[relay] public_urls` entry, an `AUTH` event's `relay` tag).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RelayUrlError {
    /// The text does not parse as a URL.
    #[error("{text:?} is not a URL: {source}")]
    NotAUrl {
        /// The text as given.
        text: String,
        /// What the URL parser said.
        #[source]
        source: ParseError,
    },
    /// The URL's scheme is not `ws` or `wss`.
    #[error("{text:?} is not a ws:// or wss:// URL")]
    NotWebSocket {
        /// The text as given.
        text: String,
    },
    /// The URL has no host.
    #[error("{text:?} names no host")]
    NoHost {
        /// The text as given.
        text: String,
    },
}

/// Why a text is not a web origin (an `Origin` header, a `[relay] allowed_origins` entry).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OriginError {
    /// The text does not parse as a URL.
    #[error("{text:?} is not an origin: {source}")]
    NotAUrl {
        /// The text as given.
        text: String,
        /// What the URL parser said.
        #[source]
        source: ParseError,
    },
    /// The URL's scheme has no host (`file:`, `data:`), or it is `null`.
    #[error("{text:?} is not an origin (an http:// or https:// scheme, a host, an optional port)")]
    Opaque {
        /// The text as given.
        text: String,
    },
    /// The URL has a path, query or fragment after the host.
    #[error(
        "{text:?} is not an origin: it has a path, query or fragment (an origin is scheme://host[:port])"
    )]
    NotJustOrigin {
        /// The text as given.
        text: String,
    },
}

/// `text` as an error shows it: any user-info (a password in a configured URL) replaced, so no error
/// repeats a credential.
fn shown(text: &str) -> String {
    agentwire_core::redact_userinfo(text, "<set>")
}

/// A relay URL reduced to what names a relay: scheme and host (both lower case), port (the scheme's
/// default when absent: ws 80, wss 443) and path (one trailing `/` dropped, so `/` is the empty path).
/// Query, fragment and user info do not name another relay and are left out.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct RelayUrlKey {
    scheme: &'static str,
    host: String,
    port: u16,
    path: String,
}

impl RelayUrlKey {
    fn parse(text: &str) -> Result<Self, RelayUrlError> {
        let url = Url::parse(text.trim()).map_err(|source| RelayUrlError::NotAUrl {
            text: shown(text),
            source,
        })?;
        let scheme = match url.scheme().to_ascii_lowercase().as_str() {
            "ws" => "ws",
            "wss" => "wss",
            _ => return Err(RelayUrlError::NotWebSocket { text: shown(text) }),
        };
        let host = url
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| RelayUrlError::NoHost { text: shown(text) })?
            .to_ascii_lowercase();
        let port = url
            .port_or_known_default()
            .unwrap_or(if scheme == "ws" { 80 } else { 443 });
        let path = url.path();
        let path = path.strip_suffix('/').unwrap_or(path).to_owned();
        Ok(Self {
            scheme,
            host,
            port,
            path,
        })
    }

    fn plain(host: &str, port: u16) -> Self {
        Self {
            scheme: "ws",
            host: host.to_owned(),
            port,
            path: String::new(),
        }
    }
}

/// Checks that `url` is a `ws://` or `wss://` URL with a host, as a public URL of the relay must be; the
/// reason if not.
pub fn check_public_url(url: &str) -> Result<(), RelayUrlError> {
    RelayUrlKey::parse(url).map(|_| ())
}

/// A web origin as browsers send it: scheme, host (lower case) and port (the scheme's default when absent).
type OriginKey = (String, String, u16);

/// Parses an `Origin` header or an `[relay] allowed_origins` entry: a URL with a scheme that has a host
/// (`http`, `https`) and nothing after the host but a `/`. `null` (a sandboxed page, a `file://` one) is no
/// origin this relay takes.
fn parse_origin(text: &str) -> Result<OriginKey, OriginError> {
    let url = Url::parse(text.trim()).map_err(|source| OriginError::NotAUrl {
        text: shown(text),
        source,
    })?;
    let nostr::types::url::Origin::Tuple(scheme, host, port) = url.origin() else {
        return Err(OriginError::Opaque { text: shown(text) });
    };
    if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
        return Err(OriginError::NotJustOrigin { text: shown(text) });
    }
    Ok((scheme, host.to_string().to_ascii_lowercase(), port))
}

/// The `allowed_origins` entry that lets a page of any origin connect: for a relay exposed to the web Nostr
/// clients of the world, as public relays are.
pub const ANY_ORIGIN: &str = "*";

/// Checks that `origin` is a web origin (`https://app.example.com`, `http://localhost:5173`) or
/// [`ANY_ORIGIN`], as an entry of `[relay] allowed_origins` must be; the reason if not.
pub fn check_allowed_origin(origin: &str) -> Result<(), OriginError> {
    if origin.trim() == ANY_ORIGIN {
        return Ok(());
    }
    parse_origin(origin).map(|_| ())
}

/// A `Host` header's host (lower case, one trailing dot dropped) and its port if it names one; `None` for a
/// value that is not `host[:port]`.
fn parse_host(text: &str) -> Option<(String, Option<u16>)> {
    let text = text.trim();
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        v6.parse::<std::net::Ipv6Addr>().ok()?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?.parse().ok()?),
        };
        (format!("[{v6}]"), port)
    } else {
        match text.split_once(':') {
            Some((host, port)) => (host.to_owned(), Some(port.parse().ok()?)),
            None => (text.to_owned(), None),
        }
    };
    let host = host.to_ascii_lowercase();
    let host = host.strip_suffix('.').unwrap_or(&host).to_owned();
    let name_chars = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
    if host.is_empty() || !(host.starts_with('[') || host.chars().all(name_chars)) {
        return None;
    }
    Some((host, port))
}

/// The names of this relay.
#[derive(Debug, Clone, Default)]
pub(crate) struct OwnUrls {
    urls: HashSet<RelayUrlKey>,
    /// The listen port.
    port: u16,
    /// Listening on a wildcard address (`0.0.0.0`, `::`): reachable at any of the host's addresses.
    wildcard: bool,
    /// The web origins an upgrade may come from: this relay's own (its URLs as `http`/`https`) and
    /// `[relay] allowed_origins`.
    origins: HashSet<OriginKey>,
    /// `allowed_origins` holds [`ANY_ORIGIN`]: a page of any origin may connect.
    any_origin: bool,
}

impl OwnUrls {
    /// The URLs of a relay listening on `listen` (its bound address, with the real port) and reached at
    /// `public` too (behind a proxy or a TLS terminator, or by a name).
    ///
    /// From the listen address: `ws://` with its IP and port; a loopback address also as `localhost`; a
    /// wildcard address (`0.0.0.0`, `::`) as the loopback addresses and `localhost` (its other addresses
    /// are the operator's to list in `public`).
    pub(crate) fn new(listen: SocketAddr, public: &[String]) -> Result<Self, RelayUrlError> {
        let port = listen.port();
        let mut urls = HashSet::new();
        let v4 = "127.0.0.1";
        let v6 = "[::1]";
        let hosts: Vec<String> = match listen.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => vec![v4.into(), "localhost".into()],
            IpAddr::V6(ip) if ip.is_unspecified() => {
                vec![v4.into(), v6.into(), "localhost".into()]
            }
            ip if ip.is_loopback() => vec![host_of(ip), "localhost".into()],
            ip => vec![host_of(ip)],
        };
        for host in hosts {
            urls.insert(RelayUrlKey::plain(&host, port));
        }
        for url in public {
            urls.insert(RelayUrlKey::parse(url)?);
        }
        let origins = urls
            .iter()
            .map(|u| {
                let scheme = if u.scheme == "wss" { "https" } else { "http" };
                (scheme.to_owned(), u.host.clone(), u.port)
            })
            .collect();
        Ok(Self {
            urls,
            port,
            wildcard: listen.ip().is_unspecified(),
            origins,
            any_origin: false,
        })
    }

    /// Adds `allowed` (`[relay] allowed_origins`) to the origins an upgrade may come from.
    pub(crate) fn with_allowed_origins(mut self, allowed: &[String]) -> Result<Self, OriginError> {
        for origin in allowed {
            if origin.trim() == ANY_ORIGIN {
                self.any_origin = true;
            } else {
                self.origins.insert(parse_origin(origin)?);
            }
        }
        Ok(self)
    }

    /// Whether `url` (an `AUTH` event's `relay` tag) names this relay.
    pub(crate) fn accepts(&self, url: &str) -> bool {
        RelayUrlKey::parse(url).is_ok_and(|key| self.urls.contains(&key))
    }

    /// Whether a WebSocket upgrade's `Host` names this relay: the host and port of one of its URLs (no port
    /// for a URL on its scheme's default port), or, when it listens on a wildcard address, any IP address
    /// with its port (DNS rebinding needs a name; an address reaches only what listens on it).
    pub(crate) fn accepts_host(&self, host: &str) -> bool {
        let Some((host, port)) = parse_host(host) else {
            return false;
        };
        let named = self.urls.iter().any(|u| {
            u.host == host
                && port.map_or(u.port == if u.scheme == "ws" { 80 } else { 443 }, |p| {
                    p == u.port
                })
        });
        let address = host.starts_with('[') || host.parse::<std::net::Ipv4Addr>().is_ok();
        named || (self.wildcard && address && port == Some(self.port))
    }

    /// Whether a WebSocket upgrade's `Origin` (the web page that opened it) is one this relay takes: its
    /// own origins and the allowed ones, compared as origins (scheme, host, port). An upgrade without an
    /// `Origin` (a native client) is not asked about.
    pub(crate) fn accepts_origin(&self, origin: &str) -> bool {
        self.any_origin || parse_origin(origin).is_ok_and(|o| self.origins.contains(&o))
    }
}

/// An IP as a URL's host: IPv6 in brackets.
fn host_of(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(ip) => ip.to_string(),
        IpAddr::V6(ip) => format!("[{ip}]"),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_refused_url_never_repeats_its_password() {
        for bad in ["https://u:hunter22@h/", "wss://u:hunter22@"] {
            let e = check_public_url(bad).unwrap_err().to_string();
            assert!(!e.contains("hunter22") && e.contains("<set>"), "{e}");
        }
        let e = check_allowed_origin("https://u:hunter22@h/path")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("hunter22"), "{e}");
    }

    use super::*;

    fn own(listen: &str, public: &[&str]) -> OwnUrls {
        let public: Vec<String> = public.iter().map(|u| u.to_string()).collect();
        OwnUrls::new(listen.parse().unwrap(), &public).unwrap()
    }

    #[test]
    fn a_loopback_relay_is_its_address_and_localhost_compared_as_urls() {
        let urls = own("127.0.0.1:7447", &[]);
        for yes in [
            "ws://127.0.0.1:7447",
            "ws://127.0.0.1:7447/",
            "WS://LOCALHOST:7447",
            "ws://localhost:7447/?x=1",
        ] {
            assert!(urls.accepts(yes), "{yes}");
        }
        for no in [
            "ws://127.0.0.1:7448",
            "wss://127.0.0.1:7447",
            "ws://127.0.0.1:7447/other",
            "ws://evil.example.com",
            "wss://evil.example.com",
            "ws://127.0.0.1.evil.example.com:7447",
            "http://127.0.0.1:7447",
            "127.0.0.1:7447",
            "",
        ] {
            assert!(!urls.accepts(no), "{no}");
        }
    }

    #[test]
    fn public_urls_match_with_default_ports_case_and_a_trailing_slash() {
        let urls = own(
            "0.0.0.0:7447",
            &[
                "wss://Relay.Example.com",
                "ws://relay.example.com:8080/nostr/",
            ],
        );
        for yes in [
            "wss://relay.example.com",
            "wss://relay.example.com:443/",
            "WSS://RELAY.EXAMPLE.COM/",
            "ws://relay.example.com:8080/nostr",
            "ws://127.0.0.1:7447",
            "ws://localhost:7447",
        ] {
            assert!(urls.accepts(yes), "{yes}");
        }
        for no in [
            "ws://relay.example.com",
            "wss://relay.example.com:8443",
            "wss://relay.example.com/nostr",
            "ws://relay.example.com:8080",
            "ws://[::1]:7447",
        ] {
            assert!(!urls.accepts(no), "{no}");
        }
    }

    #[test]
    fn ipv6_and_other_addresses() {
        let urls = own("[::1]:9000", &[]);
        assert!(urls.accepts("ws://[::1]:9000/") && urls.accepts("ws://localhost:9000"));
        assert!(!urls.accepts("ws://127.0.0.1:9000"));
        let urls = own("[::]:9000", &[]);
        assert!(urls.accepts("ws://[::1]:9000") && urls.accepts("ws://127.0.0.1:9000"));
        let urls = own("192.168.1.5:80", &[]);
        assert!(urls.accepts("ws://192.168.1.5") && urls.accepts("ws://192.168.1.5:80/"));
        assert!(!urls.accepts("ws://localhost"));
    }

    #[test]
    fn a_public_url_must_be_ws_or_wss_with_a_host() {
        assert!(check_public_url("wss://relay.example.com").is_ok());
        for bad in [
            "https://relay.example.com",
            "relay.example.com",
            "ws://",
            "file:///x",
        ] {
            assert!(check_public_url(bad).is_err(), "{bad}");
        }
        let e = OwnUrls::new("127.0.0.1:1".parse().unwrap(), &["http://x".into()]).unwrap_err();
        assert!(e.to_string().contains("http://x"), "{e}");
    }

    #[test]
    fn an_upgrade_names_the_relay_in_its_host() {
        let urls = own("127.0.0.1:7447", &["wss://relay.example.com"]);
        for yes in [
            "127.0.0.1:7447",
            "localhost:7447",
            "LOCALHOST:7447",
            "localhost.:7447",
            "relay.example.com",
            "relay.example.com:443",
        ] {
            assert!(urls.accepts_host(yes), "{yes}");
        }
        for no in [
            "",
            "evil.example.com:7447",
            "127.0.0.1.evil.example.com:7447",
            "127.0.0.1:7448",
            "127.0.0.1",
            "localhost",
            "relay.example.com:80",
            "[::1]:7447",
            "10.0.0.5:7447",
            "user@localhost:7447",
            "localhost:7447/x",
            "localhost:port",
        ] {
            assert!(!urls.accepts_host(no), "{no}");
        }
        // A wildcard listener is reached at any of the host's addresses, with its port; names are still its
        // own only.
        let urls = own("0.0.0.0:7447", &[]);
        for yes in ["192.168.1.5:7447", "[fe80::1]:7447", "localhost:7447"] {
            assert!(urls.accepts_host(yes), "{yes}");
        }
        for no in ["192.168.1.5:80", "192.168.1.5", "rebind.example.com:7447"] {
            assert!(!urls.accepts_host(no), "{no}");
        }
    }

    #[test]
    fn an_upgrade_from_a_web_page_comes_from_an_own_or_allowed_origin() {
        let urls = own("127.0.0.1:7447", &["wss://relay.example.com"])
            .with_allowed_origins(&[
                "https://app.example.com".into(),
                "http://localhost:5173/".into(),
            ])
            .unwrap();
        for yes in [
            "https://app.example.com",
            "https://APP.example.com:443",
            "http://localhost:5173",
            "http://127.0.0.1:7447",
            "https://relay.example.com",
        ] {
            assert!(urls.accepts_origin(yes), "{yes}");
        }
        for no in [
            "null",
            "",
            "https://evil.example.com",
            "http://app.example.com",
            "https://app.example.com:8443",
            "http://localhost:5174",
            "https://app.example.com.evil.example.com",
            "file:///home/me/page.html",
        ] {
            assert!(!urls.accepts_origin(no), "{no}");
        }
    }

    #[test]
    fn an_allowed_origin_must_be_an_origin() {
        assert!(check_allowed_origin("https://app.example.com").is_ok());
        assert!(check_allowed_origin("http://localhost:5173/").is_ok());
        for bad in [
            "app.example.com",
            "https://app.example.com/page",
            "https://app.example.com/?x=1",
            "null",
            "**",
            "file:///x",
        ] {
            let e = check_allowed_origin(bad).unwrap_err().to_string();
            assert!(e.contains(bad), "{bad}: {e}");
        }
        // "*": any page, for a relay that serves the web's Nostr clients; names are still checked.
        assert!(check_allowed_origin("*").is_ok());
        let any = own("127.0.0.1:7447", &[])
            .with_allowed_origins(&["*".into()])
            .unwrap();
        assert!(any.accepts_origin("https://any.example.com") && any.accepts_origin("null"));
        assert!(!any.accepts_host("rebind.example.com:7447"));
        assert!(!own("127.0.0.1:7447", &[]).accepts_origin("https://any.example.com"));
    }
}
