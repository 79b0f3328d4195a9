//! Rooms, task cards and question cards from the command line (NIP-29 rooms on a relay, the tiny agent
//! interactions spec): `whoami`, `room list | create | add-member`, `task`, `cards`, `answer`. Each
//! connects to the relay of the `serve` running on the data dir (or `--relay`) as the client key, answering
//! NIP-42 challenges so that private rooms can be read.
//!
//! - [`room`]: `whoami` and `room` (moderation, for relay admins);
//! - [`cards`]: `cards` (open questions and running tasks) and `answer`;
//! - [`task`]: `task`, which posts a card and follows it to its end.

mod cards;
mod room;
mod task;

pub(crate) use cards::{answer, cards, AnswerArgs, CardsArgs};
pub(crate) use room::{room, whoami, RoomArgs, WhoamiArgs};
pub(crate) use task::{task, TaskArgs};

use agentwire_nostr::crypto::Crypto;
use agentwire_nostr::relay_conn::{Incoming, RelayConn};
use clap::Args;
use nostr::prelude::{Event, Filter};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// How long a query for stored events may take before what came is used.
const QUERY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a publish may wait for the relay's `OK`.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(10);
/// How long to wait for the relay connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Which relay, as whom.
#[derive(Debug, Args)]
pub(crate) struct RelayTarget {
    /// The relay (ws:// or wss://). Default: the relay of the `serve` running on the data dir.
    #[arg(long, global = true, value_parser = crate::config::relay_url)]
    relay: Option<String>,
    /// A PEM file of CA certificates to trust for a wss:// relay, besides Mozilla's roots.
    #[arg(long, global = true, env = "AGENTWIRE_RELAY_CA_FILE")]
    relay_ca_file: Option<PathBuf>,
    /// Your key file (hex secret); default `client.key` in the data dir, created on first use.
    #[arg(long, global = true)]
    key: Option<PathBuf>,
}

/// A connection to the relay as the client key.
pub(crate) struct Session {
    conn: RelayConn,
    rx: mpsc::Receiver<Incoming>,
    crypto: Arc<Crypto>,
    /// The daemon serving the data dir, if one does.
    serving: Option<crate::serving::Serving>,
    next_sub: u64,
}

/// The client key `--key` names, else the data dir's `client.key` (created on first use).
/// A Nostr tag from its parts, refused with what was wrong.
fn tag(parts: &[&str]) -> Result<nostr::prelude::Tag, String> {
    nostr::prelude::Tag::parse(parts.iter().copied()).map_err(|e| format!("a tag {parts:?}: {e}"))
}

pub(crate) fn client_keys(
    key: Option<&Path>,
    data_dir: &Path,
) -> Result<nostr::prelude::Keys, String> {
    match key {
        Some(p) => {
            let t = std::fs::read_to_string(p)
                .map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            nostr::prelude::Keys::parse(t.trim()).map_err(|e| format!("{}: {e}", p.display()))
        }
        None => crate::keys::load_or_create(data_dir, "client.key"),
    }
}

impl Session {
    /// Connects to `target`'s relay (else the local serve's), as its key.
    pub(crate) async fn open(target: &RelayTarget, data_dir: &Path) -> Result<Session, String> {
        let serving = crate::serving::Serving::find(data_dir);
        let relay = crate::serving::relay(target.relay.as_deref(), &serving)?;
        crate::config::install_relay_ca_file(target.relay_ca_file.as_deref())?;
        let crypto = Arc::new(Crypto::new(client_keys(target.key.as_deref(), data_dir)?));
        let (conn, rx) = RelayConn::connect_authenticated(&relay, crypto.clone());
        if !conn.wait_connected(CONNECT_TIMEOUT).await {
            return Err(format!("the relay {relay} does not answer"));
        }
        Ok(Session {
            conn,
            rx,
            crypto,
            serving: serving.ok(),
            next_sub: 0,
        })
    }

    fn sub_id(&mut self, what: &str) -> String {
        self.next_sub += 1;
        format!("{what}-{}", self.next_sub)
    }

    /// The stored events matching `filters` (signatures checked), up to the relay's end of stored events.
    pub(crate) async fn query(&mut self, filters: Vec<Filter>) -> Result<Vec<Event>, String> {
        let sub = self.sub_id("q");
        self.conn.subscribe(&sub, filters);
        let deadline = tokio::time::Instant::now() + QUERY_TIMEOUT;
        let mut found = Vec::new();
        loop {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(Incoming::Event { sub: s, event })) if s == sub => {
                    if event.verify().is_ok() {
                        found.push(*event);
                    }
                }
                Ok(Some(Incoming::Eose(s))) if s == sub => break,
                Ok(Some(Incoming::Closed { sub: s, message })) if s == sub => {
                    self.conn.unsubscribe(&sub);
                    return Err(format!("the relay refused the query: {message}"));
                }
                Ok(Some(_)) => {}
                Ok(None) => return Err("the relay connection ended".into()),
                Err(_) => break,
            }
        }
        self.conn.unsubscribe(&sub);
        Ok(found)
    }

    /// Signs and publishes `builder`; the relay's refusal, with its reason, is the error.
    pub(crate) async fn publish(
        &self,
        builder: nostr::prelude::EventBuilder,
    ) -> Result<Event, PublishError> {
        let event = self.crypto.sign(builder);
        let ok = tokio::time::timeout(PUBLISH_TIMEOUT, self.conn.publish(&event))
            .await
            .map_err(|_| {
                PublishError::Unsent(format!(
                    "the relay did not answer within {PUBLISH_TIMEOUT:?}"
                ))
            })?
            .map_err(|e| PublishError::Unsent(e.to_string()))?;
        match ok.accepted {
            true => Ok(event),
            false => Err(PublishError::Refused(ok.message)),
        }
    }
}

/// Why a publish did not go through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PublishError {
    /// The relay's `OK false`, with its message (a NIP-01 machine-readable prefix, then the reason).
    Refused(String),
    /// No `OK` came: the connection failed or the relay did not answer in time.
    Unsent(String),
}

impl PublishError {
    /// Whether the relay refused it as a duplicate: for an answer, the question was settled already
    /// (NIP-01 `duplicate:`, which the relay gives a second answer to a settled question card).
    pub(crate) fn is_duplicate(&self) -> bool {
        matches!(self, Self::Refused(m) if m.starts_with("duplicate:"))
    }
}

impl std::fmt::Display for PublishError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // The relay's message is remote text, shown at a terminal.
            Self::Refused(m) => write!(f, "the relay refused it: {}", crate::tabular::printable(m)),
            Self::Unsent(why) => write!(f, "{why}"),
        }
    }
}
