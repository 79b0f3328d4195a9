//! Which URLs name this relay, for the `relay` tag of a NIP-42 `AUTH` event: its listen address and the
//! public URLs its operator configures, compared as URLs. Pure: the address and the URLs are passed in.
//!
//! NIP-42 binds a signed `AUTH` to one relay by that tag. A relay that took any `ws://` URL would take an
//! `AUTH` a member's client signed for another relay (one that served this relay's challenge as its own),
//! replayed here: whoever replays it reads what the member may read.
//!
//! <https://github.com/nostr-protocol/nips/blob/master/42.md>

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};

use nostr::types::url::Url;

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
    fn parse(text: &str) -> Result<Self, String> {
        let url = Url::parse(text.trim()).map_err(|e| format!("{text:?} is not a URL: {e}"))?;
        let scheme = match url.scheme().to_ascii_lowercase().as_str() {
            "ws" => "ws",
            "wss" => "wss",
            _ => return Err(format!("{text:?} is not a ws:// or wss:// URL")),
        };
        let host = url
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| format!("{text:?} names no host"))?
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
pub fn check_public_url(url: &str) -> Result<(), String> {
    RelayUrlKey::parse(url).map(|_| ())
}

/// The URLs that name this relay.
#[derive(Debug, Clone, Default)]
pub(crate) struct OwnUrls {
    urls: HashSet<RelayUrlKey>,
}

impl OwnUrls {
    /// The URLs of a relay listening on `listen` (its bound address, with the real port) and reached at
    /// `public` too (behind a proxy or a TLS terminator, or by a name).
    ///
    /// From the listen address: `ws://` with its IP and port; a loopback address also as `localhost`; a
    /// wildcard address (`0.0.0.0`, `::`) as the loopback addresses and `localhost` (its other addresses
    /// are the operator's to list in `public`).
    pub(crate) fn new(listen: SocketAddr, public: &[String]) -> Result<Self, String> {
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
        Ok(Self { urls })
    }

    /// Whether `url` (an `AUTH` event's `relay` tag) names this relay.
    pub(crate) fn accepts(&self, url: &str) -> bool {
        RelayUrlKey::parse(url).is_ok_and(|key| self.urls.contains(&key))
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
        assert!(e.contains("http://x"), "{e}");
    }
}
