//! A NIP-XX agent on some relay, reached as its client (`kind = "nipxx"`).

use agentwire_core::{
    ConversationId, Failure, Outcome, StatusState, TurnEvent, TurnFailure, TurnResult,
};
use agentwire_engine::{cancelled, Agent, AgentCard, TurnContext, TurnInput};
use agentwire_nostr::client::{
    self, AskRequest, CancelReason, CancelRequest, ClientError, Offer, Terminal, Update,
};
use agentwire_nostr::crypto::Crypto;
use agentwire_nostr::nipxx::codes::ErrorCode;
use agentwire_nostr::nipxx::payload::{InfoPayload, PromptPayload};
use agentwire_nostr::relay_conn::RelayConn;
use futures_util::future::BoxFuture;
use nostr::prelude::{EventId, PublicKey};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// How long an agent's ai.info is believed before it is read again: five minutes.
pub const INFO_TTL: Duration = Duration::from_secs(300);
/// How long a cancelled run has to end there before this turn ends cancelled anyway.
pub const CANCEL_GRACE: Duration = Duration::from_secs(5);
/// The largest prompt sent when the agent announces no `max_prompt_bytes`: what one NIP-44 message holds,
/// less room for the payload around it.
pub const DEFAULT_MAX_PROMPT_BYTES: usize = 60_000;
/// The model name the card offers when the agent names none.
pub const REMOTE_MODEL: &str = "nipxx";

/// How a remote NIP-XX agent is reached.
#[derive(Clone)]
pub struct NipxxRemoteSettings {
    /// The agent's key.
    pub agent: PublicKey,
    /// Its relays, tried in order.
    pub relays: Vec<String>,
    /// This daemon's key as its client.
    pub keys: nostr::prelude::Keys,
    /// How long a turn may take there.
    pub timeout: Duration,
}

/// A remote NIP-XX agent.
pub struct NipxxRemote {
    name: String,
    agent: PublicKey,
    relays: Vec<String>,
    crypto: Arc<Crypto>,
    timeout: Duration,
    offer: Arc<Mutex<Option<(Instant, Offer)>>>,
    /// When this process made the agent: a turn a crash cut off had its prompt sent before.
    started: nostr::prelude::Timestamp,
}

impl NipxxRemote {
    /// The agent `name`, reached as `settings` say.
    pub fn new(name: impl Into<String>, settings: NipxxRemoteSettings) -> Self {
        NipxxRemote {
            name: name.into(),
            agent: settings.agent,
            relays: settings.relays,
            crypto: Arc::new(Crypto::new(settings.keys)),
            timeout: settings.timeout,
            offer: Default::default(),
            started: nostr::prelude::Timestamp::now(),
        }
    }
}

/// The session a conversation is there: the same for every turn of it, after a restart too.
pub fn session_of(conversation: &ConversationId) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, conversation.as_str().as_bytes());
    let hex: String = digest.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("session:{hex}")
}

/// This turn's failure for the remote run's error code: the same meaning where there is one.
pub fn failure_of(code: &ErrorCode, message: &str) -> Failure {
    let (failure, said) = match code {
        ErrorCode::Cancelled => (TurnFailure::Cancelled, None),
        ErrorCode::ModelUnavailable => (TurnFailure::ModelUnavailable, None),
        ErrorCode::RateLimit => (TurnFailure::ProviderBusy, None),
        ErrorCode::ToolError => (TurnFailure::ToolError, None),
        ErrorCode::EmptyResponse => (TurnFailure::EmptyResponse, None),
        ErrorCode::UnsupportedFeature => (TurnFailure::UnsupportedFeature, None),
        other => (TurnFailure::AgentFailed, Some(other.as_str())),
    };
    let message = match said {
        Some(code) => format!("the remote agent answered {code}: {message}"),
        None => message.to_string(),
    };
    Failure::new(failure, message)
}

/// Ids for the remote run's tool calls (NIP-XX telemetry names a tool, not a call): a start opens one, the
/// next result of that tool closes the oldest still open.
#[derive(Default)]
struct ToolIds {
    open: std::collections::HashMap<String, std::collections::VecDeque<String>>,
    n: u64,
}

