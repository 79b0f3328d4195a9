//! The journal conformance suite: what every [`Journal`] implementation must do, as async checks that
//! panic on the first broken promise. Each backend's tests call [`run_all`] with a way to make a fresh,
//! empty store; a backend passes when every check does.
//!
//! A check gets an [`Opener`]: calling it opens the store (again), as a daemon does after a restart, so
//! durability across a reopen is checked too.

use crate::{Accepted, ClaimAccepted, Finish, Journal, NewTurn, StoreError, LOCAL_OWNER};
use agentwire_core::{
    ConversationId, Failure, Outcome, RequestId, TurnEvent, TurnFailure, TurnResult, Usage,
};
use std::sync::Arc;

/// Opens one store; calling it again opens the same store anew (a restart).
pub type Opener = Arc<dyn Fn() -> Arc<dyn Journal> + Send + Sync>;

/// Runs every check, each on a fresh store from `fresh`.
pub async fn run_all(fresh: impl Fn() -> Opener) {
    accept_is_insert_if_absent_and_the_first_outcome_wins(fresh()).await;
    interrupted_turns_are_an_owners_and_survive_a_reopen(fresh()).await;
    concurrent_accepts_of_one_id_give_exactly_one_new(fresh()).await;
    a_conversation_reads_back_in_order_with_meta_across_a_reopen(fresh()).await;
    usage_and_tool_calls_are_kept_at_finish(fresh()).await;
    a_new_turn_sets_its_conversation_meta_in_the_same_write(fresh()).await;
    a_halted_journal_commits_nothing_more(fresh()).await;
    a_probe_succeeds_on_a_writable_journal(fresh()).await;
    the_latest_turns_come_newest_first_across_conversations(fresh()).await;
    ended_turns_past_their_retention_are_pruned(fresh()).await;
    a_removed_conversation_is_gone_and_listed_no_more(fresh()).await;
    a_claimed_accept_takes_the_conversation_or_journals_nothing(fresh()).await;
    an_accept_soon_is_an_accept_to_every_reader_and_survives_a_sync_and_a_reopen(fresh()).await;
}

/// Prunes every turn that ended before `ended_before`, pass after pass of at most `limit` turns each, as
/// the daemon's retention task does: how many were forgotten.
async fn prune_all(j: &Arc<dyn Journal>, ended_before: u64, limit: usize) -> usize {
    let mut forgotten = 0;
    for _ in 0..100 {
        let pass = j
            .prune(crate::Prune {
                ended_before,
                keep: vec!["fisk".into()],
                limit,
            })
            .await
            .unwrap();
        assert!(pass.forgotten <= limit, "a pass forgets at most its limit");
        forgotten += pass.forgotten;
        if !pass.more {
            return forgotten;
        }
    }
    panic!("pruning never finished");
}

/// A turn `n` of conversation `c` (of `protocol`).
fn turn_of(n: u32, c: &str, protocol: &str) -> NewTurn {
    let mut t = turn(n);
    t.request_id = RequestId::new(format!("{protocol}:{n}")).expect("valid id");
    t.input.request_id = t.request_id.clone();
    t.conversation_id = ConversationId::new(c).expect("valid id");
    t.input.conversation_id = t.conversation_id.clone();
    t.protocol = protocol.into();
    t
}

