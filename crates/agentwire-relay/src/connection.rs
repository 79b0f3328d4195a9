//! The tokio driver of one TCP connection: NIP-11 over HTTP or a WebSocket pumping a
//! [`Session`]. All protocol decisions are in `session` and `http`; this file only moves bytes,
//! and waits where `fanout` says a publisher waits for an exempt connection.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use futures_util::{SinkExt, StreamExt};
use nostr::message::SubscriptionId;
use nostr::types::Timestamp;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{broadcast, oneshot, watch, OwnedSemaphorePermit};
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;

use crate::error::RelayError;
use crate::fanout::{Peers, Registration};
use crate::http::{self, Route};
use crate::limits::{
    HANDSHAKE_TIMEOUT, HEAD_TIMEOUT, LINGER_MAX_BYTES, LINGER_TIMEOUT, MAX_HTTP_HEAD_BYTES,
    MAX_PENDING_QUERIES_PER_CONNECTION, MAX_PENDING_WRITES_PER_CONNECTION, READ_BUFFER_BYTES,
    SEND_TIMEOUT,
};
use crate::server::{AddressSlot, Shared};
use crate::session::{Command, Published, QueueDelivery, Session};
use crate::stats::OpenConnection;
use crate::storage_threads::{Committed, WriteOp};
use crate::store::StoredEvent;

/// What peeking at a new connection found.
enum Peeked {
    /// A complete request head of this many bytes.
    Head(Vec<u8>),
    /// No blank line within [`MAX_HTTP_HEAD_BYTES`].
    TooLarge,
    /// The peer closed before sending a head.
    Closed,
}

/// Waits until the request head is complete, without consuming it, so the WebSocket handshake
/// can still read it.
async fn peek_head(stream: &TcpStream) -> std::io::Result<Peeked> {
    let mut buf = vec![0u8; MAX_HTTP_HEAD_BYTES];
    let mut pause = Duration::from_millis(1);
    loop {
        let n = stream.peek(&mut buf).await?;
        if n == 0 {
            return Ok(Peeked::Closed);
        }
        if let Some(len) = http::head_len(&buf[..n]) {
            buf.truncate(len);
            return Ok(Peeked::Head(buf));
        }
        if n == buf.len() {
            return Ok(Peeked::TooLarge);
        }
        // `peek` returns at once while any data is buffered: wait for more to arrive.
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Serves one accepted connection; `_slot` is its place under `max_connections`, `_address_slot` under
/// `max_connections_per_address`.
pub(crate) async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
    _slot: OwnedSemaphorePermit,
    _address_slot: AddressSlot,
) {
    let _ = stream.set_nodelay(true);
    let head = match timeout(HEAD_TIMEOUT, peek_head(&stream)).await {
        Ok(Ok(Peeked::Head(head))) => head,
        Ok(Ok(Peeked::TooLarge)) => return answer(stream, 0, &http::head_too_large()).await,
        Ok(Ok(Peeked::Closed)) | Ok(Err(_)) | Err(_) => return,
    };
    let route = http::route(
        &head,
        &shared.document,
        &shared.name,
        shared.health.as_ref(),
        &shared.own_urls,
    );
    // Only its length is needed from here on; the buffer (8 KiB of capacity) would live as long as the
    // connection.
    let head_len = head.len();
    drop(head);
    match route {
        Route::Respond(response) => answer(stream, head_len, &response).await,
        Route::WebSocket => {
            let config = WebSocketConfig::default()
                .read_buffer_size(READ_BUFFER_BYTES)
                .max_message_size(Some(shared.limits.max_message_bytes))
                .max_frame_size(Some(shared.limits.max_message_bytes));
            let handshake = tokio_tungstenite::accept_async_with_config(stream, Some(config));
            match timeout(HANDSHAKE_TIMEOUT, handshake).await {
                Ok(Ok(ws)) => Connection::new(ws, shared).run(shutdown).await,
                Ok(Err(error)) => tracing::debug!(%peer, %error, "WebSocket handshake failed"),
                Err(_) => tracing::debug!(%peer, "WebSocket handshake timed out"),
            }
        }
    }
}

/// Answers a connection over `max_connections` or `max_connections_per_address` with `response` (an HTTP
/// 503); `_permit` bounds how many such answers are pending.
pub(crate) async fn refuse(stream: TcpStream, response: Vec<u8>, _permit: OwnedSemaphorePermit) {
    let consumed = match timeout(LINGER_TIMEOUT, peek_head(&stream)).await {
        Ok(Ok(Peeked::Head(head))) => head.len(),
        _ => 0,
    };
    answer(stream, consumed, &response).await;
}

/// Consumes the `head_len` bytes of request head, writes `response`, and closes gently.
async fn answer(mut stream: TcpStream, head_len: usize, response: &[u8]) {
    let mut head = vec![0u8; head_len];
    if stream.read_exact(&mut head).await.is_err() {
        return;
    }
    if timeout(SEND_TIMEOUT, stream.write_all(response))
        .await
        .is_ok_and(|r| r.is_ok())
    {
        linger(&mut stream).await;
    }
}

/// What one read of a lingering connection takes at most: the rest of a refused request or frame.
const LINGER_READ_BYTES: usize = 8 * 1024;

/// Half-closes and reads what the peer still sends, so that closing does not reset the
/// connection and destroy an answer the peer has not read yet.
async fn linger(stream: &mut TcpStream) {
    let _ = stream.shutdown().await;
    let drain = async {
        // On the heap: an array here would be part of every connection's future (the serving future holds
        // this one inline), 8 KiB more per connection for the few that ever linger.
        let mut buf = vec![0u8; LINGER_READ_BYTES];
        let mut total = 0;
        while total < LINGER_MAX_BYTES {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    };
    let _ = timeout(LINGER_TIMEOUT, drain).await;
}

/// Resolves once the relay is shutting down (or its handle is gone).
pub(crate) async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|&stop| stop).await;
}

