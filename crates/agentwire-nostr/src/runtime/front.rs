//! The NIP-XX side of one run: turns engine events into signed, encrypted run events and delivers the
//! terminal with retries.

use crate::crypto::Crypto;
use crate::nip59;
use crate::nipxx::payload::{
    DeltaPayload, ErrorPayload, ResponsePayload, StatusPayload, ToolCallPayload, Usage,
};
use crate::nipxx::{kinds, tags, ErrorCode};
use crate::relay_conn::RelayConn;
use agentwire_core::{Outcome, StatusState, TurnEvent};
use agentwire_engine::TurnFront;
use nostr::prelude::{Event, EventBuilder, EventId, Kind, PublicKey, Tag};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// When a relay refuses a terminal event (or does not answer), it is sent again after these delays: the
/// spec's "after 1 s and 3 s".
pub const TERMINAL_RETRY_DELAYS: [Duration; 2] = [Duration::from_secs(1), Duration::from_secs(3)];

/// Where a run's events go; journaled as the turn's route.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Route {
    /// The client's public key (hex).
    pub client: String,
    /// The prompt event id (hex).
    pub prompt: String,
    /// The session.
    pub session: String,
    /// The prompt came gift-wrapped (NIP-59), so every event of the run goes back wrapped.
    #[serde(default)]
    pub wrapped: bool,
}

/// The NIP-XX front of one run.
pub struct NipxxFront {
    crypto: Arc<Crypto>,
    relays: Arc<Vec<RelayConn>>,
    client: PublicKey,
    prompt: EventId,
    session: String,
    wrapped: bool,
    seq: AtomicU64,
    /// The terminal event `encode_outcome` built, until `deliver_outcome` sends it.
    encoded: std::sync::Mutex<Option<Event>>,
}

fn now() -> u64 {
    nostr::prelude::Timestamp::now().as_secs()
}

impl NipxxFront {
    /// A front for the run of `prompt` from `client`.
    pub fn new(
        crypto: Arc<Crypto>,
        relays: Arc<Vec<RelayConn>>,
        client: PublicKey,
        prompt: EventId,
        session: String,
        wrapped: bool,
    ) -> Self {
        NipxxFront {
            crypto,
            relays,
            client,
            prompt,
            session,
            wrapped,
            seq: AtomicU64::new(0),
            encoded: std::sync::Mutex::new(None),
        }
    }

    /// A front rebuilt from a journaled route (after a restart).
    pub fn from_route(
        crypto: Arc<Crypto>,
        relays: Arc<Vec<RelayConn>>,
        route: &Route,
    ) -> Option<Self> {
        let client = PublicKey::from_hex(&route.client).ok()?;
        let prompt = EventId::from_hex(&route.prompt).ok()?;
        Some(Self::new(
            crypto,
            relays,
            client,
            prompt,
            route.session.clone(),
            route.wrapped,
        ))
    }

    fn build(&self, kind: u16, payload: &str, extra: Vec<Tag>) -> Option<Event> {
        let content = match self.crypto.encrypt(&self.client, payload) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(prompt = %self.prompt, error = %e, "cannot encrypt a run event");
                return None;
            }
        };
        let mut t = tags::run(&self.client, &self.prompt, &self.session);
        t.extend(extra);
        let builder = EventBuilder::new(Kind::Custom(kind), content).tags(t);
        if !self.wrapped {
            return Some(self.crypto.sign(builder));
        }
        let rumor = nip59::rumor(&self.crypto, builder);
        match nip59::wrap(&self.crypto, &self.client, rumor) {
            Ok(gift) => Some(gift),
            Err(e) => {
                tracing::error!(prompt = %self.prompt, error = %e, "cannot gift-wrap a run event");
                None
            }
        }
    }

    fn send(&self, kind: u16, payload: &str, extra: Vec<Tag>) {
        if let Some(ev) = self.build(kind, payload, extra) {
            for r in self.relays.iter() {
                r.send(&ev);
            }
        }
    }

    fn terminal(&self, outcome: &Outcome) -> Option<Event> {
        match outcome {
            Outcome::Result(r) => {
                let p = ResponsePayload {
                    text: r.text.clone(),
                    timestamp: Some(now()),
                    usage: Some(Usage {
                        input_tokens: r.usage.input_tokens,
                        output_tokens: r.usage.output_tokens,
                    }),
                };
                let json = p.to_json();
                let built = if json.len() > crate::crypto::MAX_NIP44_PLAINTEXT_BYTES {
                    None
                } else {
                    self.build(kinds::RESPONSE, &json, vec![])
                };
                built.or_else(|| {
                    let holder = if self.wrapped {
                        "one NIP-44 message inside a NIP-59 seal (about 28,600 bytes of response JSON)"
                    } else {
                        "one NIP-44 message (65,535 bytes of JSON)"
                    };
                    let e = ErrorPayload {
                        code: ErrorCode::InternalError,
                        message: format!(
                            "the response of {} bytes exceeds what {holder} holds",
                            r.text.len()
                        ),
                        retry_after: None,
                        details: None,
                    };
                    self.build(kinds::ERROR, &e.to_json(), vec![])
                })
            }
            Outcome::Failure(f) => {
                let e = ErrorPayload {
                    code: ErrorCode::from(&f.code),
                    message: if f.message.is_empty() {
                        "failed".into()
                    } else {
                        f.message.clone()
                    },
                    retry_after: f.retry_after.filter(|s| *s >= 1),
                    details: Some(serde_json::json!({
                        "usage": { "input_tokens": f.usage.input_tokens, "output_tokens": f.usage.output_tokens }
                    })),
                };
                self.build(kinds::ERROR, &e.to_json(), vec![])
            }
        }
    }
}

