//! A client connection to one relay: publish with OK, subscribe, and reconnect with the subscriptions
//! restored. Used by the agent runtime and by the CLI client. Speaks `ws://` and `wss://` (TLS: [`tls`]).
//!
//! A subscription the relay closes (`CLOSED`, e.g. `error: too slow` when a burst overflowed its live queue)
//! is opened again after a backoff, and every subscription is opened again after a reconnect; either way with
//! a `since` that covers the gap, from the newest event delivered on it (`subscriptions`). So a connection
//! never stays deaf: the owner still hears of each `CLOSED`, and may get a few events twice.

mod subscriptions;
pub mod tls;

pub use subscriptions::{
    catch_up, CATCH_UP_SLACK, RESUBSCRIBE_INITIAL_DELAY, RESUBSCRIBE_MAX_DELAY,
};
pub use tls::{RelayTls, TlsError};

use subscriptions::Subscriptions;

use agentwire_core::Backoff;
use futures_util::{SinkExt, StreamExt};
use nostr::prelude::{ClientMessage, Event, EventId, Filter, RelayMessage, Timestamp};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_tungstenite::tungstenite::http::uri::{InvalidUri, Uri};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::Connector;

/// The WebSocket read buffer: a typical relay message fits; longer ones are read in several steps.
pub const READ_BUFFER_BYTES: usize = 8 * 1024;

/// Incoming messages buffered before the connection stops reading the socket (backpressure to the relay
/// instead of unbounded memory).
pub const INCOMING_QUEUE_DEPTH: usize = 4096;
/// Longest wait between reconnect attempts.
pub const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(10);
/// The first wait before connecting again, doubled after each failure up to [`MAX_RECONNECT_DELAY`]: short,
/// so a relay that restarts is back within a blink.
const FIRST_RECONNECT_DELAY: Duration = Duration::from_millis(100);
/// How long `publish` waits for the relay's OK.
pub const OK_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest message read from a relay; ample for events within NIP-44's limits.
pub const MAX_RELAY_MESSAGE_BYTES: usize = 1 << 20;

/// What the relay said to an EVENT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OkReply {
    /// Whether the relay accepted it.
    pub accepted: bool,
    /// The relay's message (`duplicate:`, `rate-limited:`, ...).
    pub message: String,
}

/// Why a publish has no OK.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PublishError {
    /// No OK within [`OK_TIMEOUT`].
    #[error("relay did not answer within {0:?}")]
    Timeout(Duration),
    /// The connection is gone.
    #[error("relay connection closed")]
    Closed,
}

/// The transport a relay URL asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayScheme {
    /// `ws://`: plain TCP.
    Ws,
    /// `wss://`: TLS.
    Wss,
}

/// Why a relay URL cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RelayUrlError {
    /// Not a URL at all.
    #[error("relay URL {url:?} is not a valid URL: {reason}")]
    Invalid {
        /// The URL as given.
        url: String,
        /// What the parser said.
        reason: String,
    },
    /// A scheme other than `ws` or `wss`.
    #[error("relay URL {url:?} is not ws:// or wss:// (a Nostr relay is a WebSocket server)")]
    UnsupportedScheme {
        /// The URL as given.
        url: String,
    },
    /// No host to connect to.
    #[error("relay URL {url:?} has no host")]
    NoHost {
        /// The URL as given.
        url: String,
    },
}

/// Checks that `url` is a `ws://` or `wss://` URL with a host, the way the connection will parse it.
pub fn check_relay_url(url: &str) -> Result<RelayScheme, RelayUrlError> {
    let uri: Uri = url
        .parse()
        .map_err(|e: InvalidUri| RelayUrlError::Invalid {
            url: url.to_string(),
            reason: e.to_string(),
        })?;
    // Exactly as tungstenite matches it when connecting, so what passes here connects.
    let scheme = match uri.scheme_str() {
        Some("ws") => RelayScheme::Ws,
        Some("wss") => RelayScheme::Wss,
        _ => {
            return Err(RelayUrlError::UnsupportedScheme {
                url: url.to_string(),
            })
        }
    };
    if uri.host().is_none_or(str::is_empty) {
        return Err(RelayUrlError::NoHost {
            url: url.to_string(),
        });
    }
    Ok(scheme)
}

/// Something the relay sent on a subscription.
#[derive(Debug, Clone)]
pub enum Incoming {
    /// An event on subscription `sub`.
    Event {
        /// The subscription id.
        sub: String,
        /// The event (its signature is not yet checked).
        event: Box<Event>,
    },
    /// End of stored events on `sub`.
    Eose(String),
    /// The relay closed `sub`. The connection opens it again by itself (after a backoff, from where it left
    /// off); this only tells the owner.
    Closed {
        /// The subscription id.
        sub: String,
        /// Why.
        message: String,
    },
}

