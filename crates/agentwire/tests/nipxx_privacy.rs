//! The privacy-first profile end to end: gift-wrapped (NIP-59) prompts and cancels in, gift-wrapped run
//! events out, through the real daemon and its embedded relay.

mod common;

use agentwire_nostr::nip59;
use agentwire_nostr::nipxx::{kinds, tags};
use common::{Client, Daemon};
use nostr::prelude::{EventBuilder, EventId, Kind};
use std::time::Duration;

fn wrapped_cancel(c: &Client, prompt: &EventId, session: &str) -> nostr::prelude::Event {
    let content = c
        .crypto
        .encrypt(&c.agent, r#"{"ver":1,"reason":"user_cancel"}"#)
        .unwrap();
    let rumor = nip59::rumor(
        &c.crypto,
        EventBuilder::new(Kind::Custom(kinds::CANCEL), content)
            .tags(tags::run(&c.agent, prompt, session)),
    );
    nip59::wrap(&c.crypto, &c.agent, rumor).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrapped_prompts_are_answered_wrapped_and_disclose_nothing_to_the_relay() {
    let dir = tempfile::tempdir().unwrap();
    // The default profile takes gift-wrapped prompts too.
    let d = Daemon::start(dir.path(), &[]);
    let mut c = Client::new(&d.relay, d.agent).await;
    c.watch_wraps();

    // ai.info announces the profile.
    let (info_conn, mut info_rx) = agentwire_nostr::client::connect(&d.relay).await.unwrap();
    let info = agentwire_nostr::client::info(&info_conn, &mut info_rx, &d.agent)
        .await
        .unwrap()
        .expect("ai.info");
    let v: serde_json::Value = serde_json::from_str(&info.content).unwrap();
    assert_eq!(v["supports_nip59"], true);
    let most = agentwire_nostr::nipxx::mapping::MAX_RESPONSE_BYTES_NIP59;
    assert_eq!(v["max_response_bytes_nip59"], most);
    assert_eq!(
        v["max_response_bytes"],
        agentwire_nostr::nipxx::mapping::MAX_RESPONSE_BYTES
    );

    let (id, gift) = c.wrapped_prompt("calc 2+3", Some("private"));
    c.publish(&gift).await;
    let run = c
        .collect(&id, Duration::from_secs(10), Duration::from_millis(300))
        .await;
    assert_eq!(run.text(), "5");
    assert_eq!(run.terminals, 1);
    // On the wire: only gift wraps, from one-time keys, naming only the client.
    assert!(!run.raw.is_empty());
    for raw in &run.raw {
        assert_eq!(raw.kind.as_u16(), kinds::GIFT_WRAP);
        assert_ne!(raw.pubkey, d.agent, "a wrap is not signed by the agent");
        let names: Vec<_> = raw.tags.iter().map(|t| t.kind().to_string()).collect();
        assert_eq!(names, vec!["p"], "a wrap carries only the receiver");
    }
    // Inside: ordinary NIP-XX events of this run, from the agent, in the prompt's session.
    for (m, _) in &run.events {
        assert_eq!(m.author, d.agent);
        assert!(m.wrapped);
        let t = tags::run_event_tags(m, &c.me()).unwrap();
        assert_eq!((t.root, t.session.as_str()), (Some(id), "private"));
    }
    // Minimal disclosure: tool telemetry names the tool but not its arguments or output.
    let tools: Vec<serde_json::Value> = run
        .events
        .iter()
        .filter(|(m, _)| m.kind == kinds::TOOL_CALL)
        .map(|(_, p)| serde_json::from_str(p).unwrap())
        .collect();
    assert_eq!(tools.len(), 2, "start and result");
    for t in &tools {
        assert_eq!(t["name"], "calculator");
        assert!(
            t.get("arguments").is_none() && t.get("output").is_none(),
            "{t}"
        );
    }

    // Plain text streams in at least two wrapped deltas.
    let (id2, gift2) = c.wrapped_prompt("hello there", None);
    c.publish(&gift2).await;
    let first = c
        .collect(&id2, Duration::from_secs(10), Duration::from_millis(300))
        .await;
    assert_eq!(first.text(), "You said: hello there");
    let deltas = first.deltas().len();
    assert!(deltas >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewrapped_resend_is_not_run_again_and_a_wrapped_cancel_ends_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &["--nip59"]);
    let mut c = Client::new(&d.relay, d.agent).await;
    c.watch_wraps();

    // One rumor, wrapped twice: a resend.
    let p = agentwire_nostr::nipxx::PromptPayload::new("hello again");
    let content = c.crypto.encrypt(&c.agent, &p.to_json()).unwrap();
    let rumor = nip59::rumor(
        &c.crypto,
        EventBuilder::new(Kind::Custom(kinds::PROMPT), content).tags(tags::prompt(&c.agent, None)),
    );
    let id = rumor.id.unwrap();
    let first = nip59::wrap(&c.crypto, &c.agent, rumor.clone()).unwrap();
    let second = nip59::wrap(&c.crypto, &c.agent, rumor).unwrap();
    assert_ne!(first.id, second.id);
    c.publish(&first).await;
    let run = c
        .collect(&id, Duration::from_secs(10), Duration::from_millis(300))
        .await;
    assert_eq!(run.text(), "You said: hello again");
    c.publish(&second).await;
    let after = c
        .collect(&id, Duration::from_millis(1000), Duration::ZERO)
        .await;
    assert!(
        after.events.iter().all(|(m, _)| m.kind != kinds::DELTA),
        "the resend did not stream the run again"
    );

    // A wrapped cancel stops a wrapped run with one CANCELLED.
    let (id, gift) = c.wrapped_prompt("sleep 5000", None);
    c.publish(&gift).await;
    let started = c
        .collect(&id, Duration::from_millis(400), Duration::ZERO)
        .await;
    assert!(started.terminal.is_none());
    let session = format!("sender:{}", c.me().to_hex());
    c.publish(&wrapped_cancel(&c, &id, &session)).await;
    let run = c
        .collect(&id, Duration::from_secs(3), Duration::from_millis(500))
        .await;
    assert_eq!(run.error_code(), "CANCELLED");
    assert_eq!(run.terminals, 1);

    // The largest wrapped answer ai.info promises goes whole; a larger one is cut to fit a seal, and says so.
    let most = agentwire_nostr::nipxx::mapping::MAX_RESPONSE_BYTES_NIP59;
    for (n, whole) in [(most, true), (40_000, false)] {
        let (id, gift) = c.wrapped_prompt(&format!("big {n}"), None);
        c.publish(&gift).await;
        let run = c
            .collect(&id, Duration::from_secs(10), Duration::from_millis(300))
            .await;
        assert_eq!(run.terminals, 1);
        let text = run.text();
        match whole {
            true => assert_eq!(text.len(), n),
            false => {
                assert!(text.starts_with("abcdefghij"), "{}", &text[..40]);
                assert!(
                    text.ends_with("[cut: the whole answer is 40000 bytes, more than one NIP-XX response carries (max_response_bytes in the agent's ai.info)]"),
                    "{}",
                    &text[text.len() - 200..]
                );
                assert!((most..n).contains(&text.len()), "{}", text.len());
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_run_is_answered_in_its_prompts_form_and_privacy_first_refuses_plain_prompts() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let mut c = Client::new(&d.relay, d.agent).await;
    c.watch_wraps();
    let plain = c.ask("quick in the open").await;
    assert_eq!(plain.text(), "in the open");
    assert!(plain
        .raw
        .iter()
        .all(|e| e.kind.as_u16() != kinds::GIFT_WRAP));
    let (id, gift) = c.wrapped_prompt("quick wrapped", None);
    c.publish(&gift).await;
    let wrapped = c
        .collect(&id, Duration::from_secs(10), Duration::from_millis(300))
        .await;
    assert_eq!(wrapped.text(), "wrapped");
    assert!(wrapped
        .raw
        .iter()
        .all(|e| e.kind.as_u16() == kinds::GIFT_WRAP));
    drop(d);

    // --nip59, privacy-first: a plain prompt is refused, a wrapped one served.
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &["--nip59"]);
    let mut c = Client::new(&d.relay, d.agent).await;
    c.watch_wraps();
    let refused = c.ask("quick in the open").await;
    assert_eq!(refused.error_code(), "UNSUPPORTED_FEATURE");
    let (id, gift) = c.wrapped_prompt("quick wrapped", None);
    c.publish(&gift).await;
    let run = c
        .collect(&id, Duration::from_secs(10), Duration::from_millis(300))
        .await;
    assert_eq!(run.text(), "wrapped");
}

/// Gift wraps from throwaway keys: valid wraps of valid prompts, each a real sender as far as anyone can
/// tell before opening it.
fn throwaway_wraps(agent: &nostr::prelude::PublicKey, n: usize) -> Vec<nostr::prelude::Event> {
    (0..n)
        .map(|i| {
            let who = agentwire_nostr::crypto::Crypto::new(nostr::prelude::Keys::generate());
            let content = who
                .encrypt(
                    agent,
                    &format!(r#"{{"ver":1,"message":"quick flood {i}"}}"#),
                )
                .unwrap();
            let rumor = nip59::rumor(
                &who,
                nostr::prelude::EventBuilder::new(
                    nostr::prelude::Kind::Custom(kinds::PROMPT),
                    content,
                )
                .tags([
                    nostr::prelude::Tag::public_key(*agent),
                    nostr::prelude::Tag::custom("encryption", ["nip44"]),
                ]),
            );
            nip59::wrap(&who, agent, rumor).unwrap()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_gift_wraps_does_not_starve_real_prompts() {
    use agentwire_nostr::nipxx::budget::{UNWRAPS_PER_SECOND_PER_RELAY, UNWRAP_BURST_PER_RELAY};
    const FLOOD: usize = 3000;
    const FLOODERS: usize = 20;
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let mut c = Client::new(&d.relay, d.agent).await;
    c.watch_wraps();
    let wraps = throwaway_wraps(&d.agent, FLOOD);
    // The budget counts from before the first wrap can arrive.
    let flood_began = std::time::Instant::now();
    // Many connections, each within the relay's per-connection event rate.
    let mut flooders = Vec::new();
    for chunk in wraps.chunks(FLOOD / FLOODERS) {
        let (conn, _rx) = agentwire_nostr::relay_conn::RelayConn::connect(&d.relay);
        assert!(conn.wait_connected(Duration::from_secs(5)).await);
        let chunk = chunk.to_vec();
        flooders.push(tokio::spawn(async move {
            for ev in chunk {
                conn.send(&ev);
            }
            tokio::time::sleep(Duration::from_secs(3)).await;
            drop(conn);
        }));
    }
    let started = std::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A real prompt in the middle of the flood, plain and wrapped, is answered promptly.
    let real = c.ask("quick real").await;
    assert_eq!(real.text(), "real");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "answered {:?} into the flood",
        started.elapsed()
    );
    for f in flooders {
        f.await.unwrap();
    }
    drop(d);
    // Measured after the daemon stopped, so nothing it opened falls outside the time allowed.
    let elapsed = flood_began.elapsed().as_secs_f64();
    // The agent opened no more wraps than its budget allows (each opened wrap here is a turn).
    let journal = rusqlite::Connection::open(dir.path().join("journal.sqlite")).unwrap();
    let turns: i64 = journal
        .query_row(
            "SELECT COUNT(*) FROM turns WHERE input LIKE '%flood%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let allowed = UNWRAP_BURST_PER_RELAY + UNWRAPS_PER_SECOND_PER_RELAY * elapsed;
    assert!(turns > 0, "some wraps were served");
    assert!(
        (turns as f64) <= allowed,
        "{turns} wraps opened in {elapsed:.1} s; the budget allows {allowed:.0}"
    );
}
