//! `task {action, ...}` (M47): the task board on any connection. The hub's connection acts as the user; a
//! session's, after its report, as that session (a session not reported yet, or whose job ended, is
//! `unauthorized`). Each change is durable before the answer, a `task` feed event, and a `board` push; a
//! holder whose task the person finished, released or dropped is told in a message, and `assign` sends the
//! task to a session as one.

use super::state::{now, Shared, State};
use crate::proto::board::{self, Actor, Change};
use crate::proto::peer_item::{From, ItemKind, PeerItem, Relation};
use crate::proto::wire::{Args, ErrorCode, Refusal};
use serde_json::{json, Map, Value};

impl Shared {
    /// Who acts on a connection: a session (a reported job that still holds anything), else the user on
    /// a controller's connection.
    fn actor(st: &State, conn: u64, session: bool, controller: bool) -> Result<Actor, Refusal> {
        if session {
            let me = Self::session_of(st, conn)?;
            if !Self::holds(st, &me.id) {
                return Err(Refusal::new(
                    ErrorCode::Unauthorized,
                    "this session's job has ended",
                ));
            }
            if Self::concierge_conn(st, conn).is_some() {
                return Ok(Actor::Concierge(me));
            }
            return Ok(Actor::Session(me));
        }
        match controller {
            true => Ok(Actor::User),
            false => Err(Refusal::new(
                ErrorCode::Unauthorized,
                "the board is the hub's and the sessions' (after their report)",
            )),
        }
    }

