//! The Rust agent client: what a roost agent written in Rust links to. It finds its job in the
//! environment (new names first), connects on the first report, says `hello` on every connection, sends
//! the latest report again after a reconnect, and hands replies to its handler once each, in order, one at
//! a time, acking each after the handler returns. The last finished seq is kept in `agent.json` in the job
//! dir before its ack, so an agent started again after a crash skips (and only acks) what it finished.

pub use crate::proto::job_env::JobEnv;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot, watch, Notify};

/// The first wait before reconnecting; it doubles up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// The longest wait between reconnects: a restarted daemon is back within seconds.
pub const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// How long [`RoostAgent::call`] waits for its answer.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The file in the job dir with the last finished reply.
pub const STATE_FILE: &str = "agent.json";

/// A reply handed to the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// Its number.
    pub seq: u64,
    /// The text.
    pub text: String,
    /// `steer` or `followUp`.
    pub mode: Option<String>,
    /// For a peer item (the agent reported `agentItems: true`): `message`, `report`, `notice` or `digest`;
    /// it is acked by itself (`exact`). None for the user's replies.
    pub kind: Option<String>,
    /// A peer item's sender, `{id, name}`.
    pub from: Option<Value>,
}

/// Handles one reply; the ack follows when it returns.
pub type Handler =
    Arc<dyn Fn(Delivery) -> futures_util::future::BoxFuture<'static, ()> + Send + Sync>;

/// The last finished seq kept in the job dir.
pub fn last_finished(dir: &Path) -> u64 {
    std::fs::read_to_string(dir.join(STATE_FILE))
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| v["lastSeq"].as_u64())
        .unwrap_or(0)
}

fn keep_finished(dir: &Path, seq: u64) -> std::io::Result<()> {
    let tmp = dir.join(format!("{STATE_FILE}.tmp"));
    std::fs::write(&tmp, json!({ "lastSeq": seq }).to_string())?;
    std::fs::rename(tmp, dir.join(STATE_FILE))
}

/// A request to send on the current connection, and where its answer goes.
type Outgoing = mpsc::UnboundedSender<(Value, oneshot::Sender<Value>)>;

struct Shared {
    env: JobEnv,
    hello: Value,
    latest: Mutex<Option<Value>>,
    /// The current connection's request sender.
    conn: Mutex<Option<Outgoing>>,
    reported: Notify,
}

/// A running agent client. Dropping it closes its connection and stops it.
pub struct RoostAgent {
    shared: Arc<Shared>,
    replies_done: watch::Receiver<u64>,
    tasks: [tokio::task::AbortHandle; 2],
}

impl Drop for RoostAgent {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl RoostAgent {
    /// Starts the client for `env`: nothing connects until the first [`report`](Self::report).
    pub fn start(
        env: JobEnv,
        name: &str,
        version: &str,
        capabilities: &[&str],
        handler: Handler,
    ) -> RoostAgent {
        let shared = Arc::new(Shared {
            env,
            hello: json!({
                "protocol": 1,
                "agent": { "name": crate::proto::wire::fold_name(name), "version": version },
                "capabilities": capabilities,
            }),
            latest: Mutex::new(None),
            conn: Mutex::new(None),
            reported: Notify::new(),
        });
        let (deliver_tx, deliver_rx) = mpsc::unbounded_channel::<Delivery>();
        let (done_tx, done_rx) = watch::channel(last_finished(&shared.env.dir));
        let connection = tokio::spawn(connection_loop(shared.clone(), deliver_tx));
        let replies = tokio::spawn(reply_loop(shared.clone(), deliver_rx, handler, done_tx));
        RoostAgent {
            shared,
            replies_done: done_rx,
            tasks: [connection.abort_handle(), replies.abort_handle()],
        }
    }

    /// Sends a full report (`state` and the row's fields; what is left out is null). Text over the
    /// spec's bounds is cut to fit (ending in `…`), so that a long summary never gets the report refused.
    pub fn report(&self, mut report: Value) {
        clip_report(&mut report);
        *self.shared.latest.lock().unwrap_or_else(|p| p.into_inner()) = Some(report.clone());
        self.shared.reported.notify_one();
        if let Some(tx) = self.connection() {
            let (reply, _) = oneshot::channel();
            let _ = tx.send((self.report_request(report), reply));
        }
    }

