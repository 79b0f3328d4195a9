//! The MCP server of one session (rmcp's [`ServerHandler`]): `initialize` says it has tools, `tools/list`
//! lists the agents the request's caller may call, and `tools/call` runs one turn: submitted to the
//! agent's engine, its events sent as progress notifications, its questions put to the client as
//! elicitation requests, its outcome the result; the client's `notifications/cancelled` or a closed
//! connection cancels it.

use crate::errors::ToolReply;
use crate::front::{TurnSide, Update, PROTOCOL};
use crate::progress::Progress;
use crate::questions::{self, Action, Reply};
use crate::routes::{Hangup, Served};
use agentwire_core::{ConversationId, Question, RequestId, TurnInput};
use agentwire_engine::{AnswerReply, Engine, Submission, SubmitReply, TurnPolicy};
use agentwire_http::callers::Caller;
use futures_util::future::BoxFuture;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelledNotificationParam,
    ClientResult, ContentBlock, ElicitRequest, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationSchema, Implementation, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ProgressToken, ProtocolVersion, ServerCapabilities, ServerConfig,
    ServerRequest, Tool,
};
use rmcp::service::{ElicitationMode, PeerRequestOptions, RequestContext, ServiceError};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler};
use std::borrow::Cow;
use std::sync::Arc;
use tokio::sync::Semaphore;

/// The most tool calls one session runs at once: each is a turn and a stream; a client with more in
/// flight is a loop gone wrong, and the agents' own limits serve the many sessions.
pub const MAX_CALLS_PER_SESSION: usize = 16;

/// How many times a question is put again after an answer that does not fit it (a field missing, a
/// choice not offered): a client that cannot fill the form in three tries will not in a fourth; the
/// question is then closed unanswered.
pub const MAX_ASKS: usize = 3;

/// How long a call whose stream the client closed holds its (error) response back, its turn already
/// cancelled and its place already free: rmcp closes a call's stream when the client's
/// `notifications/cancelled` for it arrives, a moment before its serve loop reads that notification; a
/// response that reaches the loop first is sent (on the session's other stream), where the specification
/// says a cancelled request gets none. The loop reads the notification within milliseconds; once it has,
/// it drops the response. A client that only went away gets the response after this, on no stream.
const HANGUP_RESPONSE_HOLD: std::time::Duration = std::time::Duration::from_secs(1);

/// Random bytes in a turn id (`mcp:` and their hex): 128 bits, never repeated in practice, so a fresh
/// call never meets a journaled turn.
const ID_BYTES: usize = 16;

/// One session's server.
pub(crate) struct Session {
    served: Arc<Served>,
    calls: Arc<Semaphore>,
}

impl Session {
    pub(crate) fn new(served: Arc<Served>) -> Session {
        Session {
            served,
            calls: Arc::new(Semaphore::new(MAX_CALLS_PER_SESSION)),
        }
    }
}

/// Who sent the request: the [`Caller`] the server's gate put on the HTTP request, which rmcp hands the
/// handler in the request's extensions.
fn caller_of(ctx: &RequestContext<RoleServer>) -> Result<(Caller, Option<Hangup>), ErrorData> {
    let parts = ctx
        .extensions
        .get::<axum::http::request::Parts>()
        .ok_or_else(|| {
            ErrorData::internal_error("the request came without its HTTP parts", None)
        })?;
    let caller =
        parts.extensions.get::<Caller>().cloned().ok_or_else(|| {
            ErrorData::internal_error("the request came without its caller", None)
        })?;
    Ok((caller, parts.extensions.get::<Hangup>().cloned()))
}

fn result(reply: ToolReply) -> CallToolResponse {
    let content = vec![ContentBlock::text(reply.text)];
    match reply.is_error {
        true => CallToolResult::error(content).into(),
        false => CallToolResult::success(content).into(),
    }
}

fn random_hex() -> String {
    let mut bytes = [0u8; ID_BYTES];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Cancels the turn unless disarmed first: held by the call's handler, so that a handler rmcp drops (its
/// session closed) ends the turn nobody waits for any more.
struct CancelOnDrop {
    armed: Option<(Arc<Engine>, RequestId, String)>,
}

impl CancelOnDrop {
    fn disarm(&mut self) {
        self.armed = None;
    }

    /// Cancels now (the client asked, or went away).
    async fn cancel(&mut self) {
        if let Some((engine, id, requester)) = self.armed.take() {
            engine.cancel(&id, &requester).await;
        }
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some((engine, id, requester)) = self.armed.take() else {
            return;
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                engine.cancel(&id, &requester).await;
            });
        }
    }
}

