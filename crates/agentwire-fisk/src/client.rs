//! A fisk-ai caller: sends a prompt (or a read, or a discovery request) to a worker, or enqueues it as a
//! job on the worker's queue, and follows its reply set, answering questions through a callback while
//! sending `elicit.waiting` every third of the window; when told to stop, it takes a job not yet taken
//! off the queue, or cancels the request and follows the set to its terminal (`suspended`).
//!
//! A question somebody else settles is given up: a message that says it is settled ([`settles`]: the
//! worker's [`WARNING_QUESTION_ANSWERED`](crate::worker::WARNING_QUESTION_ANSWERED) warning, the result of
//! the call it asked about, a next question, the terminal) or a `404` to `elicit.waiting`. The callback's
//! future is dropped, no answer is sent, and the message goes to `on` as any other. Other messages that
//! arrive while a question is held go to `on` and the question stays: the spec has the set silent then,
//! but an event the run sent just before asking may come after the question.

use crate::wire::{
    self, nats, ElicitAnswer, ElicitChoice, ElicitKind, ElicitMessage, Header, Identity,
    PromptRequest, ReadRequest, TaskRequest,
};
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

/// How long a caller waits for the ack: a worker acks as soon as the turn is journaled.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a caller that cancelled follows the reply set for its terminal. The run parks at its next
/// boundary (the demo agent's within 100 ms, a question at once), so 5 s covers a loaded machine; a model
/// call in flight is not stopped (the spec says so) and may take longer, and then the caller stops watching.
pub const CANCEL_FOLLOW: Duration = Duration::from_secs(5);

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No NATS server took the connection (or its settings are wrong).
    #[error(transparent)]
    Connect(#[from] crate::connection::ConnectError),
    /// The caller's name is not a fisk-ai identity.
    #[error("caller name {0:?} must be letters, digits, '-' and '_'")]
    Name(String),
    /// NATS refused or dropped an operation (`what`: the request, the subscription, the publish, ...).
    #[error("nats {what}: {source}")]
    Nats {
        /// The operation.
        what: &'static str,
        /// The client's error.
        #[source]
        source: async_nats::Error,
    },
    /// The reply subscription ended before the reply set did (the connection closed).
    #[error("nats: the reply subscription ended")]
    SubscriptionEnded,
    /// Nobody serves that identity (or request).
    #[error("no worker answers on {0}")]
    NoResponders(String),
    /// The worker refused the message before any ack (a `Nats-Service-Error`).
    #[error("refused ({code}): {text}")]
    Service {
        /// The service error code (400, 404, 500).
        code: String,
        /// What the worker said.
        text: String,
    },
    /// Nothing (more) arrived in time.
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    /// The identity has no jobs queue on the server (no worker serves it with `[nats] jobs = true`).
    #[error("no jobs queue for {0} (a worker serves one with [nats] jobs = true)")]
    NoQueue(String),
    /// The queue did not take the job (it is full, or JetStream refused it).
    #[error("the jobs queue did not take the job: {0}")]
    NotQueued(String),
    /// A message was not JSON.
    #[error("a reply was not JSON: {0}")]
    Garbled(String),
}

/// One message of a reply set.
#[derive(Debug, Clone)]
pub struct Received {
    /// The message.
    pub json: Value,
    /// It carried `Fisk-AI-Stream-Final`.
    pub last: bool,
}

impl Received {
    /// Its protocol id without the `io.choria.fisk-ai.v1.` prefix (`ack`, `event.text`, ...).
    pub fn kind(&self) -> &str {
        self.json["protocol"]
            .as_str()
            .unwrap_or("")
            .trim_start_matches(wire::PROTOCOL_NAMESPACE)
            .trim_start_matches('.')
    }
}

/// How a person answered a question, as the callback returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `no`, `once` or `always`.
    Approve(ElicitChoice),
    /// Yes or no.
    Confirm(bool),
    /// An option's position.
    Select(u64),
    /// Text.
    Input(String),
    /// Nobody is there.
    NoOperator,
}

