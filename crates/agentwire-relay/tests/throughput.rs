//! Group commit under load: one pipelining publisher, every `OK` after commit, nothing lost.

mod common;

use std::time::Instant;

use agentwire_relay::store::EventStore;
use common::{signed, TestRelay};
use futures_util::{SinkExt, StreamExt};
use nostr::filter::Filter;
use nostr::key::Keys;
use nostr::message::{ClientMessage, RelayMessage};
use nostr::types::Timestamp;
use tokio_tungstenite::tungstenite::Message;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_publisher_gets_every_ok_and_every_event_is_stored() {
    const EVENTS: usize = 3000;
    let operator = Keys::generate();
    let relay = TestRelay::with_config(|c| {
        c.unlimited_authors.insert(operator.public_key());
    })
    .await;
    // Signing is the publisher's cost, not the relay's: do it before the clock starts.
    let frames: Vec<String> = (0..EVENTS)
        .map(|i| {
            let kind = [25802, 25803, 1][i % 3];
            ClientMessage::event(signed(&operator, kind, &format!("event {i}"), vec![])).as_json()
        })
        .collect();
    let mut client = relay.client().await;
    // The operator's connection (NIP-42) is not rate limited.
    assert!(client.authenticate(&operator, &relay.url()).await.0);
    let (mut sink, mut stream) = client.ws.split();

    let started = Instant::now();
    let sender = tokio::spawn(async move {
        for frame in frames {
            sink.feed(Message::text(frame)).await.unwrap();
        }
        sink.flush().await.unwrap();
        sink
    });
    let mut accepted = 0;
    while accepted < EVENTS {
        let Some(Ok(Message::Text(text))) = stream.next().await else {
            panic!("connection ended after {accepted} OKs");
        };
        match RelayMessage::from_json(text.as_str()).unwrap() {
            RelayMessage::Ok { status: true, .. } => accepted += 1,
            RelayMessage::Auth { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    let elapsed = started.elapsed();
    eprintln!(
        "{EVENTS} events stored and acknowledged in {elapsed:?}: {:.0} events/s",
        EVENTS as f64 / elapsed.as_secs_f64()
    );
    drop(sender.await.unwrap());
    let db = relay.db_path();
    relay.handle.shutdown().await;

    // Every acknowledged event is in the database.
    let store = EventStore::open(&db).unwrap();
    assert_eq!(store.count().unwrap(), EVENTS as u64);
    let all = store.query(&[Filter::new()], Timestamp::now()).unwrap();
    assert_eq!(all.len(), EVENTS);
}
