//! Two `agentwire serve` processes serving one NIP-XX agent: the same secret key from one key file
//! (`[nipxx] key_file`), the same relay, one JetStream journal. Each prompt runs once and gets one
//! terminal however many instances see it; a run whose instance is killed gets exactly one terminal,
//! signed with the shared key, from the other instance once the dead one's lease has run out. A corrupt
//! conversation claim in the shared journal fails only its session's next prompt, once.

mod common;

use agentwire_nostr::client::Terminal;
use agentwire_store::Journal;
use agentwire_testkit::NatsServer;
use common::{Client, Daemon};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

const LEASE_SECS: u64 = 2;

fn serve(dir: &Path, relay: &str, url: &str, key: &Path, instance: &str) -> Daemon {
    serve_leased(dir, relay, url, key, instance, LEASE_SECS)
}

fn serve_leased(
    dir: &Path,
    relay: &str,
    url: &str,
    key: &Path,
    instance: &str,
    lease_secs: u64,
) -> Daemon {
    let config = dir.join(format!("{instance}.toml"));
    std::fs::write(
        &config,
        format!(
            "[nipxx]\nkey_file = \"{}\"\n[journal]\nkind = \"jetstream\"\nurl = \"{url}\"\n\
             stream = \"NFLEET\"\ninstance = \"{instance}\"\nlease_secs = {lease_secs}\n",
            key.display()
        ),
    )
    .unwrap();
    Daemon::start(
        &dir.join(instance),
        &["--config", config.to_str().unwrap(), "--relay", relay],
    )
}

async fn shared_journal(url: &str) -> agentwire_store::jetstream::JetStreamJournal {
    let client = async_nats::connect(url).await.unwrap();
    let config = agentwire_store::jetstream::JetStreamConfig {
        prefix: "NFLEET".into(),
        replicas: 1,
        lease: Duration::from_secs(LEASE_SECS),
    };
    agentwire_store::jetstream::JetStreamJournal::open(client, &config)
        .await
        .unwrap()
}

/// The journal's request id of a prompt.
fn request(prompt: &nostr::prelude::EventId) -> agentwire_core::RequestId {
    agentwire_core::RequestId::new(format!("nipxx:{}", prompt.to_hex())).unwrap()
}

