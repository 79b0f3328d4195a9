//! Stopped jobs' processes until they are gone: SIGTERM at the stop, SIGKILL to the process group once
//! the grace has passed. Each escalation whose process identity is known is journaled as an
//! [`Escalation`], so that the next daemon re-arms it ([`rearm`]) and this one forgets it once it is done
//! ([`sweep`]). The decisions are [`Escalation`]'s; this looks at the processes and sends the signals.

use super::process;
use crate::proto::escalation::{self, Escalation, Moot, Rearm};
use std::process::Child;

/// A stopped job's process, until it is gone.
pub(super) struct Stopping {
    /// The job it was.
    job: String,
    /// Its pid (the leader of its process group).
    pid: u32,
    /// Its identity, when known: a process that is not the daemon's child is only signalled while it is
    /// still that process, and only one with an identity is journaled (after a restart a bare pid could
    /// name anything).
    identity: Option<String>,
    /// The daemon's handle, to reap it; none for a job re-adopted after a restart (not the daemon's child).
    child: Option<Child>,
    /// When SIGKILL is due, in unix milliseconds.
    deadline_ms: u64,
    /// Whether SIGKILL was sent.
    killed: bool,
}

impl Stopping {
    /// A process sent SIGTERM at `now_ms`.
    pub(super) fn new(
        job: &str,
        pid: u32,
        identity: Option<String>,
        child: Option<Child>,
        now_ms: u64,
    ) -> Stopping {
        Stopping {
            job: job.to_string(),
            pid,
            identity,
            child,
            deadline_ms: escalation::deadline(now_ms),
            killed: false,
        }
    }

    /// Its journal record (none without an identity).
    pub(super) fn record(&self) -> Option<Escalation> {
        Some(Escalation {
            job: self.job.clone(),
            pid: self.pid,
            identity: self.identity.clone()?,
            deadline_ms: self.deadline_ms,
        })
    }

    /// Whether it is gone: the leader (reaped, when it was the daemon's child) and every other process of
    /// its group, which may ignore SIGTERM after the leader has exited.
    fn gone(&mut self) -> bool {
        let leader_gone = match &mut self.child {
            Some(c) => !matches!(c.try_wait(), Ok(None)),
            None => !process::job_alive(self.pid, self.identity.as_deref()),
        };
        leader_gone && !process::group_alive(self.pid)
    }
}

/// Re-arms the escalations a daemon before this one journaled, as of `now_ms`: those whose process is
/// still there are kept (and killed now when already due); the others are returned, to forget.
pub(super) fn rearm(records: Vec<Escalation>, now_ms: u64) -> (Vec<Stopping>, Vec<Escalation>) {
    let mut kept = Vec::new();
    let mut moot = Vec::new();
    for r in records {
        let seen = process::alive(r.pid)
            .then(|| process::identity(r.pid))
            .flatten();
        let decision = r.rearm(seen.as_deref(), now_ms);
        let killed = match decision {
            Rearm::Drop(why) => {
                let why = match why {
                    Moot::Gone => "it is gone",
                    Moot::Reused => "its pid is another process's now",
                };
                tracing::info!(job = %r.job, pid = r.pid, "a stop's SIGKILL is moot: {why}");
                moot.push(r);
                continue;
            }
            Rearm::Kill => {
                tracing::warn!(job = %r.job, pid = r.pid, "a stopped job outlived its grace while the daemon was down; killing it");
                process::kill(r.pid);
                true
            }
            Rearm::Wait => false,
        };
        kept.push(Stopping {
            job: r.job,
            pid: r.pid,
            identity: Some(r.identity),
            child: None,
            deadline_ms: r.deadline_ms,
            killed,
        });
    }
    (kept, moot)
}

/// One housekeeping pass at `now_ms`: a process still there past its deadline gets SIGKILL; gone ones
/// leave, and their journal records are returned, to forget.
pub(super) fn sweep(stopping: &mut Vec<Stopping>, now_ms: u64) -> Vec<Escalation> {
    let mut done = Vec::new();
    stopping.retain_mut(|p| {
        if p.gone() {
            done.extend(p.record());
            return false;
        }
        if !p.killed && now_ms >= p.deadline_ms {
            tracing::warn!(job = %p.job, pid = p.pid, "a stopped job ignored SIGTERM; killing it");
            process::kill(p.pid);
            p.killed = true;
        }
        true
    });
    done
}
