//! The task board (M47): tasks any session, the hub or the concierge can see, that sessions claim and
//! finish, with dependencies (`after`), a bound (200, done and dropped ones going first), and every rule
//! and refusal code the spec states. Pure: the caller passes the actor, the time, and which sessions are
//! live; it puts the changes on the wire (a `task` feed event each, a `board` push, a message to a holder).

use crate::proto::wire::{ErrorCode, Refusal};
use serde::{Deserialize, Serialize};

/// Tasks kept on the board (the spec's 200).
pub const MAX_TASKS: usize = 200;
/// Longest title, in characters: a title is one line of a list.
pub const MAX_TITLE_CHARS: usize = 200;
/// Longest detail, in characters: what a session needs to start, not a document.
pub const MAX_DETAIL_CHARS: usize = 4000;
/// Longest result, in characters: the row's summary bound, doubled (a result is read on the board).
pub const MAX_RESULT_CHARS: usize = 1000;
/// Most tasks one task may come after.
pub const MAX_AFTER: usize = 20;

/// Where a task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskState {
    /// Nobody holds it.
    Open,
    /// A session holds it.
    Claimed,
    /// Finished.
    Done,
    /// Taken off the board by the hub or the concierge.
    Dropped,
}

/// Who did something: `user` (the hub), `concierge`, or a session's name with its id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct By {
    /// The name.
    pub who: String,
    /// A session's id (names can be shared); none for the user.
    #[serde(rename = "whoId", default, skip_serializing_if = "Option::is_none")]
    pub who_id: Option<String>,
}

/// A session, as a task names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
}

/// A hand-over: the session a task was sent to, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assigned {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Unix seconds.
    pub at: u64,
}

/// One task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BoardTask {
    /// Its number, from 1, never reused.
    pub id: u64,
    /// One line.
    pub title: String,
    /// More, if any.
    pub detail: Option<String>,
    /// Where it stands.
    pub state: TaskState,
    /// The tasks it waits for (done or dropped before it may be claimed).
    pub after: Vec<u64>,
    /// Who added it.
    pub by: By,
    /// When (Unix seconds).
    pub at: u64,
    /// The session that holds it.
    pub owner: Option<Session>,
    /// When it was claimed.
    pub claimed_at: Option<u64>,
    /// When it was done.
    pub done_at: Option<u64>,
    /// What came of it.
    pub result: Option<String>,
    /// Handed to a session, until a claim.
    pub assigned: Option<Assigned>,
}

/// Who acts on the board.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    /// The hub (a controller's connection): the user.
    User,
    /// The concierge's job.
    Concierge(Session),
    /// A session (a job after its report).
    Session(Session),
}

impl Actor {
    fn by(&self) -> By {
        match self {
            Actor::User => By {
                who: "user".into(),
                who_id: None,
            },
            Actor::Concierge(s) | Actor::Session(s) => By {
                who: s.name.clone(),
                who_id: Some(s.id.clone()),
            },
        }
    }

    /// Whether it speaks for the person (the hub or the concierge), who may drop, assign, and finish or
    /// release another's task.
    fn steers(&self) -> bool {
        matches!(self, Actor::User | Actor::Concierge(_))
    }
}

/// One change, for the feed (`why`, `text`), the pushes, and the holder told of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The task after it.
    pub task: BoardTask,
    /// `add`, `claim`, `release`, `done`, `drop` or `assign`.
    pub why: &'static str,
    /// `#id title`, with `: result`, `: to name` or `: why released`.
    pub text: String,
    /// Who made it.
    pub by: By,
    /// A holder to tell (its id, and what): the hub or the concierge finished, released or dropped its
    /// task.
    pub tell: Option<(String, String)>,
}

/// The counts the hubs are pushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Open and claimable.
    pub open: usize,
    /// Held.
    pub claimed: usize,
    /// Open, waiting for a task in `after`.
    pub blocked: usize,
    /// Done.
    pub done: usize,
}

/// The board.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Board {
    /// Oldest first.
    pub tasks: Vec<BoardTask>,
    /// The next task's id.
    pub next_id: u64,
}

fn refusal(code: ErrorCode, message: impl Into<String>) -> Refusal {
    Refusal::new(code, message)
}

