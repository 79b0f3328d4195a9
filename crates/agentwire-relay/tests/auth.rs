//! NIP-42 authentication and NIP-70 protected events over a real relay connection.

mod common;

use common::{now, signed, signed_at, TestRelay};
use nostr::event::{Event, Tag};
use nostr::key::Keys;

fn tag(parts: &[&str]) -> Tag {
    Tag::parse(parts.iter().map(|p| p.to_string()).collect::<Vec<_>>()).unwrap()
}

fn auth_event(keys: &Keys, challenge: &str, relay: &str, at: u64) -> Event {
    signed_at(
        keys,
        22242,
        "",
        vec![tag(&["relay", relay]), tag(&["challenge", challenge])],
        at,
    )
}

async fn auth(c: &mut common::Client, event: &Event) -> (bool, String) {
    c.send(nostr::message::ClientMessage::auth(event.clone()))
        .await;
    c.ok_for(event.id).await
}

/// Connects and reads the relay's greeting: its NIP-42 challenge.
async fn connect(relay: &TestRelay) -> (common::Client, String) {
    let mut c = relay.client().await;
    // The challenge comes first; a query's EOSE proves it was read.
    let _ = c
        .query("greeting", vec![nostr::filter::Filter::new().limit(0)])
        .await;
    let challenge = c.challenge.clone().expect("an AUTH challenge on connect");
    assert_eq!(challenge.len(), 32, "{challenge}");
    (c, challenge)
}

#[tokio::test]
async fn a_connection_authenticates_by_signing_its_own_challenge() {
    let relay = TestRelay::start().await;
    let (mut c, challenge) = connect(&relay).await;
    let (_other, other_challenge) = connect(&relay).await;
    assert_ne!(challenge, other_challenge, "a challenge per connection");
    let keys = Keys::generate();
    let url = relay.url();
    let t = now();

    let (ok, m) = auth(&mut c, &auth_event(&keys, &other_challenge, &url, t)).await;
    assert!(
        !ok && m.starts_with("invalid:") && m.contains("challenge"),
        "{m}"
    );
    let (ok, m) = auth(&mut c, &auth_event(&keys, &challenge, &url, t - 3600)).await;
    assert!(!ok && m.contains("600 s"), "{m}");
    let (ok, m) = auth(&mut c, &auth_event(&keys, &challenge, "https://x", t)).await;
    assert!(!ok && m.contains("relay tag"), "{m}");
    let wrong_kind = signed(&keys, 1, "", vec![tag(&["challenge", &challenge])]);
    let (ok, m) = auth(&mut c, &wrong_kind).await;
    assert!(!ok && m.contains("22242"), "{m}");
    assert_eq!(
        auth(&mut c, &auth_event(&keys, &challenge, &url, t)).await,
        (true, String::new())
    );
    relay.handle.shutdown().await;
}

#[tokio::test]
async fn a_protected_event_is_taken_only_from_its_authenticated_author() {
    let relay = TestRelay::start().await;
    let (mut c, challenge) = connect(&relay).await;
    let (author, someone) = (Keys::generate(), Keys::generate());
    let protected = signed(&author, 1, "mine only", vec![tag(&["-"])]);
    let (ok, m) = c.publish(&protected).await;
    assert!(!ok && m.starts_with("auth-required:"), "{m}");
    let url = relay.url();
    assert!(
        auth(&mut c, &auth_event(&someone, &challenge, &url, now()))
            .await
            .0
    );
    let (ok, m) = c.publish(&protected).await;
    assert!(!ok && m.starts_with("restricted:"), "{m}");
    assert!(
        auth(&mut c, &auth_event(&author, &challenge, &url, now()))
            .await
            .0
    );
    assert_eq!(c.publish(&protected).await, (true, String::new()));
    // An unprotected event needs nobody's authentication.
    let (mut plain, _) = connect(&relay).await;
    let open = signed(&someone, 1, "anyone", vec![]);
    assert_eq!(plain.publish(&open).await, (true, String::new()));
    relay.handle.shutdown().await;
}