    /// `task {action, ...}` on connection `conn` (`session`: it said `hello` or `report`; `controller`: it
    /// may control jobs).
    pub(super) fn task(
        &self,
        conn: u64,
        session: bool,
        controller: bool,
        args: &Map<String, Value>,
    ) -> Result<Value, Refusal> {
        let action = args.req_str("action")?;
        let mut st = self.lock();
        let actor = Self::actor(&st, conn, session, controller)?;
        let id = || board::task_id(args.get("id").unwrap_or(&Value::Null));
        let at = now();
        let before = st.sup.board.clone();
        let changes: Vec<Change> = match action {
            "list" => return Ok(json!({ "tasks": st.sup.board.tasks })),
            "add" => {
                let after = match args.get("after") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(Value::Array(a)) => {
                        a.iter().map(board::task_id).collect::<Result<_, _>>()?
                    }
                    Some(_) => return Err(Refusal::bad("`after` is a list of task ids")),
                };
                let title = args.req_str("title")?;
                let detail = args.opt_str("detail")?;
                vec![st.sup.board.add(&actor, title, detail, after, at)?]
            }
            "claim" => {
                let id = id()?;
                // Whether its holder, if any, still holds anything.
                let holder = st
                    .sup
                    .board
                    .tasks
                    .iter()
                    .find(|t| t.id == id)
                    .and_then(|t| t.owner.as_ref())
                    .map(|o| o.id.clone());
                let alive = holder.as_deref().is_some_and(|h| Self::holds(&st, h));
                st.sup.board.claim(&actor, id, &|_| alive, at)?
            }
            "done" => vec![st
                .sup
                .board
                .done(&actor, id()?, args.opt_str("result")?, at)?],
            "release" => vec![st.sup.board.release(&actor, id()?)?],
            "drop" => vec![st.sup.board.drop_task(&actor, id()?)?],
            "assign" => return self.assign(&mut st, &actor, id()?, args.req_str("to")?),
            other => {
                return Err(Refusal::bad(format!(
                    "action {other:?} is not list, add, claim, done, release, drop or assign"
                )))
            }
        };
        let mark = (st.sup.next_event, st.sup.board_changed);
        if let Err(e) = self.record(&mut st, &actor, &changes, at) {
            undo_board(&mut st, before, mark);
            return Err(e);
        }
        let task = changes.last().map(|c| c.task.clone());
        Ok(json!({ "tasks": st.sup.board.tasks, "task": task }))
    }

    /// Records `changes` (feed events, the board written) and tells the holders they name, durably.
    fn record(
        &self,
        st: &mut State,
        actor: &Actor,
        changes: &[Change],
        at: u64,
    ) -> Result<(), Refusal> {
        for c in changes {
            st.sup.board_event(c, at);
        }
        self.persist(st, &[], &[], None)?;
        for c in changes {
            if let Some((holder, text)) = &c.tell {
                if Self::holds(st, holder)
                    && (st.sup.jobs.contains_key(holder)
                        || st.fg_peers.values().any(|p| p.id == *holder))
                {
                    // The change stands whether or not the holder can take the message now.
                    if let Err(e) = self.put_to(st, holder, board_item(actor), text) {
                        tracing::warn!(job = %holder, error = %e.message, "could not tell a task's holder");
                    }
                }
            }
        }
        Ok(())
    }

    /// `assign {id, to}`: the task goes to session `to` as a message, and the task is marked `assigned`
    /// in the same write (`sent`: `delivered`, `queued` or `started`). A session the message cannot reach
    /// (its items are `full`) is not handed the task, and `sent` says why.
    fn assign(&self, st: &mut State, actor: &Actor, id: u64, to: &str) -> Result<Value, Refusal> {
        st.sup.board.check_assign(actor, id)?;
        let target = Self::target(st, to)?;
        let profile = st.sup.jobs.get(&target).map(|j| j.profile.as_str());
        if profile.is_some_and(|p| self.config.profiles.get(p).is_some_and(|p| !p.protocol)) {
            return Err(Refusal::new(
                ErrorCode::Unsupported,
                format!("{to} is a terminal command: it takes no messages"),
            ));
        }
        let text = st
            .sup
            .board
            .assignment_text(id)
            .ok_or_else(|| Refusal::new(ErrorCode::NotFound, format!("no task #{id}")))?;
        let name = match st.sup.jobs.get(&target) {
            Some(j) => j.name.clone(),
            None => Self::session_name(st, &target),
        };
        let session = board::Session {
            name,
            id: target.clone(),
        };
        let at = now();
        let (before, mark) = (
            st.sup.board.clone(),
            (st.sup.next_event, st.sup.board_changed),
        );
        // Marked first: the message's write (below) writes the board and its event with it.
        let change = st.sup.board.assigned(actor, id, session, at)?;
        st.sup.board_event(&change, at);
        match self.put_to(st, &target, board_item(actor), &text) {
            Ok(sent) => {
                Ok(json!({ "tasks": st.sup.board.tasks, "task": change.task, "sent": sent }))
            }
            Err(e) if e.code == ErrorCode::Full => {
                undo_board(st, before, mark);
                let task = st.sup.board.tasks.iter().find(|t| t.id == id).cloned();
                Ok(json!({ "tasks": st.sup.board.tasks, "task": task, "sent": "full" }))
            }
            Err(e) => {
                undo_board(st, before, mark);
                Err(e)
            }
        }
    }
}

/// Puts the board back as it was before a change whose write failed: its tasks, the feed events it added,
/// and whether it was waiting to be written.
fn undo_board(st: &mut State, before: board::Board, (next_event, changed): (u64, bool)) {
    st.sup.board = before;
    st.sup.events.retain(|e| e.seq <= next_event);
    st.sup.next_event = next_event;
    st.sup.board_changed = changed;
}

/// A board message's item: from the session that acted, or from the board on the user's behalf.
fn board_item(actor: &Actor) -> PeerItem {
    let from = match actor {
        Actor::User => From {
            id: String::new(),
            name: "the task board".into(),
        },
        Actor::Concierge(s) | Actor::Session(s) => From {
            id: s.id.clone(),
            name: s.name.clone(),
        },
    };
    PeerItem {
        kind: ItemKind::Message,
        from,
        relation: Relation::Peer,
    }
}
