//! The task-card tests' helpers: a real embedded relay with rooms, the adapter on it over loopback, people
//! in the rooms (their own relay connections), and a proxy that refuses chosen events.

#![allow(dead_code, unreachable_pub)]

use agentwire_agents::DemoAgent;
use agentwire_engine::{Agent, Engine, Front};
use agentwire_nostr::crypto::Crypto;
use agentwire_nostr::relay_conn::{Incoming, RelayConn};
use agentwire_relay::{RelayConfig, RelayHandle, RoomConfig};
use agentwire_store::SqliteJournal;
use agentwire_tasks::{TaskAdapter, TaskConfig, DEFAULT_MAX_RUNNING_TASKS};
use futures_util::{SinkExt, StreamExt};
use nostr::prelude::{
    ClientMessage, Event, EventBuilder, EventId, Filter, Keys, Kind, PublicKey, RelayMessage,
    SingleLetterTag, Tag,
};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

pub const WAIT: Duration = Duration::from_secs(10);

pub fn tag(parts: &[&str]) -> Tag {
    Tag::parse(parts.iter().map(|p| p.to_string()).collect::<Vec<_>>()).unwrap()
}

pub struct Person {
    pub crypto: Crypto,
    pub conn: RelayConn,
    pub incoming: mpsc::Receiver<Incoming>,
    /// Events seen but not taken yet, in order.
    /// Events received while waiting for others, with when each arrived.
    pub unread: Vec<(std::time::Instant, Event)>,
}

impl Person {
    pub async fn join(url: &str, keys: Keys) -> Person {
        Self::join_rooms(url, keys, &["lab", "home", "vault"]).await
    }

    /// Joins, watching `rooms` (a room the person may not read would leave the subscription closed).
    pub async fn join_rooms(url: &str, keys: Keys, rooms: &[&str]) -> Person {
        let crypto = Arc::new(Crypto::new(keys.clone()));
        let (conn, incoming) = RelayConn::connect_authenticated(url, crypto);
        assert!(conn.wait_connected(WAIT).await);
        let h = SingleLetterTag::from_char('h').unwrap();
        conn.subscribe(
            "room",
            vec![Filter::new()
                .kinds((43002..=43006).map(Kind::Custom).chain([
                    Kind::Custom(9),
                    Kind::Custom(11),
                    Kind::Custom(12),
                ]))
                .custom_tags(h, rooms.iter().copied())],
        );
        let mut p = Person {
            crypto: Crypto::new(keys),
            conn,
            incoming,
            unread: Vec::new(),
        };
        p.eose().await;
        p
    }

    pub async fn eose(&mut self) {
        loop {
            match tokio::time::timeout(WAIT, self.incoming.recv()).await {
                Ok(Some(Incoming::Eose(_))) => return,
                Ok(Some(_)) => {}
                other => panic!("no EOSE: {other:?}"),
            }
        }
    }

    pub async fn publish(&self, kind: u16, content: &str, tags: Vec<Tag>) -> Event {
        let ev = self
            .crypto
            .sign(EventBuilder::new(Kind::Custom(kind), content).tags(tags));
        let ok = self.conn.publish(&ev).await.unwrap();
        assert!(ok.accepted, "{}", ok.message);
        ev
    }

    pub async fn task(&self, agent: PublicKey, prompt: &str, extra: Vec<Tag>) -> Event {
        let mut tags = vec![Tag::public_key(agent), tag(&["h", "lab"])];
        tags.extend(extra);
        self.publish(43001, prompt, tags).await
    }

    /// The next event of the room that `want` takes, within `wait`; the others stay for later calls.
    pub async fn next(&mut self, wait: Duration, want: impl Fn(&Event) -> bool) -> Option<Event> {
        self.next_at(wait, want).await.map(|(_, e)| e)
    }

