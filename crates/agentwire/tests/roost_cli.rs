//! `agentwire serve`'s roost supervisor driven with `agentwire jobs`, as a user does: `--json` for a
//! program, and for a person tables, a blocked job's question, replies checked against it, names for ids,
//! `follow`, `profiles` and `log`.

mod common;

use common::{json_of as json, roost_jobs as jobs, Daemon};
use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `agentwire --data-dir DIR jobs ARGS...`, as a person types it: the daemon found through the data dir.
fn people(data_dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .arg("--data-dir")
        .arg(data_dir)
        .arg("jobs")
        .args(args)
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .expect("agentwire runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn dispatch_ls_reply_events_stop_and_rm() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agentwire.toml");
    std::fs::write(
        &cfg,
        "[roost.profiles.sleeper]\ncommand = [\"sh\", \"-c\", \"echo \\\"working on $1\\\"; exec sleep 30\", \"sh\"]\ntask = \"argv\"\n",
    )
    .unwrap();
    let d = Daemon::start(dir.path(), &["--config", cfg.to_str().unwrap()]);
    let socket = d.ready["roost_socket"].as_str().unwrap().to_string();

    let job = json(&jobs(
        &socket,
        &[
            "dispatch",
            "sleeper",
            "the chores",
            "--name",
            "chores",
            "--request-id",
            "d-1",
        ],
    ));
    let id = job["id"].as_str().unwrap().to_string();
    assert_eq!(job["name"], "chores");
    let again = json(&jobs(
        &socket,
        &["dispatch", "sleeper", "other", "--request-id", "d-1"],
    ));
    assert_eq!(again["id"], id.as_str(), "taken once");

    let mut listed = String::new();
    for _ in 0..60 {
        let out = jobs(&socket, &["ls"]);
        listed = String::from_utf8_lossy(&out.stdout).into_owned();
        if listed.contains("working on the chores") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        listed.contains(&id) && listed.contains("working on the chores"),
        "{listed}"
    );

    let saved = json(&jobs(
        &socket,
        &["reply", &id, "tidy the desk", "--request-id", "r-1"],
    ));
    assert_eq!(saved["saved"], true);
    assert_eq!(saved["seq"], 1);
    let dup = json(&jobs(
        &socket,
        &["reply", &id, "tidy the desk", "--request-id", "r-1"],
    ));
    assert_eq!(dup["duplicate"], true);
    let refused = jobs(&socket, &["reply", &id, "/model big"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("unsupported"));

    let events = json(&jobs(&socket, &["events", "--id", &id]));
    let whats: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["what"].as_str().unwrap())
        .collect();
    assert_eq!(&whats[..2], &["start", "reply"]);

    json(&jobs(&socket, &["stop", &id]));
    let rows = json(&jobs(&socket, &["ls", "--json"]));
    assert_eq!(rows["rows"][0]["state"], "stopped");
    json(&jobs(&socket, &["rm", &id]));
    assert_eq!(
        json(&jobs(&socket, &["ls", "--json"]))["rows"],
        serde_json::json!([])
    );
    let missing = jobs(&socket, &["stop", &id]);
    assert!(String::from_utf8_lossy(&missing.stderr).contains("not_found"));
}

