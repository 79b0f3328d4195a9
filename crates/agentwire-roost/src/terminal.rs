//! A terminal agent's terminal (`protocol = false`): the agent runs in a pseudo-terminal, its screen goes
//! to `output.log` (the transcript, whose last visible line is its row until it reports), and a reply is
//! typed into it, the text and then Enter.
//!
//! The terminal is held by a small process of its own, the holder ([`hold`], run as `agentwire
//! roost-term`), not by the daemon: a job outlives the daemon that started it, and a terminal whose master
//! side closes hangs up on its agent. The holder owns the master, copies the screen to the transcript,
//! starts the agent on the terminal (in the holder's process group, so a stop reaches both) and exits with
//! the agent's status. It takes text to type on a unix socket in the job's dir ([`TERMINAL_SOCKET`]),
//! one request a connection, and answers [`TYPED`] once the text and the Enter are written to the
//! terminal; the daemon ([`type_into`]) counts a reply delivered only on that answer.
//!
//! Limits: the agent's terminal is not its controlling terminal (that needs `setsid` in the child, which
//! std offers only through unsafe code, forbidden here), so a program that opens `/dev/tty` itself finds
//! none, and a typed Ctrl-C is a byte, not a signal. Typed text is text: line breaks are typed as spaces
//! and other control characters are dropped ([`typed_text`]), so a reply (or a peer's message) cannot
//! drive the terminal with escape sequences.

use rustix::pty::{ioctl_tiocgptpeer, openpt, OpenptFlags};
use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The holder's socket, in the job's dir (which only the daemon's user reaches): text to type.
pub const TERMINAL_SOCKET: &str = "term.sock";
/// The holder's answer once the text and its Enter are written to the terminal.
pub const TYPED: &str = "typed";
/// The terminal's size, rows and columns: a common default, wide enough that an agent's status line is
/// not wrapped into two rows of the transcript.
pub const TERMINAL_SIZE: (u16, u16) = (40, 120);
/// The pause between the text and its Enter: an agent with a full-screen interface reads a burst of input
/// as a paste, where an Enter in the same burst is a line break inside it, not "send".
pub const ENTER_DELAY: Duration = Duration::from_millis(60);
/// The most text one request types: a reply's own bound ([`crate::supervisor::MAX_REPLY_BYTES`]).
pub const MAX_TYPED_BYTES: usize = crate::supervisor::MAX_REPLY_BYTES;
/// How long the holder waits for a typing request to arrive whole, and the daemon for its answer: a
/// request is one short write on a local socket, so a longer wait means a peer that is stuck.
pub const TYPE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the holder waits, after its agent exited, for the last of the screen to reach the transcript
/// (a process the agent left behind may keep the terminal open for ever).
const DRAIN_WAIT: Duration = Duration::from_secs(1);

/// What a reply's text becomes when typed: line breaks (`\r\n`, `\n`, `\r`) are typed as one space each, other
/// control characters are dropped, and the ends are trimmed. A reply is text, not keystrokes.
pub fn typed_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' if chars.peek() == Some(&'\n') => {}
            '\r' | '\n' => out.push(' '),
            '\t' => out.push('\t'),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out.trim().to_string()
}

/// The last line of `tail` (the end of a transcript) that shows something, as a person would read it on
/// the screen: escape sequences (colours, cursor moves, titles) removed, a line rewritten after a carriage
/// return shown as rewritten, other control characters dropped.
pub fn screen_line(tail: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(tail);
    let plain = strip_escapes(&text);
    plain
        .split('\n')
        .rev()
        .map(|line| {
            // What is left after the last carriage return that was followed by something: a progress
            // line rewritten in place shows its newest text.
            let shown = line
                .split('\r')
                .rfind(|part| !part.trim().is_empty())
                .unwrap_or("");
            shown
                .chars()
                .filter(|c| !c.is_control() || *c == '\t')
                .collect::<String>()
        })
        .map(|l| l.trim().to_string())
        .find(|l| !l.is_empty())
}