/// [`stopped`], owning its receiver, for a future made once and polled across many waits.
async fn stopped_owned(mut shutdown: watch::Receiver<bool>) {
    stopped(&mut shutdown).await;
}

type PendingWrite = BoxFuture<'static, (Arc<Published>, Committed)>;
type PendingQuery = BoxFuture<'static, (SubscriptionId, QueryAnswer)>;

/// What a pending query brings back.
enum QueryAnswer {
    /// A `REQ`'s stored events, for the query of this generation.
    Events(u64, Result<Vec<StoredEvent>, RelayError>),
    /// A `COUNT`'s count.
    Count(Result<u64, RelayError>),
}

/// Why a connection ends.
enum End {
    /// The peer left, the socket failed, or the relay is shutting down.
    Done,
    /// A message was over the size limit: say so, close with 1009 and linger.
    Oversized,
}

struct Connection {
    ws: WebSocketStream<TcpStream>,
    session: Session,
    shared: Arc<Shared>,
    /// The shared ring; `None` once an exempt connection has read the ring's part.
    live: Option<broadcast::Receiver<Arc<Published>>>,
    /// This connection's own live queue, once it is exempt.
    exempt: Option<Registration>,
    pending_writes: FuturesUnordered<PendingWrite>,
    pending_queries: FuturesUnordered<PendingQuery>,
    /// Counts it among the relay's open connections while it lives.
    _open: OpenConnection,
}

impl Connection {
    fn new(ws: WebSocketStream<TcpStream>, shared: Arc<Shared>) -> Self {
        Self {
            ws,
            session: Session::new(
                shared.limits,
                Arc::clone(&shared.unlimited_authors),
                Instant::now(),
                Arc::clone(&shared.rooms),
                challenge(),
                Arc::clone(&shared.own_urls),
                Arc::clone(&shared.stats),
            )
            .with_signed_here(shared.signed_here.clone()),
            // Taken with the first subscription (`follow_ring`).
            live: None,
            exempt: None,
            _open: shared.stats.open(),
            shared,
            pending_writes: FuturesUnordered::new(),
            pending_queries: FuturesUnordered::new(),
        }
    }

