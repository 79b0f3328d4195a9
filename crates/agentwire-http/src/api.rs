//! The routes, the checks every request passes (its `Host`, and the token for `/api/`), and the turn API's
//! handlers. A turn is read from the hub while it is live or recent, else from the journal.

use crate::access;
use crate::HttpContext;
use agentwire_core::{Outcome, RequestId, TurnEvent, Usage};
use agentwire_engine::{
    AnswerReply, CancelReply, TurnEnd, TurnFilter, TurnState, TurnSummary, WatchKind,
};
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State as Extract};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

/// Turns in one page when a request names no `limit`.
const DEFAULT_TURNS_PAGE: usize = 50;
/// The most turns in one page: a page is one response, and a client pages on with the cursor.
pub(crate) const MAX_TURNS_PAGE: usize = 500;
/// The largest request body of the turn API (an answer): a question's free text fits many times over.
const MAX_BODY_BYTES: usize = 64 * 1024;
/// The largest request body of a caller front: 1 MiB, a long conversation's whole history (an OpenAI
/// request carries every message) with room to spare; the largest prompt the other fronts take (fisk-ai's
/// 768 KiB message) fits.
pub const MAX_FRONT_BODY_BYTES: usize = 1024 * 1024;

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct State {
    pub(crate) ctx: Arc<HttpContext>,
    pub(crate) token: access::Token,
    /// The callers' tokens.
    pub(crate) callers: Arc<Vec<crate::callers::CallerToken>>,
    pub(crate) listen: SocketAddr,
    pub(crate) allow_remote: bool,
    /// Becomes true when the server stops: open event streams end.
    pub(crate) stopped: tokio::sync::watch::Receiver<bool>,
    /// Event streams open now.
    pub(crate) streams: Arc<AtomicUsize>,
    /// Event streams open at most (`[http] max_event_streams`).
    pub(crate) max_event_streams: usize,
}

/// Whether a request says its body is JSON (`Content-Type: application/json`): a body in any other type
/// is refused, and a browser cannot send this one across sites without asking first.
pub(crate) fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
}

/// A JSON refusal.
pub(crate) fn refused(status: StatusCode, error: impl Into<String>) -> Response {
    (status, Json(json!({ "error": error.into() }))).into_response()
}

pub(crate) fn router(state: State, fronts: Vec<crate::front::HttpRoutes>) -> Router {
    let api = Router::new()
        .route("/agents", get(agents))
        .route("/turns", get(turns))
        .route("/turns/{id}", get(turn))
        .route("/turns/{id}/cancel", post(cancel))
        .route("/turns/{id}/answer", post(answer))
        .route("/events", get(crate::events::stream))
        .route("/roost", get(crate::roost::view))
        .route("/roost/{op}", post(crate::roost::op))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            same_site,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            needs_token,
        ))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES));
    let mut app = Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/", get(crate::page::index))
        .route("/hub.js", get(crate::page::script))
        .route("/hub.css", get(crate::page::style))
        .nest("/api/v1", api)
        .fallback(|| async { refused(StatusCode::NOT_FOUND, "no such route") })
        .with_state(state.clone());
    for f in fronts {
        let unauthorized = f.unauthorized;
        let gate = state.clone();
        let callers = f
            .callers
            .layer(axum::middleware::from_fn(same_site))
            .layer(axum::middleware::from_fn(
                move |req: Request, next: Next| {
                    crate::front_auth::caller(gate.clone(), unauthorized, req, next)
                },
            ))
            .layer(DefaultBodyLimit::max(MAX_FRONT_BODY_BYTES));
        app = app.merge(f.public).merge(callers);
    }
    app.layer(axum::middleware::from_fn_with_state(state.clone(), counted))
        .layer(axum::middleware::from_fn_with_state(state, allowed_host))
}

/// Refuses a request whose `Host` this server does not answer to (DNS rebinding).
async fn allowed_host(Extract(s): Extract<State>, req: Request, next: Next) -> Response {
    let allowed = {
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok());
        access::host_allowed(host, s.listen, s.allow_remote)
    };
    if !allowed {
        return refused(
            StatusCode::FORBIDDEN,
            "this server answers to its own address and localhost only",
        );
    }
    next.run(req).await
}

