//! The plain-HTTP side of the relay's port: tells NIP-11 requests from WebSocket upgrades by the
//! request head, refuses an upgrade from another site's page or to another name ([`OwnUrls`]), and builds
//! the HTTP answers (the NIP-11 document, a short text page, errors).
//!
//! <https://github.com/nostr-protocol/nips/blob/master/11.md>

use nostr::key::PublicKey;
use serde_json::json;

use crate::limits::{RelayLimits, MAX_HTTP_HEADERS};
use crate::own_urls::OwnUrls;

/// The media type a client asks for to get the NIP-11 document.
pub(crate) const NOSTR_JSON: &str = "application/nostr+json";

/// What to do with a connection, decided from its request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// Hand the connection to the WebSocket handshake.
    WebSocket,
    /// Write these bytes (a complete HTTP response) and close.
    Respond(Vec<u8>),
}

/// The length of the request head (up to and including the blank line), if complete.
pub(crate) fn head_len(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// Decides what to do with a request whose complete head is `head`. `document` is the NIP-11
/// document, `name` the relay name for the text page, `health` the owner's check for `/health`, `names`
/// the relay's own names and the origins a WebSocket upgrade may come from.
pub(crate) fn route(
    head: &[u8],
    document: &str,
    name: &str,
    health: Option<&crate::HealthCheck>,
    names: &OwnUrls,
) -> Route {
    // The request line and headers are read by httparse, the HTTP/1 parser under hyper (the HTTP stack
    // of the daemon's other listeners). The connection itself stays with the relay: it peeks at the head
    // and hands the same socket to the WebSocket handshake, which a server framework would own.
    let mut slots = [httparse::EMPTY_HEADER; MAX_HTTP_HEADERS];
    let mut request = httparse::Request::new(&mut slots);
    let (Ok(httparse::Status::Complete(_)), Some(method), Some(target)) =
        (request.parse(head), request.method, request.path)
    else {
        return Route::Respond(bad_request());
    };
    let headers = &*request.headers;
    let header = |wanted: &str| -> Option<String> {
        headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(wanted))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_owned())
    };
    let has_token = |value: Option<String>, token: &str| {
        value.is_some_and(|v| {
            v.split(',')
                .any(|t| t.trim().to_ascii_lowercase().starts_with(token))
        })
    };
    if has_token(header("upgrade"), "websocket") {
        // Checked before the handshake: a refused page never gets a socket to hold.
        if !header("host").is_some_and(|h| names.accepts_host(&h)) {
            return Route::Respond(forbidden(
                "the Host names another server: this relay takes WebSocket connections addressed to its \
                 own names only (its listen address, localhost, or a [relay] public_urls entry)\n",
            ));
        }
        if header("origin").is_some_and(|o| !names.accepts_origin(&o)) {
            return Route::Respond(forbidden(
                "WebSocket connections from this web page's origin are refused: list the origin in \
                 [relay] allowed_origins to let its pages connect\n",
            ));
        }
        return Route::WebSocket;
    }
    let head_only = method == "HEAD";
    if matches!(method, "GET" | "HEAD") && target.split('?').next() == Some("/health") {
        return Route::Respond(match health {
            Some(check) => {
                let report = check.report();
                let status = if report.ok {
                    "200 OK"
                } else {
                    "503 Service Unavailable"
                };
                response(
                    status,
                    Some("application/json"),
                    &report.body,
                    &[("Cache-Control", "no-store")],
                    head_only,
                )
            }
            None => response(
                "404 Not Found",
                Some("text/plain; charset=utf-8"),
                "no health check here\n",
                &[],
                head_only,
            ),
        });
    }
    match method {
        "OPTIONS" => Route::Respond(response(
            "204 No Content",
            None,
            "",
            &[
                ("Access-Control-Allow-Headers", "*"),
                ("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS"),
            ],
            false,
        )),
        "GET" | "HEAD" if has_token(header("accept"), NOSTR_JSON) => Route::Respond(response(
            "200 OK",
            Some(NOSTR_JSON),
            document,
            &[
                ("Access-Control-Allow-Headers", "*"),
                ("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS"),
            ],
            head_only,
        )),
        "GET" | "HEAD" => Route::Respond(response(
            "200 OK",
            Some("text/plain; charset=utf-8"),
            &format!(
                "{name}: an agentwire Nostr relay.\nConnect with a Nostr client over WebSocket, or send \
                 `Accept: {NOSTR_JSON}` for the NIP-11 information document.\n"
            ),
            &[],
            head_only,
        )),
        _ => Route::Respond(response(
            "405 Method Not Allowed",
            Some("text/plain; charset=utf-8"),
            "only GET (NIP-11) and WebSocket upgrades are served here\n",
            &[("Allow", "GET, HEAD, OPTIONS")],
            false,
        )),
    }
}

