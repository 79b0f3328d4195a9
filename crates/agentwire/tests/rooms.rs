//! Rooms from the configuration file on the daemon's embedded relay: a closed room refuses a stranger's
//! message, takes a member's, and its metadata is signed by a relay key kept in the data dir (the same key
//! after a restart).

mod common;

use agentwire_nostr::relay_conn::{Incoming, RelayConn};
use common::Daemon;
use nostr::prelude::{EventBuilder, Filter, FinalizeEvent, Keys, Kind, Tag};
use std::time::Duration;

fn message(keys: &Keys, room: &str) -> nostr::prelude::Event {
    EventBuilder::new(Kind::from_u16(9), "hello")
        .tags([Tag::parse(["h", room]).unwrap()])
        .finalize(keys)
        .unwrap()
}

/// The author of the room's 39000 metadata event.
async fn metadata_author(
    conn: &RelayConn,
    rx: &mut tokio::sync::mpsc::Receiver<Incoming>,
) -> String {
    conn.subscribe("meta", vec![Filter::new().kind(Kind::from_u16(39000))]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(Incoming::Event { event, .. })) => {
                assert_eq!(event.tags.identifier().as_deref(), Some("lab"));
                return event.pubkey.to_hex();
            }
            Ok(Some(_)) => {}
            other => panic!("no room metadata: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_configured_closed_room_takes_its_members_only() {
    let dir = tempfile::tempdir().unwrap();
    let (member, stranger) = (Keys::generate(), Keys::generate());
    let config = dir.path().join("agentwire.toml");
    std::fs::write(
        &config,
        format!(
            "[[rooms]]\nid = \"lab\"\nname = \"Lab\"\nclosed = true\nmembers = [\"{}\"]\n",
            member.public_key().to_hex()
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let mut daemon = Daemon::start(&data, &["--config", config.to_str().unwrap()]);
    let (conn, mut rx) = RelayConn::connect(&daemon.relay);
    assert!(conn.wait_connected(Duration::from_secs(10)).await);
    let ok = conn.publish(&message(&stranger, "lab")).await.unwrap();
    assert!(
        !ok.accepted && ok.message.starts_with("restricted: "),
        "{}",
        ok.message
    );
    let ok = conn.publish(&message(&member, "lab")).await.unwrap();
    assert!(ok.accepted, "{}", ok.message);
    let signer = metadata_author(&conn, &mut rx).await;
    assert_ne!(
        signer,
        daemon.agent.to_hex(),
        "the relay signs with a key of its own"
    );
    assert!(data.join("relay.key").exists());
    drop(conn);
    daemon.kill();

    let daemon = Daemon::start(&data, &["--config", config.to_str().unwrap()]);
    let (conn, mut rx) = RelayConn::connect(&daemon.relay);
    assert!(conn.wait_connected(Duration::from_secs(10)).await);
    assert_eq!(
        metadata_author(&conn, &mut rx).await,
        signer,
        "the same relay key after a restart"
    );
}
