//! The engine against a real journal under concurrent submit, cancel, finish, write faults and restart:
//! every turn gets exactly one outcome, delivered once and only once it is durable; after a restart
//! interrupted turns end once, nothing finished runs again, and no turn is told two outcomes.

use agentwire_core::{ConversationId, Outcome, RequestId, TurnEvent, TurnResult, Usage};
use agentwire_engine::{
    Agent, AgentCard, Engine, Submission, SubmitReply, TurnContext, TurnFront, TurnInput,
    TurnPolicy,
};
use agentwire_store::{FaultyJournal, Journal, SqliteJournal};
use futures_util::future::BoxFuture;
use proptest::prelude::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Replies after the number of milliseconds its message names; counts how often it ran each turn.
struct SleepyAgent {
    runs: Mutex<HashMap<String, usize>>,
}

impl Agent for SleepyAgent {
    fn card(&self) -> AgentCard {
        AgentCard {
            name: "sleepy".into(),
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
        let events = ctx.events;
        *self
            .runs
            .lock()
            .unwrap()
            .entry(input.request_id.to_string())
            .or_default() += 1;
        Box::pin(async move {
            let ms: u64 = input.message.parse().unwrap_or(0);
            let _ = events.send(TurnEvent::Text { text: "x".into() }).await;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Outcome::Result(TurnResult {
                text: "done".into(),
                usage: Usage::default(),
                stop_reason: "stop".into(),
            })
        })
    }
}

#[derive(Default)]
struct CountingFront {
    outcomes: AtomicUsize,
    last: Mutex<Option<Outcome>>,
}

impl TurnFront for CountingFront {
    fn accepted(&self, _queued: bool) {}
    fn event(&self, _event: TurnEvent) {}
    fn encode_outcome(&self, _o: &Outcome) -> Option<String> {
        None
    }
    fn deliver_outcome(&self, o: &Outcome, _wire: Option<&str>) {
        self.outcomes.fetch_add(1, Ordering::SeqCst);
        *self.last.lock().unwrap() = Some(o.clone());
    }
}

fn submission(n: usize, conv: usize, ms: u64, front: Arc<CountingFront>) -> Submission {
    Submission {
        input: TurnInput {
            request_id: RequestId::new(format!("t:{n}")).unwrap(),
            conversation_id: ConversationId::new(format!("c:{conv}")).unwrap(),
            message: ms.to_string(),
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
        policy: TurnPolicy::default(),
        conversation_meta: None,
        slot: None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn one_outcome_per_turn_under_concurrent_cancel_finish_and_restart(
        turns in proptest::collection::vec((0usize..3, 0u64..30, proptest::option::of(0u64..30)), 1..20),
        crash_after_ms in proptest::option::of(0u64..40),
        fault in proptest::option::of((0u64..30, 1u64..60)),
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async move {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("j.sqlite");
            let agent = Arc::new(SleepyAgent { runs: Mutex::new(HashMap::new()) });
            let faulty = FaultyJournal::new(Arc::new(SqliteJournal::open(&path).unwrap()));
            let engine = Engine::new(faulty.clone(), agent.clone());
            // The first engine's work runs on a runtime of its own, so that a "crash" can stop all of it.
            let first = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            let fronts: Vec<Arc<CountingFront>> = turns.iter().map(|_| Arc::new(CountingFront::default())).collect();
            if let Some((from, lasting)) = fault {
                // The disk fails for a while: writes are refused, then work again.
                let f = faulty.clone();
                first.spawn(async move {
                    tokio::time::sleep(Duration::from_millis(from)).await;
                    f.fail_writes(true);
                    tokio::time::sleep(Duration::from_millis(lasting)).await;
                    f.fail_writes(false);
                });
            }
            let mut tasks = Vec::new();
            for (n, (conv, ms, cancel_at)) in turns.iter().cloned().enumerate() {
                let fut = engine.submit(submission(n, conv, ms, fronts[n].clone()));
                let task = first.spawn(fut);
                // The resend below comes after the request reached the engine (a loaded machine may not
                // have polled the spawned submit yet): live now, or already answered.
                let id = RequestId::new(format!("t:{n}")).unwrap();
                let mut task = Some(task);
                let mut reply = None;
                while reply.is_none() && !engine.live_phases().iter().any(|(l, _)| *l == id) {
                    if task.as_ref().is_some_and(|t| t.is_finished()) {
                        reply = Some(task.take().unwrap().await.unwrap());
                    } else {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
                let not_taken = matches!(reply, Some(SubmitReply::JournalUnavailable(_)));
                tasks.push((task, reply));
                if !not_taken {
                    // A resend of the same request is recognised, not run.
                    let dup = engine.submit(submission(n, conv, ms, Arc::new(CountingFront::default()))).await;
                    assert!(
                        matches!(
                            dup,
                            SubmitReply::DuplicateLive | SubmitReply::DuplicateStored(_) | SubmitReply::JournalUnavailable(_)
                        ),
                        "{dup:?}"
                    );
                }
                if let Some(at) = cancel_at {
                    let e = engine.clone();
                    first.spawn(async move {
                        tokio::time::sleep(Duration::from_millis(at)).await;
                        let id = RequestId::new(format!("t:{n}")).unwrap();
                        e.cancel(&id, "r").await;
                        e.cancel(&id, "r").await;
                    });
                }
            }
            match crash_after_ms {
                None => {
                    let mut replies = Vec::new();
                    for (task, reply) in tasks {
                        replies.push(match (task, reply) {
                            (_, Some(r)) => r,
                            (Some(t), None) => t.await.unwrap(),
                            (None, None) => unreachable!("a submit is awaited or answered"),
                        });
                    }
                    // A turn leaves the live table just before its front is told its outcome: wait for both.
                    let told_all = || {
                        fronts.iter().zip(&replies).all(|(f, reply)| {
                            matches!(reply, SubmitReply::JournalUnavailable(_))
                                || f.outcomes.load(Ordering::SeqCst) > 0
                        })
                    };
                    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                    while (engine.live_turns() > 0 || !told_all()) && tokio::time::Instant::now() < deadline {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    assert_eq!(engine.live_turns(), 0, "stuck: {:?}", engine.live_phases());
                    for (f, reply) in fronts.iter().zip(&replies) {
                        let told = f.outcomes.load(Ordering::SeqCst);
                        match reply {
                            // Not taken while the disk failed: nothing was said.
                            SubmitReply::JournalUnavailable(_) => assert_eq!(told, 0, "{reply:?}"),
                            _ => assert_eq!(told, 1, "exactly one outcome delivered ({reply:?})"),
                        }
                    }
                    tokio::task::spawn_blocking(move || drop(first)).await.unwrap();
                }
                Some(at) => {
                    tokio::time::sleep(Duration::from_millis(at)).await;
                    // The "crash": nothing more reaches the journal, and the engine's tasks are abandoned;
                    // only what was committed survives.
                    engine.halt_journal();
                    tokio::task::spawn_blocking(move || first.shutdown_timeout(Duration::from_secs(5)))
                        .await
                        .unwrap();
                }
            }
            // Restart over the same journal: every turn without an outcome ends once, then nothing is left.
            let journal: Arc<dyn Journal> = Arc::new(SqliteJournal::open(&path).unwrap());
            let delivered_before: Vec<usize> = fronts.iter().map(|f| f.outcomes.load(Ordering::SeqCst)).collect();
            let engine2 = Engine::new(journal.clone(), agent.clone());
            let recovered: Arc<Mutex<Vec<String>>> = Arc::default();
            let r2 = recovered.clone();
            let n = engine2
                .recover(move |t| {
                    r2.lock().unwrap().push(t.request_id.to_string());
                    Some(Arc::new(CountingFront::default()) as Arc<dyn TurnFront>)
                })
                .await
                .unwrap();
            assert_eq!(recovered.lock().unwrap().len(), n);
            assert_eq!(engine2.recover(|_| None).await.unwrap(), 0, "a second restart finds nothing to end");
            for (i, before) in delivered_before.iter().enumerate() {
                let again = recovered.lock().unwrap().iter().filter(|r| **r == format!("t:{i}")).count();
                assert!(before + again <= 1, "turn {i} was told {before} outcome(s) before and {again} after the restart");
            }
            // Every turn that was journaled now has exactly one outcome, and resending it does not run it.
            for (i, (conv, ms, _)) in turns.iter().cloned().enumerate() {
                let id = RequestId::new(format!("t:{i}")).unwrap();
                if let Some(stored) = journal.lookup(id.clone()).await.unwrap() {
                    assert!(stored.outcome.is_some(), "turn {i} has its outcome after restart");
                    let runs_before = agent.runs.lock().unwrap().get(id.as_str()).copied().unwrap_or(0);
                    let again = engine2.submit(submission(i, conv, ms, Arc::new(CountingFront::default()))).await;
                    assert!(matches!(again, SubmitReply::DuplicateStored(_)));
                    assert_eq!(agent.runs.lock().unwrap().get(id.as_str()).copied().unwrap_or(0), runs_before);
                    assert!(runs_before <= 1, "a turn ran at most once");
                } else {
                    // Not journaled: nothing was said, so nothing can be contradicted.
                    assert_eq!(
                        delivered_before[i], 0,
                        "turn {i} is not journaled but was told {:?}", fronts[i].last.lock().unwrap()
                    );
                }
            }
        });
    }
}
