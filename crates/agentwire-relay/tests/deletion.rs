//! NIP-09 deletion requests over a real relay connection.

mod common;

use common::{now, signed, signed_at, TestRelay};
use nostr::event::{Kind, Tag};
use nostr::filter::Filter;
use nostr::key::Keys;

fn tag(parts: &[&str]) -> Tag {
    Tag::parse(parts.iter().map(|p| p.to_string()).collect::<Vec<_>>()).unwrap()
}

#[tokio::test]
async fn an_author_deletes_their_own_events_and_they_are_not_stored_again() {
    let relay = TestRelay::start().await;
    let mut c = relay.client().await;
    let (author, other) = (Keys::generate(), Keys::generate());
    let mine = signed(&author, 1, "regret", vec![]);
    let theirs = signed(&other, 1, "not yours", vec![]);
    assert!(c.publish(&mine).await.0);
    assert!(c.publish(&theirs).await.0);
    let t = now();
    let profile = signed_at(&author, 30023, "draft", vec![tag(&["d", "post"])], t - 10);
    assert!(c.publish(&profile).await.0);

    let address = format!("30023:{}:post", author.public_key().to_hex());
    let deletion = signed_at(
        &author,
        5,
        "oops",
        vec![
            tag(&["e", &mine.id.to_hex()]),
            tag(&["e", &theirs.id.to_hex()]),
            tag(&["a", &address]),
        ],
        t,
    );
    assert_eq!(c.publish(&deletion).await, (true, String::new()));
    let left = c.query("all", vec![Filter::new()]).await;
    c.send(nostr::message::ClientMessage::close(
        nostr::message::SubscriptionId::new("all"),
    ))
    .await;
    let ids: Vec<_> = left.iter().map(|e| e.id).collect();
    assert!(!ids.contains(&mine.id), "the author's event is gone");
    assert!(
        !ids.contains(&profile.id),
        "so is the addressable event up to the request"
    );
    assert!(ids.contains(&theirs.id), "someone else's event stays");
    assert!(ids.contains(&deletion.id), "the request itself is kept");

    let (ok, message) = c.publish(&mine).await;
    assert!(!ok && message.starts_with("blocked:"), "{message}");
    // A newer version at the deleted address is a new event.
    let newer = signed_at(
        &author,
        30023,
        "rewritten",
        vec![tag(&["d", "post"])],
        t + 1,
    );
    assert_eq!(c.publish(&newer).await, (true, String::new()));
    // Nobody deletes a deletion request.
    let undo = signed(&author, 5, "", vec![tag(&["e", &deletion.id.to_hex()])]);
    assert!(c.publish(&undo).await.0);
    let kept = c
        .query("del", vec![Filter::new().kind(Kind::from_u16(5))])
        .await;
    assert!(kept.iter().any(|e| e.id == deletion.id));
    relay.handle.shutdown().await;
}
