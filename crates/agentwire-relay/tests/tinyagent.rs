//! Tiny agent question cards over a real relay connection: malformed cards are refused with the rule they
//! break, the first valid answer settles a card, later answers and invalid ones are refused saying why,
//! and settlement survives a restart.

mod common;

use common::{now, signed_at, TestRelay};
use nostr::event::{Event, Kind, Tag};
use nostr::filter::{Filter, SingleLetterTag};
use nostr::key::Keys;

fn tag(parts: &[&str]) -> Tag {
    Tag::parse(parts.iter().map(|p| p.to_string()).collect::<Vec<_>>()).unwrap()
}

fn question(agent: &Keys, asked: &Keys, extra: &[&[&str]], at: u64) -> Event {
    let mut tags = vec![
        tag(&["h", "lab"]),
        tag(&["p", &asked.public_key().to_hex()]),
        tag(&["request", "question"]),
        tag(&["tinyagent", "1"]),
        tag(&["interaction", "question"]),
    ];
    tags.extend(extra.iter().map(|t| tag(t)));
    signed_at(agent, 9, "Keep going?", tags, at)
}

fn options() -> Vec<&'static [&'static str]> {
    vec![
        &["selection", "single"],
        &["option", "continue", "Continue playing"],
        &["option", "stop", "Stop here"],
    ]
}

fn answer(by: &Keys, q: &Event, content: &str, at: u64) -> Event {
    let (id, author) = (q.id.to_hex(), q.pubkey.to_hex());
    let tags = vec![
        tag(&["E", &id]),
        tag(&["e", &id]),
        tag(&["K", "9"]),
        tag(&["k", "9"]),
        tag(&["P", &author]),
        tag(&["p", &author]),
        tag(&["h", "lab"]),
    ];
    signed_at(by, 1111, content, tags, at)
}

#[tokio::test]
async fn malformed_question_cards_are_refused_naming_the_rule() {
    let relay = TestRelay::with_rooms(&["lab"]).await;
    let mut c = relay.client().await;
    let (agent, asked) = (Keys::generate(), Keys::generate());
    let t = now();
    let cases: Vec<(Vec<&[&str]>, &str)> = vec![
        (vec![&["selection", "ranked"]], "unknown selection"),
        (
            vec![&["selection", "text"], &["option", "a", "A"]],
            "selection=text takes no options",
        ),
        (
            vec![&["option", "a", "A"], &["option", "a", "Again"]],
            "appears twice",
        ),
        (
            vec![&["selection", "text"], &["freeform", "true"]],
            "freeform=true needs options",
        ),
        (
            vec![&["option", "a", "A"], &["expiration", "tomorrow"]],
            "not a Unix time",
        ),
    ];
    for (extra, reason) in cases {
        let q = question(&agent, &asked, &extra, t);
        let (ok, message) = c.publish(&q).await;
        assert!(!ok, "{reason}: accepted");
        assert!(
            message.starts_with("invalid: ") && message.contains(reason),
            "{reason}: {message}"
        );
    }
    let interaction = {
        let mut tags = vec![
            tag(&["h", "lab"]),
            tag(&["p", &asked.public_key().to_hex()]),
            tag(&["request", "question"]),
            tag(&["tinyagent", "1"]),
            tag(&["interaction", "poll"]),
            tag(&["option", "a", "A"]),
        ];
        tags.push(tag(&["subject", "x"]));
        signed_at(&agent, 9, "?", tags, t)
    };
    let (ok, message) = c.publish(&interaction).await;
    assert!(!ok && message.contains("unknown interaction"), "{message}");
    // Nothing refused was stored; a plain kind 9 without the native tags is just a message.
    let plain = signed_at(&agent, 9, "approve?", vec![tag(&["h", "lab"])], t);
    assert_eq!(c.publish(&plain).await, (true, String::new()));
    let stored = c
        .query("all", vec![Filter::new().kind(Kind::from_u16(9))])
        .await;
    assert_eq!(
        stored.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![plain.id]
    );
    relay.handle.shutdown().await;
}

