//! The NIP-XX side of one run: turns engine events into signed, encrypted run events and delivers the
//! terminal with retries.

use crate::crypto::Crypto;
use crate::nip59;
use crate::nipxx::mapping::{self, RunMessage};
use crate::nipxx::tags;
use crate::relay_conn::RelayConn;
use agentwire_core::{now_secs, Outcome, TurnEvent, TurnResult};
use agentwire_engine::StoredTurn;
use agentwire_engine::TurnFront;
use nostr::prelude::{Event, EventBuilder, EventId, Kind, PublicKey};
use std::sync::Arc;
use std::time::Duration;

/// Why a run event could not be built.
#[derive(Debug, thiserror::Error)]
enum BuildError {
    /// The payload could not be encrypted to the client (NIP-44).
    #[error("cannot encrypt: {0}")]
    Encrypt(#[source] crate::crypto::Nip44Error),
    /// The event could not be sealed and gift-wrapped (NIP-59).
    #[error("cannot gift-wrap: {0}")]
    GiftWrap(#[source] nip59::Nip59Error),
}

/// When a relay refuses a terminal event (or does not answer), it is sent again after these delays: the
/// spec's "after 1 s and 3 s".
pub const TERMINAL_RETRY_DELAYS: [Duration; 2] = [Duration::from_secs(1), Duration::from_secs(3)];

/// Terminal events still being published (with their retries), so that a shutdown can wait for them
/// after the engine has drained.
#[derive(Debug, Default)]
pub struct Outbox {
    in_flight: std::sync::atomic::AtomicUsize,
    idle: tokio::sync::Notify,
}

impl Outbox {
    /// Waits until no terminal is being published, up to `grace`. Returns how many still were.
    pub async fn flush(&self, grace: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            let notified = self.idle.notified();
            let n = self.in_flight.load(std::sync::atomic::Ordering::SeqCst);
            if n == 0 {
                return 0;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.in_flight.load(std::sync::atomic::Ordering::SeqCst);
            }
        }
    }

    /// A terminal is being sent: a shutdown waits for it.
    pub fn start(&self) {
        self.in_flight
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// A terminal has been sent (or given up).
    pub fn done(&self) {
        if self
            .in_flight
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst)
            == 1
        {
            self.idle.notify_waiters();
        }
    }
}

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
    outbox: Arc<Outbox>,
    client: PublicKey,
    prompt: EventId,
    session: String,
    wrapped: bool,
    /// The run's names, when texts go in the compatibility envelope too.
    envelope: Option<mapping::EnvelopeIds>,
    /// The next delta's `seq`.
    seq: std::sync::Mutex<u64>,
    /// The terminal event `encode_outcome` built, until `deliver_outcome` sends it.
    encoded: std::sync::Mutex<Option<Event>>,
}

impl NipxxFront {
    /// A front for the run of `prompt` from `client`.
    pub fn new(
        crypto: Arc<Crypto>,
        relays: Arc<Vec<RelayConn>>,
        outbox: Arc<Outbox>,
        client: PublicKey,
        prompt: EventId,
        session: String,
        wrapped: bool,
    ) -> Self {
        NipxxFront {
            envelope: None,
            crypto,
            relays,
            outbox,
            client,
            prompt,
            session,
            wrapped,
            seq: std::sync::Mutex::new(0),
            encoded: std::sync::Mutex::new(None),
        }
    }

    /// This front with its texts in the compatibility envelope too, when `on`.
    pub fn with_text_envelope(mut self, on: bool) -> Self {
        self.envelope = on.then(|| mapping::EnvelopeIds {
            run_id: self.prompt.to_hex(),
            session_id: self.session.clone(),
        });
        self
    }

    /// A front rebuilt from a journaled route (after a restart), wording its texts as the runtime now does.
    pub fn from_route(
        crypto: Arc<Crypto>,
        relays: Arc<Vec<RelayConn>>,
        outbox: Arc<Outbox>,
        route: &Route,
        text_envelope: bool,
    ) -> Option<Self> {
        let client = PublicKey::from_hex(&route.client).ok()?;
        let prompt = EventId::from_hex(&route.prompt).ok()?;
        Some(
            Self::new(
                crypto,
                relays,
                outbox,
                client,
                prompt,
                route.session.clone(),
                route.wrapped,
            )
            .with_text_envelope(text_envelope),
        )
    }

    fn build(&self, m: RunMessage) -> Option<Event> {
        match self.try_build(m) {
            Ok(ev) => Some(ev),
            Err(why) => {
                tracing::error!(prompt = %self.prompt, error = %why, "cannot build a run event");
                None
            }
        }
    }

    /// The run event carrying `m`, signed (or sealed and gift-wrapped); why not when it does not fit.
    fn try_build(&self, m: RunMessage) -> Result<Event, BuildError> {
        let RunMessage {
            kind,
            payload,
            hints: extra,
        } = m;
        let content = self
            .crypto
            .encrypt(&self.client, &payload)
            .map_err(BuildError::Encrypt)?;
        let mut t = tags::run(&self.client, &self.prompt, &self.session);
        t.extend(extra);
        let builder = EventBuilder::new(Kind::Custom(kind), content).tags(t);
        if !self.wrapped {
            return Ok(self.crypto.sign(builder));
        }
        let rumor = nip59::rumor(&self.crypto, builder);
        nip59::wrap(&self.crypto, &self.client, rumor).map_err(BuildError::GiftWrap)
    }

