//! What an operator reads in `serve`'s log at `info`: one line when a turn starts and one when it ends (its
//! agent, protocol, conversation, request, outcome, duration and tokens), a warning with the cause when it
//! failed for the agent's reasons (its model server unreachable), and never the prompt; the same as JSON
//! objects for a log collector; what a Ctrl-C waits for, and a second one stopping at once.

mod common;

use agentwire_nostr::client::Terminal;
use common::{Client, Daemon};
use std::process::Stdio;
use std::time::Duration;

/// The daemon's log so far.
fn log(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Waits until the log has a line with every one of `words`, and returns that line.
async fn line_with(path: &std::path::Path, words: &[&str]) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(l) = log(path)
            .lines()
            .find(|l| words.iter().all(|w| l.contains(w)))
        {
            return l.to_string();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no line with {words:?} in:\n{}",
            log(path)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_starts_and_ends_in_the_log_and_an_unreachable_model_server_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    // A model server that is not there: a port bound, then let go.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let config = dir.path().join("agentwire.toml");
    std::fs::write(
        &config,
        format!(
            "[agents.gone]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\nmodels = [\"m\"]\nexpose = [\"nipxx\"]\n"
        ),
    )
    .unwrap();
    let log_path = dir.path().join("serve.log");
    let log_file = std::fs::File::create(&log_path).unwrap();
    let d = Daemon::start_logging(
        &dir.path().join("data"),
        &["--config", config.to_str().unwrap()],
        &[("RUST_LOG", "info")],
        Stdio::from(log_file),
    );

    let mut c = Client::new(&d.relay, d.agent).await;
    assert_eq!(
        c.ask("quick secret-words-here").await.text(),
        "secret-words-here"
    );
    let started = line_with(&log_path, &["turn started", "agent=demo", "protocol=nipxx"]).await;
    let ended = line_with(&log_path, &["turn ended", "outcome=result", "duration_ms="]).await;
    assert!(
        started.contains("request=nipxx:") && started.contains("conversation="),
        "{started}"
    );
    assert!(ended.contains("input_tokens="), "{ended}");

    // The model agent's server is unreachable: the client gets its error, and the operator a warning that
    // says why.
    let gone = nostr::prelude::PublicKey::from_hex(
        d.ready["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == "gone")
            .and_then(|a| a["pubkey"].as_str())
            .expect("the further agent's key on the ready line"),
    )
    .unwrap();
    let mut c = Client::new(&d.relay, gone).await;
    let run = c.ask("hello there model").await;
    assert!(run.terminal.is_some());
    let warned = line_with(
        &log_path,
        &["WARN", "turn failed for the agent's reasons", "agent=gone"],
    )
    .await;
    assert!(warned.contains("cause="), "{warned}");

    let all = log(&log_path);
    assert!(
        !all.contains("secret-words-here") && !all.contains("hello there model"),
        "no prompt in the log:\n{all}"
    );
}

/// Sends `signal` (`INT`, `TERM`) to the daemon.
fn signal(d: &Daemon, signal: &str) {
    let ok = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &d.child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{signal}");
}

/// Waits up to `within` for the daemon to exit, and returns its exit code.
fn exit_code(d: &mut Daemon, within: Duration) -> Option<i32> {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(status) = d.child.try_wait().unwrap() {
            return status.code();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still running after {within:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_for_a_collector_and_a_second_ctrl_c_stops_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let relay_dir = tempfile::tempdir().unwrap();
    // A relay that stays up while the agent's daemon stops and starts again.
    let relay = Daemon::start(relay_dir.path(), &[]);
    let config = dir.path().join("agentwire.toml");
    std::fs::write(&config, "[log]\nformat = \"json\"\n").unwrap();
    let log_path = dir.path().join("serve.log");
    let mut d = Daemon::start_logging(
        &dir.path().join("data"),
        &[
            "--config",
            config.to_str().unwrap(),
            "--relay",
            &relay.relay,
        ],
        &[("RUST_LOG", "info")],
        Stdio::from(std::fs::File::create(&log_path).unwrap()),
    );
    let keys = nostr::prelude::Keys::generate();
    let mut c = Client::with_keys(&relay.relay, d.agent, keys.clone()).await;
    assert_eq!(c.ask("quick done").await.text(), "done");
    line_with(&log_path, &["turn ended"]).await;

    // Every line is one JSON object; the turn's end has its fields as values.
    let lines: Vec<serde_json::Value> = log(&log_path)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let ended = lines
        .iter()
        .find(|l| l["fields"]["message"] == "turn ended")
        .expect("a turn ended object");
    assert_eq!(ended["level"], "INFO");
    assert_eq!(ended["fields"]["outcome"], "result");
    assert_eq!(ended["fields"]["protocol"], "nipxx");
    assert!(ended["fields"]["duration_ms"].is_u64(), "{ended}");

    // A long turn, then Ctrl-C: the daemon says what it waits for.
    let long = c.prompt_event("sleep 60000", None);
    c.watch(&long.id);
    c.publish(&long).await;
    c.wait_started(&long.id, Duration::from_secs(10)).await;
    signal(&d, "INT");
    line_with(
        &log_path,
        &["waiting for 1 running turn, up to 60 s; Ctrl-C again to stop now"],
    )
    .await;
    assert_eq!(
        d.child.try_wait().unwrap(),
        None,
        "the first Ctrl-C waits for the turn"
    );
    // The second stops it at once, and the turn ends as after a crash on the next start.
    signal(&d, "INT");
    assert_eq!(exit_code(&mut d, Duration::from_secs(5)), Some(130));
    line_with(&log_path, &["stopping now"]).await;
    let _again = Daemon::start(&dir.path().join("data"), &["--relay", &relay.relay]);
    let cut = c
        .collect(
            &long.id,
            Duration::from_secs(10),
            Duration::from_millis(300),
        )
        .await;
    match &cut.terminal {
        Some(Terminal::Error(e)) => assert_eq!(e.code.as_str(), "INTERNAL_ERROR"),
        other => panic!("expected the interrupted turn's error, got {other:?}"),
    }
    assert_eq!(cut.terminals, 1);
}

#[test]
fn a_log_filter_that_does_not_parse_is_refused_with_the_fix() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args(["--log", "inf", "config"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--log: `inf` is not a level") && err.contains("inf=debug"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "nothing ran");
}

/// A roost controller's `shutdown` drains and stops the whole daemon as a signal does: it answers, says so
/// in the log, exits 0 and leaves no `serving.json` (a job's connection is refused it: the supervisor's tests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_roost_shutdown_op_stops_the_daemon_as_a_signal_does() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("serve.log");
    let log_file = std::fs::File::create(&log_path).unwrap();
    let mut d = Daemon::start_logging(
        &dir.path().join("data"),
        &[],
        &[("RUST_LOG", "info")],
        Stdio::from(log_file),
    );
    let socket = d.ready["roost_socket"].as_str().unwrap().to_string();
    let mut ctl = agentwire_roost::client::Controller::connect(std::path::Path::new(&socket))
        .await
        .unwrap();
    assert_eq!(
        ctl.call("shutdown", serde_json::json!({})).await.unwrap(),
        serde_json::json!({})
    );
    assert_eq!(exit_code(&mut d, Duration::from_secs(20)), Some(0));
    assert!(
        line_with(&log_path, &["shutting down", "roost shutdown op"])
            .await
            .contains("INFO")
    );
    assert!(
        line_with(&log_path, &["a controller asked the daemon to shut down"])
            .await
            .contains("INFO")
    );
    assert!(!d.data_dir.join("serving.json").exists());
}