#[tokio::test]
async fn the_first_valid_answer_settles_and_every_other_is_refused_saying_why() {
    let relay = TestRelay::with_rooms(&["lab"]).await;
    let mut c = relay.client().await;
    let (agent, asked, stranger) = (Keys::generate(), Keys::generate(), Keys::generate());
    let t = now();
    let q = question(&agent, &asked, &options(), t);
    assert_eq!(c.publish(&q).await, (true, String::new()));

    let (ok, message) = c.publish(&answer(&stranger, &q, "stop", t + 1)).await;
    assert!(!ok && message.starts_with("restricted: "), "{message}");
    let (ok, message) = c.publish(&answer(&asked, &q, "pause", t + 1)).await;
    assert!(
        !ok && message.starts_with("invalid: ") && message.contains("not an option"),
        "{message}"
    );
    let (ok, message) = c.publish(&answer(&asked, &q, "stop", t - 5)).await;
    assert!(!ok && message.contains("before the question"), "{message}");

    let first = answer(&asked, &q, "stop", t + 2);
    assert_eq!(c.publish(&first).await, (true, String::new()));
    let (ok, message) = c.publish(&answer(&asked, &q, "continue", t + 3)).await;
    assert!(
        !ok && message.starts_with("duplicate: ") && message.contains(&first.id.to_hex()),
        "{message}"
    );
    // The same answer sent again is the usual duplicate of a stored event.
    let (ok, message) = c.publish(&first).await;
    assert!(ok && message.starts_with("duplicate:"), "{message}");
    let stored = c
        .query("answers", vec![Filter::new().kind(Kind::from_u16(1111))])
        .await;
    assert_eq!(
        stored.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![first.id]
    );

    // Settlement is durable: after a restart the question is still settled.
    drop(c);
    let relay = relay.restart().await;
    let mut c = relay.client().await;
    let (ok, message) = c.publish(&answer(&asked, &q, "continue", t + 4)).await;
    assert!(!ok && message.starts_with("duplicate: "), "{message}");
    relay.handle.shutdown().await;
}

#[tokio::test]
async fn an_expired_question_takes_no_answer_and_replies_to_other_events_are_plain_comments() {
    let relay = TestRelay::with_rooms(&["lab"]).await;
    let mut c = relay.client().await;
    let (agent, asked) = (Keys::generate(), Keys::generate());
    let t = now();
    let expiry = (t + 30).to_string();
    let expiration: &[&str] = &["expiration", &expiry];
    let mut extra = options();
    extra.push(expiration);
    let q = question(&agent, &asked, &extra, t);
    assert_eq!(c.publish(&q).await, (true, String::new()));
    let (ok, message) = c.publish(&answer(&asked, &q, "stop", t + 30)).await;
    assert!(!ok && message.contains("expired"), "{message}");
    assert_eq!(
        c.publish(&answer(&asked, &q, "stop", t + 29)).await,
        (true, String::new())
    );

    // A reply to a plain room message is a comment like any other, whatever it says.
    let plain = signed_at(&agent, 9, "lunch?", vec![tag(&["h", "lab"])], t);
    assert_eq!(c.publish(&plain).await, (true, String::new()));
    let stranger = Keys::generate();
    assert_eq!(
        c.publish(&answer(&stranger, &plain, "anything", t + 1))
            .await,
        (true, String::new())
    );
    relay.handle.shutdown().await;
}

#[test]
fn a_late_answer_to_a_question_purged_after_its_expiry_is_still_refused() {
    use agentwire_relay::store::{EventStore, InsertOutcome};
    use agentwire_relay::tinyagent::AnswerRefusal;
    use nostr::types::Timestamp;
    let dir = tempfile::tempdir().unwrap();
    let mut store = EventStore::open(&dir.path().join("relay.sqlite")).unwrap();
    let (agent, asked) = (Keys::generate(), Keys::generate());
    let t = now() - 100;
    let expiry = (t + 10).to_string();
    let expiration: &[&str] = &["expiration", &expiry];
    let mut extra = options();
    extra.push(expiration);
    let q = question(&agent, &asked, &extra, t);
    assert_eq!(store.insert(&q).unwrap(), InsertOutcome::Inserted);
    assert_eq!(
        store.purge_expired(Timestamp::from_secs(t + 20)).unwrap(),
        1
    );
    // Dated in time, but the question is gone: the relay still knows it expired.
    assert_eq!(
        store.insert(&answer(&asked, &q, "stop", t + 5)).unwrap(),
        InsertOutcome::Refused(AnswerRefusal::Expired(Timestamp::from_secs(t + 10)))
    );
}

