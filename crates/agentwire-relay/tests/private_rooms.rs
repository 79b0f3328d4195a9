//! Private rooms over a real relay connection: their events are read only by connections authenticated
//! (NIP-42) as members, in stored results, live and in counts.

mod common;

use agentwire_relay::RoomConfig;
use common::{now, signed, signed_at, Client, TestRelay};
use nostr::event::{Kind, Tag};
use nostr::filter::{Filter, SingleLetterTag};
use nostr::key::Keys;
use nostr::message::{ClientMessage, RelayMessage, SubscriptionId};
use std::time::Duration;

fn h(room: &str) -> Vec<Tag> {
    vec![Tag::parse(["h", room]).unwrap()]
}

async fn authenticate(c: &mut Client, keys: &Keys, url: &str) {
    let _ = c.query("hello", vec![Filter::new().limit(0)]).await;
    let challenge = c.challenge.clone().expect("a challenge");
    let auth = signed_at(
        keys,
        22242,
        "",
        vec![
            Tag::parse(["relay", url]).unwrap(),
            Tag::parse(["challenge", challenge.as_str()]).unwrap(),
        ],
        now(),
    );
    c.send(ClientMessage::auth(auth.clone())).await;
    assert_eq!(c.ok_for(auth.id).await, (true, String::new()));
}

fn in_room(room: &str) -> Filter {
    Filter::new().custom_tag(SingleLetterTag::LOWERCASE_H, room)
}

async fn closed_reason(c: &mut Client, sub: &str, filter: Filter) -> String {
    c.send_req(sub, vec![filter]).await;
    match c.recv().await {
        RelayMessage::Closed { message, .. } => message.into_owned(),
        other => panic!("expected CLOSED, got {other:?}"),
    }
}

#[tokio::test]
async fn a_private_room_is_read_by_its_authenticated_members_only() {
    let (relay_keys, member, stranger) = (Keys::generate(), Keys::generate(), Keys::generate());
    let rooms = vec![RoomConfig {
        id: "vault".into(),
        name: "Vault".into(),
        closed: true,
        private: true,
        members: vec![member.public_key()],
        admins: vec![],
    }];
    let relay = TestRelay::with_config(move |c| {
        c.rooms = rooms;
        c.relay_keys = Some(relay_keys);
    })
    .await;
    let url = relay.url();
    let mut writer = relay.client().await;
    let secret = signed(&member, 9, "the combination", h("vault"));
    let public = signed(&stranger, 9, "lunch?", h("lobby"));
    assert!(writer.publish(&secret).await.0);
    assert!(writer.publish(&public).await.0);
    let chat = Filter::new().kind(Kind::from_u16(9));

    // Not authenticated: the room is refused, and other queries, counts and live events leave it out.
    let mut anon = relay.client().await;
    let reason = closed_reason(&mut anon, "v", in_room("vault")).await;
    assert!(reason.starts_with("auth-required: "), "{reason}");
    let seen = anon.query("all", vec![chat.clone()]).await;
    assert_eq!(
        seen.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![public.id]
    );
    anon.send(ClientMessage::count(SubscriptionId::new("n"), chat.clone()))
        .await;
    match anon.recv().await {
        RelayMessage::Count { count, .. } => assert_eq!(count, 1),
        other => panic!("{other:?}"),
    }
    let later = signed(&member, 9, "a new secret", h("vault"));
    assert!(writer.publish(&later).await.0);
    anon.expect_silence(Duration::from_millis(300)).await;

    // Authenticated as someone else: restricted.
    let mut other = relay.client().await;
    authenticate(&mut other, &stranger, &url).await;
    let reason = closed_reason(&mut other, "v", in_room("vault")).await;
    assert!(reason.starts_with("restricted: "), "{reason}");

    // Authenticated as a member: stored and live.
    let mut inside = relay.client().await;
    authenticate(&mut inside, &member, &url).await;
    let got = inside.query("v", vec![in_room("vault")]).await;
    assert_eq!(got.len(), 2);
    let newest = signed(&member, 9, "newest", h("vault"));
    assert!(writer.publish(&newest).await.0);
    match inside.recv().await {
        RelayMessage::Event { event, .. } => assert_eq!(event.id, newest.id),
        other => panic!("{other:?}"),
    }
    relay.handle.shutdown().await;
}
