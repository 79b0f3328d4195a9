//! The supervisor's state: jobs, their rows, their numbered replies waiting for an ack, the request ids
//! they were taken under, the conversations they serve, and the event feed. Pure: the daemon drives it,
//! persists what it says to, and puts its effects on the wire.

use crate::proto::concierge::CONCIERGE_NAME;
use crate::proto::feed::FeedEvent;
use crate::proto::report::{JobState, Report};
use crate::proto::wire::{check_request_id, fold_name, ErrorCode, Refusal};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};

/// Replies that may wait for an ack per job; one more is refused `full` (the spec's 50).
pub const MAX_PENDING_REPLIES: usize = 50;
/// Reply request ids a job remembers, to take a resent reply once (the spec's 100).
pub const MAX_REPLY_IDS: usize = 100;
/// Events kept in the feed (the spec's last 1000).
pub const MAX_EVENTS: usize = 1000;

/// Longest reply text: a reply is typed into an agent; a megabyte is more than any person types, and keeps
/// a request line far under the 4 MiB line limit.
pub const MAX_REPLY_BYTES: usize = 1024 * 1024;
/// How much of a peer item's text its feed event shows: a line of a person's feed, not the message.
const ITEM_PREVIEW_CHARS: usize = 80;

/// How a reply joins the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReplyMode {
    /// Join the work under way.
    #[serde(rename = "steer")]
    Steer,
    /// After it.
    #[serde(rename = "followUp")]
    FollowUp,
}

/// A reply waiting for its ack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    /// Its number in the job, from 1.
    pub seq: u64,
    /// The text.
    pub text: String,
    /// How it joins the work.
    pub mode: Option<ReplyMode>,
    /// From another session (a peer item), not from the user: who sent it and what kind it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item: Option<crate::proto::peer_item::PeerItem>,
    /// Delivered as a peer item (its agent said `agentItems: true`), acked by itself (`exact`); else an
    /// ordinary reply, which an ack up to its seq covers.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exact: bool,
}

/// Whether the job's process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Life {
    /// Its process runs (or is being started).
    Running,
    /// Stopped by a user (`stop`, `/stop`).
    Stopped,
    /// Its process ended by itself.
    Exited,
}

/// One job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Its id.
    pub id: String,
    /// Its secret: good for this job only.
    pub token: String,
    /// Its name.
    pub name: String,
    /// The profile it runs.
    pub profile: String,
    /// The first task.
    pub task: Option<String>,
    /// The latest report.
    pub report: Option<Report>,
    /// What the agent said it can do (`hello`).
    pub capabilities: Vec<String>,
    /// The next reply's number.
    pub next_seq: u64,
    /// Replies not yet acked, in order. Stored in rows of their own (see [`crate::daemon::store`]), so that an ack or
    /// a report does not write every waiting reply's text again; read from the job's record too, where a
    /// store written before that kept them.
    #[serde(default, skip_serializing)]
    pub pending: VecDeque<Pending>,
    /// The last request ids its replies were taken under.
    pub reply_ids: VecDeque<String>,
    /// Whether its process runs.
    pub life: Life,
    /// Its process id, while it runs.
    pub pid: Option<u32>,
    /// That process's identity beyond the pid (the boot and the start time), so that after a
    /// restart a pid reused by another process is not taken for the job's. None in stores written before it.
    #[serde(default)]
    pub pid_identity: Option<String>,
    /// Output read from its terminal, for a job whose agent does not speak the protocol (its row until it
    /// reports).
    pub output: Option<String>,
    /// Reports taken so far: a row newer than a reply shows a larger number.
    #[serde(default)]
    pub reports: u64,
    /// The conversation it was dispatched for (agentwire's roost-backed agent: a conversation's turns are
    /// one job's replies). Kept in the job's own record, so that it lives and goes with the job and a
    /// restart finds the conversation's job again; none for other jobs and in stores written before it.
    #[serde(default)]
    pub conversation: Option<String>,
    /// The feed cursor of its `start` event: orders the jobs of one conversation (the newest serves it).
    #[serde(default)]
    pub dispatched: u64,
    /// When it last changed (Unix seconds of its newest feed event: started, replied to, a new state,
    /// ended): retention forgets a job idle that long ([`Supervisor::idle_since`]). 0 in stores written
    /// before it, where the daemon reads it as its start.
    #[serde(default)]
    pub touched: u64,
    /// Pinned by a person (the hub's `pin`): shown first.
    #[serde(default)]
    pub pinned: bool,
    /// Its place in the order a person gave (`reorder`), from 0; none: after those that have one.
    #[serde(default)]
    pub order: Option<u64>,
    /// Named by a person (`rename`): the name the agent reports no longer changes the row.
    #[serde(default)]
    pub renamed: bool,
    /// The job that spawned it, if one did (its parent; `spawn`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Its role: `concierge` for the concierge's job (M44), else none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

impl Job {
    /// Whether it still runs and has not failed: what holds claims.
    pub fn live(&self) -> bool {
        self.life == Life::Running
            && self.report.as_ref().map(|r| r.state) != Some(JobState::Failed)
    }

    /// Whether it is at work: it runs and has not reported `done` or `failed` (starting, working, or
    /// waiting for the person). What the bounds on spawning count ([`crate::proto::spawn_rules`]).
    pub fn at_work(&self) -> bool {
        self.life == Life::Running
            && !matches!(
                self.report.as_ref().map(|r| r.state),
                Some(JobState::Done | JobState::Failed)
            )
    }

