//! The engine's per-protocol policies and questions, against a real journal: exclusive conversations,
//! park-on-cancel, transcripts, questions answered / expired / cancelled, and a panicking agent.

use agentwire_core::{
    Answer, ApproveChoice, Asked, ConversationId, Failure, Outcome, Question, QuestionKind,
    QuestionOption, Refusal, RequestId, TurnEvent, TurnFailure, TurnResult, Usage,
};
use agentwire_engine::{
    Agent, AgentCard, AnswerReply, CancelReply, Engine, Engines, FrontAsk, Submission, SubmitReply,
    TurnContext, TurnFront, TurnInput, TurnPolicy,
};
use agentwire_store::SqliteJournal;
use futures_util::future::BoxFuture;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// `wait`: parks at its next 10 ms boundary once cancelled. `ask`: asks one select question and replies
/// with the answer (or says how asking went). `budget`: replies with the token budget it was given.
/// `panic`: panics. Anything else: replies at once.
struct TestAgent;

fn done(text: &str) -> Outcome {
    Outcome::Result(TurnResult {
        text: text.into(),
        usage: Usage {
            input_tokens: 1,
            output_tokens: 1,
        },
        stop_reason: "end_turn".into(),
    })
}

impl Agent for TestAgent {
    fn card(&self) -> AgentCard {
        AgentCard {
            name: "t".into(),
            version: "0".into(),
            description: String::new(),
            models: vec!["m".into()],
            default_model: "m".into(),
            tools: vec![],
            max_prompt_bytes: 100,
            max_context_tokens: 100,
        }
    }
    fn run(&self, input: TurnInput, ctx: TurnContext) -> BoxFuture<'static, Outcome> {
        Box::pin(async move {
            let _ = ctx
                .events
                .send(TurnEvent::Text {
                    text: "working".into(),
                })
                .await;
            match input.message.as_str() {
                "wait" => loop {
                    if *ctx.cancel.borrow() {
                        return Outcome::Failure(
                            Failure::new(TurnFailure::Suspended, "parked")
                                .with_checkpoint(serde_json::json!({"at": 1})),
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                },
                "ask" => {
                    let asked = ctx
                        .asker
                        .ask(Question::new(
                            "pick",
                            "call_1",
                            QuestionKind::Select {
                                question: "which?".into(),
                                options: QuestionOption::labelled(["a".into(), "b".into()]),
                                multiple: false,
                                freeform: false,
                            },
                        ))
                        .await;
                    match asked {
                        Asked::Answered(Answer::Select { value }) => done(&value),
                        other => done(&format!("{other:?}")),
                    }
                }
                "budget" => done(&format!("{:?}", ctx.token_budget)),
                "panic" => panic!("the agent has a bug"),
                _ => done("ok"),
            }
        })
    }
}

#[derive(Default)]
struct Front {
    outcomes: Mutex<Vec<Outcome>>,
    asked: Mutex<Vec<Question>>,
    closed: Mutex<Vec<String>>,
    /// How many events the turn streamed: the agent streams one as it starts.
    events: std::sync::atomic::AtomicUsize,
    can_ask: bool,
    /// The window questions are asked with (none: open until answered).
    window: Option<Duration>,
    /// The token budget the front gives its turn.
    budget: Option<u64>,
    ended: Notify,
}

impl TurnFront for Front {
    fn accepted(&self, _queued: bool) {}
    fn event(&self, _event: TurnEvent) {
        self.events
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
    fn encode_outcome(&self, _o: &Outcome) -> Option<String> {
        None
    }
    fn deliver_outcome(&self, o: &Outcome, _wire: Option<&str>) {
        self.outcomes.lock().unwrap().push(o.clone());
        self.ended.notify_one();
    }
    fn ask(&self, q: &Question) -> FrontAsk {
        if !self.can_ask {
            return FrontAsk::Unavailable;
        }
        let mut asked = self.asked.lock().unwrap();
        asked.push(q.clone());
        FrontAsk::Sent {
            question_id: format!("q{}", asked.len()),
            window: self.window,
        }
    }
    fn question_closed(&self, id: &str) {
        self.closed.lock().unwrap().push(id.to_string());
    }
    fn token_budget(&self) -> Option<u64> {
        self.budget
    }
}

impl Front {
    fn asking() -> Arc<Front> {
        Arc::new(Front {
            can_ask: true,
            ..Front::default()
        })
    }
    async fn outcome(&self) -> Outcome {
        loop {
            let notified = self.ended.notified();
            if let Some(o) = self.outcomes.lock().unwrap().first().cloned() {
                return o;
            }
            tokio::time::timeout(Duration::from_secs(5), notified)
                .await
                .expect("an outcome in time");
        }
    }
    /// Waits until the agent runs the turn (its first event), so a cancel reaches the agent, not a turn
    /// that has yet to start.
    async fn wait_running(&self) {
        for _ in 0..1000 {
            if self.events.load(std::sync::atomic::Ordering::SeqCst) > 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("the turn did not start");
    }
    async fn wait_asked(&self, n: usize) {
        for _ in 0..500 {
            if self.asked.lock().unwrap().len() >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("the question was not asked");
    }
}

fn sub(id: &str, conv: &str, msg: &str, front: Arc<Front>, policy: TurnPolicy) -> Submission {
    Submission {
        input: TurnInput {
            request_id: RequestId::new(id).unwrap(),
            conversation_id: ConversationId::new(conv).unwrap(),
            message: msg.into(),
            model: "m".into(),
            thinking: None,
            fallback_models: Vec::new(),
            tool_hints: Vec::new(),
            history: Vec::new(),
            resume: None,
        },
        protocol: "test".into(),
        requester: "r".into(),
        route: serde_json::json!({}),
        front,
        policy,
        conversation_meta: None,
        slot: None,
    }
}

const FISK_LIKE: TurnPolicy = TurnPolicy {
    exclusive: true,
    park_on_cancel: true,
    keep_transcript: true,
    refuse_when_full: true,
    accepted_silently: false,
};

/// Waits until health says the journal cannot write, then a moment more for anything held back to show.
async fn journal_marked_unwritable(e: &Engine) {
    tokio::time::timeout(
        Duration::from_secs(5),
        e.watch_journal_writable().wait_for(|w| !*w),
    )
    .await
    .expect("health says the journal cannot write")
    .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
}

fn engine(dir: &tempfile::TempDir) -> Arc<Engine> {
    let journal = SqliteJournal::open(&dir.path().join("j.sqlite")).unwrap();
    Engine::new(Arc::new(journal), Arc::new(TestAgent))
}

#[tokio::test]
async fn the_fronts_token_budget_reaches_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    for (n, budget) in [(1, Some(42)), (2, None)] {
        let front = Arc::new(Front {
            budget,
            ..Front::default()
        });
        let id = format!("b:{n}");
        e.submit(sub(
            &id,
            &format!("cb{n}"),
            "budget",
            front.clone(),
            FISK_LIKE,
        ))
        .await;
        match front.outcome().await {
            Outcome::Result(r) => assert_eq!(r.text, format!("{budget:?}")),
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn an_exclusive_conversation_refuses_a_second_turn_and_parks_on_cancel() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    let first = Front::asking();
    assert_eq!(
        e.submit(sub("t:1", "c", "wait", first.clone(), FISK_LIKE))
            .await,
        SubmitReply::Accepted { queued: false }
    );
    let second = Front::asking();
    assert_eq!(
        e.submit(sub("t:2", "c", "hi", second.clone(), FISK_LIKE))
            .await,
        SubmitReply::ConversationBusy
    );
    assert!(
        second.outcomes.lock().unwrap().is_empty(),
        "the front answers a busy refusal itself"
    );
    assert!(e
        .lookup(&RequestId::new("t:2").unwrap())
        .await
        .unwrap()
        .is_none());
    // Another conversation is free.
    let other = Front::asking();
    e.submit(sub("t:3", "d", "hi", other.clone(), FISK_LIKE))
        .await;
    assert_eq!(other.outcome().await, done("ok"));

    first.wait_running().await;
    assert_eq!(
        e.cancel(&RequestId::new("t:1").unwrap(), "r").await,
        CancelReply::Cancelling
    );
    match first.outcome().await {
        Outcome::Failure(f) => {
            assert_eq!(
                f.code,
                TurnFailure::Suspended,
                "the agent parked, not the engine"
            );
            assert_eq!(f.checkpoint, Some(serde_json::json!({"at": 1})));
        }
        other => panic!("{other:?}"),
    }
    // The transcript was journaled with the outcome.
    let record = e
        .conversation(&ConversationId::new("c").unwrap(), true)
        .await
        .unwrap()
        .turns;
    assert_eq!(record.len(), 1);
    assert_eq!(
        record[0].transcript,
        Some(vec![TurnEvent::Text {
            text: "working".into()
        }])
    );
    // Now the conversation takes its next turn.
    let third = Front::asking();
    assert_eq!(
        e.submit(sub("t:4", "c", "hi", third.clone(), FISK_LIKE))
            .await,
        SubmitReply::Accepted { queued: false }
    );
    assert_eq!(third.outcome().await, done("ok"));
}

#[tokio::test]
async fn a_question_is_answered_once_and_a_wrong_or_late_answer_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    let id = RequestId::new("t:1").unwrap();
    let f = Front::asking();
    e.submit(sub("t:1", "c", "ask", f.clone(), FISK_LIKE)).await;
    f.wait_asked(1).await;
    assert!(e.is_waiting_on(&id, "q1"));
    assert_eq!(
        e.answer(&id, "q9", Answer::Select { value: "a".into() }),
        AnswerReply::NotWaiting
    );
    assert_eq!(
        e.answer(&id, "q1", Answer::Select { value: "z".into() }),
        AnswerReply::DoesNotFit,
        "z was not offered"
    );
    assert_eq!(
        e.answer(&id, "q1", Answer::Confirm { confirmed: true }),
        AnswerReply::DoesNotFit
    );
    assert_eq!(
        e.answer(&id, "q1", Answer::Select { value: "b".into() }),
        AnswerReply::Taken
    );
    assert_eq!(
        e.answer(&id, "q1", Answer::Select { value: "a".into() }),
        AnswerReply::NotWaiting,
        "answered once"
    );
    assert_eq!(f.outcome().await, done("b"));
    assert_eq!(*f.closed.lock().unwrap(), vec!["q1".to_string()]);
    assert_eq!(
        e.answer(
            &id,
            "q1",
            Answer::Approve {
                choice: ApproveChoice::Once
            }
        ),
        AnswerReply::NotWaiting
    );
}

#[tokio::test]
async fn an_expired_cancelled_or_impossible_question_tells_the_agent_how_it_went() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    let f = Front::asking();
    e.submit(sub("t:1", "c1", "ask", f.clone(), FISK_LIKE))
        .await;
    f.wait_asked(1).await;
    assert!(e.question_expired(&RequestId::new("t:1").unwrap(), "q1"));
    assert!(!e.question_expired(&RequestId::new("t:1").unwrap(), "q1"));
    assert_eq!(f.outcome().await, done("Unanswered"));

    let f = Front::asking();
    e.submit(sub("t:2", "c2", "ask", f.clone(), FISK_LIKE))
        .await;
    f.wait_asked(1).await;
    e.cancel(&RequestId::new("t:2").unwrap(), "r").await;
    assert_eq!(f.outcome().await, done("Cancelled"));
    assert_eq!(*f.closed.lock().unwrap(), vec!["q1".to_string()]);

    let f = Arc::new(Front::default());
    e.submit(sub("t:3", "c3", "ask", f.clone(), TurnPolicy::default()))
        .await;
    assert_eq!(f.outcome().await, done("Unavailable"));
}

#[tokio::test]
async fn a_panicking_agent_ends_its_turn_crashed_and_the_engine_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    let f = Front::asking();
    e.submit(sub("t:1", "c", "panic", f.clone(), FISK_LIKE))
        .await;
    match f.outcome().await {
        Outcome::Failure(f) => assert_eq!(f.code, TurnFailure::Crashed),
        other => panic!("{other:?}"),
    }
    let g = Front::asking();
    e.submit(sub("t:2", "c", "hi", g.clone(), FISK_LIKE)).await;
    assert_eq!(g.outcome().await, done("ok"));
}

fn faulty_engine(dir: &tempfile::TempDir) -> (Arc<Engine>, Arc<agentwire_store::FaultyJournal>) {
    let inner = SqliteJournal::open(&dir.path().join("j.sqlite")).unwrap();
    let faulty = agentwire_store::FaultyJournal::new(Arc::new(inner));
    (Engine::new(faulty.clone(), Arc::new(TestAgent)), faulty)
}

#[tokio::test]
async fn a_failed_finish_holds_the_outcome_back_until_it_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let (e, faulty) = faulty_engine(&dir);
    let front = Arc::new(Front::default());
    assert_eq!(
        e.submit(sub("t:1", "c", "wait", front.clone(), FISK_LIKE))
            .await,
        SubmitReply::Accepted { queued: false }
    );
    front.wait_running().await;
    faulty.fail_writes(true);
    e.cancel(&RequestId::new("t:1").unwrap(), "r").await;
    // The agent parks at its next boundary, but the outcome cannot be journaled: nothing is said.
    for _ in 0..1000 {
        if e.live_phases()
            .iter()
            .any(|(_, p)| *p == agentwire_core::TurnPhase::Ending)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    journal_marked_unwritable(&e).await;
    assert!(front.outcomes.lock().unwrap().is_empty(), "not durable yet");
    assert!(
        !e.journal_writable(),
        "health says the journal cannot write"
    );
    // No new turn is taken meanwhile, and nothing is said to its front either.
    let refused = Arc::new(Front::default());
    assert!(matches!(
        e.submit(sub("t:2", "d", "hi", refused.clone(), FISK_LIKE))
            .await,
        SubmitReply::JournalUnavailable(_)
    ));
    assert!(refused.outcomes.lock().unwrap().is_empty());
    faulty.fail_writes(false);
    match front.outcome().await {
        Outcome::Failure(f) => assert_eq!(f.code, TurnFailure::Suspended),
        other => panic!("{other:?}"),
    }
    assert_eq!(front.outcomes.lock().unwrap().len(), 1, "exactly one");
    assert!(e.journal_writable());
    let stored = e.lookup(&RequestId::new("t:1").unwrap()).await.unwrap();
    assert!(
        stored.unwrap().outcome.is_some(),
        "journaled before it was sent"
    );
    // And turns are taken again.
    let later = Arc::new(Front::default());
    assert_eq!(
        e.submit(sub("t:3", "d", "hi", later.clone(), FISK_LIKE))
            .await,
        SubmitReply::Accepted { queued: false }
    );
    assert_eq!(later.outcome().await, done("ok"));
}

#[tokio::test]
async fn a_failed_accept_says_nothing_and_the_journal_is_probed_until_it_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (e, faulty) = faulty_engine(&dir);
    faulty.fail_writes(true);
    let front = Arc::new(Front::default());
    assert!(matches!(
        e.submit(sub("t:1", "c", "hi", front.clone(), TurnPolicy::default()))
            .await,
        SubmitReply::JournalUnavailable(_)
    ));
    // A refusal is a journaled answer too, so it is not given either.
    let refused = e
        .refuse(
            sub("t:2", "c", "hi", front.clone(), TurnPolicy::default()),
            Failure::new(Refusal::InvalidSchema, "bad"),
        )
        .await;
    assert!(matches!(refused, SubmitReply::JournalUnavailable(_)));
    assert!(front.outcomes.lock().unwrap().is_empty());
    assert_eq!(e.live_turns(), 0, "nothing is held");
    let mut writable = e.watch_journal_writable();
    assert!(!*writable.borrow());
    faulty.fail_writes(false);
    tokio::time::timeout(agentwire_engine::RETRY_MAX * 2, writable.wait_for(|w| *w))
        .await
        .expect("the probe notices within its longest backoff")
        .unwrap();
    // The same request is served now, once.
    assert_eq!(
        e.submit(sub("t:1", "c", "hi", front.clone(), TurnPolicy::default()))
            .await,
        SubmitReply::Accepted { queued: false }
    );
    assert_eq!(front.outcome().await, done("ok"));
}

#[tokio::test]
async fn a_crash_while_an_outcome_waits_for_the_disk_ends_the_turn_once_after_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (e, faulty) = faulty_engine(&dir);
    let front = Arc::new(Front::default());
    e.submit(sub("t:1", "c", "wait", front.clone(), FISK_LIKE))
        .await;
    front.wait_running().await;
    faulty.fail_writes(true);
    e.cancel(&RequestId::new("t:1").unwrap(), "r").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The crash: the journal stops for good, and the disk is fine again for the next process.
    e.halt_journal();
    faulty.fail_writes(false);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(front.outcomes.lock().unwrap().is_empty());
    let journal = Arc::new(SqliteJournal::open(&dir.path().join("j.sqlite")).unwrap());
    let e2 = Engine::new(journal, Arc::new(TestAgent));
    let recovered = Arc::new(Front::default());
    let r = recovered.clone();
    assert_eq!(
        e2.recover(move |_| Some(r.clone() as Arc<dyn TurnFront>))
            .await
            .unwrap(),
        1
    );
    match recovered.outcome().await {
        Outcome::Failure(f) => assert_eq!(f.code, TurnFailure::Interrupted),
        other => panic!("{other:?}"),
    }
    assert!(
        front.outcomes.lock().unwrap().is_empty(),
        "one terminal in all"
    );
}

