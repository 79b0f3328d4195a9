//! The peer ops a session uses on its own connection after its report (M43): `peers` lists the sessions,
//! `send` puts a message to one of them as a peer item ([`crate::peer_item`]): delivered at once when its
//! agent is connected, queued when not, its job started again when it had ended.

use super::state::{deliver_line, now, now_ms, row, Shared, State};
use crate::peer_item::{From, Held, ItemKind, PeerItem, Relation};
use crate::supervisor::Life;
use crate::wire::{Args, ErrorCode, Refusal};
use serde_json::{json, Map, Value};

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

    /// A job by id or by its name, which must name one job only.
    pub(super) fn target(st: &State, to: &str) -> Result<String, Refusal> {
        if st.sup.jobs.contains_key(to) {
            return Ok(to.to_string());
        }
        let named: Vec<&String> = st
            .sup
            .jobs
            .values()
            .filter(|j| j.name == to)
            .map(|j| &j.id)
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
        let me = Self::session_job(&st, conn)?;
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
        let me = Self::session_job(&st, conn)?;
        let target = Self::target(&st, to)?;
        if target == me {
            return Err(Refusal::bad("a session does not send to itself"));
        }
        let (sender, receiver) = (&st.sup.jobs[&me], &st.sup.jobs[&target]);
        let item = PeerItem {
            kind: ItemKind::Message,
            from: From {
                id: me.clone(),
                name: sender.name.clone(),
            },
            relation: Relation::of(
                &me,
                sender.parent.as_deref(),
                &target,
                receiver.parent.as_deref(),
            ),
        };
        match st.message_rules.admit(&me, &target, text, now_ms()) {
            Err(Held::Duplicate) => return Ok(json!({ "outcome": "duplicate", "id": target })),
            Err(Held::RateLimited) => {
                return Err(Refusal::new(
                    ErrorCode::RateLimited,
                    format!(
                        "{} messages a minute per session; wait before sending more",
                        crate::peer_item::MAX_MESSAGES_PER_MINUTE
                    ),
                ))
            }
            Ok(()) => {}
        }
        match self.put_item(&mut st, &target, item, text) {
            Ok(outcome) => Ok(json!({ "outcome": outcome, "id": target })),
            Err(e) => {
                st.message_rules.withdraw(&me);
                Err(e)
            }
        }
    }

    /// Puts peer item `item` with `text` to job `target`, durably: delivered now when its agent is
    /// connected, else queued, its job started again when it had ended. The outcome's name.
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
        let undo = st.sup.undo_point(target);
        let seq = st.sup.queue_item(target, item, text, as_item, now())?;
        if let Err(e) = self.persist(st, &[target], &[], None) {
            st.sup.restore(undo);
            return Err(e);
        }
        let running = st.sup.jobs[target].life == Life::Running;
        let outcome = match (running, st.job_conn.get(target)) {
            (true, Some(c)) => {
                let line = st.sup.jobs[target]
                    .pending
                    .iter()
                    .find(|p| p.seq == seq)
                    .map(|p| deliver_line(target, p));
                if let (Some(line), Some(o)) = (line, st.outboxes.get(c)) {
                    o.send(line);
                }
                "delivered"
            }
            (true, None) => "queued",
            (false, _) => {
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
        let when = crate::watch::When::parse(when_arg)
            .ok_or_else(|| Refusal::bad(format!("`when` is idle or ended, not {when_arg:?}")))?;
        let mut st = self.lock();
        let me = Self::session_job(&st, conn)?;
        let target = Self::target(&st, args.req_str("id")?)?;
        if target == me {
            return Err(Refusal::bad("a session does not watch itself"));
        }
        let (before, undo) = (st.sup.watches.clone(), st.sup.undo_point(&me));
        let queued = st.sup.fired.len();
        let fired = st.sup.watch(&me, &target, when, now_ms())?;
        if let Err(e) = self.persist(&mut st, &[], &[], None) {
            st.sup.watches = before;
            st.sup.fired.truncate(queued);
            st.sup.restore(undo);
            return Err(e);
        }
        let name = st.sup.jobs[&target].name.clone();
        Ok(json!({ "id": target, "name": name, "when": when.as_str(), "fired": fired }))
    }

    /// The caller as an item's sender.
    fn sender(st: &State, conn: u64) -> Result<From, Refusal> {
        let me = Self::session_job(st, conn)?;
        Ok(From {
            name: st.sup.jobs[&me].name.clone(),
            id: me,
        })
    }

    /// `spawn {profile, task, name?}` → `{id, name}`: a job whose parent is the caller.
    pub(super) fn spawn(&self, conn: u64, args: &Map<String, Value>) -> Result<Value, Refusal> {
        let parent = Self::sender(&self.lock(), conn)?;
        let mut dispatch = Map::new();
        for key in ["profile", "task", "name"] {
            if let Some(v) = args.get(key) {
                dispatch.insert(key.into(), v.clone());
            }
        }
        let job = self.dispatch_with(&dispatch, Some(parent))?;
        Ok(json!({ "id": job["id"], "name": job["name"] }))
    }

    /// `handback {text}` → `{}`: a spawned job's result to its parent, as a `report` item; the child's
    /// row ends `done` with it as the summary.
    pub(super) fn handback(&self, conn: u64, args: &Map<String, Value>) -> Result<Value, Refusal> {
        let text = args.req_str("text")?;
        let mut st = self.lock();
        let me = Self::sender(&st, conn)?;
        let parent = st.sup.jobs[&me.id].parent.clone().ok_or_else(|| {
            Refusal::bad("handback is a spawned job's: this session has no parent")
        })?;
        if !st.sup.jobs.contains_key(&parent) {
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
        self.put_item(&mut st, &parent, item, text)?;
        let undo = st.sup.undo_point(&me.id);
        st.sup.handed_back(&me.id, text, now());
        if let Err(e) = self.persist(&mut st, &[&me.id], &[], None) {
            // The parent has the report; the row says so at the child's next report.
            st.sup.restore(undo);
            tracing::warn!(job = %me.id, error = %e.message, "could not write a handed-back row");
        }
        self.push_row(&st, &me.id);
        Ok(json!({}))
    }
}
