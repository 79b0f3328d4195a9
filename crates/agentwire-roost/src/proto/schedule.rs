//! Schedules (the hub's `schedules` and `schedule-*` ops): jobs started on a clock, with no concierge. A
//! schedule names a profile, a task and a `when` of the schedule vocabulary ([`crate::proto::when`]); when it
//! falls due the daemon dispatches a job of the profile with the task (a `schedule` feed event). A run
//! missed while the daemon was down runs once at start, not once per missed time. Pure: the daemon passes
//! the time in (seconds) and keeps the list durable.

use crate::proto::when::{When, Zone};
use crate::proto::wire::{ErrorCode, Refusal};
use serde::{Deserialize, Serialize};

/// Schedules kept at once; one more is refused `full`. Each is a job started on a clock: more than this
/// is a cron table, not a person's fleet.
pub const MAX_SCHEDULES: usize = 100;
/// The longest task a schedule keeps: a prompt of a few pages. The schedules are written whole on each
/// run, so 100 of them stay a few megabytes at most.
pub const MAX_TASK_BYTES: usize = 64 * 1024;

/// One schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Schedule {
    /// Its id: 1, 2, ... never reused.
    pub id: u64,
    /// Its name (the jobs it starts go by it); the profile's when none was given.
    pub name: String,
    /// The profile its jobs run.
    pub profile: String,
    /// The task each job is given.
    pub task: String,
    /// When it falls due.
    pub when: When,
    /// Whether it is paused (it does not run; its `nextAt` is worked out again when it is resumed).
    pub paused: bool,
    /// When it was added.
    pub at: u64,
    /// When it last ran.
    pub last_at: Option<u64>,
    /// When it runs next.
    pub next_at: Option<u64>,
    /// How often it ran.
    pub runs: u64,
    /// The job its last run started.
    pub last_job: Option<String>,
}

/// The schedules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Schedules {
    /// Oldest first.
    pub list: Vec<Schedule>,
    /// The last id given.
    pub last_id: u64,
}

/// A schedule id: a positive integer, or a string of digits.
pub fn schedule_id(v: &serde_json::Value) -> Result<u64, Refusal> {
    crate::proto::wire::numbered_id(v, "a schedule id")
}

