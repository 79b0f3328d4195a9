//! `agentwire serve`'s roost supervisor driven with `agentwire jobs`, as a user does.

mod common;

use common::Daemon;
use std::process::{Command, Output};

fn jobs(socket: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args(["jobs", "--roost-socket", socket])
        .args(args)
        .output()
        .expect("agentwire runs")
}

fn json(out: &Output) -> serde_json::Value {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
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
