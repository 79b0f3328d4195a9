//! Several agents in one daemon: `[agents.<name>]` entries with `expose` run beside the `--agent` one, each
//! with its own NIP-XX key (created once, 0600, kept across restarts) and ai.info, its own fisk-ai
//! identity, and its name on the ready line; `ask --agent NAME` finds a local agent's key by name.

mod common;

use agentwire_testkit::NatsServer;
use common::{Client, Daemon};
use nostr::prelude::PublicKey;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

const CONFIG: &str = r#"
[agents.shout]
kind = "cmd"
command = ["tr", "a-z", "A-Z"]
expose = ["nipxx", "fisk"]

[agents.adder]
kind = "demo"
expose = ["fisk"]
nats_identity = "sums"
"#;

fn cli(data: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_exposed_agent_has_its_own_key_identity_and_answers() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agentwire.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let data = dir.path().join("data");
    let args = [
        "--config",
        config.to_str().unwrap(),
        "--nats",
        &nats.url,
        "--identity",
        "main",
    ];
    let shout_key = {
        let d = Daemon::start(&data, &args);
        let agents = d.ready["agents"]
            .as_array()
            .expect("the agents on the ready line");
        assert_eq!(agents.len(), 3, "{}", d.ready);
        assert_eq!(agents[0]["name"], "demo");
        assert_eq!(agents[0]["pubkey"], d.agent.to_hex());
        assert_eq!(agents[0]["identity"], "main");
        let adder = &agents[1];
        assert_eq!(
            (adder["name"].as_str(), adder["identity"].as_str()),
            (Some("adder"), Some("sums"))
        );
        assert!(adder["pubkey"].is_null(), "adder is not on NIP-XX");
        let shout = &agents[2];
        assert_eq!(shout["identity"], "shout");
        let shout_key = PublicKey::from_hex(shout["pubkey"].as_str().unwrap()).unwrap();
        assert_ne!(shout_key, d.agent);
        let file = data.join("agents").join("shout.key");
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o600
        );

        // NIP-XX: each key is its own agent.
        let mut to_shout = Client::new(&d.relay, shout_key).await;
        assert_eq!(to_shout.ask("hello there").await.text(), "HELLO THERE");
        let mut to_main = Client::new(&d.relay, d.agent).await;
        assert_eq!(
            to_main.ask("hello there").await.text(),
            "You said: hello there"
        );
        let info = cli(&data, &["info", "--relay", &d.relay, "--agent", "shout"]);
        let info: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
        assert_eq!(info["supported_models"], serde_json::json!(["cmd"]));
        let asked = cli(
            &data,
            &["ask", "--relay", &d.relay, "--agent", "shout", "by", "name"],
        );
        assert_eq!(
            out(&asked),
            "BY NAME",
            "{}",
            String::from_utf8_lossy(&asked.stderr)
        );

        // fisk-ai: each identity is its own agent.
        let ask = |identity: &str, words: &[&str]| {
            let mut a = vec!["ask", "--nats", nats.url.as_str(), "--identity", identity];
            a.extend_from_slice(words);
            out(&cli(&data, &a))
        };
        assert_eq!(ask("shout", &["loud"]), "LOUD");
        assert_eq!(ask("sums", &["calc", "20+22"]), "42");
        assert_eq!(ask("main", &["quiet"]), "You said: quiet");
        shout_key
    };
    // The key is created once: after a restart the agent is the same.
    let d = Daemon::start(&data, &args);
    assert_eq!(d.ready["agents"][2]["pubkey"], shout_key.to_hex());
}

#[test]
fn exposing_on_fisk_without_nats_or_on_an_unknown_front_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agentwire.toml");
    for (toml, want) in [
        (
            "[agents.x]\nkind = \"demo\"\nexpose = [\"fisk\"]\n",
            "[agents.x] expose: fisk needs a NATS server",
        ),
        (
            "[agents.x]\nkind = \"demo\"\nexpose = [\"smtp\"]\n",
            "[agents.x] expose: \"smtp\" is not a front",
        ),
    ] {
        std::fs::write(&config, toml).unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_agentwire"))
            .args(["--config", config.to_str().unwrap(), "config"])
            .output()
            .unwrap();
        assert_ne!(o.status.code(), Some(0));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(want),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn config_shows_every_exposed_agent_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agentwire.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let show = |file: &Path| {
        Command::new(env!("CARGO_BIN_EXE_agentwire"))
            .args([
                "--config",
                file.to_str().unwrap(),
                "config",
                "--nats",
                "nats://127.0.0.1:4222",
                "--identity",
                "main",
            ])
            .output()
            .unwrap()
    };
    let first = show(&config);
    assert_eq!(
        first.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let shown: toml::Value = toml::from_str(&String::from_utf8_lossy(&first.stdout)).unwrap();
    assert_eq!(shown["agents"]["shout"]["expose"][1].as_str(), Some("fisk"));
    assert_eq!(
        shown["agents"]["adder"]["nats_identity"].as_str(),
        Some("sums")
    );
    let saved = dir.path().join("in-force.toml");
    std::fs::write(&saved, &first.stdout).unwrap();
    assert_eq!(show(&saved).stdout, first.stdout);
}
