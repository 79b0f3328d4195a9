//! A model agent as the roost concierge, against the real daemon and a scripted fake model server: the hub
//! turns on a model agent served on roost (`tools = ["roost", "concierge"]`) as the concierge; the digest
//! about a session that waits for a question is its model's prompt, its `concierge_reply` is refused by
//! the policy (`never`), and its `concierge_suggest` puts the suggestion on the session's row; once the user lets it answer (`always`), a `concierge-ask`
//! from the hub is a turn in which the model's `concierge_reply` answers the session in the user's place
//! (a `reply` event by the concierge); the user's `undo` tells the session to disregard it.

mod common;

use agentwire_roost::client::Controller;
use agentwire_testkit::fake_openai::{text_chunks, tool_call_chunks, FakeOpenAi, Scripted};
use common::Daemon;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a row, a file or the fake's next request may take.
const WAIT: Duration = Duration::from_secs(15);
/// The question the session waits on.
const QUESTION: &str = "Deploy to production?";

/// A roost agent on the Python client (sdk/python) that asks the user a question with choices, writes each
/// reply to `received.txt` in its job dir and then says it is working (which wakes no digest).
const ASKER: &str = r#"
import os, sys, threading
sys.path.insert(0, sys.argv[1])
from roost_agent import RoostAgent
def on_reply(r):
    with open(os.path.join(os.environ["ROOST_JOB_DIR"], "received.txt"), "a") as f:
        f.write(r.text + "\n")
    agent.report("working", summary="got an answer", status="idle")
agent = RoostAgent.from_env("asker", version="1", on_reply=on_reply)
agent.report("blocked", summary="asks", status="waiting", waiting_for="question",
             question="Deploy to production?", choices=["yes", "no"])
threading.Event().wait(60)
"#;

async fn call(socket: &str, op: &str, args: Value) -> Value {
    let mut c = Controller::connect(Path::new(socket)).await.unwrap();
    c.call(op, args)
        .await
        .unwrap_or_else(|e| panic!("{op}: {e}"))
}

/// Waits until `check` gives something, polling; panics with `what` past [`WAIT`].
async fn until<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Job `id`'s row once it satisfies `want`.
async fn wait_row(socket: &str, id: &str, want: impl Fn(&Value) -> bool) -> Value {
    until(&format!("job {id}'s row"), || async {
        let rows = call(socket, "rows", json!({})).await;
        rows["rows"]
            .as_array()?
            .iter()
            .find(|r| r["id"] == id && want(r))
            .cloned()
    })
    .await
}

/// What session `id` has received so far, once it holds `text`.
async fn wait_received(d: &Daemon, id: &str, text: &str) -> String {
    let path = d.data_dir.join("roost/jobs").join(id).join("received.txt");
    until(&format!("{text:?} in {}", path.display()), || async {
        let got = std::fs::read_to_string(&path).unwrap_or_default();
        got.contains(text).then_some(got)
    })
    .await
}

/// The fake answers request `n` (from 0) with a call of `tool` with `arguments`.
fn tool_call(fake: &FakeOpenAi, n: usize, tool: &str, arguments: Value) {
    let chunks = tool_call_chunks(&format!("call_{n}"), tool, &[&arguments.to_string()]);
    fake.push(Scripted::Stream {
        chunks,
        gap: Duration::from_millis(2),
    });
}

/// The fake answers the next request with `text`.
fn answer(fake: &FakeOpenAi, text: &str) {
    fake.push(Scripted::Stream {
        chunks: text_chunks(&[text], (5, 2)),
        gap: Duration::from_millis(2),
    });
}

/// Request `n` (from 0), once the fake has had it.
async fn request(fake: &FakeOpenAi, n: usize) -> Value {
    until(&format!("the model's request {n}"), || async {
        fake.received().get(n).map(|r| r.body.clone())
    })
    .await
}

/// The last message of request `n`: the prompt of a turn's first call, a tool's result after that.
async fn last_message(fake: &FakeOpenAi, n: usize) -> Value {
    let body = request(fake, n).await;
    body["messages"].as_array().unwrap().last().unwrap().clone()
}