    /// Its state as watches read it: its row's, except that a job whose process is gone has ended
    /// whatever it reported last (`exited`), unless it was stopped.
    pub fn watch_state(&self) -> &'static str {
        match self.life {
            Life::Exited => "exited",
            _ => self.row_state(),
        }
    }

    /// The state its row shows: the reported one while it runs (`starting` before a report), `stopped`,
    /// and once its process has ended `done` or `failed` as reported, else `exited`.
    pub fn row_state(&self) -> &'static str {
        match (self.report.as_ref().map(|r| r.state), self.life) {
            (Some(s), Life::Running) => s.as_str(),
            (None, Life::Running) => "starting",
            (_, Life::Stopped) => "stopped",
            (Some(s @ (JobState::Done | JobState::Failed)), Life::Exited) => s.as_str(),
            (_, Life::Exited) => "exited",
        }
    }
}

/// What a reply did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replied {
    /// Saved as `seq` (deliver it if the agent is connected).
    Saved(u64),
    /// The same request id was taken before: not queued again.
    Duplicate,
    /// A `/stop`: stop the job; never delivered.
    Stop,
}

/// All jobs.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Supervisor {
    /// The jobs by id.
    pub jobs: HashMap<String, Job>,
    /// Dispatch request ids and the job each made.
    pub dispatch_ids: HashMap<String, String>,
    /// The feed, oldest first.
    pub events: VecDeque<FeedEvent>,
    /// The next feed cursor.
    pub next_event: u64,
    /// Each conversation's jobs, oldest dispatch first: an index over [`Job::conversation`], rebuilt from
    /// the jobs on load ([`index_conversations`](Self::index_conversations)), so a lookup costs a hash
    /// and not a scan of every job (a conversation's job is looked up on each of its turns, and jobs are
    /// only removed by hand, so they add up).
    #[serde(skip)]
    conversations: HashMap<String, Vec<String>>,
    /// The watches sessions hold ([`crate::proto::watch`]).
    #[serde(skip)]
    pub watches: Vec<crate::proto::watch::Watch>,
    /// Set when [`watches`](Self::watches) changed since they were last written.
    #[serde(skip)]
    pub watches_changed: bool,
    /// Notices queued by watches that fired, not yet handed to their agents: (watcher, seq).
    #[serde(skip)]
    pub fired: Vec<(String, u64)>,
    /// Notices for watchers that are not jobs (foreground peers, which keep nothing): (watcher, item,
    /// text), for the daemon to deliver on their connections.
    #[serde(skip)]
    pub fg_notices: Vec<(String, crate::proto::peer_item::PeerItem, String)>,
    /// The task board ([`crate::proto::board`]).
    #[serde(skip)]
    pub board: crate::proto::board::Board,
    /// Set when the board changed since it was last written (and pushed).
    #[serde(skip)]
    pub board_changed: bool,
    /// The concierge's record ([`crate::proto::concierge`]).
    #[serde(skip)]
    pub concierge: crate::proto::concierge::Concierge,
    /// Set when the concierge's record changed since it was last written.
    #[serde(skip)]
    pub concierge_changed: bool,
    /// The schedules ([`crate::proto::schedule`]).
    #[serde(skip)]
    pub schedules: crate::proto::schedule::Schedules,
    /// Set when the schedules changed since they were last written.
    #[serde(skip)]
    pub schedules_changed: bool,
}

/// What one job looked like before a change, to put back when the change could not be made durable: the
/// controller is told it failed, so nothing of it may stay.
#[derive(Debug)]
pub struct Undo {
    id: String,
    /// The job without its pending replies (which may hold megabytes): those are put back by length, as
    /// the changes undone only ever append to them.
    job: Option<Job>,
    pending: usize,
    dispatch_ids: Vec<String>,
    next_event: u64,
}

impl Supervisor {
    /// Marks the state of job `id` (which may not exist yet) and of the feed, for [`restore`](Self::restore)
    /// after a change that only appends to the job's pending replies (a reply, a dispatch).
    pub fn undo_point(&self, id: &str) -> Undo {
        Undo {
            id: id.to_string(),
            job: self.jobs.get(id).map(|j| Job {
                id: j.id.clone(),
                token: j.token.clone(),
                name: j.name.clone(),
                profile: j.profile.clone(),
                task: j.task.clone(),
                report: j.report.clone(),
                capabilities: j.capabilities.clone(),
                next_seq: j.next_seq,
                pending: VecDeque::new(),
                reply_ids: j.reply_ids.clone(),
                life: j.life,
                pid: j.pid,
                pid_identity: j.pid_identity.clone(),
                output: j.output.clone(),
                reports: j.reports,
                conversation: j.conversation.clone(),
                dispatched: j.dispatched,
                touched: j.touched,
                pinned: j.pinned,
                order: j.order,
                renamed: j.renamed,
                parent: j.parent.clone(),
                role: j.role.clone(),
            }),
            pending: self.jobs.get(id).map_or(0, |j| j.pending.len()),
            dispatch_ids: self
                .dispatch_ids
                .iter()
                .filter(|(_, j)| *j == id)
                .map(|(r, _)| r.clone())
                .collect(),
            next_event: self.next_event,
        }
    }

    /// Puts job `undo.id` and the feed back as they were at [`undo_point`](Self::undo_point).
    pub fn restore(&mut self, undo: Undo) {
        match undo.job {
            Some(mut job) => {
                if let Some(now) = self.jobs.get_mut(&undo.id) {
                    now.pending.truncate(undo.pending);
                    job.pending = std::mem::take(&mut now.pending);
                }
                self.jobs.insert(undo.id.clone(), job);
            }
            None => {
                if let Some(job) = self.jobs.remove(&undo.id) {
                    self.unindex(&job);
                }
            }
        }
        self.dispatch_ids
            .retain(|r, j| *j != undo.id || undo.dispatch_ids.contains(r));
        self.events.retain(|e| e.seq <= undo.next_event);
        self.next_event = undo.next_event;
    }

    /// Records a feed event.
    pub fn event(&mut self, at: u64, id: &str, what: &str, text: impl Into<String>) {
        self.event_by(at, id, what, text, None);
    }