/// Refuses an API request without the operator's token (a caller's token opens only the caller fronts).
async fn needs_token(Extract(s): Extract<State>, req: Request, next: Next) -> Response {
    let presented = {
        let h = |name| req.headers().get(name).and_then(|v| v.to_str().ok());
        access::presented(h(header::AUTHORIZATION), h(header::COOKIE))
            .map(|t| crate::callers::identify(t, &s.token, &s.callers))
    };
    let ok = presented == Some(crate::callers::Presented::Operator);
    if let Some(crate::callers::Presented::Caller(_)) = presented {
        return refused(
            StatusCode::FORBIDDEN,
            "a caller's token opens only the caller fronts (A2A, the OpenAI-compatible API, MCP); the turn API is the operator's",
        );
    }
    if !ok {
        return refused(
            StatusCode::UNAUTHORIZED,
            "the token is missing or wrong: Authorization: Bearer <http_token from the ready line or the data dir's http.token>",
        );
    }
    next.run(req).await
}

/// Refuses a state-changing request a page of another site sent ([`access::origin_allowed`]): the token
/// cookie alone does not make a request the person's.
async fn same_site(req: Request, next: Next) -> Response {
    if req.method() != axum::http::Method::GET {
        let h = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
        if !access::origin_allowed(h("origin"), h("sec-fetch-site"), h("host")) {
            return refused(
                StatusCode::FORBIDDEN,
                "a request from another site's page is refused",
            );
        }
    }
    next.run(req).await
}

/// Counts each request answered by its route's pattern (never its path: ids stay out of the labels) and
/// its status.
async fn counted(Extract(s): Extract<State>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or("unmatched", |p| p.as_str())
        .to_string();
    let response = next.run(req).await;
    s.ctx
        .hub
        .metrics()
        .http_request(&route, response.status().as_u16());
    response
}

/// `GET /metrics`: the daemon's metrics, for Prometheus (no token: they carry no id, prompt or user).
async fn metrics(Extract(s): Extract<State>) -> Response {
    let m = s.ctx.hub.metrics();
    (s.ctx.scrape)(m);
    (
        [(
            header::CONTENT_TYPE,
            agentwire_engine::metrics::CONTENT_TYPE,
        )],
        m.encode(),
    )
        .into_response()
}

async fn health(Extract(s): Extract<State>) -> Response {
    let (ok, body) = (s.ctx.health)();
    let status = match ok {
        true => StatusCode::OK,
        false => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, Json(body)).into_response()
}

async fn agents(Extract(s): Extract<State>) -> Response {
    Json(json!({ "agents": s.ctx.agents })).into_response()
}

/// The tokens a turn used, from its outcome.
fn usage(outcome: Option<&Outcome>) -> Usage {
    match outcome {
        Some(Outcome::Result(r)) => r.usage,
        Some(Outcome::Failure(f)) => f.usage,
        None => Usage::default(),
    }
}

/// A turn's outcome as the API gives it: the outcome itself and, for a result, `text_shown`, its text as a
/// person reads it (a peer's item the agent echoed shown as who sent what, [`agentwire_core::peer_envelope`]).
fn outcome_json(outcome: Option<&Outcome>) -> Value {
    let mut v = json!(outcome);
    if let (Some(Outcome::Result(r)), Some(o)) = (outcome, v.as_object_mut()) {
        o.insert(
            "text_shown".into(),
            json!(agentwire_core::peer_envelope::for_people(&r.text)),
        );
    }
    v
}

pub(crate) fn summary_json(t: &TurnSummary) -> Value {
    json!({
        "id": t.id.as_str(),
        "agent": t.agent,
        "protocol": t.protocol,
        "conversation": t.conversation.as_ref().map(|c| c.as_str()),
        "prompt": t.prompt,
        "requester": t.requester,
        "state": t.state.as_str(),
        "ended_as": t.end().map(TurnEnd::as_str),
        "question": t.question,
        "outcome": outcome_json(t.outcome.as_ref()),
        "started_ms": t.started_ms,
        "ended_ms": t.ended_ms,
        "usage": usage(t.outcome.as_ref()),
        // Its place in the list: `?cursor=` it lists the turns older than this one.
        "cursor": t.first_id,
    })
}

#[derive(Deserialize)]
struct TurnsQuery {
    agent: Option<String>,
    protocol: Option<String>,
    requester: Option<String>,
    state: Option<String>,
    limit: Option<usize>,
    cursor: Option<u64>,
}

/// What `?state=` names: where a turn is (`queued`, `running`, `waiting`, `ended`), or how an ended one
/// ended (`done`, `failed`, `cancelled`).
fn state_filter(name: &str) -> Option<(Option<TurnState>, Option<TurnEnd>)> {
    match (TurnState::parse(name), TurnEnd::parse(name)) {
        (Some(state), _) => Some((Some(state), None)),
        (None, Some(end)) => Some((Some(TurnState::Ended), Some(end))),
        (None, None) => None,
    }
}

