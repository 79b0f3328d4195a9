//! The agent: one ACP process (started on the first turn, started again after it ended), one ACP session
//! per conversation (the conversation's next turn goes to the same session), one `session/prompt` per turn
//! with the session's updates streamed as the turn's events, its permission requests asked through the
//! engine, and a cancel sent as `session/cancel`.

use crate::kept::KeptSessions;
use crate::mapping::{self, ToolCalls};
use crate::process::{Incoming, Launch, Process, StartError};
use agent_client_protocol::v1::schema::{
    CancelNotification, LoadSessionRequest, NewSessionRequest, PromptRequest, PromptResponse,
    RequestPermissionOutcome, RequestPermissionResponse, SessionId,
};
use agentwire_core::{Asked, ConversationId, Failure, Outcome, TurnEvent, TurnFailure, TurnResult};
use agentwire_engine::{cancelled, Agent, AgentCard, TurnContext, TurnInput};
use futures_util::future::BoxFuture;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{oneshot, watch};

/// The model name an ACP agent's card offers: the agent picks its own model, and a prompt naming none
/// gets this one.
pub const ACP_MODEL: &str = "acp";
/// The largest prompt given to an ACP agent: 1 MiB.
pub const MAX_PROMPT_BYTES: usize = 1024 * 1024;
/// The most answer text kept of one turn: 1 MiB, as a command agent's. An agent that says more is asked to
/// stop there (`session/cancel`), and its turn ends with what it said.
pub const MAX_ANSWER_BYTES: usize = 1024 * 1024;
/// How long a cancelled prompt has to end (`stopReason: cancelled`) before the agent's process group is
/// killed: ten seconds, time for an agent to stop its tool and say so.
pub const CANCEL_GRACE: Duration = Duration::from_secs(10);
/// How long `session/new` may take.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a prompt that failed waits for its process's end to be seen (the connection closed, the
/// stderr read to its end), to say why it failed.
const GONE_GRACE: Duration = Duration::from_secs(2);
/// The most conversations with a session kept: the least recently used idle one is forgotten past it (its
/// next turn opens a new session).
pub const MAX_SESSIONS: usize = 256;

/// How an ACP agent runs.
#[derive(Debug, Clone)]
pub struct AcpSettings {
    /// Its process.
    pub launch: Launch,
    /// Where its conversations' sessions are kept across restarts (`None`: not kept).
    pub sessions_file: Option<std::path::PathBuf>,
}

/// A conversation's ACP session.
#[derive(Clone)]
struct Session {
    id: SessionId,
    /// Held by the prompt running in it: a turn waits here for the one before it (a cancelled prompt
    /// still ending included).
    busy: Arc<tokio::sync::Mutex<()>>,
    /// Its process: a session lives as long as it.
    process: Arc<Process>,
    used: u64,
}

struct State {
    process: Option<Arc<Process>>,
    sessions: HashMap<ConversationId, Session>,
    uses: u64,
    /// Each conversation's session, kept across restarts.
    kept: KeptSessions,
}

/// An ACP agent.
pub struct AcpAgent {
    name: String,
    settings: AcpSettings,
    state: Arc<tokio::sync::Mutex<State>>,
}

impl AcpAgent {
    /// The agent `name`, run as `settings` say.
    pub fn new(name: impl Into<String>, settings: AcpSettings) -> Self {
        let kept = KeptSessions::open(settings.sessions_file.clone());
        AcpAgent {
            name: name.into(),
            settings,
            state: Arc::new(tokio::sync::Mutex::new(State {
                process: None,
                sessions: HashMap::new(),
                uses: 0,
                kept,
            })),
        }
    }
}

