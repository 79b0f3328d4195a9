//! A job's process: started in a process group of its own (so it outlives the daemon and can be stopped
//! as a whole, and its processes are known on the socket), with its output in the job dir. Its environment
//! is not the daemon's, which holds the daemon's secrets (a model API key, a NATS password): it is the
//! allowlist of [`agentwire_core::child_env`], the profile's `env` and `pass_env`, and the job's identity.
//! A terminal agent (`protocol = false`) runs in a pseudo-terminal, under its holder ([`crate::daemon::terminal`]).

use super::run_as::RunAs;
use crate::daemon::profile::{Profile, TaskMode};
use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

pub use super::terminal::OUTPUT_FILE;

/// What a started job's environment carries.
pub struct JobEnv<'a> {
    /// The job id.
    pub id: &'a str,
    /// Its token.
    pub token: &'a str,
    /// The daemon's socket.
    pub socket: &'a Path,
    /// The job's dir.
    pub dir: &'a Path,
}

/// Starts a job's process; as `run_as` when given (the daemon runs as root). A terminal agent's runs under
/// `holder` (the command that holds a terminal: `agentwire roost-term`), when given, and on plain output
/// otherwise.
pub fn spawn(
    profile: &Profile,
    task: Option<&str>,
    env: &JobEnv<'_>,
    run_as: Option<&RunAs>,
    holder: Option<&[std::ffi::OsString]>,
) -> std::io::Result<Child> {
    std::fs::create_dir_all(env.dir)?;
    let mut argv = profile.command.clone();
    if let (TaskMode::Argv, Some(t)) = (profile.task, task) {
        argv.push(t.to_string());
    }
    let out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(env.dir.join(OUTPUT_FILE))?;
    let err = out.try_clone()?;
    let socket = env.socket.to_string_lossy().into_owned();
    let dir = env.dir.to_string_lossy().into_owned();
    let mut vars = profile.child_env().vars(std::env::vars_os());
    let holder = holder.filter(|h| !profile.protocol && !h.is_empty());
    let mut command = Command::new(&argv[0]);
    command.args(&argv[1..]).current_dir(env.dir);
    // Where the agent runs, when not in its job's dir.
    let mut cwd = None;
    if let Some(user) = run_as {
        // setgid, then setuid (and no supplementary groups: std drops them when a root parent sets a uid).
        // Under a holder, the holder does this for the agent and stays the daemon's user.
        if holder.is_none() {
            command.uid(user.uid).gid(user.gid);
        }
        // The user's own, not the daemon's (unless the profile's `env` says otherwise).
        for (name, value) in [
            ("HOME", user.home.as_os_str()),
            ("USER", user.name.as_ref()),
            ("LOGNAME", user.name.as_ref()),
        ] {
            if !profile.env.contains_key(name) {
                vars.insert(name.into(), value.into());
            }
        }
        // The job's own dir is under the daemon's data dir, which the user may not be able to reach.
        cwd = Some(if user.home.is_dir() {
            user.home.as_path()
        } else {
            Path::new("/")
        });
    }
    if let Some(holder) = holder {
        let args = crate::daemon::terminal::HoldArgs {
            dir: env.dir.to_path_buf(),
            cwd: cwd.map(Path::to_path_buf),
            user: run_as.map(|u| (u.uid, u.gid)),
            command: argv.iter().map(Into::into).collect(),
        };
        command = Command::new(&holder[0]);
        command
            .args(&holder[1..])
            .args(args.to_args())
            .current_dir(env.dir);
    } else if let Some(cwd) = cwd {
        command.current_dir(cwd);
    }
    command
        .env_clear()
        .envs(vars)
        .env("ROOST_JOB_ID", env.id)
        .env("ROOST_JOB_TOKEN", env.token)
        .env("ROOST_SOCKET", &socket)
        .env("ROOST_JOB_DIR", &dir)
        .env("PI_JOB_ID", env.id)
        .env("PI_JOB_TOKEN", env.token)
        .env("PI_DAEMON_SOCK", &socket)
        .env("PI_JOB_DIR", &dir)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        // A group of its own: a signal to the daemon does not reach it, and `stop` reaches all of it.
        .process_group(0)
        .spawn()
}

/// Whether process `pid` is alive (a zombie, which has exited but not been reaped, is not).
pub fn alive(pid: u32) -> bool {
    let Some(p) = rustix::process::Pid::from_raw(pid as i32) else {
        return false;
    };
    if rustix::process::test_kill_process(p).is_err() {
        return false;
    }
    // On Linux, /proc says whether it is a zombie: the state follows the command name in parentheses.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_none_or(|state| state != "Z"),
        Err(_) => true,
    }
}

/// A process's identity beyond its pid: the boot it runs in and its start time (clock ticks since boot).
/// A pid is reused once its process is gone, and a job's pid stored before a reboot names nothing of it.
pub fn identity(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (in parentheses): state is the first, start time the 20th.
    let (_, rest) = stat.rsplit_once(')')?;
    let start = rest.split_whitespace().nth(19)?;
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(format!("{}:{start}", boot.trim()))
}

/// Whether a job's process is alive: `pid` runs and, when its identity was recorded, is still that process.
pub fn job_alive(pid: u32, recorded: Option<&str>) -> bool {
    alive(pid) && recorded.is_none_or(|r| identity(pid).as_deref() == Some(r))
}

/// Whether any process of the group led by `pid` is still there.
pub fn group_alive(pid: u32) -> bool {
    rustix::process::Pid::from_raw(pid as i32)
        .is_some_and(|p| rustix::process::test_kill_process_group(p).is_ok())
}

/// Asks a job's process group to stop (SIGTERM).
pub fn terminate(pid: u32) {
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process_group(p, rustix::process::Signal::TERM);
    }
}

/// Kills a job's process group (SIGKILL): for one that outlived its SIGTERM.
pub fn kill(pid: u32) {
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process_group(p, rustix::process::Signal::KILL);
    }
}

/// How much of the end of a job's output is read for its row: a line longer than this shows its end.
const OUTPUT_TAIL_BYTES: u64 = 4096;

/// The last line of a job's output that shows something ([`crate::daemon::terminal::screen_line`]): a terminal
/// agent's row. Only the tail is read; a long-running agent's log can be large, and this runs every second.
pub fn last_line(dir: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(dir.join(OUTPUT_FILE)).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(OUTPUT_TAIL_BYTES)))
        .ok()?;
    let mut tail = Vec::with_capacity(OUTPUT_TAIL_BYTES as usize);
    f.take(OUTPUT_TAIL_BYTES).read_to_end(&mut tail).ok()?;
    crate::daemon::terminal::screen_line(&tail).map(|l| {
        l.chars()
            .take(crate::proto::report::MAX_SUMMARY_CHARS)
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_known_by_its_identity_not_its_pid_alone() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let id = identity(pid).expect("a live process has an identity");
        assert_eq!(identity(pid).as_deref(), Some(id.as_str()), "stable");
        assert!(job_alive(pid, Some(&id)));
        assert!(job_alive(pid, None), "no recorded identity: the pid alone");
        // Another process's identity (as after a reboot or pid reuse) is not this one.
        assert!(!job_alive(pid, Some("another-boot:12345")));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!job_alive(pid, Some(&id)));
    }
}
