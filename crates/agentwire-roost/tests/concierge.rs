//! The concierge (M44-M46) and schedules over the real socket: the hub turns the concierge on and off and
//! asks it things; it speaks on its own connection, and a session's connection is refused its ops; digests
//! wake it, one in flight and spaced, under a burst of changes; the policy (`never`, `routine`, `always`,
//! `act`) with its refusals and undo, kept across a restart; standing orders at 50 and 51, by their
//! authors, falling due on a virtual clock (every, daily, weekdays, cron) and across a restart; schedules
//! that run, pause, and run once for what they missed while the daemon was down.

mod common;

use agentwire_roost::daemon::{Calendar, ConciergeSetup, Daemon, DaemonConfig};
use agentwire_roost::proto::when::Zone;
use common::Client;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// 2026-12-04 17:59:00 UTC, a Friday.
const FRIDAY_1759: u64 = 1_796_407_140;

/// The daemon's config; its calendar's clock is `clock`'s when given, else the system's.
fn config(dir: &Path, clock: Option<&Arc<AtomicU64>>) -> DaemonConfig {
    let mut profiles = HashMap::new();
    profiles.insert("agent".to_string(), common::protocol_agent_profile());
    let calendar = match clock.cloned() {
        Some(clock) => Calendar {
            zone: Zone::named("UTC").unwrap(),
            clock: Arc::new(move || clock.load(Ordering::SeqCst)),
        },
        None => Calendar {
            zone: Zone::named("UTC").unwrap(),
            ..Default::default()
        },
    };
    DaemonConfig {
        socket: dir.join("run").join("roost.sock"),
        data_dir: dir.join("data"),
        profiles,
        hosted: Default::default(),
        retention: None,
        terminal_holder: None,
        concierge: ConciergeSetup {
            launch: Some("agent".into()),
            policy: Default::default(),
        },
        calendar,
    }
}

/// Job `id`'s agent connected: reported (`working`, taking agent items) and its task acked.
async fn connect_as(cfg: &DaemonConfig, id: &str) -> (String, Client) {
    let token = common::job_token(&cfg.data_dir.join("jobs"), id).await;
    let mut c = Client::connect(&cfg.socket).await;
    c.ok(
        "report",
        json!({"id": id, "token": token, "report": {"state": "working", "agentItems": true}}),
    )
    .await;
    let task = c.deliver().await;
    c.ok("ack", json!({"id": id, "token": token, "seq": task["seq"]}))
        .await;
    (token, c)
}

/// A session named `name`, connected.
async fn session(cfg: &DaemonConfig, ctl: &mut Client, name: &str) -> (String, String, Client) {
    let id = ctl
        .ok(
            "dispatch",
            json!({"profile": "agent", "task": "work", "name": name}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (token, c) = connect_as(cfg, &id).await;
    (id, token, c)
}

/// The concierge turned on by the hub, and its agent connected.
async fn concierge(cfg: &DaemonConfig, ctl: &mut Client) -> (String, String, Client) {
    let status = ctl.ok("concierge", json!({"action": "on"})).await;
    assert_eq!(status["on"], true, "{status}");
    let id = status["id"].as_str().unwrap().to_string();
    let (token, c) = connect_as(cfg, &id).await;
    (id, token, c)
}

/// The next delivery on `c` that is a digest (`digest`) or not, within `wait`; the others are kept.
async fn delivered(c: &mut Client, wait: Duration, digest: bool) -> Option<Value> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let found = c
            .events
            .iter()
            .position(|e| e["event"] == "deliver" && (e["kind"] == "digest") == digest);
        if let Some(i) = found {
            return Some(c.events.remove(i));
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return None;
        }
        if let Ok(Some(v)) = tokio::time::timeout(left, c.line()).await {
            c.events.push(v);
        }
    }
}

async fn digest_within(c: &mut Client, wait: Duration) -> Option<Value> {
    delivered(c, wait, true).await
}

/// The next delivery that is not a digest.
async fn next_reply(c: &mut Client) -> Value {
    delivered(c, Duration::from_secs(10), false)
        .await
        .expect("a reply")
}

async fn report(c: &mut Client, id: &str, token: &str, report: Value) {
    c.ok(
        "report",
        json!({"id": id, "token": token, "report": report}),
    )
    .await;
}

fn blocked(question: &str, choices: &[&str]) -> Value {
    json!({"state": "blocked", "waitingFor": "question", "question": question, "choices": choices,
           "agentItems": true})
}

