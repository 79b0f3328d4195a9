//! The two bindings' handlers, a thin driver over [`crate::service`]: the cards (public), the JSON-RPC
//! endpoint and the HTTP+JSON routes (behind a caller's or the operator's token). Each request's
//! `A2A-Version` is checked first, its body read by [`crate::wire`], and its answer or error written in
//! its binding's shape ([`crate::errors`]); streams are server-sent events.

use crate::errors::{unauthenticated_body, A2aError};
use crate::service::{Following, Served};
use crate::wire::{self, StreamResponse, PROTOCOL_VERSION};
use agentwire_http::callers::Caller;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Extension, Json, Router};
use serde_json::{json, Map, Value};
use std::convert::Infallible;
use std::time::Duration;

/// A comment sent on a stream that has been quiet this long (the agent runs a tool, or waits for an
/// answer), so that proxies and clients see it alive; SSE clients skip comments.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// How long a client may keep a card (`Cache-Control: max-age`): a card changes when the daemon's
/// configuration does, and a minute of an old one costs nothing.
const CARD_MAX_AGE_SECS: u64 = 60;
/// The request header (and query parameter) naming the A2A version a client speaks.
pub const VERSION_HEADER: &str = "A2A-Version";
/// The media type of HTTP+JSON bodies.
const A2A_JSON: &str = "application/a2a+json";

/// Which binding a request came in on: how its answer and its errors are written.
#[derive(Debug, Clone)]
enum Binding {
    /// JSON-RPC, answering request `id`.
    JsonRpc(Value),
    /// HTTP+JSON.
    Rest,
}

/// The public routes: the `--agent` agent's card at the well-known path, and each agent's under its base.
pub(crate) fn cards(served: Served) -> Router {
    Router::new()
        .route("/.well-known/agent-card.json", get(root_card))
        .route("/a2a/{agent}/.well-known/agent-card.json", get(agent_card))
        .with_state(served)
}

/// The callers' routes: `/a2a/<agent>` is the JSON-RPC endpoint and the HTTP+JSON base.
pub(crate) fn router(served: Served) -> Router {
    Router::new()
        .route("/a2a/{agent}", post(jsonrpc))
        .route("/a2a/{agent}/message:send", post(rest_send))
        .route("/a2a/{agent}/message:stream", post(rest_stream))
        .route("/a2a/{agent}/tasks", get(rest_list))
        .route(
            "/a2a/{agent}/tasks/{tail}",
            get(rest_task_get).post(rest_task_post),
        )
        .route(
            "/a2a/{agent}/tasks/{id}/pushNotificationConfigs",
            any(rest_push),
        )
        .route(
            "/a2a/{agent}/tasks/{id}/pushNotificationConfigs/{config}",
            any(rest_push),
        )
        .route("/a2a/{agent}/extendedAgentCard", get(rest_extended_card))
        .with_state(served)
}

/// The 401 the server gives a request without a token that opens the routes: one body that reads as a
/// JSON-RPC error and as a `google.rpc.Status` ([`unauthenticated_body`]), and the bearer challenge.
pub(crate) fn unauthorized(why: &str) -> Response {
    let mut r = (StatusCode::UNAUTHORIZED, Json(unauthenticated_body(why))).into_response();
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

fn card_response(served: &Served, name: &str, headers: &HeaderMap) -> Response {
    let Some(agent) = served.exposed(name) else {
        return rest_error(&A2aError::MethodNotFound(format!(
            "no agent {name:?} is served over A2A here"
        )));
    };
    // The server has checked the Host against its own addresses already.
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    let base = format!("{}://{host}/a2a/{}", scheme(headers), agent.name);
    let card = crate::mapping::agent_card(&agent.name, &agent.engine.card(), &base);
    let mut r = Json(card).into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("public, max-age={CARD_MAX_AGE_SECS}")) {
        r.headers_mut().insert(header::CACHE_CONTROL, v);
    }
    // The card's URLs follow these headers: a cache keeps one card for each.
    r.headers_mut().insert(
        header::VARY,
        HeaderValue::from_static("host, x-forwarded-proto, forwarded"),
    );
    r
}

