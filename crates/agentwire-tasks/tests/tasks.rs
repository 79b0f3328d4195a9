//! The task-card adapter against the real embedded relay over loopback WebSockets: people in a room give
//! the demo agent tasks (43001) and watch the cards (43002-43006), answer its question cards (kind 1111),
//! cancel with 43005 or `!cancel`; files and handoffs become thread messages; a refused terminal is sent
//! again; a restart does not run a finished task again.

mod common;

use agentwire_engine::Front;
use common::*;
use nostr::prelude::{Event, EventBuilder, Keys, Kind, Tag};
use std::sync::atomic::Ordering;
use std::time::Duration;

#[tokio::test]
async fn a_task_is_accepted_then_answered_with_one_result_linking_its_thread_reply() {
    let Running { s, mut alice, .. } = running(|_| {}).await;
    let req = alice.task(s.agent.public_key(), "calc 6*7", vec![]).await;
    let card = alice.card(&req.id, Duration::from_millis(1500)).await;
    let ks = kinds(&card);
    assert_eq!(ks.first(), Some(&43002), "accepted first: {ks:?}");
    assert_eq!(ks.iter().filter(|k| **k == 43002).count(), 1, "{ks:?}");
    let t = terminals(&card);
    assert_eq!(t.len(), 1, "exactly one terminal: {ks:?}");
    assert_eq!(t[0].kind.as_u16(), 43004);
    assert_eq!(t[0].content, "42");
    assert_eq!(values(t[0], "p"), vec![s.alice.public_key().to_hex()]);
    assert_eq!(values(t[0], "h"), vec!["lab"]);
    let es = values(t[0], "e");
    assert_eq!(es[0], req.id.to_hex(), "the first e is the request");
    let reply = card
        .iter()
        .find(|e| e.kind.as_u16() == 12)
        .expect("the full reply as a thread message");
    assert_eq!(reply.content, "42");
    assert!(
        es.contains(&reply.id.to_hex().as_str()),
        "the result links it"
    );
    assert!(reply
        .tags
        .iter()
        .any(|t| t.as_slice() == ["e", &req.id.to_hex(), "", "root"]));
}

#[tokio::test]
async fn requests_from_strangers_or_other_rooms_are_ignored_and_a_shared_thread_keeps_separate_cards(
) {
    let Running { s, mut alice, .. } = running(|_| {}).await;
    // Not for this agent.
    let other = alice
        .publish(
            43001,
            "hello",
            vec![
                Tag::public_key(Keys::generate().public_key()),
                tag(&["h", "lab"]),
            ],
        )
        .await;
    // In a room it does not watch.
    let elsewhere = alice
        .publish(
            43001,
            "hello",
            vec![Tag::public_key(s.agent.public_key()), tag(&["h", "home"])],
        )
        .await;
    let first = alice.task(s.agent.public_key(), "one", vec![]).await;
    let root = first.id.to_hex();
    let second = alice
        .task(
            s.agent.public_key(),
            "two",
            vec![tag(&["e", &root, "", "root"])],
        )
        .await;
    let a = alice.card(&first.id, Duration::from_millis(300)).await;
    let b = alice.card(&second.id, Duration::from_millis(300)).await;
    assert_eq!(terminals(&a).len(), 1);
    let tb = terminals(&b);
    assert_eq!(tb.len(), 1);
    assert_eq!(tb[0].content, "You said: two");
    // It names both the root (the first request) and its own request, so either card may have it.
    let reply = a
        .iter()
        .chain(&b)
        .find(|e| e.kind.as_u16() == 12 && e.content == "You said: two")
        .expect("the second task's reply");
    assert!(
        reply
            .tags
            .iter()
            .any(|t| t.as_slice() == ["e", &root, "", "root"]),
        "the thread's root"
    );
    assert!(
        reply
            .tags
            .iter()
            .any(|t| t.as_slice() == ["e", &second.id.to_hex(), "", "reply"]),
        "names the request it answers"
    );
    for ignored in [other.id, elsewhere.id] {
        let seen = alice
            .next(Duration::from_millis(500), |e| {
                e.kind.as_u16() >= 43002 && values(e, "e").contains(&ignored.to_hex().as_str())
            })
            .await;
        assert!(seen.is_none(), "no card for an ignored request");
    }
}