impl ServerHandler for Session {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("agentwire", env!("CARGO_PKG_VERSION"))
                    .with_title("agentwire"),
            )
            .with_instructions(
                "Each tool is an agent: call it with a prompt and it answers. Ask for progress to follow \
                 its work; declare elicitation to answer its questions.",
            )
    }

    /// The protocol revisions this front implements: up to 2025-11-25, the last with `initialize` and
    /// sessions (a question is a request to the client on the call's stream).
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let (caller, _) = caller_of(&ctx)?;
        let tools = self
            .served
            .tools
            .iter()
            .filter(|t| caller.may_call(&t.agent.name))
            .map(|t| {
                Tool::new(
                    t.name.clone(),
                    t.description.clone(),
                    Arc::new(t.schema.clone()),
                )
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let (caller, hangup) = caller_of(&ctx)?;
        // A tool the caller may not call is unknown to it, as if it did not exist.
        let Some(tool) = self.served.tool(&request.name, &caller) else {
            let shown: String = request.name.chars().take(128).collect();
            return Err(ErrorData::invalid_params(
                format!("unknown tool: {shown}"),
                None,
            ));
        };
        let Ok(place) = self.calls.clone().try_acquire_owned() else {
            return Ok(result(ToolReply::error(format!(
                "this session already runs {MAX_CALLS_PER_SESSION} calls; wait for one to end"
            ))));
        };
        let engine = tool.agent.engine.clone();
        let card = engine.card();
        let args = match crate::tools::parse_args(request.arguments.as_ref(), card.max_prompt_bytes)
        {
            Ok(a) => a,
            Err(e) => return Ok(result(ToolReply::error(e.to_string()))),
        };
        let token = ctx.meta.get_progress_token();
        let can_ask = ctx
            .peer
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Form);
        let id = format!("{PROTOCOL}:{}", random_hex());
        let (Ok(request_id), Ok(conversation_id)) =
            (RequestId::new(id.clone()), ConversationId::new(id))
        else {
            return Err(ErrorData::internal_error(
                "the call id is not a turn id",
                None,
            ));
        };
        let requester = caller.requester();
        let (side, rx) = TurnSide::new(token.is_some(), can_ask);
        let sub = Submission {
            input: TurnInput::new(
                request_id.clone(),
                conversation_id,
                args.prompt,
                card.default_model,
            ),
            protocol: PROTOCOL.into(),
            requester: requester.clone(),
            route: serde_json::json!({ "tool": tool.name, "requester": requester }),
            front: side.clone(),
            policy: TurnPolicy {
                refuse_when_full: true,
                keep_transcript: true,
                ..Default::default()
            },
            conversation_meta: None,
            slot: None,
        };
        // From here the turn is the engine's: a handler dropped (its session closed) cancels it.
        let mut guard = CancelOnDrop {
            armed: Some((engine.clone(), request_id.clone(), requester)),
        };
        let refused = match agentwire_http::front::submit_for(&engine, &caller, sub).await {
            SubmitReply::Accepted { .. } => None,
            SubmitReply::Refused(f) => Some(ToolReply::of_failure(&f, false)),
            SubmitReply::Draining => Some(ToolReply::draining()),
            SubmitReply::JournalUnavailable(why) => {
                tracing::warn!(request = %request_id, %why, "an MCP call was not taken: the journal cannot be written");
                Some(ToolReply::journal_unavailable())
            }
            // A fresh id and a fresh conversation that is not exclusive: none of these can be.
            SubmitReply::DuplicateLive
            | SubmitReply::DuplicateStored(_)
            | SubmitReply::ConversationBusy => {
                return Err(ErrorData::internal_error(
                    "a fresh call id met a turn already journaled",
                    None,
                ))
            }
        };
        if let Some(reply) = refused {
            guard.disarm();
            return Ok(result(reply));
        }
        let call = Call {
            engine,
            id: request_id,
            peer: ctx.peer.clone(),
            token,
            progress: Progress::default(),
        };
        let cancelled = ctx.ct.clone();
        let followed = call.follow(rx, &mut guard, ctx, hangup).await;
        guard.disarm();
        let outcome = match followed {
            Followed::Ended(o) => o,
            Followed::Cancelled => None,
            Followed::HungUp => {
                drop(place);
                let _ = tokio::time::timeout(HANGUP_RESPONSE_HOLD, cancelled.cancelled()).await;
                None
            }
        };
        match outcome {
            Some(o) => Ok(result(ToolReply::of_outcome(&o, side.unanswerable()))),
            None => Err(ErrorData::internal_error(
                "the call was cancelled before its turn ended",
                None,
            )),
        }
    }
}

