//! The NIP-XX client: the run view that applies the spec's reconciliation rules (pure), and the async
//! `ask`, `cancel` and `info` operations the CLI uses (`cancel_run`, which also says what became of the
//! run, is in `client/cancel.rs`).

use crate::crypto::Crypto;
use crate::nip59;
use crate::nipxx::payload::{
    CancelPayload, DeltaPayload, ErrorPayload, PromptPayload, ResponsePayload, StatusPayload,
    ToolCallPayload,
};
use crate::nipxx::{envelope, kinds, tags, Message};
use crate::relay_conn::{Incoming, RelayConn};
use nostr::prelude::{Event, EventBuilder, EventId, Filter, Kind, PublicKey, Timestamp};
use std::collections::{BTreeMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

mod cancel;
mod offer;
mod sessions;
pub use cancel::{cancel_run, CancelOutcome, CANCEL_CONFIRM_WAIT, STORED_LOOKUP_WAIT};
pub use offer::Offer;
pub use sessions::{sent_prompts, SentPrompt, MAX_PROMPTS_LISTED};

/// Most distinct events one run view keeps; a run that sends more is misbehaving, and later events are
/// ignored rather than grow memory without bound.
pub const MAX_RUN_EVENTS: usize = 100_000;
/// After the first terminal event, how long `ask` waits for a newer one (a response/cancel race) before it
/// settles on the newest.
pub const TERMINAL_SETTLE: Duration = Duration::from_millis(150);

/// A run's terminal event.
#[derive(Debug, Clone, PartialEq)]
pub enum Terminal {
    /// ai.response.
    Response(ResponsePayload),
    /// ai.error.
    Error(ErrorPayload),
}

impl Terminal {
    /// The final answer text (from the response, unwrapping a compatibility envelope).
    pub fn text(&self) -> Option<String> {
        match self {
            Terminal::Response(r) => Some(
                envelope::text_of(&r.text, envelope::EnvelopeOf::Response)
                    .unwrap_or_else(|| r.text.clone()),
            ),
            Terminal::Error(_) => None,
        }
    }
}

/// What a run view reports as events arrive.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    /// A status event.
    Status(StatusPayload),
    /// Answer text that is now in order (contiguous seq), ready to show.
    Text(String),
    /// The agent's thinking, in order like text: a delta whose compatibility envelope says
    /// `mode=thinking`. Not part of the answer.
    Thinking(String),
    /// A delta is missing: rendering is degraded until the response arrives.
    Gap,
    /// The run's deltas broke their order (the spec's `INVALID_SEQUENCE`): a `seq` sent again with other
    /// text, or a `seq` the agent created before a lower one. Reported once per run; rendering goes on
    /// best-effort and the final text still comes from the response.
    InvalidSequence {
        /// The delta's seq.
        seq: u64,
    },
    /// Tool telemetry, its canonical fields read out of its envelope when it came in text form.
    Tool(ToolCallPayload),
    /// A terminal event was accepted (or replaced an older one).
    Terminal,
}

/// One run as a client sees it, reconciled by the spec's rules: only events of this run from this agent to
/// this client count; duplicates (by id, and by (seq, text)) are dropped; deltas are ordered by
/// (seq, created_at, id); the final text comes from the response; the newest terminal by (created_at, id)
/// wins; nothing is applied after a terminal except a newer terminal.
#[derive(Debug)]
pub struct RunView {
    me: PublicKey,
    agent: PublicKey,
    prompt: EventId,
    seen: HashSet<EventId>,
    /// Each seq seen: when the agent created it, and a hash of its text (a duplicate's must match).
    seen_seq: BTreeMap<u64, (Timestamp, u64)>,
    waiting: BTreeMap<(u64, Timestamp, EventId), Update>,
    next_seq: u64,
    gap_reported: bool,
    invalid_reported: bool,
    /// Joined a run under way ([`RunView::joining`]): its first delta seen starts the order.
    joining: bool,
    terminal: Option<(Timestamp, EventId, Terminal)>,
}

impl RunView {
    /// A view of run `prompt` sent by `me` to `agent`.
    pub fn new(me: PublicKey, agent: PublicKey, prompt: EventId) -> Self {
        RunView {
            me,
            agent,
            prompt,
            seen: HashSet::new(),
            seen_seq: BTreeMap::new(),
            waiting: BTreeMap::new(),
            next_seq: 0,
            gap_reported: false,
            invalid_reported: false,
            joining: false,
            terminal: None,
        }
    }