    /// Records a feed event about job `id` that session `who` caused.
    pub fn event_by(
        &mut self,
        at: u64,
        id: &str,
        what: &str,
        text: impl Into<String>,
        who: Option<&crate::proto::peer_item::From>,
    ) {
        if let Some(job) = self.jobs.get_mut(id) {
            job.touched = job.touched.max(at);
        }
        self.next_event += 1;
        self.events.push_back(FeedEvent {
            seq: self.next_event,
            at,
            id: id.to_string(),
            what: what.into(),
            text: text.into(),
            who: who.map(|w| w.name.clone()),
            who_id: who.map(|w| w.id.clone()),
            why: None,
        });
        while self.events.len() > MAX_EVENTS {
            self.events.pop_front();
        }
        if matches!(what, "state" | "stop" | "exit" | "rm") {
            self.fire_watches(id, at);
            self.release_claims_of_gone(id, at);
        }
    }

    /// Says that session `who` caused the feed events after cursor `before` that name nobody yet (what
    /// the concierge did through the person's ops).
    pub fn attribute_since(&mut self, before: u64, who: &crate::proto::peer_item::From) {
        for e in self.events.iter_mut().rev().take_while(|e| e.seq > before) {
            if e.who.is_none() {
                e.who = Some(who.name.clone());
                e.who_id = Some(who.id.clone());
            }
        }
    }

    /// A board change: the board is to be written, and the change is a `task` event (about the job that
    /// holds or held the task, else the actor's).
    pub fn board_event(&mut self, change: &crate::proto::board::Change, at: u64) {
        self.board_changed = true;
        let about = change
            .task
            .owner
            .as_ref()
            .map(|o| o.id.clone())
            .or_else(|| change.by.who_id.clone())
            .unwrap_or_default();
        self.next_event += 1;
        self.events.push_back(FeedEvent {
            seq: self.next_event,
            at,
            id: about,
            what: "task".into(),
            text: change.text.clone(),
            who: Some(change.by.who.clone()),
            who_id: change.by.who_id.clone(),
            why: Some(change.why.into()),
        });
        while self.events.len() > MAX_EVENTS {
            self.events.pop_front();
        }
    }

    /// Whether session `id` holds anything: a job whose process runs and that has not failed (one that
    /// stopped, exited, failed or was removed holds nothing).
    pub fn holds(&self, id: &str) -> bool {
        self.jobs.get(id).is_some_and(Job::live)
    }

    /// The children of session `parent` at work ([`Job::at_work`]), and the spawned jobs whose process still
    /// runs in all, whatever they reported (what the bounds of [`crate::proto::spawn_rules`] count).
    pub fn spawned_counts(&self, parent: &str) -> (usize, usize) {
        let spawned = self
            .jobs
            .values()
            .filter(|j| j.parent.is_some() && j.life == Life::Running);
        spawned.fold((0, 0), |(mine, all), j| {
            (
                mine + usize::from(j.parent.as_deref() == Some(parent) && j.at_work()),
                all + 1,
            )
        })
    }

    /// After job `id` ended outside a feed event of its end (a `/stop`): its watches fire and its
    /// claims go.
    pub fn ended(&mut self, id: &str, at: u64) {
        self.fire_watches(id, at);
        self.release_claims_of_gone(id, at);
    }

    /// Releases the tasks of job `id` when it no longer holds anything (it failed, was stopped, exited or
    /// was removed), each a `task` event.
    pub fn release_claims_of_gone(&mut self, id: &str, at: u64) {
        if self.holds(id) {
            return;
        }
        let state = self.jobs.get(id).map_or("removed", |j| j.row_state());
        let name = self.jobs.get(id).map(|j| j.name.clone());
        let by = crate::proto::board::By {
            who: name.clone().unwrap_or_else(|| id.to_string()),
            who_id: Some(id.to_string()),
        };
        let why = format!("{} {state}", by.who);
        for change in self.board.release_held_by(id, &why, by) {
            self.board_event(&change, at);
        }
    }

    /// Fires the watches on job `id` that its row's state now meets (a job no longer here is `removed`):
    /// each a `notice` item to its watcher, once.
    pub fn fire_watches(&mut self, id: &str, at: u64) {
        use crate::proto::watch::notice_text;
        if !self.watches.iter().any(|w| w.target == id) {
            return;
        }
        let (state, summary) = match self.jobs.get(id) {
            Some(j) => (
                j.watch_state(),
                j.report.as_ref().and_then(|r| r.summary.clone()),
            ),
            None => ("removed", None),
        };
        let (fired, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.watches)
            .into_iter()
            .partition(|w| w.target == id && w.when.fired_by(state));
        self.watches = kept;
        for w in fired {
            self.watches_changed = true;
            let text = notice_text(&w.name, w.when, state, summary.as_deref());
            if let Err(e) = self.notify(&w.watcher, id, &w.name, text, at) {
                tracing::warn!(watcher = %w.watcher, error = %e.message, "a watch fired, and its notice could not be queued");
            }
        }
    }

    /// Queues a notice from job `from` (named `name`) to `watcher`, for its agent at the next write.
    fn notify(
        &mut self,
        watcher: &str,
        from: &str,
        name: &str,
        text: String,
        at: u64,
    ) -> Result<(), Refusal> {
        use crate::proto::peer_item::{ItemKind, PeerItem, Relation};
        let w = self.jobs.get(watcher);
        let relation = Relation::of(
            from,
            self.jobs.get(from).and_then(|j| j.parent.as_deref()),
            watcher,
            w.and_then(|w| w.parent.as_deref()),
        );
        let item = PeerItem {
            kind: ItemKind::Notice,
            from: crate::proto::peer_item::From {
                id: from.to_string(),
                name: name.to_string(),
            },
            relation,
        };
        let Some(w) = w else {
            // A foreground peer's: delivered on its connection, if it has one.
            self.fg_notices.push((watcher.to_string(), item, text));
            return Ok(());
        };
        let as_item = w.report.as_ref().is_some_and(|r| r.agent_items);
        let seq = self.queue_item(watcher, item, &text, as_item, at)?;
        self.fired.push((watcher.to_string(), seq));
        Ok(())
    }

