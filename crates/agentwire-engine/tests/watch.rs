//! Turns that many can watch, on the real engine and journal: the front that took a turn and any number of
//! watchers see the same events in the same order; a watcher that joins part way gets what the turn did so
//! far, then what it does next; one that stops reading holds up no turn and is told what it missed; two
//! engines sharing a hub are watched as one.

use agentwire_core::{ConversationId, Outcome, RequestId, TurnEvent, TurnResult, Usage};
use agentwire_engine::{
    Agent, AgentCard, Engine, Submission, SubmitReply, TurnContext, TurnFront, TurnInput,
    TurnPolicy, WatchHub, WatchKind, WATCH_QUEUE_CAPACITY,
};
use agentwire_store::SqliteJournal;
use futures_util::future::BoxFuture;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// Streams `n` text events (its message), pausing at the half until told to go on.
struct Streamer {
    name: &'static str,
    halfway: Arc<Notify>,
    go_on: Arc<Notify>,
}

impl Agent for Streamer {
    fn card(&self) -> AgentCard {
        AgentCard {
            name: self.name.into(),
            version: "0".into(),
            description: String::new(),
            models: vec!["m".into()],
            default_model: "m".into(),
            tools: vec![],
            max_prompt_bytes: 1000,
            max_context_tokens: 1000,
        }
    }
    fn run(&self, input: TurnInput, ctx: TurnContext) -> BoxFuture<'static, Outcome> {
        let (events, halfway, go_on) = (ctx.events, self.halfway.clone(), self.go_on.clone());
        Box::pin(async move {
            let n: usize = input.message.parse().unwrap_or(0);
            for i in 0..n {
                if i == n / 2 {
                    halfway.notify_one();
                    go_on.notified().await;
                }
                let _ = events
                    .send(TurnEvent::Text {
                        text: format!("{i} "),
                    })
                    .await;
            }
            Outcome::Result(TurnResult {
                text: "done".into(),
                usage: Usage::default(),
                stop_reason: "stop".into(),
            })
        })
    }
}

/// Keeps the texts and the outcome its turn gets.
#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<String>>,
}

impl TurnFront for Recorder {
    fn accepted(&self, _queued: bool) {}
    fn event(&self, event: TurnEvent) {
        if let TurnEvent::Text { text } = event {
            self.seen.lock().unwrap().push(text);
        }
    }
    fn encode_outcome(&self, _o: &Outcome) -> Option<String> {
        None
    }
    fn deliver_outcome(&self, _o: &Outcome, _wire: Option<&str>) {
        self.seen.lock().unwrap().push("<outcome>".into());
    }
}

