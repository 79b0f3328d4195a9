//! `agentwire serve --nats` and the fisk-ai CLI (`ask --nats`, `read`, `discover`) as a user runs them,
//! against a real nats-server.

mod cli_child;
mod common;

use agentwire_testkit::NatsServer;
use cli_child::CliChild;
use common::Daemon;
use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn cli(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args(args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("agentwire runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// `agentwire ask --nats URL --identity cli1 ARGS...`.
fn ask(nats: &str, args: &[&str], stdin: &str) -> Output {
    let mut all = vec!["ask", "--nats", nats, "--identity", "cli1"];
    all.extend_from_slice(args);
    cli(&all, stdin)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn ask_follow_up_read_and_discover_over_nats() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(
        dir.path(),
        &["--nats", &nats.url, "--identity", "cli1", "--nats-elicit"],
    );
    assert_eq!(d.ready["nats"]["url"], nats.url.as_str());
    assert_eq!(d.ready["nats"]["identity"], "cli1");

    let out = ask(&nats.url, &["calc", "2+3"], "");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "5");
    let err = text(&out.stderr);
    // Tool activity as every command shows it, the same lines as over NIP-XX.
    assert!(
        err.contains("[tool calculator start 2+3]") && err.contains("[tool calculator result 5]"),
        "{err}"
    );
    let token = err
        .lines()
        .find_map(|l| l.strip_prefix("conversation "))
        .expect("the token is printed")
        .to_string();

    let out = ask(&nats.url, &["--conversation", &token, "and", "then"], "");
    assert_eq!(text(&out.stdout).trim(), "You said: and then");

    let out = cli(
        &["read", "--nats", &nats.url, "--identity", "cli1", &token],
        "",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let read = text(&out.stdout);
    assert!(
        read.contains("> calc 2+3") && read.contains("> and then"),
        "{read}"
    );

    let out = cli(&["discover", "--nats", &nats.url, "cli1"], "");
    let card: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(card["protocol"], "io.choria.fisk-ai.v1.discovery.reply");
    assert_eq!(card["name"], "cli1");
    // The demo agent has tools of its own, but the worker serves none to peers: the card lists none.
    assert_eq!(card["tools"], serde_json::json!([]), "{card}");
    assert_eq!(card["telemetry"], false);
    assert_eq!(card["telemetry_content"], false);

    // A question answered at the terminal.
    let out = ask(&nats.url, &["ask", "pick | red | green"], "2\n");
    assert_eq!(text(&out.stdout).trim(), "green", "{}", text(&out.stderr));
    // A question and options with escape sequences in them (the worker's words): shown, never obeyed.
    let out = ask(
        &nats.url,
        &[
            "ask",
            "\u{1b}]0;PWNED\u{7}pick | \u{1b}[2Jred | gr\u{202e}een",
        ],
        "1\n",
    );
    let err = text(&out.stderr);
    assert!(err.contains("PWNED") && err.contains("[2Jred"), "{err}");
    for c in ['\u{1b}', '\u{7}', '\u{202e}'] {
        assert!(
            !err.contains(c) && !text(&out.stdout).contains(c),
            "{c:?}: {err:?}"
        );
    }
    // Nobody at the terminal (end of input) is no_operator.
    let out = ask(&nats.url, &["confirm", "sure?"], "");
    assert_eq!(text(&out.stdout).trim(), "no operator");

    // Failures exit 2 with the code.
    let out = ask(&nats.url, &["fail", "oops"], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("error failed: oops"),
        "{}",
        text(&out.stderr)
    );
    let out = cli(
        &["ask", "--nats", &nats.url, "--identity", "nobody", "hi"],
        "",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no worker answers"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cut_off_by_kill_9_ends_canceled_and_the_conversation_goes_on() {
    use agentwire_fisk::client::{Caller, PromptCall, Received};
    use std::sync::{Arc, Mutex};
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let args = ["--nats", nats.url.as_str(), "--identity", "crash1"];
    let mut d = Daemon::start(dir.path(), &args);
    let caller = Arc::new(Caller::connect(&nats.url, "tester").await.unwrap());
    let token = Arc::new(Mutex::new(None::<String>));
    let (c, t) = (caller.clone(), token.clone());
    let cut = tokio::spawn(async move {
        c.prompt(
            PromptCall {
                identity: "crash1",
                request: "cut1",
                prompt: "sleep 5000",
                token: None,
                timeout: Duration::from_secs(2),
            },
            |m: &Received| {
                if let Some(tok) = m.json["conversation_token"].as_str() {
                    *t.lock().unwrap() = Some(tok.to_string());
                }
            },
            Box::new(|_| Box::pin(async { agentwire_fisk::client::Reply::NoOperator })),
        )
        .await
    });
    // Kill once the run is acked (journaled).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while token.lock().unwrap().is_none() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    d.kill();
    assert!(
        cut.await.unwrap().is_err(),
        "the caller saw no terminal from the dead worker"
    );
    let token = token
        .lock()
        .unwrap()
        .clone()
        .expect("the run was acked before the kill");

    let _d2 = Daemon::start(dir.path(), &args);
    let call = |request: &'static str, prompt: &'static str, token: Option<String>| {
        let caller = caller.clone();
        async move {
            caller
                .prompt(
                    PromptCall {
                        identity: "crash1",
                        request,
                        prompt,
                        token: token.as_deref(),
                        timeout: Duration::from_secs(10),
                    },
                    |_| {},
                    Box::new(|_| Box::pin(async { agentwire_fisk::client::Reply::NoOperator })),
                )
                .await
                .unwrap()
        }
    };
    // The same request again: answered from the journal, not run again.
    let again = call("cut1", "sleep 5000", Some(token.clone())).await;
    assert_eq!(again.len(), 2, "{again:#?}");
    assert_eq!(again[1].json["code"], "canceled");
    // The conversation takes its next turn.
    let next = call("next1", "hello after the crash", Some(token)).await;
    assert_eq!(
        next.last().unwrap().json["text"],
        "You said: hello after the crash"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fisk_run_cut_off_by_a_crash_is_ended_even_when_the_daemon_restarts_without_nats() {
    use agentwire_fisk::client::{Caller, PromptCall, Received};
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(
        dir.path(),
        &["--nats", nats.url.as_str(), "--identity", "crash2"],
    );
    let caller = Caller::connect(&nats.url, "tester").await.unwrap();
    let acked = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = acked.clone();
    let cut = tokio::spawn(async move {
        caller
            .prompt(
                PromptCall {
                    identity: "crash2",
                    request: "cut2",
                    prompt: "sleep 5000",
                    token: None,
                    timeout: Duration::from_secs(2),
                },
                move |m: &Received| {
                    if m.json["accepted"] == true {
                        seen.store(true, std::sync::atomic::Ordering::SeqCst);
                    }
                },
                Box::new(|_| Box::pin(async { agentwire_fisk::client::Reply::NoOperator })),
            )
            .await
    });
    // Kill once the run is acked (journaled).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !acked.load(std::sync::atomic::Ordering::SeqCst) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    d.kill();
    let _ = cut.await;
    assert!(
        acked.load(std::sync::atomic::Ordering::SeqCst),
        "acked before the kill"
    );
    // The next start has no fisk-ai front, and still ends the turn (one recovery pass for every protocol).
    let _d2 = Daemon::start(dir.path(), &[]);
    let journal = rusqlite::Connection::open(dir.path().join("journal.sqlite")).unwrap();
    let outcome: Option<String> = journal
        .query_row(
            "SELECT outcome FROM turns WHERE request_id = 'fisk:cut2'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let outcome = outcome.expect("ended by the recovery pass");
    assert!(outcome.contains(r#""code":"interrupted""#), "{outcome}");
}

/// A worker `fisk2` with one slot that puts questions to callers, on a nats-server of its own.
fn one_slot_worker(dir: &std::path::Path) -> (NatsServer, Daemon) {
    let nats = NatsServer::start();
    let d = Daemon::start(
        dir,
        &[
            "--nats",
            &nats.url,
            "--identity",
            "fisk2",
            "--nats-elicit",
            "--nats-workers",
            "1",
        ],
    );
    (nats, d)
}

/// `agentwire ask --nats URL --identity fisk2 ARGS...`, running.
fn asking(nats: &str, args: &[&str]) -> CliChild {
    let mut all = vec!["ask", "--nats", nats, "--identity", "fisk2"];
    all.extend_from_slice(args);
    CliChild::spawn(&all)
}

/// The one slot is free: a prompt is answered, not refused with `capacity`.
fn slot_is_free(nats: &str) {
    let mut next = asking(nats, &["hello"]);
    let code = next.exit_code(Duration::from_secs(15));
    assert_eq!(code, Some(0), "{}", next.stderr());
    assert_eq!(next.stdout().trim(), "You said: hello");
}

#[test]
fn ctrl_c_on_ask_nats_cancels_the_run_and_frees_the_slot() {
    let dir = tempfile::tempdir().unwrap();
    let (nats, _d) = one_slot_worker(dir.path());

    // A running run.
    let mut run = asking(&nats.url, &["sleep 20000"]);
    run.wait_for("run ", Duration::from_secs(15));
    run.interrupt();
    assert_eq!(
        run.exit_code(Duration::from_secs(15)),
        Some(130),
        "{}",
        run.stderr()
    );
    let err = run.stderr();
    assert!(err.contains("cancel sent for run"), "{err}");
    assert!(err.contains("error suspended"), "{err}");
    assert!(err.contains("conversation "), "{err}");
    slot_is_free(&nats.url);

    // A run blocked at a question, the person at the terminal not answering (stdin held open).
    let mut run = asking(&nats.url, &["ask colour? | red | green"]);
    run.wait_for("choose a number: ", Duration::from_secs(15));
    run.interrupt();
    assert_eq!(
        run.exit_code(Duration::from_secs(15)),
        Some(130),
        "{}",
        run.stderr()
    );
    assert!(run.stderr().contains("error suspended"), "{}", run.stderr());
    slot_is_free(&nats.url);
}

#[test]
fn ask_nats_that_times_out_cancels_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let (nats, _d) = one_slot_worker(dir.path());
    // A run that streams all along still ends when --timeout passes: the timeout is for the answer.
    let mut run = asking(&nats.url, &["--timeout", "1", "sleep 20000"]);
    assert_eq!(
        run.exit_code(Duration::from_secs(15)),
        Some(3),
        "{}",
        run.stderr()
    );
    let err = run.stderr();
    assert!(err.contains("no answer within 1s"), "{err}");
    assert!(err.contains("cancel sent for run"), "{err}");
    assert!(err.contains("error suspended"), "{err}");
    slot_is_free(&nats.url);

    // Time the person spends at a question does not count.
    let mut run = asking(&nats.url, &["--timeout", "1", "confirm sure?"]);
    run.wait_for("[y/n] ", Duration::from_secs(15));
    std::thread::sleep(Duration::from_millis(1500));
    run.type_line("y");
    assert_eq!(
        run.exit_code(Duration::from_secs(15)),
        Some(0),
        "{}",
        run.stderr()
    );
    assert_eq!(run.stdout().trim(), "yes");
}

#[test]
fn a_mistyped_answer_is_asked_again_not_taken_as_a_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let (nats, _d) = one_slot_worker(dir.path());
    let out = cli(
        &[
            "ask",
            "--nats",
            &nats.url,
            "--identity",
            "fisk2",
            "confirm sure?",
        ],
        "maybe\ny\n",
    );
    let err = text(&out.stderr);
    assert_eq!(text(&out.stdout).trim(), "yes", "{err}");
    assert!(
        err.contains("\"maybe\" is not yes or no; type y or n"),
        "{err}"
    );
    assert_eq!(err.matches("[y/n] ").count(), 2, "{err}");

    let out = cli(
        &[
            "ask",
            "--nats",
            &nats.url,
            "--identity",
            "fisk2",
            "ask colour? | red | green",
        ],
        "3\nblue\nGreen\n",
    );
    let err = text(&out.stderr);
    assert_eq!(text(&out.stdout).trim(), "green", "{err}");
    assert!(
        err.contains("3 is not one of 1-2; type a number or an option's label"),
        "{err}"
    );
    assert!(err.contains("\"blue\" is not an option"), "{err}");
}

#[test]
fn cancel_nats_says_what_the_worker_told() {
    let dir = tempfile::tempdir().unwrap();
    let (nats, _d) = one_slot_worker(dir.path());
    let cancel = |request: &str| {
        cli(
            &[
                "cancel",
                "--nats",
                &nats.url,
                "--identity",
                "fisk2",
                request,
            ],
            "",
        )
    };
    let mut run = asking(&nats.url, &["sleep 20000"]);
    let err = run.wait_for("run ", Duration::from_secs(15));
    let request = err
        .lines()
        .find_map(|l| l.strip_prefix("run "))
        .unwrap()
        .to_string();
    let out = cancel(&request);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!("cancelled run {request}")),
        "{}",
        text(&out.stderr)
    );
    // The asker sees its run end suspended.
    assert_eq!(
        run.exit_code(Duration::from_secs(15)),
        Some(2),
        "{}",
        run.stderr()
    );
    assert!(run.stderr().contains("error suspended"), "{}", run.stderr());

    // An ended run and one that never existed look the same to fisk-ai: no worker is running it.
    for request in [request.as_str(), "never-sent"] {
        let out = cancel(request);
        assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains(&format!("run {request} is not running on any worker")),
            "{}",
            text(&out.stderr)
        );
    }
}
