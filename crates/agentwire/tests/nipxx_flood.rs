//! The agent never goes deaf: a burst of thousands of prompts addressed to the agent, far more than the
//! embedded relay's live fan-out ring holds, and the agent still answers the real prompts sent inside and after
//! the burst. End to end against the real daemon on a loopback port.

mod common;

use agentwire_nostr::crypto::Crypto;
use agentwire_nostr::nipxx::{kinds, tags, PromptPayload};
use agentwire_nostr::relay_conn::RelayConn;
use common::{Client, Daemon};
use futures_util::StreamExt;
use nostr::prelude::{Event, EventBuilder, Keys, Kind, PublicKey};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Prompts in the burst: almost five times the relay's live ring (1,024), and more than its group-commit batch.
const FLOOD: usize = 5_000;
/// Throwaway senders of the burst: 20 prompts each stays under the agent's default per-sender burst (100), so
/// every flood prompt is a real run and none is refused by the sender policy.
const FLOOD_SENDERS: usize = 250;
/// Connections the burst is published on.
const FLOOD_CONNECTIONS: usize = 8;
/// Publishes in flight per flood connection: a pipelining client, not one waiting for each OK.
const FLOOD_WINDOW: usize = 128;
/// Real prompts sent while the burst is being published, at even steps of it.
const INSIDE: usize = 3;
/// The whole burst must be acknowledged by the relay within this.
const FLOOD_DEADLINE: Duration = Duration::from_secs(40);
/// How long the prompt sent after the burst may take to be answered ("within a few seconds").
const ANSWER_AFTER_BURST: Duration = Duration::from_secs(10);
/// How long each prompt sent inside the burst may still take once the burst is over.
const ANSWER_INSIDE_BURST: Duration = Duration::from_secs(10);

/// The relay's per-connection event rate (200/s by default) is turned off so the burst arrives as a burst.
const CONFIG: &str = "[relay.limits]\nmax_events_per_second_per_connection = 0\n";

fn flood_events(agent: &PublicKey) -> Vec<Event> {
    let per_sender = FLOOD / FLOOD_SENDERS;
    let mut events = Vec::with_capacity(FLOOD);
    for s in 0..FLOOD_SENDERS {
        let crypto = Crypto::new(Keys::generate());
        for i in 0..per_sender {
            let payload = PromptPayload::new(format!("quick flood {s}-{i}")).to_json();
            let content = crypto.encrypt(agent, &payload).unwrap();
            events.push(
                crypto.sign(
                    EventBuilder::new(Kind::Custom(kinds::PROMPT), content)
                        .tags(tags::prompt(agent, None)),
                ),
            );
        }
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_prompts_does_not_make_the_agent_deaf() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("flood.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let data = dir.path().join("data");
    let d = Daemon::start(&data, &["--config", config.to_str().unwrap()]);
    let mut real = Client::new(&d.relay, d.agent).await;
    assert_eq!(real.ask("quick before").await.text(), "before", "serving");

    let flood = flood_events(&d.agent);
    let acknowledged = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut publishers = Vec::new();
    for (i, chunk) in flood.chunks(FLOOD.div_ceil(FLOOD_CONNECTIONS)).enumerate() {
        let (conn, _rx) = RelayConn::connect(&d.relay);
        assert!(
            conn.wait_connected(Duration::from_secs(5)).await,
            "flood connection {i} up"
        );
        let chunk = chunk.to_vec();
        let acknowledged = acknowledged.clone();
        publishers.push(tokio::spawn(async move {
            // `_rx` lives as long as the connection so the relay's answers have somewhere to go.
            let _rx = _rx;
            futures_util::stream::iter(chunk)
                .map(|ev| {
                    let conn = conn.clone();
                    async move { conn.publish(&ev).await }
                })
                .buffer_unordered(FLOOD_WINDOW)
                .for_each(|ok| {
                    if ok.is_ok_and(|ok| ok.accepted) {
                        acknowledged.fetch_add(1, Ordering::Relaxed);
                    }
                    async {}
                })
                .await;
        }));
    }

    // Real prompts inside the burst, at even steps of what the relay has acknowledged so far.
    let mut inside = Vec::new();
    for step in 1..=INSIDE {
        let mark = FLOOD * step / (INSIDE + 1);
        while acknowledged.load(Ordering::Relaxed) < mark {
            assert!(
                started.elapsed() < FLOOD_DEADLINE,
                "the relay acknowledged only {} of {FLOOD} flood prompts in {FLOOD_DEADLINE:?}",
                acknowledged.load(Ordering::Relaxed)
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let ev = real.prompt_event(&format!("quick inside {step}"), None);
        real.watch(&ev.id);
        real.publish(&ev).await;
        inside.push((step, ev.id));
    }
    for p in publishers {
        let left = FLOOD_DEADLINE.saturating_sub(started.elapsed());
        tokio::time::timeout(left, p)
            .await
            .expect("the burst is published in time")
            .unwrap();
    }
    let burst = started.elapsed();
    let acked = acknowledged.load(Ordering::Relaxed);
    assert!(
        acked >= FLOOD * 9 / 10,
        "the relay accepted only {acked} of {FLOOD} flood prompts"
    );

    // A real prompt after the burst is answered within a few seconds.
    let after = real.prompt_event("quick after", None);
    real.watch(&after.id);
    real.publish(&after).await;
    let run = real
        .collect(&after.id, ANSWER_AFTER_BURST, Duration::from_millis(100))
        .await;
    assert!(
        run.terminal.is_some(),
        "the prompt sent after a burst of {FLOOD} ({acked} acknowledged in {burst:?}) was not answered \
         within {ANSWER_AFTER_BURST:?}: the agent went deaf"
    );
    assert_eq!(run.text(), "after");

    // And so are the prompts sent inside the burst.
    for (step, id) in inside {
        let run = real
            .collect(&id, ANSWER_INSIDE_BURST, Duration::from_millis(100))
            .await;
        assert!(
            run.terminal.is_some(),
            "the prompt sent inside the burst (step {step} of {INSIDE}) was not answered"
        );
        assert_eq!(run.text(), format!("inside {step}"));
    }
}
