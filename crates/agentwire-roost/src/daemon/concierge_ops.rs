//! The concierge's ops (M44-M46). The hub's: `concierge {action}` (on, off, status, answer, act, undo)
//! and `concierge-ask`. The concierge's own connection's (its job's, after its report): `concierge-say`,
//! `-suggest`, `-reply`, `-policy`, `-act`, and the feed (`events`). `concierge-order` is both's: the
//! hub's as the user, the concierge's as itself. A session's connection is refused `unsupported`.
//!
//! The concierge is woken with digests ([`crate::proto::concierge::digest`]): at each tick the feed since the
//! last digest is read, and when something in it wakes the concierge (or an order is due), one digest is
//! queued for its job, as a `digest` item, once the last has been acked and
//! [`DIGEST_MIN_INTERVAL`](crate::proto::concierge::DIGEST_MIN_INTERVAL) has passed.

use super::state::{deliver_line, now, Shared, State};
use crate::proto::concierge::{self, Answer, By, DigestWhy, FleetLine, CONCIERGE_NAME};
use crate::proto::op::{ConciergeOwn, Lifecycle, Op};
use crate::proto::peer_item::{From, ItemKind, PeerItem, Relation};
use crate::proto::supervisor::{Life, ReplyMode};
use crate::proto::wire::{event_line, Args, ErrorCode, Refusal};
use serde_json::{json, Map, Value};

/// The concierge's role, on its job's row.
pub(super) const ROLE: &str = "concierge";

/// The first task of a concierge started with none: what it is for, and how digests and its ops work.
const CONCIERGE_TASK: &str = "You are the concierge of this roost: you watch the user's fleet of agent \
sessions for them. You will be woken with digests (<roost-digest>) of what happened: sessions that wait for \
the user, finish or fail, and standing orders that fall due. Tell the user what matters (say), suggest \
answers to sessions that wait (suggest), answer routine ones in the user's place when your policy allows \
(reply), and keep the standing orders (mark one applied when you have done it). These are your concierge \
ops, or tools (`concierge-say` or `concierge_say`, and so on). Say nothing when nothing matters.";

/// How the concierge signs what it does.
fn concierge_from(id: &str) -> From {
    From {
        id: id.to_string(),
        name: CONCIERGE_NAME.to_string(),
    }
}

impl Shared {
    /// The concierge's job, when connection `conn` speaks for it.
    pub(super) fn concierge_conn(st: &State, conn: u64) -> Option<String> {
        let id = st.sup.concierge.job.as_ref()?;
        (st.job_conn.get(id) == Some(&conn)).then(|| id.clone())
    }

    /// Whether connection `conn` speaks for the concierge.
    pub(super) fn is_concierge_conn(&self, conn: u64) -> bool {
        Self::concierge_conn(&self.lock(), conn).is_some()
    }

    /// The concierge's status (`ConciergeStatus`).
    pub(super) fn concierge_status(&self, st: &State) -> Value {
        let state = st
            .sup
            .concierge
            .job
            .as_ref()
            .and_then(|j| st.sup.jobs.get(j))
            .map(|j| j.row_state());
        st.sup.concierge.status(self.config.concierge.policy, state)
    }

    /// `{"event": "concierge", "status"}` to every subscribed hub, when the status changed since the last
    /// push.
    pub(super) fn push_concierge(&self, st: &State) {
        if st.subscribers.is_empty() {
            return;
        }
        let status = self.concierge_status(st);
        if st.concierge_pushed.borrow().as_ref() == Some(&status) {
            return;
        }
        *st.concierge_pushed.borrow_mut() = Some(status.clone());
        let mut f = Map::new();
        f.insert("status".into(), status);
        self.push_all(st, event_line("concierge", f));
    }

    /// A line to every subscribed hub.
    pub(super) fn push_all(&self, st: &State, line: String) {
        for c in &st.subscribers {
            if let Some(o) = st.outboxes.get(c) {
                o.send(line.clone());
            }
        }
    }

