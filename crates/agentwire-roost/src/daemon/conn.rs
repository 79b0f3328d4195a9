//! One socket connection: lines in (bounded), requests answered in order, answers and events out: an
//! event that need wait for nothing is written straight onto the socket by the task that has it (a
//! message from another session reaches its target with no hop to the target's task), the rest through a
//! queue whose unread bytes are bounded, and never two lines interleaved ([`super::state::Wire`]). A connection that says `hello` or `report` is a session (an
//! agent); the controller's ops are refused on it (`unsupported`), and on any connection of a job's
//! process or of another user (`unauthorized`, [`super::peer`]). A connection must identify itself (a
//! request answered ok: `hello`, an accepted `report`, a controller's op) within [`IDENTIFY_TIMEOUT`],
//! except up to [`SILENT_CONTROLLERS_KEPT`] of the owner's controllers.

use super::peer::Peer;
use super::state::{Outbox, Queued, Shared, Wire};
use crate::proto::op::Op;
use crate::proto::report::Report;
use crate::proto::wire::{
    self, err_line, ok_line, parse_request, Args, ErrorCode, Refusal, MAX_LINE_BYTES,
};
use serde_json::{json, Value};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, Notify};
use tokio::time::Duration;

/// How long a new connection has to identify itself (its first request answered ok) before it is closed:
/// every client sends its first request as soon as it connects, so 5 s is generous even on a loaded
/// machine, and connections that say nothing do not hold places of the 1,024 for ever. The owner's
/// controllers are held to it only past [`SILENT_CONTROLLERS_KEPT`].
pub const IDENTIFY_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections of the owner's controllers (the daemon's user, none of the jobs' processes) that may stay
/// silent past [`IDENTIFY_TIMEOUT`]: a person's script or a test harness that connects on the ready line
/// and sends its first request once the fleet is back (hosted jobs and the concierge come back seconds
/// after a restart) keeps its connection, rather than finding it closed (a broken pipe on its first
/// request). Past this many, silent ones are closed as any other's, so they never hold more than half of
/// the controllers' [`CONTROLLER_RESERVE`](crate::proto::wire::CONTROLLER_RESERVE) (a job's process that escaped
/// its group passes for a controller).
pub const SILENT_CONTROLLERS_KEPT: usize = crate::proto::wire::CONTROLLER_RESERVE / 2;
/// The largest line buffer a connection keeps between requests: a longer line (up to the 4 MiB limit) has
/// its buffer freed once answered, so 1,024 idle connections do not each hold megabytes.
const KEPT_LINE_BUFFER_BYTES: usize = 64 * 1024;
/// The protocol version this daemon speaks.
pub const PROTOCOL_VERSION: u64 = 1;
/// What the daemon offers in `hello`: every capability it serves, so an agent that checks them uses it all
/// (the spec's six, and the task board's `tasks`).
const CAPABILITIES: [&str; 7] = [
    "replies",
    "steer",
    "agent-items",
    "peers",
    "spawn",
    "handback",
    "tasks",
];
enum Read {
    /// A whole line is in the buffer (without its newline).
    Line,
    TooLong,
    Closed,
}

/// The read buffer of one connection. Requests and reports are lines of small JSON; a longer line still
/// reads in whole (it grows the line buffer, up to [`MAX_LINE_BYTES`]). tokio's default of 8 KiB made an
/// idle connection cost 11.6 KiB; this, 4.7 KiB (docs/benchmarks.md, the memory benchmark).
const READ_BUFFER_BYTES: usize = 1024;

