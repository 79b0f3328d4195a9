//! The daemon's file descriptor limit: raised at start to the budget every front's connection caps are sized
//! for (docs/security.md, "File descriptors"), as far as the hard limit allows, so a daemon started by hand
//! at the common soft limit of 1,024 has the same room as one the systemd unit starts.

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// The descriptors the daemon wants: the relay's, the HTTP server's and the roost socket's caps with their
/// pending refusals (under 1,800), the journal's files, and room for hosted jobs, agents' processes and
/// outbound connections. The same figure as `LimitNOFILE` in `contrib/agentwire.service`.
pub(crate) const WANTED_FDS: u64 = 8192;

/// What the start did to the soft limit.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Raised {
    /// It was already at least [`WANTED_FDS`] (or unlimited).
    Enough(u64),
    /// Raised from the first figure to the second (the hard limit may have stopped it short of
    /// [`WANTED_FDS`]).
    To(u64, u64),
    /// It could not be read or set; the daemon runs with what it has.
    Kept(String),
}

/// Raises the soft limit on open files towards [`WANTED_FDS`], never past the hard limit.
pub(crate) fn raise() -> Raised {
    let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
    let Some(soft) = current else {
        return Raised::Enough(u64::MAX);
    };
    if soft >= WANTED_FDS {
        return Raised::Enough(soft);
    }
    let to = maximum.map_or(WANTED_FDS, |hard| hard.min(WANTED_FDS));
    if to <= soft {
        return Raised::Kept(format!("the hard limit is {soft}"));
    }
    let wanted = Rlimit {
        current: Some(to),
        maximum,
    };
    match setrlimit(Resource::Nofile, wanted) {
        Ok(()) => Raised::To(soft, to),
        Err(e) => Raised::Kept(e.to_string()),
    }
}

/// Raises the limit and says what happened in the log: at info when raised, a warning when the daemon
/// has fewer than [`WANTED_FDS`].
pub(crate) fn raise_and_log() {
    match raise() {
        Raised::Enough(_) => {}
        Raised::To(from, to) if to >= WANTED_FDS => {
            tracing::info!(from, to, "raised the open files limit");
        }
        Raised::To(from, to) => tracing::warn!(
            from,
            to,
            wanted = WANTED_FDS,
            "raised the open files limit only to the hard limit; hosted jobs and connections share fewer descriptors"
        ),
        Raised::Kept(why) => tracing::warn!(
            wanted = WANTED_FDS,
            why,
            "could not raise the open files limit; hosted jobs and connections share fewer descriptors"
        ),
    }
}
