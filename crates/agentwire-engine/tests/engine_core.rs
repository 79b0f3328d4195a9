//! The engine's pure core on a virtual clock: question windows, claim waits, write backoff and the drain's
//! grace fire exactly when they are due, once, under arbitrary interleavings (checked against a model);
//! a turn has one question open at a time, and an answer is taken only for that question and when it
//! fits; admission decides in the engine's order.

use agentwire_core::{
    Answer, CancelDecision, ConversationId, Question, QuestionKind, QuestionOption, RequestId,
};
use agentwire_engine::engine_core::{
    journal_backoff, Action, Admission, AnswerReply, EngineCore, TurnPolicy, WakeId,
    CONVERSATION_CLAIM_POLL, MAX_TURNS_WAITING_FOR_AGENT, RETRY_FIRST, RETRY_MAX,
};
use proptest::prelude::*;
use std::collections::HashMap;
use std::time::{Duration, Instant};

fn turn(n: usize) -> RequestId {
    RequestId::new(format!("turn-{n}")).unwrap()
}

fn conv(n: usize) -> ConversationId {
    ConversationId::new(format!("conv-{n}")).unwrap()
}

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Ask {
        turn: usize,
        question: usize,
        window: Option<u64>,
    },
    Answer {
        turn: usize,
        question: usize,
        fits: bool,
    },
    Extend {
        turn: usize,
        question: usize,
        window: u64,
    },
    Settle {
        turn: usize,
        question: usize,
    },
    TurnLeft {
        turn: usize,
    },
    ClaimBusy,
    WriteFailed {
        backoff: usize,
    },
    DropWake {
        pick: usize,
    },
    Drain {
        grace: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..3_000).prop_map(Op::Advance),
        3 => (0usize..3, 0usize..2, proptest::option::weighted(0.8, 0u64..2_000))
            .prop_map(|(turn, question, window)| Op::Ask { turn, question, window }),
        2 => (0usize..3, 0usize..2, any::<bool>())
            .prop_map(|(turn, question, fits)| Op::Answer { turn, question, fits }),
        2 => (0usize..3, 0usize..2, 0u64..2_000)
            .prop_map(|(turn, question, window)| Op::Extend { turn, question, window }),
        2 => (0usize..3, 0usize..2).prop_map(|(turn, question)| Op::Settle { turn, question }),
        1 => (0usize..3).prop_map(|turn| Op::TurnLeft { turn }),
        2 => Just(Op::ClaimBusy),
        2 => (0usize..2).prop_map(|backoff| Op::WriteFailed { backoff }),
        1 => any::<usize>().prop_map(|pick| Op::DropWake { pick }),
        1 => (0u64..5_000).prop_map(|grace| Op::Drain { grace }),
    ]
}

/// The question every turn asks: pick a or b.
fn asked() -> Question {
    Question::new(
        "pick",
        "call_1",
        QuestionKind::Select {
            question: "which?".into(),
            options: QuestionOption::labelled(["a".into(), "b".into()]),
            multiple: false,
            freeform: false,
        },
    )
}