enum Cmd {
    Send(String),
    Subscribe(String, Vec<Filter>),
    Unsubscribe(String),
}

type Pending = Arc<Mutex<HashMap<EventId, oneshot::Sender<OkReply>>>>;

/// A reconnecting connection to one relay.
#[derive(Clone)]
pub struct RelayConn {
    url: String,
    cmds: mpsc::UnboundedSender<Cmd>,
    pending: Pending,
    connected: watch::Receiver<bool>,
}

impl RelayConn {
    /// Starts connecting to `url` (and keeps reconnecting). Returns the connection and its incoming stream.
    /// A `wss://` relay is checked against [`RelayTls::process_default`]. A URL that is not `ws://` or
    /// `wss://` is logged as an error and the connection ends at once (check it first with
    /// [`check_relay_url`] to report it to the user).
    pub fn connect(url: &str) -> (RelayConn, mpsc::Receiver<Incoming>) {
        Self::start(url, None, None)
    }

    /// Like [`connect`](Self::connect), with this TLS configuration for a `wss://` relay.
    pub fn connect_with_tls(url: &str, tls: RelayTls) -> (RelayConn, mpsc::Receiver<Incoming>) {
        Self::start(url, Some(tls), None)
    }

    /// Like [`connect`](Self::connect), answering the relay's NIP-42 `AUTH` challenges as `signer` (so a
    /// relay that keeps rooms private shows this key what its members may read). A subscription the relay
    /// closed with `auth-required:` before the answer is opened again by the usual backoff.
    pub fn connect_authenticated(
        url: &str,
        signer: Arc<crate::crypto::Crypto>,
    ) -> (RelayConn, mpsc::Receiver<Incoming>) {
        Self::start(url, None, Some(signer))
    }

    fn start(
        url: &str,
        tls: Option<RelayTls>,
        signer: Option<Arc<crate::crypto::Crypto>>,
    ) -> (RelayConn, mpsc::Receiver<Incoming>) {
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        let (in_tx, in_rx) = mpsc::channel(INCOMING_QUEUE_DEPTH);
        let (conn_tx, conn_rx) = watch::channel(false);
        let conn = RelayConn {
            url: url.to_string(),
            cmds: cmd_tx,
            pending: Arc::default(),
            connected: conn_rx,
        };
        let task = Driver {
            url: url.to_string(),
            tls,
            pending: conn.pending.clone(),
            subs: Subscriptions::default(),
            incoming: in_tx,
            connected: conn_tx,
            signer,
            replies: Vec::new(),
        };
        tokio::spawn(task.run(cmd_rx));
        (conn, in_rx)
    }

    /// The relay's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Whether the connection is up, as it changes (true on every (re)connect).
    pub fn connection_state(&self) -> watch::Receiver<bool> {
        self.connected.clone()
    }

    /// Waits until connected, up to `timeout`.
    pub async fn wait_connected(&self, timeout: Duration) -> bool {
        let mut rx = self.connected.clone();
        tokio::time::timeout(timeout, rx.wait_for(|c| *c))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Opens (or replaces) subscription `id`. It is opened again, from where it left off, after the relay
    /// closes it and after a reconnect, until [`unsubscribe`](Self::unsubscribe).
    pub fn subscribe(&self, id: &str, filters: Vec<Filter>) {
        let _ = self.cmds.send(Cmd::Subscribe(id.to_string(), filters));
    }

    /// Closes subscription `id`.
    pub fn unsubscribe(&self, id: &str) {
        let _ = self.cmds.send(Cmd::Unsubscribe(id.to_string()));
    }

    /// Publishes an event and waits for the relay's OK.
    pub async fn publish(&self, event: &Event) -> Result<OkReply, PublishError> {
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(event.id, tx);
        if self
            .cmds
            .send(Cmd::Send(ClientMessage::event(event.clone()).as_json()))
            .is_err()
        {
            return Err(PublishError::Closed);
        }
        match tokio::time::timeout(OK_TIMEOUT, rx).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(_)) => Err(PublishError::Closed),
            Err(_) => {
                self.pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&event.id);
                Err(PublishError::Timeout(OK_TIMEOUT))
            }
        }
    }

    /// Sends an event without waiting for the OK (stream events); a refusal is logged.
    pub fn send(&self, event: &Event) {
        let _ = self
            .cmds
            .send(Cmd::Send(ClientMessage::event(event.clone()).as_json()));
    }
}

