use super::*;
use agentwire_core::{Failure, TurnResult, Usage};
use nostr::prelude::{EventBuilder, FinalizeEvent, Keys};

struct Room {
    agent: Keys,
    alice: Keys,
    acceptance: Acceptance,
}

fn room() -> Room {
    let agent = Keys::generate();
    let alice = Keys::generate();
    let acceptance = Acceptance {
        agent: agent.public_key(),
        watch: ["lab".to_string()].into(),
        allowed: [alice.public_key()].into(),
    };
    Room {
        agent,
        alice,
        acceptance,
    }
}

fn event(keys: &Keys, kind: Kind, content: &str, tags: Vec<Tag>) -> Event {
    EventBuilder::new(kind, content)
        .tags(tags)
        .finalize(keys)
        .unwrap()
}

fn h(room: &str) -> Tag {
    tag(["h", room])
}

#[test]
fn a_task_is_taken_only_from_an_allowed_author_naming_the_agent_in_a_watched_room() {
    let r = room();
    let p = Tag::public_key(r.agent.public_key());
    let ok = event(
        &r.alice,
        TASK_REQUEST,
        "write it",
        vec![p.clone(), h("lab")],
    );
    let task = r.acceptance.accept(&ok).unwrap();
    assert_eq!(task.thread.root, ok.id);
    assert_eq!(task.thread.reply_to, None);
    assert_eq!(task.prompt, "write it");
    let stranger = Keys::generate();
    let cases = [
        (
            event(&stranger, TASK_REQUEST, "x", vec![p.clone(), h("lab")]),
            NotATask::Author,
        ),
        (
            event(&r.alice, TASK_REQUEST, "x", vec![h("lab")]),
            NotATask::NotForUs,
        ),
        (
            event(&r.alice, TASK_REQUEST, "x", vec![p.clone(), h("elsewhere")]),
            NotATask::Room,
        ),
        (
            event(&r.alice, TASK_REQUEST, "x", vec![p.clone()]),
            NotATask::Room,
        ),
        (
            event(&r.alice, TASK_REQUEST, "  ", vec![p.clone(), h("lab")]),
            NotATask::Empty,
        ),
        (
            event(&r.alice, THREAD_REPLY, "x", vec![p.clone(), h("lab")]),
            NotATask::Kind,
        ),
    ];
    for (ev, why) in cases {
        assert_eq!(r.acceptance.accept(&ev), Err(why));
    }
}

#[test]
fn a_request_in_an_existing_thread_keeps_its_root_and_replies_name_the_request() {
    let r = room();
    let root = EventId::from_hex(&"ab".repeat(32)).unwrap();
    let ev = event(
        &r.alice,
        TASK_REQUEST,
        "again",
        vec![
            Tag::public_key(r.agent.public_key()),
            h("lab"),
            Tag::parse(["e", &root.to_hex(), "", "root"]).unwrap(),
        ],
    );
    let task = r.acceptance.accept(&ev).unwrap();
    assert_eq!(task.thread.root, root);
    assert_eq!(task.thread.reply_to, Some(ev.id));
    let tags: Vec<Vec<String>> = task
        .thread
        .reply_tags(&r.alice.public_key())
        .into_iter()
        .map(|t| t.to_vec())
        .collect();
    assert!(tags.contains(&vec!["e".into(), root.to_hex(), "".into(), "root".into()]));
    assert!(tags.contains(&vec!["e".into(), ev.id.to_hex(), "".into(), "reply".into()]));
    assert!(tags.contains(&vec!["h".into(), "lab".into()]));
}

#[test]
fn cancel_needs_an_allowed_sender_the_command_and_a_mention_of_the_agent() {
    let r = room();
    let p = Tag::public_key(r.agent.public_key());
    let thread = EventId::from_hex(&"cd".repeat(32)).unwrap();
    let in_thread = event(
        &r.alice,
        THREAD_REPLY,
        "!cancel please",
        vec![p.clone(), h("lab"), Tag::event(thread)],
    );
    assert_eq!(r.acceptance.cancel_command(&in_thread), Some(vec![thread]));
    let npub = nostr::nips::nip19::ToBech32::to_bech32(&r.agent.public_key()).unwrap();
    let by_npub = event(
        &r.alice,
        CHAT,
        &format!("!cancel nostr:{npub}"),
        vec![h("lab")],
    );
    assert_eq!(r.acceptance.cancel_command(&by_npub), Some(vec![]));
    let no_mention = event(&r.alice, CHAT, "!cancel", vec![h("lab")]);
    assert_eq!(r.acceptance.cancel_command(&no_mention), None);
    let not_allowed = event(&Keys::generate(), CHAT, "!cancel", vec![p.clone()]);
    assert_eq!(r.acceptance.cancel_command(&not_allowed), None);
    let other_word = event(&r.alice, CHAT, "please !cancel", vec![p]);
    assert_eq!(r.acceptance.cancel_command(&other_word), None);
}

