//! The model agent against a fake OpenAI-compatible server over real HTTP: streamed text, reasoning and
//! usage; tool calls with split arguments run and sent back; each error status; fallback models; a slow
//! stream cancelled (the connection closed at once, the turn parked and resumed); the loop's bound; a
//! timeout; a server that is down.

use agentwire_agents::openai::{
    http_client, ApiKey, OpenAiAgent, OpenAiConfig, MAX_TOOL_ITERATIONS,
};
use agentwire_core::{ConversationId, FailureCode, Outcome, RequestId, TurnEvent, TurnFailure};
use agentwire_engine::{Agent, Asker, Resume, TurnContext, TurnInput};
use agentwire_testkit::fake_openai::{text_chunks, tool_call_chunks, FakeOpenAi, Scripted};
use serde_json::json;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

fn config(base_url: &str) -> OpenAiConfig {
    OpenAiConfig {
        name: "local".into(),
        base_url: base_url.into(),
        models: vec!["llama3.2".into(), "qwen2.5".into()],
        api_key: Some(ApiKey("sk-test-secret".into())),
        system_prompt: Some("Be brief.".into()),
        tools: vec!["calculator".into(), "clock".into()],
        request_timeout: Duration::from_secs(10),
        max_context_tokens: 8192,
        shell_dir: std::env::temp_dir(),
        env: Default::default(),
    }
}

fn agent(config: OpenAiConfig) -> OpenAiAgent {
    let http = http_client(config.request_timeout).unwrap();
    OpenAiAgent::new(config, http)
}

fn input(message: &str) -> TurnInput {
    TurnInput {
        request_id: RequestId::new("r1").unwrap(),
        conversation_id: ConversationId::new("c1").unwrap(),
        message: message.into(),
        model: "llama3.2".into(),
        thinking: None,
        fallback_models: Vec::new(),
        tool_hints: Vec::new(),
        history: Vec::new(),
        resume: None,
    }
}

/// Runs one turn; returns its outcome and events. `cancel_after`: cancel once that much time has passed.
async fn turn(agent: &OpenAiAgent, input: TurnInput) -> (Outcome, Vec<TurnEvent>) {
    let (outcome, events, _) = run_turn(agent, input, false).await;
    (outcome, events)
}

/// Runs a turn; with `cancel_mid_stream`, also says when the cancel was sent.
async fn run_turn(
    agent: &OpenAiAgent,
    input: TurnInput,
    cancel_mid_stream: bool,
) -> (Outcome, Vec<TurnEvent>, Option<std::time::Instant>) {
    let (events, mut rx) = mpsc::channel(64);
    let (cancel_tx, cancel) = watch::channel(false);
    // A cancel mid-stream is sent once the model's first text arrives, and when is returned.
    let collect = tokio::spawn(async move {
        let mut all = Vec::new();
        let mut cancelled = None;
        while let Some(e) = rx.recv().await {
            if cancel_mid_stream && cancelled.is_none() && matches!(e, TurnEvent::Text { .. }) {
                cancelled = Some(std::time::Instant::now());
                let _ = cancel_tx.send(true);
            }
            all.push(e);
        }
        (all, cancelled)
    });
    let outcome = agent
        .run(
            input,
            TurnContext {
                events,
                cancel,
                asker: Asker::unavailable(),
                token_budget: None,
                trace: Default::default(),
            },
        )
        .await;
    let (all, cancelled) = collect.await.unwrap();
    (outcome, all, cancelled)
}

fn stream(chunks: Vec<String>) -> Scripted {
    Scripted::Stream {
        chunks,
        gap: Duration::ZERO,
    }
}

