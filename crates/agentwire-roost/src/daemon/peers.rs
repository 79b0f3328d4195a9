//! The peer ops a session uses on its own connection after its report (M43): `peers` lists the sessions,
//! `send` puts a message to one of them as a peer item ([`crate::proto::peer_item`]): delivered at once when its
//! agent is connected, queued when not, its job started again when it had ended. A foreground process
//! (not a job) becomes a peer with `peer_register {name}`: it lists, sends, is sent to while connected, and
//! uses the task board; its claims are released a grace after it leaves ([`super::Tuning::fg_claim_grace`],
//! five seconds unless `PI_ROOST_FG_CLAIM_GRACE_MS` says otherwise) unless it registers again under the
//! same name.

use super::state::{deliver_line, now, now_ms, row, Shared, State};
use crate::proto::peer_item::{From, Held, ItemKind, PeerItem, Relation};
use crate::proto::supervisor::Life;
use crate::proto::wire::event_line;
use crate::proto::wire::{Args, ErrorCode, Refusal};
use agentwire_core::now_secs;
use serde_json::{json, Map, Value};

/// The prefix of a foreground peer's id: no job's (hex) id has it.
const FG_ID_PREFIX: &str = "fg:";

impl Shared {
    /// The job a connection speaks for: the one that reported on it last.
    pub(super) fn session_job(st: &State, conn: u64) -> Result<String, Refusal> {
        st.job_conn
            .iter()
            .find(|(_, c)| **c == conn)
            .map(|(id, _)| id.clone())
            .ok_or_else(|| {
                Refusal::new(
                    ErrorCode::Unauthorized,
                    "the peer ops are a session's, on its own connection after its report",
                )
            })
    }

    /// The session a connection speaks for: a job after its report, or a registered foreground peer.
    pub(super) fn session_of(
        st: &State,
        conn: u64,
    ) -> Result<crate::proto::board::Session, Refusal> {
        if let Some(fg) = st.fg_peers.get(&conn) {
            return Ok(fg.clone());
        }
        let id = Self::session_job(st, conn)?;
        let name = st.sup.jobs[&id].name.clone();
        Ok(crate::proto::board::Session { id, name })
    }

    /// Whether session `id` (a job, or a foreground peer) holds anything: a job not failed, stopped,
    /// exited or removed; a foreground peer connected, or gone for less than its grace.
    pub(super) fn holds(st: &State, id: &str) -> bool {
        match id.starts_with(FG_ID_PREFIX) {
            true => st.fg_peers.values().any(|p| p.id == id) || st.fg_leaving.contains_key(id),
            false => st.sup.holds(id),
        }
    }

    /// A foreground peer's name by its id (its id, when it is not connected).
    pub(super) fn session_name(st: &State, id: &str) -> String {
        st.fg_peers
            .values()
            .find(|p| p.id == id)
            .map_or_else(|| id.to_string(), |p| p.name.clone())
    }

    /// `peer_register {name}` → `{id, name}`: this connection is a foreground peer from now on.
    pub(super) fn peer_register(
        &self,
        conn: u64,
        args: &Map<String, Value>,
    ) -> Result<Value, Refusal> {
        let name = crate::proto::wire::fold_name(args.req_str("name")?);
        if name.is_empty() || name.chars().count() > crate::proto::report::MAX_NAME_CHARS {
            return Err(Refusal::bad(format!(
                "a name is 1-{} characters on one line",
                crate::proto::report::MAX_NAME_CHARS
            )));
        }
        if name == crate::proto::concierge::CONCIERGE_NAME {
            return Err(Refusal::bad("the name \"concierge\" is the concierge's"));
        }
        let id = format!("{FG_ID_PREFIX}{name}");
        let mut st = self.lock();
        if st.job_conn.values().any(|c| *c == conn) {
            return Err(Refusal::new(
                ErrorCode::Unsupported,
                "this connection speaks for a job: a foreground peer registers on a connection of its own",
            ));
        }
        if st.fg_peers.get(&conn).is_some_and(|p| p.id != id) {
            return Err(Refusal::bad(
                "this connection is a foreground peer under another name already",
            ));
        }
        if st.fg_peers.iter().any(|(c, p)| p.id == id && *c != conn) {
            return Err(Refusal::bad(format!(
                "a foreground peer named {name:?} is connected"
            )));
        }
        // Back within the grace: its claims stand.
        st.fg_leaving.remove(&id);
        let me = crate::proto::board::Session { id, name };
        st.fg_peers.insert(conn, me.clone());
        Ok(json!({ "id": me.id, "name": me.name }))
    }