    async fn run(mut self, shutdown: watch::Receiver<bool>) {
        let greeting = self.session.greeting();
        if self.send(vec![greeting]).await.is_err() {
            return;
        }
        // Made once, not on every pass of the loop: a waiting future made anew on each wakeup registers
        // its waiter again (the shutdown signal's under a lock every connection shares, the idle timer in
        // the timer wheel) and unregisters it when another branch wins.
        let stop = stopped_owned(shutdown);
        tokio::pin!(stop);
        // The idle timer is armed no later than the idle deadline and moved only when it fires early: the
        // deadline moves with every client message, the timer at most once an idle timeout.
        let idle_timer = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(idle_timer);
        let mut idle_armed: Option<Instant> = None;
        let end = loop {
            // Not idle while its own work is pending: a slow store or query is the relay's doing.
            let idle = self
                .session
                .idle_deadline(self.shared.idle_timeout)
                .filter(|_| self.pending_writes.is_empty() && self.pending_queries.is_empty());
            if let Some(at) = idle {
                if idle_armed.is_none_or(|armed| armed > at) {
                    idle_timer.as_mut().reset(at.into());
                    idle_armed = Some(at);
                }
            }
            let step = tokio::select! {
                () = &mut stop => {
                    let frame = CloseFrame {
                        code: CloseCode::Away,
                        reason: "relay shutting down".into(),
                    };
                    let _ = timeout(Duration::from_secs(1), self.ws.close(Some(frame))).await;
                    Err(End::Done)
                }
                Some((published, committed)) = self.pending_writes.next(),
                    if !self.pending_writes.is_empty() =>
                {
                    // Handed to the exempt connections before the OK: a publisher that outruns
                    // the agent waits here, and reads no more from its socket meanwhile.
                    let live = self.fan_out(&published, committed.exempt).await;
                    let mut frames =
                        vec![self.session.handle_stored(published.event.id, committed.outcome)];
                    frames.extend(live);
                    self.send(frames).await
                }
                Some((sub, answer)) = self.pending_queries.next(),
                    if !self.pending_queries.is_empty() =>
                {
                    let frames = match answer {
                        QueryAnswer::Events(generation, result) => {
                            self.session.handle_query_result(&sub, generation, result)
                        }
                        QueryAnswer::Count(result) => {
                            vec![self.session.handle_count_result(&sub, result)]
                        }
                    };
                    self.send(frames).await
                }
                () = &mut idle_timer, if idle.is_some() => {
                    let at = idle.unwrap_or_else(Instant::now);
                    if Instant::now() < at {
                        // Armed for an earlier deadline: the client spoke since. Wait for this one.
                        idle_timer.as_mut().reset(at.into());
                        idle_armed = Some(at);
                        continue;
                    }
                    let notice = self.session.handle_idle(self.shared.idle_timeout);
                    let _ = self.send(vec![notice]).await;
                    let frame = CloseFrame {
                        code: CloseCode::Policy,
                        reason: "idle".into(),
                    };
                    let _ = timeout(Duration::from_secs(1), self.ws.close(Some(frame))).await;
                    break End::Done;
                }
                message = self.ws.next(), if self.may_read() => self.on_message(message).await,
                live = recv_ring(&mut self.live) => {
                    let frames = match live {
                        Ok(published) => self.session.handle_ring(&published),
                        Err(broadcast::error::RecvError::Lagged(missed)) => {
                            self.session.handle_lagged(missed)
                        }
                        Err(broadcast::error::RecvError::Closed) => break End::Done,
                    };
                    if !self.session.reads_ring() {
                        // An exempt connection has read the ring's part; the queue brings the rest.
                        self.live = None;
                    }
                    self.send(frames).await
                }
                Some((published, missed)) = recv_queue(&mut self.exempt) => {
                    let frames = self.session.handle_queued(&published, missed);
                    self.send(frames).await
                }
            };
            if let Err(end) = step {
                break end;
            }
        };
        // Unregistered first, so that publishers waiting on this connection's queue stop at once.
        self.exempt = None;
        self.finish_pending_writes().await;
        if let End::Oversized = end {
            let notice = self.session.handle_oversized();
            let _ = self.send(vec![notice]).await;
            let frame = CloseFrame {
                code: CloseCode::Size,
                reason: "message too large".into(),
            };
            let _ = timeout(SEND_TIMEOUT, self.ws.close(Some(frame))).await;
            linger(self.ws.get_mut()).await;
        }
    }

