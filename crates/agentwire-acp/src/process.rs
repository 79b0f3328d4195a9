//! One ACP agent process: spawned in a process group of its own, with its own environment and working
//! directory; its stdio a line transport (each line bounded) for the ACP connection, initialized once. The
//! agent's session updates and permission requests are routed to the turn of their session. The
//! connection's dispatch loop never waits on a turn: what it receives is queued for the turn, which reads
//! it in order (an update always before the response of its prompt).

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    ClientCapabilities, Implementation, InitializeRequest, RequestPermissionOutcome,
    RequestPermissionRequest, RequestPermissionResponse, SessionId, SessionNotification,
    SessionUpdate,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, Client, Lines};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot, watch};

/// The longest line (one JSON-RPC message) taken from an agent: 16 MiB, room for a file's content in a
/// tool call's update. A longer one ends the connection (the agent is restarted for the next turn) rather
/// than grow the daemon's memory without bound.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;
/// The longest line of the agent's stderr logged; the rest of the line is dropped.
pub const MAX_STDERR_LINE_BYTES: usize = 4096;
/// How long a new process has to answer `initialize`: a minute, time for a first start that fetches the
/// agent (an `npx` adapter); past it the start fails and the process group is killed.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a process has to exit once its stdin is closed at the daemon's stop, before its group is killed.
pub const STOP_GRACE: Duration = Duration::from_secs(2);

/// What the agent sends about one session.
pub(crate) enum Incoming {
    /// A `session/update`.
    Update(Box<SessionUpdate>),
    /// A `session/request_permission`, answered through the responder.
    Permission(
        Box<(
            RequestPermissionRequest,
            Responder<RequestPermissionResponse>,
        )>,
    ),
}

/// The turns listening, by session.
#[derive(Default)]
struct Routes {
    by_session: Mutex<HashMap<Arc<str>, mpsc::UnboundedSender<Incoming>>>,
}

impl Routes {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, mpsc::UnboundedSender<Incoming>>> {
        self.by_session.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands `msg` to the turn of `session`. Nobody listening: an update is dropped (it belongs to no turn
    /// of ours), a permission request answered cancelled (nobody can grant it).
    fn deliver(&self, session: &SessionId, msg: Incoming) {
        let tx = self.lock().get(&session.0).cloned();
        let unsent = match tx {
            Some(tx) => tx.send(msg).err().map(|e| e.0),
            None => Some(msg),
        };
        match unsent {
            Some(Incoming::Permission(p)) => {
                let (_, responder) = *p;
                let _ = responder.respond(RequestPermissionResponse::new(
                    RequestPermissionOutcome::Cancelled,
                ));
            }
            Some(Incoming::Update(_)) => {
                tracing::debug!(session = %session.0, "an ACP update for no running turn");
            }
            None => {}
        }
    }

    fn close_all(&self) {
        self.lock().clear();
    }
}

/// A turn's listening on its session, until dropped.
pub(crate) struct Route {
    routes: Arc<Routes>,
    session: Arc<str>,
}

impl Drop for Route {
    fn drop(&mut self) {
        self.routes.lock().remove(&self.session);
    }
}

/// Kills a process group, until its leader is seen to exit (then its id may be reused).
#[derive(Default)]
struct Group(Mutex<Option<u32>>);

impl Group {
    fn kill(&self) {
        let pid = *self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = pid.and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
            let _ = rustix::process::kill_process_group(p, rustix::process::Signal::KILL);
        }
    }