    /// A view of a run joined part way (`attach`): deltas are ephemeral, so the relay keeps none of those
    /// sent before; the first one seen starts the order instead of seq 0.
    pub fn joining(mut self) -> Self {
        self.joining = true;
        self
    }

    /// The run: its prompt's id.
    pub fn prompt(&self) -> EventId {
        self.prompt
    }

    /// The accepted terminal, if any.
    pub fn terminal(&self) -> Option<&Terminal> {
        self.terminal.as_ref().map(|(_, _, t)| t)
    }

    /// Applies one event, with its decrypted content (`None` if it did not decrypt).
    pub fn apply(&mut self, event: &Message, plaintext: Option<&str>) -> Vec<Update> {
        if event.author != self.agent
            || self.seen.len() >= MAX_RUN_EVENTS
            || !self.seen.insert(event.id)
        {
            return vec![];
        }
        match tags::run_event_tags(event, &self.me) {
            Ok(t) if t.root == Some(self.prompt) => {}
            _ => return vec![],
        }
        let Some(plain) = plaintext else {
            return vec![];
        };
        let kind = event.kind;
        if kind == kinds::RESPONSE || kind == kinds::ERROR {
            let t = if kind == kinds::RESPONSE {
                ResponsePayload::parse(plain).map(Terminal::Response)
            } else {
                ErrorPayload::parse(plain).map(Terminal::Error)
            };
            let Ok(t) = t else { return vec![] };
            let newer = match &self.terminal {
                None => true,
                Some((at, id, _)) => (event.created_at, event.id) > (*at, *id),
            };
            if newer {
                self.terminal = Some((event.created_at, event.id, t));
                return vec![Update::Terminal];
            }
            return vec![];
        }
        if self.terminal.is_some() {
            return vec![];
        }
        match kind {
            kinds::STATUS => StatusPayload::parse(plain)
                .map(|s| vec![Update::Status(s)])
                .unwrap_or_default(),
            kinds::TOOL_CALL => ToolCallPayload::parse(plain)
                .map(|t| vec![Update::Tool(t.read_envelope())])
                .unwrap_or_default(),
            kinds::DELTA => {
                let Ok(d) = DeltaPayload::parse(plain) else {
                    return vec![];
                };
                let (text, thinking) =
                    match envelope::Envelope::read(&d.text, envelope::EnvelopeOf::Delta) {
                        Ok(e) if e.text().is_some() => (
                            e.text().unwrap_or_default().to_string(),
                            e.get("mode") == Some("thinking"),
                        ),
                        _ => (d.text, false),
                    };
                let shown = |text: String| match thinking {
                    true => Update::Thinking(text),
                    false => Update::Text(text),
                };
                match d.seq {
                    // Without seq, show in arrival order.
                    None => vec![shown(text)],
                    Some(seq) => {
                        if self.joining && self.seen_seq.is_empty() {
                            self.next_seq = seq;
                        }
                        let mut out = Vec::new();
                        let broke = match self.seen_seq.get(&seq) {
                            // The same (seq, text) again is a duplicate; other text is a broken order.
                            Some((_, hash)) => *hash != text_hash(&text),
                            None => self.out_of_order(seq, event.created_at),
                        };
                        if broke && !self.invalid_reported {
                            self.invalid_reported = true;
                            out.push(Update::InvalidSequence { seq });
                        }
                        if seq < self.next_seq || self.seen_seq.contains_key(&seq) {
                            return out;
                        }
                        self.seen_seq
                            .insert(seq, (event.created_at, text_hash(&text)));
                        self.waiting
                            .insert((seq, event.created_at, event.id), shown(text));
                        while let Some(entry) = self.waiting.first_entry() {
                            if entry.key().0 != self.next_seq {
                                break;
                            }
                            out.push(entry.remove());
                            self.next_seq += 1;
                        }
                        if !self.waiting.is_empty() && !self.gap_reported {
                            self.gap_reported = true;
                            out.push(Update::Gap);
                        }
                        out
                    }
                }
            }
            _ => vec![],
        }
    }
}

