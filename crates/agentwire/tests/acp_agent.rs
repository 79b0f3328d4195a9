//! `kind = "acp"`: a coding agent over the Agent Client Protocol, written with the official ACP Python SDK
//! (`crates/agentwire-acp/tests/agent.py`), served by the real daemon and reached over NIP-XX and the turn
//! API: its chunks stream as the turn's text, a conversation is one ACP session, its permission request is
//! a question answered in the hub (allowed and rejected), a cancel ends a long prompt through
//! `session/cancel`, an agent that crashes fails its turn with its last words and is started again for the
//! next, and the daemon's stop leaves no agent process behind.

mod common;

use common::api::Api;
use common::{Client, Daemon};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn python() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = root.join("target/tools/venv/bin/python");
    assert!(
        python.exists(),
        "run ./scripts/test.sh: it installs the ACP Python SDK into target/tools/venv"
    );
    python
}

/// How long a turn that starts the agent's process may take: a Python process importing the SDK, on a machine
/// running the whole suite at once.
const FIRST_START: Duration = Duration::from_secs(60);

/// Asks `text` with room for the agent's process to start first.
async fn first_ask(c: &mut Client, text: &str) -> common::Run {
    let ev = c.prompt_event(text, None);
    c.watch(&ev.id);
    c.publish(&ev).await;
    c.collect(&ev.id, FIRST_START, Duration::from_millis(300))
        .await
}

fn agent_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../agentwire-acp/tests/agent.py")
}

/// The argument that marks this test's agent processes (the script ignores it): what `pgrep -f` looks for.
fn marker(dir: &Path) -> String {
    format!("{}/acp-marker", dir.display())
}

