//! `GET /api/v1/events`: turns as server-sent events. Without `turn`, every turn live, each event with the
//! hub's `id:`; a client that comes back with `Last-Event-ID` gets the events after it the hub still holds,
//! and a `missed` event first when some are gone. With `?turn=ID`, one turn from its start, ending after
//! its outcome. A client that falls behind is told with a `missed` event (`{"missed": n}`) and the stream
//! goes on; no client ever slows a turn.

use crate::api::{event_json, refused, State};
use agentwire_core::RequestId;
use agentwire_engine::{AllWatch, Missed, TurnWatch, WatchEvent};
use axum::extract::{Query, State as Extract};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use serde::Deserialize;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A comment sent on an idle stream this often, so proxies and clients see it alive.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

#[derive(Deserialize)]
pub(crate) struct EventsQuery {
    turn: Option<String>,
}

/// One open stream's place, given back when the stream ends.
struct Place(Arc<AtomicUsize>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

enum Source {
    One(TurnWatch),
    All(AllWatch),
}

struct Feed {
    backlog: VecDeque<Result<Arc<WatchEvent>, Missed>>,
    source: Source,
    stopped: tokio::sync::watch::Receiver<bool>,
    _place: Place,
}

fn sse(item: Result<Arc<WatchEvent>, Missed>) -> Event {
    match item {
        Ok(e) => {
            let v = event_json(&e);
            let kind = v["type"].as_str().unwrap_or("event").to_string();
            Event::default()
                .id(e.id.to_string())
                .event(kind)
                .data(v.to_string())
        }
        Err(Missed(n)) => Event::default()
            .event("missed")
            .data(serde_json::json!({ "missed": n }).to_string()),
    }
}

async fn next(mut feed: Feed) -> Option<(Result<Event, Infallible>, Feed)> {
    if let Some(item) = feed.backlog.pop_front() {
        return Some((Ok(sse(item)), feed));
    }
    if *feed.stopped.borrow() {
        return None;
    }
    let item = {
        let stopped = &mut feed.stopped;
        let got = match &mut feed.source {
            Source::One(w) => {
                tokio::select! {
                    got = w.next() => got,
                    _ = stopped.wait_for(|s| *s) => None,
                }
            }
            Source::All(w) => {
                tokio::select! {
                    got = w.next() => got,
                    _ = stopped.wait_for(|s| *s) => None,
                }
            }
        };
        got?
    };
    Some((Ok(sse(item)), feed))
}

pub(crate) async fn stream(
    Extract(s): Extract<State>,
    Query(q): Query<EventsQuery>,
    headers: HeaderMap,
) -> Response {
    let cap = s.max_event_streams;
    if s.streams.fetch_add(1, Ordering::SeqCst) >= cap {
        s.streams.fetch_sub(1, Ordering::SeqCst);
        return refused(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{cap} event streams are open ([http] max_event_streams); close one"),
        );
    }
    let place = Place(s.streams.clone());
    let (backlog, source) = match q.turn {
        Some(id) => {
            let Ok(id) = RequestId::new(id) else {
                return refused(StatusCode::BAD_REQUEST, "turn: not a turn id");
            };
            let Some(w) = s.ctx.hub.watch(&id) else {
                return refused(
                    StatusCode::NOT_FOUND,
                    "no such turn live or recent here (GET /api/v1/turns/{id} reads the journal)",
                );
            };
            (VecDeque::new(), Source::One(w))
        }
        None => {
            let last = headers
                .get("last-event-id")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok());
            match last {
                Some(id) => {
                    let (after, missed, live) = s.ctx.hub.watch_all_since(id);
                    let mut backlog: VecDeque<_> = missed.into_iter().map(Err).collect();
                    backlog.extend(after.into_iter().map(Ok));
                    (backlog, Source::All(live))
                }
                None => (VecDeque::new(), Source::All(s.ctx.hub.watch_all())),
            }
        }
    };
    let feed = Feed {
        backlog,
        source,
        stopped: s.stopped.clone(),
        _place: place,
    };
    Sse::new(stream::unfold(feed, next))
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}
