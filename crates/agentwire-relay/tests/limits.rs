//! Every configurable bound, enforced over real sockets, plus slow-subscriber isolation.

mod common;

use std::time::{Duration, Instant};

use agentwire_relay::RelayLimits;
use common::{now, signed, signed_at, Client, TestRelay};
use nostr::event::{Kind, Tag};
use nostr::filter::Filter;
use nostr::key::Keys;
use nostr::message::RelayMessage;
use tokio_tungstenite::tungstenite::Error as WsError;

#[tokio::test]
async fn contradictory_limits_are_refused_at_start() {
    let dir = tempfile::TempDir::new().unwrap();
    let limits = RelayLimits {
        max_message_bytes: 1000,
        max_event_bytes: 2000,
        ..RelayLimits::default()
    };
    let result = agentwire_relay::start(common::config(&dir, limits)).await;
    assert!(matches!(
        result,
        Err(agentwire_relay::RelayError::InvalidLimits(_))
    ));
}

#[tokio::test]
async fn event_too_large() {
    let relay = TestRelay::with_limits(RelayLimits {
        max_event_bytes: 1024,
        ..RelayLimits::default()
    })
    .await;
    let mut client = relay.client().await;
    let keys = Keys::generate();
    assert!(
        client
            .publish(&signed(&keys, 1, &"x".repeat(500), vec![]))
            .await
            .0
    );
    let (ok, message) = client
        .publish(&signed(&keys, 1, &"x".repeat(1024), vec![]))
        .await;
    assert!(
        !ok && message.starts_with("invalid: event too large"),
        "{message}"
    );
}

#[tokio::test]
async fn events_larger_than_the_read_buffer_are_read_whole() {
    // The connection's read buffer is small (READ_BUFFER_BYTES); a message many times its size, up to
    // the default event limit, arrives in many reads and is still stored and returned whole.
    let relay = TestRelay::start().await;
    let mut client = relay.client().await;
    let keys = Keys::generate();
    let content = "z".repeat(agentwire_relay::limits::READ_BUFFER_BYTES * 12);
    let event = signed(&keys, 1, &content, vec![]);
    let (ok, message) = client.publish(&event).await;
    assert!(ok, "{message}");
    let stored = client.query("big", vec![Filter::new().id(event.id)]).await;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].content, content);
}