    /// `concierge {action, ...}`: the hub's.
    pub(super) fn concierge(&self, args: &Map<String, Value>) -> Result<Value, Refusal> {
        let action = args.req_str("action")?;
        let mut st = self.lock();
        let at = now();
        let before = st.sup.concierge.clone();
        // The feed's end, put back with the record when the change cannot be made durable.
        let feed = st.sup.undo_point("");
        let start = self.config.concierge.policy;
        let mut stopped = None;
        match action {
            "status" => return Ok(self.concierge_status(&st)),
            "on" => return self.concierge_on(&mut st, args),
            "off" => {
                let Some(id) = st.sup.concierge.job.clone() else {
                    return Ok(self.concierge_status(&st));
                };
                if st
                    .sup
                    .jobs
                    .get(&id)
                    .is_some_and(|j| j.life == Life::Running)
                {
                    self.stop_job(&mut st, &id);
                    st.sup.event(at, &id, "stop", "the concierge is off");
                }
                st.sup.concierge.on = false;
                Self::drop_digests(&mut st, &id);
                self.concierge_event(&mut st, &id, "off", "the concierge is off", None);
                stopped = Some(id);
            }
            "answer" => {
                let answer = Answer::parse(args.req_str("answer")?)?;
                let mut policy = st.sup.concierge.policy(start);
                policy.answer = answer;
                st.sup.concierge.policy = Some(policy);
                let id = st.sup.concierge.job.clone().unwrap_or_default();
                let text = format!("answer: {}", args.req_str("answer")?);
                self.concierge_event(&mut st, &id, "policy", &text, None);
            }
            "act" => {
                let act = match args.get("act") {
                    Some(Value::Bool(b)) => *b,
                    _ => return Err(Refusal::bad("`act` is true or false")),
                };
                let mut policy = st.sup.concierge.policy(start);
                policy.act = act;
                st.sup.concierge.policy = Some(policy);
                let id = st.sup.concierge.job.clone().unwrap_or_default();
                self.concierge_event(&mut st, &id, "policy", &format!("act: {act}"), None);
            }
            "undo" => return self.concierge_undo(&mut st),
            other => {
                return Err(Refusal::bad(format!(
                    "action {other:?} is not on, off, status, answer, act or undo"
                )))
            }
        }
        st.sup.concierge_changed = true;
        let jobs: Vec<&str> = stopped.iter().map(String::as_str).collect();
        if let Err(e) = self.persist(&mut st, &jobs, &[], None) {
            match stopped {
                // Its process is stopped already: what says so is written at the next tick.
                Some(id) => {
                    st.dirty.insert(id);
                }
                None => {
                    st.sup.restore(feed);
                    st.sup.concierge = before;
                }
            }
            return Err(e);
        }
        if let Some(id) = st.sup.concierge.job.clone() {
            self.push_row(&st, &id);
        }
        Ok(self.concierge_status(&st))
    }

    /// Takes the concierge's digests that were not acked off job `id`'s queue (it is off, or another job
    /// is the concierge now): the next digest gives the picture afresh.
    fn drop_digests(st: &mut State, id: &str) {
        let digest = |p: &crate::proto::supervisor::Pending| {
            p.item.as_ref().is_some_and(|i| i.kind == ItemKind::Digest)
        };
        if let Some(job) = st.sup.jobs.get_mut(id) {
            if job.pending.iter().any(digest) {
                job.pending.retain(|p| !digest(p));
                st.dirty.insert(id.to_string());
            }
        }
        st.sup.concierge.in_flight = None;
    }

    /// A `concierge` feed event about job `id` (`why` says what), by the concierge when `who` is given.
    fn concierge_event(&self, st: &mut State, id: &str, why: &str, text: &str, who: Option<&From>) {
        st.sup.event_by(now(), id, "concierge", text, who);
        if let Some(e) = st.sup.events.back_mut() {
            e.why = Some(why.to_string());
        }
    }

