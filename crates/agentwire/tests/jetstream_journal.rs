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

fn config(dir: &Path, name: &str, url: &str, instance: &str) -> String {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "[journal]\nkind = \"jetstream\"\nurl = \"{url}\"\nstream = \"AWTEST\"\ninstance = \"{instance}\"\n"
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
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
    let started = c
        .collect(&long.id, Duration::from_millis(500), Duration::ZERO)
        .await;
    assert!(!started.events.is_empty(), "the long run started");
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
