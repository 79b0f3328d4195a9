//! Who may use the HTTP server: the token made once in the data dir (a request presents it as
//! `Authorization: Bearer <token>`, or as the cookie a browser got from `/?token=`), and the `Host` a request
//! names (on a loopback listen only the loopback names and the listen address, so a web page that rebinds
//! its own name to 127.0.0.1 reaches nothing), and the bound on logging wrong tokens. Pure.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The cookie a browser keeps the token in.
pub const TOKEN_COOKIE: &str = "agentwire_token";
/// Random bytes in a token: 256 bits, far past guessing.
const TOKEN_BYTES: usize = 32;

/// Why a token cannot be made or read back. No part of a token is ever in one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// The system's random source gave no bytes for a new token (ring says nothing more of why).
    #[error("the system's random source failed")]
    RandomSource,
    /// The text read back is not hex of [`TOKEN_BYTES`] bytes.
    #[error("not a token ({} hex digits)", TOKEN_BYTES * 2)]
    NotAToken,
}

/// The API's token. Its `Debug` shows no part of it.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token([redacted])")
    }
}

impl Token {
    /// A new random token (hex).
    pub fn generate() -> Result<Token, TokenError> {
        let mut bytes = [0u8; TOKEN_BYTES];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
            .map_err(|_| TokenError::RandomSource)?;
        Ok(Token(bytes.iter().map(|b| format!("{b:02x}")).collect()))
    }

    /// A token read back (from the data dir's file): hex of `TOKEN_BYTES` (32) bytes.
    pub fn parse(text: &str) -> Result<Token, TokenError> {
        let t = text.trim();
        match t.len() == TOKEN_BYTES * 2 && t.bytes().all(|b| b.is_ascii_hexdigit()) {
            true => Ok(Token(t.to_ascii_lowercase())),
            false => Err(TokenError::NotAToken),
        }
    }

    /// A secret given whole (a caller's token, checked by [`crate::callers::caller_token`]).
    pub(crate) fn secret(text: &str) -> Token {
        Token(text.to_string())
    }

    /// The token, to write to its file or give to its owner (the ready line).
    pub fn reveal(&self) -> &str {
        &self.0
    }

    /// Whether `presented` is this token, compared in constant time.
    pub fn matches(&self, presented: &str) -> bool {
        #[allow(deprecated)]
        let same = ring::constant_time::verify_slices_are_equal(
            self.0.as_bytes(),
            presented.trim().as_bytes(),
        );
        same.is_ok()
    }
}

/// The token a request presents: its bearer token, else its token cookie.
pub fn presented<'a>(authorization: Option<&'a str>, cookie: Option<&'a str>) -> Option<&'a str> {
    if let Some(a) = authorization {
        let (scheme, token) = a.trim().split_once(' ')?;
        return scheme
            .eq_ignore_ascii_case("bearer")
            .then_some(token.trim());
    }
    cookie?.split(';').find_map(|c| {
        let (name, value) = c.trim().split_once('=')?;
        (name == TOKEN_COOKIE).then_some(value)
    })
}

/// Whether a request naming `host` (its `Host` header) may be served on `listen`: the listen address, or a
/// loopback name (`localhost`, `127.0.0.1`, `[::1]`) with its port. With `allow_remote`, any: a server
/// listening beyond this host is reached by names it cannot know, and the token guards it.
pub fn host_allowed(host: Option<&str>, listen: SocketAddr, allow_remote: bool) -> bool {
    if allow_remote {
        return true;
    }
    let Some(host) = host else { return false };
    let host = host.trim().to_ascii_lowercase();
    let port = listen.port();
    host == listen.to_string()
        || [
            format!("localhost:{port}"),
            format!("127.0.0.1:{port}"),
            format!("[::1]:{port}"),
        ]
        .contains(&host)
}

/// Whether a state-changing request may be served given its `Origin` and `Sec-Fetch-Site` headers and the
/// `Host` it names: a browser names the page's origin on every cross-site request, so a request from a page
/// of another site (a form posted at this server, a script's fetch) is refused even when the browser would
/// send the token cookie. A request without either header comes from a program (curl, a client library),
/// which presents the token itself.
pub fn origin_allowed(origin: Option<&str>, fetch_site: Option<&str>, host: Option<&str>) -> bool {
    if fetch_site.is_some_and(|s| s.trim().eq_ignore_ascii_case("cross-site")) {
        return false;
    }
    let Some(origin) = origin.map(str::trim) else {
        return true;
    };
    let Some(host) = host.map(|h| h.trim().to_ascii_lowercase()) else {
        return false;
    };
    let origin = origin.to_ascii_lowercase();
    origin == format!("http://{host}") || origin == format!("https://{host}")
}

/// At most one log line about wrong tokens this often: 10 s. Each wrong token is counted
/// (`agentwire_http_token_failures_total`); the lines tell an operator someone is trying, and whence, without
/// letting a client that sends thousands fill the log.
pub const WRONG_TOKEN_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Wrong tokens presented, and when a line about them was last logged.
#[derive(Debug, Default)]
pub struct WrongTokens {
    total: u64,
    since_last_line: u64,
    last_line: Option<Instant>,
}