fn failure(outcome: &Outcome) -> &agentwire_core::Failure {
    match outcome {
        Outcome::Failure(f) => f,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test]
async fn a_streamed_answer_with_reasoning_and_usage() {
    let fake = FakeOpenAi::start();
    let mut chunks = vec![
        json!({"choices":[{"delta":{"role":"assistant","reasoning_content":"Thinking it over."}}]})
            .to_string(),
    ];
    chunks.extend(text_chunks(&["Hel", "lo!"], (21, 4)));
    fake.push(stream(chunks));
    let agent = agent(config(&fake.base_url));
    let mut i = input("Say hello");
    i.thinking = Some("max".into());
    let (outcome, events) = turn(&agent, i).await;
    let Outcome::Result(r) = &outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(r.text, "Hello!");
    assert_eq!((r.usage.input_tokens, r.usage.output_tokens), (21, 4));
    assert_eq!(r.stop_reason, "stop");
    assert!(events.contains(&TurnEvent::Thinking {
        text: "Thinking it over.".into()
    }));
    let texts: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            TurnEvent::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, vec!["Hel", "lo!"]);
    let sent = &fake.received()[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    // Compared without printing: a failing test must not show the key either.
    assert!(
        sent.authorization.as_deref() == Some("Bearer sk-test-secret"),
        "the configured key was not sent as the bearer token"
    );
    assert_eq!(sent.body["model"], "llama3.2");
    assert_eq!(sent.body["stream"], true);
    assert_eq!(sent.body["reasoning_effort"], "high");
    assert_eq!(sent.body["messages"][0]["role"], "system");
    assert_eq!(sent.body["messages"][1]["content"], "Say hello");
    let names: Vec<_> = sent.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["calculator", "clock"]);
}

#[tokio::test]
async fn tool_calls_run_and_their_results_go_back_to_the_model() {
    let fake = FakeOpenAi::start();
    fake.push(stream(tool_call_chunks(
        "call_7",
        "calculator",
        &["{\"expre", "ssion\": \"(2+3)", "*4\"}"],
    )));
    fake.push(stream(text_chunks(&["It is 20."], (40, 5))));
    let agent = agent(config(&fake.base_url));
    let (outcome, events) = turn(&agent, input("What is (2+3)*4?")).await;
    let Outcome::Result(r) = &outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(r.text, "It is 20.");
    assert!(events.contains(&TurnEvent::ToolCall {
        call_id: "call_7".into(),
        name: "calculator".into(),
        arguments: json!({"expression": "(2+3)*4"}),
    }));
    assert!(events.iter().any(|e| matches!(e,
        TurnEvent::ToolResult { call_id, success: true, output, .. } if call_id == "call_7" && output["value"] == 20.0)));
    let second = &fake.received()[1].body["messages"];
    let n = second.as_array().unwrap().len();
    assert_eq!(second[n - 2]["role"], "assistant");
    assert_eq!(
        second[n - 2]["tool_calls"][0]["function"]["arguments"],
        "{\"expression\": \"(2+3)*4\"}"
    );
    assert_eq!(second[n - 1]["role"], "tool");
    assert_eq!(second[n - 1]["tool_call_id"], "call_7");
    assert!(second[n - 1]["content"].as_str().unwrap().contains("20"));
}

/// Runs a turn given `budget` tokens; returns its outcome.
async fn budgeted_turn(agent: &OpenAiAgent, input: TurnInput, budget: u64) -> Outcome {
    let (events, mut rx) = mpsc::channel(64);
    let (_cancel_tx, cancel) = watch::channel(false);
    let drain = tokio::spawn(async move { while rx.recv().await.is_some() {} });
    let outcome = agent
        .run(
            input,
            TurnContext {
                events,
                cancel,
                asker: Asker::unavailable(),
                token_budget: Some(budget),
                trace: Default::default(),
            },
        )
        .await;
    drain.await.unwrap();
    outcome
}