/// Reads one line of at most [`MAX_LINE_BYTES`]. Cancel-safe: a partial line stays in `buf` (and the
/// rest in the reader) for the next call.
async fn read_line(r: &mut BufReader<tokio::net::unix::OwnedReadHalf>, buf: &mut Vec<u8>) -> Read {
    loop {
        let available = match r.fill_buf().await {
            Ok([]) => return Read::Closed,
            Ok(b) => b,
            Err(_) => return Read::Closed,
        };
        match available.iter().position(|b| *b == b'\n') {
            Some(i) => {
                buf.extend_from_slice(&available[..i]);
                r.consume(i + 1);
                if buf.len() > MAX_LINE_BYTES {
                    return Read::TooLong;
                }
                return Read::Line;
            }
            None => {
                let n = available.len();
                buf.extend_from_slice(available);
                r.consume(n);
                if buf.len() > MAX_LINE_BYTES {
                    return Read::TooLong;
                }
            }
        }
    }
}

/// Writes a whole line on the connection's socket, after the rest of any line another task began
/// ([`Wire::rest`]); `false` when the connection is to end instead (it failed, its client left too much
/// unread, or the daemon stops). An empty `bytes` writes only such a rest.
async fn send<K: Future, S: Future>(
    wire: &Wire,
    queued: &AtomicUsize,
    bytes: &[u8],
    mut killed: Pin<&mut K>,
    mut stopped: Pin<&mut S>,
) -> bool {
    loop {
        if let Some(rest) = wire.take_rest() {
            // Its writer handed the right to write over with it.
            let ok = write_all(wire, &rest, killed.as_mut(), stopped.as_mut()).await;
            queued.fetch_sub(rest.len(), Ordering::SeqCst);
            wire.release();
            if !ok {
                return false;
            }
            continue;
        }
        if bytes.is_empty() {
            return true;
        }
        if wire.claim() {
            break;
        }
        // Another task is in a write that does not wait (or about to leave a rest): a moment.
        tokio::task::yield_now().await;
    }
    let ok = write_all(wire, bytes, killed, stopped).await;
    wire.release();
    ok
}

/// Writes all of `bytes`, waiting while the socket is full.
async fn write_all<K: Future, S: Future>(
    wire: &Wire,
    mut bytes: &[u8],
    mut killed: Pin<&mut K>,
    mut stopped: Pin<&mut S>,
) -> bool {
    while !bytes.is_empty() {
        // Most lines fit in the socket's buffer at once: written without building a future.
        match wire.half.try_write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                tokio::select! {
                    w = wire.half.writable() => if w.is_err() { return false },
                    _ = killed.as_mut() => return false,
                    _ = stopped.as_mut() => return false,
                }
            }
            Err(_) => return false,
        }
    }
    true
}

