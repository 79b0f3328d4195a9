//! Start-up checks that catch an operator's mistakes before anything runs, over the real binary: an
//! `[agents.<name>]` entry nothing serves is a warning naming it (and a broken one an error) in `config` and
//! `serve` alike; `config` refuses what `serve` refuses (an unset `api_key_env` variable); a `base_url`
//! ending in `/chat/completions` is refused with the fix; a model server that does not answer is a warning
//! naming it; a second `serve` on a data dir in use names the first's pid before opening any port; a failed
//! start leaves no data dir it made; client flags are checked before anything is sent.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary with an environment of our own: no config, data dir or log filter inherited.
fn agentwire(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_agentwire"));
    c.env_remove("AGENTWIRE_CONFIG")
        .env_remove("AGENTWIRE_DATA_DIR")
        .env_remove("RUST_LOG")
        .env("XDG_RUNTIME_DIR", dir);
    c
}

fn run(dir: &Path, args: &[&str]) -> Output {
    agentwire(dir).args(args).output().expect("agentwire runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A loopback port nothing listens on (bound, then let go).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// The daemon's stderr lines, read on a thread of their own so a wait can time out when it falls silent.
fn lines_of(stderr: std::process::ChildStderr) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// Waits up to 10 s for a line with every one of `words`.
fn wait_for_line(lines: &std::sync::mpsc::Receiver<String>, words: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if words.iter().all(|w| line.contains(w)) => return line,
            Ok(line) => seen.push(line),
            Err(_) => panic!("no {words:?} within 10 s in:\n{}", seen.join("\n")),
        }
    }
}