#[tokio::test]
async fn a_turn_makes_no_model_call_once_its_budget_is_spent() {
    let with_usage = |usage: (u64, u64)| {
        let mut c = tool_call_chunks("c1", "clock", &["{}"]);
        c.push(
            json!({"choices":[],"usage":{"prompt_tokens":usage.0,"completion_tokens":usage.1}})
                .to_string(),
        );
        stream(c)
    };
    // Under the budget after the tool round's call: the next call is made, and the answer that crosses
    // the budget is still the turn's result.
    let fake = FakeOpenAi::start();
    fake.push(with_usage((30, 10)));
    fake.push(stream(text_chunks(&["Noon."], (50, 20))));
    let outcome = budgeted_turn(&agent_for(&fake), input("time?"), 100).await;
    let Outcome::Result(r) = &outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!((r.text.as_str(), r.usage.input_tokens), ("Noon.", 80));
    assert_eq!(fake.received().len(), 2);
    // Spent by the call that asked for tools: neither the tools nor another call run.
    let fake = FakeOpenAi::start();
    fake.push(with_usage((80, 20)));
    fake.push(stream(text_chunks(&["Noon."], (5, 2))));
    let outcome = budgeted_turn(&agent_for(&fake), input("time?"), 100).await;
    let f = failure(&outcome);
    assert_eq!(f.code, TurnFailure::OverBudget);
    assert_eq!((f.usage.input_tokens, f.usage.output_tokens), (80, 20));
    assert_eq!(fake.received().len(), 1);
}

#[tokio::test]
async fn an_unknown_tool_or_bad_arguments_go_back_as_errors_and_the_loop_is_bounded() {
    let fake = FakeOpenAi::start();
    fake.push(stream(tool_call_chunks(
        "c1",
        "shell",
        &["{\"cmd\":\"rm -rf /\"}"],
    )));
    fake.push(stream(tool_call_chunks("c2", "calculator", &["{oops"])));
    fake.push(stream(text_chunks(&["Sorry."], (1, 1))));
    let agent = agent(config(&fake.base_url));
    let (outcome, events) = turn(&agent, input("go")).await;
    assert!(matches!(outcome, Outcome::Result(_)), "{outcome:?}");
    let failed: Vec<_> = events
        .iter()
        .filter(|e| matches!(e, TurnEvent::ToolResult { success: false, .. }))
        .collect();
    assert_eq!(failed.len(), 2, "{events:?}");

    let fake = FakeOpenAi::start();
    for i in 0..MAX_TOOL_ITERATIONS + 2 {
        fake.push(stream(tool_call_chunks(&format!("c{i}"), "clock", &["{}"])));
    }
    let agent = agent_for(&fake);
    let (outcome, _) = turn(&agent, input("loop")).await;
    assert_eq!(failure(&outcome).code, TurnFailure::AgentFailed);
    assert_eq!(fake.received().len(), MAX_TOOL_ITERATIONS);
}

fn agent_for(fake: &FakeOpenAi) -> OpenAiAgent {
    agent(config(&fake.base_url))
}

fn status(status: u16, headers: &[(&str, &str)], body: &str) -> Scripted {
    Scripted::Status {
        status,
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        body: body.into(),
    }
}

#[tokio::test]
async fn each_error_status_maps_to_its_failure() {
    let fake = FakeOpenAi::start();
    let agent = agent_for(&fake);
    let cases: [(Scripted, TurnFailure, Option<u64>); 5] = [
        (
            status(
                429,
                &[("retry-after", "7")],
                r#"{"error":{"message":"rate limited"}}"#,
            ),
            TurnFailure::ProviderBusy,
            Some(7),
        ),
        (
            status(503, &[], "overloaded"),
            TurnFailure::ProviderBusy,
            None,
        ),
        (
            status(
                401,
                &[],
                r#"{"error":{"message":"Incorrect API key provided: sk-test-secret"}}"#,
            ),
            TurnFailure::ProviderRefused,
            None,
        ),
        (
            status(
                400,
                &[],
                r#"{"error":{"message":"maximum context length is 8192 tokens","code":"context_length_exceeded"}}"#,
            ),
            TurnFailure::ContextExceeded,
            None,
        ),
        (
            status(
                404,
                &[],
                r#"{"error":{"message":"model \"llama3.2\" not found"}}"#,
            ),
            TurnFailure::ProviderRefused,
            None,
        ),
    ];
    for (reply, code, retry_after) in cases {
        fake.push(reply);
        let (outcome, _) = turn(&agent, input("hi")).await;
        let f = failure(&outcome);
        assert_eq!(f.code, FailureCode::Turn(code), "{f:?}");
        assert_eq!(f.retry_after, retry_after);
        assert!(!f.message.contains("sk-test-secret"), "{}", f.message);
    }
}