/// 400: the request head is not HTTP/1.x (or carries more than [`MAX_HTTP_HEADERS`] headers).
pub(crate) fn bad_request() -> Vec<u8> {
    response(
        "400 Bad Request",
        Some("text/plain; charset=utf-8"),
        "bad request\n",
        &[],
        false,
    )
}

/// 403: a WebSocket upgrade from a web page of another origin, or to a name that is not this relay's.
pub(crate) fn forbidden(why: &str) -> Vec<u8> {
    response(
        "403 Forbidden",
        Some("text/plain; charset=utf-8"),
        why,
        &[],
        false,
    )
}

/// 431: the request head is longer than the relay reads.
pub(crate) fn head_too_large() -> Vec<u8> {
    response(
        "431 Request Header Fields Too Large",
        Some("text/plain; charset=utf-8"),
        "request head too large\n",
        &[],
        false,
    )
}

/// 503: the relay is at its connection limit.
pub(crate) fn service_unavailable() -> Vec<u8> {
    response(
        "503 Service Unavailable",
        Some("text/plain; charset=utf-8"),
        "the relay is at its connection limit; try again later\n",
        &[("Retry-After", "5")],
        false,
    )
}

/// 503: the client's address holds as many connections as one address may.
pub(crate) fn too_many_from_address() -> Vec<u8> {
    response(
        "503 Service Unavailable",
        Some("text/plain; charset=utf-8"),
        "too many connections from this address; close one or try again later\n",
        &[("Retry-After", "5")],
        false,
    )
}

