//! Engine agents behind roost controllers: the real daemon hosts its agents as roost profiles of their
//! names, and a controller on the socket (`dispatch`, `reply`, `rows`) drives them as jobs. Each reply is
//! a turn of the job's conversation: the demo agent answers, asks (a blocked row whose reply is the
//! answer), is stopped by `/stop`; a model agent carries the first turn into the second's history; a
//! daemon killed mid-turn ends that turn once, as interrupted, and the job takes its next reply.

mod common;

use agentwire_roost::client::Controller;
use agentwire_testkit::fake_openai::{text_chunks, tool_call_chunks, FakeOpenAi, Scripted};
use common::Daemon;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a row may take to reach a state: the demo answers in milliseconds.
const ROW_WAIT: Duration = Duration::from_secs(15);

fn socket(d: &Daemon) -> String {
    d.ready["roost_socket"].as_str().unwrap().to_string()
}

async fn call(socket: &str, op: &str, args: Value) -> Value {
    let mut c = Controller::connect(Path::new(socket)).await.unwrap();
    c.call(op, args)
        .await
        .unwrap_or_else(|e| panic!("{op}: {e}"))
}

async fn row(socket: &str, id: &str) -> Option<Value> {
    let mut c = Controller::connect(Path::new(socket)).await.ok()?;
    let rows = c.call("rows", json!({})).await.ok()?;
    rows["rows"]
        .as_array()?
        .iter()
        .find(|r| r["id"] == id)
        .cloned()
}