/// How the worker answered the cancel a caller sent when told to stop.
#[derive(Debug)]
pub enum CancelReply {
    /// The instance running the request took it (its `ack`): the run parks at its next boundary.
    Taken,
    /// A queued job no worker had taken yet was taken off the queue: it never runs.
    Withdrawn,
    /// A queued job could not be taken off the queue (why: the server's refusal, such as no permission)
    /// and no worker runs it yet: it runs when a worker reaches it.
    StillQueued(String),
    /// No instance is running the request (a no-responder): not accepted yet, or already ended.
    NotRunning,
    /// The cancel could not be sent, or went unanswered.
    Failed(ClientError),
}

impl From<Result<(), ClientError>> for CancelReply {
    fn from(r: Result<(), ClientError>) -> Self {
        match r {
            Ok(()) => CancelReply::Taken,
            Err(ClientError::NoResponders(_)) => CancelReply::NotRunning,
            Err(e) => CancelReply::Failed(e),
        }
    }
}

/// A prompt's reply set as far as it was followed.
#[derive(Debug)]
pub struct Prompted {
    /// Every message received, in order; the set's final message last when `ended`.
    pub messages: Vec<Received>,
    /// The set ended (its final message arrived).
    pub ended: bool,
    /// Told to stop, the caller cancelled the request: how the worker answered (the last answer, when the
    /// cancel was sent again because the worker acked the prompt after the first found nobody).
    pub cancel: Option<CancelReply>,
}

/// Answers a question (the `elicit.request.*` message); may take as long as a person needs. The future is
/// dropped unfinished when the question is settled elsewhere (see the module's doc).
pub type Answerer = Box<dyn FnMut(Value) -> BoxFuture<'static, Reply> + Send>;

/// A prompt to send.
#[derive(Debug, Clone, Copy)]
pub struct PromptCall<'a> {
    /// The worker's identity.
    pub identity: &'a str,
    /// The `request` tag (see [`new_request`]).
    pub request: &'a str,
    /// The prompt.
    pub prompt: &'a str,
    /// The conversation to continue.
    pub token: Option<&'a str>,
    /// How long to wait for each next message.
    pub timeout: Duration,
}

/// An answer to send ([`Caller::answer_until`]).
#[derive(Debug, Clone)]
pub struct AnswerCall<'a> {
    /// The worker's identity.
    pub identity: &'a str,
    /// The `request` tag (see [`new_request`]).
    pub request: &'a str,
    /// The conversation whose parked run waits on the call.
    pub token: &'a str,
    /// The answer, naming the call.
    pub answer: wire::Answer,
    /// How long to wait for each next message.
    pub timeout: Duration,
}

/// How long a caller waits for a queued job's first reply when it is not told to stop: a job waits in
/// the queue as long as the workers ahead of it take (a year stands for "until stopped").
const QUEUE_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

/// How long taking a job off the queue may take once a person gave up on it: a JetStream API call answers
/// in milliseconds, and a server that refuses it (no permission) sends no answer at all.
const WITHDRAW_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a caller that took its job off the queue still watches for an ack: a worker that had taken it
/// and missed the deletion acks it within milliseconds, and is then sent the cancel.
const WITHDRAW_FOLLOW: Duration = Duration::from_secs(1);

/// A reply set being followed.
struct Following<'a> {
    identity: &'a str,
    request: &'a str,
    /// How long to wait for each next message once the run is taken.
    timeout: Duration,
    /// The queued job's stream and sequence, when it was enqueued.
    queued: Option<(String, u64)>,
}

impl<'a> Following<'a> {
    /// The reply set of prompt `call`, enqueued as job `queued` or not.
    fn of(call: &PromptCall<'a>, queued: Option<(String, u64)>) -> Following<'a> {
        Following {
            identity: call.identity,
            request: call.request,
            timeout: call.timeout,
            queued,
        }
    }
}

/// A connection to NATS as a fisk-ai caller.
pub struct Caller {
    client: async_nats::Client,
    me: Identity,
    /// The W3C `traceparent` every request carries, when the caller is traced.
    traceparent: Option<String>,
    /// The tools its prompts suggest (`tool_hints`).
    tool_hints: Vec<String>,
}

fn fresh_id() -> String {
    crate::worker::message_id()
}

/// A fresh `request` tag: a KSUID, 27 characters of the wire's pattern.
pub fn new_request() -> String {
    fresh_id()
}

impl Caller {
    /// Connects to the server at `url` as `name` (the `sender` of what it sends).
    pub async fn connect(url: &str, name: &str) -> Result<Caller, ClientError> {
        Self::connect_with(&crate::connection::NatsConnect::to(url), name).await
    }