    /// Releases the claims of foreground peers gone for longer than their grace
    /// ([`super::Tuning::fg_claim_grace`]).
    pub(super) fn release_departed_peers(&self, st: &mut State) {
        let now = std::time::Instant::now();
        let gone: Vec<String> = st
            .fg_leaving
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            st.fg_leaving.remove(&id);
            st.message_rules.forget(&id);
            st.spawn_rules.forget(&id);
            let name = id.trim_start_matches(FG_ID_PREFIX).to_string();
            let by = crate::proto::board::By {
                who: name.clone(),
                who_id: Some(id.clone()),
            };
            for change in st
                .sup
                .board
                .release_held_by(&id, &format!("{name} left"), by)
            {
                st.sup.board_event(&change, now_secs());
            }
        }
    }

    /// A job by id or by its name, which must name one job only.
    pub(super) fn target(st: &State, to: &str) -> Result<String, Refusal> {
        let fg = st.fg_peers.values().map(|p| (&p.id, &p.name));
        if st.sup.jobs.contains_key(to) || fg.clone().any(|(id, _)| id == to) {
            return Ok(to.to_string());
        }
        let named: Vec<&String> = st
            .sup
            .jobs
            .values()
            .map(|j| (&j.id, &j.name))
            .chain(fg)
            .filter(|(_, name)| *name == to)
            .map(|(id, _)| id)
            .collect();
        match named[..] {
            [id] => Ok(id.clone()),
            [] => Err(Refusal::new(
                ErrorCode::NotFound,
                format!("no session {to:?}"),
            )),
            _ => Err(Refusal::bad(format!(
                "{} sessions are named {to:?}: send to one by its id",
                named.len()
            ))),
        }
    }

    /// `peers {}`: the sessions (jobs not removed), each with `self` true for the caller.
    pub(super) fn peers(&self, conn: u64) -> Result<Value, Refusal> {
        let st = self.lock();
        let me = Self::session_of(&st, conn)?.id;
        let mut peers: Vec<Value> = st
            .sup
            .jobs
            .values()
            .map(|j| {
                let r = row(j, st.job_conn.contains_key(&j.id));
                json!({
                    "id": j.id,
                    "name": j.name,
                    "profile": j.profile,
                    "role": Value::Null,
                    "state": r["state"],
                    "status": r["status"],
                    "summary": r["summary"],
                    "parent": j.parent,
                    "self": j.id == me,
                })
            })
            .collect();
        peers.extend(st.fg_peers.values().map(|p| {
            json!({
                "id": p.id,
                "name": p.name,
                "profile": Value::Null,
                "role": "foreground",
                "state": "working",
                "status": Value::Null,
                "summary": Value::Null,
                "parent": Value::Null,
                "self": p.id == me,
            })
        }));
        peers.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
        Ok(json!({ "peers": peers }))
    }

    /// `send {to, text}` → `{outcome, id}`: `delivered` (its agent is connected), `queued` (it is not),
    /// `started` (its job had ended and runs again for it) or `duplicate` (the same text to it within a
    /// minute: not delivered). Durable before the answer.
    pub(super) fn send(&self, conn: u64, args: &Map<String, Value>) -> Result<Value, Refusal> {
        let to = args.req_str("to")?;
        let text = args.req_str("text")?;
        if text.trim().is_empty() {
            return Err(Refusal::bad("a message has text"));
        }
        let mut st = self.lock();
        let sender = Self::session_of(&st, conn)?;
        let me = sender.id.clone();
        let target = Self::target(&st, to)?;
        if target == me {
            return Err(Refusal::bad("a session does not send to itself"));
        }
        if st
            .sup
            .jobs
            .get(&target)
            .is_some_and(|j| j.report.is_none() && self.typed_to(&j.profile))
        {
            // What reaches a terminal agent is typed into its terminal as its input: a shell there would
            // run another session's words. Only a person's replies are typed.
            return Err(Refusal::new(
                ErrorCode::Unsupported,
                format!("{to:?} is a terminal agent: it takes replies from a person, not messages from other sessions"),
            ));
        }
        let parent = |id: &str| st.sup.jobs.get(id).and_then(|j| j.parent.clone());
        let item = PeerItem {
            kind: ItemKind::Message,
            from: From {
                id: me.clone(),
                name: sender.name,
            },
            relation: Relation::of(
                &me,
                parent(&me).as_deref(),
                &target,
                parent(&target).as_deref(),
            ),
        };
        match st.message_rules.admit(&me, &target, text, now_ms()) {
            Err(Held::Duplicate) => return Ok(json!({ "outcome": "duplicate", "id": target })),
            Err(Held::RateLimited) => {
                return Err(Refusal::new(
                    ErrorCode::RateLimited,
                    format!(
                        "{} messages a minute per session; wait before sending more",
                        crate::proto::peer_item::MAX_MESSAGES_PER_MINUTE
                    ),
                ))
            }
            Ok(()) => {}
        }
        match self.put_to(&mut st, &target, item, text) {
            Ok(outcome) => Ok(json!({ "outcome": outcome, "id": target })),
            Err(e) => {
                st.message_rules.withdraw(&me);
                Err(e)
            }
        }
    }

    /// Puts peer item `item` with `text` to session `target`: a foreground peer's is delivered on its
    /// connection now (it keeps nothing for later), a job's as [`put_item`](Self::put_item) does.
    pub(super) fn put_to(
        &self,
        st: &mut State,
        target: &str,
        item: PeerItem,
        text: &str,
    ) -> Result<&'static str, Refusal> {
        let Some(conn) = fg_conn(st, target) else {
            return self.put_item(st, target, item, text);
        };
        let mark = st.sup.next_event;
        st.sup
            .item_event(now(), target, item.kind, &item.from, None, text);
        // Written (its feed event, and what else waits) before it is delivered: a refusal delivers nothing.
        if let Err(e) = self.persist(st, &[], &[], None) {
            st.sup.events.retain(|e| e.seq <= mark);
            st.sup.next_event = mark;
            return Err(e);
        }
        if let Some(o) = st.outboxes.get(&conn) {
            o.send(fg_deliver_line(target, &item, text));
        }
        Ok("delivered")
    }

    /// Hands the notices that watches of foreground peers queued ([`crate::proto::supervisor::Supervisor::fg_notices`])
    /// to those connected (a foreground peer keeps nothing for later: one not connected misses it), each
    /// with its feed event (written with the next write).
    pub(super) fn deliver_fg_notices(&self, st: &mut State) {
        for (watcher, item, text) in std::mem::take(&mut st.sup.fg_notices) {
            let Some(conn) = fg_conn(st, &watcher) else {
                tracing::debug!(
                    watcher,
                    "a watch fired for a foreground peer that is not connected"
                );
                continue;
            };
            st.sup
                .item_event(now(), &watcher, item.kind, &item.from, None, &text);
            if let Some(o) = st.outboxes.get(&conn) {
                o.send(fg_deliver_line(&watcher, &item, &text));
            }
        }
    }

    /// Puts peer item `item` with `text` to job `target`: delivered now when its agent is connected (then
    /// written; the agent has it), else written before the answer and queued, its job started again when
    /// it had ended. The outcome's name.
    pub(super) fn put_item(
        &self,
        st: &mut State,
        target: &str,
        item: PeerItem,
        text: &str,
    ) -> Result<&'static str, Refusal> {
        let as_item = st.sup.jobs[target]
            .report
            .as_ref()
            .is_some_and(|r| r.agent_items);
        let running = st.sup.jobs[target].life == Life::Running;
        let connected = running && st.job_conn.contains_key(target);
        // Only a write that can fail before the answer needs the job as it was.
        let undo = (!connected).then(|| st.sup.undo_point(target));
        let seq = st.sup.queue_item(target, item, text, as_item, now())?;
        let live = st
            .job_conn
            .get(target)
            .and_then(|c| st.outboxes.get(c))
            .filter(|_| running);
        if let Some(outbox) = live {
            // Its agent is connected: delivered at once, and written with the next tick (within a second,
            // as a report's row is). The agent has it whatever happens to the daemon meanwhile, and acks it
            // by itself; a write here would hold its delivery behind a disk flush.
            if let Some(p) = st.sup.jobs[target].pending.iter().find(|p| p.seq == seq) {
                outbox.send(deliver_line(target, p));
            }
            st.dirty.insert(target.to_string());
            self.push_row(st, target);
            return Ok("delivered");
        }
        if let Err(e) = self.persist(st, &[target], &[], None) {
            if let Some(undo) = undo {
                st.sup.restore(undo);
            }
            return Err(e);
        }
        let outcome = match running {
            true => "queued",
            false => {
                st.sup
                    .event(now(), target, "respawn", "started for a peer item");
                self.start_process(st, target);
                self.mark_written_later(st, target);
                "started"
            }
        };
        self.push_row(st, target);
        Ok(outcome)
    }

    /// `watch {id, when}` → `{id, name, when, fired}`: a `notice` item once, when session `id` (an id or a
    /// name `peers` lists) is next idle or has ended; `fired: true` when it is so already (the notice comes
    /// at once). Kept across a restart; dropped after 12 hours; at most 20 a session (`full`).
    pub(super) fn watch(&self, conn: u64, args: &Map<String, Value>) -> Result<Value, Refusal> {
        let when_arg = args.req_str("when")?;
        let when = crate::proto::watch::When::parse(when_arg)
            .ok_or_else(|| Refusal::bad(format!("`when` is idle or ended, not {when_arg:?}")))?;
        let mut st = self.lock();
        let me = Self::sender(&st, conn)?.id;
        let target = Self::target(&st, args.req_str("id")?)?;
        if target == me {
            return Err(Refusal::bad("a session does not watch itself"));
        }
        let (before, undo) = (st.sup.watches.clone(), st.sup.undo_point(&me));
        let (queued, queued_fg) = (st.sup.fired.len(), st.sup.fg_notices.len());
        let fired = st.sup.watch(&me, &target, when, now_ms())?;
        if let Err(e) = self.persist(&mut st, &[], &[], None) {
            st.sup.watches = before;
            st.sup.fired.truncate(queued);
            st.sup.fg_notices.truncate(queued_fg);
            st.sup.restore(undo);
            return Err(e);
        }
        let name = st.sup.jobs[&target].name.clone();
        Ok(json!({ "id": target, "name": name, "when": when.as_str(), "fired": fired }))
    }

    /// The caller as an item's sender: a job after its report, or a foreground peer.
    fn sender(st: &State, conn: u64) -> Result<From, Refusal> {
        let s = Self::session_of(st, conn)?;
        Ok(From {
            id: s.id,
            name: s.name,
        })
    }

    /// `spawn {profile, task, name?}` → `{id, name}`: a job whose parent is the caller, of a profile a
    /// session may start ([`crate::proto::spawn_rules::spawnable`]), within the bounds of
    /// [`crate::proto::spawn_rules`]: a rate per session, its children at work, and spawned jobs running in all.
    pub(super) fn spawn(&self, conn: u64, args: &Map<String, Value>) -> Result<Value, Refusal> {
        let mut st = self.lock();
        let parent = Self::sender(&st, conn)?;
        let profile = args.req_str("profile")?;
        match self.config.profiles.get(profile) {
            Some(p) => {
                crate::proto::spawn_rules::spawnable(profile, p.protocol, p.controller_only)?
            }
            // An engine agent (a hosted profile) speaks the protocol.
            None if self.config.hosted.get(profile).is_some() => {}
            None => {
                return Err(Refusal::new(
                    ErrorCode::NotFound,
                    format!("no profile {profile:?}"),
                ))
            }
        }
        let (mine, all) = st.sup.spawned_counts(&parent.id);
        let now = self.config.calendar.now();
        st.spawn_rules
            .admit(&parent.id, now, mine, all)
            .map_err(|held| held.refusal())?;
        let mut dispatch = Map::new();
        for key in ["profile", "task", "name"] {
            if let Some(v) = args.get(key) {
                dispatch.insert(key.into(), v.clone());
            }
        }
        let spawner = parent.id.clone();
        match self.dispatch_locked(&mut st, &dispatch, Some(parent)) {
            Ok(job) => Ok(json!({ "id": job["id"], "name": job["name"] })),
            Err(e) => {
                st.spawn_rules.withdraw(&spawner);
                Err(e)
            }
        }
    }

    /// `handback {text}` → `{}`: a spawned job's result to its parent, as a `report` item; the child's
    /// row ends `done` with it as the summary.
    pub(super) fn handback(&self, conn: u64, args: &Map<String, Value>) -> Result<Value, Refusal> {
        let text = args.req_str("text")?;
        let mut st = self.lock();
        if st.fg_peers.contains_key(&conn) {
            return Err(Refusal::new(
                ErrorCode::Unsupported,
                "handback is a spawned job's: a foreground peer has no parent",
            ));
        }
        let me = Self::sender(&st, conn)?;
        let parent = st.sup.jobs[&me.id].parent.clone().ok_or_else(|| {
            Refusal::bad("handback is a spawned job's: this session has no parent")
        })?;
        // A job parent keeps the report until its agent takes it; a foreground parent (it keeps nothing)
        // must be connected, or the child is told and can hand back again.
        let fg_parent = fg_conn(&st, &parent).is_some();
        if !st.sup.jobs.contains_key(&parent) && !fg_parent {
            return Err(Refusal::new(
                ErrorCode::NotFound,
                format!("its parent {parent:?} is gone"),
            ));
        }
        let item = PeerItem {
            kind: ItemKind::Report,
            from: me.clone(),
            relation: Relation::Child,
        };
        self.put_to(&mut st, &parent, item, text)?;
        // The parent has the report (durable): the row ends done, written now or at the next tick.
        st.sup.handed_back(&me.id, text, now());
        self.mark_written_later(&mut st, &me.id);
        self.push_row(&st, &me.id);
        Ok(json!({}))
    }
}

/// The connection of foreground peer `id`, while it is connected.
fn fg_conn(st: &State, id: &str) -> Option<u64> {
    st.fg_peers
        .iter()
        .find(|(_, p)| p.id == id)
        .map(|(c, _)| *c)
}

/// A peer item's `deliver` event to foreground peer `target`: no seq (nothing is kept to ack), the
/// envelope as its text.
fn fg_deliver_line(target: &str, item: &PeerItem, text: &str) -> String {
    let mut f = Map::new();
    f.insert("id".into(), json!(target));
    f.insert(
        "text".into(),
        json!(crate::proto::peer_item::envelope(item, text)),
    );
    f.insert("kind".into(), json!(item.kind));
    f.insert("from".into(), json!(item.from));
    f.insert("relation".into(), json!(item.relation));
    event_line("deliver", f)
}