/// A secret key in a file of mode `mode`.
fn key_file(dir: &Path, mode: u32) -> std::path::PathBuf {
    let path = dir.join(format!("agent-{mode:o}.key"));
    let keys = nostr::prelude::Keys::generate();
    std::fs::write(&path, keys.secret_key().to_secret_hex()).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_with_one_key_run_each_prompt_once_and_a_dead_ones_run_ends_once() {
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start_jetstream(&dir.path().join("js"));
    let key = key_file(dir.path(), 0o600);
    let relay = Daemon::start(&dir.path().join("relay"), &[]);
    let shared = shared_journal(&nats.url).await;

    // One instance alone first: what one run of a prompt puts on the relay.
    let mut a = serve(dir.path(), &relay.relay, &nats.url, &key, "host-a");
    let mut c = Client::new(&relay.relay, a.agent).await;
    let alone = c.ask("calc 1*7").await;
    assert_eq!(alone.text(), "7");
    let one_run = alone.raw.len();

    let mut b = serve(dir.path(), &relay.relay, &nats.url, &key, "host-b");
    assert_eq!(a.agent, b.agent, "one agent, one key");
    let mut owners = Vec::new();
    for i in 2..=9u32 {
        let run = c.ask(&format!("calc {i}*7")).await;
        assert_eq!(run.text(), (i * 7).to_string());
        assert_eq!(run.terminals, 1, "one terminal for prompt {i}");
        assert_eq!(
            run.raw.len(),
            one_run,
            "what one run publishes, and nothing from the other instance: {:?}",
            run.raw
        );
        let turn = shared
            .lookup(request(&run.prompt))
            .await
            .unwrap()
            .expect("journaled");
        owners.push(turn.owner);
    }
    eprintln!("prompts served by {owners:?}");

    // A long run; the instance that took it is killed.
    let long = c.prompt_event("sleep 60000", None);
    c.watch(&long.id);
    c.publish(&long).await;
    let id = request(&long.id);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let owner = loop {
        if let Some(t) = shared.lookup(id.clone()).await.unwrap() {
            break t.owner;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run was not taken"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // The long run started.
    c.wait_started(&long.id, Duration::from_secs(10)).await;
    match owner.as_str() {
        "host-a" => a.kill(),
        "host-b" => b.kill(),
        other => panic!("owned by {other}"),
    }
    let cut = c
        .collect(
            &long.id,
            Duration::from_secs(LEASE_SECS * 6),
            Duration::from_secs(1),
        )
        .await;
    match &cut.terminal {
        Some(Terminal::Error(e)) => assert_eq!(e.code.as_str(), "INTERNAL_ERROR"),
        other => panic!("expected the crash's INTERNAL_ERROR, got {other:?}"),
    }
    assert_eq!(cut.terminals, 1, "exactly one terminal");
    let ended = shared.lookup(id).await.unwrap().unwrap();
    assert!(ended.outcome.is_some());
    // The survivor goes on serving the agent.
    let next = c.ask("calc 6*7").await;
    assert_eq!(next.text(), "42");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_claim_fails_its_sessions_prompt_with_one_error_and_the_agent_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start_jetstream(&dir.path().join("js"));
    let key = key_file(dir.path(), 0o600);
    let relay = Daemon::start(&dir.path().join("relay"), &[]);
    let shared = shared_journal(&nats.url).await;
    let a = serve(dir.path(), &relay.relay, &nats.url, &key, "host-a");
    let mut c = Client::new(&relay.relay, a.agent).await;
    let first = c.prompt_event("quick one", Some("s1"));
    assert_eq!(c.send_and_collect(first.clone()).await.text(), "one");
    let conv = shared
        .lookup(request(&first.id))
        .await
        .unwrap()
        .unwrap()
        .conversation_id;
    // Someone with access to the stream overwrites the session's claim with bytes that name no turn.
    let claims = async_nats::jetstream::new(async_nats::connect(&nats.url).await.unwrap())
        .get_key_value("NFLEET_CLAIMS")
        .await
        .unwrap();
    let conv_key = agentwire_store::jetstream::bucket_key(conv.as_str());
    claims
        .put(&conv_key, vec![0xff, 0xfe].into())
        .await
        .unwrap();
    // The session's next prompt ends once, with a typed error, instead of waiting forever.
    let second = c.prompt_event("quick two", Some("s1"));
    let run = c.send_and_collect(second).await;
    assert_eq!(run.error_code(), "INTERNAL_ERROR");
    assert_eq!(run.terminals, 1);
    // Another session is served, by the same instance: a corrupt claim is not a failing journal.
    let other = c.prompt_event("quick three", Some("s2"));
    assert_eq!(c.send_and_collect(other).await.text(), "three");
    // Once the bad claim is deleted, the session takes prompts again.
    claims.delete(&conv_key).await.unwrap();
    let again = c.prompt_event("quick four", Some("s1"));
    assert_eq!(c.send_and_collect(again).await.text(), "four");
}

#[test]
fn a_key_file_that_is_missing_or_readable_by_others_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    for (key, says) in [
        (
            dir.path().join("absent.key"),
            "copy one instance's agent.key",
        ),
        (key_file(dir.path(), 0o644), "chmod 600"),
    ] {
        let config = dir.path().join("bad.toml");
        std::fs::write(
            &config,
            format!("[nipxx]\nkey_file = \"{}\"\n", key.display()),
        )
        .unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentwire"))
            .args([
                "serve",
                "--http-listen",
                "127.0.0.1:0",
                "--config",
                config.to_str().unwrap(),
                "--data-dir",
                dir.path().join("data").to_str().unwrap(),
                "--relay-listen",
                "127.0.0.1:0",
            ])
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(err.contains(says), "{err}");
        assert!(
            !dir.path().join("data").join("agent.key").exists(),
            "no key of its own instead"
        );
    }
}

fn signal(d: &Daemon, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &d.child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_runs_one_prompt_at_a_time_when_its_prompts_land_on_two_instances() {
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start_jetstream(&dir.path().join("js"));
    let key = key_file(dir.path(), 0o600);
    let relay = Daemon::start(&dir.path().join("relay"), &[]);
    let shared = shared_journal(&nats.url).await;
    // A lease far longer than the test freezes an instance for: nobody ends its run meanwhile.
    let a = serve_leased(dir.path(), &relay.relay, &nats.url, &key, "host-a", 30);
    let mut c = Client::new(&relay.relay, a.agent).await;
    // The session's first prompt runs on host-a (alone so far)...
    let first = c.prompt_event("sleep 3000", Some("s1"));
    c.watch(&first.id);
    c.publish(&first).await;
    // Its first event: the run was journaled and runs.
    c.wait_started(&first.id, Duration::from_secs(10)).await;
    assert_eq!(
        shared
            .lookup(request(&first.id))
            .await
            .unwrap()
            .unwrap()
            .owner,
        "host-a"
    );
    // ...which is frozen (before its run can end) while the second arrives, so host-b takes it.
    signal(&a, "-STOP");
    let b = serve_leased(dir.path(), &relay.relay, &nats.url, &key, "host-b", 30);
    let second = c.prompt_event("calc 3*3", Some("s1"));
    c.watch(&second.id);
    c.publish(&second).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let taken = loop {
        if let Some(t) = shared.lookup(request(&second.id)).await.unwrap() {
            break t;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "host-b did not take it"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(taken.owner, "host-b");
    // It waits for the session's running prompt: no answer while host-a cannot end that one.
    let early = c
        .collect(&second.id, Duration::from_secs(1), Duration::ZERO)
        .await;
    assert_eq!(early.terminals, 0, "{:?}", early.terminal);
    assert!(shared
        .lookup(request(&second.id))
        .await
        .unwrap()
        .unwrap()
        .outcome
        .is_none());
    // host-a goes on: its prompt ends, and then host-b runs the next one.
    signal(&a, "-CONT");
    let one = c
        .collect(
            &first.id,
            Duration::from_secs(10),
            Duration::from_millis(200),
        )
        .await;
    assert_eq!(one.text(), "slept 3000 ms");
    let two = c
        .collect(
            &second.id,
            Duration::from_secs(10),
            Duration::from_millis(300),
        )
        .await;
    assert_eq!(two.text(), "9");
    assert_eq!((one.terminals, two.terminals), (1, 1));
    drop(b);
}
