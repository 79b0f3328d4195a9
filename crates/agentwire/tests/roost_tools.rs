//! Engine agents as fleet members, against the real daemon and a scripted fake model server: a model agent
//! whose `tools` list `roost` calls the roost tools as a foreground peer (the board, peers, messages, a
//! child job, a watch; a refused call comes back to the model with the daemon's code); a message to a
//! hosted model agent's job is a turn of its conversation; and a hosted model agent speaks as its job (its
//! handback reaches the session that spawned it).

mod common;

use agentwire_roost::client::Controller;
use agentwire_testkit::fake_openai::{text_chunks, tool_call_chunks, FakeOpenAi, Scripted};
use common::Daemon;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a row, a file or the fake's next request may take.
const WAIT: Duration = Duration::from_secs(20);

/// A roost agent on the Python client (sdk/python): it says it is ready, writes each reply to
/// `received.txt` in its job dir, and answers a message from another session with one to `boss`.
const WORKER: &str = r#"
import os, sys, threading
sys.path.insert(0, sys.argv[1])
from roost_agent import RoostAgent
def on_reply(r):
    with open(os.path.join(os.environ["ROOST_JOB_DIR"], "received.txt"), "a") as f:
        f.write(r.text + "\n")
    if "roost-item" in r.text:
        agent.send("boss", "on it")
    agent.report("working", summary="got it", status="idle")
agent = RoostAgent.from_env("worker", version="1", on_reply=on_reply)
agent.report("working", summary="ready", status="idle")
threading.Event().wait(60)
"#;

fn socket(d: &Daemon) -> String {
    d.ready["roost_socket"].as_str().unwrap().to_string()
}

/// `agentwire serve` with `config` (TOML) in `dir`, and its roost socket.
fn serve(dir: &Path, config: &str) -> (Daemon, String) {
    let path = dir.join("agentwire.toml");
    std::fs::write(&path, config).unwrap();
    let d = Daemon::start(&dir.join("data"), &["--config", path.to_str().unwrap()]);
    let s = socket(&d);
    (d, s)
}

async fn call(socket: &str, op: &str, args: Value) -> Value {
    let mut c = Controller::connect(Path::new(socket)).await.unwrap();
    c.call(op, args)
        .await
        .unwrap_or_else(|e| panic!("{op}: {e}"))
}

