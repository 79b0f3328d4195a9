//! A command whose reader went away (`agentwire turns | head`) stops quietly: no panic, no message, exit 0
//! (the reader has what it wanted; a shell with `pipefail` sees no failure, as with ripgrep).
//!
//! The standard library ignores SIGPIPE so that a socket write to a closed peer is an error and not the
//! death of the process, which the daemon and the clients that talk to it over sockets rely on. The price is
//! that `println!` to a closed pipe panics ("failed printing to stdout: Broken pipe"). Every command prints
//! with `println!` in many places, so the one place to turn that panic into a quiet exit is the panic hook;
//! writes of whole buffers (completions, the man page) go through [`write_stdout`], which says the same.

use std::io::{ErrorKind, Write};

/// The start of the panic message `print!` and `println!` give when writing fails (the standard library's
/// own words). Only stdout: a closed stderr says nothing about what the reader wanted, and the command's
/// exit code must still tell its outcome.
const PRINT_FAILED: &str = "failed printing to stdout";

/// How an OS error for EPIPE reads in that message (`std::io::Error`'s Display of `ErrorKind::BrokenPipe`).
const BROKEN_PIPE: &str = "Broken pipe";

/// Installs the hook: a print to a closed pipe exits 0 at once, in whatever thread it happened; every other
/// panic is reported as before.
pub(crate) fn exit_quietly_when_closed() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if is_closed_pipe(message) {
            std::process::exit(0);
        }
        previous(info);
    }));
}

/// Whether a panic message is a print that failed because its reader is gone.
fn is_closed_pipe(message: &str) -> bool {
    message.starts_with(PRINT_FAILED) && message.contains(BROKEN_PIPE)
}

/// Writes a whole buffer to stdout; a closed pipe is not an error (the reader has what it wanted).
pub(crate) fn write_stdout(bytes: &[u8]) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    quiet_when_closed(out.write_all(bytes).and_then(|()| out.flush()))
        .map_err(|e| format!("cannot write to stdout: {e}"))
}

/// A write to stdout as a command sees it: a closed pipe ends the command quietly (exit 0), any other error
/// is the caller's to say.
pub(crate) fn quiet_when_closed(written: std::io::Result<()>) -> std::io::Result<()> {
    match written {
        Err(e) if e.kind() == ErrorKind::BrokenPipe => std::process::exit(0),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_print_to_a_closed_pipe_is_quiet() {
        assert!(is_closed_pipe(
            "failed printing to stdout: Broken pipe (os error 32)"
        ));
        assert!(!is_closed_pipe(
            "failed printing to stderr: Broken pipe (os error 32)"
        ));
        assert!(!is_closed_pipe(
            "failed printing to stdout: No space left on device (os error 28)"
        ));
        assert!(!is_closed_pipe("Broken pipe while talking to the daemon"));
    }
}
