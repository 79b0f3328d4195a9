//! Notifications: who a stored event should wake, and a webhook that tells a push service.
//!
//! [`notifications`] is the rule (pure): a tiny agent question card wakes only the asked people (`p`) who are
//! also named by a `mention` tag, so an agent's pending card stays visible without buzzing a phone unless
//! the agent means it; any other room event (one with an `h`) wakes the people its `mention` tags name. The
//! relay's writer hands each one to the configured [`Notifier`] after the event is durable, and never waits
//! for it. [`WebhookNotifier`] POSTs each as a small JSON document, from a bounded queue, with retries.

use crate::tinyagent::{self, first_value, tag_values};
use nostr::event::Event;
use nostr::key::PublicKey;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// The most characters of an event's content a notification carries: enough for a push message's line.
pub const MAX_PREVIEW_CHARS: usize = 200;
/// Notifications waiting for the webhook. Past this new ones are dropped (and counted), so a webhook that
/// is down or slow costs bounded memory and never slows the relay.
pub const MAX_QUEUED_NOTIFICATIONS: usize = 1024;
/// How long one POST may take before it counts as failed: a push service answers in well under a second.
pub const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(5);
/// The waits before the second, third and fourth attempt of a POST that failed (no answer, 408, 429 or
/// 5xx): backoff that rides out a restart of the receiver without holding the queue for long.
pub const WEBHOOK_RETRY_DELAYS: [Duration; 3] = [
    Duration::from_secs(1),
    Duration::from_secs(3),
    Duration::from_secs(9),
];

/// Why someone is notified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// A question card asks them and mentions them.
    Question,
    /// A room event mentions them.
    Mention,
}

/// One person to wake about one event: the webhook's JSON document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Notification {
    /// Who to wake (hex).
    pub recipient: String,
    /// Why.
    pub reason: Reason,
    /// The event (hex).
    pub event_id: String,
    /// Its kind.
    pub kind: u16,
    /// Its author (hex).
    pub author: String,
    /// Its room (`h`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub room: Option<String>,
    /// A question card's subject.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The start of its content.
    pub preview: String,
    /// Its `created_at`.
    pub created_at: u64,
}

/// Takes notifications from the relay's writer thread. Must not block: queue and return.
pub trait Notifier: Send + Sync + std::fmt::Debug + 'static {
    /// One notification.
    fn notify(&self, notification: Notification);
}

fn mentions(event: &Event) -> Vec<PublicKey> {
    let mut keys: Vec<PublicKey> = tag_values(event, "mention")
        .filter_map(|t| t.get(1))
        .filter_map(|v| PublicKey::from_hex(v).ok())
        .collect();
    keys.dedup();
    keys
}

/// Who `event` should wake, and why. A card that is not well formed wakes nobody (the relay refused it).
pub fn notifications(event: &Event) -> Vec<Notification> {
    let (reason, people, subject) = if tinyagent::is_question(event) {
        match tinyagent::question(event) {
            Ok(card) => (Reason::Question, card.to_notify(), card.subject),
            Err(_) => return Vec::new(),
        }
    } else if first_value(event, "h").is_some() {
        (Reason::Mention, mentions(event), None)
    } else {
        return Vec::new();
    };
    let preview: String = event.content.chars().take(MAX_PREVIEW_CHARS).collect();
    people
        .into_iter()
        .filter(|p| *p != event.pubkey)
        .map(|p| Notification {
            recipient: p.to_hex(),
            reason,
            event_id: event.id.to_hex(),
            kind: event.kind.as_u16(),
            author: event.pubkey.to_hex(),
            room: first_value(event, "h").map(str::to_owned),
            subject: subject.clone(),
            preview: preview.clone(),
            created_at: event.created_at.as_secs(),
        })
        .collect()
}

/// A webhook URL that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("webhook {0}")]
pub struct WebhookError(String);

/// Checks a webhook URL: `http://` or `https://` with a host.
pub fn check_webhook_url(url: &str) -> Result<reqwest::Url, WebhookError> {
    let url =
        reqwest::Url::parse(url).map_err(|e| WebhookError(format!("URL is not valid: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(WebhookError(
            "URL must be http:// or https:// with a host".into(),
        ));
    }
    Ok(url)
}

/// `url` with its path and query hidden (they may carry a token): for showing the configuration.
pub fn redacted_webhook_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) if u.path() == "/" && u.query().is_none() => host_of(&u),
        Ok(u) => format!("{}/<redacted>", host_of(&u)),
        Err(_) => "<redacted>".into(),
    }
}

/// The host of `url`, for logs: a webhook URL may carry a token in its path or query, which is never logged.
fn host_of(url: &reqwest::Url) -> String {
    format!(
        "{}://{}{}",
        url.scheme(),
        url.host_str().unwrap_or("?"),
        url.port().map(|p| format!(":{p}")).unwrap_or_default()
    )
}

/// POSTs each notification to a URL, in order, from a bounded queue.
pub struct WebhookNotifier {
    queue: mpsc::Sender<Notification>,
    dropped: Arc<AtomicU64>,
    host: String,
}

impl std::fmt::Debug for WebhookNotifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookNotifier")
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

impl WebhookNotifier {
    /// Starts posting to `url` (`http://` or `https://`), with a queue of [`MAX_QUEUED_NOTIFICATIONS`].
    /// Must be called within a tokio runtime.
    pub fn start(url: &str) -> Result<Arc<Self>, WebhookError> {
        Self::with_queue(url, MAX_QUEUED_NOTIFICATIONS)
    }

