//! The NIP-XX agent runtime: reads prompts and cancels addressed to the agent from its relays, validates
//! them by every rule of the spec, and serves them through the engine. Publishes ai.info.

mod front;

pub use front::{deliver_terminal, NipxxFront, Outbox, Route, TERMINAL_RETRY_DELAYS};

use crate::crypto::Crypto;
use crate::nipxx::admission::{self, Offer};
use crate::nipxx::budget::UnwrapBudget;
use crate::nipxx::payload::{CancelPayload, InfoPayload};
use crate::nipxx::policy::{RateLimit, SenderPolicy};
use crate::nipxx::{kinds, tags, Message, Violation};
use crate::relay_conn::{Incoming, RelayConn};
use agentwire_core::{ConversationId, Failure, FailureCode, RequestId};
use agentwire_engine::StoredTurn;
use agentwire_engine::{
    AgentCard, Engine, Submission, SubmitReply, TurnFront, TurnInput, TurnPolicy,
};
use nostr::prelude::{Event, EventBuilder, Filter, Kind, PublicKey, Tag, Timestamp};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// The protocol name under which NIP-XX turns are journaled.
pub const PROTOCOL: &str = "nipxx";
pub use crate::nipxx::admission::TOOL_SCHEMA_VERSION;

/// Prompts held in memory while the journal cannot write, to serve once it can without a restart. Each is a
/// verified event within the relay's size limit (a prompt is usually well under 1 KiB); past this many,
/// the relays are asked again for the prompts since the oldest one not held.
pub const MAX_DEFERRED_PROMPTS: usize = 256;

/// What waits for the journal to write again.
#[derive(Default)]
struct Deferred {
    prompts: Vec<Message>,
    /// The oldest prompt (Unix seconds) that did not fit.
    overflow_since: Option<u64>,
    /// A task waits for the journal.
    watching: bool,
}
/// How often the agent's card is checked for changes (and ai.info republished if it changed): an MCP
/// server coming or going changes its tools, and clients read ai.info before prompting. A check compares two
/// cards in memory; an unchanged card publishes nothing.
pub const INFO_REFRESH: Duration = Duration::from_secs(5);

/// What the runtime needs to know.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Relay URLs to read prompts from and publish to.
    pub relays: Vec<String>,
    /// Only these senders may prompt, when set.
    pub allow: Option<HashSet<PublicKey>>,
    /// These senders are refused.
    pub block: HashSet<PublicKey>,
    /// Per-sender prompt rate.
    pub rate: RateLimit,
    /// Stored prompts younger than this that arrived while the agent was down are served on start.
    pub backlog_horizon: Duration,
    /// The privacy-first profile: take only NIP-59 gift-wrapped prompts (a plain one is refused with
    /// UNSUPPORTED_FEATURE). Off, both forms are taken. Either way each run is answered in the form its
    /// prompt came in.
    pub nip59: bool,
    /// Texts in the compatibility envelope too (`[nipxx] text_envelope`).
    pub text_envelope: bool,
    /// What the agent's tokens cost, for its ai.info (`[agents.<name>.pricing_hints]`).
    pub pricing_hints: Option<crate::nipxx::payload::PricingHints>,
    /// Relays (by URL) that run in this process and have checked every event's id and signature before
    /// passing it on (the embedded relay): their events are not checked a second time.
    pub verified_relays: HashSet<String>,
    /// Prompts older than this are never served, however they arrive: the journal forgets a turn after its
    /// retention, so a prompt re-published after that must not run again. `None`: the journal keeps every
    /// turn.
    pub max_prompt_age: Option<Duration>,
}

/// A running NIP-XX runtime.
pub struct Runtime {
    crypto: Arc<Crypto>,
    engine: Arc<Engine>,
    relays: Arc<Vec<RelayConn>>,
    policy: Mutex<SenderPolicy>,
    card: AgentCard,
    /// Privacy-first: plain prompts are refused.
    privacy_first: bool,
    /// Texts in the compatibility envelope too.
    text_envelope: bool,
    /// Its ai.info's `pricing_hints`.
    pricing_hints: Option<crate::nipxx::payload::PricingHints>,
    /// How much gift-wrap unwrapping each relay connection and the runtime may spend.
    unwraps: Mutex<UnwrapBudget>,
    /// Terminals being published, for a shutdown to wait on.
    outbox: Arc<Outbox>,
    /// Prompts older than this are not served (the backlog horizon, fixed at start).
    serve_since: Timestamp,
    /// Prompts older than this, counted from now, are not served ([`RuntimeConfig::max_prompt_age`]).
    max_prompt_age: Option<Duration>,
    /// Indexes (in `relays`) of relays whose events are verified already.
    verified: Vec<bool>,
    /// Prompts the journal could not take, served once it writes again.
    deferred: Mutex<Deferred>,
}