/// Waits until job `id`'s row satisfies `want`, and returns it.
async fn wait_row(socket: &str, id: &str, what: &str, want: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + ROW_WAIT;
    let mut last = None;
    while Instant::now() < deadline {
        if let Some(r) = row(socket, id).await {
            if want(&r) {
                return r;
            }
            last = Some(r);
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    panic!("job {id}: no row {what} within {ROW_WAIT:?}; last: {last:?}");
}

fn state(r: &Value) -> &str {
    r["state"].as_str().unwrap_or("")
}

fn output_log(d: &Daemon, id: &str) -> String {
    std::fs::read_to_string(d.data_dir.join("roost/jobs").join(id).join("output.log"))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_dispatches_the_demo_agent_and_each_reply_is_a_turn_that_may_ask() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), &[]);
    let s = socket(&d);
    let job = call(
        &s,
        "dispatch",
        json!({ "profile": "demo", "task": "calc 2*21", "name": "sums" }),
    )
    .await;
    let id = job["id"].as_str().unwrap().to_string();
    let r = wait_row(&s, &id, "done", |r| state(r) == "done").await;
    assert_eq!(r["summary"], "42");
    assert_eq!(r["profile"], "demo");
    assert_eq!(
        r["connected"], true,
        "the hosted agent speaks on the socket"
    );
    assert_eq!(r["pending"], 0, "the reply was acked");

    // A question: the row is blocked with the options, and the next reply is the answer.
    call(&s, "reply", json!({ "id": id, "text": "confirm Ship it?" })).await;
    let r = wait_row(&s, &id, "blocked", |r| state(r) == "blocked").await;
    assert_eq!(r["waitingFor"], "question");
    assert_eq!(r["question"], "Ship it?");
    assert_eq!(r["choices"], json!(["Yes", "No"]));
    call(&s, "reply", json!({ "id": id, "text": "maybe" })).await;
    let r = wait_row(&s, &id, "telling what fits", |r| {
        r["summary"]
            .as_str()
            .is_some_and(|t| t.contains("does not answer"))
    })
    .await;
    assert_eq!(state(&r), "blocked", "still waiting for an answer");
    call(&s, "reply", json!({ "id": id, "text": "yes" })).await;
    let r = wait_row(&s, &id, "answered", |r| state(r) == "done").await;
    assert_eq!(r["summary"], "yes");

    // A failing turn fails the row with its code.
    call(
        &s,
        "reply",
        json!({ "id": id, "text": "fail the disk is gone" }),
    )
    .await;
    let r = wait_row(&s, &id, "failed", |r| state(r) == "failed").await;
    assert!(
        r["error"]
            .as_str()
            .is_some_and(|e| e.contains("the disk is gone")),
        "{r}"
    );

    // A long answer is cut on the row and whole in the job's output.
    call(&s, "reply", json!({ "id": id, "text": "big 3000" })).await;
    let r = wait_row(&s, &id, "done", |r| state(r) == "done").await;
    assert_eq!(r["summary"].as_str().unwrap().chars().count(), 500);
    let log = output_log(&d, &id);
    assert!(log.contains("#1 > calc 2*21\n42\n"), "{log}");
    assert!(log.contains("#2 > confirm Ship it?\nyes\n"), "{log}");
    let whole: String = "abcdefghijklmnopqrstuvwxyz"
        .chars()
        .cycle()
        .take(3000)
        .collect();
    assert!(
        log.contains(&format!("#6 > big 3000\n{whole}\n")),
        "the whole answer is kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_reply_cancels_the_running_turn_and_a_later_reply_serves_the_job_again() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), &[]);
    let s = socket(&d);
    let job = call(
        &s,
        "dispatch",
        json!({ "profile": "demo", "task": "sleep 20000" }),
    )
    .await;
    let id = job["id"].as_str().unwrap().to_string();
    wait_row(&s, &id, "working", |r| state(r) == "working").await;
    let stopped = call(&s, "reply", json!({ "id": id, "text": "/stop" })).await;
    assert_eq!(stopped["stopped"], true);
    wait_row(&s, &id, "stopped", |r| state(r) == "stopped").await;
    // The turn ends at once as cancelled (not after its 20 s).
    let deadline = Instant::now() + Duration::from_secs(5);
    while !output_log(&d, &id).contains("#1 > sleep 20000\n[cancelled]") {
        assert!(
            Instant::now() < deadline,
            "the turn was not cancelled: {:?}",
            output_log(&d, &id)
        );
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    // A reply to the stopped job serves it again: the row first shows how the last turn ended.
    call(&s, "reply", json!({ "id": id, "text": "calc 1+1" })).await;
    let r = wait_row(&s, &id, "done", |r| state(r) == "done").await;
    assert_eq!(r["summary"], "2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_mid_turn_ends_the_turn_once_as_interrupted_and_the_job_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut d = Daemon::start(&data, &[]);
    let s = socket(&d);
    let job = call(
        &s,
        "dispatch",
        json!({ "profile": "demo", "task": "sleep 20000" }),
    )
    .await;
    let id = job["id"].as_str().unwrap().to_string();
    wait_row(&s, &id, "working", |r| {
        state(r) == "working" && r["pending"] == 0
    })
    .await;
    d.kill();
    drop(d);
    let d = Daemon::start(&data, &[]);
    let s = socket(&d);
    let r = wait_row(&s, &id, "failed as interrupted", |r| state(r) == "failed").await;
    assert!(
        r["error"]
            .as_str()
            .is_some_and(|e| e.contains("interrupted")),
        "{r}"
    );
    // Not run again: the next reply is served at once, not after a second 20 s sleep.
    call(&s, "reply", json!({ "id": id, "text": "calc 3*3" })).await;
    let r = wait_row(&s, &id, "done", |r| state(r) == "done").await;
    assert_eq!(r["summary"], "9");
    let log = output_log(&d, &id);
    assert!(
        !log.contains("#1 >"),
        "the interrupted turn did not run again: {log}"
    );
    assert!(log.contains("#2 > calc 3*3\n9\n"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_agent_exposed_on_roost_carries_the_jobs_first_turn_into_the_second() {
    let fake = FakeOpenAi::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agentwire.toml");
    std::fs::write(
        &config,
        format!(
            "[agents.local]\nkind = \"openai\"\nbase_url = \"{}\"\nmodels = [\"llama3.2\"]\nexpose = [\"roost\"]\n\
             [agents.shout]\nkind = \"cmd\"\ncommand = [\"tr\", \"a-z\", \"A-Z\"]\nexpose = [\"roost\"]\n",
            fake.base_url
        ),
    )
    .unwrap();
    let d = Daemon::start(
        &dir.path().join("data"),
        &["--config", config.to_str().unwrap()],
    );
    let s = socket(&d);
    assert_eq!(d.ready["roost_profiles"], json!(["demo", "local", "shout"]));
    let stream = |pieces: &[&str]| Scripted::Stream {
        chunks: text_chunks(pieces, (5, 2)),
        gap: Duration::from_millis(5),
    };
    fake.push(stream(&["Paris", " it is."]));
    fake.push(stream(&["About 2.1 million."]));
    let job = call(
        &s,
        "dispatch",
        json!({ "profile": "local", "task": "Capital of France?" }),
    )
    .await;
    let id = job["id"].as_str().unwrap().to_string();
    let r = wait_row(&s, &id, "done", |r| state(r) == "done").await;
    assert_eq!(r["summary"], "Paris it is.");
    call(&s, "reply", json!({ "id": id, "text": "Its population?" })).await;
    let r = wait_row(&s, &id, "second answer", |r| {
        r["summary"] == "About 2.1 million."
    })
    .await;
    assert_eq!(state(&r), "done");
    let second = &fake.received()[1].body["messages"];
    let said: Vec<(String, String)> = second
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or("").to_string(),
                m["content"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let want = [
        ("user", "Capital of France?"),
        ("assistant", "Paris it is."),
        ("user", "Its population?"),
    ];
    for (role, content) in want {
        assert!(
            said.iter().any(|(r, c)| r == role && c == content),
            "{role}: {content:?} missing from {said:?}"
        );
    }
    // The demo agent stays the default and is hosted beside it, and so is the command agent.
    let demo = call(
        &s,
        "dispatch",
        json!({ "profile": "demo", "task": "calc 5*5" }),
    )
    .await;
    let r = wait_row(&s, demo["id"].as_str().unwrap(), "done", |r| {
        state(r) == "done"
    })
    .await;
    assert_eq!(r["summary"], "25");
    let shout = call(
        &s,
        "dispatch",
        json!({ "profile": "shout", "task": "quiet please" }),
    )
    .await;
    let r = wait_row(&s, shout["id"].as_str().unwrap(), "done", |r| {
        state(r) == "done"
    })
    .await;
    assert_eq!(r["summary"], "QUIET PLEASE");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_call_is_approved_from_the_row_and_always_stands_for_the_job_across_a_restart() {
    let fake = FakeOpenAi::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agentwire.toml");
    std::fs::write(
        &config,
        format!(
            "[agents.local]\nkind = \"openai\"\nbase_url = \"{}\"\nmodels = [\"llama3.2\"]\ntools = [\"shell\"]\n",
            fake.base_url
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let args = ["--config", config.to_str().unwrap(), "--agent", "local"];
    let mut d = Daemon::start(&data, &args);
    let s = socket(&d);
    let stream = |chunks: Vec<String>| Scripted::Stream {
        chunks,
        gap: Duration::from_millis(5),
    };
    let shell = |id: &str, command: &str| {
        stream(tool_call_chunks(
            id,
            "shell",
            &[&json!({ "command": command }).to_string()],
        ))
    };
    let work = data.join("work").join("local");
    fake.push(shell("s1", "echo one > first.txt"));
    fake.push(stream(text_chunks(&["Wrote it."], (1, 1))));
    let job = call(
        &s,
        "dispatch",
        json!({ "profile": "local", "task": "write a file" }),
    )
    .await;
    let id = job["id"].as_str().unwrap().to_string();
    // Before the task is delivered the row waits for its first prompt; the question comes after.
    let r = wait_row(&s, &id, "asking", |r| r["waitingFor"] == "question").await;
    assert_eq!(r["question"], "May I run `echo one > first.txt`?");
    assert_eq!(
        r["choices"],
        json!([
            "Approve once",
            "Approve for this session",
            "Always approve",
            "Deny"
        ])
    );
    assert!(
        !work.join("first.txt").exists(),
        "nothing runs before the answer"
    );
    call(&s, "reply", json!({ "id": id, "text": "always approve" })).await;
    let r = wait_row(&s, &id, "done", |r| state(r) == "done").await;
    assert_eq!(r["summary"], "Wrote it.");
    assert!(work.join("first.txt").exists());

    // The approval stands for the job, also after the daemon is killed and started again.
    d.kill();
    drop(d);
    let d = Daemon::start(&data, &args);
    let s = socket(&d);
    wait_row(&s, &id, "served again", |r| r["connected"] == true).await;
    fake.push(shell("s2", "echo two > second.txt"));
    fake.push(stream(text_chunks(&["Again."], (1, 1))));
    call(&s, "reply", json!({ "id": id, "text": "and another" })).await;
    let r = wait_row(&s, &id, "done again", |r| r["summary"] == "Again.").await;
    assert_eq!(state(&r), "done");
    assert!(work.join("second.txt").exists(), "run without asking");
    let log = std::fs::read_to_string(d.data_dir.join("roost/jobs").join(&id).join("output.log"))
        .unwrap();
    assert!(log.contains("#3 > and another\nAgain."), "{log}");
}
