//! The routes' handlers, a thin driver over the pure core: a request is read ([`crate::wire`]) and mapped
//! ([`crate::mapping`]), submitted to its agent's engine, and answered from what the turn's side queues,
//! whole or as server-sent events. A request whose answer nobody reads any more (the client closed the
//! connection) cancels its turn.

use crate::errors::ApiError;
use crate::front::{TurnSide, Update, PROTOCOL};
use crate::mapping::{self, Chunker, StreamItem};
use crate::wire::{self, Model, ModelList};
use agentwire_core::{ConversationId, RequestId, TurnInput};
use agentwire_engine::{Engine, Submission, SubmitReply, TurnPolicy};
use agentwire_http::callers::Caller;
use agentwire_http::front::ExposedAgent;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// A comment sent on a streamed answer that has been quiet this long (the agent runs a tool), so that
/// proxies and clients see the stream alive; the SDKs skip comments.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Random bytes in a completion id (`chatcmpl-` and their hex): 128 bits, never repeated in practice, so a
/// fresh request never meets a journaled one.
const ID_BYTES: usize = 16;

/// What the handlers share: the agents exposed on the front, and when it started (the models' `created`).
#[derive(Clone)]
pub(crate) struct Served {
    agents: Arc<Vec<ExposedAgent>>,
    created: u64,
}

impl Served {
    pub(crate) fn new(agents: Vec<ExposedAgent>, created: u64) -> Served {
        Served {
            agents: Arc::new(agents),
            created,
        }
    }

    /// Agent `name`, when `caller` may call it.
    fn agent(&self, name: &str, caller: &Caller) -> Option<&ExposedAgent> {
        self.agents
            .iter()
            .find(|a| a.name == name && caller.may_call(&a.name))
    }
}

/// The callers' routes.
pub(crate) fn router(served: Served) -> Router {
    Router::new()
        .route(
            "/v1/models",
            get(models).fallback(|| async { respond(ApiError::method_not_allowed("GET")) }),
        )
        .route(
            "/v1/models/{id}",
            get(model).fallback(|| async { respond(ApiError::method_not_allowed("GET")) }),
        )
        .route(
            "/v1/chat/completions",
            post(chat).fallback(|| async { respond(ApiError::method_not_allowed("POST")) }),
        )
        .with_state(served)
}

