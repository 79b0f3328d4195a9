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
    fn target(st: &State, to: &str) -> Result<String, Refusal> {
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
        let as_item = receiver.report.as_ref().is_some_and(|r| r.agent_items);
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
        let undo = st.sup.undo_point(&target);
        let seq = match st.sup.queue_item(&target, item, text, as_item, now()) {
            Ok(seq) => seq,
            Err(e) => {
                st.message_rules.withdraw(&me);
                return Err(e);
            }
        };
        if let Err(e) = self.persist(&mut st, &[&target], &[], None) {
            st.sup.restore(undo);
            st.message_rules.withdraw(&me);
            return Err(e);
        }
        let running = st.sup.jobs[&target].life == Life::Running;
        let outcome = match (running, st.job_conn.get(&target)) {
            (true, Some(c)) => {
                let line = st.sup.jobs[&target]
                    .pending
                    .iter()
                    .find(|p| p.seq == seq)
                    .map(|p| deliver_line(&target, p));
                if let (Some(line), Some(o)) = (line, st.outboxes.get(c)) {
                    o.send(line);
                }
                "delivered"
            }
            (true, None) => "queued",
            (false, _) => {
                st.sup
                    .event(now(), &target, "respawn", "started for a message");
                self.start_process(&mut st, &target);
                self.mark_written_later(&mut st, &target);
                "started"
            }
        };
        self.push_row(&st, &target);
        Ok(json!({ "outcome": outcome, "id": target }))
    }
}
