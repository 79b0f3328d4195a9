//! A model agent's one connection to the roost supervisor, as a foreground peer named after the agent
//! (`peer_register {name}`), for its roost tools ([`super::roost_tools`]). A task owns the connection: it
//! connects and registers at start (again, with backoff, whenever the connection drops), sends the tools'
//! ops one at a time, and keeps the peer items delivered to it (messages, and the daemon's notices) in a
//! bounded inbox that the next roost tool result carries as `inbox` (one inbox for the agent: whichever of
//! its turns next calls a roost tool sees it). A foreground peer's items carry no
//! seq and need no ack: the daemon keeps nothing for it, and delivers only while it is connected.
//!
//! A turn that serves a hosted roost job (a model agent behind a roost profile, its conversation
//! `roost:<job id>`) speaks as that job instead, on the job's own connection
//! ([`agentwire_roost::front::HostedSessions`]): its `peers` says the job is itself, what it sends is
//! from the job, what it spawns is the job's child, and `roost_handback` hands its result to the parent
//! that spawned the job. What reaches the job comes as its next turn, not in an inbox.

use super::roost_tools::{self, RoostToolError};
use agentwire_roost::client::{ClientError, Controller};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// The most peer items kept for the model between two roost tool results; older ones go first (and the
/// result says how many went). A tool result goes whole into the model's context, so it must stay small;
/// 20 is also as many items as the daemon keeps waiting for any session.
pub const MAX_INBOX_ITEMS: usize = 20;
/// The first wait before connecting again; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// The longest wait between two tries: the supervisor starts within moments of the agent, and a name
/// still held by the connection that just dropped is free as soon as the daemon sees the drop.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// How long a tool call waits for its answer, the calls of other turns before it included: the daemon
/// answers each within its own 10 s.
pub const TOOL_TIMEOUT: Duration = Duration::from_secs(30);
/// Calls waiting for the connection: turns beyond it wait to queue (one per running turn at a time).
const QUEUED_CALLS: usize = 64;

/// One op for the connection, and where its answer goes.
struct Call {
    op: &'static str,
    args: Value,
    answer: oneshot::Sender<Result<Value, RoostToolError>>,
}

/// Peer items delivered and not yet shown to the model.
#[derive(Default)]
struct Inbox {
    items: VecDeque<Value>,
    /// Items dropped to keep [`MAX_INBOX_ITEMS`] since the last result.
    dropped: usize,
}

/// The agent's roost connection. Dropping it closes the connection.
pub struct RoostPeer {
    calls: mpsc::Sender<Call>,
    hosted: Arc<agentwire_roost::front::HostedSessions>,
    inbox: Arc<Mutex<Inbox>>,
    task: tokio::task::AbortHandle,
}

impl Drop for RoostPeer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl std::fmt::Debug for RoostPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoostPeer").finish_non_exhaustive()
    }
}

fn lock(m: &Mutex<Inbox>) -> std::sync::MutexGuard<'_, Inbox> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl RoostPeer {
    /// Starts the connection of agent `name` to the supervisor at `socket` (inside a tokio runtime). It
    /// connects now, and again whenever it drops.
    pub fn start(
        socket: &Path,
        name: &str,
        hosted: Arc<agentwire_roost::front::HostedSessions>,
    ) -> RoostPeer {
        let (calls, queue) = mpsc::channel(QUEUED_CALLS);
        let inbox: Arc<Mutex<Inbox>> = Arc::default();
        let task = tokio::spawn(serve(
            socket.to_path_buf(),
            name.to_string(),
            queue,
            inbox.clone(),
        ));
        RoostPeer {
            calls,
            hosted,
            inbox,
            task: task.abort_handle(),
        }
    }

    /// Runs roost tool `tool` with the model's `arguments` (JSON text) for a turn of `conversation`: its
    /// op's result with the inbox, or the error the model reads. As the hosted job the conversation is
    /// of, when it is one served here.
    pub async fn run(
        &self,
        tool: &str,
        arguments: &str,
        conversation: &str,
    ) -> Result<Value, String> {
        let (op, args) = roost_tools::request(tool, arguments).map_err(|e| e.to_string())?;
        if let Some(r) = as_job(&self.hosted, conversation, op, args.clone()).await {
            return r.map_err(|e| e.to_string());
        }
        let mut result = self.call(op, args).await.map_err(|e| e.to_string())?;
        let (items, dropped) = {
            let mut inbox = lock(&self.inbox);
            let items: Vec<Value> = inbox.items.drain(..).collect();
            (items, std::mem::take(&mut inbox.dropped))
        };
        if !items.is_empty() || dropped > 0 {
            if !result.is_object() {
                result = json!({ "result": result });
            }
            result["inbox"] = Value::Array(items);
            if dropped > 0 {
                result["inbox_dropped"] = json!(dropped);
            }
        }
        Ok(result)
    }

    /// Sends `op` with `args` on the connection and waits for its result.
    async fn call(&self, op: &'static str, args: Value) -> Result<Value, RoostToolError> {
        let (answer, answered) = oneshot::channel();
        let call = Call { op, args, answer };
        let asked = async {
            self.calls
                .send(call)
                .await
                .map_err(|_| RoostToolError::Disconnected)?;
            answered.await.map_err(|_| RoostToolError::Disconnected)?
        };
        tokio::time::timeout(TOOL_TIMEOUT, asked)
            .await
            .map_err(|_| RoostToolError::Timeout(TOOL_TIMEOUT))?
    }
}

