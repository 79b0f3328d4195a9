//! The roost front: an engine agent as a hosted roost profile, so a roost controller (a hub, a script,
//! `agentwire jobs`) reaches it with `dispatch` and `reply` as it reaches any job.
//!
//! A job is a conversation (`roost:<job id>`); each reply is a turn (request `roost:<job id>:<seq>`, so a
//! reply delivered again is answered from the journal, never run twice). The job speaks for itself over
//! the daemon's socket with the Rust agent client, like any agent: replies come one at a time and are
//! acked once their turn is journaled; a reply while the turn asks a question is its answer; a later one
//! waits behind the turn under way; an approval "for this session" or "always" stands for the rest of the
//! job (kept in the conversation's meta). The row shows the turn ([`crate::proto::turn_row`]), and each
//! answer's whole text is appended to `output.log` in the job's dir (the row keeps 500 characters). A
//! stopped job's turns are cancelled. After a restart the job is served again once the engine's recovery
//! pass has ended what the crash cut off, and its row shows its newest turn's outcome.
//!
//! [`HostedSessions`] lists the jobs served here, so that the agent serving one of their turns can speak
//! as the job on its connection (a model agent's roost tools: `handback` to the parent that spawned it,
//! `spawn`, `watch`, `send`, the board).

use crate::client::agent::{Delivery, Handler, JobEnv, RoostAgent};
use crate::daemon::hosted::{Host, HostedJob};
use crate::proto::turn_row::{self, TurnRow};
use agentwire_core::{ConversationId, Outcome, Question, RequestId, TurnEvent};
use agentwire_engine::StoredTurn;
use agentwire_engine::{
    AnswerReply, Engine, FrontAsk, Submission, SubmitReply, TurnFront, TurnInput, TurnPolicy,
};
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::sync::watch;

/// The protocol the front's turns are journaled under.
pub const PROTOCOL: &str = "roost";

/// The first wait before a reply is submitted again to a journal that could not write; it doubles up to
/// [`JOURNAL_RETRY_MAX`]. Meanwhile the reply stays unacked, so a restart delivers it again.
const JOURNAL_RETRY_FIRST: Duration = Duration::from_millis(100);
/// The longest wait between two tries.
const JOURNAL_RETRY_MAX: Duration = Duration::from_secs(5);
/// How long a job served again waits for its newest turn to end before its first report (a `respawn`
/// while a turn runs: the old serving's cancel ends it within moments). Past it the row says `working`.
const NEWEST_TURN_WAIT: Duration = Duration::from_secs(10);
/// How often the newest turn is read again meanwhile.
const NEWEST_TURN_POLL: Duration = Duration::from_millis(100);
/// The conversation meta key of the tools approved for the rest of the job.
const APPROVED_KEY: &str = "approved";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The hosted jobs served in this process, by job id: the agent serving a turn of one speaks as the job
/// through it ([`HostedSessions::call`]), on the job's own connection.
#[derive(Default)]
pub struct HostedSessions {
    jobs: Mutex<HashMap<String, Weak<Job>>>,
}

impl std::fmt::Debug for HostedSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostedSessions").finish_non_exhaustive()
    }
}

impl HostedSessions {
    /// The hosted job served here whose conversation is `conversation` (`roost:<job id>`), if any.
    pub fn job_of(&self, conversation: &str) -> Option<String> {
        let id = conversation.strip_prefix("roost:")?;
        lock(&self.jobs).contains_key(id).then(|| id.to_string())
    }

    /// Sends `op` with `args` as hosted job `id`, on its connection: the daemon's answer; `None` when the
    /// job is not served here.
    pub async fn call(
        &self,
        id: &str,
        op: &str,
        args: serde_json::Value,
    ) -> Option<Result<serde_json::Value, crate::client::ClientError>> {
        let job = lock(&self.jobs).get(id).and_then(Weak::upgrade)?;
        let client = match &*lock(&job.client) {
            Client::Running(c) => c.clone(),
            _ => {
                return Some(Err(crate::client::ClientError::Io(
                    "the job is not connected yet".into(),
                )))
            }
        };
        Some(client.call(op, args).await)
    }

    fn serve(&self, id: &str, job: &Arc<Job>) {
        lock(&self.jobs).insert(id.to_string(), Arc::downgrade(job));
    }

