//! Private rooms over a real relay connection: their events, and their member lists (39002), are read only
//! by connections authenticated (NIP-42) as members, in stored results, live and in counts.

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
    let admin = Keys::generate();
    let rooms = vec![
        RoomConfig {
            id: "vault".into(),
            name: "Vault".into(),
            closed: true,
            private: true,
            members: vec![member.public_key()],
            admins: vec![],
        },
        RoomConfig {
            id: "lobby".into(),
            name: "Lobby".into(),
            closed: false,
            private: false,
            members: vec![],
            admins: vec![],
        },
    ];
    let admin_key = admin.public_key();
    let relay = TestRelay::with_config(move |c| {
        c.rooms = rooms;
        c.relay_keys = Some(relay_keys);
        c.admins.insert(admin_key);
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

    // Who the members are is part of what they read: the vault's member list (39002) is left out too,
    // stored, counted and live; its name and admins (39000, 39001) are not.
    let members = Filter::new().kind(Kind::from_u16(39002));
    let rooms_of = |events: &[nostr::event::Event]| {
        let mut ids: Vec<String> = events.iter().filter_map(|e| e.tags.identifier()).collect();
        ids.sort();
        ids
    };
    assert_eq!(
        rooms_of(&anon.query("m", vec![members.clone()]).await),
        vec!["lobby"]
    );
    let named = Filter::new()
        .kinds([39000, 39001].map(Kind::from_u16))
        .identifier("vault");
    assert_eq!(anon.query("named", vec![named]).await.len(), 2);
    anon.send(ClientMessage::close(SubscriptionId::new("named")))
        .await;
    anon.send(ClientMessage::count(
        SubscriptionId::new("mc"),
        members.clone(),
    ))
    .await;
    match anon.recv().await {
        RelayMessage::Count { count, .. } => assert_eq!(count, 1),
        other => panic!("{other:?}"),
    }
    let newcomer = Keys::generate().public_key().to_hex();
    let put = signed(
        &admin,
        9000,
        "",
        vec![
            Tag::parse(["h", "vault"]).unwrap(),
            Tag::parse(["p", newcomer.as_str()]).unwrap(),
        ],
    );
    assert!(writer.publish(&put).await.0);
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
    // The two messages and the admin's 9000.
    assert_eq!(got.len(), 3);
    let lists = inside.query("m", vec![members.clone()]).await;
    assert_eq!(rooms_of(&lists), vec!["lobby", "vault"]);
    let vault = lists
        .iter()
        .find(|e| e.tags.identifier().as_deref() == Some("vault"))
        .unwrap();
    assert!(vault
        .tags
        .iter()
        .any(|t| t.as_slice() == ["p", newcomer.as_str()]));
    let newest = signed(&member, 9, "newest", h("vault"));
    assert!(writer.publish(&newest).await.0);
    match inside.recv().await {
        RelayMessage::Event { event, .. } => assert_eq!(event.id, newest.id),
        other => panic!("{other:?}"),
    }
    relay.handle.shutdown().await;
}