impl Runtime {
    /// Whether a prompt made at `created_at` may be served: not before the backlog horizon at start, not
    /// older than the journal remembers turns, and not dated further ahead than
    /// [`admission::MAX_FUTURE_SKEW`] (its turn would be forgotten while it is still young).
    fn young_enough(&self, created_at: Timestamp) -> bool {
        admission::dated_within(
            created_at.as_secs(),
            Timestamp::now().as_secs(),
            self.serve_since.as_secs(),
            self.max_prompt_age.map(|age| age.as_secs()),
        )
    }
}

impl agentwire_engine::Front for Runtime {
    fn protocol(&self) -> &'static str {
        PROTOCOL
    }

    fn recovery_front(&self, turn: &StoredTurn) -> Option<Arc<dyn TurnFront>> {
        Runtime::recovery_front(self, turn)
    }

    fn drain(&self, grace: Duration) -> futures_util::future::BoxFuture<'_, usize> {
        Box::pin(self.flush(grace))
    }

    fn stop(&self) -> futures_util::future::BoxFuture<'_, ()> {
        // The relay connections end with the process; prompts left on the relays are the next start's.
        Box::pin(async {})
    }
}

fn violation_failure(v: &Violation, retry_after: Option<u64>) -> Failure {
    let mut f = Failure::new(FailureCode::from(&v.code), v.message.clone());
    f.retry_after = retry_after;
    f
}

