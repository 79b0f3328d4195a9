//! The daemon's shared state: the supervisor, which connection speaks for which job, the subscribers, the
//! stopped processes, and the store. Every op takes the lock, changes the supervisor, writes what must be
//! durable before it answers, and sends lines to connections (written at once or queued: never blocking
//! it).

use super::process::{self, JobEnv};
use super::run_as::RunAs;
use super::stopping::Stopping;
use super::DaemonConfig;
use crate::daemon::store::{Escalations, Store};
use crate::proto::escalation::Escalation;
use crate::proto::op::{Arrange, Lifecycle};
use crate::proto::report::Report;
use crate::proto::supervisor::{Job, Life, Replied, ReplyMode, Supervisor};
use crate::proto::wire::{event_line, ErrorCode, Refusal};
use serde_json::{json, Map, Value};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{mpsc, Notify};

/// A connection's socket, written by its own task and, for a line that need wait for nothing, by the task
/// that has the line (a message for another session goes straight onto the target's socket, with no hop
/// to the target's task). A line is never interleaved with another: whoever writes holds `writing`.
pub(super) struct Wire {
    pub(super) half: tokio::net::unix::OwnedWriteHalf,
    /// Held while a line is being written.
    pub(super) writing: std::sync::atomic::AtomicBool,
    /// The rest of a line another task began to write and could not finish (the socket was full): the
    /// connection's task writes it before anything else, `writing` held for it meanwhile.
    pub(super) rest: std::sync::Mutex<Option<Vec<u8>>>,
    /// Set while the connection's task answers a request: what the request sends this connection (a
    /// report's waiting replies) is queued, so that it follows the answer, as clients expect.
    pub(super) answering: std::sync::atomic::AtomicBool,
}

