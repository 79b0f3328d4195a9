//! A terminal agent's terminal (`protocol = false`): the agent runs in a pseudo-terminal, its screen goes
//! to `output.log` (the transcript, whose last visible line is its row until it reports), and a reply is
//! typed into it, the text and then Enter.
//!
//! The terminal is held by a small process of its own, the holder ([`hold`], run as `agentwire
//! roost-term`), not by the daemon: a job outlives the daemon that started it, and a terminal whose master
//! side closes hangs up on its agent. The holder owns the master, copies the screen to the transcript,
//! starts the agent on the terminal (in the holder's process group, so a stop reaches both) and exits with
//! the agent's status. It takes text to type on a unix socket in the job's dir, named after the holder's
//! pid ([`socket_path`]: a holder that is ending, after a respawn, never takes or removes its successor's),
//! one request a connection, and answers [`TYPED`] once the text and the Enter are written to the
//! terminal; the daemon ([`type_into`]) counts a reply delivered only on that answer. A request names the
//! reply's seq: the holder remembers the last [`REMEMBERED_SEQS`] it typed and answers a repeat (the
//! daemon's answer was lost, or its write of the ack failed) [`TYPED`] without typing it again, and answers
//! [`BUSY`] while it is typing another (the agent is not reading), so nothing waits on it in a pile.
//! The first text is typed once the agent has shown something and gone quiet for a moment (at most
//! [`READY_WAIT`] after the start): a program that clears pending input as it sets its terminal up would
//! otherwise lose its task.
//!
//! Limits: the agent's terminal is not its controlling terminal (that needs `setsid` in the child, which
//! std offers only through unsafe code, forbidden here), so a program that opens `/dev/tty` itself finds
//! none, and a typed Ctrl-C is a byte, not a signal. Typed text is text: line breaks are typed as spaces
//! and tabs and other control characters are dropped or made spaces ([`typed_text`]), so a reply cannot
//! drive the terminal with escape sequences. In canonical (line) mode the terminal keeps at most 4095
//! bytes of a line; a full-screen agent reads raw input and has no such bound.

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
use std::time::{Duration, Instant};

/// The file in a job's dir that holds its output: a terminal agent's screen (its row is read from it), a
/// plain agent's stdout and stderr.
pub const OUTPUT_FILE: &str = "output.log";

/// The holder's answer once the text and its Enter are written to the terminal (or were, for a repeat).
pub const TYPED: &str = "typed";
/// The holder's answer while it is typing another request: try again later.
pub const BUSY: &str = "busy";
/// How the holder's answer starts when the text will never be typed (too long, not a request): the daemon
/// drops it rather than try again for ever.
pub const REFUSED: &str = "refused";
/// How many of the seqs it typed last the holder remembers: more than the replies that can wait for a job
/// (50), so any repeat the daemon can send is known.
pub const REMEMBERED_SEQS: usize = 128;
/// The terminal's size, rows and columns: a common default, wide enough that an agent's status line is
/// not wrapped into two rows of the transcript.
pub const TERMINAL_SIZE: (u16, u16) = (40, 120);
/// The pause between the text and its Enter: an agent with a full-screen interface reads a burst of input
/// as a paste, where an Enter in the same burst is a line break inside it, not "send".
pub const ENTER_DELAY: Duration = Duration::from_millis(60);
/// The most text one request types: a reply's own bound ([`crate::proto::supervisor::MAX_REPLY_BYTES`]) with room
/// for the request's seq line.
pub const MAX_TYPED_BYTES: usize = crate::proto::supervisor::MAX_REPLY_BYTES + 64;
/// The longest the first text waits for the agent to be ready (to have shown something and gone quiet for
/// [`QUIET`]): an agent that shows nothing is typed to after this.
pub const READY_WAIT: Duration = Duration::from_secs(2);
/// How long the screen stays still before the agent counts as ready for its first text.
const QUIET: Duration = Duration::from_millis(200);
/// How long the holder waits for a typing request to arrive whole, and the daemon for its answer: a
/// request is one short write on a local socket, so a longer wait means a peer that is stuck.
pub const TYPE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the holder waits, after its agent exited, for the last of the screen to reach the transcript
/// (a process the agent left behind may keep the terminal open for ever).
const DRAIN_WAIT: Duration = Duration::from_secs(1);

/// What a reply's text becomes when typed: line breaks (`\r\n`, `\n`, `\r`) and tabs (completion, in a shell)
/// are typed as one space each, other control characters are dropped, and the ends are trimmed. A reply is
/// text, not keystrokes.
pub fn typed_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' if chars.peek() == Some(&'\n') => {}
            '\r' | '\n' | '\t' => out.push(' '),
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