/// The scheme a client reached the server with: `https` when a TLS terminator in front of it says so
/// (`X-Forwarded-Proto: https`, or RFC 7239 `Forwarded: proto=https`), else `http` (the server itself
/// speaks plain HTTP). Only these two are taken: the card names them to the client that asked, never
/// anyone else, and nothing else is read from the headers.
fn scheme(headers: &HeaderMap) -> &'static str {
    let https = |v: &str| v.trim().trim_matches('"').eq_ignore_ascii_case("https");
    let forwarded_proto = headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
        .and_then(|v| v.split(',').next())
        .is_some_and(https);
    let forwarded = headers
        .get(header::FORWARDED)
        .and_then(|h| h.to_str().ok())
        .and_then(|v| v.split(',').next())
        .is_some_and(|first| {
            first.split(';').any(|pair| {
                pair.split_once('=')
                    .is_some_and(|(k, v)| k.trim().eq_ignore_ascii_case("proto") && https(v))
            })
        });
    match forwarded_proto || forwarded {
        true => "https",
        false => "http",
    }
}

async fn root_card(State(s): State<Served>, headers: HeaderMap) -> Response {
    match s.default_agent().map(|a| a.name.clone()) {
        Some(name) => card_response(&s, &name, &headers),
        None => rest_error(&A2aError::MethodNotFound(
            "the --agent agent is not served over A2A here: read /a2a/<agent>/.well-known/agent-card.json".into(),
        )),
    }
}

async fn agent_card(
    State(s): State<Served>,
    Path(agent): Path<String>,
    headers: HeaderMap,
) -> Response {
    card_response(&s, &agent, &headers)
}

/// The `A2A-Version` a request asks for (its header, else its query parameter): 1.0 (a patch number is
/// not considered) is served, and so is a request that names none, which is taken as 1.0 (the spec reads
/// an empty version as 0.3; this server speaks 1.0 only and says so in its cards).
fn check_version(headers: &HeaderMap, query: &[(String, String)]) -> Result<(), A2aError> {
    let asked = headers
        .get(VERSION_HEADER)
        .map(|v| v.to_str().unwrap_or("?").trim().to_string())
        .or_else(|| {
            query
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(VERSION_HEADER))
                .map(|(_, v)| v.trim().to_string())
        });
    match asked.as_deref() {
        None | Some("") => Ok(()),
        Some(v) if v == PROTOCOL_VERSION => Ok(()),
        Some(v)
            if v.strip_prefix(PROTOCOL_VERSION)
                .and_then(|p| p.strip_prefix('.'))
                .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())) =>
        {
            Ok(())
        }
        Some(v) => Err(A2aError::VersionNotSupported(v.chars().take(32).collect())),
    }
}

/// Whether a request says its body is JSON (`application/json` or `application/a2a+json`).
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim_start().to_ascii_lowercase())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with(A2A_JSON))
}

fn with_retry(mut r: Response, e: &A2aError) -> Response {
    if let Some(secs) = e.retry_after() {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    r
}

/// An HTTP+JSON error: its status and its `google.rpc.Status`.
fn rest_error(e: &A2aError) -> Response {
    let status =
        StatusCode::from_u16(e.http_status().0).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    with_retry((status, Json(e.rest_body())).into_response(), e)
}

/// A JSON-RPC error answering request `id` (HTTP 200: the error is in the body, as JSON-RPC clients read it).
fn rpc_error(id: &Value, e: &A2aError) -> Response {
    with_retry(Json(e.jsonrpc_body(id)).into_response(), e)
}

fn error(binding: &Binding, e: &A2aError) -> Response {
    match binding {
        Binding::JsonRpc(id) => rpc_error(id, e),
        Binding::Rest => rest_error(e),
    }
}

fn result(binding: &Binding, value: Value) -> Response {
    match binding {
        Binding::JsonRpc(id) => {
            Json(json!({ "jsonrpc": "2.0", "id": id, "result": value })).into_response()
        }
        Binding::Rest => {
            let mut r = Json(value).into_response();
            r.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(A2A_JSON));
            r
        }
    }
}

