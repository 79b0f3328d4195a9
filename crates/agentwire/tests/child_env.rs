//! The daemon's secrets stay the daemon's: `agentwire serve` started with a model API key and a NATS
//! password in its environment runs a `cmd` agent (prompted by a stranger over NIP-XX), a roost job and an
//! MCP server that each print their environment; none sees either secret, each sees `PATH`, `HOME`, its
//! protocol's variables and what its configuration sets or passes by name.

mod common;

use agentwire_roost::client::Controller;
use agentwire_testkit::fake_openai::FakeOpenAi;
use common::{Client, Daemon};
use serde_json::json;
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// The daemon's own variables: two secrets (the model agent's key, which its configuration names, and a
/// NATS password), one passed on by name, and its `HOME`.
const DAEMON_ENV: [(&str, &str); 4] = [
    ("TEST_OPENAI_API_KEY", "sk-daemon-secret-1"),
    ("TEST_NATS_PW", "nats-daemon-secret-2"),
    ("SHARED_OK", "passed-on"),
    ("HOME", "/home/daemon-user"),
];

fn vars(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The variables' names only: a failing check must not print a secret's value either.
fn names(text: &str) -> Vec<String> {
    let mut n: Vec<String> = vars(text).into_keys().collect();
    n.sort();
    n
}

/// Neither secret, by name or value; the allowlist's `PATH` and `HOME`.
fn assert_clean(who: &str, text: &str) {
    for secret in [
        "TEST_OPENAI_API_KEY",
        "sk-daemon-secret-1",
        "TEST_NATS_PW",
        "nats-daemon-secret-2",
    ] {
        assert!(
            !text.contains(secret),
            "{who} saw {secret}; its variables: {:?}",
            names(text)
        );
    }
    let v = vars(text);
    assert!(
        v.get("PATH").is_some_and(|p| !p.is_empty()),
        "{who}: no PATH: {:?}",
        names(text)
    );
    assert_eq!(
        v.get("HOME").map(String::as_str),
        Some("/home/daemon-user"),
        "{who}: {:?}",
        names(text)
    );
}

async fn wait_file(path: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(t) = std::fs::read_to_string(path) {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "{} was never written",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_child_gets_the_daemons_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeOpenAi::start();
    let mcp_out = dir.path().join("mcp-env.txt");
    let config = dir.path().join("agentwire.toml");
    std::fs::write(
        &config,
        format!(
            r#"[agents.envy]
kind = "cmd"
command = ["env"]
env = {{ CMD_MODE = "cmd" }}
pass_env = ["SHARED_OK"]

[agents.model]
kind = "openai"
base_url = "{base}"
models = ["m"]
api_key_env = "TEST_OPENAI_API_KEY"
expose = ["roost"]

[[agents.model.mcp]]
name = "dump"
command = ["sh", "-c", "env > {out}.tmp; mv {out}.tmp {out}; exec sleep 120"]
start_timeout_secs = 1
env = {{ MCP_MODE = "mcp" }}

[roost.profiles.dump]
command = ["sh", "-c", "env > env.tmp; mv env.tmp env.txt; exec sleep 60"]
task = "type"
protocol = true
env = {{ JOB_MODE = "job" }}
"#,
            base = fake.base_url,
            out = mcp_out.display(),
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let args = ["--config", config.to_str().unwrap(), "--agent", "envy"];
    let d = Daemon::start_with_env(&data, &args, &DAEMON_ENV);

    // A stranger prompts the cmd agent over NIP-XX: its answer is its environment.
    let mut c = Client::new(&d.relay, d.agent).await;
    let run = c.ask("hello").await;
    let text = run.text();
    assert_clean("the cmd agent", &text);
    let v = vars(&text);
    assert_eq!(
        v.get("CMD_MODE").map(String::as_str),
        Some("cmd"),
        "{:?}",
        names(&text)
    );
    assert_eq!(
        v.get("SHARED_OK").map(String::as_str),
        Some("passed-on"),
        "{:?}",
        names(&text)
    );
    assert!(v.contains_key("AGENTWIRE_REQUEST_ID"), "{:?}", names(&text));

    // A roost job.
    let socket = d.ready["roost_socket"].as_str().unwrap().to_string();
    let mut ctl = Controller::connect(Path::new(&socket)).await.unwrap();
    let job = ctl
        .call("dispatch", json!({"profile": "dump", "task": "t"}))
        .await
        .unwrap();
    let id = job["id"].as_str().unwrap();
    let text = wait_file(&data.join("roost").join("jobs").join(id).join("env.txt")).await;
    assert_clean("the roost job", &text);
    let v = vars(&text);
    assert_eq!(
        v.get("JOB_MODE").map(String::as_str),
        Some("job"),
        "{:?}",
        names(&text)
    );
    assert_eq!(
        v.get("ROOST_JOB_ID").map(String::as_str),
        Some(id),
        "{:?}",
        names(&text)
    );
    assert!(
        v.contains_key("ROOST_SOCKET") && v.contains_key("ROOST_JOB_TOKEN"),
        "{:?}",
        names(&text)
    );
    assert!(
        !v.contains_key("SHARED_OK"),
        "not passed to the job: {:?}",
        names(&text)
    );
    ctl.call("rm", json!({"id": id})).await.unwrap();

    // The model agent's MCP server.
    let text = wait_file(&mcp_out).await;
    assert_clean("the MCP server", &text);
    assert_eq!(
        vars(&text).get("MCP_MODE").map(String::as_str),
        Some("mcp"),
        "{:?}",
        names(&text)
    );
}
