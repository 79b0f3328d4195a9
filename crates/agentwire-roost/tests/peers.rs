//! The peer ops over the real socket (M43): sessions list each other with `peers` and `send` each other
//! messages as peer items, delivered at once, queued, or to a job started again for them; the envelope;
//! items acked one by one (and only those, across a restart); the message rules at their exact bounds:
//! a duplicate within a minute, 30 messages a minute per sender, 20 items waiting per session.

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
    // An agent the test plays: the process records its environment and waits.
    profiles.insert("agent".to_string(), common::protocol_agent_profile());
    // One that records its environment and exits at once.
    profiles.insert(
        "brief".to_string(),
        Profile {
            command: vec!["sh".into(), "-c".into(), "env > env.txt".into()],
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

/// A daemon with the test's profiles on a fresh dir (kept while the first value lives), and a controller
/// connected to it.
async fn start() -> (tempfile::TempDir, DaemonConfig, Daemon, Client) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let ctl = Client::connect(&cfg.socket).await;
    (dir, cfg, daemon, ctl)
}

/// The job's token, once its process has written its environment.
async fn token(data: &Path, id: &str) -> String {
    common::job_token(&data.join("jobs"), id).await
}

struct Session {
    id: String,
    token: String,
    c: Client,
}

impl Session {
    /// Connects as job `id` and reports (with `agentItems` when `items`).
    async fn report(cfg: &DaemonConfig, id: &str, items: bool) -> Session {
        let token = token(&cfg.data_dir, id).await;
        let mut c = Client::connect(&cfg.socket).await;
        c.ok(
            "report",
            json!({"id": id, "token": token, "report": {"state": "working", "agentItems": items}}),
        )
        .await;
        Session {
            id: id.to_string(),
            token,
            c,
        }
    }

    async fn send(&mut self, to: &str, text: &str) -> Value {
        self.c.ok("send", json!({"to": to, "text": text})).await
    }

    async fn ack(&mut self, seq: &Value, exact: bool) {
        let args = json!({"id": self.id, "token": self.token, "seq": seq, "exact": exact});
        self.c.ok("ack", args).await;
    }
}

async fn dispatch(ctl: &mut Client, profile: &str, name: &str) -> String {
    ctl.ok(
        "dispatch",
        json!({"profile": profile, "task": "begin", "name": name}),
    )
    .await["id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The caller's own entry of a `peers` answer.
fn own_row(peers: &Value) -> Value {
    peers["peers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["self"] == true)
        .cloned()
        .expect("the caller among its peers")
}

fn pending(rows: &Value, id: &str) -> u64 {
    rows["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
        .map(|r| r["pending"].as_u64().unwrap())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_send_each_other_messages_under_the_message_rules() {
    let (_dir, cfg, daemon, mut ctl) = start().await;
    let lead = dispatch(&mut ctl, "agent", "lead").await;
    let helper = dispatch(&mut ctl, "agent", "helper").await;
    let other = dispatch(&mut ctl, "agent", "other").await;
    dispatch(&mut ctl, "agent", "twin").await;
    dispatch(&mut ctl, "agent", "twin").await;

    // Not a session, or not reported yet: the peer ops are refused.
    assert_eq!(ctl.code("peers", json!({})).await, "unauthorized");
    let mut hello_only = Client::connect(&cfg.socket).await;
    hello_only
        .ok(
            "hello",
            json!({"protocol": 1, "agent": {"name": "x", "version": "1"}}),
        )
        .await;
    assert_eq!(
        hello_only
            .code("send", json!({"to": helper, "text": "hi"}))
            .await,
        "unauthorized"
    );

    let mut a = Session::report(&cfg, &lead, false).await;
    let mut b = Session::report(&cfg, &helper, true).await;
    for s in [&mut a, &mut b] {
        let task = s.c.deliver().await;
        s.ack(&task["seq"], false).await;
    }
    let peers = a.c.ok("peers", json!({})).await;
    let list = peers["peers"].as_array().unwrap();
    assert_eq!(list.len(), 5);
    let me: Vec<&Value> = list.iter().filter(|p| p["self"] == true).collect();
    assert_eq!((me.len(), me[0]["id"].as_str()), (1, Some(lead.as_str())));
    assert!(list
        .iter()
        .any(|p| p["name"] == "helper" && p["state"] == "working"));

    // Delivered at once, as a peer item, to an agent that takes them; acked by itself.
    let sent = a.send("helper", "the tests pass; take the docs").await;
    assert_eq!(sent, json!({"outcome": "delivered", "id": helper}));
    let item = b.c.deliver().await;
    assert_eq!(item["kind"], "message");
    assert_eq!(item["from"], json!({"id": lead, "name": "lead"}));
    assert_eq!(item["relation"], "peer");
    let text = item["text"].as_str().unwrap();
    assert!(
        text.contains("not from the user") && text.contains("no authority"),
        "{text}"
    );
    assert!(text.contains("the tests pass; take the docs"));
    // An ack that is not exact does not cover an item.
    b.ack(&item["seq"], false).await;
    assert_eq!(pending(&ctl.ok("rows", json!({})).await, &helper), 1);
    b.ack(&item["seq"], true).await;
    assert_eq!(pending(&ctl.ok("rows", json!({})).await, &helper), 0);

    // The same text again within the minute: a duplicate, not delivered.
    let again = a.send(&helper, "the tests pass; take the docs").await;
    assert_eq!(again, json!({"outcome": "duplicate", "id": helper}));
    assert_eq!(pending(&ctl.ok("rows", json!({})).await, &helper), 0);

    // Queued for a job whose agent is not connected; an agent that does not take items gets the
    // envelope as an ordinary reply.
    assert_eq!(
        a.send("other", "look at the flaky test").await["outcome"],
        "queued"
    );
    let mut c = Session::report(&cfg, &other, false).await;
    let first = c.c.deliver().await;
    assert_eq!(first["text"], "begin");
    let message = c.c.deliver().await;
    assert!(message.get("kind").is_none(), "{message}");
    assert!(message["text"]
        .as_str()
        .unwrap()
        .contains("look at the flaky test"));
    c.ack(&message["seq"], false).await;
    assert_eq!(pending(&ctl.ok("rows", json!({})).await, &other), 0);

    // Refusals.
    for (args, code) in [
        (json!({"to": "twin", "text": "hi"}), "bad_request"),
        (json!({"to": "nobody", "text": "hi"}), "not_found"),
        (json!({"to": lead, "text": "hi"}), "bad_request"),
        (json!({"to": helper, "text": "  "}), "bad_request"),
        (json!({"to": helper}), "bad_request"),
    ] {
        assert_eq!(a.c.code("send", args.clone()).await, code, "{args}");
    }

    // 30 messages a minute per sender: lead has sent 2 (a duplicate is not sent). The messages count
    // against the 20 waiting at `other` too, whatever form they arrive in.
    for n in 0..28 {
        assert_eq!(
            a.send("other", &format!("note {n}")).await["outcome"],
            "delivered"
        );
        // Taken as a reply: an ack up to it covers it (else 20 would wait and the next be `full`).
        let d = c.c.deliver().await;
        c.ack(&d["seq"], false).await;
    }
    assert_eq!(
        a.c.code("send", json!({"to": "other", "text": "one more"}))
            .await,
        "rate_limited"
    );

    // 20 items waiting per session: the 21st is refused `full` (and does not count against the sender).
    let mut seqs = Vec::new();
    for n in 0..20 {
        assert_eq!(
            c.send(&helper, &format!("item {n}")).await["outcome"],
            "delivered"
        );
        seqs.push(b.c.deliver().await["seq"].clone());
    }
    assert_eq!(
        c.c.code("send", json!({"to": helper, "text": "item 20"}))
            .await,
        "full"
    );
    // The fifth is acked by itself; the rest wait across a restart, and only they come again.
    b.ack(&seqs[4], true).await;
    let events = ctl.ok("events", json!({"id": helper})).await;
    let from_other = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["what"] == "message" && e["whoId"] == other.as_str() && e["who"] == "other")
        .count();
    assert_eq!(
        from_other, 20,
        "each message is in the feed with who sent it"
    );
    daemon.shutdown();
    drop((a, b, c, ctl));

    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut b = Session::report(&cfg, &helper, true).await;
    let mut again = Vec::new();
    for _ in 0..19 {
        let d = b.c.deliver().await;
        assert_eq!(d["kind"], "message");
        again.push(d["seq"].clone());
    }
    let expected: Vec<Value> = seqs.iter().filter(|s| **s != seqs[4]).cloned().collect();
    assert_eq!(again, expected);

    // A job that had ended is started for a message.
    let mut ctl = Client::connect(&cfg.socket).await;
    let brief = dispatch(&mut ctl, "brief", "brief").await;
    token(&cfg.data_dir, &brief).await;
    let mut exited = false;
    for _ in 0..100 {
        let rows = ctl.ok("rows", json!({})).await;
        let row = rows["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == brief)
            .cloned();
        if row.is_some_and(|r| r["state"] == "exited") {
            exited = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(exited, "the brief job exits");
    assert_eq!(b.send(&brief, "wake up").await["outcome"], "started");
    let events = ctl.ok("events", json!({"id": brief})).await;
    assert!(
        events["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["what"] == "respawn" && e["text"] == "started for a peer item"),
        "{events}"
    );
    daemon.shutdown();
}

/// A parent spawns children, which message each other as siblings and hand their results back as
/// `report` items (their rows end `done` with it); the parent watches them and is told once, as a
/// `notice`, when one is idle or has ended (at once when it is so already, and across a restart).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_spawns_watches_and_takes_its_childrens_results_back() {
    let (_dir, cfg, daemon, mut ctl) = start().await;
    let lead = dispatch(&mut ctl, "agent", "lead").await;
    let mut p = Session::report(&cfg, &lead, true).await;
    let task = p.c.deliver().await;
    p.ack(&task["seq"], false).await;

    let spawned =
        p.c.ok(
            "spawn",
            json!({"profile": "agent", "task": "part one", "name": "c1"}),
        )
        .await;
    assert_eq!(spawned["name"], "c1");
    let c1 = spawned["id"].as_str().unwrap().to_string();
    let c2 =
        p.c.ok(
            "spawn",
            json!({"profile": "agent", "task": "part two", "name": "c2"}),
        )
        .await["id"]
            .as_str()
            .unwrap()
            .to_string();
    assert_eq!(
        p.c.code("spawn", json!({"profile": "nope", "task": "x"}))
            .await,
        "not_found"
    );
    let mut one = Session::report(&cfg, &c1, true).await;
    assert_eq!(one.c.deliver().await["text"], "part one");
    let peers = one.c.ok("peers", json!({})).await;
    let me = own_row(&peers);
    assert_eq!(me["parent"], lead.as_str());
    let events = ctl.ok("events", json!({"id": c1})).await;
    let start = &events["events"][0];
    assert_eq!(
        (start["what"].clone(), start["whoId"].clone()),
        (json!("start"), json!(lead))
    );

    // Siblings.
    assert_eq!(
        one.send("c2", "I take the parser").await["outcome"],
        "queued"
    );
    let mut two = Session::report(&cfg, &c2, true).await;
    assert_eq!(two.c.deliver().await["text"], "part two");
    let note = two.c.deliver().await;
    assert_eq!(
        (note["kind"].clone(), note["relation"].clone()),
        (json!("message"), json!("sibling"))
    );

    // Watches, and their refusals.
    let w = p.c.ok("watch", json!({"id": "c1", "when": "idle"})).await;
    assert_eq!(
        w,
        json!({"id": c1, "name": "c1", "when": "idle", "fired": false})
    );
    assert_eq!(
        p.c.ok("watch", json!({"id": c2, "when": "ended"})).await["fired"],
        false
    );
    for (args, code) in [
        (json!({"id": c1, "when": "soon"}), "bad_request"),
        (json!({"id": "nobody", "when": "idle"}), "not_found"),
        (json!({"id": lead, "when": "idle"}), "bad_request"),
    ] {
        assert_eq!(p.c.code("watch", args.clone()).await, code, "{args}");
    }

    // The child hands its result back: a `report` item to the parent, its row done, and the parent's
    // watch on it fires.
    assert_eq!(
        p.c.code("handback", json!({"text": "no parent"})).await,
        "bad_request"
    );
    one.c
        .ok("handback", json!({"text": "parser done: 3 files"}))
        .await;
    let report = p.c.deliver().await;
    assert_eq!(report["kind"], "report");
    assert_eq!(report["from"], json!({"id": c1, "name": "c1"}));
    assert_eq!(report["relation"], "child");
    assert!(report["text"]
        .as_str()
        .unwrap()
        .contains("parser done: 3 files"));
    p.ack(&report["seq"], true).await;
    let notice = p.c.deliver().await;
    assert_eq!(notice["kind"], "notice");
    assert_eq!(notice["from"]["id"], c1.as_str());
    assert!(
        notice["text"]
            .as_str()
            .unwrap()
            .contains("c1 is idle (done): parser done: 3 files"),
        "{notice}"
    );
    p.ack(&notice["seq"], true).await;
    let rows = ctl.ok("rows", json!({})).await;
    let row = rows["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == c1)
        .cloned()
        .unwrap();
    assert_eq!(
        (row["state"].clone(), row["summary"].clone()),
        (json!("done"), json!("parser done: 3 files"))
    );
    // Already so: fired at once.
    let again = p.c.ok("watch", json!({"id": c1, "when": "idle"})).await;
    assert_eq!(again["fired"], true);
    let at_once = p.c.deliver().await;
    assert_eq!(at_once["kind"], "notice");
    p.ack(&at_once["seq"], true).await;

    // At most 20 watches a session: it holds one (c2 ended); 19 more fit, the next is `full`.
    let mut targets = Vec::new();
    for n in 0..10 {
        targets.push(dispatch(&mut ctl, "agent", &format!("w{n}")).await);
    }
    let mut held = 1;
    'fill: for t in &targets {
        for when in ["idle", "ended"] {
            if held == 20 {
                break 'fill;
            }
            assert_eq!(
                p.c.ok("watch", json!({"id": t, "when": when})).await["fired"],
                false
            );
            held += 1;
        }
    }
    assert_eq!(
        p.c.code("watch", json!({"id": targets[9], "when": "ended"}))
            .await,
        "full"
    );

    // Kept across a restart: c2 stopped after it is told the parent.
    daemon.shutdown();
    drop((p, one, two, ctl));
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut ctl = Client::connect(&cfg.socket).await;
    let mut p = Session::report(&cfg, &lead, true).await;
    ctl.ok("stop", json!({"id": c2})).await;
    let notice = p.c.deliver().await;
    assert_eq!(notice["kind"], "notice");
    assert!(
        notice["text"]
            .as_str()
            .unwrap()
            .contains("c2 has ended (stopped)"),
        "{notice}"
    );
    for id in targets.iter().chain([&c1, &c2, &lead]) {
        ctl.ok("rm", json!({"id": id})).await;
    }
    daemon.shutdown();
}

/// A foreground peer (a model agent's roost tools, a script) spawns a child, watches it and takes its
/// handback on its connection; it cannot hand back itself (it has no parent), and a child whose
/// foreground parent has gone is told so and can hand back again once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreground_peer_spawns_watches_and_takes_a_handback() {
    let (_dir, cfg, daemon, mut ctl) = start().await;
    let mut fg = Client::connect(&cfg.socket).await;
    let me = fg.ok("peer_register", json!({"name": "boss"})).await;
    let boss = me["id"].as_str().unwrap().to_string();
    assert_eq!(
        fg.code("handback", json!({"text": "x"})).await,
        "unsupported"
    );
    let child = fg
        .ok(
            "spawn",
            json!({"profile": "agent", "task": "part one", "name": "kid"}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut kid = Session::report(&cfg, &child, true).await;
    assert_eq!(kid.c.deliver().await["text"], "part one");
    let peers = kid.c.ok("peers", json!({})).await;
    let row = own_row(&peers);
    assert_eq!(row["parent"], boss.as_str());
    let watched = fg.ok("watch", json!({"id": "kid", "when": "ended"})).await;
    assert_eq!(watched["fired"], false);

    // Its parent gone: the handback is refused, and nothing ends.
    drop(fg);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        kid.c
            .code("handback", json!({"text": "done: 3 files"}))
            .await,
        "not_found"
    );
    let rows = ctl.ok("rows", json!({})).await;
    let row = rows["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == child.as_str())
        .cloned()
        .unwrap();
    assert_eq!(
        row["state"], "working",
        "a refused handback ends nothing: {row}"
    );
    let mut fg = Client::connect(&cfg.socket).await;
    fg.ok("peer_register", json!({"name": "boss"})).await;
    kid.c.ok("handback", json!({"text": "done: 3 files"})).await;
    let report = fg.deliver().await;
    assert_eq!(
        (&report["kind"], &report["relation"], &report["from"]["id"]),
        (&json!("report"), &json!("child"), &json!(child)),
        "{report}"
    );
    assert!(report["text"].as_str().unwrap().contains("done: 3 files"));

    // The watch fires on the connection when the child ends.
    ctl.ok("stop", json!({"id": child})).await;
    let notice = fg.deliver().await;
    assert_eq!(notice["kind"], "notice", "{notice}");
    assert!(
        notice["text"].as_str().unwrap().contains("kid has ended"),
        "{notice}"
    );
    ctl.ok("rm", json!({"id": child})).await;
    daemon.shutdown();
}

/// The Rust client speaks the fleet ops: peers, send, the board; peer items reach its handler with their
/// kind and are acked by themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_takes_peer_items_and_uses_the_board() {
    use agentwire_roost::client::agent::{Delivery, JobEnv, RoostAgent};
    let (_dir, cfg, daemon, mut ctl) = start().await;
    let mut agents = Vec::new();
    let mut inboxes = Vec::new();
    for name in ["one", "two"] {
        let id = dispatch(&mut ctl, "agent", name).await;
        let env = JobEnv {
            token: token(&cfg.data_dir, &id).await,
            socket: cfg.socket.clone(),
            dir: cfg.data_dir.join("jobs").join(&id),
            id,
        };
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Delivery>();
        let handler: agentwire_roost::client::agent::Handler = std::sync::Arc::new(move |d| {
            let tx = tx.clone();
            Box::pin(async move {
                let _ = tx.send(d);
            })
        });
        let agent = RoostAgent::start(
            env,
            name,
            "1",
            &["report", "replies", "agent-items"],
            handler,
        );
        agent.report(json!({"state": "working", "agentItems": true}));
        agents.push(agent);
        inboxes.push(rx);
    }
    // Each takes its task (reply 1) first: the connection is up then.
    for rx in &mut inboxes {
        assert_eq!(rx.recv().await.unwrap().text, "begin");
    }
    let (one, two) = (&agents[0], &agents[1]);
    let names: Vec<String> = one
        .peers()
        .await
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names.len(), 2);
    let sent = two.send("one", "over to you").await.unwrap();
    assert_eq!(sent["outcome"], "delivered");
    let item = inboxes[0].recv().await.unwrap();
    assert_eq!(item.kind.as_deref(), Some("message"));
    assert_eq!(item.from.as_ref().unwrap()["name"], "two");
    assert!(item.text.contains("over to you"));
    let mut acked = false;
    for _ in 0..100 {
        let rows = ctl.ok("rows", json!({})).await;
        if rows["rows"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["pending"] == 0)
        {
            acked = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        acked,
        "the item acked by itself, the task by an ordinary ack"
    );

    let t = one.add_task("shared work", None, &[]).await.unwrap();
    let id = t["task"]["id"].as_u64().unwrap();
    one.claim_task(id).await.unwrap();
    match two.claim_task(id).await {
        Err(agentwire_roost::client::ClientError::Refused { code, .. }) => {
            assert_eq!(code.as_str(), "conflict")
        }
        other => panic!("a held task: {other:?}"),
    }
    let done = one.task_done(id, Some("finished")).await.unwrap();
    assert_eq!(done["task"]["state"], "done");
    assert_eq!(two.tasks().await.unwrap()["tasks"][0]["result"], "finished");
    for a in &agents {
        a.close().await;
    }
    drop(agents);
    daemon.shutdown();
}

/// Messages larger than a socket's buffer, sent to a session that does not read for a while, reach it
/// whole and in order: lines begun straight onto its socket and finished by its connection's task are
/// never interleaved with others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_messages_to_a_session_that_reads_late_arrive_whole_and_in_order() {
    let (_dir, cfg, daemon, mut ctl) = start().await;
    let slow = dispatch(&mut ctl, "agent", "slow").await;
    let fast = dispatch(&mut ctl, "agent", "fast").await;
    let mut target = Session::report(&cfg, &slow, true).await;
    let mut sender = Session::report(&cfg, &fast, true).await;
    // 20 messages (as many as may wait for a session) of 150 KB: megabytes, far past a socket's buffer.
    let texts: Vec<String> = (0..20)
        .map(|n| format!("{n:02}:{}", "x".repeat(150_000)))
        .collect();
    for text in &texts {
        assert_eq!(sender.send(&slow, text).await["outcome"], "delivered");
    }
    // The target reads only now: its task, then every message, each line whole JSON.
    let task = target.c.deliver().await;
    assert_eq!(task["text"], "begin");
    for text in &texts {
        let item = target.c.deliver().await;
        assert_eq!(item["kind"], "message");
        let got = item["text"].as_str().unwrap();
        assert!(got.contains(text.as_str()), "message {} whole", &text[..2]);
        target.ack(&item["seq"], true).await;
    }
    daemon.shutdown();
}

/// A report's answer comes before the replies waiting for the job, which the report sends on the same
/// connection: a client reads its answer first, as it always has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reports_answer_comes_before_the_replies_it_sends() {
    use tokio::io::AsyncWriteExt;
    let (_dir, cfg, daemon, mut ctl) = start().await;
    let id = dispatch(&mut ctl, "agent", "waiting").await;
    ctl.ok("reply", json!({"id": id, "text": "and another"}))
        .await;
    let token = token(&cfg.data_dir, &id).await;
    let mut c = Client::connect(&cfg.socket).await;
    let report = json!({"id": 1, "op": "report", "args": {"id": id, "token": token, "report": {"state": "working"}}});
    c.writer
        .write_all(format!("{report}\n").as_bytes())
        .await
        .unwrap();
    let first = c.line().await.unwrap();
    assert_eq!(first["id"], 1, "the answer first: {first}");
    for text in ["begin", "and another"] {
        let next = c.line().await.unwrap();
        assert_eq!(
            (&next["event"], &next["text"]),
            (&json!("deliver"), &json!(text))
        );
    }
    daemon.shutdown();
}
