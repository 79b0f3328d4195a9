//! End-to-end NIP-01/11/40 behaviour over real sockets on 127.0.0.1.

mod common;

use std::time::Duration;

use futures_util::SinkExt;

use common::{now, signed, signed_at, Client, TestRelay};
use nostr::event::{Kind, Tag};
use nostr::filter::{Filter, SingleLetterTag};
use nostr::key::Keys;
use nostr::message::{RelayMessage, SubscriptionId};
use nostr::types::Timestamp;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test]
async fn publish_gets_ok_true() {
    let relay = TestRelay::start().await;
    let mut client = relay.client().await;
    let event = signed(&Keys::generate(), 1, "hello", vec![]);
    assert_eq!(client.publish(&event).await, (true, String::new()));
    relay.handle.shutdown().await;
}

#[tokio::test]
async fn req_gets_stored_newest_first_then_eose_then_live() {
    let relay = TestRelay::start().await;
    let keys = Keys::generate();
    let mut publisher = relay.client().await;
    let t = now();
    let older = signed_at(&keys, 1, "older", vec![], t - 10);
    let newer = signed_at(&keys, 1, "newer", vec![], t - 5);
    assert!(publisher.publish(&older).await.0);
    assert!(publisher.publish(&newer).await.0);

    let mut subscriber = relay.client().await;
    let stored = subscriber
        .query("s", vec![Filter::new().author(keys.public_key())])
        .await;
    assert_eq!(stored, vec![newer.clone(), older.clone()]);

    let live = signed(&keys, 1, "live", vec![]);
    assert!(publisher.publish(&live).await.0);
    assert_eq!(
        subscriber.recv().await,
        RelayMessage::event(SubscriptionId::new("s"), live)
    );
    // Other authors do not match.
    assert!(
        publisher
            .publish(&signed(&Keys::generate(), 1, "x", vec![]))
            .await
            .0
    );
    subscriber.expect_silence(Duration::from_millis(200)).await;

    // CLOSE stops the live stream.
    subscriber.send_text(r#"["CLOSE","s"]"#).await;
    assert!(
        publisher
            .publish(&signed(&keys, 1, "after close", vec![]))
            .await
            .0
    );
    subscriber.expect_silence(Duration::from_millis(200)).await;
    relay.handle.shutdown().await;
}

/// A connection reads the live ring only while it has a subscription: one that first only published, then
/// subscribed, closed its only subscription and subscribed again gets every event published after each
/// `REQ`, live, and nothing while it had none.
#[tokio::test]
async fn live_events_follow_subscriptions_opened_closed_and_opened_again() {
    let relay = TestRelay::start().await;
    let keys = Keys::generate();
    let mut other = relay.client().await;
    let mut client = relay.client().await;
    assert!(client.publish(&signed(&keys, 1, "own", vec![])).await.0);
    assert!(other.publish(&signed(&keys, 1, "before", vec![])).await.0);
    client.expect_silence(Duration::from_millis(100)).await;

    for round in ["first", "second"] {
        let stored = client
            .query(round, vec![Filter::new().author(keys.public_key())])
            .await;
        assert!(!stored.is_empty());
        let live = signed(&keys, 1, round, vec![]);
        assert!(other.publish(&live).await.0);
        assert_eq!(
            client.recv().await,
            RelayMessage::event(SubscriptionId::new(round), live)
        );
        client.send_text(format!(r#"["CLOSE","{round}"]"#)).await;
        // Published with no subscription open: never delivered, live or later.
        assert!(other.publish(&signed(&keys, 1, "between", vec![])).await.0);
        client.expect_silence(Duration::from_millis(100)).await;
    }
    relay.handle.shutdown().await;
}

#[tokio::test]
async fn re_req_replaces_the_subscription() {
    let relay = TestRelay::start().await;
    let keys = Keys::generate();
    let mut client = relay.client().await;
    client
        .query("s", vec![Filter::new().kind(Kind::from_u16(1))])
        .await;
    client
        .query("s", vec![Filter::new().kind(Kind::from_u16(2))])
        .await;
    let mut publisher = relay.client().await;
    assert!(publisher.publish(&signed(&keys, 1, "one", vec![])).await.0);
    let two = signed(&keys, 2, "two", vec![]);
    assert!(publisher.publish(&two).await.0);
    assert_eq!(
        client.recv().await,
        RelayMessage::event(SubscriptionId::new("s"), two)
    );
    client.expect_silence(Duration::from_millis(200)).await;
}

#[tokio::test]
async fn bad_id_and_bad_signature_are_invalid() {
    let relay = TestRelay::start().await;
    let mut client = relay.client().await;
    let keys = Keys::generate();
    let event = signed(&keys, 1, "original", vec![]);

    let mut json: serde_json::Value = serde_json::from_str(&event.as_json()).unwrap();
    json["content"] = "changed".into();
    client.send_text(format!(r#"["EVENT",{json}]"#)).await;
    let (ok, message) = client.ok_for(event.id).await;
    assert!(!ok && message.starts_with("invalid:"), "{message}");

    let other = signed(&keys, 1, "other", vec![]);
    let mut json: serde_json::Value = serde_json::from_str(&event.as_json()).unwrap();
    json["sig"] = other.sig.to_string().into();
    client.send_text(format!(r#"["EVENT",{json}]"#)).await;
    let (ok, message) = client.ok_for(event.id).await;
    assert_eq!((ok, message.as_str()), (false, "invalid: bad signature"));

    // Nothing was stored.
    assert!(client.query("q", vec![Filter::new()]).await.is_empty());
}

#[tokio::test]
async fn duplicate_is_accepted_with_duplicate_prefix() {
    let relay = TestRelay::start().await;
    let mut client = relay.client().await;
    let event = signed(&Keys::generate(), 1, "once", vec![]);
    assert_eq!(client.publish(&event).await, (true, String::new()));
    let (ok, message) = client.publish(&event).await;
    assert!(ok && message.starts_with("duplicate:"), "{message}");
    assert_eq!(client.query("q", vec![Filter::new()]).await, vec![event]);
}

#[tokio::test]
async fn ephemeral_is_broadcast_acknowledged_and_not_stored() {
    let relay = TestRelay::start().await;
    let keys = Keys::generate();
    let mut subscriber = relay.client().await;
    subscriber
        .query("live", vec![Filter::new().kind(Kind::from_u16(25800))])
        .await;
    let mut publisher = relay.client().await;
    let status = signed(&keys, 25800, "working", vec![]);
    assert_eq!(publisher.publish(&status).await, (true, String::new()));
    assert_eq!(
        subscriber.recv().await,
        RelayMessage::event(SubscriptionId::new("live"), status)
    );
    let mut late = relay.client().await;
    assert!(late.query("q", vec![Filter::new()]).await.is_empty());
}

#[tokio::test]
async fn nip_xx_prompt_response_error_survive_a_restart() {
    let relay = TestRelay::start().await;
    let keys = Keys::generate();
    let agent = Keys::generate().public_key();
    let mut client = relay.client().await;
    let mut kept = Vec::new();
    for kind in [25802, 25803, 25805] {
        let event = signed(&keys, kind, "payload", vec![Tag::public_key(agent)]);
        assert_eq!(client.publish(&event).await, (true, String::new()));
        kept.push(event);
    }
    for kind in [25800, 25801, 25804, 25806] {
        let event = signed(&keys, kind, "telemetry", vec![Tag::public_key(agent)]);
        assert_eq!(client.publish(&event).await, (true, String::new()));
    }
    drop(client);

    let relay = relay.restart().await;
    let mut client = relay.client().await;
    let mut found = client.query("q", vec![Filter::new().pubkey(agent)]).await;
    found.sort_by_key(|e| e.kind.as_u16());
    assert_eq!(found, kept);
    relay.handle.shutdown().await;
}

#[tokio::test]
async fn addressable_ai_info_keeps_the_newest() {
    let relay = TestRelay::start().await;
    let keys = Keys::generate();
    let mut client = relay.client().await;
    let t = now();
    let d = |v: &str| Tag::identifier(v);
    let first = signed_at(&keys, 31340, "v1", vec![d("agent")], t - 20);
    let second = signed_at(&keys, 31340, "v2", vec![d("agent")], t - 10);
    let other_d = signed_at(&keys, 31340, "other", vec![d("other")], t - 30);
    assert!(client.publish(&first).await.0);
    assert!(client.publish(&second).await.0);
    assert!(client.publish(&other_d).await.0);
    // An older version after the newer one is not stored.
    let stale = signed_at(&keys, 31340, "v0", vec![d("agent")], t - 40);
    let (ok, message) = client.publish(&stale).await;
    assert!(ok && message.starts_with("duplicate:"), "{message}");

    let filter = Filter::new()
        .kind(Kind::from_u16(31340))
        .author(keys.public_key());
    assert_eq!(
        client.query("q", vec![filter.clone()]).await,
        vec![second.clone(), other_d.clone()]
    );
    let by_d = filter.clone().identifier("agent");
    assert_eq!(client.query("d", vec![by_d]).await, vec![second]);

    // Replaceable kind 0 too.
    let m1 = signed_at(&keys, 0, "{}", vec![], t - 2);
    let m2 = signed_at(&keys, 0, "{\"name\":\"x\"}", vec![], t - 1);
    assert!(client.publish(&m1).await.0);
    assert!(client.publish(&m2).await.0);
    assert_eq!(
        client
            .query("m", vec![Filter::new().kind(Kind::from_u16(0))])
            .await,
        vec![m2]
    );
}

#[tokio::test]
async fn nip40_expired_events_are_refused_and_hidden() {
    let relay = TestRelay::start().await;
    let keys = Keys::generate();
    let mut client = relay.client().await;
    let expired = signed(
        &keys,
        1,
        "too late",
        vec![Tag::expiration(Timestamp::from_secs(now() - 5))],
    );
    assert_eq!(
        client.publish(&expired).await,
        (false, "invalid: event is expired".to_owned())
    );
    let soon = signed(
        &keys,
        1,
        "short-lived",
        // Expiry counts whole seconds, from the second it names: three leaves at least two to publish and
        // query it in.
        vec![Tag::expiration(Timestamp::from_secs(now() + 3))],
    );
    assert!(client.publish(&soon).await.0);
    assert_eq!(client.query("a", vec![Filter::new()]).await, vec![soon]);
    // Once its second comes, it is hidden.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    // (A REQ under the same id replaces the subscription.)
    while !client.query("b", vec![Filter::new()]).await.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "still served after expiry"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn http_get(relay: &TestRelay, accept: Option<&str>) -> String {
    let mut stream = TcpStream::connect(relay.addr()).await.unwrap();
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    let request = format!("GET / HTTP/1.1\r\nHost: localhost\r\n{accept}\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}

#[tokio::test]
async fn nip11_document_over_http() {
    let relay = TestRelay::start().await;
    let response = http_get(&relay, Some("application/nostr+json")).await;
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(head.contains("Access-Control-Allow-Origin: *"), "{head}");
    assert!(
        head.contains("Content-Type: application/nostr+json"),
        "{head}"
    );
    let doc: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(doc["name"], "test relay");
    assert_eq!(doc["software"], "agentwire");
    assert_eq!(doc["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        doc["supported_nips"],
        serde_json::json!([1, 9, 11, 29, 40, 42, 45, 70])
    );
    let limitation = &doc["limitation"];
    assert_eq!(limitation["max_subid_length"], 64);
    for field in [
        "max_message_length",
        "max_subscriptions",
        "max_filters",
        "max_limit",
    ] {
        assert!(limitation[field].is_u64(), "{field}");
    }

    let page = http_get(&relay, None).await;
    assert!(page.starts_with("HTTP/1.1 200 OK"), "{page}");
    assert!(page.contains("text/plain"), "{page}");

    // The same port still speaks WebSocket.
    let mut client = relay.client().await;
    assert!(
        client
            .publish(&signed(&Keys::generate(), 1, "x", vec![]))
            .await
            .0
    );
}

#[tokio::test]
async fn nip11_names_the_key_that_signs_room_metadata() {
    let relay_keys = Keys::generate();
    let rk = relay_keys.clone();
    let relay = TestRelay::with_config(move |c| {
        c.rooms = vec![agentwire_relay::RoomConfig {
            id: "lab".into(),
            name: "Lab".into(),
            closed: false,
            private: false,
            members: vec![],
            admins: vec![],
        }];
        c.relay_keys = Some(rk);
    })
    .await;
    let response = http_get(&relay, Some("application/nostr+json")).await;
    let (_, body) = response.split_once("\r\n\r\n").unwrap();
    let doc: serde_json::Value = serde_json::from_str(body).unwrap();
    let key = relay_keys.public_key().to_hex();
    assert_eq!(doc["self"], key, "{doc}");
    assert_eq!(doc["pubkey"], key, "{doc}");
    // The same key signs the rooms' metadata.
    let mut c = relay.client().await;
    let meta = c
        .query(
            "meta",
            vec![nostr::filter::Filter::new().kind(nostr::event::Kind::from_u16(39000))],
        )
        .await;
    assert_eq!(meta.len(), 1);
    assert_eq!(meta[0].pubkey.to_hex(), key);
    relay.handle.shutdown().await;
}

#[tokio::test]
async fn an_endless_request_head_gets_431() {
    let relay = TestRelay::start().await;
    let mut stream = TcpStream::connect(relay.addr()).await.unwrap();
    let mut head = String::from("GET / HTTP/1.1\r\n");
    while head.len() <= agentwire_relay::limits::MAX_HTTP_HEAD_BYTES {
        head.push_str("X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 431"), "{response}");
}

#[tokio::test]
async fn malformed_json_gets_a_notice_and_the_connection_survives() {
    let relay = TestRelay::start().await;
    let mut client = relay.client().await;
    for junk in [
        "{not json",
        "[]",
        "{\"a\":1}",
        "[\"NOPE\",1]",
        "[\"EVENT\",{}]",
    ] {
        client.send_text(junk).await;
        let notice = client.expect_notice().await;
        assert!(
            notice.starts_with("invalid:") || notice.starts_with("unsupported:"),
            "{junk}: {notice}"
        );
    }
    client.send_text(r#"["REQ","bad",{"kinds":"x"}]"#).await;
    let message = client.expect_closed("bad").await;
    assert!(message.starts_with("invalid: bad filter"), "{message}");
    client
        .ws
        .send(tokio_tungstenite::tungstenite::Message::binary(vec![
            1, 2, 3,
        ]))
        .await
        .unwrap();
    assert!(client.expect_notice().await.starts_with("invalid:"));
    // Still usable, and other connections never noticed.
    let event = signed(&Keys::generate(), 1, "after junk", vec![]);
    assert!(client.publish(&event).await.0);
    let mut other = relay.client().await;
    assert_eq!(other.query("q", vec![Filter::new()]).await, vec![event]);
}

#[tokio::test]
async fn tag_filters_select_by_p_e_and_s() {
    let relay = TestRelay::start().await;
    let keys = Keys::generate();
    let alice = Keys::generate().public_key();
    let bob = Keys::generate().public_key();
    let mut client = relay.client().await;
    let to_alice = signed(&keys, 25802, "a", vec![Tag::public_key(alice)]);
    let to_bob = signed(
        &keys,
        25802,
        "b",
        vec![Tag::public_key(bob), Tag::custom("s", ["session:1"])],
    );
    let reply = signed(
        &keys,
        25803,
        "r",
        vec![Tag::event(to_bob.id), Tag::public_key(alice)],
    );
    for e in [&to_alice, &to_bob, &reply] {
        assert!(client.publish(e).await.0);
    }
    let mut by_p = client.query("p", vec![Filter::new().pubkey(alice)]).await;
    by_p.sort_by_key(|e| e.kind.as_u16());
    assert_eq!(by_p, vec![to_alice.clone(), reply.clone()]);
    assert_eq!(
        client
            .query("e", vec![Filter::new().event(to_bob.id)])
            .await,
        vec![reply.clone()]
    );
    let s = Filter::new().custom_tag(SingleLetterTag::LOWERCASE_S, "session:1");
    assert_eq!(client.query("s", vec![s]).await, vec![to_bob.clone()]);
    // Tags and kinds combine with AND.
    let both = Filter::new().pubkey(alice).kind(Kind::from_u16(25803));
    assert_eq!(client.query("both", vec![both]).await, vec![reply.clone()]);
    // Live events are matched by the same rules.
    let mut client = relay.client().await;
    client.query("live", vec![Filter::new().pubkey(bob)]).await;
    let mut publisher = relay.client().await;
    let again = signed(&keys, 25802, "again", vec![Tag::public_key(bob)]);
    assert!(
        publisher
            .publish(&signed(
                &keys,
                25802,
                "not bob",
                vec![Tag::public_key(alice)]
            ))
            .await
            .0
    );
    assert!(publisher.publish(&again).await.0);
    assert_eq!(
        client.recv().await,
        RelayMessage::event(SubscriptionId::new("live"), again)
    );
}

#[tokio::test]
async fn shutdown_closes_connections() {
    let relay = TestRelay::start().await;
    let mut client: Client = relay.client().await;
    client.query("s", vec![Filter::new()]).await;
    relay.handle.shutdown().await;
    assert!(client.recv_within(Duration::from_secs(5)).await.is_none());
}

/// An event dated far ahead would head every newest-first query and escape retention for as long: refused
/// past the bound, with NIP-01's `invalid:` prefix; a clock a little ahead is fine.
#[tokio::test]
async fn an_event_dated_too_far_in_the_future_is_refused() {
    use agentwire_relay::limits::MAX_FUTURE_SKEW_SECS;
    let relay = TestRelay::start().await;
    let mut client = relay.client().await;
    let keys = Keys::generate();
    for ahead in [MAX_FUTURE_SKEW_SECS + 60, 86_400, 30 * 365 * 86_400] {
        let event = signed_at(&keys, 1, "from the future", vec![], now() + ahead);
        let (ok, message) = client.publish(&event).await;
        assert!(!ok, "{ahead} s ahead was stored");
        assert!(
            message.starts_with("invalid: created_at is too far in the future"),
            "{message}"
        );
    }
    let close = signed_at(&keys, 1, "a clock a minute fast", vec![], now() + 60);
    assert_eq!(client.publish(&close).await, (true, String::new()));
    let newest = client
        .query("newest", vec![Filter::new().kind(Kind::TextNote).limit(1)])
        .await;
    assert_eq!(
        newest.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![close.id]
    );
}