/// A server that echoes the request's headers in its error bodies (as some proxies do) must not hand the
/// agent's key, or any bearer token, to whoever prompted: each status gives a fixed message of its class.
#[tokio::test]
async fn a_refusal_never_passes_the_servers_body_on() {
    let fake = FakeOpenAi::start();
    let agent = agent_for(&fake);
    let echo = r#"{"error":{"message":"echo: Authorization: Bearer sk-test-secret; other Bearer sk-proxy-77","code":"x"}}"#;
    let cases: [(u16, &str); 9] = [
        (400, "refused the request (HTTP 400)"),
        (401, "refused the credentials (HTTP 401)"),
        (403, "refused the credentials (HTTP 403)"),
        (404, "model or endpoint not found"),
        (422, "refused the request (HTTP 422)"),
        (429, "rate limiting requests (HTTP 429)"),
        (500, "the model server failed (HTTP 500)"),
        (502, "the model server failed (HTTP 502)"),
        (503, "the model server failed (HTTP 503)"),
    ];
    for (code, class) in cases {
        fake.push(status(code, &[("retry-after", "4")], echo));
        let (outcome, events) = turn(&agent, input("hi")).await;
        let f = failure(&outcome);
        assert!(f.message.contains(class), "{code}: {}", f.message);
        let shown = format!("{} {events:?}", f.message);
        for secret in ["sk-test-secret", "sk-proxy-77", "Bearer", "echo:"] {
            assert!(!shown.contains(secret), "{code}: {shown}");
        }
        if code == 429 {
            assert_eq!(f.retry_after, Some(4), "a rate limit keeps its retry-after");
        }
    }
    // An error inside the stream, and a chunk that is not a completion, are the server's words too.
    for chunk in [
        r#"{"error":{"message":"Bearer sk-test-secret overloaded"}}"#,
        r#"{"choices":"Bearer sk-test-secret"}"#,
    ] {
        fake.push(stream(vec![chunk.to_string()]));
        let (outcome, _) = turn(&agent, input("hi")).await;
        let f = failure(&outcome);
        assert!(f.message.starts_with("the model server"), "{}", f.message);
        assert!(
            !f.message.contains("sk-test-secret") && !f.message.contains("Bearer"),
            "{}",
            f.message
        );
    }
}