/// Waits until job `id`'s row satisfies `want`, and returns it.
async fn wait_row(socket: &str, id: &str, want: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + WAIT;
    let mut last = Value::Null;
    while Instant::now() < deadline {
        let rows = call(socket, "rows", json!({})).await;
        if let Some(r) = rows["rows"]
            .as_array()
            .and_then(|rows| rows.iter().find(|r| r["id"] == id))
        {
            if want(r) {
                return r.clone();
            }
            last = r.clone();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("job {id}: no such row within {WAIT:?}; last: {last}");
}

fn stream(chunks: Vec<String>, gap: Duration) -> Scripted {
    Scripted::Stream { chunks, gap }
}

/// The fake answers with a call of `tool` with `arguments`.
fn tool_call(fake: &FakeOpenAi, n: usize, tool: &str, arguments: Value, gap: Duration) {
    let id = format!("call_{n}");
    fake.push(stream(
        tool_call_chunks(&id, tool, &[&arguments.to_string()]),
        gap,
    ));
}

/// What the tool answered, as the model's request `n` (from 0) carries it: its last message.
fn tool_result(fake: &FakeOpenAi, n: usize) -> Value {
    let body = &fake.received()[n].body;
    let last = body["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["role"], "tool", "request {n}: {last}");
    serde_json::from_str(last["content"].as_str().unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_agent_keeps_the_board_messages_a_job_and_reads_refusals() {
    let fake = FakeOpenAi::start();
    let dir = tempfile::tempdir().unwrap();
    let worker = dir.path().join("worker.py");
    std::fs::write(&worker, WORKER).unwrap();
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sdk/python");
    let (d, s) = serve(
        dir.path(),
        &format!(
        "[agents.boss]\nkind = \"openai\"\nbase_url = \"{}\"\nmodels = [\"m\"]\ntools = [\"roost\"]\nexpose = [\"nipxx\"]\n\
         [roost.profiles.worker]\ncommand = [\"python3\", \"{}\", \"{}\"]\ntask = \"argv\"\nprotocol = true\n",
        fake.base_url,
        worker.display(),
        sdk.display()
    ),
    );
    let w = call(
        &s,
        "dispatch",
        json!({ "profile": "worker", "task": "wait", "name": "worker-1" }),
    )
    .await;
    let wid = w["id"].as_str().unwrap().to_string();
    wait_row(&s, &wid, |r| r["summary"] == "ready").await;

    // The model's calls, one a round; the fourth answer comes slowly, so that the worker's answer to the
    // message reaches the agent before the call after it.
    let quick = Duration::from_millis(5);
    tool_call(
        &fake,
        1,
        "roost_task_add",
        json!({ "title": "write the docs" }),
        quick,
    );
    tool_call(
        &fake,
        2,
        "roost_spawn",
        json!({ "profile": "worker", "task": "help" }),
        quick,
    );
    tool_call(
        &fake,
        3,
        "roost_send",
        json!({ "to": "worker-1", "text": "please write the docs" }),
        quick,
    );
    tool_call(
        &fake,
        4,
        "roost_peers",
        json!({}),
        Duration::from_millis(500),
    );
    tool_call(
        &fake,
        5,
        "roost_send",
        json!({ "to": "nobody", "text": "hello?" }),
        quick,
    );
    tool_call(
        &fake,
        6,
        "roost_watch",
        json!({ "id": "worker-1", "when": "ended" }),
        quick,
    );
    tool_call(&fake, 7, "roost_tasks", json!({}), quick);
    fake.push(stream(text_chunks(&["all set"], (5, 2)), quick));
    // A person asks the agent over NIP-XX: the turn is no roost job's, so the agent is the foreground peer
    // `boss`.
    let (relay, data) = (d.relay.clone(), d.data_dir.clone());
    let asked = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_agentwire"))
            .arg("--data-dir")
            .arg(&data)
            .args([
                "ask",
                "--relay",
                &relay,
                "--agent",
                "boss",
                "get the docs written",
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let answer = String::from_utf8_lossy(&asked.stdout);
    assert!(
        answer.contains("all set"),
        "{answer} {}",
        String::from_utf8_lossy(&asked.stderr)
    );

    // The model was offered the ten roost tools, none asking for approval.
    let offered: Vec<String> = fake.received()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(offered.len(), 10, "{offered:?}");
    assert!(offered.iter().all(|t| t.starts_with("roost_")));

    // Each result as the model read it in its next request.
    let added = tool_result(&fake, 1);
    assert_eq!(added["task"]["title"], "write the docs", "{added}");
    assert_eq!(added["task"]["by"]["who"], "boss", "{added}");
    let spawned = tool_result(&fake, 2);
    let child = spawned["id"].as_str().expect("a child job").to_string();
    let row = wait_row(&s, &child, |r| r["summary"] == "ready").await;
    assert_eq!(
        row["parent"], "fg:boss",
        "the model agent is its parent: {row}"
    );
    let sent = tool_result(&fake, 3);
    assert_eq!(sent["outcome"], "delivered", "{sent}");
    assert_eq!(sent["id"], wid.as_str());
    let peers = tool_result(&fake, 4);
    let listed = peers["peers"].as_array().unwrap();
    assert!(
        listed
            .iter()
            .any(|p| p["name"] == "boss" && p["role"] == "foreground" && p["self"] == true),
        "{peers}"
    );
    assert!(listed.iter().any(|p| p["name"] == "worker-1"), "{peers}");
    let inbox = peers["inbox"].as_array().expect("the worker's answer");
    assert_eq!(inbox.len(), 1, "{peers}");
    assert_eq!(inbox[0]["kind"], "message");
    assert_eq!(inbox[0]["from"]["name"], "worker-1");
    assert!(
        inbox[0]["text"].as_str().unwrap().contains("on it"),
        "{peers}"
    );
    let nobody = tool_result(&fake, 5);
    assert!(
        nobody["error"].as_str().unwrap().starts_with("not_found: "),
        "{nobody}"
    );
    let board = tool_result(&fake, 7);
    assert_eq!(board["tasks"][0]["title"], "write the docs", "{board}");
    assert!(board.get("inbox").is_none(), "shown once: {board}");
    let watched = tool_result(&fake, 6);
    assert_eq!(
        (&watched["id"], &watched["when"], &watched["fired"]),
        (&json!(wid), &json!("ended"), &json!(false)),
        "{watched}"
    );

    // What a user sees: the board holds the task, the worker got the message, the child runs beside
    // it, and the watch tells the model agent when the worker ends (a notice in the feed, to it).
    let tasks = call(&s, "task", json!({ "action": "list" })).await;
    assert_eq!(tasks["tasks"].as_array().unwrap().len(), 1, "{tasks}");
    assert_eq!(tasks["tasks"][0]["state"], "open");
    let received = d
        .data_dir
        .join("roost/jobs")
        .join(&wid)
        .join("received.txt");
    let deadline = Instant::now() + WAIT;
    let got = loop {
        let got = std::fs::read_to_string(&received).unwrap_or_default();
        if got.contains("please write the docs") || Instant::now() > deadline {
            break got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        got.contains("please write the docs") && got.contains("roost-item"),
        "{got}"
    );
    let rows = call(&s, "rows", json!({})).await;
    let workers = rows["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["profile"] == "worker")
        .count();
    assert_eq!(workers, 2, "{rows}");
    call(&s, "stop", json!({ "id": wid })).await;
    let deadline = Instant::now() + WAIT;
    loop {
        let feed = call(&s, "events", json!({})).await;
        let noticed =
            feed["events"].as_array().unwrap().iter().any(|e| {
                e["what"] == "notice" && e["id"] == "fg:boss" && e["whoId"] == wid.as_str()
            });
        if noticed {
            break;
        }
        assert!(Instant::now() < deadline, "no notice to boss: {feed}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_to_a_hosted_model_agents_job_is_a_turn_of_its_conversation() {
    let fake = FakeOpenAi::start();
    let dir = tempfile::tempdir().unwrap();
    let (_d, s) = serve(
        dir.path(),
        &format!(
        "[agents.local]\nkind = \"openai\"\nbase_url = \"{}\"\nmodels = [\"m\"]\nexpose = [\"roost\"]\n",
        fake.base_url
    ),
    );
    let quick = Duration::from_millis(5);
    fake.push(stream(text_chunks(&["Paris."], (5, 2)), quick));
    fake.push(stream(text_chunks(&["Noted."], (5, 2)), quick));
    let job = call(
        &s,
        "dispatch",
        json!({ "profile": "local", "task": "Capital of France?" }),
    )
    .await;
    let id = job["id"].as_str().unwrap().to_string();
    wait_row(&s, &id, |r| r["summary"] == "Paris.").await;

    // Another session (a foreground peer) sends the job a message.
    let mut peer = Controller::connect(Path::new(&s)).await.unwrap();
    peer.call("peer_register", json!({ "name": "planner" }))
        .await
        .unwrap();
    let sent = peer
        .call(
            "send",
            json!({ "to": id, "text": "Check the population too." }),
        )
        .await
        .unwrap();
    assert!(
        ["delivered", "queued"].contains(&sent["outcome"].as_str().unwrap()),
        "{sent}"
    );
    let r = wait_row(&s, &id, |r| r["summary"] == "Noted.").await;
    assert_eq!(r["state"], "done");

    // The model got it as the conversation's next user turn, in its envelope, after the first turn.
    let messages = fake.received()[1].body["messages"]
        .as_array()
        .unwrap()
        .clone();
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "user", "{last}");
    let text = last["content"].as_str().unwrap();
    assert!(
        text.contains("roost-item") && text.contains("planner"),
        "{text}"
    );
    assert!(text.contains("Check the population too."), "{text}");
    assert!(
        messages
            .iter()
            .any(|m| m["role"] == "assistant" && m["content"] == "Paris."),
        "{messages:?}"
    );
}

/// A model agent behind a roost profile speaks as its job: spawned by a session, its model's
/// `roost_handback` hands the result to that parent (a `report` item from the job), and its `roost_peers`
/// says the job is itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosted_model_agent_hands_its_result_back_as_its_job() {
    let fake = FakeOpenAi::start();
    let dir = tempfile::tempdir().unwrap();
    let (_d, s) = serve(
        dir.path(),
        &format!(
        "[agents.reviewer]\nkind = \"openai\"\nbase_url = \"{}\"\nmodels = [\"m\"]\ntools = [\"roost\"]\nexpose = [\"roost\"]\n",
        fake.base_url
    ),
    );
    let quick = Duration::from_millis(5);
    tool_call(&fake, 1, "roost_peers", json!({}), quick);
    tool_call(
        &fake,
        2,
        "roost_handback",
        json!({ "text": "looks good: ship it" }),
        quick,
    );
    fake.push(stream(text_chunks(&["Handed back."], (5, 2)), quick));

    // A session spawns the reviewer (a hosted model agent's profile) as its child.
    let mut lead = Controller::connect(Path::new(&s)).await.unwrap();
    lead.call("peer_register", json!({ "name": "lead" }))
        .await
        .unwrap();
    let child = lead
        .call(
            "spawn",
            json!({ "profile": "reviewer", "task": "review the patch" }),
        )
        .await
        .unwrap();
    let id = child["id"].as_str().unwrap().to_string();

    // The report reaches the parent, from the job.
    let report = tokio::time::timeout(WAIT, async {
        loop {
            let e = lead.next_event().await.unwrap();
            if e["event"] == "deliver" {
                return e;
            }
        }
    })
    .await
    .expect("the handback within the wait");
    assert_eq!(report["kind"], "report", "{report}");
    assert_eq!(report["from"]["id"], id.as_str(), "{report}");
    assert_eq!(report["relation"], "child", "{report}");
    assert!(
        report["text"]
            .as_str()
            .unwrap()
            .contains("looks good: ship it"),
        "{report}"
    );
    // The turn goes on after the handback: what the model read of each call.
    wait_row(&s, &id, |r| r["summary"] == "Handed back.").await;
    let peers = tool_result(&fake, 1);
    let me = peers["peers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["self"] == true)
        .cloned()
        .unwrap_or_default();
    assert_eq!(me["id"], id.as_str(), "the job is itself: {peers}");
    assert_eq!(me["parent"], "fg:lead", "{peers}");
    let handed = tool_result(&fake, 2);
    assert!(handed.get("error").is_none(), "{handed}");
}
