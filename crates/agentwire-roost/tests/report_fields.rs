//! A report's capability fields `prLinks` and `remoteAt` over a real socket with a real job process: kept
//! on the job's row (as `rows` and `subscribe` give it), written with the row so that they survive a
//! daemon restart, and refused `bad_request`, naming the field, when they do not fit.

mod common;

use agentwire_roost::daemon::Daemon;
use common::{job_token, Client};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pr_links_and_remote_at_are_kept_on_the_row_across_a_restart_and_bad_ones_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::protocol_agent_config(dir.path());
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut ctl = Client::connect(&cfg.socket).await;
    let id = ctl
        .ok("dispatch", json!({"profile": "agent", "task": "open a PR"}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let token = job_token(&cfg.data_dir.join("jobs"), &id).await;
    let mut sub = Client::connect(&cfg.socket).await;
    sub.ok("subscribe", json!({})).await;

    let mut agent = Client::connect(&cfg.socket).await;
    let links = json!([
        "https://github.com/o/r/pull/7",
        "https://git.test/o/r/-/merge_requests/2"
    ]);
    let report = json!({"state": "working", "summary": "opened two PRs", "prLinks": links,
                        "remoteAt": "https://pi.example/s/abc"});
    agent
        .ok(
            "report",
            json!({"id": id, "token": token, "report": report}),
        )
        .await;
    let row = ctl.ok("rows", json!({})).await["rows"][0].clone();
    assert_eq!(row["prLinks"], links, "{row}");
    assert_eq!(row["remoteAt"], "https://pi.example/s/abc", "{row}");
    assert_eq!(row["summary"], "opened two PRs");
    // A subscribed hub is sent the row with them.
    let pushed = loop {
        let e = sub.line().await.expect("a row event");
        if e["event"] == "row" && e["row"]["prLinks"] != json!([]) {
            break e;
        }
    };
    assert_eq!(pushed["row"]["remoteAt"], "https://pi.example/s/abc");

    // Refused, naming the field; the row keeps the last good report.
    for (bad, what) in [
        (json!({"prLinks": ["javascript:alert(1)"]}), "prLinks"),
        (
            json!({"prLinks": "https://github.com/o/r/pull/7"}),
            "prLinks",
        ),
        (json!({"prLinks": vec!["https://x.test/p"; 21]}), "prLinks"),
        (json!({"remoteAt": "two\nlines"}), "remoteAt"),
        (json!({"remoteAt": "x".repeat(501)}), "remoteAt"),
        (json!({"remoteAt": 5}), "remoteAt"),
    ] {
        let mut r = bad.clone();
        r["state"] = json!("working");
        let v = agent
            .call("report", json!({"id": id, "token": token, "report": r}))
            .await;
        assert_eq!(
            (v["ok"].clone(), v["code"].clone()),
            (json!(false), json!("bad_request")),
            "{bad}: {v}"
        );
        let text = v["error"].as_str().unwrap();
        assert!(text.contains(what), "{bad}: {text}");
    }
    let row = ctl.ok("rows", json!({})).await["rows"][0].clone();
    assert_eq!(row["prLinks"], links, "the last good report stands: {row}");

    // The daemon restarts: the row read back from the store has them.
    daemon.shutdown();
    drop((agent, ctl, sub));
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut ctl = Client::connect(&cfg.socket).await;
    let row = ctl.ok("rows", json!({})).await["rows"][0].clone();
    assert_eq!(row["connected"], false, "{row}");
    assert_eq!(row["prLinks"], links, "{row}");
    assert_eq!(row["remoteAt"], "https://pi.example/s/abc", "{row}");

    // A later report without them clears them: a report is a full snapshot.
    let mut agent = Client::connect(&cfg.socket).await;
    agent
        .ok(
            "report",
            json!({"id": id, "token": token, "report": {"state": "working"}}),
        )
        .await;
    let row = ctl.ok("rows", json!({})).await["rows"][0].clone();
    assert_eq!(
        (row["prLinks"].clone(), row["remoteAt"].clone()),
        (json!([]), json!(null))
    );
    ctl.ok("stop", json!({"id": id})).await;
    daemon.shutdown();
}
