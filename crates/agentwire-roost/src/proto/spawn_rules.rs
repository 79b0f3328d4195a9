//! The bounds on `spawn`: a session (a job after its report, or a foreground peer such as a model agent's
//! roost tools) starting a child job. `dispatch` is a controller's, the person's; `spawn` is a session's
//! way to start work of its own, so it is held to what a fleet of agents needs and no more: a rate per
//! session, a number of children at work per session, and a number of spawned jobs running in all. Which
//! profiles a session may start at all is [`spawnable`]. Pure: the daemon passes the time in (seconds)
//! and the counts it has.

use crate::proto::wire::{ErrorCode, Refusal};
use std::collections::{HashMap, VecDeque};

/// Children one session may spawn a minute; one more is refused `rate_limited`. A lead agent fanning a
/// piece of work out starts a handful at once; ten a minute is room for that, and a session in a loop is
/// stopped after ten (the outside probe started 12 in 0.15 s).
pub const SPAWNS_PER_MINUTE: usize = 10;
/// Children of one session at work at once (starting, working or waiting for the person: not done,
/// failed, stopped or exited); one more is refused `full`. Each is a process (or an engine's turns) of
/// the person's; a session needs a few helpers, not a pool.
pub const MAX_CHILDREN_AT_WORK: usize = 8;
/// Spawned jobs whose process (or hosted session) still runs, across the whole fleet, whatever they
/// reported; one more is refused `full`. Children spawn children: without a bound in all, a tree of sessions
/// multiplies the per-session bounds, and a child that reports `done` and idles on (as a hosted session does
/// between turns) would leave the per-session count while it still holds a process and may spawn again. 32
/// is four sessions' full share, and leaves the machine to the person's own jobs (the daemon keeps 1,024
/// connections, and each job is a process); a person's `stop` (or the job's exit) frees a place.
pub const MAX_SPAWNED_RUNNING: usize = 32;
/// The window the rate is counted over.
const RATE_WINDOW_SECS: u64 = 60;

/// Why a spawn is not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpawnHeld {
    /// The session spawned [`SPAWNS_PER_MINUTE`] in the last minute.
    RateLimited,
    /// [`MAX_CHILDREN_AT_WORK`] of its children are at work.
    ChildrenAtWork,
    /// [`MAX_SPAWNED_RUNNING`] spawned jobs run in all.
    FleetFull,
}

impl SpawnHeld {
    /// The refusal a session gets.
    pub fn refusal(self) -> Refusal {
        match self {
            SpawnHeld::RateLimited => Refusal::new(
                ErrorCode::RateLimited,
                format!("a session spawns at most {SPAWNS_PER_MINUTE} jobs a minute; wait before spawning more"),
            ),
            SpawnHeld::ChildrenAtWork => Refusal::new(
                ErrorCode::Full,
                format!("{MAX_CHILDREN_AT_WORK} of this session's children are at work; wait for one to finish (or hand back) first"),
            ),
            SpawnHeld::FleetFull => Refusal::new(
                ErrorCode::Full,
                format!("{MAX_SPAWNED_RUNNING} spawned jobs run across the fleet; wait for one to end (a person's `jobs stop` ends one)"),
            ),
        }
    }
}

/// Whether a session may start a job of a profile that `protocol` says speaks the roost protocol (an
/// engine agent served on roost does) and that `controller_only` keeps to controllers. A terminal agent
/// is not spawned: its task is typed into its terminal or put on its command line, and a shell there would
/// run a session's words, where only a person's go (the same reason `send` to one is refused).
pub fn spawnable(profile: &str, protocol: bool, controller_only: bool) -> Result<(), Refusal> {
    if !protocol {
        return Err(Refusal::new(
            ErrorCode::Unsupported,
            format!("{profile:?} is a terminal agent: its task would be typed into its terminal, so only a person starts it (`agentwire jobs dispatch`)"),
        ));
    }
    if controller_only {
        return Err(Refusal::new(
            ErrorCode::Unsupported,
            format!("{profile:?} is started by a person only (controller_only): `agentwire jobs dispatch`"),
        ));
    }
    Ok(())
}

/// The spawns of each session in the last minute, in memory (a restart forgets them, which lets a
/// session spawn a minute's worth again; the bounds on work in progress hold regardless).
#[derive(Debug, Default)]
pub struct SpawnRules {
    /// Per session: when it spawned (seconds), oldest first.
    spawned: HashMap<String, VecDeque<u64>>,
}

