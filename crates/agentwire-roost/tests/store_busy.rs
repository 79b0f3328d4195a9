//! The `busy` code over a real socket with a real job process and a real store: while another process
//! holds `roost.sqlite`'s write lock (as `sqlite3` in a long transaction does), the daemon cannot make a
//! reply, a dispatch or an ack durable, and answers `busy` (try again shortly) instead of saying it was
//! taken. Nothing is lost or half-taken: the refused reply is not delivered and takes no seq, the refused
//! dispatch makes no job, the refused ack clears nothing; each taken again once the lock is gone, and the
//! store holds exactly that across a restart.

mod common;

use agentwire_roost::daemon::Daemon;
use common::{job_token, Client};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

/// A request whose answer may take the store's busy timeout (5 s) to come: read with a longer wait than
/// the common client's.
async fn slow_call(c: &mut Client, op: &str, args: Value) -> Value {
    c.next += 1;
    let mut line = json!({"id": c.next, "op": op, "args": args}).to_string();
    line.push('\n');
    c.writer.write_all(line.as_bytes()).await.unwrap();
    loop {
        let mut l = String::new();
        tokio::time::timeout(Duration::from_secs(30), c.reader.read_line(&mut l))
            .await
            .expect("an answer within 30 s")
            .unwrap();
        let v: Value = serde_json::from_str(&l).unwrap();
        if v.get("event").is_none() {
            assert_eq!(v["id"], c.next);
            return v;
        }
        c.events.push(v);
    }
}

/// Another process's write lock on the store, held until dropped.
fn lock_store(data: &Path) -> rusqlite::Connection {
    let other = rusqlite::Connection::open(data.join("roost.sqlite")).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    other
}

fn assert_busy(v: &Value, what: &str) {
    assert_eq!(
        (v["ok"].clone(), v["code"].clone()),
        (json!(false), json!("busy")),
        "{what}: {v}"
    );
    assert!(
        v["error"].as_str().unwrap().contains("could not save"),
        "{what}: {v}"
    );
}

/// No deliver event comes to `agent` within a while.
async fn nothing_delivered(agent: &mut Client) {
    assert!(!agent.events.iter().any(|e| e["event"] == "deliver"));
    let mut l = String::new();
    let read =
        tokio::time::timeout(Duration::from_millis(300), agent.reader.read_line(&mut l)).await;
    assert!(read.is_err(), "nothing was sent to the agent: {l}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_save_answers_busy_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::protocol_agent_config(dir.path());
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut ctl = Client::connect(&cfg.socket).await;
    let id = ctl
        .ok("dispatch", json!({"profile": "agent", "task": "first"}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let token = job_token(&cfg.data_dir.join("jobs"), &id).await;
    let mut agent = Client::connect(&cfg.socket).await;
    agent
        .ok(
            "report",
            json!({"id": id, "token": token, "report": {"state": "working"}}),
        )
        .await;
    assert_eq!(agent.deliver().await["seq"], 1);
    agent
        .ok("ack", json!({"id": id, "token": token, "seq": 1}))
        .await;
    // The report's row is written now, so that no lazy write waits on the lock below.
    daemon.flush();

    // A reply and a dispatch while the store is locked: busy, after the store's own wait for the lock.
    let lock = lock_store(&cfg.data_dir);
    let asked = Instant::now();
    let v = slow_call(
        &mut ctl,
        "reply",
        json!({"id": id, "text": "second", "requestId": "r-2"}),
    )
    .await;
    assert_busy(&v, "reply");
    assert!(
        asked.elapsed() >= Duration::from_secs(4),
        "SQLite waited for the lock first"
    );
    let v = slow_call(
        &mut ctl,
        "dispatch",
        json!({"profile": "agent", "task": "another", "requestId": "d-2"}),
    )
    .await;
    assert_busy(&v, "dispatch");
    nothing_delivered(&mut agent).await;
    let rows = ctl.ok("rows", json!({})).await["rows"].clone();
    assert_eq!(rows.as_array().unwrap().len(), 1, "no job was made: {rows}");
    assert_eq!(rows[0]["pending"], 0, "no reply waits: {rows}");
    drop(lock);

    // Sent again: taken once, with the seq the refused one would have had.
    let saved = ctl
        .ok(
            "reply",
            json!({"id": id, "text": "second", "requestId": "r-2"}),
        )
        .await;
    assert_eq!(
        (
            saved["saved"].clone(),
            saved["seq"].clone(),
            saved.get("duplicate")
        ),
        (json!(true), json!(2), None),
        "{saved}"
    );
    let d = agent.deliver().await;
    assert_eq!(
        (d["seq"].clone(), d["text"].clone()),
        (json!(2), json!("second"))
    );
    let other = ctl
        .ok(
            "dispatch",
            json!({"profile": "agent", "task": "another", "requestId": "d-2"}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(other, id);

    // An ack while the store is locked: busy, and the reply still waits.
    let lock = lock_store(&cfg.data_dir);
    let v = slow_call(
        &mut agent,
        "ack",
        json!({"id": id, "token": token, "seq": 2}),
    )
    .await;
    assert_busy(&v, "ack");
    drop(lock);
    let row = |rows: &Value, id: &str| {
        rows["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .cloned()
            .unwrap()
    };
    assert_eq!(row(&ctl.ok("rows", json!({})).await, &id)["pending"], 1);

    // Across a restart, the store holds what was taken, once: two jobs, reply 2 waiting, and it comes
    // again to the agent on its next connection.
    daemon.shutdown();
    drop((agent, ctl));
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut ctl = Client::connect(&cfg.socket).await;
    let rows = ctl.ok("rows", json!({})).await;
    assert_eq!(rows["rows"].as_array().unwrap().len(), 2, "{rows}");
    assert_eq!(row(&rows, &id)["pending"], 1, "{rows}");
    let mut agent = Client::connect(&cfg.socket).await;
    agent
        .ok(
            "report",
            json!({"id": id, "token": token, "report": {"state": "working"}}),
        )
        .await;
    let d = agent.deliver().await;
    assert_eq!(
        (d["seq"].clone(), d["text"].clone()),
        (json!(2), json!("second"))
    );
    agent
        .ok("ack", json!({"id": id, "token": token, "seq": 2}))
        .await;
    assert_eq!(
        ctl.ok("reply", json!({"id": id, "text": "third"})).await["seq"],
        3,
        "seq goes on from the last reply taken"
    );
    for job in [&id, &other] {
        ctl.ok("stop", json!({"id": job})).await;
    }
    daemon.shutdown();
}
