//! `agentwire session` as an operator runs it, beside a real `agentwire serve --nats` and a real
//! nats-server: list and show the fisk-ai conversations, answer a deferred call so the run goes on, and
//! remove a conversation, with the refusals where the daemon holds the journal alone.

#[path = "../../agentwire-fisk/tests/worker/caller.rs"]
mod caller;
mod common;

use agentwire_testkit::NatsServer;
use caller::{check_set, code, tag, token, Caller};
use common::Daemon;
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Output};

fn session(data_dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .arg("--data-dir")
        .arg(data_dir)
        .arg("session")
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("agentwire runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn lines(out: &Output) -> Vec<Value> {
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// A conversation whose question nobody answers: its run ends `deferred`. Its token and call id.
async fn a_deferred_conversation(c: &Caller) -> (String, String) {
    let r = tag("ask");
    let set = c.prompt(&r, "input your name?", json!({})).await;
    assert_eq!(code(&set), "deferred", "{set:#?}");
    let q = set
        .iter()
        .find(|m| m.protocol() == "io.choria.fisk-ai.v1.elicit.request.input")
        .expect("the question was asked")
        .json
        .clone();
    (token(&set), q["tool_use_id"].as_str().unwrap().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_lists_shows_answers_and_removes_conversations_of_the_sqlite_journal() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let args = [
        "--nats",
        nats.url.as_str(),
        "--identity",
        "sess1",
        "--nats-elicit",
        "--nats-request-timeout",
        "1",
    ];
    let mut d = Daemon::start(&data, &args);
    let c = Caller::connect(&nats.url, "sess1").await;
    let r = tag("calc");
    let set = c.prompt(&r, "calc 2+3", json!({})).await;
    assert_eq!(check_set(&set, &r).json["text"], "5");
    let calc = token(&set);
    // A second later: the list's order is by the newest turn's second.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let (asked, call) = a_deferred_conversation(&c).await;

    // Listed while the daemon writes the journal (read-only beside it), newest first, no token shown.
    let out = session(&data, &["list", "--json"]);
    let listed = lines(&out);
    assert_eq!(listed.len(), 2, "{listed:#?}");
    assert_eq!(listed[0]["state"], "deferred", "{listed:#?}");
    assert_eq!(listed[0]["waiting"]["call_id"], call.as_str());
    assert_eq!(listed[0]["waiting"]["tool"], "input");
    assert_eq!(listed[0]["turns"], 1);
    assert_eq!(listed[1]["state"], "idle");
    assert!(listed[1]["usage"]["input_tokens"].is_u64());
    let calc_id = listed[1]["conversation"].as_str().unwrap().to_string();
    assert!(calc_id.starts_with("fisk:"));
    let out = session(&data, &["list"]);
    let table = text(&out.stdout);
    assert!(
        table.starts_with("CONVERSATION") && table.contains(&format!("deferred (call {call})")),
        "{table}"
    );
    assert!(
        !table.contains(&asked) && !table.contains(&calc),
        "a token is a credential: {table}"
    );

    // Shown by its token: the prompt, the call and its question.
    let out = session(&data, &["show", &asked]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(
        shown.contains(&format!("waiting       call {call} (deferred)"))
            && shown.contains("question      input: your name?")
            && shown.contains("input your name?"),
        "{shown}"
    );

    // The daemon holds its SQLite journal alone: no removal under it.
    let out = session(&data, &["rm", &calc_id]);
    assert_eq!(out.status.code(), Some(1));
    let e = text(&out.stderr);
    assert!(
        e.contains("is in use by agentwire serve (pid") && e.contains("stop the daemon"),
        "{e}"
    );

    // The id `list` prints is not what an answer takes: said so, with what is.
    let asked_id = agentwire_fisk::conversation::conversation_id(&asked);
    let out = session(&data, &["answer", asked_id.as_str(), &call, "Ada"]);
    assert_eq!(out.status.code(), Some(1));
    let e = text(&out.stderr);
    assert!(
        e.contains("takes the conversation's token, not its id")
            && e.contains("conversation <token>"),
        "{e}"
    );

    // Answered here, the run goes on in the daemon to its result.
    let out = session(&data, &["answer", &asked, &call, "Ada"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("Ada"), "{}", text(&out.stdout));
    let out = session(&data, &["show", "--json", &asked]);
    let shown = &lines(&out)[0];
    assert_eq!(shown["state"], "idle", "{shown}");
    assert_eq!(shown["turns"].as_array().unwrap().len(), 2, "{shown}");
    assert_eq!(
        shown["turns"][1]["prompt"],
        format!("(answer to call {call})")
    );
    assert!(shown["turns"][1]["outcome"]
        .as_str()
        .unwrap()
        .contains("Ada"));
    // The same answer again: the call has one.
    let out = session(&data, &["answer", &asked, &call, "Bob"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("already_answered"),
        "{}",
        text(&out.stderr)
    );

    // From anywhere, a NATS context names the worker's servers: no serve runs on this other data dir.
    let (asked2, call2) = a_deferred_conversation(&c).await;
    let elsewhere = tempfile::tempdir().unwrap();
    let contexts = elsewhere.path().join("xdg/nats/context");
    std::fs::create_dir_all(&contexts).unwrap();
    std::fs::write(
        contexts.join("here.json"),
        json!({ "url": nats.url }).to_string(),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .arg("--data-dir")
        .arg(elsewhere.path().join("data"))
        .args([
            "session",
            "answer",
            "--nats-context",
            "here",
            "--identity",
            "sess1",
        ])
        .args([asked2.as_str(), call2.as_str(), "Cy"])
        .env("XDG_CONFIG_HOME", elsewhere.path().join("xdg"))
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("Cy"), "{}", text(&out.stdout));

    // With the daemon gone, an answer has nothing to run in; a removal takes the data dir.
    d.kill();
    let out = session(&data, &["answer", &asked, &call, "Ada"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no agentwire is serving data dir"),
        "{}",
        text(&out.stderr)
    );
    let out = session(&data, &["rm", &calc_id]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&format!("removed conversation {calc_id} (1 turns)")));
    let out = session(&data, &["show", &calc]);
    assert_eq!(out.status.code(), Some(3));
    let out = session(&data, &["rm", &calc_id]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(lines(&session(&data, &["list", "--json"])).len(), 2);

    // Served again, the removed conversation is unknown; the other goes on.
    let _d = Daemon::start(&data, &args);
    let r = tag("after");
    let set = c
        .prompt(&r, "again", json!({ "conversation_token": calc }))
        .await;
    assert_eq!(code(&set), "unknown_conversation", "{set:#?}");
    let r = tag("after");
    let set = c
        .prompt(&r, "and on", json!({ "conversation_token": asked }))
        .await;
    assert_eq!(check_set(&set, &r).json["text"], "You said: and on");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_jetstream_journal_a_conversation_is_removed_beside_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start_jetstream(&dir.path().join("js"));
    let config = dir.path().join("agentwire.toml");
    std::fs::write(
        &config,
        format!(
            "[journal]\nkind = \"jetstream\"\nurl = \"{}\"\nstream = \"SESS\"\nlease_secs = 2\n",
            nats.url
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let cfg = config.to_str().unwrap();
    let _d = Daemon::start(
        &data,
        &[
            "--config",
            cfg,
            "--nats",
            nats.url.as_str(),
            "--identity",
            "sess2",
        ],
    );
    let c = Caller::connect(&nats.url, "sess2").await;
    let r = tag("calc");
    let set = c.prompt(&r, "calc 6*7", json!({})).await;
    assert_eq!(check_set(&set, &r).json["text"], "42");
    let t = token(&set);

    let with_config = |args: &[&str]| {
        let mut all = vec!["--config", cfg];
        all.extend_from_slice(args);
        session(&data, &all)
    };
    let listed = lines(&with_config(&["list", "--json"]));
    assert_eq!(listed.len(), 1, "{listed:#?}");
    assert_eq!(listed[0]["state"], "idle");

    // A turn of it runs: the shared journal's removal is refused, and the turn ends as it would.
    let r = tag("long");
    let mut long = c
        .open_prompt_with(&r, "sleep 3000", json!({ "conversation_token": t }))
        .await;
    long.until(|m| m.protocol() == "io.choria.fisk-ai.v1.ack")
        .await;
    let out = with_config(&["rm", &t]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("has a turn running"),
        "{}",
        text(&out.stderr)
    );
    let listed = lines(&with_config(&["list", "--json"]));
    assert_eq!(listed[0]["state"], "running", "{listed:#?}");
    let set = long.finish().await;
    check_set(&set, &r);
    let out = with_config(&["rm", &t]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(lines(&with_config(&["list", "--json"])).is_empty());
    let r = tag("after");
    let set = c
        .prompt(&r, "again", json!({ "conversation_token": t }))
        .await;
    assert_eq!(code(&set), "unknown_conversation", "{set:#?}");
}