    /// The live connection's request queue, if connected.
    fn connection(&self) -> Option<Outgoing> {
        self.shared
            .conn
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn report_request(&self, report: Value) -> Value {
        json!({ "op": "report", "args": { "id": self.shared.env.id, "token": self.shared.env.token, "report": report } })
    }

    /// The last reply whose handler finished.
    pub fn finished(&self) -> u64 {
        *self.replies_done.borrow()
    }

    /// Waits until the reply `seq` has been handled.
    pub async fn wait_finished(&mut self, seq: u64) {
        while *self.replies_done.borrow_and_update() < seq {
            if self.replies_done.changed().await.is_err() {
                return;
            }
        }
    }

    /// Sends `op` with `args` on the job's connection (after the first report) and returns its result: the
    /// peer ops and the task board. Refused with the daemon's code; an `Io` error when not connected.
    pub async fn call(&self, op: &str, args: Value) -> Result<Value, crate::client::ClientError> {
        use crate::client::ClientError;
        let tx = self
            .connection()
            .ok_or_else(|| ClientError::Io("not connected: report first".into()))?;
        let (reply, answer) = oneshot::channel();
        tx.send((json!({ "op": op, "args": args }), reply))
            .map_err(|_| ClientError::Io("the connection dropped".into()))?;
        let v = tokio::time::timeout(CALL_TIMEOUT, answer)
            .await
            .map_err(|_| ClientError::Timeout(CALL_TIMEOUT))?
            .map_err(|_| ClientError::Io("the connection dropped".into()))?;
        if v["ok"] == true {
            return Ok(v["result"].clone());
        }
        Err(ClientError::Refused {
            code: crate::proto::wire::ErrorCode::parse(v["code"].as_str().unwrap_or("")),
            message: v["error"].as_str().unwrap_or("").to_string(),
        })
    }

    /// The sessions (`peers {}`).
    pub async fn peers(&self) -> Result<Vec<Value>, crate::client::ClientError> {
        let v = self.call("peers", json!({})).await?;
        Ok(v["peers"].as_array().cloned().unwrap_or_default())
    }

    /// A message to session `to` (an id or a unique name): `{outcome, id}`.
    pub async fn send(&self, to: &str, text: &str) -> Result<Value, crate::client::ClientError> {
        self.call("send", json!({ "to": to, "text": text })).await
    }

    /// A child job of `profile` with `task` whose parent is this job: `{id, name}`.
    pub async fn spawn(
        &self,
        profile: &str,
        task: &str,
        name: Option<&str>,
    ) -> Result<Value, crate::client::ClientError> {
        self.call(
            "spawn",
            json!({ "profile": profile, "task": task, "name": name }),
        )
        .await
    }

    /// This job's result to its parent; the row ends `done` with it.
    pub async fn handback(&self, text: &str) -> Result<Value, crate::client::ClientError> {
        self.call("handback", json!({ "text": text })).await
    }

    /// Be told once (a `notice` item) when `session` is next `idle` or has `ended`.
    pub async fn watch(
        &self,
        session: &str,
        when: &str,
    ) -> Result<Value, crate::client::ClientError> {
        self.call("watch", json!({ "id": session, "when": when }))
            .await
    }

    /// The task board (`task {action: "list"}`): `{tasks}`.
    pub async fn tasks(&self) -> Result<Value, crate::client::ClientError> {
        self.call("task", json!({ "action": "list" })).await
    }

    /// Claims task `id`.
    pub async fn claim_task(&self, id: u64) -> Result<Value, crate::client::ClientError> {
        self.call("task", json!({ "action": "claim", "id": id }))
            .await
    }

    /// Marks task `id` done, with a result.
    pub async fn task_done(
        &self,
        id: u64,
        result: Option<&str>,
    ) -> Result<Value, crate::client::ClientError> {
        self.call(
            "task",
            json!({ "action": "done", "id": id, "result": result }),
        )
        .await
    }

    /// Releases task `id`.
    pub async fn release_task(&self, id: u64) -> Result<Value, crate::client::ClientError> {
        self.call("task", json!({ "action": "release", "id": id }))
            .await
    }

    /// Adds a task coming after tasks `after`.
    pub async fn add_task(
        &self,
        title: &str,
        detail: Option<&str>,
        after: &[u64],
    ) -> Result<Value, crate::client::ClientError> {
        self.call(
            "task",
            json!({ "action": "add", "title": title, "detail": detail, "after": after }),
        )
        .await
    }

    /// Sends the latest report once more and waits (briefly) for its answer.
    pub async fn close(&self) {
        let latest = self
            .shared
            .latest
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let (Some(r), Some(tx)) = (latest, self.connection()) {
            let (reply, answer) = oneshot::channel();
            if tx.send((self.report_request(r), reply)).is_ok() {
                let _ = tokio::time::timeout(Duration::from_secs(2), answer).await;
            }
        }
    }
}

async fn connection_loop(shared: Arc<Shared>, deliver: mpsc::UnboundedSender<Delivery>) {
    // Report first: a connection, and so a reply, starts with a report.
    while shared
        .latest
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .is_none()
    {
        shared.reported.notified().await;
    }
    let mut backoff = agentwire_core::Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
    loop {
        if let Ok(stream) = UnixStream::connect(&shared.env.socket).await {
            backoff.reset();
            serve_connection(&shared, stream, &deliver).await;
        }
        *shared.conn.lock().unwrap_or_else(|p| p.into_inner()) = None;
        if deliver.is_closed() {
            return;
        }
        tokio::time::sleep(backoff.take()).await;
    }
}

async fn serve_connection(
    shared: &Arc<Shared>,
    stream: UnixStream,
    deliver: &mpsc::UnboundedSender<Delivery>,
) {
    let (r, mut w) = stream.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<(Value, oneshot::Sender<Value>)>();
    // hello, then the latest report, before anything else.
    let (h, _) = oneshot::channel();
    let _ = tx.send((json!({ "op": "hello", "args": shared.hello }), h));
    if let Some(rep) = shared
        .latest
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
    {
        let (h, _) = oneshot::channel();
        let _ = tx.send((
            json!({ "op": "report", "args": { "id": shared.env.id, "token": shared.env.token, "report": rep } }),
            h,
        ));
    }
    *shared.conn.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
    let waiting: Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>> = Arc::default();
    let w_waiting = waiting.clone();
    let writer = tokio::spawn(async move {
        let mut next = 0u64;
        while let Some((mut req, answer)) = rx.recv().await {
            next += 1;
            req["id"] = json!(next);
            w_waiting
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(next, answer);
            let mut line = req.to_string();
            line.push('\n');
            if w.write_all(line.as_bytes()).await.is_err() {
                return;
            }
        }
    });
    let mut lines = BufReader::new(r).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if v["event"] == "deliver" && v["id"] == shared.env.id.as_str() {
            if let (Some(seq), Some(text)) = (v["seq"].as_u64(), v["text"].as_str()) {
                let _ = deliver.send(Delivery {
                    seq,
                    text: text.to_string(),
                    mode: v["mode"].as_str().map(String::from),
                    kind: v["kind"].as_str().map(String::from),
                    from: v.get("from").cloned(),
                });
            }
        } else if let Some(id) = v["id"].as_u64() {
            if v["ok"] == false && v["code"] == "unauthorized" {
                tracing::warn!("the daemon says this job's token is wrong; stopping");
                writer.abort();
                return;
            }
            if let Some(a) = waiting
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id)
            {
                let _ = a.send(v);
            }
        }
    }
    writer.abort();
}

