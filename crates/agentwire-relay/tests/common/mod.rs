//! Test helpers: a relay on a free port in a temp dir, a tiny WebSocket client, event builders.

#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use agentwire_relay::{start, RelayConfig, RelayHandle, RelayLimits};
use futures_util::{SinkExt, StreamExt};
use nostr::event::{Event, EventBuilder, EventId, FinalizeEvent, Kind, Tag};
use nostr::filter::Filter;
use nostr::key::Keys;
use nostr::message::{ClientMessage, RelayMessage, SubscriptionId};
use nostr::types::Timestamp;
use tempfile::TempDir;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// How long a test waits for an expected frame before failing.
pub const RECV_TIMEOUT: Duration = Duration::from_secs(10);

/// A relay in its own temp dir, with the configuration it was started with (to start it again).
pub struct TestRelay {
    pub handle: RelayHandle,
    pub dir: TempDir,
    pub config: RelayConfig,
}

impl TestRelay {
    pub async fn start() -> Self {
        Self::with_limits(RelayLimits::default()).await
    }

    pub async fn with_limits(limits: RelayLimits) -> Self {
        Self::with_config(|c| c.limits = limits).await
    }

    pub async fn with_config(change: impl FnOnce(&mut RelayConfig)) -> Self {
        let dir = TempDir::new().unwrap();
        let mut config = config(&dir, RelayLimits::default());
        change(&mut config);
        let handle = start(config.clone()).await.unwrap();
        Self {
            handle,
            dir,
            config,
        }
    }

    /// A relay with open rooms of these ids (signed by a relay key of its own).
    pub async fn with_rooms(ids: &[&str]) -> Self {
        Self::with_config(|c| open_rooms(c, ids)).await
    }

    pub fn url(&self) -> String {
        self.handle.url()
    }

    pub fn addr(&self) -> SocketAddr {
        self.handle.local_addr()
    }

    pub fn db_path(&self) -> PathBuf {
        self.dir.path().join("relay.sqlite")
    }

    pub async fn client(&self) -> Client {
        Client::connect(&self.url()).await
    }

    /// Shuts the relay down and starts it again on the same database, with the same configuration.
    pub async fn restart(self) -> Self {
        let Self {
            handle,
            dir,
            config,
        } = self;
        handle.shutdown().await;
        let handle = start(config.clone()).await.unwrap();
        Self {
            handle,
            dir,
            config,
        }
    }
}

/// Adds open rooms of these ids to `config`, with a relay key to sign their metadata.
pub fn open_rooms(config: &mut RelayConfig, ids: &[&str]) {
    config
        .rooms
        .extend(ids.iter().map(|id| agentwire_relay::RoomConfig {
            id: id.to_string(),
            name: id.to_string(),
            closed: false,
            private: false,
            members: Vec::new(),
            admins: Vec::new(),
        }));
    config.relay_keys.get_or_insert_with(Keys::generate);
}

pub fn config(dir: &TempDir, limits: RelayLimits) -> RelayConfig {
    let mut config = RelayConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        dir.path().join("relay.sqlite"),
    );
    config.limits = limits;
    config.name = "test relay".to_owned();
    config
}

/// A signed event.
pub fn signed(keys: &Keys, kind: u16, content: &str, tags: Vec<Tag>) -> Event {
    EventBuilder::new(Kind::from_u16(kind), content)
        .tags(tags)
        .finalize(keys)
        .unwrap()
}

/// A signed event with a given `created_at`.
pub fn signed_at(keys: &Keys, kind: u16, content: &str, tags: Vec<Tag>, at: u64) -> Event {
    EventBuilder::new(Kind::from_u16(kind), content)
        .tags(tags)
        .custom_created_at(Timestamp::from_secs(at))
        .finalize(keys)
        .unwrap()
}

pub fn now() -> u64 {
    Timestamp::now().as_secs()
}

/// A minimal Nostr client over tokio-tungstenite. The relay's NIP-42 challenges are kept, not returned.
pub struct Client {
    pub ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    /// The last `AUTH` challenge the relay sent.
    pub challenge: Option<String>,
}