#[tokio::test]
async fn drain_waits_for_running_turns_and_refuses_new_ones() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    let front = Front::asking();
    e.submit(sub("t:1", "c", "ask", front.clone(), FISK_LIKE))
        .await;
    front.wait_asked(1).await;
    let draining = {
        let e = e.clone();
        tokio::spawn(async move { e.drain(Duration::from_secs(5)).await })
    };
    for _ in 0..1000 {
        if e.draining() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(e.draining());
    assert_eq!(
        e.submit(sub("t:2", "d", "hi", Arc::new(Front::default()), FISK_LIKE))
            .await,
        SubmitReply::Draining
    );
    assert!(!draining.is_finished(), "the running turn holds the drain");
    e.answer(
        &RequestId::new("t:1").unwrap(),
        "q1",
        Answer::Select { value: "b".into() },
    );
    assert_eq!(draining.await.unwrap(), 0, "nothing left live");
    assert_eq!(front.outcome().await, done("b"));
    // A drain whose grace ends first says how many were left.
    let stuck = Front::asking();
    let e3 = engine(&tempfile::tempdir().unwrap());
    e3.submit(sub("t:9", "c", "ask", stuck.clone(), FISK_LIKE))
        .await;
    stuck.wait_asked(1).await;
    assert_eq!(e3.drain(Duration::from_millis(100)).await, 1);
}