    /// `concierge {action: "on", launch?}`: the job it had started again, or, with a `launch` (or none
    /// kept), a new job of `launch.profile` (else `[roost] concierge`).
    fn concierge_on(&self, st: &mut State, args: &Map<String, Value>) -> Result<Value, Refusal> {
        let launch = match args.get("launch") {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => Some(m.clone()),
            Some(_) => return Err(Refusal::bad("`launch` is {profile, task?}")),
        };
        let current = st
            .sup
            .concierge
            .job
            .clone()
            .filter(|j| st.sup.jobs.contains_key(j));
        let before = st.sup.concierge.clone();
        if let (None, Some(id)) = (&launch, &current) {
            if !(st.sup.concierge.on && st.sup.holds(id)) {
                // Ended, stopped, or running on after reporting `failed`: started again.
                if !st.sup.holds(id) {
                    self.lifecycle_locked(st, Lifecycle::Respawn, id)?;
                }
                st.sup.concierge.on = true;
                st.sup.concierge.woken = true;
                self.concierge_event(st, id, "on", "the concierge is on", None);
                st.sup.concierge_changed = true;
                if let Err(e) = self.persist(st, &[id], &[], None) {
                    st.sup.concierge = before;
                    return Err(e);
                }
                self.push_row(st, id);
            }
            return Ok(self.concierge_status(st));
        }
        let launch = match launch {
            Some(l) => l,
            None => {
                let Some(profile) = self.config.concierge.launch.clone() else {
                    return Err(Refusal::bad(
                        "no concierge to start: name its profile (`agentwire concierge on --profile NAME`; `agentwire jobs profiles` lists them), or set [roost] concierge in the config",
                    ));
                };
                let mut m = Map::new();
                m.insert("profile".into(), json!(profile));
                m
            }
        };
        let profile = launch.req_str("profile")?;
        let task = launch.opt_str("task")?.unwrap_or(CONCIERGE_TASK);
        let mut dispatch = Map::new();
        dispatch.insert("profile".into(), json!(profile));
        dispatch.insert("task".into(), json!(task));
        let started = self.dispatch_locked(st, &dispatch, None)?;
        let id = started["id"].as_str().unwrap_or_default().to_string();
        // The job it had stops and gives up the role.
        if let Some(old) = current {
            if st
                .sup
                .jobs
                .get(&old)
                .is_some_and(|j| j.life == Life::Running)
            {
                self.stop_job(st, &old);
                st.sup
                    .event(now(), &old, "stop", "a new concierge took over");
            }
            Self::drop_digests(st, &old);
            if let Some(j) = st.sup.jobs.get_mut(&old) {
                // Its name is the concierge's, which no other row keeps.
                j.role = None;
                j.name = format!("{}-{}", j.profile, &j.id[..j.id.len().min(6)]);
                j.renamed = false;
            }
            st.dirty.insert(old);
        }
        if let Some(j) = st.sup.jobs.get_mut(&id) {
            j.name = CONCIERGE_NAME.to_string();
            j.role = Some(ROLE.to_string());
            // The name it reports does not change the row.
            j.renamed = true;
        }
        let c = &mut st.sup.concierge;
        c.job = Some(id.clone());
        c.on = true;
        c.in_flight = None;
        c.suggestions.clear();
        c.last_answer = None;
        // Its first digest gives it the fleet as it stands.
        c.woken = true;
        self.concierge_event(st, &id, "on", "the concierge is on", None);
        st.sup.concierge_changed = true;
        // The job is made already: were this write to fail, it is written at the next tick.
        self.mark_written_later(st, &id);
        self.push_row(st, &id);
        Ok(self.concierge_status(st))
    }