impl Wire {
    /// Takes the right to write, if nobody holds it.
    pub(super) fn claim(&self) -> bool {
        self.writing
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    pub(super) fn release(&self) {
        self.writing.store(false, Ordering::SeqCst);
    }

    /// The rest of a line left by another task (its writer's right with it), if there is one.
    pub(super) fn take_rest(&self) -> Option<Vec<u8>> {
        self.rest.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// What a connection's task is handed to write.
pub(super) enum Queued {
    /// A line, after those before it.
    Line(String),
    /// Nothing of its own: a line's rest waits in [`Wire::rest`].
    Rest,
}

/// A connection's outbound side.
#[derive(Clone)]
pub(super) struct Outbox {
    pub(super) tx: mpsc::UnboundedSender<Queued>,
    /// Bytes queued and not yet written.
    pub(super) queued: Arc<AtomicUsize>,
    /// Fired to drop a connection that left too much unread.
    pub(super) kill: Arc<Notify>,
    pub(super) wire: Arc<Wire>,
}

impl Outbox {
    /// Sends a line: written at once when nothing waits before it and the socket takes it, else queued
    /// for the connection's task; drops the connection when its client leaves more than the limit unread.
    pub(super) fn send(&self, line: String) {
        if self.queued.load(Ordering::SeqCst) == 0
            && !self.wire.answering.load(Ordering::SeqCst)
            && self.wire.claim()
        {
            // Nothing is queued before it and nobody writes: it goes now.
            let written = match self.wire.half.try_write(line.as_bytes()) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
                // The connection's task meets the error itself and ends.
                Err(_) => line.len(),
            };
            if written == line.len() {
                self.wire.release();
                return;
            }
            // Begun and not finished: the rest goes first, written by the connection's task, which now
            // holds the right to write.
            let rest = line.as_bytes()[written..].to_vec();
            self.queued.fetch_add(rest.len(), Ordering::SeqCst);
            *self.wire.rest.lock().unwrap_or_else(|p| p.into_inner()) = Some(rest);
            let _ = self.tx.send(Queued::Rest);
            return;
        }
        let n = line.len();
        if self.queued.fetch_add(n, Ordering::SeqCst) + n > crate::proto::wire::MAX_UNREAD_BYTES {
            self.kill.notify_one();
            return;
        }
        let _ = self.tx.send(Queued::Line(line));
    }
}

pub(super) struct State {
    pub(super) sup: Supervisor,
    /// The connection that reported for each job (replies go on it).
    pub(super) job_conn: HashMap<String, u64>,
    pub(super) outboxes: HashMap<u64, Outbox>,
    pub(super) subscribers: HashSet<u64>,
    /// Jobs whose row changed and is not yet written.
    pub(super) dirty: HashSet<String>,
    /// Children this daemon started (to reap them).
    pub(super) children: HashMap<String, std::process::Child>,
    /// The process groups of jobs' processes (each its leader's pid) and their jobs, while the group has a
    /// process: a connection from one of them may not control jobs ([`super::peer`]). Kept past the job's
    /// exit, stop or removal, for what is left of its group.
    pub(super) job_groups: HashMap<u32, String>,
    /// Jobs of hosted profiles served now.
    pub(super) hosted_jobs: HashMap<String, Box<dyn super::hosted::HostedJob>>,
    /// Processes stopped (by `stop`, `rm`, `respawn`) and not yet gone.
    pub(super) stopping: Vec<Stopping>,
    /// Stop escalations to journal at the next write.
    pub(super) to_journal: Vec<Escalation>,
    /// Stop escalations done or moot, to forget at the next write.
    pub(super) to_forget: Vec<Escalation>,
    pub(super) next_conn: u64,
    /// The newest feed event written to the store.
    pub(super) written_event: u64,
    /// When retention last looked for idle jobs ([`super::retention`]).
    pub(super) retention_checked: Option<std::time::Instant>,
    /// The message rules of `send` ([`crate::proto::peer_item::MessageRules`]).
    pub(super) message_rules: crate::proto::peer_item::MessageRules,
    /// The bounds on `spawn` ([`crate::proto::spawn_rules::SpawnRules`]).
    pub(super) spawn_rules: crate::proto::spawn_rules::SpawnRules,
    /// Jobs removed whose removal is not written yet (its write failed): written with the next write.
    pub(super) to_remove: Vec<String>,
    /// Foreground peers (`peer_register`), by connection.
    pub(super) fg_peers: HashMap<u64, crate::proto::board::Session>,
    /// Foreground peers that left, by id, and when their claims go unless they register again.
    pub(super) fg_leaving: HashMap<String, std::time::Instant>,
    /// The concierge's status as last pushed to the hubs (pushed again only when it changed).
    pub(super) concierge_pushed: std::cell::RefCell<Option<Value>>,
}

pub(super) struct Shared {
    pub(super) config: DaemonConfig,
    /// The settings read from the environment at start.
    pub(super) tuning: super::Tuning,
    /// The users jobs of profiles with `user` run as, by profile.
    run_as: HashMap<String, RunAs>,
    state: Mutex<State>,
    store: Mutex<Store>,
    /// Set by the `shutdown` op: whoever runs the daemon drains and stops it ([`super::Daemon::shutdown_asked`]).
    pub(super) shutdown_asked: tokio::sync::watch::Sender<bool>,
    /// Told when something waits to be typed into a terminal agent ([`super::typist`]).
    pub(super) typing: tokio::sync::Notify,
    /// Connections of the owner's controllers that have not identified themselves yet, by connection
    /// number (oldest first; [`super::conn::SILENT_CONTROLLERS_KEPT`]).
    pub(super) silent_controllers: Arc<Mutex<std::collections::BTreeSet<u64>>>,
}

/// Unix milliseconds: a stop's deadline must mean the same to the next daemon.
pub(super) use agentwire_core::now_ms;
pub(super) use agentwire_core::now_secs as now;

fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A job's row, as `rows` and `subscribe` give it. Its summary is for people: an agent that echoes or
/// quotes a peer item it was sent (an engine agent's answer to a message) shows its envelope as who sent
/// what ([`crate::proto::peer_item::for_people`]), not the envelope's words to the agent.
pub fn row(job: &Job, connected: bool) -> Value {
    let r = job.report.as_ref();
    let state = job.row_state();
    let summary = r
        .and_then(|r| r.summary.as_deref())
        .or(job.output.as_deref())
        .map(crate::proto::peer_item::for_people);
    json!({
        "id": job.id,
        "name": job.name,
        "profile": job.profile,
        "state": state,
        "status": r.and_then(|r| r.status.clone()),
        "waitingFor": r.and_then(|r| r.waiting_for.clone()),
        "summary": summary,
        "question": r.and_then(|r| r.question.clone()),
        "choices": r.map(|r| r.choices.clone()).unwrap_or_default(),
        "tool": r.and_then(|r| r.tool.clone()),
        "error": r.and_then(|r| r.error.clone()),
        "model": r.and_then(|r| r.model.clone()),
        "prLinks": r.map(|r| r.pr_links.clone()).unwrap_or_default(),
        "remoteAt": r.and_then(|r| r.remote_at.clone()),
        "capabilities": job.capabilities,
        "connected": connected,
        "pending": job.pending.len(),
        "reports": job.reports,
        "conversation": job.conversation,
        "pinned": job.pinned,
        "order": job.order,
        "parent": job.parent,
        "role": job.role,
    })
}

/// A job's row as the daemon shows it: [`row`], with the concierge's suggestion while it waits.
pub(super) fn row_in(st: &State, job: &Job) -> Value {
    let mut r = row(job, st.job_conn.contains_key(&job.id));
    if job.row_state() == "blocked" {
        if let Some(s) = st.sup.concierge.suggestions.get(&job.id) {
            r["suggested"] = json!(s);
        }
    }
    r
}

pub(super) fn deliver_line(job_id: &str, p: &crate::proto::supervisor::Pending) -> String {
    let mut f = Map::new();
    f.insert("id".into(), json!(job_id));
    f.insert("seq".into(), json!(p.seq));
    f.insert("text".into(), json!(p.text));
    if let (Some(item), true) = (&p.item, p.exact) {
        f.insert("kind".into(), json!(item.kind));
        f.insert("from".into(), json!(item.from));
        f.insert("relation".into(), json!(item.relation));
    }
    if let Some(m) = p.mode {
        f.insert(
            "mode".into(),
            serde_json::to_value(m).unwrap_or(Value::Null),
        );
    }
    event_line("deliver", f)
}

impl Shared {
    pub(super) fn new(
        config: DaemonConfig,
        tuning: super::Tuning,
        run_as: HashMap<String, RunAs>,
        store: Store,
        sup: Supervisor,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            config,
            tuning,
            run_as,
            state: Mutex::new(State {
                sup,
                job_conn: HashMap::new(),
                outboxes: HashMap::new(),
                subscribers: HashSet::new(),
                dirty: HashSet::new(),
                children: HashMap::new(),
                job_groups: HashMap::new(),
                hosted_jobs: HashMap::new(),
                stopping: Vec::new(),
                to_journal: Vec::new(),
                to_forget: Vec::new(),
                next_conn: 1,
                written_event: 0,
                retention_checked: None,
                message_rules: Default::default(),
                spawn_rules: Default::default(),
                to_remove: Vec::new(),
                fg_peers: HashMap::new(),
                fg_leaving: HashMap::new(),
                concierge_pushed: Default::default(),
            }),
            store: Mutex::new(store),
            shutdown_asked: tokio::sync::watch::channel(false).0,
            typing: tokio::sync::Notify::new(),
            silent_controllers: Default::default(),
        })
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes job `id` now if it can; else it is marked dirty and written at the next tick. For a change
    /// made after what the answer acknowledges was already durable.
    pub(super) fn mark_written_later(&self, st: &mut State, id: &str) {
        if let Err(e) = self.persist(st, &[id], &[], None) {
            tracing::warn!(job = id, error = %e, "could not write a job; trying again at the next tick");
            st.dirty.insert(id.to_string());
        }
    }

    /// Writes jobs durably (and their new feed events, and the stop escalations armed or done since the
    /// last write).
    pub(super) fn persist(
        &self,
        st: &mut State,
        jobs: &[&str],
        removed: &[String],
        dispatch: Option<(String, String)>,
    ) -> Result<(), Refusal> {
        // Watchers that notices were queued for are written with the rest.
        let mut ids: Vec<&str> = jobs.to_vec();
        for (watcher, _) in &st.sup.fired {
            if !ids.contains(&watcher.as_str()) {
                ids.push(watcher);
            }
        }
        let list: Vec<&Job> = ids.iter().filter_map(|id| st.sup.jobs.get(*id)).collect();
        let records = crate::daemon::store::Records {
            watches: st.sup.watches_changed.then_some(&st.sup.watches[..]),
            board: st.sup.board_changed.then_some(&st.sup.board),
            concierge: st.sup.concierge_changed.then_some(&st.sup.concierge),
            schedules: st.sup.schedules_changed.then_some(&st.sup.schedules),
        };
        let events: Vec<_> = st
            .sup
            .events
            .iter()
            .filter(|e| e.seq > st.written_event)
            .collect();
        let dispatch: Vec<(String, String)> = dispatch.into_iter().collect();
        let mut removed = removed.to_vec();
        removed.extend(st.to_remove.iter().cloned());
        let escalations = Escalations {
            armed: &st.to_journal,
            done: &st.to_forget,
        };
        self.store
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .write_all(&list, &removed, &dispatch, &events, escalations, records)
            .map_err(|e| Refusal::new(ErrorCode::Busy, format!("could not save: {e}")))?;
        st.written_event = st.sup.next_event;
        st.to_remove.clear();
        st.to_journal.clear();
        st.to_forget.clear();
        st.sup.watches_changed = false;
        st.sup.schedules_changed = false;
        if std::mem::take(&mut st.sup.concierge_changed) {
            self.push_concierge(st);
        }
        if std::mem::take(&mut st.sup.board_changed) {
            self.push_board(st);
        }
        // The notices are durable: to the agents of their watchers that are connected.
        for (watcher, seq) in std::mem::take(&mut st.sup.fired) {
            let line = st.sup.jobs.get(&watcher).and_then(|j| {
                j.pending
                    .iter()
                    .find(|p| p.seq == seq)
                    .map(|p| deliver_line(&watcher, p))
            });
            let outbox = st.job_conn.get(&watcher).and_then(|c| st.outboxes.get(c));
            if let (Some(line), Some(o)) = (line, outbox) {
                o.send(line);
            }
            self.push_row(st, &watcher);
        }
        self.deliver_fg_notices(st);
        Ok(())
    }

    /// The board's counts to every subscribed controller: `{"event": "board", open, claimed, blocked,
    /// done}`.
    pub(super) fn push_board(&self, st: &State) {
        if st.subscribers.is_empty() {
            return;
        }
        let mut f = Map::new();
        if let Ok(Value::Object(counts)) = serde_json::to_value(st.sup.board.counts()) {
            f.extend(counts);
        }
        self.push_all(st, event_line("board", f));
    }

    pub(super) fn push_row(&self, st: &State, job_id: &str) {
        if st.subscribers.is_empty() {
            return;
        }
        let row = match st.sup.jobs.get(job_id) {
            Some(j) => row_in(st, j),
            None => json!({ "id": job_id, "removed": true }),
        };
        let mut f = Map::new();
        f.insert("row".into(), row);
        self.push_all(st, event_line("row", f));
        if st.sup.concierge.job.as_deref() == Some(job_id) {
            // Its row is its status's state.
            self.push_concierge(st);
        }
    }

    /// The job process `pid` is one of, if any ([`super::peer`]).
    pub(super) fn job_of_process(&self, pid: u32) -> Option<String> {
        if self.lock().job_groups.is_empty() {
            return None;
        }
        // Read without the lock: a few files of /proc.
        let ancestry = super::peer::ancestry(pid);
        super::peer::job_of(&ancestry, &self.lock().job_groups)
    }

    pub(super) fn open_conn(&self, outbox: Outbox) -> u64 {
        let mut st = self.lock();
        let id = st.next_conn;
        st.next_conn += 1;
        st.outboxes.insert(id, outbox);
        id
    }

    pub(super) fn close_conn(&self, conn: u64) {
        let mut st = self.lock();
        st.outboxes.remove(&conn);
        st.subscribers.remove(&conn);
        let jobs: Vec<String> = st
            .job_conn
            .iter()
            .filter(|(_, c)| **c == conn)
            .map(|(j, _)| j.clone())
            .collect();
        for j in jobs {
            st.job_conn.remove(&j);
            self.push_row(&st, &j);
        }
        if let Some(fg) = st.fg_peers.remove(&conn) {
            let release_at = std::time::Instant::now() + self.tuning.fg_claim_grace;
            st.fg_leaving.insert(fg.id, release_at);
        }
    }

    /// `report`: the row; this connection becomes the job's, and every pending reply is sent on it.
    pub(super) fn report(
        &self,
        conn: u64,
        id: &str,
        token: &str,
        report: Report,
        capabilities: &[String],
    ) -> Result<Value, Refusal> {
        let mut st = self.lock();
        let blocked = report.state == crate::proto::report::JobState::Blocked;
        st.sup.report(id, token, report, now())?;
        if !blocked && st.sup.concierge.suggestions.remove(id).is_some() {
            // It waits no more: the suggestion was for a question that is gone.
            st.sup.concierge_changed = true;
        }
        if let Some(job) = st.sup.jobs.get_mut(id) {
            if !capabilities.is_empty() && job.capabilities != capabilities {
                job.capabilities = capabilities.to_vec();
            }
        }
        // The same connection reporting again (the usual case) changes nothing here.
        let previous = match st.job_conn.get_mut(id) {
            Some(c) => Some(std::mem::replace(c, conn)),
            None => st.job_conn.insert(id.to_string(), conn),
        };
        if previous != Some(conn) {
            // A new reporting connection: every reply not yet acked is sent again.
            st.sup.items_as_reported(id);
            let lines: Vec<String> = st.sup.jobs[id]
                .pending
                .iter()
                .map(|p| deliver_line(id, p))
                .collect();
            if let Some(o) = st.outboxes.get(&conn) {
                for l in lines {
                    o.send(l);
                }
            }
        }
        if !st.dirty.contains(id) {
            st.dirty.insert(id.to_string());
        }
        self.push_row(&st, id);
        Ok(json!({}))
    }

    /// `ack {id, token, seq, exact?}`.
    pub(super) fn ack(
        &self,
        id: &str,
        token: &str,
        seq: u64,
        exact: bool,
    ) -> Result<Value, Refusal> {
        let mut st = self.lock();
        // What the ack clears is put back if the write fails (not the whole job: its pending replies may
        // hold megabytes, and acks are frequent).
        let cleared = st.sup.ack(id, token, seq, exact)?;
        if !cleared.is_empty() {
            if let Err(e) = self.persist(&mut st, &[id], &[], None) {
                st.sup.unack(id, cleared);
                return Err(e);
            }
            self.push_row(&st, id);
        }
        Ok(json!({}))
    }

    /// `dispatch`.
    pub(super) fn dispatch(&self, args: &Map<String, Value>) -> Result<Value, Refusal> {
        self.dispatch_with(args, None)
    }

    /// A dispatch, of a child of session `parent` when there is one (`spawn`).
    pub(super) fn dispatch_with(
        &self,
        args: &Map<String, Value>,
        parent: Option<crate::proto::peer_item::From>,
    ) -> Result<Value, Refusal> {
        let mut st = self.lock();
        self.dispatch_locked(&mut st, args, parent)
    }

    /// A dispatch under the lock (a schedule's run, the concierge's act).
    pub(super) fn dispatch_locked(
        &self,
        st: &mut State,
        args: &Map<String, Value>,
        parent: Option<crate::proto::peer_item::From>,
    ) -> Result<Value, Refusal> {
        use crate::proto::wire::Args;
        let profile_name = args.req_str("profile")?;
        let task = args.opt_str("task")?.map(String::from);
        let name = args.opt_str("name")?;
        let request_id = args.opt_str("requestId")?;
        let conversation = args.opt_str("conversation")?;
        if let Some(c) = conversation {
            crate::proto::wire::check_conversation(c)?;
        }
        if let Some(r) = request_id {
            if let Some(job) = st.sup.dispatched(r) {
                return Ok(json!({ "id": job.id, "name": job.name }));
            }
        }
        let task_mode = self.task_mode(profile_name).ok_or_else(|| {
            Refusal::new(ErrorCode::NotFound, format!("no profile {profile_name:?}"))
        })?;
        let id = random_hex(6);
        let token = random_hex(16);
        let at = now();
        let undo = st.sup.undo_point(&id);
        st.sup.add(
            id.clone(),
            token,
            profile_name,
            task.clone(),
            name,
            request_id,
            at,
        )?;
        if let Some(c) = conversation {
            // In the job's own record, written below with it: the conversation's job is found again
            // after a restart, and goes with the job when it is removed.
            st.sup.serve_conversation(&id, c);
        }
        if let Some(parent) = parent {
            // Its start is the parent's doing.
            if let Some(e) = st.sup.events.back_mut() {
                e.who = Some(parent.name.clone());
                e.who_id = Some(parent.id.clone());
            }
            if let Some(job) = st.sup.jobs.get_mut(&id) {
                job.parent = Some(parent.id);
            }
        }
        if let (crate::daemon::profile::TaskMode::Type, Some(t)) = (task_mode, &task) {
            // The first task is reply 1.
            if let Err(e) = st.sup.reply(&id, t, None, None, true, at) {
                st.sup.restore(undo);
                return Err(e);
            }
        }
        if let Err(e) = self.persist(
            st,
            &[&id],
            &[],
            request_id.map(|r| (r.to_string(), id.clone())),
        ) {
            st.sup.restore(undo);
            return Err(e);
        }
        self.start_process(st, &id);
        self.push_row(st, &id);
        let job = &st.sup.jobs[&id];
        Ok(json!({ "id": job.id, "name": job.name, "reports": job.reports }))
    }

    /// How profile `name` takes its first task, if there is such a profile (a hosted one takes it as
    /// reply 1).
    fn task_mode(&self, name: &str) -> Option<crate::daemon::profile::TaskMode> {
        match self.config.profiles.get(name) {
            Some(p) => Some(p.task),
            None => self
                .config
                .hosted
                .get(name)
                .map(|_| crate::daemon::profile::TaskMode::Type),
        }
    }

    pub(super) fn start_process(&self, st: &mut State, id: &str) {
        let Some(job) = st.sup.jobs.get(id) else {
            return;
        };
        let dir = self.config.data_dir.join("jobs").join(id);
        if let Some(host) = self.config.hosted.get(&job.profile) {
            self.start_hosted(st, id, host.clone(), dir);
            return;
        }
        let Some(profile) = self.config.profiles.get(&job.profile).cloned() else {
            return;
        };
        let env = JobEnv {
            id,
            token: &job.token,
            socket: &self.config.socket,
            dir: &dir,
        };
        let run_as = self.run_as.get(&job.profile);
        let holder = self.config.terminal_holder.as_deref();
        match process::spawn(&profile, job.task.as_deref(), &env, run_as, holder) {
            Ok(child) => {
                let pid = child.id();
                st.children.insert(id.to_string(), child);
                st.job_groups.insert(pid, id.to_string());
                let identity = process::identity(pid);
                if let Some(j) = st.sup.jobs.get_mut(id) {
                    j.pid = Some(pid);
                    j.pid_identity = identity;
                    j.life = Life::Running;
                }
                st.dirty.insert(id.to_string());
                if !profile.protocol && self.config.terminal_holder.is_some() {
                    // Its task (when its profile types it) waits to be typed.
                    self.typing.notify_one();
                }
            }
            Err(e) => {
                tracing::warn!(job = id, error = %e, "could not start a job");
                if let Some(j) = st.sup.jobs.get_mut(id) {
                    j.life = Life::Exited;
                    j.output = Some(format!("could not start: {e}"));
                }
                st.sup
                    .event(now(), id, "exit", format!("could not start: {e}"));
                st.dirty.insert(id.to_string());
            }
        }
    }

    /// Serves job `id` of a hosted profile in this process: as a process is started, with the job's
    /// identity, and no pid.
    fn start_hosted(
        &self,
        st: &mut State,
        id: &str,
        host: std::sync::Arc<dyn super::hosted::Host>,
        dir: std::path::PathBuf,
    ) {
        if let Some(mut old) = st.hosted_jobs.remove(id) {
            old.stop();
        }
        if let Err(e) = std::fs::create_dir_all(&dir) {
            tracing::warn!(job = id, error = %e, "could not make a hosted job's dir");
            if let Some(j) = st.sup.jobs.get_mut(id) {
                j.life = Life::Exited;
                j.output = Some(format!("could not start: {e}"));
            }
            st.sup
                .event(now(), id, "exit", format!("could not start: {e}"));
            st.dirty.insert(id.to_string());
            return;
        }
        let Some(job) = st.sup.jobs.get_mut(id) else {
            return;
        };
        let env = crate::proto::job_env::JobEnv {
            id: id.to_string(),
            token: job.token.clone(),
            socket: self.config.socket.clone(),
            dir,
        };
        job.life = Life::Running;
        job.pid = None;
        job.pid_identity = None;
        st.hosted_jobs.insert(id.to_string(), host.start(env));
        st.dirty.insert(id.to_string());
    }

    /// At shutdown: the hosted jobs are let go (not stopped), so the next daemon serves them again.
    pub(super) fn leave_hosted(&self) {
        let mut st = self.lock();
        st.hosted_jobs.clear();
    }

    /// `conversation {profile, conversation}`: the row of the job of `profile` dispatched last for the
    /// conversation, or null. From memory (the supervisor's index), so it costs a hash and no disk.
    pub(super) fn conversation(&self, args: &Map<String, Value>) -> Result<Value, Refusal> {
        use crate::proto::wire::Args;
        let profile = args.req_str("profile")?;
        let conversation = args.req_str("conversation")?;
        crate::proto::wire::check_conversation(conversation)?;
        let st = self.lock();
        let job = st
            .sup
            .conversation_job(profile, conversation)
            .map(|j| row_in(&st, j));
        Ok(json!({ "job": job }))
    }

    /// `reply`.
    pub(super) fn reply(&self, args: &Map<String, Value>) -> Result<Value, Refusal> {
        use crate::proto::wire::Args;
        let id = args.req_str("id")?;
        let text = args.req_str("text")?;
        let mode = match args.opt_str("mode")? {
            None => None,
            Some("steer") => Some(ReplyMode::Steer),
            Some("followUp") => Some(ReplyMode::FollowUp),
            Some(m) => return Err(Refusal::bad(format!("mode {m:?} is not steer or followUp"))),
        };
        let request_id = args.opt_str("requestId")?;
        let mut st = self.lock();
        self.reply_locked(&mut st, id, text, mode, request_id, None)
    }

    /// A reply under the lock, from the person, or, with `who`, from a session acting for them (the
    /// concierge): its `reply` event says who.
    pub(super) fn reply_locked(
        &self,
        st: &mut State,
        id: &str,
        text: &str,
        mode: Option<ReplyMode>,
        request_id: Option<&str>,
        who: Option<&crate::proto::peer_item::From>,
    ) -> Result<Value, Refusal> {
        let connected = st.job_conn.contains_key(id);
        let undo = st.sup.undo_point(id);
        let before = st.sup.next_event;
        let replied = st.sup.reply(id, text, mode, request_id, connected, now())?;
        if let Some(who) = who {
            st.sup.attribute_since(before, who);
        }
        let answer = self.replied(st, id, replied, undo)?;
        // An answer came: a suggestion for it is moot (written with the next write).
        if st.sup.concierge.suggestions.remove(id).is_some() {
            st.sup.concierge_changed = true;
        }
        Ok(answer)
    }

    /// What becomes of a reply the supervisor took: saved and delivered, a job stopped, or a resend.
    fn replied(
        &self,
        st: &mut State,
        id: &str,
        replied: Replied,
        undo: crate::proto::supervisor::Undo,
    ) -> Result<Value, Refusal> {
        match replied {
            Replied::Duplicate => {
                // Taken before. If its job has exited since, by itself, with the reply still waiting (a
                // crash came between saving the reply and starting the job, say), it is started so the
                // reply reaches an agent; a job a user stopped stays stopped.
                let exited = st
                    .sup
                    .jobs
                    .get(id)
                    .is_some_and(|j| j.life == Life::Exited && !j.pending.is_empty());
                if exited {
                    st.sup.event(now(), id, "respawn", "started for a reply");
                    self.start_process(st, id);
                    self.mark_written_later(st, id);
                    self.push_row(st, id);
                }
                Ok(json!({ "duplicate": true, "saved": true }))
            }
            Replied::Stop => {
                self.stop_job(st, id);
                // Its `stop` event came before the stop: its watches and claims see it stopped now.
                st.sup.ended(id, now());
                self.persist(st, &[id], &[], None)?;
                self.push_row(st, id);
                Ok(json!({ "saved": true, "stopped": true }))
            }
            Replied::Saved(seq) => {
                if let Err(e) = self.persist(st, &[id], &[], None) {
                    st.sup.restore(undo);
                    return Err(e);
                }
                if st.sup.jobs.get(id).is_some_and(|j| j.life != Life::Running) {
                    // A reply to a job that ended starts it again: the reply waits for its agent.
                    st.sup.event(now(), id, "respawn", "started for a reply");
                    self.start_process(st, id);
                    // The reply is saved and answered as saved whatever happens to this write.
                    self.mark_written_later(st, id);
                }
                if let Some(c) = st.job_conn.get(id) {
                    if let (Some(o), Some(p)) = (st.outboxes.get(c), st.sup.jobs[id].pending.back())
                    {
                        o.send(deliver_line(id, p));
                    }
                }
                self.push_row(st, id);
                if st
                    .sup
                    .jobs
                    .get(id)
                    .is_some_and(|j| self.typed_to(&j.profile))
                {
                    self.typing.notify_one();
                }
                let reports = st.sup.jobs.get(id).map_or(0, |j| j.reports);
                Ok(json!({ "saved": true, "seq": seq, "reports": reports }))
            }
        }
    }

    /// SIGTERM to the job's process group, and its escalation (SIGKILL past the grace) armed and queued
    /// for the journal; the caller's write makes it durable before the op is answered. A crash between the
    /// signal and that write loses the escalation, but then the stop was not answered either, and the job's
    /// record still shows it running (re-adopted by the next daemon, to be stopped again).
    pub(super) fn stop_job(&self, st: &mut State, id: &str) {
        // Its process is reaped once it has gone, so it leaves no zombie behind; past the grace it is
        // killed.
        let child = st.children.remove(id);
        if let Some(mut hosted) = st.hosted_jobs.remove(id) {
            hosted.stop();
        }
        // The stopped process's connection no longer speaks for the job: replies wait for the next agent
        // to report (after a respawn, with the new token), and `/` commands are refused meanwhile.
        st.job_conn.remove(id);
        let mut stopping = None;
        if let Some(job) = st.sup.jobs.get_mut(id) {
            if job.life == Life::Running {
                if let Some(pid) = job.pid {
                    // A child of this daemon is its own until reaped; a re-adopted pid only while it is
                    // still the job's process.
                    if child.is_some() || process::job_alive(pid, job.pid_identity.as_deref()) {
                        process::terminate(pid);
                        stopping = Some((pid, job.pid_identity.clone()));
                    }
                }
            }
            job.life = Life::Stopped;
            job.pid = None;
            job.pid_identity = None;
        }
        let stopping = stopping.or_else(|| child.as_ref().map(|c| (c.id(), None::<String>)));
        if let Some((pid, identity)) = stopping {
            // A process recorded without an identity (a store from before it, or /proc unreadable) is
            // read now: it is the one just signalled, or the daemon's own child, not yet reaped.
            let identity = identity.or_else(|| process::identity(pid));
            let p = Stopping::new(id, pid, identity, child, now_ms());
            st.to_journal.extend(p.record());
            st.stopping.push(p);
        }
    }

    /// `stop`, `rm`, `respawn`.
    pub(super) fn lifecycle(&self, what: Lifecycle, id: &str) -> Result<Value, Refusal> {
        let mut st = self.lock();
        self.lifecycle_locked(&mut st, what, id)
    }

    /// `stop`, `rm`, `respawn` under the lock.
    pub(super) fn lifecycle_locked(
        &self,
        st: &mut State,
        what: Lifecycle,
        id: &str,
    ) -> Result<Value, Refusal> {
        st.sup.job(id)?;
        let at = now();
        match what {
            Lifecycle::Stop => {
                self.stop_job(st, id);
                st.sup.event(at, id, "stop", "stopped");
                self.persist(st, &[id], &[], None)?;
            }
            Lifecycle::Rm => {
                self.remove_job(st, id, "removed")?;
            }
            Lifecycle::Respawn => {
                self.stop_job(st, id);
                // A new token: whatever is left of the old process cannot speak for the job any more.
                if let Some(job) = st.sup.jobs.get_mut(id) {
                    job.token = random_hex(16);
                }
                st.sup.event(at, id, "respawn", "started again");
                self.start_process(st, id);
                self.persist(st, &[id], &[], None)?;
            }
        }
        self.push_row(st, id);
        Ok(json!({}))
    }

    /// Stops and removes job `id` (feed event `rm` with `why`), and its dir with what its agent wrote.
    pub(super) fn remove_job(&self, st: &mut State, id: &str, why: &str) -> Result<(), Refusal> {
        self.stop_job(st, id);
        if st.sup.concierge.job.as_deref() == Some(id) {
            // Without its job the concierge is off; `on` starts a new one.
            let c = &mut st.sup.concierge;
            c.job = None;
            c.on = false;
            c.in_flight = None;
            st.sup.concierge_changed = true;
        }
        if st.sup.concierge.suggestions.remove(id).is_some() {
            st.sup.concierge_changed = true;
        }
        st.sup.remove(id);
        st.job_conn.remove(id);
        st.children.remove(id);
        st.sup.event(now(), id, "rm", why);
        st.message_rules.forget(id);
        st.spawn_rules.forget(id);
        if let Err(e) = self.persist(st, &[], &[id.to_string()], None) {
            // Gone from memory: written with the next write that succeeds.
            st.to_remove.push(id.to_string());
            return Err(e);
        }
        let dir = self.config.data_dir.join("jobs").join(id);
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(job = %id, dir = %dir.display(), error = %e, "could not remove a removed job's dir");
            }
        }
        Ok(())
    }

    /// `pin {id, pinned}`, `rename {id, name}` and `reorder {ids}`: how a person arranges the rows. Durable
    /// before the answer; undone when the write fails.
    pub(super) fn arrange(
        &self,
        how: Arrange,
        args: &Map<String, Value>,
    ) -> Result<Value, Refusal> {
        use crate::proto::wire::Args;
        let mut st = self.lock();
        let before = st.sup.arrangement();
        let changed: Vec<String> = match how {
            Arrange::Pin => {
                let id = args.req_str("id")?;
                let pinned = match args.get("pinned") {
                    Some(Value::Bool(b)) => *b,
                    _ => return Err(Refusal::bad("`pinned` is true or false")),
                };
                st.sup.pin(id, pinned)?;
                vec![id.to_string()]
            }
            Arrange::Rename => {
                let id = args.req_str("id")?;
                st.sup.rename(id, args.req_str("name")?, now())?;
                vec![id.to_string()]
            }
            Arrange::Reorder => {
                let ids: Vec<String> = match args.get("ids") {
                    Some(Value::Array(a)) if a.len() <= st.sup.jobs.len() => a
                        .iter()
                        .map(|v| v.as_str().map(str::to_string))
                        .collect::<Option<_>>()
                        .ok_or_else(|| Refusal::bad("`ids` holds job ids (strings)"))?,
                    Some(Value::Array(_)) => {
                        return Err(Refusal::bad("`ids` names more jobs than there are"))
                    }
                    _ => return Err(Refusal::bad("`ids` is a list of job ids")),
                };
                let had: HashMap<String, Option<u64>> = st
                    .sup
                    .jobs
                    .iter()
                    .map(|(id, j)| (id.clone(), j.order))
                    .collect();
                st.sup.reorder(&ids)?;
                st.sup
                    .jobs
                    .iter()
                    .filter(|(id, j)| had.get(*id) != Some(&j.order))
                    .map(|(id, _)| id.clone())
                    .collect()
            }
        };
        let refs: Vec<&str> = changed.iter().map(String::as_str).collect();
        if let Err(e) = self.persist(&mut st, &refs, &[], None) {
            st.sup.rearrange(before);
            return Err(e);
        }
        for id in &changed {
            self.push_row(&st, id);
        }
        Ok(json!({}))
    }

    /// `shutdown {}`: answered, then the daemon is drained and stopped by whoever runs it; jobs run on, as
    /// across a restart.
    pub(super) fn ask_shutdown(&self) -> Value {
        tracing::info!("a controller asked the daemon to shut down");
        self.shutdown_asked.send_replace(true);
        json!({})
    }

    /// `rows`.
    pub(super) fn rows(&self) -> Value {
        let st = self.lock();
        let mut rows: Vec<(&String, Value)> = st
            .sup
            .jobs
            .iter()
            .map(|(id, j)| (id, row_in(&st, j)))
            .collect();
        rows.sort_by(|a, b| a.0.cmp(b.0));
        json!({ "rows": rows.into_iter().map(|(_, r)| r).collect::<Vec<_>>() })
    }

    /// `about {}` → `{daemon: {name, version}, jobs, profiles}`: what this daemon is, for a controller that
    /// knows only its socket. `jobs` is the directory of the jobs' directories (a job's `output.log` is in
    /// `<jobs>/<id>`); `profiles` what it dispatches from, by name: a process's `{kind: "process",
    /// program, task, protocol}` (its program by its file name only: the arguments may carry a secret) and
    /// an engine agent's `{kind: "agent"}`.
    pub(super) fn about(&self) -> Value {
        let task = |t: crate::daemon::profile::TaskMode| match t {
            crate::daemon::profile::TaskMode::Type => "type",
            crate::daemon::profile::TaskMode::Argv => "argv",
        };
        let mut profiles: Vec<Value> = self
            .config
            .profiles
            .iter()
            .map(|(name, p)| {
                let program = p.command.first().map(|c| {
                    std::path::Path::new(c)
                        .file_name()
                        .map_or(c.clone(), |f| f.to_string_lossy().into_owned())
                });
                json!({
                    "name": name, "kind": "process", "program": program, "task": task(p.task),
                    "protocol": p.protocol, "controllerOnly": p.controller_only,
                })
            })
            .chain(
                self.config
                    .hosted
                    .0
                    .keys()
                    .map(|name| json!({ "name": name, "kind": "agent" })),
            )
            .collect();
        profiles.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        json!({
            "daemon": { "name": "agentwire", "version": env!("CARGO_PKG_VERSION") },
            "jobs": self.config.data_dir.join("jobs"),
            "profiles": profiles,
        })
    }

    /// `subscribe`: the rows now, and a push on every change.
    pub(super) fn subscribe(&self, conn: u64) -> Value {
        self.lock().subscribers.insert(conn);
        let mut answer = self.rows();
        answer["concierge"] = self.concierge_status(&self.lock());
        answer
    }

    /// `events {after?, limit?, id?}`.
    pub(super) fn events(&self, args: &Map<String, Value>) -> Result<Value, Refusal> {
        use crate::proto::wire::Args;
        let after = args.opt_u64("after")?;
        let limit = args
            .opt_u64("limit")?
            .unwrap_or(crate::proto::supervisor::MAX_EVENTS as u64) as usize;
        let job = args.opt_str("id")?;
        let st = self.lock();
        let matching = st
            .sup
            .events
            .iter()
            .filter(|e| job.is_none_or(|j| e.id == j));
        let list: Vec<_> = match after {
            Some(a) => matching.filter(|e| e.seq > a).take(limit).collect(),
            None => {
                let all: Vec<_> = matching.collect();
                let skip = all.len().saturating_sub(limit);
                all.into_iter().skip(skip).collect()
            }
        };
        let cursor = list
            .last()
            .map_or(after.unwrap_or(st.sup.next_event), |e| e.seq);
        Ok(json!({ "events": list, "cursor": cursor }))
    }
}