fn result(text: &str) -> Outcome {
    Outcome::Result(TurnResult {
        text: text.into(),
        usage: Usage::default(),
        stop_reason: "stop".into(),
    })
}

#[test]
fn a_result_carries_the_first_line_and_links_the_reply_and_the_files() {
    let reply = EventId::from_hex(&"01".repeat(32)).unwrap();
    let file = EventId::from_hex(&"02".repeat(32)).unwrap();
    let posted = Posted {
        reply: Some(reply),
        files: vec![("a.txt".into(), file), ("b.txt".into(), file)],
        ..Posted::default()
    };
    let long = format!("\n{}\nsecond line", "y".repeat(300));
    match ending(&result(&long), &posted, None) {
        Ending::Result { content, links } => {
            let lines: Vec<&str> = content.lines().collect();
            assert_eq!(lines[0], "y".repeat(200));
            assert_eq!(lines[1], "Posted a.txt, b.txt");
            assert_eq!(links, vec![reply, file, file]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        ending(&result(""), &Posted::default(), None),
        Ending::Result {
            content: "Done".into(),
            links: vec![]
        }
    );
}

#[test]
fn errors_say_the_specs_texts() {
    let fail = |code: TurnFailure, msg: &str| Outcome::Failure(Failure::new(code, msg));
    let none = Posted::default();
    assert_eq!(
        ending(&fail(TurnFailure::AgentFailed, ""), &none, None),
        Ending::Error("The task failed".into())
    );
    assert_eq!(
        ending(&fail(TurnFailure::AgentFailed, "disk full"), &none, None),
        Ending::Error("disk full".into())
    );
    assert_eq!(
        ending(&fail(TurnFailure::Cancelled, "cancelled"), &none, None),
        Ending::Error("Cancelled".into())
    );
    let by = Keys::generate().public_key();
    assert_eq!(
        ending(
            &fail(TurnFailure::Cancelled, ""),
            &none,
            Some(Stopper::Command(by))
        ),
        Ending::Error(format!("Cancelled by {}", by.to_hex()))
    );
    assert_eq!(
        ending(
            &fail(TurnFailure::Cancelled, ""),
            &none,
            Some(Stopper::Requester)
        ),
        Ending::Silent
    );
    let file = EventId::from_hex(&"03".repeat(32)).unwrap();
    let posted = Posted {
        files: vec![("out.txt".into(), file)],
        ..Posted::default()
    };
    assert_eq!(
        ending(&fail(TurnFailure::AgentFailed, "late"), &posted, None),
        Ending::Result {
            content: "Posted out.txt".into(),
            links: vec![file]
        },
        "a failure after a posted file is a result"
    );
}

#[test]
fn a_failure_after_a_posted_reply_is_a_result_linking_the_newest_reply_unless_a_send_failed() {
    let fail = |code: TurnFailure| Outcome::Failure(Failure::new(code, "the model went away"));
    let said = EventId::from_hex(&"04".repeat(32)).unwrap();
    let file = EventId::from_hex(&"05".repeat(32)).unwrap();
    let replied = Posted {
        said: Some((said, "Let me look at the logs.".into())),
        ..Posted::default()
    };
    assert_eq!(
        ending(&fail(TurnFailure::AgentFailed), &replied, None),
        Ending::Result {
            content: "Let me look at the logs.".into(),
            links: vec![said]
        },
        "a reply posted before the failure: a result"
    );
    let both = Posted {
        files: vec![("log.txt".into(), file)],
        ..replied.clone()
    };
    assert_eq!(
        ending(&fail(TurnFailure::ToolError), &both, None),
        Ending::Result {
            content: "Let me look at the logs.\nPosted log.txt".into(),
            links: vec![said, file]
        }
    );
    // A reply or file the relay refused: a failed send, so the failure stays an error.
    let refused = Posted {
        failed_send: true,
        ..both.clone()
    };
    assert_eq!(
        ending(&fail(TurnFailure::AgentFailed), &refused, None),
        Ending::Error("the model went away".into())
    );
    // Stopped turns stay stopped, whatever was said before.
    assert_eq!(
        ending(&fail(TurnFailure::Cancelled), &both, None),
        Ending::Error("Cancelled".into())
    );
    assert_eq!(
        ending(
            &fail(TurnFailure::Cancelled),
            &both,
            Some(Stopper::Requester)
        ),
        Ending::Silent
    );
}