/// Sends `op` with `args` as the hosted roost job whose turn `conversation` is (`roost:<job id>`), on the
/// job's own connection, waiting at most [`TOOL_TIMEOUT`]: its result, or the error in the tools' words;
/// `None` when the conversation is no job served here. The roost tools' path as the job, and the concierge
/// tools' only one ([`super::concierge_tools`]).
pub(super) async fn as_job(
    hosted: &agentwire_roost::front::HostedSessions,
    conversation: &str,
    op: &str,
    args: Value,
) -> Option<Result<Value, RoostToolError>> {
    let job = hosted.job_of(conversation)?;
    match tokio::time::timeout(TOOL_TIMEOUT, hosted.call(&job, op, args)).await {
        Ok(called) => Some(called?.map_err(tool_error)),
        Err(_) => Some(Err(RoostToolError::Timeout(TOOL_TIMEOUT))),
    }
}

/// Connects to `socket` and registers as foreground peer `name`.
async fn register(socket: &Path, name: &str) -> Result<Controller, RoostToolError> {
    let unreachable = |why: String| RoostToolError::Unreachable {
        socket: socket.display().to_string(),
        why,
    };
    let mut c = Controller::connect(socket)
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    match c.call("peer_register", json!({ "name": name })).await {
        Ok(_) => Ok(c),
        Err(ClientError::Refused { code, message }) => Err(RoostToolError::Refused {
            code: code.as_str().to_string(),
            message: format!("this agent could not register as the roost peer {name:?}: {message}"),
        }),
        Err(e) => Err(unreachable(e.to_string())),
    }
}

/// A refused or failed call, in the tools' words.
fn tool_error(e: ClientError) -> RoostToolError {
    match e {
        ClientError::Refused { code, message } => RoostToolError::Refused {
            code: code.as_str().to_string(),
            message,
        },
        ClientError::Timeout(t) => RoostToolError::Timeout(t),
        ClientError::Io(_) => RoostToolError::Disconnected,
    }
}

/// Keeps a delivered peer item for the model.
fn keep(inbox: &Mutex<Inbox>, event: &Value) {
    if event["event"] != "deliver" {
        return;
    }
    let item = json!({
        "kind": event["kind"],
        "from": event["from"],
        "relation": event["relation"],
        "text": event["text"],
    });
    let mut inbox = lock(inbox);
    inbox.items.push_back(item);
    while inbox.items.len() > MAX_INBOX_ITEMS {
        inbox.items.pop_front();
        inbox.dropped += 1;
    }
}

/// Owns the connection: registers (again after a drop, with backoff), runs the calls in order and keeps
/// what is delivered. Ends when the [`RoostPeer`] is dropped.
async fn serve(
    socket: PathBuf,
    name: String,
    mut calls: mpsc::Receiver<Call>,
    inbox: Arc<Mutex<Inbox>>,
) {
    let mut conn: Option<Controller> = None;
    let mut backoff = agentwire_core::Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
    let mut said: Option<String> = None;
    loop {
        let Some(c) = conn.as_mut() else {
            match register(&socket, &name).await {
                Ok(c) => {
                    conn = Some(c);
                    backoff.reset();
                    said = None;
                }
                Err(e) => {
                    // Said once per reason: an unreachable socket before the supervisor is up is normal.
                    let words = e.to_string();
                    if said.as_deref() != Some(&words) {
                        match &e {
                            RoostToolError::Refused { .. } => {
                                tracing::warn!(agent = %name, "roost tools: {words}")
                            }
                            _ => tracing::debug!(agent = %name, "roost tools: {words}"),
                        }
                        said = Some(words);
                    }
                    // A call meanwhile is told why there is no connection, after one more try.
                    tokio::select! {
                        call = calls.recv() => {
                            let Some(call) = call else { return };
                            if call.answer.is_closed() {
                                continue;
                            }
                            match register(&socket, &name).await {
                                Ok(mut c) => {
                                    let r = c.call(call.op, call.args).await;
                                    if !matches!(r, Err(ClientError::Io(_))) {
                                        conn = Some(c);
                                    }
                                    let _ = call.answer.send(r.map_err(tool_error));
                                }
                                Err(e) => {
                                    let _ = call.answer.send(Err(e));
                                }
                            }
                        }
                        _ = tokio::time::sleep(backoff.peek()) => {
                            backoff.take();
                        }
                    }
                }
            }
            continue;
        };
        let dropped = tokio::select! {
            call = calls.recv() => {
                let Some(call) = call else { return };
                if call.answer.is_closed() {
                    // Its turn gave up waiting (and told the model so): sent now, it would act unseen, and
                    // the model's retry would act twice.
                    continue;
                }
                let r = c.call(call.op, call.args).await;
                let dropped = matches!(r, Err(ClientError::Io(_)));
                let _ = call.answer.send(r.map_err(tool_error));
                dropped
            }
            event = c.next_event() => match event {
                Ok(event) => {
                    keep(&inbox, &event);
                    false
                }
                Err(_) => true,
            },
        };
        if dropped {
            tracing::debug!(agent = %name, "roost tools: the connection dropped; connecting again");
            conn = None;
        }
    }
}