#[tokio::test]
async fn a_question_card_is_answered_in_the_room_and_the_answer_goes_back_into_the_turn() {
    let Running {
        s, url, mut alice, ..
    } = running(|_| {}).await;
    let req = alice
        .task(
            s.agent.public_key(),
            "choose Which colours? | red | green | blue",
            vec![],
        )
        .await;
    let q = alice.question_card().await;
    assert_eq!(values(&q, "selection"), ["multiple"]);
    assert_eq!(values(&q, "p"), [s.alice.public_key().to_hex()]);
    assert_eq!(values(&q, "h"), ["lab"]);
    assert!(!values(&q, "expiration").is_empty());
    let agent = s.agent.public_key();
    // Bob is not asked: the relay refuses his answer.
    let bob = Person::join_rooms(&url, s.bob.clone(), &["lab"]).await;
    let ev = bob
        .crypto
        .sign(EventBuilder::new(Kind::Custom(1111), "[\"red\"]").tags(answer_tags(&q.id, &agent)));
    let ok = bob.conn.publish(&ev).await.unwrap();
    assert!(
        !ok.accepted && ok.message.starts_with("restricted:"),
        "{}",
        ok.message
    );
    alice
        .publish(1111, "[\"blue\",\"red\"]", answer_tags(&q.id, &agent))
        .await;
    let card = alice.card(&req.id, Duration::from_millis(300)).await;
    let t = terminals(&card);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].content, "blue, red");
}

#[tokio::test]
async fn an_approval_card_answered_for_the_session_runs_the_command() {
    let Running { s, mut alice, .. } = running(|_| {}).await;
    let req = alice
        .task(s.agent.public_key(), "approve make deploy", vec![])
        .await;
    let q = alice.question_card().await;
    assert_eq!(values(&q, "interaction"), ["approval"]);
    let options: Vec<&str> = values(&q, "option");
    assert_eq!(options, ["once", "session", "always", "deny"]);
    alice
        .publish(1111, "session", answer_tags(&q.id, &s.agent.public_key()))
        .await;
    let card = alice.card(&req.id, Duration::from_millis(300)).await;
    assert_eq!(terminals(&card)[0].content, "ran make deploy");
}