impl Runtime {
    /// Connects to the relays, publishes ai.info, and starts serving prompts. (Turns a crash cut off are
    /// ended by the engine's recovery pass, with fronts from [`recovery_front`](Self::recovery_front).)
    pub async fn start(
        config: RuntimeConfig,
        crypto: Arc<Crypto>,
        engine: Arc<Engine>,
    ) -> Arc<Runtime> {
        let (merged_tx, merged_rx) =
            mpsc::channel::<(usize, Incoming)>(crate::relay_conn::INCOMING_QUEUE_DEPTH);
        let mut relays = Vec::new();
        // With one relay its stream is served directly; with several, each is forwarded into one queue.
        let mut single = None;
        for (i, url) in config.relays.iter().enumerate() {
            // Answering NIP-42 challenges as the agent: the embedded relay exempts the agent's connection
            // (from its event rate and from losing live events) only once it has proved the agent's key.
            let (conn, mut rx) = RelayConn::connect_authenticated(url, crypto.clone());
            if config.relays.len() == 1 {
                single = Some(rx);
            } else {
                let tx = merged_tx.clone();
                tokio::spawn(async move {
                    while let Some(m) = rx.recv().await {
                        if tx.send((i, m)).await.is_err() {
                            return;
                        }
                    }
                });
            }
            relays.push(conn);
        }
        drop(merged_tx);
        let card = engine.agent().card();
        let serve_since = Timestamp::from(
            Timestamp::now()
                .as_secs()
                .saturating_sub(config.backlog_horizon.as_secs()),
        );
        let rt = Arc::new(Runtime {
            crypto,
            engine,
            relays: Arc::new(relays),
            policy: Mutex::new(SenderPolicy::new(
                config.allow.clone(),
                config.block.clone(),
                config.rate,
            )),
            card,
            privacy_first: config.nip59,
            text_envelope: config.text_envelope,
            pricing_hints: config.pricing_hints.clone(),
            unwraps: Mutex::new(UnwrapBudget::new(config.relays.len())),
            outbox: Arc::default(),
            serve_since,
            max_prompt_age: config.max_prompt_age,
            verified: config
                .relays
                .iter()
                .map(|u| config.verified_relays.contains(u))
                .collect(),
            deferred: Mutex::new(Deferred::default()),
        });
        for r in rt.relays.iter() {
            if !r.wait_connected(Duration::from_secs(5)).await {
                tracing::warn!(relay = r.url(), "relay not reachable yet; will keep trying");
            }
        }
        rt.publish_info(&rt.card).await;
        for r in rt.relays.iter() {
            rt.subscribe_prompts(r, serve_since, Timestamp::now());
        }
        let this = rt.clone();
        match single {
            Some(rx) => {
                tokio::spawn(async move { this.serve_one(rx).await });
            }
            None => {
                tokio::spawn(async move { this.serve(merged_rx).await });
            }
        }
        for i in 0..rt.relays.len() {
            let this = rt.clone();
            tokio::spawn(async move { this.reannounce_on_reconnect(i).await });
        }
        let this = rt.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(INFO_REFRESH);
            tick.tick().await;
            loop {
                tick.tick().await;
                this.refresh_info().await;
            }
        });
        rt
    }

    /// The relays this runtime uses.
    pub fn relays(&self) -> &Arc<Vec<RelayConn>> {
        &self.relays
    }

    /// After the engine has drained: waits until the terminals still being published are out (or have
    /// used their retries), up to `grace`. Returns how many were left.
    pub async fn flush(&self, grace: Duration) -> usize {
        self.outbox.flush(grace).await
    }

    /// The front that ends a journaled NIP-XX turn a crash cut off: rebuilt from its route.
    pub fn recovery_front(&self, turn: &StoredTurn) -> Option<Arc<dyn TurnFront>> {
        let route: Route = serde_json::from_value(turn.route.clone()).ok()?;
        NipxxFront::from_route(
            self.crypto.clone(),
            self.relays.clone(),
            self.outbox.clone(),
            &route,
            self.text_envelope,
        )
        .map(|f| Arc::new(f) as Arc<dyn TurnFront>)
    }

    /// Opens (or replaces) the prompt, cancel and gift-wrap subscriptions on `relay`, for prompts created
    /// since `prompts_since` and cancels since `cancels_since`.
    fn subscribe_prompts(
        &self,
        relay: &RelayConn,
        prompts_since: Timestamp,
        cancels_since: Timestamp,
    ) {
        let me = self.crypto.public_key();
        relay.subscribe(
            "prompts",
            vec![Filter::new()
                .kind(Kind::Custom(kinds::PROMPT))
                .pubkey(me)
                .since(prompts_since)],
        );
        relay.subscribe(
            "cancels",
            vec![Filter::new()
                .kind(Kind::Custom(kinds::CANCEL))
                .pubkey(me)
                .since(cancels_since)],
        );
        {
            // A wrap's created_at is up to two days before it was sent; the rumor's real time is checked
            // against the horizon once it is unwrapped.
            let wraps_since = prompts_since
                .as_secs()
                .saturating_sub(crate::nip59::MAX_TIMESTAMP_TWEAK.as_secs());
            relay.subscribe(
                "wraps",
                vec![Filter::new()
                    .kind(Kind::Custom(kinds::GIFT_WRAP))
                    .pubkey(me)
                    .since(Timestamp::from(wraps_since))],
            );
        }
    }

    /// A prompt the journal could not take: it gets no answer now. It is held (verified and admitted
    /// already) and submitted again once the journal writes, without a restart; past
    /// [`MAX_DEFERRED_PROMPTS`] the relays are asked again for the prompts since the oldest one not held.
    fn defer_prompt(self: &Arc<Self>, event: Message) {
        if self.engine.journal_writable() {
            // Refused for a reason other than the disk (a corrupt record): holding it would loop.
            tracing::error!(event = %event.id, "the journal refused a prompt; it is not served");
            return;
        }
        let start_watch = {
            let mut d = self.deferred.lock().unwrap_or_else(|p| p.into_inner());
            if d.prompts.len() < MAX_DEFERRED_PROMPTS {
                d.prompts.push(event);
            } else {
                let at = event.created_at.as_secs();
                d.overflow_since = Some(d.overflow_since.map_or(at, |t| t.min(at)));
            }
            !std::mem::replace(&mut d.watching, true)
        };
        if !start_watch {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            let mut writable = this.engine.watch_journal_writable();
            if writable.wait_for(|w| *w).await.is_err() {
                return;
            }
            let (prompts, overflow_since) = {
                let mut d = this.deferred.lock().unwrap_or_else(|p| p.into_inner());
                d.watching = false;
                (std::mem::take(&mut d.prompts), d.overflow_since.take())
            };
            tracing::info!(
                prompts = prompts.len(),
                "the journal writes again; serving the prompts it could not take"
            );
            for p in prompts {
                // Admitted once already: not counted against the sender's rate again.
                this.submit_prompt(p, false);
            }
            if let Some(since) = overflow_since {
                let since = Timestamp::from(since.max(this.serve_since.as_secs()));
                for r in this.relays.iter() {
                    this.subscribe_prompts(r, since, Timestamp::now());
                }
            }
        });
    }

    /// The ai.info content for the agent's card.
    pub fn info(
        card: &AgentCard,
        pricing_hints: Option<&crate::nipxx::payload::PricingHints>,
    ) -> InfoPayload {
        let mut schemas = serde_json::Map::new();
        for t in &card.tools {
            let mut schema = serde_json::json!({
                "schema_version": TOOL_SCHEMA_VERSION,
                "description": t.description,
                "requires_approval": t.requires_approval,
                "input_schema": t.input_schema,
            });
            if let Some(o) = &t.output_schema {
                schema["output_schema"] = o.clone();
            }
            schemas.insert(t.name.clone(), schema);
        }
        InfoPayload {
            supports_streaming: true,
            // Gift-wrapped prompts are always taken.
            supports_nip59: true,
            dvm_compatible: false,
            encryption: vec!["nip44".into()],
            supported_models: card.models.clone(),
            default_model: card.default_model.clone(),
            tool_names: card.tools.iter().map(|t| t.name.clone()).collect(),
            tool_schema_version: TOOL_SCHEMA_VERSION,
            max_prompt_bytes: card.max_prompt_bytes as u64,
            max_context_tokens: card.max_context_tokens,
            max_response_bytes: crate::nipxx::mapping::MAX_RESPONSE_BYTES as u64,
            max_response_bytes_nip59: crate::nipxx::mapping::MAX_RESPONSE_BYTES_NIP59 as u64,
            tool_schemas: schemas,
            pricing_hints: pricing_hints.cloned(),
        }
    }

    fn info_event(&self, card: &AgentCard) -> Event {
        let content = Self::info(card, self.pricing_hints.as_ref()).to_json();
        self.crypto.sign(
            EventBuilder::new(Kind::Custom(kinds::INFO), content)
                .tags([Tag::identifier(kinds::INFO_D)]),
        )
    }

    async fn publish_info(&self, card: &AgentCard) {
        let ev = self.info_event(card);
        for r in self.relays.iter() {
            match r.publish(&ev).await {
                Ok(ok) if ok.accepted => {}
                Ok(ok) => {
                    tracing::warn!(relay = r.url(), message = %ok.message, "relay refused ai.info")
                }
                Err(e) => tracing::warn!(relay = r.url(), error = %e, "ai.info not confirmed"),
            }
        }
    }

    /// After a relay connection comes back, ai.info is published on it again: the relay may have lost it.
    /// (The connection proves it is the agent's, for the embedded relay's exemptions, by answering the
    /// relay's NIP-42 challenge, which every reconnect brings.)
    async fn reannounce_on_reconnect(self: Arc<Self>, relay: usize) {
        let conn = &self.relays[relay];
        let mut state = conn.connection_state();
        let mut was_up = *state.borrow_and_update();
        while state.changed().await.is_ok() {
            let up = *state.borrow_and_update();
            if up && !was_up {
                let card = self.engine.agent().card();
                let ev = self.info_event(&card);
                if let Err(e) = conn.publish(&ev).await {
                    tracing::warn!(relay = conn.url(), error = %e, "ai.info not confirmed after reconnecting");
                }
            }
            was_up = up;
        }
    }

    async fn refresh_info(self: &Arc<Self>) {
        let card = self.engine.agent().card();
        if card != self.card {
            tracing::info!("agent capabilities changed; republishing ai.info");
            self.publish_info(&card).await;
        }
    }

    async fn serve_one(self: Arc<Self>, mut rx: mpsc::Receiver<Incoming>) {
        let verified = self.verified.first().copied().unwrap_or(false);
        while let Some(m) = rx.recv().await {
            if let Incoming::Event { event, .. } = m {
                self.handle_checked(*event, 0, verified);
            }
        }
    }

    async fn serve(self: Arc<Self>, mut rx: mpsc::Receiver<(usize, Incoming)>) {
        while let Some((i, m)) = rx.recv().await {
            if let Incoming::Event { event, .. } = m {
                let verified = self.verified.get(i).copied().unwrap_or(false);
                self.handle_checked(*event, i, verified);
            }
        }
    }

    /// Handles one event from a relay. Never panics on bad input; every refusal the spec names is answered
    /// with an ai.error to the (verified) author.
    pub fn handle(self: &Arc<Self>, event: Event) {
        self.handle_checked(event, 0, false)
    }

    /// Like [`handle`](Self::handle), for an event from relay `relay`; `verified`: the event's id and
    /// signature were checked already by a relay in this process.
    fn handle_checked(self: &Arc<Self>, event: Event, relay: usize, verified: bool) {
        let message = if event.kind.as_u16() == kinds::GIFT_WRAP {
            let now = Timestamp::now().as_secs() as f64;
            let mut budget = self.unwraps.lock().unwrap_or_else(|p| p.into_inner());
            if !budget.take(relay, now) {
                let dropped = budget.dropped();
                drop(budget);
                // Logged now and then, not per wrap: a flood must not become a flood of log lines.
                if dropped.is_power_of_two() {
                    tracing::warn!(
                        dropped,
                        "gift wraps past the unwrap budget were dropped unopened"
                    );
                }
                return;
            }
            drop(budget);
            // Unwrapping verifies the wrap and the seal and checks the rumor's author.
            match crate::nip59::unwrap(&self.crypto, &event) {
                Ok(m) => m,
                Err(e) => {
                    tracing::debug!(event = %event.id, error = %e, "dropped a gift wrap that does not open");
                    return;
                }
            }
        } else {
            if !verified && event.verify().is_err() {
                tracing::debug!(event = %event.id, "dropped an event with a bad id or signature");
                return;
            }
            Message::signed(event)
        };
        match message.kind {
            kinds::PROMPT if self.young_enough(message.created_at) => self.handle_prompt(message),
            kinds::PROMPT => {
                tracing::debug!(event = %message.id, created_at = message.created_at.as_secs(), "dropped a prompt dated outside the window it is served in (too old, or too far ahead)");
            }
            kinds::CANCEL => self.handle_cancel(message),
            _ => {}
        }
    }

    fn handle_prompt(self: &Arc<Self>, event: Message) {
        self.submit_prompt(event, true)
    }

    /// Admits and submits a prompt; `rate`: count it against its sender's rate (not for a prompt held
    /// while the journal could not write, which was counted when it arrived).
    fn submit_prompt(self: &Arc<Self>, event: Message, rate: bool) {
        let me = self.crypto.public_key();
        let client = event.author;
        let request_id = match RequestId::new(format!("{PROTOCOL}:{}", event.id.to_hex())) {
            Ok(id) => id,
            Err(_) => return,
        };
        let offer = Offer {
            models: &self.card.models,
            default_model: &self.card.default_model,
            max_prompt_bytes: self.card.max_prompt_bytes,
            wrapped_only: self.privacy_first,
        };
        let admitted = {
            let mut policy = self.policy.lock().unwrap_or_else(|p| p.into_inner());
            admission::admit(
                &event,
                &me,
                rate.then_some(&mut *policy),
                |from, content| self.crypto.decrypt(from, content),
                offer,
                Timestamp::now().as_secs() as f64,
            )
        };
        if let Err(r) = &admitted {
            let mut policy = self.policy.lock().unwrap_or_else(|p| p.into_inner());
            // A sender the allow list names has a rate of its own; only strangers share the budget.
            let listed = policy.allow.as_ref().is_some_and(|a| a.contains(&client));
            if !listed && !policy.answer_refusal(Timestamp::now().as_secs() as f64) {
                tracing::debug!(event = %event.id, code = ?r.violation.code, "dropped a refused prompt past the refusal budget");
                // Not journaled, so counted here: every refusal shows in the metrics.
                let failure = violation_failure(&r.violation, r.retry_after);
                self.engine
                    .watch_hub()
                    .metrics()
                    .refused(PROTOCOL, &failure.code);
                return;
            }
        }
        let session = match &admitted {
            Ok(a) => a.session.clone(),
            Err(r) => r.session.clone(),
        };
        let conversation = ConversationId::new(format!("{PROTOCOL}:{}:{session}", client.to_hex()))
            .unwrap_or_else(|_| {
                ConversationId::new(format!("{PROTOCOL}:{}", client.to_hex()))
                    .expect("hex is a valid id")
            });
        let route = Route {
            client: client.to_hex(),
            prompt: event.id.to_hex(),
            session: session.clone(),
            wrapped: event.wrapped,
        };
        let front = Arc::new(
            NipxxFront::new(
                self.crypto.clone(),
                self.relays.clone(),
                self.outbox.clone(),
                client,
                event.id,
                session,
                event.wrapped,
            )
            .with_text_envelope(self.text_envelope),
        );
        let (message, model, thinking, fallback_models, refusal) = match admitted {
            Ok(a) => {
                // The prompt's fallbacks after the model chosen, as far as this agent offers them.
                let later: Vec<String> = a
                    .payload
                    .fallback_models
                    .iter()
                    .skip_while(|m| **m != a.model)
                    .filter(|m| **m != a.model && self.card.models.contains(m))
                    .cloned()
                    .collect();
                (a.payload.message, a.model, a.payload.thinking, later, None)
            }
            Err(r) => (
                r.message,
                String::new(),
                None,
                Vec::new(),
                Some(violation_failure(&r.violation, r.retry_after)),
            ),
        };
        let sub = Submission {
            input: TurnInput {
                thinking,
                fallback_models,
                ..TurnInput::new(request_id, conversation, message, model)
            },
            protocol: PROTOCOL.into(),
            requester: client.to_hex(),
            route: serde_json::to_value(&route).unwrap_or_default(),
            front: front.clone(),
            // NIP-XX queues a session's runs, drops a cancelled run at once, and has no read-back.
            // A turn that starts at once is first heard of by its events or its answer.
            policy: TurnPolicy {
                accepted_silently: true,
                ..TurnPolicy::default()
            },
            conversation_meta: None,
            // NIP-XX has no slots: a session's runs queue instead.
            slot: None,
        };
        let engine = self.engine.clone();
        let this = self.clone();
        // Kept in case the journal cannot take it (held until it can).
        let held = event;
        let fut = match refusal {
            None => engine.submit(sub),
            Some(f) => {
                let engine = engine.clone();
                Box::pin(async move { engine.refuse(sub, f).await })
            }
        };
        tokio::spawn(async move {
            match fut.await {
                // Not journaled: any answer now could be contradicted when the prompt is served later, so
                // none is given; it is served from the relay once the journal writes again.
                SubmitReply::JournalUnavailable(_) => this.defer_prompt(held),
                // Shutting down: left on the relay, where the backlog horizon serves it after the restart.
                SubmitReply::Draining => {}
                // A resend of a finished run was answered by the front's replay.
                SubmitReply::Accepted { .. }
                | SubmitReply::DuplicateStored(_)
                | SubmitReply::DuplicateLive
                | SubmitReply::Refused(_)
                | SubmitReply::ConversationBusy => {}
            }
        });
    }

    fn handle_cancel(self: &Arc<Self>, event: Message) {
        let me = self.crypto.public_key();
        let t = match tags::cancel_tags(&event, &me) {
            Ok(t) => t,
            Err(v) => {
                tracing::debug!(event = %event.id, error = %v, "ignored a malformed ai.cancel");
                return;
            }
        };
        let plain = match self.crypto.decrypt(&event.author, &event.content) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(event = %event.id, error = %e, "ignored an ai.cancel that does not decrypt");
                return;
            }
        };
        if let Err(v) = CancelPayload::parse(&plain) {
            tracing::debug!(event = %event.id, error = %v, "ignored an ai.cancel with a bad payload");
            return;
        }
        let Some(root) = t.root else { return };
        let Ok(id) = RequestId::new(format!("{PROTOCOL}:{}", root.to_hex())) else {
            return;
        };
        let engine = self.engine.clone();
        let requester = event.author.to_hex();
        tokio::spawn(async move {
            engine.cancel(&id, &requester).await;
        });
    }
}
