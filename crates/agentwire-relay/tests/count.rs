//! NIP-45 COUNT over a real relay connection.

mod common;

use common::{signed, TestRelay};
use nostr::event::Kind;
use nostr::filter::Filter;
use nostr::key::Keys;
use nostr::message::{ClientMessage, RelayMessage, SubscriptionId};

async fn count(c: &mut common::Client, sub: &str, filter: Filter) -> RelayMessage<'static> {
    c.send(ClientMessage::count(SubscriptionId::new(sub), filter))
        .await;
    c.recv().await
}

fn n(m: RelayMessage<'_>) -> usize {
    match m {
        RelayMessage::Count { count, .. } => count,
        other => panic!("expected a COUNT, got {other:?}"),
    }
}

#[tokio::test]
async fn count_answers_how_many_stored_events_match_ignoring_limit() {
    let relay = TestRelay::start().await;
    let mut c = relay.client().await;
    let (a, b) = (Keys::generate(), Keys::generate());
    for (i, (keys, kind)) in [(&a, 1), (&a, 1), (&a, 1), (&b, 1), (&b, 1), (&a, 7)]
        .into_iter()
        .enumerate()
    {
        let e = signed(keys, kind, &format!("note {i}"), vec![]);
        assert_eq!(c.publish(&e).await, (true, String::new()));
    }
    let notes = Filter::new().kind(Kind::from_u16(1));
    assert_eq!(n(count(&mut c, "c1", notes.clone()).await), 5);
    assert_eq!(n(count(&mut c, "c2", notes.clone().limit(1)).await), 5);
    assert_eq!(
        n(count(&mut c, "c3", Filter::new().author(a.public_key())).await),
        4
    );
    assert_eq!(
        n(count(&mut c, "c4", Filter::new().kind(Kind::from_u16(30))).await),
        0
    );
    // The answer names its COUNT; a COUNT opens no subscription, so nothing follows it.
    match count(&mut c, "mine", notes).await {
        RelayMessage::Count {
            subscription_id, ..
        } => assert_eq!(subscription_id.as_str(), "mine"),
        other => panic!("{other:?}"),
    }
    c.expect_silence(std::time::Duration::from_millis(200))
        .await;
    relay.handle.shutdown().await;
}

#[tokio::test]
async fn a_bad_count_is_closed_with_a_reason() {
    let relay = TestRelay::start().await;
    let mut c = relay.client().await;
    let long = "x".repeat(200);
    match count(&mut c, &long, Filter::new()).await {
        RelayMessage::Closed { message, .. } => {
            assert!(message.starts_with("invalid:"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    relay.handle.shutdown().await;
}