async fn turns(Extract(s): Extract<State>, Query(q): Query<TurnsQuery>) -> Response {
    let (state, end) = match q.state.as_deref().map(|n| (n, state_filter(n))) {
        None => (None, None),
        Some((_, Some(named))) => named,
        Some((n, None)) => {
            return refused(
                StatusCode::BAD_REQUEST,
                format!("state {n:?}: queued, running, waiting, ended, done, failed or cancelled"),
            )
        }
    };
    let limit = q.limit.unwrap_or(DEFAULT_TURNS_PAGE);
    if limit == 0 || limit > MAX_TURNS_PAGE {
        return refused(
            StatusCode::BAD_REQUEST,
            format!("limit {limit}: 1 to {MAX_TURNS_PAGE}"),
        );
    }
    let filter = TurnFilter {
        agent: q.agent,
        protocol: q.protocol,
        requester: q.requester,
        state,
        end,
        before: q.cursor,
    };
    // One more than asked: whether there is a next page.
    let mut page = s.ctx.hub.turns(&filter, limit + 1);
    let more = page.len() > limit;
    page.truncate(limit);
    let cursor = more.then(|| page.last().map(|t| t.first_id)).flatten();
    Json(json!({
        "turns": page.iter().map(summary_json).collect::<Vec<_>>(),
        "cursor": cursor,
    }))
    .into_response()
}

fn request_id(id: &str) -> Result<RequestId, Box<Response>> {
    RequestId::new(id)
        .map_err(|e| Box::new(refused(StatusCode::BAD_REQUEST, format!("turn id: {e}"))))
}

/// A hub event as JSON: its ids, its time and what happened (`type` names it).
pub(crate) fn event_json(e: &agentwire_engine::WatchEvent) -> Value {
    let mut v = match &e.kind {
        WatchKind::Accepted {
            queued,
            protocol,
            agent,
            conversation,
            prompt,
            requester,
        } => json!({"type": "accepted", "queued": queued, "protocol": protocol, "agent": agent,
                    "conversation": conversation.as_str(), "prompt": prompt, "requester": requester}),
        WatchKind::Event(ev) => {
            let mut v = json!({"type": "event", "event": ev});
            // A tool's line as every client shows it, whatever front or agent the turn came from.
            match ev {
                TurnEvent::ToolCall {
                    name, arguments, ..
                } => v["line"] = json!(agentwire_core::tool_start_line(name, arguments)),
                TurnEvent::ToolResult {
                    name,
                    output,
                    success,
                    ..
                } => v["line"] = json!(agentwire_core::tool_result_line(name, *success, output)),
                _ => {}
            }
            v
        }
        WatchKind::Question { id, question } => {
            // The options a person picks from (an approval's and a confirmation's fixed ones too), the
            // text they read, and whether free text is taken: what a page needs to show its buttons.
            let k = &question.kind;
            json!({"type": "question", "question_id": id, "question": question,
                   "text": k.text(), "options": k.options(),
                   "takes_text": matches!(k.selection(), agentwire_core::Selection::Text) || k.freeform(),
                   "multiple": matches!(k.selection(), agentwire_core::Selection::Multiple)})
        }
        WatchKind::QuestionClosed { id, answer } => {
            json!({"type": "question_closed", "question_id": id, "answer": answer})
        }
        WatchKind::Outcome(o) => {
            json!({"type": "outcome", "ended_as": TurnEnd::of(o).as_str(), "outcome": outcome_json(Some(o))})
        }
        _ => json!({"type": "other"}),
    };
    v["id"] = json!(e.id);
    v["turn"] = json!(e.turn.as_str());
    v["seq"] = json!(e.seq);
    v["at_ms"] = json!(e.at_ms);
    v
}

