//! fisk-ai run events a caller reads, end to end: the real daemon serves a model agent (a scripted fake
//! model over real HTTP) with the roost tools over fisk-ai on a real nats-server. A model call that asks for
//! a tool is followed by an `event.status` carrying what that call consumed (the call that ends the turn has
//! none: its usage is the terminal's), and the model's `roost_spawn` of a child job is an `event.agent_call`
//! naming the job; `agentwire ask --nats` shows both on stderr. A prompt's `tool_hints` reach the model as a
//! line of its system prompt naming the suggested tools it has; a hint naming none is left out and said.

mod common;

use agentwire_fisk::client::{new_request, Caller, PromptCall, Reply};
use agentwire_testkit::fake_openai::{text_chunks, tool_call_chunks, FakeOpenAi, Scripted};
use agentwire_testkit::NatsServer;
use common::Daemon;
use serde_json::json;
use std::time::Duration;

/// A tool call's chunks with the usage the server reports for that call.
fn tool_call_with_usage(id: &str, tool: &str, arguments: &str, usage: (u64, u64)) -> Scripted {
    let mut chunks = tool_call_chunks(id, tool, &[arguments]);
    chunks.push(
        json!({"choices": [], "usage": {"prompt_tokens": usage.0, "completion_tokens": usage.1}})
            .to_string(),
    );
    Scripted::Stream {
        chunks,
        gap: Duration::from_millis(2),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_calls_usage_and_its_delegation_reach_the_caller() {
    let fake = FakeOpenAi::start();
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agentwire.toml");
    std::fs::write(
        &config,
        format!(
            "[agents.boss]\nkind = \"openai\"\nbase_url = \"{}\"\nmodels = [\"m\"]\ntools = [\"roost\"]\n\
             [roost.profiles.helper]\ncommand = [\"sh\", \"-c\", \"sleep 30\"]\ntask = \"argv\"\nprotocol = true\n",
            // (`protocol = true`: a job may spawn only agents that speak the protocol, never a terminal agent.)
            fake.base_url
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let d = Daemon::start(
        &data,
        &[
            "--config",
            config.to_str().unwrap(),
            "--agent",
            "boss",
            "--nats",
            &nats.url,
            "--identity",
            "boss",
        ],
    );
    let spawn = json!({"profile": "helper", "task": "help", "name": "helper-1"}).to_string();
    fake.push(tool_call_with_usage("c1", "roost_spawn", &spawn, (11, 4)));
    fake.push(Scripted::Stream {
        chunks: text_chunks(&["Started it."], (20, 3)),
        gap: Duration::from_millis(2),
    });

    let caller = Caller::connect(&nats.url, "tester")
        .await
        .unwrap()
        .with_tool_hints(vec!["roost_spawn".into(), "teleport".into()]);
    let request = new_request();
    let set = caller
        .prompt(
            PromptCall {
                identity: "boss",
                request: &request,
                prompt: "get a helper going",
                token: None,
                timeout: Duration::from_secs(30),
            },
            |_| {},
            Box::new(|_| Box::pin(async { Reply::NoOperator })),
        )
        .await
        .unwrap();
    let kinds: Vec<&str> = set.iter().map(|m| m.kind()).collect();
    let with_usage: Vec<&serde_json::Value> = set
        .iter()
        .filter(|m| m.kind() == "event.status" && m.json["block"]["usage"].is_object())
        .map(|m| &m.json["block"])
        .collect();
    assert_eq!(with_usage.len(), 1, "one call asked for a tool: {kinds:?}");
    assert_eq!(
        with_usage[0]["usage"]["input_tokens"], 11,
        "{}",
        with_usage[0]
    );
    assert_eq!(with_usage[0]["usage"]["output_tokens"], 4);
    let delegated: Vec<&serde_json::Value> = set
        .iter()
        .filter(|m| m.kind() == "event.agent_call")
        .map(|m| &m.json["block"])
        .collect();
    let results: Vec<&serde_json::Value> = set
        .iter()
        .filter(|m| m.kind() == "event.tool_result")
        .map(|m| &m.json["block"])
        .collect();
    assert_eq!(delegated.len(), 1, "{kinds:?} {results:?}");
    assert_eq!(delegated[0]["name"], "helper-1");
    assert_eq!(delegated[0]["id"], "c1");
    let job = delegated[0]["task"].as_str().unwrap().to_string();
    let mut c = agentwire_roost::client::Controller::connect(std::path::Path::new(
        d.ready["roost_socket"].as_str().unwrap(),
    ))
    .await
    .unwrap();
    let rows = c.call("rows", json!({})).await.unwrap();
    assert!(
        rows["rows"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == job.as_str() && r["name"] == "helper-1"),
        "the agent_call names the job spawned: {rows}"
    );
    // The hints: the model read the one it has, and the turn warned of the other.
    let system = &fake.received()[0].body["messages"][0];
    assert_eq!(system["role"], "system", "{system}");
    let said = system["content"].as_str().unwrap();
    assert!(
        said.contains("suggests these tools for this request: roost_spawn.")
            && !said.contains("teleport"),
        "{said}"
    );
    assert!(
        set.iter().any(
            |m| m.kind() == "event.warning" && m.json["block"].to_string().contains("teleport")
        ),
        "{kinds:?}"
    );
    let last = set.last().unwrap();
    assert_eq!(last.kind(), "result", "{}", last.json);
    assert_eq!(last.json["text"], "Started it.");

    // The CLI shows them.
    fake.push(tool_call_with_usage(
        "c2",
        "roost_spawn",
        &spawn.replace("helper-1", "helper-2"),
        (7, 2),
    ));
    fake.push(Scripted::Stream {
        chunks: text_chunks(&["Again."], (9, 1)),
        gap: Duration::from_millis(2),
    });
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .arg("--data-dir")
        .arg(&data)
        .args(["ask", "--nats", &nats.url, "--identity", "boss", "one more"])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains(": 7 in, 2 out]"), "the call's usage: {err}");
    assert!(err.contains("[asked helper-2 ("), "the delegation: {err}");
}
