//! A command whose reader went away (`agentwire turns | head`) stops quietly, as `cat` or `grep` do: no
//! panic, no message, exit 0.
//!
//! The standard library ignores SIGPIPE so that a socket write to a closed peer is an error and not the
//! death of the process, which the daemon and the clients that talk to it over sockets rely on. The price is
//! that `println!` to a closed pipe panics ("failed printing to stdout: Broken pipe"). Every command prints
//! with `println!` in many places, so the one place to turn that panic into a quiet exit is the panic hook;
//! writes of whole buffers (completions, the man page) go through [`write_stdout`], which says the same.

use std::io::{ErrorKind, Write};

/// The start of the panic message `print!` and `println!` give when writing fails (the standard library's
/// own words; `eprint!` says "stderr").
const PRINT_FAILED: [&str; 2] = ["failed printing to stdout", "failed printing to stderr"];

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
    PRINT_FAILED.iter().any(|p| message.starts_with(p)) && message.contains(BROKEN_PIPE)
}

/// Writes a whole buffer to stdout; a closed pipe is not an error (the reader has what it wanted).
pub(crate) fn write_stdout(bytes: &[u8]) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != ErrorKind::BrokenPipe => Err(format!("cannot write to stdout: {e}")),
        _ => Ok(()),
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
        assert!(is_closed_pipe(
            "failed printing to stderr: Broken pipe (os error 32)"
        ));
        assert!(!is_closed_pipe(
            "failed printing to stdout: No space left on device (os error 28)"
        ));
        assert!(!is_closed_pipe("Broken pipe while talking to the daemon"));
    }
}
