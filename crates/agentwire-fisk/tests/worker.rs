//! The fisk-ai worker against a real `nats-server`: reply sets, admission, conversations, cancel and
//! resume, read-back, questions, and every code on the way. The caller is a plain NATS client sending
//! the v1 JSON messages, as any fisk-ai caller does.

#[path = "worker/caller.rs"]
mod caller;

use agentwire_agents::DemoAgent;
use agentwire_engine::Engine;
use agentwire_fisk::worker::{Worker, WorkerConfig};
use agentwire_store::SqliteJournal;
use agentwire_testkit::NatsServer;
use caller::{check_set, code, header, tag, token, with, Caller, Msg};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn config(url: &str, identity: &str) -> WorkerConfig {
    WorkerConfig {
        nats: agentwire_fisk::connection::NatsConnect::to(url),
        identity: identity.to_string(),
        workers: 4,
        elicit: true,
        request_timeout: Duration::from_secs(30),
        system_prompt: "you are a test".into(),
        max_tokens: None,
        instance: None,
        senders: Default::default(),
        jobs: None,
    }
}

/// Waits until the worker answers discovery on a caller's own connection (a freshly started worker's
/// subscriptions are live on the server, as another connection sees them).
async fn wait_ready(c: &Caller) {
    for _ in 0..100 {
        let set = c
            .send(
                agentwire_fisk::wire::nats::discovery_subject(&c.identity),
                &header("discovery.request", "ready"),
            )
            .await;
        if set.first().is_some_and(|m| m.service_error.is_none()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the worker never answered discovery");
}

/// A text event: the run is under way.
fn is_text(m: &Msg) -> bool {
    m.protocol() == "io.choria.fisk-ai.v1.event.text"
}

async fn worker(dir: &Path, config: WorkerConfig) -> Arc<Worker> {
    let journal = Arc::new(SqliteJournal::open(&dir.join("journal.sqlite")).unwrap());
    let engine = Engine::new(journal, Arc::new(DemoAgent));
    Worker::start(config, engine).await.expect("worker starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_streams_a_numbered_reply_set_and_follow_ups_continue_the_conversation() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let _w = worker(dir.path(), config(&nats.url, "w1")).await;
    let c = Caller::connect(&nats.url, "w1").await;

    let r = tag("p");
    let set = c.prompt(&r, "calc 6 * 7", json!({})).await;
    let last = check_set(&set, &r);
    assert_eq!(set[0].json["accepted"], true);
    assert_eq!(set[0].json["recipient"]["name"], "tester");
    assert_eq!(set[0].json["sender"]["name"], "w1");
    assert_eq!(last.protocol(), "io.choria.fisk-ai.v1.result");
    assert_eq!(last.json["text"], "42");
    assert_eq!(last.json["stop_reason"], "end_turn");
    assert_eq!(
        last.json["usage"]["tool_calls"], 1,
        "the calculator call is counted"
    );
    let kinds: Vec<&str> = set.iter().map(|m| m.protocol()).collect();
    assert!(
        kinds.contains(&"io.choria.fisk-ai.v1.event.tool_call"),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&"io.choria.fisk-ai.v1.event.tool_result"),
        "{kinds:?}"
    );
    let finals: Vec<_> = set
        .iter()
        .filter(|m| {
            m.protocol() == "io.choria.fisk-ai.v1.event.text" && m.json["block"]["final"] == true
        })
        .collect();
    assert_eq!(finals.len(), 1, "one final text block");
    assert_eq!(finals[0].json["block"]["text"], "42");
    let first_usage = last.json["usage"]["input_tokens"].as_u64().unwrap();

    // A follow-up with the token is the next turn; usage counts the whole conversation.
    let t = token(&set);
    assert!(t.len() >= 32, "at least 128 random bits");
    let r2 = tag("p");
    let set2 = c
        .prompt(&r2, "hello again", json!({ "conversation_token": t }))
        .await;
    let last2 = check_set(&set2, &r2);
    assert_eq!(last2.json["text"], "You said: hello again");
    assert_eq!(token(&set2), t, "every accepting ack carries the token");
    assert_eq!(
        last2.json["usage"]["input_tokens"].as_u64().unwrap(),
        first_usage + 2,
        "the conversation's usage"
    );

    // An unknown token.
    let r3 = tag("p");
    let set3 = c
        .prompt(
            &r3,
            "hi",
            json!({ "conversation_token": "nosuchconversation" }),
        )
        .await;
    assert_eq!(set3[0].json["accepted"], false);
    assert!(set3[0].json["reason"].as_str().is_some());
    assert_eq!(code(&set3), "unknown_conversation");
    let reason = set3[0].json["reason"].as_str().unwrap();
    assert!(
        reason.contains("JetStream") && reason.contains("any instance"),
        "the refusal says what continues a conversation elsewhere: {reason}"
    );
    check_set(&set3, &r3);

    // The same request id again, with the conversation's token, is answered from the journal, not run
    // again; without the token it is somebody else's answer and is refused.
    let stranger = c.prompt(&r, "calc 6 * 7", json!({})).await;
    assert_eq!(code(&stranger), "duplicate_request");
    assert!(
        stranger.iter().all(|m| m.json["text"] != "42"),
        "no answer leaks"
    );
    let again = c
        .prompt(&r, "calc 6 * 7", json!({ "conversation_token": t }))
        .await;
    let l = check_set(&again, &r);
    assert_eq!(l.json["text"], "42");
    assert_eq!(
        again.len(),
        2,
        "ack and the journaled result only: {again:#?}"
    );

    // stream: false leaves the events out.
    let r4 = tag("p");
    let quiet = c.prompt(&r4, "calc 1+1", json!({ "stream": false })).await;
    assert_eq!(quiet.len(), 2, "{quiet:#?}");
    assert_eq!(check_set(&quiet, &r4).json["text"], "2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_request_is_a_400_service_error_before_any_ack() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let _w = worker(dir.path(), config(&nats.url, "w2")).await;
    let c = Caller::connect(&nats.url, "w2").await;
    let resume_with_prompt = with(
        header("request.resume", "bad1"),
        json!({ "conversation_token": "x", "prompt": "no" }),
    );
    let set = c.task(&resume_with_prompt).await;
    let (status, text) = set[0].service_error.clone().expect("a service error");
    assert_eq!(status, "400");
    assert!(text.contains("/prompt"), "{text}");
    let long = "a".repeat(65);
    let set = c.prompt(&long, "hi", json!({})).await;
    assert_eq!(set[0].service_error.as_ref().unwrap().0, "400");
    let set = c
        .task(&json!({"protocol": "io.choria.fisk-ai.v1.request.prompt"}))
        .await;
    assert_eq!(set[0].service_error.as_ref().unwrap().0, "400");
    let set = c
        .send(
            agentwire_fisk::wire::nats::task_subject("w2"),
            &json!("not an object"),
        )
        .await;
    assert_eq!(set[0].service_error.as_ref().unwrap().0, "400");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_refuses_capacity_duplicates_busy_conversations_and_draining() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&nats.url, "w3");
    cfg.workers = 2;
    let w = worker(dir.path(), cfg).await;
    let c = Arc::new(Caller::connect(&nats.url, "w3").await);

    // A long turn in a conversation, to continue while it runs.
    let first = tag("p");
    let set = c.prompt(&first, "quick hi", json!({})).await;
    let t = token(&set);
    // The runs are long so that the checks made while they run finish well inside them, even under load.
    let long = tag("long");
    let mut running = c
        .open_prompt_with(&long, "sleep 5000", json!({ "conversation_token": t }))
        .await;
    running.until(is_text).await;
    // The same request id while it runs.
    let dup = c.prompt(&long, "sleep 10", json!({})).await;
    assert_eq!(code(&dup), "duplicate_request");
    assert_eq!(dup[0].json["accepted"], false);
    // Another turn of the busy conversation.
    let busy = c
        .prompt(&tag("p"), "quick x", json!({ "conversation_token": t }))
        .await;
    assert_eq!(code(&busy), "conversation_busy");
    // Fill the second slot, then one more is over capacity.
    let other = tag("long");
    let mut second = c.open_prompt(&other, "sleep 4000").await;
    second.until(is_text).await;
    let full = c.prompt(&tag("p"), "quick x", json!({})).await;
    assert_eq!(code(&full), "capacity");
    // Draining: in-flight runs finish, new ones are refused (over capacity until the drain begins).
    let w2 = w.clone();
    let drained = tokio::spawn(async move { w2.drain(Duration::from_secs(20)).await });
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let refused = loop {
        let reply = c.prompt(&tag("p"), "quick x", json!({})).await;
        if code(&reply) != "capacity" || std::time::Instant::now() > deadline {
            break reply;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(code(&refused), "draining");
    let done = running.finish().await;
    assert_eq!(check_set(&done, &long).json["text"], "slept 5000 ms");
    assert_eq!(
        check_set(&second.finish().await, &other).json["text"],
        "slept 4000 ms"
    );
    assert_eq!(drained.await.unwrap(), 0, "nothing left in flight");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_suspends_at_a_boundary_and_resume_continues() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let _w = worker(dir.path(), config(&nats.url, "w4")).await;
    let c = Arc::new(Caller::connect(&nats.url, "w4").await);
    let r = tag("long");
    let mut run = c.open_prompt(&r, "sleep 2000").await;
    // Cancel once the agent is running (its first tick), so the parked turn has used its prompt's tokens; a
    // cancel before the run starts suspends it too, but with nothing used.
    run.until(is_text).await;
    let ack = c.cancel(&r).await;
    assert_eq!(ack[0].protocol(), "io.choria.fisk-ai.v1.ack");
    assert_eq!(ack[0].json["accepted"], true);
    let set = run.finish().await;
    check_set(&set, &r);
    assert_eq!(code(&set), "suspended");
    assert_eq!(set.last().unwrap().json["stop_reason"], "suspended");
    assert!(
        set.last().unwrap().json["usage"]["input_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    // A cancel for a request nobody runs reaches no responder.
    let none = c.cancel(&r).await;
    assert_eq!(none[0].service_error.as_ref().unwrap().0, "503");

    // resume continues where it was parked.
    let t = token(&set);
    let rr = tag("resume");
    let body = with(
        header("request.resume", &rr),
        json!({ "conversation_token": t }),
    );
    let resumed = c.task(&body).await;
    let last = check_set(&resumed, &rr);
    assert_eq!(last.json["text"], "slept 2000 ms", "{resumed:#?}");
    let ticks = resumed
        .iter()
        .filter(|m| m.protocol() == "io.choria.fisk-ai.v1.event.text")
        .count();
    assert!(ticks >= 1);
    // Nothing left to resume.
    let rr2 = tag("resume");
    let again = c
        .task(&with(
            header("request.resume", &rr2),
            json!({ "conversation_token": t }),
        ))
        .await;
    assert_eq!(code(&again), "turn_not_taken");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_replays_whole_turns_between_markers() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let _w = worker(dir.path(), config(&nats.url, "w5")).await;
    let c = Caller::connect(&nats.url, "w5").await;
    let set = c.prompt(&tag("p"), "calc 2+2", json!({})).await;
    let t = token(&set);
    c.prompt(&tag("p"), "hello there", json!({ "conversation_token": t }))
        .await;
    let r = tag("read");
    let read = c
        .task(&with(
            header("request.read", &r),
            json!({ "conversation_token": t, "replay": 200 }),
        ))
        .await;
    let result = check_set(&read, &r);
    // The set ends as a turn does: a result with no text, end_turn and the conversation's usage.
    assert_eq!(result.protocol(), "io.choria.fisk-ai.v1.result");
    assert_eq!(result.json["stop_reason"], "end_turn");
    assert_eq!(result.json["text"], "");
    let last = &read[read.len() - 2];
    assert_eq!(read[1].json["block"]["phase"], "replay_start");
    assert_eq!(last.json["block"]["phase"], "replay_end");
    let blocks = &read[2..read.len() - 2];
    assert_eq!(last.json["block"]["count"], blocks.len() as u64);
    assert_eq!(last.json["block"]["truncated"], false);
    assert!(
        last.json["block"]["usage"]["input_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert_eq!(result.json["usage"], last.json["block"]["usage"]);
    let prompts: Vec<_> = blocks
        .iter()
        .filter(|m| m.protocol() == "io.choria.fisk-ai.v1.event.prompt")
        .map(|m| m.json["block"]["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(prompts, vec!["calc 2+2", "hello there"]);
    // A small count still gives whole turns: the last turn only, and says older ones were left out.
    let r2 = tag("read");
    let short = c
        .task(&with(
            header("request.read", &r2),
            json!({ "conversation_token": t, "replay": 1 }),
        ))
        .await;
    assert_eq!(
        check_set(&short, &r2).protocol(),
        "io.choria.fisk-ai.v1.result"
    );
    let end = &short[short.len() - 2];
    assert_eq!(end.json["block"]["truncated"], true);
    let replayed = &short[2..short.len() - 2];
    assert_eq!(replayed[0].json["block"]["text"], "hello there");
    assert!(replayed.len() > 1, "rounded outwards to the whole turn");
    // A prompt with `replay`: the conversation so far, between its markers, before the new turn's events.
    let rp = tag("p");
    let next = c
        .prompt(
            &rp,
            "quick third",
            json!({ "conversation_token": t, "replay": 200 }),
        )
        .await;
    assert_eq!(check_set(&next, &rp).json["text"], "third");
    assert_eq!(next[1].json["block"]["phase"], "replay_start", "{next:#?}");
    let end = next
        .iter()
        .position(|m| m.json["block"]["phase"] == "replay_end")
        .expect("replay_end");
    let before: Vec<&str> = next[..end]
        .iter()
        .filter(|m| m.protocol() == "io.choria.fisk-ai.v1.event.prompt")
        .filter_map(|m| m.json["block"]["text"].as_str())
        .collect();
    assert_eq!(
        before,
        ["calc 2+2", "hello there"],
        "the turns before, in order"
    );
    assert!(
        next[end..]
            .iter()
            .all(|m| m.json["block"]["text"] != "calc 2+2"),
        "nothing replayed after the marker"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_are_asked_answered_held_open_and_answered_after_the_run() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&nats.url, "w6");
    // The window is wide enough that each `waiting` below lands well inside it, even under load.
    cfg.request_timeout = Duration::from_millis(3000);
    let _w = worker(dir.path(), cfg).await;
    let c = Arc::new(Caller::connect(&nats.url, "w6").await);

    // A select question answered live.
    let r = tag("ask");
    let mut run = c.open_prompt(&r, "ask colour? | red | green").await;
    let q = run
        .until(|m| m.protocol().contains("elicit.request"))
        .await
        .json;
    assert_eq!(q["protocol"], "io.choria.fisk-ai.v1.elicit.request.select");
    assert_eq!(q["wait_ms"], 3000);
    assert!(q["tool_use_id"].as_str().is_some());
    let qid = q["question_id"].as_str().unwrap().to_string();
    // Held open past the first window by `waiting`.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let ack = c.elicit(&r, "elicit.waiting", &qid, json!({})).await;
        assert_eq!(ack[0].json["accepted"], true, "{ack:#?}");
    }
    let wrong = c
        .elicit(
            &r,
            "elicit.reply.select",
            "nosuchquestion",
            json!({"index": 0}),
        )
        .await;
    assert_eq!(wrong[0].service_error.as_ref().unwrap().0, "404");
    let out_of_range = c
        .elicit(&r, "elicit.reply.select", &qid, json!({"index": 9}))
        .await;
    assert_eq!(out_of_range[0].service_error.as_ref().unwrap().0, "400");
    let ok = c
        .elicit(&r, "elicit.reply.select", &qid, json!({"index": 1}))
        .await;
    assert_eq!(ok[0].json["accepted"], true);
    let set = run.finish().await;
    assert_eq!(check_set(&set, &r).json["text"], "green");
    // After the answer, waiting and answers reach no question.
    let late = c.elicit(&r, "elicit.waiting", &qid, json!({})).await;
    assert!(late[0].service_error.is_some());

    // An unanswered question leaves the call deferred; request.answer resumes it.
    let r = tag("ask");
    let set = c.prompt(&r, "input your name?", json!({})).await;
    let q = set
        .iter()
        .find(|m| m.protocol() == "io.choria.fisk-ai.v1.elicit.request.input")
        .expect("the question was asked")
        .json
        .clone();
    assert_eq!(code(&set), "deferred");
    let call = q["tool_use_id"].as_str().unwrap().to_string();
    assert!(
        set.last().unwrap().json["error"]
            .as_str()
            .unwrap()
            .contains(&call),
        "ids in the text"
    );
    let t = token(&set);
    // A new prompt cannot join a conversation waiting on a deferred call.
    let refused = c
        .prompt(&tag("p"), "hello", json!({ "conversation_token": t }))
        .await;
    assert_eq!(code(&refused), "turn_not_taken");
    let answer = |rq: &str, call: &str, value: serde_json::Value| {
        with(
            header("request.answer", rq),
            json!({ "conversation_token": t, "answer": with(json!({"tool_use_id": call, "kind": "input", "answer": "value"}), value) }),
        )
    };
    let unknown = c
        .task(&answer(&tag("a"), "call_nope", json!({"value": "x"})))
        .await;
    assert_eq!(code(&unknown), "unknown_call");
    let big = c
        .task(&answer(
            &tag("a"),
            &call,
            json!({"value": "x".repeat(300 * 1024)}),
        ))
        .await;
    assert_eq!(code(&big), "answer_too_large");
    // Answered with `replay`: the conversation so far comes first, between its markers, then the turn.
    let ra = tag("a");
    let answered = c
        .task(&with(
            answer(&ra, &call, json!({"value": "Ada"})),
            json!({"replay": 200}),
        ))
        .await;
    assert_eq!(
        check_set(&answered, &ra).json["text"],
        "Ada",
        "{answered:#?}"
    );
    let phases: Vec<String> = answered
        .iter()
        .filter(|m| m.protocol() == "io.choria.fisk-ai.v1.event.status")
        .filter_map(|m| m.json["block"]["phase"].as_str().map(String::from))
        .filter(|p| p.starts_with("replay"))
        .collect();
    assert_eq!(phases, ["replay_start", "replay_end"], "{answered:#?}");
    assert_eq!(answered[1].json["block"]["phase"], "replay_start");
    let replayed: Vec<&str> = answered
        .iter()
        .filter(|m| m.protocol() == "io.choria.fisk-ai.v1.event.prompt")
        .filter_map(|m| m.json["block"]["text"].as_str())
        .collect();
    assert!(
        replayed.iter().any(|p| p.starts_with("input ")),
        "the deferred turn's prompt is replayed: {replayed:?}"
    );
    let twice = c
        .task(&answer(&tag("a"), &call, json!({"value": "Bob"})))
        .await;
    assert_eq!(code(&twice), "already_answered");
    // The same answer request again is a resend: its stored result, not a refusal.
    let resent = c
        .task(&with(
            answer(&ra, &call, json!({"value": "Ada"})),
            json!({"replay": 200}),
        ))
        .await;
    assert_eq!(
        check_set(&resent, &ra).json["text"],
        "Ada",
        "a resend is answered from the journal: {resent:#?}"
    );
    // An answer that does not fit its kind is a 400.
    let misfit = c
        .task(&with(
            header("request.answer", &tag("a")),
            json!({ "conversation_token": t, "answer": {"tool_use_id": call, "kind": "approve", "answer": "value", "value": "x"} }),
        ))
        .await;
    assert_eq!(misfit[0].service_error.as_ref().unwrap().0, "400");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_run_once_always_or_not_at_all_and_elicit_off_declines() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let _w = worker(dir.path(), config(&nats.url, "w7")).await;
    let c = Arc::new(Caller::connect(&nats.url, "w7").await);
    let approve = |choice: &'static str| {
        let c = c.clone();
        async move {
            let r = tag("ap");
            let mut run = c.open_prompt(&r, "approve rm -rf /tmp/x").await;
            let q = run
                .until(|m| m.protocol().contains("elicit.request"))
                .await
                .json;
            assert_eq!(q["protocol"], "io.choria.fisk-ai.v1.elicit.request.approve");
            assert_eq!(q["display"], "rm -rf /tmp/x");
            let qid = q["question_id"].as_str().unwrap().to_string();
            c.elicit(&r, "elicit.reply.approve", &qid, json!({"choice": choice}))
                .await;
            let set = run.finish().await;
            check_set(&set, &r).json["text"]
                .as_str()
                .unwrap()
                .to_string()
        }
    };
    assert_eq!(approve("once").await, "ran rm -rf /tmp/x");
    assert_eq!(approve("no").await, "declined");

    let nats2 = NatsServer::start();
    let dir2 = tempfile::tempdir().unwrap();
    let mut off = config(&nats2.url, "w8");
    off.elicit = false;
    let _w2 = worker(dir2.path(), off).await;
    let c2 = Caller::connect(&nats2.url, "w8").await;
    let r = tag("ap");
    let set = c2.prompt(&r, "approve ls", json!({})).await;
    assert_eq!(check_set(&set, &r).json["text"], "declined");
    assert!(set.iter().all(|m| !m.protocol().contains("elicit")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_in_one_queue_group_share_the_load() {
    let nats = NatsServer::start();
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = config(&nats.url, "shared");
    a.instance = Some("a".into());
    let mut b = config(&nats.url, "shared");
    b.instance = Some("b".into());
    let _wa = worker(d1.path(), a).await;
    let _wb = worker(d2.path(), b).await;
    let c = Caller::connect(&nats.url, "shared").await;
    let mut seen = std::collections::HashSet::new();
    for _ in 0..20 {
        let r = tag("lb");
        let set = c.prompt(&r, "quick hi", json!({})).await;
        check_set(&set, &r);
        seen.insert(
            set[0].json["sender"]["instance"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    assert_eq!(seen.len(), 2, "both instances served: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_worker_continues_the_conversation_and_does_not_rerun_finished_requests() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let w = worker(dir.path(), config(&nats.url, "w9")).await;
    let c = Caller::connect(&nats.url, "w9").await;
    let r = tag("p");
    let set = c.prompt(&r, "calc 3*3", json!({})).await;
    let t = token(&set);
    assert_eq!(w.shutdown(Duration::from_secs(5)).await, 0);
    // Nobody serves the identity now.
    let gone = c.prompt(&tag("p"), "quick x", json!({})).await;
    assert_eq!(gone[0].service_error.as_ref().unwrap().0, "503");
    let _w2 = worker(dir.path(), config(&nats.url, "w9")).await;
    wait_ready(&c).await;
    let r2 = tag("p");
    let next = c
        .prompt(&r2, "hello", json!({ "conversation_token": t }))
        .await;
    assert_eq!(check_set(&next, &r2).json["text"], "You said: hello");
    let again = c
        .prompt(&r, "calc 3*3", json!({ "conversation_token": t }))
        .await;
    assert_eq!(again.len(), 2, "answered from the journal: {again:#?}");
    assert_eq!(check_set(&again, &r).json["text"], "9");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_configuration_refuses_the_turn_unless_forced() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let w = worker(dir.path(), config(&nats.url, "w10")).await;
    let c = Caller::connect(&nats.url, "w10").await;
    let set = c.prompt(&tag("p"), "quick one", json!({})).await;
    let t = token(&set);
    w.shutdown(Duration::from_secs(5)).await;
    let mut changed = config(&nats.url, "w10");
    changed.system_prompt = "you are someone else".into();
    let _w2 = worker(dir.path(), changed).await;
    wait_ready(&c).await;
    let refused = c
        .prompt(&tag("p"), "quick two", json!({ "conversation_token": t }))
        .await;
    assert_eq!(code(&refused), "config_drift");
    let why = refused.last().unwrap().json["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        why.contains("system prompt") && !why.contains("model"),
        "{why}"
    );
    let r = tag("p");
    let forced = c
        .prompt(
            &r,
            "quick two",
            json!({ "conversation_token": t, "force": true }),
        )
        .await;
    assert_eq!(check_set(&forced, &r).json["text"], "two");
    // The conversation now runs under the new configuration.
    let r = tag("p");
    let next = c
        .prompt(&r, "quick three", json!({ "conversation_token": t }))
        .await;
    assert_eq!(check_set(&next, &r).json["text"], "three");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_only_lowers_the_allowance_and_exhaustion_is_permanent() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&nats.url, "w11");
    cfg.max_tokens = Some(1000);
    let _w = worker(dir.path(), cfg).await;
    let c = Caller::connect(&nats.url, "w11").await;
    let r = tag("p");
    // A budget above the worker's is ignored: the ack names the worker's allowance.
    let set = c
        .prompt(
            &r,
            "quick a b c",
            json!({ "budget": { "max_tokens": 50000 } }),
        )
        .await;
    check_set(&set, &r);
    assert_eq!(set[0].json["max_tokens"], 1000);
    let t = token(&set);
    // Lowering it below what the conversation used ends the conversation.
    let low = c
        .prompt(
            &tag("p"),
            "quick more",
            json!({ "conversation_token": t, "budget": { "max_tokens": 2 } }),
        )
        .await;
    assert_eq!(code(&low), "budget_exhausted");
    let later = c
        .prompt(&tag("p"), "quick more", json!({ "conversation_token": t }))
        .await;
    assert_eq!(code(&later), "budget_exhausted", "for good");
    // A new conversation is fine.
    let r = tag("p");
    assert_eq!(
        check_set(&c.prompt(&r, "quick fresh", json!({})).await, &r).json["text"],
        "fresh"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_stands_for_the_conversation_and_an_unanswered_approval_suspends() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&nats.url, "w12");
    cfg.request_timeout = Duration::from_millis(800);
    let _w = worker(dir.path(), cfg).await;
    let c = Caller::connect(&nats.url, "w12").await;
    let r = tag("ap");
    let mut run = c.open_prompt(&r, "approve make deploy").await;
    let q = run
        .until(|m| m.protocol().contains("elicit.request"))
        .await
        .json;
    let qid = q["question_id"].as_str().unwrap().to_string();
    c.elicit(
        &r,
        "elicit.reply.approve",
        &qid,
        json!({"choice": "always"}),
    )
    .await;
    let set = run.finish().await;
    assert_eq!(check_set(&set, &r).json["text"], "ran make deploy");
    let t = token(&set);
    // The next approval in this conversation is not asked.
    let r = tag("ap");
    let again = c
        .prompt(
            &r,
            "approve make deploy",
            json!({ "conversation_token": t }),
        )
        .await;
    assert_eq!(check_set(&again, &r).json["text"], "ran make deploy");
    assert!(
        again.iter().all(|m| !m.protocol().contains("elicit")),
        "{again:#?}"
    );

    // In a new conversation nobody answers: the run ends suspended, and a later answer runs it.
    let r = tag("ap");
    let set = c.prompt(&r, "approve rm -rf /", json!({})).await;
    assert_eq!(code(&set), "suspended");
    let q = set
        .iter()
        .find(|m| m.protocol().contains("elicit.request.approve"))
        .unwrap()
        .json
        .clone();
    let t = token(&set);
    let ra = tag("a");
    let answered = c
        .task(&with(
            header("request.answer", &ra),
            json!({ "conversation_token": t, "answer": {
                "tool_use_id": q["tool_use_id"], "kind": "approve", "answer": "choice", "choice": "no" } }),
        ))
        .await;
    assert_eq!(check_set(&answered, &ra).json["text"], "declined");
}

/// The demo agent, except that `panic` panics: a bug in a run.
struct Buggy(DemoAgent);

impl agentwire_engine::Agent for Buggy {
    fn card(&self) -> agentwire_engine::AgentCard {
        self.0.card()
    }
    fn run(
        &self,
        input: agentwire_engine::TurnInput,
        ctx: agentwire_engine::TurnContext,
    ) -> futures_util::future::BoxFuture<'static, agentwire_core::Outcome> {
        if input.message == "panic" {
            return Box::pin(async { panic!("a bug in the agent") });
        }
        self.0.run(input, ctx)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_a_run_is_crashed_and_the_worker_keeps_serving() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let journal = Arc::new(SqliteJournal::open(&dir.path().join("journal.sqlite")).unwrap());
    let engine = Engine::new(journal, Arc::new(Buggy(DemoAgent)));
    let _w = Worker::start(config(&nats.url, "w13"), engine)
        .await
        .unwrap();
    let c = Caller::connect(&nats.url, "w13").await;
    let r = tag("p");
    let set = c.prompt(&r, "panic", json!({})).await;
    check_set(&set, &r);
    assert_eq!(code(&set), "crashed");
    let r = tag("p");
    assert_eq!(
        check_set(&c.prompt(&r, "quick ok", json!({})).await, &r).json["text"],
        "ok"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_answers_reach_only_the_instance_running_the_request() {
    let nats = NatsServer::start();
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = config(&nats.url, "pair");
    a.instance = Some("a".into());
    let mut b = config(&nats.url, "pair");
    b.instance = Some("b".into());
    let _wa = worker(d1.path(), a).await;
    let _wb = worker(d2.path(), b).await;
    let c = Caller::connect(&nats.url, "pair").await;
    for _ in 0..4 {
        let r = tag("two");
        let mut run = c.open_prompt(&r, "ask which? | x | y").await;
        let q = run
            .until(|m| m.protocol().contains("elicit.request"))
            .await
            .json;
        let qid = q["question_id"].as_str().unwrap().to_string();
        // Exactly one instance listens on this request's subjects: one answer, one ack.
        let ok = c
            .elicit(&r, "elicit.reply.select", &qid, json!({"index": 0}))
            .await;
        assert_eq!(ok.len(), 1);
        assert_eq!(ok[0].json["accepted"], true);
        assert_eq!(ok[0].json["sender"]["instance"], q["sender"]["instance"]);
        let set = run.finish().await;
        assert_eq!(check_set(&set, &r).json["text"], "x");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_that_cannot_write_refuses_runs_and_a_run_it_finished_waits_for_the_disk() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let inner = Arc::new(SqliteJournal::open(&dir.path().join("journal.sqlite")).unwrap());
    let faulty = agentwire_store::FaultyJournal::new(inner);
    let engine = Engine::new(faulty.clone(), Arc::new(DemoAgent));
    let _w = Worker::start(config(&nats.url, "w20"), engine.clone())
        .await
        .unwrap();
    let c = Caller::connect(&nats.url, "w20").await;

    // The disk fails: a new run is refused with an ack saying so and `capacity` (retry, or elsewhere).
    faulty.fail_writes(true);
    // The first refused write marks the journal unwritable; from then on runs are refused at once.
    let r = tag("p");
    let set = c.prompt(&r, "hello", json!({})).await;
    check_set(&set, &r);
    assert_eq!(set[0].json["accepted"], false, "{:?}", set[0].json);
    assert_eq!(code(&set), "capacity");
    assert!(!engine.journal_writable());

    // The disk writes again: the probe notices, and the same request runs.
    faulty.fail_writes(false);
    let mut writable = engine.watch_journal_writable();
    tokio::time::timeout(Duration::from_secs(10), writable.wait_for(|w| *w))
        .await
        .unwrap()
        .unwrap();
    let set = c.prompt(&r, "calc 2 * 3", json!({})).await;
    let last = check_set(&set, &r);
    assert_eq!(set[0].json["accepted"], true);
    assert_eq!(last.json["text"], "6");

    // A run that ends while the disk fails sends its terminal only once the outcome is journaled.
    let r = tag("p");
    let mut slow = c.open_prompt(&r, "sleep 1000").await;
    slow.until(is_text).await;
    faulty.fail_writes(true);
    // The run ends, and its outcome waits for the disk.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !engine
        .live_phases()
        .iter()
        .any(|(_, p)| *p == agentwire_core::TurnPhase::Ending)
    {
        assert!(std::time::Instant::now() < deadline, "the run did not end");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let held = tokio::time::timeout(Duration::from_millis(500), slow.until(|m| m.last)).await;
    assert!(
        held.is_err(),
        "no terminal while the outcome is not durable"
    );
    faulty.fail_writes(false);
    let set = slow.finish().await;
    let last = check_set(&set, &r);
    assert_eq!(last.protocol(), "io.choria.fisk-ai.v1.result");
    assert_eq!(last.json["text"], "slept 1000 ms");
    // A resend (in its conversation) is answered from the journal with the same outcome.
    let again = c
        .prompt(
            &r,
            "sleep 1000",
            json!({ "conversation_token": token(&set) }),
        )
        .await;
    assert_eq!(check_set(&again, &r).json["text"], "slept 1000 ms");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_turn_cancelled_mid_stream_parks_and_resume_asks_the_model_again() {
    use agentwire_agents::openai::{http_client, OpenAiAgent, OpenAiConfig};
    use agentwire_testkit::fake_openai::{text_chunks, FakeOpenAi, Scripted};
    let fake = FakeOpenAi::start();
    let words: Vec<String> = (0..200).map(|i| format!("w{i} ")).collect();
    let refs: Vec<&str> = words.iter().map(String::as_str).collect();
    fake.push(Scripted::Stream {
        chunks: text_chunks(&refs, (3, 200)),
        gap: Duration::from_millis(50),
    });
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = OpenAiConfig {
        name: "model".into(),
        base_url: fake.base_url.clone(),
        models: vec!["m".into()],
        api_key: None,
        system_prompt: None,
        tools: vec![],
        request_timeout: Duration::from_secs(30),
        max_context_tokens: 8192,
        shell_dir: dir.path().to_path_buf(),
        env: Default::default(),
    };
    let agent = OpenAiAgent::new(config, http_client(Duration::from_secs(30)).unwrap());
    let journal = Arc::new(SqliteJournal::open(&dir.path().join("journal.sqlite")).unwrap());
    let _w = Worker::start(
        config_for_model(&nats.url),
        Engine::new(journal, Arc::new(agent)),
    )
    .await
    .unwrap();
    let c = Arc::new(Caller::connect(&nats.url, "model").await);
    let r = tag("long");
    let mut run = c.open_prompt(&r, "write a lot").await;
    // Cancel mid-stream: once the model's first words have arrived.
    run.until(is_text).await;
    let started = std::time::Instant::now();
    assert_eq!(c.cancel(&r).await[0].json["accepted"], true);
    let set = run.finish().await;
    // The whole stream takes 10 s (200 words, 50 ms apart): ending well before that means it was cut.
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "the stream was not cut at once"
    );
    check_set(&set, &r);
    assert_eq!(code(&set), "suspended");
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while fake.aborted() == 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(fake.aborted(), 1, "the model server's stream was closed");

    fake.push(Scripted::Stream {
        chunks: text_chunks(&["Done."], (3, 1)),
        gap: Duration::ZERO,
    });
    let rr = tag("resume");
    let body = with(
        header("request.resume", &rr),
        json!({ "conversation_token": token(&set) }),
    );
    let resumed = c.task(&body).await;
    let last = check_set(&resumed, &rr);
    assert_eq!(last.json["text"], "Done.", "{resumed:#?}");
    assert_eq!(
        fake.received()[1].body["messages"][0]["content"],
        "write a lot"
    );
}

fn config_for_model(url: &str) -> WorkerConfig {
    config(url, "model")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_turn_stops_before_a_call_past_its_budget_and_the_conversation_is_finished() {
    use agentwire_agents::openai::{http_client, OpenAiAgent, OpenAiConfig};
    use agentwire_testkit::fake_openai::{tool_call_chunks, FakeOpenAi, Scripted};
    let fake = FakeOpenAi::start();
    // The first call asks for a tool round and spends 110 tokens: past the conversation's 100.
    let mut chunks = tool_call_chunks("c1", "clock", &["{}"]);
    chunks.push(
        json!({"choices":[],"usage":{"prompt_tokens":80,"completion_tokens":30}}).to_string(),
    );
    fake.push(Scripted::Stream {
        chunks,
        gap: Duration::ZERO,
    });
    // What a second call would get; it must never be asked for.
    fake.push(Scripted::Stream {
        chunks: agentwire_testkit::fake_openai::text_chunks(&["too late"], (5, 2)),
        gap: Duration::ZERO,
    });
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = OpenAiConfig {
        name: "model".into(),
        base_url: fake.base_url.clone(),
        models: vec!["m".into()],
        api_key: None,
        system_prompt: None,
        tools: vec!["clock".into()],
        request_timeout: Duration::from_secs(30),
        max_context_tokens: 8192,
        shell_dir: dir.path().to_path_buf(),
        env: Default::default(),
    };
    let agent = OpenAiAgent::new(config, http_client(Duration::from_secs(30)).unwrap());
    let journal = Arc::new(SqliteJournal::open(&dir.path().join("journal.sqlite")).unwrap());
    let mut cfg = config_for_model(&nats.url);
    cfg.max_tokens = Some(1000);
    let _w = Worker::start(cfg, Engine::new(journal, Arc::new(agent)))
        .await
        .unwrap();
    let c = Caller::connect(&nats.url, "model").await;
    let r = tag("p");
    // The request's budget lowers the worker's allowance for the conversation.
    let set = c
        .prompt(
            &r,
            "what time is it",
            json!({ "budget": { "max_tokens": 100 } }),
        )
        .await;
    let last = check_set(&set, &r);
    assert_eq!(set[0].json["accepted"], true);
    assert_eq!(set[0].json["max_tokens"], 100);
    assert_eq!(code(&set), "budget_exhausted", "{set:#?}");
    assert_eq!(
        last.json["stop_reason"], "budget_exhausted",
        "the cap was hit part way through the turn"
    );
    assert_eq!(last.json["usage"]["input_tokens"], 80, "{last:#?}");
    assert_eq!(last.json["usage"]["output_tokens"], 30);
    assert_eq!(fake.received().len(), 1, "no model call past the budget");
    // The conversation is finished: a follow-up is refused before it runs.
    let r2 = tag("p");
    let later = c
        .prompt(
            &r2,
            "and now?",
            json!({ "conversation_token": token(&set) }),
        )
        .await;
    let refused = check_set(&later, &r2);
    assert_eq!(later[0].json["accepted"], false);
    assert_eq!(code(&later), "budget_exhausted");
    assert_eq!(refused.json["stop_reason"], "budget_exhausted");
    assert_eq!(fake.received().len(), 1, "the follow-up made no model call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_claim_in_a_shared_journal_is_turn_not_taken_for_its_conversation_only() {
    use agentwire_store::jetstream::{JetStreamConfig, JetStreamJournal};
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start_jetstream(dir.path());
    let buckets = JetStreamConfig {
        prefix: "WCLAIMS".into(),
        replicas: 1,
        lease: Duration::from_secs(5),
    };
    let client = async_nats::connect(&nats.url).await.unwrap();
    let journal = Arc::new(JetStreamJournal::open(client, &buckets).await.unwrap());
    let _w = Worker::start(
        config(&nats.url, "w30"),
        Engine::new(journal, Arc::new(DemoAgent)),
    )
    .await
    .unwrap();
    let c = Caller::connect(&nats.url, "w30").await;
    let set = c.prompt(&tag("p"), "calc 1+1", json!({})).await;
    let t = token(&set);
    // Someone with access to the stream overwrites the conversation's claim with bytes that name no turn.
    let conv = agentwire_fisk::conversation::conversation_id(&t);
    let conv_key = agentwire_store::jetstream::bucket_key(conv.as_str());
    let claims = async_nats::jetstream::new(async_nats::connect(&nats.url).await.unwrap())
        .get_key_value("WCLAIMS_CLAIMS")
        .await
        .unwrap();
    claims
        .put(&conv_key, vec![0xff, 0xfe].into())
        .await
        .unwrap();
    // Its next turn is not taken (asking again, or another instance, would not change that) ...
    let r = tag("p");
    let refused = c
        .prompt(&r, "calc 2+2", json!({ "conversation_token": t }))
        .await;
    check_set(&refused, &r);
    assert_eq!(refused[0].json["accepted"], false);
    assert_eq!(code(&refused), "turn_not_taken", "{refused:#?}");
    // ... while the worker takes other conversations as before.
    let other = c.prompt(&tag("p"), "calc 3+3", json!({})).await;
    assert_eq!(other.last().unwrap().json["text"], "6");
    // Once the bad claim is deleted, the conversation goes on.
    claims.delete(&conv_key).await.unwrap();
    let r = tag("p");
    let again = c
        .prompt(&r, "calc 4+4", json!({ "conversation_token": t }))
        .await;
    assert_eq!(check_set(&again, &r).json["text"], "8");
}

/// The sender policy: a blocked caller, and one not among the allowed, are refused `rejected` with the
/// reason (an ack that does not accept, then the error), before anything runs; an allowed one is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_outside_the_sender_policy_are_rejected() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&nats.url, "w40");
    cfg.senders = agentwire_fisk::worker::SenderPolicy {
        allowed: Some(vec!["tester".into(), "mallory".into()]),
        blocked: vec!["mallory".into()],
    };
    let _w = worker(dir.path(), cfg).await;
    let c = Caller::connect(&nats.url, "w40").await;

    let r = tag("p");
    let set = c.prompt(&r, "calc 1+1", json!({})).await;
    assert_eq!(
        check_set(&set, &r).json["text"],
        "2",
        "an allowed sender is served"
    );
    for (who, why) in [("mallory", "blocked"), ("eve", "not among")] {
        let r = tag("p");
        let mut body = with(
            header("request.prompt", &r),
            json!({ "prompt": "calc 1+1" }),
        );
        body["sender"] = json!({ "name": who });
        let set = c.task(&body).await;
        assert_eq!(set[0].json["accepted"], false, "{who}");
        assert_eq!(code(&set), "rejected", "{who}");
        let last = set.last().unwrap();
        assert!(
            last.json["error"].as_str().unwrap_or("").contains(why),
            "{who}: {}",
            last.json
        );
        assert!(
            !set.iter().any(|m| m.protocol().ends_with("event.text")),
            "nothing ran for {who}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompts_context_reaches_the_agent_and_its_model_after_the_prompt() {
    use agentwire_agents::openai::{http_client, OpenAiAgent, OpenAiConfig};
    use agentwire_testkit::fake_openai::{text_chunks, FakeOpenAi, Scripted};
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();

    // The demo agent says back the message it was given: the prompt, then the context.
    let _demo = worker(dir.path(), config(&nats.url, "w1")).await;
    let c = Caller::connect(&nats.url, "w1").await;
    let r = tag("ctx");
    let set = c
        .prompt(
            &r,
            "how many streams are there",
            json!({ "context": "streams: ORDERS, EVENTS" }),
        )
        .await;
    let last = check_set(&set, &r);
    assert_eq!(
        last.json["text"],
        "You said: how many streams are there\n\nstreams: ORDERS, EVENTS"
    );

    // A model agent: the model server receives the context in the user's message, after the prompt.
    let fake = FakeOpenAi::start();
    fake.push(Scripted::Stream {
        chunks: text_chunks(&["Two."], (3, 1)),
        gap: Duration::ZERO,
    });
    let config_model = OpenAiConfig {
        name: "model".into(),
        base_url: fake.base_url.clone(),
        models: vec!["m".into()],
        api_key: None,
        system_prompt: None,
        tools: vec![],
        request_timeout: Duration::from_secs(30),
        max_context_tokens: 8192,
        shell_dir: dir.path().to_path_buf(),
        env: Default::default(),
    };
    let agent = OpenAiAgent::new(config_model, http_client(Duration::from_secs(30)).unwrap());
    let journal = Arc::new(SqliteJournal::open(&dir.path().join("model.sqlite")).unwrap());
    let _w = Worker::start(
        config_for_model(&nats.url),
        Engine::new(journal, Arc::new(agent)),
    )
    .await
    .unwrap();
    let m = Caller::connect(&nats.url, "model").await;
    let r = tag("ctx");
    let set = m
        .prompt(
            &r,
            "how many streams are there",
            json!({ "context": "streams: ORDERS, EVENTS" }),
        )
        .await;
    assert_eq!(check_set(&set, &r).json["text"], "Two.", "{set:#?}");
    let sent = fake.received();
    let messages = sent[0].body["messages"].as_array().unwrap();
    let user = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .expect("a user message");
    assert_eq!(
        user["content"],
        "how many streams are there\n\nstreams: ORDERS, EVENTS"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_posted_file_and_a_handoff_are_warnings_of_their_own_kind_with_values() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let _w = worker(dir.path(), config(&nats.url, "w1")).await;
    let c = Caller::connect(&nats.url, "w1").await;
    let warning = |set: &[Msg]| {
        set.iter()
            .find(|m| m.protocol() == "io.choria.fisk-ai.v1.event.warning")
            .map(|m| m.json["block"].clone())
            .expect("a warning")
    };
    let r = tag("file");
    let set = c.prompt(&r, "file notes.md the notes", json!({})).await;
    check_set(&set, &r);
    assert_eq!(
        warning(&set),
        json!({"kind": "file_posted", "name": "notes.md"}),
        "the kind and the values, no sentence"
    );
    let r = tag("handoff");
    let set = c.prompt(&r, "handoff deploy", json!({})).await;
    check_set(&set, &r);
    assert_eq!(warning(&set), json!({"kind": "handoff", "name": "deploy"}));
}

/// An agent that asks one question of several choices that takes free text too, and says back the answer
/// it was given (its `Debug`), so a test sees what reached the agent.
struct Picky;

impl agentwire_engine::Agent for Picky {
    fn card(&self) -> agentwire_engine::AgentCard {
        agentwire_engine::AgentCard {
            name: "picky".into(),
            version: "1".into(),
            description: "asks which streams".into(),
            models: vec!["m".into()],
            default_model: "m".into(),
            tools: vec![],
            max_prompt_bytes: 1 << 20,
            max_context_tokens: 8192,
        }
    }

    fn run(
        &self,
        _input: agentwire_engine::TurnInput,
        ctx: agentwire_engine::TurnContext,
    ) -> futures_util::future::BoxFuture<'static, agentwire_core::Outcome> {
        use agentwire_core::{Asked, Question, QuestionKind, QuestionOption};
        Box::pin(async move {
            let kind = QuestionKind::Select {
                question: "Which streams?".into(),
                options: vec![
                    QuestionOption::new("orders", "ORDERS"),
                    QuestionOption::new("events", "EVENTS"),
                ],
                multiple: true,
                freeform: true,
            };
            let text = match ctx.asker.ask(Question::new("pick", "call_1", kind)).await {
                Asked::Answered(a) => format!("{a:?}"),
                other => format!("{other:?}"),
            };
            agentwire_core::Outcome::Result(agentwire_core::TurnResult {
                text,
                usage: Default::default(),
                stop_reason: "stop".into(),
            })
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_of_several_choices_with_free_text_is_input_and_its_value_reaches_the_agent_as_both(
) {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let journal = Arc::new(SqliteJournal::open(&dir.path().join("journal.sqlite")).unwrap());
    let _w = Worker::start(
        config(&nats.url, "picky"),
        Engine::new(journal, Arc::new(Picky)),
    )
    .await
    .unwrap();
    let c = Caller::connect(&nats.url, "picky").await;
    let ask = |r: String| {
        let c = &c;
        async move {
            let mut run = c.open_prompt(&r, "which?").await;
            let q = run
                .until(|m| {
                    m.protocol()
                        .starts_with("io.choria.fisk-ai.v1.elicit.request.")
                })
                .await;
            (run, q)
        }
    };

    let r = tag("pick");
    let (run, q) = ask(r.clone()).await;
    assert_eq!(q.protocol(), "io.choria.fisk-ai.v1.elicit.request.input");
    assert_eq!(
        q.json["question"],
        "Which streams? (one or more of: ORDERS, EVENTS, separated by commas; and/or your own answer)"
    );
    let qid = q.json["question_id"].as_str().unwrap().to_string();
    // An option named twice does not fit: 400, and the question stays open.
    let bad = c
        .elicit(
            &r,
            "elicit.reply.input",
            &qid,
            json!({"value": "ORDERS, orders"}),
        )
        .await;
    assert_eq!(bad[0].service_error.as_ref().unwrap().0, "400", "{bad:#?}");
    let ok = c
        .elicit(
            &r,
            "elicit.reply.input",
            &qid,
            json!({"value": "events, ORDERS, and the KV buckets"}),
        )
        .await;
    assert_eq!(ok[0].json["accepted"], true, "{ok:#?}");
    let set = run.finish().await;
    let last = check_set(&set, &r);
    assert_eq!(
        last.json["text"],
        r#"Choices { choices: ["events", "orders"], text: Some("and the KV buckets") }"#
    );
}
