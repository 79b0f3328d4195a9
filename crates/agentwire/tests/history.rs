//! A model agent's history is its own turns only: one data dir, one client and one NIP-XX session, first
//! served by the demo agent and then by a model agent (`serve --agent local`), gives the model none of the
//! demo agent's exchanges, and its own earlier exchange on its next prompt.

mod common;

use agentwire_testkit::fake_openai::{text_chunks, FakeOpenAi, Scripted};
use common::{Client, Daemon};
use nostr::prelude::Keys;
use std::time::Duration;

const KEY_VAR: &str = "AGENTWIRE_TEST_MODEL_KEY";

fn stream(pieces: &[&str]) -> Scripted {
    Scripted::Stream {
        chunks: text_chunks(pieces, (3, 2)),
        gap: Duration::from_millis(5),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_agent_is_given_only_its_own_earlier_turns() {
    let fake = FakeOpenAi::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agentwire.toml");
    std::fs::write(
        &config,
        format!(
            "[agents.local]\nkind = \"openai\"\nbase_url = \"{}\"\nmodels = [\"m\"]\napi_key_env = \"{KEY_VAR}\"\nsystem_prompt = \"Be brief.\"\n",
            fake.base_url
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let data = dir.path().join("data");
    let me = Keys::generate();

    // The demo agent answers two prompts of the session.
    {
        let d = Daemon::start(&data, &["--config", config]);
        let mut c = Client::with_keys(&d.relay, d.agent, me.clone()).await;
        assert_eq!(
            c.ask("first to demo").await.text(),
            "You said: first to demo"
        );
        assert_eq!(
            c.ask("second to demo").await.text(),
            "You said: second to demo"
        );
    }

    // The same data dir, key and session, now served by the model agent.
    let d = Daemon::start_with_env(
        &data,
        &["--config", config, "--agent", "local"],
        &[(KEY_VAR, "sk-test")],
    );
    let mut c = Client::with_keys(&d.relay, d.agent, me).await;
    fake.push(stream(&["one"]));
    assert_eq!(c.ask("first to the model").await.text(), "one");
    fake.push(stream(&["two"]));
    assert_eq!(c.ask("second to the model").await.text(), "two");

    let sent = fake.received();
    let contents = |n: usize| -> Vec<String> {
        sent[n].body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    assert_eq!(
        contents(0),
        ["Be brief.", "first to the model"],
        "the demo agent's exchanges are not the model's history"
    );
    assert_eq!(
        contents(1),
        [
            "Be brief.",
            "first to the model",
            "one",
            "second to the model"
        ],
        "the model's own earlier exchange is"
    );
}