/// `text` folded to one line and checked against `max` characters (`field` names it in the refusal).
fn bounded(field: &str, text: &str, max: usize, one_line: bool) -> Result<String, Refusal> {
    let text = match one_line {
        true => crate::proto::wire::fold_name(text),
        false => text.trim().to_string(),
    };
    if text.chars().count() > max {
        return Err(Refusal::bad(format!("{field} is at most {max} characters")));
    }
    Ok(text)
}

/// A task id on the wire: a positive integer, or a string of digits.
pub fn task_id(v: &serde_json::Value) -> Result<u64, Refusal> {
    crate::proto::wire::numbered_id(v, "a task id")
}

impl Board {
    fn find(&self, id: u64) -> Result<usize, Refusal> {
        self.tasks
            .iter()
            .position(|t| t.id == id)
            .ok_or_else(|| refusal(ErrorCode::NotFound, format!("no task #{id}")))
    }

    /// Whether task `t` waits for a task in its `after` that is neither done nor dropped.
    fn waits(&self, t: &BoardTask) -> bool {
        t.after.iter().any(|a| {
            self.tasks
                .iter()
                .find(|x| x.id == *a)
                .is_some_and(|x| matches!(x.state, TaskState::Open | TaskState::Claimed))
        })
    }

    /// The counts for the hubs.
    pub fn counts(&self) -> Counts {
        let mut c = Counts {
            open: 0,
            claimed: 0,
            blocked: 0,
            done: 0,
        };
        for t in &self.tasks {
            match t.state {
                TaskState::Open if self.waits(t) => c.blocked += 1,
                TaskState::Open => c.open += 1,
                TaskState::Claimed => c.claimed += 1,
                TaskState::Done => c.done += 1,
                TaskState::Dropped => {}
            }
        }
        c
    }

    fn change(&self, i: usize, why: &'static str, detail: Option<String>, by: By) -> Change {
        let t = &self.tasks[i];
        let mut text = format!("#{} {}", t.id, t.title);
        if let Some(d) = detail.filter(|d| !d.is_empty()) {
            text.push_str(": ");
            text.push_str(&d);
        }
        Change {
            task: t.clone(),
            why,
            text,
            by,
            tell: None,
        }
    }

    /// `add {title, detail?, after?}`.
    pub fn add(
        &mut self,
        actor: &Actor,
        title: &str,
        detail: Option<&str>,
        mut after: Vec<u64>,
        at: u64,
    ) -> Result<Change, Refusal> {
        let title = bounded("a title", title, MAX_TITLE_CHARS, true)?;
        if title.is_empty() {
            return Err(Refusal::bad("a task has a title"));
        }
        let detail = detail
            .map(|d| bounded("a detail", d, MAX_DETAIL_CHARS, false))
            .transpose()?
            .filter(|d| !d.is_empty());
        if after.len() > MAX_AFTER {
            return Err(Refusal::bad(format!(
                "a task comes after at most {MAX_AFTER} others"
            )));
        }
        for a in &after {
            if !self.tasks.iter().any(|t| t.id == *a) {
                return Err(Refusal::bad(format!(
                    "`after` names #{a}, which is not on the board"
                )));
            }
        }
        if self.tasks.len() >= MAX_TASKS {
            // The oldest done or dropped one goes; with none, the board is full.
            let gone = self
                .tasks
                .iter()
                .position(|t| matches!(t.state, TaskState::Done | TaskState::Dropped))
                .ok_or_else(|| {
                    refusal(
                        ErrorCode::Full,
                        format!("the board holds {MAX_TASKS} tasks, none done or dropped"),
                    )
                })?;
            let id = self.tasks.remove(gone).id;
            for t in &mut self.tasks {
                t.after.retain(|a| *a != id);
            }
            after.retain(|a| *a != id);
        }
        let id = self.next_id.max(1);
        self.next_id = id + 1;
        after.sort_unstable();
        after.dedup();
        self.tasks.push(BoardTask {
            id,
            title,
            detail,
            state: TaskState::Open,
            after,
            by: actor.by(),
            at,
            owner: None,
            claimed_at: None,
            done_at: None,
            result: None,
            assigned: None,
        });
        Ok(self.change(self.tasks.len() - 1, "add", None, actor.by()))
    }

