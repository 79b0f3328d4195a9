//! `agentwire roost-term`: the holder of a terminal agent's terminal ([`agentwire_roost::daemon::terminal`]). Not a
//! command for people (it is in no help text): the roost daemon inside `agentwire serve` starts this same
//! binary with it for each terminal agent's job, so the terminal outlives the daemon as the job does.

use std::ffi::OsString;
use std::process::ExitCode;

/// The first argument that makes this binary a holder.
pub(crate) const ARG: &str = "roost-term";

/// The holder command the daemon runs: this binary with [`ARG`]; none (terminal agents then run on plain
/// output) when the binary's own path cannot be read.
pub(crate) fn holder() -> Option<Vec<OsString>> {
    match std::env::current_exe() {
        Ok(exe) => Some(vec![exe.into(), ARG.into()]),
        Err(e) => {
            tracing::warn!(error = %e, "cannot find this binary's path: terminal agents run without a terminal, and replies to them wait");
            None
        }
    }
}

/// Runs the holder with the arguments after [`ARG`]; its exit code is the agent's.
pub(crate) fn run(args: impl Iterator<Item = OsString>) -> ExitCode {
    let args = match agentwire_roost::daemon::terminal::HoldArgs::parse(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("agentwire {ARG}: {e}");
            return ExitCode::from(2);
        }
    };
    match agentwire_roost::daemon::terminal::hold(&args) {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!(
                "agentwire {ARG}: could not start {:?} on a terminal: {e}",
                args.command[0]
            );
            ExitCode::from(1)
        }
    }
}
