//! End to end over the embedded relay: the real daemon, a real WebSocket client, every NIP-XX path.

mod common;

use agentwire_nostr::client::Terminal;
use agentwire_nostr::nipxx::{kinds, tags, Message};
use common::{Client, Daemon};
use nostr::prelude::{Keys, Tag};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_agent_paths_and_reconciliation() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let mut c = Client::new(&d.relay, d.agent).await;

    let run = c.ask("hello there").await;
    assert_eq!(run.text(), "You said: hello there");
    let seqs: Vec<u64> = run
        .deltas()
        .iter()
        .map(|v| v["seq"].as_u64().unwrap())
        .collect();
    assert!(seqs.len() >= 2, "at least two deltas");
    assert_eq!(
        seqs,
        (0..seqs.len() as u64).collect::<Vec<_>>(),
        "seq contiguous from 0"
    );
    assert_eq!(run.terminals, 1, "exactly one terminal");
    for (e, _) in &run.events {
        let t = tags::run_event_tags(e, &c.me()).expect("p, e root and encryption tags");
        assert_eq!(t.root, Some(run.prompt));
        assert_eq!(t.session, format!("sender:{}", c.me().to_hex()));
    }
    match &run.terminal {
        Some(Terminal::Response(r)) => assert_eq!(
            r.usage.map(|u| (u.input_tokens, u.output_tokens)),
            Some((2, 4))
        ),
        other => panic!("{other:?}"),
    }

    let run = c.ask("calc (1 + 2) * 28").await;
    assert_eq!(run.text(), "84");
    let tools: Vec<serde_json::Value> = run
        .events
        .iter()
        .filter(|(e, _)| e.kind == kinds::TOOL_CALL)
        .map(|(_, p)| serde_json::from_str(p).unwrap())
        .collect();
    assert_eq!(tools.len(), 2);
    assert_eq!(tools[0]["phase"], "start");
    assert_eq!(tools[0]["arguments"]["expr"], "(1 + 2) * 28");
    assert_eq!(tools[1]["phase"], "result");
    assert_eq!(tools[1]["output"]["stdout"], "84");

    assert_eq!(c.ask("calc 1 / 0").await.error_code(), "TOOL_ERROR");
    let failed = c.ask("fail the printer is on fire").await;
    assert_eq!(failed.error_code(), "INTERNAL_ERROR");
    match failed.terminal {
        Some(Terminal::Error(e)) => assert_eq!(e.message, "the printer is on fire"),
        other => panic!("{other:?}"),
    }
    assert_eq!(c.ask("empty").await.error_code(), "EMPTY_RESPONSE");
    let quick = c.ask("quick pong").await;
    assert_eq!(quick.text(), "pong");
    assert!(
        quick.events.iter().all(|(e, _)| e.kind == kinds::RESPONSE),
        "quick sends no status or deltas"
    );
    assert_eq!(c.ask("big 5000").await.text().len(), 5000);
    // The largest answer ai.info promises goes whole; a larger one is cut to fit one message, and says so.
    let most = agentwire_nostr::nipxx::mapping::MAX_RESPONSE_BYTES;
    assert_eq!(c.ask(&format!("big {most}")).await.text().len(), most);
    let over = c.ask("big 70000").await;
    assert_eq!(over.terminals, 1);
    let text = over.text();
    assert!(text.starts_with("abcdefghij"), "{}", &text[..40]);
    assert!(
        text.ends_with("[cut: the whole answer is 70000 bytes, more than one NIP-XX response carries (max_response_bytes in the agent's ai.info)]"),
        "{}",
        &text[text.len() - 200..]
    );
    assert!((most..agentwire_nostr::crypto::MAX_NIP44_PLAINTEXT_BYTES).contains(&text.len()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_prompt_gets_the_code_the_spec_names() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let mut c = Client::new(&d.relay, d.agent).await;
    let p = |c: &Client| {
        vec![
            Tag::public_key(c.agent),
            Tag::custom("encryption", ["nip44"]),
        ]
    };

    let cases: Vec<(&str, Vec<Tag>, String)> = vec![
        ("PARSE_ERROR", p(&c), "this is not json".into()),
        ("INVALID_SCHEMA", p(&c), r#"{"ver":1}"#.into()),
        (
            "INVALID_SCHEMA",
            p(&c),
            r#"{"ver":2,"message":"hi"}"#.into(),
        ),
        (
            "INVALID_SCHEMA",
            p(&c),
            r#"{"ver":1,"message":"hi","thinking":"lots"}"#.into(),
        ),
        (
            "INVALID_SCHEMA",
            p(&c),
            format!(r#"{{"ver":1,"message":"{}"}}"#, "x".repeat(32_001)),
        ),
        (
            "UNSUPPORTED_MODEL",
            p(&c),
            r#"{"ver":1,"message":"hi","model":"gpt-9"}"#.into(),
        ),
        (
            "UNSUPPORTED_SCHEMA_VERSION",
            p(&c),
            r#"{"ver":1,"message":"hi","tool_schema_version":2}"#.into(),
        ),
        (
            "UNSUPPORTED_ENCRYPTION",
            vec![
                Tag::public_key(c.agent),
                Tag::custom("encryption", ["nip04"]),
                Tag::custom("s", ["session:enc"]),
            ],
            r#"{"ver":1,"message":"hi"}"#.into(),
        ),
        (
            "INVALID_SCHEMA",
            vec![Tag::public_key(c.agent)],
            r#"{"ver":1,"message":"hi"}"#.into(),
        ),
        (
            "INVALID_SCHEMA",
            vec![
                Tag::public_key(c.agent),
                Tag::custom("encryption", ["nip44"]),
                Tag::custom("s", [""]),
            ],
            r#"{"ver":1,"message":"hi"}"#.into(),
        ),
    ];
    for (code, tags, plain) in cases {
        let ev = c.raw_prompt(tags, &plain);
        let run = c.send_and_collect(ev).await;
        assert_eq!(run.error_code(), code, "payload {plain:.60}");
        assert_eq!(run.terminals, 1);
        if code == "UNSUPPORTED_ENCRYPTION" && plain.contains("\"hi\"") {
            // A refused prompt is answered in the session it named.
            assert_eq!(tags::session(&run.events[0].0).unwrap(), "session:enc");
        }
    }
    // A fallback model that is offered is used.
    let ev = c.raw_prompt(
        p(&c),
        r#"{"ver":1,"message":"quick ok","model":"gpt-9","fallback_models":["demo-1"]}"#,
    );
    assert_eq!(c.send_and_collect(ev).await.text(), "ok");
    // A NIP-04 style payload is not NIP-44.
    let mut ev_tags = p(&c);
    ev_tags.push(Tag::custom("s", ["x"]));
    let ev = c.crypto.sign(
        nostr::prelude::EventBuilder::new(
            nostr::prelude::Kind::Custom(kinds::PROMPT),
            "abc?iv=def",
        )
        .tags(ev_tags),
    );
    assert_eq!(
        c.send_and_collect(ev).await.error_code(),
        "UNSUPPORTED_ENCRYPTION"
    );
    // The daemon still serves after all of that.
    assert_eq!(c.ask("quick still here").await.text(), "still here");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_block_and_rate_limits() {
    let dir = tempfile::tempdir().unwrap();
    let allowed = Keys::generate();
    let blocked = Keys::generate();
    let a = allowed.public_key().to_hex();
    let b = blocked.public_key().to_hex();
    let d = Daemon::start(
        dir.path(),
        &[
            "--allow",
            &a,
            "--allow",
            &b,
            "--block",
            &b,
            "--rate-per-second",
            "0.01",
            "--rate-burst",
            "2",
        ],
    );
    let mut stranger = Client::new(&d.relay, d.agent).await;
    assert_eq!(stranger.ask("quick hi").await.error_code(), "UNAUTHORIZED");
    let mut blk = Client::with_keys(&d.relay, d.agent, blocked).await;
    assert_eq!(blk.ask("quick hi").await.error_code(), "BLOCKED_SENDER");
    let mut ok = Client::with_keys(&d.relay, d.agent, allowed).await;
    assert_eq!(ok.ask("quick 1").await.text(), "1");
    assert_eq!(ok.ask("quick 2").await.text(), "2");
    let limited = ok.ask("quick 3").await;
    assert_eq!(limited.error_code(), "RATE_LIMIT");
    match limited.terminal {
        Some(Terminal::Error(e)) => assert!(e.retry_after.unwrap_or(0) >= 1, "retry_after given"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_gives_one_cancelled_and_is_a_no_op_after_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let mut c = Client::new(&d.relay, d.agent).await;
    let session = format!("sender:{}", c.me().to_hex());

    let ev = c.prompt_event("sleep 5000", None);
    c.watch(&ev.id);
    c.publish(&ev).await;
    // Wait for streaming to begin, then cancel twice.
    let started = c
        .collect(&ev.id, Duration::from_millis(400), Duration::ZERO)
        .await;
    assert!(started.terminal.is_none());
    c.publish(&c.cancel_event(&ev.id, &session)).await;
    c.publish(&c.cancel_event(&ev.id, &session)).await;
    let run = c
        .collect(&ev.id, Duration::from_secs(3), Duration::from_millis(500))
        .await;
    assert_eq!(run.error_code(), "CANCELLED");
    assert_eq!(run.terminals, 1, "one CANCELLED, no response");

    // A cancel from someone else is ignored.
    let ev = c.prompt_event("sleep 300", None);
    c.watch(&ev.id);
    c.publish(&ev).await;
    let other = Client::new(&d.relay, d.agent).await;
    other.publish(&other.cancel_event(&ev.id, &session)).await;
    let run = c
        .collect(&ev.id, Duration::from_secs(5), Duration::from_millis(200))
        .await;
    assert_eq!(run.text(), "slept 300 ms");

    // After the terminal, a cancel changes nothing.
    c.publish(&c.cancel_event(&ev.id, &session)).await;
    let after = c
        .collect(&ev.id, Duration::from_millis(700), Duration::ZERO)
        .await;
    assert_eq!(after.terminals, 0);

    // A queued run cancelled before it starts ends CANCELLED, and the session goes on.
    let first = c.prompt_event("sleep 500", None);
    let second = c.prompt_event("quick never", None);
    c.watch(&first.id);
    c.watch(&second.id);
    c.publish(&first).await;
    c.publish(&second).await;
    c.publish(&c.cancel_event(&second.id, &session)).await;
    let second_run = c
        .collect(
            &second.id,
            Duration::from_secs(3),
            Duration::from_millis(200),
        )
        .await;
    assert_eq!(second_run.error_code(), "CANCELLED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_of_one_session_queue_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let mut c = Client::new(&d.relay, d.agent).await;
    // Slow enough that the other session's run ends first even on a loaded machine.
    let slow = c.prompt_event("sleep 3000", Some("session:q"));
    let fast = c.prompt_event("quick after", Some("session:q"));
    let other = c.prompt_event("quick other", Some("session:other"));
    for e in [&slow, &fast, &other] {
        c.watch(&e.id);
    }
    for e in [&slow, &fast, &other] {
        c.publish(e).await;
    }
    let mut ends = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while ends.len() < 3 {
        let m = match tokio::time::timeout_at(deadline, c.rx.recv()).await {
            Ok(Some(m)) => m,
            _ => break,
        };
        let agentwire_nostr::relay_conn::Incoming::Event { event, .. } = m else {
            continue;
        };
        if kinds::TERMINAL_KINDS.contains(&event.kind.as_u16()) {
            ends.push(
                tags::run_event_tags(&Message::signed(*event), &c.me())
                    .unwrap()
                    .root
                    .unwrap(),
            );
        }
    }
    assert_eq!(ends.len(), 3);
    let pos = |id| ends.iter().position(|e| *e == id).unwrap();
    assert!(pos(slow.id) < pos(fast.id), "a session's runs end in order");
    assert!(
        pos(other.id) < pos(slow.id),
        "another session does not wait"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_with_too_many_waiting_runs_gets_session_limit() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let mut c = Client::new(&d.relay, d.agent).await;
    // Long enough to outlast the publishes below even on a loaded machine.
    let first = c.prompt_event("sleep 8000", Some("busy"));
    c.watch(&first.id);
    c.publish(&first).await;
    // The first run is running; this many more can wait behind it.
    let limit = agentwire_core::MAX_QUEUED_TURNS_PER_CONVERSATION;
    let mut queued = Vec::new();
    for i in 0..limit {
        let ev = c.prompt_event(&format!("quick {i}"), Some("busy"));
        c.publish(&ev).await;
        queued.push(ev);
    }
    let over = c.prompt_event("quick one too many", Some("busy"));
    let run = c.send_and_collect(over).await;
    assert_eq!(run.error_code(), "SESSION_LIMIT");
    // Another session of the same sender is not affected.
    let ev = c.prompt_event("quick elsewhere", Some("calm"));
    let run = c.send_and_collect(ev).await;
    assert_eq!(run.text(), "elsewhere");
    // And every queued run still gets its answer, in order.
    let last = queued.last().unwrap();
    c.watch(&last.id);
    let run = c
        .collect(&last.id, Duration::from_secs(30), Duration::ZERO)
        .await;
    assert_eq!(run.text(), format!("{}", limit - 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_or_undecryptable_cancels_are_ignored_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let mut c = Client::new(&d.relay, d.agent).await;
    let session = format!("sender:{}", c.me().to_hex());
    let ev = c.prompt_event("sleep 800", None);
    c.watch(&ev.id);
    c.publish(&ev).await;
    let started = c
        .collect(&ev.id, Duration::from_millis(300), Duration::ZERO)
        .await;
    assert!(started.terminal.is_none());
    let build = |content: String, tags: Vec<Tag>| {
        c.crypto.sign(
            nostr::prelude::EventBuilder::new(nostr::prelude::Kind::Custom(kinds::CANCEL), content)
                .tags(tags),
        )
    };
    let good_payload = c
        .crypto
        .encrypt(&d.agent, r#"{"ver":1,"reason":"user_cancel"}"#)
        .unwrap();
    // No `e` root tag.
    let no_root = build(
        good_payload.clone(),
        vec![
            Tag::public_key(d.agent),
            Tag::custom("encryption", ["nip44"]),
        ],
    );
    // Encrypted for someone else: does not decrypt.
    let stranger = Keys::generate().public_key();
    let not_for_us = build(
        c.crypto.encrypt(&stranger, r#"{"ver":1}"#).unwrap(),
        tags::run(&d.agent, &ev.id, &session),
    );
    // Decrypts, but the payload is not a cancel.
    let bad_payload = build(
        c.crypto.encrypt(&d.agent, "not json").unwrap(),
        tags::run(&d.agent, &ev.id, &session),
    );
    // Plain text instead of NIP-44.
    let plain = build(r#"{"ver":1}"#.into(), tags::run(&d.agent, &ev.id, &session));
    for bad in [&no_root, &not_for_us, &bad_payload, &plain] {
        c.publish(bad).await;
    }
    let run = c
        .collect(&ev.id, Duration::from_secs(5), Duration::from_millis(200))
        .await;
    assert_eq!(run.text(), "slept 800 ms");
    assert_eq!(run.terminals, 1);
}

/// Prompts from throwaway keys the allow list does not know: the refusals answered (journaled, and signed
/// and stored as error events) stay within the refusal budget however many keys there are, and the listed
/// sender is served all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_of_unlisted_senders_stay_within_one_budget() {
    use agentwire_nostr::nipxx::policy::{REFUSALS_PER_SECOND, REFUSAL_BURST};
    use nostr::prelude::{EventBuilder, Kind};
    const STRANGERS: usize = 600;
    let dir = tempfile::tempdir().unwrap();
    let listed = Keys::generate();
    let d = Daemon::start(dir.path(), &["--allow", &listed.public_key().to_hex()]);
    // Four connections, each within the relay's own per-connection rate.
    let mut publishers = Vec::new();
    for _ in 0..4 {
        publishers.push(Client::new(&d.relay, d.agent).await);
    }
    let started = std::time::Instant::now();
    for n in 0..STRANGERS {
        let publisher = &publishers[n % publishers.len()];
        let stranger = agentwire_nostr::crypto::Crypto::new(Keys::generate());
        let prompt = stranger.sign(
            EventBuilder::new(Kind::Custom(kinds::PROMPT), "not even encrypted")
                .tags(tags::prompt(&d.agent, None)),
        );
        publisher.publish(&prompt).await;
    }
    let mut ok = Client::with_keys(&d.relay, d.agent, listed).await;
    assert_eq!(ok.ask("quick still served").await.text(), "still served");
    let elapsed = started.elapsed().as_secs_f64().ceil();
    let journal = rusqlite::Connection::open(dir.path().join("journal.sqlite")).unwrap();
    let refused: i64 = journal
        .query_row(
            "SELECT COUNT(*) FROM turns WHERE outcome LIKE '%UNAUTHORIZED%' OR outcome LIKE '%unauthorized%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let bound = REFUSAL_BURST + REFUSALS_PER_SECOND * (elapsed + 1.0);
    assert!(refused > 0, "some strangers are told why");
    assert!(
        (refused as f64) <= bound && (refused as usize) < STRANGERS,
        "{refused} refusals journaled for {STRANGERS} strangers in {elapsed} s (bound {bound})"
    );
}