impl RunView {
    /// Whether a delta `seq` created at `at` breaks the order the agent created the others in: a lower seq
    /// created after it, or a higher one before it (seconds apart; the same second is in order).
    fn out_of_order(&self, seq: u64, at: Timestamp) -> bool {
        let lower = self.seen_seq.range(..seq).next_back();
        let higher = self
            .seen_seq
            .range((std::ops::Bound::Excluded(seq), std::ops::Bound::Unbounded))
            .next();
        lower.is_some_and(|(_, (t, _))| *t > at) || higher.is_some_and(|(_, (t, _))| *t < at)
    }
}

fn text_hash(text: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// Why a client operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The relay could not be reached.
    #[error("cannot reach relay {0}")]
    Unreachable(String),
    /// The relay refused our event.
    #[error("relay refused the event: {0}")]
    Refused(String),
    /// No terminal event in time.
    #[error("no answer from the agent within {0:?}")]
    Timeout(Duration),
    /// Something could not be encrypted or published.
    #[error("{0}")]
    Other(String),
}

/// A prompt to send.
#[derive(Debug, Clone)]
pub struct AskRequest {
    /// The agent.
    pub agent: PublicKey,
    /// The session tag, if any.
    pub session: Option<String>,
    /// The prompt payload.
    pub prompt: PromptPayload,
    /// How long to wait for the terminal.
    pub timeout: Duration,
    /// Send the prompt gift-wrapped (NIP-59, the privacy-first profile) and read the wrapped answer.
    pub wrap: bool,
    /// After the first terminal, how long to wait for a newer one (a response/cancel race):
    /// [`TERMINAL_SETTLE`] for a person's client, which may cancel at any time; zero for a client that
    /// takes the first terminal as it comes (a remote agent, whose turn's own cancel decides its end).
    pub settle: Duration,
}

/// A fresh session tag, `session:<32 hex digits>` (the spec's form for a client's own session ids): 128
/// bits of a public key made from the OS's random source and thrown away, so no two sessions share one by
/// chance. The default session, `sender:<pubkey>`, is one conversation for every prompt from a key.
pub fn new_session() -> String {
    let throwaway = nostr::prelude::Keys::generate().public_key().to_hex();
    format!("session:{}", &throwaway[..32])
}

/// The subscription filter for the events of run `prompt` from `agent` to `me`: the run's kinds, or, for a
/// gift-wrapped run, every wrap addressed to `me` (picked out after unwrapping). Wraps are back-dated by up
/// to two days, so the filter looks back that far.
fn run_filter(me: PublicKey, agent: PublicKey, prompt: EventId, wrap: bool) -> Filter {
    if wrap {
        let since = Timestamp::now().as_secs() - nip59::MAX_TIMESTAMP_TWEAK.as_secs();
        Filter::new()
            .kind(Kind::Custom(kinds::GIFT_WRAP))
            .pubkey(me)
            .since(Timestamp::from(since))
    } else {
        Filter::new()
            .kinds(kinds::RUN_KINDS.map(Kind::Custom))
            .pubkey(me)
            .event(prompt)
            .author(agent)
    }
}

/// Connects to a relay and waits for the connection.
pub async fn connect(
    url: &str,
) -> Result<(RelayConn, tokio::sync::mpsc::Receiver<Incoming>), ClientError> {
    let (conn, rx) = RelayConn::connect(url);
    if !conn.wait_connected(Duration::from_secs(5)).await {
        return Err(ClientError::Unreachable(url.to_string()));
    }
    Ok((conn, rx))
}

