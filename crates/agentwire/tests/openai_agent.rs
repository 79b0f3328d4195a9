//! A model agent (`[agents.<name>] kind = "openai"`) served by the real daemon against a fake
//! OpenAI-compatible server over real HTTP: streamed over NIP-XX (deltas, tool telemetry, a provider's
//! 429 as `RATE_LIMIT` with its `retry_after`), ai.info from its config, over fisk-ai with `agentwire ask`,
//! the API key from the environment variable the config names, and a missing key refused at start.

mod common;

use agentwire_nostr::client::{Terminal, Update};
use agentwire_testkit::fake_openai::{text_chunks, tool_call_chunks, FakeOpenAi, Scripted};
use agentwire_testkit::NatsServer;
use common::{Client, Daemon};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const KEY_VAR: &str = "AGENTWIRE_TEST_MODEL_KEY";
const KEY: &str = "sk-e2e-do-not-print";

fn config(dir: &Path, fake: &FakeOpenAi) -> String {
    let path = dir.join("agentwire.toml");
    std::fs::write(
        &path,
        format!(
            "[agents.local]\nkind = \"openai\"\nbase_url = \"{}\"\nmodels = [\"llama3.2\", \"qwen2.5\"]\napi_key_env = \"{KEY_VAR}\"\nsystem_prompt = \"Be brief.\"\ntools = [\"calculator\", \"clock\"]\nmax_context_tokens = 16384\n\
             [agents.local.pricing_hints]\ncurrency = \"USD\"\nper_1k_prompt_tokens = 0.002\nper_1k_output_tokens = 0.004\n",
            fake.base_url
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

fn stream(chunks: Vec<String>) -> Scripted {
    Scripted::Stream {
        chunks,
        gap: Duration::from_millis(5),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_nipxx_the_model_streams_calls_tools_and_its_refusals_map() {
    let fake = FakeOpenAi::start();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &fake);
    let data = dir.path().join("data");
    let d = Daemon::start_with_env(
        &data,
        &["--config", &config, "--agent", "local"],
        &[(KEY_VAR, KEY)],
    );
    assert_eq!(d.ready["agent"], "local");

    let info = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args([
            "--data-dir",
            data.to_str().unwrap(),
            "info",
            "--relay",
            &d.relay,
        ])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let info: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    assert_eq!(
        info["supported_models"],
        serde_json::json!(["llama3.2", "qwen2.5"])
    );
    assert_eq!(
        info["tool_names"],
        serde_json::json!(["calculator", "clock"])
    );
    assert_eq!(info["max_context_tokens"], 16384);
    assert_eq!(
        info["pricing_hints"],
        serde_json::json!({"currency": "USD", "per_1k_prompt_tokens": 0.002, "per_1k_output_tokens": 0.004})
    );

    let mut c = Client::new(&d.relay, d.agent).await;
    fake.push(stream(text_chunks(&["Hel", "lo ", "there"], (9, 3))));
    let run = c.ask("hi").await;
    assert_eq!(run.text(), "Hello there");
    assert!(run.deltas().len() >= 3, "streamed as deltas");
    let sent = &fake.received()[0];
    // Compared without printing: a failing test must not show the key either.
    assert!(
        sent.authorization.as_deref() == Some(format!("Bearer {KEY}").as_str()),
        "the key from {KEY_VAR} was not sent as the bearer token"
    );
    assert_eq!(sent.body["messages"][0]["content"], "Be brief.");
    assert_eq!(sent.body["messages"][1]["content"], "hi");
    // The daemon asked the server for its models at start (its check), and that is not a turn's call.
    assert!(
        fake.models_asked() >= 1,
        "the model server was probed at start"
    );

    fake.push(stream(tool_call_chunks(
        "call_1",
        "calculator",
        &["{\"expression\":", "\"6*7\"}"],
    )));
    fake.push(stream(text_chunks(&["42"], (20, 1))));
    let run = c.ask("what is 6*7").await;
    assert_eq!(run.text(), "42");
    let tools: Vec<_> = run
        .updates
        .iter()
        .filter_map(|u| match u {
            Update::Tool(t) => Some(t.clone()),
            _ => None,
        })
        .collect();
    assert!(!tools.is_empty(), "tool telemetry: {:?}", run.updates);
    assert!(tools
        .iter()
        .all(|t| t.name.as_deref() == Some("calculator")));

    fake.push(Scripted::Status {
        status: 429,
        headers: vec![("retry-after".into(), "9".into())],
        body: r#"{"error":{"message":"rate limited"}}"#.into(),
    });
    let run = c.ask("again").await;
    assert_eq!(run.error_code(), "RATE_LIMIT");
    match &run.terminal {
        Some(Terminal::Error(e)) => assert_eq!(e.retry_after, Some(9)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn over_fisk_ai_ask_gets_the_models_answer_and_a_context_refusal() {
    let fake = FakeOpenAi::start();
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &fake);
    let _d = Daemon::start_with_env(
        &dir.path().join("data"),
        &[
            "--config",
            &config,
            "--agent",
            "local",
            "--nats",
            &nats.url,
            "--identity",
            "local",
        ],
        &[(KEY_VAR, KEY)],
    );
    let ask = |words: &[&str]| {
        let mut args = vec!["ask", "--nats", &nats.url, "--identity", "local"];
        args.extend_from_slice(words);
        Command::new(env!("CARGO_BIN_EXE_agentwire"))
            .args(&args)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap()
    };
    fake.push(stream(text_chunks(&["Par", "is"], (5, 2))));
    let out = ask(&["capital", "of", "France?"]);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "Paris");
    assert!(!stderr.contains(KEY));

    fake.push(Scripted::Status {
        status: 400,
        headers: vec![],
        body: r#"{"error":{"message":"maximum context length is 8192 tokens","code":"context_length_exceeded"}}"#.into(),
    });
    let out = ask(&["a", "very", "long", "prompt"]);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr.contains("context_exceeded"), "{stderr}");
}

#[test]
fn a_key_variable_that_is_not_set_stops_serve_with_its_name() {
    let fake = FakeOpenAi::start();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &fake);
    let out = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args([
            "serve",
            "--http-listen",
            "127.0.0.1:0",
            "--data-dir",
            dir.path().join("data").to_str().unwrap(),
            "--relay-listen",
            "127.0.0.1:0",
            "--config",
            &config,
            "--agent",
            "local",
        ])
        .env_remove(KEY_VAR)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("the environment variable {KEY_VAR} is not set")),
        "{stderr}"
    );
}

/// The messages of the `n`th request the fake got, as (role, content) pairs.
fn roles_and_contents(fake: &FakeOpenAi, n: usize) -> Vec<(String, String)> {
    fake.received()[n].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or("").to_string(),
                m["content"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_nipxx_the_second_turn_carries_the_first_across_a_restart() {
    let fake = FakeOpenAi::start();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &fake);
    let data = dir.path().join("data");
    let args = ["--config", config.as_str(), "--agent", "local"];
    let keys = nostr::prelude::Keys::generate();
    {
        let d = Daemon::start_with_env(&data, &args, &[(KEY_VAR, KEY)]);
        let mut c = Client::with_keys(&d.relay, d.agent, keys.clone()).await;
        fake.push(stream(tool_call_chunks(
            "call_1",
            "calculator",
            &["{\"expression\":\"2+3\"}"],
        )));
        fake.push(stream(text_chunks(&["It is 5."], (10, 3))));
        assert_eq!(c.ask("what is 2+3?").await.text(), "It is 5.");
    }
    // The daemon is gone (killed when dropped); the next turn's history comes from the journal.
    let d = Daemon::start_with_env(&data, &args, &[(KEY_VAR, KEY)]);
    let mut c = Client::with_keys(&d.relay, d.agent, keys).await;
    fake.push(stream(text_chunks(&["It is 10."], (30, 3))));
    assert_eq!(c.ask("and doubled?").await.text(), "It is 10.");
    let second = fake.received()[2].body["messages"].clone();
    let roles: Vec<_> = second
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        roles,
        vec!["system", "user", "assistant", "tool", "assistant", "user"],
        "{second}"
    );
    assert_eq!(second[1]["content"], "what is 2+3?");
    assert_eq!(second[2]["tool_calls"][0]["function"]["name"], "calculator");
    assert!(second[3]["content"].as_str().unwrap().contains('5'));
    assert_eq!(second[4]["content"], "It is 5.");
    assert_eq!(second[5]["content"], "and doubled?");
}

#[test]
fn over_fisk_ai_a_follow_up_carries_the_first_turn() {
    let fake = FakeOpenAi::start();
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &fake);
    let data = dir.path().join("data");
    let args = [
        "--config",
        config.as_str(),
        "--agent",
        "local",
        "--nats",
        &nats.url,
        "--identity",
        "local",
    ];
    let ask = |words: &[&str]| {
        let mut all = vec!["ask", "--nats", &nats.url, "--identity", "local"];
        all.extend_from_slice(words);
        Command::new(env!("CARGO_BIN_EXE_agentwire"))
            .args(&all)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap()
    };
    let token = {
        let _d = Daemon::start_with_env(&data, &args, &[(KEY_VAR, KEY)]);
        fake.push(stream(text_chunks(&["Blue."], (4, 1))));
        let out = ask(&["my", "colour", "is", "blue"]);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "Blue.",
            "{stderr}"
        );
        stderr
            .lines()
            .find_map(|l| l.strip_prefix("conversation "))
            .expect("the token is printed")
            .to_string()
    };
    let _d = Daemon::start_with_env(&data, &args, &[(KEY_VAR, KEY)]);
    fake.push(stream(text_chunks(&["You said blue."], (9, 3))));
    let out = ask(&["--conversation", &token, "what", "is", "my", "colour?"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "You said blue.",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sent = roles_and_contents(&fake, 1);
    assert_eq!(
        sent[1..],
        [
            ("user".to_string(), "my colour is blue".to_string()),
            ("assistant".to_string(), "Blue.".to_string()),
            ("user".to_string(), "what is my colour?".to_string()),
        ]
    );
}

fn shell_config(dir: &Path, fake: &FakeOpenAi) -> String {
    let path = dir.join("shell.toml");
    std::fs::write(
        &path,
        format!(
            "[agents.local]\nkind = \"openai\"\nbase_url = \"{}\"\nmodels = [\"llama3.2\"]\ntools = [\"shell\"]\n",
            fake.base_url
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn over_fisk_ai_shell_asks_and_always_stands_for_the_conversation() {
    let fake = FakeOpenAi::start();
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = shell_config(dir.path(), &fake);
    let data = dir.path().join("data");
    let _d = Daemon::start(
        &data,
        &[
            "--config",
            &config,
            "--agent",
            "local",
            "--nats",
            &nats.url,
            "--identity",
            "local",
            "--nats-elicit",
        ],
    );
    let ask = |words: &[&str], stdin: &str| {
        use std::io::Write;
        let mut all = vec!["ask", "--nats", &nats.url, "--identity", "local"];
        all.extend_from_slice(words);
        let mut child = Command::new(env!("CARGO_BIN_EXE_agentwire"))
            .args(&all)
            .env("RUST_LOG", "warn")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let work = data.join("work").join("local");
    fake.push(stream(tool_call_chunks(
        "s1",
        "shell",
        &[r#"{"command":"echo one > first.txt"}"#],
    )));
    fake.push(stream(text_chunks(&["Wrote it."], (1, 1))));
    let out = ask(&["write", "a", "file"], "always\n");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "Wrote it.",
        "{stderr}"
    );
    assert!(
        stderr.contains("[approval] run: echo one > first.txt"),
        "{stderr}"
    );
    assert!(work.join("first.txt").exists());
    let token = stderr
        .lines()
        .find_map(|l| l.strip_prefix("conversation "))
        .unwrap()
        .to_string();
    // "always" stands: the next call in the conversation is not asked about (nobody is at stdin).
    fake.push(stream(tool_call_chunks(
        "s2",
        "shell",
        &[r#"{"command":"echo two > second.txt"}"#],
    )));
    fake.push(stream(text_chunks(&["Again."], (1, 1))));
    let out = ask(&["--conversation", &token, "another"], "");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "Again.",
        "{stderr}"
    );
    assert!(!stderr.contains("[approval]"), "{stderr}");
    assert!(work.join("second.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_nipxx_shell_is_refused_since_nobody_can_approve_it() {
    let fake = FakeOpenAi::start();
    let dir = tempfile::tempdir().unwrap();
    let config = shell_config(dir.path(), &fake);
    let data = dir.path().join("data");
    let d = Daemon::start(&data, &["--config", &config, "--agent", "local"]);
    let info = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args([
            "--data-dir",
            data.to_str().unwrap(),
            "info",
            "--relay",
            &d.relay,
        ])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let info: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    assert_eq!(
        info["tool_schemas"]["shell"]["requires_approval"], true,
        "{info}"
    );
    let mut c = Client::new(&d.relay, d.agent).await;
    fake.push(stream(tool_call_chunks(
        "s1",
        "shell",
        &[r#"{"command":"touch nope.txt"}"#],
    )));
    fake.push(stream(text_chunks(
        &["I may not run commands here."],
        (1, 1),
    )));
    let run = c.ask("touch a file").await;
    assert_eq!(run.text(), "I may not run commands here.");
    assert!(!data.join("work").join("local").join("nope.txt").exists());
    let results: Vec<_> = run
        .updates
        .iter()
        .filter_map(|u| match u {
            Update::Tool(t) if t.phase.as_deref() == Some("result") => Some(t.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 1, "{:?}", run.updates);
    assert_eq!(results[0].success, Some(false));
    let sent = &fake.received()[1].body["messages"];
    let n = sent.as_array().unwrap().len();
    assert!(sent[n - 1]["content"]
        .as_str()
        .unwrap()
        .contains("no one can approve"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_nipxx_an_mcp_servers_tools_are_listed_and_called() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = root.join("target/tools/venv/bin/python");
    assert!(
        python.exists(),
        "run ./scripts/test.sh: it installs the MCP Python SDK"
    );
    let script = root.join("crates/agentwire-agents/tests/mcp/mcp_server.py");
    let fake = FakeOpenAi::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mcp.toml");
    std::fs::write(
        &path,
        format!(
            "[agents.local]\nkind = \"openai\"\nbase_url = \"{}\"\nmodels = [\"llama3.2\"]\ntools = [\"clock\"]\n[[agents.local.mcp]]\nname = \"notes\"\ncommand = [{:?}, {:?}]\n",
            fake.base_url,
            python.to_str().unwrap(),
            script.to_str().unwrap()
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let d = Daemon::start(
        &data,
        &["--config", path.to_str().unwrap(), "--agent", "local"],
    );
    let info = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args([
            "--data-dir",
            data.to_str().unwrap(),
            "info",
            "--relay",
            &d.relay,
        ])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let info: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    let names = info["tool_names"].as_array().unwrap();
    assert!(names.contains(&serde_json::json!("clock")), "{info}");
    assert!(names.contains(&serde_json::json!("notes__add")), "{info}");
    assert_eq!(
        info["tool_schemas"]["notes__add"]["input_schema"]["properties"]["b"]["type"],
        "integer"
    );
    // The MCP tool's declared result schema is published; a built-in tool declares none.
    assert_eq!(
        info["tool_schemas"]["notes__add"]["output_schema"]["properties"]["result"]["type"],
        "integer",
        "{info}"
    );
    assert!(info["tool_schemas"]["clock"].get("output_schema").is_none());
    let mut c = Client::new(&d.relay, d.agent).await;
    // A call of a tool not in tool_names is refused back to the model, never run, and its telemetry
    // says UNSUPPORTED_FEATURE.
    fake.push(stream(tool_call_chunks("m0", "teleport", &["{}"])));
    fake.push(stream(text_chunks(&["cannot"], (1, 1))));
    let run = c.ask("go").await;
    assert_eq!(run.text(), "cannot");
    let refused: Vec<_> = run
        .updates
        .iter()
        .filter_map(|u| match u {
            Update::Tool(t) if t.phase.as_deref() == Some("result") => Some(t.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(refused.len(), 1, "{:?}", run.updates);
    assert_eq!(refused[0].success, Some(false));
    assert_eq!(
        refused[0].output.as_ref().unwrap()["code"],
        "UNSUPPORTED_FEATURE",
        "{refused:?}"
    );
    let told = &fake.received()[1].body["messages"];
    let n = told.as_array().unwrap().len();
    assert!(
        told[n - 1]["content"]
            .as_str()
            .unwrap()
            .contains("no tool named"),
        "{told}"
    );
    let before = fake.received().len();
    fake.push(stream(tool_call_chunks(
        "m1",
        "notes__add",
        &[r#"{"a":20,"b":22}"#],
    )));
    fake.push(stream(text_chunks(&["42"], (1, 1))));
    let run = c.ask("add them").await;
    assert_eq!(run.text(), "42");
    let results: Vec<_> = run
        .updates
        .iter()
        .filter_map(|u| match u {
            Update::Tool(t) if t.phase.as_deref() == Some("result") => Some(t.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 1, "{:?}", run.updates);
    assert_eq!(results[0].name.as_deref(), Some("notes__add"));
    assert_eq!(results[0].success, Some(true));
    let sent = &fake.received()[before + 1].body["messages"];
    let n = sent.as_array().unwrap().len();
    assert!(
        sent[n - 1]["content"].as_str().unwrap().contains("42"),
        "{sent}"
    );
}

#[test]
fn over_fisk_ai_an_mcp_servers_tool_is_called() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = root.join("target/tools/venv/bin/python");
    assert!(
        python.exists(),
        "run ./scripts/test.sh: it installs the MCP Python SDK"
    );
    let script = root.join("crates/agentwire-agents/tests/mcp/mcp_server.py");
    let fake = FakeOpenAi::start();
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mcp.toml");
    std::fs::write(
        &path,
        format!(
            "[agents.local]\nkind = \"openai\"\nbase_url = \"{}\"\nmodels = [\"llama3.2\"]\n[[agents.local.mcp]]\nname = \"notes\"\ncommand = [{:?}, {:?}]\n",
            fake.base_url,
            python.to_str().unwrap(),
            script.to_str().unwrap()
        ),
    )
    .unwrap();
    let _d = Daemon::start(
        &dir.path().join("data"),
        &[
            "--config",
            path.to_str().unwrap(),
            "--agent",
            "local",
            "--nats",
            &nats.url,
            "--identity",
            "local",
        ],
    );
    fake.push(stream(tool_call_chunks(
        "m1",
        "notes__shout",
        &[r#"{"text":"quiet"}"#],
    )));
    fake.push(stream(text_chunks(&["QUIET, it says."], (1, 1))));
    let out = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args([
            "ask",
            "--nats",
            &nats.url,
            "--identity",
            "local",
            "shout",
            "quiet",
        ])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "QUIET, it says.",
        "{stderr}"
    );
    assert!(stderr.contains("[tool notes__shout start"), "{stderr}");
    let sent = &fake.received()[1].body["messages"];
    let n = sent.as_array().unwrap().len();
    assert!(
        sent[n - 1]["content"].as_str().unwrap().contains("QUIET"),
        "{sent}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ai_info_drops_the_tools_of_an_mcp_server_that_went_down() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = root.join("target/tools/venv/bin/python");
    assert!(
        python.exists(),
        "run ./scripts/test.sh: it installs the MCP Python SDK"
    );
    let script = root.join("crates/agentwire-agents/tests/mcp/mcp_server.py");
    let fake = FakeOpenAi::start();
    let dir = tempfile::tempdir().unwrap();
    // The server starts once: after its crash every restart fails at once, so it stays down.
    let once = dir.path().join("started");
    let wrapper = format!(
        "if [ -e {once} ]; then exit 1; fi; touch {once}; exec {} {}",
        python.display(),
        script.display(),
        once = once.display()
    );
    let path = dir.path().join("mcp.toml");
    std::fs::write(
        &path,
        format!(
            "[agents.local]\nkind = \"openai\"\nbase_url = \"{}\"\nmodels = [\"llama3.2\"]\ntools = [\"clock\"]\n[[agents.local.mcp]]\nname = \"notes\"\ncommand = [\"sh\", \"-c\", {:?}]\n",
            fake.base_url, wrapper
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let d = Daemon::start(
        &data,
        &["--config", path.to_str().unwrap(), "--agent", "local"],
    );
    let tools = || {
        let out = Command::new(env!("CARGO_BIN_EXE_agentwire"))
            .args([
                "--data-dir",
                data.to_str().unwrap(),
                "info",
                "--relay",
                &d.relay,
            ])
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        info["tool_names"].clone()
    };
    assert!(tools()
        .as_array()
        .unwrap()
        .contains(&serde_json::json!("notes__add")));
    let mut c = Client::new(&d.relay, d.agent).await;
    fake.push(stream(tool_call_chunks("m1", "notes__crash", &["{}"])));
    fake.push(stream(text_chunks(&["gone"], (1, 1))));
    assert_eq!(c.ask("crash it").await.text(), "gone");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let now = tools();
        let names = now.as_array().cloned().unwrap_or_default();
        if names.contains(&serde_json::json!("clock"))
            && !names
                .iter()
                .any(|n| n.as_str().unwrap_or("").starts_with("notes__"))
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "ai.info still lists the server's tools: {now}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Chunks of answer text with no `finish_reason`: what a server that dies mid-answer has sent.
fn unfinished_chunks(pieces: &[&str]) -> Vec<String> {
    pieces
        .iter()
        .map(|p| serde_json::json!({"choices":[{"index":0,"delta":{"content":p}}]}).to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_short_is_a_failure_and_keeps_what_was_said() {
    let fake = FakeOpenAi::start();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &fake);
    let nats = NatsServer::start();
    let d = Daemon::start_with_env(
        &dir.path().join("data"),
        &[
            "--config",
            &config,
            "--agent",
            "local",
            "--nats",
            &nats.url,
            "--identity",
            "local",
        ],
        &[(KEY_VAR, KEY)],
    );
    let cut = || Scripted::CutStream {
        chunks: unfinished_chunks(&["The answer ", "is 4"]),
        gap: Duration::from_millis(5),
    };

    // Over NIP-XX: the partial text streamed as deltas, then MODEL_UNAVAILABLE, not a response.
    let mut c = Client::new(&d.relay, d.agent).await;
    fake.push(cut());
    let run = c.ask("what is the answer?").await;
    assert_eq!(run.error_code(), "MODEL_UNAVAILABLE", "{:?}", run.terminal);
    let said: String = run
        .deltas()
        .iter()
        .filter_map(|d| d["text"].as_str().map(String::from))
        .collect();
    assert_eq!(
        said, "The answer is 4",
        "the partial text reached the caller"
    );

    // Over fisk-ai with `ask`: the failure said, with what had come, and a failing exit code.
    fake.push(cut());
    let out = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args(["ask", "--nats", &nats.url, "--identity", "local", "again?"])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(
            "closed the stream before the answer was finished (15 bytes of text had come)"
        ),
        "{stderr}"
    );

    // A stream that ends with its finish_reason but no [DONE] (some servers do) is a whole answer.
    let mut whole = unfinished_chunks(&["fine"]);
    whole.push(
        serde_json::json!({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}).to_string(),
    );
    fake.push(Scripted::CutStream {
        chunks: whole,
        gap: Duration::ZERO,
    });
    let run = c.ask("and now?").await;
    assert_eq!(run.text(), "fine", "{:?}", run.terminal);
}