    /// `claim {id}` by a session; `live` says whether a holder's session still holds anything (a gone,
    /// failed, stopped or removed one does not: its claim is released first, a change of its own).
    pub fn claim(
        &mut self,
        actor: &Actor,
        id: u64,
        live: &dyn Fn(&str) -> bool,
        at: u64,
    ) -> Result<Vec<Change>, Refusal> {
        let Actor::Session(me) = actor else {
            return Err(refusal(
                ErrorCode::Unsupported,
                "a task is claimed by a session, not by the hub or the concierge",
            ));
        };
        let i = self.find(id)?;
        let t = &self.tasks[i];
        match t.state {
            TaskState::Done | TaskState::Dropped => {
                return Err(Refusal::bad(
                    format!("#{id} is {:?}", t.state).to_lowercase(),
                ))
            }
            TaskState::Claimed if t.owner.as_ref().is_some_and(|o| o.id == me.id) => {
                return Ok(Vec::new())
            }
            _ => {}
        }
        if self.waits(t) {
            return Err(refusal(
                ErrorCode::Blocked,
                format!("#{id} comes after tasks that are not done"),
            ));
        }
        let mut changes = Vec::new();
        if let Some(holder) = t.owner.clone() {
            if live(&holder.id) {
                return Err(refusal(
                    ErrorCode::Conflict,
                    format!("#{id} is held by {}", holder.name),
                ));
            }
            changes.push(self.release_at(i, "its holder is gone", actor.by()));
        }
        let t = &mut self.tasks[i];
        t.state = TaskState::Claimed;
        t.owner = Some(me.clone());
        t.claimed_at = Some(at);
        t.assigned = None;
        changes.push(self.change(i, "claim", None, actor.by()));
        Ok(changes)
    }

    fn release_at(&mut self, i: usize, why: &str, by: By) -> Change {
        let t = &mut self.tasks[i];
        t.state = TaskState::Open;
        t.owner = None;
        t.claimed_at = None;
        self.change(i, "release", Some(why.to_string()), by)
    }

    /// Checks that `actor` may finish or release claimed task `i`: its holder may, and the hub and the
    /// concierge (the holder is then told); another session may not.
    fn holder_or_steerer(&self, actor: &Actor, i: usize) -> Result<Option<String>, Refusal> {
        let t = &self.tasks[i];
        let holder = t.owner.as_ref().map(|o| o.id.clone());
        match actor {
            Actor::Session(me) if holder.as_deref() == Some(me.id.as_str()) => Ok(None),
            Actor::Session(_) => Err(refusal(
                ErrorCode::Unsupported,
                format!("#{} is not yours", t.id),
            )),
            _ => Ok(holder),
        }
    }

    /// `done {id, result?}`.
    pub fn done(
        &mut self,
        actor: &Actor,
        id: u64,
        result: Option<&str>,
        at: u64,
    ) -> Result<Change, Refusal> {
        let result = result
            .map(|r| bounded("a result", r, MAX_RESULT_CHARS, false))
            .transpose()?
            .filter(|r| !r.is_empty());
        let i = self.find(id)?;
        let tell = match self.tasks[i].state {
            TaskState::Done | TaskState::Dropped => {
                return Err(Refusal::bad(format!("#{id} is done or dropped already")))
            }
            TaskState::Open if actor.steers() => None,
            TaskState::Open => {
                return Err(Refusal::bad(format!(
                    "#{id} is not claimed: claim it first"
                )))
            }
            TaskState::Claimed => self.holder_or_steerer(actor, i)?,
        };
        let t = &mut self.tasks[i];
        t.state = TaskState::Done;
        t.done_at = Some(at);
        t.result = result.clone();
        t.assigned = None;
        let mut c = self.change(i, "done", result, actor.by());
        c.tell = tell.map(|h| (h, format!("{} marked your task {} done", c.by.who, c.text)));
        Ok(c)
    }

    /// `release {id}`.
    pub fn release(&mut self, actor: &Actor, id: u64) -> Result<Change, Refusal> {
        let i = self.find(id)?;
        if self.tasks[i].state != TaskState::Claimed {
            return Err(Refusal::bad(format!("#{id} is not claimed")));
        }
        let tell = self.holder_or_steerer(actor, i)?;
        let why = match &tell {
            Some(_) => format!("by {}", actor.by().who),
            None => "by its holder".to_string(),
        };
        let mut c = self.release_at(i, &why, actor.by());
        c.tell = tell.map(|h| (h, format!("{} released your task {}", c.by.who, c.text)));
        Ok(c)
    }

