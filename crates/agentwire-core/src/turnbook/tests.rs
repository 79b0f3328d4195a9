//! Unit and property tests of the turn book's invariants.

use super::*;
use proptest::prelude::*;
use std::collections::HashSet;

fn rid(n: u8) -> RequestId {
    RequestId::new(format!("t:{n}")).unwrap()
}
fn cid(n: u8) -> ConversationId {
    ConversationId::new(format!("c:{n}")).unwrap()
}

#[test]
fn one_turn_at_a_time_then_fifo() {
    let mut b = TurnBook::new();
    for n in 0..3 {
        assert_eq!(b.submit(rid(n), cid(0)), Submitted::New);
    }
    assert_eq!(b.journaled(&rid(0)), Journaled::Start);
    assert_eq!(b.journaled(&rid(1)), Journaled::Queued);
    assert_eq!(b.journaled(&rid(2)), Journaled::Queued);
    assert_eq!(b.finish(&rid(0)), Finished::Decided);
    assert_eq!(b.finish(&rid(0)), Finished::AlreadyEnding);
    assert_eq!(b.ended(&rid(0)), Some(rid(1)));
    assert_eq!(b.finish(&rid(1)), Finished::Decided);
    assert_eq!(b.ended(&rid(1)), Some(rid(2)));
    assert_eq!(b.finish(&rid(2)), Finished::Decided);
    assert_eq!(b.ended(&rid(2)), None);
    assert_eq!(b.live(), 0);
    assert_eq!(b.finish(&rid(2)), Finished::Unknown);
}

#[test]
fn turns_run_in_submit_order_whatever_order_the_journal_finishes_in() {
    let mut b = TurnBook::new();
    b.submit(rid(0), cid(0));
    b.submit(rid(1), cid(0));
    assert_eq!(
        b.journaled(&rid(1)),
        Journaled::Queued,
        "waits for the earlier pending turn"
    );
    assert_eq!(b.journaled(&rid(0)), Journaled::Start);
    b.finish(&rid(0));
    assert_eq!(b.ended(&rid(0)), Some(rid(1)));
    // A pending turn that turns out to be a resend lets the one behind it start.
    b.submit(rid(2), cid(1));
    b.submit(rid(3), cid(1));
    assert_eq!(b.journaled(&rid(3)), Journaled::Queued);
    assert_eq!(b.forget(&rid(2)), Some(rid(3)));
}

#[test]
fn cancel_is_idempotent_and_ignored_after_the_outcome() {
    let mut b = TurnBook::new();
    b.submit(rid(0), cid(0));
    b.journaled(&rid(0));
    assert_eq!(b.cancel(&rid(0)), CancelDecision::SignalAgent);
    assert_eq!(b.cancel(&rid(0)), CancelDecision::Ignored);
    assert_eq!(b.finish(&rid(0)), Finished::Decided);
    assert_eq!(b.cancel(&rid(0)), CancelDecision::Ignored);
    b.ended(&rid(0));
    assert_eq!(b.cancel(&rid(0)), CancelDecision::Ignored);
}

#[test]
fn cancel_before_journal_ends_without_running() {
    let mut b = TurnBook::new();
    b.submit(rid(0), cid(0));
    assert_eq!(b.cancel(&rid(0)), CancelDecision::Deferred);
    assert_eq!(b.journaled(&rid(0)), Journaled::EndCancelled);
    assert_eq!(b.finish(&rid(0)), Finished::AlreadyEnding);
    assert_eq!(b.ended(&rid(0)), None);
    // The conversation is free for the next turn.
    b.submit(rid(1), cid(0));
    assert_eq!(b.journaled(&rid(1)), Journaled::Start);
}

#[test]
fn cancel_of_a_queued_turn_ends_it_and_keeps_order() {
    let mut b = TurnBook::new();
    for n in 0..3 {
        b.submit(rid(n), cid(0));
        b.journaled(&rid(n));
    }
    assert_eq!(b.cancel(&rid(1)), CancelDecision::EndNow);
    assert_eq!(b.ended(&rid(1)), None);
    b.finish(&rid(0));
    assert_eq!(b.ended(&rid(0)), Some(rid(2)));
}