impl TurnFront for NipxxFront {
    fn accepted(&self, queued: bool) {
        // The agent's own first event acknowledges a run that starts at once; a queued run says so.
        if queued {
            let p = StatusPayload {
                state: "thinking".into(),
                progress: Some(0),
                info: Some("queued behind an earlier run of this session".into()),
            };
            self.send(kinds::STATUS, &p.to_json(), vec![]);
        }
    }

    fn event(&self, event: TurnEvent) {
        match event {
            TurnEvent::Status {
                state,
                progress,
                info,
            } => {
                let state = match state {
                    StatusState::Thinking => "thinking",
                    StatusState::ToolUse => "tool_use",
                    StatusState::Done => "done",
                };
                let p = StatusPayload {
                    state: state.into(),
                    progress: progress.map(u64::from),
                    info,
                };
                self.send(kinds::STATUS, &p.to_json(), vec![]);
            }
            TurnEvent::Text { text } => {
                let seq = self.seq.fetch_add(1, Ordering::Relaxed);
                let p = DeltaPayload {
                    text,
                    seq: Some(seq),
                    timestamp: Some(now()),
                };
                self.send(kinds::DELTA, &p.to_json(), vec![]);
            }
            TurnEvent::Thinking { text } | TurnEvent::Warning { text } => {
                let p = StatusPayload {
                    state: "thinking".into(),
                    progress: None,
                    info: Some(text),
                };
                self.send(kinds::STATUS, &p.to_json(), vec![]);
            }
            TurnEvent::ToolCall {
                name, arguments, ..
            } => {
                let p = ToolCallPayload {
                    name: Some(name.clone()),
                    phase: Some("start".into()),
                    // The privacy-first profile discloses no tool arguments or output.
                    arguments: Some(arguments).filter(|a| a.is_object() && !self.wrapped),
                    output: None,
                    success: None,
                    duration_ms: None,
                    text: None,
                };
                let hints = vec![Tag::custom("tool", [name]), Tag::custom("phase", ["start"])];
                self.send(kinds::TOOL_CALL, &p.to_json(), hints);
            }
            TurnEvent::ToolResult {
                name,
                output,
                success,
                duration_ms,
                ..
            } => {
                let p = ToolCallPayload {
                    name: Some(name.clone()),
                    phase: Some("result".into()),
                    arguments: None,
                    output: Some(output).filter(|o| o.is_object() && !self.wrapped),
                    success: Some(success),
                    duration_ms: Some(duration_ms),
                    text: None,
                };
                let hints = vec![
                    Tag::custom("tool", [name]),
                    Tag::custom("phase", ["result"]),
                ];
                self.send(kinds::TOOL_CALL, &p.to_json(), hints);
            }
        }
    }

    fn encode_outcome(&self, outcome: &Outcome) -> Option<String> {
        let event = self.terminal(outcome)?;
        let json = event.as_json();
        // Kept for `deliver_outcome`, which sends exactly this event (no parsing it back from the JSON).
        *self.encoded.lock().unwrap_or_else(|p| p.into_inner()) = Some(event);
        Some(json)
    }

    fn deliver_outcome(&self, outcome: &Outcome, wire: Option<&str>) {
        let kept = self
            .encoded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        // The engine hands back what `encode_outcome` returned, so the kept event is that wire form.
        let event = match kept
            .filter(|_| wire.is_some())
            .or_else(|| wire.and_then(|w| Event::from_json(w).ok()))
        {
            Some(e) => e,
            None => match self.terminal(outcome) {
                Some(e) => e,
                None => return,
            },
        };
        deliver_terminal(self.relays.clone(), event);
    }
}

/// Publishes a terminal event to every relay, sending it again after 1 s and 3 s to a relay that refuses it
/// or does not answer.
pub fn deliver_terminal(relays: Arc<Vec<RelayConn>>, event: Event) {
    for relay in relays.iter() {
        let relay = relay.clone();
        let event = event.clone();
        tokio::spawn(async move {
            let mut delays = TERMINAL_RETRY_DELAYS.iter();
            loop {
                match relay.publish(&event).await {
                    Ok(ok) if ok.accepted => return,
                    Ok(ok) => {
                        tracing::warn!(relay = relay.url(), event = %event.id, message = %ok.message, "relay refused a terminal event")
                    }
                    Err(e) => {
                        tracing::warn!(relay = relay.url(), event = %event.id, error = %e, "terminal event not confirmed")
                    }
                }
                match delays.next() {
                    Some(d) => tokio::time::sleep(*d).await,
                    None => {
                        tracing::error!(relay = relay.url(), event = %event.id, "giving up on a terminal event after retries");
                        return;
                    }
                }
            }
        });
    }
}