/// Why a relay connection cannot be set up at all (no retry helps).
#[derive(Debug, thiserror::Error)]
enum ConnectorError {
    /// The relay URL cannot be used.
    #[error(transparent)]
    Url(#[from] RelayUrlError),
    /// The TLS configuration for a `wss://` relay could not be built.
    #[error(transparent)]
    Tls(#[from] TlsError),
}

struct Driver {
    url: String,
    tls: Option<RelayTls>,
    pending: Pending,
    /// Owned by the driver: the owner's subscribe and unsubscribe come in as commands, in order with its
    /// publishes.
    subs: Subscriptions,
    incoming: mpsc::Sender<Incoming>,
    connected: watch::Sender<bool>,
    /// Answers `AUTH` challenges, when set.
    signer: Option<Arc<crate::crypto::Crypto>>,
    /// What handling a relay message gave to send back (an `AUTH` answer).
    replies: Vec<String>,
}

impl Driver {
    /// The TLS connector for this relay's URL: none for `ws://`.
    fn connector(&self) -> Result<Option<Connector>, ConnectorError> {
        match check_relay_url(&self.url)? {
            RelayScheme::Ws => Ok(None),
            RelayScheme::Wss => {
                let tls = match &self.tls {
                    Some(t) => t.clone(),
                    None => RelayTls::process_default()?,
                };
                Ok(Some(Connector::Rustls(tls.client_config())))
            }
        }
    }

    async fn run(mut self, mut cmds: mpsc::UnboundedReceiver<Cmd>) {
        let connector = match self.connector() {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(relay = %self.url, error = %e, "cannot connect to this relay");
                return;
            }
        };
        let mut backoff = Backoff::new(FIRST_RECONNECT_DELAY, MAX_RECONNECT_DELAY);
        // The last TLS failure reported at warn level; repeats of it during one outage go to debug.
        let mut reported_tls_failure: Option<String> = None;
        loop {
            let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
                .max_message_size(Some(MAX_RELAY_MESSAGE_BYTES))
                .max_frame_size(Some(MAX_RELAY_MESSAGE_BYTES))
                // tungstenite zero-fills its read buffer before every read; the default 128 KiB made that a
                // large share of a busy connection's CPU. Longer messages still arrive whole.
                .read_buffer_size(READ_BUFFER_BYTES);
            match tokio_tungstenite::connect_async_tls_with_config(
                self.url.as_str(),
                Some(config),
                true,
                connector.clone(),
            )
            .await
            {
                Ok((ws, _)) => {
                    backoff.reset();
                    reported_tls_failure = None;
                    tracing::debug!(relay = %self.url, "connected");
                    let (mut sink, mut stream) = ws.split();
                    // Restore subscriptions first, so nothing published after this is missed; each asks from
                    // where it left off, so what was published while disconnected comes as stored events.
                    let mut ok = true;
                    for m in self.subs.restore() {
                        if sink.send(Message::text(m)).await.is_err() {
                            ok = false;
                        }
                    }
                    if ok {
                        let _ = self.connected.send(true);
                        loop {
                            let retry = self.subs.next_retry();
                            let to_send = tokio::select! {
                                cmd = cmds.recv() => match cmd {
                                    Some(Cmd::Send(m)) => vec![m],
                                    // Recorded first, so a failed send is still restored on reconnect.
                                    Some(Cmd::Subscribe(id, filters)) => vec![self.subs.open(&id, filters)],
                                    Some(Cmd::Unsubscribe(id)) => vec![self.subs.close(&id)],
                                    None => { let _ = sink.close().await; return }
                                },
                                () = retry_at(retry) => self.subs.due(Instant::now()),
                                msg = stream.next() => match msg {
                                    Some(Ok(Message::Text(t))) => {
                                        if !self.handle(t.as_str()).await { return }
                                        std::mem::take(&mut self.replies)
                                    }
                                    Some(Ok(Message::Ping(p))) => { let _ = sink.send(Message::Pong(p)).await; Vec::new() }
                                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                                    Some(Ok(_)) => Vec::new(),
                                },
                            };
                            let mut sent = true;
                            for m in to_send {
                                if sink.send(Message::text(m)).await.is_err() {
                                    sent = false;
                                    break;
                                }
                            }
                            if !sent {
                                break;
                            }
                        }
                    }
                    let _ = self.connected.send(false);
                    tracing::debug!(relay = %self.url, "disconnected; reconnecting");
                }
                Err(e) if tls::is_handshake_failure(&e) => {
                    let error = e.to_string();
                    if reported_tls_failure.as_ref() != Some(&error) {
                        tracing::warn!(
                            relay = %self.url,
                            %error,
                            retry_in = ?backoff.peek(),
                            "TLS handshake with the relay failed (is its certificate from a trusted CA?); retrying"
                        );
                        reported_tls_failure = Some(error);
                    } else {
                        tracing::debug!(relay = %self.url, %error, "TLS handshake failed again");
                    }
                }
                Err(e) => tracing::debug!(relay = %self.url, error = %e, "connect failed"),
            }
            if cmds.is_closed() {
                return;
            }
            tokio::time::sleep(backoff.take()).await;
        }
    }

    /// Handles one relay message; false when the owner has gone away.
    async fn handle(&mut self, text: &str) -> bool {
        let msg = match RelayMessage::from_json(text) {
            Ok(m) => m,
            Err(e) => {
                tracing::debug!(relay = %self.url, error = %e, "unparseable relay message ignored");
                return true;
            }
        };
        let incoming = match msg {
            RelayMessage::Ok {
                event_id,
                status,
                message,
            } => {
                let tx = self
                    .pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&event_id);
                match tx {
                    Some(tx) => {
                        let _ = tx.send(OkReply {
                            accepted: status,
                            message: message.into_owned(),
                        });
                    }
                    None if !status => {
                        tracing::warn!(relay = %self.url, event = %event_id, %message, "relay refused an event")
                    }
                    None => {}
                }
                return true;
            }
            RelayMessage::Event {
                subscription_id,
                event,
            } => {
                let sub = subscription_id.to_string();
                self.subs.on_event(&sub, event.created_at, Timestamp::now());
                Incoming::Event {
                    sub,
                    event: Box::new(event.into_owned()),
                }
            }
            RelayMessage::EndOfStoredEvents(sub) => Incoming::Eose(sub.to_string()),
            RelayMessage::Closed {
                subscription_id,
                message,
            } => {
                match self
                    .subs
                    .on_closed(subscription_id.as_str(), Instant::now())
                {
                    Some(retry_in) => tracing::warn!(
                        relay = %self.url, sub = %subscription_id, %message, ?retry_in,
                        "relay closed a subscription; subscribing again"
                    ),
                    None => tracing::debug!(
                        relay = %self.url, sub = %subscription_id, %message,
                        "relay closed a subscription we no longer hold"
                    ),
                }
                Incoming::Closed {
                    sub: subscription_id.to_string(),
                    message: message.into_owned(),
                }
            }
            RelayMessage::Notice(n) => {
                tracing::info!(relay = %self.url, notice = %n, "relay notice");
                return true;
            }
            RelayMessage::Auth { challenge } => {
                if let Some(signer) = &self.signer {
                    let tags = [["relay", self.url.as_str()], ["challenge", &challenge]]
                        .into_iter()
                        .filter_map(|t| nostr::prelude::Tag::parse(t).ok());
                    let event = signer.sign(
                        nostr::prelude::EventBuilder::new(nostr::prelude::Kind::Authentication, "")
                            .tags(tags),
                    );
                    self.replies.push(ClientMessage::auth(event).as_json());
                }
                return true;
            }
            _ => return true,
        };
        self.incoming.send(incoming).await.is_ok()
    }
}

