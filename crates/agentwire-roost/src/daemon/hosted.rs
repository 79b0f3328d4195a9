//! Hosted profiles: jobs served inside this process instead of by a program the daemon starts. agentwire
//! hosts its engine agents this way, so a roost controller (a hub, a script, `agentwire jobs`) reaches a
//! model agent, a command agent or the demo agent with `dispatch` and `reply`, as it reaches any job.
//!
//! The daemon treats a hosted job as it treats a process: it is started at `dispatch` (and again for a
//! reply once it has ended), stopped by `stop`, `rm`, `respawn` and a `/stop` reply, and, as a running
//! process is re-adopted, served again by the next daemon. The host speaks for the job over the socket with
//! the job's token like any agent (hello, report, deliver, ack), so every rule of the protocol holds for it.

use crate::proto::job_env::JobEnv;
use std::collections::HashMap;
use std::sync::Arc;

/// What serves a hosted profile's jobs.
pub trait Host: Send + Sync {
    /// Starts serving job `env`: from now on the host reports for it and takes its replies over the socket,
    /// as an agent process would. Called with the daemon's lock held: it must only spawn, not wait.
    fn start(&self, env: JobEnv) -> Box<dyn HostedJob>;
}

/// One job a host serves. Dropping it stops serving the job and leaves what it runs alone (a daemon that
/// shuts down hands its hosted jobs to the next one, as it leaves processes running). A hosted job does
/// not end by itself: it runs until it is stopped, as long as the process does.
pub trait HostedJob: Send {
    /// The job is stopped (`stop`, `rm`, `respawn`, a `/stop` reply): what it runs is cancelled. Must not
    /// wait.
    fn stop(&mut self);
}

/// The hosted profiles, by name.
#[derive(Clone, Default)]
pub struct Hosted(pub HashMap<String, Arc<dyn Host>>);

impl Hosted {
    /// The host of profile `name`, if it is hosted.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Host>> {
        self.0.get(name)
    }
}

impl std::fmt::Debug for Hosted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&String> = self.0.keys().collect();
        names.sort();
        f.debug_tuple("Hosted").field(&names).finish()
    }
}
