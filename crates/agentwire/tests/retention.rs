//! The journal's retention over the real daemon: an ended turn is forgotten once older than `[journal]
//! retention_days` while the daemon runs (fisk-ai's are kept; see the store's own test), and a retention
//! shorter than what resend detection needs is refused before anything starts.

mod common;

use common::{Client, Daemon};
use std::time::{Duration, Instant};

/// The turns in the daemon's journal.
fn journaled(data_dir: &std::path::Path) -> i64 {
    let db = rusqlite::Connection::open(data_dir.join("journal.sqlite")).unwrap();
    db.query_row("SELECT count(*) FROM turns", [], |r| r.get(0))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_turn_is_forgotten_after_the_retention_while_the_daemon_runs() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agentwire.toml");
    // About 4 s: the shortest the backlog horizon (1 s here) and the relay's retention allow.
    std::fs::write(
        &cfg,
        "[journal]\nretention_days = 0.00005\n[relay.retention]\nagent_days = 0.00005\n",
    )
    .unwrap();
    let data = dir.path().join("data");
    let d = Daemon::start(
        &data,
        &[
            "--config",
            cfg.to_str().unwrap(),
            "--backlog-horizon-secs",
            "1",
        ],
    );
    let mut c = Client::new(&d.relay, d.agent).await;
    assert_eq!(c.ask("quick kept a while").await.text(), "kept a while");
    assert_eq!(journaled(&data), 1);
    let deadline = Instant::now() + Duration::from_secs(20);
    while journaled(&data) > 0 {
        assert!(Instant::now() < deadline, "the ended turn was never pruned");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The daemon serves on.
    assert_eq!(c.ask("quick still here").await.text(), "still here");
}

#[test]
fn a_retention_shorter_than_the_relay_keeps_prompts_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agentwire.toml");
    std::fs::write(&cfg, "[journal]\nretention_days = 2\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args(["--config", cfg.to_str().unwrap(), "config"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("[journal] retention_days") && err.contains("agent_days"),
        "{err}"
    );
}