impl ToolIds {
    fn start(&mut self, name: &str) -> String {
        self.n += 1;
        let id = format!("{name}-{}", self.n);
        let open = self.open.entry(name.to_string()).or_default();
        // A remote agent that never closes its calls does not grow this without bound.
        if open.len() >= MAX_OPEN_TOOL_CALLS {
            open.pop_front();
        }
        open.push_back(id.clone());
        id
    }

    fn end(&mut self, name: &str) -> String {
        self.open
            .get_mut(name)
            .and_then(|q| q.pop_front())
            .unwrap_or_else(|| {
                self.n += 1;
                format!("{name}-{}", self.n)
            })
    }
}

/// The most open calls of one tool remembered in a turn.
const MAX_OPEN_TOOL_CALLS: usize = 64;

/// This turn's events for one update of the remote run.
fn events_of(u: &Update, tools: &mut ToolIds) -> Vec<TurnEvent> {
    match u {
        Update::Text(t) => vec![TurnEvent::Text { text: t.clone() }],
        Update::Thinking(t) => vec![TurnEvent::Thinking { text: t.clone() }],
        Update::Status(s) => vec![TurnEvent::Status {
            state: StatusState::Thinking,
            progress: s.progress.map(|p| p.min(100) as u8),
            info: s.info.clone(),
            usage: None,
        }],
        Update::Tool(t) => {
            let name = t.name.clone().unwrap_or_else(|| "tool".into());
            match t.phase.as_deref() {
                Some("result") => vec![TurnEvent::ToolResult {
                    call_id: tools.end(&name),
                    name,
                    output: t.output.clone().unwrap_or(serde_json::Value::Null),
                    success: t.success.unwrap_or(true),
                    duration_ms: t.duration_ms.unwrap_or(0),
                }],
                _ => vec![TurnEvent::ToolCall {
                    call_id: tools.start(&name),
                    name,
                    arguments: t.arguments.clone().unwrap_or(serde_json::json!({})),
                }],
            }
        }
        Update::Gap | Update::InvalidSequence { .. } | Update::Terminal => vec![],
    }
}

fn fail(code: TurnFailure, message: impl Into<String>) -> Outcome {
    Outcome::Failure(Failure::new(code, message))
}

/// Why none of a remote agent's relays could be connected to ([`connect_any`]).
#[derive(Debug, thiserror::Error)]
enum ConnectError {
    /// It has no relays.
    #[error("no relay is configured")]
    NoRelay,
    /// The last relay tried could not be reached.
    #[error("{0}")]
    Relay(#[source] ClientError),
}

/// Connects to the first of `relays` that answers.
async fn connect_any(
    relays: &[String],
) -> Result<
    (
        RelayConn,
        mpsc::Receiver<agentwire_nostr::relay_conn::Incoming>,
    ),
    ConnectError,
> {
    let mut last = ConnectError::NoRelay;
    for url in relays {
        match client::connect(url).await {
            Ok(c) => return Ok(c),
            Err(e) => last = ConnectError::Relay(e),
        }
    }
    Err(last)
}

/// Sends the run an ai.cancel when the engine stops waiting for it (its turn cancelled, its future dropped).
struct CancelOnDrop(Option<(RelayConn, Arc<Crypto>, CancelRequest)>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some((conn, crypto, req)) = self.0.take() {
            tokio::spawn(async move {
                if let Err(e) = client::cancel(&conn, &crypto, &req).await {
                    tracing::info!(error = %e, "could not cancel a remote NIP-XX run");
                }
            });
        }
    }
}

impl Agent for NipxxRemote {
    fn card(&self) -> AgentCard {
        let offer = self
            .offer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .map(|(_, o)| o);
        let model = offer
            .as_ref()
            .and_then(|o| o.default_model.clone())
            .unwrap_or_else(|| REMOTE_MODEL.into());
        AgentCard {
            name: self.name.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: format!(
                "the NIP-XX agent {} on {}",
                self.agent.to_hex(),
                self.relays.join(", ")
            ),
            models: vec![model.clone()],
            default_model: model,
            tools: vec![],
            max_prompt_bytes: offer
                .and_then(|o| o.max_prompt_bytes)
                .map(|b| b as usize)
                .unwrap_or(DEFAULT_MAX_PROMPT_BYTES),
            max_context_tokens: 0,
        }
    }