fn response(
    status: &str,
    content_type: Option<&str>,
    body: &str,
    extra: &[(&str, &str)],
    head_only: bool,
) -> Vec<u8> {
    let mut out =
        format!("HTTP/1.1 {status}\r\nConnection: close\r\nAccess-Control-Allow-Origin: *\r\n");
    if let Some(content_type) = content_type {
        out.push_str(&format!("Content-Type: {content_type}\r\n"));
    }
    for (name, value) in extra {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    if !head_only {
        out.push_str(body);
    }
    out.into_bytes()
}

/// The NIP-11 relay information document. `relay_key` is the relay's own key, which signs the rooms'
/// metadata: NIP-29 clients read it from `self` (and `pubkey`) to check that 39000-39002 come from the
/// relay; without one neither field is given.
pub(crate) fn information_document(
    name: &str,
    limits: &RelayLimits,
    relay_key: Option<&PublicKey>,
) -> String {
    let mut document = json!({
        "name": name,
        "description": "The agentwire embedded relay: NIP-01 with durable storage of NIP-XX prompts, responses and errors.",
        "software": "agentwire",
        "version": env!("CARGO_PKG_VERSION"),
        "supported_nips": [1, 9, 11, 29, 40, 42, 45, 70],
        "limitation": {
            "max_message_length": limits.max_message_bytes,
            "max_content_length": limits.max_event_bytes,
            "max_subscriptions": limits.max_subscriptions_per_connection,
            "max_filters": limits.max_filters_per_req,
            "max_limit": limits.max_query_limit,
            "default_limit": limits.max_query_limit,
            "max_subid_length": limits.max_subscription_id_len,
            "auth_required": false,
            "payment_required": false,
            "restricted_writes": false,
        },
    });
    if let Some(key) = relay_key {
        document["self"] = json!(key.to_hex());
        document["pubkey"] = json!(key.to_hex());
    }
    document.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> OwnUrls {
        OwnUrls::new("127.0.0.1:7447".parse().unwrap(), &[])
            .unwrap()
            .with_allowed_origins(&["https://app.example.com".into()])
            .unwrap()
    }

    fn body(route: &Route) -> String {
        let Route::Respond(bytes) = route else {
            panic!("expected a response, got {route:?}")
        };
        String::from_utf8(bytes.clone()).unwrap()
    }

    #[test]
    fn head_length() {
        assert_eq!(head_len(b"GET / HTTP/1.1\r\n\r\nrest"), Some(18));
        assert_eq!(head_len(b"GET / HTTP/1.1\r\nHost: x\r\n"), None);
    }

    #[test]
    fn websocket_upgrade_wins() {
        let head = b"GET / HTTP/1.1\r\nHost: localhost:7447\r\nUpgrade: WebSocket\r\nConnection: Upgrade\r\nAccept: application/nostr+json\r\n\r\n";
        assert_eq!(route(head, "{}", "n", None, &names()), Route::WebSocket);
    }

    #[test]
    fn an_upgrade_from_another_sites_page_or_to_another_name_is_refused() {
        let upgrade = |extra: &str| {
            format!("GET / HTTP/1.1\r\n{extra}Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
        };
        for fine in [
            "Host: 127.0.0.1:7447\r\n",
            "Host: localhost:7447\r\nOrigin: https://app.example.com\r\n",
            "host: 127.0.0.1:7447\r\norigin: http://127.0.0.1:7447\r\n",
        ] {
            assert_eq!(
                route(upgrade(fine).as_bytes(), "{}", "n", None, &names()),
                Route::WebSocket,
                "{fine}"
            );
        }
        for (refused, why) in [
            (
                "Host: 127.0.0.1:7447\r\nOrigin: https://evil.example.com\r\n",
                "origin",
            ),
            ("Host: 127.0.0.1:7447\r\nOrigin: null\r\n", "origin"),
            ("Host: rebind.example.com:7447\r\n", "Host"),
            ("", "Host"),
        ] {
            let text = body(&route(
                upgrade(refused).as_bytes(),
                "{}",
                "n",
                None,
                &names(),
            ));
            assert!(
                text.starts_with("HTTP/1.1 403 Forbidden\r\n"),
                "{refused}: {text}"
            );
            assert!(text.contains(why), "{refused}: {text}");
        }
    }

    #[test]
    fn nip11_document_with_cors() {
        let head = b"GET / HTTP/1.1\r\nhost: x\r\naccept: application/nostr+json\r\n\r\n";
        let text = body(&route(head, "{\"name\":\"n\"}", "n", None, &names()));
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.contains("Access-Control-Allow-Origin: *\r\n"));
        assert!(text.contains("Content-Type: application/nostr+json\r\n"));
        assert!(text.ends_with("\r\n\r\n{\"name\":\"n\"}"));
    }

    #[test]
    fn plain_get_gets_text_and_junk_gets_400() {
        let text = body(&route(
            b"GET / HTTP/1.1\r\n\r\n",
            "{}",
            "relay-x",
            None,
            &names(),
        ));
        assert!(text.contains("text/plain") && text.contains("relay-x"));
        let text = body(&route(
            b"\x16\x03\x01 garbage\r\n\r\n",
            "{}",
            "n",
            None,
            &names(),
        ));
        assert!(text.starts_with("HTTP/1.1 400"), "{text}");
        let crowded = format!(
            "GET / HTTP/1.1\r\n{}\r\n",
            "X-A: b\r\n".repeat(MAX_HTTP_HEADERS + 1)
        );
        let text = body(&route(crowded.as_bytes(), "{}", "n", None, &names()));
        assert!(text.starts_with("HTTP/1.1 400"), "{text}");
        let text = body(&route(b"GET / HTTP/2.0\r\n\r\n", "{}", "n", None, &names()));
        assert!(text.starts_with("HTTP/1.1 400"), "{text}");
        let text = body(&route(
            b"POST / HTTP/1.1\r\n\r\n",
            "{}",
            "n",
            None,
            &names(),
        ));
        assert!(text.starts_with("HTTP/1.1 405"), "{text}");
        let text = body(&route(
            b"OPTIONS / HTTP/1.1\r\n\r\n",
            "{}",
            "n",
            None,
            &names(),
        ));
        assert!(text.starts_with("HTTP/1.1 204") && text.contains("Allow-Methods"));
    }

    #[test]
    fn document_fields() {
        let doc: serde_json::Value =
            serde_json::from_str(&information_document("n", &RelayLimits::default(), None))
                .unwrap();
        assert_eq!(doc["software"], "agentwire");
        assert_eq!(doc["supported_nips"], json!([1, 9, 11, 29, 40, 42, 45, 70]));
        assert_eq!(doc["limitation"]["max_subid_length"], 64);
        assert!(doc.get("self").is_none() && doc.get("pubkey").is_none());
        let key = nostr::key::Keys::generate().public_key();
        let doc: serde_json::Value = serde_json::from_str(&information_document(
            "n",
            &RelayLimits::default(),
            Some(&key),
        ))
        .unwrap();
        assert_eq!(doc["self"], key.to_hex());
        assert_eq!(doc["pubkey"], key.to_hex());
    }

    #[test]
    fn health_answers_what_the_owner_says_with_its_status() {
        use crate::{HealthCheck, HealthReport};
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let ok = Arc::new(AtomicBool::new(true));
        let seen = ok.clone();
        let check = HealthCheck::new(move || HealthReport {
            ok: seen.load(Ordering::SeqCst),
            body: r#"{"journal_writable":true}"#.into(),
        });
        let get = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
        let text = body(&route(get, "{}", "n", Some(&check), &names()));
        assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
        assert!(
            text.contains("application/json") && text.ends_with(r#"{"journal_writable":true}"#)
        );
        ok.store(false, Ordering::SeqCst);
        let text = body(&route(get, "{}", "n", Some(&check), &names()));
        assert!(text.starts_with("HTTP/1.1 503"), "{text}");
        let text = body(&route(get, "{}", "n", None, &names()));
        assert!(text.starts_with("HTTP/1.1 404"), "{text}");
    }
}