/// `text` without ANSI escape sequences: CSI (`ESC [` … a final byte), OSC (`ESC ]` … BEL or `ESC \`), and
/// two-byte escapes.
fn strip_escapes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('[') => {
                // Parameters and intermediates, then one final byte in @..~.
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            Some(']') => {
                while let Some(c) = chars.next() {
                    if c == '\u{7}' {
                        break;
                    }
                    if c == '\u{1b}' && chars.peek() == Some(&'\\') {
                        chars.next();
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// What the holder is told: `--dir <job dir> [--cwd <dir>] [--uid <n> --gid <n>] -- <command...>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldArgs {
    /// The job's dir: the transcript and the socket are there.
    pub dir: PathBuf,
    /// Where the agent runs (the job's dir when not given).
    pub cwd: Option<PathBuf>,
    /// The user and group the agent runs as (the holder stays the daemon's user).
    pub user: Option<(u32, u32)>,
    /// The agent's command line.
    pub command: Vec<OsString>,
}

impl HoldArgs {
    /// The arguments for a holder of `command` in `dir`.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec!["--dir".into(), self.dir.clone().into()];
        if let Some(cwd) = &self.cwd {
            a.extend(["--cwd".into(), cwd.clone().into()]);
        }
        if let Some((uid, gid)) = self.user {
            a.extend([
                "--uid".into(),
                uid.to_string().into(),
                "--gid".into(),
                gid.to_string().into(),
            ]);
        }
        a.push("--".into());
        a.extend(self.command.iter().cloned());
        a
    }

    /// Reads the holder's arguments back.
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<HoldArgs, String> {
        let mut args = args.into_iter();
        let (mut dir, mut cwd, mut uid, mut gid) = (None, None, None, None);
        let number = |v: Option<OsString>, name: &str| {
            v.and_then(|v| v.to_str().and_then(|s| s.parse::<u32>().ok()))
                .ok_or_else(|| format!("{name} takes a number"))
        };
        loop {
            let Some(a) = args.next() else {
                return Err("no command: give it after --".into());
            };
            match a.to_str() {
                Some("--dir") => {
                    dir = Some(PathBuf::from(args.next().ok_or("--dir takes a path")?))
                }
                Some("--cwd") => {
                    cwd = Some(PathBuf::from(args.next().ok_or("--cwd takes a path")?))
                }
                Some("--uid") => uid = Some(number(args.next(), "--uid")?),
                Some("--gid") => gid = Some(number(args.next(), "--gid")?),
                Some("--") => break,
                _ => return Err(format!("unknown argument {a:?}")),
            }
        }
        let command: Vec<OsString> = args.collect();
        if command.is_empty() {
            return Err("no command: give it after --".into());
        }
        let user = match (uid, gid) {
            (Some(u), Some(g)) => Some((u, g)),
            (None, None) => None,
            _ => return Err("--uid and --gid go together".into()),
        };
        Ok(HoldArgs {
            dir: dir.ok_or("--dir is required")?,
            cwd,
            user,
            command,
        })
    }
}

/// Runs the holder: the agent on a new terminal, until it exits. Returns the agent's exit code (128 plus
/// the signal's number when a signal ended it), or an error when the terminal or the agent could not be
/// set up.
pub fn hold(args: &HoldArgs) -> Result<i32, std::io::Error> {
    // A stop sends SIGTERM to the whole process group. The holder outlasts it (a handler is installed, and
    // the signal is let be) until its agent has gone: the holder is the group's leader, whose pid a stop's
    // SIGKILL escalation goes by, and the agent's exit is the job's.
    let signals = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let _term = {
        let _in = signals.enter();
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?
    };
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY)?;
    rustix::pty::grantpt(&master)?;
    rustix::pty::unlockpt(&master)?;
    let slave = ioctl_tiocgptpeer(&master, OpenptFlags::RDWR | OpenptFlags::NOCTTY)?;
    let (rows, cols) = TERMINAL_SIZE;
    rustix::termios::tcsetwinsize(
        &slave,
        rustix::termios::Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        },
    )?;
    let master = File::from(master);
    let mut transcript = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(args.dir.join(crate::daemon::process::OUTPUT_FILE))?;

    // The socket first: a reply typed as soon as the job starts (its task) finds it.
    let socket = args.dir.join(TERMINAL_SOCKET);
    // One left by a holder that died is in the way (one job has one holder at a time).
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket)?;
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))?;

    let mut command = Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .current_dir(args.cwd.as_deref().unwrap_or(&args.dir))
        .stdin(Stdio::from(slave.try_clone()?))
        .stdout(Stdio::from(slave.try_clone()?))
        .stderr(Stdio::from(slave));
    if let Some((uid, gid)) = args.user {
        command.uid(uid).gid(gid);
    }
    let mut child = command.spawn()?;
    // The command holds the terminal's slave side now; ours was moved into it and is closed with it.

    let keyboard = Arc::new(Mutex::new(master.try_clone()?));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let keyboard = keyboard.clone();
            std::thread::spawn(move || type_request(stream, &keyboard));
        }
    });
    let (drained_tx, drained) = std::sync::mpsc::channel::<()>();
    let mut screen = master;
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        // EIO once no process holds the slave side: the end of the screen.
        while let Ok(n) = screen.read(&mut buf) {
            if n == 0 || transcript.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = drained_tx.send(());
    });
    let status = child.wait()?;
    let _ = drained.recv_timeout(DRAIN_WAIT);
    let _ = std::fs::remove_file(&socket);
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// Serves one typing request: reads the text (to the end of the request, at most [`MAX_TYPED_BYTES`]),
/// types it and then Enter, and answers [`TYPED`]; anything else is answered with what went wrong.
fn type_request(mut stream: std::os::unix::net::UnixStream, keyboard: &Mutex<File>) {
    let _ = stream.set_read_timeout(Some(TYPE_TIMEOUT));
    let mut text = Vec::new();
    let read = (&mut stream)
        .take(MAX_TYPED_BYTES as u64 + 1)
        .read_to_end(&mut text);
    let answer = match read {
        Err(e) => format!("not typed: {e}"),
        Ok(_) if text.len() > MAX_TYPED_BYTES => {
            format!("not typed: longer than {MAX_TYPED_BYTES} bytes")
        }
        Ok(_) => {
            let typed = typed_text(&String::from_utf8_lossy(&text));
            // One request types at a time: two replies never interleave on the terminal.
            let mut k = keyboard.lock().unwrap_or_else(|p| p.into_inner());
            let wrote = k.write_all(typed.as_bytes()).and_then(|()| {
                std::thread::sleep(ENTER_DELAY);
                k.write_all(b"\r")
            });
            match wrote {
                Ok(()) => TYPED.to_string(),
                Err(e) => format!("not typed: {e}"),
            }
        }
    };
    let _ = stream.write_all(format!("{answer}\n").as_bytes());
}