#[test]
fn nothing_acknowledged_is_lost_when_the_daemon_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agentwire.toml");
    std::fs::write(
        &cfg,
        "[roost.profiles.sleeper]\ncommand = [\"sh\", \"-c\", \"exec sleep 30\"]\ntask = \"type\"\n",
    )
    .unwrap();
    let socket = dir.path().join("roost.sock");
    let args = [
        "--config",
        cfg.to_str().unwrap(),
        "--roost-socket",
        socket.to_str().unwrap(),
    ];
    let mut d = Daemon::start(dir.path(), &args);
    let s = socket.to_str().unwrap();
    let job = json(&jobs(
        s,
        &["dispatch", "sleeper", "the task", "--request-id", "d-9"],
    ));
    let id = job["id"].as_str().unwrap().to_string();
    assert_eq!(
        json(&jobs(s, &["reply", &id, "two", "--request-id", "r-2"]))["seq"],
        2
    );
    d.kill();
    let _d = Daemon::start(dir.path(), &args);
    let rows = json(&jobs(s, &["ls", "--json"]));
    let row = &rows["rows"][0];
    assert_eq!(row["id"], id.as_str());
    assert_eq!(
        row["pending"], 2,
        "the task and the reply still wait for the agent"
    );
    assert_ne!(
        row["state"], "exited",
        "its process outlived the daemon and was re-adopted"
    );
    assert_eq!(
        json(&jobs(s, &["reply", &id, "two", "--request-id", "r-2"]))["duplicate"],
        true
    );
    assert_eq!(json(&jobs(s, &["reply", &id, "three"]))["seq"], 3);
    assert_eq!(
        json(&jobs(
            s,
            &["dispatch", "sleeper", "again", "--request-id", "d-9"]
        ))["id"],
        id.as_str()
    );
    json(&jobs(s, &["rm", &id]));
}

/// A roost agent on the Python client (sdk/python) that asks which branch to take, says what it chose on
/// its output, and is done.
const ASKER: &str = r#"
import sys, threading
sys.path.insert(0, sys.argv[1])
from roost_agent import RoostAgent
done = threading.Event()
def on_reply(r):
    print("chose", r.text, flush=True)
    agent.report("done", summary="took " + r.text)
    done.set()
agent = RoostAgent.from_env("asker", version="1", on_reply=on_reply)
print("starting", flush=True)
agent.report("blocked", summary="at the fork", question="Which branch?", choices=["main", "dev"],
             waiting_for="question")
done.wait(60)
agent.close()
"#;

