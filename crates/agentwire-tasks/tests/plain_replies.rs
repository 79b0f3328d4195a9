//! Plain NIP-22 replies against the real embedded relay, both ways of the spec's compatibility rule: a
//! question asked without the native tags (`cards = "legacy"`, a plain kind 12) is answered by a plain
//! kind 1111 reply (its root, parent and their kinds, no `h`, no `p`) with the approve, deny and freeform
//! behaviour of a thread reply; a native question card keeps the strict rule, so the same plain reply is
//! refused by the relay and leaves the card open.

mod common;

use common::*;
use nostr::prelude::{Event, EventBuilder, FinalizeEvent, Keys, Kind};
use std::time::Duration;

/// A plain NIP-22 reply by `who` to `to`: only what NIP-22 asks of a comment.
fn plain_reply(who: &Keys, to: &Event, content: &str) -> Event {
    let (id, kind) = (to.id.to_hex(), to.kind.as_u16().to_string());
    EventBuilder::new(Kind::Custom(1111), content)
        .tags([
            tag(&["E", &id]),
            tag(&["e", &id]),
            tag(&["K", &kind]),
            tag(&["k", &kind]),
        ])
        .finalize(who)
        .unwrap()
}

#[tokio::test]
async fn a_question_without_the_native_tags_is_answered_by_a_plain_nip22_reply() {
    let Running {
        s, url, mut alice, ..
    } = running(|c| c.legacy_cards = true).await;
    let agent = s.agent.public_key();
    let req = alice.task(agent, "approve make deploy", vec![]).await;
    let asked = alice
        .next(WAIT, |e| e.pubkey == agent && e.kind.as_u16() == 12)
        .await
        .expect("the question as a thread message");
    assert!(
        asked.content.ends_with("Reply `approve` or `deny`."),
        "{}",
        asked.content
    );
    assert!(values(&asked, "tinyagent").is_empty(), "no native tags");
    // Bob may give tasks but was not asked: the relay keeps his comment, the adapter passes it over.
    let bob = Person::join_rooms(&url, s.bob.clone(), &["lab"]).await;
    let ok = bob
        .conn
        .publish(&plain_reply(&s.bob, &asked, "approve"))
        .await
        .unwrap();
    assert!(ok.accepted, "{}", ok.message);
    let early = alice
        .next(Duration::from_millis(700), |e| {
            is_terminal(e) && values(e, "e").contains(&req.id.to_hex().as_str())
        })
        .await;
    assert!(early.is_none(), "settled by someone not asked: {early:?}");
    // Alice's plain reply, with no room and naming nobody, is taken and answers it.
    let ok = alice
        .conn
        .publish(&plain_reply(&s.alice, &asked, "deny"))
        .await
        .unwrap();
    assert!(ok.accepted, "{}", ok.message);
    let card = alice.card(&req.id, Duration::from_millis(300)).await;
    let t = terminals(&card);
    assert_eq!(t.len(), 1, "{:?}", kinds(&card));
    assert_eq!(t[0].kind.as_u16(), 43004);
    assert_eq!(t[0].content, "declined", "the requester's answer");
}

#[tokio::test]
async fn a_native_card_refuses_a_plain_reply_and_stays_open_for_a_full_answer() {
    let Running { s, mut alice, .. } = running(|_| {}).await;
    let agent = s.agent.public_key();
    let req = alice.task(agent, "confirm Ship it?", vec![]).await;
    let card = alice.question_card().await;
    let ok = alice
        .conn
        .publish(&plain_reply(&s.alice, &card, "yes"))
        .await
        .unwrap();
    assert!(
        !ok.accepted && ok.message.starts_with("invalid: "),
        "a plain reply to a native card: {}",
        ok.message
    );
    let early = alice
        .next(Duration::from_millis(700), |e| {
            is_terminal(e) && values(e, "e").contains(&req.id.to_hex().as_str())
        })
        .await;
    assert!(early.is_none(), "the refused reply settled it: {early:?}");
    alice
        .publish(1111, "no", answer_tags(&card.id, &agent))
        .await;
    let ended = alice.card(&req.id, Duration::from_millis(300)).await;
    let t = terminals(&ended);
    assert_eq!(t.len(), 1, "{:?}", kinds(&ended));
    assert_eq!(t[0].content, "no");
}