/// Types `text` into the terminal of the job whose dir is `dir`, through its holder: done once the holder
/// answers [`TYPED`]. An error when no holder answers (the job is not running, or is not yet set up) or
/// it says the text was not typed.
pub async fn type_into(dir: &Path, text: &str) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let talk = async {
        let mut s = tokio::net::UnixStream::connect(dir.join(TERMINAL_SOCKET)).await?;
        s.write_all(text.as_bytes()).await?;
        s.shutdown().await?;
        let mut answer = String::new();
        s.take(256).read_to_string(&mut answer).await?;
        match answer.trim() {
            TYPED => Ok(()),
            other => Err(std::io::Error::other(other.to_string())),
        }
    };
    tokio::time::timeout(TYPE_TIMEOUT + ENTER_DELAY, talk)
        .await
        .map_err(|_| std::io::Error::other("the terminal's holder did not answer"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_is_typed_as_one_line_of_text() {
        assert_eq!(typed_text("fix the tests"), "fix the tests");
        assert_eq!(typed_text("one\ntwo\r\nthree\rfour"), "one two three four");
        // Escape sequences and Ctrl-C cannot drive the terminal.
        assert_eq!(typed_text("a\u{1b}[2Jb\u{3}c"), "a[2Jbc");
        assert_eq!(typed_text("  \n padded \n"), "padded");
        assert_eq!(typed_text("tab\tkept"), "tab\tkept");
    }

    #[test]
    fn the_row_is_the_last_line_a_person_would_see() {
        assert_eq!(
            screen_line(b"first\nsecond\n\n  \n").as_deref(),
            Some("second")
        );
        // Colours and a title are not text.
        assert_eq!(
            screen_line(b"\x1b]0;title\x07\x1b[1;32mready\x1b[0m\r\n").as_deref(),
            Some("ready")
        );
        // A progress line rewritten in place shows its newest text.
        assert_eq!(
            screen_line(b"working 10%\rworking 90%\r\n").as_deref(),
            Some("working 90%")
        );
        assert_eq!(screen_line(b"\x1b[2J\x1b[H").as_deref(), None);
        assert_eq!(screen_line(b"").as_deref(), None);
    }

    #[test]
    fn the_holders_arguments_read_back_as_given() {
        let a = HoldArgs {
            dir: "/d".into(),
            cwd: Some("/home/u".into()),
            user: Some((1000, 1000)),
            command: vec!["sh".into(), "-c".into(), "--dir x".into()],
        };
        assert_eq!(HoldArgs::parse(a.to_args()), Ok(a));
        assert!(HoldArgs::parse(["--dir".into(), "/d".into()]).is_err());
        assert!(HoldArgs::parse(["--dir".into(), "/d".into(), "--".into()]).is_err());
        assert!(
            HoldArgs::parse(["--uid", "1", "--dir", "/d", "--", "x"].map(OsString::from)).is_err()
        );
        assert!(HoldArgs::parse(["--", "x"].map(OsString::from)).is_err());
    }
}
