//! The operator's agent never loses live events for being slow: over real sockets, publishers wait for
//! an exempt connection that falls behind, each event reaches it exactly once (also across the moment it
//! becomes exempt), and a stuck one is given up after `EXEMPT_QUEUE_TIMEOUT` the old way.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentwire_relay::limits::EXEMPT_QUEUE_TIMEOUT;
use agentwire_relay::RelayLimits;
use common::{signed, Client, TestRelay};
use nostr::event::{Event, EventId, Tag};
use nostr::filter::Filter;
use nostr::key::Keys;
use nostr::message::RelayMessage;

/// Publishing connections of each test.
const PUBLISHERS: usize = 4;

async fn relay_for(operator: &Keys) -> TestRelay {
    let operator = operator.public_key();
    TestRelay::with_config(|c| {
        c.unlimited_authors.insert(operator);
        // The bursts come from ordinary keys; their rate is not what these tests are about.
        c.limits = RelayLimits {
            max_events_per_second_per_connection: 0,
            ..RelayLimits::default()
        };
    })
    .await
}

/// `count` events tagged `t=flood`, stored (kind 1) and ephemeral (kind 20001) in turn, with `size` bytes
/// of content, split among the publishers.
fn burst(count: usize, size: usize) -> Vec<Vec<Event>> {
    let content = "f".repeat(size);
    let mut shares = vec![Vec::new(); PUBLISHERS];
    for i in 0..count {
        let keys = Keys::generate();
        let kind = if i % 2 == 0 { 1 } else { 20001 };
        shares[i % PUBLISHERS].push(signed(&keys, kind, &content, vec![Tag::hashtag("flood")]));
    }
    shares
}

