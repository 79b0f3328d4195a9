//! The hub's schedule ops: `schedules {}`, `schedule-add {profile, task, when, name?}`, `schedule-rm
//! {id}`, `schedule-pause {id, paused}` ([`crate::proto::schedule`]), and, at each tick, the runs that are due:
//! a job of the schedule's profile dispatched with its task, a `schedule` feed event. Each change is
//! durable before its answer.

use super::state::{Shared, State};
use crate::proto::op::ScheduleOp;
use crate::proto::schedule::schedule_id;
use crate::proto::wire::{Args, ErrorCode, Refusal};
use serde_json::{json, Map, Value};

impl Shared {
    /// `schedules` and `schedule-*`: the hub's.
    pub(super) fn schedule_op(
        &self,
        what: ScheduleOp,
        args: &Map<String, Value>,
    ) -> Result<Value, Refusal> {
        let mut st = self.lock();
        let at = self.config.calendar.now();
        let zone = &self.config.calendar.zone;
        let before = st.sup.schedules.clone();
        let changed = match what {
            ScheduleOp::List => return Ok(json!({ "schedules": st.sup.schedules.list })),
            ScheduleOp::Add => {
                let profile = args.req_str("profile")?;
                if !self.config.profiles.contains_key(profile)
                    && self.config.hosted.get(profile).is_none()
                {
                    return Err(Refusal::new(
                        ErrorCode::NotFound,
                        format!("no profile {profile:?}"),
                    ));
                }
                let task = args.req_str("task")?;
                let when = args.req_str("when")?;
                let name = args.opt_str("name")?;
                st.sup
                    .schedules
                    .add(profile, task, when, name, at, zone)?
                    .clone()
            }
            ScheduleOp::Rm => st.sup.schedules.rm(Self::schedule_arg(args)?)?,
            ScheduleOp::Pause => {
                let paused = match args.get("paused") {
                    Some(Value::Bool(b)) => *b,
                    _ => return Err(Refusal::bad("`paused` is true or false")),
                };
                let id = Self::schedule_arg(args)?;
                st.sup.schedules.pause(id, paused, at, zone)?.clone()
            }
        };
        st.sup.schedules_changed = true;
        if let Err(e) = self.persist(&mut st, &[], &[], None) {
            st.sup.schedules = before;
            return Err(e);
        }
        Ok(json!({ "schedule": changed, "schedules": st.sup.schedules.list }))
    }

    fn schedule_arg(args: &Map<String, Value>) -> Result<u64, Refusal> {
        schedule_id(args.get("id").unwrap_or(&Value::Null))
    }

    /// At each tick: every schedule that is due runs once (a run missed while the daemon was down
    /// included), and moves on to its next time, in the same write as the job it starts: a crash cannot
    /// run it twice. A run whose job could not be written is tried again at the next tick; one whose last
    /// job is still at work (starting, working, or waiting for the person) is skipped: runs do not pile up.
    pub(super) fn run_schedules(&self, st: &mut State) {
        let now = self.config.calendar.now();
        let zone = self.config.calendar.zone;
        for id in st.sup.schedules.due(now) {
            let Some(s) = st.sup.schedules.list.iter().find(|s| s.id == id).cloned() else {
                continue;
            };
            let before = st.sup.schedules.clone();
            st.sup.schedules.ran(id, None, now, &zone);
            st.sup.schedules_changed = true;
            let at = super::state::now();
            // Only a last job at work skips the run: one that reported `done` (or failed) may live on,
            // waiting for a reply (an engine agent's job always does), and its work is over.
            let at_work = |j: &&str| st.sup.jobs.get(*j).is_some_and(|j| j.at_work());
            if let Some(last) = s.last_job.as_deref().filter(at_work) {
                st.sup.event(
                    at,
                    last,
                    "schedule",
                    format!(
                        "#{} {} ({}) skipped: its last job is still at work",
                        s.id, s.name, s.when
                    ),
                );
                continue;
            }
            let mut args = Map::new();
            args.insert("profile".into(), json!(s.profile));
            args.insert("task".into(), json!(s.task));
            args.insert("name".into(), json!(s.name));
            match self.dispatch_locked(st, &args, None) {
                Ok(v) => {
                    let job = v["id"].as_str().unwrap_or_default().to_string();
                    st.sup.event(
                        at,
                        &job,
                        "schedule",
                        format!("#{} {} ({}) ran", s.id, s.name, s.when),
                    );
                    if let Some(x) = st.sup.schedules.list.iter_mut().find(|x| x.id == id) {
                        x.last_job = Some(job);
                    }
                    st.sup.schedules_changed = true;
                }
                Err(e) if e.code == ErrorCode::Busy => {
                    // Not written: due still, and tried again at the next tick.
                    tracing::warn!(schedule = s.id, error = %e, "a schedule's run could not be written; trying again");
                    st.sup.schedules = before;
                    return;
                }
                Err(e) => {
                    tracing::warn!(schedule = s.id, error = %e, "a schedule's run could not start its job");
                    st.sup.event(
                        at,
                        "",
                        "schedule",
                        format!(
                            "#{} {} ({}): could not start: {}",
                            s.id, s.name, s.when, e.message
                        ),
                    );
                }
            }
        }
    }
}