    /// Forgets job `id` when `job` is still the one served under it (a respawn serves a new one).
    fn leave(&self, id: &str, job: &Arc<Job>) {
        let mut jobs = lock(&self.jobs);
        if jobs
            .get(id)
            .is_some_and(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(job)))
        {
            jobs.remove(id);
        }
    }
}

/// Serves one engine agent's hosted profile.
pub struct RoostHost {
    engine: Arc<Engine>,
    name: String,
    recovered: watch::Sender<bool>,
    sessions: Arc<HostedSessions>,
}

impl RoostHost {
    /// The host of agent `name`, served by `engine`, its jobs listed in `sessions`. Its jobs wait for
    /// [`RoostHost::recovered`].
    pub fn new(engine: Arc<Engine>, name: &str, sessions: Arc<HostedSessions>) -> Arc<RoostHost> {
        Arc::new(RoostHost {
            engine,
            name: name.to_string(),
            recovered: watch::channel(false).0,
            sessions,
        })
    }

    /// The engine's recovery pass has run: jobs may read their rows from the journal and take replies.
    pub fn recovered(&self) {
        self.recovered.send_replace(true);
    }
}

impl Host for RoostHost {
    fn start(&self, env: JobEnv) -> Box<dyn HostedJob> {
        let job = Arc::new(Job {
            engine: self.engine.clone(),
            conversation: ConversationId::new(format!("roost:{}", env.id)).ok(),
            id: env.id.clone(),
            dir: env.dir.clone(),
            client: Mutex::new(Client::Starting),
            open: Mutex::new(None),
            live: Mutex::new(HashSet::new()),
            standing: Mutex::new(HashSet::new()),
        });
        let mut recovered = self.recovered.subscribe();
        let (name, starting) = (self.name.clone(), job.clone());
        let task = tokio::spawn(async move {
            let _ = recovered.wait_for(|r| *r).await;
            // Weak: the client the job holds must not keep the job alive.
            let weak = Arc::downgrade(&starting);
            let handler: Handler = Arc::new(move |d: Delivery| {
                let j = weak.upgrade();
                Box::pin(async move {
                    if let Some(j) = j {
                        j.on_reply(d).await
                    }
                })
            });
            let client = RoostAgent::start(
                env,
                &name,
                env!("CARGO_PKG_VERSION"),
                &["report", "replies"],
                handler,
            );
            starting.load_standing().await;
            let first = starting.row_now().await;
            let mut slot = lock(&starting.client);
            if matches!(*slot, Client::Starting) {
                client.report(first);
                *slot = Client::Running(Arc::new(client));
            }
        });
        self.sessions.serve(&job.id, &job);
        Box::new(Served {
            job,
            task: task.abort_handle(),
            sessions: self.sessions.clone(),
        })
    }
}

/// A hosted job being served.
struct Served {
    job: Arc<Job>,
    task: tokio::task::AbortHandle,
    sessions: Arc<HostedSessions>,
}

impl HostedJob for Served {
    fn stop(&mut self) {
        self.job.leave();
        let turns: Vec<RequestId> = lock(&self.job.live).iter().cloned().collect();
        let job = self.job.clone();
        tokio::spawn(async move {
            for t in turns {
                job.engine.cancel(&t, &job.requester()).await;
            }
        });
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
        self.job.leave();
        self.sessions.leave(&self.job.id, &self.job);
    }
}

/// A job's agent client.
enum Client {
    /// Not yet started (the engine's recovery pass has not run).
    Starting,
    Running(Arc<RoostAgent>),
    /// The job is no longer served here: nothing more is reported for it.
    Gone,
}

/// The question a turn of the job waits on.
struct Open {
    request: RequestId,
    question_id: String,
    question: Question,
}

/// One hosted job: its conversation, its client and the turn that asks.
struct Job {
    engine: Arc<Engine>,
    id: String,
    /// `roost:<job id>` (the daemon's job ids always make one).
    conversation: Option<ConversationId>,
    dir: std::path::PathBuf,
    client: Mutex<Client>,
    open: Mutex<Option<Open>>,
    /// Its turns taken and not yet ended.
    live: Mutex<HashSet<RequestId>>,
    /// The tools approved for the rest of the job ("Approve for this session", "Always approve"), kept in
    /// the conversation's meta so a restart keeps them.
    standing: Mutex<HashSet<String>>,
}