/// Resolves at `at`, or never without one.
async fn retry_at(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relay_urls_are_ws_or_wss_with_a_host() {
        assert_eq!(check_relay_url("ws://127.0.0.1:7777"), Ok(RelayScheme::Ws));
        assert_eq!(
            check_relay_url("wss://relay.example/path"),
            Ok(RelayScheme::Wss)
        );
        assert_eq!(check_relay_url("wss://[::1]:443"), Ok(RelayScheme::Wss));
        for bad in ["https://relay.example", "relay.example", "tcp://1.2.3.4:1"] {
            assert!(
                matches!(
                    check_relay_url(bad),
                    Err(RelayUrlError::UnsupportedScheme { .. })
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            check_relay_url("ws://"),
            Err(RelayUrlError::Invalid { .. } | RelayUrlError::NoHost { .. })
        ));
        assert!(matches!(
            check_relay_url("wss://bad host"),
            Err(RelayUrlError::Invalid { .. })
        ));
    }

    #[tokio::test]
    async fn a_bad_scheme_ends_the_connection_at_once() {
        let started = std::time::Instant::now();
        let (conn, _rx) = RelayConn::connect("http://127.0.0.1:1");
        assert!(!conn.wait_connected(Duration::from_secs(5)).await);
        assert!(started.elapsed() < Duration::from_secs(1), "no retrying");
    }
}
