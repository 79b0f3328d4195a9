//! Crosses of protocol through a remote agent: a fisk-ai caller prompts this daemon, whose agent is an A2A
//! agent on another daemon (`kind = "a2a"`). Two real daemons on loopback and a real nats-server: the answer
//! streams back as fisk-ai text events, two turns of one fisk-ai conversation are one A2A context there, and
//! the remote agent's approval is the caller's elicitation, its answer going back to the task there.

mod common;

use agentwire_fisk::client::{new_request, Caller, PromptCall, Received, Reply};
use agentwire_fisk::wire::ElicitChoice;
use agentwire_testkit::NatsServer;
use common::api::Api;
use common::Daemon;
use std::path::Path;
use std::time::{Duration, Instant};

/// This daemon, serving the remote daemon's demo agent over A2A as `far` on fisk-ai (identity `far`).
fn near(dir: &Path, remote: &Daemon, nats: &str) -> Daemon {
    let config = dir.join("agentwire.toml");
    std::fs::write(
        &config,
        format!(
            "[agents.far]\nkind = \"a2a\"\nurl = \"{}/.well-known/agent-card.json\"\ntoken_env = \"FAR_TOKEN\"\n",
            remote.ready["http"].as_str().unwrap()
        ),
    )
    .unwrap();
    Daemon::start_with_env(
        &dir.join("near"),
        &[
            "--config",
            config.to_str().unwrap(),
            "--agent",
            "far",
            "--nats",
            nats,
            "--identity",
            "far",
            "--nats-elicit",
        ],
        &[("FAR_TOKEN", remote.ready["http_token"].as_str().unwrap())],
    )
}

/// Prompts `far` with `prompt` (in the conversation of `token` when given), answering an approval with
/// `approve`: every message of the answer.
async fn ask(
    caller: &Caller,
    prompt: &str,
    token: Option<&str>,
    approve: Option<ElicitChoice>,
) -> Vec<Received> {
    caller
        .prompt(
            PromptCall {
                identity: "far",
                request: &new_request(),
                prompt,
                token,
                timeout: Duration::from_secs(60),
            },
            |_| {},
            Box::new(move |_| {
                Box::pin(async move {
                    match approve {
                        Some(choice) => Reply::Approve(choice),
                        None => Reply::NoOperator,
                    }
                })
            }),
        )
        .await
        .unwrap()
}

fn texts(set: &[Received]) -> Vec<String> {
    set.iter()
        .filter(|m| m.kind() == "event.text")
        .filter_map(|m| m.json["block"]["text"].as_str().map(String::from))
        .collect()
}

fn result_text(set: &[Received]) -> String {
    set.iter()
        .find(|m| m.kind() == "result")
        .map(|m| m.json.to_string())
        .unwrap_or_else(|| {
            panic!(
                "no result: {:?}",
                set.iter().map(|m| m.json.to_string()).collect::<Vec<_>>()
            )
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fisk_prompt_reaches_an_a2a_agent_elsewhere_and_its_approval_is_the_callers() {
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start();
    let remote = Daemon::start(&dir.path().join("remote"), &[]);
    let _near = near(dir.path(), &remote, &nats.url);
    let caller = Caller::connect(&nats.url, "tester").await.unwrap();

    let set = ask(&caller, "hello over two protocols", None, None).await;
    assert!(
        result_text(&set).contains("You said: hello over two protocols"),
        "{}",
        result_text(&set)
    );
    assert!(
        !texts(&set).is_empty(),
        "streamed as fisk-ai text events: {:?}",
        set.iter().map(|m| m.kind().to_string()).collect::<Vec<_>>()
    );
    let token = set
        .iter()
        .find_map(|m| m.json["conversation_token"].as_str().map(String::from))
        .expect("a conversation token");

    // The next turn of that conversation is the next task of the same context there.
    let set = ask(&caller, "and again", Some(&token), None).await;
    assert!(result_text(&set).contains("You said: and again"));
    let remote_api = Api::of(&remote);
    let deadline = Instant::now() + Duration::from_secs(15);
    let contexts: Vec<String> = loop {
        let all = remote_api.get("/api/v1/turns?limit=100").await;
        let mine: Vec<String> = all["turns"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| t["prompt"] == "hello over two protocols" || t["prompt"] == "and again")
            .filter_map(|t| t["conversation"].as_str().map(String::from))
            .collect();
        if mine.len() == 2 {
            break mine;
        }
        assert!(Instant::now() < deadline, "{all}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(contexts[0], contexts[1], "one context there");

    // The remote agent's approval is the fisk-ai caller's question; its answer runs the command there.
    let set = ask(
        &caller,
        "approve rm /tmp/far-away",
        None,
        Some(ElicitChoice::Once),
    )
    .await;
    assert!(
        set.iter().any(|m| m.kind().starts_with("elicit.request")),
        "the caller was asked: {:?}",
        set.iter().map(|m| m.kind().to_string()).collect::<Vec<_>>()
    );
    assert!(
        result_text(&set).contains("ran rm /tmp/far-away"),
        "{}",
        result_text(&set)
    );
}
