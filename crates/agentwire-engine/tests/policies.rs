//! The engine's per-protocol policies and questions, against a real journal: exclusive conversations,
//! park-on-cancel, transcripts, questions answered / expired / cancelled, and a panicking agent.

use agentwire_core::{
    Answer, ApproveChoice, Asked, ConversationId, Failure, FailureCode, Outcome, Question,
    QuestionKind, RequestId, TurnEvent, TurnResult, Usage,
};
use agentwire_engine::{
    Agent, AgentCard, AnswerReply, CancelReply, Engine, FrontAsk, Submission, SubmitReply,
    TurnContext, TurnFront, TurnInput, TurnPolicy,
};
use agentwire_store::Journal;
use futures_util::future::BoxFuture;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// `wait`: parks at its next 10 ms boundary once cancelled. `ask`: asks one select question and replies
/// with the answer (or says how asking went). `panic`: panics. Anything else: replies at once.
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
                            Failure::new(FailureCode::Suspended, "parked")
                                .with_checkpoint(serde_json::json!({"at": 1})),
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                },
                "ask" => {
                    let asked = ctx
                        .asker
                        .ask(Question {
                            tool: "pick".into(),
                            call_id: "call_1".into(),
                            kind: QuestionKind::Select {
                                question: "which?".into(),
                                options: vec!["a".into(), "b".into()],
                            },
                        })
                        .await;
                    match asked {
                        Asked::Answered(Answer::Select { value }) => done(&value),
                        other => done(&format!("{other:?}")),
                    }
                }
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
    can_ask: bool,
    ended: Notify,
}

impl TurnFront for Front {
    fn accepted(&self, _queued: bool) {}
    fn event(&self, _event: TurnEvent) {}
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
        }
    }
    fn question_closed(&self, id: &str) {
        self.closed.lock().unwrap().push(id.to_string());
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
            resume: None,
        },
        protocol: "test".into(),
        requester: "r".into(),
        route: serde_json::json!({}),
        front,
        policy,
        conversation_meta: None,
    }
}

const FISK_LIKE: TurnPolicy = TurnPolicy {
    exclusive: true,
    park_on_cancel: true,
    keep_transcript: true,
};

fn engine(dir: &tempfile::TempDir) -> Arc<Engine> {
    let journal = Journal::open(&dir.path().join("j.sqlite")).unwrap();
    Engine::new(Arc::new(journal), Arc::new(TestAgent))
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
        .journal()
        .lookup(&RequestId::new("t:2").unwrap())
        .unwrap()
        .is_none());
    // Another conversation is free.
    let other = Front::asking();
    e.submit(sub("t:3", "d", "hi", other.clone(), FISK_LIKE))
        .await;
    assert_eq!(other.outcome().await, done("ok"));

    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(
        e.cancel(&RequestId::new("t:1").unwrap(), "r").await,
        CancelReply::Cancelling
    );
    match first.outcome().await {
        Outcome::Failure(f) => {
            assert_eq!(
                f.code,
                FailureCode::Suspended,
                "the agent parked, not the engine"
            );
            assert_eq!(f.checkpoint, Some(serde_json::json!({"at": 1})));
        }
        other => panic!("{other:?}"),
    }
    // The transcript was journaled with the outcome.
    let record = e
        .journal()
        .conversation_record(&ConversationId::new("c").unwrap())
        .unwrap();
    assert_eq!(record.len(), 1);
    assert_eq!(
        record[0].1,
        Some(serde_json::json!([{"type": "text", "text": "working"}]))
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
        Outcome::Failure(f) => assert_eq!(f.code, FailureCode::Crashed),
        other => panic!("{other:?}"),
    }
    let g = Front::asking();
    e.submit(sub("t:2", "c", "hi", g.clone(), FISK_LIKE)).await;
    assert_eq!(g.outcome().await, done("ok"));
}
