//! The HTTP server's accept loop and its connections: hyper's HTTP/1 on each socket with a timer, serving
//! the router. axum's own `serve` gives hyper no timer, so a socket that never sends a whole request head
//! was held for ever; here every connection has a bounded life unless it is busy for its client:
//!
//! - [`HEADER_READ_TIMEOUT`]: a request head must arrive whole within it, counted from the moment the
//!   connection waits for one: after its accept (a silent socket), and after each answer (the idle
//!   keep-alive time);
//! - [`WRITE_STALL_TIMEOUT`](crate::stall::WRITE_STALL_TIMEOUT): an answer the client stops taking;
//! - the places of [`crate::slots`]: at most `[http] max_connections` open, at most a quarter of them
//!   ([`unauthenticated_share`](crate::slots::unauthenticated_share)) without the token (the oldest closed for a newcomer); past them a new connection gets `503` (at most
//!   [`MAX_PENDING_REFUSALS`] being written at once, the rest closed unanswered).
//!
//! A request with the token marks its connection the token holder's; a wrong token is counted
//! (`agentwire_http_token_failures_total`) and logged at most once per
//! [`WRONG_TOKEN_LOG_INTERVAL`](crate::access::WRONG_TOKEN_LOG_INTERVAL), never with the token. An event
//! stream is a request in progress: no timeout here cuts it while it lives.
//!
//! On stop the listener closes, every connection finishes the request it is on (event streams end on
//! their own), and what is still open after [`SHUTDOWN_GRACE`] is closed.

use crate::access::{self, Token, WrongTokens};
use crate::slots::{Place, Slots};
use crate::stall::StallGuard;
use axum::extract::Query;
use axum::http::{header, Request};
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

/// How long a connection may take to send a whole request head, from when it starts waiting for one: 10 s.
/// A client sends its head at once (a few hundred bytes, in one packet); a socket that has sent none, or
/// part of one, after 10 s is holding a place (the slow-loris way). The same bound ends an idle keep-alive
/// connection 10 s after its last answer: hyper starts it whenever a connection waits for its next
/// request, and the hub page, which reads the roost view every second, keeps its connection busy.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Refusals (`503`, no place) being written at once: each holds its socket for up to
/// `REFUSAL_LINGER` (1 s); past this a connection over the cap is closed unanswered, so refusing costs at most
/// this many descriptors beyond `[http] max_connections`.
pub const MAX_PENDING_REFUSALS: usize = 16;

