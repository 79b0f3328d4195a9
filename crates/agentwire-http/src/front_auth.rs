//! The gate in front of the caller fronts' routes: the request's bearer token is the operator's or a
//! caller's ([`crate::callers::identify`]), and the handler finds who it is as the request's
//! [`Caller`](crate::callers::Caller) extension; without one, the front's own 401.

use crate::api::State;
use crate::callers::{identify, Caller, Presented};
use axum::extract::Request;
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;

/// Lets a request with a token of the operator's or a caller's through, carrying its [`Caller`]; answers
/// any other with `unauthorized` (a wrong token is counted and logged by the connection's gate).
pub(crate) async fn caller(
    s: State,
    unauthorized: fn(&str) -> Response,
    mut req: Request,
    next: Next,
) -> Response {
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|a| crate::access::presented(Some(a), None));
    let caller = match bearer.map(|t| identify(t, &s.token, &s.callers)) {
        Some(Presented::Operator) => Caller::Operator,
        Some(Presented::Caller(c)) => c,
        Some(Presented::Wrong) => {
            return unauthorized("the bearer token is wrong");
        }
        None => {
            return unauthorized(
                "no bearer token: Authorization: Bearer <a caller's token from [[http.callers]], or the operator's http_token>",
            );
        }
    };
    req.extensions_mut().insert(caller);
    next.run(req).await
}