    /// Like [`Alice::next`], with when the event arrived.
    pub async fn next_at(
        &mut self,
        wait: Duration,
        want: impl Fn(&Event) -> bool,
    ) -> Option<(std::time::Instant, Event)> {
        if let Some(i) = self.unread.iter().position(|(_, e)| want(e)) {
            return Some(self.unread.remove(i));
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match tokio::time::timeout_at(deadline, self.incoming.recv()).await {
                Ok(Some(Incoming::Event { event, .. })) if want(&event) => {
                    return Some((std::time::Instant::now(), *event))
                }
                Ok(Some(Incoming::Event { event, .. })) => {
                    self.unread.push((std::time::Instant::now(), *event))
                }
                Ok(Some(_)) => {}
                _ => return None,
            }
        }
    }

    /// Every event about `request` until its terminal (and `settle` after it, to catch a second one).
    pub async fn card(&mut self, request: &EventId, settle: Duration) -> Vec<Event> {
        let mut seen = Vec::new();
        let about = |e: &Event| {
            e.tags
                .iter()
                .any(|t| t.as_slice().get(1) == Some(&request.to_hex()))
        };
        while let Some(e) = self.next(WAIT, about).await {
            let kind = e.kind.as_u16();
            seen.push(e);
            if kind == 43004 || kind == 43006 {
                break;
            }
        }
        while let Some(e) = self.next(settle, about).await {
            seen.push(e);
        }
        seen
    }
}

pub fn kinds(events: &[Event]) -> Vec<u16> {
    events.iter().map(|e| e.kind.as_u16()).collect()
}

pub fn terminals(events: &[Event]) -> Vec<&Event> {
    events
        .iter()
        .filter(|e| matches!(e.kind.as_u16(), 43004 | 43006))
        .collect()
}

pub fn values<'a>(e: &'a Event, name: &str) -> Vec<&'a str> {
    e.tags
        .iter()
        .map(|t| t.as_slice())
        .filter(|t| t.first().map(String::as_str) == Some(name))
        .filter_map(|t| t.get(1).map(String::as_str))
        .collect()
}

pub struct Setup {
    pub _dir: tempfile::TempDir,
    pub relay: RelayHandle,
    pub agent: Keys,
    pub alice: Keys,
    pub bob: Keys,
}

pub async fn setup() -> Setup {
    setup_with(Vec::new()).await
}

/// [`setup`], with the relay also reached at `public_urls` (a proxy in front of it).
pub async fn setup_with(public_urls: Vec<String>) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let (agent, alice, bob) = (Keys::generate(), Keys::generate(), Keys::generate());
    let mut rc = RelayConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        dir.path().join("relay.sqlite"),
    );
    rc.rooms = vec![
        RoomConfig {
            id: "lab".into(),
            name: "Lab".into(),
            closed: true,
            private: false,
            members: vec![alice.public_key(), bob.public_key()],
            admins: vec![],
        },
        RoomConfig {
            id: "vault".into(),
            name: "Vault".into(),
            closed: true,
            private: true,
            members: vec![alice.public_key(), agent.public_key()],
            admins: vec![],
        },
        RoomConfig {
            id: "home".into(),
            name: "Home".into(),
            closed: true,
            private: false,
            members: vec![alice.public_key()],
            admins: vec![],
        },
    ];
    rc.room_writers.insert(agent.public_key());
    rc.relay_keys = Some(Keys::generate());
    rc.public_urls = public_urls;
    let relay = agentwire_relay::start(rc).await.unwrap();
    Setup {
        _dir: dir,
        relay,
        agent,
        alice,
        bob,
    }
}

pub fn config(url: &str, s: &Setup) -> TaskConfig {
    TaskConfig {
        relay: url.to_string(),
        watch: ["lab".to_string(), "vault".to_string()].into(),
        allowed: [s.alice.public_key(), s.bob.public_key()].into(),
        home: Some("home".into()),
        progress_interval: Duration::from_millis(700),
        question_window: Duration::from_secs(60),
        backlog_horizon: Duration::from_secs(600),
        max_running: DEFAULT_MAX_RUNNING_TASKS,
        merge_waiting: true,
        legacy_cards: false,
        verified_relay: true,
        max_request_age: None,
    }
}

pub async fn adapter(
    dir: &Path,
    config: TaskConfig,
    agent: &Keys,
) -> (Arc<Engine>, Arc<TaskAdapter>) {
    adapter_with(dir, config, agent, Arc::new(DemoAgent)).await
}