/// Ended turns past their retention are forgotten, in passes of a bounded size; turns that still run,
/// that ended after the cut, or are fisk-ai's are kept. A conversation keeps its meta while a turn of it
/// is left; one left with none loses its meta and takes new turns as a new one. Times below grow in the
/// order turns are written, as a clock does.
pub async fn ended_turns_past_their_retention_are_pruned(open: Opener) {
    let j = open();
    let gone = |id: &str| {
        let (j, id) = (j.clone(), RequestId::new(id).expect("valid id"));
        async move { j.lookup(id).await.unwrap().is_none() }
    };
    let meta = |c: &str| {
        let (j, c) = (j.clone(), ConversationId::new(c).expect("valid id"));
        async move { j.conversation_meta(c).await.unwrap() }
    };
    let turns = |c: &str| {
        let (j, c) = (j.clone(), ConversationId::new(c).expect("valid id"));
        async move { j.conversation(c, false).await.unwrap().turns.len() }
    };
    let mut first = turn_of(1, "c", "nipxx");
    first.conversation_meta = Some(serde_json::json!({"m": "c"}));
    let mut other = turn_of(4, "old", "nipxx");
    other.conversation_meta = Some(serde_json::json!({"m": "old"}));
    for t in [
        first,
        turn_of(2, "c", "nipxx"),
        turn_of(3, "c", "nipxx"),
        turn_of(9, "fisk-c", "fisk"),
        other,
    ] {
        j.accept(t).await.unwrap();
    }
    for (id, at) in [
        ("nipxx:1", 200),
        ("fisk:9", 200),
        ("nipxx:4", 300),
        ("nipxx:2", 5_000),
    ] {
        let id = RequestId::new(id).expect("valid id");
        j.finish(Finish::new(id, ok("done"), at)).await.unwrap();
    }
    assert_eq!(prune_all(&j, 1_000, 10).await, 2);
    assert!(gone("nipxx:1").await, "ended before the cut: forgotten");
    assert!(gone("nipxx:4").await, "ended before the cut: forgotten");
    assert!(!gone("nipxx:2").await, "ended after the cut: kept");
    assert!(!gone("nipxx:3").await, "still running: kept");
    assert!(!gone("fisk:9").await, "fisk-ai is kept");
    assert_eq!(turns("c").await, 2, "a conversation keeps its turns left");
    assert_eq!(meta("c").await, Some(serde_json::json!({"m": "c"})));
    assert_eq!(turns("old").await, 0);
    assert_eq!(
        meta("old").await,
        None,
        "a conversation with no turn left is forgotten"
    );
    assert_eq!(prune_all(&j, 1_000, 10).await, 0, "nothing more to forget");
    // The forgotten conversation starts again; its turn runs alone.
    assert_eq!(
        j.accept(turn_of(5, "old", "nipxx")).await.unwrap(),
        Accepted::New
    );
    let claim = j
        .claim(
            ConversationId::new("old").unwrap(),
            RequestId::new("nipxx:5").unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(claim, crate::Claim::Taken);
    // Many turns, pruned in passes of two; the running one's end puts it after them.
    for n in 10..15 {
        j.accept(turn_of(n, "c", "nipxx")).await.unwrap();
        let id = RequestId::new(format!("nipxx:{n}")).unwrap();
        j.finish(Finish::new(id, ok("done"), 6_000 + n as u64))
            .await
            .unwrap();
    }
    j.finish(Finish::new(
        RequestId::new("nipxx:3").unwrap(),
        ok("done"),
        7_000,
    ))
    .await
    .unwrap();
    assert_eq!(prune_all(&j, 10_000, 2).await, 7);
    assert_eq!(turns("c").await, 0);
    assert_eq!(meta("c").await, None);
    assert!(!gone("nipxx:5").await, "still running: kept");
    assert!(!gone("fisk:9").await, "fisk-ai is kept");
    // Across a reopen (a restart reads the kept turns again, and forgets nothing more).
    let j = open();
    assert_eq!(prune_all(&j, 10_000, 2).await, 0);
    assert!(j
        .lookup(RequestId::new("fisk:9").unwrap())
        .await
        .unwrap()
        .is_some());
}

/// The newest turns across conversations, newest accepted first, each once with its newest record (an
/// ended turn with its outcome), at most as many as asked for, and the same after a reopen.
pub async fn the_latest_turns_come_newest_first_across_conversations(open: Opener) {
    {
        let j = open();
        assert!(j.latest(10).await.unwrap().is_empty(), "none yet");
        for n in 0..5 {
            let mut t = turn(n);
            if n % 2 == 1 {
                t.conversation_id = ConversationId::new("other").unwrap();
                t.input.conversation_id = t.conversation_id.clone();
            }
            j.accept(t).await.unwrap();
        }
        j.finish(Finish::new(turn(1).request_id, ok("one"), 200))
            .await
            .unwrap();
    }
    let j = open();
    let ids = |ts: &[crate::StoredTurn]| -> Vec<String> {
        ts.iter().map(|t| t.request_id.to_string()).collect()
    };
    let all = j.latest(10).await.unwrap();
    assert_eq!(
        ids(&all),
        ["nipxx:4", "nipxx:3", "nipxx:2", "nipxx:1", "nipxx:0"]
    );
    assert_eq!(all[3].outcome, Some(ok("one")), "its newest record");
    assert_eq!(all[3].conversation_id.as_str(), "other");
    // Fewer than all: as many as asked for, still newest accepted first, the newest among them. (Which
    // others is the backend's: the newest accepted, or the ones written to most lately.)
    let two = j.latest(2).await.unwrap();
    assert_eq!(two.len(), 2);
    assert_eq!(two[0].request_id.as_str(), "nipxx:4");
    assert!(two[0].accepted_at > two[1].accepted_at);
}

/// [`Journal::accept_soon`] is [`Journal::accept`] as far as any reader and any later write can tell:
/// insert-if-absent (a resend finds the record), its turn listed as interrupted until it ends, its
/// outcome taken once; [`Journal::sync`] succeeds whether or not anything was unsynced; and it is all
/// there after a reopen.
pub async fn an_accept_soon_is_an_accept_to_every_reader_and_survives_a_sync_and_a_reopen(
    open: Opener,
) {
    let j = open();
    j.sync().await.expect("a sync of nothing");
    assert_eq!(j.accept_soon(turn(1)).await.unwrap(), Accepted::New);
    assert!(matches!(
        j.accept_soon(turn(1)).await.unwrap(),
        Accepted::Existing(_)
    ));
    assert!(matches!(
        j.accept(turn(1)).await.unwrap(),
        Accepted::Existing(_)
    ));
    assert!(j.lookup(turn(1).request_id).await.unwrap().is_some());
    j.sync().await.unwrap();
    j.sync().await.unwrap();
    assert_eq!(j.accept_soon(turn(2)).await.unwrap(), Accepted::New);
    j.finish(Finish::new(
        turn(2).request_id,
        result("two", Usage::default()),
        5,
    ))
    .await
    .unwrap();
    let interrupted = j.interrupted(LOCAL_OWNER.into()).await.unwrap();
    assert_eq!(
        interrupted
            .iter()
            .map(|t| t.request_id.clone())
            .collect::<Vec<_>>(),
        vec![turn(1).request_id]
    );
    drop(j);
    let j = open();
    assert!(j.lookup(turn(1).request_id).await.unwrap().is_some());
    let two = j.lookup(turn(2).request_id).await.unwrap().unwrap();
    assert_eq!(two.outcome, Some(result("two", Usage::default())));
}

/// A turn numbered `n` of conversation `c`.
pub fn turn(n: u32) -> NewTurn {
    NewTurn {
        request_id: RequestId::new(format!("nipxx:{n}")).expect("valid id"),
        conversation_id: ConversationId::new("c").expect("valid id"),
        protocol: "nipxx".into(),
        owner: LOCAL_OWNER.into(),
        agent: "demo".into(),
        route: serde_json::json!({"client": "abc"}),
        input: agentwire_core::TurnInput {
            request_id: RequestId::new(format!("nipxx:{n}")).expect("valid id"),
            conversation_id: ConversationId::new("c").expect("valid id"),
            message: format!("m{n}"),
            model: "m".into(),
            thinking: None,
            fallback_models: Vec::new(),
            tool_hints: Vec::new(),
            resume: None,
            history: Vec::new(),
        },
        accepted_at: 100 + n as u64,
        conversation_meta: None,
    }
}

/// A result with `text` and `usage`.
pub fn result(text: &str, usage: Usage) -> Outcome {
    Outcome::Result(TurnResult {
        text: text.into(),
        usage,
        stop_reason: "stop".into(),
    })
}

fn ok(text: &str) -> Outcome {
    result(text, Usage::default())
}

fn conv() -> ConversationId {
    ConversationId::new("c").expect("valid id")
}

/// Accept is insert-if-absent; finish keeps the first outcome and refuses a second or an unknown turn.
pub async fn accept_is_insert_if_absent_and_the_first_outcome_wins(open: Opener) {
    let j = open();
    assert_eq!(j.accept(turn(1)).await.unwrap(), Accepted::New);
    match j.accept(turn(1)).await.unwrap() {
        Accepted::Existing(t) => assert!(t.outcome.is_none()),
        other => panic!("expected existing, got {other:?}"),
    }
    let id = turn(1).request_id;
    j.finish(Finish::new(id.clone(), ok("a"), 200).wire(Some("wire".into())))
        .await
        .unwrap();
    assert_eq!(
        j.finish(Finish::new(id.clone(), ok("b"), 201)).await,
        Err(StoreError::AlreadyEnded(id.to_string()))
    );
    let t = j.lookup(id.clone()).await.unwrap().unwrap();
    assert_eq!(t.outcome, Some(ok("a")));
    assert_eq!(t.wire.as_deref(), Some("wire"));
    assert_eq!(t.agent, "demo", "the turn names the agent that ran it");
    assert_eq!(t.ended_at, Some(200), "when the first outcome ended it");
    match j.accept(turn(1)).await.unwrap() {
        Accepted::Existing(t) => assert_eq!(t.outcome, Some(ok("a")), "a resend finds the outcome"),
        other => panic!("expected existing, got {other:?}"),
    }
    let unknown = RequestId::new("nipxx:none").unwrap();
    assert_eq!(
        j.finish(Finish::new(unknown.clone(), ok("x"), 1)).await,
        Err(StoreError::UnknownTurn(unknown.to_string()))
    );
    assert_eq!(j.lookup(unknown).await.unwrap(), None);
}

/// Turns without an outcome are listed for their owner, every protocol's, in acceptance order, after a
/// reopen too; another owner's are not.
pub async fn interrupted_turns_are_an_owners_and_survive_a_reopen(open: Opener) {
    {
        let j = open();
        for n in 0..5 {
            let mut t = turn(n);
            if n == 4 {
                t.protocol = "fisk".into();
            }
            j.accept(t).await.unwrap();
        }
        let mut other = turn(9);
        other.owner = "host-b".into();
        j.accept(other).await.unwrap();
        j.finish(Finish::new(turn(1).request_id, ok("done"), 300))
            .await
            .unwrap();
        let f = Outcome::Failure(Failure::new(TurnFailure::Cancelled, "stop"));
        j.finish(Finish::new(turn(3).request_id, f, 300))
            .await
            .unwrap();
    }
    let j = open();
    let ids: Vec<String> = j
        .interrupted(LOCAL_OWNER.into())
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.request_id.to_string())
        .collect();
    assert_eq!(ids, vec!["nipxx:0", "nipxx:2", "nipxx:4"]);
    let theirs = j.interrupted("host-b".into()).await.unwrap();
    assert_eq!(theirs.len(), 1);
    assert_eq!(theirs[0].owner, "host-b");
    assert!(j.interrupted("nobody".into()).await.unwrap().is_empty());
}