/// Serves one connection until it closes.
pub(super) async fn serve(
    shared: Arc<Shared>,
    stream: UnixStream,
    peer: Peer,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let (read, write) = stream.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Queued>();
    let queued = Arc::new(AtomicUsize::new(0));
    let kill = Arc::new(Notify::new());
    let wire = Arc::new(Wire {
        half: write,
        writing: Default::default(),
        rest: Default::default(),
        answering: Default::default(),
    });
    let outbox = Outbox {
        tx,
        queued: queued.clone(),
        kill: kill.clone(),
        wire: wire.clone(),
    };
    let conn = shared.open_conn(outbox.clone());
    let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, read);
    let mut buf = Vec::new();
    let mut session = false;
    let mut capabilities: Vec<String> = Vec::new();
    // Made once: a Notified made per request costs a lock to register and another to drop.
    let killed = kill.notified();
    let stopped = stop.changed();
    let unidentified = tokio::time::sleep(IDENTIFY_TIMEOUT);
    let mut identified = false;
    // Counted among the silent controllers until it identifies itself or ends.
    let mut silent = peer
        .may_control()
        .then(|| Silent::count(&shared.silent_controllers, conn));
    tokio::pin!(killed, stopped, unidentified);
    // One task reads requests, writes their answers directly (no hop to another task on the hot path),
    // and writes the events other tasks queue for this connection.
    loop {
        let line = tokio::select! {
            biased;
            _ = &mut killed => {
                tracing::warn!(conn, "dropped a roost client that left too much unread");
                break;
            }
            _ = &mut stopped => break,
            _ = &mut unidentified, if !identified => {
                if silent.as_ref().is_some_and(Silent::kept) {
                    // The owner's, and there is room: it waits on (looked at again a timeout later).
                    unidentified
                        .as_mut()
                        .reset(tokio::time::Instant::now() + IDENTIFY_TIMEOUT);
                    continue;
                }
                tracing::debug!(conn, "closed a roost connection that did not identify itself in time");
                break;
            }
            Some(event) = rx.recv() => {
                // A client that stops reading blocks this write; past the unread limit it is dropped.
                let line = match &event {
                    Queued::Line(l) => l.as_bytes(),
                    Queued::Rest => &[],
                };
                if !send(&wire, &queued, line, killed.as_mut(), stopped.as_mut()).await {
                    break;
                }
                queued.fetch_sub(line.len(), Ordering::SeqCst);
                continue;
            }
            r = read_line(&mut reader, &mut buf) => r,
        };
        match line {
            Read::Line => {}
            Read::TooLong => {
                tracing::warn!(conn, "a request line over 4 MiB ended the connection");
                break;
            }
            Read::Closed => break,
        }
        let answer = if buf.iter().all(u8::is_ascii_whitespace) {
            None
        } else {
            wire.answering.store(true, Ordering::SeqCst);
            let (line, ok) = answer(&shared, conn, &peer, &mut session, &mut capabilities, &buf);
            identified |= ok;
            if identified {
                silent = None;
            }
            Some(line)
        };
        // The buffer is kept for the next line (no allocation per request), unless a long line grew it.
        if buf.capacity() > KEPT_LINE_BUFFER_BYTES {
            buf = Vec::new();
        } else {
            buf.clear();
        }
        let Some(answer) = answer else {
            continue;
        };
        let sent = send(
            &wire,
            &queued,
            answer.as_bytes(),
            killed.as_mut(),
            stopped.as_mut(),
        )
        .await;
        // What the request queued for this connection follows, in the next turns of the loop.
        wire.answering.store(false, Ordering::SeqCst);
        if !sent {
            break;
        }
    }
    shared.close_conn(conn);
}

/// A connection counted among the silent controllers while it lives (dropped: counted no more).
struct Silent {
    all: Arc<std::sync::Mutex<std::collections::BTreeSet<u64>>>,
    conn: u64,
}

impl Silent {
    fn count(all: &Arc<std::sync::Mutex<std::collections::BTreeSet<u64>>>, conn: u64) -> Silent {
        all.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(conn);
        Silent {
            all: all.clone(),
            conn,
        }
    }

    /// Whether this silent connection is one of the newest [`SILENT_CONTROLLERS_KEPT`]: past that many,
    /// the oldest are the ones closed at their deadline, whichever deadline the runtime looks at first.
    fn kept(&self) -> bool {
        let all = self
            .all
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        all.range(self.conn..).count() <= SILENT_CONTROLLERS_KEPT
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.all
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.conn);
    }
}

/// The answer line to one request line, and whether it is ok.
fn answer(
    shared: &Shared,
    conn: u64,
    peer: &Peer,
    session: &mut bool,
    capabilities: &mut Vec<String>,
    line: &[u8],
) -> (String, bool) {
    if let Some(r) = wire::parse_report_line(line) {
        return match report(
            shared,
            conn,
            session,
            capabilities,
            &r.job,
            &r.token,
            r.report,
        ) {
            Ok(v) => (ok_line(&r.id, &v), true),
            Err(e) => (err_line(&r.id, &e), false),
        };
    }
    match parse_request(line) {
        Ok(req) => match handle(
            shared,
            conn,
            peer,
            session,
            capabilities,
            &req.op,
            &req.args,
        ) {
            Ok(v) => (ok_line(&req.id, &v), true),
            Err(r) => (err_line(&req.id, &r), false),
        },
        Err(bad) => (err_line(&bad.id, &bad.refusal), false),
    }
}

