//! Rooms over a real relay connection: a closed room takes writes from its members only, and the relay
//! publishes each room's metadata, admins and members signed with its own key.

mod common;

use agentwire_relay::RoomConfig;
use common::{signed, TestRelay};
use nostr::event::{Kind, Tag};
use nostr::filter::Filter;
use nostr::key::Keys;

fn h(room: &str) -> Vec<Tag> {
    vec![Tag::parse(["h", room]).unwrap()]
}

#[tokio::test]
async fn closed_rooms_take_members_only_and_metadata_is_relay_signed() {
    let (relay_keys, member, admin, agent, stranger) = (
        Keys::generate(),
        Keys::generate(),
        Keys::generate(),
        Keys::generate(),
        Keys::generate(),
    );
    let rooms = vec![
        RoomConfig {
            id: "lab".into(),
            name: "Lab".into(),
            closed: true,
            private: false,
            members: vec![member.public_key()],
            admins: vec![admin.public_key()],
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
    let (rk, ag) = (relay_keys.clone(), agent.public_key());
    let relay = TestRelay::with_config(move |c| {
        c.rooms = rooms;
        c.relay_keys = Some(rk);
        c.room_writers.insert(ag);
    })
    .await;
    let mut c = relay.client().await;
    for (keys, room) in [
        (&member, "lab"),
        (&admin, "lab"),
        (&agent, "lab"),
        (&stranger, "lobby"),
    ] {
        let e = signed(keys, 9, "hello", h(room));
        assert_eq!(c.publish(&e).await, (true, String::new()), "{room}");
    }
    for kind in [9, 11, 12, 1111, 43001] {
        let (ok, message) = c
            .publish(&signed(&stranger, kind, "let me in", h("lab")))
            .await;
        assert!(
            !ok && message.starts_with("restricted: "),
            "kind {kind}: {message}"
        );
    }
    // An h naming no room is not a room event.
    assert!(c.publish(&signed(&stranger, 9, "x", h("nowhere"))).await.0);

    let meta = c
        .query(
            "meta",
            vec![Filter::new()
                .kinds([39000, 39001, 39002].map(Kind::from_u16))
                .author(relay_keys.public_key())],
        )
        .await;
    assert_eq!(meta.len(), 6, "three events for each of two rooms");
    let lab_members = meta
        .iter()
        .find(|e| e.kind.as_u16() == 39002 && e.tags.identifier().as_deref() == Some("lab"))
        .expect("lab's members");
    let listed: Vec<String> = lab_members
        .tags
        .iter()
        .filter(|t| t.kind() == "p")
        .filter_map(|t| t.content().map(str::to_owned))
        .collect();
    for k in [&member, &admin, &agent] {
        assert!(listed.contains(&k.public_key().to_hex()));
    }
    assert!(!listed.contains(&stranger.public_key().to_hex()));
    relay.handle.shutdown().await;
}

#[tokio::test]
async fn rooms_without_a_relay_key_or_with_a_bad_id_do_not_start() {
    for (id, keys) in [("lab", None), ("Bad Id", Some(Keys::generate()))] {
        let dir = tempfile::tempdir().unwrap();
        let mut config = common::config(&dir, Default::default());
        config.rooms = vec![RoomConfig {
            id: id.into(),
            name: "x".into(),
            closed: false,
            private: false,
            members: vec![],
            admins: vec![],
        }];
        config.relay_keys = keys;
        let e = agentwire_relay::start(config).await.unwrap_err();
        assert!(e.to_string().starts_with("invalid rooms: "), "{e}");
    }
}
