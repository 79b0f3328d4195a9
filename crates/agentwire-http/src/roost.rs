//! The roost supervisor as the hub page reaches it: `GET /api/v1/roost` (its sessions, the task board,
//! the concierge's status and orders, and the feed after a cursor, in one answer) and
//! `POST /api/v1/roost/{op}` for the controller's ops a person takes from the page. Each goes to the
//! supervisor as a controller's op ([`RoostCall`]), so the page is held to the same rules and refusals as
//! `agentwire jobs` or any controller; a refusal comes back with its code.

use crate::api::{refused, State};
use axum::extract::{Path, Query, State as Extract};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

/// The controller's ops the page may send: a session's reply, stop, respawn, pin and rename, the task
/// board, and the concierge (status, policy, ask, orders). Dispatching new jobs and shutting the
/// supervisor down stay with the CLI and the protocol's own clients.
pub const PAGE_OPS: [&str; 9] = [
    "reply",
    "stop",
    "respawn",
    "pin",
    "rename",
    "task",
    "concierge",
    "concierge-ask",
    "concierge-order",
];
/// Feed events in one answer: the page asks again with the cursor for more.
const FEED_PAGE: u64 = 100;

/// A refusal of the supervisor: its code (`bad_request`, `not_found`, `policy`, ...) and its message.
#[derive(Debug, Clone)]
pub struct RoostRefusal {
    /// The protocol's error code.
    pub code: String,
    /// What it said.
    pub message: String,
}

/// Sends controller's ops with their args to the supervisor, in order on one connection, and gives their
/// results (the first refusal ends it).
pub type RoostCall = Arc<
    dyn Fn(
            Vec<(&'static str, Value)>,
        ) -> futures_util::future::BoxFuture<'static, Result<Vec<Value>, RoostRefusal>>
        + Send
        + Sync,
>;

/// The HTTP status a refusal of the supervisor is answered with.
fn status_of(code: &str) -> StatusCode {
    match code {
        "bad_request" => StatusCode::BAD_REQUEST,
        "not_found" => StatusCode::NOT_FOUND,
        "unauthorized" => StatusCode::FORBIDDEN,
        "rate_limited" => StatusCode::TOO_MANY_REQUESTS,
        "unavailable" => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::CONFLICT,
    }
}

fn refusal(r: RoostRefusal) -> Response {
    (
        status_of(&r.code),
        Json(json!({ "error": r.message, "code": r.code })),
    )
        .into_response()
}

fn supervisor(s: &State) -> Result<&RoostCall, Box<Response>> {
    s.ctx.roost.as_ref().ok_or_else(|| {
        Box::new(refused(
            StatusCode::NOT_FOUND,
            "no roost supervisor runs here",
        ))
    })
}

#[derive(Deserialize)]
pub(crate) struct ViewQuery {
    /// The last feed event the page has.
    after: Option<u64>,
}

/// `GET /api/v1/roost[?after=N]`: the sessions, the board, the concierge, its orders and the feed.
pub(crate) async fn view(Extract(s): Extract<State>, Query(q): Query<ViewQuery>) -> Response {
    let call = match supervisor(&s) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    let mut events = json!({ "limit": FEED_PAGE });
    if let Some(after) = q.after {
        events["after"] = json!(after);
    }
    // One connection for the five reads: the page asks every second while it is open.
    let asked = call(vec![
        ("rows", json!({})),
        ("task", json!({ "action": "list" })),
        ("concierge", json!({ "action": "status" })),
        ("concierge-order", json!({ "action": "list" })),
        ("events", events),
    ])
    .await;
    match asked.as_deref() {
        Ok([rows, tasks, concierge, orders, feed]) => Json(json!({
            "rows": rows["rows"],
            "tasks": tasks["tasks"],
            "concierge": concierge,
            "orders": orders["orders"],
            "events": feed["events"],
        }))
        .into_response(),
        Ok(other) => refused(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the supervisor gave {} answers to 5 reads", other.len()),
        ),
        Err(e) => refusal(e.clone()),
    }
}

/// `POST /api/v1/roost/{op}` with the op's args as a JSON object.
pub(crate) async fn op(
    Extract(s): Extract<State>,
    Path(op): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let call = match supervisor(&s) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    let Some(op) = PAGE_OPS.iter().copied().find(|o| *o == op) else {
        return refused(
            StatusCode::NOT_FOUND,
            format!("{op:?} is not one of {}", PAGE_OPS.join(", ")),
        );
    };
    if !crate::api::is_json(&headers) {
        return refused(StatusCode::BAD_REQUEST, "the op's args are a JSON object");
    }
    let args: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return refused(StatusCode::BAD_REQUEST, "the op's args are a JSON object"),
        Err(e) => return refused(StatusCode::BAD_REQUEST, format!("the op's args: {e}")),
    };
    if let Err(why) = page_may(op, &args) {
        return refused(StatusCode::FORBIDDEN, why);
    }
    match call(vec![(op, args)]).await {
        Ok(mut v) => Json(v.pop().unwrap_or(Value::Null)).into_response(),
        Err(e) => refusal(e),
    }
}

/// Whether the page may send `op` with `args`. Dispatching is not the page's, nor is anything that lets
/// another dispatch for it: turning the concierge on with a `launch` of its own would start any profile
/// with any task, and turning its `act` on would let a `concierge-ask` from the page have it dispatch (and
/// stop and respawn) in the person's place. The page turns the concierge on as configured and `act` off;
/// `act` on is the CLI's (`agentwire concierge policy --act on`) and the config's (`concierge_act`).
fn page_may(op: &str, args: &Value) -> Result<(), &'static str> {
    if op != "concierge" {
        return Ok(());
    }
    if args.get("launch").is_some() {
        return Err("the page turns the concierge on as configured ([roost] concierge); `launch` is the CLI's");
    }
    if args.get("action").and_then(Value::as_str) == Some("act")
        && args.get("act") != Some(&Value::Bool(false))
    {
        return Err("the page turns the concierge's act off only: letting it dispatch, stop and respawn jobs is the CLI's (`agentwire concierge policy --act on`) or the config's (concierge_act)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_keeps_its_meaning_over_http() {
        assert_eq!(status_of("bad_request"), StatusCode::BAD_REQUEST);
        assert_eq!(status_of("not_found"), StatusCode::NOT_FOUND);
        assert_eq!(status_of("policy"), StatusCode::CONFLICT);
        assert_eq!(status_of("unauthorized"), StatusCode::FORBIDDEN);
        assert!(!PAGE_OPS.contains(&"shutdown") && !PAGE_OPS.contains(&"dispatch"));
        let launch = json!({"action": "on", "launch": {"profile": "any", "task": "anything"}});
        assert!(
            page_may("concierge", &launch).is_err(),
            "no dispatch through the concierge"
        );
        assert!(page_may("concierge", &json!({"action": "on"})).is_ok());
        for act in [json!(true), json!("true"), json!(1), Value::Null] {
            assert!(
                page_may("concierge", &json!({"action": "act", "act": act})).is_err(),
                "no dispatch through the concierge's act: {act}"
            );
        }
        assert!(page_may("concierge", &json!({"action": "act", "act": false})).is_ok());
        assert!(page_may(
            "concierge",
            &json!({"action": "answer", "answer": "routine"})
        )
        .is_ok());
        assert!(page_may("task", &json!({"action": "add", "title": "t"})).is_ok());
    }
}
