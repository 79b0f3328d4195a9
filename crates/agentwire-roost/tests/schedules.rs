//! A schedule across a real restart of the daemon (its store, its socket, its jobs re-adopted): a run that
//! fell due while the daemon was down runs once when it starts, though the last run's job still lives on
//! after reporting `done` (an agent that waits for its next reply, as engine agents' jobs do). Only a last
//! job still at work skips a run.

mod common;

use agentwire_roost::daemon::{Calendar, Daemon, DaemonConfig};
use agentwire_roost::proto::when::Zone;
use common::Client;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// 2026-12-04 17:59:00 UTC.
const T0: u64 = 1_796_407_140;

fn config(dir: &Path, clock: &Arc<AtomicU64>) -> DaemonConfig {
    let mut profiles = HashMap::new();
    // An agent the test speaks for: it writes its environment (its token) and lives on.
    profiles.insert("agent".to_string(), common::protocol_agent_profile());
    let clock = clock.clone();
    DaemonConfig {
        socket: dir.join("run").join("roost.sock"),
        data_dir: dir.join("data"),
        profiles,
        hosted: Default::default(),
        retention: None,
        terminal_holder: None,
        concierge: Default::default(),
        calendar: Calendar {
            zone: Zone::named("UTC").unwrap(),
            clock: Arc::new(move || clock.load(Ordering::SeqCst)),
        },
    }
}

/// The schedule's runs so far and its jobs (the rows named after it), once there are `want` jobs (at most
/// 4 s: a tick is a second).
async fn runs(ctl: &mut Client, want: usize) -> (u64, Vec<String>) {
    let mut jobs = Vec::new();
    for _ in 0..40 {
        let rows = ctl.ok("rows", json!({})).await;
        jobs = rows["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["name"] == "minutely")
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect();
        if jobs.len() >= want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let list = ctl.ok("schedules", json!({})).await;
    (list["schedules"][0]["runs"].as_u64().unwrap(), jobs)
}

/// Job `id`'s agent reports `state`, and stays connected.
async fn report(cfg: &DaemonConfig, id: &str, state: &str) -> Client {
    let token = common::job_token(&cfg.data_dir.join("jobs"), id).await;
    let mut c = Client::connect(&cfg.socket).await;
    c.ok(
        "report",
        json!({"id": id, "token": token, "report": {"state": state, "summary": state}}),
    )
    .await;
    c
}

fn skipped(feed: &Value) -> bool {
    feed["events"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["what"] == "schedule" && e["text"].as_str().unwrap_or("").contains("skipped"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_missed_while_the_daemon_was_down_runs_at_start_after_a_done_job() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(AtomicU64::new(T0));
    let cfg = config(dir.path(), &clock);
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut ctl = Client::connect(&cfg.socket).await;
    let s = ctl
        .ok(
            "schedule-add",
            json!({"profile": "agent", "task": "check", "when": "every 1m", "name": "minutely"}),
        )
        .await;
    let due = s["schedule"]["nextAt"].as_u64().unwrap();
    assert_eq!(due, T0 + 60);

    // Its first run; the job does its work, reports done, and lives on waiting for a reply.
    clock.store(due, Ordering::SeqCst);
    let (n, jobs) = runs(&mut ctl, 1).await;
    assert_eq!((n, jobs.len()), (1, 1), "it ran");
    let _first = report(&cfg, &jobs[0], "done").await;

    // Stopped 5 s before its next run, back 3 s after it.
    clock.store(due + 55, Ordering::SeqCst);
    daemon.shutdown();
    drop(daemon);
    drop(ctl);
    clock.store(due + 63, Ordering::SeqCst);
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut ctl = Client::connect(&cfg.socket).await;
    let (n, jobs) = runs(&mut ctl, 2).await;
    let feed = ctl.ok("events", json!({})).await;
    assert!(
        !skipped(&feed),
        "not skipped: its last job was done: {feed}"
    );
    assert_eq!((n, jobs.len()), (2, 2), "the missed run ran at start");

    // A run whose last job is still at work is skipped, so runs do not pile up.
    let newest = ctl.ok("schedules", json!({})).await["schedules"][0]["lastJob"]
        .as_str()
        .unwrap()
        .to_string();
    let _second = report(&cfg, &newest, "working").await;
    clock.store(due + 63 + 60, Ordering::SeqCst);
    let mut seen = false;
    for _ in 0..40 {
        if skipped(&ctl.ok("events", json!({})).await) {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(seen, "skipped while its last job works");
    assert_eq!(runs(&mut ctl, 2).await.1.len(), 2);
    let rows = ctl.ok("rows", json!({})).await;
    for r in rows["rows"].as_array().unwrap() {
        ctl.ok("stop", json!({ "id": r["id"] })).await;
    }
    daemon.shutdown();
}
