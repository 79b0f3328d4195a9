//! `agentwire serve` killed (SIGKILL) and started again under roost jobs: a conversation's next turn
//! reaches the job that served its first (found by the conversation label kept with the job), and a job
//! stopped inside its grace is still killed at its deadline by the new daemon.

mod common;

use agentwire_roost::client::Controller;
use agentwire_roost::daemon::STOP_GRACE;
use common::{Client, Daemon};
use nostr::prelude::Keys;
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

/// A protocol agent that outlives the daemon: when its connection drops it connects again (the daemon
/// restarting), says where it stands, and takes the replies it has not handled yet. Each reply it
/// handles is logged with its pid. It gives up after 30 s without a daemon (a test that failed).
const AGENT: &str = r#"
import json, os, socket, sys, time
jid, tok, path = os.environ["ROOST_JOB_ID"], os.environ["ROOST_JOB_TOKEN"], os.environ["ROOST_SOCKET"]
log = open("turns.log", "a")
handled, last = 0, "starting"
give_up = time.time() + 30
while True:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
    except OSError:
        s.close()
        if time.time() > give_up:
            sys.exit(1)
        time.sleep(0.05)
        continue
    give_up = time.time() + 30
    f = s.makefile("rwb")
    n = 0
    def send(op, args):
        global n
        n += 1
        f.write((json.dumps({"id": n, "op": op, "args": args}) + "\n").encode())
        f.flush()
    def report(**r):
        send("report", {"id": jid, "token": tok, "report": r})
    try:
        send("hello", {"protocol": 1, "agent": {"name": "py"}, "capabilities": ["report", "replies"]})
        report(state="done" if handled else "working", status="idle", summary=last)
        for line in f:
            m = json.loads(line)
            if m.get("event") != "deliver":
                continue
            if m["seq"] > handled:
                text = m["text"]
                log.write("%d %d %s\n" % (os.getpid(), m["seq"], text))
                log.flush()
                report(state="working", status="busy", summary="thinking about " + text)
                last = "echo: " + text
                report(state="done", status="idle", summary=last)
                handled = m["seq"]
            send("ack", {"id": jid, "token": tok, "seq": m["seq"]})
    except OSError:
        pass
    s.close()
"#;

fn setup(dir: &Path) -> String {
    let script = dir.join("agent.py");
    std::fs::write(&script, AGENT).unwrap();
    let cfg = dir.join("agentwire.toml");
    std::fs::write(
        &cfg,
        format!(
            "[roost.profiles.py]\ncommand = [\"python3\", {:?}]\ntask = \"type\"\nprotocol = true\n\n\
             [roost.profiles.stubborn]\ncommand = [\"sh\", \"-c\", \"trap '' TERM; echo $$ > pid; while :; do sleep 1; done\"]\n",
            script.to_str().unwrap()
        ),
    )
    .unwrap();
    cfg.to_str().unwrap().to_string()
}

async fn rows(socket: &str) -> Vec<serde_json::Value> {
    let mut c = Controller::connect(Path::new(socket)).await.unwrap();
    c.call("rows", json!({})).await.unwrap()["rows"]
        .as_array()
        .unwrap()
        .clone()
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_between_two_turns_of_a_conversation_reaches_the_same_job() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = setup(dir.path());
    let args = ["--config", cfg.as_str(), "--agent", "roost:py"];
    let keys = Keys::generate();
    let mut d = Daemon::start(dir.path(), &args);
    let socket = d.ready["roost_socket"].as_str().unwrap().to_string();
    let mut c = Client::with_keys(&d.relay, d.agent, keys.clone()).await;
    assert_eq!(c.ask("hello").await.text(), "echo: hello");
    let first = rows(&socket).await;
    assert_eq!(first.len(), 1, "{first:?}");
    let id = first[0]["id"].as_str().unwrap().to_string();

    // A crash between the turns; the job's process (a group of its own) lives on and reconnects.
    d.kill();
    drop(c);
    let d = Daemon::start(dir.path(), &args);
    let mut c = Client::with_keys(&d.relay, d.agent, keys).await;
    assert_eq!(c.ask("again").await.text(), "echo: again");

    let after = rows(&socket).await;
    assert_eq!(after.len(), 1, "no second job was started: {after:?}");
    assert_eq!(after[0]["id"], id.as_str());
    let log =
        std::fs::read_to_string(dir.path().join("roost/jobs").join(&id).join("turns.log")).unwrap();
    let lines: Vec<Vec<&str>> = log.lines().map(|l| l.splitn(3, ' ').collect()).collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert_eq!(
        (lines[0][1], lines[0][2], lines[1][1], lines[1][2]),
        ("1", "hello", "2", "again"),
        "the second turn is the job's next reply: {log}"
    );
    assert_eq!(lines[0][0], lines[1][0], "one process took both: {log}");
    let mut ctl = Controller::connect(Path::new(&socket)).await.unwrap();
    ctl.call("rm", json!({"id": id})).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_stopped_inside_its_grace_is_killed_by_the_next_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = setup(dir.path());
    let args = ["--config", cfg.as_str()];
    let mut d = Daemon::start(dir.path(), &args);
    let socket = d.ready["roost_socket"].as_str().unwrap().to_string();
    let mut ctl = Controller::connect(Path::new(&socket)).await.unwrap();
    let id = ctl
        .call("dispatch", json!({"profile": "stubborn"}))
        .await
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let pid_file = dir.path().join("roost/jobs").join(&id).join("pid");
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
    ctl.call("stop", json!({"id": id})).await.unwrap();
    drop(ctl);
    // SIGKILL at once, well inside the grace: no shutdown, nothing written after the stop's answer.
    d.kill();
    let _d = Daemon::start(dir.path(), &args);
    if stopped_at.elapsed() < STOP_GRACE - Duration::from_millis(500) {
        assert!(
            running(pid),
            "SIGTERM alone does not end it, and the new daemon waits for the deadline"
        );
    }
    let bound = STOP_GRACE + Duration::from_secs(3);
    while running(pid) && stopped_at.elapsed() < bound {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = stopped_at.elapsed();
    assert!(!running(pid), "the new daemon killed it within {bound:?}");
    assert!(took >= STOP_GRACE, "not before its deadline: {took:?}");
}