#[tokio::test]
async fn message_too_large_gets_a_notice_and_a_close() {
    let relay = TestRelay::with_limits(RelayLimits {
        max_message_bytes: 4096,
        max_event_bytes: 2048,
        ..RelayLimits::default()
    })
    .await;
    let mut client = relay.client().await;
    client
        .send_text(format!(r#"["NOTICE","{}"]"#, "y".repeat(10_000)))
        .await;
    let notice = client.expect_notice().await;
    assert!(notice.starts_with("invalid: message too large"), "{notice}");
    assert!(
        client.recv_within(Duration::from_secs(5)).await.is_none(),
        "connection closed"
    );
    // Others are unaffected.
    let mut other = relay.client().await;
    assert!(
        other
            .publish(&signed(&Keys::generate(), 1, "fine", vec![]))
            .await
            .0
    );
}

#[tokio::test]
async fn too_many_subscriptions() {
    let relay = TestRelay::with_limits(RelayLimits {
        max_subscriptions_per_connection: 2,
        ..RelayLimits::default()
    })
    .await;
    let mut client = relay.client().await;
    client.query("a", vec![Filter::new()]).await;
    client.query("b", vec![Filter::new()]).await;
    client.send_req("c", vec![Filter::new()]).await;
    let message = client.expect_closed("c").await;
    assert!(
        message.starts_with("error: too many subscriptions"),
        "{message}"
    );
    // Replacing an open subscription, or one freed by CLOSE, is fine.
    client
        .query("b", vec![Filter::new().kind(Kind::from_u16(1))])
        .await;
    client.send_text(r#"["CLOSE","a"]"#).await;
    client.query("c", vec![Filter::new()]).await;
}

#[tokio::test]
async fn too_many_filters() {
    let relay = TestRelay::with_limits(RelayLimits {
        max_filters_per_req: 2,
        ..RelayLimits::default()
    })
    .await;
    let mut client = relay.client().await;
    client.query("ok", vec![Filter::new(), Filter::new()]).await;
    client.send_req("many", vec![Filter::new(); 3]).await;
    let message = client.expect_closed("many").await;
    assert!(message.starts_with("error: too many filters"), "{message}");
}

#[tokio::test]
async fn subscription_id_length() {
    let relay = TestRelay::start().await;
    let mut client = relay.client().await;
    let longest = "s".repeat(64);
    client.query(&longest, vec![Filter::new()]).await;
    let too_long = "s".repeat(65);
    client.send_req(&too_long, vec![Filter::new()]).await;
    let message = client.expect_closed(&too_long).await;
    assert!(
        message.starts_with("invalid: subscription id is longer"),
        "{message}"
    );
    client.send_req("", vec![Filter::new()]).await;
    assert_eq!(
        client.expect_closed("").await,
        "invalid: subscription id is empty"
    );
}

#[tokio::test]
async fn query_limit_is_capped() {
    let relay = TestRelay::with_limits(RelayLimits {
        max_query_limit: 3,
        ..RelayLimits::default()
    })
    .await;
    let keys = Keys::generate();
    let mut client = relay.client().await;
    let t = now();
    let events: Vec<_> = (0..5)
        .map(|i| signed_at(&keys, 1, &format!("n{i}"), vec![], t - 10 + i))
        .collect();
    for e in &events {
        assert!(client.publish(e).await.0);
    }
    let newest_three: Vec<_> = events.iter().rev().take(3).cloned().collect();
    assert_eq!(
        client.query("none", vec![Filter::new()]).await,
        newest_three
    );
    assert_eq!(
        client.query("big", vec![Filter::new().limit(100)]).await,
        newest_three
    );
    assert_eq!(
        client.query("two", vec![Filter::new().limit(2)]).await,
        newest_three[..2].to_vec()
    );
    assert!(client
        .query("zero", vec![Filter::new().limit(0)])
        .await
        .is_empty());
}

#[tokio::test]
async fn events_per_second_with_unlimited_authors_exempt() {
    let operator = Keys::generate();
    let relay = TestRelay::with_config(|c| {
        c.limits.max_events_per_second_per_connection = 5;
        c.unlimited_authors.insert(operator.public_key());
    })
    .await;
    let mut client = relay.client().await;
    let stranger = Keys::generate();
    for i in 0..5 {
        let (ok, message) = client
            .publish(&signed(&stranger, 1, &format!("{i}"), vec![]))
            .await;
        assert!(ok, "{i}: {message}");
    }
    let (ok, message) = client
        .publish(&signed(&stranger, 1, "one too many", vec![]))
        .await;
    assert!(!ok && message.starts_with("rate-limited:"), "{message}");
    // An event the operator signed exempts nothing by itself: anyone can resend one.
    let (ok, message) = client
        .publish(&signed(&operator, 25801, "resent", vec![]))
        .await;
    assert!(!ok && message.starts_with("rate-limited:"), "{message}");
    // Authenticated as the operator (the AUTH is not held to the spent rate), the connection is the agent's
    // and streams without limit.
    assert_eq!(
        client.authenticate(&operator, &relay.url()).await,
        (true, String::new())
    );
    for i in 0..200 {
        let (ok, message) = client
            .publish(&signed(&operator, 25801, &format!("delta {i}"), vec![]))
            .await;
        assert!(ok, "{i}: {message}");
    }
    // A new connection has its own bucket.
    let mut other = relay.client().await;
    assert!(
        other
            .publish(&signed(&stranger, 1, "elsewhere", vec![]))
            .await
            .0
    );
}

#[tokio::test]
async fn connections_over_the_limit_get_503() {
    let relay = TestRelay::with_limits(RelayLimits {
        max_connections: 2,
        ..RelayLimits::default()
    })
    .await;
    let first = relay.client().await;
    let mut second = relay.client().await;
    match tokio_tungstenite::connect_async(relay.url()).await {
        Err(WsError::Http(response)) => assert_eq!(response.status().as_u16(), 503),
        Err(other) => panic!("expected HTTP 503, got {other}"),
        Ok(_) => panic!("expected HTTP 503, got a connection"),
    }
    assert!(
        second
            .publish(&signed(&Keys::generate(), 1, "still fine", vec![]))
            .await
            .0
    );
    // A freed slot is usable again.
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok((ws, _)) = tokio_tungstenite::connect_async(relay.url()).await {
            let mut third = Client {
                ws,
                challenge: None,
            };
            assert!(
                third
                    .publish(&signed(&Keys::generate(), 1, "third", vec![]))
                    .await
                    .0
            );
            break;
        }
        assert!(Instant::now() < deadline, "slot never freed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_slow_subscriber_loses_its_stream_without_slowing_others() {
    const EVENTS: usize = 1500;
    const SUBS: usize = 10;
    let operator = Keys::generate();
    let relay = TestRelay::with_config(|c| {
        c.unlimited_authors.insert(operator.public_key());
    })
    .await;
    let kind = Kind::from_u16(25801);

    // The slow one subscribes many times to the same events and then reads nothing.
    let mut slow = relay.client().await;
    for i in 0..SUBS {
        slow.query(&format!("slow{i}"), vec![Filter::new().kind(kind)])
            .await;
    }
    // The healthy one reads everything as it comes.
    let mut healthy = relay.client().await;
    healthy.query("h", vec![Filter::new().kind(kind)]).await;
    let reader = tokio::spawn(async move {
        let mut seen = 0;
        while seen < EVENTS {
            match healthy.recv().await {
                RelayMessage::Event { .. } => seen += 1,
                other => panic!("healthy subscriber got {other:?}"),
            }
        }
        seen
    });

    let mut publisher = relay.client().await;
    assert!(publisher.authenticate(&operator, &relay.url()).await.0);
    let content = "d".repeat(4096);
    for i in 0..EVENTS {
        let event = signed(
            &operator,
            25801,
            &content,
            vec![Tag::custom("n", [i.to_string()])],
        );
        let (ok, message) = publisher.publish(&event).await;
        assert!(ok, "{i}: {message}");
    }
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(30), reader)
            .await
            .unwrap()
            .unwrap(),
        EVENTS
    );

    // Now the slow one reads: some events, then every subscription is closed as too slow.
    let mut closed = 0;
    let mut events = 0;
    while closed < SUBS {
        match slow.recv().await {
            RelayMessage::Event { .. } => events += 1,
            RelayMessage::Closed { message, .. } => {
                assert!(message.starts_with("error: too slow"), "{message}");
                closed += 1;
            }
            RelayMessage::Notice(message) => assert!(message.starts_with("error: too slow")),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(events < EVENTS * SUBS, "some live events were dropped");
    // The connection itself still works.
    assert!(
        slow.publish(&signed(&Keys::generate(), 1, "alive", vec![]))
            .await
            .0
    );
}

#[tokio::test]
async fn a_request_head_dripped_in_slowly_is_closed_within_the_head_timeout() {
    use agentwire_relay::limits::HEAD_TIMEOUT;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let relay = TestRelay::start().await;
    let mut slow = tokio::net::TcpStream::connect(relay.addr()).await.unwrap();
    let started = Instant::now();
    // A slowloris: a header line every 200 ms, never the blank line that ends the head.
    let drip = async {
        slow.write_all(b"GET / HTTP/1.1\r\n").await?;
        for i in 0.. {
            tokio::time::sleep(Duration::from_millis(200)).await;
            slow.write_all(format!("X-Drip-{i}: a\r\n").as_bytes())
                .await?;
        }
        Ok::<(), std::io::Error>(())
    };
    // The relay closes it: the writes fail (reset) or the read below sees the end.
    let _ = tokio::time::timeout(HEAD_TIMEOUT + Duration::from_secs(2), drip).await;
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(1), slow.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "still open after {:?}: {read:?}",
        started.elapsed()
    );
    let took = started.elapsed();
    assert!(took < HEAD_TIMEOUT + Duration::from_secs(3), "{took:?}");
    // A prompt client is served meanwhile and after.
    let mut client = relay.client().await;
    assert!(
        client
            .publish(&signed(&Keys::generate(), 1, "fine", vec![]))
            .await
            .0
    );
}

/// A WebSocket connection to `relay` from the local address `from` (any of 127.0.0.0/8 on Linux).
async fn connect_from(
    relay: &TestRelay,
    from: &str,
) -> Result<Client, tokio_tungstenite::tungstenite::Error> {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let stream = socket.connect(relay.addr()).await.unwrap();
    let (ws, _) = tokio_tungstenite::client_async(
        relay.url(),
        tokio_tungstenite::MaybeTlsStream::Plain(stream),
    )
    .await?;
    Ok(Client {
        ws,
        challenge: None,
    })
}

/// Loopback is every local client (and every client of a TLS proxy): one local process holding sockets must
/// not shut the others out while the relay has room, so loopback has no per-address cap; the relay's own cap
/// still holds, and sockets that never subscribe or send anything are closed after the idle timeout, giving
/// their places back. A connection with a subscription open is waiting for events, never idle.
#[tokio::test]
async fn loopback_shares_no_per_address_cap_and_idle_sockets_give_their_places_back() {
    const CAP: usize = 2;
    const MAX: usize = 6;
    const IDLE: Duration = Duration::from_secs(2);
    let relay = TestRelay::with_config(|c| {
        c.limits = RelayLimits {
            max_connections_per_address: CAP,
            max_connections: MAX,
            ..RelayLimits::default()
        };
        c.idle_timeout = IDLE;
    })
    .await;
    let opened = Instant::now();
    let mut hoarded = Vec::new();
    for _ in 0..MAX - 1 {
        hoarded.push(connect_from(&relay, "127.0.0.1").await.unwrap());
    }
    // Past the per-address cap, from the same address: another local client still gets in.
    let mut subscriber = connect_from(&relay, "127.0.0.1").await.unwrap();
    subscriber
        .query("live", vec![Filter::new().kind(Kind::from_u16(1))])
        .await;
    // The relay's own cap holds.
    match connect_from(&relay, "127.0.0.1").await {
        Err(WsError::Http(response)) => assert_eq!(response.status().as_u16(), 503),
        Err(other) => panic!("expected HTTP 503, got {other}"),
        Ok(_) => panic!("expected HTTP 503, got a connection"),
    }
    // The sockets that did nothing are told why and closed once the idle timeout has passed.
    for socket in &mut hoarded {
        let notice = socket.expect_notice().await;
        assert!(
            notice.contains("no subscription and no message"),
            "{notice}"
        );
        assert!(socket.recv_within(Duration::from_secs(2)).await.is_none());
    }
    let took = opened.elapsed();
    assert!(
        took >= IDLE && took < IDLE + Duration::from_secs(3),
        "{took:?}"
    );
    // Their places are back, and the subscriber, idle as long, still has its subscription.
    let mut late = connect_from(&relay, "127.0.0.1").await.unwrap();
    let note = signed(&Keys::generate(), 1, "after the hoard", vec![]);
    assert!(late.publish(&note).await.0);
    match subscriber.recv().await {
        RelayMessage::Event { event, .. } => assert_eq!(event.id, note.id),
        other => panic!("expected the live event, got {other:?}"),
    }
}

/// The idle deadline moves with every message a client sends: a client that spoke halfway through the
/// timeout is closed a whole timeout after it spoke, not at the deadline it had when it connected.
#[tokio::test]
async fn a_client_that_speaks_is_closed_a_whole_idle_timeout_after_its_last_message() {
    const IDLE: Duration = Duration::from_secs(2);
    let relay = TestRelay::with_config(|c| c.idle_timeout = IDLE).await;
    let mut client = connect_from(&relay, "127.0.0.1").await.unwrap();
    tokio::time::sleep(IDLE / 2).await;
    let note = signed(&Keys::generate(), 1, "still here", vec![]);
    assert!(client.publish(&note).await.0);
    let spoke = Instant::now();
    let notice = client.expect_notice().await;
    assert!(
        notice.contains("no subscription and no message"),
        "{notice}"
    );
    let quiet = spoke.elapsed();
    assert!(
        quiet >= IDLE - Duration::from_millis(300) && quiet < IDLE + Duration::from_secs(2),
        "closed {quiet:?} after its last message"
    );
}