/// The 401 the server gives a request without a token that opens the routes, in OpenAI's shape.
pub(crate) fn unauthorized(why: &str) -> Response {
    let mut r = respond(ApiError::unauthorized(why));
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

/// An error answer: its status, its body, and its retry hints as headers.
fn respond(e: ApiError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = (status, Json(e.body())).into_response();
    if let Some(secs) = e.retry_after {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    if let Some(retry) = e.retry {
        let v = HeaderValue::from_static(if retry { "true" } else { "false" });
        r.headers_mut().insert("x-should-retry", v);
    }
    r
}

async fn models(State(s): State<Served>, Extension(caller): Extension<Caller>) -> Response {
    let data = s
        .agents
        .iter()
        .filter(|a| caller.may_call(&a.name))
        .map(|a| Model::agent(&a.name, s.created))
        .collect();
    Json(ModelList {
        object: "list",
        data,
    })
    .into_response()
}

async fn model(
    State(s): State<Served>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Response {
    match s.agent(&id, &caller) {
        Some(a) => Json(Model::agent(&a.name, s.created)).into_response(),
        None => respond(ApiError::model_not_found(&id)),
    }
}

/// Whether a request says its body is JSON.
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"))
}

fn random_hex() -> String {
    let mut bytes = [0u8; ID_BYTES];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Cancels the turn unless disarmed first: held by whatever answers the request (the handler, then the
/// stream), so that a client that goes away before the outcome ends the turn it no longer waits for.
struct CancelOnDrop {
    armed: Option<(Arc<Engine>, RequestId, String)>,
}

impl CancelOnDrop {
    fn disarm(&mut self) {
        self.armed = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some((engine, id, requester)) = self.armed.take() else {
            return;
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                engine.cancel(&id, &requester).await;
            });
        }
    }
}

async fn chat(
    State(s): State<Served>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !is_json(&headers) {
        return respond(ApiError::not_json());
    }
    let req = match wire::parse_request(&body) {
        Ok(r) => r,
        Err(e) => return respond(ApiError::request(&e)),
    };
    let Some(agent) = s.agent(&req.model, &caller) else {
        return respond(ApiError::model_not_found(&req.model));
    };
    let engine = agent.engine.clone();
    let Some(turn) = mapping::conversation(&req.messages) else {
        return respond(ApiError::request(&wire::RequestError::Messages(
            "the user messages at the end are empty: there is nothing to answer".into(),
        )));
    };
    let card = engine.card();
    if let Err(e) = mapping::check_size(&turn.message, card.max_prompt_bytes) {
        return respond(e);
    }
    let completion_id = format!("chatcmpl-{}", random_hex());
    let ids = (
        RequestId::new(format!("{PROTOCOL}:{completion_id}")),
        ConversationId::new(format!("{PROTOCOL}:{completion_id}")),
    );
    let (Ok(request_id), Ok(conversation_id)) = ids else {
        return respond(ApiError::internal("the completion id is not a turn id"));
    };
    let requester = caller.requester();
    let (side, mut rx) = TurnSide::new(req.stream);
    let sub = Submission {
        input: TurnInput {
            thinking: req.thinking.clone(),
            history: turn.history,
            ..TurnInput::new(
                request_id.clone(),
                conversation_id,
                turn.message,
                card.default_model,
            )
        },
        protocol: PROTOCOL.into(),
        requester: requester.clone(),
        route: serde_json::json!({
            "completion": completion_id,
            "requester": requester,
            "stream": req.stream,
        }),
        front: side,
        policy: TurnPolicy {
            refuse_when_full: true,
            keep_transcript: true,
            ..Default::default()
        },
        conversation_meta: None,
        slot: None,
    };
    // From here the turn is the engine's: a handler dropped (its client gone) cancels it.
    let mut guard = CancelOnDrop {
        armed: Some((engine.clone(), request_id.clone(), requester)),
    };
    match agentwire_http::front::submit_for(&engine, &caller, sub).await {
        SubmitReply::Accepted { .. } => {}
        SubmitReply::Refused(f) => {
            guard.disarm();
            return respond(ApiError::of_failure(&f, false));
        }
        SubmitReply::Draining => {
            guard.disarm();
            return respond(ApiError::draining());
        }
        SubmitReply::JournalUnavailable(why) => {
            guard.disarm();
            tracing::warn!(request = %request_id, %why, "an OpenAI request was not taken: the journal cannot be written");
            return respond(ApiError::journal_unavailable());
        }
        // A fresh id and a fresh conversation that is not exclusive: none of these can be.
        SubmitReply::DuplicateLive
        | SubmitReply::DuplicateStored(_)
        | SubmitReply::ConversationBusy => {
            guard.disarm();
            return respond(ApiError::internal(
                "a fresh completion id met a turn already journaled",
            ));
        }
    }
    let created = agentwire_core::now_secs();
    if req.stream {
        let chunker = Chunker::new(&completion_id, created, &req.model, req.include_usage);
        return streamed(rx, chunker, guard);
    }
    while let Some(update) = rx.recv().await {
        if let Update::Outcome(outcome, asked) = update {
            guard.disarm();
            return match outcome {
                agentwire_core::Outcome::Result(r) => {
                    Json(mapping::completion(&completion_id, created, &req.model, &r))
                        .into_response()
                }
                agentwire_core::Outcome::Failure(f) => respond(ApiError::of_failure(&f, asked)),
            };
        }
    }
    guard.disarm();
    respond(ApiError::internal("the turn ended without an outcome"))
}

/// A streamed answer being sent.
struct Streaming {
    rx: mpsc::UnboundedReceiver<Update>,
    chunker: Chunker,
    /// Events made and not sent yet.
    pending: VecDeque<StreamItem>,
    /// The outcome is in: the stream ends once `pending` is sent.
    ended: bool,
    /// Dropped with the stream (the client went away) before the outcome: the turn is cancelled.
    guard: CancelOnDrop,
}

fn streamed(
    rx: mpsc::UnboundedReceiver<Update>,
    chunker: Chunker,
    guard: CancelOnDrop,
) -> Response {
    let pending = VecDeque::from([chunker.opening()]);
    let state = Streaming {
        rx,
        chunker,
        pending,
        ended: false,
        guard,
    };
    let events = futures_util::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(item) = st.pending.pop_front() {
                let event = Event::default().data(item.data());
                return Some((Ok::<Event, Infallible>(event), st));
            }
            if st.ended {
                return None;
            }
            match st.rx.recv().await {
                Some(Update::Event(ev)) => st.pending.extend(st.chunker.event(&ev)),
                Some(Update::Outcome(outcome, asked)) => {
                    st.guard.disarm();
                    st.ended = true;
                    st.pending.extend(st.chunker.outcome(&outcome, asked));
                }
                None => {
                    st.guard.disarm();
                    st.ended = true;
                    let e = ApiError::internal("the turn ended without an outcome");
                    st.pending.push_back(StreamItem::Error(e.body()));
                }
            }
        }
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}
