//! What the daemon does at start and every second, outside any request: re-arms the stop escalations and
//! re-adopts the jobs a daemon before it left, reaps exited children, checks on re-adopted jobs and on
//! stopped processes, reads terminal agents' rows, runs the schedules that are due, sends the concierge
//! its digest, and writes the rows marked dirty.

use super::process;
use super::state::{now, now_ms, Shared};
use super::stopping;
use crate::proto::escalation::Escalation;
use crate::proto::supervisor::Life;

impl Shared {
    /// At start: the stop escalations the daemon before journaled are re-armed (those still due a SIGKILL)
    /// or forgotten (their process is gone, or its pid is another's now).
    pub(super) fn rearm(&self, records: Vec<Escalation>) {
        let (kept, moot) = stopping::rearm(records, now_ms());
        let mut st = self.lock();
        st.stopping.extend(kept);
        st.to_forget.extend(moot);
    }

    /// After a restart: jobs whose process still runs are kept (their agents reconnect); the others
    /// exited while the daemon was away.
    pub(super) fn readopt(&self) {
        let mut st = self.lock();
        let at = now();
        let ids: Vec<String> = st.sup.jobs.keys().cloned().collect();
        let mut hosted = Vec::new();
        for id in ids {
            let job = &st.sup.jobs[&id];
            if job.life == Life::Running && self.config.hosted.get(&job.profile).is_some() {
                // Served in the process, which is new: served again, as a running process is re-adopted.
                hosted.push(id);
                continue;
            }
            let alive = job
                .pid
                .is_some_and(|p| process::job_alive(p, job.pid_identity.as_deref()));
            if let (Life::Running, true, Some(pid)) = (job.life, alive, job.pid) {
                st.job_groups.insert(pid, id.clone());
                continue;
            }
            if job.life == Life::Running && !alive {
                if let Some(j) = st.sup.jobs.get_mut(&id) {
                    j.life = Life::Exited;
                    j.pid = None;
                    j.pid_identity = None;
                }
                st.sup
                    .event(at, &id, "exit", "exited while the daemon was down");
                st.dirty.insert(id);
            }
        }
        st.sup.event(at, "", "restart", "the daemon started");
        for id in hosted {
            self.start_process(&mut st, &id);
        }
    }

    /// Reaps exited children, checks re-adopted jobs, reads terminal agents' rows, and writes dirty rows.
    pub(super) fn housekeeping(&self) {
        let mut st = self.lock();
        let at = now();
        // A group whose processes are all gone is forgotten: its id may be a new process's from now on.
        st.job_groups
            .retain(|group, _| process::group_alive(*group));
        for done in stopping::sweep(&mut st.stopping, now_ms()) {
            // One not journaled yet (its write failed) is simply not written.
            match st.to_journal.iter().position(|e| *e == done) {
                Some(i) => {
                    st.to_journal.remove(i);
                }
                None => st.to_forget.push(done),
            }
        }
        let mut exited = Vec::new();
        for (id, child) in st.children.iter_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                exited.push((id.clone(), status.to_string()));
            }
        }
        for (id, status) in &exited {
            st.children.remove(id);
            if let Some(j) = st.sup.jobs.get_mut(id) {
                if j.life == Life::Running {
                    j.life = Life::Exited;
                    j.pid = None;
                    j.pid_identity = None;
                    st.sup.event(at, id, "exit", status.clone());
                }
            }
            st.dirty.insert(id.clone());
        }
        let adopted: Vec<String> = st
            .sup
            .jobs
            .values()
            .filter(|j| {
                j.life == Life::Running
                    && !st.children.contains_key(&j.id)
                    && !st.hosted_jobs.contains_key(&j.id)
            })
            .filter(|j| {
                !j.pid
                    .is_some_and(|p| process::job_alive(p, j.pid_identity.as_deref()))
            })
            .map(|j| j.id.clone())
            .collect();
        for id in adopted {
            if let Some(j) = st.sup.jobs.get_mut(&id) {
                j.life = Life::Exited;
                j.pid = None;
                j.pid_identity = None;
            }
            st.sup.event(at, &id, "exit", "exited");
            st.dirty.insert(id);
        }
        // Until a job's agent reports (a terminal agent's never does), its terminal is its row: read while
        // it runs, and once more as it ends (its last words are often its result).
        let terminal: Vec<String> = st
            .sup
            .jobs
            .values()
            .filter(|j| j.report.is_none() && (j.life == Life::Running || st.dirty.contains(&j.id)))
            .filter(|j| self.config.profiles.contains_key(&j.profile))
            .map(|j| j.id.clone())
            .collect();
        for id in terminal {
            let line = process::last_line(&self.config.data_dir.join("jobs").join(&id));
            if let Some(j) = st.sup.jobs.get_mut(&id) {
                if j.output != line {
                    j.output = line;
                    st.dirty.insert(id.clone());
                }
            }
        }
        st.sup.expire_watches(super::state::now_ms());
        self.release_departed_peers(&mut st);
        self.run_schedules(&mut st);
        self.concierge_tick(&mut st);
        let dirty: Vec<String> = st.dirty.drain().collect();
        let pending_writes = !st.sup.fired.is_empty()
            || !st.sup.fg_notices.is_empty()
            || st.sup.watches_changed
            || st.sup.board_changed
            || st.sup.concierge_changed
            || st.sup.schedules_changed
            || !st.to_remove.is_empty();
        if !dirty.is_empty()
            || !st.to_journal.is_empty()
            || !st.to_forget.is_empty()
            || pending_writes
        {
            let refs: Vec<&str> = dirty.iter().map(String::as_str).collect();
            if let Err(e) = self.persist(&mut st, &refs, &[], None) {
                tracing::warn!(error = %e, "could not write rows; trying again at the next tick");
                st.dirty.extend(dirty.iter().cloned());
            }
            for id in &dirty {
                self.push_row(&st, id);
            }
        }
        drop(st);
        self.expire_idle_jobs();
    }
}
