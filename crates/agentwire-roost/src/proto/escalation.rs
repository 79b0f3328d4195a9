//! Stop escalations: a stopped job's process group gets SIGTERM, then SIGKILL once [`STOP_GRACE`] has
//! passed if it is still there. Each pending escalation is journaled (see [`crate::daemon::store`]) with the
//! process's identity and its deadline, so that a daemon started inside the grace (after a crash or a
//! shutdown) still kills what the one before it stopped. Pure: the daemon looks at the process and passes
//! the time in; [`Escalation::rearm`] decides.

use std::time::Duration;

/// How long a stopped job's process group has after SIGTERM before it is sent SIGKILL: an agent that saves
/// its state on SIGTERM gets the time to, and one that ignores it cannot outlive its stop (or run beside the
/// process a `respawn` starts).
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// When SIGKILL is due for a process sent SIGTERM at `now_ms` (unix milliseconds).
pub fn deadline(now_ms: u64) -> u64 {
    now_ms.saturating_add(STOP_GRACE.as_millis() as u64)
}

/// One pending escalation, as journaled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Escalation {
    /// The job the process was (for the log: the job may be removed meanwhile).
    pub job: String,
    /// The pid of the process group's leader.
    pub pid: u32,
    /// That process's identity (boot and start time, see [`crate::daemon::process::identity`]): after a
    /// restart, the pid is only signalled while it is still this process.
    pub identity: String,
    /// When SIGKILL is due, in unix milliseconds: wall-clock time, the only clock that means the same to
    /// the next daemon (a clock step moves the deadline with it, by no more than the step).
    pub deadline_ms: u64,
}

/// What a daemon starting up does with a journaled escalation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rearm {
    /// Its process is still there past its deadline: SIGKILL its group now.
    Kill,
    /// Its process is still there inside its grace: keep it, SIGKILL at the deadline.
    Wait,
    /// Nothing to do: forget the record and signal nothing.
    Drop(Moot),
}

/// Why a journaled escalation is moot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moot {
    /// No live process has its pid: it ended while no daemon watched.
    Gone,
    /// Another process has its pid now (reused, or another boot): signalling it would hit a stranger.
    Reused,
}

impl Escalation {
    /// An escalation for a process sent SIGTERM at `now_ms`.
    pub fn new(job: impl Into<String>, pid: u32, identity: impl Into<String>, now_ms: u64) -> Self {
        Escalation {
            job: job.into(),
            pid,
            identity: identity.into(),
            deadline_ms: deadline(now_ms),
        }
    }

    /// Whether SIGKILL is due at `now_ms`.
    pub fn due(&self, now_ms: u64) -> bool {
        now_ms >= self.deadline_ms
    }

    /// The decision for a daemon starting up at `now_ms`. `seen` is the identity of the live process that
    /// has the pid now (`None`: no live process has it; a zombie is not live).
    pub fn rearm(&self, seen: Option<&str>, now_ms: u64) -> Rearm {
        match seen {
            None => Rearm::Drop(Moot::Gone),
            Some(id) if id != self.identity => Rearm::Drop(Moot::Reused),
            Some(_) if self.due(now_ms) => Rearm::Kill,
            Some(_) => Rearm::Wait,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE_MS: u64 = STOP_GRACE.as_millis() as u64;

    fn stopped_at(now_ms: u64) -> Escalation {
        Escalation::new("j1", 4242, "boot-a:1234", now_ms)
    }

    #[test]
    fn the_same_process_is_re_armed_inside_its_grace_and_killed_at_or_after_its_deadline() {
        let e = stopped_at(10_000);
        assert_eq!(e.deadline_ms, 10_000 + GRACE_MS);
        assert_eq!(e.rearm(Some("boot-a:1234"), 10_001), Rearm::Wait);
        assert_eq!(
            e.rearm(Some("boot-a:1234"), 10_000 + GRACE_MS - 1),
            Rearm::Wait
        );
        assert_eq!(
            e.rearm(Some("boot-a:1234"), 10_000 + GRACE_MS),
            Rearm::Kill,
            "at the deadline"
        );
        assert_eq!(
            e.rearm(Some("boot-a:1234"), 10_000 + 100 * GRACE_MS),
            Rearm::Kill,
            "a daemon that was down for long kills at once"
        );
        assert!(!e.due(10_000 + GRACE_MS - 1) && e.due(10_000 + GRACE_MS));
    }

    #[test]
    fn a_process_gone_or_a_pid_now_another_process_is_dropped_whatever_the_time() {
        let e = stopped_at(10_000);
        for now in [10_001, 10_000 + GRACE_MS, 10_000 + 100 * GRACE_MS] {
            assert_eq!(e.rearm(None, now), Rearm::Drop(Moot::Gone));
            // Same pid, another start time (reused), or another boot.
            assert_eq!(e.rearm(Some("boot-a:9999"), now), Rearm::Drop(Moot::Reused));
            assert_eq!(e.rearm(Some("boot-b:1234"), now), Rearm::Drop(Moot::Reused));
        }
    }

    #[test]
    fn a_deadline_never_overflows() {
        assert_eq!(stopped_at(u64::MAX).deadline_ms, u64::MAX);
    }
}