fn to_value<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// A stream's events: `first` (the task as it stands), then what `following` streams until the task ends
/// (or asks), each written for `binding`. The task goes on if the client goes away: it is read again with
/// GetTask or followed with SubscribeToTask.
fn streamed(binding: Binding, first: StreamResponse, following: Following) -> Response {
    let state = (Some(first), following, binding);
    let events = futures_util::stream::unfold(state, |(mut first, mut f, binding)| async move {
        let item = match first.take() {
            Some(item) => item,
            None => f.next().await?,
        };
        let data = match &binding {
            Binding::JsonRpc(id) => {
                json!({ "jsonrpc": "2.0", "id": id, "result": to_value(&item) })
            }
            Binding::Rest => to_value(&item),
        };
        let event = Event::default().data(data.to_string());
        Some((Ok::<Event, Infallible>(event), (first, f, binding)))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

/// The agent a request names, when its caller may call it (another is not found, as if it did not exist).
fn agent_of<'a>(
    s: &'a Served,
    name: &str,
    caller: &Caller,
) -> Result<&'a agentwire_http::front::ExposedAgent, A2aError> {
    s.agent(name, caller).ok_or_else(|| {
        A2aError::MethodNotFound(format!("no agent {name:?} is served over A2A here"))
    })
}

/// `SendMessage` / `SendStreamingMessage` on either binding.
async fn send(
    s: &Served,
    agent: &str,
    caller: &Caller,
    binding: Binding,
    params: &Value,
    stream: bool,
) -> Response {
    let run = async {
        let agent = agent_of(s, agent, caller)?;
        let req = wire::parse_send(params)?;
        let history = req.history_length;
        let immediately = req.return_immediately;
        let following = s.send(agent, caller, req, stream).await?;
        Ok::<_, A2aError>((following, history, immediately))
    };
    match run.await {
        Err(e) => error(&binding, &e),
        Ok((following, history, _)) if stream => {
            let first = StreamResponse::Task(following.task(history));
            streamed(binding, first, following)
        }
        Ok((following, history, true)) => result(
            &binding,
            json!({ "task": to_value(&following.task(history)) }),
        ),
        Ok((following, history, false)) => {
            let task = following.settle(history).await;
            result(&binding, json!({ "task": to_value(&task) }))
        }
    }
}

/// `SubscribeToTask` on either binding.
async fn subscribe(
    s: &Served,
    agent: &str,
    caller: &Caller,
    binding: Binding,
    id: String,
) -> Response {
    let run = async {
        let agent = agent_of(s, agent, caller)?;
        s.subscribe(agent, caller, &id).await
    };
    match run.await {
        Err(e) => error(&binding, &e),
        Ok(following) => {
            let first = StreamResponse::Task(following.task(None));
            streamed(binding, first, following)
        }
    }
}

/// The JSON-RPC endpoint: one request (batches are not served), its method dispatched.
async fn jsonrpc(
    State(s): State<Served>,
    Path(agent): Path<String>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<Vec<(String, String)>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let null = Value::Null;
    if !is_json(&headers) {
        return rpc_error(
            &null,
            &A2aError::InvalidRequest(
                "the body is a JSON-RPC request: Content-Type: application/json".into(),
            ),
        );
    }
    let request: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return rpc_error(&null, &A2aError::ParseError(e.to_string())),
    };
    let Some(obj) = request.as_object() else {
        return rpc_error(
            &null,
            &A2aError::InvalidRequest(match request.is_array() {
                true => "batches are not served: send one request at a time".into(),
                false => "the request is a JSON object".into(),
            }),
        );
    };
    let id = match obj.get("id") {
        Some(v @ (Value::String(_) | Value::Number(_))) => v.clone(),
        Some(Value::Null) | None => {
            return rpc_error(
                &null,
                &A2aError::InvalidRequest(
                    "the request has no id: notifications are not served".into(),
                ),
            )
        }
        Some(_) => {
            return rpc_error(
                &null,
                &A2aError::InvalidRequest("id is a string or a number".into()),
            )
        }
    };
    if obj.get("jsonrpc").and_then(|v| v.as_str()) != Some("2.0") {
        return rpc_error(&id, &A2aError::InvalidRequest("jsonrpc is \"2.0\"".into()));
    }
    let Some(method) = obj.get("method").and_then(|m| m.as_str()) else {
        return rpc_error(&id, &A2aError::InvalidRequest("method is a string".into()));
    };
    let empty = Value::Object(Map::new());
    let params = match obj.get("params") {
        None | Some(Value::Null) => &empty,
        Some(p @ Value::Object(_)) => p,
        Some(_) => return rpc_error(&id, &A2aError::InvalidParams("params is an object".into())),
    };
    if let Err(e) = check_version(&headers, &query) {
        return rpc_error(&id, &e);
    }
    let binding = Binding::JsonRpc(id.clone());
    let simple = |r: Result<Value, A2aError>| match r {
        Ok(v) => result(&binding, v),
        Err(e) => rpc_error(&id, &e),
    };
    match method {
        "SendMessage" => send(&s, &agent, &caller, binding.clone(), params, false).await,
        "SendStreamingMessage" => send(&s, &agent, &caller, binding.clone(), params, true).await,
        "GetTask" => {
            let r = async {
                let a = agent_of(&s, &agent, &caller)?;
                let req = wire::parse_get(params, None)?;
                Ok(to_value(
                    &s.get(a, &caller, &req.id, req.history_length).await?,
                ))
            };
            simple(r.await)
        }
        "ListTasks" => {
            let r = async {
                let a = agent_of(&s, &agent, &caller)?;
                let req = wire::parse_list(params)?;
                Ok(to_value(&s.list(a, &caller, req).await?))
            };
            simple(r.await)
        }
        "CancelTask" => {
            let r = async {
                let a = agent_of(&s, &agent, &caller)?;
                let task = wire::parse_task_id(params, None)?;
                Ok(to_value(&s.cancel(a, &caller, &task).await?))
            };
            simple(r.await)
        }
        "SubscribeToTask" => match wire::parse_task_id(params, None) {
            Ok(task) => subscribe(&s, &agent, &caller, binding.clone(), task).await,
            Err(e) => rpc_error(&id, &e.into()),
        },
        "CreateTaskPushNotificationConfig"
        | "GetTaskPushNotificationConfig"
        | "ListTaskPushNotificationConfigs"
        | "DeleteTaskPushNotificationConfig" => {
            rpc_error(&id, &A2aError::PushNotificationNotSupported)
        }
        "GetExtendedAgentCard" => rpc_error(&id, &no_extended_card()),
        other => rpc_error(
            &id,
            &A2aError::MethodNotFound(format!(
                "method {:?} does not exist",
                other.chars().take(64).collect::<String>()
            )),
        ),
    }
}

