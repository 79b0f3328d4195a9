//! Rooms over a real relay connection: a closed room takes writes from its members only, and the relay
//! publishes each room's metadata, admins and members signed with its own key.

mod common;

use agentwire_relay::RoomConfig;
use common::{signed, TestRelay};
use nostr::event::{Kind, Tag};
use nostr::filter::Filter;
use nostr::key::Keys;

fn room(id: &str, closed: bool, members: &[&Keys], admins: &[&Keys]) -> RoomConfig {
    RoomConfig {
        id: id.into(),
        name: id[..1].to_uppercase() + &id[1..],
        closed,
        private: false,
        members: members.iter().map(|k| k.public_key()).collect(),
        admins: admins.iter().map(|k| k.public_key()).collect(),
    }
}

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
        room("lab", true, &[&member], &[&admin]),
        room("lobby", false, &[], &[]),
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
    // An h naming no room is refused: it would be that room's history once someone creates it.
    let (ok, message) = c.publish(&signed(&stranger, 9, "x", h("nowhere"))).await;
    assert!(
        !ok && message.starts_with("invalid: there is no room \"nowhere\""),
        "{message}"
    );

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

fn moderation(keys: &Keys, kind: u16, room: &str, extra: &[&[&str]]) -> nostr::event::Event {
    let mut tags = h(room);
    tags.extend(extra.iter().map(|t| Tag::parse(t.iter().copied()).unwrap()));
    signed(keys, kind, "", tags)
}

