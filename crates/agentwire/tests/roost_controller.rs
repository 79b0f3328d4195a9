//! The roost supervisor as its controllers reach it: the ready line means the socket serves (after a
//! SIGTERM and a restart with a model concierge on and hosted jobs, a controller that connects on the ready
//! line has its first op answered, several restarts in a row, and so does one that speaks only after the
//! time a connection has to identify itself); `jobs --roost-socket S` asks the daemon
//! behind S for its profiles and a job's output, whatever the data dir; `concierge on` with no profile
//! names `--profile`; `jobs ls` shows a peer item an agent echoed as who sent what, not its envelope; and
//! the hub page may not turn the concierge's `act` on.

mod common;

use agentwire_roost::client::Controller;
use agentwire_roost::daemon::IDENTIFY_TIMEOUT;
use agentwire_testkit::fake_openai::{text_chunks, FakeOpenAi, Scripted};
use common::Daemon;
use serde_json::json;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Restarts in a row: the outside probe failed 3 runs of 4.
const RESTARTS: usize = 4;

fn answer(fake: &FakeOpenAi, text: &str) {
    fake.push(Scripted::Stream {
        chunks: text_chunks(&[text], (5, 2)),
        gap: Duration::from_millis(2),
    });
}

/// SIGTERM, and the clean exit after the drain.
fn terminate(d: &mut Daemon) {
    let pid = d.child.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let status = d.child.wait().unwrap();
    assert!(status.success(), "a clean exit: {status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_that_connects_on_the_ready_line_is_served_after_a_restart() {
    let fake = FakeOpenAi::start();
    for _ in 0..64 {
        answer(&fake, "Noted.");
    }
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[agents.butler]\nkind = \"openai\"\nbase_url = \"{}\"\nmodels = [\"m\"]\n\
         tools = [\"roost\", \"concierge\"]\nexpose = [\"roost\"]\n\
         [agents.helper]\nkind = \"demo\"\nexpose = [\"roost\"]\n",
        fake.base_url,
    );
    let path = dir.path().join("agentwire.toml");
    std::fs::write(&path, config).unwrap();
    let data = dir.path().join("data");
    let args = ["--config", path.to_str().unwrap()];
    let mut d = Daemon::start(&data, &args);
    let socket = d.ready["roost_socket"].as_str().unwrap().to_string();
    let mut c = Controller::connect(Path::new(&socket)).await.unwrap();
    for n in 0..3 {
        c.call(
            "dispatch",
            json!({"profile": "helper", "task": format!("hello {n}"), "name": format!("h{n}")}),
        )
        .await
        .unwrap();
    }
    let on = c
        .call(
            "concierge",
            json!({"action": "on", "launch": {"profile": "butler"}}),
        )
        .await
        .unwrap();
    assert_eq!(on["on"], true, "{on}");
    drop(c);
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut early = None;
    for round in 0..RESTARTS {
        terminate(&mut d);
        d = Daemon::start(&data, &args);
        // At once on the ready line: no wait, no retry. One connection speaks at once; another, as a
        // script that waits for the fleet to come back would, only later (below).
        early = Some(Controller::connect(Path::new(&socket)).await.unwrap());
        let started = Instant::now();
        let mut c = Controller::connect(Path::new(&socket))
            .await
            .unwrap_or_else(|e| panic!("restart {round}: connect: {e}"));
        let rows = c
            .call("rows", json!({}))
            .await
            .unwrap_or_else(|e| panic!("restart {round}: the first op: {e}"));
        assert_eq!(
            rows["rows"].as_array().map(Vec::len),
            Some(4),
            "restart {round}: {rows}"
        );
        let status = c
            .call("concierge", json!({"action": "status"}))
            .await
            .unwrap_or_else(|e| panic!("restart {round}: the second op: {e}"));
        assert_eq!(status["on"], true, "restart {round}: {status}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    // Silent past the time a connection has to say who it is: the owner's controller keeps it, and its
    // first op is answered (it was closed, a broken pipe on that op, before).
    tokio::time::sleep(IDENTIFY_TIMEOUT + Duration::from_secs(1)).await;
    let mut early = early.unwrap();
    let rows = early
        .call("rows", json!({}))
        .await
        .unwrap_or_else(|e| panic!("the first op of a connection made on the ready line: {e}"));
    assert_eq!(rows["rows"].as_array().map(Vec::len), Some(4), "{rows}");
    terminate(&mut d);
}

/// `agentwire --data-dir DATA ARGS...` with no runtime dir to find a daemon by: only what ARGS name.
fn agentwire(data: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("AGENTWIRE_CONFIG")
        .output()
        .expect("agentwire runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `args` until its stdout holds `want` (at most 20 s); the last stdout.
fn until_printed(data: &Path, args: &[&str], want: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = agentwire(data, args);
        let printed = text(&out.stdout);
        if printed.contains(want) {
            return printed;
        }
        assert!(
            Instant::now() < deadline,
            "{args:?} never printed {want:?}: {printed}{}",
            text(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_that_knows_only_the_socket_is_answered_by_the_daemon_behind_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[agents.helper]\nkind = \"demo\"\nexpose = [\"roost\"]\n\
                  [roost.profiles.talker]\ncommand = [\"sh\", \"-c\", \"echo talking to you; exec sleep 30\"]\n";
    let path = dir.path().join("agentwire.toml");
    std::fs::write(&path, config).unwrap();
    let d = Daemon::start(
        &dir.path().join("data"),
        &["--config", path.to_str().unwrap()],
    );
    let socket = d.ready["roost_socket"].as_str().unwrap().to_string();
    // Another data dir, where no daemon runs: only the socket leads to this one.
    let elsewhere = tempfile::tempdir().unwrap();
    let other = elsewhere.path();

    // Its profiles, from the daemon behind the socket.
    let out = agentwire(other, &["jobs", "--roost-socket", &socket, "profiles"]);
    let listed = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("talker") && l.contains("terminal")),
        "{listed}"
    );
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("helper") && l.contains("engine agent")),
        "{listed}"
    );

    // A job's output, from that daemon's jobs' directory.
    let out = agentwire(
        other,
        &[
            "jobs",
            "--roost-socket",
            &socket,
            "dispatch",
            "talker",
            "--name",
            "talk",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let log = until_printed(
        other,
        &["jobs", "--roost-socket", &socket, "log", "talk"],
        "talking to you",
    );
    assert!(log.contains("talking to you"), "{log}");

    // `concierge on` with no profile (and none configured) says how to name one, in the CLI's words.
    let out = agentwire(other, &["concierge", "--roost-socket", &socket, "on"]);
    assert_eq!(out.status.code(), Some(1));
    let said = text(&out.stderr);
    assert!(
        said.contains("--profile") && !said.contains("give launch"),
        "{said}"
    );

    // A message to the demo agent's job is its next turn; it echoes what it got. The row shows who sent
    // what, not the envelope meant for the agent.
    let out = agentwire(
        other,
        &[
            "jobs",
            "--roost-socket",
            &socket,
            "dispatch",
            "helper",
            "hello",
            "--name",
            "echo",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    until_printed(
        other,
        &["jobs", "--roost-socket", &socket, "ls"],
        "You said: hello",
    );
    let out = agentwire(
        other,
        &[
            "jobs",
            "--roost-socket",
            &socket,
            "send",
            "echo",
            "the build is green",
            "--as",
            "ci",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let listed = until_printed(
        other,
        &["jobs", "--roost-socket", &socket, "ls"],
        "You said: [message from ci] the build is green",
    );
    assert!(!listed.contains("roost-item"), "{listed}");
    let rows: serde_json::Value = serde_json::from_slice(
        &agentwire(other, &["jobs", "--roost-socket", &socket, "--json", "ls"]).stdout,
    )
    .unwrap();
    let echo = rows["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "echo")
        .unwrap();
    assert_eq!(
        echo["summary"],
        "You said: [message from ci] the build is green"
    );
    // The hub's runs (the turn API) show that turn the same way: its prompt and its answer as people read
    // them, the envelope only in what the agent got and gave.
    let api = common::api::Api::of(&d);
    let turns = api.get("/api/v1/turns").await;
    let turn = turns["turns"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["prompt"] == "[message from ci] the build is green")
        .unwrap_or_else(|| panic!("no run shows the message as people read it: {turns}"))
        .clone();
    for t in turns["turns"].as_array().unwrap() {
        assert!(!t["prompt"].as_str().unwrap().contains("roost-item"), "{t}");
    }
    let one = api
        .get(&format!("/api/v1/turns/{}", turn["id"].as_str().unwrap()))
        .await;
    assert_eq!(
        one["outcome"]["text_shown"], "You said: [message from ci] the build is green",
        "{one}"
    );
    assert!(one["outcome"]["text"]
        .as_str()
        .unwrap()
        .contains("<roost-item"));

    let mut c = Controller::connect(Path::new(&socket)).await.unwrap();
    for r in c.call("rows", json!({})).await.unwrap()["rows"]
        .as_array()
        .unwrap()
    {
        c.call("stop", json!({ "id": r["id"] })).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_may_not_let_the_concierge_act() {
    let dir = tempfile::tempdir().unwrap();
    let config =
        "[agents.helper]\nkind = \"demo\"\nexpose = [\"roost\"]\n[roost]\nconcierge = \"helper\"\n";
    let path = dir.path().join("agentwire.toml");
    std::fs::write(&path, config).unwrap();
    let d = Daemon::start(
        &dir.path().join("data"),
        &["--config", path.to_str().unwrap()],
    );
    let socket = d.ready["roost_socket"].as_str().unwrap().to_string();
    let base = d.ready["http"].as_str().unwrap().to_string();
    let token = d.ready["http_token"].as_str().unwrap().to_string();
    let http = agentwire_agents::openai::http_client(Duration::from_secs(10)).unwrap();
    let page = |args: serde_json::Value| {
        http.post(format!("{base}/api/v1/roost/concierge"))
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .body(args.to_string())
            .send()
    };
    // The page turns the concierge on as configured.
    let on = page(json!({"action": "on"})).await.unwrap();
    assert_eq!(on.status().as_u16(), 200);
    // Letting it act would let the page's asks dispatch: refused, and the policy is as it was.
    for act in [json!(true), json!("on")] {
        let refused = page(json!({"action": "act", "act": act})).await.unwrap();
        assert_eq!(refused.status().as_u16(), 403, "act {act}");
        let body: serde_json::Value =
            serde_json::from_slice(&refused.bytes().await.unwrap()).unwrap();
        assert!(
            body["error"].as_str().unwrap().contains("--act on"),
            "{body}"
        );
    }
    let mut c = Controller::connect(Path::new(&socket)).await.unwrap();
    let status = c
        .call("concierge", json!({"action": "status"}))
        .await
        .unwrap();
    assert_eq!(status["policy"]["act"], false, "{status}");
    // The CLI lets it act; the page may take that back.
    let out = agentwire(
        &dir.path().join("data"),
        &[
            "concierge",
            "--roost-socket",
            &socket,
            "policy",
            "--act",
            "on",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let off = page(json!({"action": "act", "act": false})).await.unwrap();
    assert_eq!(off.status().as_u16(), 200);
    let status = c
        .call("concierge", json!({"action": "status"}))
        .await
        .unwrap();
    assert_eq!(status["policy"]["act"], false, "{status}");
    c.call("concierge", json!({"action": "off"})).await.unwrap();
}
