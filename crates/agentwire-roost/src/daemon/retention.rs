//! Retention of jobs: a job idle for longer than the daemon's retention (`[journal] retention_days` in
//! agentwire) is removed with its dir, as `rm` does, when nobody is waiting on it: one that has ended
//! (stopped or exited), or one that serves turns for agentwire (a job dispatched for a conversation by
//! the roost-backed agent, or a hosted profile's job), whose turns the journal forgets after the same
//! time. A job of a person's profile whose process still runs is kept however long it idles.

use super::state::{now, Shared};
use crate::proto::supervisor::{Job, Life};
use std::time::{Duration, Instant};

/// How often idle jobs are looked for at most: retention is counted in days, so a minute late is nothing,
/// and a look walks every job. A shorter retention is looked at four times over.
pub const RETENTION_CHECK_EVERY: Duration = Duration::from_secs(60);
/// The most jobs one look removes: each is a write of the store under the daemon's lock; more wait for
/// the next look.
pub const RETENTION_BATCH: usize = 100;

impl Shared {
    /// Whether `job`, idle past the retention, goes.
    fn expires(&self, job: &Job) -> bool {
        // The concierge's job is the person's choice, kept however long it idles (a quiet fleet).
        if job.role.is_some() {
            return false;
        }
        job.life != Life::Running
            || job.conversation.is_some()
            || self.config.hosted.get(&job.profile).is_some()
    }

    /// Removes jobs idle past the retention, at most [`RETENTION_BATCH`], once every
    /// [`RETENTION_CHECK_EVERY`] (or quarter of the retention). Called from the housekeeping tick.
    pub(super) fn expire_idle_jobs(&self) {
        let Some(retention) = self.config.retention else {
            return;
        };
        let mut st = self.lock();
        if st
            .retention_checked
            .is_some_and(|at| at.elapsed() < (retention / 4).min(RETENTION_CHECK_EVERY))
        {
            return;
        }
        st.retention_checked = Some(Instant::now());
        let before = now().saturating_sub(retention.as_secs());
        let idle: Vec<String> = st
            .sup
            .idle_since(before)
            .into_iter()
            .filter(|j| self.expires(j))
            .take(RETENTION_BATCH)
            .map(|j| j.id.clone())
            .collect();
        let days = retention.as_secs_f64() / 86_400.0;
        for id in idle {
            let why = format!("removed after {days} days idle (retention)");
            match self.remove_job(&mut st, &id, &why) {
                Ok(()) => {
                    tracing::info!(job = %id, "removed a job idle past the retention");
                    self.push_row(&st, &id);
                }
                Err(e) => {
                    tracing::warn!(job = %id, error = %e.message, "could not remove an idle job; trying again later");
                    break;
                }
            }
        }
    }

    /// At start: jobs from a store written before jobs kept when they last changed count as changed now,
    /// so they get a whole retention from the first daemon that counts it.
    pub(super) fn date_undated_jobs(&self) {
        let mut st = self.lock();
        let at = now();
        let undated: Vec<String> = st
            .sup
            .jobs
            .values()
            .filter(|j| j.touched == 0)
            .map(|j| j.id.clone())
            .collect();
        for id in undated {
            if let Some(j) = st.sup.jobs.get_mut(&id) {
                j.touched = at;
            }
            st.dirty.insert(id);
        }
    }
}