fn no_extended_card() -> A2aError {
    A2aError::UnsupportedOperation(
        "this agent has no extended card (its card says capabilities.extendedAgentCard false)"
            .into(),
    )
}

/// An HTTP+JSON body: empty (`{}`) or JSON.
fn rest_body(headers: &HeaderMap, body: &Bytes) -> Result<Value, A2aError> {
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(Value::Object(Map::new()));
    }
    if !is_json(headers) {
        return Err(A2aError::InvalidRequest(format!(
            "the body is JSON: Content-Type: {A2A_JSON} or application/json"
        )));
    }
    serde_json::from_slice(body).map_err(|e| A2aError::ParseError(e.to_string()))
}

/// The query parameters as a request object (values as text; ProtoJSON reads numbers from it).
fn query_params(query: Vec<(String, String)>) -> Value {
    Value::Object(
        query
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect(),
    )
}

async fn rest_send(
    State(s): State<Served>,
    Path(agent): Path<String>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<Vec<(String, String)>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let params = match check_version(&headers, &query).and_then(|()| rest_body(&headers, &body)) {
        Ok(p) => p,
        Err(e) => return rest_error(&e),
    };
    send(&s, &agent, &caller, Binding::Rest, &params, false).await
}

async fn rest_stream(
    State(s): State<Served>,
    Path(agent): Path<String>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<Vec<(String, String)>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let params = match check_version(&headers, &query).and_then(|()| rest_body(&headers, &body)) {
        Ok(p) => p,
        Err(e) => return rest_error(&e),
    };
    send(&s, &agent, &caller, Binding::Rest, &params, true).await
}