/// What a log line about a wrong token says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrongTokenLine {
    /// Wrong tokens since the server started, this one included.
    pub total: u64,
    /// Of those, the ones no line was logged for since the last line.
    pub since_last_line: u64,
}

impl WrongTokens {
    /// Counts a wrong token presented at `now`; the line to log, when the last one is
    /// [`WRONG_TOKEN_LOG_INTERVAL`] old or there was none.
    pub fn record(&mut self, now: Instant) -> Option<WrongTokenLine> {
        self.total += 1;
        let due = self
            .last_line
            .is_none_or(|at| now.saturating_duration_since(at) >= WRONG_TOKEN_LOG_INTERVAL);
        if !due {
            self.since_last_line += 1;
            return None;
        }
        self.last_line = Some(now);
        let line = WrongTokenLine {
            total: self.total,
            since_last_line: self.since_last_line,
        };
        self.since_last_line = 0;
        Some(line)
    }
}

/// Whether an address is this host's own (loopback): the only listen the server takes unless told to
/// allow remote clients.
pub fn is_local(listen: SocketAddr) -> bool {
    listen.ip().is_loopback()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_random_hex_compared_whole_and_never_shown() {
        let t = Token::generate().unwrap();
        assert_eq!(t.reveal().len(), 64);
        assert_ne!(t, Token::generate().unwrap());
        assert!(t.matches(t.reveal()));
        assert!(!t.matches(&t.reveal()[..63]));
        assert!(!t.matches(""));
        assert!(!format!("{t:?}").contains(t.reveal()));
        assert_eq!(Token::parse(&format!("{}\n", t.reveal())).unwrap(), t);
        assert_eq!(
            Token::parse("abc").unwrap_err().to_string(),
            "not a token (64 hex digits)"
        );
        let not_hex = format!("{}zz", &t.reveal()[..62]);
        let e = Token::parse(&not_hex).unwrap_err();
        assert_eq!(e, TokenError::NotAToken);
        assert!(!format!("{e} {e:?}").contains(&not_hex[..62]));
        assert_eq!(
            TokenError::RandomSource.to_string(),
            "the system's random source failed"
        );
    }

    #[test]
    fn the_token_comes_as_a_bearer_or_as_the_cookie() {
        assert_eq!(presented(Some("Bearer abc"), None), Some("abc"));
        assert_eq!(presented(Some("bearer  abc "), None), Some("abc"));
        assert_eq!(presented(Some("Basic abc"), None), None);
        assert_eq!(
            presented(None, Some("a=1; agentwire_token=xyz; b=2")),
            Some("xyz")
        );
        assert_eq!(presented(None, Some("other=1")), None);
        assert_eq!(presented(None, None), None);
    }

    #[test]
    fn only_loopback_names_and_the_listen_address_are_served_locally() {
        let listen: SocketAddr = "127.0.0.1:7780".parse().unwrap();
        for ok in [
            "127.0.0.1:7780",
            "localhost:7780",
            "LOCALHOST:7780",
            "[::1]:7780",
        ] {
            assert!(host_allowed(Some(ok), listen, false), "{ok}");
        }
        for bad in [
            "evil.example:7780",
            "localhost:80",
            "127.0.0.1",
            "localhost.evil.example:7780",
        ] {
            assert!(!host_allowed(Some(bad), listen, false), "{bad}");
        }
        assert!(!host_allowed(None, listen, false));
        assert!(host_allowed(Some("box.lan:7780"), listen, true));
        assert!(is_local(listen));
    }

    #[test]
    fn wrong_tokens_are_all_counted_and_logged_once_an_interval() {
        let mut w = WrongTokens::default();
        let t0 = Instant::now();
        let first = w.record(t0);
        assert_eq!(
            first,
            Some(WrongTokenLine {
                total: 1,
                since_last_line: 0
            })
        );
        for i in 1..=4 {
            assert_eq!(w.record(t0 + Duration::from_millis(i)), None);
        }
        assert_eq!(
            w.record(t0 + WRONG_TOKEN_LOG_INTERVAL - Duration::from_millis(1)),
            None
        );
        assert_eq!(
            w.record(t0 + WRONG_TOKEN_LOG_INTERVAL),
            Some(WrongTokenLine {
                total: 7,
                since_last_line: 5
            })
        );
    }

    #[test]
    fn a_state_change_from_another_site_is_refused() {
        let host = Some("127.0.0.1:7780");
        assert!(origin_allowed(
            Some("http://127.0.0.1:7780"),
            Some("same-origin"),
            host
        ));
        assert!(
            origin_allowed(None, None, host),
            "a program names no origin"
        );
        for bad in [
            "http://evil.example",
            "http://127.0.0.1:7781",
            "null",
            "http://127.0.0.1:7780.evil.example",
        ] {
            assert!(!origin_allowed(Some(bad), None, host), "{bad}");
        }
        assert!(!origin_allowed(None, Some("cross-site"), host));
        assert!(!origin_allowed(Some("http://127.0.0.1:7780"), None, None));
        assert!(!is_local("0.0.0.0:7780".parse().unwrap()));
    }
}
