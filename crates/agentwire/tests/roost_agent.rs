//! A roost job as the agent behind the other protocols: NIP-XX and fisk-ai turns served by a job whose
//! agent (a small Python script speaking the protocol with the standard library) reports and takes replies.

mod common;

use agentwire_fisk::client::{Caller, PromptCall, Received, Reply};
use agentwire_testkit::NatsServer;
use common::{Client, Daemon};
use std::path::Path;
use std::time::Duration;

const AGENT: &str = r#"
import json, os, socket
jid, tok = os.environ["ROOST_JOB_ID"], os.environ["ROOST_JOB_TOKEN"]
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["ROOST_SOCKET"])
f = s.makefile("rwb")
n = 0
def send(op, args):
    global n
    n += 1
    f.write((json.dumps({"id": n, "op": op, "args": args}) + "\n").encode())
    f.flush()
def report(**r):
    send("report", {"id": jid, "token": tok, "report": r})
send("hello", {"protocol": 1, "agent": {"name": "py"}, "capabilities": ["report", "replies"]})
report(state="working", summary="starting")
for line in f:
    m = json.loads(line)
    if m.get("event") != "deliver":
        continue
    text = m["text"]
    if text.startswith("ask "):
        report(state="blocked", status="waiting", waitingFor="question", question=text[4:],
               choices=["red", "green"], summary="asking")
    else:
        report(state="working", status="busy", summary="thinking about " + text)
        report(state="done", status="idle", summary="echo: " + text)
    send("ack", {"id": jid, "token": tok, "seq": m["seq"]})
"#;

fn setup(dir: &Path) -> String {
    let script = dir.join("agent.py");
    std::fs::write(&script, AGENT).unwrap();
    let cfg = dir.join("agentwire.toml");
    std::fs::write(
        &cfg,
        format!(
            "[roost.profiles.py]\ncommand = [\"python3\", {:?}]\ntask = \"type\"\nprotocol = true\n",
            script.to_str().unwrap()
        ),
    )
    .unwrap();
    cfg.to_str().unwrap().to_string()
}