impl SpawnRules {
    /// Whether session `spawner`, with `children_at_work` of its children at work and `spawned_running`
    /// spawned jobs running in all, may spawn at `now`; when it may, the spawn is counted.
    pub fn admit(
        &mut self,
        spawner: &str,
        now: u64,
        children_at_work: usize,
        spawned_running: usize,
    ) -> Result<(), SpawnHeld> {
        if spawned_running >= MAX_SPAWNED_RUNNING {
            return Err(SpawnHeld::FleetFull);
        }
        if children_at_work >= MAX_CHILDREN_AT_WORK {
            return Err(SpawnHeld::ChildrenAtWork);
        }
        let spawned = self.spawned.entry(spawner.to_string()).or_default();
        while spawned
            .front()
            .is_some_and(|at| now.saturating_sub(*at) >= RATE_WINDOW_SECS)
        {
            spawned.pop_front();
        }
        if spawned.len() >= SPAWNS_PER_MINUTE {
            return Err(SpawnHeld::RateLimited);
        }
        spawned.push_back(now);
        Ok(())
    }

    /// Takes back the last spawn [`admit`](Self::admit) counted for `spawner` (its job could not start).
    pub fn withdraw(&mut self, spawner: &str) {
        if let Some(s) = self.spawned.get_mut(spawner) {
            s.pop_back();
        }
    }

    /// Forgets a session (it is gone).
    pub fn forget(&mut self, spawner: &str) {
        self.spawned.remove(spawner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_spawns_a_minute_per_session_and_not_one_more() {
        let mut r = SpawnRules::default();
        for n in 0..SPAWNS_PER_MINUTE {
            assert_eq!(r.admit("a", n as u64, 0, 0), Ok(()));
        }
        assert_eq!(r.admit("a", 30, 0, 0), Err(SpawnHeld::RateLimited));
        assert_eq!(r.admit("b", 30, 0, 0), Ok(()), "another session");
        // The first went at 0: a minute on it is out of the window, and one more is taken.
        assert_eq!(r.admit("a", 60, 0, 0), Ok(()));
        assert_eq!(r.admit("a", 60, 0, 0), Err(SpawnHeld::RateLimited));
        r.withdraw("a");
        assert_eq!(
            r.admit("a", 60, 0, 0),
            Ok(()),
            "a withdrawn spawn is not counted"
        );
        r.forget("a");
        assert_eq!(r.admit("a", 61, 0, 0), Ok(()));
    }

    #[test]
    fn children_at_work_and_spawned_jobs_in_all_are_bounded() {
        let mut r = SpawnRules::default();
        assert_eq!(
            r.admit("a", 0, MAX_CHILDREN_AT_WORK, 0),
            Err(SpawnHeld::ChildrenAtWork)
        );
        assert_eq!(
            r.admit("a", 0, MAX_CHILDREN_AT_WORK - 1, MAX_SPAWNED_RUNNING),
            Err(SpawnHeld::FleetFull)
        );
        assert_eq!(
            r.admit("a", 0, MAX_CHILDREN_AT_WORK - 1, MAX_SPAWNED_RUNNING - 1),
            Ok(())
        );
        // A refusal is not counted against the rate.
        for n in 1..SPAWNS_PER_MINUTE {
            assert_eq!(r.admit("a", n as u64, 0, 0), Ok(()), "{n}");
        }
        assert_eq!(SpawnHeld::FleetFull.refusal().code, ErrorCode::Full);
        assert_eq!(
            SpawnHeld::RateLimited.refusal().code,
            ErrorCode::RateLimited
        );
    }

    #[test]
    fn a_terminal_agent_or_a_controller_only_profile_is_not_spawned() {
        assert!(spawnable("coder", true, false).is_ok());
        let e = spawnable("shell", false, false).unwrap_err();
        assert_eq!(e.code, ErrorCode::Unsupported);
        assert!(e.message.contains("terminal agent"), "{}", e.message);
        let e = spawnable("deploy", true, true).unwrap_err();
        assert_eq!(e.code, ErrorCode::Unsupported);
        assert!(e.message.contains("controller_only"), "{}", e.message);
    }
}