impl Job {
    fn requester(&self) -> String {
        format!("roost:{}", self.id)
    }

    fn report(&self, report: serde_json::Value) {
        if let Client::Running(c) = &*lock(&self.client) {
            c.report(report);
        }
    }

    /// Stops speaking for the job: its connection closes at once, so no reply reaches it any more.
    fn leave(&self) {
        let gone = std::mem::replace(&mut *lock(&self.client), Client::Gone);
        drop(gone);
    }

    /// The row a newly served job shows: its newest turn's outcome (waiting up to [`NEWEST_TURN_WAIT`] for
    /// one still running to end), or that it waits for its first prompt.
    async fn row_now(&self) -> serde_json::Value {
        let Some(conversation) = &self.conversation else {
            return turn_row::first_prompt();
        };
        let deadline = tokio::time::Instant::now() + NEWEST_TURN_WAIT;
        loop {
            match self.engine.last_turn(conversation).await {
                Ok(Some(StoredTurn {
                    outcome: Some(o), ..
                })) => return turn_row::outcome(&o),
                Ok(Some(_)) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(NEWEST_TURN_POLL).await
                }
                Ok(Some(_)) => return serde_json::json!({ "state": "working", "status": "busy" }),
                Ok(None) => return turn_row::first_prompt(),
                Err(e) => {
                    tracing::warn!(job = %self.id, error = %e, "could not read the job's newest turn");
                    return turn_row::first_prompt();
                }
            }
        }
    }

    /// The standing approvals the conversation's meta keeps.
    async fn load_standing(&self) {
        let Some(conversation) = &self.conversation else {
            return;
        };
        if let Ok(Some(meta)) = self.engine.conversation_meta(conversation).await {
            let tools = meta[APPROVED_KEY].as_array().cloned().unwrap_or_default();
            lock(&self.standing).extend(tools.iter().filter_map(|t| t.as_str().map(String::from)));
        }
    }

    /// `tool` is approved for the rest of the job, durably.
    async fn approve_for_job(&self, tool: &str) {
        let Some(conversation) = &self.conversation else {
            return;
        };
        let approved: Vec<String> = {
            let mut standing = lock(&self.standing);
            if !standing.insert(tool.to_string()) {
                return;
            }
            let mut all: Vec<String> = standing.iter().cloned().collect();
            all.sort();
            all
        };
        let meta = serde_json::json!({ APPROVED_KEY: approved });
        if let Err(e) = self
            .engine
            .put_conversation_meta(conversation, PROTOCOL, &meta)
            .await
        {
            tracing::warn!(job = %self.id, error = %e, "could not keep a standing approval; it holds until a restart");
        }
    }

    async fn on_reply(self: Arc<Self>, d: Delivery) {
        let open = lock(&self.open)
            .as_ref()
            .map(|o| (o.request.clone(), o.question_id.clone(), o.question.clone()));
        if let Some((request, question_id, question)) = open {
            let Some(answer) = turn_row::answer(&question.kind, &d.text) else {
                self.report(turn_row::not_an_answer(&question, &d.text));
                return;
            };
            let stands = match &answer {
                agentwire_core::Answer::Approve { choice } => choice.stands(),
                _ => false,
            };
            match self.engine.answer(&request, &question_id, answer) {
                AnswerReply::Taken => {
                    if stands {
                        self.approve_for_job(&question.tool).await;
                    }
                    self.report(serde_json::json!({ "state": "working", "status": "busy", "summary": "answered" }));
                    return;
                }
                AnswerReply::DoesNotFit => {
                    self.report(turn_row::not_an_answer(&question, &d.text));
                    return;
                }
                // Closed meanwhile: the reply is a new prompt.
                AnswerReply::NotWaiting => {}
            }
        }
        let (Some(conversation), Ok(request)) = (
            self.conversation.clone(),
            RequestId::new(format!("roost:{}:{}", self.id, d.seq)),
        ) else {
            return;
        };
        let mut backoff = agentwire_core::Backoff::new(JOURNAL_RETRY_FIRST, JOURNAL_RETRY_MAX);
        loop {
            let front = Arc::new(RoostTurn {
                job: self.clone(),
                request: request.clone(),
                seq: d.seq,
                prompt: d.text.clone(),
                row: Mutex::new(None),
            });
            let card = self.engine.agent().card();
            let sub = Submission {
                input: TurnInput::new(
                    request.clone(),
                    conversation.clone(),
                    d.text.clone(),
                    card.default_model.clone(),
                ),
                protocol: PROTOCOL.into(),
                requester: self.requester(),
                route: serde_json::json!({ "job": self.id, "seq": d.seq }),
                front,
                policy: TurnPolicy {
                    exclusive: false,
                    park_on_cancel: false,
                    keep_transcript: false,
                    refuse_when_full: false,
                    accepted_silently: false,
                },
                conversation_meta: None,
                slot: None,
            };
            match self.engine.submit(sub).await {
                SubmitReply::JournalUnavailable(why) => {
                    let delay = backoff.take();
                    tracing::warn!(job = %self.id, seq = d.seq, %why, retry_in = ?delay, "the journal cannot take a reply yet");
                    tokio::time::sleep(delay).await;
                }
                // Not taken and not acked: the next daemon delivers it again.
                SubmitReply::Draining => std::future::pending::<()>().await,
                // Taken (its turn reports), or answered from the journal (replayed through the front).
                _ => return,
            }
        }
    }
}