    fn interrupted(&self, turn: &TurnInput) -> BoxFuture<'static, ()> {
        let (agent, relays, crypto, name, started) = (
            self.agent,
            self.relays.clone(),
            self.crypto.clone(),
            self.name.clone(),
            self.started,
        );
        let (conversation, request) = (turn.conversation_id.clone(), turn.request_id.clone());
        Box::pin(async move {
            match cancel_interrupted(agent, relays, crypto, conversation, started).await {
                Ok(true) => {
                    tracing::info!(agent = %name, %request, "cancelled the remote run of a turn a crash cut off")
                }
                Ok(false) => {}
                Err(why) => {
                    tracing::warn!(agent = %name, %request, %why, "could not cancel the remote run of a turn a crash cut off")
                }
            }
        })
    }

    fn run(&self, input: TurnInput, ctx: TurnContext) -> BoxFuture<'static, Outcome> {
        let (agent, relays, crypto, timeout, cached) = (
            self.agent,
            self.relays.clone(),
            self.crypto.clone(),
            self.timeout,
            self.offer.clone(),
        );
        Box::pin(async move {
            let (conn, mut incoming) = match connect_any(&relays).await {
                Ok(c) => c,
                Err(e) => {
                    return fail(
                        TurnFailure::ModelUnavailable,
                        format!("the remote agent cannot be reached: {e}"),
                    )
                }
            };
            let fresh = cached
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
                .filter(|(at, _)| at.elapsed() < INFO_TTL)
                .map(|(_, o)| o);
            let offer = match fresh {
                Some(o) => o,
                None => {
                    let info = match client::info(&conn, &mut incoming, &agent).await {
                        Ok(i) => i,
                        Err(e) => {
                            return fail(
                                TurnFailure::ModelUnavailable,
                                format!("the remote agent's ai.info cannot be read: {e}"),
                            )
                        }
                    };
                    let info = info.and_then(|ev| InfoPayload::validate(&ev.content).ok());
                    let o = Offer::of(info.as_ref());
                    *cached.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some((Instant::now(), o.clone()));
                    o
                }
            };
            let wrap = offer.nip59 && !offer.nip44;
            let prompt = PromptPayload::new(input.message.clone());
            if let Err(why) = offer.check(&prompt, wrap) {
                return fail(
                    TurnFailure::UnsupportedFeature,
                    format!("the remote agent would refuse this prompt: {why}"),
                );
            }
            let session = session_of(&input.conversation_id);
            let req = AskRequest {
                agent,
                session: Some(session.clone()),
                prompt,
                timeout,
                wrap,
                // The first terminal is the turn's: a cancel here ends the turn cancelled anyway, so no
                // newer terminal is waited for (a person's client waits 150 ms for a response/cancel race).
                settle: std::time::Duration::ZERO,
            };
            let (tx, mut rx) = mpsc::unbounded_channel::<Update>();
            let sent: Arc<Mutex<Option<EventId>>> = Default::default();
            let mut guard = CancelOnDrop(None);
            let cancel_of = |prompt: EventId, reason| CancelRequest {
                agent,
                prompt,
                session: session.clone(),
                wrap,
                reason,
            };
            let asking = {
                let sent = sent.clone();
                let (conn, crypto) = (conn.clone(), crypto.clone());
                async move {
                    client::ask(
                        &conn,
                        &mut incoming,
                        &crypto,
                        req,
                        |id| *sent.lock().unwrap_or_else(|p| p.into_inner()) = Some(*id),
                        |u| {
                            let _ = tx.send(u.clone());
                        },
                    )
                    .await
                }
            };
            tokio::pin!(asking);
            let mut cancel = ctx.cancel.clone();
            let mut tools = ToolIds::default();
            let mut cancelling: Option<tokio::time::Instant> = None;
            let result = loop {
                if guard.0.is_none() {
                    if let Some(id) = *sent.lock().unwrap_or_else(|p| p.into_inner()) {
                        guard.0 = Some((
                            conn.clone(),
                            crypto.clone(),
                            cancel_of(id, CancelReason::UserCancel),
                        ));
                    }
                }
                let deadline = cancelling;
                tokio::select! {
                    biased;
                    Some(u) = rx.recv() => {
                        for ev in events_of(&u, &mut tools) {
                            let _ = ctx.events.send(ev).await;
                        }
                    }
                    r = &mut asking => break r,
                    _ = cancelled(&mut cancel), if deadline.is_none() => {
                        let id = *sent.lock().unwrap_or_else(|p| p.into_inner());
                        if let Some(id) = id {
                            let _ = client::cancel(&conn, &crypto, &cancel_of(id, CancelReason::UserCancel)).await;
                        }
                        cancelling = Some(tokio::time::Instant::now() + CANCEL_GRACE);
                    }
                    () = async move {
                        match deadline {
                            Some(at) => tokio::time::sleep_until(at).await,
                            None => std::future::pending().await,
                        }
                    } => {
                        // The guard stays: a prompt published after the cancel went out (its id not known
                        // then) is cancelled when the turn is dropped.
                        return fail(TurnFailure::Cancelled, "cancelled");
                    }
                }
            };
            guard.0 = None;
            while let Ok(u) = rx.try_recv() {
                for ev in events_of(&u, &mut tools) {
                    let _ = ctx.events.send(ev).await;
                }
            }
            match result {
                Ok(Terminal::Response(r)) => Outcome::Result(TurnResult {
                    text: Terminal::Response(r).text().unwrap_or_default(),
                    usage: Default::default(),
                    stop_reason: "stop".into(),
                }),
                Ok(Terminal::Error(e)) => Outcome::Failure(failure_of(&e.code, &e.message)),
                Err(ClientError::Timeout(d)) => {
                    let id = *sent.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(id) = id {
                        let _ =
                            client::cancel(&conn, &crypto, &cancel_of(id, CancelReason::Timeout))
                                .await;
                    }
                    fail(
                        TurnFailure::ModelUnavailable,
                        format!("the remote agent did not answer within {} s", d.as_secs()),
                    )
                }
                Err(e) => fail(
                    TurnFailure::ModelUnavailable,
                    format!("the remote agent cannot be reached: {e}"),
                ),
            }
        })
    }
}