    fn exited(&self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// How an agent's process runs.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The agent's name, in logs.
    pub name: String,
    /// The program and its arguments.
    pub command: Vec<String>,
    /// Its whole environment.
    pub env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    /// Its working directory, and every session's `cwd` (absolute).
    pub cwd: PathBuf,
}

/// A running agent process and its ACP connection.
pub(crate) struct Process {
    /// The connection: requests and notifications to the agent.
    pub(crate) cx: ConnectionTo<Agent>,
    /// Whether the agent offers `session/load` (its `loadSession` capability).
    pub(crate) loads_sessions: bool,
    routes: Arc<Routes>,
    group: Arc<Group>,
    /// True once the process has exited and its stderr is read.
    ended: watch::Receiver<bool>,
    /// Set to end the connection (the daemon's stop, or the process gone).
    close: Arc<watch::Sender<bool>>,
    /// The last line the agent wrote on its stderr: what a failure says of why it went.
    last_stderr: Arc<Mutex<Option<String>>>,
}

/// Why an ACP agent's process did not start and answer `initialize` ([`Process::start`]).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Its `command` is empty.
    #[error("the agent has no command")]
    NoCommand,
    /// Its working directory could not be made.
    #[error("cannot make its directory {}: {source}", dir.display())]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// Why not.
        #[source]
        source: std::io::Error,
    },
    /// Its program could not be started.
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why not.
        #[source]
        source: std::io::Error,
    },
    /// Its stdin, stdout or stderr was not piped.
    #[error("its stdio could not be piped")]
    NoStdio,
    /// The process or its connection ended before `initialize` was answered.
    #[error("it ended before it answered initialize{}", said(.last_words))]
    Ended {
        /// The last line it wrote on its stderr.
        last_words: Option<String>,
    },
    /// `initialize` was not answered within [`START_TIMEOUT`].
    #[error("it did not answer initialize within {} s{}", START_TIMEOUT.as_secs(), said(.last_words))]
    NotInTime {
        /// The last line it wrote on its stderr.
        last_words: Option<String>,
    },
}

/// An agent's last words as a failure says them after what went wrong: ` (its last words: …)`, or nothing.
fn said(last_words: &Option<String>) -> String {
    last_words
        .as_ref()
        .map(|l| format!(" (its last words: {l})"))
        .unwrap_or_default()
}

