//! The daemon with its journal on JetStream (`[journal] kind = "jetstream"`), against a real `nats-server`
//! with JetStream on: turns are journaled there and not in the data dir; a run cut off by `kill -9` ends
//! once, as interrupted, after the restart; and a fisk-ai conversation begun on one instance takes its
//! follow-up on another, which reads the conversation from the shared journal.

mod common;

use agentwire_nostr::client::Terminal;
use agentwire_testkit::NatsServer;
use common::{Client, Daemon};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

/// How long a turn's instance may be silent in these tests before another ends its turn.
const LEASE_SECS: u64 = 2;

fn config(dir: &Path, name: &str, url: &str, instance: &str) -> String {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "[journal]\nkind = \"jetstream\"\nurl = \"{url}\"\nstream = \"AWTEST\"\ninstance = \"{instance}\"\nlease_secs = {LEASE_SECS}\n"
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

/// The test's own handle on the shared journal, to see what the instances wrote.
async fn journal(url: &str) -> agentwire_store::jetstream::JetStreamJournal {
    let client = async_nats::connect(url).await.unwrap();
    let config = agentwire_store::jetstream::JetStreamConfig {
        prefix: "AWTEST".into(),
        replicas: 1,
        lease: Duration::from_secs(LEASE_SECS),
    };
    agentwire_store::jetstream::JetStreamJournal::open(client, &config)
        .await
        .unwrap()
}

fn agentwire(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("agentwire runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_are_journaled_on_jetstream_and_a_run_cut_off_by_a_crash_ends_once() {
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start_jetstream(&dir.path().join("js"));
    let config = config(dir.path(), "a", &nats.url, "host-a");
    // A relay that stays up, and an agent that crashes.
    let relay = Daemon::start(&dir.path().join("relay"), &[]);
    let data = dir.path().join("agent");
    let args = ["--config", config.as_str(), "--relay", relay.relay.as_str()];
    let mut agent = Daemon::start(&data, &args);
    let mut c = Client::new(&relay.relay, agent.agent).await;
    let done = c.ask("calc 2+3").await;
    assert_eq!(done.text(), "5");
    assert!(
        !data.join("journal.sqlite").exists(),
        "nothing is journaled in the data dir"
    );

    let long = c.prompt_event("sleep 60000", None);
    c.watch(&long.id);
    c.publish(&long).await;
    // The long run started.
    c.wait_started(&long.id, Duration::from_secs(10)).await;
    agent.kill();
    drop(agent);

    let _agent = Daemon::start(&data, &args);
    let cut = c
        .collect(
            &long.id,
            Duration::from_secs(10),
            Duration::from_millis(500),
        )
        .await;
    match &cut.terminal {
        Some(Terminal::Error(e)) => assert_eq!(e.code.as_str(), "INTERNAL_ERROR"),
        other => panic!("expected INTERNAL_ERROR for the interrupted run, got {other:?}"),
    }
    assert_eq!(cut.terminals, 1, "one terminal");
    // The restarted instance takes new turns on the same journal.
    let next = c.ask("calc 6*7").await;
    assert_eq!(next.text(), "42");
}

#[test]
fn a_conversation_begun_on_one_instance_takes_its_follow_up_on_another() {
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start_jetstream(&dir.path().join("js"));
    let a_config = config(dir.path(), "a", &nats.url, "host-a");
    let b_config = config(dir.path(), "b", &nats.url, "host-b");
    let serve = |data: &str, config: &str| {
        Daemon::start(
            &dir.path().join(data),
            &[
                "--config",
                config,
                "--nats",
                &nats.url,
                "--identity",
                "shared",
            ],
        )
    };
    let mut a = serve("a", &a_config);
    let out = agentwire(&[
        "ask",
        "--nats",
        &nats.url,
        "--identity",
        "shared",
        "calc",
        "2+3",
    ]);
    assert_eq!(text(&out.stdout).trim(), "5", "{}", text(&out.stderr));
    let token = text(&out.stderr)
        .lines()
        .find_map(|l| l.strip_prefix("conversation "))
        .expect("the token is printed")
        .to_string();
    a.kill();
    drop(a);

    // Another instance, with its own data dir: the conversation is in the shared journal.
    let _b = serve("b", &b_config);
    let out = agentwire(&[
        "ask",
        "--nats",
        &nats.url,
        "--identity",
        "shared",
        "--conversation",
        &token,
        "and",
        "then",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "You said: and then");
    let out = agentwire(&["read", "--nats", &nats.url, "--identity", "shared", &token]);
    let read = text(&out.stdout);
    assert!(
        read.contains("> calc 2+3") && read.contains("> and then"),
        "both turns, whichever instance ran them: {read}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_instance_dies_for_good_is_ended_once_by_another_after_its_lease() {
    use agentwire_store::Journal;
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start_jetstream(&dir.path().join("js"));
    let shared = journal(&nats.url).await;
    let serve = |data: &str, instance: &str| {
        let config = config(dir.path(), data, &nats.url, instance);
        Daemon::start(
            &dir.path().join(data),
            &[
                "--config",
                &config,
                "--nats",
                &nats.url,
                "--identity",
                "fleet",
            ],
        )
    };
    let mut a = serve("a", "host-a");
    let mut caller = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args([
            "ask",
            "--nats",
            &nats.url,
            "--identity",
            "fleet",
            "sleep",
            "60000",
        ])
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The run is journaled under host-a.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let turn = loop {
        if let Some(t) = shared.interrupted("host-a".into()).await.unwrap().pop() {
            break t;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the run was not taken"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Another instance is up while host-a runs it: host-a's lease is renewed, so the run is left alone.
    let _b = serve("b", "host-b");
    tokio::time::sleep(Duration::from_secs(LEASE_SECS * 2)).await;
    assert!(
        shared
            .lookup(turn.request_id.clone())
            .await
            .unwrap()
            .unwrap()
            .outcome
            .is_none(),
        "a live instance's run is not ended by another"
    );
    // host-a dies and does not come back: once its lease has run out, host-b ends the run.
    a.kill();
    let deadline = std::time::Instant::now() + Duration::from_secs(LEASE_SECS * 5);
    let outcome = loop {
        if let Some(o) = shared
            .lookup(turn.request_id.clone())
            .await
            .unwrap()
            .unwrap()
            .outcome
        {
            break o;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the abandoned run was not ended"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    match outcome {
        agentwire_core::Outcome::Failure(f) => {
            assert_eq!(f.code.as_str(), "interrupted", "{f:?}")
        }
        other => panic!("expected the crash's failure, got {other:?}"),
    }
    assert!(shared.abandoned().await.unwrap().is_empty());
    let _ = caller.kill();
    let _ = caller.wait();
}