    /// `watch {id, when}` by session `watcher` on job `target`: `Ok(true)` when it is already so (the notice
    /// is queued now), `Ok(false)` when kept to fire later. At most
    /// [`MAX_WATCHES_PER_SESSION`](crate::proto::watch::MAX_WATCHES_PER_SESSION) a session (`full`); watching the
    /// same again replaces it.
    pub fn watch(
        &mut self,
        watcher: &str,
        target: &str,
        when: crate::proto::watch::When,
        now_ms: u64,
    ) -> Result<bool, Refusal> {
        use crate::proto::watch::{notice_text, Watch, MAX_WATCHES_PER_SESSION, WATCH_TTL_MS};
        let job = self.job(target)?;
        let (name, state) = (job.name.clone(), job.watch_state());
        if when.fired_by(state) {
            let summary = job.report.as_ref().and_then(|r| r.summary.clone());
            let text = notice_text(&name, when, state, summary.as_deref());
            // The notice comes at once, or the watch is refused (`full`): never `fired` with none.
            self.notify(watcher, target, &name, text, now_ms / 1000)?;
            return Ok(true);
        }
        self.watches
            .retain(|w| !(w.watcher == watcher && w.target == target && w.when == when));
        if self.watches.iter().filter(|w| w.watcher == watcher).count() >= MAX_WATCHES_PER_SESSION {
            return Err(Refusal::new(
                ErrorCode::Full,
                format!("a session holds at most {MAX_WATCHES_PER_SESSION} watches"),
            ));
        }
        self.watches.push(Watch {
            watcher: watcher.to_string(),
            target: target.to_string(),
            name,
            when,
            until_ms: now_ms.saturating_add(WATCH_TTL_MS),
        });
        self.watches_changed = true;
        Ok(false)
    }

    /// Drops the watches past their time.
    pub fn expire_watches(&mut self, now_ms: u64) {
        let before = self.watches.len();
        self.watches.retain(|w| w.until_ms > now_ms);
        self.watches_changed |= self.watches.len() != before;
    }

    /// A job by id.
    pub fn job(&self, id: &str) -> Result<&Job, Refusal> {
        self.jobs
            .get(id)
            .ok_or_else(|| Refusal::new(ErrorCode::NotFound, format!("no job {id:?}")))
    }

    /// A job by id, checked against its token (an agent's request).
    pub fn authorised(&mut self, id: &str, token: &str) -> Result<&mut Job, Refusal> {
        let job = self
            .jobs
            .get_mut(id)
            .ok_or_else(|| Refusal::new(ErrorCode::NotFound, format!("no job {id:?}")))?;
        if job.token != token {
            return Err(Refusal::new(
                ErrorCode::Unauthorized,
                "wrong token: stop speaking for this job",
            ));
        }
        Ok(job)
    }

    /// A dispatch taken before under `request_id` (whose job still exists).
    pub fn dispatched(&self, request_id: &str) -> Option<&Job> {
        self.dispatch_ids
            .get(request_id)
            .and_then(|id| self.jobs.get(id))
    }