/// How long a refusal waits for the client's request (read and dropped, so the close is not a reset that
/// could lose the answer) and for the answer to go out: 1 s.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// How long the connections have to finish on stop before they are closed: 5 s. Requests are answered in
/// milliseconds and event streams end at once on stop; this only bounds a client that holds a request open
/// (a body sent a byte at a time), which must not hold up the daemon's stop.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The answer to a connection past the caps.
const REFUSAL: &str = "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
     retry-after: 1\r\nconnection: close\r\ncontent-length: 60\r\n\r\n\
     {\"error\":\"the HTTP server holds all the connections it may\"}";

/// What every connection's requests are checked against.
pub(crate) struct Gatekeeper {
    pub(crate) token: Token,
    /// The callers' tokens: a request with one marks its connection a token holder's too.
    pub(crate) callers: Arc<Vec<crate::callers::CallerToken>>,
    pub(crate) ctx: Arc<crate::HttpContext>,
    pub(crate) wrong: Mutex<WrongTokens>,
}

#[derive(serde::Deserialize)]
struct PageToken {
    token: Option<String>,
}

impl Gatekeeper {
    /// The token a request presents, as the route it goes to reads it: the page's `/?token=`, else the
    /// bearer token or the cookie.
    fn presented(req: &Request<Incoming>) -> Option<String> {
        if req.uri().path() == "/" {
            if let Ok(Query(PageToken { token: Some(t) })) = Query::try_from_uri(req.uri()) {
                return Some(t);
            }
        }
        let h = |name| req.headers().get(name).and_then(|v| v.to_str().ok());
        access::presented(h(header::AUTHORIZATION), h(header::COOKIE)).map(str::to_string)
    }

    /// Marks the connection the token holder's when the request presents the token; counts and (within the
    /// log's bound) logs a wrong one.
    fn check(&self, req: &Request<Incoming>, place: &Place, peer: SocketAddr) {
        let Some(presented) = Self::presented(req) else {
            return;
        };
        match crate::callers::identify(&presented, &self.token, &self.callers) {
            crate::callers::Presented::Operator => return place.authenticated(),
            crate::callers::Presented::Caller(crate::callers::Caller::Program(g)) => {
                return place.caller_authenticated(&g.name)
            }
            crate::callers::Presented::Caller(crate::callers::Caller::Operator) => {
                return place.authenticated()
            }
            crate::callers::Presented::Wrong => {}
        }
        self.ctx.hub.metrics().http_token_failed();
        let line = self
            .wrong
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(Instant::now());
        if let Some(line) = line {
            tracing::warn!(
                %peer,
                wrong_tokens = line.total,
                not_logged = line.since_last_line,
                "a request presented a wrong HTTP API token (the token itself is never logged)"
            );
        }
    }
}

/// Accepts connections until `stopped`, then lets them finish (within [`SHUTDOWN_GRACE`]).
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    gate: Arc<Gatekeeper>,
    slots: Arc<Slots>,
    mut stopped: watch::Receiver<bool>,
) {
    let refusals = Arc::new(Semaphore::new(MAX_PENDING_REFUSALS));
    let mut connections = JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            () = until_stopped(&mut stopped) => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "the HTTP server could not accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        // Every answer part goes out as it is written (an event stream's small events above all): Nagle's
        // wait for the peer's delayed ACK would hold one up to 40 ms.
        let _ = stream.set_nodelay(true);
        match slots.admit().await {
            Some(place) => {
                connections.spawn(connection(
                    stream,
                    peer,
                    place,
                    router.clone(),
                    Arc::clone(&gate),
                    stopped.clone(),
                ));
            }
            None => {
                tracing::debug!(%peer, "the HTTP server is at its connection cap");
                if let Ok(permit) = Arc::clone(&refusals).try_acquire_owned() {
                    connections.spawn(async move {
                        refuse(stream).await;
                        drop(permit);
                    });
                }
            }
        }
    }
    drop(listener);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::debug!(
            open = connections.len(),
            "HTTP connections still open after the shutdown grace are closed"
        );
        connections.abort_all();
        while connections.join_next().await.is_some() {}
    }
}

/// Serves one connection until it ends, is closed for a newer one, or the server stops.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    place: Place,
    router: Router,
    gate: Arc<Gatekeeper>,
    mut stopped: watch::Receiver<bool>,
) {
    let place = Arc::new(place);
    let router = TowerToHyperService::new(router);
    let service = {
        let place = Arc::clone(&place);
        hyper::service::service_fn(move |req: Request<Incoming>| {
            gate.check(&req, &place, peer);
            hyper::service::Service::call(&router, req)
        })
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(StallGuard::new(stream)), service);
    tokio::pin!(conn);
    let ended = tokio::select! {
        ended = conn.as_mut() => ended,
        () = place.evicted() => {
            tracing::debug!(%peer, "an unauthenticated HTTP connection closed for a newer one");
            return;
        }
        () = until_stopped(&mut stopped) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = ended {
        // A client's timeout, reset or bad request: its own business, and nothing to act on here.
        tracing::debug!(%peer, error = %e, "an HTTP connection ended");
    }
}

/// Resolves once the server stops (or its stopper is gone).
async fn until_stopped(stopped: &mut watch::Receiver<bool>) {
    let _ = stopped.wait_for(|s| *s).await;
}

/// Answers a connection past the caps with `503` and closes it.
async fn refuse(mut stream: TcpStream) {
    let _ = tokio::time::timeout(REFUSAL_LINGER, async {
        // Takes what the client sent first (its request head, at most a few KiB are looked at), so the
        // close is a clean one the client reads the answer before.
        let mut head = [0u8; 4096];
        let _ = tokio::time::timeout(Duration::from_millis(100), stream.read(&mut head)).await;
        let _ = stream.write_all(REFUSAL.as_bytes()).await;
        let _ = stream.shutdown().await;
        // Until the client closes its side, so no unread byte turns the close into a reset.
        while matches!(stream.read(&mut head).await, Ok(n) if n > 0) {}
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_is_a_whole_http_answer() {
        let (head, body) = REFUSAL.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        assert!(serde_json::from_str::<serde_json::Value>(body).unwrap()["error"].is_string());
    }
}
