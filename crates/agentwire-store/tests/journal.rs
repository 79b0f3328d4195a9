//! The journal against a real SQLite file: dedupe, one outcome, interrupted turns across a reopen.

use agentwire_core::{ConversationId, Failure, FailureCode, Outcome, RequestId, TurnResult, Usage};
use agentwire_store::{Accepted, Journal, NewTurn, StoreError};

fn turn(n: u32) -> NewTurn {
    NewTurn {
        request_id: RequestId::new(format!("nipxx:{n}")).unwrap(),
        conversation_id: ConversationId::new("c").unwrap(),
        protocol: "nipxx".into(),
        route: serde_json::json!({"client": "abc"}),
        input: serde_json::json!({"message": format!("m{n}")}),
        accepted_at: 100 + n as u64,
        conversation_meta: None,
    }
}

fn ok(text: &str) -> Outcome {
    Outcome::Result(TurnResult {
        text: text.into(),
        usage: Usage::default(),
        stop_reason: "stop".into(),
    })
}

#[tokio::test]
async fn accept_is_insert_if_absent_and_outcome_sticks_once() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(&dir.path().join("j.sqlite")).unwrap();
    assert_eq!(j.accept(turn(1)).await.unwrap(), Accepted::New);
    match j.accept(turn(1)).await.unwrap() {
        Accepted::Existing(t) => assert!(t.outcome.is_none()),
        other => panic!("expected existing, got {other:?}"),
    }
    let id = turn(1).request_id;
    j.finish(&id, &ok("a"), Some("wire".into()), 200)
        .await
        .unwrap();
    assert_eq!(
        j.finish(&id, &ok("b"), None, 201).await,
        Err(StoreError::AlreadyEnded(id.to_string()))
    );
    let t = j.lookup(&id).unwrap().unwrap();
    assert_eq!(t.outcome, Some(ok("a")));
    assert_eq!(t.wire.as_deref(), Some("wire"));
    let unknown = RequestId::new("nipxx:none").unwrap();
    assert_eq!(
        j.finish(&unknown, &ok("x"), None, 1).await,
        Err(StoreError::UnknownTurn(unknown.to_string()))
    );
}

#[tokio::test]
async fn interrupted_turns_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.sqlite");
    {
        let j = Journal::open(&path).unwrap();
        for n in 0..5 {
            j.accept(turn(n)).await.unwrap();
        }
        j.finish(&turn(1).request_id, &ok("done"), None, 300)
            .await
            .unwrap();
        let f = Outcome::Failure(Failure::new(FailureCode::Cancelled, "stop"));
        j.finish(&turn(3).request_id, &f, None, 300).await.unwrap();
    }
    let j = Journal::open(&path).unwrap();
    let ids: Vec<String> = j
        .interrupted("nipxx")
        .unwrap()
        .into_iter()
        .map(|t| t.request_id.to_string())
        .collect();
    assert_eq!(ids, vec!["nipxx:0", "nipxx:2", "nipxx:4"]);
    assert!(j.interrupted("fisk").unwrap().is_empty());
    assert_eq!(
        j.conversation_turns(&ConversationId::new("c").unwrap())
            .unwrap(),
        5
    );
    // A resend of a finished turn is recognised with its outcome.
    match j.accept(turn(1)).await.unwrap() {
        Accepted::Existing(t) => assert_eq!(t.outcome, Some(ok("done"))),
        other => panic!("expected existing, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_accepts_of_one_id_give_exactly_one_new() {
    let dir = tempfile::tempdir().unwrap();
    let j = std::sync::Arc::new(Journal::open(&dir.path().join("j.sqlite")).unwrap());
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let j = j.clone();
        tasks.push(tokio::spawn(
            async move { j.accept(turn(7)).await.unwrap() },
        ));
    }
    let mut new = 0;
    for t in tasks {
        if t.await.unwrap() == Accepted::New {
            new += 1;
        }
    }
    assert_eq!(new, 1);
}

