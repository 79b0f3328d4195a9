//! Task cards on the daemon: `[tasks]` in the config file, the embedded relay's rooms, and kill -9 of the
//! daemon between a task's 43002 and its end: after the restart that task ends exactly once, and a task
//! that had finished is not run again.

mod common;

use agentwire_nostr::relay_conn::{Incoming, RelayConn};
use common::Daemon;
use nostr::prelude::{
    Event, EventBuilder, EventId, Filter, FinalizeEvent, Keys, Kind, PublicKey, SingleLetterTag,
    Tag,
};
use std::time::Duration;
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(15);

fn task(keys: &Keys, agent: &PublicKey, prompt: &str) -> Event {
    EventBuilder::new(Kind::Custom(43001), prompt)
        .tags([Tag::public_key(*agent), Tag::parse(["h", "lab"]).unwrap()])
        .finalize(keys)
        .unwrap()
}

async fn watch(relay: &str) -> (RelayConn, mpsc::Receiver<Incoming>) {
    let (conn, rx) = RelayConn::connect(relay);
    assert!(conn.wait_connected(WAIT).await);
    conn.subscribe(
        "cards",
        vec![Filter::new()
            .kinds((43002..=43006).map(Kind::Custom))
            .custom_tags(SingleLetterTag::from_char('h').unwrap(), ["lab"])],
    );
    (conn, rx)
}

/// The kinds of the distinct card events about `request` (stored ones included): until `settle` after the
/// first end, or `wait` if none comes. An
/// event is counted once however often it arrives, as a client dedupes by id: the relay sends a stored
/// event again when the subscription is made again, and one stored while the query ran both as stored and
/// as live.
async fn card_kinds(
    rx: &mut mpsc::Receiver<Incoming>,
    request: &EventId,
    wait: Duration,
    settle: Duration,
) -> Vec<u16> {
    let mut kinds = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut deadline = tokio::time::Instant::now() + wait;
    let mut ended = false;
    while let Ok(Some(m)) = tokio::time::timeout_at(deadline, rx.recv()).await {
        if let Incoming::Event { event, .. } = m {
            if !seen.insert(event.id) {
                continue;
            }
            let about = event
                .tags
                .iter()
                .any(|t| t.as_slice().get(1) == Some(&request.to_hex()));
            if about {
                let kind = event.kind.as_u16();
                kinds.push(kind);
                // After the first end, `settle` more for anything that should not come.
                if !ended && matches!(kind, 43004 | 43006) {
                    ended = true;
                    deadline = tokio::time::Instant::now() + settle;
                }
            }
        }
    }
    kinds
}

