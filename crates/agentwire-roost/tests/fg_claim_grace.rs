//! `PI_ROOST_FG_CLAIM_GRACE_MS`, as the daemon reads it from its environment at start: a value that does
//! not fit stops the start with an error naming it; a short grace releases a departed foreground peer's
//! claims that much sooner than the default five seconds. A test binary of its own: it sets the process's
//! environment, which no other test here may read meanwhile.

mod common;

use agentwire_roost::daemon::{Daemon, DaemonConfig, FG_CLAIM_GRACE_ENV};
use common::Client;
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

fn config(dir: &Path) -> DaemonConfig {
    DaemonConfig {
        socket: dir.join("run").join("roost.sock"),
        data_dir: dir.join("data"),
        profiles: Default::default(),
        hosted: Default::default(),
        retention: None,
        terminal_holder: None,
        concierge: Default::default(),
        calendar: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grace_is_read_from_the_environment_and_a_bad_one_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());

    std::env::set_var(FG_CLAIM_GRACE_ENV, "5s");
    let refused = Daemon::start(cfg.clone()).await.err().expect("refused");
    let said = refused.to_string();
    assert!(
        said.contains("PI_ROOST_FG_CLAIM_GRACE_MS=\"5s\"") && said.contains("milliseconds"),
        "{said}"
    );
    assert!(!cfg.socket.exists(), "nothing was served");

    std::env::set_var(FG_CLAIM_GRACE_ENV, "300");
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    std::env::remove_var(FG_CLAIM_GRACE_ENV);
    let mut ctl = Client::connect(&cfg.socket).await;
    ctl.ok("task", json!({"action": "add", "title": "one"}))
        .await;
    let mut pi = Client::connect(&cfg.socket).await;
    pi.ok("peer_register", json!({"name": "pi"})).await;
    pi.ok("task", json!({"action": "claim", "id": 1})).await;
    let left = Instant::now();
    drop(pi);
    // Released within the grace and a housekeeping tick (1 s), long before the default 5 s.
    let state = |list: &serde_json::Value| list["tasks"][0]["state"].as_str().map(String::from);
    loop {
        let list = ctl.ok("task", json!({"action": "list"})).await;
        if state(&list).as_deref() == Some("open") {
            break;
        }
        assert!(
            left.elapsed() < Duration::from_millis(3500),
            "still held after {:?}: {list}",
            left.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let events = ctl.ok("events", json!({})).await;
    assert!(
        events["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["why"] == "release" && e["text"] == "#1 one: pi left"),
        "{events}"
    );
    daemon.shutdown();
}