/// Publishes every share on its own connection, one event at a time; counts the OKs in `acked`.
fn publish_all(
    relay: &TestRelay,
    shares: Vec<Vec<Event>>,
    acked: Arc<AtomicUsize>,
) -> Vec<tokio::task::JoinHandle<()>> {
    shares
        .into_iter()
        .map(|share| {
            let url = relay.url();
            let acked = Arc::clone(&acked);
            tokio::spawn(async move {
                let mut publisher = Client::connect(&url).await;
                for event in share {
                    let (ok, message) = publisher.publish(&event).await;
                    assert!(ok, "{message}");
                    acked.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect()
}

fn flood() -> Vec<Filter> {
    vec![Filter::new().hashtag("flood")]
}

/// Reads until `want` distinct flood events arrived; fails on a duplicate, a CLOSED or a stall.
async fn read_all(agent: &mut Client, want: usize) -> HashSet<EventId> {
    let mut seen = HashSet::new();
    while seen.len() < want {
        match agent.recv_within(Duration::from_secs(10)).await {
            Some(RelayMessage::Event { event, .. }) => {
                assert!(seen.insert(event.id), "event {} delivered twice", event.id);
            }
            Some(RelayMessage::Ok { status, .. }) => assert!(status),
            Some(other) => panic!("after {} events: {other:?}", seen.len()),
            None => panic!("stalled after {} of {want} events", seen.len()),
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exempt_subscriber_that_falls_behind_loses_nothing_and_publishers_wait() {
    // Far more than the live ring (1,024) and the agent's queue, and more bytes than the sockets buffer.
    const EVENTS: usize = 4000;
    let operator = Keys::generate();
    let relay = relay_for(&operator).await;
    let mut agent = relay.client().await;
    let (ok, _) = agent
        .publish(&signed(&operator, 31340, "ai.info", vec![]))
        .await;
    assert!(ok);
    assert!(agent.query("live", flood()).await.is_empty());

    let shares = burst(EVENTS, 8 * 1024);
    let acked = Arc::new(AtomicUsize::new(0));
    let publishers = publish_all(&relay, shares, Arc::clone(&acked));
    // The agent reads nothing for a while (less than EXEMPT_QUEUE_TIMEOUT): the publishers are held back.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let held = acked.load(Ordering::Relaxed);
    assert!(
        held < EVENTS,
        "the publishers were not held back by the agent"
    );

    let seen = read_all(&mut agent, EVENTS).await;
    assert_eq!(seen.len(), EVENTS);
    for p in publishers {
        p.await.unwrap();
    }
    agent.expect_silence(Duration::from_millis(300)).await;

    // The agent's own events reach its own subscription once each, without it waiting on itself.
    let own: Vec<Event> = (0..50)
        .map(|i| {
            signed(
                &operator,
                1,
                &format!("own {i}"),
                vec![Tag::hashtag("flood")],
            )
        })
        .collect();
    for e in &own {
        agent.send_event(e).await;
    }
    let mut events = HashSet::new();
    let mut oks = 0;
    while events.len() < own.len() || oks < own.len() {
        match agent.recv().await {
            RelayMessage::Event { event, .. } => assert!(events.insert(event.id)),
            RelayMessage::Ok { status, .. } => {
                assert!(status);
                oks += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(events, own.iter().map(|e| e.id).collect());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn becoming_exempt_in_the_middle_of_a_burst_delivers_each_event_once() {
    const EVENTS: usize = 3000;
    let operator = Keys::generate();
    let relay = relay_for(&operator).await;
    let mut agent = relay.client().await;
    assert!(agent.query("live", flood()).await.is_empty());

    let shares = burst(EVENTS, 64);
    let acked = Arc::new(AtomicUsize::new(0));
    let publishers = publish_all(&relay, shares, Arc::clone(&acked));
    let mut seen = HashSet::new();
    let mut proved = false;
    while seen.len() < EVENTS {
        if !proved && acked.load(Ordering::Relaxed) >= EVENTS / 3 {
            // Proves it is the operator's while live events stream in.
            agent
                .send_event(&signed(&operator, 31340, "ai.info", vec![]))
                .await;
            proved = true;
        }
        match agent.recv_within(Duration::from_secs(10)).await {
            Some(RelayMessage::Event { event, .. }) => {
                assert!(seen.insert(event.id), "event {} delivered twice", event.id);
            }
            Some(RelayMessage::Ok { status, .. }) => assert!(status),
            Some(other) => panic!("after {} events: {other:?}", seen.len()),
            None => panic!("stalled after {} of {EVENTS} events", seen.len()),
        }
    }
    assert!(proved, "the agent became exempt during the burst");
    for p in publishers {
        p.await.unwrap();
    }
    agent.expect_silence(Duration::from_millis(300)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_exempt_subscriber_is_given_up_after_the_timeout() {
    const EVENTS: usize = 4000;
    let operator = Keys::generate();
    let relay = relay_for(&operator).await;
    let mut agent = relay.client().await;
    let (ok, _) = agent
        .publish(&signed(&operator, 31340, "ai.info", vec![]))
        .await;
    assert!(ok);
    assert!(agent.query("live", flood()).await.is_empty());

    // The agent reads nothing at all while the burst is published.
    let started = Instant::now();
    let acked = Arc::new(AtomicUsize::new(0));
    let publishers = publish_all(&relay, burst(EVENTS, 8 * 1024), Arc::clone(&acked));
    for p in publishers {
        tokio::time::timeout(Duration::from_secs(30), p)
            .await
            .expect("publishers are held for a bounded time only")
            .unwrap();
    }
    let took = started.elapsed();
    assert!(
        took >= EXEMPT_QUEUE_TIMEOUT - Duration::from_millis(500),
        "the publishers waited for the agent first ({took:?})"
    );

    // Then it reads: what was queued, then its subscription is closed as too slow, the old way.
    let mut events = 0;
    let message = loop {
        match agent.recv().await {
            RelayMessage::Event { .. } => events += 1,
            RelayMessage::Closed { message, .. } => break message.into_owned(),
            other => panic!("{other:?}"),
        }
    };
    assert!(message.starts_with("error: too slow"), "{message}");
    assert!(events < EVENTS, "some events were given up");
    // The connection itself still works.
    let (ok, _) = agent.publish(&signed(&operator, 1, "alive", vec![])).await;
    assert!(ok);
}
