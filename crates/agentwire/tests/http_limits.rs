//! The HTTP server's connection bounds on the real daemon, from outside: silent sockets, half-sent request
//! heads and idle keep-alive connections closed after the header read timeout while an event stream lives
//! on; a flood of sockets without the token at the daemon's fd limit of 1,024 held to the unauthenticated
//! cap while an API request with the token, a NIP-XX prompt on the relay and `jobs ls` still work; the cap
//! on the token holder's connections answering `503`; a client that never reads its answers closed after the
//! write stall timeout; wrong tokens counted and logged, bounded, never with the token; on stop, event
//! streams ending and a request held open delaying the stop by the shutdown grace at most.

mod common;

use agentwire_http::{
    DEFAULT_MAX_CONNECTIONS, HEADER_READ_TIMEOUT, MAX_UNAUTHENTICATED_CONNECTIONS, SHUTDOWN_GRACE,
    WRITE_STALL_TIMEOUT, WRONG_TOKEN_LOG_INTERVAL,
};
use common::{Client, Daemon};
use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How much later than its bound a close may be seen (a loaded machine, two cores shared).
const SLACK: Duration = Duration::from_secs(3);

/// The daemon's HTTP address (`127.0.0.1:port`) and token.
fn http_of(d: &Daemon) -> (String, String) {
    let base = d.ready["http"].as_str().expect("the ready line names http");
    let token = d.ready["http_token"].as_str().expect("and its token");
    (
        base.trim_start_matches("http://").to_string(),
        token.to_string(),
    )
}

/// A request head for `path` on `addr`, with the bearer token when given.
fn head(addr: &str, path: &str, token: Option<&str>) -> String {
    let auth = token.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
    format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\n{auth}\r\n")
}

/// One request on an open (keep-alive) connection: the status and the body.
async fn request(s: &mut TcpStream, addr: &str, path: &str, token: Option<&str>) -> (u16, String) {
    s.write_all(head(addr, path, token).as_bytes())
        .await
        .unwrap();
    read_answer(s).await
}

/// One answer (a head with `content-length`, and its body).
async fn read_answer(s: &mut TcpStream) -> (u16, String) {
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_string();
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            if got.len() >= end + 4 + len {
                let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
                let body = String::from_utf8_lossy(&got[end + 4..end + 4 + len]).to_string();
                return (status, body);
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .expect("an answer within 10 s")
            .expect("the connection stays open");
        assert!(n > 0, "the connection closed before its answer: {got:?}");
        got.extend_from_slice(&buf[..n]);
    }
}

