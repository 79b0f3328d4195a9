//! The `agentwire ask`, `cancel` and `info` commands as a user runs them, against the real daemon.

mod cli_child;
mod common;

use agentwire_nostr::nipxx::kinds;
use cli_child::CliChild;
use common::{Client, Daemon};
use nostr::prelude::{EventId, Keys};
use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn agentwire(d: &Daemon, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .arg("--data-dir")
        .arg(&d.data_dir)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("agentwire runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn ask_prints_the_answer_and_exits_by_outcome() {
    let dir = tempfile::tempdir().unwrap();
    // The default profile takes plain and gift-wrapped prompts alike.
    let d = Daemon::start(dir.path(), &[]);
    let out = agentwire(&d, &["ask", "--relay", &d.relay, "hello", "world"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "You said: hello world");
    assert!(text(&out.stderr).contains("[usage: 2 in, 4 out]"));

    let out = agentwire(&d, &["ask", "--relay", &d.relay, "calc", "6*7"]);
    assert_eq!(text(&out.stdout).trim(), "42");
    // Tool activity in the one form every command shows it.
    assert!(
        text(&out.stderr).contains("[tool calculator start 6*7]")
            && text(&out.stderr).contains("[tool calculator result 42]"),
        "{}",
        text(&out.stderr)
    );

    let out = agentwire(&d, &["ask", "--relay", &d.relay, "fail", "no", "paper"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("error INTERNAL_ERROR: no paper"));

    let out = agentwire(&d, &["ask", "--relay", &d.relay, "--nip59", "calc", "1+1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "2");

    let out = agentwire(&d, &["info", "--relay", &d.relay]);
    assert_eq!(out.status.code(), Some(0));
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(info["supports_nip59"], true);
    assert_eq!(info["tool_names"][0], "calculator");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_in_ask_cancels_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .arg("--data-dir")
        .arg(&d.data_dir)
        .args(["ask", "--relay", &d.relay, "sleep", "10000"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let prompt = EventId::from_hex(line.trim().strip_prefix("run ").expect("run <id>")).unwrap();
    // Let the run start streaming, then press Ctrl-C.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert_eq!(status.code(), Some(130), "{rest}");
    assert!(rest.contains("cancel sent"), "{rest}");

    // The run ended CANCELLED (the terminal is stored on the relay), as the client sees it.
    let key = std::fs::read_to_string(d.data_dir.join("client.key")).unwrap();
    let mut c = Client::with_keys(&d.relay, d.agent, Keys::parse(key.trim()).unwrap()).await;
    c.watch(&prompt);
    let run = c
        .collect(&prompt, Duration::from_secs(5), Duration::from_millis(200))
        .await;
    assert_eq!(run.error_code(), "CANCELLED");
    assert!(run.events.iter().any(|(m, _)| m.kind == kinds::ERROR));
}

#[test]
fn serve_runs_the_roost_supervisor_and_does_not_take_a_live_socket() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let socket = d.ready["roost_socket"]
        .as_str()
        .expect("roost_socket in the ready line");
    assert!(std::path::Path::new(socket).exists());
    let other = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args([
            "--data-dir",
            other.path().to_str().unwrap(),
            "serve",
            "--http-listen",
            "127.0.0.1:0",
            "--relay-listen",
            "127.0.0.1:0",
            "--roost-socket",
            socket,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("another daemon is serving"),
        "{}",
        text(&out.stderr)
    );
}

/// The value of the stderr line that starts with `what ` (`run`, `session`).
fn line_value(stderr: &str, what: &str) -> String {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{what} ")))
        .unwrap_or_else(|| panic!("no `{what} ...` line in {stderr}"))
        .to_string()
}

/// The journaled conversation of a NIP-XX run.
fn conversation_of(d: &Daemon, run: &str) -> String {
    let journal = rusqlite::Connection::open(d.data_dir.join("journal.sqlite")).unwrap();
    journal
        .query_row(
            "SELECT conversation_id FROM turns WHERE request_id = ?1",
            [format!("nipxx:{run}")],
            |r| r.get(0),
        )
        .unwrap()
}

#[test]
fn ask_names_its_session_and_new_starts_another() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let out = agentwire(&d, &["ask", "--relay", &d.relay, "hello"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let key = std::fs::read_to_string(d.data_dir.join("client.key")).unwrap();
    let me = Keys::parse(key.trim()).unwrap().public_key().to_hex();
    // The default: one session for every ask from this key, and the user is told so.
    assert_eq!(
        line_value(&text(&out.stderr), "session"),
        format!("sender:{me}")
    );

    let asked = |args: &[&str]| {
        let mut all = vec!["ask", "--relay", d.relay.as_str()];
        all.extend_from_slice(args);
        let out = agentwire(&d, &all);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let err = text(&out.stderr);
        (line_value(&err, "run"), line_value(&err, "session"))
    };
    let (run1, first) = asked(&["--new", "one"]);
    let (run2, second) = asked(&["--new", "two"]);
    assert!(first.starts_with("session:"), "{first}");
    assert_ne!(first, second);
    assert_ne!(conversation_of(&d, &run1), conversation_of(&d, &run2));
    // The printed session continues with --session: the same conversation on the agent.
    let (run3, again) = asked(&["--session", &first, "three"]);
    assert_eq!(again, first);
    assert_eq!(conversation_of(&d, &run3), conversation_of(&d, &run1));
    assert!(conversation_of(&d, &run3).ends_with(&first));
    // Only its hex part, as a user copies it: the same session, not a new one.
    let bare = first.strip_prefix("session:").unwrap();
    let (run4, again) = asked(&["--session", bare, "four"]);
    assert_eq!(again, first);
    assert_eq!(conversation_of(&d, &run4), conversation_of(&d, &run1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_says_what_became_of_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let data_dir = d.data_dir.to_str().unwrap();

    // A running run: cancelled, and the asker sees it end CANCELLED.
    let mut asking = CliChild::spawn(&[
        "--data-dir",
        data_dir,
        "ask",
        "--relay",
        &d.relay,
        "sleep",
        "20000",
    ]);
    let err = asking.wait_for("[thinking: sleeping", Duration::from_secs(15));
    let running = line_value(&err, "run");
    let out = agentwire(&d, &["cancel", "--relay", &d.relay, &running]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!("cancelled run {running}")),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(asking.exit_code(Duration::from_secs(10)), Some(2));
    assert!(
        asking.stderr().contains("error CANCELLED"),
        "{}",
        asking.stderr()
    );

    // Runs that already ended: said so, with how they ended.
    let out = agentwire(&d, &["cancel", "--relay", &d.relay, &running]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!("run {running} already ended: error CANCELLED")),
        "{}",
        text(&out.stderr)
    );
    let out = agentwire(&d, &["ask", "--relay", &d.relay, "hello"]);
    let answered = line_value(&text(&out.stderr), "run");
    let out = agentwire(&d, &["cancel", "--relay", &d.relay, &answered]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!("run {answered} already ended: answered")),
        "{}",
        text(&out.stderr)
    );

    // A run that never existed.
    let never = "ab".repeat(32);
    let out = agentwire(&d, &["cancel", "--relay", &d.relay, &never]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!("unknown run {never}")),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_that_times_out_cancels_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let out = agentwire(
        &d,
        &[
            "ask",
            "--relay",
            &d.relay,
            "--timeout",
            "1",
            "sleep",
            "20000",
        ],
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("no answer within 1s"), "{err}");
    let run = line_value(&err, "run");
    assert!(err.contains(&format!("cancelled run {run}")), "{err}");

    // Another client of the same key sees the run ended CANCELLED, long before its 20 s were up.
    let prompt = EventId::from_hex(&run).unwrap();
    let key = std::fs::read_to_string(d.data_dir.join("client.key")).unwrap();
    let mut c = Client::with_keys(&d.relay, d.agent, Keys::parse(key.trim()).unwrap()).await;
    c.watch(&prompt);
    let seen = c
        .collect(&prompt, Duration::from_secs(5), Duration::from_millis(200))
        .await;
    assert_eq!(seen.error_code(), "CANCELLED");
}

/// Runs `agentwire` with stdout a pipe whose reader is already gone, as `agentwire turns | head` leaves it.
fn agentwire_into_closed_pipe(data_dir: &std::path::Path, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("agentwire runs")
}

#[test]
fn a_command_whose_reader_went_away_exits_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let out = agentwire(&d, &["ask", "--relay", &d.relay, "hello"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for args in [
        &["turns"][..],
        &["completions", "bash"],
        &["man"],
        &["config"],
        &["ask", "--relay", &d.relay, "hello again"],
    ] {
        let out = agentwire_into_closed_pipe(&d.data_dir, args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "agentwire {args:?}: {stderr}");
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "agentwire {args:?} into a closed pipe: {stderr}"
        );
    }
}

#[test]
fn commands_started_at_once_on_a_fresh_data_dir_share_one_key() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("fresh");
    let children: Vec<_> = (0..8)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_agentwire"))
                .arg("--data-dir")
                .arg(&data)
                .arg("whoami")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("agentwire runs")
        })
        .collect();
    let outs: Vec<Output> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    for out in &outs {
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let npubs: Vec<String> = outs
        .iter()
        .map(|o| line_value(&text(&o.stdout), "npub"))
        .collect();
    assert!(npubs.iter().all(|n| *n == npubs[0]), "one key: {npubs:?}");
}

#[test]
fn a_peers_escape_sequences_never_reach_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    // The demo agent says the prompt back: what it sends is remote text with a retitle, a clear and a bidi
    // override in it.
    let attack = "\u{1b}]0;PWNED\u{7}\u{1b}[2Jhi \u{202e}txt.exe";
    let out = agentwire(&d, &["ask", "--relay", &d.relay, attack]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.contains("PWNED") && shown.contains("hi"), "{shown:?}");
    for c in ['\u{1b}', '\u{7}', '\u{202e}'] {
        assert!(!shown.contains(c), "{c:?} reached stdout: {shown:?}");
        assert!(!text(&out.stderr).contains(c), "{c:?} reached stderr");
    }
}