    /// Adds a job (the caller picks id and token).
    #[allow(clippy::too_many_arguments)]
    pub fn add(
        &mut self,
        id: String,
        token: String,
        profile: &str,
        task: Option<String>,
        name: Option<&str>,
        request_id: Option<&str>,
        at: u64,
    ) -> Result<&Job, Refusal> {
        if let Some(r) = request_id {
            check_request_id(r)?;
        }
        let name = name
            .map(fold_name)
            .map(|n| {
                n.chars()
                    .take(crate::proto::report::MAX_NAME_CHARS)
                    .collect::<String>()
            })
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| format!("{profile}-{}", &id[..id.len().min(6)]));
        if name == CONCIERGE_NAME {
            return Err(Refusal::bad(format!(
                "the name {CONCIERGE_NAME:?} is the concierge's; name the job otherwise"
            )));
        }
        if let Some(r) = request_id {
            self.dispatch_ids.insert(r.to_string(), id.clone());
        }
        self.event(at, &id, "start", format!("{profile}: {name}"));
        self.jobs.insert(
            id.clone(),
            Job {
                id: id.clone(),
                token,
                name,
                profile: profile.to_string(),
                task,
                report: None,
                capabilities: vec![],
                next_seq: 1,
                pending: VecDeque::new(),
                reply_ids: VecDeque::new(),
                life: Life::Running,
                pid: None,
                pid_identity: None,
                output: None,
                reports: 0,
                conversation: None,
                dispatched: self.next_event,
                touched: at,
                pinned: false,
                order: None,
                renamed: false,
                parent: None,
                role: None,
            },
        );
        Ok(&self.jobs[&id])
    }

    /// Marks job `id` as the one serving `conversation` (checked with
    /// [`check_conversation`](crate::proto::wire::check_conversation) by the caller): from now on it is what
    /// [`conversation_job`](Self::conversation_job) finds, until a newer job is dispatched for it.
    pub fn serve_conversation(&mut self, id: &str, conversation: &str) {
        if let Some(job) = self.jobs.get_mut(id) {
            job.conversation = Some(conversation.to_string());
            let ids = self
                .conversations
                .entry(conversation.to_string())
                .or_default();
            ids.retain(|j| j != id);
            ids.push(id.to_string());
        }
    }

    /// The job of `profile` dispatched last for `conversation`, whatever its state (the caller decides
    /// whether it can take the conversation's next turn).
    pub fn conversation_job(&self, profile: &str, conversation: &str) -> Option<&Job> {
        self.conversations
            .get(conversation)?
            .iter()
            .rev()
            .filter_map(|id| self.jobs.get(id))
            .find(|j| j.profile == profile && j.conversation.as_deref() == Some(conversation))
    }

    /// Rebuilds the conversation index from the jobs (after they are loaded).
    pub fn index_conversations(&mut self) {
        let mut labelled: Vec<(&str, u64, &str)> = self
            .jobs
            .values()
            .filter_map(|j| Some((j.conversation.as_deref()?, j.dispatched, j.id.as_str())))
            .collect();
        labelled.sort_unstable();
        let mut index: HashMap<String, Vec<String>> = HashMap::new();
        for (conversation, _, id) in labelled {
            index
                .entry(conversation.to_string())
                .or_default()
                .push(id.to_string());
        }
        self.conversations = index;
    }

    /// The jobs that have not changed since `before` (Unix seconds), oldest first.
    pub fn idle_since(&self, before: u64) -> Vec<&Job> {
        let mut idle: Vec<&Job> = self.jobs.values().filter(|j| j.touched < before).collect();
        idle.sort_unstable_by_key(|j| (j.touched, &j.id));
        idle
    }

    /// Removes job `id` with its dispatch ids, its place in the conversation index and the watches it
    /// held (those on it fire with its `rm` event).
    pub fn remove(&mut self, id: &str) -> Option<Job> {
        let job = self.jobs.remove(id)?;
        self.dispatch_ids.retain(|_, j| j != id);
        let before = self.watches.len();
        self.watches.retain(|w| w.watcher != id);
        self.watches_changed |= self.watches.len() != before;
        self.unindex(&job);
        Some(job)
    }

    fn unindex(&mut self, job: &Job) {
        let Some(conversation) = &job.conversation else {
            return;
        };
        if let Some(ids) = self.conversations.get_mut(conversation) {
            ids.retain(|j| *j != job.id);
            if ids.is_empty() {
                self.conversations.remove(conversation);
            }
        }
    }

    /// A reply to job `id`. `connected`: its agent has a reporting connection now.
    pub fn reply(
        &mut self,
        id: &str,
        text: &str,
        mode: Option<ReplyMode>,
        request_id: Option<&str>,
        connected: bool,
        at: u64,
    ) -> Result<Replied, Refusal> {
        if let Some(r) = request_id {
            check_request_id(r)?;
        }
        if text.len() > MAX_REPLY_BYTES {
            return Err(Refusal::bad(format!(
                "a reply is at most {MAX_REPLY_BYTES} bytes"
            )));
        }
        let job = self
            .jobs
            .get_mut(id)
            .ok_or_else(|| Refusal::new(ErrorCode::NotFound, format!("no job {id:?}")))?;
        if let Some(r) = request_id {
            if job.reply_ids.iter().any(|x| x == r) {
                return Ok(Replied::Duplicate);
            }
        }
        if text.trim() == "/stop" {
            remember(job, request_id);
            self.event(at, id, "stop", "/stop");
            return Ok(Replied::Stop);
        }
        if text.starts_with('/') && !connected {
            return Err(Refusal::new(
                ErrorCode::Unsupported,
                "a reply starting with / is a command; the agent is not connected",
            ));
        }
        if job.pending.len() >= MAX_PENDING_REPLIES {
            return Err(Refusal::new(
                ErrorCode::Full,
                format!("{MAX_PENDING_REPLIES} replies are waiting for this job"),
            ));
        }
        let seq = job.next_seq;
        job.next_seq += 1;
        job.pending.push_back(Pending {
            seq,
            text: text.to_string(),
            mode,
            item: None,
            exact: false,
        });
        remember(job, request_id);
        let preview: String = text.chars().take(80).collect();
        self.event(at, id, "reply", format!("#{seq} {preview}"));
        Ok(Replied::Saved(seq))
    }

    /// An ack: every pending reply up to `seq` is done (a peer item delivered as one is acked by itself);
    /// with `exact`, only `seq`. Returns what was cleared.
    pub fn ack(
        &mut self,
        id: &str,
        token: &str,
        seq: u64,
        exact: bool,
    ) -> Result<Vec<Pending>, Refusal> {
        let job = self.authorised(id, token)?;
        let cleared = |p: &Pending| match exact {
            true => p.seq == seq,
            false => p.seq <= seq && !p.exact,
        };
        let (gone, kept): (VecDeque<Pending>, VecDeque<Pending>) = std::mem::take(&mut job.pending)
            .into_iter()
            .partition(cleared);
        job.pending = kept;
        Ok(gone.into())
    }

    /// Sets how job `id`'s waiting peer items go to its agent, before they are sent on a new reporting
    /// connection: as items when its latest report says `agentItems`, else as ordinary replies (an item
    /// queued before the agent's first report is decided here).
    pub fn items_as_reported(&mut self, id: &str) {
        if let Some(job) = self.jobs.get_mut(id) {
            let takes = job.report.as_ref().is_some_and(|r| r.agent_items);
            for p in job.pending.iter_mut().filter(|p| p.item.is_some()) {
                p.exact = takes;
            }
        }
    }

    /// Puts back what an [`ack`](Self::ack) cleared (its write failed), in order.
    pub fn unack(&mut self, id: &str, cleared: Vec<Pending>) {
        if let Some(job) = self.jobs.get_mut(id) {
            job.pending.extend(cleared);
            job.pending.make_contiguous().sort_by_key(|p| p.seq);
        }
    }

    /// Queues peer item `item` carrying `text` for job `to` (its envelope as the text), as an item when
    /// `as_item` (the agent takes them), else as an ordinary reply. `full` when
    /// [`MAX_WAITING_ITEMS`](crate::proto::peer_item::MAX_WAITING_ITEMS) items, or
    /// [`MAX_PENDING_REPLIES`] of anything, wait. Its seq.
    pub fn queue_item(
        &mut self,
        to: &str,
        item: crate::proto::peer_item::PeerItem,
        text: &str,
        as_item: bool,
        at: u64,
    ) -> Result<u64, Refusal> {
        use crate::proto::peer_item::MAX_WAITING_ITEMS;
        if text.len() > MAX_REPLY_BYTES {
            return Err(Refusal::bad(format!(
                "a message is at most {MAX_REPLY_BYTES} bytes"
            )));
        }
        let job = self.job_mut(to)?;
        let items = job.pending.iter().filter(|p| p.item.is_some()).count();
        if items >= MAX_WAITING_ITEMS || job.pending.len() >= MAX_PENDING_REPLIES {
            return Err(Refusal::new(
                ErrorCode::Full,
                format!("{MAX_WAITING_ITEMS} items are waiting for {}", job.name),
            ));
        }
        let seq = job.next_seq;
        job.next_seq += 1;
        let envelope = crate::proto::peer_item::envelope(&item, text);
        let (kind, from) = (item.kind, item.from.clone());
        job.pending.push_back(Pending {
            seq,
            text: envelope,
            mode: None,
            item: Some(item),
            exact: as_item,
        });
        self.item_event(at, to, kind, &from, Some(seq), text);
        Ok(seq)
    }

    /// The feed event of a peer item `kind` from `from` to session `to`: `#seq from <name>: <the text's
    /// first 80 characters>` (no `#seq` for a foreground peer's, which keeps nothing to ack).
    pub fn item_event(
        &mut self,
        at: u64,
        to: &str,
        kind: crate::proto::peer_item::ItemKind,
        from: &crate::proto::peer_item::From,
        seq: Option<u64>,
        text: &str,
    ) {
        let preview: String = text.chars().take(ITEM_PREVIEW_CHARS).collect();
        let seq = seq.map(|s| format!("#{s} ")).unwrap_or_default();
        self.event_by(
            at,
            to,
            kind.as_str(),
            format!("{seq}from {}: {preview}", from.name),
            Some(from),
        );
    }

    /// A report: the job's row. Returns whether the state changed (worth a feed event).
    pub fn report(
        &mut self,
        id: &str,
        token: &str,
        report: Report,
        at: u64,
    ) -> Result<bool, Refusal> {
        let job = self.authorised(id, token)?;
        let changed = job.report.as_ref().map(|r| r.state) != Some(report.state);
        if let Some(n) = &report.name {
            // A person's name for the row stands; the concierge's name is not a session's to take.
            if !n.is_empty() && !job.renamed && n != CONCIERGE_NAME {
                job.name = n.clone();
            }
        }
        let state = report.state;
        job.report = Some(report);
        job.reports += 1;
        if changed {
            self.event(at, id, "state", state.as_str().to_string());
        }
        Ok(changed)
    }
}

