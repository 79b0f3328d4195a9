//! A command as the agent (`[agents.<name>] kind = "cmd"`), served by the real daemon: over NIP-XX (answer
//! streamed from stdout, stderr lines as status, a failing exit with stderr's last line, a timeout, a
//! cancel that kills the command's whole process group) and over fisk-ai with `agentwire ask --nats`.

mod common;

use agentwire_nostr::client::{Terminal, Update};
use agentwire_testkit::NatsServer;
use common::{Client, Daemon};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// A config file with one `[agents.<name>]` entry of kind `cmd`.
fn config(dir: &Path, name: &str, command: &[&str], extra: &str) -> String {
    let path = dir.join(format!("{name}.toml"));
    let command = serde_json::to_string(command).unwrap();
    std::fs::write(
        &path,
        format!("[agents.{name}]\nkind = \"cmd\"\ncommand = {command}\n{extra}"),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

fn start(dir: &Path, name: &str, command: &[&str], extra: &str) -> Daemon {
    let config = config(dir, name, command, extra);
    Daemon::start(&dir.join("data"), &["--config", &config, "--agent", name])
}

fn statuses(updates: &[Update]) -> Vec<String> {
    updates
        .iter()
        .filter_map(|u| match u {
            Update::Status(s) => s.info.clone(),
            _ => None,
        })
        .collect()
}

fn error_message(terminal: &Option<Terminal>) -> String {
    match terminal {
        Some(Terminal::Error(e)) => e.message.clone(),
        other => panic!("expected an ai.error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdout_is_the_answer_and_stderr_lines_are_status() {
    let dir = tempfile::tempdir().unwrap();
    let script = "echo reading >&2; tr a-z A-Z; echo done >&2";
    let d = start(dir.path(), "shout", &["sh", "-c", script], "");
    let mut c = Client::new(&d.relay, d.agent).await;
    let run = c.ask("hello there").await;
    assert_eq!(run.text(), "HELLO THERE");
    assert_eq!(run.terminals, 1);
    assert!(!run.deltas().is_empty(), "the answer is streamed");
    let said = statuses(&run.updates);
    assert!(
        said.contains(&"reading".to_string()) && said.contains(&"done".to_string()),
        "{said:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_exit_says_the_last_stderr_line_and_a_silent_success_is_empty() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"case "$(cat)" in
        quiet) exit 0 ;;
        *) echo "starting" >&2; echo "no such file: notes.txt" >&2; exit 3 ;;
    esac"#;
    let d = start(dir.path(), "fails", &["sh", "-c", script], "");
    let mut c = Client::new(&d.relay, d.agent).await;
    let run = c.ask("read my notes").await;
    assert_eq!(run.error_code(), "INTERNAL_ERROR");
    let message = error_message(&run.terminal);
    assert!(
        message.contains("status 3") && message.contains("no such file: notes.txt"),
        "{message}"
    );
    let run = c.ask("quiet").await;
    assert_eq!(run.error_code(), "EMPTY_RESPONSE");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_past_its_timeout_is_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let d = start(
        dir.path(),
        "slow",
        &["sleep", "30"],
        "request_timeout_secs = 1\n",
    );
    let mut c = Client::new(&d.relay, d.agent).await;
    let run = c.ask("anything").await;
    let message = error_message(&run.terminal);
    assert!(message.contains("did not finish within 1 s"), "{message}");
}

/// Whether process `pid` still runs (a zombie counts as gone).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| !r.trim_start().starts_with('Z'))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_kills_the_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("child.pid");
    // A child in the background, as a pipeline or a script's helper would be: it must stop too.
    let script = format!(
        "sleep 120 & echo $! > {}; echo started; wait",
        pidfile.display()
    );
    let d = start(dir.path(), "waits", &["sh", "-c", &script], "");
    let mut c = Client::new(&d.relay, d.agent).await;
    let session = format!("sender:{}", c.me().to_hex());
    let ev = c.prompt_event("go", None);
    c.watch(&ev.id);
    c.publish(&ev).await;
    let started = c
        .collect(&ev.id, Duration::from_secs(5), Duration::ZERO)
        .await;
    assert!(started.terminal.is_none());
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .expect("the command started its child")
        .trim()
        .parse()
        .unwrap();
    assert!(running(pid));
    c.publish(&c.cancel_event(&ev.id, &session)).await;
    let run = c
        .collect(&ev.id, Duration::from_secs(5), Duration::from_millis(300))
        .await;
    assert_eq!(run.error_code(), "CANCELLED");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while running(pid) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !running(pid),
        "the command's child {pid} outlived the cancel"
    );
}

#[test]
fn over_fisk_ai_the_command_answers_ask() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), "shout", &["tr", "a-z", "A-Z"], "");
    let data = dir.path().join("data");
    let _d = Daemon::start(
        &data,
        &[
            "--config",
            &config,
            "--agent",
            "shout",
            "--nats",
            &nats.url,
            "--identity",
            "shout",
        ],
    );
    let out = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args([
            "ask",
            "--nats",
            &nats.url,
            "--identity",
            "shout",
            "make",
            "it",
            "loud",
        ])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.trim(), "MAKE IT LOUD");
}