    /// `drop {id}`: the hub's and the concierge's.
    pub fn drop_task(&mut self, actor: &Actor, id: u64) -> Result<Change, Refusal> {
        if !actor.steers() {
            return Err(refusal(
                ErrorCode::Unsupported,
                "a task is dropped by the hub or the concierge",
            ));
        }
        let i = self.find(id)?;
        if matches!(self.tasks[i].state, TaskState::Done | TaskState::Dropped) {
            return Err(Refusal::bad(format!("#{id} is done or dropped already")));
        }
        let t = &mut self.tasks[i];
        let holder = t.owner.take().map(|o| o.id);
        t.state = TaskState::Dropped;
        t.claimed_at = None;
        t.assigned = None;
        let mut c = self.change(i, "drop", None, actor.by());
        c.tell = holder.map(|h| (h, format!("{} dropped your task {}", c.by.who, c.text)));
        Ok(c)
    }

    /// Checks an `assign {id, to}` before its message goes: the hub's and the concierge's, of an open task.
    pub fn check_assign(&self, actor: &Actor, id: u64) -> Result<(), Refusal> {
        if !actor.steers() {
            return Err(refusal(
                ErrorCode::Unsupported,
                "a task is assigned by the hub or the concierge",
            ));
        }
        let i = self.find(id)?;
        if self.tasks[i].state != TaskState::Open {
            return Err(Refusal::bad(format!("#{id} is not open")));
        }
        Ok(())
    }

    /// Marks open task `id` handed to `to` (its message reached it).
    pub fn assigned(
        &mut self,
        actor: &Actor,
        id: u64,
        to: Session,
        at: u64,
    ) -> Result<Change, Refusal> {
        let i = self.find(id)?;
        let name = to.name.clone();
        self.tasks[i].assigned = Some(Assigned {
            id: to.id,
            name: to.name,
            at,
        });
        Ok(self.change(i, "assign", Some(format!("to {name}")), actor.by()))
    }

    /// The message a session is sent with task `id` assigned to it.
    pub fn assignment_text(&self, id: u64) -> Option<String> {
        let t = self.tasks.iter().find(|t| t.id == id)?;
        let mut text = format!(
            "You are asked to take task #{} on the task board: {}",
            t.id, t.title
        );
        if let Some(d) = &t.detail {
            text.push_str("\n\n");
            text.push_str(d);
        }
        text.push_str(&format!(
            "\n\nClaim it with `task {{\"action\": \"claim\", \"id\": {}}}`, and mark it done with `task {{\"action\": \"done\", \"id\": {}, \"result\": \"...\"}}`.",
            t.id, t.id
        ));
        Some(text)
    }

