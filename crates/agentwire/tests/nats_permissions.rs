//! The nats-server permissions `docs/security.md` gives a fisk-ai deployment, used as they are written
//! there: a worker with a JetStream journal and queued jobs, and two callers, each with its own inbox
//! prefix. The worker serves, a caller is answered (asking and enqueueing), and another caller can neither
//! read those replies nor reach the journal.

mod common;

use agentwire_testkit::NatsServer;
use common::Daemon;
use futures_util::StreamExt;
use std::process::Command;
use std::time::Duration;

const WORKER_PASSWORD: &str = "aw-worker-pw-test";
const ALICE_PASSWORD: &str = "aw-alice-pw-test";
const BOB_PASSWORD: &str = "aw-bob-pw-test";

/// The `conf` block of docs/security.md.
fn documented_config() -> String {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/security.md"),
    )
    .expect("docs/security.md");
    let start = doc.find("```conf\n").expect("a conf block") + "```conf\n".len();
    let len = doc[start..].find("```").expect("its end");
    doc[start..start + len].to_string()
}

fn write(dir: &std::path::Path, name: &str, body: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p.to_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_permissions_serve_a_caller_and_keep_others_out() {
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start_with_config(&format!(
        "AGENTWIRE_PASSWORD: \"{WORKER_PASSWORD}\"\nALICE_PASSWORD: \"{ALICE_PASSWORD}\"\n\
         BOB_PASSWORD: \"{BOB_PASSWORD}\"\njetstream {{ store_dir: {:?} }}\n{}",
        dir.path().join("js").display().to_string(),
        documented_config()
    ));
    let worker = write(
        dir.path(),
        "worker.toml",
        "[nats]\nidentity = \"support\"\nuser = \"agentwire\"\npassword_env = \"AW_PW\"\n\
         inbox_prefix = \"_INBOX.agentwire\"\njobs = true\n[journal]\nkind = \"jetstream\"\n",
    );
    let _d = Daemon::start_with_env(
        &dir.path().join("data"),
        &["--config", &worker, "--nats", &nats.url],
        &[("AW_PW", WORKER_PASSWORD)],
    );

    // Bob listens where alice's replies go, and tries the journal.
    let port = nats.url.rsplit(':').next().unwrap();
    let bob = async_nats::ConnectOptions::new()
        .user_and_password("bob".into(), BOB_PASSWORD.into())
        .custom_inbox_prefix("_INBOX.bob")
        .connect(format!("nats://127.0.0.1:{port}"))
        .await
        .unwrap();
    let mut overheard = bob.subscribe("_INBOX.alice.>").await.unwrap();
    bob.flush().await.unwrap();

    let alice = write(
        dir.path(),
        "alice.toml",
        "[nats]\nuser = \"alice\"\npassword_env = \"ALICE_PW\"\ninbox_prefix = \"_INBOX.alice\"\n",
    );
    // Alice asks (request/reply) and enqueues (a queued job): each answered.
    for (how, prompt, answer) in [(None, "2+3", "5"), (Some("--queue"), "3+4", "7")] {
        let mut args = vec![
            "--config",
            &alice,
            "ask",
            "--nats",
            &nats.url,
            "--identity",
            "support",
        ];
        args.extend(how);
        args.extend(["calc", prompt]);
        let out = Command::new(env!("CARGO_BIN_EXE_agentwire"))
            .args(&args)
            .env("ALICE_PW", ALICE_PASSWORD)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        assert_eq!(
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).trim()
            ),
            (Some(0), answer),
            "alice is answered ({how:?}): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let heard = tokio::time::timeout(Duration::from_millis(500), overheard.next()).await;
    assert!(
        !matches!(heard, Ok(Some(_))),
        "bob read a reply meant for alice"
    );

    let mut js = async_nats::jetstream::new(bob.clone());
    js.set_timeout(Duration::from_secs(2));
    assert!(
        js.get_key_value("AGENTWIRE_TURNS").await.is_err(),
        "bob reached the journal"
    );
    // Refused by the server (a permissions violation), so never stored.
    let _ = bob.publish("$KV.AGENTWIRE_TURNS.forged", "x".into()).await;
    let _ = bob.flush().await;
    let worker_view = async_nats::ConnectOptions::new()
        .user_and_password("agentwire".into(), WORKER_PASSWORD.into())
        .custom_inbox_prefix("_INBOX.agentwire")
        .connect(format!("nats://127.0.0.1:{port}"))
        .await
        .unwrap();
    let worker_js = async_nats::jetstream::new(worker_view);
    // The worker acknowledged alice's job (its ack subject is allowed): it left the queue.
    let mut jobs = worker_js.get_stream("FISK_AI_JOBS_support").await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while jobs.info().await.unwrap().state.messages > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the answered job is still queued: the worker could not ack it"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let turns = worker_js
        .get_key_value("AGENTWIRE_TURNS")
        .await
        .expect("the worker reaches its journal");
    assert!(
        turns.get("forged").await.unwrap().is_none(),
        "bob's write reached the journal"
    );
}
