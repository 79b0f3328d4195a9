//! The fisk-ai caller against a worker that says exactly what the spec lets a worker say, over a real
//! `nats-server`: here a worker that answers a `waiting` with `404` (the question is gone). The worker is a
//! few lines of plain NATS sending the v1 messages, so the caller meets the case on the wire as it comes.

use agentwire_fisk::client::{Caller, PromptCall, Reply};
use agentwire_fisk::wire::nats;
use agentwire_testkit::NatsServer;
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

fn message(protocol: &str, request: &str, sequence: u64, extra: Value) -> Vec<u8> {
    let mut m = json!({
        "protocol": format!("io.choria.fisk-ai.v1.{protocol}"),
        "id": format!("m{sequence}"),
        "request": request,
        "conversation": request,
        "sequence": sequence,
        "time": "2026-08-16T11:24:10Z",
        "sender": {"name": "w1"},
    });
    for (k, v) in extra.as_object().unwrap() {
        m[k] = v.clone();
    }
    m.to_string().into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_404_to_waiting_drops_the_question_sends_no_answer_and_follows_the_run_to_its_end() {
    let server = NatsServer::start();
    let worker = async_nats::connect(&server.url).await.unwrap();
    let mut tasks = worker.subscribe(nats::task_subject("w1")).await.unwrap();
    let mut elicits = worker
        .subscribe(format!("{}.elicit.w1.>", nats::SUBJECT_PREFIX))
        .await
        .unwrap();
    worker.flush().await.unwrap();
    // What reached the question's subject: the caller's `waiting`s, and any answer it sent.
    let heard = Arc::new(Mutex::new(Vec::<String>::new()));
    let log = heard.clone();
    let run = tokio::spawn(async move {
        let task = tasks.next().await.unwrap();
        let prompt: Value = serde_json::from_slice(&task.payload).unwrap();
        let request = prompt["request"].as_str().unwrap().to_string();
        let inbox = task.reply.unwrap();
        let send = |m: Vec<u8>| worker.publish(inbox.clone(), m.into());
        send(message("ack", &request, 1, json!({"accepted": true})))
            .await
            .unwrap();
        send(message(
            "elicit.request.confirm",
            &request,
            2,
            json!({"question_id": "q1", "question": "go on?", "wait_ms": 300}),
        ))
        .await
        .unwrap();
        // The first `waiting` (a third of the window in) finds the question gone: 404.
        let waiting = tokio::time::timeout(WAIT, elicits.next())
            .await
            .expect("a waiting within the window")
            .unwrap();
        let body: Value = serde_json::from_slice(&waiting.payload).unwrap();
        log.lock()
            .unwrap()
            .push(body["protocol"].as_str().unwrap().to_string());
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(nats::HEADER_SERVICE_ERROR, "no such question");
        headers.insert(nats::HEADER_SERVICE_ERROR_CODE, "404");
        worker
            .publish_with_headers(waiting.reply.unwrap(), headers, "".into())
            .await
            .unwrap();
        // Anything the caller sends about the question now would be an answer it must not send.
        while let Ok(Some(m)) =
            tokio::time::timeout(Duration::from_millis(700), elicits.next()).await
        {
            let body: Value = serde_json::from_slice(&m.payload).unwrap();
            log.lock()
                .unwrap()
                .push(body["protocol"].as_str().unwrap().to_string());
        }
        let mut last = async_nats::HeaderMap::new();
        last.insert(nats::HEADER_STREAM_FINAL, "1");
        worker
            .publish_with_headers(
                inbox.clone(),
                last,
                message(
                    "result",
                    &request,
                    3,
                    json!({"text": "went on without you", "stop_reason": "end_turn"}),
                )
                .into(),
            )
            .await
            .unwrap();
        worker.flush().await.unwrap();
    });

    let caller = Caller::connect(&server.url, "tester").await.unwrap();
    let asked = Arc::new(AtomicUsize::new(0));
    let counted = asked.clone();
    let request = agentwire_fisk::client::new_request();
    let p = caller
        .prompt_until(
            PromptCall {
                identity: "w1",
                request: &request,
                prompt: "go",
                token: None,
                timeout: WAIT,
            },
            std::future::pending(),
            |_| {},
            // The person never decides: only the 404 takes the question away.
            Box::new(move |_| {
                counted.fetch_add(1, Ordering::SeqCst);
                Box::pin(std::future::pending::<Reply>())
            }),
        )
        .await
        .expect("the caller follows the run, it does not fail");
    run.await.unwrap();
    assert!(p.ended, "followed to the terminal: {:?}", p.messages);
    let kinds: Vec<&str> = p.messages.iter().map(|m| m.kind()).collect();
    assert_eq!(kinds, ["ack", "elicit.request.confirm", "result"]);
    assert_eq!(p.messages[2].json["text"], "went on without you");
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    let heard = heard.lock().unwrap().clone();
    assert_eq!(
        heard,
        ["io.choria.fisk-ai.v1.elicit.waiting"],
        "no answer (no_operator or other) after the 404"
    );
}