    /// Reads the shared ring only while a subscription may want its events: a connection that only
    /// publishes is not woken by every event every other connection publishes. Called before the commands
    /// of a client message are carried out, so the ring is read from before a new subscription's stored
    /// query runs: an event committed after the query's snapshot is on the ring from then on, and one
    /// sent to the ring before it is in the snapshot.
    fn follow_ring(&mut self) {
        if self.exempt.is_some() {
            // An exempt connection reads the ring only for its backlog, then drops it for good.
            return;
        }
        match (self.live.is_some(), self.session.subscription_count() > 0) {
            (false, true) => self.live = Some(self.shared.fanout.subscribe()),
            (true, false) => self.live = None,
            _ => {}
        }
    }

    /// Hands the events this connection stored but had not handed on yet to the exempt
    /// connections, after it ended: they are committed, and the agent must get them all the same.
    /// Bounded by the writer, which answers every insert, and by each hand-over's timeout.
    async fn finish_pending_writes(&mut self) {
        while let Some((published, committed)) = self.pending_writes.next().await {
            let _ = self.fan_out(&published, committed.exempt).await;
        }
    }

    /// Hands a published live event to the exempt connections' queues as the session says: the
    /// frames for this connection's own subscriptions when it is exempt itself, waiting on the
    /// others' queues.
    async fn fan_out(&mut self, published: &Arc<Published>, peers: Option<Peers>) -> Vec<String> {
        let mut frames = Vec::new();
        for peer in peers.iter().flat_map(|p| p.iter()) {
            let own = self
                .exempt
                .as_ref()
                .is_some_and(|e| e.peer.id() == peer.id());
            match self.session.queue_delivery(own, peer.is_behind()) {
                QueueDelivery::Inline => frames.extend(self.session.handle_live(published)),
                QueueDelivery::Wait => peer.deliver(Arc::clone(published), true).await,
                QueueDelivery::TryOnly => peer.try_deliver(Arc::clone(published)),
            }
        }
        frames
    }

    /// This connection just became exempt: its live events move from the ring to its own queue.
    fn register_exempt(&mut self) {
        if self.exempt.is_some() {
            return;
        }
        let registration = self.shared.fanout.register(self.live.as_ref());
        self.session.handle_registered(registration.backlog);
        if !self.session.reads_ring() {
            self.live = None;
        }
        self.exempt = Some(registration);
    }

    /// Whether to read the next client message: not while too much of its earlier work waits.
    fn may_read(&self) -> bool {
        self.pending_writes.len() < MAX_PENDING_WRITES_PER_CONNECTION
            && self.pending_queries.len() < MAX_PENDING_QUERIES_PER_CONNECTION
    }

    async fn on_message(&mut self, message: Option<Result<Message, WsError>>) -> Result<(), End> {
        let commands = match message {
            Some(Ok(Message::Text(text))) => {
                self.session
                    .handle_text(text.as_str(), Instant::now(), Timestamp::now())
            }
            Some(Ok(Message::Binary(_))) => self.session.handle_binary(),
            // Pings are answered by tungstenite; a close is answered on the next poll, after
            // which the stream ends.
            Some(Ok(
                Message::Ping(_) | Message::Pong(_) | Message::Close(_) | Message::Frame(_),
            )) => Vec::new(),
            Some(Err(WsError::Capacity(_))) => return Err(End::Oversized),
            Some(Err(_)) | None => return Err(End::Done),
        };
        self.follow_ring();
        self.execute(commands).await
    }