#[tokio::test]
async fn the_requesters_43005_stops_the_task_silently_and_a_cancel_command_names_its_sender() {
    let Running {
        s,
        url,
        engine,
        mut alice,
        ..
    } = running(|_| {}).await;
    let req = alice
        .task(s.agent.public_key(), "sleep 20000", vec![])
        .await;
    alice
        .next(WAIT, |e| e.kind.as_u16() == 43002)
        .await
        .expect("accepted");
    alice
        .publish(
            43005,
            "",
            vec![
                Tag::event(req.id),
                Tag::public_key(s.agent.public_key()),
                tag(&["h", "lab"]),
            ],
        )
        .await;
    let after = alice
        .next(Duration::from_millis(2500), |e| {
            matches!(e.kind.as_u16(), 43004 | 43006)
        })
        .await;
    assert!(
        after.is_none(),
        "nothing after the requester's cancel: {after:?}"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while engine.live_turns() > 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(engine.live_turns(), 0, "the turn stopped");

    // `!cancel` from another allowed user, in the thread, mentioning the agent.
    let req = alice
        .task(s.agent.public_key(), "sleep 20000", vec![])
        .await;
    alice
        .next(WAIT, |e| e.kind.as_u16() == 43002)
        .await
        .expect("accepted");
    let bob = Person::join_rooms(&url, s.bob.clone(), &["lab"]).await;
    bob.publish(
        12,
        "!cancel",
        vec![
            tag(&["h", "lab"]),
            tag(&["e", &req.id.to_hex(), "", "root"]),
            Tag::public_key(s.agent.public_key()),
        ],
    )
    .await;
    let card = alice.card(&req.id, Duration::from_millis(1500)).await;
    let t = terminals(&card);
    assert_eq!(t.len(), 1, "{:?}", kinds(&card));
    assert_eq!(t[0].kind.as_u16(), 43006);
    assert_eq!(
        t[0].content,
        format!("Cancelled by {}", s.bob.public_key().to_hex())
    );
}

#[tokio::test]
async fn progress_is_throttled_and_files_and_handoffs_become_thread_messages() {
    let Running { s, mut alice, .. } = running(|_| {}).await;
    let req = alice.task(s.agent.public_key(), "sleep 2500", vec![]).await;
    let card = alice.card(&req.id, Duration::from_millis(300)).await;
    let progress: Vec<&Event> = card.iter().filter(|e| e.kind.as_u16() == 43003).collect();
    // 25 ticks over 2.5 s, at most one 43003 per 0.7 s.
    assert!(
        !progress.is_empty() && progress.len() <= 5,
        "{} progress events",
        progress.len()
    );
    assert!(
        progress.iter().all(|p| p.content.starts_with("tick ")),
        "{:?}",
        progress[0].content
    );
    for w in progress.windows(2) {
        assert_ne!(
            w[0].content, w[1].content,
            "nothing is sent twice unchanged"
        );
    }

    let req = alice
        .task(
            s.agent.public_key(),
            "file notes.txt the whole text",
            vec![],
        )
        .await;
    let card = alice.card(&req.id, Duration::from_millis(300)).await;
    let file = card
        .iter()
        .find(|e| e.kind.as_u16() == 12 && values(e, "file") == ["notes.txt"])
        .expect("the file as a thread message");
    assert_eq!(file.content, "the whole text");
    let t = terminals(&card)[0];
    assert_eq!(t.content, "Wrote notes.txt\nPosted notes.txt");
    assert!(values(t, "e").contains(&file.id.to_hex().as_str()));

    let req = alice
        .task(s.agent.public_key(), "handoff Deploy", vec![])
        .await;
    let thread = alice
        .next(WAIT, |e| e.kind.as_u16() == 11)
        .await
        .expect("a handoff thread");
    assert_eq!(thread.content, "Deploy");
    assert_eq!(values(&thread, "h"), ["home"]);
    let reply = alice
        .next(WAIT, |e| {
            e.kind.as_u16() == 12 && e.content == "Continuing in Deploy"
        })
        .await
        .expect("the reply");
    let card = alice.card(&req.id, Duration::from_millis(300)).await;
    let t = terminals(&card)[0];
    assert_eq!(t.content, "Continuing in Deploy");
    assert_eq!(values(t, "h"), ["lab"], "the card stays in the task's room");
    assert!(
        values(t, "e").contains(&reply.id.to_hex().as_str()),
        "links the reply"
    );
    assert!(
        reply
            .tags
            .iter()
            .any(|t| t.as_slice() == ["e", &thread.id.to_hex(), "", "root"]),
        "continues in the handoff thread"
    );
    assert_eq!(values(&reply, "h"), ["home"]);
}

#[tokio::test]
async fn a_refused_terminal_is_published_again() {
    // The adapter authenticates (NIP-42) through the proxy, naming the proxy's URL: the relay is configured
    // with it as one of its public URLs, as it would be behind a real proxy.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_url = format!("ws://{}", listener.local_addr().unwrap());
    let s = setup_with(vec![proxy_url]).await;
    let url = s.relay.url();
    let (proxy, refused) = refusing_proxy(listener, url.clone(), is_terminal).await;
    let (_engine, _adapter) = adapter(s._dir.path(), config(&proxy, &s), &s.agent).await;
    let mut alice = Person::join(&url, s.alice.clone()).await;
    let started = tokio::time::Instant::now();
    let req = alice.task(s.agent.public_key(), "hello", vec![]).await;
    let card = alice.card(&req.id, Duration::from_millis(1500)).await;
    let t = terminals(&card);
    assert_eq!(t.len(), 1, "{:?}", kinds(&card));
    assert_eq!(
        refused.load(Ordering::SeqCst),
        2,
        "refused once, then sent again"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "after the 1 s retry delay"
    );
}

/// (The daemon test `crates/agentwire/tests/tasks.rs` kills the process mid-task; this one shows the relay
/// check alone, with a journal that knows nothing.)
#[tokio::test]
async fn with_a_fresh_journal_a_task_the_relay_shows_finished_does_not_run_again() {
    let s = setup().await;
    let url = s.relay.url();
    let mut alice = Person::join(&url, s.alice.clone()).await;
    let first = tempfile::tempdir().unwrap();
    let (_engine, adapter1) = adapter(first.path(), config(&url, &s), &s.agent).await;
    let done = alice.task(s.agent.public_key(), "calc 1+1", vec![]).await;
    let card = alice.card(&done.id, Duration::from_millis(200)).await;
    assert_eq!(terminals(&card).len(), 1);
    adapter1.stop().await;
    let open = alice.task(s.agent.public_key(), "calc 2+2", vec![]).await;
    let fresh = tempfile::tempdir().unwrap();
    let (_engine2, _adapter2) = adapter(fresh.path(), config(&url, &s), &s.agent).await;
    let card = alice.card(&open.id, Duration::from_millis(1500)).await;
    assert_eq!(terminals(&card)[0].content, "4", "the one left open runs");
    let again = alice
        .next(Duration::from_millis(500), |e| {
            e.kind.as_u16() == 43002 && values(e, "e").contains(&done.id.to_hex().as_str())
        })
        .await;
    assert!(again.is_none(), "a finished task is not run again");
}

#[tokio::test]
async fn in_a_private_room_the_adapter_authenticates_to_read_its_tasks() {
    let Running { s, mut alice, .. } = running(|_| {}).await;
    let req = alice
        .publish(
            43001,
            "calc 2*21",
            vec![Tag::public_key(s.agent.public_key()), tag(&["h", "vault"])],
        )
        .await;
    // The room's reads need AUTH: the person's subscription is opened again once it has authenticated.
    let card = alice.card(&req.id, Duration::from_millis(200)).await;
    let t = terminals(&card);
    assert_eq!(t.len(), 1, "{:?}", kinds(&card));
    assert_eq!(t[0].content, "42");
    assert_eq!(values(t[0], "h"), ["vault"]);
}

#[tokio::test]
async fn an_unanswered_question_card_expires_and_the_task_ends_with_one_error() {
    let Running { s, mut alice, .. } =
        running(|c| c.question_window = Duration::from_secs(1)).await;
    let req = alice
        .task(s.agent.public_key(), "confirm Ship it?", vec![])
        .await;
    let q = alice.question_card().await;
    assert_eq!(values(&q, "interaction"), ["confirmation"]);
    let expires: u64 = values(&q, "expiration")[0].parse().unwrap();
    assert!(
        expires <= q.created_at.as_secs() + 2,
        "the card expires with the window"
    );
    let card = alice.card(&req.id, Duration::from_millis(1500)).await;
    let t = terminals(&card);
    assert_eq!(t.len(), 1, "{:?}", kinds(&card));
    assert_eq!(t[0].kind.as_u16(), 43006);
    assert!(
        t[0].content.contains("waiting for an answer"),
        "{}",
        t[0].content
    );
}

#[tokio::test]
async fn a_task_waiting_for_a_slot_is_accepted_only_when_it_starts() {
    let Running {
        s,
        engine,
        mut alice,
        ..
    } = running(|c| c.max_running = 1).await;
    let first = alice.task(s.agent.public_key(), "sleep 1500", vec![]).await;
    let second = alice.task(s.agent.public_key(), "calc 1+2", vec![]).await;
    let ids = [first.id.to_hex(), second.id.to_hex()];
    let about = |e: &Event| {
        e.tags
            .iter()
            .any(|t| t.as_slice().get(1).is_some_and(|v| ids.contains(v)))
    };
    let turn = |i: usize| agentwire_core::RequestId::new(format!("task:{}", ids[i])).unwrap();
    // Which task started first is not fixed: when the adapter reads both from the relay's stored events
    // (sent within one second), the relay's order decides. Whichever it was, the other waits for it.
    let mut started: Option<usize> = None;
    let mut ended = [false, false];
    let mut second_result = None;
    while let Some(e) = alice.next(WAIT, about).await {
        let which = usize::from(e.tags.iter().any(|t| t.as_slice().get(1) == Some(&ids[1])));
        if e.kind.as_u16() == 43002 {
            match started {
                None => started = Some(which),
                Some(earlier) if earlier != which => {
                    // Causal, not timed: the waiting task is accepted only once the other has ended, so
                    // by the time its 43002 is here the other's outcome is in the journal.
                    let stored = engine
                        .lookup(&turn(earlier))
                        .await
                        .unwrap()
                        .expect("journaled");
                    assert!(
                        stored.outcome.is_some(),
                        "the waiting task's 43002 went out while the other still ran"
                    );
                }
                Some(_) => panic!("a second 43002 for one task"),
            }
        }
        if which == 1 && e.kind.as_u16() == 43004 {
            second_result = Some(e.content.clone());
        }
        ended[which] |= matches!(e.kind.as_u16(), 43004 | 43006);
        if ended == [true, true] {
            break;
        }
    }
    assert!(started.is_some(), "no task was accepted");
    assert_eq!(second_result.as_deref(), Some("3"));
}

#[tokio::test]
async fn only_the_requester_cancels_with_43005_and_a_room_wide_cancel_stops_the_rooms_tasks() {
    let Running {
        s, url, mut alice, ..
    } = running(|_| {}).await;
    let req = alice
        .task(s.agent.public_key(), "sleep 20000", vec![])
        .await;
    alice
        .next(WAIT, |e| e.kind.as_u16() == 43002)
        .await
        .expect("accepted");
    let bob = Person::join_rooms(&url, s.bob.clone(), &["lab"]).await;
    // Bob's 43005 names Alice's task: not his to cancel that way.
    bob.publish(
        43005,
        "",
        vec![
            Tag::event(req.id),
            Tag::public_key(s.agent.public_key()),
            tag(&["h", "lab"]),
        ],
    )
    .await;
    let ended = alice
        .next(Duration::from_millis(1000), |e| {
            matches!(e.kind.as_u16(), 43004 | 43006)
        })
        .await;
    assert!(ended.is_none(), "still running: {ended:?}");
    // `!cancel` to the room at large, naming the agent by npub in the text.
    let npub = nostr::nips::nip19::ToBech32::to_bech32(&s.agent.public_key()).unwrap();
    bob.publish(
        9,
        &format!("!cancel nostr:{npub}"),
        vec![tag(&["h", "lab"])],
    )
    .await;
    let card = alice.card(&req.id, Duration::from_millis(300)).await;
    let t = terminals(&card);
    assert_eq!(t.len(), 1);
    assert_eq!(
        t[0].content,
        format!("Cancelled by {}", s.bob.public_key().to_hex())
    );
}