fn question(turn_n: usize, q: usize) -> Action {
    Action::CloseQuestion {
        turn: turn(turn_n),
        question: format!("q{q}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whatever the order of events, each timer fires once, exactly at the first poll at or after its
    /// deadline as the model computes it (a window restarts when extended, a settled question or a dropped
    /// wake never fires), `poll_timeout` is always the earliest pending deadline, and backoff doubles up to
    /// its cap. Each turn has at most one question open (a second is refused until the first is settled,
    /// which its window closing does too, as the driver settles it then), and an answer is taken only for
    /// the open question and when it fits.
    #[test]
    fn timers_fire_when_due_and_once(ops in proptest::collection::vec(op(), 1..80)) {
        let start = Instant::now();
        let mut now = start;
        let mut core = EngineCore::default();
        let mut model: HashMap<Action, Instant> = HashMap::new();
        let mut wakes: Vec<WakeId> = Vec::new();
        let mut backoffs = [journal_backoff(), journal_backoff()];
        let mut expected_delay = [RETRY_FIRST, RETRY_FIRST];
        let mut drain_deadline: Option<Instant> = None;
        // The question each turn waits on, as the model has it.
        let mut open: HashMap<usize, usize> = HashMap::new();
        for op in ops {
            match op {
                Op::Advance(ms) => {
                    now += Duration::from_millis(ms);
                    core.handle_timeout(now);
                    let mut fired = Vec::new();
                    while let Some(a) = core.poll_action() {
                        fired.push(a);
                    }
                    let mut due: Vec<Action> = model
                        .iter()
                        .filter(|(_, at)| **at <= now)
                        .map(|(a, _)| a.clone())
                        .collect();
                    let mut fired_sorted = fired.clone();
                    due.sort_by_key(|a| format!("{a:?}"));
                    fired_sorted.sort_by_key(|a| format!("{a:?}"));
                    prop_assert_eq!(&fired_sorted, &due, "what fell due at {:?}", now - start);
                    // In deadline order.
                    let at: Vec<Instant> = fired.iter().map(|a| model[a]).collect();
                    prop_assert!(at.windows(2).all(|w| w[0] <= w[1]));
                    for a in &fired {
                        model.remove(a);
                        if let Action::DrainGraceOver = a {
                            prop_assert!(core.drain_grace_over(now));
                        }
                        // The driver closes an expired question unanswered.
                        if let Action::CloseQuestion { turn: t, question: q } = a {
                            prop_assert!(core.handle_question_settled(t, q).is_some(), "a window of an open question");
                            let n: usize = t.as_str()["turn-".len()..].parse().unwrap();
                            open.remove(&n);
                        }
                    }
                }
                Op::Ask { turn: t, question: q, window } => {
                    prop_assert_eq!(core.may_ask(&turn(t)), !open.contains_key(&t));
                    let window = window.map(Duration::from_millis);
                    let took = core.handle_question_asked(&turn(t), &format!("q{q}"), asked(), window, now);
                    prop_assert_eq!(took, !open.contains_key(&t), "one question open at a time");
                    if took {
                        open.insert(t, q);
                        if let Some(w) = window {
                            model.insert(question(t, q), now + w);
                        }
                    }
                }
                Op::Answer { turn: t, question: q, fits } => {
                    let answer = Answer::Select { value: if fits { "b" } else { "z" }.into() };
                    let expected = match (open.get(&t) == Some(&q), fits) {
                        (false, _) => AnswerReply::NotWaiting,
                        (true, false) => AnswerReply::DoesNotFit,
                        (true, true) => AnswerReply::Taken,
                    };
                    prop_assert_eq!(core.check_answer(&turn(t), &format!("q{q}"), &answer), expected);
                    if expected == AnswerReply::Taken {
                        let settled = core.handle_question_settled(&turn(t), &format!("q{q}"));
                        prop_assert_eq!(settled.map(|o| o.id), Some(format!("q{q}")));
                        open.remove(&t);
                        model.remove(&question(t, q));
                    }
                }
                Op::Extend { turn: t, question: q, window } => {
                    let had = core.handle_question_extended(&turn(t), &format!("q{q}"), Duration::from_millis(window), now);
                    let key = question(t, q);
                    prop_assert_eq!(had, model.contains_key(&key));
                    if had {
                        model.insert(key, now + Duration::from_millis(window));
                    }
                }
                Op::Settle { turn: t, question: q } => {
                    let was_open = open.get(&t) == Some(&q);
                    let settled = core.handle_question_settled(&turn(t), &format!("q{q}"));
                    prop_assert_eq!(settled.is_some(), was_open);
                    if was_open {
                        open.remove(&t);
                    }
                    model.remove(&question(t, q));
                }
                Op::TurnLeft { turn: t } => {
                    core.handle_turn_left(&turn(t));
                    open.remove(&t);
                    model.retain(|a, _| !matches!(a, Action::CloseQuestion { turn: x, .. } if *x == turn(t)));
                }
                Op::ClaimBusy => {
                    let id = core.handle_claim_busy(now);
                    prop_assert!(model.insert(Action::Wake(id), now + CONVERSATION_CLAIM_POLL).is_none(), "a fresh wake id");
                    wakes.push(id);
                }
                Op::WriteFailed { backoff } => {
                    let id = core.handle_write_failed(&mut backoffs[backoff], now);
                    model.insert(Action::Wake(id), now + expected_delay[backoff]);
                    expected_delay[backoff] = (expected_delay[backoff] * 2).min(RETRY_MAX);
                    prop_assert_eq!(backoffs[backoff].peek(), expected_delay[backoff]);
                    wakes.push(id);
                }
                Op::DropWake { pick } => {
                    if !wakes.is_empty() {
                        let id = wakes.remove(pick % wakes.len());
                        core.handle_wake_dropped(id);
                        model.remove(&Action::Wake(id));
                    }
                }
                Op::Drain { grace } => {
                    core.handle_drain(Duration::from_millis(grace), now);
                    prop_assert!(core.draining());
                    let at = now + Duration::from_millis(grace);
                    if drain_deadline.is_none_or(|d| at < d) {
                        drain_deadline = Some(at);
                        model.insert(Action::DrainGraceOver, at);
                    }
                    prop_assert_eq!(core.drain_grace_over(now), drain_deadline.is_some_and(|d| now >= d));
                }
            }
            prop_assert_eq!(core.poll_timeout(), model.values().min().copied());
            for t in 0..3 {
                let held = core.open_question(&turn(t)).map(|o| o.id.clone());
                prop_assert_eq!(held, open.get(&t).map(|q| format!("q{q}")));
            }
        }
    }
}

#[test]
fn backoff_doubles_from_first_to_max() {
    let mut b = journal_backoff();
    let mut waits = Vec::new();
    for _ in 0..8 {
        waits.push(b.take());
    }
    assert_eq!(waits[0], RETRY_FIRST);
    assert_eq!(waits[1], RETRY_FIRST * 2);
    assert!(waits.windows(2).all(|w| w[1] == (w[0] * 2).min(RETRY_MAX)));
    assert_eq!(*waits.last().unwrap(), RETRY_MAX);
}

#[test]
fn a_question_window_moves_when_extended_and_closes_once() {
    let t0 = Instant::now();
    let mut core = EngineCore::default();
    assert!(core.handle_question_asked(&turn(1), "q", asked(), Some(Duration::from_secs(10)), t0));
    core.handle_timeout(t0 + Duration::from_secs(9));
    assert_eq!(core.poll_action(), None);
    assert!(core.handle_question_extended(
        &turn(1),
        "q",
        Duration::from_secs(10),
        t0 + Duration::from_secs(9)
    ));
    core.handle_timeout(t0 + Duration::from_secs(18));
    assert_eq!(core.poll_action(), None, "the window restarted at 9 s");
    core.handle_timeout(t0 + Duration::from_secs(19));
    assert_eq!(
        core.poll_action(),
        Some(Action::CloseQuestion {
            turn: turn(1),
            question: "q".into()
        })
    );
    core.handle_timeout(t0 + Duration::from_secs(60));
    assert_eq!(core.poll_action(), None, "once");
    assert!(
        !core.handle_question_extended(&turn(1), "q", Duration::from_secs(1), t0),
        "closed"
    );
}

#[test]
fn admission_in_the_engines_order() {
    let mut core = EngineCore::default();
    let queue = TurnPolicy::default();
    let exclusive = TurnPolicy {
        exclusive: true,
        ..Default::default()
    };
    let refuse_full = TurnPolicy {
        refuse_when_full: true,
        ..Default::default()
    };
    assert_eq!(core.admit(&turn(1), &conv(1), queue, "r"), Admission::New);
    assert!(core.is_live(&turn(1)));
    assert_eq!(
        core.admit(&turn(1), &conv(1), queue, "r"),
        Admission::Duplicate
    );
    assert_eq!(
        core.admit(&turn(2), &conv(1), exclusive, "r"),
        Admission::ConversationBusy
    );
    assert!(!core.is_live(&turn(2)), "a refused turn is not live");
    assert_eq!(
        core.admit(&turn(3), &conv(1), queue, "s"),
        Admission::New,
        "queued behind turn 1"
    );
    assert_eq!(core.live_turns(), 2);
    assert_eq!(core.live_turns_of("s"), 1);

    core.limit_running(2);
    core.limit_running(9);
    assert_eq!(core.running_limit(), Some(2), "set once");
    assert_eq!(
        core.admit(&turn(4), &conv(2), refuse_full, "r"),
        Admission::AgentFull { max: 2 },
        "two live: full for a front that refuses"
    );
    assert_eq!(
        core.admit(&turn(4), &conv(2), queue, "r"),
        Admission::New,
        "waits for the agent"
    );
    // Fill the places waiting for the agent, each turn its own conversation.
    for n in 0..MAX_TURNS_WAITING_FOR_AGENT - 1 {
        assert_eq!(
            core.admit(&turn(100 + n), &conv(100 + n), queue, "r"),
            Admission::New
        );
    }
    assert_eq!(core.live_turns(), 2 + MAX_TURNS_WAITING_FOR_AGENT);
    assert_eq!(
        core.admit(&turn(5), &conv(3), queue, "r"),
        Admission::AgentFull { max: 2 }
    );
    assert_eq!(
        core.admit(&turn(1), &conv(1), queue, "r"),
        Admission::Duplicate,
        "a resend of a live turn is a duplicate, not a refusal"
    );
    core.handle_turn_left(&turn(100));
    assert_eq!(
        core.admit(&turn(5), &conv(3), queue, "r"),
        Admission::New,
        "a place freed by a turn that left"
    );

    core.handle_drain(Duration::from_secs(5), Instant::now());
    assert_eq!(
        core.admit(&turn(6), &conv(4), queue, "r"),
        Admission::Draining,
        "draining first"
    );
}

#[test]
fn only_its_requester_or_the_operator_cancels_a_live_turn() {
    let mut core = EngineCore::default();
    let queue = TurnPolicy::default();
    assert_eq!(
        core.admit(&turn(1), &conv(1), queue, "alice"),
        Admission::New
    );
    assert_eq!(
        core.admit(&turn(2), &conv(1), queue, "alice"),
        Admission::New
    );
    assert_eq!(
        core.handle_cancel(&turn(1), Some("mallory")),
        CancelDecision::Ignored,
        "not the requester's turn"
    );
    assert_eq!(
        core.handle_cancel(&turn(9), None),
        CancelDecision::Ignored,
        "not live"
    );
    assert_ne!(
        core.handle_cancel(&turn(1), Some("alice")),
        CancelDecision::Ignored,
        "its requester cancels it"
    );
    assert_eq!(
        core.handle_cancel(&turn(1), Some("alice")),
        CancelDecision::Ignored,
        "once"
    );
    assert_ne!(
        core.handle_cancel(&turn(2), None),
        CancelDecision::Ignored,
        "the operator cancels any turn"
    );
    core.handle_turn_left(&turn(2));
    assert_eq!(
        core.handle_cancel(&turn(2), None),
        CancelDecision::Ignored,
        "left"
    );
}

#[test]
fn a_claim_goes_on_is_busy_or_is_refused_by_what_failed() {
    use agentwire_engine::engine_core::{claim_verdict, ClaimVerdict, JournalFault};
    let (unwritable, corrupt) = (JournalFault::Unwritable, JournalFault::Corrupt);
    assert_eq!(claim_verdict(Ok(true), Ok(true)), ClaimVerdict::Go);
    assert_eq!(
        claim_verdict(Ok(false), Ok(true)),
        ClaimVerdict::Go,
        "held by another, but the journal has the turn: a resend answered from it"
    );
    assert_eq!(
        claim_verdict(Ok(false), Ok(false)),
        ClaimVerdict::ConversationBusy
    );
    assert_eq!(
        claim_verdict(Err(unwritable), Ok(true)),
        ClaimVerdict::Unavailable,
        "the journal may take it soon"
    );
    assert_eq!(
        claim_verdict(Ok(false), Err(unwritable)),
        ClaimVerdict::Unavailable
    );
    assert_eq!(
        claim_verdict(Err(corrupt), Ok(true)),
        ClaimVerdict::Corrupt,
        "no retry mends a corrupt record"
    );
    assert_eq!(
        claim_verdict(Ok(false), Err(corrupt)),
        ClaimVerdict::Corrupt
    );
}