#[tokio::test]
async fn an_answer_to_a_deleted_question_is_refused_as_deleted() {
    let relay = TestRelay::with_rooms(&["lab"]).await;
    let mut c = relay.client().await;
    let (agent, asked) = (Keys::generate(), Keys::generate());
    let t = now();
    let q = question(&agent, &asked, &options(), t);
    assert!(c.publish(&q).await.0);
    let deletion = signed_at(&agent, 5, "", vec![tag(&["e", &q.id.to_hex()])], t);
    assert!(c.publish(&deletion).await.0);
    let (ok, message) = c.publish(&answer(&asked, &q, "stop", t + 1)).await;
    assert!(!ok && message.contains("deleted"), "{message}");
    relay.handle.shutdown().await;
}

/// The NIP-22 tags of an answer to `q` without `leave_out`, with `extra` tags after them.
fn answer_tags(q: &Event, leave_out: &str, extra: &[&[&str]]) -> Vec<Tag> {
    let (id, author) = (q.id.to_hex(), q.pubkey.to_hex());
    let all: [&[&str]; 7] = [
        &["E", &id],
        &["e", &id],
        &["K", "9"],
        &["k", "9"],
        &["P", &author],
        &["p", &author],
        &["h", "lab"],
    ];
    all.iter()
        .filter(|t| t[0] != leave_out)
        .map(|t| tag(t))
        .chain(extra.iter().map(|t| tag(t)))
        .collect()
}

#[tokio::test]
async fn an_answer_without_its_root_e_tag_is_refused_and_does_not_settle() {
    let relay = TestRelay::with_rooms(&["lab"]).await;
    let mut c = relay.client().await;
    let (agent, asked) = (Keys::generate(), Keys::generate());
    let t = now();
    let q = question(&agent, &asked, &options(), t);
    assert!(c.publish(&q).await.0);
    let without_root = signed_at(&asked, 1111, "stop", answer_tags(&q, "E", &[]), t + 1);
    let (ok, message) = c.publish(&without_root).await;
    assert!(
        !ok && message.starts_with("invalid: ") && message.contains("E must name the question"),
        "{message}"
    );
    // The card is still open: the first valid answer settles it.
    let valid = answer(&asked, &q, "continue", t + 2);
    assert_eq!(c.publish(&valid).await, (true, String::new()));
    relay.handle.shutdown().await;
}

#[tokio::test]
async fn a_comment_with_two_roots_or_two_parents_is_refused_and_never_listed_under_a_card() {
    let relay = TestRelay::with_rooms(&["lab"]).await;
    let mut c = relay.client().await;
    let (agent, asked) = (Keys::generate(), Keys::generate());
    let t = now();
    let q = question(&agent, &asked, &options(), t);
    assert!(c.publish(&q).await.0);
    let decoy = signed_at(&agent, 9, "lunch?", vec![tag(&["h", "lab"])], t);
    assert!(c.publish(&decoy).await.0);
    let (card, other) = (q.id.to_hex(), decoy.id.to_hex());
    // A decoy root first and the card second; then the same with the parents.
    let two_roots = signed_at(
        &asked,
        1111,
        "stop",
        vec![tag(&["E", &other]), tag(&["E", &card]), tag(&["e", &other])],
        t + 1,
    );
    let (ok, message) = c.publish(&two_roots).await;
    assert!(
        !ok && message.starts_with("invalid: ") && message.contains("one E tag"),
        "{message}"
    );
    let two_parents = signed_at(
        &asked,
        1111,
        "stop",
        vec![tag(&["E", &other]), tag(&["e", &other]), tag(&["e", &card])],
        t + 1,
    );
    let (ok, message) = c.publish(&two_parents).await;
    assert!(
        !ok && message.starts_with("invalid: ") && message.contains("one e tag"),
        "{message}"
    );
    // Rooted elsewhere with the card as its parent: an answer missing its root.
    let parent_only = signed_at(
        &asked,
        1111,
        "stop",
        vec![tag(&["E", &other]), tag(&["e", &card])],
        t + 1,
    );
    let (ok, message) = c.publish(&parent_only).await;
    assert!(
        !ok && message.contains("E must name the question"),
        "{message}"
    );
    let listed = c
        .query(
            "under the card",
            vec![
                Filter::new().kind(Kind::from_u16(1111)).event(q.id),
                Filter::new()
                    .kind(Kind::from_u16(1111))
                    .custom_tag(SingleLetterTag::UPPERCASE_E, q.id.to_hex()),
            ],
        )
        .await;
    assert!(listed.is_empty(), "{listed:?}");
    let valid = answer(&asked, &q, "stop", t + 2);
    assert_eq!(c.publish(&valid).await, (true, String::new()));
    relay.handle.shutdown().await;
}