/// How the rows were arranged (names, pins, order) and the feed's end, to put back when a change to them
/// could not be made durable.
#[derive(Debug)]
pub struct Arrangement {
    jobs: Vec<(String, String, bool, bool, Option<u64>)>,
    next_event: u64,
}

impl Supervisor {
    /// The rows' arrangement now, for [`rearrange`](Self::rearrange).
    pub fn arrangement(&self) -> Arrangement {
        Arrangement {
            jobs: self
                .jobs
                .values()
                .map(|j| (j.id.clone(), j.name.clone(), j.renamed, j.pinned, j.order))
                .collect(),
            next_event: self.next_event,
        }
    }

    /// Puts back an [`Arrangement`].
    pub fn rearrange(&mut self, before: Arrangement) {
        for (id, name, renamed, pinned, order) in before.jobs {
            if let Some(j) = self.jobs.get_mut(&id) {
                (j.name, j.renamed, j.pinned, j.order) = (name, renamed, pinned, order);
            }
        }
        self.events.retain(|e| e.seq <= before.next_event);
        self.next_event = before.next_event;
    }

    /// Job `id` handed its result back: its row ends `done` with `text` (cut to the summary's length) as
    /// its summary.
    pub fn handed_back(&mut self, id: &str, text: &str, at: u64) {
        let Some(job) = self.jobs.get_mut(id) else {
            return;
        };
        let summary: String = text
            .chars()
            .take(crate::proto::report::MAX_SUMMARY_CHARS)
            .collect();
        let report = job
            .report
            .get_or_insert_with(|| crate::proto::report::Report::new(JobState::Done));
        report.state = JobState::Done;
        report.status = Some("idle".into());
        report.summary = Some(summary);
        report.question = None;
        report.choices.clear();
        report.tool = None;
        self.event(at, id, "state", JobState::Done.as_str());
    }

    /// `pin {id, pinned}`.
    pub fn pin(&mut self, id: &str, pinned: bool) -> Result<(), Refusal> {
        self.job_mut(id)?.pinned = pinned;
        Ok(())
    }

    /// `rename {id, name}`: the row's name from now on, whatever the agent reports (folded to one line,
    /// 1-200 characters; not the concierge's).
    pub fn rename(&mut self, id: &str, name: &str, at: u64) -> Result<(), Refusal> {
        let name = fold_name(name);
        if name.is_empty() || name.chars().count() > crate::proto::report::MAX_NAME_CHARS {
            return Err(Refusal::bad(format!(
                "a name is 1-{} characters on one line",
                crate::proto::report::MAX_NAME_CHARS
            )));
        }
        if name == CONCIERGE_NAME {
            return Err(Refusal::bad(format!(
                "the name {CONCIERGE_NAME:?} is the concierge's"
            )));
        }
        let job = self.job_mut(id)?;
        if job.role.is_some() {
            return Err(Refusal::bad(format!(
                "the {CONCIERGE_NAME}'s row keeps its name"
            )));
        }
        let before = std::mem::replace(&mut job.name, name.clone());
        job.renamed = true;
        self.event(at, id, "rename", format!("{before} -> {name}"));
        Ok(())
    }

