//! What survives a restart of the roost daemon besides jobs and replies, over a real socket with real
//! processes: the conversation a job was dispatched for, and a stop's pending SIGKILL (re-armed for the
//! same process, dropped for a process that is gone or a pid that is another process's now).

use agentwire_roost::client::{ClientError, Controller};
use agentwire_roost::daemon::profile::{Profile, TaskMode};
use agentwire_roost::daemon::store::{Escalations, Store};
use agentwire_roost::daemon::{process, Daemon, DaemonConfig, STOP_GRACE};
use agentwire_roost::proto::escalation::Escalation;
use agentwire_roost::proto::wire::ErrorCode;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn config(dir: &Path) -> DaemonConfig {
    let sh = |script: &str| Profile {
        command: vec!["sh".into(), "-c".into(), script.into()],
        task: TaskMode::Type,
        protocol: true,
        ..Default::default()
    };
    let mut profiles = HashMap::new();
    profiles.insert("agent".to_string(), sh("exec sleep 60"));
    profiles.insert("other".to_string(), sh("exec sleep 60"));
    // Ignores SIGTERM, its shell and the sleeps it starts alike.
    profiles.insert(
        "stubborn".to_string(),
        sh("trap '' TERM; echo $$ > pid; while :; do sleep 1; done"),
    );
    DaemonConfig {
        socket: dir.join("run").join("roost.sock"),
        data_dir: dir.join("data"),
        profiles,
        hosted: Default::default(),
        retention: None,
        terminal_holder: None,
        concierge: Default::default(),
        calendar: Default::default(),
    }
}

async fn ok(c: &mut Controller, op: &str, args: Value) -> Value {
    c.call(op, args)
        .await
        .unwrap_or_else(|e| panic!("{op}: {e}"))
}

/// The id of the job `conversation {profile, conversation}` finds, if any.
async fn found(c: &mut Controller, profile: &str, conversation: &str) -> Option<String> {
    let r = ok(
        c,
        "conversation",
        json!({"profile": profile, "conversation": conversation}),
    )
    .await;
    r["job"]["id"].as_str().map(String::from)
}

