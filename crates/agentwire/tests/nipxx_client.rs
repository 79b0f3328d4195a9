//! The NIP-XX client's duties, through the `agentwire` CLI against the real daemon and its relay: `ask`
//! reads ai.info first and does not send a prompt the agent would refuse; `attach` re-attaches to a run
//! whose `ask` was killed and shows it to its end; `sessions` finds a sender's sessions and the runs in one
//! by their `s` tags; and a run whose deltas break their order is flagged `INVALID_SEQUENCE` while its
//! text still renders (against a scripted agent on the same relay).

mod common;

use agentwire_nostr::nipxx::{kinds, tags};
use common::{Client, Daemon};
use nostr::prelude::{EventBuilder, Filter, Keys, Kind, Timestamp};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn cli(data_dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[tokio::test]
async fn ask_reads_ai_info_first_and_sends_nothing_the_agent_would_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let _d = Daemon::start(dir.path(), &[]);
    let out = cli(dir.path(), &["info"]);
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let max = info["max_prompt_bytes"].as_u64().unwrap() as usize;

    let out = cli(dir.path(), &["ask", "--model", "gpt-9", "hello"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("not sent") && err.contains("gpt-9") && err.contains("demo-1"),
        "{err}"
    );
    assert!(!err.contains("run "), "no run was started: {err}");

    let big = "x".repeat(max + 1);
    let out = cli(dir.path(), &["ask", &big]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("max_prompt_bytes"),
        "{}",
        text(&out.stderr)
    );

    // The agent's own model, and a prompt of exactly the most it takes, go.
    let out = cli(dir.path(), &["ask", "--model", "demo-1", "quick fits"]);
    assert_eq!(text(&out.stdout).trim(), "fits", "{}", text(&out.stderr));
    let turns = cli(dir.path(), &["turns", "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&turns.stdout).unwrap();
    assert_eq!(
        listed["turns"].as_array().unwrap().len(),
        1,
        "only the prompt that fits reached the agent: {listed}"
    );
}

#[tokio::test]
async fn attach_shows_a_run_to_its_end_after_its_ask_was_killed() {
    let dir = tempfile::tempdir().unwrap();
    let _d = Daemon::start(dir.path(), &[]);
    let mut ask = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .arg("--data-dir")
        .arg(dir.path())
        .args(["ask", "sleep 2000"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(ask.stderr.take().unwrap()).lines();
    let run = loop {
        let line = lines.next().expect("ask names its run").unwrap();
        if let Some(id) = line.strip_prefix("run ") {
            break id.to_string();
        }
    };
    // Killed: no cancel is sent, the run goes on without anyone watching.
    ask.kill().unwrap();
    ask.wait().unwrap();
    let out = cli(dir.path(), &["attach", &run]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("slept 2000 ms"),
        "{}",
        text(&out.stdout)
    );
    // Attached again once it ended: the relay's events give the same end at once.
    let out = cli(dir.path(), &["attach", "--timeout", "5", &run]);
    assert!(
        text(&out.stdout).contains("slept 2000 ms"),
        "{}",
        text(&out.stderr)
    );
    let out = cli(dir.path(), &["attach", "--timeout", "1", &"0".repeat(64)]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "an unknown run: {}",
        text(&out.stderr)
    );
}

#[tokio::test]
async fn sessions_are_found_by_their_s_tags() {
    let dir = tempfile::tempdir().unwrap();
    let _d = Daemon::start(dir.path(), &[]);
    // A second apart: prompts are ordered by their `created_at`, which counts seconds.
    for p in ["quick one", "quick two"] {
        assert!(cli(dir.path(), &["ask", p]).status.success());
        std::thread::sleep(Duration::from_millis(1100));
    }
    let out = cli(dir.path(), &["ask", "--new", "quick elsewhere"]);
    let session = text(&out.stderr)
        .lines()
        .find_map(|l| l.strip_prefix("session ").map(String::from))
        .unwrap();
    let out = cli(dir.path(), &["sessions"]);
    let listed = text(&out.stdout);
    let lines: Vec<&str> = listed.lines().collect();
    assert!(lines[0].starts_with("SESSION"), "{listed}");
    assert_eq!(lines.len(), 3, "two sessions: {listed}");
    assert!(
        lines[1].starts_with(&session) && lines[1].contains("quick elsewhere"),
        "newest first: {listed}"
    );
    assert!(
        lines[2].starts_with("sender:")
            && lines[2].contains("  2  ")
            && lines[2].contains("quick two"),
        "{listed}"
    );
    let default = lines[2].split_whitespace().next().unwrap();
    let out = cli(dir.path(), &["sessions", "--session", default]);
    let runs = text(&out.stdout);
    let lines: Vec<&str> = runs.lines().collect();
    assert!(lines[0].starts_with("RUN"), "{runs}");
    assert_eq!(lines.len(), 3, "{runs}");
    assert!(
        lines[1].ends_with("quick two") && lines[2].ends_with("quick one"),
        "{runs}"
    );
    // A run listed there is one `attach` shows.
    let run = lines[1].split_whitespace().next().unwrap();
    let out = cli(dir.path(), &["attach", run]);
    assert_eq!(text(&out.stdout).trim(), "two");
}

#[tokio::test]
async fn gift_wrapped_runs_are_found_by_sessions_and_shown_by_attach() {
    let dir = tempfile::tempdir().unwrap();
    let _d = Daemon::start(dir.path(), &[]);
    let out = cli(dir.path(), &["ask", "--nip59", "quick hidden"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Its wraps carry neither sender nor session: the run is found through the copy `ask` wrapped to itself.
    let out = cli(dir.path(), &["sessions"]);
    let listed = text(&out.stdout);
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 2, "one session: {listed}");
    assert!(
        lines[1].starts_with("sender:") && lines[1].contains("quick hidden"),
        "{listed}"
    );
    let default = lines[1].split_whitespace().next().unwrap();
    let out = cli(dir.path(), &["sessions", "--session", default]);
    let runs = text(&out.stdout);
    let lines: Vec<&str> = runs.lines().collect();
    assert_eq!(lines.len(), 2, "{runs}");
    assert!(lines[1].ends_with("quick hidden"), "{runs}");
    let run = lines[1].split_whitespace().next().unwrap();
    let out = cli(dir.path(), &["attach", "--timeout", "5", run]);
    assert_eq!(text(&out.stdout).trim(), "hidden", "{}", text(&out.stderr));
}

#[tokio::test]
async fn a_broken_delta_order_is_flagged_invalid_sequence_and_still_rendered() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    // A scripted agent on the daemon's relay: it publishes no ai.info and answers one prompt with deltas
    // seq 0, seq 1, seq 1 again with other text, and a response.
    let agent_keys = Keys::generate();
    let agent =
        Client::with_keys(&d.relay, Keys::generate().public_key(), agent_keys.clone()).await;
    let mut agent = agent;
    agent.conn.subscribe(
        "prompts",
        vec![Filter::new()
            .kind(Kind::Custom(kinds::PROMPT))
            .pubkey(agent_keys.public_key())],
    );
    let agent_hex = agent_keys.public_key().to_hex();
    let data = dir.path().to_path_buf();
    let asking = std::thread::spawn(move || {
        cli(
            &data,
            &["ask", "--agent", &agent_hex, "--timeout", "20", "count"],
        )
    });
    let prompt = loop {
        match tokio::time::timeout(Duration::from_secs(20), agent.rx.recv()).await {
            Ok(Some(agentwire_nostr::relay_conn::Incoming::Event { sub, event }))
                if sub == "prompts" =>
            {
                break *event
            }
            Ok(Some(_)) => {}
            other => panic!("no prompt came: {other:?}"),
        }
    };
    let session = tags::default_session(&prompt.pubkey);
    let now = Timestamp::now().as_secs();
    for (i, (kind, payload)) in [
        (kinds::DELTA, r#"{"ver":1,"text":"one ","seq":0}"#),
        (kinds::DELTA, r#"{"ver":1,"text":"two ","seq":1}"#),
        (kinds::DELTA, r#"{"ver":1,"text":"TWO ","seq":1}"#),
        (kinds::RESPONSE, r#"{"ver":1,"text":"one two"}"#),
    ]
    .into_iter()
    .enumerate()
    {
        let content = agent.crypto.encrypt(&prompt.pubkey, payload).unwrap();
        let ev = agent.crypto.sign(
            EventBuilder::new(Kind::Custom(kind), content)
                .tags(tags::run(&prompt.pubkey, &prompt.id, &session))
                .custom_created_at(Timestamp::from(now + i as u64)),
        );
        agent.publish(&ev).await;
    }
    let out = tokio::task::spawn_blocking(move || asking.join().unwrap())
        .await
        .unwrap();
    let err = text(&out.stderr);
    assert!(err.contains("no ai.info from the agent"), "{err}");
    assert_eq!(
        err.matches("INVALID_SEQUENCE").count(),
        1,
        "flagged once: {err}"
    );
    assert!(err.contains("seq 1"), "{err}");
    assert_eq!(text(&out.stdout).trim(), "one two", "{err}");
    assert!(out.status.success());
}

#[tokio::test]
async fn with_text_envelope_on_the_agent_sends_envelopes_and_ask_reads_them() {
    use agentwire_nostr::nipxx::envelope::{Envelope, EnvelopeOf};
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agentwire.toml");
    std::fs::write(&cfg, "[nipxx]\ntext_envelope = true\n").unwrap();
    let d = Daemon::start(
        &dir.path().join("data"),
        &["--config", cfg.to_str().unwrap()],
    );
    let mut c = Client::new(&d.relay, d.agent).await;
    let prompt = c.prompt_event("calc 6*7", None);
    c.watch(&prompt.id);
    c.publish(&prompt).await;
    let run = c
        .collect(
            &prompt.id,
            Duration::from_secs(15),
            Duration::from_millis(100),
        )
        .await;
    let run_id = prompt.id.to_hex();
    let session = tags::default_session(&c.me());
    let mut seen = std::collections::BTreeSet::new();
    for (m, plain) in &run.events {
        let v: serde_json::Value = serde_json::from_str(plain).unwrap();
        let of = match m.kind {
            kinds::DELTA => EnvelopeOf::Delta,
            kinds::RESPONSE => EnvelopeOf::Response,
            kinds::TOOL_CALL => EnvelopeOf::ToolCall,
            _ => continue,
        };
        let e = Envelope::read(v["text"].as_str().unwrap(), of)
            .unwrap_or_else(|why| panic!("{plain}: {why}"));
        assert_eq!(e.get("run_id"), Some(run_id.as_str()), "{plain}");
        assert_eq!(e.get("session_id"), Some(session.as_str()), "{plain}");
        if of == EnvelopeOf::ToolCall {
            // One form only, as the schema's oneOf asks: the envelope carries the name.
            assert!(
                v.get("name").is_none() && v.get("phase").is_none(),
                "{plain}"
            );
            agentwire_nostr::nipxx::ToolCallPayload::parse(plain)
                .unwrap_or_else(|why| panic!("{plain}: {why:?}"));
            assert_eq!(e.get("name"), Some("calculator"), "{plain}");
        }
        seen.insert(m.kind);
    }
    assert!(
        seen.contains(&kinds::RESPONSE) && seen.contains(&kinds::TOOL_CALL),
        "{seen:?}"
    );
    // The client's view unwraps it: the answer is the text the envelope carries.
    assert_eq!(run.text(), "42");
    let data = dir.path().join("data");
    let out = cli(&data, &["ask", "quick plain"]);
    assert_eq!(text(&out.stdout).trim(), "plain", "{}", text(&out.stderr));
    // `ask` shows the tool activity the envelopes carry, as it does in the canonical form.
    let out = cli(&data, &["ask", "calc 6*7"]);
    let err = text(&out.stderr);
    assert_eq!(text(&out.stdout).trim(), "42", "{err}");
    assert!(err.contains("[tool calculator start"), "{err}");
    assert!(err.contains("[tool calculator result"), "{err}");
}