impl Process {
    /// Starts the agent `launch` names and initializes its connection.
    pub(crate) async fn start(launch: &Launch) -> Result<Arc<Process>, StartError> {
        let Some((program, args)) = launch.command.split_first() else {
            return Err(StartError::NoCommand);
        };
        std::fs::create_dir_all(&launch.cwd).map_err(|source| StartError::Dir {
            dir: launch.cwd.clone(),
            source,
        })?;
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .env_clear()
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&launch.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| StartError::Spawn {
                program: program.clone(),
                source,
            })?;
        let group = Arc::new(Group(Mutex::new(child.id())));
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            group.kill();
            return Err(StartError::NoStdio);
        };
        let last_stderr = Arc::new(Mutex::new(None));
        let stderr_read =
            tokio::spawn(log_stderr(stderr, launch.name.clone(), last_stderr.clone()));
        let routes = Arc::new(Routes::default());
        let (close_tx, mut close_rx) = watch::channel(false);
        let close = Arc::new(close_tx);
        let (ended_tx, ended) = watch::channel(false);
        let (reaped, closing, gone) = (group.clone(), close.clone(), routes.clone());
        let name = launch.name.clone();
        tokio::spawn(async move {
            let status = child.wait().await;
            reaped.exited();
            match status {
                Ok(s) => {
                    tracing::info!(agent = %name, status = %s, "the ACP agent's process ended")
                }
                Err(e) => {
                    tracing::warn!(agent = %name, error = %e, "could not wait for the ACP agent's process")
                }
            }
            // Its last words are read before its end is told; its connection ends with it.
            let _ = tokio::time::timeout(STOP_GRACE, stderr_read).await;
            gone.close_all();
            let _ = ended_tx.send(true);
            let _ = closing.send(true);
        });

        let (to_updates, to_permissions) = (routes.clone(), routes.clone());
        let (ready_tx, ready_rx) = oneshot::channel();
        let outgoing = futures_util::sink::unfold(stdin, |mut w, line: String| async move {
            w.write_all(line.as_bytes()).await?;
            w.write_all(b"\n").await?;
            w.flush().await?;
            Ok::<_, std::io::Error>(w)
        });
        let transport = Lines::new(Box::pin(outgoing), Box::pin(bounded_lines(stdout)));
        let info = Implementation::new("agentwire", env!("CARGO_PKG_VERSION"));
        let connection = Client
            .v1()
            .name("agentwire")
            .on_receive_notification(
                async move |n: SessionNotification, _cx| {
                    to_updates.deliver(&n.session_id, Incoming::Update(Box::new(n.update)));
                    Ok(())
                },
                agent_client_protocol::on_receive_notification!(),
            )
            .on_receive_request(
                async move |req: RequestPermissionRequest, responder, _cx| {
                    let session = req.session_id.clone();
                    to_permissions
                        .deliver(&session, Incoming::Permission(Box::new((req, responder))));
                    Ok(())
                },
                agent_client_protocol::on_receive_request!(),
            )
            .connect_with(transport, async move |cx: ConnectionTo<Agent>| {
                // No file system and no terminal are offered: the agent works in its own directory.
                let init = cx
                    .send_request(
                        InitializeRequest::new(ProtocolVersion::V1)
                            .client_capabilities(ClientCapabilities::new())
                            .client_info(info),
                    )
                    .block_task()
                    .await?;
                tracing::debug!(agent = ?init.agent_info, "an ACP agent initialized");
                let _ = ready_tx.send((cx.clone(), init.agent_capabilities.load_session));
                let _ = close_rx.wait_for(|c| *c).await;
                Ok(())
            });
        let name = launch.name.clone();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::info!(agent = %name, error = %e, "the ACP connection ended");
            }
        });
        let started = tokio::time::timeout(START_TIMEOUT, ready_rx).await;
        if !matches!(started, Ok(Ok(_))) {
            // Failed: the process is ended, and its last words read, before the failure says them.
            let _ = close.send(true);
            group.kill();
            let mut gone = ended.clone();
            let _ = tokio::time::timeout(STOP_GRACE, gone.wait_for(|e| *e)).await;
        }
        let last_words = || {
            last_stderr
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
        };
        match started {
            Ok(Ok((cx, loads_sessions))) => Ok(Arc::new(Process {
                cx,
                loads_sessions,
                routes,
                group,
                ended,
                close,
                last_stderr,
            })),
            Ok(Err(_)) => Err(StartError::Ended {
                last_words: last_words(),
            }),
            Err(_) => Err(StartError::NotInTime {
                last_words: last_words(),
            }),
        }
    }

    /// Whether its connection still runs.
    pub(crate) fn alive(&self) -> bool {
        !*self.ended.borrow()
    }

    /// Waits until its connection ends.
    pub(crate) async fn ended(&self) {
        let mut ended = self.ended.clone();
        let _ = ended.wait_for(|e| *e).await;
    }

    /// Listens to `session`'s updates and permission requests until the route is dropped.
    pub(crate) fn listen(&self, session: &SessionId) -> (Route, mpsc::UnboundedReceiver<Incoming>) {
        let (tx, rx) = mpsc::unbounded_channel();
        self.routes.lock().insert(session.0.clone(), tx);
        (
            Route {
                routes: self.routes.clone(),
                session: session.0.clone(),
            },
            rx,
        )
    }

    /// Why it is gone, as a failure says it.
    pub(crate) fn gone(&self) -> String {
        let said = self
            .last_stderr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .map(|l| format!(" (its last words: {l})"))
            .unwrap_or_default();
        format!("the ACP agent's process ended{said}")
    }

    /// Kills its whole process group now.
    pub(crate) fn kill(&self) {
        self.group.kill();
    }

    /// Ends it: its stdin is closed (an agent exits at the end of its input), and its group killed after
    /// [`STOP_GRACE`].
    pub(crate) async fn stop(&self) {
        let _ = self.close.send(true);
        let _ = tokio::time::timeout(STOP_GRACE, self.ended()).await;
        self.group.kill();
    }
}

