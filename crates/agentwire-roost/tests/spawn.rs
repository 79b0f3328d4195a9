//! The bounds on `spawn` over the real socket: a session spawns at most `MAX_CHILDREN_AT_WORK` children at
//! work (a child done or stopped frees its place), `SPAWNS_PER_MINUTE` a minute (counted on the daemon's
//! clock), `MAX_SPAWNED_RUNNING` spawned jobs run across the fleet (a done child that idles on counts), and
//! a terminal agent or a
//! `controller_only` profile is not spawned at all (a controller still dispatches them).

mod common;

use agentwire_roost::daemon::profile::{Profile, TaskMode};
use agentwire_roost::daemon::{Calendar, Daemon, DaemonConfig};
use agentwire_roost::proto::spawn_rules::{
    MAX_CHILDREN_AT_WORK, MAX_SPAWNED_RUNNING, SPAWNS_PER_MINUTE,
};
use agentwire_roost::proto::when::Zone;
use common::Client;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// 2026-12-04 17:59:00 UTC.
const T0: u64 = 1_796_407_140;

fn profile(script: &str, protocol: bool, controller_only: bool) -> Profile {
    Profile {
        command: vec!["sh".into(), "-c".into(), script.into()],
        task: TaskMode::Type,
        protocol,
        controller_only,
        ..Default::default()
    }
}

fn config(dir: &Path, clock: &Arc<AtomicU64>) -> DaemonConfig {
    let mut profiles = HashMap::new();
    // A child that writes its environment (its token) and waits, never reporting: at work until stopped.
    profiles.insert(
        "kid".to_string(),
        profile("env > env.txt; exec sleep 30", true, false),
    );
    profiles.insert("shell".to_string(), profile("exec sleep 30", false, false));
    profiles.insert(
        "deploy".to_string(),
        profile("env > env.txt; exec sleep 30", true, true),
    );
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

/// A foreground peer (a script, a model agent's roost tools) named `name`.
async fn peer(cfg: &DaemonConfig, name: &str) -> Client {
    let mut c = Client::connect(&cfg.socket).await;
    c.ok("peer_register", json!({ "name": name })).await;
    c
}

async fn spawn(c: &mut Client, profile: &str, name: &str) -> Value {
    c.call(
        "spawn",
        json!({"profile": profile, "task": "part", "name": name}),
    )
    .await
}

fn id(answer: &Value) -> String {
    assert_eq!(answer["ok"], true, "{answer}");
    answer["result"]["id"].as_str().unwrap().to_string()
}

fn refused(answer: &Value, code: &str, says: &str) {
    assert_eq!(
        (answer["ok"].clone(), answer["code"].clone()),
        (json!(false), json!(code)),
        "{answer}"
    );
    let message = answer["error"].as_str().unwrap();
    assert!(message.contains(says), "{message:?} says {says:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawning_is_bounded_per_session_per_minute_and_in_all() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(AtomicU64::new(T0));
    let cfg = config(dir.path(), &clock);
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut ctl = Client::connect(&cfg.socket).await;
    let mut a = peer(&cfg, "a").await;

    // Children at work, per session.
    let mut kids: Vec<String> = Vec::new();
    for n in 0..MAX_CHILDREN_AT_WORK {
        kids.push(id(&spawn(&mut a, "kid", &format!("a{n}")).await));
    }
    let more = spawn(&mut a, "kid", "a-more").await;
    refused(&more, "full", "children are at work");
    // A child that is done frees its place (its process may idle on); so does one a person stopped.
    let token = common::job_token(&cfg.data_dir.join("jobs"), &kids[0]).await;
    let mut kid = Client::connect(&cfg.socket).await;
    kid.ok(
        "report",
        json!({"id": kids[0], "token": token, "report": {"state": "done", "summary": "did it"}}),
    )
    .await;
    kids.push(id(&spawn(&mut a, "kid", "a8").await));
    ctl.ok("stop", json!({ "id": kids[1] })).await;
    kids.push(id(&spawn(&mut a, "kid", "a9").await));
    assert_eq!(kids.len(), SPAWNS_PER_MINUTE);

    // The rate: ten a minute, by the daemon's clock.
    ctl.ok("stop", json!({ "id": kids[2] })).await;
    let more = spawn(&mut a, "kid", "a-fast").await;
    refused(&more, "rate_limited", "a minute");
    clock.fetch_add(59, Ordering::SeqCst);
    refused(
        &spawn(&mut a, "kid", "a-fast").await,
        "rate_limited",
        "a minute",
    );
    clock.fetch_add(1, Ordering::SeqCst);
    kids.push(id(&spawn(&mut a, "kid", "a10").await));

    // What a session may start at all: not a terminal agent, not a profile kept to controllers.
    refused(
        &spawn(&mut a, "shell", "sh").await,
        "unsupported",
        "terminal agent",
    );
    refused(
        &spawn(&mut a, "deploy", "dep").await,
        "unsupported",
        "controller_only",
    );
    refused(&spawn(&mut a, "nope", "x").await, "not_found", "no profile");
    // A person dispatches either.
    let shell = ctl.ok("dispatch", json!({"profile": "shell"})).await;
    let deploy = ctl.ok("dispatch", json!({"profile": "deploy"})).await;

    // In all, spawned jobs whose process runs count, whatever they reported: a's eight at work and the one
    // that reported done and idles on (a done child must not spawn the fleet past its bound). Three more
    // sessions fill the fleet's share; a fifth is refused though it has no child.
    let running_of_a = MAX_CHILDREN_AT_WORK + 1;
    let mut others = Vec::new();
    let mut filled = running_of_a;
    for who in ["b", "c", "d"] {
        let mut c = peer(&cfg, who).await;
        for n in 0..MAX_CHILDREN_AT_WORK.min(MAX_SPAWNED_RUNNING - filled) {
            kids.push(id(&spawn(&mut c, "kid", &format!("{who}{n}")).await));
            filled += 1;
        }
        others.push(c);
    }
    assert_eq!(filled, MAX_SPAWNED_RUNNING);
    let mut e = peer(&cfg, "e").await;
    refused(
        &spawn(&mut e, "kid", "e0").await,
        "full",
        "across the fleet",
    );

    // Nothing refused was started: the rows are the spawned children and the two dispatched.
    let rows = ctl.ok("rows", json!({})).await;
    let rows = rows["rows"].as_array().unwrap();
    assert_eq!(rows.len(), kids.len() + 2, "{rows:?}");
    for r in rows {
        ctl.ok("stop", json!({ "id": r["id"] })).await;
    }
    let _ = (shell, deploy);
    daemon.shutdown();
}