fn submission(id: &str, events: usize, front: Arc<Recorder>) -> Submission {
    Submission {
        input: TurnInput {
            request_id: RequestId::new(id).unwrap(),
            conversation_id: ConversationId::new(format!("c-{id}")).unwrap(),
            message: events.to_string(),
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

/// What a watched event shows, in the recorder's words.
fn shown(kind: &WatchKind) -> Option<String> {
    match kind {
        WatchKind::Event(TurnEvent::Text { text }) => Some(text.clone()),
        WatchKind::Outcome(_) => Some("<outcome>".into()),
        _ => None,
    }
}

fn engine(
    dir: &std::path::Path,
    name: &'static str,
    hub: Arc<WatchHub>,
) -> (Arc<Engine>, Arc<Notify>, Arc<Notify>) {
    let (halfway, go_on) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let agent = Arc::new(Streamer {
        name,
        halfway: halfway.clone(),
        go_on: go_on.clone(),
    });
    let journal = Arc::new(SqliteJournal::open(&dir.join(format!("{name}.sqlite"))).unwrap());
    (
        Engine::with_hub(journal, agent, "local", hub),
        halfway,
        go_on,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_front_and_every_watcher_see_one_turn_alike_and_a_late_one_misses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let hub = WatchHub::new();
    let (engine, halfway, go_on) = engine(dir.path(), "streamer", hub.clone());
    let mut early = hub.watch_all();
    let front = Arc::new(Recorder::default());
    let reply = engine.submit(submission("t:1", 40, front.clone())).await;
    assert!(matches!(reply, SubmitReply::Accepted { .. }));
    halfway.notified().await;
    // Joins half way through.
    let mut late = hub
        .watch(&RequestId::new("t:1").unwrap())
        .expect("a live turn");
    go_on.notify_one();

    let mut from_late = Vec::new();
    let mut accepted = None;
    while let Some(e) = late.next().await {
        let e = e.expect("a reader keeping up misses nothing");
        if let WatchKind::Accepted {
            agent,
            protocol,
            prompt,
            ..
        } = &e.kind
        {
            accepted = Some((agent.clone(), protocol.clone(), prompt.clone()));
        }
        from_late.extend(shown(&e.kind));
    }
    let mut from_early = Vec::new();
    while let Some(e) = early.next().await {
        let e = e.unwrap();
        from_early.extend(shown(&e.kind));
        if matches!(e.kind, WatchKind::Outcome(_)) {
            break;
        }
    }
    let from_front = front.seen.lock().unwrap().clone();
    assert_eq!(from_front.len(), 41, "40 texts and the outcome");
    assert_eq!(
        from_late, from_front,
        "the late watcher: the turn so far, then live"
    );
    assert_eq!(from_early, from_front, "the early watcher");
    assert_eq!(
        accepted,
        Some(("streamer".into(), "test".into(), "40".into())),
        "the acceptance names the agent, the protocol and the prompt"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_stops_reading_holds_up_no_turn_and_is_told_what_it_missed() {
    let dir = tempfile::tempdir().unwrap();
    let hub = WatchHub::new();
    let (engine, halfway, go_on) = engine(dir.path(), "streamer", hub.clone());
    let mut stalled = hub.watch_all();
    let front = Arc::new(Recorder::default());
    let events = WATCH_QUEUE_CAPACITY + 100;
    engine
        .submit(submission("t:big", events, front.clone()))
        .await;
    halfway.notified().await;
    go_on.notify_one();
    // The turn ends while the watcher reads nothing.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while front.seen.lock().unwrap().len() < events + 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the turn was held up"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    match stalled.next().await {
        Some(Err(missed)) => assert!(missed.0 > 0),
        other => panic!("expected to be told what was missed, got {other:?}"),
    }
    assert!(
        matches!(stalled.next().await, Some(Ok(_))),
        "and it reads on"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_engines_sharing_a_hub_are_watched_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let hub = WatchHub::new();
    let (a, a_half, a_go) = engine(dir.path(), "a", hub.clone());
    let (b, b_half, b_go) = engine(dir.path(), "b", hub.clone());
    let mut all = hub.watch_all();
    a.submit(submission("a:1", 2, Arc::new(Recorder::default())))
        .await;
    b.submit(submission("b:1", 2, Arc::new(Recorder::default())))
        .await;
    for (half, go) in [(&a_half, &a_go), (&b_half, &b_go)] {
        half.notified().await;
        go.notify_one();
    }
    let mut agents = std::collections::BTreeSet::new();
    let mut ended = 0;
    let mut last_id = None;
    while ended < 2 {
        let e = all.next().await.unwrap().unwrap();
        assert!(last_id < Some(e.id), "ids increase across the hub");
        last_id = Some(e.id);
        if let WatchKind::Accepted { agent, .. } = &e.kind {
            agents.insert(agent.clone());
        }
        if matches!(e.kind, WatchKind::Outcome(_)) {
            ended += 1;
        }
    }
    assert_eq!(agents.into_iter().collect::<Vec<_>>(), ["a", "b"]);
}

/// Ended turns the journal holds are listed after a restart as the recent ones, older than any live turn,
/// each once; a turn without an outcome is not.
#[tokio::test]
async fn the_hub_remembers_the_journals_latest_ended_turns() {
    use agentwire_store::{conformance, Finish, Journal, SqliteJournal};
    let dir = tempfile::tempdir().unwrap();
    let journal = SqliteJournal::open(&dir.path().join("j.sqlite")).unwrap();
    for n in 0..3 {
        journal.accept(conformance::turn(n)).await.unwrap();
    }
    for n in 0..2 {
        let done = Finish::new(
            conformance::turn(n).request_id,
            conformance::result("ok", Default::default()),
            200,
        );
        journal.finish(done).await.unwrap();
    }
    let hub = agentwire_engine::WatchHub::new();
    let latest = journal.latest(10).await.unwrap();
    hub.remember(&latest);
    hub.remember(&latest);
    let listed = hub.turns(&agentwire_engine::TurnFilter::default(), 10);
    let ids: Vec<&str> = listed.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        ["nipxx:1", "nipxx:0"],
        "ended ones, newest first, once"
    );
    assert_eq!(listed[0].state, agentwire_engine::TurnState::Ended);
    assert_eq!(listed[0].prompt, "m1");
    assert_eq!(listed[0].agent, "demo");
    assert_eq!(listed[0].started_ms, 101_000);
    let (events, missed, _) = hub.watch_all_since(0);
    assert!(
        events.is_empty() && missed.is_none(),
        "a listed turn is no missed event"
    );
}