    /// Connects with `nats` (several servers, credentials, TLS) as `name`.
    pub async fn connect_with(
        nats: &crate::connection::NatsConnect,
        name: &str,
    ) -> Result<Caller, ClientError> {
        let client = nats.connect(name).await?;
        let me = Identity::new(name).map_err(|_| ClientError::Name(name.to_string()))?;
        Ok(Caller {
            client,
            me,
            traceparent: None,
            tool_hints: Vec::new(),
        })
    }

    /// This caller suggesting `hints` (tool names) with each prompt (`tool_hints`).
    pub fn with_tool_hints(mut self, hints: Vec<String>) -> Caller {
        self.tool_hints = hints;
        self
    }

    /// This caller sending `traceparent` (W3C trace context) on its requests: a traced worker's turn
    /// continues that trace.
    pub fn with_traceparent(mut self, traceparent: impl Into<String>) -> Caller {
        self.traceparent = Some(traceparent.into());
        self
    }

    fn header(&self, request: &str, conversation: &str) -> Header {
        let mut h = Header::new(
            wire::Ksuid::new(SystemTime::now(), [0; 16]),
            request,
            conversation,
            0,
            SystemTime::now(),
            self.me.clone(),
        );
        h.id = fresh_id();
        h.traceparent = self.traceparent.clone();
        h
    }

    /// Sends a prompt and follows the reply set, calling `on` for each message and `answer` for each
    /// question. Returns the whole set.
    pub async fn prompt(
        &self,
        call: PromptCall<'_>,
        on: impl FnMut(&Received),
        answer: Answerer,
    ) -> Result<Vec<Received>, ClientError> {
        let p = self
            .prompt_until(call, std::future::pending(), on, answer)
            .await?;
        Ok(p.messages)
    }

    /// Like [`Caller::prompt`], until `stop` completes: then the request is cancelled (a question waiting
    /// on `answer` is left unanswered; the cancel closes it) and the set is followed for up to
    /// [`CANCEL_FOLLOW`] more. A cancel that finds no instance running the request (sent before the worker
    /// subscribed) is sent again when the accepting ack arrives.
    pub async fn prompt_until(
        &self,
        call: PromptCall<'_>,
        stop: impl Future<Output = ()>,
        mut on: impl FnMut(&Received),
        mut answer: Answerer,
    ) -> Result<Prompted, ClientError> {
        let task = self.prompt_task(&call);
        let sub = self
            .open(nats::task_subject(call.identity), task.to_bytes())
            .await?;
        self.follow_until(sub, Following::of(&call, None), stop, &mut on, &mut answer)
            .await
    }

    /// Like [`Caller::prompt_until`], enqueueing the prompt as a job on the worker's queue
    /// (`choria.fisk-ai.jobs.<identity>`, its reply set to this caller's inbox by `Fisk-AI-Reply-To`) and
    /// waiting however long it waits there for a worker. The request tag is the job's `Nats-Msg-Id`, so
    /// the queue takes a job sent twice once. Told to stop before a worker took it, the job is taken off
    /// the queue ([`CancelReply::Withdrawn`]); after, the run is cancelled as a request's is.
    pub async fn enqueue_until(
        &self,
        call: PromptCall<'_>,
        stop: impl Future<Output = ()>,
        mut on: impl FnMut(&Received),
        mut answer: Answerer,
    ) -> Result<Prompted, ClientError> {
        let (identity, request) = (call.identity, call.request);
        let task = self.prompt_task(&call);
        let inbox = self.client.new_inbox();
        let sub = self
            .client
            .subscribe(inbox.clone())
            .await
            .map_err(|e| nats_error("subscribe", e))?;
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(nats::HEADER_REPLY_TO, inbox.as_str());
        headers.insert(async_nats::header::NATS_MESSAGE_ID, request);
        let js = async_nats::jetstream::new(self.client.clone());
        let queued = js
            .publish_with_headers(
                nats::jobs_subject(identity),
                headers,
                task.to_bytes().into(),
            )
            .await
            .map_err(|e| ClientError::NotQueued(e.to_string()))?
            .await
            .map_err(|e| match e.kind() {
                async_nats::jetstream::context::PublishErrorKind::StreamNotFound => {
                    ClientError::NoQueue(identity.to_string())
                }
                _ => ClientError::NotQueued(e.to_string()),
            })?;
        if queued.duplicate {
            // The queue already holds a job sent with this tag (its answer goes to that job's reply
            // subject, not this inbox).
            return Err(ClientError::NotQueued(format!(
                "a job with request {request:?} was queued already; use a new request tag"
            )));
        }
        let following = Following::of(&call, Some((queued.stream, queued.sequence)));
        self.follow_until(sub, following, stop, &mut on, &mut answer)
            .await
    }