async fn rest_list(
    State(s): State<Served>,
    Path(agent): Path<String>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<Vec<(String, String)>>,
    headers: HeaderMap,
) -> Response {
    let r = async {
        check_version(&headers, &query)?;
        let a = agent_of(&s, &agent, &caller)?;
        let req = wire::parse_list(&query_params(query))?;
        Ok::<_, A2aError>(to_value(&s.list(a, &caller, req).await?))
    };
    match r.await {
        Ok(v) => result(&Binding::Rest, v),
        Err(e) => rest_error(&e),
    }
}

/// `GET /tasks/{id}` (GetTask) and `GET /tasks/{id}:subscribe` (SubscribeToTask, as a2a.proto binds it).
async fn rest_task_get(
    State(s): State<Served>,
    Path((agent, tail)): Path<(String, String)>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<Vec<(String, String)>>,
    headers: HeaderMap,
) -> Response {
    if let Err(e) = check_version(&headers, &query) {
        return rest_error(&e);
    }
    if let Some(id) = tail.strip_suffix(":subscribe") {
        return subscribe(&s, &agent, &caller, Binding::Rest, id.to_string()).await;
    }
    let r = async {
        let a = agent_of(&s, &agent, &caller)?;
        let req = wire::parse_get(&query_params(query), Some(&tail))?;
        Ok::<_, A2aError>(to_value(
            &s.get(a, &caller, &req.id, req.history_length).await?,
        ))
    };
    match r.await {
        Ok(v) => result(&Binding::Rest, v),
        Err(e) => rest_error(&e),
    }
}

/// `POST /tasks/{id}:cancel` (CancelTask) and `POST /tasks/{id}:subscribe` (SubscribeToTask).
async fn rest_task_post(
    State(s): State<Served>,
    Path((agent, tail)): Path<(String, String)>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<Vec<(String, String)>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let params = match check_version(&headers, &query).and_then(|()| rest_body(&headers, &body)) {
        Ok(p) => p,
        Err(e) => return rest_error(&e),
    };
    if let Some(id) = tail.strip_suffix(":subscribe") {
        return subscribe(&s, &agent, &caller, Binding::Rest, id.to_string()).await;
    }
    let Some(id) = tail.strip_suffix(":cancel") else {
        return rest_error(&A2aError::MethodNotFound(
            "POST /tasks/{id}:cancel or /tasks/{id}:subscribe".into(),
        ));
    };
    let r = async {
        let a = agent_of(&s, &agent, &caller)?;
        let task = wire::parse_task_id(&params, Some(id))?;
        Ok::<_, A2aError>(to_value(&s.cancel(a, &caller, &task).await?))
    };
    match r.await {
        Ok(v) => result(&Binding::Rest, v),
        Err(e) => rest_error(&e),
    }
}

async fn rest_push() -> Response {
    rest_error(&A2aError::PushNotificationNotSupported)
}

async fn rest_extended_card() -> Response {
    rest_error(&no_extended_card())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(version: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(v) = version {
            h.insert(VERSION_HEADER, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn version_1_0_is_served_and_none_is_taken_as_1_0() {
        assert!(check_version(&headers(Some("1.0")), &[]).is_ok());
        assert!(check_version(&headers(Some("1.0.1")), &[]).is_ok());
        assert!(check_version(&headers(None), &[]).is_ok());
        assert_eq!(
            check_version(&headers(Some("0.3")), &[]),
            Err(A2aError::VersionNotSupported("0.3".into()))
        );
        assert!(check_version(&headers(Some("1.01")), &[]).is_err());
        let q = vec![("A2A-Version".to_string(), "2.0".to_string())];
        assert!(check_version(&headers(None), &q).is_err());
    }

    #[test]
    fn the_401_challenges_for_a_bearer_token() {
        let r = unauthorized("no bearer token");
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(r.headers()[header::WWW_AUTHENTICATE], "Bearer");
    }
}