fn handle(
    shared: &Shared,
    conn: u64,
    peer: &Peer,
    session: &mut bool,
    capabilities: &mut Vec<String>,
    op: &str,
    args: &serde_json::Map<String, Value>,
) -> Result<Value, Refusal> {
    let op = Op::parse(op)?;
    // The feed is the concierge's too: it carries every tree's messages.
    let concierge_reads = op == Op::Events && *session && shared.is_concierge_conn(conn);
    if op.is_controllers() && !concierge_reads {
        let op = op.as_str();
        if *session {
            return Err(Refusal::new(
                ErrorCode::Unsupported,
                format!("`{op}` is a controller's op; this connection speaks for a job"),
            ));
        }
        if !peer.owner {
            return Err(Refusal::new(
                ErrorCode::Unauthorized,
                "only the socket's owner may control jobs",
            ));
        }
        if let Some(job) = &peer.job {
            return Err(Refusal::new(
                ErrorCode::Unauthorized,
                format!("`{op}` is a controller's op, and this connection is from job {job}'s processes: a job may not control jobs"),
            ));
        }
    }
    match op {
        Op::Hello => {
            *session = true;
            if let Some(Value::Array(c)) = args.get("capabilities") {
                *capabilities = c
                    .iter()
                    .filter_map(|x| x.as_str())
                    .take(32)
                    .map(|s| wire::fold_name(s).chars().take(64).collect())
                    .collect();
            }
            Ok(json!({
                "protocol": PROTOCOL_VERSION,
                "daemon": { "name": "agentwire", "version": env!("CARGO_PKG_VERSION") },
                "capabilities": CAPABILITIES,
            }))
        }
        Op::Report => {
            *session = true;
            let id = args.req_str("id")?;
            let token = args.req_str("token")?;
            let parsed = Report::parse(args.get("report").unwrap_or(&Value::Null));
            report(shared, conn, session, capabilities, id, token, parsed)
        }
        Op::Ack => {
            let id = args.req_str("id")?;
            let token = args.req_str("token")?;
            let exact = match args.get("exact") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err(Refusal::bad("`exact` is true or false")),
            };
            shared.ack(id, token, args.req_u64("seq")?, exact)
        }
        Op::Dispatch => shared.dispatch(args),
        Op::Conversation => shared.conversation(args),
        Op::Reply => shared.reply(args),
        Op::Lifecycle(what) => shared.lifecycle(what, args.req_str("id")?),
        Op::Rows => Ok(shared.rows()),
        Op::About => Ok(shared.about()),
        Op::Subscribe => Ok(shared.subscribe(conn)),
        Op::Events => shared.events(args),
        Op::Arrange(how) => shared.arrange(how, args),
        Op::Peers => shared.peers(conn),
        Op::PeerRegister => {
            let registered = shared.peer_register(conn, args)?;
            // A session from now on: the controller's ops are refused on it.
            *session = true;
            Ok(registered)
        }
        Op::Send => shared.send(conn, args),
        Op::Spawn => shared.spawn(conn, args),
        Op::Handback => shared.handback(conn, args),
        Op::Watch => shared.watch(conn, args),
        Op::Task => shared.task(conn, *session, peer.may_control(), args),
        Op::Shutdown => Ok(shared.ask_shutdown()),
        Op::Concierge => shared.concierge(args),
        Op::ConciergeAsk => shared.concierge_ask(args),
        Op::ConciergeOwn(own) => shared.concierge_own(conn, own, args),
        Op::ConciergeOrder => shared.concierge_order(conn, !*session && peer.may_control(), args),
        Op::Schedule(what) => shared.schedule_op(what, args),
    }
}

/// `report`, however the line was read: the connection is a session from now on (even when the report
/// is refused, as before any check).
fn report(
    shared: &Shared,
    conn: u64,
    session: &mut bool,
    capabilities: &[String],
    job: &str,
    token: &str,
    report: Result<Report, Refusal>,
) -> Result<Value, Refusal> {
    *session = true;
    shared.report(conn, job, token, report?, capabilities)
}