/// Sends a prompt and follows its run until a terminal, calling `on_prompt` with the prompt id once sent
/// and `on_update` for every update. Returns the newest terminal.
pub async fn ask(
    conn: &RelayConn,
    incoming: &mut tokio::sync::mpsc::Receiver<Incoming>,
    crypto: &Arc<Crypto>,
    req: AskRequest,
    mut on_prompt: impl FnMut(&EventId),
    on_update: impl FnMut(&Update),
) -> Result<Terminal, ClientError> {
    let me = crypto.public_key();
    let content = crypto
        .encrypt(&req.agent, &req.prompt.to_json())
        .map_err(|e| ClientError::Other(e.to_string()))?;
    let builder = EventBuilder::new(Kind::Custom(kinds::PROMPT), content)
        .tags(tags::prompt(&req.agent, req.session.as_deref()));
    let mut copies = Vec::new();
    let (prompt_id, event) = if req.wrap {
        let rumor = nip59::rumor(crypto, builder);
        let id = rumor
            .id
            .ok_or_else(|| ClientError::Other("rumor without an id".into()))?;
        // A copy wrapped to ourselves (as NIP-17 clients keep theirs), so `sessions` finds the run and its
        // first line later: the wrap to the agent is readable by the agent alone.
        let copy = nip59::wrap(crypto, &me, rumor.clone())
            .map_err(|e| ClientError::Other(e.to_string()))?;
        let gift = nip59::wrap(crypto, &req.agent, rumor)
            .map_err(|e| ClientError::Other(e.to_string()))?;
        copies.push(copy);
        (id, gift)
    } else {
        let prompt = crypto.sign(builder);
        (prompt.id, prompt)
    };
    let filter = run_filter(me, req.agent, prompt_id, req.wrap);
    let sub = format!("run-{}", &prompt_id.to_hex()[..16]);
    conn.subscribe(&sub, vec![filter]);
    let ok = conn
        .publish(&event)
        .await
        .map_err(|e| ClientError::Other(e.to_string()))?;
    if !ok.accepted {
        return Err(ClientError::Refused(ok.message));
    }
    for copy in &copies {
        // Best effort: the run goes on without it; only `sessions` would miss its first line.
        if let Err(e) = conn.publish(copy).await {
            tracing::debug!(error = %e, "the prompt's own copy was not stored");
        }
    }
    on_prompt(&prompt_id);
    let view = RunView::new(me, req.agent, prompt_id);
    let waits = Waits {
        timeout: req.timeout,
        settle: req.settle,
    };
    follow(conn, incoming, crypto, view, &sub, waits, on_update).await
}

/// Re-attaches to run `prompt` of `agent` (the spec's recovery recipe: its `#e` and `authors`, the events
/// the relay kept and those still coming) and follows it until its terminal, calling `on_update` for every
/// update. A run asked gift-wrapped cannot be found so (its events are wraps); ask it again instead.
pub async fn attach(
    conn: &RelayConn,
    incoming: &mut tokio::sync::mpsc::Receiver<Incoming>,
    crypto: &Arc<Crypto>,
    agent: PublicKey,
    prompt: EventId,
    timeout: Duration,
    on_update: impl FnMut(&Update),
) -> Result<Terminal, ClientError> {
    let me = crypto.public_key();
    let sub = format!("attach-{}", &prompt.to_hex()[..16]);
    // The run's own events, or, for a gift-wrapped run, the wraps addressed to us (any time: wraps are
    // back-dated), newest first and bounded; the view picks out the run's.
    let wraps = Filter::new()
        .kind(Kind::Custom(kinds::GIFT_WRAP))
        .pubkey(me)
        .limit(sessions::MAX_WRAPS_READ);
    conn.subscribe(&sub, vec![run_filter(me, agent, prompt, false), wraps]);
    let view = RunView::new(me, agent, prompt).joining();
    let waits = Waits {
        timeout,
        settle: TERMINAL_SETTLE,
    };
    follow(conn, incoming, crypto, view, &sub, waits, on_update).await
}

/// How long [`follow`] waits: for the terminal, and after it for a newer one.
struct Waits {
    timeout: Duration,
    settle: Duration,
}

/// Applies the events of subscription `sub` to `view` until its terminal (and `waits.settle` after it, for a
/// newer one) or `timeout`; then ends the subscription.
async fn follow(
    conn: &RelayConn,
    incoming: &mut tokio::sync::mpsc::Receiver<Incoming>,
    crypto: &Arc<Crypto>,
    mut view: RunView,
    sub: &str,
    waits: Waits,
    mut on_update: impl FnMut(&Update),
) -> Result<Terminal, ClientError> {
    let Waits {
        timeout,
        settle: settle_for,
    } = waits;
    let deadline = tokio::time::Instant::now() + timeout;
    let mut settle: Option<tokio::time::Instant> = None;
    loop {
        let until = settle.unwrap_or(deadline);
        let m = match tokio::time::timeout_at(until, incoming.recv()).await {
            Ok(Some(m)) => m,
            Ok(None) => return Err(ClientError::Unreachable(conn.url().to_string())),
            Err(_) => break,
        };
        let Incoming::Event { sub: s, event } = m else {
            continue;
        };
        if s != sub {
            continue;
        }
        let Some(message) = open(crypto, *event) else {
            continue;
        };
        let plain = crypto.decrypt(&message.author, &message.content).ok();
        for u in view.apply(&message, plain.as_deref()) {
            if u == Update::Terminal && settle.is_none() {
                settle = Some(tokio::time::Instant::now() + settle_for);
            }
            on_update(&u);
        }
    }
    conn.unsubscribe(sub);
    view.terminal()
        .cloned()
        .ok_or(ClientError::Timeout(timeout))
}