impl Schedules {
    /// Adds a schedule of `profile` running `task` on `when` (checked here; the profile by the caller).
    pub fn add(
        &mut self,
        profile: &str,
        task: &str,
        when: &str,
        name: Option<&str>,
        at: u64,
        zone: &Zone,
    ) -> Result<&Schedule, Refusal> {
        if task.trim().is_empty() {
            return Err(Refusal::bad("`task` is empty"));
        }
        if task.len() > MAX_TASK_BYTES {
            return Err(Refusal::bad(format!(
                "`task` is at most {MAX_TASK_BYTES} bytes"
            )));
        }
        let when = When::parse(when).map_err(|e| Refusal::bad(e.to_string()))?;
        let name = name
            .map(crate::proto::wire::fold_name)
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| profile.to_string());
        if name.chars().count() > crate::proto::report::MAX_NAME_CHARS {
            return Err(Refusal::bad(format!(
                "`name` is at most {} characters",
                crate::proto::report::MAX_NAME_CHARS
            )));
        }
        if name == crate::proto::concierge::CONCIERGE_NAME {
            return Err(Refusal::bad("the name \"concierge\" is the concierge's"));
        }
        if self.list.len() >= MAX_SCHEDULES {
            return Err(Refusal::new(
                ErrorCode::Full,
                format!("{MAX_SCHEDULES} schedules are kept; remove one first"),
            ));
        }
        let next_at = crate::proto::concierge::next_at(&when, at, zone)
            .ok_or_else(|| Refusal::bad(format!("when {when}: it never falls due")))?;
        self.last_id += 1;
        self.list.push(Schedule {
            id: self.last_id,
            name,
            profile: profile.to_string(),
            task: task.to_string(),
            when,
            paused: false,
            at,
            last_at: None,
            next_at: Some(next_at),
            runs: 0,
            last_job: None,
        });
        Ok(&self.list[self.list.len() - 1])
    }

    /// Removes schedule `id`.
    pub fn rm(&mut self, id: u64) -> Result<Schedule, Refusal> {
        let i = self.index(id)?;
        Ok(self.list.remove(i))
    }

    /// Pauses or resumes schedule `id` at `at`: a resumed one runs next at its next time after `at`.
    pub fn pause(
        &mut self,
        id: u64,
        paused: bool,
        at: u64,
        zone: &Zone,
    ) -> Result<&Schedule, Refusal> {
        let i = self.index(id)?;
        let s = &mut self.list[i];
        if s.paused && !paused {
            s.next_at = crate::proto::concierge::next_at(&s.when, at, zone);
        }
        s.paused = paused;
        Ok(s)
    }

    fn index(&self, id: u64) -> Result<usize, Refusal> {
        self.list
            .iter()
            .position(|s| s.id == id)
            .ok_or_else(|| Refusal::new(ErrorCode::NotFound, format!("no schedule #{id}")))
    }

    /// The schedules due at `now` (not paused, `nextAt` come).
    pub fn due(&self, now: u64) -> Vec<u64> {
        self.list
            .iter()
            .filter(|s| !s.paused && s.next_at.is_some_and(|n| n <= now))
            .map(|s| s.id)
            .collect()
    }

    /// Schedule `id` ran at `now`, starting `job` (none when the job could not be dispatched): its next
    /// time is the first after `now`, so a run missed while the daemon was down runs once.
    pub fn ran(&mut self, id: u64, job: Option<String>, now: u64, zone: &Zone) {
        if let Some(s) = self.list.iter_mut().find(|s| s.id == id) {
            s.last_at = Some(now);
            s.runs += 1;
            if job.is_some() {
                s.last_job = job;
            }
            s.next_at = crate::proto::concierge::next_at(&s.when, now, zone);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc() -> Zone {
        Zone::named("UTC").unwrap()
    }

    #[test]
    fn a_schedule_is_checked_and_named() {
        let mut s = Schedules::default();
        let z = utc();
        let e = s.add("p", "t", "every 0m", None, 0, &z).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest);
        assert!(e.message.contains("every 0m"), "{}", e.message);
        assert_eq!(
            s.add("p", " ", "every 5m", None, 0, &z).unwrap_err().code,
            ErrorCode::BadRequest
        );
        assert_eq!(
            s.add("p", "t", "every 5m", Some("concierge"), 0, &z)
                .unwrap_err()
                .code,
            ErrorCode::BadRequest
        );
        let long = "x".repeat(MAX_TASK_BYTES + 1);
        assert_eq!(
            s.add("p", &long, "every 5m", None, 0, &z).unwrap_err().code,
            ErrorCode::BadRequest
        );
        let a = s.add("p", "t", "every 5m", None, 0, &z).unwrap();
        assert_eq!((a.id, a.name.as_str(), a.next_at), (1, "p", Some(300)));
        let b = s
            .add("p", "t", "daily 01:00", Some("nightly"), 0, &z)
            .unwrap();
        assert_eq!(
            (b.id, b.name.as_str(), b.next_at),
            (2, "nightly", Some(3600))
        );
        for n in 2..MAX_SCHEDULES {
            s.add("p", &format!("t{n}"), "every 1h", None, 0, &z)
                .unwrap();
        }
        assert_eq!(
            s.add("p", "t", "every 1h", None, 0, &z).unwrap_err().code,
            ErrorCode::Full
        );
        assert_eq!(s.rm(1).unwrap().id, 1);
        assert_eq!(s.rm(1).unwrap_err().code, ErrorCode::NotFound);
    }

    #[test]
    fn a_missed_run_runs_once_and_a_paused_one_not_at_all() {
        let mut s = Schedules::default();
        let z = utc();
        s.add("p", "t", "every 10m", None, 0, &z).unwrap();
        // The daemon was down for an hour: due once.
        assert_eq!(s.due(3600), vec![1]);
        s.ran(1, Some("j1".into()), 3600, &z);
        assert_eq!(s.due(3600), Vec::<u64>::new());
        assert_eq!(s.list[0].next_at, Some(4200));
        assert_eq!(
            (s.list[0].runs, s.list[0].last_job.as_deref()),
            (1, Some("j1"))
        );
        s.pause(1, true, 3700, &z).unwrap();
        assert_eq!(s.due(9999), Vec::<u64>::new());
        s.pause(1, false, 10_000, &z).unwrap();
        assert_eq!(s.list[0].next_at, Some(10_600), "from when it was resumed");
    }

    #[test]
    fn ids_are_integers_or_digit_strings() {
        assert_eq!(schedule_id(&serde_json::json!(3)).unwrap(), 3);
        assert_eq!(schedule_id(&serde_json::json!("12")).unwrap(), 12);
        for bad in [
            serde_json::json!(0),
            serde_json::json!("x"),
            serde_json::json!(-1),
            serde_json::json!(null),
        ] {
            assert_eq!(schedule_id(&bad).unwrap_err().code, ErrorCode::BadRequest);
        }
    }
}