#[tokio::test]
async fn the_engine_closes_a_question_at_its_window_unless_it_is_extended() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    let front = Arc::new(Front {
        can_ask: true,
        window: Some(Duration::from_millis(1000)),
        ..Front::default()
    });
    let id = RequestId::new("t:1").unwrap();
    e.submit(sub("t:1", "c", "ask", front.clone(), FISK_LIKE))
        .await;
    front.wait_asked(1).await;
    // On tokio's paused clock from here: the windows are the engine core's timers, so they are checked to
    // the millisecond without sleeping. Held open twice (an elicit.waiting each time), past the first
    // window.
    tokio::time::pause();
    for _ in 0..2 {
        tokio::time::advance(Duration::from_millis(600)).await;
        assert!(e.extend_question(&id, "q1", Duration::from_millis(1000)));
    }
    assert!(
        !e.extend_question(&id, "q9", Duration::from_secs(1)),
        "no such question"
    );
    tokio::time::advance(Duration::from_millis(999)).await;
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(
        e.is_waiting_on(&id, "q1"),
        "still open past its first window, until 1 s after the last extension"
    );
    tokio::time::advance(Duration::from_millis(1)).await;
    tokio::time::resume();
    // Then nobody answers: the window closes and the agent hears so.
    match front.outcome().await {
        Outcome::Result(r) => assert_eq!(r.text, "Unanswered"),
        other => panic!("{other:?}"),
    }
    assert_eq!(front.closed.lock().unwrap().as_slice(), ["q1"]);
    assert!(
        !e.extend_question(&id, "q1", Duration::from_secs(1)),
        "closed"
    );
}