/// One turn of a hosted job.
struct RoostTurn {
    job: Arc<Job>,
    request: RequestId,
    seq: u64,
    prompt: String,
    row: Mutex<Option<TurnRow>>,
}

impl RoostTurn {
    /// Appends the turn's prompt and its whole answer to the job's `output.log`.
    fn log(&self, outcome: &Outcome) {
        let text = match outcome {
            Outcome::Result(r) => r.text.clone(),
            Outcome::Failure(f) => format!("[{}] {}", f.code.as_str(), f.message),
        };
        let path = self.job.dir.join(crate::daemon::process::OUTPUT_FILE);
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| writeln!(f, "#{} > {}\n{text}\n", self.seq, self.prompt));
        if let Err(e) = written {
            tracing::warn!(job = %self.job.id, error = %e, "could not write the job's output");
        }
    }
}

impl TurnFront for RoostTurn {
    fn accepted(&self, queued: bool) {
        lock(&self.job.live).insert(self.request.clone());
        // A turn that waits behind another leaves the row to it until its own events come.
        let model = self.job.engine.agent().card().default_model;
        let (row, report) = TurnRow::accepted(&model, queued);
        *lock(&self.row) = Some(row);
        if !queued {
            self.job.report(report);
        }
    }

    fn event(&self, event: TurnEvent) {
        let report = lock(&self.row)
            .as_mut()
            .and_then(|r| r.event(&event, agentwire_core::now_ms()));
        // Events reach the front on their own path and may come after the question: while it is open
        // the row stays on it.
        let asking = lock(&self.job.open).is_some();
        if let (Some(r), false) = (report, asking) {
            self.job.report(r);
        }
    }

    fn encode_outcome(&self, _outcome: &Outcome) -> Option<String> {
        None
    }

    fn deliver_outcome(&self, outcome: &Outcome, _wire: Option<&str>) {
        lock(&self.job.live).remove(&self.request);
        self.log(outcome);
        self.job.report(turn_row::outcome(outcome));
    }

    fn ask(&self, question: &Question) -> FrontAsk {
        let approval = matches!(question.kind, agentwire_core::QuestionKind::Approve { .. });
        if approval && lock(&self.job.standing).contains(&question.tool) {
            return FrontAsk::Settled(agentwire_core::Asked::Answered(
                agentwire_core::Answer::Approve {
                    choice: agentwire_core::ApproveChoice::Session,
                },
            ));
        }
        let question_id = format!("{}:{}", self.seq, question.call_id);
        *lock(&self.job.open) = Some(Open {
            request: self.request.clone(),
            question_id: question_id.clone(),
            question: question.clone(),
        });
        self.job.report(turn_row::question(question));
        // No window: a row waits for its person, as roost's blocked rows do.
        FrontAsk::Sent {
            question_id,
            window: None,
        }
    }

    fn question_closed(&self, question_id: &str) {
        let mut open = lock(&self.job.open);
        if open.as_ref().is_some_and(|o| o.question_id == question_id) {
            *open = None;
        }
    }

    fn replay(&self, stored: &StoredTurn) {
        if let Some(o) = &stored.outcome {
            self.job.report(turn_row::outcome(o));
        }
    }
}