async fn reply_loop(
    shared: Arc<Shared>,
    mut deliveries: mpsc::UnboundedReceiver<Delivery>,
    handler: Handler,
    done: watch::Sender<u64>,
) {
    let mut finished = *done.borrow();
    // Peer items handled on this run (an item is acked by itself, and may come again before its ack).
    let mut items_seen: std::collections::VecDeque<u64> = Default::default();
    while let Some(d) = deliveries.recv().await {
        if d.kind.is_some() {
            if !items_seen.contains(&d.seq) {
                handler(d.clone()).await;
                items_seen.push_back(d.seq);
                if items_seen.len() > ITEMS_REMEMBERED {
                    items_seen.pop_front();
                }
            }
            send_ack(&shared, d.seq, true);
            continue;
        }
        if d.seq > finished {
            handler(d.clone()).await;
            finished = d.seq;
            if let Err(e) = keep_finished(&shared.env.dir, finished) {
                tracing::warn!(error = %e, "could not keep the last finished reply");
            }
            done.send_replace(finished);
        }
        // Acked after the handler returned, and again for a seq handled before (a resend).
        send_ack(&shared, finished, false);
    }
}

/// Peer items remembered as handled, to take one sent again before its ack once.
const ITEMS_REMEMBERED: usize = 100;