/// Of 32 concurrent accepts of one request id, exactly one is new.
pub async fn concurrent_accepts_of_one_id_give_exactly_one_new(open: Opener) {
    let j = open();
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

/// A conversation reads back in order, its transcripts only when asked for and only the first outcome's;
/// its meta is the last one put; all of it across a reopen.
pub async fn a_conversation_reads_back_in_order_with_meta_across_a_reopen(open: Opener) {
    {
        let j = open();
        for n in 0..3 {
            j.accept(turn(n)).await.unwrap();
        }
        let mut first = Finish::new(turn(0).request_id, ok("a"), 300);
        first.transcript = Some(vec![TurnEvent::Text { text: "hi".into() }]);
        j.finish(first).await.unwrap();
        j.finish(Finish::new(turn(1).request_id, ok("b"), 301))
            .await
            .unwrap();
        // A second outcome keeps neither its outcome nor its transcript.
        let mut again = Finish::new(turn(0).request_id, ok("z"), 302);
        again.transcript = Some(vec![TurnEvent::Text {
            text: "other".into(),
        }]);
        assert!(j.finish(again).await.is_err());
        assert_eq!(j.conversation_meta(conv()).await.unwrap(), None);
        for v in 1..=2 {
            j.put_conversation_meta(conv(), "fisk".into(), serde_json::json!({ "v": v }), v)
                .await
                .unwrap();
        }
    }
    let j = open();
    let view = j.conversation(conv(), true).await.unwrap();
    let ids: Vec<_> = view
        .turns
        .iter()
        .map(|t| t.turn.request_id.to_string())
        .collect();
    assert_eq!(ids, vec!["nipxx:0", "nipxx:1", "nipxx:2"]);
    assert_eq!(
        view.turns[0].transcript,
        Some(vec![TurnEvent::Text { text: "hi".into() }])
    );
    assert_eq!(view.turns[0].turn.outcome, Some(ok("a")));
    assert_eq!(view.turns[1].transcript, None);
    assert_eq!(view.turns[2].turn.outcome, None, "the running one too");
    let bare = j.conversation(conv(), false).await.unwrap();
    assert_eq!(bare.turns.len(), 3);
    assert!(
        bare.turns.iter().all(|t| t.transcript.is_none()),
        "no transcripts unless asked for"
    );
    assert_eq!(
        j.conversation_meta(conv()).await.unwrap(),
        Some(serde_json::json!({"v": 2}))
    );
    let none = ConversationId::new("none").unwrap();
    assert!(j
        .conversation(none.clone(), true)
        .await
        .unwrap()
        .turns
        .is_empty());
    assert_eq!(j.conversation_meta(none).await.unwrap(), None);
    // The newest turns only, still oldest first, with their transcripts.
    let recent = j.recent_turns(conv(), 2).await.unwrap();
    let ids: Vec<_> = recent
        .turns
        .iter()
        .map(|t| t.turn.request_id.to_string())
        .collect();
    assert_eq!(ids, vec!["nipxx:1", "nipxx:2"]);
    let all = j.recent_turns(conv(), 10).await.unwrap();
    assert_eq!(all.turns.len(), 3);
    assert_eq!(
        all.turns[0].transcript,
        Some(vec![TurnEvent::Text { text: "hi".into() }])
    );
}

/// A conversation's usage and tool calls are the sums of its ended turns', kept at finish.
pub async fn usage_and_tool_calls_are_kept_at_finish(open: Opener) {
    let j = open();
    for n in 0..3 {
        j.accept(turn(n)).await.unwrap();
    }
    let spent = |input, output| Usage {
        input_tokens: input,
        output_tokens: output,
    };
    let mut a = Finish::new(turn(0).request_id, result("a", spent(10, 5)), 300);
    a.tool_calls = 2;
    j.finish(a).await.unwrap();
    let failed =
        Outcome::Failure(Failure::new(TurnFailure::Cancelled, "stop").with_usage(spent(1, 2)));
    let mut b = Finish::new(turn(1).request_id, failed, 301);
    b.tool_calls = 1;
    j.finish(b).await.unwrap();
    let view = j.conversation(conv(), false).await.unwrap();
    assert_eq!(view.usage(), (spent(11, 7), 3));
    assert_eq!(view.turns[0].turn.tool_calls, 2);
    assert_eq!(view.turns[2].turn.tool_calls, 0, "not ended");
}

/// A new turn's conversation meta is set in the accept; a resend does not touch it.
pub async fn a_new_turn_sets_its_conversation_meta_in_the_same_write(open: Opener) {
    let j = open();
    let mut t = turn(1);
    t.conversation_meta = Some(serde_json::json!({"fingerprint": "a"}));
    assert_eq!(j.accept(t.clone()).await.unwrap(), Accepted::New);
    assert_eq!(
        j.conversation_meta(conv()).await.unwrap(),
        Some(serde_json::json!({"fingerprint": "a"}))
    );
    t.conversation_meta = Some(serde_json::json!({"fingerprint": "b"}));
    assert!(matches!(j.accept(t).await.unwrap(), Accepted::Existing(_)));
    assert_eq!(
        j.conversation_meta(conv()).await.unwrap(),
        Some(serde_json::json!({"fingerprint": "a"}))
    );
}

/// After `halt`, nothing commits; a reopen sees what committed before.
pub async fn a_halted_journal_commits_nothing_more(open: Opener) {
    let j = open();
    j.accept(turn(1)).await.unwrap();
    j.halt();
    assert!(j.accept(turn(2)).await.is_err());
    assert!(j
        .finish(Finish::new(turn(1).request_id, ok("a"), 1))
        .await
        .is_err());
    let reopened = open();
    assert!(reopened.lookup(turn(1).request_id).await.unwrap().is_some());
    assert!(reopened.lookup(turn(2).request_id).await.unwrap().is_none());
    assert_eq!(
        reopened
            .interrupted(LOCAL_OWNER.into())
            .await
            .unwrap()
            .len(),
        1,
        "turn 1 has no outcome"
    );
}

/// A probe is a durable write that changes no turn.
pub async fn a_probe_succeeds_on_a_writable_journal(open: Opener) {
    let j = open();
    j.probe().await.unwrap();
    j.probe().await.unwrap();
    assert!(j.interrupted(LOCAL_OWNER.into()).await.unwrap().is_empty());
}

/// A protocol's conversations are listed each once; a removed one loses its turns, transcripts and meta
/// and is listed no more, across a reopen, while the others stay whole. Removing it again removes nothing.
pub async fn a_removed_conversation_is_gone_and_listed_no_more(open: Opener) {
    let j = open();
    let meta = serde_json::json!({"fingerprint": "f"});
    for (n, c, protocol) in [
        (1, "a", "fisk"),
        (2, "a", "fisk"),
        (3, "b", "fisk"),
        (4, "n", "nipxx"),
    ] {
        let mut t = turn_of(n, c, protocol);
        t.conversation_meta = Some(meta.clone());
        assert_eq!(j.accept(t).await.unwrap(), Accepted::New);
    }
    let mut f = Finish::new(RequestId::new("fisk:1").expect("valid id"), ok("one"), 200);
    f.transcript = Some(vec![TurnEvent::Text { text: "one".into() }]);
    j.finish(f).await.unwrap();
    let id = |c: &str| ConversationId::new(c).expect("valid id");
    let mut listed = j.conversations("fisk".into(), 100).await.unwrap();
    listed.sort();
    assert_eq!(listed, vec![id("a"), id("b")]);
    assert_eq!(j.conversations("fisk".into(), 1).await.unwrap().len(), 1);

    assert_eq!(
        j.remove_conversation(id("a")).await.unwrap(),
        crate::Removed::Gone { turns: 2 }
    );
    let j = open();
    assert!(j
        .conversation(id("a"), true)
        .await
        .unwrap()
        .turns
        .is_empty());
    assert_eq!(j.conversation_meta(id("a")).await.unwrap(), None);
    assert_eq!(
        j.lookup(RequestId::new("fisk:1").expect("valid id"))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        j.conversations("fisk".into(), 100).await.unwrap(),
        vec![id("b")]
    );
    assert_eq!(j.conversation(id("b"), false).await.unwrap().turns.len(), 1);
    assert_eq!(j.conversation_meta(id("b")).await.unwrap(), Some(meta));
    assert_eq!(
        j.conversations("nipxx".into(), 100).await.unwrap(),
        vec![id("n")]
    );
    assert_eq!(
        j.remove_conversation(id("a")).await.unwrap(),
        crate::Removed::Gone { turns: 0 }
    );
}

/// [`Journal::claim_accept`] is a claim, then an accept: a new turn is journaled with its conversation's
/// meta; a resend is `Existing` and changes no meta; another turn of the conversation is either refused as
/// `Busy` naming the turn that runs (a shared journal), journaling nothing and leaving the meta alone, or
/// taken (a journal one daemon has to itself); once the first turn ended, the next takes it, in order.
pub async fn a_claimed_accept_takes_the_conversation_or_journals_nothing(open: Opener) {
    let j = open();
    let meta = |m: &str| Some(serde_json::json!({ "fingerprint": m }));
    let mut first = turn(1);
    first.conversation_meta = meta("a");
    assert_eq!(
        j.claim_accept(first.clone()).await.unwrap(),
        ClaimAccepted::Taken(Ok(Accepted::New))
    );
    assert_eq!(j.conversation_meta(conv()).await.unwrap(), meta("a"));
    let mut again = first.clone();
    again.conversation_meta = meta("b");
    match j.claim_accept(again).await.unwrap() {
        ClaimAccepted::Taken(Ok(Accepted::Existing(t))) => assert!(t.outcome.is_none()),
        other => panic!("a resend is the turn journaled, got {other:?}"),
    }
    assert_eq!(j.conversation_meta(conv()).await.unwrap(), meta("a"));
    let mut second = turn(2);
    second.conversation_meta = meta("c");
    match j.claim_accept(second.clone()).await.unwrap() {
        ClaimAccepted::Busy(holder) => {
            assert_eq!(holder, first.request_id);
            assert_eq!(j.lookup(second.request_id.clone()).await.unwrap(), None);
            assert_eq!(j.conversation_meta(conv()).await.unwrap(), meta("a"));
            let view = j.conversation(conv(), false).await.unwrap();
            assert_eq!(
                view.turns.len(),
                1,
                "a busy turn is no turn of the conversation"
            );
            j.finish(Finish::new(first.request_id.clone(), ok("a"), 300))
                .await
                .unwrap();
            assert_eq!(
                j.claim_accept(second.clone()).await.unwrap(),
                ClaimAccepted::Taken(Ok(Accepted::New))
            );
        }
        ClaimAccepted::Taken(Ok(Accepted::New)) => {}
        other => panic!("expected busy or new, got {other:?}"),
    }
    assert_eq!(j.conversation_meta(conv()).await.unwrap(), meta("c"));
    let view = open().conversation(conv(), false).await.unwrap();
    let ids: Vec<_> = view
        .turns
        .iter()
        .map(|t| t.turn.request_id.clone())
        .collect();
    assert_eq!(ids, vec![first.request_id, second.request_id]);
}