/// A verified event as a [`Message`]: a signed event whose signature holds, or the opened rumor of a gift
/// wrap addressed to us.
pub fn open(crypto: &Crypto, event: Event) -> Option<Message> {
    if event.kind.as_u16() == kinds::GIFT_WRAP {
        nip59::unwrap(crypto, &event).ok()
    } else {
        event.verify().ok()?;
        Some(Message::signed(event))
    }
}

/// Why a cancel is sent: the ai.cancel payload's `reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReason {
    /// The user asked for it (`user_cancel`).
    UserCancel,
    /// The client gave up waiting (`timeout`).
    Timeout,
}

impl CancelReason {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            CancelReason::UserCancel => "user_cancel",
            CancelReason::Timeout => "timeout",
        }
    }
}

/// An ai.cancel to send: which run, of which agent, in which session, and why.
#[derive(Debug, Clone)]
pub struct CancelRequest {
    /// The agent running the run.
    pub agent: PublicKey,
    /// The run (its prompt's id; the rumor's id for a gift-wrapped prompt).
    pub prompt: EventId,
    /// The session tag the run used.
    pub session: String,
    /// Gift-wrap the cancel (NIP-59), and read the run's wrapped events.
    pub wrap: bool,
    /// Why.
    pub reason: CancelReason,
}

/// Sends an ai.cancel for a run, gift-wrapped when `req.wrap`, and returns once the relay accepted it.
pub async fn cancel(
    conn: &RelayConn,
    crypto: &Crypto,
    req: &CancelRequest,
) -> Result<(), ClientError> {
    let payload = CancelPayload {
        reason: req.reason.as_str().into(),
    }
    .to_json();
    let content = crypto
        .encrypt(&req.agent, &payload)
        .map_err(|e| ClientError::Other(e.to_string()))?;
    let builder = EventBuilder::new(Kind::Custom(kinds::CANCEL), content).tags(tags::run(
        &req.agent,
        &req.prompt,
        &req.session,
    ));
    let ev = if req.wrap {
        nip59::wrap(crypto, &req.agent, nip59::rumor(crypto, builder))
            .map_err(|e| ClientError::Other(e.to_string()))?
    } else {
        crypto.sign(builder)
    };
    let ok = conn
        .publish(&ev)
        .await
        .map_err(|e| ClientError::Other(e.to_string()))?;
    if ok.accepted {
        Ok(())
    } else {
        Err(ClientError::Refused(ok.message))
    }
}

/// Reads the newest valid ai.info of `agent` (by created_at, then id), whatever its `d` tag: the spec's
/// lookup names the kind and the author only (agentwire's own ai.info says `d` = `agent-info`).
pub async fn info(
    conn: &RelayConn,
    incoming: &mut tokio::sync::mpsc::Receiver<Incoming>,
    agent: &PublicKey,
) -> Result<Option<Event>, ClientError> {
    conn.subscribe(
        "info",
        vec![Filter::new().kind(Kind::Custom(kinds::INFO)).author(*agent)],
    );
    let mut best: Option<Event> = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match tokio::time::timeout_at(deadline, incoming.recv()).await {
            Ok(Some(Incoming::Event { sub, event })) if sub == "info" => {
                let ours = event.pubkey == *agent && event.kind == Kind::Custom(kinds::INFO);
                if ours
                    && event.verify().is_ok()
                    && crate::nipxx::payload::InfoPayload::validate(&event.content).is_ok()
                    && best
                        .as_ref()
                        .is_none_or(|b| (event.created_at, event.id) > (b.created_at, b.id))
                {
                    best = Some(*event);
                }
            }
            Ok(Some(Incoming::Eose(sub))) if sub == "info" => break,
            Ok(Some(_)) => {}
            Ok(None) => return Err(ClientError::Unreachable(conn.url().to_string())),
            Err(_) => break,
        }
    }
    conn.unsubscribe("info");
    Ok(best)
}

#[cfg(test)]
mod tests;