/// The spec's compatibility rule: "Older requests without the native tags retain the existing approve, deny
/// and freeform reply behavior". A request without `["tinyagent","1"]` (an older client's approval, or a
/// task) is answered by a plain NIP-22 reply: its root and parent and their kinds (`E`/`e`, `K`/`k`), no
/// `h`, no `P`/`p`, whatever it says. The strict rule stays for native cards: the same plain reply to one
/// is refused, naming the tag it lacks, and does not settle it.
#[tokio::test]
async fn a_plain_nip22_reply_answers_a_request_without_the_native_tags_but_not_a_card() {
    let relay = TestRelay::with_rooms(&["lab"]).await;
    let mut c = relay.client().await;
    let (agent, asked) = (Keys::generate(), Keys::generate());
    let t = now();
    let plain_reply = |to: &Event, content: &str| {
        let (id, kind) = (to.id.to_hex(), to.kind.as_u16().to_string());
        signed_at(
            &asked,
            1111,
            content,
            vec![
                tag(&["E", &id]),
                tag(&["e", &id]),
                tag(&["K", &kind]),
                tag(&["k", &kind]),
            ],
            t + 1,
        )
    };
    // An older approval request: a room message asking, without the native tags.
    let older = signed_at(
        &agent,
        9,
        "May I run `make deploy`? Reply approve or deny.",
        vec![
            tag(&["h", "lab"]),
            tag(&["p", &asked.public_key().to_hex()]),
            tag(&["request", "approval"]),
        ],
        t,
    );
    // A question without `tinyagent`: an older client's, not a card.
    let untagged_question = signed_at(
        &agent,
        9,
        "Which branch?",
        vec![
            tag(&["h", "lab"]),
            tag(&["p", &asked.public_key().to_hex()]),
            tag(&["request", "question"]),
            tag(&["option", "main", "Main"]),
        ],
        t,
    );
    // A long task (43001).
    let task = signed_at(
        &asked,
        43001,
        "summarise the build failures",
        vec![
            tag(&["h", "lab"]),
            tag(&["p", &agent.public_key().to_hex()]),
        ],
        t,
    );
    let card = question(&agent, &asked, &options(), t);
    for request in [&older, &untagged_question, &task, &card] {
        assert_eq!(c.publish(request).await, (true, String::new()));
    }
    let mut kept = Vec::new();
    for (request, content) in [
        (&older, "approve"),
        (&older, "deny"),
        (&untagged_question, "the release branch, please"),
        (&task, "also the flaky ones"),
    ] {
        let reply = plain_reply(request, content);
        assert_eq!(
            c.publish(&reply).await,
            (true, String::new()),
            "a plain reply to kind {}: {content}",
            request.kind.as_u16()
        );
        kept.push(reply.id);
    }
    // Stored and listed under their requests, as any client asks for a thread's comments.
    let listed = c
        .query(
            "replies",
            vec![Filter::new().kind(Kind::from_u16(1111)).custom_tags(
                SingleLetterTag::UPPERCASE_E,
                [older.id, untagged_question.id, task.id].map(|i| i.to_hex()),
            )],
        )
        .await;
    let mut listed: Vec<_> = listed.iter().map(|e| e.id).collect();
    listed.sort();
    kept.sort();
    assert_eq!(listed, kept);

    // A native card keeps the strict rule: the same plain reply is no answer.
    let (ok, message) = c.publish(&plain_reply(&card, "stop")).await;
    assert!(
        !ok && message.starts_with("invalid: ")
            && message.contains("P must be the question's author"),
        "{message}"
    );
    for leave_out in ["h", "K", "k", "P", "p"] {
        let without = signed_at(
            &asked,
            1111,
            "stop",
            answer_tags(&card, leave_out, &[]),
            t + 1,
        );
        let (ok, message) = c.publish(&without).await;
        assert!(
            !ok && message.starts_with("invalid: "),
            "without {leave_out}: {message}"
        );
    }
    // ... and is still open for a full answer.
    assert_eq!(
        c.publish(&answer(&asked, &card, "continue", t + 2)).await,
        (true, String::new())
    );
    relay.handle.shutdown().await;
}