impl Client {
    pub async fn connect(url: &str) -> Self {
        let (ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        Self {
            ws,
            challenge: None,
        }
    }

    pub async fn send_text(&mut self, text: impl Into<String>) {
        self.ws.send(Message::text(text.into())).await.unwrap();
    }

    pub async fn send(&mut self, message: ClientMessage<'_>) {
        self.send_text(message.as_json()).await;
    }

    pub async fn send_event(&mut self, event: &Event) {
        self.send(ClientMessage::event(event.clone())).await;
    }

    pub async fn send_req(&mut self, sub: &str, filters: Vec<Filter>) {
        self.send(ClientMessage::req(SubscriptionId::new(sub), filters))
            .await;
    }

    /// The next relay message, or `None` if none comes within `wait` or the connection ends.
    pub async fn recv_within(&mut self, wait: Duration) -> Option<RelayMessage<'static>> {
        loop {
            let next = tokio::time::timeout(wait, self.ws.next()).await.ok()??;
            match next {
                Ok(Message::Text(text)) => {
                    let message = RelayMessage::from_json(text.as_str())
                        .unwrap_or_else(|e| panic!("relay sent an invalid message {text}: {e}"));
                    if let RelayMessage::Auth { challenge } = &message {
                        self.challenge = Some(challenge.to_string());
                        continue;
                    }
                    return Some(message);
                }
                Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_)) => continue,
                Ok(Message::Binary(_)) => panic!("relay sent a binary message"),
                Ok(Message::Close(_)) | Err(_) => return None,
            }
        }
    }

    /// The next relay message; fails the test if none comes.
    pub async fn recv(&mut self) -> RelayMessage<'static> {
        self.recv_within(RECV_TIMEOUT)
            .await
            .expect("expected a relay message")
    }

    /// Publishes `event` and returns its `OK` (status, message); other frames are skipped.
    pub async fn publish(&mut self, event: &Event) -> (bool, String) {
        self.send_event(event).await;
        self.ok_for(event.id).await
    }

    /// Waits for the `OK` for `id`, skipping other frames.
    pub async fn ok_for(&mut self, id: EventId) -> (bool, String) {
        loop {
            if let RelayMessage::Ok {
                event_id,
                status,
                message,
            } = self.recv().await
            {
                if event_id == id {
                    return (status, message.into_owned());
                }
            }
        }
    }

    /// Sends a REQ and collects the stored events up to `EOSE`; fails on anything else.
    pub async fn query(&mut self, sub: &str, filters: Vec<Filter>) -> Vec<Event> {
        self.send_req(sub, filters).await;
        self.stored_until_eose(sub).await
    }

    pub async fn stored_until_eose(&mut self, sub: &str) -> Vec<Event> {
        let mut events = Vec::new();
        loop {
            match self.recv().await {
                RelayMessage::Event {
                    subscription_id,
                    event,
                } if subscription_id.as_str() == sub => events.push(event.into_owned()),
                RelayMessage::EndOfStoredEvents(id) if id.as_str() == sub => return events,
                other => panic!("expected events then EOSE for {sub}, got {other:?}"),
            }
        }
    }

    /// Fails if the relay sends anything within `wait`.
    pub async fn expect_silence(&mut self, wait: Duration) {
        if let Some(message) = self.recv_within(wait).await {
            panic!("expected nothing, got {message:?}");
        }
    }

    /// The next message must be `CLOSED` for `sub`; returns its text.
    pub async fn expect_closed(&mut self, sub: &str) -> String {
        match self.recv().await {
            RelayMessage::Closed {
                subscription_id,
                message,
            } if subscription_id.as_str() == sub => message.into_owned(),
            other => panic!("expected CLOSED for {sub}, got {other:?}"),
        }
    }

    /// Authenticates (NIP-42) as `keys` by signing this connection's challenge for `url`; returns the
    /// relay's `OK` (status, message). Waits for the challenge first (a query's `EOSE` proves it was read).
    pub async fn authenticate(&mut self, keys: &Keys, url: &str) -> (bool, String) {
        if self.challenge.is_none() {
            let _ = self
                .query("before-auth", vec![Filter::new().limit(0)])
                .await;
            self.send(ClientMessage::close(SubscriptionId::new("before-auth")))
                .await;
        }
        let challenge = self
            .challenge
            .clone()
            .expect("an AUTH challenge on connect");
        let auth = EventBuilder::new(Kind::Authentication, "")
            .tags([
                Tag::parse(["relay", url]).unwrap(),
                Tag::parse(["challenge", challenge.as_str()]).unwrap(),
            ])
            .finalize(keys)
            .unwrap();
        self.send(ClientMessage::auth(auth.clone())).await;
        self.ok_for(auth.id).await
    }

    /// The next message must be a `NOTICE`; returns its text.
    pub async fn expect_notice(&mut self) -> String {
        match self.recv().await {
            RelayMessage::Notice(message) => message.into_owned(),
            other => panic!("expected NOTICE, got {other:?}"),
        }
    }
}