async fn turn(Extract(s): Extract<State>, Path(id): Path<String>) -> Response {
    let id = match request_id(&id) {
        Ok(id) => id,
        Err(r) => return *r,
    };
    if let Some((summary, events)) = s.ctx.hub.turn(&id) {
        let mut v = summary_json(&summary);
        v["events"] = events.iter().map(|e| event_json(e)).collect();
        return Json(v).into_response();
    }
    // Older than the hub holds: the journal's record.
    let Some(engine) = s.ctx.engines.first() else {
        return refused(StatusCode::NOT_FOUND, "no such turn");
    };
    match engine.lookup(&id).await {
        Ok(Some(t)) => Json(json!({
            "id": t.request_id.as_str(),
            "agent": t.agent,
            "protocol": t.protocol,
            "conversation": t.conversation_id.as_str(),
            "prompt": agentwire_core::peer_envelope::for_people(&t.input.message).lines().next().unwrap_or(""),
            "state": if t.outcome.is_some() { "ended" } else { "running" },
            "ended_as": t.outcome.as_ref().map(|o| TurnEnd::of(o).as_str()),
            "outcome": outcome_json(t.outcome.as_ref()),
            "started_ms": t.accepted_at.saturating_mul(1000),
            "ended_ms": t.ended_at.map(|e| e.saturating_mul(1000)),
            "usage": usage(t.outcome.as_ref()),
            "events": [],
        }))
        .into_response(),
        Ok(None) => refused(StatusCode::NOT_FOUND, "no such turn"),
        Err(e) => refused(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the journal could not be read: {e}"),
        ),
    }
}

async fn cancel(Extract(s): Extract<State>, Path(id): Path<String>) -> Response {
    let id = match request_id(&id) {
        Ok(id) => id,
        Err(r) => return *r,
    };
    let Some(engine) = s.ctx.engines.of_turn(&id) else {
        return refused(StatusCode::CONFLICT, "the turn is not running here");
    };
    match engine.cancel_by_operator(&id).await {
        CancelReply::Cancelling => Json(json!({ "cancelled": true })).into_response(),
        CancelReply::Ignored => refused(
            StatusCode::CONFLICT,
            "the turn is ending already, or was cancelled before",
        ),
    }
}

#[derive(Deserialize)]
struct AnswerBody {
    #[serde(default)]
    choices: Vec<String>,
    text: Option<String>,
}

async fn answer(
    Extract(s): Extract<State>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let id = match request_id(&id) {
        Ok(id) => id,
        Err(r) => return *r,
    };
    if !is_json(&headers) {
        return refused(
            StatusCode::BAD_REQUEST,
            "the answer is JSON: {\"choices\": [...], \"text\": ...}",
        );
    }
    let body: AnswerBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return refused(StatusCode::BAD_REQUEST, format!("the answer: {e}")),
    };
    // The engine the turn is live in holds its open question: nothing is read from an observer's copy.
    let Some(engine) = s.ctx.engines.of_turn(&id) else {
        return match s.ctx.engines.first() {
            Some(e) if e.lookup(&id).await.ok().flatten().is_some() => {
                refused(StatusCode::CONFLICT, "the turn has no open question")
            }
            _ => refused(StatusCode::NOT_FOUND, "no such turn"),
        };
    };
    let Some((question_id, question)) = engine.open_question(&id) else {
        return refused(StatusCode::CONFLICT, "the turn has no open question");
    };
    let answer =
        match crate::answer::answer_for(&question.kind, &body.choices, body.text.as_deref()) {
            Ok(a) => a,
            Err(e) => return refused(StatusCode::BAD_REQUEST, e.to_string()),
        };
    match engine.answer(&id, &question_id, answer) {
        AnswerReply::Taken => Json(json!({ "answered": question_id })).into_response(),
        AnswerReply::NotWaiting => refused(
            StatusCode::CONFLICT,
            "the question is no longer open (answered, expired or cancelled)",
        ),
        AnswerReply::DoesNotFit => refused(
            StatusCode::BAD_REQUEST,
            "the answer does not fit the question",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire_engine::WatchEvent;

    fn event(ev: TurnEvent) -> Value {
        event_json(&WatchEvent {
            id: 1,
            turn: RequestId::new("t:1").unwrap(),
            seq: 0,
            at_ms: 0,
            kind: WatchKind::Event(ev),
        })
    }

    #[test]
    fn a_tools_lines_read_the_same_whatever_shape_its_output_came_in() {
        let call = event(TurnEvent::ToolCall {
            call_id: "c".into(),
            name: "calculator".into(),
            arguments: json!({"expr": "6*7"}),
        });
        assert_eq!(call["line"], "[tool calculator start 6*7]");
        let result = |output: Value| {
            event(TurnEvent::ToolResult {
                call_id: "c".into(),
                name: "calculator".into(),
                output,
                success: true,
                duration_ms: 1,
            })["line"]
                .clone()
        };
        // A command's output (the demo agent's, over any front) and a plain string (an MCP tool's).
        let command = result(json!({"stdout": "42\n", "stderr": "", "exit_code": 0}));
        assert_eq!(command, "[tool calculator result 42]");
        assert_eq!(result(json!("42")), command);
        let text = event(TurnEvent::Text { text: "hi".into() });
        assert!(text.get("line").is_none(), "{text}");
    }
}