/// [`adapter`] serving `serves` (the demo agent there).
pub async fn adapter_with(
    dir: &Path,
    config: TaskConfig,
    agent: &Keys,
    serves: Arc<dyn Agent>,
) -> (Arc<Engine>, Arc<TaskAdapter>) {
    let journal = Arc::new(SqliteJournal::open(&dir.join("journal.sqlite")).unwrap());
    let engine = Engine::new(journal, serves);
    let adapter =
        TaskAdapter::start(config, Arc::new(Crypto::new(agent.clone())), engine.clone()).await;
    let fronts: Vec<Arc<dyn Front>> = vec![adapter.clone()];
    engine.recover_fronts(&fronts).await.unwrap();
    (engine, adapter)
}

/// A relay, an adapter on it with `change` made to the test configuration, and Alice in the room.
pub struct Running {
    pub s: Setup,
    pub url: String,
    pub engine: Arc<Engine>,
    pub _adapter: Arc<TaskAdapter>,
    pub alice: Person,
}

pub async fn running(change: impl FnOnce(&mut TaskConfig)) -> Running {
    let s = setup().await;
    let url = s.relay.url();
    let mut c = config(&url, &s);
    change(&mut c);
    let (engine, adapter) = adapter(s._dir.path(), c, &s.agent).await;
    let alice = Person::join(&url, s.alice.clone()).await;
    Running {
        s,
        url,
        engine,
        _adapter: adapter,
        alice,
    }
}

/// The NIP-22 tags of an answer to question card `card` of `agent`.
pub fn answer_tags(card: &EventId, agent: &PublicKey) -> Vec<Tag> {
    let (card, agent) = (card.to_hex(), agent.to_hex());
    vec![
        tag(&["E", &card]),
        tag(&["e", &card]),
        tag(&["K", "9"]),
        tag(&["k", "9"]),
        tag(&["P", &agent]),
        tag(&["p", &agent]),
        tag(&["h", "lab"]),
    ]
}

impl Person {
    /// The next tiny agent question card.
    pub async fn question_card(&mut self) -> Event {
        self.next(WAIT, |e| {
            e.kind.as_u16() == 9 && values(e, "tinyagent") == ["1"]
        })
        .await
        .expect("a question card")
    }
}

/// Whether an event is a task's terminal (43004 or 43006).
pub fn is_terminal(ev: &Event) -> bool {
    matches!(ev.kind.as_u16(), 43004 | 43006)
}

/// A proxy on `listener` in front of the relay that refuses the first event it sees that `refuse` picks
/// (`OK false`), passing everything else through; how many it picked.
pub async fn refusing_proxy(
    listener: tokio::net::TcpListener,
    upstream: String,
    refuse: fn(&Event) -> bool,
) -> (String, Arc<AtomicUsize>) {
    let url = format!("ws://{}", listener.local_addr().unwrap());
    let refused = Arc::new(AtomicUsize::new(0));
    let count = refused.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let upstream = upstream.clone();
            let refused = count.clone();
            tokio::spawn(async move {
                let Ok(mut client) = tokio_tungstenite::accept_async(stream).await else {
                    return;
                };
                let (mut relay, _) = tokio_tungstenite::connect_async(upstream.as_str())
                    .await
                    .unwrap();
                loop {
                    tokio::select! {
                        m = client.next() => match m {
                            Some(Ok(Message::Text(t))) => {
                                if let Ok(ClientMessage::Event(ev)) = ClientMessage::from_json(t.as_str()) {
                                    if refuse(&ev) && refused.fetch_add(1, Ordering::SeqCst) == 0 {
                                        let no = RelayMessage::ok(ev.id, false, "error: refused once by the test proxy");
                                        let _ = client.send(Message::text(no.as_json())).await;
                                        continue;
                                    }
                                }
                                if relay.send(Message::Text(t)).await.is_err() { return }
                            }
                            Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                            Some(Ok(other)) => { let _ = relay.send(other).await; }
                        },
                        m = relay.next() => match m {
                            Some(Ok(m)) => if client.send(m).await.is_err() { return },
                            _ => return,
                        },
                    }
                }
            });
        }
    });
    (url, refused)
}
