//! Instance names on a shared journal. Two `serve` processes on one host, one agent key and one JetStream
//! journal, with no instance name set, get names of their own (the host's name and each data dir's id), so
//! neither takes the other's running turns for its own cut-off ones: every prompt gets its answer. A
//! second process given a name a live one holds refuses to start, naming the setting; once the holder is
//! gone (killed: after its renewals stop), the name is free again.

mod common;

use agentwire_nostr::client::Terminal;
use agentwire_testkit::NatsServer;
use common::{Client, Daemon};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LEASE_SECS: u64 = 2;
/// Prompts sent to the two instances: enough that both serve many of them.
const PROMPTS: u32 = 30;

fn config(dir: &Path, name: &str, url: &str, key: &Path, instance: Option<&str>) -> String {
    let path = dir.join(format!("{name}.toml"));
    let instance = instance
        .map(|i| format!("instance = \"{i}\"\n"))
        .unwrap_or_default();
    std::fs::write(
        &path,
        format!(
            "[nipxx]\nkey_file = \"{}\"\n[journal]\nkind = \"jetstream\"\nurl = \"{url}\"\n\
             stream = \"NAMES\"\nlease_secs = {LEASE_SECS}\n{instance}",
            key.display()
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

fn key_file(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("agent.key");
    std::fs::write(
        &path,
        nostr::prelude::Keys::generate()
            .secret_key()
            .to_secret_hex(),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_host_without_names_answer_every_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start_jetstream(&dir.path().join("js"));
    let key = key_file(dir.path());
    let relay = Daemon::start(&dir.path().join("relay"), &[]);
    let a_config = config(dir.path(), "a", &nats.url, &key, None);
    let b_config = config(dir.path(), "b", &nats.url, &key, None);
    let a = Daemon::start(
        &dir.path().join("a"),
        &["--config", &a_config, "--relay", &relay.relay],
    );
    let b = Daemon::start(
        &dir.path().join("b"),
        &["--config", &b_config, "--relay", &relay.relay],
    );
    assert_eq!(a.agent, b.agent);
    let id = |d: &str| std::fs::read_to_string(dir.path().join(d).join("instance-id")).unwrap();
    assert_ne!(id("a"), id("b"), "each data dir has an id of its own");

    let mut c = Client::new(&relay.relay, a.agent).await;
    for i in 1..=PROMPTS {
        let run = c.ask(&format!("calc {i}*3")).await;
        assert!(
            matches!(run.terminal, Some(Terminal::Response(_))) && run.terminals == 1,
            "prompt {i}: one answer, no error: {:?}",
            run.terminal
        );
        assert_eq!(run.text(), (i * 3).to_string());
    }
}

/// Starts `serve` and waits for it to exit or say it is ready: its exit status (none: ready) and stderr.
fn start_or_refuse(
    data: &Path,
    config: &str,
    relay: &str,
) -> (Option<i32>, String, std::process::Child) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args([
            "serve",
            "--http-listen",
            "127.0.0.1:0",
            "--data-dir",
            data.to_str().unwrap(),
            "--config",
            config,
            "--relay",
            relay,
            "--roost-socket",
            data.join("roost.sock").to_str().unwrap(),
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut out,
    )
    .unwrap();
    if out.contains("\"ready\":true") {
        return (None, String::new(), child);
    }
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    (status.code(), err, child)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_a_live_instance_holds_is_refused_and_freed_when_it_dies() {
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start_jetstream(&dir.path().join("js"));
    let key = key_file(dir.path());
    let relay = Daemon::start(&dir.path().join("relay"), &[]);
    let named = config(dir.path(), "named", &nats.url, &key, Some("aw-a"));
    let mut first = Daemon::start(
        &dir.path().join("first"),
        &["--config", &named, "--relay", &relay.relay],
    );

    let (code, err, _) = start_or_refuse(&dir.path().join("second"), &named, &relay.relay);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("[journal] instance") && err.contains("\"aw-a\""),
        "the refusal names the setting and the name: {err}"
    );

    // Killed: its name ages out of its renewals, and a new process takes it.
    first.kill();
    let t = Instant::now();
    let (code, err, mut child) = start_or_refuse(&dir.path().join("second"), &named, &relay.relay);
    assert_eq!(code, None, "started once the holder died: {err}");
    assert!(t.elapsed() < Duration::from_secs(LEASE_SECS * 3));
    let mut c = Client::new(&relay.relay, first.agent).await;
    assert_eq!(c.ask("calc 2*21").await.text(), "42");
    let _ = child.kill();
    let _ = child.wait();
}