    /// Releases every task session `id` holds (it failed, was stopped or removed), with `why`.
    pub fn release_held_by(&mut self, id: &str, why: &str, by: By) -> Vec<Change> {
        let held: Vec<usize> = (0..self.tasks.len())
            .filter(|i| {
                let t = &self.tasks[*i];
                t.state == TaskState::Claimed && t.owner.as_ref().is_some_and(|o| o.id == id)
            })
            .collect();
        held.into_iter()
            .map(|i| self.release_at(i, why, by.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(id: &str) -> Actor {
        Actor::Session(Session {
            id: id.into(),
            name: format!("{id}-name"),
        })
    }

    fn code(r: Result<impl std::fmt::Debug, Refusal>) -> String {
        r.expect_err("refused").code.as_str().to_string()
    }

    fn live(_: &str) -> bool {
        true
    }

    #[test]
    fn tasks_are_added_with_checked_fields_and_ids_that_are_never_reused() {
        let mut b = Board::default();
        let c = b
            .add(
                &Actor::User,
                "write\nthe docs",
                Some(" the README "),
                vec![],
                10,
            )
            .unwrap();
        assert_eq!(
            (c.task.id, c.why, c.text.as_str()),
            (1, "add", "#1 write the docs")
        );
        assert_eq!(c.task.detail.as_deref(), Some("the README"));
        assert_eq!(
            c.task.by,
            By {
                who: "user".into(),
                who_id: None
            }
        );
        assert_eq!(
            code(b.add(&Actor::User, "  ", None, vec![], 10)),
            "bad_request"
        );
        assert_eq!(
            code(b.add(&Actor::User, &"x".repeat(201), None, vec![], 10)),
            "bad_request"
        );
        assert_eq!(
            code(b.add(&Actor::User, "t", Some(&"x".repeat(4001)), vec![], 10)),
            "bad_request"
        );
        assert_eq!(
            code(b.add(&Actor::User, "t", None, vec![9], 10)),
            "bad_request"
        );
        assert_eq!(
            code(b.add(&Actor::User, "t", None, (0..21).collect(), 10)),
            "bad_request"
        );
        let two = b.add(&session("j1"), "test it", None, vec![1], 11).unwrap();
        assert_eq!(two.task.id, 2);
        assert_eq!(two.task.by.who_id.as_deref(), Some("j1"));
    }

    #[test]
    fn a_claim_waits_for_after_refuses_a_live_holder_and_takes_over_a_gone_one() {
        let mut b = Board::default();
        b.add(&Actor::User, "first", None, vec![], 1).unwrap();
        b.add(&Actor::User, "second", None, vec![1], 1).unwrap();
        assert_eq!(code(b.claim(&Actor::User, 1, &live, 2)), "unsupported");
        assert_eq!(code(b.claim(&session("j1"), 9, &live, 2)), "not_found");
        assert_eq!(code(b.claim(&session("j1"), 2, &live, 2)), "blocked");
        assert_eq!(
            b.counts(),
            Counts {
                open: 1,
                claimed: 0,
                blocked: 1,
                done: 0
            }
        );
        let claimed = b.claim(&session("j1"), 1, &live, 2).unwrap();
        assert_eq!(claimed.len(), 1);
        assert_eq!(
            claimed[0].task.owner.as_ref().map(|o| o.id.as_str()),
            Some("j1")
        );
        assert!(
            b.claim(&session("j1"), 1, &live, 3).unwrap().is_empty(),
            "one's own again"
        );
        assert_eq!(code(b.claim(&session("j2"), 1, &live, 3)), "conflict");
        // j1 is gone: released (a change of its own), then taken over.
        let gone = |id: &str| id != "j1";
        let taken = b.claim(&session("j2"), 1, &gone, 4).unwrap();
        assert_eq!(
            taken.iter().map(|c| c.why).collect::<Vec<_>>(),
            ["release", "claim"]
        );
        assert_eq!(taken[0].text, "#1 first: its holder is gone");
        b.done(&session("j2"), 1, Some("ok"), 5).unwrap();
        assert_eq!(
            b.claim(&session("j3"), 2, &live, 6).unwrap().len(),
            1,
            "after is done"
        );
        assert_eq!(code(b.claim(&session("j3"), 1, &live, 6)), "bad_request");
    }

    #[test]
    fn done_and_release_are_the_holders_and_the_person_tells_the_holder() {
        let mut b = Board::default();
        b.add(&Actor::User, "a", None, vec![], 1).unwrap();
        assert_eq!(
            code(b.done(&session("j1"), 1, None, 2)),
            "bad_request",
            "not claimed"
        );
        assert_eq!(code(b.release(&session("j1"), 1)), "bad_request");
        b.claim(&session("j1"), 1, &live, 2).unwrap();
        assert_eq!(code(b.done(&session("j2"), 1, None, 3)), "unsupported");
        assert_eq!(code(b.release(&session("j2"), 1)), "unsupported");
        let released = b.release(&Actor::User, 1).unwrap();
        let (holder, told) = released.tell.unwrap();
        assert_eq!(holder, "j1");
        assert!(told.contains("user released your task #1 a"), "{told}");
        b.claim(&session("j1"), 1, &live, 4).unwrap();
        let own = b.done(&session("j1"), 1, Some("it works"), 5).unwrap();
        assert_eq!((own.text.as_str(), own.tell), ("#1 a: it works", None));
        assert_eq!(own.task.result.as_deref(), Some("it works"));
        assert_eq!(
            code(b.done(&session("j1"), 1, None, 6)),
            "bad_request",
            "done already"
        );
        b.add(&Actor::User, "b", None, vec![], 7).unwrap();
        assert!(
            b.done(&Actor::User, 2, None, 8).is_ok(),
            "the person may finish an open one"
        );
    }

    #[test]
    fn drop_and_assign_are_the_persons() {
        let mut b = Board::default();
        b.add(&Actor::User, "a", None, vec![], 1).unwrap();
        b.add(&Actor::User, "b", None, vec![], 1).unwrap();
        assert_eq!(code(b.drop_task(&session("j1"), 1)), "unsupported");
        assert_eq!(code(b.check_assign(&session("j1"), 1)), "unsupported");
        b.check_assign(&Actor::User, 1).unwrap();
        let to = Session {
            id: "j2".into(),
            name: "helper".into(),
        };
        let c = b.assigned(&Actor::User, 1, to, 2).unwrap();
        assert_eq!(c.text, "#1 a: to helper");
        assert!(b
            .assignment_text(1)
            .unwrap()
            .contains("\"action\": \"claim\", \"id\": 1"));
        let claim = b.claim(&session("j2"), 1, &live, 3).unwrap();
        assert_eq!(claim[0].task.assigned, None, "cleared by the claim");
        assert_eq!(
            code(b.check_assign(&Actor::User, 1)),
            "bad_request",
            "not open"
        );
        let dropped = b.drop_task(&Actor::User, 1).unwrap();
        assert_eq!(dropped.tell.map(|t| t.0).as_deref(), Some("j2"));
        assert_eq!(dropped.task.state, TaskState::Dropped);
        assert_eq!(code(b.drop_task(&Actor::User, 1)), "bad_request");
        assert!(b.drop_task(&Actor::User, 2).unwrap().tell.is_none());
    }

    #[test]
    fn two_hundred_tasks_and_the_done_and_dropped_go_first() {
        let mut b = Board::default();
        for n in 0..MAX_TASKS {
            b.add(&Actor::User, &format!("t{n}"), None, vec![], 1)
                .unwrap();
        }
        assert_eq!(
            code(b.add(&Actor::User, "one more", None, vec![], 2)),
            "full"
        );
        b.drop_task(&Actor::User, 7).unwrap();
        b.done(&Actor::User, 3, None, 2).unwrap();
        // The oldest of them goes first, and leaves no `after` naming it.
        let waits = b.add(&Actor::User, "waits", None, vec![5, 3], 2).unwrap();
        assert_eq!((waits.task.id, waits.task.after.clone()), (201, vec![5]));
        assert!(b.tasks.iter().all(|t| t.id != 3));
        let next = b.add(&Actor::User, "evicts 7", None, vec![], 3).unwrap();
        assert_eq!(next.task.id, 202, "never reused");
        assert!(b.tasks.iter().all(|t| t.id != 7));
        assert_eq!(b.tasks.len(), MAX_TASKS);
        assert_eq!(
            code(b.add(&Actor::User, "one more", None, vec![], 4)),
            "full"
        );
    }

    #[test]
    fn a_gone_holders_tasks_are_released_and_ids_read_as_the_spec_says() {
        let mut b = Board::default();
        b.add(&Actor::User, "a", None, vec![], 1).unwrap();
        b.add(&Actor::User, "b", None, vec![], 1).unwrap();
        b.claim(&session("j1"), 1, &live, 2).unwrap();
        b.claim(&session("j1"), 2, &live, 2).unwrap();
        let by = By {
            who: "j1-name".into(),
            who_id: Some("j1".into()),
        };
        let released = b.release_held_by("j1", "j1 failed", by);
        assert_eq!(released.len(), 2);
        assert_eq!(released[0].text, "#1 a: j1 failed");
        assert_eq!(b.counts().open, 2);
        assert_eq!(task_id(&serde_json::json!(4)), Ok(4));
        assert_eq!(task_id(&serde_json::json!("12")), Ok(12));
        for bad in [
            serde_json::json!(0),
            serde_json::json!(-1),
            serde_json::json!("1a"),
            serde_json::json!(""),
        ] {
            assert_eq!(code(task_id(&bad)), "bad_request", "{bad}");
        }
    }
}
