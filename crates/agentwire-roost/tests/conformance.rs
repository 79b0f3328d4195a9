//! The spec's conformance scenario for the Rust client: a scripted agent (`roost-echo-agent`) against a
//! real daemon: the first task as reply 1, reports setting the row, acks clearing the pending replies, a
//! daemon restart under the agent (it reconnects, says hello, reports, and takes the next reply once), and
//! its exit.

use agentwire_roost::client::Controller;
use agentwire_roost::daemon::profile::{Profile, TaskMode};
use agentwire_roost::daemon::{Daemon, DaemonConfig};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

fn config(dir: &Path) -> DaemonConfig {
    let mut profiles = HashMap::new();
    profiles.insert(
        "echo".to_string(),
        Profile {
            command: vec![env!("CARGO_BIN_EXE_roost-echo-agent").to_string()],
            task: TaskMode::Type,
            protocol: true,
            ..Default::default()
        },
    );
    DaemonConfig {
        socket: dir.join("s").join("roost.sock"),
        data_dir: dir.join("d"),
        profiles,
        hosted: Default::default(),
        retention: None,
        terminal_holder: None,
        concierge: Default::default(),
        calendar: Default::default(),
    }
}

async fn row_until(c: &mut Controller, what: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..200 {
        let rows = c.call("rows", json!({})).await.unwrap();
        if let Some(r) = rows["rows"].as_array().and_then(|r| r.first()) {
            if what(r) {
                return r.clone();
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!(
        "the row never got there: {:?}",
        c.call("rows", json!({})).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_keeps_the_protocol_across_a_daemon_restart() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut c = Controller::connect(&cfg.socket).await.unwrap();
    let job = c
        .call("dispatch", json!({"profile": "echo", "task": "first"}))
        .await
        .unwrap();
    let id = job["id"].as_str().unwrap().to_string();
    let r = row_until(&mut c, |r| {
        r["summary"] == "got: first" && r["pending"] == 0
    })
    .await;
    assert_eq!(r["connected"], true);
    assert_eq!(r["capabilities"], json!(["report", "replies"]));
    assert_eq!(
        c.call("reply", json!({"id": id, "text": "second"}))
            .await
            .unwrap()["seq"],
        2
    );
    row_until(&mut c, |r| {
        r["summary"] == "got: second" && r["pending"] == 0
    })
    .await;

    daemon.shutdown();
    drop(c);
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut c = Controller::connect(&cfg.socket).await.unwrap();
    // The agent reconnects by itself and reports again.
    row_until(&mut c, |r| r["connected"] == true).await;
    assert_eq!(
        c.call("reply", json!({"id": id, "text": "third"}))
            .await
            .unwrap()["seq"],
        3
    );
    row_until(&mut c, |r| {
        r["summary"] == "got: third" && r["pending"] == 0
    })
    .await;
    let job_dir = cfg.data_dir.join("jobs").join(&id);
    let received = std::fs::read_to_string(job_dir.join("received.txt")).unwrap();
    assert_eq!(
        received, "1 first\n2 second\n3 third\n",
        "each reply once, in order"
    );
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(job_dir.join("agent.json")).unwrap())
            .unwrap();
    assert_eq!(state["lastSeq"], 3);

    c.call("reply", json!({"id": id, "text": "bye"}))
        .await
        .unwrap();
    let r = row_until(&mut c, |r| r["state"] == "done" && r["connected"] == false).await;
    assert_eq!(r["summary"], "bye");
    let pid: u32 = std::fs::read_to_string(job_dir.join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    for _ in 0..100 {
        if !agentwire_roost::daemon::process::alive(pid) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    daemon.flush();
    assert!(
        !agentwire_roost::daemon::process::alive(pid),
        "the agent exited"
    );

    // A reply to a job that ended starts it again, and the new process takes only the new reply.
    let r = c
        .call("reply", json!({"id": id, "text": "again"}))
        .await
        .unwrap();
    assert_eq!(r["seq"], 5);
    row_until(&mut c, |r| {
        r["summary"] == "got: again" && r["pending"] == 0
    })
    .await;
    let received = std::fs::read_to_string(job_dir.join("received.txt")).unwrap();
    assert!(received.ends_with("4 bye\n5 again\n"), "{received}");
    c.call("stop", json!({"id": id})).await.unwrap();
    daemon.shutdown();
}