#[test]
fn duplicate_and_full_conversation() {
    let mut b = TurnBook::new();
    b.submit(rid(0), cid(0));
    assert!(matches!(
        b.submit(rid(0), cid(0)),
        Submitted::Duplicate(TurnPhase::Pending { .. })
    ));
    b.journaled(&rid(0));
    for n in 1..=MAX_QUEUED_TURNS_PER_CONVERSATION {
        let id = RequestId::new(format!("q:{n}")).unwrap();
        assert_eq!(b.submit(id, cid(0)), Submitted::New);
    }
    assert_eq!(b.submit(rid(200), cid(0)), Submitted::ConversationFull);
    // Another conversation is not affected.
    assert_eq!(b.submit(rid(201), cid(1)), Submitted::New);
}

#[test]
fn forget_releases_the_conversation() {
    let mut b = TurnBook::new();
    b.submit(rid(0), cid(0));
    b.forget(&rid(0));
    assert_eq!(b.live(), 0);
    b.submit(rid(1), cid(0));
    assert_eq!(b.journaled(&rid(1)), Journaled::Start);
}

#[derive(Debug, Clone)]
enum Op {
    Submit(u8, u8),
    Journal(u8),
    Forget(u8),
    Cancel(u8),
    Finish(u8),
    Ended(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..8, 0u8..3).prop_map(|(t, c)| Op::Submit(t, c)),
        (0u8..8).prop_map(Op::Journal),
        (0u8..8).prop_map(Op::Forget),
        (0u8..8).prop_map(Op::Cancel),
        (0u8..8).prop_map(Op::Finish),
        (0u8..8).prop_map(Op::Ended),
    ]
}

proptest! {
    /// Under any interleaving of submit, journal, cancel, finish and end: an outcome is decided at most once
    /// per submission, at most one turn holds a conversation, a turn starts only once, and queued turns start
    /// in the order they were journaled.
    #[test]
    fn invariants_hold_under_any_interleaving(ops in proptest::collection::vec(op(), 1..200)) {
        let mut b = TurnBook::new();
        let mut conv_of = HashMap::new();
        let mut decided: HashSet<u8> = HashSet::new();
        let mut started: HashSet<u8> = HashSet::new();
        let mut journal_order: HashMap<u8, Vec<u8>> = HashMap::new();
        let mut start_order: HashMap<u8, Vec<u8>> = HashMap::new();
        let mut live: HashSet<u8> = HashSet::new();
        let mut ever: HashSet<u8> = HashSet::new();
        let mut submit_order: HashMap<u8, Vec<u8>> = HashMap::new();
        for op in ops {
            match op {
                // An ended id is never resubmitted to the book: the journal answers it.
                Op::Submit(t, _) if ever.contains(&t) && !live.contains(&t) => {}
                Op::Submit(t, c) => {
                    ever.insert(t);
                    if let Submitted::New = b.submit(rid(t), cid(c)) {
                        submit_order.entry(c).or_default().push(t);
                        prop_assert!(!live.contains(&t));
                        live.insert(t);
                        conv_of.insert(t, c);
                        decided.remove(&t);
                        started.remove(&t);
                    }
                }
                Op::Journal(t) => match (b.starts_when_journaled(&rid(t)), b.journaled(&rid(t))) {
                    // Said beforehand for a pending turn: it starts, unless a cancel came first.
                    (true, Journaled::Queued) | (false, Journaled::Start) => {
                        prop_assert!(false, "starts_when_journaled was wrong about {}", t);
                    }
                    (_, Journaled::Start) => {
                        prop_assert!(started.insert(t));
                        journal_order.entry(conv_of[&t]).or_default().push(t);
                        start_order.entry(conv_of[&t]).or_default().push(t);
                    }
                    (_, Journaled::Queued) => journal_order.entry(conv_of[&t]).or_default().push(t),
                    (_, Journaled::EndCancelled) => prop_assert!(decided.insert(t)),
                    (_, Journaled::Unknown) => {}
                },
                Op::Forget(t) => {
                    if matches!(b.phase(&rid(t)), Some(TurnPhase::Pending { .. })) {
                        live.remove(&t);
                    }
                    if let Some(n) = b.forget(&rid(t)) {
                        let n: u8 = n.as_str()[2..].parse().unwrap();
                        prop_assert!(started.insert(n));
                        start_order.entry(conv_of[&n]).or_default().push(n);
                    }
                }
                Op::Cancel(t) => {
                    if b.cancel(&rid(t)) == CancelDecision::EndNow {
                        prop_assert!(decided.insert(t));
                        if let Some(v) = journal_order.get_mut(&conv_of[&t]) { v.retain(|x| *x != t) }
                    }
                }
                Op::Finish(t) => {
                    let was_queued = b.phase(&rid(t)) == Some(TurnPhase::Queued);
                    if b.finish(&rid(t)) == Finished::Decided {
                        prop_assert!(decided.insert(t));
                        if was_queued {
                            if let Some(v) = journal_order.get_mut(&conv_of[&t]) { v.retain(|x| *x != t) }
                        }
                    }
                }
                Op::Ended(t) => {
                    let ending = b.phase(&rid(t)) == Some(TurnPhase::Ending);
                    if let Some(n) = b.ended(&rid(t)) {
                        let n: u8 = n.as_str()[2..].parse().unwrap();
                        prop_assert!(started.insert(n));
                        start_order.entry(conv_of[&n]).or_default().push(n);
                    }
                    if ending { live.remove(&t); }
                }
            }
            // At most one running turn per conversation.
            for c in 0u8..3 {
                let running = live.iter().filter(|t| conv_of[*t] == c && matches!(b.phase(&rid(**t)), Some(TurnPhase::Running { .. }))).count();
                prop_assert!(running <= 1);
            }
            prop_assert_eq!(b.live(), live.len());
        }
        // Starts follow submit order within each conversation.
        let _ = &journal_order;
        for (c, starts) in &start_order {
            let order = submit_order.get(c).cloned().unwrap_or_default();
            let filtered: Vec<u8> = order.into_iter().filter(|t| starts.contains(t)).collect();
            prop_assert_eq!(&filtered, starts);
        }
    }
}