/// Why the holder's arguments cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HoldArgsError {
    /// No command after `--`, or no `--`.
    #[error("no command: give it after --")]
    NoCommand,
    /// `--dir` or `--cwd` (which one) without its path.
    #[error("{0} takes a path")]
    NoPath(&'static str),
    /// `--uid` or `--gid` (which one) without a number.
    #[error("{0} takes a number")]
    NotANumber(&'static str),
    /// An argument the holder does not take.
    #[error("unknown argument {0:?}")]
    Unknown(OsString),
    /// `--uid` without `--gid`, or the other way round.
    #[error("--uid and --gid go together")]
    UidWithoutGid,
    /// No `--dir`.
    #[error("--dir is required")]
    NoDir,
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
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<HoldArgs, HoldArgsError> {
        let mut args = args.into_iter();
        let (mut dir, mut cwd, mut uid, mut gid) = (None, None, None, None);
        let number = |v: Option<OsString>, name: &'static str| {
            v.and_then(|v| v.to_str().and_then(|s| s.parse::<u32>().ok()))
                .ok_or(HoldArgsError::NotANumber(name))
        };
        loop {
            let Some(a) = args.next() else {
                return Err(HoldArgsError::NoCommand);
            };
            match a.to_str() {
                Some("--dir") => {
                    dir = Some(PathBuf::from(
                        args.next().ok_or(HoldArgsError::NoPath("--dir"))?,
                    ))
                }
                Some("--cwd") => {
                    cwd = Some(PathBuf::from(
                        args.next().ok_or(HoldArgsError::NoPath("--cwd"))?,
                    ))
                }
                Some("--uid") => uid = Some(number(args.next(), "--uid")?),
                Some("--gid") => gid = Some(number(args.next(), "--gid")?),
                Some("--") => break,
                _ => return Err(HoldArgsError::Unknown(a)),
            }
        }
        let command: Vec<OsString> = args.collect();
        if command.is_empty() {
            return Err(HoldArgsError::NoCommand);
        }
        let user = match (uid, gid) {
            (Some(u), Some(g)) => Some((u, g)),
            (None, None) => None,
            _ => return Err(HoldArgsError::UidWithoutGid),
        };
        Ok(HoldArgs {
            dir: dir.ok_or(HoldArgsError::NoDir)?,
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
    // Close-on-exec: the agent gets the slave side as its stdio and nothing else of the terminal, so once
    // it (and whatever it left behind) lets the slave go, reads of the master end.
    let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
    let master = openpt(flags)?;
    rustix::pty::grantpt(&master)?;
    rustix::pty::unlockpt(&master)?;
    let slave = ioctl_tiocgptpeer(&master, flags)?;
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
        .open(args.dir.join(OUTPUT_FILE))?;

    // The socket first: a reply typed as soon as the job starts (its task) finds it.
    let socket = socket_path(&args.dir, std::process::id());
    // One left by a holder that died with this pid is in the way.
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

    let keyboard = Arc::new(Keyboard {
        master: Mutex::new(master.try_clone()?),
        typed: Mutex::new(std::collections::VecDeque::new()),
        screen: Mutex::new(Screen {
            started: Instant::now(),
            last_output: None,
        }),
    });
    let typist = keyboard.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let keyboard = typist.clone();
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
            lock(&keyboard.screen).last_output = Some(Instant::now());
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

/// The socket of the holder whose pid is `pid`, in job dir `dir`.
pub fn socket_path(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("term-{pid}.sock"))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The holder's side of the terminal that typing needs.
struct Keyboard {
    /// The master side, written to (one request at a time: two replies never interleave).
    master: Mutex<File>,
    /// The seqs typed last, newest at the back (at most [`REMEMBERED_SEQS`]).
    typed: Mutex<std::collections::VecDeque<u64>>,
    screen: Mutex<Screen>,
}

/// When the agent last showed something.
struct Screen {
    started: Instant,
    last_output: Option<Instant>,
}

impl Keyboard {
    /// Waits (at most until [`READY_WAIT`] after the start) for the agent to have shown something and gone
    /// quiet for [`QUIET`]: its first text is then typed into a terminal it has set up.
    fn wait_ready(&self) {
        loop {
            let (started, last) = {
                let s = lock(&self.screen);
                (s.started, s.last_output)
            };
            let ready = last.is_some_and(|l| l.elapsed() >= QUIET);
            if ready || started.elapsed() >= READY_WAIT {
                return;
            }
            std::thread::sleep(QUIET / 4);
        }
    }
}

/// A typing request as it arrives: the reply's seq on the first line, then its text.
fn parse_request(request: &[u8]) -> Option<(u64, String)> {
    let request = std::str::from_utf8(request).ok()?;
    let (seq, text) = request.split_once('\n')?;
    Some((seq.trim().parse().ok()?, text.to_string()))
}

/// Serves one typing request: reads it (to its end, at most [`MAX_TYPED_BYTES`]), types its text and then
/// Enter, and answers [`TYPED`]; a seq typed before is answered [`TYPED`] at once, a request while another
/// types [`BUSY`], one that cannot be typed [`REFUSED`] with why, and a read that failed with why.
fn type_request(mut stream: std::os::unix::net::UnixStream, keyboard: &Keyboard) {
    let _ = stream.set_read_timeout(Some(TYPE_TIMEOUT));
    let mut request = Vec::new();
    let read = (&mut stream)
        .take(MAX_TYPED_BYTES as u64 + 1)
        .read_to_end(&mut request);
    let answer = match read {
        Err(e) => format!("not typed: {e}"),
        Ok(_) if request.len() > MAX_TYPED_BYTES => {
            format!("{REFUSED}: longer than {MAX_TYPED_BYTES} bytes")
        }
        Ok(_) => match parse_request(&request) {
            None => format!("{REFUSED}: not a request (a seq line, then UTF-8 text)"),
            Some((seq, _)) if lock(&keyboard.typed).contains(&seq) => TYPED.to_string(),
            Some((seq, text)) => match keyboard.master.try_lock() {
                Err(std::sync::TryLockError::WouldBlock) => BUSY.to_string(),
                Err(std::sync::TryLockError::Poisoned(p)) => {
                    type_text(keyboard, p.into_inner(), seq, &text)
                }
                Ok(master) => type_text(keyboard, master, seq, &text),
            },
        },
    };
    let _ = stream.write_all(format!("{answer}\n").as_bytes());
}

/// Types `text` and then Enter on `master` (held), and remembers `seq` as typed: the answer.
fn type_text(
    keyboard: &Keyboard,
    mut master: std::sync::MutexGuard<'_, File>,
    seq: u64,
    text: &str,
) -> String {
    let first = lock(&keyboard.typed).is_empty();
    if first {
        keyboard.wait_ready();
    }
    let typed = typed_text(text);
    let wrote = master.write_all(typed.as_bytes()).and_then(|()| {
        std::thread::sleep(ENTER_DELAY);
        master.write_all(b"\r")
    });
    match wrote {
        Ok(()) => {
            let mut seqs = lock(&keyboard.typed);
            seqs.push_back(seq);
            if seqs.len() > REMEMBERED_SEQS {
                seqs.pop_front();
            }
            TYPED.to_string()
        }
        Err(e) => format!("not typed: {e}"),
    }
}

/// What the holder said of a request the daemon sent.
#[derive(Debug, PartialEq, Eq)]
pub enum Typing {
    /// Typed (now or before).
    Typed,
    /// Not now: no holder answered, it was busy, or the write failed; try again later.
    Later(String),
    /// Never: the holder refused it (too long); the daemon drops it.
    Refused(String),
}

/// Types reply `seq` with `text` into the terminal of the job whose dir is `dir` and whose holder's pid is
/// `holder`, through the holder: what it said.
pub async fn type_into(dir: &Path, holder: u32, seq: u64, text: &str) -> Typing {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let talk = async {
        let mut s = tokio::net::UnixStream::connect(socket_path(dir, holder)).await?;
        s.write_all(format!("{seq}\n").as_bytes()).await?;
        s.write_all(text.as_bytes()).await?;
        s.shutdown().await?;
        let mut answer = String::new();
        s.take(1024).read_to_string(&mut answer).await?;
        Ok::<_, std::io::Error>(answer.trim().to_string())
    };
    // The first text may wait for the agent to be ready.
    match tokio::time::timeout(TYPE_TIMEOUT + READY_WAIT + ENTER_DELAY, talk).await {
        Err(_) => Typing::Later("the terminal's holder did not answer in time".into()),
        Ok(Err(e)) => Typing::Later(e.to_string()),
        Ok(Ok(a)) if a == TYPED => Typing::Typed,
        Ok(Ok(a)) if a.starts_with(REFUSED) => Typing::Refused(a),
        Ok(Ok(a)) => Typing::Later(a),
    }
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
        assert_eq!(typed_text("tab\tcompletes"), "tab completes");
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