/// A question being put to the client.
struct Asking {
    id: String,
    question: Question,
    asks: usize,
    reply: BoxFuture<'static, Result<ElicitResult, ServiceError>>,
    /// The elicitation request's id, once it is sent: what a withdrawal names.
    sent: Arc<std::sync::Mutex<Option<rmcp::model::RequestId>>>,
}

/// A running call: its turn followed to the outcome.
struct Call {
    engine: Arc<Engine>,
    id: RequestId,
    peer: Peer<RoleServer>,
    token: Option<ProgressToken>,
    progress: Progress,
}

/// What ended the wait on the next thing.
enum Next {
    Update(Option<Update>),
    Replied(Result<ElicitResult, ServiceError>),
    Cancelled,
    HungUp,
}

/// How following a call's turn ended.
enum Followed {
    /// The turn's outcome (`None`: its updates stopped, nobody reads a result).
    Ended(Option<agentwire_core::Outcome>),
    /// The client cancelled the call; the turn is cancelled.
    Cancelled,
    /// The client closed the call's stream (or rmcp did, for the client's cancellation); the turn is
    /// cancelled.
    HungUp,
}

impl Call {
    /// Follows the turn until its outcome, or until the client cancels the call or goes away (the turn is
    /// then cancelled and nobody reads a result).
    async fn follow(
        mut self,
        mut rx: tokio::sync::mpsc::UnboundedReceiver<Update>,
        guard: &mut CancelOnDrop,
        ctx: RequestContext<RoleServer>,
        hangup: Option<Hangup>,
    ) -> Followed {
        let mut asking: Option<Asking> = None;
        let gone = async move {
            match hangup {
                Some(h) => h.gone().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(gone);
        loop {
            let next = tokio::select! {
                u = rx.recv() => Next::Update(u),
                r = async {
                    match asking.as_mut() {
                        Some(a) => (&mut a.reply).await,
                        None => std::future::pending().await,
                    }
                } => Next::Replied(r),
                _ = ctx.ct.cancelled() => Next::Cancelled,
                _ = &mut gone => Next::HungUp,
            };
            match next {
                Next::Cancelled => {
                    guard.cancel().await;
                    return Followed::Cancelled;
                }
                Next::HungUp => {
                    guard.cancel().await;
                    return Followed::HungUp;
                }
                Next::Update(None) => return Followed::Ended(None),
                Next::Update(Some(Update::Outcome(o))) => {
                    if let Some(a) = asking.take() {
                        self.withdraw(a, "the turn ended").await;
                    }
                    return Followed::Ended(Some(o));
                }
                Next::Update(Some(Update::Event(ev))) => {
                    if let Some(step) = self.progress.step(&ev) {
                        self.notify(step).await;
                    }
                }
                Next::Update(Some(Update::Question(qid, question))) => {
                    let step = self
                        .progress
                        .note(&format!("asking: {}", question.kind.text()));
                    self.notify(step).await;
                    asking = Some(self.ask(qid, question, 1, None));
                }
                Next::Update(Some(Update::QuestionClosed(qid))) => {
                    // Settled elsewhere (its window closed, the operator answered): stop waiting for
                    // the client's reply.
                    if asking.as_ref().is_some_and(|a| a.id == qid) {
                        if let Some(a) = asking.take() {
                            self.withdraw(a, "the question was settled elsewhere").await;
                        }
                    }
                }
                Next::Replied(reply) => {
                    let Some(a) = asking.take() else { continue };
                    asking = self.replied(a, reply, guard).await;
                }
            }
        }
    }

    /// Sends a progress notification, when the client asked for progress.
    async fn notify(&self, step: crate::progress::Step) {
        if let Some(token) = &self.token {
            let mut p = ProgressNotificationParam::new(token.clone(), step.progress);
            p.message = Some(step.message);
            // A client gone is seen by the call's own watch; a lost notification changes nothing.
            let _ = self.peer.notify_progress(p).await;
        }
    }

    /// Puts question `question` (its id `qid`) to the client as a form; `why_again` says why an
    /// earlier answer was not taken.
    fn ask(&self, qid: String, question: Question, asks: usize, why_again: Option<&str>) -> Asking {
        let form = questions::form(&question.kind);
        let message = match why_again {
            Some(why) => format!(
                "{} (the last answer could not be taken: {why})",
                form.message
            ),
            None => form.message,
        };
        let peer = self.peer.clone();
        let sent = Arc::new(std::sync::Mutex::new(None));
        let sent_id = sent.clone();
        let reply: BoxFuture<'static, Result<ElicitResult, ServiceError>> =
            match ElicitationSchema::from_json_schema(form.schema) {
                Ok(schema) => {
                    let params = ElicitRequestParams::FormElicitationParams {
                        meta: None,
                        message,
                        requested_schema: schema,
                    };
                    Box::pin(async move {
                        let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
                        let handle = peer
                            .send_cancellable_request(request, PeerRequestOptions::no_options())
                            .await?;
                        if let Ok(mut id) = sent_id.lock() {
                            *id = Some(handle.id.clone());
                        }
                        match handle.await_response().await? {
                            ClientResult::ElicitResult(r) => Ok(r),
                            _ => Err(ServiceError::UnexpectedResponse),
                        }
                    })
                }
                Err(e) => {
                    let e = ServiceError::McpError(ErrorData::internal_error(
                        format!("the question's form is not an elicitation schema: {e}"),
                        None,
                    ));
                    Box::pin(async move { Err(e) })
                }
            };
        Asking {
            id: qid,
            question,
            asks,
            reply,
            sent,
        }
    }

    /// Withdraws question `a` from the client (`notifications/cancelled` for its elicitation request):
    /// settled elsewhere, or its turn ended, the form it shows is of no use any more.
    async fn withdraw(&self, a: Asking, reason: &str) {
        let id = a.sent.lock().ok().and_then(|mut id| id.take());
        if let Some(id) = id {
            let note = CancelledNotificationParam::new(Some(id), Some(reason.to_string()));
            // A client gone already has nothing to withdraw.
            let _ = self.peer.notify_cancelled(note).await;
        }
    }

    /// The client's reply to question `a`: the answer given to the engine, the question put again after
    /// one that does not fit, closed unanswered after [`MAX_ASKS`] or a client error, or the turn cancelled
    /// when the person dismissed it. Returns the question still being asked, if any.
    async fn replied(
        &self,
        a: Asking,
        reply: Result<ElicitResult, ServiceError>,
        guard: &mut CancelOnDrop,
    ) -> Option<Asking> {
        let action = match reply {
            Ok(r) => match r.action {
                ElicitationAction::Accept => Action::Accept(r.content),
                ElicitationAction::Decline => Action::Decline,
                _ => Action::Cancel,
            },
            Err(e) => {
                tracing::info!(request = %self.id, error = %e, "an MCP client did not answer a question");
                self.engine.question_expired(&self.id, &a.id);
                return None;
            }
        };
        let why = match questions::reply(&a.question.kind, action) {
            Ok(Reply::CancelTurn) => {
                guard.cancel().await;
                return None;
            }
            Ok(Reply::Answer(answer)) => match self.engine.answer(&self.id, &a.id, answer) {
                AnswerReply::Taken | AnswerReply::NotWaiting => return None,
                AnswerReply::DoesNotFit => "it does not fit the question".to_string(),
            },
            Err(e) => e.to_string(),
        };
        if a.asks >= MAX_ASKS {
            self.engine.question_expired(&self.id, &a.id);
            return None;
        }
        Some(self.ask(a.id, a.question, a.asks + 1, Some(&why)))
    }
}