#[tokio::test]
async fn a_recovery_pass_while_fronts_serve_leaves_live_turns_alone() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    let front = Front::asking();
    e.submit(sub("t:1", "c", "ask", front.clone(), FISK_LIKE))
        .await;
    front.wait_asked(1).await;
    let recovered = Arc::new(Front::default());
    let r = recovered.clone();
    let n = e
        .recover(move |_| Some(r.clone() as Arc<dyn TurnFront>))
        .await
        .unwrap();
    assert_eq!(n, 0, "a live turn is not interrupted");
    e.answer(
        &RequestId::new("t:1").unwrap(),
        "q1",
        Answer::Select { value: "a".into() },
    );
    assert_eq!(front.outcome().await, done("a"));
    assert!(recovered.outcomes.lock().unwrap().is_empty());
    assert_eq!(front.outcomes.lock().unwrap().len(), 1, "one terminal");
}

#[tokio::test]
async fn a_cut_off_turn_sent_again_before_the_recovery_pass_ends_once() {
    use agentwire_store::Journal;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.sqlite");
    {
        // The process before: it journaled the turn and died before it ended.
        let before = SqliteJournal::open(&path).unwrap();
        let mut t = agentwire_store::conformance::turn(1);
        t.request_id = RequestId::new("t:1").unwrap();
        before.accept(t).await.unwrap();
    }
    let e = Engine::new(
        Arc::new(SqliteJournal::open(&path).unwrap()),
        Arc::new(TestAgent),
    );
    // The relay's backlog brings the prompt again before the recovery pass ran.
    let front = Arc::new(Front::default());
    let reply = e
        .submit(sub("t:1", "c", "hi", front.clone(), TurnPolicy::default()))
        .await;
    assert!(
        matches!(reply, SubmitReply::DuplicateStored(_)),
        "{reply:?}"
    );
    match front.outcome().await {
        Outcome::Failure(f) => assert_eq!(f.code, TurnFailure::Interrupted),
        other => panic!("not run again: {other:?}"),
    }
    let recovered = Arc::new(Front::default());
    let r = recovered.clone();
    let n = e
        .recover(move |_| Some(r.clone() as Arc<dyn TurnFront>))
        .await
        .unwrap();
    assert_eq!(n, 0, "nothing left to end");
    assert!(recovered.outcomes.lock().unwrap().is_empty());
    assert_eq!(front.outcomes.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn an_agent_limited_to_one_turn_queues_within_a_bound_or_refuses_by_policy() {
    use agentwire_engine::{AGENT_BUSY_RETRY_AFTER_SECS, MAX_TURNS_WAITING_FOR_AGENT};
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    e.limit_running(1);
    let queueing = TurnPolicy {
        park_on_cancel: true,
        ..TurnPolicy::default()
    };
    let first = Front::asking();
    e.submit(sub("q:0", "c0", "wait", first.clone(), queueing))
        .await;
    // Under a refusing policy the second turn is refused at once, with a retry hint.
    let refused = Front::asking();
    let reply = e
        .submit(sub("f:1", "f1", "hi", refused.clone(), FISK_LIKE))
        .await;
    let SubmitReply::Refused(f) = reply else {
        panic!("{reply:?}")
    };
    assert_eq!(f.code, agentwire_core::Refusal::Capacity);
    assert_eq!(f.retry_after, Some(AGENT_BUSY_RETRY_AFTER_SECS));
    // Others wait, up to the bound; the next is refused.
    let mut waiting = Vec::new();
    for n in 1..=MAX_TURNS_WAITING_FOR_AGENT {
        let front = Front::asking();
        let reply = e
            .submit(sub(
                &format!("q:{n}"),
                &format!("c{n}"),
                "hi",
                front.clone(),
                queueing,
            ))
            .await;
        assert_eq!(reply, SubmitReply::Accepted { queued: false }, "turn {n}");
        waiting.push(front);
    }
    let over = e
        .submit(sub("q:over", "cx", "hi", Front::asking(), queueing))
        .await;
    assert!(
        matches!(over, SubmitReply::Refused(ref f) if f.code == agentwire_core::Refusal::Capacity),
        "{over:?}"
    );
    // None of the waiting ones ran while the first holds the agent.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(waiting
        .iter()
        .all(|f| f.outcomes.lock().unwrap().is_empty()));
    // A waiting turn that is cancelled ends without running.
    assert_eq!(
        e.cancel(&RequestId::new("q:1").unwrap(), "r").await,
        agentwire_engine::CancelReply::Cancelling
    );
    assert!(
        matches!(waiting[0].outcome().await, Outcome::Failure(ref f) if f.code == TurnFailure::Cancelled)
    );
    // Once the first ends, the rest run, one at a time.
    e.cancel(&RequestId::new("q:0").unwrap(), "r").await;
    first.outcome().await;
    for front in &waiting[1..] {
        assert!(matches!(front.outcome().await, Outcome::Result(_)));
    }
}

/// NIP-XX's policy: nobody is told a turn that starts at once was accepted.
const SILENT: TurnPolicy = TurnPolicy {
    exclusive: false,
    park_on_cancel: false,
    keep_transcript: false,
    refuse_when_full: false,
    accepted_silently: true,
};

#[tokio::test]
async fn a_silent_turns_first_event_waits_for_its_acceptance_to_be_durable_and_its_outcome_carries_it(
) {
    let dir = tempfile::tempdir().unwrap();
    let (e, faulty) = faulty_engine(&dir);
    // The disk takes writes but fails to sync them: the turn is taken (its record written), but its
    // first event may not go out, since a machine crash could still lose the turn it tells of.
    faulty.fail_syncs(true);
    let front = Arc::new(Front::default());
    assert_eq!(
        e.submit(sub("s:1", "c", "hi", front.clone(), SILENT)).await,
        SubmitReply::Accepted { queued: false }
    );
    journal_marked_unwritable(&e).await;
    assert_eq!(
        front.events.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "no event before the acceptance is durable"
    );
    assert!(front.outcomes.lock().unwrap().is_empty());
    assert!(
        e.lookup(&RequestId::new("s:1").unwrap())
            .await
            .unwrap()
            .is_some(),
        "the record is written"
    );
    faulty.fail_syncs(false);
    assert_eq!(front.outcome().await, done("ok"));
    assert_eq!(front.events.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(faulty.syncs(), 1, "one sync, before the first event");

    // A silent turn whose agent sends no event: its outcome's durable write carries the acceptance, and
    // no sync of its own is asked.
    struct Quiet;
    impl Agent for Quiet {
        fn card(&self) -> AgentCard {
            TestAgent.card()
        }
        fn run(&self, _input: TurnInput, _ctx: TurnContext) -> BoxFuture<'static, Outcome> {
            Box::pin(async { done("quiet") })
        }
    }
    let inner = SqliteJournal::open(&dir.path().join("q.sqlite")).unwrap();
    let quiet_journal = agentwire_store::FaultyJournal::new(Arc::new(inner));
    let q = Engine::new(quiet_journal.clone(), Arc::new(Quiet));
    for n in 0..3 {
        let front = Arc::new(Front::default());
        q.submit(sub(&format!("s:q{n}"), "d", "hi", front.clone(), SILENT))
            .await;
        assert_eq!(front.outcome().await, done("quiet"));
    }
    assert_eq!(quiet_journal.syncs(), 0);
}

#[tokio::test]
async fn a_live_turn_is_found_in_its_own_engine_with_its_open_question() {
    let dir = tempfile::tempdir().unwrap();
    let other_dir = tempfile::tempdir().unwrap();
    let (e, other) = (engine(&dir), engine(&other_dir));
    let engines = Engines::new(vec![other.clone(), e.clone()]);
    let id = RequestId::new("t:1").unwrap();
    assert!(engines.of_turn(&id).is_none(), "nothing live yet");
    let f = Front::asking();
    e.submit(sub("t:1", "c", "ask", f.clone(), FISK_LIKE)).await;
    f.wait_asked(1).await;
    let found = engines.of_turn(&id).expect("the turn is indexed");
    assert!(Arc::ptr_eq(&found, &e), "found in the engine it runs in");
    assert_eq!(engines.index().len(), 1);
    let (question_id, question) = found.open_question(&id).expect("its open question");
    assert_eq!(question_id, "q1");
    assert!(
        matches!(&question.kind, QuestionKind::Select { question, .. } if question == "which?"),
        "{question:?}"
    );
    assert!(other.open_question(&id).is_none());
    assert_eq!(
        found.answer(&id, &question_id, Answer::Select { value: "b".into() }),
        AnswerReply::Taken
    );
    assert_eq!(f.outcome().await, done("b"));
    assert!(found.open_question(&id).is_none(), "answered");
    assert!(engines.of_turn(&id).is_none(), "it left with its end");
    assert!(engines.index().is_empty());
}