    /// `m` in the compatibility envelope too, when the front sends it so and the envelope still fits one
    /// message (percent-encoding can triple a text): else the canonical form, which a reader takes as well.
    fn worded(&self, m: RunMessage, now: u64) -> RunMessage {
        match &self.envelope {
            Some(ids) => {
                let enveloped = mapping::in_envelope(m.clone(), ids, now);
                match enveloped.payload.len() <= crate::crypto::MAX_NIP44_PLAINTEXT_BYTES {
                    true => enveloped,
                    false => m,
                }
            }
            None => m,
        }
    }

    fn send(&self, m: RunMessage) {
        if let Some(ev) = self.build(m) {
            for r in self.relays.iter() {
                r.send(&ev);
            }
        }
    }

    fn terminal(&self, outcome: &Outcome) -> Option<Event> {
        let now = now_secs();
        if let Some(ev) = self.fitting(mapping::terminal(outcome, now), now) {
            return Some(ev);
        }
        match outcome {
            // Too large for one message (or for a seal): the answer is cut to what fits, and says so.
            Outcome::Result(r) => self
                .cut_to_fit(r, now)
                .or_else(|| self.build(mapping::oversized(r.text.len(), self.wrapped))),
            Outcome::Failure(_) => None,
        }
    }

    /// The event carrying `m` (worded as the front sends), when it fits one message.
    fn fitting(&self, m: RunMessage, now: u64) -> Option<Event> {
        let m = self.worded(m, now);
        if m.payload.len() > crate::crypto::MAX_NIP44_PLAINTEXT_BYTES {
            return None;
        }
        self.try_build(m).ok()
    }

    /// The response with the longest head of `r`'s answer (cut on a character boundary) that, marked as
    /// cut, fits one message: found by halving, as the encrypted size grows in steps (NIP-44's padding, and
    /// the seal's base64 when gift-wrapped). None only when not even the mark fits.
    fn cut_to_fit(&self, r: &TurnResult, now: u64) -> Option<Event> {
        let whole = r.text.len();
        let at = |end: usize| {
            let cut = TurnResult {
                text: mapping::cut_answer(&r.text[..end], whole),
                usage: r.usage,
                stop_reason: mapping::CUT_STOP_REASON.into(),
            };
            self.fitting(mapping::terminal(&Outcome::Result(cut), now), now)
        };
        // `fits` fits; `over` does not (the whole did not).
        let mut fits = (0, at(0)?);
        let mut over = whole.min(crate::crypto::MAX_NIP44_PLAINTEXT_BYTES + 1);
        loop {
            let mid = r.text.floor_char_boundary(fits.0 + (over - fits.0) / 2);
            if mid <= fits.0 {
                break;
            }
            match at(mid) {
                Some(ev) => fits = (mid, ev),
                None => over = mid,
            }
        }
        tracing::warn!(
            prompt = %self.prompt,
            bytes = whole,
            sent = fits.0,
            "the answer is larger than one NIP-XX response carries: sent cut"
        );
        Some(fits.1)
    }
}

impl TurnFront for NipxxFront {
    fn replay(&self, stored: &StoredTurn) {
        // A resend of a finished run: the journaled terminal again, byte for byte (relays and clients
        // dedupe it by id).
        if let Some(ev) = stored
            .wire
            .as_deref()
            .and_then(|w| Event::from_json(w).ok())
        {
            deliver_terminal(&self.outbox, self.relays.clone(), ev);
        }
    }

    fn accepted(&self, queued: bool) {
        // The agent's own first event acknowledges a run that starts at once; a queued run says so.
        if queued {
            self.send(mapping::queued());
        }
    }

    fn event(&self, event: TurnEvent) {
        let now = now_secs();
        let m = {
            let mut seq = self.seq.lock().unwrap_or_else(|p| p.into_inner());
            mapping::event(event, &mut seq, self.wrapped, now)
        };
        let m = self.worded(m, now);
        self.send(m);
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
        // The engine hands back what `encode_outcome` returned, so the kept event is that wire form; when
        // the journal held another outcome already, its wire form goes out instead.
        let event = match kept
            .filter(|k| wire.is_some_and(|w| w.contains(&k.id.to_hex())))
            .or_else(|| wire.and_then(|w| Event::from_json(w).ok()))
        {
            Some(e) => e,
            None => match self.terminal(outcome) {
                Some(e) => e,
                None => return,
            },
        };
        deliver_terminal(&self.outbox, self.relays.clone(), event);
    }
}

/// Publishes a terminal event to every relay, sending it again after 1 s and 3 s to a relay that refuses it
/// or does not answer; `outbox` counts it until then.
pub fn deliver_terminal(outbox: &Arc<Outbox>, relays: Arc<Vec<RelayConn>>, event: Event) {
    for relay in relays.iter() {
        let relay = relay.clone();
        let event = event.clone();
        let outbox = outbox.clone();
        outbox.start();
        tokio::spawn(async move {
            deliver_to(&relay, &event).await;
            outbox.done();
        });
    }
}

async fn deliver_to(relay: &RelayConn, event: &Event) {
    let mut delays = TERMINAL_RETRY_DELAYS.iter();
    loop {
        match relay.publish(event).await {
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
}