#[test]
fn an_exclusive_submit_refuses_while_any_turn_of_the_conversation_lives() {
    let mut b = TurnBook::new();
    assert_eq!(b.submit_exclusive(rid(0), cid(0)), Submitted::New);
    // Pending (not yet journaled) already holds the conversation for an exclusive submit.
    assert_eq!(
        b.submit_exclusive(rid(1), cid(0)),
        Submitted::ConversationBusy
    );
    assert_eq!(b.journaled(&rid(0)), Journaled::Start);
    assert_eq!(
        b.submit_exclusive(rid(1), cid(0)),
        Submitted::ConversationBusy
    );
    assert_eq!(b.phase(&rid(1)), None, "a busy refusal registers nothing");
    // The same request again is a duplicate, not busy.
    assert!(matches!(
        b.submit_exclusive(rid(0), cid(0)),
        Submitted::Duplicate(_)
    ));
    assert_eq!(b.submit_exclusive(rid(2), cid(1)), Submitted::New);
    assert_eq!(b.finish(&rid(0)), Finished::Decided);
    assert_eq!(
        b.submit_exclusive(rid(1), cid(0)),
        Submitted::ConversationBusy
    );
    assert_eq!(b.ended(&rid(0)), None);
    assert_eq!(b.submit_exclusive(rid(1), cid(0)), Submitted::New);
}

#[test]
fn a_turn_is_never_started_by_a_call_that_cannot_report_it() {
    // F (pending, cancelled) stands in front of G (journaled); X arrives later. The engine learns which turn
    // to start only from the calls that return one, so X's `journaled` must not start G behind its back.
    let mut b = TurnBook::new();
    let (f, g, x) = (rid(0), rid(1), rid(2));
    b.submit(f.clone(), cid(0));
    b.submit(g.clone(), cid(0));
    assert_eq!(b.journaled(&g), Journaled::Queued);
    assert_eq!(b.cancel(&f), CancelDecision::Deferred);
    assert_eq!(b.journaled(&f), Journaled::EndCancelled);
    b.submit(x.clone(), cid(0));
    assert_eq!(b.journaled(&x), Journaled::Queued);
    assert_eq!(
        b.phase(&g),
        Some(TurnPhase::Queued),
        "G waits until F's outcome is out"
    );
    assert_eq!(b.finish(&f), Finished::AlreadyEnding);
    assert_eq!(b.ended(&f), Some(g.clone()));
    assert_eq!(b.finish(&g), Finished::Decided);
    assert_eq!(b.ended(&g), Some(x));
}
