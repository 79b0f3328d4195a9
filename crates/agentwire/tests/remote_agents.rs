//! Remote agents: an agent served by another daemon is an agent here. Two real daemons on loopback: the
//! remote one serves the demo agent over NIP-XX on its own relay; this one serves it as `kind = "nipxx"`
//! (`far`), reached as its client. Its answer streams through as it comes, a conversation here is one
//! session there, a cancel here cancels the run there, and a relay that cannot be reached fails the turn at
//! once.

mod common;

use common::api::Api;
use common::{Client, Daemon};
use std::path::Path;
use std::time::{Duration, Instant};

/// This daemon, serving the remote daemon's agent as `far` (its `--agent`).
fn near(dir: &Path, remote: &Daemon) -> Daemon {
    let config = dir.join("agentwire.toml");
    std::fs::write(
        &config,
        format!(
            "[agents.far]\nkind = \"nipxx\"\npubkey = \"{}\"\nrelays = [\"{}\"]\nrequest_timeout_secs = 60\n",
            remote.agent.to_hex(),
            remote.relay
        ),
    )
    .unwrap();
    Daemon::start(
        &dir.join("data"),
        &["--config", config.to_str().unwrap(), "--agent", "far"],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_nipxx_agent_answers_streams_and_keeps_one_session_a_conversation() {
    let dir = tempfile::tempdir().unwrap();
    let remote = Daemon::start(&dir.path().join("remote"), &[]);
    let d = near(dir.path(), &remote);
    let mut c = Client::new(&d.relay, d.agent).await;

    let run = c.ask("hello far away").await;
    assert_eq!(run.text(), "You said: hello far away");
    assert!(
        run.deltas().len() >= 2,
        "streamed through as it came: {:?}",
        run.deltas()
    );
    assert_eq!(c.ask("calc 6*7").await.text(), "42");

    // Two prompts of one conversation here are one conversation there; another conversation is another.
    for (session, prompt) in [
        ("here-1", "one of a pair"),
        ("here-1", "one of a pair"),
        ("here-2", "one of a pair"),
    ] {
        let ev = c.prompt_event(prompt, Some(session));
        assert_eq!(
            c.send_and_collect(ev).await.text(),
            format!("You said: {prompt}")
        );
    }
    let there = Api::of(&remote).turns_asked("one of a pair", 3).await;
    let convs: Vec<&str> = there
        .iter()
        .map(|t| t["conversation"].as_str().unwrap())
        .collect();
    let distinct: std::collections::BTreeSet<_> = convs.iter().collect();
    assert_eq!(distinct.len(), 2, "two conversations there: {convs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_here_cancels_the_run_there() {
    let dir = tempfile::tempdir().unwrap();
    let remote = Daemon::start(&dir.path().join("remote"), &[]);
    let d = near(dir.path(), &remote);
    let (api, remote_api) = (Api::of(&d), Api::of(&remote));
    let mut c = Client::new(&d.relay, d.agent).await;

    let ev = c.prompt_event("sleep 30000", None);
    c.watch(&ev.id);
    c.publish(&ev).await;
    let turn = format!("nipxx:{}", ev.id.to_hex());
    api.until_state(&turn, "running").await;
    let there = remote_api.turns_asked("sleep 30000", 1).await;
    let there = there[0]["id"].as_str().unwrap().to_string();
    remote_api.until_state(&there, "running").await;
    assert_eq!(api.cancel(&turn).await, 200);
    let run = c
        .collect(&ev.id, Duration::from_secs(10), Duration::from_millis(200))
        .await;
    assert_eq!(run.error_code(), "CANCELLED", "{:?}", run.terminal);
    let ended = remote_api.until_state(&there, "ended").await;
    assert_eq!(ended["ended_as"], "cancelled", "the run there: {ended}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_here_mid_turn_ends_the_turn_once_and_cancels_the_run_there() {
    let dir = tempfile::tempdir().unwrap();
    let remote = Daemon::start(&dir.path().join("remote"), &[]);
    let mut d = near(dir.path(), &remote);
    let remote_api = Api::of(&remote);
    let c = Client::new(&d.relay, d.agent).await;
    let ev = c.prompt_event("sleep 30000", None);
    c.watch(&ev.id);
    c.publish(&ev).await;
    let there = remote_api.turns_asked("sleep 30000", 1).await;
    let there = there[0]["id"].as_str().unwrap().to_string();
    remote_api.until_state(&there, "running").await;

    // SIGKILL mid-turn, then a start on the same data dir: the turn here ends interrupted, and the run
    // there is cancelled (not left to sleep its 30 s out).
    d.kill();
    let d = near(dir.path(), &remote);
    let ended = remote_api.until_state(&there, "ended").await;
    assert_eq!(ended["ended_as"], "cancelled", "the run there: {ended}");
    let turn = format!("nipxx:{}", ev.id.to_hex());
    let here = Api::of(&d).until_state(&turn, "ended").await;
    assert_eq!(here["ended_as"], "failed", "{here}");
    assert_eq!(here["outcome"]["code"], "interrupted", "{here}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_agent_that_cannot_be_reached_fails_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agentwire.toml");
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("ws://{}", closed.local_addr().unwrap());
    drop(closed);
    std::fs::write(
        &config,
        format!(
            "[agents.far]\nkind = \"nipxx\"\npubkey = \"{}\"\nrelays = [\"{url}\"]\n",
            nostr::prelude::Keys::generate().public_key().to_hex()
        ),
    )
    .unwrap();
    let d = Daemon::start(
        &dir.path().join("data"),
        &["--config", config.to_str().unwrap(), "--agent", "far"],
    );
    let mut c = Client::new(&d.relay, d.agent).await;
    let started = Instant::now();
    let run = c.ask("anyone there?").await;
    assert_eq!(run.error_code(), "MODEL_UNAVAILABLE", "{:?}", run.terminal);
    assert!(
        format!("{:?}", run.terminal).contains("cannot be reached"),
        "{:?}",
        run.terminal
    );
    assert!(started.elapsed() < Duration::from_secs(10), "no hang");
}