    /// `concierge {action: "undo"}`: the last answer it gave for the person is withdrawn: its session is
    /// told, steered when it takes steering, to disregard it.
    fn concierge_undo(&self, st: &mut State) -> Result<Value, Refusal> {
        let Some(last) = st.sup.concierge.last_answer.clone() else {
            return Err(Refusal::bad(
                "the concierge has given no answer to undo since it was last undone",
            ));
        };
        let gone = match st.sup.jobs.get(&last.id) {
            None => Some("is gone"),
            Some(j) if j.life != Life::Running => Some("has ended"),
            Some(_) => None,
        };
        if let Some(why) = gone {
            // Nothing is left to steer: the answer is not undone, and no longer the one to undo.
            st.sup.concierge.last_answer = None;
            st.sup.concierge_changed = true;
            return Err(Refusal::bad(format!(
                "the session it answered ({}) {why}: there is nothing to withdraw",
                last.id
            )));
        }
        let text = format!(
            "The concierge answered for the user with {:?}; the user withdrew that answer. Disregard it, \
             and wait for the user's own answer.",
            last.text
        );
        let steer = st
            .sup
            .jobs
            .get(&last.id)
            .is_some_and(|j| j.capabilities.iter().any(|c| c == "steer"));
        let mode = steer.then_some(ReplyMode::Steer);
        self.reply_locked(st, &last.id, &text, mode, None, None)?;
        st.sup.concierge.last_answer = None;
        let concierge = st.sup.concierge.job.clone().unwrap_or_default();
        let note = format!("undid #{} to {}", last.seq, last.id);
        self.concierge_event(st, &concierge, "undo", &note, None);
        st.sup.concierge_changed = true;
        self.mark_written_later(st, &last.id);
        Ok(self.concierge_status(st))
    }

    /// `concierge-ask {text}`: the hub's reply to the concierge.
    pub(super) fn concierge_ask(&self, args: &Map<String, Value>) -> Result<Value, Refusal> {
        let text = args.req_str("text")?;
        let request_id = args.opt_str("requestId")?;
        let mut st = self.lock();
        let id = match (&st.sup.concierge.job, st.sup.concierge.on) {
            (Some(id), true) if st.sup.jobs.contains_key(id) => id.clone(),
            _ => {
                return Err(Refusal::bad(
                    "the concierge is off: turn it on first (concierge {action: \"on\"})",
                ))
            }
        };
        self.reply_locked(&mut st, &id, text, None, request_id, None)
    }

    /// The concierge's job, when connection `conn` is its own; else `unsupported`.
    fn concierge_only(st: &State, conn: u64, op: &str) -> Result<String, Refusal> {
        Self::concierge_conn(st, conn).ok_or_else(|| {
            Refusal::new(
                ErrorCode::Unsupported,
                format!("`{op}` is the concierge's, on its own connection after its report"),
            )
        })
    }

