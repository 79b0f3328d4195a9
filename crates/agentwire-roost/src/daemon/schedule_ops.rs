//! The hub's schedule ops: `schedules {}`, `schedule-add {profile, task, when, name?}`, `schedule-rm
//! {id}`, `schedule-pause {id, paused}` ([`crate::schedule`]), and, at each tick, the runs that are due:
//! a job of the schedule's profile dispatched with its task, a `schedule` feed event. Each change is
//! durable before its answer.

use super::state::{Shared, State};
use crate::schedule::schedule_id;
use crate::wire::{Args, ErrorCode, Refusal};
use serde_json::{json, Map, Value};

impl Shared {
    /// `schedules` and `schedule-*`: the hub's.
    pub(super) fn schedule_op(
        &self,
        op: &str,
        args: &Map<String, Value>,
    ) -> Result<Value, Refusal> {
        let mut st = self.lock();
        let at = self.config.calendar.now();
        let zone = &self.config.calendar.zone;
        let before = st.sup.schedules.clone();
        let changed = match op {
            "schedules" => return Ok(json!({ "schedules": st.sup.schedules.list })),
            "schedule-add" => {
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
            "schedule-rm" => st.sup.schedules.rm(Self::schedule_arg(args)?)?,
            "schedule-pause" => {
                let paused = match args.get("paused") {
                    Some(Value::Bool(b)) => *b,
                    _ => return Err(Refusal::bad("`paused` is true or false")),
                };
                let id = Self::schedule_arg(args)?;
                st.sup.schedules.pause(id, paused, at, zone)?.clone()
            }
            other => return Err(Refusal::bad(format!("unknown op {other:?}"))),
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
    /// included), and moves on to its next time.
    pub(super) fn run_schedules(&self, st: &mut State) {
        let now = self.config.calendar.now();
        let zone = self.config.calendar.zone;
        for id in st.sup.schedules.due(now) {
            let Some(s) = st.sup.schedules.list.iter().find(|s| s.id == id).cloned() else {
                continue;
            };
            let mut args = Map::new();
            args.insert("profile".into(), json!(s.profile));
            args.insert("task".into(), json!(s.task));
            args.insert("name".into(), json!(s.name));
            let job = match self.dispatch_locked(st, &args, None) {
                Ok(v) => v["id"].as_str().map(str::to_string),
                Err(e) => {
                    tracing::warn!(schedule = s.id, error = %e, "a schedule's run could not start its job");
                    st.sup.event(
                        super::state::now(),
                        "",
                        "schedule",
                        format!(
                            "#{} {} ({}): could not start: {}",
                            s.id, s.name, s.when, e.message
                        ),
                    );
                    None
                }
            };
            if let Some(j) = &job {
                st.sup.event(
                    super::state::now(),
                    j,
                    "schedule",
                    format!("#{} {} ({}) ran", s.id, s.name, s.when),
                );
            }
            st.sup.schedules.ran(id, job, now, &zone);
            st.sup.schedules_changed = true;
        }
    }
}
