//! The roost daemon over a real unix socket with real job processes: dispatch, reports, numbered replies
//! and acks, request ids, refusals, limits, and a daemon restart under a running agent.

mod common;

use agentwire_roost::daemon::profile::{Profile, TaskMode};
use agentwire_roost::daemon::{Daemon, DaemonConfig};
use common::Client;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// A daemon in a new temp dir (kept alive by the first value) and a controller's connection to it.
async fn started() -> (tempfile::TempDir, DaemonConfig, Daemon, Client) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let ctl = Client::connect(&cfg.socket).await;
    (dir, cfg, daemon, ctl)
}

/// Dispatches a job of `profile` with `task`; its id.
async fn dispatch(ctl: &mut Client, profile: &str, task: &str) -> String {
    ctl.ok("dispatch", json!({"profile": profile, "task": task}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn config(dir: &Path) -> DaemonConfig {
    let mut profiles = HashMap::new();
    // A "protocol" agent played by the test: the process only records its environment and waits.
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
    // An agent that exits at once.
    profiles.insert(
        "brief".to_string(),
        Profile {
            command: vec!["sh".into(), "-c".into(), "exit 0".into()],
            task: TaskMode::Type,
            protocol: true,
            ..Default::default()
        },
    );
    // An agent that ignores SIGTERM (its shell and the sleeps it starts alike).
    profiles.insert(
        "stubborn".to_string(),
        Profile {
            command: vec![
                "sh".into(),
                "-c".into(),
                "trap '' TERM; env > env.txt; echo $$ > pid; while :; do sleep 1; done".into(),
            ],
            task: TaskMode::Type,
            protocol: true,
            ..Default::default()
        },
    );
    profiles.insert(
        "term".to_string(),
        Profile {
            command: vec![
                "sh".into(),
                "-c".into(),
                "echo starting; echo \"task: $1\"; exec sleep 60".into(),
                "sh".into(),
            ],
            task: TaskMode::Argv,
            protocol: false,
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

async fn job_env(data: &Path, id: &str) -> HashMap<String, String> {
    let path: PathBuf = data.join("jobs").join(id).join("env.txt");
    for _ in 0..200 {
        if let Ok(text) = std::fs::read_to_string(&path) {
            if text.contains("ROOST_JOB_TOKEN") {
                return text
                    .lines()
                    .filter_map(|l| l.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the job did not start");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_reports_takes_numbered_replies_acks_them_and_survives_a_daemon_restart() {
    let (_dir, cfg, daemon, _) = started().await;
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&cfg.socket), 0o600);
    assert_eq!(mode(cfg.socket.parent().unwrap()), 0o700);

    let mut ctl = Client::connect(&cfg.socket).await;
    let job = ctl
        .ok("dispatch", json!({"profile": "agent", "task": "write the docs", "name": "docs\nwriter", "requestId": "d-1"}))
        .await;
    let id = job["id"].as_str().unwrap().to_string();
    assert_eq!(job["name"], "docs writer", "names are folded to one line");
    let again = ctl
        .ok(
            "dispatch",
            json!({"profile": "agent", "task": "other", "requestId": "d-1"}),
        )
        .await;
    assert_eq!(again["id"], id.as_str(), "a resent dispatch is taken once");
    assert_eq!(
        ctl.code("dispatch", json!({"profile": "nope"})).await,
        "not_found"
    );

    let env = job_env(&cfg.data_dir, &id).await;
    assert_eq!(env["ROOST_JOB_ID"], id);
    assert_eq!(env["PI_JOB_ID"], id);
    assert_eq!(env["ROOST_SOCKET"], cfg.socket.to_str().unwrap());
    assert_eq!(env["PI_DAEMON_SOCK"], cfg.socket.to_str().unwrap());
    assert!(env["ROOST_JOB_DIR"].ends_with(&id));
    let token = env["ROOST_JOB_TOKEN"].clone();
    assert_eq!(env["PI_JOB_TOKEN"], token);

    let mut agent = Client::connect(&cfg.socket).await;
    let hello = agent
        .ok("hello", json!({"protocol": 1, "agent": {"name": "t", "version": "1"}, "capabilities": ["report", "replies"]}))
        .await;
    assert_eq!(hello["protocol"], 1);
    // Every capability the daemon serves, the spec's six and the task board's.
    assert_eq!(
        hello["capabilities"],
        json!([
            "replies",
            "steer",
            "agent-items",
            "peers",
            "spawn",
            "handback",
            "tasks"
        ])
    );
    assert_eq!(
        agent
            .code(
                "report",
                json!({"id": id, "token": "wrong", "report": {"state": "working"}})
            )
            .await,
        "unauthorized"
    );
    assert_eq!(
        agent
            .code(
                "report",
                json!({"id": id, "token": token, "report": {"state": "napping"}})
            )
            .await,
        "bad_request"
    );
    assert_eq!(
        agent.code("rows", json!({})).await,
        "unsupported",
        "a session may not control jobs"
    );
    agent
        .ok("report", json!({"id": id, "token": token, "report": {"state": "working", "summary": "reading", "status": "busy"}}))
        .await;
    let first = agent.deliver().await;
    assert_eq!(
        (first["seq"].clone(), first["text"].clone()),
        (json!(1), json!("write the docs")),
        "the task is reply 1"
    );

    let rows = ctl.ok("rows", json!({})).await;
    let row = &rows["rows"][0];
    assert_eq!(row["state"], "working");
    assert_eq!(row["summary"], "reading");
    assert_eq!(row["connected"], true);
    assert_eq!(row["pending"], 1);
    assert_eq!(row["capabilities"], json!(["report", "replies"]));

    let saved = ctl
        .ok(
            "reply",
            json!({"id": id, "text": "also the README", "mode": "steer", "requestId": "r-1"}),
        )
        .await;
    assert_eq!(
        (saved["saved"].clone(), saved["seq"].clone()),
        (json!(true), json!(2))
    );
    assert_eq!(saved["reports"], 1, "the reports the job has made so far");
    let d = agent.deliver().await;
    assert_eq!(
        (d["seq"].clone(), d["mode"].clone()),
        (json!(2), json!("steer"))
    );
    assert_eq!(
        ctl.ok(
            "reply",
            json!({"id": id, "text": "also the README", "requestId": "r-1"})
        )
        .await,
        json!({"duplicate": true, "saved": true})
    );
    agent
        .ok("ack", json!({"id": id, "token": token, "seq": 2}))
        .await;
    assert_eq!(
        ctl.ok("rows", json!({})).await["rows"][0]["pending"],
        0,
        "an ack covers every reply up to it"
    );

    // The daemon restarts under the running agent.
    daemon.shutdown();
    drop(agent);
    drop(ctl);
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut ctl = Client::connect(&cfg.socket).await;
    let rows = ctl.ok("rows", json!({})).await;
    assert_eq!(
        rows["rows"][0]["state"], "working",
        "re-adopted: its process still runs"
    );
    assert_eq!(rows["rows"][0]["connected"], false);
    // A command is refused while the agent is away; a plain reply waits for it.
    assert_eq!(
        ctl.code("reply", json!({"id": id, "text": "/model x"}))
            .await,
        "unsupported"
    );
    assert_eq!(
        ctl.ok("reply", json!({"id": id, "text": "next"})).await["seq"],
        3,
        "seq continues across restarts"
    );
    assert_eq!(
        ctl.ok("reply", json!({"id": id, "text": "x", "requestId": "r-1"}))
            .await["duplicate"],
        true,
        "reply ids survive too"
    );
    let mut agent = Client::connect(&cfg.socket).await;
    agent.ok("hello", json!({"protocol": 1})).await;
    agent
        .ok(
            "report",
            json!({"id": id, "token": token, "report": {"state": "working"}}),
        )
        .await;
    let d = agent.deliver().await;
    assert_eq!(
        (d["seq"].clone(), d["text"].clone()),
        (json!(3), json!("next")),
        "only what was not acked"
    );

    // /stop stops the job and is never delivered.
    assert_eq!(
        ctl.ok("reply", json!({"id": id, "text": "/stop"})).await["stopped"],
        true
    );
    let row = ctl.ok("rows", json!({})).await["rows"][0].clone();
    assert_eq!(row["state"], "stopped");
    let events = ctl.ok("events", json!({"id": id})).await;
    let whats: Vec<String> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["what"].as_str().unwrap().to_string())
        .collect();
    assert!(
        whats.starts_with(&["start".to_string(), "reply".to_string()]),
        "{whats:?}"
    );
    assert!(whats.contains(&"stop".to_string()));
    ctl.ok("rm", json!({"id": id})).await;
    assert_eq!(ctl.ok("rows", json!({})).await["rows"], json!([]));
    daemon.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_agent_gets_its_task_in_argv_and_its_output_is_its_row() {
    let (_dir, _cfg, daemon, mut ctl) = started().await;
    let sub = ctl.ok("subscribe", json!({})).await;
    assert_eq!(sub["rows"], json!([]));
    let job = ctl
        .ok("dispatch", json!({"profile": "term", "task": "tidy up"}))
        .await;
    let id = job["id"].as_str().unwrap().to_string();
    let mut summary = Value::Null;
    for _ in 0..100 {
        let rows = ctl.ok("rows", json!({})).await;
        summary = rows["rows"][0]["summary"].clone();
        if summary == "task: tidy up" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(summary, "task: tidy up");
    assert!(
        ctl.events
            .iter()
            .any(|e| e["event"] == "row" && e["row"]["id"] == id.as_str()),
        "subscribers get row pushes"
    );
    ctl.ok("stop", json!({"id": id})).await;
    daemon.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_lines_get_bad_request_and_an_overlong_line_ends_the_connection() {
    let (_dir, cfg, daemon, _) = started().await;
    let mut c = Client::connect(&cfg.socket).await;
    c.writer.write_all(b"not json\n").await.unwrap();
    let v = c.line().await.unwrap();
    assert_eq!(
        (v["ok"].clone(), v["code"].clone()),
        (json!(false), json!("bad_request"))
    );
    assert_eq!(c.code("frobnicate", json!({})).await, "bad_request");
    assert_eq!(
        c.code("reply", json!({"id": "nope", "text": "x"})).await,
        "not_found"
    );
    assert_eq!(c.code("reply", json!({"text": "x"})).await, "bad_request");
    // The connection still serves after every refusal.
    assert_eq!(c.ok("rows", json!({})).await["rows"], json!([]));
    let big = vec![b'x'; agentwire_roost::proto::wire::MAX_LINE_BYTES + 10];
    let _ = c.writer.write_all(&big).await;
    let _ = c.writer.write_all(b"\n").await;
    assert!(c.line().await.is_none(), "the connection was ended");
    // Others are not affected.
    let mut d = Client::connect(&cfg.socket).await;
    assert_eq!(d.ok("rows", json!({})).await["rows"], json!([]));
    daemon.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_sent_past_the_in_flight_bound_wait_and_are_all_answered_in_order() {
    use agentwire_roost::proto::wire::MAX_IN_FLIGHT;
    let (_dir, cfg, daemon, _) = started().await;
    let c = Client::connect(&cfg.socket).await;
    let (mut reader, mut writer) = (c.reader, c.writer);
    // Three times the bound in one burst, malformed requests and refused ones among them, sent while
    // nothing is read: the daemon reads no further than it answers, so the burst waits in the socket.
    let total = 3 * MAX_IN_FLIGHT as u64;
    let mut burst = String::new();
    for id in 1..=total {
        let line = match id % 100 {
            50 => json!({"id": id, "op": "ack", "args": {"id": "nope", "token": "t", "seq": 1}}),
            99 => json!({"id": id, "op": 7}),
            _ => json!({"id": id, "op": "rows", "args": {}}),
        };
        burst.push_str(&line.to_string());
        burst.push('\n');
    }
    let sending = tokio::spawn(async move {
        writer.write_all(burst.as_bytes()).await.unwrap();
        writer
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut answered = 0;
    for id in 1..=total {
        let mut l = String::new();
        tokio::time::timeout(Duration::from_secs(10), reader.read_line(&mut l))
            .await
            .expect("an answer for every request")
            .unwrap();
        let v: Value = serde_json::from_str(&l).unwrap();
        assert_eq!(v["id"], id, "answers come in request order");
        let expected = match id % 100 {
            50 => json!("not_found"),
            99 => json!("bad_request"),
            _ => Value::Null,
        };
        assert_eq!(v["code"], expected, "{v}");
        answered += 1;
    }
    assert_eq!(answered, total);
    // The connection goes on serving after the burst.
    let writer = sending.await.unwrap();
    let mut c = Client {
        reader,
        writer,
        next: total,
        events: vec![],
    };
    assert_eq!(c.ok("rows", json!({})).await["rows"], json!([]));
    daemon.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_1024_connections_and_a_client_that_reads_nothing_is_dropped() {
    let (_dir, cfg, daemon, _) = started().await;
    let mut held = Vec::new();
    for _ in 0..agentwire_roost::proto::wire::MAX_CONNECTIONS {
        let mut c = Client::connect(&cfg.socket).await;
        // Each answers, so each is counted before the next connects.
        c.ok("rows", json!({})).await;
        held.push(c);
    }
    let mut over = Client::connect(&cfg.socket).await;
    over.writer
        .write_all(b"{\"id\":1,\"op\":\"rows\"}\n")
        .await
        .ok();
    assert!(
        over.line().await.is_none(),
        "the 1025th connection is closed at once"
    );
    drop(held);
    // Their places come back as the daemon sees them close: a new connection is served again.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut again = Client::connect(&cfg.socket).await;
        again
            .writer
            .write_all(b"{\"id\":1,\"op\":\"rows\"}\n")
            .await
            .ok();
        if again.line().await.is_some_and(|v| v["ok"] == true) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the closed connections' places were not freed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A client that sends and never reads is not read either while its answers wait (the others go on);
    // a subscriber that leaves more than 16 MiB of events unread is dropped.
    let mut ctl = Client::connect(&cfg.socket).await;
    let job = ctl
        .ok(
            "dispatch",
            json!({"profile": "term", "task": "t", "name": "x".repeat(200)}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    ctl.ok("stop", json!({"id": job})).await;
    let greedy = UnixStream::connect(&cfg.socket).await.unwrap();
    let (mut gr, mut gw) = greedy.into_split();
    gw.write_all(b"{\"id\":1,\"op\":\"subscribe\",\"args\":{}}\n")
        .await
        .unwrap();
    // Each stop pushes the job's row (about 400 bytes; counted as 600) to every subscriber.
    let mut pushed = 0usize;
    while pushed
        < agentwire_roost::proto::wire::MAX_UNREAD_BYTES
            + agentwire_roost::proto::wire::MAX_UNREAD_BYTES / 2
    {
        ctl.ok("stop", json!({"id": job})).await;
        pushed += 600;
    }
    let mut sink = vec![0u8; 1 << 16];
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match tokio::io::AsyncReadExt::read(&mut gr, &mut sink).await {
                Ok(0) | Err(_) => return true,
                Ok(_) => {}
            }
        }
    })
    .await
    .unwrap_or(false);
    assert!(
        closed,
        "the subscriber that left too much unread was dropped"
    );
    assert_eq!(
        ctl.ok("rows", json!({})).await["rows"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    for r in ctl.ok("rows", json!({})).await["rows"]
        .as_array()
        .unwrap()
        .clone()
    {
        ctl.ok("rm", json!({"id": r["id"]})).await;
    }
    daemon.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_respawned_and_removed_jobs_leave_no_zombies() {
    let (_dir, cfg, daemon, mut ctl) = started().await;
    let a = dispatch(&mut ctl, "agent", "a").await;
    let b = dispatch(&mut ctl, "agent", "b").await;
    job_env(&cfg.data_dir, &a).await;
    job_env(&cfg.data_dir, &b).await;
    let pid_of = |id: &str| -> String {
        let path = cfg.data_dir.join("jobs").join(id).join("pid");
        for _ in 0..200 {
            if let Ok(p) = std::fs::read_to_string(&path) {
                if !p.trim().is_empty() {
                    return p.trim().to_string();
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("no pid file for {id}");
    };
    let (old_a, old_b) = (pid_of(&a), pid_of(&b));
    let zombie = |pid: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, r)| r.trim_start().starts_with('Z'))
            })
            .unwrap_or(false)
    };
    ctl.ok("respawn", json!({"id": a})).await;
    ctl.ok("rm", json!({"id": b})).await;
    let mut zombies = 2;
    for _ in 0..60 {
        daemon.flush();
        zombies = [&old_a, &old_b].iter().filter(|p| zombie(p)).count();
        if zombies == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(zombies, 0, "stopped processes are reaped");
    ctl.ok("rm", json!({"id": a})).await;
    daemon.shutdown();
}

/// Whether `pid` is a live process (not gone, not a zombie).
fn running(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| !r.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_ignores_sigterm_is_killed_after_the_grace_and_a_respawn_gets_a_new_token() {
    use agentwire_roost::daemon::STOP_GRACE;
    let (_dir, cfg, daemon, mut ctl) = started().await;
    let id = dispatch(&mut ctl, "stubborn", "x").await;
    let env = job_env(&cfg.data_dir, &id).await;
    let pid_file = cfg.data_dir.join("jobs").join(&id).join("pid");
    let read_pid = || {
        std::fs::read_to_string(&pid_file)
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let mut old = read_pid();
    for _ in 0..100 {
        if !old.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        old = read_pid();
    }
    let old_token = env["ROOST_JOB_TOKEN"].clone();
    let respawned = std::time::Instant::now();
    ctl.ok("respawn", json!({"id": id})).await;
    // The old token no longer speaks for the job.
    let mut agent = Client::connect(&cfg.socket).await;
    assert_eq!(
        agent
            .code(
                "report",
                json!({"id": id, "token": old_token, "report": {"state": "working"}})
            )
            .await,
        "unauthorized"
    );
    let mut new = read_pid();
    for _ in 0..200 {
        if !new.is_empty() && new != old {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        new = read_pid();
    }
    assert_ne!(new, old, "respawn started a new process");
    let new_env = job_env(&cfg.data_dir, &id).await;
    assert_ne!(new_env["ROOST_JOB_TOKEN"], old_token);
    // SIGTERM alone does not end it (checked while the grace surely runs: a loaded machine may have taken
    // longer than the grace to get here) ...
    tokio::time::sleep_until((respawned + STOP_GRACE / 2).into()).await;
    daemon.flush();
    if respawned.elapsed() < STOP_GRACE * 9 / 10 {
        assert!(running(&old), "the old process ignores SIGTERM");
    }
    // ... past the grace, SIGKILL does.
    let mut gone = false;
    for _ in 0..100 {
        daemon.flush();
        if !running(&old) {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "the stopped process was killed after {STOP_GRACE:?}");
    assert!(running(&new), "the respawned process runs on");
    ctl.ok("rm", json!({"id": id})).await;
    let mut gone = false;
    for _ in 0..100 {
        daemon.flush();
        if !running(&new) {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        gone,
        "a removed job's process is killed after the grace too"
    );
    daemon.shutdown();
}

/// The state of the only job, after the daemon's housekeeping has looked at its process.
async fn only_state(daemon: &Daemon, c: &mut Client) -> String {
    daemon.flush();
    c.ok("rows", json!({})).await["rows"][0]["state"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_reply_to_a_job_that_exited_since_starts_it_again_but_a_stopped_one_stays_stopped()
{
    let (_dir, _cfg, daemon, mut ctl) = started().await;
    let id = dispatch(&mut ctl, "brief", "t").await;
    let mut exited = false;
    for _ in 0..100 {
        if only_state(&daemon, &mut ctl).await == "exited" {
            exited = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(exited, "the brief job exits by itself");
    let respawns = |events: &Value| {
        events["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["what"] == "respawn")
            .count()
    };
    // A reply starts the exited job; it exits again before any agent takes the reply.
    let first = ctl
        .ok(
            "reply",
            json!({"id": id, "text": "go on", "requestId": "r-1"}),
        )
        .await;
    assert_eq!(first["saved"], true);
    assert_eq!(respawns(&ctl.ok("events", json!({"id": id})).await), 1);
    let mut exited = false;
    for _ in 0..100 {
        if only_state(&daemon, &mut ctl).await == "exited" {
            exited = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(exited);
    // The controller did not see the answer and sends the reply again: it is not saved twice, and the
    // job that holds it runs again so that it reaches an agent.
    let again = ctl
        .ok(
            "reply",
            json!({"id": id, "text": "go on", "requestId": "r-1"}),
        )
        .await;
    assert_eq!(again["duplicate"], true);
    assert_eq!(respawns(&ctl.ok("events", json!({"id": id})).await), 2);
    let rows = ctl.ok("rows", json!({})).await;
    assert_eq!(
        rows["rows"][0]["pending"], 2,
        "the task and the one reply: {rows}"
    );
    // A job a user stopped is not started by a resend.
    ctl.ok("stop", json!({"id": id})).await;
    let again = ctl
        .ok(
            "reply",
            json!({"id": id, "text": "go on", "requestId": "r-1"}),
        )
        .await;
    assert_eq!(again["duplicate"], true);
    assert_eq!(respawns(&ctl.ok("events", json!({"id": id})).await), 2);
    assert_eq!(only_state(&daemon, &mut ctl).await, "stopped");
    ctl.ok("rm", json!({"id": id})).await;
    daemon.shutdown();
}

/// With a retention, a job idle past it goes with its dir when nobody waits on it: one that ended, one
/// dispatched for a conversation (it serves turns, which the journal forgets as long after). A person's
/// job whose process runs is kept; `rm` removes its dir too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_idle_past_the_retention_are_removed_with_their_dirs_unless_a_person_runs_them() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = DaemonConfig {
        retention: Some(Duration::from_secs(2)),
        terminal_holder: None,
        concierge: Default::default(),
        calendar: Default::default(),
        ..config(dir.path())
    };
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut ctl = Client::connect(&cfg.socket).await;
    let ended = dispatch(&mut ctl, "brief", "done at once").await;
    let running = dispatch(&mut ctl, "agent", "a person's").await;
    let served = ctl
        .ok(
            "dispatch",
            json!({"profile": "agent", "task": "a turn", "conversation": "nipxx:c1"}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let job_dir = |id: &str| cfg.data_dir.join("jobs").join(id);
    job_env(&cfg.data_dir, &served).await;
    assert!(job_dir(&ended).exists() && job_dir(&served).exists());
    let ids = |rows: &Value| -> Vec<String> {
        let mut ids: Vec<String> = rows["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        ids
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while ids(&ctl.ok("rows", json!({})).await) != std::slice::from_ref(&running) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "idle jobs not removed: {}",
            ctl.ok("rows", json!({})).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!job_dir(&ended).exists(), "an ended job's dir goes with it");
    assert!(
        !job_dir(&served).exists(),
        "a served job's dir goes with it"
    );
    assert!(job_dir(&running).exists());
    let events = ctl.ok("events", json!({"id": ended})).await;
    let rm = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["what"] == "rm")
        .unwrap_or_else(|| panic!("an rm event: {events}"));
    assert!(rm["text"].as_str().unwrap().contains("retention"), "{rm}");
    // Kept past its retention while its process runs; removed by hand, its dir goes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        ids(&ctl.ok("rows", json!({})).await),
        std::slice::from_ref(&running)
    );
    ctl.ok("rm", json!({"id": running})).await;
    assert!(!job_dir(&running).exists(), "rm removes the job's dir");
    daemon.shutdown();
}

/// The hub's arranging ops: `pin`, `rename`, `reorder` set what rows carry, durably (across a restart);
/// a person's name stands against the names the agent reports; the concierge's name is nobody else's;
/// each is refused `unsupported` on a session's connection, and names an existing job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pin_rename_and_reorder_arrange_the_rows_durably_and_are_refused_to_sessions() {
    let (_dir, cfg, daemon, mut ctl) = started().await;
    let a = dispatch(&mut ctl, "agent", "first").await;
    let b = dispatch(&mut ctl, "agent", "second").await;
    let row = |rows: &Value, id: &str| -> Value {
        rows["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .cloned()
            .unwrap()
    };
    ctl.ok("pin", json!({"id": b, "pinned": true})).await;
    ctl.ok("rename", json!({"id": a, "name": "the\nreader"}))
        .await;
    ctl.ok("reorder", json!({"ids": [b, a]})).await;
    let rows = ctl.ok("rows", json!({})).await;
    assert_eq!(row(&rows, &b)["pinned"], true);
    assert_eq!(row(&rows, &a)["pinned"], false);
    assert_eq!(row(&rows, &a)["name"], "the reader", "folded to one line");
    assert_eq!(
        (
            row(&rows, &b)["order"].clone(),
            row(&rows, &a)["order"].clone()
        ),
        (json!(0), json!(1))
    );
    // A reorder naming one job puts it first; the other has no place any more.
    ctl.ok("reorder", json!({"ids": [a]})).await;
    let rows = ctl.ok("rows", json!({})).await;
    assert_eq!(
        (
            row(&rows, &a)["order"].clone(),
            row(&rows, &b)["order"].clone()
        ),
        (json!(0), Value::Null)
    );

    // Refusals, each with its code.
    for (op, args, code) in [
        ("pin", json!({"id": "nope", "pinned": true}), "not_found"),
        ("pin", json!({"id": a, "pinned": "yes"}), "bad_request"),
        ("rename", json!({"id": a, "name": "  "}), "bad_request"),
        (
            "rename",
            json!({"id": a, "name": "x".repeat(201)}),
            "bad_request",
        ),
        (
            "rename",
            json!({"id": a, "name": "concierge"}),
            "bad_request",
        ),
        ("rename", json!({"id": "nope", "name": "n"}), "not_found"),
        ("reorder", json!({"ids": [a, a]}), "bad_request"),
        ("reorder", json!({"ids": ["nope"]}), "not_found"),
        ("reorder", json!({"ids": "a"}), "bad_request"),
        (
            "dispatch",
            json!({"profile": "agent", "name": "concierge"}),
            "bad_request",
        ),
    ] {
        assert_eq!(ctl.code(op, args.clone()).await, code, "{op} {args}");
    }
    let rows = ctl.ok("rows", json!({})).await;
    assert_eq!(
        row(&rows, &a)["name"],
        "the reader",
        "a refused rename changed nothing"
    );

    // The agent reports a name of its own: the person's stands. And a session may not arrange rows.
    let token = job_env(&cfg.data_dir, &a).await["ROOST_JOB_TOKEN"].clone();
    let mut agent = Client::connect(&cfg.socket).await;
    agent
        .ok(
            "report",
            json!({"id": a, "token": token, "report": {"state": "working", "name": "self-named"}}),
        )
        .await;
    for (op, args) in [
        ("pin", json!({"id": a, "pinned": false})),
        ("rename", json!({"id": a, "name": "mine"})),
        ("reorder", json!({"ids": [a]})),
        ("shutdown", json!({})),
    ] {
        assert_eq!(
            agent.code(op, args).await,
            "unsupported",
            "{op} on a session"
        );
    }
    let rows = ctl.ok("rows", json!({})).await;
    assert_eq!(row(&rows, &a)["name"], "the reader");
    let events = ctl.ok("events", json!({"id": a})).await;
    assert!(
        events["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["what"] == "rename"),
        "a rename is in the feed: {events}"
    );

    // Across a restart.
    daemon.shutdown();
    drop(agent);
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut ctl = Client::connect(&cfg.socket).await;
    let rows = ctl.ok("rows", json!({})).await;
    assert_eq!(row(&rows, &b)["pinned"], true);
    assert_eq!(row(&rows, &a)["name"], "the reader");
    assert_eq!(row(&rows, &a)["order"], 0);
    for id in [a, b] {
        ctl.ok("rm", json!({"id": id})).await;
    }
    daemon.shutdown();
}