    /// The concierge's own ops on its connection.
    pub(super) fn concierge_own(
        &self,
        conn: u64,
        own: ConciergeOwn,
        args: &Map<String, Value>,
    ) -> Result<Value, Refusal> {
        let mut st = self.lock();
        let me = Self::concierge_only(&st, conn, Op::ConciergeOwn(own).as_str())?;
        let who = concierge_from(&me);
        let start = self.config.concierge.policy;
        match own {
            ConciergeOwn::Policy => Ok(json!({ "policy": st.sup.concierge.policy(start) })),
            ConciergeOwn::Say => {
                let kind = args.req_str("kind")?;
                if !matches!(kind, "info" | "need" | "answer") {
                    return Err(Refusal::bad(format!(
                        "kind {kind:?} is not info, need or answer"
                    )));
                }
                let text = args.req_str("text")?;
                concierge::check_said(text, None)?;
                let undo = st.sup.undo_point(&me);
                self.concierge_event(&mut st, &me, kind, text, Some(&who));
                let seq = st.sup.next_event;
                if let Err(e) = self.persist(&mut st, &[], &[], None) {
                    st.sup.restore(undo);
                    return Err(e);
                }
                let mut f = Map::new();
                f.insert("status".into(), self.concierge_status(&st));
                f.insert(
                    "said".into(),
                    json!({ "kind": kind, "text": text, "at": now(), "seq": seq }),
                );
                self.push_all(&st, event_line("concierge", f));
                Ok(json!({ "seq": seq }))
            }
            ConciergeOwn::Suggest => {
                let text = args.req_str("text")?;
                let why = args.opt_str("why")?;
                concierge::check_said(text, why)?;
                let id = Self::target(&st, args.req_str("id")?)?;
                let job = st.sup.job(&id)?;
                if job.row_state() != "blocked" {
                    return Err(Refusal::bad(format!(
                        "{} does not wait for an answer (it is {})",
                        job.name,
                        job.row_state()
                    )));
                }
                let name = job.name.clone();
                let before = st.sup.concierge.clone();
                let feed = st.sup.undo_point("");
                st.sup.concierge.suggestions.insert(
                    id.clone(),
                    concierge::Suggestion {
                        text: text.to_string(),
                        why: why.map(str::to_string),
                        at: now(),
                    },
                );
                st.sup.concierge_changed = true;
                self.concierge_event(
                    &mut st,
                    &id,
                    "suggest",
                    &format!("for {name}: {text}"),
                    Some(&who),
                );
                if let Err(e) = self.persist(&mut st, &[], &[], None) {
                    st.sup.restore(feed);
                    st.sup.concierge = before;
                    return Err(e);
                }
                self.push_row(&st, &id);
                Ok(json!({ "id": id, "suggested": st.sup.concierge.suggestions.get(&id) }))
            }
            ConciergeOwn::Reply => {
                let text = args.req_str("text")?;
                let why = args.opt_str("why")?;
                concierge::check_said(text, why)?;
                if text.trim_start().starts_with('/') {
                    // A command (`/stop` stops the session) is the person's, and `act`'s.
                    return Err(Refusal::bad(
                        "an answer starting with / is a command: the concierge answers with text",
                    ));
                }
                let id = Self::target(&st, args.req_str("id")?)?;
                if st.sup.concierge.policy(start).answer == Answer::Never {
                    return Err(Refusal::new(
                        ErrorCode::Policy,
                        "the policy is answer: never; suggest the answer instead",
                    ));
                }
                let job = st.sup.job(&id)?;
                let report = job.report.as_ref();
                let asks = job.row_state() == "blocked"
                    && report.is_some_and(|r| {
                        r.question.is_some() || r.waiting_for.as_deref() == Some("question")
                    });
                if !asks {
                    return Err(Refusal::bad(format!(
                        "{} does not wait for an answer to a question (it is {})",
                        job.name,
                        job.row_state()
                    )));
                }
                let choices = report.map(|r| r.choices.clone()).unwrap_or_default();
                st.sup.concierge.may_answer(start, &choices, text)?;
                let answer = self.reply_locked(&mut st, &id, text, None, None, Some(&who))?;
                let seq = answer["seq"].as_u64().unwrap_or_default();
                st.sup.concierge.answered(&id, seq, text, now());
                st.sup.concierge_changed = true;
                if let Err(e) = self.persist(&mut st, &[], &[], None) {
                    // The reply itself is saved: only the record of it waits for the next write.
                    tracing::warn!(error = %e, "could not write the concierge's record; trying again at the next tick");
                }
                self.push_row(&st, &id);
                Ok(answer)
            }
            ConciergeOwn::Act => {
                if !st.sup.concierge.policy(start).act {
                    return Err(Refusal::new(
                        ErrorCode::Policy,
                        "the policy does not let the concierge act (act: false)",
                    ));
                }
                let before = st.sup.next_event;
                let answer = match args.req_str("what")? {
                    what @ ("stop" | "respawn") => {
                        let id = Self::target(&st, args.req_str("id")?)?;
                        if id == me {
                            return Err(Refusal::bad(format!(
                                "the concierge does not {what} itself"
                            )));
                        }
                        let what = match what {
                            "stop" => Lifecycle::Stop,
                            _ => Lifecycle::Respawn,
                        };
                        self.lifecycle_locked(&mut st, what, &id)?;
                        json!({ "id": id })
                    }
                    "dispatch" => {
                        let launch = match args.get("launch") {
                            Some(Value::Object(m)) => m.clone(),
                            _ => return Err(Refusal::bad("`launch` is {profile, task?, name?}")),
                        };
                        self.dispatch_locked(&mut st, &launch, None)?
                    }
                    other => {
                        return Err(Refusal::bad(format!(
                            "what {other:?} is not stop, respawn or dispatch"
                        )))
                    }
                };
                st.sup.attribute_since(before, &who);
                // The act is durable already; its events are written again, now that they say who.
                st.written_event = st.written_event.min(before);
                if let Err(e) = self.persist(&mut st, &[], &[], None) {
                    tracing::warn!(error = %e, "could not write who acted; trying again at the next tick");
                }
                Ok(answer)
            }
        }
    }