/// Reads until the server closes the connection (EOF or a reset), up to `wait`: when it did, from `since`.
async fn closed_after(mut s: TcpStream, since: Instant, wait: Duration) -> Option<Duration> {
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(since.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

/// Whether the server has closed a (nonblocking) socket the test never read from: it reads as EOF (or has
/// bytes, an answer sent before the close), or is reset.
fn server_closed(s: &std::net::TcpStream) -> bool {
    let mut buf = [0u8; 1];
    match s.peek(&mut buf) {
        Ok(_) => true,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_sockets_half_sent_heads_and_idle_keep_alives_are_closed_while_an_event_stream_lives(
) {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let (addr, token) = http_of(&d);

    // The token holder's event stream, and a keep-alive connection after one answer.
    let mut events = TcpStream::connect(&addr).await.unwrap();
    events
        .write_all(head(&addr, "/api/v1/events", Some(&token)).as_bytes())
        .await
        .unwrap();
    let mut kept = TcpStream::connect(&addr).await.unwrap();
    assert_eq!(
        request(&mut kept, &addr, "/api/v1/agents", Some(&token))
            .await
            .0,
        200
    );

    // Under the unauthenticated cap, so none is closed to make room: only the timeout closes them.
    let n = MAX_UNAUTHENTICATED_CONNECTIONS / 2 - 1;
    let started = Instant::now();
    let mut waiting = Vec::new();
    for i in 0..2 * n {
        let mut s = TcpStream::connect(&addr).await.unwrap();
        if i % 2 == 1 {
            // A head that never ends, a byte now and then.
            s.write_all(format!("GET / HTTP/1.1\r\nhost: {addr}\r\nx-slow: ").as_bytes())
                .await
                .unwrap();
        }
        waiting.push(s);
    }
    let trickle = waiting.pop().unwrap();
    let trickled = tokio::spawn(async move {
        let mut s = trickle;
        let since = Instant::now();
        while since.elapsed() < HEADER_READ_TIMEOUT + SLACK {
            if s.write_all(b"a").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        closed_after(s, started, SLACK).await
    });
    let wait = HEADER_READ_TIMEOUT + 2 * SLACK;
    let mut closes: Vec<_> = waiting
        .into_iter()
        .map(|s| tokio::spawn(closed_after(s, started, wait)))
        .collect();
    closes.push(trickled);
    closes.push(tokio::spawn(closed_after(kept, started, wait)));
    for (i, c) in closes.into_iter().enumerate() {
        let after = c
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("connection {i} still open after {wait:?}"));
        assert!(
            after >= HEADER_READ_TIMEOUT - Duration::from_millis(500),
            "connection {i} closed after {after:?}, before the header read timeout"
        );
        assert!(
            after <= HEADER_READ_TIMEOUT + SLACK,
            "connection {i} closed after {after:?}"
        );
    }

    // The event stream outlived them all: a turn started now is on it.
    let mut c = Client::new(&d.relay, d.agent).await;
    assert_eq!(
        c.ask("still streaming").await.text(),
        "You said: still streaming"
    );
    let mut seen = String::new();
    let mut buf = [0u8; 8192];
    while !seen.contains("still streaming") {
        let n = tokio::time::timeout(Duration::from_secs(10), events.read(&mut buf))
            .await
            .expect("the turn on the event stream")
            .unwrap();
        assert!(n > 0, "the event stream was closed: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_without_the_token_at_1024_fds_leaves_the_api_the_relay_and_the_roost_socket_working(
) {
    const FLOOD: usize = 1_100;
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    // The fd limit a systemd service gets unless its unit says otherwise.
    let limited = std::process::Command::new("prlimit")
        .args(["--pid", &d.child.id().to_string(), "--nofile=1024:1024"])
        .status();
    match limited {
        Ok(s) => assert!(s.success(), "prlimit"),
        Err(e) => eprintln!("the daemon keeps its fd limit: prlimit is not here ({e})"),
    }
    let (addr, token) = http_of(&d);

    // A connection of the token holder's from before the flood.
    let mut kept = TcpStream::connect(&addr).await.unwrap();
    assert_eq!(
        request(&mut kept, &addr, "/api/v1/agents", Some(&token))
            .await
            .0,
        200
    );

    let flood_addr = addr.clone();
    let flood = tokio::task::spawn_blocking(move || {
        let sock: std::net::SocketAddr = flood_addr.parse().unwrap();
        let mut held = Vec::new();
        for i in 0..FLOOD {
            let Ok(mut s) = std::net::TcpStream::connect_timeout(&sock, Duration::from_secs(1))
            else {
                continue;
            };
            if i % 3 == 0 {
                let _ = s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n");
            }
            s.set_nonblocking(true).unwrap();
            held.push(s);
        }
        held
    })
    .await
    .unwrap();
    assert!(
        flood.len() > 1_000,
        "{} of the flood connected",
        flood.len()
    );

    // The server holds at most its unauthenticated cap of them: the rest were closed as newer ones came.
    let deadline = Instant::now() + Duration::from_secs(5);
    let open = loop {
        let open = flood.iter().filter(|s| !server_closed(s)).count();
        if open <= MAX_UNAUTHENTICATED_CONNECTIONS || Instant::now() > deadline {
            break open;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        open <= MAX_UNAUTHENTICATED_CONNECTIONS,
        "{open} of {} flood connections still open",
        flood.len()
    );

    // The token holder's connection from before, a new one with the token, the relay and the roost socket.
    assert_eq!(
        request(&mut kept, &addr, "/api/v1/agents", Some(&token))
            .await
            .0,
        200
    );
    let mut fresh = TcpStream::connect(&addr).await.unwrap();
    let (status, body) = request(&mut fresh, &addr, "/api/v1/turns", Some(&token)).await;
    assert_eq!(status, 200, "{body}");
    let mut c = Client::new(&d.relay, d.agent).await;
    assert_eq!(c.ask("hello there").await.text(), "You said: hello there");
    let jobs = common::roost_jobs(dir.path().join("roost.sock").to_str().unwrap(), &["ls"]);
    common::json_of(&jobs);
    assert_eq!(common::health(&d.relay).0, 200);
    drop(flood);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_cap_of_the_token_holders_connections_a_new_one_is_answered_503() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let (addr, token) = http_of(&d);
    let mut held = Vec::new();
    for _ in 0..DEFAULT_MAX_CONNECTIONS {
        let mut s = TcpStream::connect(&addr).await.unwrap();
        assert_eq!(
            request(&mut s, &addr, "/api/v1/agents", Some(&token))
                .await
                .0,
            200
        );
        held.push(s);
    }
    let mut over = TcpStream::connect(&addr).await.unwrap();
    let (status, body) = request(&mut over, &addr, "/api/v1/agents", Some(&token)).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("\"error\""), "{body}");
    assert!(
        closed_after(over, Instant::now(), SLACK).await.is_some(),
        "a refusal closes"
    );
    // The held ones are still served, and one closed gives its place back.
    assert_eq!(
        request(&mut held[0], &addr, "/api/v1/agents", Some(&token))
            .await
            .0,
        200
    );
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut s = TcpStream::connect(&addr).await.unwrap();
        s.write_all(head(&addr, "/api/v1/agents", Some(&token)).as_bytes())
            .await
            .unwrap();
        match read_answer(&mut s).await.0 {
            200 => break,
            503 if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(50)).await,
            other => panic!("{other} after a place was given back"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_its_answers_is_closed_after_the_write_stall_timeout() {
    const REQUESTS: usize = 2_000;
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let (addr, _) = http_of(&d);
    let (mut s, mut to_server) = TcpStream::connect(&addr).await.unwrap().into_split();
    let one = head(&addr, "/hub.js", None);
    // Far more answer than the two sockets' buffers hold (the script is ~25 KiB): pipelined, never read.
    // Written aside (the server reads requests only as it answers them); the writing half is kept open,
    // so the server never sees the client leave.
    let writing = tokio::spawn(async move {
        let _ = to_server.write_all(one.repeat(REQUESTS).as_bytes()).await;
        to_server
    });
    let (status, script) = request(
        &mut TcpStream::connect(&addr).await.unwrap(),
        &addr,
        "/hub.js",
        None,
    )
    .await;
    assert_eq!(status, 200);
    tokio::time::sleep(WRITE_STALL_TIMEOUT + SLACK).await;
    // Reading now drains what was sent before the stall; the server has closed, so not all answers come.
    let mut received = 0usize;
    let mut buf = vec![0u8; 64 * 1024];
    let drained = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received += n,
            }
        }
    })
    .await;
    assert!(
        drained.is_ok(),
        "the connection was not closed ({received} bytes read)"
    );
    drop(tokio::time::timeout(SLACK, writing).await);
    assert!(
        received < REQUESTS * script.len(),
        "all {REQUESTS} answers came ({received} bytes): the stalled connection was never closed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_tokens_are_counted_and_logged_at_most_once_an_interval_never_with_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("daemon.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let d = Daemon::start_logging(dir.path(), &[], &[], Stdio::from(log));
    let (addr, token) = http_of(&d);
    let wrong: Vec<String> = (0..5).map(|i| format!("{i}badc0ffee").repeat(6)).collect();
    let started = Instant::now();
    for w in &wrong {
        let mut s = TcpStream::connect(&addr).await.unwrap();
        assert_eq!(
            request(&mut s, &addr, "/api/v1/agents", Some(w)).await.0,
            401
        );
    }
    // The cookie and the page's ?token= are tokens too.
    let mut s = TcpStream::connect(&addr).await.unwrap();
    s.write_all(
        format!("GET /api/v1/turns HTTP/1.1\r\nhost: {addr}\r\ncookie: agentwire_token=cookiewrongtoken\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    assert_eq!(read_answer(&mut s).await.0, 401);
    assert_eq!(
        request(&mut s, &addr, "/?token=pagewrongtoken", None)
            .await
            .0,
        401
    );
    // The right one counts for nothing.
    assert_eq!(
        request(&mut s, &addr, "/api/v1/agents", Some(&token))
            .await
            .0,
        200
    );
    assert!(
        started.elapsed() < WRONG_TOKEN_LOG_INTERVAL,
        "the wrong tokens took too long to send"
    );

    let metric = |text: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix("agentwire_http_token_failures_total "))
            .map(|v| v.trim().to_string())
    };
    let (_, text) = request(&mut s, &addr, "/metrics", None).await;
    assert_eq!(metric(&text).as_deref(), Some("7"), "{text}");

    let lines = |log: &str| {
        log.lines()
            .filter(|l| l.contains("wrong HTTP API token"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert_eq!(lines(&log).len(), 1, "one line for a burst: {log}");
    assert!(lines(&log)[0].contains("wrong_tokens=1"), "{log}");

    // A later one, after the interval, logs again and says how many went unlogged.
    tokio::time::sleep(
        WRONG_TOKEN_LOG_INTERVAL.saturating_sub(started.elapsed()) + Duration::from_millis(200),
    )
    .await;
    let mut s = TcpStream::connect(&addr).await.unwrap();
    assert_eq!(
        request(&mut s, &addr, "/api/v1/agents", Some(&wrong[0]))
            .await
            .0,
        401
    );
    let (_, text) = request(&mut s, &addr, "/metrics", None).await;
    assert_eq!(metric(&text).as_deref(), Some("8"), "{text}");
    let log = std::fs::read_to_string(&log_path).unwrap();
    let said = lines(&log);
    assert_eq!(said.len(), 2, "{log}");
    assert!(
        said[1].contains("wrong_tokens=8") && said[1].contains("not_logged=6"),
        "{log}"
    );
    for secret in wrong.iter().map(String::as_str).chain([
        "cookiewrongtoken",
        "pagewrongtoken",
        token.as_str(),
    ]) {
        assert!(!log.contains(secret), "the log shows a token: {log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_stop_event_streams_end_and_a_request_held_open_delays_the_stop_at_most_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    let (addr, token) = http_of(&d);
    let mut events = TcpStream::connect(&addr).await.unwrap();
    events
        .write_all(head(&addr, "/api/v1/events", Some(&token)).as_bytes())
        .await
        .unwrap();
    // An answer whose body never comes whole: the request stays in progress.
    let mut held = TcpStream::connect(&addr).await.unwrap();
    held.write_all(
        format!(
            "POST /api/v1/turns/nipxx:{}/answer HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {token}\r\n\
             content-type: application/json\r\ncontent-length: 1000\r\n\r\n{{\"choices\":",
            "0".repeat(64)
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    let stopping = Instant::now();
    let pid = d.child.id().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(sent.success());
    let ended = closed_after(events, stopping, SHUTDOWN_GRACE + SLACK).await;
    assert!(
        ended.is_some_and(|after| after < SHUTDOWN_GRACE),
        "the event stream ended on stop ({ended:?})"
    );
    let status = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + SHUTDOWN_GRACE + 2 * SLACK;
        loop {
            if let Some(status) = d.child.try_wait().unwrap() {
                return Some((status, stopping.elapsed()));
            }
            if Instant::now() > deadline {
                d.kill();
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .unwrap();
    let (status, took) = status.expect("the daemon stopped though a request was held open");
    assert!(status.success(), "{status:?}");
    assert!(
        took >= SHUTDOWN_GRACE - Duration::from_millis(500),
        "stopped after {took:?}"
    );
    assert!(closed_after(held, stopping, SLACK).await.is_some());
}

/// The soft and hard limits on open files of process `pid`, from `/proc`.
fn open_files_limit(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .to_string();
    let mut figures = line.split_whitespace().skip(3);
    (
        figures.next().unwrap().to_string(),
        figures.next().unwrap().to_string(),
    )
}

#[test]
fn serve_started_at_a_soft_limit_of_1024_raises_it_to_its_budget_within_the_hard_limit() {
    use std::io::BufRead;
    if std::process::Command::new("prlimit")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: prlimit is not here");
        return;
    }
    // A hard limit above the budget: the soft one goes to the budget; one below it: to the hard limit.
    for (limits, want) in [("1024:16384", "8192"), ("1024:2048", "2048")] {
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("prlimit")
            .arg(format!("--nofile={limits}"))
            .arg(env!("CARGO_BIN_EXE_agentwire"))
            .args(["serve", "--data-dir", dir.path().to_str().unwrap()])
            .args([
                "--relay-listen",
                "127.0.0.1:0",
                "--http-listen",
                "127.0.0.1:0",
            ])
            .arg("--roost-socket")
            .arg(dir.path().join("roost.sock"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("\"ready\":true"), "{line}");
        let (soft, hard) = open_files_limit(child.id());
        let hard_wanted = limits.split(':').nth(1).unwrap();
        assert_eq!((soft.as_str(), hard.as_str()), (want, hard_wanted));
        common::sigterm(&mut child);
        let mut log = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut log).unwrap();
        // Short of the budget, the operator is told.
        assert_eq!(
            log.contains("only to the hard limit"),
            want != "8192",
            "{log}"
        );
    }
}

/// The status of an answer whose body may never end (an event stream): its head alone is read.
async fn status_of_head(s: &mut TcpStream) -> u16 {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(SLACK, s.read(&mut buf))
            .await
            .expect("an answer's head in time")
            .unwrap();
        assert!(n > 0, "closed before an answer");
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got)
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status line")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configured_caps_on_event_streams_and_connections_hold_and_give_places_back() {
    const STREAMS: usize = 3;
    const CONNECTIONS: usize = 16;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agentwire.toml");
    std::fs::write(
        &config,
        format!("[http]\nmax_connections = {CONNECTIONS}\nmax_event_streams = {STREAMS}\n"),
    )
    .unwrap();
    let d = Daemon::start(dir.path(), &["--config", config.to_str().unwrap()]);
    let (addr, token) = http_of(&d);
    let open_stream = || async {
        let mut s = TcpStream::connect(&addr).await.unwrap();
        s.write_all(head(&addr, "/api/v1/events", Some(&token)).as_bytes())
            .await
            .unwrap();
        s
    };
    let mut streams = Vec::new();
    for _ in 0..STREAMS {
        let mut s = open_stream().await;
        assert_eq!(status_of_head(&mut s).await, 200);
        streams.push(s);
    }
    let mut over = open_stream().await;
    let (status, body) = read_answer(&mut over).await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("3 event streams are open ([http] max_event_streams)"),
        "{body}"
    );
    drop(over);
    // A stream closed gives its place back.
    drop(streams.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut s = open_stream().await;
        match status_of_head(&mut s).await {
            200 => {
                streams.push(s);
                break;
            }
            503 if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(50)).await,
            other => panic!("{other} after a stream was closed"),
        }
    }
    // The connections' cap is the configured one: the streams and 13 more fill it, and past it `503`.
    let mut held = Vec::new();
    while streams.len() + held.len() < CONNECTIONS {
        let mut s = TcpStream::connect(&addr).await.unwrap();
        let (status, body) = request(&mut s, &addr, "/api/v1/agents", Some(&token)).await;
        assert_eq!(status, 200, "{body}");
        held.push(s);
    }
    let mut past = TcpStream::connect(&addr).await.unwrap();
    let (status, body) = request(&mut past, &addr, "/api/v1/agents", Some(&token)).await;
    assert_eq!(status, 503, "past {CONNECTIONS} connections: {body}");
}
