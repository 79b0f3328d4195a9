//! A model agent's delegates: remote agents it calls as tools. Two real daemons on loopback: the remote one
//! serves the demo agent over NIP-XX; this one serves a model agent (a scripted fake model over real HTTP)
//! over fisk-ai on a real nats-server, with the remote agent as its delegate `far` (`kind = "nipxx"`). A
//! fisk-ai prompt thus reaches a NIP-XX agent elsewhere: the caller sees the delegation as
//! `event.agent_call`, the model gets the remote agent's answer as the tool's result, and two calls of one
//! conversation here are one conversation there.

mod common;

use agentwire_fisk::client::{new_request, Caller, PromptCall, Received, Reply};
use agentwire_testkit::fake_openai::{text_chunks, tool_call_chunks, FakeOpenAi, Scripted};
use agentwire_testkit::NatsServer;
use common::api::Api;
use common::Daemon;
use serde_json::json;
use std::time::{Duration, Instant};

fn stream(chunks: Vec<String>) -> Scripted {
    Scripted::Stream {
        chunks,
        gap: Duration::from_millis(2),
    }
}

/// Asks `boss` `prompt` over fisk-ai, in the conversation of `token` when given: every message of the
/// answer.
async fn ask(caller: &Caller, prompt: &str, token: Option<&str>) -> Vec<Received> {
    caller
        .prompt(
            PromptCall {
                identity: "boss",
                request: &new_request(),
                prompt,
                token,
                timeout: Duration::from_secs(60),
            },
            |_| {},
            Box::new(|_| Box::pin(async { Reply::NoOperator })),
        )
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fisk_prompt_reaches_a_nipxx_agent_elsewhere_through_a_model_agents_delegate() {
    let dir = tempfile::tempdir().unwrap();
    let remote = Daemon::start(&dir.path().join("remote"), &[]);
    let fake = FakeOpenAi::start();
    let nats = NatsServer::start();
    let config = dir.path().join("agentwire.toml");
    std::fs::write(
        &config,
        format!(
            "[agents.boss]\nkind = \"openai\"\nbase_url = \"{}\"\nmodels = [\"m\"]\ndelegates = [\"far\"]\n\
             [agents.far]\nkind = \"nipxx\"\npubkey = \"{}\"\nrelays = [\"{}\"]\n",
            fake.base_url,
            remote.agent.to_hex(),
            remote.relay
        ),
    )
    .unwrap();
    let _near = Daemon::start(
        &dir.path().join("near"),
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
    let caller = Caller::connect(&nats.url, "tester").await.unwrap();

    // First turn: the model hands `far` a task, then answers with what it said.
    let task = json!({"task": "count the sheep"}).to_string();
    fake.push(stream(tool_call_chunks("c1", "far", &[&task])));
    fake.push(stream(text_chunks(&["far counted them."], (5, 3))));
    let set = ask(&caller, "ask far to count the sheep", None).await;
    let kinds: Vec<&str> = set.iter().map(|m| m.kind()).collect();
    let delegated: Vec<&serde_json::Value> = set
        .iter()
        .filter(|m| m.kind() == "event.agent_call")
        .map(|m| &m.json["block"])
        .collect();
    assert_eq!(delegated.len(), 1, "{kinds:?}");
    assert_eq!(
        (&delegated[0]["name"], &delegated[0]["id"]),
        (&json!("far"), &json!("c1"))
    );
    let result = set
        .iter()
        .find(|m| m.kind() == "event.tool_result")
        .unwrap_or_else(|| panic!("no tool result: {kinds:?}"));
    assert!(
        result.json["block"]
            .to_string()
            .contains("You said: count the sheep"),
        "{}",
        result.json
    );
    // The model read the remote agent's answer as the tool's result.
    let second = &fake.received()[1].body["messages"];
    let tool = second
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap();
    assert!(
        tool["content"]
            .as_str()
            .unwrap()
            .contains("You said: count the sheep"),
        "{tool}"
    );
    let token = set
        .iter()
        .find_map(|m| m.json["conversation_token"].as_str().map(String::from))
        .expect("a conversation token");
    // The model's tool list named the delegate, described by the remote agent's card.
    let tools = &fake.received()[0].body["tools"];
    assert!(
        tools
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["function"]["name"] == "far"),
        "{tools}"
    );

    // A second turn of the conversation: a second call of `far`, the same conversation there.
    let task = json!({"task": "count the goats"}).to_string();
    fake.push(stream(tool_call_chunks("c2", "far", &[&task])));
    fake.push(stream(text_chunks(&["done."], (5, 3))));
    let set = ask(&caller, "and the goats", Some(&token)).await;
    assert!(
        set.iter().any(|m| m.kind() == "event.agent_call"),
        "{:?}",
        set.iter().map(|m| m.kind()).collect::<Vec<_>>()
    );
    let api = Api::of(&remote);
    let deadline = Instant::now() + Duration::from_secs(15);
    let conversations: Vec<String> = loop {
        let all = api.get("/api/v1/turns?limit=100").await;
        let mine: Vec<String> = all["turns"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| t["prompt"] == "count the sheep" || t["prompt"] == "count the goats")
            .filter_map(|t| t["conversation"].as_str().map(String::from))
            .collect();
        if mine.len() == 2 {
            break mine;
        }
        assert!(Instant::now() < deadline, "{all}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(conversations[0], conversations[1], "one conversation there");
}