async fn row(ctl: &mut Client, id: &str) -> Value {
    let rows = ctl.ok("rows", json!({})).await;
    rows["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
        .cloned()
        .unwrap_or(Value::Null)
}

async fn feed(ctl: &mut Client) -> Vec<Value> {
    ctl.ok("events", json!({})).await["events"]
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_turns_the_concierge_on_and_off_and_a_session_may_not_speak_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), None);
    let _daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut ctl = Client::connect(&cfg.socket).await;
    let sub = ctl.ok("subscribe", json!({})).await;
    assert_eq!(sub["concierge"]["on"], false, "{sub}");
    let (cid, _ctoken, mut cc) = concierge(&cfg, &mut ctl).await;
    let r = row(&mut ctl, &cid).await;
    assert_eq!(
        (r["name"].as_str(), r["role"].as_str()),
        (Some("concierge"), Some("concierge"))
    );
    let status = ctl.ok("concierge", json!({"action": "status"})).await;
    assert_eq!(status["state"], "working", "{status}");
    assert_eq!(status["policy"], json!({"answer": "never", "act": false}));
    assert_eq!(
        (status["answered"].as_u64(), status["orders"].as_u64()),
        (Some(0), Some(0))
    );

    // A session's connection is refused the hub's and the concierge's ops.
    let (sid, _stoken, mut sc) = session(&cfg, &mut ctl, "worker").await;
    for (op, args) in [
        ("concierge", json!({"action": "status"})),
        ("concierge-ask", json!({"text": "hi"})),
        (
            "concierge-say",
            json!({"kind": "info", "text": "I am the concierge"}),
        ),
        ("concierge-suggest", json!({"id": sid, "text": "yes"})),
        ("concierge-reply", json!({"id": sid, "text": "yes"})),
        ("concierge-policy", json!({})),
        ("concierge-act", json!({"what": "stop", "id": sid})),
        ("concierge-order", json!({"action": "list"})),
        ("schedules", json!({})),
        ("events", json!({})),
    ] {
        assert_eq!(sc.code(op, args).await, "unsupported", "{op}");
    }
    // Nor does the concierge's own connection reach the hub's ops.
    for (op, args) in [
        ("concierge", json!({"action": "off"})),
        ("concierge-ask", json!({"text": "hi"})),
        ("dispatch", json!({"profile": "agent"})),
        (
            "schedule-add",
            json!({"profile": "agent", "task": "t", "when": "every 5m"}),
        ),
    ] {
        assert_eq!(cc.code(op, args).await, "unsupported", "{op}");
    }
    // The hub does not speak as the concierge either.
    assert_eq!(
        ctl.code("concierge-say", json!({"kind": "info", "text": "x"}))
            .await,
        "unsupported"
    );
    // Nobody takes its name.
    assert_eq!(
        ctl.code("dispatch", json!({"profile": "agent", "name": "concierge"}))
            .await,
        "bad_request"
    );
    assert_eq!(
        ctl.code("rename", json!({"id": sid, "name": "concierge"}))
            .await,
        "bad_request"
    );
    assert_eq!(
        ctl.code("rename", json!({"id": cid, "name": "butler"}))
            .await,
        "bad_request"
    );

    // What it says is a `concierge` event with who and whoId, and a push to the hub.
    assert_eq!(
        cc.code("concierge-say", json!({"kind": "gossip", "text": "x"}))
            .await,
        "bad_request"
    );
    cc.ok(
        "concierge-say",
        json!({"kind": "need", "text": "worker needs a decision"}),
    )
    .await;
    let said = loop {
        let e = ctl.line().await.expect("a concierge push");
        if e["event"] == "concierge" && e.get("said").is_some() {
            break e;
        }
    };
    assert_eq!(said["said"]["kind"], "need");
    assert_eq!(said["said"]["text"], "worker needs a decision");
    let e = feed(&mut ctl).await;
    let say = e
        .iter()
        .find(|e| e["what"] == "concierge" && e["why"] == "need")
        .unwrap();
    assert_eq!(
        (say["who"].as_str(), say["whoId"].as_str()),
        (Some("concierge"), Some(cid.as_str()))
    );
    // It reads the feed on its own connection.
    let its = cc.ok("events", json!({"limit": 5})).await;
    assert!(!its["events"].as_array().unwrap().is_empty());

    // The hub asks it: a reply on its connection.
    ctl.ok("concierge-ask", json!({"text": "what is going on?"}))
        .await;
    let asked = next_reply(&mut cc).await;
    assert_eq!(asked["text"], "what is going on?");

    // Off: stopped, and asking is refused.
    let off = ctl.ok("concierge", json!({"action": "off"})).await;
    assert_eq!(
        (off["on"].as_bool(), off["state"].as_str()),
        (Some(false), Some("stopped"))
    );
    assert_eq!(
        ctl.code("concierge-ask", json!({"text": "hello?"})).await,
        "bad_request"
    );
    let pushed = ctl
        .events
        .iter()
        .chain(std::iter::once(&Value::Null))
        .filter(|e| e["event"] == "concierge" && e["status"]["on"] == false)
        .count();
    let mut saw_off = pushed > 0;
    while !saw_off {
        let e = ctl.line().await.expect("the status push of off");
        saw_off = e["event"] == "concierge" && e["status"]["on"] == false;
    }
    // On again: the job it had, started again.
    let on = ctl.ok("concierge", json!({"action": "on"})).await;
    assert_eq!(
        (on["on"].as_bool(), on["id"].as_str()),
        (Some(true), Some(cid.as_str()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digests_wake_the_concierge_one_at_a_time_under_a_burst_and_lose_nothing_from_the_feed() {
    let dir = tempfile::tempdir().unwrap();
    // A virtual clock: the spacing of digests is the daemon's to keep, and the test's to move on.
    let clock = Arc::new(AtomicU64::new(agentwire_core::now_secs()));
    let tick = |secs: u64| {
        clock.fetch_add(secs, Ordering::SeqCst);
    };
    let cfg = config(dir.path(), Some(&clock));
    let _daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut ctl = Client::connect(&cfg.socket).await;
    let (sid, stoken, mut sc) = session(&cfg, &mut ctl, "builder").await;
    let (cid, ctoken, mut cc) = concierge(&cfg, &mut ctl).await;
    let ack = |d: &Value| json!({"id": cid, "token": ctoken, "seq": d["seq"], "exact": true});
    // The first digest gives it the fleet as it stands.
    let first = digest_within(&mut cc, Duration::from_secs(10))
        .await
        .expect("a first digest");
    let text = first["text"].as_str().unwrap();
    assert!(text.starts_with("<roost-digest why=\"events\""), "{text}");
    assert!(
        text.contains("- builder (") && text.contains(") working"),
        "{text}"
    );
    assert_eq!(first["from"]["name"], "roost");
    // Not acked: however long after, no other digest comes.
    report(
        &mut sc,
        &sid,
        &stoken,
        blocked("deploy now?", &["yes", "no"]),
    )
    .await;
    tick(60);
    assert!(
        digest_within(&mut cc, Duration::from_millis(2500))
            .await
            .is_none(),
        "one in flight"
    );
    cc.ok("ack", ack(&first)).await;
    let second = digest_within(&mut cc, Duration::from_secs(5))
        .await
        .expect("the next digest, once the first was acked");
    let text = second["text"].as_str().unwrap();
    assert!(
        text.contains("builder (") && text.contains("waits for: deploy now? [yes, no]"),
        "{text}"
    );
    assert!(text.contains("state: blocked"), "{text}");
    cc.ok("ack", ack(&second)).await;

    // A burst of 50 state changes within the spacing: one digest now, at most.
    for n in 0..50 {
        let r = if n % 2 == 0 {
            json!({"state": "working"})
        } else {
            blocked("again?", &["yes"])
        };
        report(&mut sc, &sid, &stoken, r).await;
    }
    assert!(
        digest_within(&mut cc, Duration::from_millis(2500))
            .await
            .is_none(),
        "spaced: the last went less than DIGEST_MIN_INTERVAL ago"
    );
    tick(agentwire_roost::proto::concierge::DIGEST_MIN_INTERVAL.as_secs());
    let burst = digest_within(&mut cc, Duration::from_secs(5))
        .await
        .expect("one digest for the burst");
    let text = burst["text"].as_str().unwrap();
    // The newest 40 of its 50 changes, and how many were left out.
    assert!(text.contains("(10 earlier events left out)"), "{text}");
    cc.ok("ack", ack(&burst)).await;
    tick(60);
    assert!(
        digest_within(&mut cc, Duration::from_millis(2500))
            .await
            .is_none(),
        "nothing new, no digest"
    );
    let states = feed(&mut ctl)
        .await
        .iter()
        .filter(|e| e["id"] == sid && e["what"] == "state")
        .count();
    assert!(states >= 51, "every change is in the feed ({states})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_decides_what_the_concierge_may_answer_and_do_and_an_answer_can_be_undone() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), None);
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut ctl = Client::connect(&cfg.socket).await;
    let (sid, stoken, mut sc) = session(&cfg, &mut ctl, "deployer").await;
    let (idle, _itoken, _ic) = session(&cfg, &mut ctl, "idle").await;
    let (cid, _ctoken, mut cc) = concierge(&cfg, &mut ctl).await;
    report(&mut sc, &sid, &stoken, blocked("ship it?", &["yes", "no"])).await;

    // A suggestion shows on the row while it waits.
    assert_eq!(
        cc.code("concierge-suggest", json!({"id": idle, "text": "x"}))
            .await,
        "bad_request"
    );
    assert_eq!(
        cc.code("concierge-suggest", json!({"id": "nope", "text": "x"}))
            .await,
        "not_found"
    );
    cc.ok(
        "concierge-suggest",
        json!({"id": sid, "text": "yes", "why": "tests pass"}),
    )
    .await;
    let r = row(&mut ctl, &sid).await;
    assert_eq!(r["suggested"]["text"], "yes", "{r}");
    assert_eq!(r["suggested"]["why"], "tests pass");

    // never: refused `policy`.
    let p = cc.ok("concierge-policy", json!({})).await;
    assert_eq!(p["policy"]["answer"], "never");
    assert_eq!(
        cc.code("concierge-reply", json!({"id": sid, "text": "yes"}))
            .await,
        "policy"
    );
    // routine: one of the choices only; a row that waits for nothing is `bad_request`.
    ctl.ok(
        "concierge",
        json!({"action": "answer", "answer": "routine"}),
    )
    .await;
    assert_eq!(
        ctl.code(
            "concierge",
            json!({"action": "answer", "answer": "sometimes"})
        )
        .await,
        "bad_request"
    );
    assert_eq!(
        cc.code("concierge-reply", json!({"id": sid, "text": "ship it all"}))
            .await,
        "policy"
    );
    assert_eq!(
        cc.code("concierge-reply", json!({"id": idle, "text": "yes"}))
            .await,
        "bad_request"
    );
    let answer = cc
        .ok(
            "concierge-reply",
            json!({"id": sid, "text": "yes", "why": "routine"}),
        )
        .await;
    let got = next_reply(&mut sc).await;
    assert_eq!(
        (got["text"].as_str(), got["seq"].clone()),
        (Some("yes"), answer["seq"].clone())
    );
    let e = feed(&mut ctl).await;
    let reply = e
        .iter()
        .rev()
        .find(|e| e["what"] == "reply" && e["id"] == sid)
        .unwrap();
    assert_eq!(
        (reply["who"].as_str(), reply["whoId"].as_str()),
        (Some("concierge"), Some(cid.as_str()))
    );
    assert!(
        row(&mut ctl, &sid).await.get("suggested").is_none(),
        "answered: no suggestion"
    );
    let status = ctl.ok("concierge", json!({"action": "status"})).await;
    assert_eq!(status["answered"], 1);

    // A command is not an answer, whatever the policy.
    assert_eq!(
        cc.code("concierge-reply", json!({"id": sid, "text": "/stop"}))
            .await,
        "bad_request"
    );
    // Undo: the session is told to disregard it.
    ctl.ok("concierge", json!({"action": "undo"})).await;
    let undo = next_reply(&mut sc).await;
    let text = undo["text"].as_str().unwrap();
    assert!(
        text.contains("Disregard") && text.contains("\"yes\""),
        "{text}"
    );
    assert_eq!(
        ctl.code("concierge", json!({"action": "undo"})).await,
        "bad_request"
    );

    // always: any text.
    ctl.ok("concierge", json!({"action": "answer", "answer": "always"}))
        .await;
    report(&mut sc, &sid, &stoken, blocked("which branch?", &[])).await;
    cc.ok("concierge-reply", json!({"id": sid, "text": "main"}))
        .await;
    assert_eq!(next_reply(&mut sc).await["text"], "main");

    // act: refused until the hub allows it; then stop, respawn, dispatch, but not itself.
    assert_eq!(
        cc.code("concierge-act", json!({"what": "stop", "id": idle}))
            .await,
        "policy"
    );
    ctl.ok("concierge", json!({"action": "act", "act": true}))
        .await;
    assert_eq!(
        cc.code("concierge-act", json!({"what": "stop", "id": cid}))
            .await,
        "bad_request"
    );
    assert_eq!(
        cc.code("concierge-act", json!({"what": "pause", "id": idle}))
            .await,
        "bad_request"
    );
    cc.ok("concierge-act", json!({"what": "stop", "id": "idle"}))
        .await;
    assert_eq!(row(&mut ctl, &idle).await["state"], "stopped");
    let made = cc
        .ok("concierge-act", json!({"what": "dispatch", "launch": {"profile": "agent", "task": "t", "name": "helper"}}))
        .await;
    let e = feed(&mut ctl).await;
    let start = e
        .iter()
        .find(|e| e["what"] == "start" && e["id"] == made["id"])
        .unwrap();
    assert_eq!(start["who"], "concierge");
    let stop = e
        .iter()
        .rev()
        .find(|e| e["what"] == "stop" && e["id"] == idle)
        .unwrap();
    assert_eq!(stop["whoId"], cid.as_str());

    // The policy is the daemon's, across a restart; and off is off.
    ctl.ok("concierge", json!({"action": "off"})).await;
    daemon.shutdown();
    drop(daemon);
    let _daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut ctl = Client::connect(&cfg.socket).await;
    let status = ctl.ok("concierge", json!({"action": "status"})).await;
    assert_eq!(
        status["policy"],
        json!({"answer": "always", "act": true}),
        "{status}"
    );
    assert_eq!(status["answered"], 2);
    assert_eq!(
        (status["on"].as_bool(), status["state"].as_str()),
        (Some(false), Some("stopped")),
        "{status}"
    );
    // Who acted is kept with the feed.
    let e = feed(&mut ctl).await;
    let stop = e
        .iter()
        .rev()
        .find(|e| e["what"] == "stop" && e["id"] == idle)
        .unwrap();
    assert_eq!(stop["whoId"], cid.as_str(), "{stop}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standing_orders_are_bounded_kept_by_their_authors_and_fall_due_on_the_clock() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(AtomicU64::new(FRIDAY_1759));
    let cfg = config(dir.path(), Some(&clock));
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut ctl = Client::connect(&cfg.socket).await;
    let (cid, ctoken, mut cc) = concierge(&cfg, &mut ctl).await;
    let first = digest_within(&mut cc, Duration::from_secs(10))
        .await
        .expect("a first digest");
    cc.ok(
        "ack",
        json!({"id": cid, "token": ctoken, "seq": first["seq"], "exact": true}),
    )
    .await;

    let add = |text: &str, when: Option<&str>| json!({"action": "add", "text": text, "when": when});
    let bad = ctl.call("concierge-order", add("x", Some("hourly"))).await;
    assert_eq!(bad["code"], "bad_request");
    assert!(bad["error"].as_str().unwrap().contains("hourly"), "{bad}");
    let o = ctl
        .ok("concierge-order", add("check the CI", Some("every 30m")))
        .await;
    assert_eq!(o["order"]["by"], "user");
    assert_eq!(o["order"]["nextAt"], FRIDAY_1759 + 1800);
    let daily = ctl
        .ok(
            "concierge-order",
            add("evening report", Some("daily 18:00")),
        )
        .await;
    assert_eq!(daily["order"]["nextAt"], FRIDAY_1759 + 60);
    let weekdays = ctl
        .ok("concierge-order", add("standup", Some("weekdays 09:00")))
        .await;
    // Friday 17:59 -> Monday 09:00.
    assert_eq!(
        weekdays["order"]["nextAt"],
        FRIDAY_1759 + 60 + 2 * 86_400 + 15 * 3600
    );
    let cron = ctl
        .ok(
            "concierge-order",
            add("tidy", Some("cron \"*/15 * * * *\"")),
        )
        .await;
    assert_eq!(cron["order"]["nextAt"], FRIDAY_1759 + 60);
    let own = cc
        .ok("concierge-order", add("watch the deploys", None))
        .await;
    assert_eq!(
        (own["order"]["by"].as_str(), own["order"]["nextAt"].clone()),
        (Some("concierge"), Value::Null)
    );
    let own_id = own["order"]["id"].clone();
    for n in 5..50 {
        ctl.ok("concierge-order", add(&format!("order {n}"), None))
            .await;
    }
    assert_eq!(
        ctl.code("concierge-order", add("one too many", None)).await,
        "full"
    );
    assert_eq!(
        cc.code("concierge-order", json!({"action": "rm", "id": 1}))
            .await,
        "unsupported"
    );
    assert_eq!(
        ctl.code("concierge-order", json!({"action": "applied", "id": 1}))
            .await,
        "unsupported"
    );
    assert_eq!(
        ctl.code("concierge-order", json!({"action": "rm", "id": 999}))
            .await,
        "not_found"
    );
    cc.ok("concierge-order", json!({"action": "rm", "id": own_id}))
        .await;
    ctl.ok("concierge-order", json!({"action": "rm", "id": 50}))
        .await;
    let applied = cc
        .ok(
            "concierge-order",
            json!({"action": "applied", "id": 1, "text": "CI green"}),
        )
        .await;
    assert_eq!(
        (
            applied["order"]["count"].as_u64(),
            applied["order"]["lastAt"].as_u64()
        ),
        (Some(1), Some(FRIDAY_1759))
    );
    let list = ctl.ok("concierge-order", json!({"action": "list"})).await;
    assert_eq!(list["orders"].as_array().unwrap().len(), 48);
    let e = feed(&mut ctl).await;
    for why in ["order-kept", "order-dropped", "order"] {
        assert!(
            e.iter()
                .any(|e| e["what"] == "concierge" && e["why"] == why),
            "{why}"
        );
    }
    assert!(e
        .iter()
        .any(|e| e["why"] == "order" && e["text"] == "#1 CI green"));

    // 18:00 comes: the daily and the cron orders are due in one digest.
    clock.store(FRIDAY_1759 + 61, Ordering::SeqCst);
    let due = digest_within(&mut cc, Duration::from_secs(10))
        .await
        .expect("a due digest");
    let text = due["text"].as_str().unwrap();
    assert!(text.starts_with("<roost-digest why=\"order\""), "{text}");
    let section = text
        .split("Due now:")
        .nth(1)
        .unwrap()
        .split("\n\n")
        .next()
        .unwrap();
    assert!(
        section.contains("#2 evening report") && section.contains("#4 tidy"),
        "{section}"
    );
    assert!(!section.contains("standup"), "{section}");
    assert!(
        text.contains("Standing orders:") && text.contains("standup"),
        "every digest lists them"
    );
    // Its nextAt moves on once the digest reached the concierge.
    let next = |l: &Value, id: u64| {
        l["orders"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["id"] == id)
            .unwrap()["nextAt"]
            .clone()
    };
    let l = ctl.ok("concierge-order", json!({"action": "list"})).await;
    assert_eq!(next(&l, 2), FRIDAY_1759 + 60, "not yet acked");
    cc.ok(
        "ack",
        json!({"id": cid, "token": ctoken, "seq": due["seq"], "exact": true}),
    )
    .await;
    let mut moved = Value::Null;
    for _ in 0..40 {
        let l = ctl.ok("concierge-order", json!({"action": "list"})).await;
        moved = next(&l, 2);
        if moved != FRIDAY_1759 + 60 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(moved, FRIDAY_1759 + 60 + 86_400, "tomorrow 18:00");

    // Across a restart: Monday 09:00 has come while the daemon was down.
    daemon.shutdown();
    drop(daemon);
    clock.store(
        FRIDAY_1759 + 60 + 2 * 86_400 + 15 * 3600 + 5,
        Ordering::SeqCst,
    );
    let _daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut cc = Client::connect(&cfg.socket).await;
    cc.ok(
        "report",
        json!({"id": cid, "token": ctoken, "report": {"state": "working", "agentItems": true}}),
    )
    .await;
    let mut found = None;
    for _ in 0..5 {
        let Some(d) = digest_within(&mut cc, Duration::from_secs(10)).await else {
            break;
        };
        cc.ok(
            "ack",
            json!({"id": cid, "token": ctoken, "seq": d["seq"], "exact": true}),
        )
        .await;
        let text = d["text"].as_str().unwrap().to_string();
        if text.contains("Due now:") && text.contains("#3 standup") {
            found = Some(text);
            break;
        }
    }
    let found = found.expect("the standup order was due after the restart");
    let section = found
        .split("Due now:")
        .nth(1)
        .unwrap()
        .split("\n\n")
        .next()
        .unwrap();
    // Every order on a clock was due by Monday: the every, the daily, the weekdays and the cron one.
    for due in [
        "#1 check the CI",
        "#2 evening report",
        "#3 standup",
        "#4 tidy",
    ] {
        assert!(section.contains(due), "{due}: {section}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_run_when_due_pause_and_run_once_for_what_they_missed() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(AtomicU64::new(FRIDAY_1759));
    let cfg = config(dir.path(), Some(&clock));
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut ctl = Client::connect(&cfg.socket).await;
    let add = |when: &str| json!({"profile": "agent", "task": "nightly build", "when": when, "name": "nightly"});
    let bad = ctl.call("schedule-add", add("daily 24:00")).await;
    assert_eq!(bad["code"], "bad_request");
    assert!(
        bad["error"].as_str().unwrap().contains("daily 24:00"),
        "{bad}"
    );
    assert_eq!(
        ctl.code(
            "schedule-add",
            json!({"profile": "nope", "task": "t", "when": "every 5m"})
        )
        .await,
        "not_found"
    );
    let s = ctl.ok("schedule-add", add("every 10m")).await;
    assert_eq!(s["schedule"]["nextAt"], FRIDAY_1759 + 600);
    let id = s["schedule"]["id"].clone();
    let jobs = |rows: &Value| {
        rows["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["name"] == "nightly")
            .count()
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(jobs(&ctl.ok("rows", json!({})).await), 0, "not due yet");

    clock.store(FRIDAY_1759 + 600, Ordering::SeqCst);
    let mut n = 0;
    for _ in 0..40 {
        n = jobs(&ctl.ok("rows", json!({})).await);
        if n > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(n, 1, "it ran");
    let list = ctl.ok("schedules", json!({})).await;
    let s = &list["schedules"][0];
    assert_eq!(
        (s["runs"].as_u64(), s["nextAt"].as_u64()),
        (Some(1), Some(FRIDAY_1759 + 1200))
    );
    let e = feed(&mut ctl).await;
    let ran = e
        .iter()
        .find(|e| e["what"] == "schedule")
        .expect("a schedule event");
    assert_eq!(ran["id"], s["lastJob"]);
    // Its job has the task.
    let job = s["lastJob"].as_str().unwrap();
    let (_t, _c) = connect_as(&cfg, job).await;
    ctl.ok("stop", json!({"id": job})).await;

    // Paused: it does not run.
    ctl.ok("schedule-pause", json!({"id": id, "paused": true}))
        .await;
    clock.store(FRIDAY_1759 + 1800, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(jobs(&ctl.ok("rows", json!({})).await), 1, "paused");
    let resumed = ctl
        .ok("schedule-pause", json!({"id": id, "paused": false}))
        .await;
    assert_eq!(resumed["schedule"]["nextAt"], FRIDAY_1759 + 2400);

    // Down for five hours: one run at start, not thirty.
    daemon.shutdown();
    drop(daemon);
    clock.store(FRIDAY_1759 + 5 * 3600, Ordering::SeqCst);
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut ctl = Client::connect(&cfg.socket).await;
    let mut n = 0;
    for _ in 0..40 {
        n = jobs(&ctl.ok("rows", json!({})).await);
        if n > 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        jobs(&ctl.ok("rows", json!({})).await),
        2,
        "one run for what it missed ({n})"
    );
    // Its next time comes while that run's job still runs: skipped, not piled up.
    clock.store(FRIDAY_1759 + 5 * 3600 + 601, Ordering::SeqCst);
    let mut skipped = false;
    for _ in 0..40 {
        skipped = feed(&mut ctl).await.iter().any(|e| {
            e["what"] == "schedule" && e["text"].as_str().unwrap_or("").contains("skipped")
        });
        if skipped {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(skipped, "a skipped run is in the feed");
    assert_eq!(jobs(&ctl.ok("rows", json!({})).await), 2);
    ctl.ok("schedule-rm", json!({"id": id})).await;
    assert_eq!(
        ctl.code("schedule-rm", json!({"id": id})).await,
        "not_found"
    );
    assert_eq!(
        ctl.code("schedule-pause", json!({"id": "x", "paused": true}))
            .await,
        "bad_request"
    );
    daemon.shutdown();
}