/// The lines of `out`, each without its newline, at most [`MAX_LINE_BYTES`] long; a longer one, or one
/// that is not UTF-8, ends the stream with an error.
fn bounded_lines(
    out: tokio::process::ChildStdout,
) -> impl futures_util::Stream<Item = std::io::Result<String>> + Send + 'static {
    let reader = BufReader::new(out);
    futures_util::stream::unfold(Some(reader), |reader| async move {
        let mut reader = reader?;
        match read_line(&mut reader, MAX_LINE_BYTES, Overlong::Refuse).await {
            Ok(None) => None,
            Ok(Some(bytes)) => match String::from_utf8(bytes) {
                Ok(line) => Some((Ok(line), Some(reader))),
                Err(_) => Some((
                    Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "a line from the agent is not UTF-8",
                    )),
                    None,
                )),
            },
            Err(e) => Some((Err(e), None)),
        }
    })
}

/// What [`read_line`] does with a line longer than its bound.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Overlong {
    /// Refuses it: an error.
    Refuse,
    /// Keeps its first bytes and skips the rest.
    Clip,
}

/// One line of `r` without its newline (`None` at the end), at most `max` bytes.
async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
    max: usize,
    overlong: Overlong,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    let mut seen = false;
    loop {
        let available = r.fill_buf().await?;
        if available.is_empty() {
            return Ok(seen.then_some(line));
        }
        seen = true;
        let (take, end) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (i, true),
            None => (available.len(), false),
        };
        let room = max.saturating_sub(line.len());
        if take > room && overlong == Overlong::Refuse {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a line from the agent is longer than {max} bytes"),
            ));
        }
        line.extend_from_slice(&available[..take.min(room)]);
        r.consume(take + usize::from(end));
        if end {
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(Some(line));
        }
    }
}

/// Logs the agent's stderr, a line at a time (each cut at [`MAX_STDERR_LINE_BYTES`]), keeping the last.
async fn log_stderr(
    err: tokio::process::ChildStderr,
    name: String,
    last: Arc<Mutex<Option<String>>>,
) {
    let mut reader = BufReader::new(err);
    loop {
        let line = match read_line(&mut reader, MAX_STDERR_LINE_BYTES, Overlong::Clip).await {
            Ok(Some(l)) => l,
            Ok(None) | Err(_) => return,
        };
        let line = String::from_utf8_lossy(&line).into_owned();
        if line.trim().is_empty() {
            continue;
        }
        tracing::debug!(agent = %name, line = %line, "ACP agent stderr");
        *last.lock().unwrap_or_else(|p| p.into_inner()) = Some(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_read_without_their_newline_and_a_long_one_is_refused() {
        let refuse = Overlong::Refuse;
        let mut r = BufReader::new(&b"one\r\ntwo\n\nthree"[..]);
        assert_eq!(
            read_line(&mut r, 10, refuse).await.unwrap(),
            Some(b"one".to_vec())
        );
        assert_eq!(
            read_line(&mut r, 10, refuse).await.unwrap(),
            Some(b"two".to_vec())
        );
        assert_eq!(read_line(&mut r, 10, refuse).await.unwrap(), Some(vec![]));
        assert_eq!(
            read_line(&mut r, 10, refuse).await.unwrap(),
            Some(b"three".to_vec())
        );
        assert_eq!(read_line(&mut r, 10, refuse).await.unwrap(), None);
        let mut long = BufReader::with_capacity(4, &b"abcdefghij\nk\n"[..]);
        assert!(read_line(&mut long, 8, refuse).await.is_err());
        // Clipped: its first bytes, and the next line whole.
        let mut long = BufReader::with_capacity(4, &b"abcdefghij\nk\n"[..]);
        assert_eq!(
            read_line(&mut long, 8, Overlong::Clip).await.unwrap(),
            Some(b"abcdefgh".to_vec())
        );
        assert_eq!(
            read_line(&mut long, 8, Overlong::Clip).await.unwrap(),
            Some(b"k".to_vec())
        );
    }
}