#[test]
fn a_person_reads_tables_answers_the_question_by_name_and_follows_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("asker.py");
    std::fs::write(&agent, ASKER).unwrap();
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sdk/python");
    let cfg = dir.path().join("agentwire.toml");
    std::fs::write(
        &cfg,
        format!(
            "[roost.profiles.asker]\ncommand = [\"python3\", \"{}\", \"{}\"]\ntask = \"argv\"\nprotocol = true\n",
            agent.display(),
            sdk.display()
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let _d = Daemon::start(&data, &["--config", cfg.to_str().unwrap()]);

    let out = people(&data, &["profiles"]);
    let listed = text(&out.stdout);
    assert!(listed.starts_with("PROFILE"), "{listed}");
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("asker") && l.contains("roost agent") && l.contains("python3")),
        "{listed}"
    );
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("demo") && l.contains("engine agent")),
        "{listed}"
    );

    let out = people(&data, &["dispatch", "asker", "--name", "fork"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("started fork ("),
        "{}",
        text(&out.stdout)
    );

    // The table: a header, the row, and under it what the job asks.
    let deadline = Instant::now() + Duration::from_secs(20);
    let table = loop {
        let t = text(&people(&data, &["ls"]).stdout);
        if t.contains("asks: Which branch?") {
            break t;
        }
        assert!(Instant::now() < deadline, "the job never asked:\n{t}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("STATE"),
        "{table}"
    );
    assert!(
        lines[1].starts_with("fork")
            && lines[1].contains("blocked")
            && lines[1].contains("at the fork"),
        "{table}"
    );
    assert_eq!(
        &lines[2..5],
        ["    asks: Which branch?", "      1. main", "      2. dev"]
    );

    let mut follow = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .arg("--data-dir")
        .arg(&data)
        .args(["jobs", "follow", "fork"])
        .env_remove("XDG_RUNTIME_DIR")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();

    // A reply that answers nothing the job asks is refused, saying what fits.
    let out = people(&data, &["reply", "fork", "maybe"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("Which branch?") && err.contains("main | dev"),
        "{err}"
    );
    // By its number, by the job's name.
    let out = people(&data, &["reply", "fork", "2"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "fork: reply 1 saved");

    let deadline = Instant::now() + Duration::from_secs(20);
    let code = loop {
        if let Some(status) = follow.try_wait().unwrap() {
            break status.code();
        }
        assert!(Instant::now() < deadline, "follow did not end with the job");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut followed = String::new();
    follow
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut followed)
        .unwrap();
    assert_eq!(code, Some(0), "{followed}");
    for said in [
        "[blocked] at the fork",
        "asks: Which branch?",
        "  2. dev",
        "chose dev",
        "[done] took dev",
    ] {
        assert!(followed.contains(said), "{said:?} in:\n{followed}");
    }

    let log = text(&people(&data, &["log", "fork"]).stdout);
    assert!(
        log.contains("starting") && log.contains("chose dev"),
        "{log}"
    );
    let events = text(&people(&data, &["events", "--job", "fork"]).stdout);
    assert!(
        events.starts_with("SEQ") && events.contains(" fork "),
        "{events}"
    );
    let out = people(&data, &["stop", "nobody"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no job has the id or name \"nobody\""));
    let rows: serde_json::Value =
        serde_json::from_slice(&people(&data, &["ls", "--json"]).stdout).unwrap();
    assert_eq!(rows["rows"][0]["name"], "fork");
}

/// A person arranges the jobs: `pin`, `rename` and `reorder` by name, and `ls` shows them so (pinned first,
/// marked `*`, then in the order given).
#[test]
fn pin_rename_and_reorder_arrange_what_ls_shows() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agentwire.toml");
    std::fs::write(
        &cfg,
        "[roost.profiles.sleeper]\ncommand = [\"sh\", \"-c\", \"exec sleep 30\"]\n",
    )
    .unwrap();
    let d = Daemon::start(dir.path(), &["--config", cfg.to_str().unwrap()]);
    for name in ["alpha", "beta", "gamma"] {
        let out = people(&d.data_dir, &["dispatch", "sleeper", "--name", name]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let said = |args: &[&str]| {
        let out = people(&d.data_dir, args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
        text(&out.stdout)
    };
    assert_eq!(
        said(&["rename", "beta", "the second"]),
        "beta: named the second\n"
    );
    said(&["reorder", "gamma", "the second", "alpha"]);
    said(&["pin", "alpha"]);
    let names: Vec<String> = said(&["ls"])
        .lines()
        .skip(1)
        .map(|l| l.split("  ").next().unwrap_or_default().to_string())
        .collect();
    assert_eq!(names, ["* alpha", "gamma", "the second"]);
    said(&["pin", "alpha", "--off"]);
    let first = said(&["ls"]).lines().nth(1).unwrap_or_default().to_string();
    assert!(first.starts_with("gamma "), "{first}");
    let out = people(&d.data_dir, &["rename", "gamma", "concierge"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("concierge's"),
        "{}",
        text(&out.stderr)
    );
    let out = people(&d.data_dir, &["reorder", "nobody"]);
    assert_eq!(out.status.code(), Some(1));
}

/// The fleet for a person: the board (add, assign, drop) as the user, `peers`, `send` as a foreground
/// peer, and `events --follow` until Ctrl-C.
#[test]
fn the_board_peers_send_and_a_followed_feed() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let said = |args: &[&str]| {
        let out = people(&d.data_dir, args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
        text(&out.stdout)
    };
    said(&["dispatch", "demo", "calc 1+1", "--name", "helper"]);
    assert_eq!(
        said(&["task", "add", "write the docs"]),
        "#1 added: write the docs\n"
    );
    said(&[
        "task",
        "add",
        "review them",
        "--after",
        "1",
        "--detail",
        "all of it",
    ]);
    let board = said(&["board"]);
    assert!(board.starts_with("ID"), "{board}");
    assert!(
        board
            .lines()
            .any(|l| l.starts_with("#2") && l.contains("open") && l.contains("#1")),
        "{board}"
    );
    let sent = said(&["task", "assign", "1", "helper"]);
    assert!(sent.starts_with("#1 sent to helper ("), "{sent}");
    let listed = json(&people(&d.data_dir, &["--json", "board"]));
    assert_eq!(listed["tasks"][0]["assigned"]["name"], "helper");
    assert_eq!(said(&["task", "drop", "2"]), "#2 dropped: review them\n");
    let refused = people(&d.data_dir, &["task", "drop", "2"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains("bad_request"),
        "{}",
        text(&refused.stderr)
    );
    let sent = said(&["send", "helper", "hello from me", "--as", "me"]);
    assert!(sent.starts_with("helper: "), "{sent}");
    let peers = said(&["peers"]);
    assert!(
        peers.starts_with("NAME") && peers.contains("PARENT") && peers.contains("helper"),
        "{peers}"
    );

    // The feed, followed, until Ctrl-C.
    let mut follow = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .arg("--data-dir")
        .arg(&d.data_dir)
        .args(["jobs", "events", "--follow"])
        .env_remove("XDG_RUNTIME_DIR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    said(&["task", "add", "while following"]);
    std::thread::sleep(Duration::from_millis(1500));
    assert!(Command::new("kill")
        .args(["-INT", &follow.id().to_string()])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let code = loop {
        if let Some(s) = follow.try_wait().unwrap() {
            break s.code();
        }
        assert!(
            Instant::now() < deadline,
            "events --follow did not stop on Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(code, Some(130));
    let mut out = String::new();
    follow
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(out.contains("#1 write the docs"), "{out}");
    assert!(
        out.contains("#3 while following"),
        "an event after the start comes too: {out}"
    );
    assert!(out.contains("message"), "{out}");
}

/// `agentwire concierge ...` and `agentwire jobs schedules | schedule ...` as a person types them.
#[test]
fn the_concierge_and_schedules_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agentwire.toml");
    std::fs::write(
        &cfg,
        "[roost]\nconcierge = \"quiet\"\n[roost.profiles.quiet]\ncommand = [\"sh\", \"-c\", \"exec sleep 30\"]\ntask = \"argv\"\n",
    )
    .unwrap();
    let d = Daemon::start(dir.path(), &["--config", cfg.to_str().unwrap()]);
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_agentwire"))
            .arg("--data-dir")
            .arg(&d.data_dir)
            .args(args)
            .env_remove("XDG_RUNTIME_DIR")
            .output()
            .expect("agentwire runs")
    };
    let said = |args: &[&str]| {
        let out = run(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
        text(&out.stdout)
    };
    assert!(said(&["concierge", "status"]).starts_with("concierge off\npolicy: answer never;"));
    let on = said(&["concierge", "on"]);
    assert!(on.starts_with("concierge on, job "), "{on}");
    let rows = json(&people(&d.data_dir, &["--json", "ls"]));
    assert_eq!(rows["rows"][0]["role"], "concierge");
    assert_eq!(
        said(&["concierge", "policy", "--answer", "routine", "--act", "on"]),
        "policy: answer routine; may stop, respawn and dispatch jobs\n"
    );
    let kept = said(&[
        "concierge",
        "orders",
        "add",
        "tell me what failed",
        "--when",
        "daily 08:00",
    ]);
    assert!(
        kept.starts_with("kept #1 (user) [daily 08:00, next 20"),
        "{kept}"
    );
    assert!(kept.ends_with("]: tell me what failed\n"), "{kept}");
    let bad = run(&["concierge", "orders", "add", "x", "--when", "hourly"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        text(&bad.stderr).contains("\"hourly\""),
        "{}",
        text(&bad.stderr)
    );
    assert!(said(&["concierge", "orders"]).starts_with("#1 (user) [daily 08:00"));
    assert_eq!(said(&["concierge", "orders", "rm", "1"]), "dropped\n");
    assert!(
        said(&["concierge", "ask", "anything new?", "--wait", "0"]).starts_with("asked (reply ")
    );
    // This concierge never speaks: `ask` says so, with its own exit code.
    let silent = run(&["concierge", "ask", "hello?", "--wait", "1"]);
    assert_eq!(silent.status.code(), Some(4), "{}", text(&silent.stderr));
    assert!(text(&silent.stderr).contains("said nothing within 1 s"));
    let undo = run(&["concierge", "undo"]);
    assert_eq!(undo.status.code(), Some(1));
    assert!(
        text(&undo.stderr).contains("no answer to undo"),
        "{}",
        text(&undo.stderr)
    );

    let added = said(&[
        "jobs",
        "schedule",
        "add",
        "quiet",
        "nightly checks",
        "--when",
        "every 1h",
        "--name",
        "nightly",
    ]);
    assert!(
        added.starts_with("schedule #1 nightly (every 1h): next run 20"),
        "{added}"
    );
    let table = said(&["jobs", "schedules"]);
    assert!(table.starts_with("ID"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("#1") && l.contains("every 1h") && l.contains("nightly checks")),
        "{table}"
    );
    assert_eq!(
        said(&["jobs", "schedule", "pause", "1"]),
        "schedule #1 paused\n"
    );
    assert!(said(&["jobs", "schedules"]).contains("paused"));
    assert!(said(&["jobs", "schedule", "pause", "1", "--off"])
        .starts_with("schedule #1 resumed: next run 20"));
    assert_eq!(
        said(&["jobs", "schedule", "rm", "1"]),
        "schedule #1 removed\n"
    );
    let gone = run(&["jobs", "schedule", "rm", "1"]);
    assert!(
        text(&gone.stderr).contains("not_found"),
        "{}",
        text(&gone.stderr)
    );
    assert!(said(&["concierge", "off"]).starts_with("concierge off, job "));
}

/// What the concierge and the schedules answered ok for is durable: `kill -9` loses none of it.
#[test]
fn the_concierge_and_schedules_survive_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agentwire.toml");
    std::fs::write(
        &cfg,
        "[roost]\nconcierge = \"quiet\"\n[roost.profiles.quiet]\ncommand = [\"sh\", \"-c\", \"exec sleep 30\"]\ntask = \"argv\"\n",
    )
    .unwrap();
    let socket = dir.path().join("roost.sock");
    let args = [
        "--config",
        cfg.to_str().unwrap(),
        "--roost-socket",
        socket.to_str().unwrap(),
    ];
    let mut d = Daemon::start(dir.path(), &args);
    let run = |a: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_agentwire"))
            .arg("--data-dir")
            .arg(dir.path())
            .args(a)
            .arg("--roost-socket")
            .arg(&socket)
            .arg("--json")
            .output()
            .expect("agentwire runs");
        assert_eq!(out.status.code(), Some(0), "{a:?}: {}", text(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("JSON")
    };
    let on = run(&["concierge", "on"]);
    run(&["concierge", "policy", "--answer", "always", "--act", "on"]);
    run(&[
        "concierge",
        "orders",
        "add",
        "sum up",
        "--when",
        "daily 18:00",
    ]);
    run(&[
        "jobs", "schedule", "add", "quiet", "nightly", "--when", "every 1d",
    ]);
    run(&["jobs", "schedule", "pause", "1"]);
    d.kill();
    let _d = Daemon::start(dir.path(), &args);
    let status = run(&["concierge", "status"]);
    assert_eq!(status["id"], on["id"]);
    assert_eq!(status["on"], true);
    assert_eq!(
        status["policy"],
        serde_json::json!({"answer": "always", "act": true})
    );
    assert_eq!(status["orders"], 1);
    let orders = run(&["concierge", "orders"]);
    assert_eq!(orders["orders"][0]["text"], "sum up");
    let schedules = run(&["jobs", "schedules"]);
    assert_eq!(schedules["schedules"][0]["when"], "every 1d");
    assert_eq!(schedules["schedules"][0]["paused"], true);
}