/// Why the run of a turn a crash cut off could not be cancelled there ([`cancel_interrupted`]).
#[derive(Debug, thiserror::Error)]
enum CancelError {
    /// None of the agent's relays could be reached.
    #[error("{0}")]
    Connect(#[from] ConnectError),
    /// Listing the prompts sent, or sending the cancel, failed.
    #[error("{0}")]
    Client(#[from] ClientError),
}

/// Cancels the run a turn a crash cut off left there: the newest prompt this daemon's key sent in the
/// conversation's session before this process started (a conversation runs one turn at a time, so it is
/// that turn's). A run that ended
/// meanwhile ignores the cancel; a gift-wrapped run cannot be found so (its prompt is a wrap) and runs on.
async fn cancel_interrupted(
    agent: PublicKey,
    relays: Vec<String>,
    crypto: Arc<Crypto>,
    conversation: ConversationId,
    started: nostr::prelude::Timestamp,
) -> Result<bool, CancelError> {
    let (conn, mut incoming) = connect_any(&relays).await?;
    let session = session_of(&conversation);
    let sent = client::sent_prompts(&conn, &mut incoming, &crypto, agent, Some(&session)).await?;
    // Sent before this process started (to the second: a client told `interrupted` asks again after its
    // retry_after, 5 s): a turn of this process's is not the one cut off.
    let Some(newest) = sent.iter().find(|p| p.at <= started) else {
        return Ok(false);
    };
    let req = CancelRequest {
        agent,
        prompt: newest.id,
        session,
        wrap: false,
        reason: CancelReason::UserCancel,
    };
    client::cancel(&conn, &crypto, &req).await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conversation_is_one_session_there_and_another_is_another() {
        let a = ConversationId::new("nipxx:abc").unwrap();
        let b = ConversationId::new("fisk:abc").unwrap();
        assert_eq!(session_of(&a), session_of(&a));
        assert_ne!(session_of(&a), session_of(&b));
        assert_eq!(session_of(&a).len(), "session:".len() + 32);
    }

    #[test]
    fn remote_error_codes_keep_their_meaning() {
        assert_eq!(
            failure_of(&ErrorCode::Cancelled, "x").code,
            TurnFailure::Cancelled
        );
        assert_eq!(
            failure_of(&ErrorCode::RateLimit, "x").code,
            TurnFailure::ProviderBusy
        );
        let f = failure_of(&ErrorCode::InternalError, "boom");
        assert_eq!(f.code, TurnFailure::AgentFailed);
        assert!(
            f.message.contains("INTERNAL_ERROR") && f.message.contains("boom"),
            "{}",
            f.message
        );
    }
}
