//! What `agentwire` tells its user about itself, run as a user runs it: `agentwire config` prints the
//! configuration in force (flag over file over default, nothing secret, readable back with `--config`) and
//! refuses a bad key or value by name; and logs written to a file carry no colour codes.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long the daemon may take to log that it is serving.
const LOG_WAIT: Duration = Duration::from_secs(10);

/// The binary with an environment of our own: no config or data dir inherited from the caller.
fn agentwire(runtime_dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_agentwire"));
    c.env_remove("AGENTWIRE_CONFIG")
        .env_remove("AGENTWIRE_DATA_DIR")
        .env_remove("AGENTWIRE_RELAY_CA_FILE")
        .env_remove("RUST_LOG")
        .env("XDG_RUNTIME_DIR", runtime_dir);
    c
}

fn run(runtime_dir: &Path, args: &[&str]) -> Output {
    agentwire(runtime_dir)
        .args(args)
        .output()
        .expect("agentwire runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A public key in hex (the one from NIP-19's examples).
const BLOCKED: &str = "3bf0c63fcb93463407af97a5e5ee64fa883d107ef9e558472c4eb9aaaefa459d";

#[test]
fn config_prints_flag_over_file_over_default_and_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agentwire.toml");
    let file_data_dir = dir.path().join("from-file");
    std::fs::write(
        &file,
        format!(
            r#"data_dir = "{}"

[serve]
relays = ["wss://file.example"]

[nipxx]
rate_per_second = 5.0
rate_burst = 7.0
block = ["{BLOCKED}"]

[nats]
url = "nats://alice:s3cret@nats.example:4222"
identity = "from-file"
workers = 3
"#,
            file_data_dir.display()
        ),
    )
    .unwrap();
    let flag_data_dir = dir.path().join("from-flag");
    let out = run(
        dir.path(),
        &[
            "--config",
            file.to_str().unwrap(),
            "config",
            "--json",
            "--data-dir",
            flag_data_dir.to_str().unwrap(),
            "--rate-burst",
            "9",
            "--relay",
            "ws://flag.example",
            "--identity",
            "from-flag",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    assert!(
        !printed.contains("s3cret"),
        "a secret was printed: {printed}"
    );
    assert!(
        !printed.contains("alice"),
        "a user name was printed: {printed}"
    );
    let v: serde_json::Value = serde_json::from_str(&printed).unwrap();

    // A flag beats the file.
    assert_eq!(v["data_dir"], flag_data_dir.to_str().unwrap());
    assert_eq!(v["nipxx"]["rate_burst"], 9.0);
    assert_eq!(
        v["serve"]["relays"],
        serde_json::json!(["ws://flag.example"])
    );
    assert_eq!(v["nats"]["identity"], "from-flag");
    // The file beats the default.
    assert_eq!(v["nipxx"]["rate_per_second"], 5.0);
    assert_eq!(v["nipxx"]["block"], serde_json::json!([BLOCKED]));
    assert_eq!(v["nats"]["workers"], 3);
    assert_eq!(v["nats"]["url"], "nats://<set>@nats.example:4222");
    // The defaults fill the rest.
    assert_eq!(v["nipxx"]["backlog_horizon_secs"], 3600);
    assert_eq!(v["nipxx"]["nip59"], false);
    assert_eq!(v["nats"]["request_timeout_secs"], 120);
    assert_eq!(v["serve"]["agent"], "demo");
    assert_eq!(
        v["roost"]["socket"],
        dir.path().join("agentwire/roost.sock").to_str().unwrap()
    );
    // An external relay turns the embedded one off: no listen address, no [relay].
    assert!(v["serve"].get("relay_listen").is_none(), "{v}");
    assert!(v.get("relay").is_none(), "{v}");
    assert!(!flag_data_dir.exists(), "config creates nothing");

    // Without flags the file is in force, and the default relay settings with the embedded relay.
    let out = run(dir.path(), &["--config", file.to_str().unwrap(), "config"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let toml: toml::Value = toml::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(toml["data_dir"].as_str(), file_data_dir.to_str());
    assert_eq!(toml["nipxx"]["rate_burst"].as_float(), Some(7.0));
    assert_eq!(toml["nats"]["identity"].as_str(), Some("from-file"));
    let out = run(dir.path(), &["config", "--relay-listen", "127.0.0.1:0"]);
    let toml: toml::Value = toml::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(toml["serve"]["relay_listen"].as_str(), Some("127.0.0.1:0"));
    assert_eq!(toml["relay"]["name"].as_str(), Some("agentwire"));
    assert_eq!(
        toml["relay"]["limits"]["max_connections"].as_integer(),
        Some(512)
    );
    assert!(
        toml.get("nats").is_none(),
        "the worker is off without a URL"
    );
}

#[test]
fn what_config_prints_reads_back_as_the_same_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let roost_json = dir.path().join("roost.json");
    std::fs::write(
        &roost_json,
        r#"{"agentProfiles":{"mine":{"command":["python3","agent.py"],"task":"argv"}}}"#,
    )
    .unwrap();
    let first = run(
        dir.path(),
        &[
            "config",
            "--data-dir",
            data_dir.to_str().unwrap(),
            "--relay-listen",
            "127.0.0.1:0",
            "--relay",
            "wss://relay.example",
            "--allow",
            BLOCKED,
            "--nip59",
            "--nats",
            "nats://127.0.0.1:4222",
            "--identity",
            "demo",
            "--nats-elicit",
            "--roost-config",
            roost_json.to_str().unwrap(),
            "--agent",
            "roost:mine",
        ],
    );
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let saved = dir.path().join("in-force.toml");
    std::fs::write(&saved, &first.stdout).unwrap();
    let again = run(dir.path(), &["--config", saved.to_str().unwrap(), "config"]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert_eq!(text(&again.stdout), text(&first.stdout));
    let toml: toml::Value = toml::from_str(&text(&first.stdout)).unwrap();
    assert_eq!(
        toml["roost"]["profiles"]["mine"]["task"].as_str(),
        Some("argv")
    );
}

#[test]
fn a_bad_key_or_value_fails_by_name_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, "[nipxx]\nrate_burts = 3\n").unwrap();
    let out = run(dir.path(), &["--config", file.to_str().unwrap(), "config"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains(file.to_str().unwrap()) && err.contains("unknown field `rate_burts`"),
        "{err}"
    );
    assert!(out.stdout.is_empty());

    std::fs::write(&file, "[nipxx]\nrate_burst = 0.5\n").unwrap();
    let out = run(dir.path(), &["--config", file.to_str().unwrap(), "config"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr)
            .contains("[nipxx] rate_burst must be a finite number of at least 1, not 0.5"),
        "{}",
        text(&out.stderr)
    );

    let out = run(dir.path(), &["config", "--allow", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(r#"--allow: "nope" is not a public key"#),
        "{}",
        text(&out.stderr)
    );

    // `serve` refuses the same way, before it creates its data directory.
    let data_dir = dir.path().join("never");
    let out = run(
        dir.path(),
        &[
            "serve",
            "--http-listen",
            "127.0.0.1:0",
            "--data-dir",
            data_dir.to_str().unwrap(),
            "--agent",
            "gpt",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(r#"--agent: unknown agent "gpt""#),
        "{}",
        text(&out.stderr)
    );
    assert!(!data_dir.exists());
}

/// Kills the daemon however the test ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn logs_to_a_file_carry_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agentwire.log");
    let data_dir = dir.path().join("data");
    let roost = dir.path().join("roost.sock");
    let child = agentwire(dir.path())
        .args([
            "serve",
            "--http-listen",
            "127.0.0.1:0",
            "--data-dir",
            data_dir.to_str().unwrap(),
            "--roost-socket",
            roost.to_str().unwrap(),
            // An external relay nobody listens on, beside the embedded relay on a free port.
            "--relay",
            "ws://127.0.0.1:1",
            "--relay-listen",
            "127.0.0.1:0",
        ])
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(File::create(&log).unwrap())
        .spawn()
        .expect("agentwire starts");
    let mut daemon = Killed(child);
    let mut ready = String::new();
    BufReader::new(daemon.0.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert!(ready.contains(r#""ready":true"#), "{ready:?}");
    let started = Instant::now();
    let logged = loop {
        let logged = std::fs::read_to_string(&log).unwrap();
        if logged.contains("serving") || started.elapsed() > LOG_WAIT {
            break logged;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(logged.contains("INFO"), "nothing was logged: {logged:?}");
    assert!(logged.contains("serving"), "{logged:?}");
    assert!(
        logged.contains("WARN") && logged.contains("relay not reachable yet"),
        "the unreachable relay was not warned about: {logged:?}"
    );
    assert!(
        !logged.contains("\x1b["),
        "colour codes in a log file: {logged:?}"
    );
}

#[test]
fn tasks_and_the_webhook_are_shown_without_the_webhooks_token_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agentwire.toml");
    std::fs::write(
        &file,
        format!(
            "[[rooms]]\nid = \"lab\"\n\n[tasks]\nwatch = [\"lab\"]\nallowed = [\"{BLOCKED}\"]\nhome = \"lab\"\nprogress_interval_secs = 30\n\n[notify]\nwebhook = \"https://push.example/hook?token=hunter2\"\n"
        ),
    )
    .unwrap();
    let out = run(dir.path(), &["--config", file.to_str().unwrap(), "config"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    assert!(
        !printed.contains("hunter2"),
        "the token was printed: {printed}"
    );
    let toml: toml::Value = toml::from_str(&printed).unwrap();
    assert_eq!(toml["tasks"]["watch"][0].as_str(), Some("lab"));
    assert_eq!(
        toml["tasks"]["progress_interval_secs"].as_integer(),
        Some(30)
    );
    assert_eq!(
        toml["tasks"]["question_window_secs"].as_integer(),
        Some(900)
    );
    assert_eq!(
        toml["notify"]["webhook"].as_str(),
        Some("https://push.example/<redacted>")
    );
    let saved = dir.path().join("in-force.toml");
    std::fs::write(&saved, &out.stdout).unwrap();
    let again = run(dir.path(), &["--config", saved.to_str().unwrap(), "config"]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert_eq!(text(&again.stdout), printed);

    std::fs::write(&file, "[notify]\nwebhook = \"ftp://push.example\"\n").unwrap();
    let out = run(dir.path(), &["--config", file.to_str().unwrap(), "config"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("[notify] webhook"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_cmd_agent_is_shown_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agentwire.toml");
    std::fs::write(
        &file,
        "[serve]\nagent = \"shout\"\n[agents.shout]\nkind = \"cmd\"\ncommand = [\"tr\", \"a-z\", \"A-Z\"]\nrequest_timeout_secs = 42\n",
    )
    .unwrap();
    let first = run(dir.path(), &["--config", file.to_str().unwrap(), "config"]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let toml: toml::Value = toml::from_str(&text(&first.stdout)).unwrap();
    let shout = &toml["agents"]["shout"];
    assert_eq!(shout["kind"].as_str(), Some("cmd"));
    assert_eq!(shout["command"][2].as_str(), Some("A-Z"));
    assert_eq!(shout["request_timeout_secs"].as_integer(), Some(42));
    let saved = dir.path().join("in-force.toml");
    std::fs::write(&saved, &first.stdout).unwrap();
    let again = run(dir.path(), &["--config", saved.to_str().unwrap(), "config"]);
    assert_eq!(text(&again.stdout), text(&first.stdout));
}

#[test]
fn an_openai_agent_is_shown_with_its_key_variable_not_its_key_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agentwire.toml");
    std::fs::write(
        &file,
        "[serve]\nagent = \"local\"\n[agents.local]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:11434/v1\"\nmodels = [\"llama3.2\"]\napi_key_env = \"MY_KEY\"\ntools = [\"calculator\"]\n[[agents.local.mcp]]\nname = \"files\"\ncommand = [\"python3\", \"files.py\"]\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args(["--config", file.to_str().unwrap(), "config"])
        .env("MY_KEY", "sk-never-shown")
        .output()
        .unwrap();
    let shown = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!shown.contains("sk-never-shown"), "{shown}");
    let toml: toml::Value = toml::from_str(&shown).unwrap();
    let local = &toml["agents"]["local"];
    assert_eq!(local["kind"].as_str(), Some("openai"));
    assert_eq!(local["api_key_env"].as_str(), Some("MY_KEY"));
    assert_eq!(local["max_context_tokens"].as_integer(), Some(8192));
    assert_eq!(local["mcp"][0]["command"][1].as_str(), Some("files.py"));
    let saved = dir.path().join("in-force.toml");
    std::fs::write(&saved, &out.stdout).unwrap();
    let again = agentwire(dir.path())
        .args(["--config", saved.to_str().unwrap(), "config"])
        .env("MY_KEY", "sk-never-shown")
        .output()
        .unwrap();
    assert_eq!(text(&again.stdout), shown);
}

#[test]
fn a_jetstream_journal_and_nats_credentials_are_shown_by_name_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agentwire.toml");
    std::fs::write(
        &file,
        "[nats]\nurl = \"nats://alice:pw-in-url@a:4222,nats://b:4222\"\nidentity = \"w\"\n\
         user = \"alice\"\npassword_env = \"NATS_PASSWORD\"\ntls_ca_file = \"/etc/ca.pem\"\n\
         [journal]\nkind = \"jetstream\"\nstream = \"FLEET\"\nreplicas = 3\ninstance = \"node-1\"\nlease_secs = 7\n",
    )
    .unwrap();
    let first = run(dir.path(), &["--config", file.to_str().unwrap(), "config"]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let shown = text(&first.stdout);
    assert!(
        !shown.contains("pw-in-url"),
        "a password in a URL is not shown"
    );
    let toml: toml::Value = toml::from_str(&shown).unwrap();
    assert_eq!(toml["nats"]["password_env"].as_str(), Some("NATS_PASSWORD"));
    assert_eq!(toml["nats"]["tls_ca_file"].as_str(), Some("/etc/ca.pem"));
    let journal = &toml["journal"];
    assert_eq!(journal["kind"].as_str(), Some("jetstream"));
    assert_eq!(journal["stream"].as_str(), Some("FLEET"));
    assert_eq!(journal["replicas"].as_integer(), Some(3));
    assert_eq!(journal["instance"].as_str(), Some("node-1"));
    assert_eq!(journal["lease_secs"].as_integer(), Some(7));
    assert!(
        journal["url"].as_str().unwrap().ends_with(",nats://b:4222"),
        "the worker's servers, as the journal's"
    );
    let saved = dir.path().join("in-force.toml");
    std::fs::write(&saved, &first.stdout).unwrap();
    let again = run(dir.path(), &["--config", saved.to_str().unwrap(), "config"]);
    assert_eq!(text(&again.stdout), shown);
}

#[test]
fn env_pass_env_and_user_are_shown_with_values_redacted_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agentwire.toml");
    std::fs::write(
        &file,
        "[serve]\nagent = \"shout\"\n[agents.shout]\nkind = \"cmd\"\ncommand = [\"tr\"]\n\
         env = { TOKEN = \"tok-never-shown\" }\npass_env = [\"HTTPS_PROXY\"]\n\
         [roost.profiles.p]\ncommand = [\"sh\"]\nuser = \"nobody\"\nenv = { KEY = \"key-never-shown\" }\npass_env = [\"LANG2\"]\n",
    )
    .unwrap();
    let first = run(dir.path(), &["--config", file.to_str().unwrap(), "config"]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let shown = text(&first.stdout);
    assert!(
        !shown.contains("never-shown"),
        "an env value is not shown: {shown}"
    );
    let toml: toml::Value = toml::from_str(&shown).unwrap();
    let shout = &toml["agents"]["shout"];
    assert_eq!(shout["pass_env"][0].as_str(), Some("HTTPS_PROXY"));
    assert!(shout["env"].get("TOKEN").is_some(), "{shown}");
    let p = &toml["roost"]["profiles"]["p"];
    assert_eq!(p["user"].as_str(), Some("nobody"));
    assert_eq!(p["pass_env"][0].as_str(), Some("LANG2"));
    assert!(p["env"].get("KEY").is_some(), "{shown}");
    let saved = dir.path().join("in-force.toml");
    std::fs::write(&saved, &first.stdout).unwrap();
    let again = run(dir.path(), &["--config", saved.to_str().unwrap(), "config"]);
    assert_eq!(text(&again.stdout), shown);
}
