//! An agent's `max_concurrent_turns` in the real daemon: with the agent busy, a NIP-XX prompt from another
//! person waits for it and then runs, and a fisk-ai request is refused with `capacity`.

mod common;

use agentwire_testkit::NatsServer;
use common::{Client, Daemon};
use std::process::Command;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_agent_queues_nipxx_prompts_and_refuses_fisk_requests() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agentwire.toml");
    std::fs::write(
        &config,
        "[agents.one]\nkind = \"demo\"\nmax_concurrent_turns = 1\n",
    )
    .unwrap();
    let d = Daemon::start(
        &dir.path().join("data"),
        &[
            "--config",
            config.to_str().unwrap(),
            "--agent",
            "one",
            "--nats",
            &nats.url,
            "--identity",
            "one",
        ],
    );
    let mut alice = Client::new(&d.relay, d.agent).await;
    let mut bob = Client::new(&d.relay, d.agent).await;
    // The first turn holds the agent for 4 s, long past what the checks below take even on a loaded machine.
    let long = alice.prompt_event("sleep 4000", None);
    alice.watch(&long.id);
    alice.publish(&long).await;
    // The first turn runs.
    alice.wait_started(&long.id, Duration::from_secs(10)).await;

    let out = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args([
            "ask",
            "--nats",
            &nats.url,
            "--identity",
            "one",
            "quick",
            "hi",
        ])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr.contains("capacity"), "{stderr}");

    // Bob's prompt waits for the agent: no answer while the first turn runs, then its answer.
    let waiting = bob.prompt_event("quick from bob", None);
    bob.watch(&waiting.id);
    bob.publish(&waiting).await;
    let early = bob
        .collect(&waiting.id, Duration::from_millis(800), Duration::ZERO)
        .await;
    assert!(
        early.terminal.is_none(),
        "bob's prompt ran while the agent was busy"
    );
    let first = alice
        .collect(&long.id, Duration::from_secs(10), Duration::ZERO)
        .await;
    assert_eq!(first.text(), "slept 4000 ms");
    let waited = bob
        .collect(&waiting.id, Duration::from_secs(10), Duration::ZERO)
        .await;
    assert_eq!(waited.text(), "from bob");
}