    /// Like [`start`](Self::start), with a queue of `capacity`.
    pub fn with_queue(url: &str, capacity: usize) -> Result<Arc<Self>, WebhookError> {
        let url = check_webhook_url(url)?;
        let client = reqwest::Client::builder()
            .timeout(WEBHOOK_TIMEOUT)
            .tls_backend_preconfigured(webhook_tls())
            .build()
            .map_err(|e| WebhookError(format!("HTTP client: {e}")))?;
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let host = host_of(&url);
        tokio::spawn(post_all(client, url, rx));
        Ok(Arc::new(WebhookNotifier {
            queue: tx,
            dropped: Arc::default(),
            host,
        }))
    }

    /// Notifications dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl Notifier for WebhookNotifier {
    fn notify(&self, notification: Notification) {
        if self.queue.try_send(notification).is_err() {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            // Once, then at every power of two, so a long outage does not flood the log.
            if n.is_power_of_two() {
                tracing::warn!(webhook = %self.host, dropped = n, "notification queue full; dropping notifications");
            }
        }
    }
}

/// TLS for `https://` webhooks: Mozilla's roots, with ring (the project's one crypto provider).
fn webhook_tls() -> rustls::ClientConfig {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

async fn post_all(
    client: reqwest::Client,
    url: reqwest::Url,
    mut rx: mpsc::Receiver<Notification>,
) {
    let host = host_of(&url);
    while let Some(n) = rx.recv().await {
        let body = serde_json::to_vec(&n).unwrap_or_default();
        let mut delays = WEBHOOK_RETRY_DELAYS.iter();
        loop {
            let sent = client
                .post(url.clone())
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone())
                .send()
                .await;
            let retry = match sent {
                Ok(r) if r.status().is_success() => break,
                Ok(r) => {
                    let s = r.status();
                    let transient = s.is_server_error() || s.as_u16() == 408 || s.as_u16() == 429;
                    tracing::warn!(webhook = %host, status = s.as_u16(), event = %n.event_id, "webhook refused a notification");
                    transient
                }
                Err(e) => {
                    // reqwest's error names the URL; only its kind is logged.
                    let what = if e.is_timeout() {
                        "timed out"
                    } else if e.is_connect() {
                        "could not connect"
                    } else {
                        "failed"
                    };
                    tracing::warn!(webhook = %host, event = %n.event_id, "webhook POST {what}");
                    true
                }
            };
            match delays.next() {
                Some(d) if retry => tokio::time::sleep(*d).await,
                _ => {
                    tracing::warn!(webhook = %host, event = %n.event_id, "notification given up");
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::event::{EventBuilder, FinalizeEvent, Kind, Tag};
    use nostr::key::Keys;

    fn tag(parts: &[&str]) -> Tag {
        Tag::parse(parts.iter().map(|p| p.to_string()).collect::<Vec<_>>()).unwrap()
    }

    fn card(agent: &Keys, asked: &[PublicKey], mention: &[PublicKey]) -> Event {
        let mut tags = vec![
            tag(&["h", "lab"]),
            tag(&["request", "question"]),
            tag(&["tinyagent", "1"]),
            tag(&["selection", "text"]),
            tag(&["subject", "Deploy"]),
        ];
        for p in asked {
            tags.push(tag(&["p", &p.to_hex()]));
        }
        for m in mention {
            tags.push(tag(&["mention", &m.to_hex()]));
        }
        EventBuilder::new(Kind::Custom(9), "Which branch?")
            .tags(tags)
            .finalize(agent)
            .unwrap()
    }

    #[test]
    fn a_question_wakes_only_the_asked_who_are_mentioned() {
        let agent = Keys::generate();
        let (alice, bob, carol) = (
            Keys::generate().public_key(),
            Keys::generate().public_key(),
            Keys::generate().public_key(),
        );
        // Carol is mentioned but not asked; Bob is asked but not mentioned.
        let ev = card(&agent, &[alice, bob], &[alice, carol]);
        let n = notifications(&ev);
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].recipient, alice.to_hex());
        assert_eq!(n[0].reason, Reason::Question);
        assert_eq!(n[0].subject.as_deref(), Some("Deploy"));
        assert_eq!(n[0].room.as_deref(), Some("lab"));
        assert!(
            notifications(&card(&agent, &[alice, bob], &[])).is_empty(),
            "nobody mentioned"
        );
    }

    #[test]
    fn room_messages_wake_who_they_mention_and_other_events_nobody() {
        let author = Keys::generate();
        let dave = Keys::generate().public_key();
        let long = "x".repeat(500);
        let msg = EventBuilder::new(Kind::Custom(12), long)
            .tags([
                tag(&["h", "lab"]),
                tag(&["mention", &dave.to_hex()]),
                tag(&["p", &author.public_key().to_hex()]),
            ])
            .finalize(&author)
            .unwrap();
        let n = notifications(&msg);
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].reason, Reason::Mention);
        assert_eq!(n[0].preview.chars().count(), MAX_PREVIEW_CHARS);
        let plain = EventBuilder::new(Kind::Custom(1), "hi")
            .tags([tag(&["mention", &dave.to_hex()])])
            .finalize(&author)
            .unwrap();
        assert!(notifications(&plain).is_empty(), "not a room event");
    }

    #[test]
    fn a_webhook_url_must_be_http_with_a_host() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let _guard = rt.enter();
        assert!(WebhookNotifier::start("ftp://example.com/hook").is_err());
        assert!(WebhookNotifier::start("not a url").is_err());
        assert!(WebhookNotifier::start("http://127.0.0.1:9/hook").is_ok());
    }
}