#[tokio::test]
async fn an_auth_event_sent_as_an_event_is_refused_and_never_passed_on() {
    let relay = TestRelay::start().await;
    let (mut watcher, _) = connect(&relay).await;
    assert!(watcher
        .query(
            "auth",
            vec![nostr::filter::Filter::new().kind(nostr::event::Kind::Authentication)]
        )
        .await
        .is_empty());
    let (mut c, challenge) = connect(&relay).await;
    let event = auth_event(&Keys::generate(), &challenge, &relay.url(), now());
    let (ok, m) = c.publish(&event).await;
    assert!(
        !ok && m.starts_with("invalid:") && m.contains("22242"),
        "{m}"
    );
    watcher
        .expect_silence(std::time::Duration::from_millis(300))
        .await;
    relay.handle.shutdown().await;
}

#[tokio::test]
async fn an_auth_signed_for_another_relay_is_refused_and_reads_no_private_room() {
    use agentwire_relay::RoomConfig;
    use nostr::filter::{Filter, SingleLetterTag};
    use nostr::message::RelayMessage;
    let (relay_keys, member) = (Keys::generate(), Keys::generate());
    let vault = RoomConfig {
        id: "vault".into(),
        name: "Vault".into(),
        closed: true,
        private: true,
        members: vec![member.public_key()],
        admins: vec![],
    };
    let relay = TestRelay::with_config(move |c| {
        c.rooms = vec![vault];
        c.relay_keys = Some(relay_keys);
        c.public_urls = vec!["wss://Relay.Example.org/".into()];
    })
    .await;
    let mut writer = relay.client().await;
    let secret = signed(&member, 9, "the combination", vec![tag(&["h", "vault"])]);
    assert!(writer.publish(&secret).await.0);
    let port = relay.addr().port();

    // The attacker serves this connection's challenge from its own relay; the member's client signs it
    // for that relay's URL, and the attacker replays it here.
    let (mut attacker, challenge) = connect(&relay).await;
    for elsewhere in [
        "wss://evil.example.com".to_owned(),
        "ws://evil.example.com".to_owned(),
        format!("ws://127.0.0.1:{}", port + 1),
        format!("wss://127.0.0.1:{port}"),
        format!("ws://127.0.0.1:{port}/other"),
        "wss://relay.example.org/other".to_owned(),
    ] {
        let (ok, m) = auth(
            &mut attacker,
            &auth_event(&member, &challenge, &elsewhere, now()),
        )
        .await;
        assert!(
            !ok && m.starts_with("invalid:") && m.contains("relay tag"),
            "{elsewhere}: {m}"
        );
    }
    let vault_filter = Filter::new().custom_tag(SingleLetterTag::LOWERCASE_H, "vault");
    attacker.send_req("v", vec![vault_filter.clone()]).await;
    match attacker.recv().await {
        RelayMessage::Closed { message, .. } => {
            assert!(message.starts_with("auth-required:"), "{message}")
        }
        other => panic!("the private room was served: {other:?}"),
    }

    // This relay's own URLs are taken, compared as URLs.
    for own in [
        format!("ws://127.0.0.1:{port}"),
        format!("ws://localhost:{port}/"),
        format!("WS://LOCALHOST:{port}"),
        "wss://relay.example.org".to_owned(),
        "wss://relay.example.org:443/".to_owned(),
    ] {
        let (mut c, challenge) = connect(&relay).await;
        let (ok, m) = auth(&mut c, &auth_event(&member, &challenge, &own, now())).await;
        assert!(ok, "{own}: {m}");
        assert_eq!(c.query("v", vec![vault_filter.clone()]).await.len(), 1);
    }
    relay.handle.shutdown().await;
}

#[tokio::test]
async fn a_public_url_that_is_not_ws_or_wss_stops_the_relay_from_starting() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(&dir, Default::default());
    config.public_urls = vec!["https://relay.example.org".into()];
    let error = agentwire_relay::start(config)
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("https://relay.example.org"), "{error}");
}
