//! The job a process speaks for, as the daemon hands it down in the environment: `ROOST_JOB_ID`,
//! `ROOST_JOB_TOKEN`, `ROOST_SOCKET` and `ROOST_JOB_DIR` (the spec's `PI_*` names are read too). The
//! daemon fills these in for a job's process (or a hosted job); an agent client reads them back.

use std::path::PathBuf;

/// The job this process speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEnv {
    /// `ROOST_JOB_ID` (or `PI_JOB_ID`).
    pub id: String,
    /// `ROOST_JOB_TOKEN` (or `PI_JOB_TOKEN`).
    pub token: String,
    /// `ROOST_SOCKET` (or `PI_DAEMON_SOCK`).
    pub socket: PathBuf,
    /// `ROOST_JOB_DIR` (or `PI_JOB_DIR`).
    pub dir: PathBuf,
}

impl JobEnv {
    /// The job from the environment, if roost started this process.
    pub fn from_env() -> Option<JobEnv> {
        let var = |new: &str, old: &str| {
            std::env::var(new)
                .ok()
                .filter(|v| !v.is_empty())
                .or_else(|| std::env::var(old).ok().filter(|v| !v.is_empty()))
        };
        Some(JobEnv {
            id: var("ROOST_JOB_ID", "PI_JOB_ID")?,
            token: var("ROOST_JOB_TOKEN", "PI_JOB_TOKEN")?,
            socket: var("ROOST_SOCKET", "PI_DAEMON_SOCK")?.into(),
            dir: var("ROOST_JOB_DIR", "PI_JOB_DIR")?.into(),
        })
    }
}