    /// `reorder {ids}`: the jobs named take these places, in this order; the others follow (their
    /// `order` cleared). Every id must be a job's, each once.
    pub fn reorder(&mut self, ids: &[String]) -> Result<(), Refusal> {
        let mut seen = std::collections::HashSet::new();
        for id in ids {
            self.job(id)?;
            if !seen.insert(id) {
                return Err(Refusal::bad(format!("{id:?} is named twice")));
            }
        }
        for job in self.jobs.values_mut() {
            job.order = None;
        }
        for (place, id) in ids.iter().enumerate() {
            if let Some(job) = self.jobs.get_mut(id) {
                job.order = Some(place as u64);
            }
        }
        Ok(())
    }

    fn job_mut(&mut self, id: &str) -> Result<&mut Job, Refusal> {
        self.jobs
            .get_mut(id)
            .ok_or_else(|| Refusal::new(ErrorCode::NotFound, format!("no job {id:?}")))
    }
}

fn remember(job: &mut Job, request_id: Option<&str>) {
    if let Some(r) = request_id {
        job.reply_ids.push_back(r.to_string());
        while job.reply_ids.len() > MAX_REPLY_IDS {
            job.reply_ids.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::report::Report;
    use serde_json::json;

    fn sup() -> Supervisor {
        let mut s = Supervisor::default();
        s.add(
            "j1".into(),
            "t1".into(),
            "p",
            Some("task".into()),
            None,
            Some("d1"),
            1,
        )
        .unwrap();
        s
    }

    #[test]
    fn a_change_that_could_not_be_saved_is_undone_whole() {
        let mut s = sup();
        assert_eq!(
            s.reply("j1", "r0", None, None, true, 1),
            Ok(Replied::Saved(1))
        );
        let before_job = s.jobs["j1"].clone();
        let before_events = s.events.clone();
        let undo = s.undo_point("j1");
        assert_eq!(
            s.reply("j1", "r1", None, Some("q-1"), true, 2),
            Ok(Replied::Saved(2))
        );
        s.restore(undo);
        assert_eq!(
            s.jobs["j1"], before_job,
            "the reply, its seq and its id are gone; the one before stays"
        );
        assert_eq!(s.events, before_events);
        assert_eq!(
            s.reply("j1", "r1", None, Some("q-1"), true, 3),
            Ok(Replied::Saved(2)),
            "the same seq and request id are free again"
        );
        // A dispatch undone leaves no job, no dispatch id and no feed event.
        let undo = s.undo_point("j2");
        let next = s.next_event;
        s.add("j2".into(), "t2".into(), "p", None, None, Some("d2"), 4)
            .unwrap();
        s.restore(undo);
        assert!(!s.jobs.contains_key("j2") && s.dispatched("d2").is_none());
        assert_eq!(s.next_event, next);
        assert!(s.dispatched("d1").is_some(), "other jobs' ids stay");
    }

    #[test]
    fn a_conversation_finds_its_newest_job_of_the_profile_and_loses_it_with_the_job() {
        let mut s = sup();
        let found = |s: &Supervisor, p: &str| s.conversation_job(p, "c:1").map(|j| j.id.clone());
        assert_eq!(
            found(&s, "p"),
            None,
            "a job dispatched without one serves none"
        );
        s.serve_conversation("j1", "c:1");
        s.add("j2".into(), "t2".into(), "p", None, None, None, 2)
            .unwrap();
        s.serve_conversation("j2", "c:1");
        s.add("j3".into(), "t3".into(), "q", None, None, None, 3)
            .unwrap();
        s.serve_conversation("j3", "c:1");
        assert_eq!(
            found(&s, "p").as_deref(),
            Some("j2"),
            "the newest of the profile"
        );
        assert_eq!(found(&s, "q").as_deref(), Some("j3"));
        assert_eq!(s.conversation_job("p", "c:2"), None);
        // Rebuilt from the jobs alone (as after a load), in dispatch order whatever the map's order.
        let mut loaded = Supervisor {
            jobs: s.jobs.clone(),
            ..Supervisor::default()
        };
        loaded.index_conversations();
        assert_eq!(
            loaded.conversation_job("p", "c:1").map(|j| j.id.as_str()),
            Some("j2")
        );
        // A dispatch undone leaves the one before it serving.
        let undo = s.undo_point("j4");
        s.add("j4".into(), "t4".into(), "p", None, None, None, 4)
            .unwrap();
        s.serve_conversation("j4", "c:1");
        assert_eq!(found(&s, "p").as_deref(), Some("j4"));
        s.restore(undo);
        assert_eq!(found(&s, "p").as_deref(), Some("j2"));
        // A removed job serves nothing; the one before it is found again.
        assert!(s.remove("j2").is_some());
        assert_eq!(found(&s, "p").as_deref(), Some("j1"));
        assert!(s.remove("j1").is_some());
        assert_eq!(found(&s, "p"), None);
        assert!(s.dispatched("d1").is_none(), "its dispatch ids go with it");
        assert!(s.remove("j1").is_none());
    }

    #[test]
    fn a_job_holds_claims_while_it_runs_and_has_not_failed() {
        let mut s = sup();
        assert!(s.holds("j1"));
        s.report("j1", "t1", Report::new(JobState::Done), 2)
            .unwrap();
        assert!(s.holds("j1"), "done and still running: it may take more");
        s.jobs.get_mut("j1").unwrap().life = Life::Exited;
        assert!(!s.holds("j1"), "its process is gone, whatever it reported");
        assert_eq!(s.jobs["j1"].watch_state(), "exited");
        s.jobs.get_mut("j1").unwrap().life = Life::Running;
        s.report("j1", "t1", Report::new(JobState::Failed), 3)
            .unwrap();
        assert!(!s.holds("j1"));
        assert!(!s.holds("gone"));
    }

    #[test]
    fn a_watch_fires_once_on_its_state_and_is_dropped_after_twelve_hours() {
        use crate::proto::watch::{When, WATCH_TTL_MS};
        let mut s = sup();
        s.add("j2".into(), "t2".into(), "p", None, Some("two"), None, 1)
            .unwrap();
        assert_eq!(s.watch("j1", "j2", When::Ended, 0), Ok(false));
        assert_eq!(s.watch("j1", "j2", When::Idle, 0), Ok(false));
        s.report("j2", "t2", Report::new(JobState::Blocked), 2)
            .unwrap();
        // Idle fired (a question); ended did not.
        assert_eq!(s.fired.len(), 1);
        assert_eq!(s.watches.len(), 1);
        let notice = &s.jobs["j1"].pending.back().unwrap().text;
        assert!(notice.contains("two is idle (blocked)"), "{notice}");
        s.report("j2", "t2", Report::new(JobState::Working), 3)
            .unwrap();
        s.expire_watches(WATCH_TTL_MS - 1);
        assert_eq!(s.watches.len(), 1);
        s.expire_watches(WATCH_TTL_MS);
        assert!(s.watches.is_empty(), "twelve hours on, unfired: dropped");
        s.report("j2", "t2", Report::new(JobState::Failed), 4)
            .unwrap();
        assert_eq!(s.fired.len(), 1, "a dropped watch fires nothing");
    }

    #[test]
    fn a_job_is_idle_since_its_newest_event_and_the_idlest_come_first() {
        let mut s = sup();
        s.add("j2".into(), "t2".into(), "p", None, None, None, 5)
            .unwrap();
        let idle = |s: &Supervisor, before| -> Vec<String> {
            s.idle_since(before).iter().map(|j| j.id.clone()).collect()
        };
        assert_eq!(idle(&s, 6), ["j1", "j2"]);
        assert_eq!(idle(&s, 5), ["j1"]);
        // A reply is a change: the job is not idle since before it.
        s.reply("j1", "go on", None, None, true, 9).unwrap();
        assert_eq!(idle(&s, 6), ["j2"]);
        assert_eq!(idle(&s, 10), ["j2", "j1"]);
    }

    #[test]
    fn replies_are_numbered_from_1_and_an_ack_covers_everything_up_to_it() {
        let mut s = sup();
        for n in 1..=3 {
            assert_eq!(
                s.reply("j1", &format!("r{n}"), None, None, true, 1),
                Ok(Replied::Saved(n))
            );
        }
        assert_eq!(s.ack("j1", "t1", 2, false).map(|c| c.len()), Ok(2));
        assert_eq!(s.job("j1").unwrap().pending.len(), 1);
        assert_eq!(
            s.ack("j1", "t1", 2, false).map(|c| c.len()),
            Ok(0),
            "acking again is harmless"
        );
        assert_eq!(
            s.ack("j1", "wrong", 3, false).unwrap_err().code,
            ErrorCode::Unauthorized
        );
        assert_eq!(
            s.reply("j1", "r4", None, None, true, 1),
            Ok(Replied::Saved(4)),
            "never reused"
        );
    }

    #[test]
    fn full_at_50_duplicates_stop_and_commands() {
        let mut s = sup();
        for _ in 0..MAX_PENDING_REPLIES {
            s.reply("j1", "x", None, None, true, 1).unwrap();
        }
        assert_eq!(
            s.reply("j1", "x", None, None, true, 1).unwrap_err().code,
            ErrorCode::Full
        );
        s.ack("j1", "t1", 50, false).unwrap();
        assert_eq!(
            s.reply("j1", "a", None, Some("req-1"), true, 1),
            Ok(Replied::Saved(51))
        );
        assert_eq!(
            s.reply("j1", "a", None, Some("req-1"), true, 1),
            Ok(Replied::Duplicate)
        );
        assert_eq!(
            s.reply("j1", "/model x", None, None, false, 1)
                .unwrap_err()
                .code,
            ErrorCode::Unsupported
        );
        assert_eq!(
            s.reply("j1", "/stop", None, None, false, 1),
            Ok(Replied::Stop)
        );
        assert_eq!(
            s.job("j1").unwrap().pending.len(),
            1,
            "/stop is never queued"
        );
        assert_eq!(
            s.reply("nope", "x", None, None, true, 1).unwrap_err().code,
            ErrorCode::NotFound
        );
        assert_eq!(
            s.reply("j1", "x", None, Some("bad id"), true, 1)
                .unwrap_err()
                .code,
            ErrorCode::BadRequest
        );
    }

    #[test]
    fn a_job_remembers_its_last_100_reply_ids() {
        let mut s = sup();
        for n in 0..150 {
            s.reply("j1", "x", None, Some(&format!("r{n}")), true, 1)
                .unwrap();
            s.ack("j1", "t1", u64::MAX, false).unwrap();
        }
        assert_eq!(s.job("j1").unwrap().reply_ids.len(), MAX_REPLY_IDS);
        assert_eq!(
            s.reply("j1", "x", None, Some("r149"), true, 1),
            Ok(Replied::Duplicate)
        );
        assert!(matches!(
            s.reply("j1", "x", None, Some("r0"), true, 1),
            Ok(Replied::Saved(_))
        ));
    }

    #[test]
    fn reports_set_the_row_and_state_changes_reach_the_feed() {
        let mut s = sup();
        let r = Report::parse(&json!({"state": "working", "summary": "reading", "name": "reader"}))
            .unwrap();
        assert_eq!(s.report("j1", "t1", r.clone(), 2), Ok(true));
        assert_eq!(s.report("j1", "t1", r, 3), Ok(false));
        assert_eq!(s.job("j1").unwrap().name, "reader");
        let whats: Vec<_> = s.events.iter().map(|e| e.what.as_str()).collect();
        assert_eq!(whats, vec!["start", "state"]);
        for n in 0..(MAX_EVENTS + 10) {
            s.event(4, "j1", "reply", format!("{n}"));
        }
        assert_eq!(s.events.len(), MAX_EVENTS);
        assert_eq!(s.events.back().unwrap().seq, s.next_event);
        assert_eq!(s.dispatched("d1").unwrap().id, "j1");
    }
}