    /// `concierge-order {action, ...}`: the hub's connection as the user (`controller`), the concierge's
    /// as itself; a session's is refused.
    pub(super) fn concierge_order(
        &self,
        conn: u64,
        controller: bool,
        args: &Map<String, Value>,
    ) -> Result<Value, Refusal> {
        let action = args.req_str("action")?;
        let mut st = self.lock();
        let (by, who) = match Self::concierge_conn(&st, conn) {
            Some(me) => (By::Concierge, Some(concierge_from(&me))),
            None if controller => (By::User, None),
            None => {
                return Err(Refusal::new(
                    ErrorCode::Unsupported,
                    "standing orders are the hub's and the concierge's",
                ))
            }
        };
        let at = self.config.calendar.now();
        let zone = &self.config.calendar.zone;
        let about = st.sup.concierge.job.clone().unwrap_or_default();
        let before = st.sup.concierge.clone();
        let feed = st.sup.undo_point("");
        let (order, why, text) = match action {
            "list" => return Ok(json!({ "orders": st.sup.concierge.orders })),
            "add" => {
                let text = args.req_str("text")?;
                let when = args.opt_str("when")?;
                let o = st
                    .sup
                    .concierge
                    .add_order(text, when, by, at, zone)?
                    .clone();
                let t = format!("#{} {}", o.id, o.text);
                (Some(o), "order-kept", t)
            }
            "rm" => {
                let id = crate::proto::wire::numbered_id(
                    args.get("id").unwrap_or(&Value::Null),
                    "an order id",
                )?;
                let o = st.sup.concierge.rm_order(id, by)?;
                let t = format!("#{} {}", o.id, o.text);
                (None, "order-dropped", t)
            }
            "applied" => {
                if by != By::Concierge {
                    return Err(Refusal::new(
                        ErrorCode::Unsupported,
                        "an order is marked applied by the concierge",
                    ));
                }
                let id = crate::proto::wire::numbered_id(
                    args.get("id").unwrap_or(&Value::Null),
                    "an order id",
                )?;
                let what = args.opt_str("text")?;
                if let Some(w) = what {
                    concierge::check_said(w, None)?;
                }
                let o = st.sup.concierge.applied(id, at)?.clone();
                let t = format!("#{} {}", o.id, what.unwrap_or(&o.text));
                (Some(o), "order", t)
            }
            other => {
                return Err(Refusal::bad(format!(
                    "action {other:?} is not add, rm, list or applied"
                )))
            }
        };
        self.concierge_event(&mut st, &about, why, &text, who.as_ref());
        if by == By::User {
            if let Some(e) = st.sup.events.back_mut() {
                e.who = Some("user".into());
            }
        }
        st.sup.concierge_changed = true;
        if let Err(e) = self.persist(&mut st, &[], &[], None) {
            st.sup.restore(feed);
            st.sup.concierge = before;
            return Err(e);
        }
        let mut answer = json!({ "orders": st.sup.concierge.orders });
        if let Some(o) = order {
            answer["order"] = json!(o);
        }
        Ok(answer)
    }

