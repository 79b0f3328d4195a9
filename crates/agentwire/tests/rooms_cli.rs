//! Rooms, task cards and question cards from the command line, against the real daemon and its embedded
//! relay: `whoami`, `room list | create | add-member` (and a non-admin refused), `task` followed to its
//! result or error with its question answered at the terminal, a task nobody takes told so, and `cards`
//! and `answer` for a question left open.

mod common;

use common::Daemon;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn agentwire(data_dir: &Path, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("agentwire runs");
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `whoami`'s line that starts with `label`.
fn whoami(data_dir: &Path, label: &str) -> String {
    let out = agentwire(data_dir, &["whoami"], "");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix(label).map(|v| v.trim().to_string()))
        .unwrap_or_else(|| panic!("no {label} in whoami"))
}

#[test]
fn rooms_tasks_and_question_cards_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // The client key first (whoami makes it), then a config that lets it in.
    let hex = whoami(&data, "hex");
    let npub = whoami(&data, "npub");
    assert!(npub.starts_with("npub1") && hex.len() == 64);
    let cfg = dir.path().join("agentwire.toml");
    std::fs::write(
        &cfg,
        format!(
            "[relay]\nadmins = [\"{hex}\"]\n[[rooms]]\nid = \"lab\"\nclosed = true\nmembers = [\"{hex}\"]\n[tasks]\nwatch = [\"lab\"]\nallowed = [\"{hex}\"]\n"
        ),
    )
    .unwrap();
    let d = Daemon::start(&data, &["--config", cfg.to_str().unwrap()]);

    // Rooms: a relay admin creates one and adds a member; the table lists both rooms.
    let out = agentwire(
        &data,
        &["room", "create", "ops", "--name", "Operations", "--closed"],
        "",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let other = tempfile::tempdir().unwrap();
    let stranger = whoami(other.path(), "npub");
    let out = agentwire(&data, &["room", "add-member", "ops", &stranger], "");
    assert_eq!(text(&out.stdout).trim(), "added 1 member to room ops");
    let listed = text(&agentwire(&data, &["room", "list"], "").stdout);
    assert!(listed.starts_with("ROOM"), "{listed}");
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("ops") && l.contains("Operations") && l.contains("closed")),
        "{listed}"
    );
    // Someone who is no admin is refused, with the relay's reason.
    let out = agentwire(
        other.path(),
        &["room", "create", "theirs", "--relay", &d.relay],
        "",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("only the relay's admins may create rooms"),
        "{}",
        text(&out.stderr)
    );

    // A task followed to its result: accepted, the answer on stdout.
    let out = agentwire(&data, &["task", "--room", "lab", "calc", "6*7"], "");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "42");
    let err = text(&out.stderr);
    assert!(err.contains("[accepted]"), "{err}");
    // Progress goes out when something changed, then at most once every 15 s (the spec's pace), so a quick
    // task has one line or none; what there is names the tool, not its JSON.
    assert!(!err.contains('{'), "no raw JSON in the progress: {err}");

    // Its question answered at the terminal: a wrong answer is asked again, then the number is taken.
    let out = agentwire(
        &data,
        &[
            "task", "--room", "lab", "ask", "colour?", "|", "red", "|", "green",
        ],
        "purple\n2\n",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "green");
    let err = text(&out.stderr);
    assert!(
        err.contains("  1. red (red)") && err.contains("\"purple\" is not an option"),
        "{err}"
    );

    // An error ends with exit 2.
    let out = agentwire(&data, &["task", "--room", "lab", "fail", "no", "paper"], "");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("error: "),
        "{}",
        text(&out.stderr)
    );

    // A room the agent does not watch: told so, with the reason.
    let started = Instant::now();
    let out = agentwire(&data, &["task", "--room", "ops", "hello"], "");
    assert_eq!(out.status.code(), Some(4));
    assert!(
        text(&out.stderr).contains("does not watch room ops ([tasks] watch: lab)"),
        "{}",
        text(&out.stderr)
    );
    assert!(started.elapsed() < Duration::from_secs(20));

    // A question nobody answers at the terminal stays open: `cards` lists it and its task; `answer` settles it.
    let waiting = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .arg("--data-dir")
        .arg(&data)
        .args([
            "task", "--room", "lab", "ask", "pick", "one", "|", "red", "|", "green",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let card = loop {
        let listed = text(&agentwire(&data, &["cards", "--room", "lab"], "").stdout);
        // The question's line (the task's line says "ask pick one" too).
        let question = |l: &&str| l.contains("pick one") && !l.contains("ask pick one");
        if let Some(line) = listed.lines().find(question) {
            assert!(listed.starts_with("QUESTION"), "{listed}");
            assert!(line.contains("red | green"), "{listed}");
            assert!(
                listed
                    .lines()
                    .any(|l| l.contains("running") && l.contains("ask pick one")),
                "{listed}"
            );
            break line.split_whitespace().next().unwrap().to_string();
        }
        assert!(Instant::now() < deadline, "no open card listed:\n{listed}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let out = agentwire(&data, &["answer", &card, "purple"], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("1 red (red), 2 green (green)"),
        "{}",
        text(&out.stderr)
    );
    let out = agentwire(&data, &["answer", &card, "red"], "");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let done = waiting.wait_with_output().unwrap();
    assert_eq!(done.status.code(), Some(0));
    assert_eq!(text(&done.stdout).trim(), "red");
    let listed = text(&agentwire(&data, &["cards", "--room", "lab"], "").stdout);
    assert!(
        listed.contains("no open questions in lab") && listed.contains("no running tasks in lab"),
        "{listed}"
    );
}
