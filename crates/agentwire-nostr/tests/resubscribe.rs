//! `RelayConn` opens a subscription again after the relay closes it and after a reconnect, with a `since`
//! that covers the gap and a backoff between attempts. Against a scripted relay on a loopback port, so the
//! relay's every message is chosen by the test.

use agentwire_nostr::crypto::Crypto;
use agentwire_nostr::relay_conn::{Incoming, RelayConn, CATCH_UP_SLACK, RESUBSCRIBE_INITIAL_DELAY};
use futures_util::{SinkExt, StreamExt};
use nostr::prelude::{
    ClientMessage, EventBuilder, Filter, Keys, Kind, RelayMessage, SubscriptionId, Timestamp,
};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

/// What the scripted relay saw: a client message on its `n`th connection.
type Seen = (usize, ClientMessage<'static>);

/// A relay that reports every client message and sends what the test gives it; `None` drops the connection.
async fn scripted_relay() -> (String, mpsc::Receiver<Seen>, mpsc::Sender<Option<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    let (seen_tx, seen_rx) = mpsc::channel(64);
    let (say_tx, mut say_rx) = mpsc::channel::<Option<String>>(64);
    tokio::spawn(async move {
        for n in 0.. {
            let (stream, _) = listener.accept().await.unwrap();
            let mut ws = tokio_tungstenite::accept_async(stream).await.unwrap();
            loop {
                tokio::select! {
                    say = say_rx.recv() => match say {
                        Some(Some(text)) => ws.send(Message::text(text)).await.unwrap(),
                        Some(None) => break,
                        None => return,
                    },
                    msg = ws.next() => match msg {
                        Some(Ok(Message::Text(t))) => {
                            let m = ClientMessage::from_json(t.as_str()).unwrap();
                            if seen_tx.send((n, m)).await.is_err() {
                                return;
                            }
                        }
                        Some(Ok(_)) => {}
                        _ => break,
                    },
                }
            }
        }
    });
    (url, seen_rx, say_tx)
}

/// The next `REQ` the relay sees, with its connection number, the time it came and each filter's `since`.
async fn next_req(
    seen: &mut mpsc::Receiver<Seen>,
    wait: Duration,
) -> (usize, Instant, Vec<Option<u64>>) {
    loop {
        let (n, m) = tokio::time::timeout(wait, seen.recv())
            .await
            .expect("a REQ in time")
            .expect("relay running");
        if let ClientMessage::Req { filters, .. } = m {
            let sinces = filters
                .iter()
                .map(|f| f.since.map(|s| s.as_secs()))
                .collect();
            return (n, Instant::now(), sinces);
        }
    }
}

#[tokio::test]
async fn a_closed_or_dropped_subscription_is_opened_again_from_where_it_left_off() {
    let (url, mut seen, say) = scripted_relay().await;
    let (conn, mut incoming) = RelayConn::connect(&url);
    assert!(conn.wait_connected(Duration::from_secs(5)).await);
    let origin = Timestamp::now().as_secs() - 3_600;
    conn.subscribe(
        "prompts",
        vec![Filter::new()
            .kind(Kind::Custom(25802))
            .since(Timestamp::from(origin))],
    );
    let (n, _, sinces) = next_req(&mut seen, Duration::from_secs(5)).await;
    assert_eq!(
        (n, sinces),
        (0, vec![Some(origin)]),
        "the owner's filter first"
    );

    // One event delivered, then the relay drops the subscription as too slow.
    let created = Timestamp::now().as_secs() - 600;
    let event = Crypto::new(Keys::generate()).sign(
        EventBuilder::new(Kind::Custom(25802), "x").custom_created_at(Timestamp::from(created)),
    );
    let sub = SubscriptionId::new("prompts");
    say.send(Some(RelayMessage::event(sub.clone(), event).as_json()))
        .await
        .unwrap();
    let closed_at = Instant::now();
    say.send(Some(
        RelayMessage::closed(sub.clone(), "error: too slow: 12 live events were dropped").as_json(),
    ))
    .await
    .unwrap();
    let got: Vec<Incoming> = vec![
        incoming.recv().await.unwrap(),
        incoming.recv().await.unwrap(),
    ];
    assert!(matches!(&got[0], Incoming::Event { sub, .. } if sub == "prompts"));
    assert!(
        matches!(&got[1], Incoming::Closed { sub, message } if sub == "prompts" && message.starts_with("error: too slow")),
        "the owner still hears of the CLOSED"
    );

    // Subscribed again after the backoff, from the event's time less the slack.
    let expected = Some(created - CATCH_UP_SLACK.as_secs());
    let (n, at, sinces) = next_req(&mut seen, Duration::from_secs(5)).await;
    assert_eq!((n, sinces), (0, vec![expected]));
    let waited = at - closed_at;
    assert!(
        waited >= RESUBSCRIBE_INITIAL_DELAY - Duration::from_millis(50),
        "not at once: {waited:?}"
    );

    // Refused again: the next attempt waits twice as long.
    let closed_at = Instant::now();
    say.send(Some(
        RelayMessage::closed(sub.clone(), "restricted: not today").as_json(),
    ))
    .await
    .unwrap();
    let (n, at, sinces) = next_req(&mut seen, Duration::from_secs(5)).await;
    assert_eq!((n, sinces), (0, vec![expected]));
    let waited = at - closed_at;
    assert!(
        waited >= 2 * RESUBSCRIBE_INITIAL_DELAY - Duration::from_millis(50),
        "backoff doubles: {waited:?}"
    );

    // The connection drops: the reconnect opens it again with the same catch-up since.
    say.send(None).await.unwrap();
    let (n, _, sinces) = next_req(&mut seen, Duration::from_secs(5)).await;
    assert_eq!((n, sinces), (1, vec![expected]));

    // Once the owner closes it, a CLOSED from the relay brings no REQ.
    conn.unsubscribe("prompts");
    say.send(Some(
        RelayMessage::closed(sub, "error: shutting down").as_json(),
    ))
    .await
    .unwrap();
    let more = tokio::time::timeout(
        RESUBSCRIBE_INITIAL_DELAY + Duration::from_millis(500),
        next_req(&mut seen, Duration::from_secs(10)),
    )
    .await;
    assert!(more.is_err(), "no REQ for a subscription we closed");
}
