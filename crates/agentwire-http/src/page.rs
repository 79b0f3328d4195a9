//! The hub page: one HTML page, its script and its style, embedded in the binary (no build step), served at
//! `/` to a browser that holds the token (as the cookie `/?token=` sets) and a short note on how to open it
//! to one that does not. Every answer carries a strict Content-Security-Policy: the page runs only its own
//! script, loads nothing from elsewhere, and may not be framed.

use crate::access;
use crate::api::{refused, State};
use axum::extract::{Query, State as Extract};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

/// The page.
const PAGE_HTML: &str = include_str!("../assets/hub.html");
/// Its script: plain JavaScript, no library.
const PAGE_JS: &str = include_str!("../assets/hub.js");
/// Its style.
const PAGE_CSS: &str = include_str!("../assets/hub.css");
/// What a browser without the token is told.
const OPEN_IT_HTML: &str = include_str!("../assets/open-it.html");

/// The page's own script and style only; no inline code, no other site, no frames, no plugins; requests
/// (the API and its event stream) to this server only.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The headers every part of the page is sent with.
fn secured(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    secured(([(header::CONTENT_TYPE, content_type)], body).into_response())
}

#[derive(Deserialize)]
pub(crate) struct IndexQuery {
    token: Option<String>,
}

/// `/`: with `?token=T`, a browser keeps the token as a cookie (only this host's pages send it) and comes
/// back to `/` without it in the address; with the token, the page; without, how to open it.
pub(crate) async fn index(
    Extract(s): Extract<State>,
    Query(q): Query<IndexQuery>,
    headers: HeaderMap,
) -> Response {
    match q.token {
        Some(t) if s.token.matches(&t) => {
            let cookie = format!(
                "{}={}; HttpOnly; SameSite=Strict; Path=/",
                access::TOKEN_COOKIE,
                s.token.reveal()
            );
            secured(
                (
                    StatusCode::SEE_OTHER,
                    [(header::SET_COOKIE, cookie), (header::LOCATION, "/".into())],
                )
                    .into_response(),
            )
        }
        Some(_) => refused(StatusCode::UNAUTHORIZED, "the token is wrong"),
        None => {
            let h = |name| headers.get(name).and_then(|v| v.to_str().ok());
            let holds = access::presented(h(header::AUTHORIZATION), h(header::COOKIE))
                .is_some_and(|t| s.token.matches(t));
            match holds {
                true => asset("text/html; charset=utf-8", PAGE_HTML),
                false => secured(
                    (
                        StatusCode::UNAUTHORIZED,
                        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                        OPEN_IT_HTML,
                    )
                        .into_response(),
                ),
            }
        }
    }
}

/// `/hub.js`.
pub(crate) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", PAGE_JS)
}

/// `/hub.css`.
pub(crate) async fn style() -> Response {
    asset("text/css; charset=utf-8", PAGE_CSS)
}
