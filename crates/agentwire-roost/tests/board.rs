//! The task board (M47) over the real socket: the hub adds dependent tasks, three agents split them (a
//! claim waits for `after`, a held task is a `conflict`), one is killed while it holds a claim and its
//! task is released and taken over; the person releases, drops and assigns (the holder or the assignee is
//! told in a message); every refusal with its code; `task` feed events, `board` pushes, and the board
//! across a restart.

mod common;

use agentwire_roost::daemon::profile::{Profile, TaskMode};
use agentwire_roost::daemon::{Daemon, DaemonConfig};
use common::Client;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

fn config(dir: &Path) -> DaemonConfig {
    let mut profiles = HashMap::new();
    profiles.insert(
        "agent".to_string(),
        Profile {
            command: vec![
                "sh".into(),
                "-c".into(),
                "env > env.txt; echo $$ > pid; exec sleep 60".into(),
            ],
            task: TaskMode::Type,
            protocol: true,
            ..Default::default()
        },
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

/// A file the job's process wrote, once it is there.
async fn job_file(cfg: &DaemonConfig, id: &str, file: &str, has: &str) -> String {
    let path = cfg.data_dir.join("jobs").join(id).join(file);
    for _ in 0..200 {
        if let Ok(t) = std::fs::read_to_string(&path) {
            if t.contains(has) {
                return t;
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("job {id} wrote no {file}");
}

/// A session: job `name` dispatched, its agent connected and reported, its task acked.
async fn session(
    cfg: &DaemonConfig,
    ctl: &mut Client,
    name: &str,
    items: bool,
) -> (String, Client) {
    let id = ctl
        .ok(
            "dispatch",
            json!({"profile": "agent", "task": "help", "name": name}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let token = common::job_token(&cfg.data_dir.join("jobs"), &id).await;
    let mut c = Client::connect(&cfg.socket).await;
    c.ok(
        "report",
        json!({"id": id, "token": token, "report": {"state": "working", "agentItems": items}}),
    )
    .await;
    let task = c.deliver().await;
    c.ok("ack", json!({"id": id, "token": token, "seq": task["seq"]}))
        .await;
    (id, c)
}

/// Connects again as job `id` after a respawn (its new process writes a new token, not `old`) and reports
/// with agentItems.
async fn session_again(cfg: &DaemonConfig, id: &str, old: &str) -> Client {
    let path = cfg.data_dir.join("jobs").join(id).join("env.txt");
    let mut token = None;
    for _ in 0..200 {
        token = std::fs::read_to_string(&path).ok().and_then(|env| {
            env.lines()
                .find_map(|l| l.strip_prefix("ROOST_JOB_TOKEN="))
                .filter(|t| *t != old)
                .map(str::to_string)
        });
        if token.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let token = token.expect("the respawned job writes its new token");
    let mut c = Client::connect(&cfg.socket).await;
    c.ok(
        "report",
        json!({"id": id, "token": token, "report": {"state": "working", "agentItems": true}}),
    )
    .await;
    c
}

fn task(r: &Value, id: u64) -> &Value {
    r["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id)
        .unwrap()
}

async fn board(ctl: &mut Client) -> Value {
    ctl.ok("task", json!({"action": "list"})).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_agents_split_dependent_tasks_and_a_killed_holder_loses_its_claim() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut ctl = Client::connect(&cfg.socket).await;
    ctl.ok("subscribe", json!({})).await;
    let (a, mut ca) = session(&cfg, &mut ctl, "alpha", true).await;
    let (b, mut cb) = session(&cfg, &mut ctl, "beta", false).await;
    let (c, mut cc) = session(&cfg, &mut ctl, "gamma", false).await;

    let add = |title: &str, after: Value| json!({"action": "add", "title": title, "after": after});
    let t1 = ctl.ok("task", add("design", json!([]))).await;
    assert_eq!(t1["task"]["id"], 1);
    assert_eq!(t1["task"]["by"], json!({"who": "user"}));
    ctl.ok("task", add("build", json!([1]))).await;
    let t3 = ca
        .ok(
            "task",
            json!({"action": "add", "title": "test", "detail": "all of it", "after": ["2"]}),
        )
        .await;
    assert_eq!(t3["task"]["by"], json!({"who": "alpha", "whoId": a}));

    // Who may do what, and the codes.
    let mut hello_only = Client::connect(&cfg.socket).await;
    hello_only
        .ok(
            "hello",
            json!({"protocol": 1, "agent": {"name": "x", "version": "1"}}),
        )
        .await;
    assert_eq!(
        hello_only.code("task", json!({"action": "list"})).await,
        "unauthorized"
    );
    let claim = |id: Value| json!({"action": "claim", "id": id});
    for (hub, args, code) in [
        (true, claim(json!(1)), "unsupported"),
        (false, claim(json!(2)), "blocked"),
        (false, claim(json!(9)), "not_found"),
        (false, claim(json!("x")), "bad_request"),
        (false, json!({"action": "drop", "id": 1}), "unsupported"),
        (
            false,
            json!({"action": "assign", "id": 1, "to": a}),
            "unsupported",
        ),
        (false, json!({"action": "release", "id": 1}), "bad_request"),
        (false, json!({"action": "shuffle"}), "bad_request"),
        (true, add("", json!([])), "bad_request"),
        (true, add("t", json!([7])), "bad_request"),
    ] {
        let client = if hub { &mut ctl } else { &mut cb };
        assert_eq!(client.code("task", args.clone()).await, code, "{args}");
    }

    // alpha designs; beta may not take it meanwhile; then beta builds.
    ca.ok("task", claim(json!(1))).await;
    assert_eq!(cb.code("task", claim(json!(1))).await, "conflict");
    assert_eq!(
        cb.code("task", json!({"action": "done", "id": 1})).await,
        "unsupported"
    );
    let done = ca
        .ok(
            "task",
            json!({"action": "done", "id": 1, "result": "the spec"}),
        )
        .await;
    assert_eq!(
        (
            done["task"]["state"].clone(),
            done["task"]["result"].clone()
        ),
        (json!("done"), json!("the spec"))
    );
    let built = cb.ok("task", claim(json!(2))).await;
    assert_eq!(built["task"]["owner"], json!({"id": b, "name": "beta"}));
    assert_eq!(cc.code("task", claim(json!(3))).await, "blocked");

    // beta is killed while it holds #2: the claim is released, and gamma takes it over.
    let pid = job_file(&cfg, &b, "pid", "").await.trim().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-9", &pid])
        .status()
        .unwrap()
        .success());
    let mut released = false;
    for _ in 0..100 {
        if task(&board(&mut ctl).await, 2)["state"] == "open" {
            released = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(released, "a dead holder's claim is released");
    cc.ok("task", claim(json!(2))).await;
    // alpha claims another task and is stopped with a `/stop` reply: its claim goes at once.
    let extra = ctl.ok("task", add("side quest", json!([]))).await["task"]["id"].clone();
    ca.ok("task", claim(extra.clone())).await;
    ctl.ok("reply", json!({"id": a, "text": "/stop"})).await;
    let open = board(&mut ctl).await;
    assert_eq!(
        task(&open, extra.as_u64().unwrap())["state"],
        "open",
        "a /stopped holder holds nothing"
    );
    let old = job_file(&cfg, &a, "env.txt", "ROOST_JOB_TOKEN=").await;
    let old = old
        .lines()
        .find_map(|l| l.strip_prefix("ROOST_JOB_TOKEN="))
        .unwrap()
        .to_string();
    ctl.ok("respawn", json!({"id": a})).await;
    ca = session_again(&cfg, &a, &old).await;
    ctl.ok("task", json!({"action": "drop", "id": extra})).await;

    // The person releases it: gamma is told (as a reply: it takes no items), then takes it again and
    // finishes; the person drops nothing done.
    ctl.ok("task", json!({"action": "release", "id": 2})).await;
    let told = cc.deliver().await;
    let text = told["text"].as_str().unwrap();
    assert!(
        text.contains("from the task board") && text.contains("user released your task #2 build"),
        "{text}"
    );
    cc.ok("task", claim(json!(2))).await;
    cc.ok("task", json!({"action": "done", "id": 2})).await;
    assert_eq!(
        ctl.code("task", json!({"action": "drop", "id": 2})).await,
        "bad_request"
    );

    // #3 is assigned to alpha: a message with how to claim it, and the task marked until the claim.
    let assigned = ctl
        .ok("task", json!({"action": "assign", "id": 3, "to": "alpha"}))
        .await;
    assert_eq!(assigned["sent"], "delivered");
    assert_eq!(assigned["task"]["assigned"]["id"], a.as_str());
    let message = ca.deliver().await;
    assert_eq!(message["kind"], "message");
    assert!(message["text"]
        .as_str()
        .unwrap()
        .contains("task #3 on the task board: test"));
    assert_eq!(
        ctl.code("task", json!({"action": "assign", "id": 3, "to": "nobody"}))
            .await,
        "not_found"
    );
    let claimed = ca.ok("task", claim(json!(3))).await;
    assert_eq!(claimed["task"]["assigned"], Value::Null);
    // Dropped while alpha holds it: alpha is told.
    ctl.ok("task", json!({"action": "drop", "id": 3})).await;
    let dropped = ca.deliver().await;
    assert!(dropped["text"]
        .as_str()
        .unwrap()
        .contains("dropped your task #3 test"));

    // The feed has every change with why and who; subscribed hubs got the counts.
    let events = ctl.ok("events", json!({})).await;
    let whys: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["what"] == "task")
        .map(|e| e["why"].as_str().unwrap())
        .collect();
    assert_eq!(
        whys,
        [
            "add", "add", "add", "claim", "done", "claim", "release", "claim", "add", "claim",
            "release", "drop", "release", "claim", "done", "assign", "claim", "drop"
        ]
    );
    let pushed = ctl
        .events
        .iter()
        .rfind(|e| e["event"] == "board")
        .cloned()
        .unwrap();
    assert_eq!(
        pushed,
        json!({"event": "board", "open": 0, "claimed": 0, "blocked": 0, "done": 2})
    );

    // Across a restart.
    daemon.shutdown();
    drop((ca, cb, cc, ctl));
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut ctl = Client::connect(&cfg.socket).await;
    let after = board(&mut ctl).await;
    let states: Vec<&str> = after["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["done", "done", "dropped", "dropped"]);
    assert_eq!(
        ctl.ok("task", add("next", json!([]))).await["task"]["id"],
        5
    );
    for id in [a, b, c] {
        ctl.ok("rm", json!({"id": id})).await;
    }
    daemon.shutdown();
}

/// A foreground process registers as a peer: it lists and messages the sessions and is messaged while
/// connected, uses the board, may not control jobs; its claims outlive its connection by 5 s, stay when it
/// registers again under its name within them, and are released after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreground_peer_uses_the_board_and_its_claims_go_five_seconds_after_it_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut ctl = Client::connect(&cfg.socket).await;
    let (a, mut ca) = session(&cfg, &mut ctl, "alpha", true).await;
    ctl.ok("task", json!({"action": "add", "title": "one"}))
        .await;
    ctl.ok("task", json!({"action": "add", "title": "two"}))
        .await;

    let mut pi = Client::connect(&cfg.socket).await;
    assert_eq!(
        pi.code("peer_register", json!({"name": "concierge"})).await,
        "bad_request"
    );
    let me = pi.ok("peer_register", json!({"name": "pi"})).await;
    assert_eq!(me, json!({"id": "fg:pi", "name": "pi"}));
    let mut twin = Client::connect(&cfg.socket).await;
    assert_eq!(
        twin.code("peer_register", json!({"name": "pi"})).await,
        "bad_request",
        "one connection a name"
    );
    // Refused, it is no session: it may still control jobs.
    assert!(twin.ok("rows", json!({})).await["rows"].is_array());
    assert_eq!(
        pi.code("peer_register", json!({"name": "other"})).await,
        "bad_request",
        "one name a connection"
    );
    assert_eq!(
        ca.code("peer_register", json!({"name": "x"})).await,
        "unsupported",
        "a job's own connection"
    );
    assert_eq!(
        pi.code("rows", json!({})).await,
        "unsupported",
        "a peer controls no jobs"
    );
    assert_eq!(
        pi.code("handback", json!({"text": "x"})).await,
        "unsupported",
        "a foreground peer has no parent"
    );
    let peers = pi.ok("peers", json!({})).await;
    let list = peers["peers"].as_array().unwrap();
    assert!(list
        .iter()
        .any(|p| p["id"] == "fg:pi" && p["self"] == true && p["role"] == "foreground"));
    assert!(list
        .iter()
        .any(|p| p["id"] == a.as_str() && p["self"] == false));

    // Messages both ways.
    assert_eq!(
        pi.ok("send", json!({"to": "alpha", "text": "hello from pi"}))
            .await["outcome"],
        "delivered"
    );
    let got = ca.deliver().await;
    assert_eq!(got["from"], json!({"id": "fg:pi", "name": "pi"}));
    assert_eq!(
        ca.ok("send", json!({"to": "pi", "text": "hi pi"})).await["outcome"],
        "delivered"
    );
    let back = pi.deliver().await;
    assert_eq!(
        (back["kind"].clone(), back["from"]["id"].clone()),
        (json!("message"), json!(a))
    );

    // Its claim holds while it is away for less than the grace, and when it is back under its name.
    pi.ok("task", json!({"action": "claim", "id": 1})).await;
    drop(pi);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        ca.code("task", json!({"action": "claim", "id": 1})).await,
        "conflict"
    );
    let mut pi = Client::connect(&cfg.socket).await;
    pi.ok("peer_register", json!({"name": "pi"})).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        ca.code("task", json!({"action": "claim", "id": 1})).await,
        "conflict",
        "back in time: kept"
    );
    pi.ok("task", json!({"action": "claim", "id": 2})).await;
    drop(pi);
    tokio::time::sleep(Duration::from_secs(7)).await;
    let list = ctl.ok("task", json!({"action": "list"})).await;
    assert_eq!(task(&list, 1)["state"], "open");
    assert_eq!(task(&list, 2)["state"], "open");
    let events = ctl.ok("events", json!({})).await;
    assert!(
        events["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["why"] == "release" && e["text"] == "#1 one: pi left"),
        "{events}"
    );
    ca.ok("task", json!({"action": "claim", "id": 1})).await;
    ctl.ok("rm", json!({"id": a})).await;
    daemon.shutdown();
}