#[test]
fn an_agent_entry_nothing_serves_is_a_warning_and_a_broken_one_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agentwire.toml");
    let data = dir.path().join("data");
    std::fs::write(
        &file,
        "[agents.spare]\nkind = \"cmd\"\ncommand = [\"cat\"]\n[agents.used]\nkind = \"demo\"\nexpose = [\"nipxx\"]\n",
    )
    .unwrap();
    let args = [
        "--config",
        file.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
    ];
    let out = run(dir.path(), &[&args[..], &["config"]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("warning: [agents.spare] is not served") && !err.contains("[agents.used]"),
        "{err}"
    );

    // `serve` logs the same warning at start.
    let port = free_port().to_string();
    let mut serve = agentwire(dir.path())
        .args(args)
        .args([
            "serve",
            "--relay-listen",
            &format!("127.0.0.1:{port}"),
            "--http-listen",
            "off",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(serve.stderr.take().unwrap());
    let warned = wait_for_line(&lines, &["WARN", "[agents.spare] is not served"]);
    assert!(warned.contains("has no expose"), "{warned}");
    let _ = serve.kill();
    let _ = serve.wait();

    // An entry nothing serves is still checked: an unknown kind, a missing key.
    for (entry, says) in [
        ("[agents.spare]\nkind = \"llm\"\n", "spare"),
        (
            "[agents.spare]\nkind = \"openai\"\nmodels = [\"m\"]\n",
            "base_url",
        ),
    ] {
        std::fs::write(&file, entry).unwrap();
        let out = run(dir.path(), &[&args[..], &["config"]].concat());
        assert_eq!(out.status.code(), Some(1), "{entry}");
        let err = text(&out.stderr);
        assert!(err.contains(says) && err.contains("agents"), "{err}");
    }
}

#[test]
fn config_refuses_an_unset_key_variable_as_serve_does() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agentwire.toml");
    let data = dir.path().join("data");
    std::fs::write(
        &file,
        "[serve]\nagent = \"local\"\n[agents.local]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodels = [\"m\"]\napi_key_env = \"AGENTWIRE_TEST_UNSET_KEY\"\n",
    )
    .unwrap();
    let args = [
        "--config",
        file.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
    ];
    let expected =
        "[agents.local] api_key_env: the environment variable AGENTWIRE_TEST_UNSET_KEY is not set";
    for command in [
        &["config"][..],
        &[
            "serve",
            "--relay-listen",
            "127.0.0.1:0",
            "--http-listen",
            "off",
        ][..],
    ] {
        let out = agentwire(dir.path())
            .args(args)
            .args(command)
            .env_remove("AGENTWIRE_TEST_UNSET_KEY")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{command:?}");
        assert!(
            text(&out.stderr).contains(expected),
            "{command:?}: {}",
            text(&out.stderr)
        );
    }
    assert!(!data.exists(), "nothing was made");
    // Set, it passes.
    let out = agentwire(dir.path())
        .args(args)
        .arg("config")
        .env("AGENTWIRE_TEST_UNSET_KEY", "sk-test")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn a_base_url_ending_in_chat_completions_is_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agentwire.toml");
    std::fs::write(
        &file,
        "[serve]\nagent = \"local\"\n[agents.local]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:8080/v1/chat/completions\"\nmodels = [\"m\"]\n",
    )
    .unwrap();
    let out = run(dir.path(), &["--config", file.to_str().unwrap(), "config"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("[agents.local] base_url")
            && err.contains("ends in /chat/completions")
            && err.contains("http://127.0.0.1:8080/v1"),
        "{err}"
    );
}

#[test]
fn a_model_server_that_does_not_answer_is_a_warning_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let file = dir.path().join("agentwire.toml");
    std::fs::write(
        &file,
        format!("[serve]\nagent = \"local\"\n[agents.local]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\nmodels = [\"m\"]\n"),
    )
    .unwrap();
    let data = dir.path().join("data");
    let mut serve = agentwire(dir.path())
        .args([
            "--config",
            file.to_str().unwrap(),
            "--data-dir",
            data.to_str().unwrap(),
        ])
        .args([
            "serve",
            "--relay-listen",
            "127.0.0.1:0",
            "--http-listen",
            "off",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(serve.stderr.take().unwrap());
    let warned = wait_for_line(&lines, &["WARN", "did not answer GET /models"]);
    assert!(
        warned.contains(&format!("server=http://127.0.0.1:{port}/v1"))
            && warned.contains("cannot connect"),
        "{warned}"
    );
    let _ = serve.kill();
    let _ = serve.wait();
}

#[test]
fn a_second_serve_on_a_data_dir_in_use_names_the_pid_before_opening_a_port() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let first = common::Daemon::start(&data, &[]);
    let port = free_port();
    let out = run(
        dir.path(),
        &[
            "serve",
            "--data-dir",
            data.to_str().unwrap(),
            "--relay-listen",
            &format!("127.0.0.1:{port}"),
            "--http-listen",
            "off",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!(
            "data dir {} is in use by another agentwire serve (pid {})",
            data.display(),
            first.child.id()
        )),
        "{err}"
    );
    assert!(!err.contains("listening"), "no port was opened: {err}");
    assert!(
        data.join("agent.key").exists(),
        "the first's data dir is untouched"
    );
}

#[test]
fn a_failed_start_leaves_no_data_dir_it_made_and_a_taken_port_says_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let data = dir.path().join("fresh");
    let out = run(
        dir.path(),
        &[
            "serve",
            "--data-dir",
            data.to_str().unwrap(),
            "--relay-listen",
            &addr,
            "--http-listen",
            "off",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("--relay-listen: cannot listen on {addr}"))
            && err.contains("another program listens there")
            && err.contains("port 0 picks a free one"),
        "{err}"
    );
    assert!(!data.exists(), "the half-made data dir was removed");
}

#[test]
fn client_flags_are_checked_before_anything_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    for (args, says) in [
        (
            &["ask", "--thinking", "hgh", "hi"][..],
            "possible values: low, medium, high, max",
        ),
        (&["ask", "--timeout", "0", "hi"][..], "'0' for '--timeout"),
        (
            &["serve", "--relay-listen", "localhost:7777"][..],
            "give one such as 127.0.0.1:7777",
        ),
        (
            &["serve", "--http-listen", "localhost:7780"][..],
            "such as 127.0.0.1:7780",
        ),
    ] {
        let out = run(dir.path(), args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            text(&out.stderr).contains(says),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}