    /// The `request.prompt` of `call`.
    fn prompt_task(&self, call: &PromptCall<'_>) -> TaskRequest {
        TaskRequest::Prompt(PromptRequest {
            header: self.header(call.request, call.request),
            prompt: call.prompt.to_string(),
            context: None,
            tool_hints: self.tool_hints.clone(),
            budget: None,
            stream: true,
            conversation_token: call.token.map(String::from),
            replay: None,
            force: false,
        })
    }

    /// Like [`Caller::prompt_until`], for a `request.answer`: `answer` answers the call a parked run of
    /// conversation `token` waits on, and the run goes on (its reply set followed as a prompt's is).
    pub async fn answer_until(
        &self,
        call: AnswerCall<'_>,
        stop: impl Future<Output = ()>,
        mut on: impl FnMut(&Received),
        mut answer: Answerer,
    ) -> Result<Prompted, ClientError> {
        let AnswerCall {
            identity,
            request,
            token,
            answer: given,
            timeout,
        } = call;
        let task = TaskRequest::Answer(wire::AnswerRequest {
            header: self.header(request, request),
            conversation_token: token.to_string(),
            answer: given,
            budget: None,
            stream: true,
            replay: None,
            force: false,
        });
        let sub = self
            .open(nats::task_subject(identity), task.to_bytes())
            .await?;
        let call = Following {
            identity,
            request,
            timeout,
            queued: None,
        };
        self.follow_until(sub, call, stop, &mut on, &mut answer)
            .await
    }

    /// Follows the reply set arriving on `sub` (see [`Caller::prompt_until`]).
    async fn follow_until(
        &self,
        mut sub: async_nats::Subscriber,
        call: Following<'_>,
        stop: impl Future<Output = ()>,
        on: &mut impl FnMut(&Received),
        answer: &mut Answerer,
    ) -> Result<Prompted, ClientError> {
        let Following {
            identity,
            request,
            timeout,
            queued,
        } = call;
        let mut stop = std::pin::pin!(stop);
        let mut p = Prompted {
            messages: Vec::new(),
            ended: false,
            cancel: None,
        };
        // A job waits in the queue for as long as it takes a worker to reach it: only `stop` ends that.
        let mut deadline = tokio::time::Instant::now()
            + match queued {
                Some(_) => QUEUE_WAIT,
                None => ACK_TIMEOUT,
            };
        let mut stopped_by = None::<tokio::time::Instant>;
        // A message that arrived while a question was with the person: the next one of the set.
        let mut pending = None::<Result<Received, ClientError>>;
        loop {
            let got = match pending.take() {
                Some(m) => m,
                None => tokio::select! {
                    m = next(&mut sub, deadline, identity) => m,
                    () = stop.as_mut(), if stopped_by.is_none() => {
                        let taken = p.messages.iter().any(|m| m.kind() == "ack");
                        deadline = match (&queued, taken) {
                            (Some((stream, seq)), false) => self.withdraw(identity, request, stream, *seq, &mut p).await,
                            _ => self.stop(identity, request, &mut p).await,
                        };
                        stopped_by = Some(deadline);
                        continue;
                    }
                },
            };
            let m = match got {
                Ok(m) => m,
                // Told to stop, the caller gives up on a set that does not end in time.
                Err(ClientError::Timeout(_)) if stopped_by.is_some() => return Ok(p),
                Err(e) => return Err(e),
            };
            deadline = stopped_by.unwrap_or_else(|| tokio::time::Instant::now() + timeout);
            on(&m);
            let last = m.last;
            if stopped_by.is_some()
                && m.kind() == "ack"
                && m.json["accepted"] == true
                && matches!(
                    p.cancel,
                    Some(CancelReply::NotRunning | CancelReply::Withdrawn)
                )
            {
                // The first cancel went out before the worker subscribed for it (a job taken back had
                // been taken by a worker a moment before).
                p.cancel = Some(self.cancel(identity, request).await.into());
                deadline = tokio::time::Instant::now() + CANCEL_FOLLOW;
                stopped_by = Some(deadline);
            }
            if stopped_by.is_none() && m.kind().starts_with("elicit.request.") {
                let question = m.json.clone();
                // Kept in order: what arrives while the question is held comes after it.
                p.messages.push(m);
                let reading = Reading {
                    sub: &mut sub,
                    on: &mut *on,
                    seen: &mut p.messages,
                };
                let held = self
                    .hold_open_while(
                        identity,
                        request,
                        &question,
                        answer(question.clone()),
                        reading,
                        stop.as_mut(),
                    )
                    .await;
                match held {
                    Held::Decided(reply) => {
                        // A question settled elsewhere meanwhile refuses it (`404`): the set says the rest.
                        self.answer(identity, request, &question, reply).await?;
                        // The wait for the next message starts now, not before the person decided.
                        deadline = tokio::time::Instant::now() + timeout;
                    }
                    Held::Stopped => {
                        deadline = self.stop(identity, request, &mut p).await;
                        stopped_by = Some(deadline);
                    }
                    Held::Gone(next) => {
                        deadline = tokio::time::Instant::now() + timeout;
                        pending = next;
                    }
                }
                if last {
                    // Not sent so by a worker that keeps the spec; the set ends there all the same.
                    p.ended = true;
                    return Ok(p);
                }
                continue;
            }
            p.messages.push(m);
            if last {
                p.ended = true;
                return Ok(p);
            }
        }
    }