/// Acks `seq` on the current connection (`exact`: that peer item alone).
fn send_ack(shared: &Shared, seq: u64, exact: bool) {
    let tx = shared
        .conn
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    if let Some(tx) = tx {
        let (a, _) = oneshot::channel();
        let mut args = json!({ "id": shared.env.id, "token": shared.env.token, "seq": seq });
        if exact {
            args["exact"] = json!(true);
        }
        let _ = tx.send((json!({ "op": "ack", "args": args }), a));
    }
}

/// Cuts a report's text fields to the spec's bounds (as the Python and TypeScript clients do).
fn clip_report(report: &mut Value) {
    use crate::proto::report::{
        MAX_CHOICES, MAX_CHOICE_CHARS, MAX_ERROR_CHARS, MAX_MODEL_CHARS, MAX_NAME_CHARS,
        MAX_PR_LINKS, MAX_QUESTION_CHARS, MAX_REMOTE_AT_CHARS, MAX_SUMMARY_CHARS, MAX_TOOL_CHARS,
    };
    fn clip(v: &mut Value, max: usize) {
        if let Value::String(s) = v {
            if s.chars().count() > max {
                let mut cut: String = s.chars().take(max - 1).collect();
                cut.push('\u{2026}');
                *s = cut;
            }
        }
    }
    let Some(o) = report.as_object_mut() else {
        return;
    };
    for (key, max) in [
        ("summary", MAX_SUMMARY_CHARS),
        ("question", MAX_QUESTION_CHARS),
        ("tool", MAX_TOOL_CHARS),
        ("error", MAX_ERROR_CHARS),
        ("name", MAX_NAME_CHARS),
        ("model", MAX_MODEL_CHARS),
        ("thinking", MAX_MODEL_CHARS),
        ("remoteAt", MAX_REMOTE_AT_CHARS),
    ] {
        if let Some(v) = o.get_mut(key) {
            clip(v, max);
        }
    }
    if let Some(Value::Array(choices)) = o.get_mut("choices") {
        choices.truncate(MAX_CHOICES);
        for c in choices {
            clip(c, MAX_CHOICE_CHARS);
        }
    }
    // The first pull requests are kept; a link is never cut (a cut URL leads elsewhere).
    if let Some(Value::Array(links)) = o.get_mut("prLinks") {
        links.truncate(MAX_PR_LINKS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::report::Report;

    #[test]
    fn an_over_long_report_is_cut_to_fit_and_then_accepted() {
        let mut r = json!({
            "state": "done", "summary": "é".repeat(900), "error": null,
            "choices": vec!["x".repeat(300); 25], "tool": "t".repeat(101),
            "prLinks": vec!["https://x.test/pull/1"; 30], "remoteAt": "r".repeat(600),
        });
        assert!(Report::parse(&r).is_err());
        clip_report(&mut r);
        let parsed = Report::parse(&r).expect("fits once cut");
        let summary = parsed.summary.unwrap();
        assert_eq!(summary.chars().count(), 500);
        assert!(summary.ends_with('\u{2026}'));
        assert_eq!(parsed.choices.len(), 20);
        assert_eq!(parsed.tool.unwrap().chars().count(), 100);
        assert_eq!(parsed.pr_links.len(), 20);
        assert_eq!(parsed.remote_at.unwrap().chars().count(), 500);
    }
}