/// The room's newest 39000 name, waiting briefly for the relay to publish it.
async fn room_name(c: &mut common::Client, relay: &Keys, room: &str, sub: &str) -> Option<String> {
    for _ in 0..50 {
        let found = c
            .query(
                sub,
                vec![Filter::new()
                    .kind(Kind::from_u16(39000))
                    .author(relay.public_key())
                    .identifier(room)],
            )
            .await;
        c.send(nostr::message::ClientMessage::close(
            nostr::message::SubscriptionId::new(sub),
        ))
        .await;
        if let Some(e) = found.first() {
            return e
                .tags
                .iter()
                .find(|t| t.kind() == "name")
                .and_then(|t| t.content().map(str::to_owned));
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    None
}

#[tokio::test]
async fn relay_admins_create_and_moderate_rooms_and_that_survives_a_restart() {
    let (relay_keys, boss, user, stranger) = (
        Keys::generate(),
        Keys::generate(),
        Keys::generate(),
        Keys::generate(),
    );
    let setup = {
        let (rk, b) = (relay_keys.clone(), boss.public_key());
        move |c: &mut agentwire_relay::RelayConfig| {
            c.relay_keys = Some(rk);
            c.admins.insert(b);
        }
    };
    let relay = TestRelay::with_config(setup.clone()).await;
    let mut c = relay.client().await;
    let (ok, m) = c.publish(&moderation(&stranger, 9007, "ops", &[])).await;
    assert!(!ok && m.starts_with("restricted: "), "{m}");
    assert_eq!(
        c.publish(&moderation(&boss, 9007, "ops", &[])).await,
        (true, String::new())
    );
    let user_hex = user.public_key().to_hex();
    for e in [
        moderation(&boss, 9000, "ops", &[&["p", &user_hex]]),
        moderation(&boss, 9002, "ops", &[&["name", "Operations"], &["closed"]]),
    ] {
        assert_eq!(c.publish(&e).await, (true, String::new()));
    }
    // The OK comes after the room changed.
    let (ok, m) = c.publish(&signed(&stranger, 9, "hi", h("ops"))).await;
    assert!(!ok && m.starts_with("restricted: "), "{m}");
    assert!(c.publish(&signed(&user, 9, "hi", h("ops"))).await.0);
    assert_eq!(
        room_name(&mut c, &relay_keys, "ops", "n1").await.as_deref(),
        Some("Operations")
    );

    // After a restart the moderation events are replayed: the room is still there and still closed.
    drop(c);
    let dir = relay.dir;
    relay.handle.shutdown().await;
    let mut config = common::config(&dir, Default::default());
    setup(&mut config);
    let handle = agentwire_relay::start(config).await.unwrap();
    let mut c = common::Client::connect(&handle.url()).await;
    let (ok, m) = c.publish(&signed(&stranger, 9, "again", h("ops"))).await;
    assert!(!ok && m.starts_with("restricted: "), "{m}");
    assert!(c.publish(&signed(&user, 9, "again", h("ops"))).await.0);
    let remove = moderation(&boss, 9001, "ops", &[&["p", &user_hex]]);
    assert!(c.publish(&remove).await.0);
    let (ok, _) = c.publish(&signed(&user, 9, "still here?", h("ops"))).await;
    assert!(!ok, "a removed user may not write");
    handle.shutdown().await;
}

#[tokio::test]
async fn a_rooms_admins_delete_events_of_their_room_only() {
    let (relay_keys, lead, member) = (Keys::generate(), Keys::generate(), Keys::generate());
    let rooms = vec![
        room("ops", false, &[&member], &[&lead]),
        room("lobby", false, &[], &[]),
    ];
    let relay = TestRelay::with_config(move |c| {
        c.rooms = rooms;
        c.relay_keys = Some(relay_keys);
    })
    .await;
    let mut c = relay.client().await;
    let spam = signed(&member, 9, "spam", h("ops"));
    let elsewhere = signed(&member, 9, "hello lobby", h("lobby"));
    assert!(c.publish(&spam).await.0);
    assert!(c.publish(&elsewhere).await.0);
    let ids = |e: &nostr::event::Event| e.id.to_hex();
    let (ok, m) = c
        .publish(&moderation(&member, 9005, "ops", &[&["e", &ids(&spam)]]))
        .await;
    assert!(!ok && m.starts_with("restricted: "), "{m}");
    let delete = moderation(
        &lead,
        9005,
        "ops",
        &[&["e", &ids(&spam)], &["e", &ids(&elsewhere)]],
    );
    assert_eq!(c.publish(&delete).await, (true, String::new()));
    let left = c
        .query("chat", vec![Filter::new().kind(Kind::from_u16(9))])
        .await;
    let left: Vec<_> = left.iter().map(|e| e.id).collect();
    assert!(!left.contains(&spam.id), "the room's event is gone");
    assert!(
        left.contains(&elsewhere.id),
        "another room's event is not the admin's to delete"
    );
    relay.handle.shutdown().await;
}

#[tokio::test]
async fn a_second_h_tag_carries_no_event_into_a_closed_or_private_room() {
    let (relay_keys, member, stranger) = (Keys::generate(), Keys::generate(), Keys::generate());
    let mut vault = room("vault", true, &[&member], &[]);
    vault.private = true;
    let rooms = vec![
        room("lab", true, &[&member], &[]),
        room("lobby", false, &[], &[]),
        vault,
    ];
    let relay = TestRelay::with_config(move |c| {
        c.rooms = rooms;
        c.relay_keys = Some(relay_keys);
    })
    .await;
    let mut c = relay.client().await;
    for inside in ["lab", "vault"] {
        for kind in [9, 43001] {
            let two = vec![
                Tag::parse(["h", "lobby"]).unwrap(),
                Tag::parse(["h", inside]).unwrap(),
            ];
            let (ok, message) = c.publish(&signed(&stranger, kind, "smuggled", two)).await;
            assert!(!ok, "kind {kind} into {inside}: accepted");
            assert_eq!(message, "invalid: an event belongs to one room: one h tag");
        }
    }
    // Members too: the rule is about the event, not its author.
    let both = vec![
        Tag::parse(["h", "lab"]).unwrap(),
        Tag::parse(["h", "vault"]).unwrap(),
    ];
    let (ok, message) = c.publish(&signed(&member, 9, "both", both)).await;
    assert!(!ok && message.starts_with("invalid: "), "{message}");
    let lab = c
        .query(
            "lab",
            vec![Filter::new().custom_tag(nostr::filter::SingleLetterTag::LOWERCASE_H, "lab")],
        )
        .await;
    assert!(lab.is_empty(), "{lab:?}");
    relay.handle.shutdown().await;
}

#[tokio::test]
async fn only_the_relay_writes_room_metadata() {
    let (relay_keys, admin, stranger) = (Keys::generate(), Keys::generate(), Keys::generate());
    let rooms = vec![room("lab", true, &[], &[&admin])];
    let rk = relay_keys.clone();
    let relay = TestRelay::with_config(move |c| {
        c.rooms = rooms;
        c.relay_keys = Some(rk);
    })
    .await;
    let mut c = relay.client().await;
    // Dated ahead (within the relay's bound) to replace the relay's own.
    let ahead = common::now() + 600;
    let hex = stranger.public_key().to_hex();
    let forged: [(u16, Vec<Tag>); 4] = [
        (
            39000,
            vec![
                Tag::parse(["name", "Pwned"]).unwrap(),
                Tag::parse(["open"]).unwrap(),
            ],
        ),
        (
            39001,
            vec![Tag::parse(["p", hex.as_str(), "admin"]).unwrap()],
        ),
        (39002, vec![Tag::parse(["p", hex.as_str()]).unwrap()]),
        (39003, vec![Tag::parse(["role", "admin"]).unwrap()]),
    ];
    for (kind, tags) in forged {
        let mut tags = tags;
        tags.insert(0, Tag::identifier("lab"));
        // A stranger, and a room's own admin: neither is the relay.
        for keys in [&stranger, &admin] {
            let event = common::signed_at(keys, kind, "", tags.clone(), ahead);
            let (ok, message) = c.publish(&event).await;
            assert!(!ok, "kind {kind} accepted");
            assert_eq!(message, "restricted: room metadata is written by the relay");
        }
    }
    let name = room_name(&mut c, &relay_keys, "lab", "name").await;
    assert_eq!(name.as_deref(), Some("Lab"));
    let any = c
        .query(
            "any",
            vec![Filter::new().kinds([39000, 39001, 39002, 39003].map(Kind::from_u16))],
        )
        .await;
    assert!(any.iter().all(|e| e.pubkey == relay_keys.public_key()));
    relay.handle.shutdown().await;

    // A relay without rooms (and no key) takes room metadata from nobody.
    let plain = TestRelay::start().await;
    let mut c = plain.client().await;
    let event = signed(&stranger, 39000, "", vec![Tag::identifier("lab")]);
    let (ok, message) = c.publish(&event).await;
    assert!(!ok && message.starts_with("restricted: "), "{message}");
    plain.handle.shutdown().await;
}

/// Room metadata a client stored before the relay refused it, and events naming two rooms, are removed
/// when the relay starts: they would go on being served (a forged room name dated ahead, a stranger's
/// message in a closed room).
#[tokio::test]
async fn what_was_stored_before_the_room_rules_is_removed_at_start() {
    use agentwire_relay::store::EventStore;
    let (relay_keys, stranger, member) = (Keys::generate(), Keys::generate(), Keys::generate());
    let dir = tempfile::TempDir::new().unwrap();
    let forged = common::signed_at(
        &stranger,
        39000,
        "",
        vec![
            Tag::parse(["d", "lab"]).unwrap(),
            Tag::parse(["name", "Owned"]).unwrap(),
        ],
        common::now() + 3600,
    );
    let two_rooms = signed(
        &stranger,
        9,
        "smuggled",
        vec![
            Tag::parse(["h", "lobby"]).unwrap(),
            Tag::parse(["h", "lab"]).unwrap(),
        ],
    );
    let fine = signed(&member, 9, "hello", h("lab"));
    {
        let mut store = EventStore::open(&dir.path().join("relay.sqlite")).unwrap();
        store
            .insert_batch(&[forged.clone(), two_rooms.clone(), fine.clone()])
            .unwrap();
    }
    let mut config = common::config(&dir, Default::default());
    config.rooms = vec![
        room("lab", true, &[&member], &[]),
        room("lobby", false, &[], &[]),
    ];
    config.relay_keys = Some(relay_keys.clone());
    let relay = agentwire_relay::start(config).await.unwrap();
    let mut c = common::Client::connect(&relay.url()).await;
    let metadata = c
        .query(
            "meta",
            vec![Filter::new().kind(Kind::from_u16(39000)).identifier("lab")],
        )
        .await;
    assert!(!metadata.is_empty(), "the relay's own metadata is there");
    assert!(
        metadata.iter().all(|e| e.pubkey == relay_keys.public_key()),
        "only the relay's: {metadata:?}"
    );
    let lab = c
        .query(
            "lab",
            vec![Filter::new().custom_tag(nostr::filter::SingleLetterTag::LOWERCASE_H, "lab")],
        )
        .await;
    let ids: Vec<_> = lab.iter().map(|e| e.id).collect();
    assert!(ids.contains(&fine.id), "a room's own message stays");
    assert!(!ids.contains(&two_rooms.id), "the smuggled one is gone");
    relay.shutdown().await;
}

/// A write to a room that does not exist yet is refused, so that nothing a stranger wrote before the room was
/// created (closed) shows as its history.
#[tokio::test]
async fn a_room_takes_no_events_before_it_exists() {
    let (relay_keys, boss, member, stranger) = (
        Keys::generate(),
        Keys::generate(),
        Keys::generate(),
        Keys::generate(),
    );
    let b = boss.public_key();
    let relay = TestRelay::with_config(move |c| {
        c.relay_keys = Some(relay_keys);
        c.admins.insert(b);
    })
    .await;
    let mut c = relay.client().await;
    for kind in [9, 11, 12, 1111, 43001] {
        let early = signed(&stranger, kind, "first!", h("ops"));
        let (ok, message) = c.publish(&early).await;
        assert!(!ok, "kind {kind} taken before the room exists");
        assert_eq!(
            message,
            "invalid: there is no room \"ops\" on this relay; a room takes events once it exists"
        );
    }
    let member_hex = member.public_key().to_hex();
    for e in [
        moderation(&boss, 9007, "ops", &[]),
        moderation(&boss, 9002, "ops", &[&["closed"]]),
        moderation(&boss, 9000, "ops", &[&["p", &member_hex]]),
    ] {
        assert_eq!(c.publish(&e).await, (true, String::new()));
    }
    let hello = signed(&member, 9, "hello", h("ops"));
    assert!(c.publish(&hello).await.0);
    let history = c
        .query(
            "ops",
            vec![Filter::new().custom_tag(nostr::filter::SingleLetterTag::LOWERCASE_H, "ops")],
        )
        .await;
    assert!(
        history.iter().all(|e| e.pubkey != stranger.public_key()),
        "the stranger's early events are in the room: {history:?}"
    );
    assert!(history.iter().any(|e| e.id == hello.id));
    relay.handle.shutdown().await;
}

/// A room taken out of the configuration is retired: its metadata is removed (no client sees the room any
/// more) and its events, kept, are read by nobody (a private room's stay private) and written by nobody.
/// Configured again, it has its history back.
#[tokio::test]
async fn a_room_no_longer_configured_is_retired_and_comes_back_with_its_history() {
    let (relay_keys, member) = (Keys::generate(), Keys::generate());
    let mut vault = room("vault", true, &[&member], &[]);
    vault.private = true;
    let rooms = vec![vault, room("lab", false, &[], &[])];
    let (rk, configured) = (relay_keys.clone(), rooms.clone());
    let relay = TestRelay::with_config(move |c| {
        c.rooms = configured;
        c.relay_keys = Some(rk);
    })
    .await;
    let mut c = relay.client().await;
    let secret = signed(&member, 9, "the combination", h("vault"));
    let chat = signed(&member, 9, "lunch?", h("lab"));
    assert!(c.publish(&secret).await.0);
    assert!(c.publish(&chat).await.0);
    let plain = signed(&member, 1, "a plain note", vec![]);
    assert!(c.publish(&plain).await.0);
    drop(c);
    let dir = relay.dir;
    relay.handle.shutdown().await;

    // Started without its rooms (and, as the daemon does then, without a relay key).
    let handle = agentwire_relay::start(common::config(&dir, Default::default()))
        .await
        .unwrap();
    let mut c = common::Client::connect(&handle.url()).await;
    let metadata = c
        .query(
            "meta",
            vec![Filter::new().kinds([39000, 39001, 39002].map(Kind::from_u16))],
        )
        .await;
    assert!(metadata.is_empty(), "{metadata:?}");
    let everything = c.query("all", vec![Filter::new()]).await;
    assert_eq!(
        everything.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![plain.id],
        "a retired room's events were served"
    );
    let by_room = c
        .query(
            "vault",
            vec![Filter::new().custom_tag(nostr::filter::SingleLetterTag::LOWERCASE_H, "vault")],
        )
        .await;
    assert!(by_room.is_empty(), "{by_room:?}");
    let (ok, message) = c.publish(&signed(&member, 9, "anyone?", h("lab"))).await;
    assert!(
        !ok && message.starts_with("invalid: there is no room"),
        "{message}"
    );
    drop(c);
    handle.shutdown().await;

    // A second start without them: still retired (the metadata that named them is gone by now).
    let handle = agentwire_relay::start(common::config(&dir, Default::default()))
        .await
        .unwrap();
    let mut c = common::Client::connect(&handle.url()).await;
    assert_eq!(
        c.query("all", vec![Filter::new().kind(Kind::from_u16(9))])
            .await,
        vec![]
    );
    drop(c);
    handle.shutdown().await;

    // Configured again: the history is back, and the private room is private still.
    let mut config = common::config(&dir, Default::default());
    config.rooms = rooms;
    config.relay_keys = Some(relay_keys);
    let handle = agentwire_relay::start(config).await.unwrap();
    let mut c = common::Client::connect(&handle.url()).await;
    let chat_now = c
        .query("chat", vec![Filter::new().kind(Kind::from_u16(9))])
        .await;
    assert_eq!(
        chat_now.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![chat.id]
    );
    c.authenticate(&member, &handle.url()).await;
    let mut ids: Vec<_> = c
        .query("chat2", vec![Filter::new().kind(Kind::from_u16(9))])
        .await
        .iter()
        .map(|e| e.id)
        .collect();
    ids.sort();
    let mut want = vec![chat.id, secret.id];
    want.sort();
    assert_eq!(ids, want);
    handle.shutdown().await;
}

/// A room name with a right-to-left override (or any bidi control) shows as something else than it is:
/// refused in a 9002.
#[tokio::test]
async fn a_room_name_with_bidi_controls_is_refused() {
    let (relay_keys, lead) = (Keys::generate(), Keys::generate());
    let rooms = vec![room("lab", false, &[], &[&lead])];
    let rk = relay_keys.clone();
    let relay = TestRelay::with_config(move |c| {
        c.rooms = rooms;
        c.relay_keys = Some(rk);
    })
    .await;
    let mut c = relay.client().await;
    for name in ["Lab\u{202E}gnp.exe", "\u{2067}Lab\u{2069}", "Lab\u{1b}[2J"] {
        let (ok, message) = c
            .publish(&moderation(&lead, 9002, "lab", &[&["name", name]]))
            .await;
        assert!(!ok, "{name:?} taken");
        assert!(
            message.starts_with("invalid: a room name may not hold"),
            "{message}"
        );
    }
    assert_eq!(
        room_name(&mut c, &relay_keys, "lab", "n").await.as_deref(),
        Some("Lab")
    );
    relay.handle.shutdown().await;
}