    /// Cancels `request` for [`Caller::prompt_until`]; returns until when to follow the set.
    async fn stop(&self, identity: &str, request: &str, p: &mut Prompted) -> tokio::time::Instant {
        p.cancel = Some(self.cancel(identity, request).await.into());
        tokio::time::Instant::now() + CANCEL_FOLLOW
    }

    /// Takes queued job `sequence` of `stream` off the queue for [`Caller::enqueue_until`]; a worker that
    /// took it meanwhile is sent a cancel. Returns until when to follow the set.
    async fn withdraw(
        &self,
        identity: &str,
        request: &str,
        stream: &str,
        sequence: u64,
        p: &mut Prompted,
    ) -> tokio::time::Instant {
        let mut js = async_nats::jetstream::new(self.client.clone());
        js.set_timeout(WITHDRAW_TIMEOUT);
        let withdrawn = match js.get_stream(stream).await {
            Ok(s) => s.delete_message(sequence).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        let cancel = CancelReply::from(self.cancel(identity, request).await);
        match (withdrawn, cancel) {
            (Ok(true), CancelReply::NotRunning) => {
                // A worker that took it a moment before starts it only if it misses the deletion:
                // then its ack arrives within this wait and is cancelled.
                p.cancel = Some(CancelReply::Withdrawn);
                tokio::time::Instant::now() + WITHDRAW_FOLLOW
            }
            (Err(why), CancelReply::NotRunning) => {
                p.cancel = Some(CancelReply::StillQueued(why));
                tokio::time::Instant::now()
            }
            (_, cancel) => {
                p.cancel = Some(cancel);
                tokio::time::Instant::now() + CANCEL_FOLLOW
            }
        }
    }

    /// Waits for `decision`, sending `elicit.waiting` every third of the question's window meanwhile
    /// (a question without `wait_ms` comes from a worker that takes none); gives it up when `stop`
    /// completes, when a message on the set [`settles`] it, or when a `waiting` is answered `404`.
    async fn hold_open_while<S: Future<Output = ()>, F: FnMut(&Received)>(
        &self,
        identity: &str,
        request: &str,
        question: &Value,
        decision: BoxFuture<'static, Reply>,
        set: Reading<'_, F>,
        mut stop: Pin<&mut S>,
    ) -> Held {
        let qid = question["question_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        tokio::pin!(decision);
        let wait_ms = question["wait_ms"].as_u64().filter(|w| *w > 0);
        // No window: nothing to hold open (the first tick never comes).
        let every = Duration::from_millis(
            wait_ms.map_or(QUEUE_WAIT.as_millis() as u64, |w| (w / 3).max(1)),
        );
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        loop {
            tokio::select! {
                // First: a decision made is sent, even when a message came at the same moment.
                biased;
                r = &mut decision => return Held::Decided(r),
                () = stop.as_mut() => return Held::Stopped,
                m = set.sub.next() => {
                    match m.map(|m| received(m, identity)) {
                        Some(Ok(m)) if !settles(question, &m) => {
                            (set.on)(&m);
                            set.seen.push(m);
                        }
                        Some(got) => return Held::Gone(Some(got)),
                        None => return Held::Gone(Some(Err(ClientError::SubscriptionEnded))),
                    }
                }
                _ = tick.tick(), if wait_ms.is_some() => {
                    let m = ElicitMessage {
                        header: self.header(request, request),
                        question_id: qid.clone(),
                        kind: ElicitKind::Waiting,
                    };
                    let sent = self
                        .client
                        .request(nats::elicit_subject(identity, request), m.to_bytes().into())
                        .await;
                    if let Ok(reply) = sent {
                        if let Some(h) = &reply.headers {
                            if h.get(nats::HEADER_SERVICE_ERROR_CODE).map(|c| c.as_str()) == Some("404") {
                                // The question is gone: take it off the screen and send no answer (the
                                // spec's rule); the set goes on.
                                return Held::Gone(None);
                            }
                        }
                    }
                }
            }
        }
    }

    async fn answer(
        &self,
        identity: &str,
        request: &str,
        question: &Value,
        reply: Reply,
    ) -> Result<(), ClientError> {
        let answer = match reply {
            Reply::Approve(c) => ElicitAnswer::Approve(c),
            Reply::Confirm(b) => ElicitAnswer::Confirm(b),
            Reply::Select(i) => ElicitAnswer::Select(i),
            Reply::Input(v) => ElicitAnswer::Input(v),
            Reply::NoOperator => ElicitAnswer::NoOperator,
        };
        let m = ElicitMessage {
            header: self.header(request, request),
            question_id: question["question_id"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            kind: ElicitKind::Answer(answer),
        };
        let reply = self
            .client
            .request(nats::elicit_subject(identity, request), m.to_bytes().into())
            .await
            .map_err(|e| nats_error("request", e))?;
        if let Some(h) = &reply.headers {
            if h.get(nats::HEADER_SERVICE_ERROR_CODE).map(|c| c.as_str()) == Some("404") {
                // Not waiting on it any more: settled elsewhere, or its window closed; the reply set tells.
                return Ok(());
            }
            if let Some(text) = h.get(nats::HEADER_SERVICE_ERROR) {
                return Err(ClientError::Service {
                    code: h
                        .get(nats::HEADER_SERVICE_ERROR_CODE)
                        .map(|c| c.to_string())
                        .unwrap_or_default(),
                    text: text.to_string(),
                });
            }
        }
        Ok(())
    }

    /// Reads a conversation back: the ack and `replay` blocks (capped by the worker).
    pub async fn read(
        &self,
        identity: &str,
        token: &str,
        replay: u64,
    ) -> Result<Vec<Received>, ClientError> {
        let request = new_request();
        let task = TaskRequest::Read(ReadRequest {
            header: self.header(&request, &request),
            conversation_token: token.to_string(),
            replay,
        });
        let mut sub = self
            .open(nats::task_subject(identity), task.to_bytes())
            .await?;
        let mut set = Vec::new();
        let deadline = tokio::time::Instant::now() + ACK_TIMEOUT;
        loop {
            let m = next(&mut sub, deadline, identity).await?;
            let last = m.last;
            set.push(m);
            if last {
                return Ok(set);
            }
        }
    }

    /// Asks `identity` what it is.
    pub async fn discover(&self, identity: &str) -> Result<Value, ClientError> {
        let request = new_request();
        let m = wire::DiscoveryRequest {
            header: self.header(&request, &request),
        };
        let mut sub = self
            .open(nats::discovery_subject(identity), m.to_bytes())
            .await?;
        let r = next(
            &mut sub,
            tokio::time::Instant::now() + ACK_TIMEOUT,
            identity,
        )
        .await?;
        Ok(r.json)
    }

    /// Cancels request `request` of `identity`.
    pub async fn cancel(&self, identity: &str, request: &str) -> Result<(), ClientError> {
        let m = wire::Cancel {
            header: self.header(request, request),
            reason: Some("user_cancel".into()),
        };
        let mut sub = self
            .open(nats::cancel_subject(identity, request), m.to_bytes())
            .await?;
        next(
            &mut sub,
            tokio::time::Instant::now() + ACK_TIMEOUT,
            identity,
        )
        .await?;
        Ok(())
    }

    async fn open(
        &self,
        subject: String,
        body: Vec<u8>,
    ) -> Result<async_nats::Subscriber, ClientError> {
        let inbox = self.client.new_inbox();
        let sub = self
            .client
            .subscribe(inbox.clone())
            .await
            .map_err(|e| nats_error("subscribe", e))?;
        self.client
            .publish_with_reply(subject, inbox, body.into())
            .await
            .map_err(|e| nats_error("publish", e))?;
        self.client
            .flush()
            .await
            .map_err(|e| nats_error("flush", e))?;
        Ok(sub)
    }
}

fn nats_error(
    what: &'static str,
    e: impl std::error::Error + Send + Sync + 'static,
) -> ClientError {
    ClientError::Nats {
        what,
        source: Box::new(e),
    }
}

/// Whether message `m` of a reply set says that `question` (its `elicit.request.*`) is settled: the
/// worker's [`WARNING_QUESTION_ANSWERED`](crate::worker::WARNING_QUESTION_ANSWERED) naming it, a result of
/// the call it asked about, a next question, or the set's end. Nothing else does: an event the run sent
/// before asking may arrive after the question.
pub fn settles(question: &Value, m: &Received) -> bool {
    let block = &m.json["block"];
    let call = question["tool_use_id"].as_str();
    m.last
        || matches!(m.kind(), "result" | "error")
        || m.kind().starts_with("elicit.request.")
        || (m.kind() == "event.warning"
            && block["kind"] == crate::worker::WARNING_QUESTION_ANSWERED
            && block["name"] == question["question_id"])
        || (m.kind() == "event.tool_result" && call.is_some() && block["call_id"].as_str() == call)
}

/// The reply set being read while a question is held: what does not settle it goes to `on` and `seen`.
struct Reading<'a, F> {
    sub: &'a mut async_nats::Subscriber,
    on: &'a mut F,
    seen: &'a mut Vec<Received>,
}

/// How a question held open while the person decided ended.
enum Held {
    /// The person decided.
    Decided(Reply),
    /// Told to stop.
    Stopped,
    /// The worker no longer holds it: with the message that said so (the next of the set), or none
    /// (a `404` to `elicit.waiting`).
    Gone(Option<Result<Received, ClientError>>),
}

async fn next(
    sub: &mut async_nats::Subscriber,
    deadline: tokio::time::Instant,
    identity: &str,
) -> Result<Received, ClientError> {
    match tokio::time::timeout_at(deadline, sub.next()).await {
        Ok(Some(m)) => received(m, identity),
        Ok(None) => Err(ClientError::SubscriptionEnded),
        Err(_) => Err(ClientError::Timeout(
            deadline.saturating_duration_since(tokio::time::Instant::now()),
        )),
    }
}

/// A message of a reply set: its JSON, or the refusal or no-responder status it carries.
fn received(m: async_nats::Message, identity: &str) -> Result<Received, ClientError> {
    if m.status == Some(async_nats::StatusCode::NO_RESPONDERS) {
        return Err(ClientError::NoResponders(identity.to_string()));
    }
    let headers = m.headers.clone().unwrap_or_default();
    if let Some(text) = headers.get(nats::HEADER_SERVICE_ERROR) {
        return Err(ClientError::Service {
            code: headers
                .get(nats::HEADER_SERVICE_ERROR_CODE)
                .map(|c| c.to_string())
                .unwrap_or_default(),
            text: text.to_string(),
        });
    }
    let json: Value =
        serde_json::from_slice(&m.payload).map_err(|e| ClientError::Garbled(e.to_string()))?;
    Ok(Received {
        json,
        last: headers.get(nats::HEADER_STREAM_FINAL).is_some(),
    })
}