/// A daemon serving the test ACP agent as `coder` (the `--agent` agent), working in `work`.
fn daemon(dir: &Path, work: &Path) -> Daemon {
    let config = dir.join("agentwire.toml");
    std::fs::write(
        &config,
        format!(
            "[agents.coder]\nkind = \"acp\"\ncommand = [{:?}, {:?}, {:?}]\ncwd = {:?}\n",
            python().to_str().unwrap(),
            agent_script().to_str().unwrap(),
            marker(dir),
            work.to_str().unwrap(),
        ),
    )
    .unwrap();
    Daemon::start(
        &dir.join("data"),
        &["--config", config.to_str().unwrap(), "--agent", "coder"],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_stream_a_conversation_is_one_session_and_the_agent_works_in_its_cwd() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let d = daemon(dir.path(), &work);
    let mut c = Client::new(&d.relay, d.agent).await;

    let run = first_ask(&mut c, "hello there").await;
    assert_eq!(run.text(), "echo: hello there");

    let run = c.ask("stream 4").await;
    assert_eq!(run.text(), "part0 part1 part2 part3 ");
    let deltas: Vec<String> = run
        .deltas()
        .iter()
        .filter_map(|d| d["text"].as_str().map(String::from))
        .collect();
    assert!(
        deltas.len() >= 4,
        "streamed as the agent sent them, not at the end: {deltas:?}"
    );

    // The agent runs in its cwd, and its sessions are opened there.
    let run = c.ask("where").await;
    let w = work.canonicalize().unwrap();
    assert_eq!(
        run.text(),
        format!("{} {}", w.display(), work.display()),
        "{}",
        run.text()
    );

    // One NIP-XX session is one conversation is one ACP session: the third prompt there is its third.
    let session = "acp-conversation";
    for n in 1..=3 {
        let ev = c.prompt_event("count", Some(session));
        assert_eq!(c.send_and_collect(ev).await.text(), n.to_string());
    }
    // Another conversation has a session of its own.
    let ev = c.prompt_event("count", Some("another"));
    assert_eq!(c.send_and_collect(ev).await.text(), "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_request_is_a_question_answered_in_the_hub() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let d = daemon(dir.path(), &work);
    let api = Api::of(&d);
    let mut c = Client::new(&d.relay, d.agent).await;
    assert_eq!(first_ask(&mut c, "warm up").await.text(), "echo: warm up");

    // Over A2A (a front that can ask): the agent's permission request is the task's question, and the
    // hub's answer is the option of its kind.
    for (choice, said, written) in [
        ("once", "wrote allowed.txt (once)", true),
        ("always", "wrote allowed.txt (always)", true),
        ("no", "not written", false),
    ] {
        std::fs::remove_file(work.join("allowed.txt")).ok();
        let task = api.a2a_send("coder", "write allowed.txt").await;
        let turn = format!("a2a:{task}");
        let open = api.until_state(&turn, "waiting").await.to_string();
        assert!(
            open.contains("\"approve\"") && open.contains("Write allowed.txt"),
            "an approval of the tool call, by its title: {open}"
        );
        api.answer(&turn, choice).await;
        let t = api.a2a_final("coder", &task, Duration::from_secs(15)).await;
        assert_eq!(t["status"]["state"], "TASK_STATE_COMPLETED", "{t}");
        assert!(t.to_string().contains(said), "{choice}: {t}");
        assert_eq!(work.join("allowed.txt").exists(), written, "{choice}");
    }

    // Over NIP-XX, which cannot ask, the agent hears no.
    assert_eq!(c.ask("write nobody.txt").await.text(), "not written");
    assert!(!work.join("nobody.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_ends_a_long_prompt_through_session_cancel() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let d = daemon(dir.path(), &work);
    let api = Api::of(&d);
    let mut c = Client::new(&d.relay, d.agent).await;
    assert_eq!(first_ask(&mut c, "warm up").await.text(), "echo: warm up");

    let ev = c.prompt_event("sleep", None);
    c.watch(&ev.id);
    c.publish(&ev).await;
    let turn = format!("nipxx:{}", ev.id.to_hex());
    api.until_state(&turn, "running").await;
    // Give the prompt time to reach the agent.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(api.cancel(&turn).await, 200);
    let run = c
        .collect(&ev.id, Duration::from_secs(10), Duration::from_millis(200))
        .await;
    assert_eq!(run.error_code(), "CANCELLED", "{:?}", run.terminal);
    // The agent took the cancel and is there for the next turn.
    assert_eq!(c.ask("after").await.text(), "echo: after");

    // A question open when the turn is cancelled is answered `cancelled` to the agent.
    let task = api.a2a_send("coder", "write never.txt").await;
    let turn = format!("a2a:{task}");
    api.until_state(&turn, "waiting").await;
    assert_eq!(api.cancel(&turn).await, 200);
    let t = api.a2a_final("coder", &task, Duration::from_secs(10)).await;
    assert_eq!(t["status"]["state"], "TASK_STATE_CANCELED", "{t}");
    assert!(!work.join("never.txt").exists());
    assert_eq!(c.ask("still here").await.text(), "echo: still here");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_agent_fails_its_turn_and_is_started_again_and_the_stop_leaves_no_process() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let mut d = daemon(dir.path(), &work);
    let mut c = Client::new(&d.relay, d.agent).await;
    assert_eq!(first_ask(&mut c, "warm up").await.text(), "echo: warm up");

    let run = c.ask("crash").await;
    let message = match &run.terminal {
        Some(agentwire_nostr::client::Terminal::Error(e)) => e.message.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(run.error_code(), "INTERNAL_ERROR", "{message}");
    assert!(
        message.contains("crashing on purpose"),
        "the agent's last words: {message}"
    );
    // Started again for the next turn.
    assert_eq!(first_ask(&mut c, "back").await.text(), "echo: back");

    // The daemon's stop ends the agent's process.
    let marker = marker(dir.path());
    let running = || {
        std::process::Command::new("pgrep")
            .args(["-f", &marker])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    assert!(
        !running().is_empty(),
        "the agent runs while the daemon does"
    );
    let pid = d.child.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    assert!(d.child.wait().unwrap().success());
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !running().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "agent processes left after the stop: {}",
            running()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_cannot_start_fails_the_turn_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agentwire.toml");
    std::fs::write(
        &config,
        "[agents.coder]\nkind = \"acp\"\ncommand = [\"/nonexistent/acp-agent\"]\n",
    )
    .unwrap();
    let d = Daemon::start(
        &dir.path().join("data"),
        &["--config", config.to_str().unwrap(), "--agent", "coder"],
    );
    let mut c = Client::new(&d.relay, d.agent).await;
    let started = std::time::Instant::now();
    let run = c.ask("hello").await;
    assert_eq!(run.error_code(), "MODEL_UNAVAILABLE", "{:?}", run.terminal);
    assert!(
        format!("{:?}", run.terminal).contains("cannot start /nonexistent/acp-agent"),
        "{:?}",
        run.terminal
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "at once, no hang"
    );
}

/// A daemon on `dir`'s data dir serving the test ACP agent as `coder`, started with `args` after its
/// script.
fn daemon_with(dir: &Path, work: &Path, args: &[&str]) -> Daemon {
    let config = dir.join("agentwire.toml");
    let mut command = vec![
        python().to_str().unwrap().to_string(),
        agent_script().to_str().unwrap().to_string(),
        marker(dir),
    ];
    command.extend(args.iter().map(|a| a.to_string()));
    std::fs::write(
        &config,
        format!(
            "[agents.coder]\nkind = \"acp\"\ncommand = {command:?}\ncwd = {:?}\n",
            work.to_str().unwrap(),
        ),
    )
    .unwrap();
    Daemon::start(
        &dir.join("data"),
        &["--config", config.to_str().unwrap(), "--agent", "coder"],
    )
}

/// Asks `count` in NIP-XX session `session`, with room for the agent's process to start first.
async fn count_in(c: &mut Client, session: &str) -> String {
    let ev = c.prompt_event("count", Some(session));
    c.watch(&ev.id);
    c.publish(&ev).await;
    c.collect(&ev.id, FIRST_START, Duration::from_millis(300))
        .await
        .text()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_a_conversation_goes_on_in_its_session_when_the_agent_can_load_it() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    // One key for every client: a NIP-XX conversation is its sender's and its session tag.
    let keys = nostr::prelude::Keys::generate();
    let mut d = daemon_with(dir.path(), &work, &["--load"]);
    let mut c = Client::with_keys(&d.relay, d.agent, keys.clone()).await;
    assert_eq!(count_in(&mut c, "kept").await, "1");
    assert_eq!(count_in(&mut c, "kept").await, "2");
    assert!(common::sigterm(&mut d.child).success());
    drop(c);

    // The new process is asked to load the conversation's session: its count goes on, and the history it
    // replays while loading is not the turn's text.
    let mut d = daemon_with(dir.path(), &work, &["--load"]);
    let mut c = Client::with_keys(&d.relay, d.agent, keys.clone()).await;
    assert_eq!(count_in(&mut c, "kept").await, "3");
    assert_eq!(count_in(&mut c, "other").await, "1");
    assert!(common::sigterm(&mut d.child).success());
    drop(c);

    // An agent that does not offer session/load gets a new session for the conversation.
    let d = daemon_with(dir.path(), &work, &[]);
    let mut c = Client::with_keys(&d.relay, d.agent, keys).await;
    assert_eq!(count_in(&mut c, "kept").await, "1");
}