/// Whether `pid` is a live process (not gone, not a zombie).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| !r.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversations_job_is_found_again_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut c = Controller::connect(&cfg.socket).await.unwrap();
    assert_eq!(found(&mut c, "agent", "nipxx:c1").await, None);
    let dispatch =
        |profile: &str| json!({"profile": profile, "task": "t", "conversation": "nipxx:c1"});
    let first = ok(&mut c, "dispatch", dispatch("agent")).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let row = ok(
        &mut c,
        "conversation",
        json!({"profile": "agent", "conversation": "nipxx:c1"}),
    )
    .await["job"]
        .clone();
    assert_eq!(
        (row["id"].as_str(), row["conversation"].as_str()),
        (Some(first.as_str()), Some("nipxx:c1")),
        "the row, with its conversation: {row}"
    );
    // A newer job of the conversation serves it; another profile's and another conversation's are apart.
    let second = ok(&mut c, "dispatch", dispatch("agent")).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let other = ok(&mut c, "dispatch", dispatch("other")).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        found(&mut c, "agent", "nipxx:c1").await,
        Some(second.clone())
    );
    assert_eq!(found(&mut c, "other", "nipxx:c1").await, Some(other));
    assert_eq!(found(&mut c, "agent", "nipxx:c2").await, None);
    for bad in [
        json!({"profile": "agent", "conversation": "a b"}),
        json!({"profile": "agent", "conversation": "x".repeat(257)}),
        json!({"profile": "agent"}),
    ] {
        match c.call("conversation", bad.clone()).await {
            Err(ClientError::Refused { code, .. }) => assert_eq!(code, ErrorCode::BadRequest),
            other => panic!("{bad}: {other:?}"),
        }
    }
    match c
        .call(
            "dispatch",
            json!({"profile": "agent", "conversation": "a\nb"}),
        )
        .await
    {
        Err(ClientError::Refused { code, .. }) => assert_eq!(code, ErrorCode::BadRequest),
        other => panic!("a bad label is refused: {other:?}"),
    }

    // The daemon restarts: the label was written with the dispatch, before its answer.
    daemon.shutdown();
    drop((c, daemon));
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut c = Controller::connect(&cfg.socket).await.unwrap();
    assert_eq!(
        found(&mut c, "agent", "nipxx:c1").await,
        Some(second.clone())
    );
    // Whatever its state: stopped, it is still the one found (the caller decides what to do with it).
    ok(&mut c, "stop", json!({"id": second})).await;
    assert_eq!(
        found(&mut c, "agent", "nipxx:c1").await,
        Some(second.clone())
    );
    // Removed, it serves nothing; the one before it is found.
    ok(&mut c, "rm", json!({"id": second})).await;
    assert_eq!(
        found(&mut c, "agent", "nipxx:c1").await,
        Some(first.clone())
    );
    let rows = ok(&mut c, "rows", json!({})).await;
    for r in rows["rows"].as_array().unwrap() {
        ok(&mut c, "rm", json!({"id": r["id"]})).await;
    }
    daemon.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_inside_the_grace_is_still_escalated_by_the_next_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut c = Controller::connect(&cfg.socket).await.unwrap();
    let id = ok(
        &mut c,
        "dispatch",
        json!({"profile": "stubborn", "task": "t"}),
    )
    .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let pid_file = cfg.data_dir.join("jobs").join(&id).join("pid");
    let mut pid = None;
    for _ in 0..200 {
        pid = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok());
        if pid.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid = pid.expect("the job started");
    let stopped_at = Instant::now();
    ok(&mut c, "stop", json!({"id": id})).await;
    // The daemon goes away at once, well inside the grace, and a new one starts.
    daemon.shutdown();
    drop((c, daemon));
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    daemon.flush();
    // (Only while the grace surely runs: a loaded machine may have taken longer than it to get here.)
    if stopped_at.elapsed() < STOP_GRACE * 9 / 10 {
        assert!(
            running(pid),
            "SIGTERM alone does not end it, and the new daemon waits for the deadline"
        );
    }
    let bound = STOP_GRACE + Duration::from_secs(3);
    while running(pid) && stopped_at.elapsed() < bound {
        daemon.flush();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = stopped_at.elapsed();
    assert!(!running(pid), "the new daemon killed it within {bound:?}");
    assert!(took >= STOP_GRACE, "not before the grace: {took:?}");
    daemon.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journaled_escalation_kills_its_own_process_and_nothing_that_has_its_pid_now() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    std::fs::create_dir_all(&cfg.data_dir).unwrap();
    // Each in a process group of its own, as a job is: a SIGKILL to the group would reach it.
    let spawn = || {
        std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap()
    };
    let (mut stopped, mut stranger, mut ended) = (spawn(), spawn(), spawn());
    let ended_pid = ended.id();
    let ended_identity = process::identity(ended_pid).unwrap();
    ended.kill().unwrap();
    ended.wait().unwrap();
    let past = now_ms() - 1;
    let records = [
        // Its own process, past its deadline: killed at start.
        Escalation {
            job: "j1".into(),
            pid: stopped.id(),
            identity: process::identity(stopped.id()).unwrap(),
            deadline_ms: past,
        },
        // The pid is another process's now (another start time): never signalled.
        Escalation {
            job: "j2".into(),
            pid: stranger.id(),
            identity: format!("{}-before", process::identity(stranger.id()).unwrap()),
            deadline_ms: past,
        },
        // Gone while no daemon watched.
        Escalation {
            job: "j3".into(),
            pid: ended_pid,
            identity: ended_identity,
            deadline_ms: past,
        },
    ];
    let store_path = cfg.data_dir.join("roost.sqlite");
    Store::open(&store_path)
        .unwrap()
        .write(
            &[],
            &[],
            &[],
            &[],
            Escalations {
                armed: &records,
                done: &[],
            },
        )
        .unwrap();
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    let status = loop {
        if let Some(s) = stopped.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the due escalation was not carried out"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "SIGKILL");
    // Past a few housekeeping passes the stranger still runs.
    for _ in 0..3 {
        daemon.flush();
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    assert!(
        stranger.try_wait().unwrap().is_none(),
        "the stranger runs on"
    );
    daemon.flush();
    assert_eq!(
        Store::open(&store_path).unwrap().escalations().unwrap(),
        [],
        "every record is done or moot, and forgotten"
    );
    stranger.kill().unwrap();
    stranger.wait().unwrap();
    daemon.shutdown();
}