fn fail(code: TurnFailure, message: impl Into<String>) -> Outcome {
    Outcome::Failure(Failure::new(code, message))
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Why a conversation has no session with the agent ([`session_for`]).
#[derive(Debug, thiserror::Error)]
enum SessionError {
    /// The agent's process did not start.
    #[error("{0}")]
    Start(#[from] StartError),
    /// `session/new` was not answered within [`SESSION_TIMEOUT`].
    #[error("it did not open a session within {} s", SESSION_TIMEOUT.as_secs())]
    OpenNotInTime,
    /// `session/new` was refused.
    #[error("it did not open a session: {0}")]
    Open(#[source] agent_client_protocol::Error),
}

/// Why an earlier session could not be loaded (`session/load`): the conversation opens a new one.
#[derive(Debug, thiserror::Error)]
enum LoadError {
    /// No answer within [`SESSION_TIMEOUT`].
    #[error("no answer within {} s", SESSION_TIMEOUT.as_secs())]
    NotInTime,
    /// The agent refused it.
    #[error("{0}")]
    Refused(#[source] agent_client_protocol::Error),
}

/// The session of `conversation`, opened (and the process started) when it has none.
async fn session_for(
    state: &tokio::sync::Mutex<State>,
    launch: &Launch,
    conversation: &ConversationId,
) -> Result<Session, SessionError> {
    let mut st = state.lock().await;
    let process = match &st.process {
        Some(p) if p.alive() => p.clone(),
        _ => {
            // A process that ended took its sessions with it.
            st.sessions.clear();
            let p = Process::start(launch).await?;
            st.process = Some(p.clone());
            p
        }
    };
    st.uses += 1;
    let used = st.uses;
    if let Some(s) = st.sessions.get_mut(conversation) {
        s.used = used;
        return Ok(s.clone());
    }
    // A session of an earlier process (the daemon or the agent restarted): loaded when the agent can.
    let earlier = st.kept.get(conversation).filter(|_| process.loads_sessions);
    let loaded = match earlier {
        Some(id) => match load(&process, launch, &id).await {
            Ok(()) => Some(id),
            Err(why) => {
                tracing::info!(agent = %launch.name, %why, "an ACP session could not be loaded; the conversation opens a new one");
                st.kept.forget(conversation);
                None
            }
        },
        None => None,
    };
    let id = match loaded {
        Some(id) => id,
        None => open(&process, launch).await?,
    };
    if st.sessions.len() >= MAX_SESSIONS {
        let idle = st
            .sessions
            .iter()
            .filter(|(_, s)| s.busy.try_lock().is_ok())
            .min_by_key(|(_, s)| s.used)
            .map(|(c, _)| c.clone());
        if let Some(c) = idle {
            st.sessions.remove(&c);
        }
    }
    st.kept.put(conversation, &id);
    let session = Session {
        id,
        busy: Default::default(),
        process,
        used,
    };
    st.sessions.insert(conversation.clone(), session.clone());
    Ok(session)
}

/// Asks the agent to load session `id` (`session/load`); the history it replays is not this turn's.
async fn load(process: &Process, launch: &Launch, id: &SessionId) -> Result<(), LoadError> {
    tokio::time::timeout(
        SESSION_TIMEOUT,
        process
            .cx
            .send_request(LoadSessionRequest::new(id.clone(), launch.cwd.clone()))
            .block_task(),
    )
    .await
    .map_err(|_| LoadError::NotInTime)?
    .map(|_| ())
    .map_err(LoadError::Refused)
}

/// Opens a new session (`session/new`).
async fn open(process: &Process, launch: &Launch) -> Result<SessionId, SessionError> {
    let made = tokio::time::timeout(
        SESSION_TIMEOUT,
        process
            .cx
            .send_request(NewSessionRequest::new(launch.cwd.clone()))
            .block_task(),
    )
    .await
    .map_err(|_| SessionError::OpenNotInTime)?
    .map_err(SessionError::Open)?;
    Ok(made.session_id)
}

impl Agent for AcpAgent {
    fn card(&self) -> AgentCard {
        AgentCard {
            name: self.name.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: format!(
                "an ACP agent: {}",
                self.settings
                    .launch
                    .command
                    .first()
                    .map(String::as_str)
                    .unwrap_or("")
            ),
            models: vec![ACP_MODEL.into()],
            default_model: ACP_MODEL.into(),
            tools: vec![],
            max_prompt_bytes: MAX_PROMPT_BYTES,
            max_context_tokens: 0,
        }
    }

    fn run(&self, input: TurnInput, ctx: TurnContext) -> BoxFuture<'static, Outcome> {
        let (state, launch) = (self.state.clone(), self.settings.launch.clone());
        Box::pin(async move {
            let session = match session_for(&state, &launch, &input.conversation_id).await {
                Ok(s) => s,
                Err(e) => {
                    return fail(
                        TurnFailure::ModelUnavailable,
                        format!("the ACP agent is unavailable: {e}"),
                    )
                }
            };
            prompt(session, input, ctx).await
        })
    }

    fn stop(&self) -> BoxFuture<'static, ()> {
        let state = self.state.clone();
        Box::pin(async move {
            let process = state.lock().await.process.take();
            if let Some(p) = process {
                p.stop().await;
            }
        })
    }
}

/// Sends `session/cancel` for a prompt the engine stopped waiting for (its turn was cancelled and its
/// future dropped), and kills the process group when the prompt has not ended after [`CANCEL_GRACE`].
struct CancelOnDrop {
    session: Option<(SessionId, Arc<Process>)>,
    ended: watch::Receiver<bool>,
}

impl CancelOnDrop {
    fn disarm(&mut self) {
        self.session = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some((id, process)) = self.session.take() else {
            return;
        };
        let mut ended = self.ended.clone();
        tokio::spawn(async move {
            let _ = process.cx.send_notification(CancelNotification::new(id));
            let ends = tokio::time::timeout(CANCEL_GRACE, ended.wait_for(|e| *e)).await;
            if ends.is_err() {
                tracing::warn!(
                    "an ACP agent did not end a cancelled prompt within {} s: its process group is killed",
                    CANCEL_GRACE.as_secs()
                );
                process.kill();
            }
        });
    }
}

/// Runs one turn as a prompt in `session`.
async fn prompt(session: Session, input: TurnInput, ctx: TurnContext) -> Outcome {
    let busy = session.busy.clone().lock_owned().await;
    let process = session.process.clone();
    if !process.alive() {
        return fail(TurnFailure::AgentFailed, process.gone());
    }
    let (_route, mut inbox) = process.listen(&session.id);
    let (done_tx, mut done) = oneshot::channel();
    let (ended_tx, ended_rx) = watch::channel(false);
    let request = process.cx.send_request(PromptRequest::new(
        session.id.clone(),
        vec![input.message.clone().into()],
    ));
    tokio::spawn(async move {
        let answer = request.block_task().await;
        let _ = done_tx.send(answer);
        let _ = ended_tx.send(true);
        drop(busy);
    });
    let mut guard = CancelOnDrop {
        session: Some((session.id.clone(), process.clone())),
        ended: ended_rx,
    };
    let mut cancel = ctx.cancel.clone();
    let mut turn = Turn {
        ctx,
        text: String::new(),
        full: false,
        tools: ToolCalls::default(),
        cancelling: None,
    };
    let answer = loop {
        let deadline = turn.cancelling;
        let grace = async move {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            // Closed (the process gone, its routes dropped): the branch is off, and the prompt's answer
            // (its error) ends the turn.
            Some(msg) = inbox.recv() => match msg {
                Incoming::Update(u) => turn.update(&u, &session.id, &process).await,
                Incoming::Permission(p) => {
                    let (req, responder) = *p;
                    let outcome = turn.permission(&req, &session.id, &process).await;
                    let _ = responder.respond(RequestPermissionResponse::new(outcome));
                }
            },
            answer = &mut done => break answer,
            _ = cancelled(&mut cancel), if deadline.is_none() => {
                turn.cancel(&session.id, &process);
            }
            () = grace => {
                process.kill();
                guard.disarm();
                return fail(
                    TurnFailure::Cancelled,
                    format!("cancelled (the agent did not stop within {} s and was killed)", CANCEL_GRACE.as_secs()),
                );
            }
        }
    };
    guard.disarm();
    // Every update of the prompt came before its answer.
    while let Ok(msg) = inbox.try_recv() {
        match msg {
            Incoming::Update(u) => turn.update(&u, &session.id, &process).await,
            Incoming::Permission(p) => {
                let (_, responder) = *p;
                let _ = responder.respond(RequestPermissionResponse::new(
                    RequestPermissionOutcome::Cancelled,
                ));
            }
        }
    }
    turn.end(answer, &process).await
}

/// A prompt's turn as it runs.
struct Turn {
    ctx: TurnContext,
    text: String,
    /// The answer reached [`MAX_ANSWER_BYTES`]: the agent was asked to stop.
    full: bool,
    tools: ToolCalls,
    /// Set once `session/cancel` is sent: the prompt has until then to end.
    cancelling: Option<tokio::time::Instant>,
}

impl Turn {
    fn cancel(&mut self, session: &SessionId, process: &Process) {
        let _ = process
            .cx
            .send_notification(CancelNotification::new(session.clone()));
        self.cancelling = Some(tokio::time::Instant::now() + CANCEL_GRACE);
    }

    async fn update(
        &mut self,
        update: &agent_client_protocol::v1::schema::SessionUpdate,
        session: &SessionId,
        process: &Process,
    ) {
        for ev in mapping::events(update, &mut self.tools, now_ms()) {
            let ev = match ev {
                TurnEvent::Text { mut text } => {
                    if self.full {
                        continue;
                    }
                    let room = MAX_ANSWER_BYTES - self.text.len();
                    if text.len() > room {
                        text.truncate(text.floor_char_boundary(room));
                        self.full = true;
                    }
                    self.text.push_str(&text);
                    TurnEvent::Text { text }
                }
                other => other,
            };
            let _ = self.ctx.events.send(ev).await;
        }
        if self.full && self.cancelling.is_none() {
            self.cancel(session, process);
        }
    }

    /// The answer to a permission request: asked through the engine (any front that asks takes it);
    /// cancelled when the turn is being cancelled or is cancelled meanwhile.
    async fn permission(
        &mut self,
        req: &agent_client_protocol::v1::schema::RequestPermissionRequest,
        session: &SessionId,
        process: &Process,
    ) -> RequestPermissionOutcome {
        if self.cancelling.is_some() {
            return RequestPermissionOutcome::Cancelled;
        }
        let question = mapping::permission_question(req, &req.tool_call.tool_call_id.0);
        let mut cancel = self.ctx.cancel.clone();
        let asked = tokio::select! {
            a = self.ctx.asker.ask(question) => a,
            _ = cancelled(&mut cancel) => {
                self.cancel(session, process);
                return RequestPermissionOutcome::Cancelled;
            }
        };
        match asked {
            Asked::Answered(answer) => mapping::permission_answer(&req.options, &answer),
            Asked::Cancelled => {
                self.cancel(session, process);
                RequestPermissionOutcome::Cancelled
            }
            // Nobody can answer here, or nobody did in time: the agent hears no.
            _ => mapping::permission_answer(&req.options, &agentwire_core::Answer::NoOperator),
        }
    }

    async fn end(
        self,
        answer: Result<
            Result<PromptResponse, agent_client_protocol::Error>,
            oneshot::error::RecvError,
        >,
        process: &Process,
    ) -> Outcome {
        if matches!(answer, Ok(Err(_)) | Err(_)) {
            // A prompt that failed because the process went: its connection's end (and its last words on
            // stderr) follow at once.
            let _ = tokio::time::timeout(GONE_GRACE, process.ended()).await;
        }
        match answer {
            Ok(Ok(r)) if self.full => Outcome::Result(TurnResult {
                text: self.text,
                usage: Default::default(),
                stop_reason: format!("length ({:?})", r.stop_reason).to_lowercase(),
            }),
            Ok(Ok(r)) => mapping::outcome(&r.stop_reason, self.text),
            Ok(Err(e)) if process.alive() => fail(
                TurnFailure::AgentFailed,
                format!("the ACP agent answered the prompt with an error: {e}"),
            ),
            Ok(Err(_)) | Err(_) => fail(TurnFailure::AgentFailed, process.gone()),
        }
    }
}