#[tokio::test]
async fn an_unavailable_model_falls_back_to_the_next() {
    let fake = FakeOpenAi::start();
    fake.push(status(
        404,
        &[],
        r#"{"error":{"message":"model not found"}}"#,
    ));
    fake.push(stream(text_chunks(&["from qwen"], (1, 2))));
    let agent = agent_for(&fake);
    let mut i = input("hi");
    i.fallback_models = vec!["qwen2.5".into()];
    let (outcome, events) = turn(&agent, i).await;
    let Outcome::Result(r) = &outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(r.text, "from qwen");
    let models: Vec<_> = fake
        .received()
        .iter()
        .map(|r| r.body["model"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(models, vec!["llama3.2", "qwen2.5"]);
    assert!(events
        .iter()
        .any(|e| matches!(e, TurnEvent::Warning { text, .. } if text.contains("trying qwen2.5"))));
}

#[tokio::test]
async fn a_cancel_closes_the_stream_at_once_and_the_parked_turn_resumes() {
    let fake = FakeOpenAi::start();
    let pieces: Vec<String> = (0..100).map(|i| format!("w{i} ")).collect();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    fake.push(Scripted::Stream {
        chunks: text_chunks(&refs, (1, 100)),
        gap: Duration::from_millis(100),
    });
    let agent = agent_for(&fake);
    let (outcome, _, cancelled) = run_turn(&agent, input("write a lot"), true).await;
    // The whole stream takes 10 s: ending well before that means the cancel cut it.
    let took = cancelled.expect("cancelled mid-stream").elapsed();
    assert!(took < Duration::from_secs(4), "the cancel took {took:?}");
    let f = failure(&outcome);
    assert_eq!(f.code, TurnFailure::Suspended);
    let checkpoint = f.checkpoint.clone().expect("a checkpoint");
    assert_eq!(checkpoint["messages"][1]["content"], "write a lot");
    // The server sees the connection go within a couple of its writes.
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while fake.aborted() == 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(fake.aborted(), 1, "the stream was not closed");

    fake.push(stream(text_chunks(&["done"], (1, 1))));
    let mut i = input("write a lot");
    i.resume = Some(Resume {
        checkpoint,
        answers: Vec::new(),
    });
    let (outcome, _) = turn(&agent, i).await;
    assert!(
        matches!(&outcome, Outcome::Result(r) if r.text == "done"),
        "{outcome:?}"
    );
    assert_eq!(
        fake.received()[1].body["messages"][1]["content"],
        "write a lot"
    );
}

#[tokio::test]
async fn a_slow_server_times_out_and_a_down_one_is_unavailable() {
    let fake = FakeOpenAi::start();
    fake.push(Scripted::Stream {
        chunks: text_chunks(&["a", "b", "c"], (1, 1)),
        gap: Duration::from_millis(800),
    });
    let mut c = config(&fake.base_url);
    c.request_timeout = Duration::from_secs(1);
    let (outcome, _) = turn(&agent(c), input("hi")).await;
    let f = failure(&outcome);
    assert_eq!(f.code, TurnFailure::ProviderBusy);
    assert!(f.message.contains("within 1 s"), "{}", f.message);

    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", closed.local_addr().unwrap());
    drop(closed);
    let (outcome, _) = turn(&agent(config(&url)), input("hi")).await;
    assert_eq!(failure(&outcome).code, TurnFailure::ModelUnavailable);
}

#[tokio::test]
async fn a_server_that_ignores_stream_still_answers() {
    let fake = FakeOpenAi::start();
    fake.push(Scripted::Whole(json!({
        "choices": [{"index":0,"message":{"role":"assistant","content":"whole"},"finish_reason":"stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1}
    })));
    let (outcome, events) = turn(&agent_for(&fake), input("hi")).await;
    assert!(
        matches!(&outcome, Outcome::Result(r) if r.text == "whole"),
        "{outcome:?}"
    );
    assert!(events.contains(&TurnEvent::Text {
        text: "whole".into()
    }));
}

/// A person at the other end who answers every question with `answer` (or never answers), and says what
/// they were asked.
struct Person {
    answer: Option<agentwire_core::Answer>,
    asked: std::sync::Mutex<Vec<agentwire_core::Question>>,
}

impl agentwire_engine::AskQuestion for Person {
    fn ask(
        &self,
        question: agentwire_core::Question,
    ) -> futures_util::future::BoxFuture<'static, agentwire_core::Asked> {
        self.asked.lock().unwrap().push(question);
        let asked = match &self.answer {
            Some(a) => agentwire_core::Asked::Answered(a.clone()),
            None => agentwire_core::Asked::Unanswered,
        };
        Box::pin(async move { asked })
    }
}

async fn turn_with(
    agent: &OpenAiAgent,
    input: TurnInput,
    asker: Asker,
) -> (Outcome, Vec<TurnEvent>) {
    let (events, mut rx) = mpsc::channel(64);
    let (cancel_tx, cancel) = watch::channel(false);
    let collect = tokio::spawn(async move {
        let mut all = Vec::new();
        while let Some(e) = rx.recv().await {
            all.push(e);
        }
        all
    });
    let outcome = agent
        .run(
            input,
            TurnContext {
                events,
                cancel,
                asker,
                token_budget: None,
                trace: Default::default(),
            },
        )
        .await;
    drop(cancel_tx);
    (outcome, collect.await.unwrap())
}

fn shell_agent(fake: &FakeOpenAi, dir: &std::path::Path) -> OpenAiAgent {
    let mut c = config(&fake.base_url);
    c.tools = vec!["shell".into()];
    c.shell_dir = dir.to_path_buf();
    agent(c)
}

fn approve(choice: agentwire_core::ApproveChoice) -> agentwire_core::Answer {
    agentwire_core::Answer::Approve { choice }
}

#[tokio::test]
async fn shell_runs_only_once_a_person_approves_it() {
    let fake = FakeOpenAi::start();
    let dir = tempfile::tempdir().unwrap();
    let agent = shell_agent(&fake, dir.path());
    assert!(agent.card().tools[0].requires_approval);
    let command = r#"{"command":"echo made > made.txt; cat made.txt"}"#;

    // Approved: it runs in the agent's directory and the model reads its output.
    let person = std::sync::Arc::new(Person {
        answer: Some(approve(agentwire_core::ApproveChoice::Once)),
        asked: Default::default(),
    });
    fake.push(stream(tool_call_chunks("s1", "shell", &[command])));
    fake.push(stream(text_chunks(&["Made it."], (1, 1))));
    let (outcome, events) =
        turn_with(&agent, input("make a file"), Asker::new(person.clone())).await;
    assert!(
        matches!(&outcome, Outcome::Result(r) if r.text == "Made it."),
        "{outcome:?}"
    );
    assert!(dir.path().join("made.txt").exists());
    let asked = person.asked.lock().unwrap().clone();
    assert!(
        matches!(&asked[0].kind, agentwire_core::QuestionKind::Approve { display, .. } if display.contains("made.txt"))
    );
    assert!(events.iter().any(|e| matches!(e,
        TurnEvent::ToolResult { success: true, output, .. } if output["stdout"] == "made\n")));
    std::fs::remove_file(dir.path().join("made.txt")).unwrap();

    // Declined, or nobody who could approve: not run, and the model hears why.
    for asker in [
        Asker::new(std::sync::Arc::new(Person {
            answer: Some(approve(agentwire_core::ApproveChoice::No)),
            asked: Default::default(),
        })),
        Asker::unavailable(),
    ] {
        fake.push(stream(tool_call_chunks("s2", "shell", &[command])));
        fake.push(stream(text_chunks(&["I could not."], (1, 1))));
        let (outcome, events) = turn_with(&agent, input("make a file"), asker).await;
        assert!(matches!(outcome, Outcome::Result(_)), "{outcome:?}");
        assert!(
            !dir.path().join("made.txt").exists(),
            "it ran without approval"
        );
        assert!(events
            .iter()
            .any(|e| matches!(e, TurnEvent::ToolResult { success: false, .. })));
    }
}

#[tokio::test]
async fn an_unanswered_approval_parks_the_turn_and_its_answer_resumes_it() {
    let fake = FakeOpenAi::start();
    let dir = tempfile::tempdir().unwrap();
    let agent = shell_agent(&fake, dir.path());
    fake.push(stream(tool_call_chunks(
        "s1",
        "shell",
        &[r#"{"command":"touch later.txt"}"#],
    )));
    let nobody = Asker::new(std::sync::Arc::new(Person {
        answer: None,
        asked: Default::default(),
    }));
    let (outcome, _) = turn_with(&agent, input("touch it"), nobody).await;
    let f = failure(&outcome);
    assert_eq!(f.code, TurnFailure::Suspended);
    assert!(f.message.contains("touch later.txt"), "{}", f.message);
    assert!(!dir.path().join("later.txt").exists());
    let checkpoint = f.checkpoint.clone().unwrap();

    fake.push(stream(text_chunks(&["Touched."], (1, 1))));
    let mut i = input("touch it");
    i.resume = Some(Resume {
        checkpoint,
        answers: vec![agentwire_core::CallAnswer {
            call_id: "s1".into(),
            answer: approve(agentwire_core::ApproveChoice::Once),
        }],
    });
    let (outcome, _) = turn_with(&agent, i, Asker::unavailable()).await;
    assert!(
        matches!(&outcome, Outcome::Result(r) if r.text == "Touched."),
        "{outcome:?}"
    );
    assert!(dir.path().join("later.txt").exists());
    // Only the model's answer after the tool was asked for again: the first call is not repeated.
    assert_eq!(fake.received().len(), 2);
    let last = &fake.received()[1].body["messages"];
    let n = last.as_array().unwrap().len();
    assert_eq!(last[n - 1]["role"], "tool");
    assert_eq!(last[n - 2]["tool_calls"][0]["id"], "s1");
}

#[tokio::test]
async fn no_answer_after_a_failing_tool_is_a_tool_error() {
    let fake = FakeOpenAi::start();
    fake.push(stream(tool_call_chunks(
        "c1",
        "calculator",
        &[r#"{"expression":"1/"}"#],
    )));
    fake.push(stream(text_chunks(&[], (1, 0))));
    let (outcome, _) = turn(&agent_for(&fake), input("divide")).await;
    let f = failure(&outcome);
    assert_eq!(f.code, TurnFailure::ToolError);
    assert!(f.message.contains("calculator"), "{}", f.message);
    // Without a failing tool, no answer is an empty response.
    fake.push(stream(text_chunks(&[], (1, 0))));
    let (outcome, _) = turn(&agent_for(&fake), input("say nothing")).await;
    assert_eq!(failure(&outcome).code, TurnFailure::EmptyResponse);
}

/// The Python the tests' MCP server runs on: the venv `scripts/test.sh` installs `mcp` into.
fn mcp_python() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/tools/venv/bin/python")
}

fn mcp_server(starts: &std::path::Path) -> agentwire_agents::openai::mcp::McpServerConfig {
    // The starts file goes to the server through `env`, so each test counts its own server's starts.
    let script =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/mcp_server.py");
    agentwire_agents::openai::mcp::McpServerConfig {
        name: "notes".into(),
        env: Default::default(),
        command: vec![
            "env".into(),
            format!("MCP_STARTS_FILE={}", starts.display()),
            mcp_python().to_string_lossy().into_owned(),
            script.to_string_lossy().into_owned(),
        ],
        start_timeout: agentwire_agents::openai::mcp::MCP_START_TIMEOUT,
    }
}

/// An MCP server gets the allowlist, its own `env` and the variables it names, never the daemon's others
/// (Cargo's variables of this test process stand for an API key and a NATS password). The "server" only
/// writes its environment and waits: its handshake times out, which is no matter here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_servers_environment_is_the_allowlist_and_what_its_config_names() {
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("env.txt");
    let script = format!(
        "env > {0}.tmp; mv {0}.tmp {0}; exec sleep 120",
        out.display()
    );
    let server = agentwire_agents::openai::mcp::McpServerConfig {
        name: "dump".into(),
        env: agentwire_core::child_env::ChildEnv {
            set: [("MCP_MODE".to_string(), "x".to_string())].into(),
            pass: vec!["CARGO_PKG_NAME".into()],
        },
        command: vec!["sh".into(), "-c".into(), script],
        start_timeout: Duration::from_secs(1),
    };
    let _servers = agentwire_agents::openai::mcp::McpServers::start(vec![server]).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let text = loop {
        if let Ok(t) = std::fs::read_to_string(&out) {
            break t;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the server never started"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    assert!(
        text.contains("MCP_MODE=x\n") && text.contains("CARGO_PKG_NAME=agentwire-agents\n"),
        "{text}"
    );
    assert!(text.lines().any(|l| l.starts_with("PATH=")), "{text}");
    assert!(!text.contains("CARGO_MANIFEST_DIR"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_the_handshake_holds_the_start_only_for_its_timeout() {
    // `sleep` reads nothing and says nothing: without the timeout the start would wait for it to exit.
    let silent = agentwire_agents::openai::mcp::McpServerConfig {
        name: "silent".into(),
        env: Default::default(),
        command: vec!["sleep".into(), "120".into()],
        start_timeout: Duration::from_secs(1),
    };
    let started = std::time::Instant::now();
    let servers = agentwire_agents::openai::mcp::McpServers::start(vec![silent]).await;
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the start waited {:?}",
        started.elapsed()
    );
    assert!(
        servers.tools().is_empty(),
        "no tools from a server that never came up"
    );
    assert!(servers.call("silent__anything", "{}", None).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_servers_tools_are_called_and_a_crashed_server_is_restarted() {
    assert!(
        mcp_python().exists(),
        "run ./scripts/test.sh: it installs the MCP Python SDK under target/tools/venv"
    );
    let dir = tempfile::tempdir().unwrap();
    let starts = dir.path().join("starts");
    let servers = agentwire_agents::openai::mcp::McpServers::start(vec![mcp_server(&starts)]).await;
    let fake = FakeOpenAi::start();
    let agent = agent_for(&fake).with_mcp(servers.clone());
    let names: Vec<String> = agent.card().tools.iter().map(|t| t.name.clone()).collect();
    for want in [
        "calculator",
        "clock",
        "notes__add",
        "notes__shout",
        "notes__crash",
    ] {
        assert!(names.contains(&want.to_string()), "{names:?}");
    }
    // The model sees the server's tools with their schemas.
    fake.push(stream(tool_call_chunks(
        "m1",
        "notes__add",
        &[r#"{"a": 2,"#, r#" "b": 40}"#],
    )));
    fake.push(stream(text_chunks(&["42."], (1, 1))));
    let (outcome, events) = turn(&agent, input("add")).await;
    assert!(
        matches!(&outcome, Outcome::Result(r) if r.text == "42."),
        "{outcome:?}"
    );
    let tools = &fake.received()[0].body["tools"];
    let add = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "notes__add")
        .unwrap();
    assert_eq!(
        add["function"]["parameters"]["properties"]["a"]["type"],
        "integer"
    );
    assert!(events.iter().any(|e| matches!(e,
        TurnEvent::ToolResult { name, success: true, output, .. }
            if name == "notes__add" && output.to_string().contains("42"))));

    // A tool's own error reaches the model as an error result.
    fake.push(stream(tool_call_chunks(
        "m2",
        "notes__refuse",
        &[r#"{"reason":"not today"}"#],
    )));
    fake.push(stream(text_chunks(&["ok"], (1, 1))));
    let (_, events) = turn(&agent, input("refuse")).await;
    assert!(events.iter().any(|e| matches!(e,
        TurnEvent::ToolResult { success: false, output, .. } if output.to_string().contains("not today"))));

    // The server dies: the call fails with a clear error at once, and the server comes back.
    fake.push(stream(tool_call_chunks("m3", "notes__crash", &["{}"])));
    fake.push(stream(tool_call_chunks(
        "m4",
        "notes__shout",
        &[r#"{"text":"hi"}"#],
    )));
    fake.push(stream(text_chunks(&["down"], (1, 1))));
    let started = std::time::Instant::now();
    let (outcome, events) = turn(&agent, input("crash")).await;
    assert!(matches!(outcome, Outcome::Result(_)), "{outcome:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the turn hung on a dead server"
    );
    let failed: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            TurnEvent::ToolResult {
                success: false,
                output,
                ..
            } => Some(output.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(failed.len(), 2, "{events:?}");
    assert!(failed[1].contains("MCP server notes"), "{failed:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        fake.push(stream(tool_call_chunks(
            "m5",
            "notes__shout",
            &[r#"{"text":"back"}"#],
        )));
        fake.push(stream(text_chunks(&["up"], (1, 1))));
        let (_, events) = turn(&agent, input("shout")).await;
        let ok = events.iter().any(|e| matches!(e,
            TurnEvent::ToolResult { success: true, output, .. } if output.to_string().contains("BACK")));
        if ok {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the server did not come back: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let count = std::fs::read_to_string(&starts).unwrap().lines().count();
    assert_eq!(count, 2, "started once, restarted once");
}
