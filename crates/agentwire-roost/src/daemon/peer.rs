//! Who is at the other end of a connection, from the socket's peer credentials (`SO_PEERCRED`, read once at
//! accept): whether it runs as the daemon's user, and whether it is one of the jobs' processes. Each job
//! runs in a process group of its own, led by its first process; a peer is a job's when its process group
//! is a job's, or when it descends from a job's leader (a child that left the group with `setsid` or
//! `setpgid` still has the leader among its ancestors while the leader lives).
//!
//! A job's processes may speak for their job (token-checked ops) but not control jobs: a controller's ops
//! from them are refused `unauthorized`. This is a guard, not a boundary: a job runs as the daemon's user,
//! so a process that left its group and its parent (a double fork whose middle process exits) is not
//! recognised, and any process of that user can read the daemon's store. Untrusted agents run under another
//! user (`user` on the profile); see the crate's "Trust model".

use std::collections::HashMap;

/// The most ancestors of a peer looked at for a job's leader: process trees are shallow, and a chain is
/// read from `/proc` once per connection, so it is bounded rather than followed to pid 1 through a
/// pathological depth.
pub const MAX_ANCESTRY_DEPTH: usize = 64;

/// The peer of one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Peer {
    /// It runs as the daemon's user.
    pub(super) owner: bool,
    /// The job whose process it is, if any.
    pub(super) job: Option<String>,
}

impl Peer {
    /// Whether the controller's ops are open to it: the daemon's user, and none of the jobs' processes.
    pub(super) fn may_control(&self) -> bool {
        self.owner && self.job.is_none()
    }
}

/// A process's parent and process group, from `/proc/<pid>/stat`.
fn parent_and_group(pid: u32) -> Option<(u32, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name (in parentheses, which may hold anything): state, ppid, pgrp.
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace().skip(1);
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((ppid, pgrp))
}

/// The processes and process groups process `pid` may be a job's by: itself and its group, then each
/// ancestor and its group, up to [`MAX_ANCESTRY_DEPTH`] ancestors (read without holding any lock).
pub(super) fn ancestry(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut at = pid;
    for _ in 0..MAX_ANCESTRY_DEPTH {
        let Some((ppid, pgrp)) = parent_and_group(at) else {
            break;
        };
        out.extend([at, pgrp]);
        if ppid <= 1 {
            break;
        }
        at = ppid;
    }
    out
}

/// The job a process whose [`ancestry`] is `ancestry` belongs to, if any: `groups` maps the jobs' process
/// groups (each its leader's pid) to their jobs. A leader's pid names it while its group lives: a pid is
/// not reused while a group of that id exists, and a group is forgotten once it is gone.
pub(super) fn job_of(ancestry: &[u32], groups: &HashMap<u32, String>) -> Option<String> {
    ancestry.iter().find_map(|id| groups.get(id).cloned())
}

/// The peer of `stream`, its process's job told by `job_of_process` (the daemon's job groups). One whose
/// credentials cannot be read is neither the owner nor a job's (so it may not control), which only a
/// platform without `SO_PEERCRED` gives.
pub(super) fn of(
    stream: &tokio::net::UnixStream,
    job_of_process: impl FnOnce(u32) -> Option<String>,
) -> Peer {
    let Ok(cred) = stream.peer_cred() else {
        return Peer {
            owner: false,
            job: None,
        };
    };
    let owner = cred.uid() == rustix::process::getuid().as_raw();
    let job = cred
        .pid()
        .and_then(|pid| u32::try_from(pid).ok())
        .and_then(job_of_process);
    Peer { owner, job }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_process_is_a_jobs_by_its_group_or_its_ancestry() {
        // A "job": a shell leading its own group, whose child starts a new session (leaving the group).
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("escaped");
        let script = format!(
            "setsid sh -c 'echo $$ > {}.tmp; mv {0}.tmp {0}; exec sleep 30' & sleep 30",
            pidfile.display()
        );
        let mut leader = std::os::unix::process::CommandExt::process_group(
            Command::new("sh").arg("-c").arg(script),
            0,
        )
        .spawn()
        .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !pidfile.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let escaped: u32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let groups: HashMap<u32, String> = [(leader.id(), "j1".to_string())].into();
        assert_eq!(
            job_of(&ancestry(leader.id()), &groups).as_deref(),
            Some("j1")
        );
        assert_ne!(
            parent_and_group(escaped).map(|(_, g)| g),
            Some(leader.id()),
            "it left the group"
        );
        assert_eq!(
            job_of(&ancestry(escaped), &groups).as_deref(),
            Some("j1"),
            "found by its ancestry"
        );
        assert_eq!(
            job_of(&ancestry(std::process::id()), &groups),
            None,
            "not a job's"
        );
        let _ = rustix::process::kill_process_group(
            rustix::process::Pid::from_raw(leader.id() as i32).unwrap(),
            rustix::process::Signal::KILL,
        );
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(escaped as i32).unwrap(),
            rustix::process::Signal::KILL,
        );
        leader.wait().unwrap();
    }
}