async fn until(rx: &mut mpsc::Receiver<Incoming>, want: impl Fn(&Event) -> bool) -> Event {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(Incoming::Event { event, .. })) if want(&event) => return *event,
            Ok(Some(_)) => {}
            other => panic!("not seen: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_task_cut_off_by_kill_9_ends_exactly_once_and_a_finished_one_is_not_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let alice = Keys::generate();
    let config = dir.path().join("agentwire.toml");
    std::fs::write(
        &config,
        format!(
            "[[rooms]]\nid = \"lab\"\nclosed = true\nmembers = [\"{a}\"]\n\n[tasks]\nwatch = [\"lab\"]\nallowed = [\"{a}\"]\n",
            a = alice.public_key().to_hex()
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let args = ["--config", config.to_str().unwrap()];
    let mut daemon = Daemon::start(&data, &args);
    assert_eq!(daemon.ready["tasks"]["watch"][0], "lab");
    let agent = daemon.agent;
    let (conn, mut rx) = watch(&daemon.relay).await;
    let done = task(&alice, &agent, "calc 2+3");
    assert!(conn.publish(&done).await.unwrap().accepted);
    let result = until(&mut rx, |e| e.kind.as_u16() == 43004).await;
    assert_eq!(result.content, "5");
    let cut = task(&alice, &agent, "sleep 60000");
    assert!(conn.publish(&cut).await.unwrap().accepted);
    until(&mut rx, |e| {
        e.kind.as_u16() == 43002
            && e.tags
                .iter()
                .any(|t| t.as_slice().get(1) == Some(&cut.id.to_hex()))
    })
    .await;
    drop(conn);
    daemon.kill();

    let daemon = Daemon::start(&data, &args);
    let (_conn, mut rx) = watch(&daemon.relay).await;
    // Progress (43003) may have gone out while either task ran; what must hold is one start and one end.
    let seen = card_kinds(
        &mut rx,
        &cut.id,
        Duration::from_secs(15),
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(
        starts_and_ends(&seen),
        (1, 0, 1),
        "the cut-off task ends once, with an error: {seen:?}"
    );
    let (_conn, mut rx) = watch(&daemon.relay).await;
    let seen = card_kinds(
        &mut rx,
        &done.id,
        Duration::from_secs(15),
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(
        starts_and_ends(&seen),
        (1, 1, 0),
        "the finished task did not run again: {seen:?}"
    );
}

/// How many 43002 (started), 43004 (result) and 43006 (error) are among `kinds`.
fn starts_and_ends(kinds: &[u16]) -> (usize, usize, usize) {
    let count = |kind: u16| kinds.iter().filter(|&&k| k == kind).count();
    (count(43002), count(43004), count(43006))
}

#[tokio::test]
async fn a_model_agent_serves_a_task_card_and_runs_its_tools() {
    use agentwire_testkit::fake_openai::{text_chunks, tool_call_chunks, FakeOpenAi, Scripted};
    let fake = FakeOpenAi::start();
    let dir = tempfile::tempdir().unwrap();
    let alice = Keys::generate();
    let config = dir.path().join("agentwire.toml");
    std::fs::write(
        &config,
        format!(
            "[serve]\nagent = \"local\"\n[agents.local]\nkind = \"openai\"\nbase_url = \"{}\"\nmodels = [\"m\"]\ntools = [\"calculator\"]\n\n[[rooms]]\nid = \"lab\"\nclosed = true\nmembers = [\"{a}\"]\n\n[tasks]\nwatch = [\"lab\"]\nallowed = [\"{a}\"]\n",
            fake.base_url,
            a = alice.public_key().to_hex()
        ),
    )
    .unwrap();
    let daemon = Daemon::start(
        &dir.path().join("data"),
        &["--config", config.to_str().unwrap()],
    );
    let (conn, mut rx) = watch(&daemon.relay).await;
    let stream = |chunks| Scripted::Stream {
        chunks,
        gap: Duration::from_millis(5),
    };
    // The first call says something before it calls the tool: an interim message of the thread.
    let mut first = vec![
        serde_json::json!({"choices":[{"index":0,"delta":{"content":"Let me compute that."}}]})
            .to_string(),
    ];
    first.extend(tool_call_chunks(
        "c1",
        "calculator",
        &[r#"{"expression":"6*7"}"#],
    ));
    fake.push(stream(first));
    fake.push(stream(text_chunks(&["The answer is 42."], (10, 5))));
    let req = task(&alice, &daemon.agent, "what is 6*7?");
    assert!(conn.publish(&req).await.unwrap().accepted);
    let result = until(&mut rx, |e| e.kind.as_u16() == 43004).await;
    assert_eq!(result.content, "The answer is 42.");
    // The thread's replies: the interim message, then the answer, neither repeating the other.
    conn.subscribe(
        "replies",
        vec![Filter::new()
            .kind(Kind::Custom(12))
            .author(daemon.agent)
            .custom_tags(SingleLetterTag::from_char('h').unwrap(), ["lab"])],
    );
    let mut replies: Vec<Event> = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(Incoming::Event { sub, event })) if sub == "replies" => replies.push(*event),
            Ok(Some(Incoming::Eose(sub))) if sub == "replies" => break,
            Ok(Some(_)) => {}
            other => panic!("no end of the stored replies: {other:?}"),
        }
    }
    // (Both may carry the same second: compared in sorted order.)
    let mut said: Vec<&str> = replies.iter().map(|e| e.content.as_str()).collect();
    said.sort_unstable();
    assert_eq!(
        said,
        ["Let me compute that.", "The answer is 42."],
        "{said:?}"
    );
    assert!(
        replies.iter().all(|e| e
            .tags
            .iter()
            .any(|t| t.as_slice().first().map(String::as_str) == Some("e"))),
        "each reply is under the task's root"
    );
    assert_eq!(
        fake.received()[0].body["messages"][0]["content"],
        "what is 6*7?"
    );
    let second = &fake.received()[1].body["messages"];
    assert_eq!(second[2]["role"], "tool", "the calculator ran: {second}");
    assert!(second[2]["content"].as_str().unwrap().contains("42"));
}

/// Whether card event `e` is about request `id` (its `e` tag names it).
fn about(e: &Event, id: &EventId) -> bool {
    e.tags
        .iter()
        .any(|t| t.as_slice().get(1) == Some(&id.to_hex()))
}

#[tokio::test]
async fn a_follow_up_in_a_waiting_tasks_thread_is_merged_into_it_and_stays_merged_across_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let alice = Keys::generate();
    let config = dir.path().join("agentwire.toml");
    std::fs::write(
        &config,
        format!(
            "[[rooms]]\nid = \"lab\"\nclosed = true\nmembers = [\"{a}\"]\n\n[tasks]\nwatch = [\"lab\"]\nallowed = [\"{a}\"]\nmax_running = 1\n",
            a = alice.public_key().to_hex()
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let args = ["--config", config.to_str().unwrap()];
    let mut daemon = Daemon::start(&data, &args);
    let agent = daemon.agent;
    let (conn, mut rx) = watch(&daemon.relay).await;
    // The one slot is taken; the next request waits for it.
    let busy = task(&alice, &agent, "sleep 60000");
    assert!(conn.publish(&busy).await.unwrap().accepted);
    until(&mut rx, |e| e.kind.as_u16() == 43002 && about(e, &busy.id)).await;
    let first = task(&alice, &agent, "quick one");
    assert!(conn.publish(&first).await.unwrap().accepted);
    // A follow-up in the waiting request's thread: folded into it.
    let follow_up = EventBuilder::new(Kind::Custom(43001), "and two")
        .tags([
            Tag::public_key(agent),
            Tag::parse(["h", "lab"]).unwrap(),
            Tag::parse(["e", &first.id.to_hex(), "", "root"]).unwrap(),
        ])
        .finalize(&alice)
        .unwrap();
    assert!(conn.publish(&follow_up).await.unwrap().accepted);
    let merged = until(&mut rx, |e| {
        e.kind.as_u16() == 43006 && about(e, &follow_up.id)
    })
    .await;
    assert_eq!(
        merged.content,
        format!("Merged into task {}", first.id.to_hex())
    );

    // Killed before the first ran: after the restart it runs once, with both prompts.
    drop(conn);
    daemon.kill();
    let daemon = Daemon::start(&data, &args);
    let (_conn, mut rx) = watch(&daemon.relay).await;
    let result = until(&mut rx, |e| e.kind.as_u16() == 43004 && about(e, &first.id)).await;
    // `quick` answers with the rest of its prompt: both, in order.
    assert_eq!(result.content, "one", "the reply's first line");
    let (conn, mut replies) = watch(&daemon.relay).await;
    conn.subscribe(
        "reply",
        vec![Filter::new()
            .kind(Kind::Custom(12))
            .author(agent)
            .custom_tags(SingleLetterTag::from_char('h').unwrap(), ["lab"])],
    );
    let reply = until(&mut replies, |e| {
        e.kind.as_u16() == 12 && about(e, &first.id)
    })
    .await;
    assert_eq!(reply.content, "one\n\nand two");
    let (_conn, mut rx) = watch(&daemon.relay).await;
    let seen = card_kinds(
        &mut rx,
        &follow_up.id,
        Duration::from_secs(3),
        Duration::from_millis(500),
    )
    .await;
    assert_eq!(
        starts_and_ends(&seen),
        (0, 0, 1),
        "the follow-up never ran: {seen:?}"
    );
}

#[tokio::test]
async fn with_legacy_cards_a_question_is_a_message_and_the_requesters_reply_answers_it() {
    let dir = tempfile::tempdir().unwrap();
    let (alice, bob) = (Keys::generate(), Keys::generate());
    let config = dir.path().join("agentwire.toml");
    std::fs::write(
        &config,
        format!(
            "[[rooms]]\nid = \"lab\"\nclosed = true\nmembers = [\"{a}\", \"{b}\"]\n\n[tasks]\nwatch = [\"lab\"]\nallowed = [\"{a}\", \"{b}\"]\ncards = \"legacy\"\n",
            a = alice.public_key().to_hex(),
            b = bob.public_key().to_hex()
        ),
    )
    .unwrap();
    let daemon = Daemon::start(
        &dir.path().join("data"),
        &["--config", config.to_str().unwrap()],
    );
    let agent = daemon.agent;
    let (conn, mut rx) = watch(&daemon.relay).await;
    conn.subscribe(
        "thread",
        vec![Filter::new()
            .kinds([Kind::Custom(9), Kind::Custom(12)])
            .custom_tags(SingleLetterTag::from_char('h').unwrap(), ["lab"])],
    );
    let req = task(&alice, &agent, "confirm Ship it?");
    assert!(conn.publish(&req).await.unwrap().accepted);
    // The question: a plain kind 12 in the task's thread, no question card.
    let asked = until(&mut rx, |e| e.pubkey == agent && e.kind.as_u16() == 12).await;
    assert_eq!(asked.content, "Ship it?\n\nReply `yes` or `no`.");
    assert!(about(&asked, &req.id), "under the request");
    let reply = |who: &Keys, text: &str| {
        EventBuilder::new(Kind::Custom(12), text)
            .tags([
                Tag::parse(["h", "lab"]).unwrap(),
                Tag::parse(["e", &req.id.to_hex(), "", "root"]).unwrap(),
                Tag::public_key(agent),
            ])
            .finalize(who)
            .unwrap()
    };
    // Someone not asked, and a reply that is no answer: neither settles it.
    assert!(conn.publish(&reply(&bob, "yes")).await.unwrap().accepted);
    assert!(
        conn.publish(&reply(&alice, "let me think"))
            .await
            .unwrap()
            .accepted
    );
    assert!(conn.publish(&reply(&alice, "no")).await.unwrap().accepted);
    let result = until(&mut rx, |e| e.kind.as_u16() == 43004 && about(e, &req.id)).await;
    assert_eq!(result.content, "no", "the requester's answer, not bob's");
}
