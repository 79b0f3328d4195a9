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
use nostr::message::{ClientMessage, RelayMessage};

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
    assert_eq!(
        agent.authenticate(&operator, &relay.url()).await,
        (true, String::new())
    );
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
    let challenge = agent.challenge.clone().expect("a challenge");
    let auth = common::signed(
        &operator,
        22242,
        "",
        vec![
            Tag::parse(["relay", relay.url().as_str()]).unwrap(),
            Tag::parse(["challenge", challenge.as_str()]).unwrap(),
        ],
    );

    let shares = burst(EVENTS, 64);
    let acked = Arc::new(AtomicUsize::new(0));
    let publishers = publish_all(&relay, shares, Arc::clone(&acked));
    let mut seen = HashSet::new();
    let mut proved = false;
    while seen.len() < EVENTS {
        if !proved && acked.load(Ordering::Relaxed) >= EVENTS / 3 {
            // Proves it is the operator's (NIP-42) while live events stream in.
            agent.send(ClientMessage::auth(auth.clone())).await;
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
    assert_eq!(
        agent.authenticate(&operator, &relay.url()).await,
        (true, String::new())
    );
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

/// Pipelines `count` events of fresh keys on `client` (no waiting for OKs), then counts the OKs that say
/// `rate-limited:`.
async fn rate_limited_of(client: &mut Client, count: usize) -> usize {
    let events: Vec<Event> = (0..count)
        .map(|i| signed(&Keys::generate(), 1, &format!("{i}"), vec![]))
        .collect();
    for e in &events {
        client.send_event(e).await;
    }
    // Refusals are sent at once, acceptances after their commit: the OKs come in any order.
    let mut waiting: HashSet<EventId> = events.iter().map(|e| e.id).collect();
    let mut limited = 0;
    while !waiting.is_empty() {
        if let RelayMessage::Ok {
            event_id,
            status,
            message,
        } = client.recv().await
        {
            if waiting.remove(&event_id) && !status {
                assert!(message.starts_with("rate-limited:"), "{message}");
                limited += 1;
            }
        }
    }
    limited
}

#[tokio::test]
async fn resending_the_agents_event_exempts_nothing_and_authenticating_as_the_agent_does() {
    const RATE: u32 = 50;
    let operator = Keys::generate();
    let relay = TestRelay::with_config(|c| {
        c.unlimited_authors.insert(operator.public_key());
        c.limits.max_events_per_second_per_connection = RATE;
    })
    .await;
    // The agent's public ai.info, as anyone could copy it from the relay.
    let info = signed(&operator, 31340, "ai.info", vec![]);
    let mut agent = relay.client().await;
    assert!(agent.authenticate(&operator, &relay.url()).await.0);
    assert!(agent.publish(&info).await.0);

    let mut copier = relay.client().await;
    let (ok, message) = copier.publish(&info).await;
    assert!(ok, "{message}");
    let limited = rate_limited_of(&mut copier, 6 * RATE as usize).await;
    assert!(limited > 0, "the copier was not rate limited");

    // The agent's own connection (authenticated as its key) is.
    assert_eq!(rate_limited_of(&mut agent, 6 * RATE as usize).await, 0);
    relay.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_resent_the_agents_event_and_stop_reading_hold_up_no_publisher() {
    const EVENTS: usize = 2000;
    const STUCK: usize = 4;
    let operator = Keys::generate();
    let relay = relay_for(&operator).await;
    let info = signed(&operator, 31340, "ai.info", vec![]);
    // Each resends the agent's event, subscribes to the burst, and then reads nothing.
    let mut stuck = Vec::new();
    for _ in 0..STUCK {
        let mut c = relay.client().await;
        assert!(c.publish(&info).await.0);
        assert!(c.query("live", flood()).await.is_empty());
        stuck.push(c);
    }
    let started = Instant::now();
    let acked = Arc::new(AtomicUsize::new(0));
    for p in publish_all(&relay, burst(EVENTS, 8 * 1024), Arc::clone(&acked)) {
        tokio::time::timeout(Duration::from_secs(60), p)
            .await
            .expect("the publishers finish")
            .unwrap();
    }
    let took = started.elapsed();
    // Exempt, each would have held the publishers up to EXEMPT_QUEUE_TIMEOUT in turn (4 x 5 s).
    assert!(
        took < EXEMPT_QUEUE_TIMEOUT * 2,
        "the publishers waited for connections that only carried the agent's event ({took:?})"
    );
    drop(stuck);
    relay.handle.shutdown().await;
}