    async fn execute(&mut self, commands: Vec<Command>) -> Result<(), End> {
        let mut frames = Vec::new();
        for command in commands {
            match command {
                Command::Send(frame) => frames.push(frame),
                Command::Exempt => self.register_exempt(),
                Command::Broadcast(published) => {
                    let peers = self.shared.fanout.publish([&published]);
                    frames.extend(self.fan_out(&published, peers).await);
                }
                Command::Store(published) => {
                    let id = published.event.id;
                    let (reply, answer) = oneshot::channel();
                    let op = WriteOp::Insert {
                        published: Arc::clone(&published),
                        reply,
                    };
                    if self.shared.writer.send(op).await.is_err() {
                        frames.push(crate::wire::ok(
                            id,
                            false,
                            "error: the relay is shutting down",
                        ));
                        continue;
                    }
                    self.pending_writes.push(Box::pin(async move {
                        let committed = answer.await.unwrap_or_else(|_| Committed {
                            outcome: Err(RelayError::Internal(
                                "the writer thread stopped".to_owned(),
                            )),
                            exempt: None,
                        });
                        (published, committed)
                    }));
                }
                Command::Query(request) => {
                    let readers = Arc::clone(&self.shared.readers);
                    self.pending_queries.push(Box::pin(async move {
                        let result = readers
                            .query(request.filters, Timestamp::now(), request.hidden)
                            .await;
                        (
                            request.subscription_id,
                            QueryAnswer::Events(request.generation, result),
                        )
                    }));
                }
                Command::Count {
                    subscription_id,
                    filters,
                    hidden,
                } => {
                    let readers = Arc::clone(&self.shared.readers);
                    self.pending_queries.push(Box::pin(async move {
                        let result = readers.count(filters, Timestamp::now(), hidden).await;
                        (subscription_id, QueryAnswer::Count(result))
                    }));
                }
            }
        }
        self.send(frames).await
    }

    /// Sends frames in order with one flush; a client that does not take them within
    /// [`SEND_TIMEOUT`] is dropped.
    async fn send(&mut self, frames: Vec<String>) -> Result<(), End> {
        if frames.is_empty() {
            return Ok(());
        }
        let ws = &mut self.ws;
        let write = async {
            for frame in frames {
                ws.feed(Message::text(frame)).await?;
            }
            ws.flush().await
        };
        // A socket with room takes the frames at once: the timer is made only for a write that waits.
        let mut write = std::pin::pin!(write);
        let first = std::future::poll_fn(|cx| Poll::Ready(write.as_mut().poll(cx))).await;
        let written = match first {
            Poll::Ready(result) => Ok(result),
            Poll::Pending => timeout(SEND_TIMEOUT, write).await,
        };
        match written {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) | Err(_) => Err(End::Done),
        }
    }
}

/// The next event of the ring; never resolves without one.
async fn recv_ring(
    ring: &mut Option<broadcast::Receiver<Arc<Published>>>,
) -> Result<Arc<Published>, broadcast::error::RecvError> {
    match ring {
        Some(ring) => ring.recv().await,
        None => std::future::pending().await,
    }
}

/// The next event of an exempt connection's own queue, with the number of events missed since
/// the last one; never resolves for an ordinary connection.
async fn recv_queue(exempt: &mut Option<Registration>) -> Option<(Arc<Published>, u64)> {
    match exempt {
        Some(registration) => {
            let published = registration.queue.recv().await?;
            Some((published, registration.peer.take_missed()))
        }
        None => std::future::pending().await,
    }
}

/// A fresh NIP-42 challenge: 16 random bytes, hex.
fn challenge() -> String {
    let mut bytes = [0u8; 16];
    // The OS generator does not fail on the platforms we run on; a zero challenge would still be one
    // nobody has signed.
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