#[tokio::test]
async fn a_conversation_reads_back_in_order_with_transcripts_and_meta_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.sqlite");
    let conv = ConversationId::new("c").unwrap();
    {
        let j = Journal::open(&path).unwrap();
        for n in 0..3 {
            j.accept(turn(n)).await.unwrap();
        }
        let events = serde_json::json!([{"type": "text", "text": "hi"}]);
        j.finish_with_transcript(&turn(0).request_id, &ok("a"), None, Some(events), 300)
            .await
            .unwrap();
        j.finish(&turn(1).request_id, &ok("b"), None, 301)
            .await
            .unwrap();
        // A second outcome keeps neither its outcome nor its transcript.
        let again = serde_json::json!([{"type": "text", "text": "other"}]);
        assert!(j
            .finish_with_transcript(&turn(0).request_id, &ok("z"), None, Some(again), 302)
            .await
            .is_err());
        assert_eq!(j.conversation_meta(&conv).unwrap(), None);
        j.put_conversation_meta(&conv, "fisk", &serde_json::json!({"v": 1}), 1)
            .await
            .unwrap();
        j.put_conversation_meta(&conv, "fisk", &serde_json::json!({"v": 2}), 2)
            .await
            .unwrap();
    }
    let j = Journal::open(&path).unwrap();
    let record = j.conversation_record(&conv).unwrap();
    let ids: Vec<_> = record
        .iter()
        .map(|(t, _)| t.request_id.to_string())
        .collect();
    assert_eq!(ids, vec!["nipxx:0", "nipxx:1", "nipxx:2"]);
    assert_eq!(
        record[0].1,
        Some(serde_json::json!([{"type": "text", "text": "hi"}]))
    );
    assert_eq!(record[0].0.outcome, Some(ok("a")));
    assert_eq!(record[1].1, None);
    assert_eq!(record[2].0.outcome, None);
    assert_eq!(
        j.conversation_meta(&conv).unwrap(),
        Some(serde_json::json!({"v": 2}))
    );
    assert!(j
        .conversation_record(&ConversationId::new("none").unwrap())
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn a_halted_journal_commits_nothing_more() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.sqlite");
    let j = Journal::open(&path).unwrap();
    j.accept(turn(1)).await.unwrap();
    j.halt();
    assert_eq!(j.accept(turn(2)).await, Err(StoreError::WriterGone));
    assert_eq!(
        j.finish(&turn(1).request_id, &ok("a"), None, 1).await,
        Err(StoreError::WriterGone)
    );
    let reopened = Journal::open(&path).unwrap();
    assert!(reopened.lookup(&turn(1).request_id).unwrap().is_some());
    assert!(reopened.lookup(&turn(2).request_id).unwrap().is_none());
    assert_eq!(
        reopened.interrupted("nipxx").unwrap().len(),
        1,
        "turn 1 has no outcome"
    );
}

#[tokio::test]
async fn a_new_turn_can_set_its_conversation_meta_in_the_same_write() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(&dir.path().join("j.sqlite")).unwrap();
    let conv = ConversationId::new("c").unwrap();
    let mut t = turn(1);
    t.conversation_meta = Some(serde_json::json!({"fingerprint": "a"}));
    assert_eq!(j.accept(t.clone()).await.unwrap(), Accepted::New);
    assert_eq!(
        j.conversation_meta(&conv).unwrap(),
        Some(serde_json::json!({"fingerprint": "a"}))
    );
    // A resend of the same request does not touch it.
    t.conversation_meta = Some(serde_json::json!({"fingerprint": "b"}));
    assert!(matches!(j.accept(t).await.unwrap(), Accepted::Existing(_)));
    assert_eq!(
        j.conversation_meta(&conv).unwrap(),
        Some(serde_json::json!({"fingerprint": "a"}))
    );
}

#[tokio::test]
async fn a_conversations_history_and_usage_read_without_its_transcripts() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(&dir.path().join("j.sqlite")).unwrap();
    let conv = ConversationId::new("c").unwrap();
    for n in 0..3 {
        j.accept(turn(n)).await.unwrap();
    }
    let spent = |input, output| Usage {
        input_tokens: input,
        output_tokens: output,
    };
    let with_usage = |text: &str, u| match ok(text) {
        Outcome::Result(r) => Outcome::Result(TurnResult { usage: u, ..r }),
        o => o,
    };
    let events = serde_json::json!([
        {"type": "tool_call", "id": "1"}, {"type": "text", "text": "x"}, {"type": "tool_call", "id": "2"}
    ]);
    j.finish_with_transcript(
        &turn(0).request_id,
        &with_usage("a", spent(10, 5)),
        None,
        Some(events),
        300,
    )
    .await
    .unwrap();
    let failed =
        Outcome::Failure(Failure::new(FailureCode::Cancelled, "stop").with_usage(spent(1, 2)));
    j.finish_with_transcript(
        &turn(1).request_id,
        &failed,
        None,
        Some(serde_json::json!([{"type": "tool_call", "id": "3"}])),
        301,
    )
    .await
    .unwrap();
    let history = j.conversation_history(&conv).unwrap();
    let ids: Vec<_> = history.iter().map(|t| t.request_id.to_string()).collect();
    assert_eq!(
        ids,
        ["nipxx:0", "nipxx:1", "nipxx:2"],
        "every turn, in order"
    );
    assert_eq!(history[2].outcome, None, "the running one too");
    let (outcomes, tool_calls) = j.conversation_usage(&conv).unwrap();
    assert_eq!(
        outcomes,
        vec![with_usage("a", spent(10, 5)), failed],
        "ended turns only"
    );
    assert_eq!(tool_calls, 3);
    let (none, zero) = j
        .conversation_usage(&ConversationId::new("none").unwrap())
        .unwrap();
    assert!(none.is_empty() && zero == 0);
    // Transcripts of other shapes count what they hold and spoil nothing else.
    for (n, events) in [
        (3, serde_json::json!({"type": "tool_call"})),
        (4, serde_json::json!(["x", 1, {"type": "tool_call"}])),
    ] {
        j.accept(turn(n)).await.unwrap();
        j.finish_with_transcript(&turn(n).request_id, &ok("c"), None, Some(events), 302)
            .await
            .unwrap();
    }
    let (outcomes, tool_calls) = j.conversation_usage(&conv).unwrap();
    assert_eq!((outcomes.len(), tool_calls), (4, 4));
}