    /// At each tick: the concierge's digest, when one is called for and may go.
    pub(super) fn concierge_tick(&self, st: &mut State) {
        let c = &st.sup.concierge;
        let Some(me) = c.job.clone().filter(|_| c.on) else {
            return;
        };
        if !st.sup.holds(&me) {
            return;
        }
        let now = self.config.calendar.now();
        // The digest in flight reached the concierge once it is acked.
        if let Some(f) = &st.sup.concierge.in_flight {
            let waiting = st.sup.jobs[&me].pending.iter().any(|p| p.seq == f.seq);
            if !waiting {
                st.sup.concierge.reached(now, &self.config.calendar.zone);
                st.sup.concierge_changed = true;
            }
        }
        let digested = st.sup.concierge.digested;
        if !st.sup.concierge.woken
            && st
                .sup
                .events
                .iter()
                .any(|e| e.seq > digested && concierge::wakes(e, &me))
        {
            st.sup.concierge.woken = true;
            st.sup.concierge_changed = true;
        }
        let Some(why) = st.sup.concierge.digest_due(now) else {
            return;
        };
        let due = match why {
            DigestWhy::Order => st.sup.concierge.due(now),
            DigestWhy::Events => Vec::new(),
        };
        let text = self.digest_text(st, &me, why, now, &due);
        let item = PeerItem {
            kind: ItemKind::Digest,
            from: From {
                id: String::new(),
                name: "roost".into(),
            },
            relation: Relation::Peer,
        };
        let takes_items = st.sup.jobs[&me]
            .report
            .as_ref()
            .is_some_and(|r| r.agent_items);
        let undo = st.sup.undo_point(&me);
        let before = st.sup.concierge.clone();
        let seq = match st.sup.queue_item(&me, item, &text, takes_items, now) {
            Ok(seq) => seq,
            Err(e) if e.code == ErrorCode::Full => {
                // Its queue is full: it is behind, and a later tick tries again.
                tracing::debug!(error = %e, "a digest waits: the concierge's queue is full");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "a digest could not be queued for the concierge");
                return;
            }
        };
        let covered = st.sup.next_event;
        st.sup.concierge.digest_sent(seq, due, covered, now);
        st.sup.concierge_changed = true;
        // Durable before it goes: its seq is never handed out twice, whatever happens next.
        if let Err(e) = self.persist(st, &[&me], &[], None) {
            tracing::warn!(error = %e, "could not write a digest; trying again at the next tick");
            st.sup.restore(undo);
            st.sup.concierge = before;
            return;
        }
        if let Some(c) = st.job_conn.get(&me) {
            if let (Some(o), Some(p)) = (st.outboxes.get(c), st.sup.jobs[&me].pending.back()) {
                o.send(deliver_line(&me, p));
            }
        }
        if self.typed_to(&st.sup.jobs[&me].profile) {
            self.typing.notify_one();
        }
    }

    /// The text of a digest for the concierge `me`.
    fn digest_text(&self, st: &State, me: &str, why: DigestWhy, now: u64, due: &[u64]) -> String {
        let c = &st.sup.concierge;
        let events: Vec<_> = st
            .sup
            .events
            .iter()
            .filter(|e| e.seq > c.digested)
            // What concerns itself it knows, but for what others sent it.
            .filter(|e| e.id != me || matches!(e.what.as_str(), "message" | "report"))
            .collect();
        let mut fleet: Vec<FleetLine> = st
            .sup
            .jobs
            .values()
            .filter(|j| j.id != me)
            .map(|j| {
                let r = j.report.as_ref();
                let waits_for = (j.row_state() == "blocked").then(|| {
                    let what = r
                        .and_then(|r| r.question.clone().or_else(|| r.waiting_for.clone()))
                        .unwrap_or_else(|| "the user".into());
                    match r.map(|r| r.choices.as_slice()) {
                        Some(ch) if !ch.is_empty() => format!("{what} [{}]", ch.join(", ")),
                        _ => what,
                    }
                });
                FleetLine {
                    id: j.id.clone(),
                    name: j.name.clone(),
                    state: j.row_state().to_string(),
                    waits_for,
                    suggested: c.suggestions.get(&j.id).map(|s| s.text.clone()),
                }
            })
            .collect();
        // Those that wait first, then the live ones, then the rest; by name within.
        fleet.sort_by_key(|f| {
            let rank = match f.state.as_str() {
                "blocked" => 0,
                "working" | "starting" => 1,
                _ => 2,
            };
            (rank, f.name.clone())
        });
        concierge::digest(why, now, &events, &c.orders, due, &fleet)
    }
}