/// The daemon with the roost job as its agent, serving fisk-ai as identity `rj` with questions on.
fn fisk_daemon(dir: &Path, nats: &NatsServer, extra: &[&str]) -> Daemon {
    let cfg = setup(dir);
    let mut args = vec![
        "--config",
        &cfg,
        "--agent",
        "roost:py",
        "--nats",
        &nats.url,
        "--identity",
        "rj",
        "--nats-elicit",
    ];
    args.extend_from_slice(extra);
    Daemon::start(dir, &args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nipxx_prompts_are_served_by_a_roost_job_one_job_per_session() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = setup(dir.path());
    let d = Daemon::start(dir.path(), &["--config", &cfg, "--agent", "roost:py"]);
    let mut c = Client::new(&d.relay, d.agent).await;
    let run = c.ask("hello").await;
    assert_eq!(run.text(), "echo: hello");
    assert!(
        run.events
            .iter()
            .any(|(m, p)| m.kind == agentwire_nostr::nipxx::kinds::STATUS
                && p.contains("thinking about hello")),
        "working reports become status"
    );
    let run = c.ask("again").await;
    assert_eq!(run.text(), "echo: again");
    // NIP-XX has no question of its own: the job's question is the turn's answer, with its choices, and
    // the session's next prompt is the job's reply to it.
    let run = c.ask("ask colour?").await;
    assert_eq!(run.text(), "colour?\n(reply with one of: red, green)");
    let run = c.ask("green").await;
    assert_eq!(run.text(), "echo: green");
    // One job served the whole session.
    let socket = d.ready["roost_socket"].as_str().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args(["jobs", "--roost-socket", socket, "ls", "--json"])
        .output()
        .unwrap();
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows["rows"].as_array().unwrap().len(), 1, "{rows}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_question_reaches_a_fisk_ai_caller_and_the_answer_is_its_next_reply() {
    let (nats, dir) = (NatsServer::start(), tempfile::tempdir().unwrap());
    let _d = fisk_daemon(dir.path(), &nats, &[]);
    let caller = Caller::connect(&nats.url, "tester").await.unwrap();
    let mut asked = None;
    let set = caller
        .prompt(
            PromptCall {
                identity: "rj",
                request: "rq1",
                prompt: "ask colour?",
                token: None,
                timeout: Duration::from_secs(20),
            },
            |m: &Received| {
                if m.kind() == "elicit.request.select" {
                    asked = Some(m.json["options"].clone());
                }
            },
            Box::new(|_| Box::pin(async { Reply::Select(1) })),
        )
        .await
        .unwrap();
    assert_eq!(asked, Some(serde_json::json!(["red", "green"])));
    let last = set.last().unwrap();
    assert_eq!(last.kind(), "result", "{:?}", last.json);
    assert_eq!(last.json["text"], "echo: green");
}

/// Sends one raw fisk-ai request and collects its whole reply set.
async fn reply_set(nats: &async_nats::Client, body: serde_json::Value) -> Vec<serde_json::Value> {
    use futures_util::StreamExt;
    let inbox = nats.new_inbox();
    let mut sub = nats.subscribe(inbox.clone()).await.unwrap();
    nats.publish_with_reply("choria.fisk-ai.task.rj", inbox, body.to_string().into())
        .await
        .unwrap();
    let mut set = Vec::new();
    loop {
        let m = tokio::time::timeout(Duration::from_secs(20), sub.next())
            .await
            .expect("the reply set goes on")
            .unwrap();
        set.push(serde_json::from_slice(&m.payload).unwrap());
        let last = m
            .headers
            .as_ref()
            .is_some_and(|h| h.get("Fisk-AI-Stream-Final").is_some());
        if last {
            return set;
        }
    }
}

fn request(kind: &str, request: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut v = serde_json::json!({
        "protocol": format!("io.choria.fisk-ai.v1.request.{kind}"),
        "id": format!("m-{request}"), "request": request, "conversation": "c1", "sequence": 0,
        "time": "2026-11-30T00:00:00Z", "sender": {"name": "tester"},
    });
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_question_nobody_answers_defers_the_call_and_a_later_answer_is_its_next_reply() {
    let (nats, dir) = (NatsServer::start(), tempfile::tempdir().unwrap());
    let _d = fisk_daemon(dir.path(), &nats, &["--nats-request-timeout", "1"]);
    let client = async_nats::connect(&nats.url).await.unwrap();
    // The caller never answers: the question's window closes and the call is deferred.
    let set = reply_set(
        &client,
        request(
            "prompt",
            "rq-ask",
            serde_json::json!({"prompt": "ask colour?"}),
        ),
    )
    .await;
    let question = set
        .iter()
        .find(|m| m["protocol"] == "io.choria.fisk-ai.v1.elicit.request.select")
        .expect("the job's question was asked");
    let call = question["tool_use_id"].as_str().unwrap().to_string();
    let last = set.last().unwrap();
    assert_eq!(last["code"], "deferred", "{last}");
    assert!(
        last["error"].as_str().unwrap().contains(&call),
        "ids in the text: {last}"
    );
    let token = set[0]["conversation_token"].as_str().unwrap().to_string();
    // A resume without an answer goes back to the same job, which asks its question again.
    let set = reply_set(
        &client,
        request(
            "resume",
            "rq-resume",
            serde_json::json!({"conversation_token": token}),
        ),
    )
    .await;
    let again = set
        .iter()
        .find(|m| m["protocol"] == "io.choria.fisk-ai.v1.elicit.request.select")
        .unwrap_or_else(|| panic!("the question is asked again: {set:#?}"));
    assert_eq!(again["options"], serde_json::json!(["red", "green"]));
    let call = again["tool_use_id"].as_str().unwrap().to_string();
    assert_eq!(set.last().unwrap()["code"], "deferred");
    // The answer, sent later, is the job's next reply, and the turn ends with what the job made of it.
    let set = reply_set(
        &client,
        request(
            "answer",
            "rq-answer",
            serde_json::json!({"conversation_token": token, "answer": {
                "tool_use_id": call, "kind": "select", "answer": "value", "value": "green"}}),
        ),
    )
    .await;
    let last = set.last().unwrap();
    assert_eq!(last["protocol"], "io.choria.fisk-ai.v1.result", "{set:#?}");
    assert_eq!(last["text"], "echo: green");
}