/// What the tool answered, as the model's request `n` carries it.
async fn tool_result(fake: &FakeOpenAi, n: usize) -> Value {
    let last = last_message(fake, n).await;
    assert_eq!(last["role"], "tool", "request {n}: {last}");
    serde_json::from_str(last["content"].as_str().unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_concierge_suggests_answers_for_the_user_and_is_undone() {
    let started = Instant::now();
    let fake = FakeOpenAi::start();
    let dir = tempfile::tempdir().unwrap();
    let asker = dir.path().join("asker.py");
    std::fs::write(&asker, ASKER).unwrap();
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sdk/python");
    let config = format!(
        "[agents.butler]\nkind = \"openai\"\nbase_url = \"{}\"\nmodels = [\"m\"]\n\
         tools = [\"roost\", \"concierge\"]\nexpose = [\"roost\"]\n\
         [roost.profiles.asker]\ncommand = [\"python3\", \"{}\", \"{}\"]\ntask = \"argv\"\nprotocol = true\n",
        fake.base_url,
        asker.display(),
        sdk.display()
    );
    let path = dir.path().join("agentwire.toml");
    std::fs::write(&path, config).unwrap();
    let d = Daemon::start(
        &dir.path().join("data"),
        &["--config", path.to_str().unwrap()],
    );
    let s = d.ready["roost_socket"].as_str().unwrap().to_string();

    // A session waits for the user's answer to a question with choices.
    let job = call(
        &s,
        "dispatch",
        json!({ "profile": "asker", "task": "deploy", "name": "deployer" }),
    )
    .await;
    let asker_id = job["id"].as_str().unwrap().to_string();
    wait_row(&s, &asker_id, |r| {
        r["state"] == "blocked" && r["question"] == QUESTION
    })
    .await;

    // The model agent is turned on as the concierge. Its turns, one at a time: its task, then the digest,
    // in which it tries to answer (the policy is `never`: refused) and suggests the answer instead.
    answer(&fake, "Ready.");
    tool_call(
        &fake,
        1,
        "concierge_reply",
        json!({ "id": "deployer", "text": "yes" }),
    );
    tool_call(
        &fake,
        2,
        "concierge_suggest",
        json!({ "id": "deployer", "text": "yes", "why": "the checks passed" }),
    );
    answer(&fake, "Suggested.");
    let status = call(
        &s,
        "concierge",
        json!({ "action": "on", "launch": { "profile": "butler" } }),
    )
    .await;
    assert_eq!(status["on"], true, "{status}");
    let me = status["id"].as_str().unwrap().to_string();

    let row = wait_row(&s, &asker_id, |r| r["suggested"].is_object()).await;
    assert_eq!(row["suggested"]["text"], "yes", "{row}");
    assert_eq!(row["suggested"]["why"], "the checks passed", "{row}");
    // The model was offered the concierge tools beside the roost ones, none asking for approval.
    let first = request(&fake, 0).await;
    let offered: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    for tool in [
        "concierge_say",
        "concierge_suggest",
        "concierge_reply",
        "concierge_policy",
        "concierge_act",
        "concierge_orders",
        "concierge_order_add",
        "concierge_order_rm",
        "concierge_order_applied",
        "roost_send",
    ] {
        assert!(offered.contains(&tool), "{tool} in {offered:?}");
    }
    // The digest about the waiting session was the prompt of the turn that suggested.
    let digest = last_message(&fake, 1).await;
    assert_eq!(digest["role"], "user", "{digest}");
    let prompt = digest["content"].as_str().unwrap();
    assert!(prompt.contains("<roost-digest"), "{prompt}");
    assert!(
        prompt.contains("deployer") && prompt.contains(QUESTION),
        "{prompt}"
    );
    let refused = tool_result(&fake, 2).await;
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .starts_with("policy: the policy is answer: never"),
        "{refused}"
    );
    let suggested = tool_result(&fake, 3).await;
    assert_eq!(suggested["id"], asker_id.as_str(), "{suggested}");
    assert_eq!(suggested["suggested"]["text"], "yes", "{suggested}");

    // The user lets it answer; asked by the hub, the model answers the session in the user's place.
    let status = call(
        &s,
        "concierge",
        json!({ "action": "answer", "answer": "always" }),
    )
    .await;
    assert_eq!(status["policy"]["answer"], "always", "{status}");
    tool_call(
        &fake,
        4,
        "concierge_reply",
        json!({ "id": "deployer", "text": "yes", "why": "you let me" }),
    );
    answer(&fake, "Answered deployer: yes.");
    call(
        &s,
        "concierge-ask",
        json!({ "text": "Answer the deployer for me." }),
    )
    .await;
    let got = wait_received(&d, &asker_id, "yes").await;
    assert_eq!(got, "yes\n", "only the answer so far");
    let asked = last_message(&fake, 4).await;
    assert!(
        asked["content"]
            .as_str()
            .unwrap()
            .contains("Answer the deployer for me."),
        "{asked}"
    );
    let replied = tool_result(&fake, 5).await;
    assert_eq!(replied["saved"], true, "{replied}");
    let reply = until("the concierge's reply in the feed", || async {
        let feed = call(&s, "events", json!({})).await;
        feed["events"]
            .as_array()?
            .iter()
            .find(|e| e["what"] == "reply" && e["id"] == asker_id.as_str())
            .cloned()
    })
    .await;
    assert_eq!(reply["who"], "concierge", "{reply}");
    assert_eq!(reply["whoId"], me.as_str(), "{reply}");
    let row = wait_row(&s, &asker_id, |r| r["state"] == "working").await;
    assert!(row["suggested"].is_null(), "answered: {row}");
    let status = call(&s, "concierge", json!({ "action": "status" })).await;
    assert_eq!(status["answered"], 1, "{status}");

    // The user takes the answer back: the session is told to disregard it.
    call(&s, "concierge", json!({ "action": "undo" })).await;
    let got = wait_received(&d, &asker_id, "Disregard").await;
    assert!(
        got.contains("withdrew that answer") && got.contains("\"yes\""),
        "{got}"
    );
    // Its model was called six times, no more: nothing else woke the concierge.
    assert_eq!(fake.received().len(), 6);
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "{:?}",
        started.elapsed()
    );
}
