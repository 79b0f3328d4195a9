//! The OpenAI-compatible front over real HTTP: a real engine on a SQLite journal running the demo agent
//! (and a small agent that says back the history it was given), the daemon's HTTP server on a loopback
//! port with the front's routes, and requests as a caller's program sends them: models listed per caller,
//! completions whole and streamed, failures and questions in OpenAI's error shape, tokens checked, the
//! turn journaled under protocol `openai` and its caller, and a closed stream cancelling its turn.

use agentwire_agents::DemoAgent;
use agentwire_core::{Outcome, RequestId, TurnResult, Usage};
use agentwire_engine::{Agent, AgentCard, Engine, TurnContext, TurnFilter, TurnInput, WatchHub};
use agentwire_http::callers::{caller_token, CallerGrant, CallerToken};
use agentwire_http::front::{ExposedAgent, FrontContext, FrontKind};
use agentwire_http::{HttpConfig, HttpContext, HttpServer, Token};
use agentwire_openai_front::errors::ASKED_MESSAGE;
use agentwire_openai_front::OpenAiFront;
use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// An agent that answers with the earlier turns it was given and the message: what the front made of a
/// request's `messages`.
struct Recall;

impl Agent for Recall {
    fn card(&self) -> AgentCard {
        AgentCard {
            name: "recall".into(),
            version: "1".into(),
            description: "says back its history".into(),
            models: vec!["recall-1".into()],
            default_model: "recall-1".into(),
            tools: vec![],
            max_prompt_bytes: 32_000,
            max_context_tokens: 8_192,
        }
    }

    fn run(&self, input: TurnInput, _ctx: TurnContext) -> BoxFuture<'static, Outcome> {
        let past: Vec<String> = input
            .history
            .iter()
            .map(|t| format!("{}=>{}", t.message, t.answer))
            .collect();
        let text = format!("{} || {}", past.join(" | "), input.message);
        Box::pin(async move {
            Outcome::Result(TurnResult {
                text,
                usage: Usage::default(),
                stop_reason: "stop".into(),
            })
        })
    }

    fn wants_history(&self) -> bool {
        true
    }
}

struct Setup {
    base: String,
    operator: String,
    /// May call `echo` only.
    alice: String,
    /// May call `demo` and `recall`.
    bob: String,
    http: reqwest::Client,
    demo: Arc<Engine>,
    server: HttpServer,
    _dir: tempfile::TempDir,
}

async fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let journal: Arc<dyn agentwire_store::Journal> =
        Arc::new(agentwire_store::SqliteJournal::open(&dir.path().join("journal.db")).unwrap());
    let hub = WatchHub::new();
    let demo = Engine::with_hub(journal.clone(), Arc::new(DemoAgent), "local", hub.clone());
    let recall = Engine::with_hub(journal, Arc::new(Recall), "local", hub.clone());
    let exposed = |name: &str, engine: &Arc<Engine>| ExposedAgent {
        name: name.into(),
        engine: engine.clone(),
        default: name == "demo",
    };
    let plan = OpenAiFront.configure(None).unwrap();
    let started = plan
        .start(FrontContext {
            // `echo` is the demo agent under a second name.
            agents: vec![
                exposed("demo", &demo),
                exposed("echo", &demo),
                exposed("recall", &recall),
            ],
            hub: hub.clone(),
        })
        .await
        .unwrap();
    assert_eq!(started.front.protocol(), "openai");
    let operator = Token::generate().unwrap();
    let (alice, bob) = ("a".repeat(40), "b".repeat(40));
    let grant = |name: &str, agents: &[&str]| {
        Arc::new(CallerGrant {
            name: name.into(),
            agents: Some(agents.iter().map(|a| a.to_string()).collect()),
        })
    };
    let callers = vec![
        CallerToken {
            token: caller_token(&alice).unwrap(),
            grant: grant("alice", &["echo"]),
        },
        CallerToken {
            token: caller_token(&bob).unwrap(),
            grant: grant("bob", &["demo", "recall"]),
        },
    ];
    let server = agentwire_http::start(
        HttpConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            allow_remote: false,
            token: operator.clone(),
            callers,
            limits: Default::default(),
        },
        HttpContext {
            hub,
            engines: agentwire_engine::Engines::new(vec![demo.clone(), recall]),
            agents: vec![],
            health: Arc::new(|| (true, json!({"ok": true}))),
            scrape: Arc::new(|_| {}),
            roost: None,
        },
        vec![started.routes.expect("an HTTP front")],
    )
    .await
    .unwrap();
    Setup {
        base: server.url(),
        operator: operator.reveal().to_string(),
        alice,
        bob,
        http: agentwire_agents::openai::http_client(Duration::from_secs(30)).unwrap(),
        demo,
        server,
        _dir: dir,
    }
}

/// An answer: its status, its headers and its body as JSON (null when it is not).
struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Value,
}

impl Setup {
    async fn get(&self, token: &str, path: &str) -> Answer {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        answer(r).await
    }

    async fn post_raw(&self, token: Option<&str>, body: &str, json: bool) -> reqwest::Response {
        let mut r = self
            .http
            .post(format!("{}/v1/chat/completions", self.base))
            .body(body.to_string());
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        if json {
            r = r.header("content-type", "application/json");
        }
        r.send().await.unwrap()
    }

    async fn chat(&self, token: &str, body: Value) -> Answer {
        answer(self.post_raw(Some(token), &body.to_string(), true).await).await
    }

    /// A streamed request: its status and every event's `data`, in order.
    async fn stream(&self, token: &str, body: Value) -> (u16, Vec<String>) {
        let r = self.post_raw(Some(token), &body.to_string(), true).await;
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        let data = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.trim_start().to_string())
            .collect();
        (status, data)
    }
}

async fn answer(r: reqwest::Response) -> Answer {
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let bytes = r.bytes().await.unwrap_or_default();
    Answer {
        status,
        headers,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    }
}

fn ask(model: &str, text: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": text}]})
}

/// The error's `code`, checking the body is OpenAI's error shape.
fn code(a: &Answer) -> String {
    let e = &a.body["error"];
    assert!(
        e["message"].is_string() && e["type"].is_string() && e.get("param").is_some(),
        "not OpenAI's error shape: {}",
        a.body
    );
    e["code"].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn models_are_the_agents_the_caller_may_call() {
    let s = setup().await;
    let all = s.get(&s.operator, "/v1/models").await;
    assert_eq!(all.status, 200);
    assert_eq!(all.body["object"], "list");
    let ids: Vec<&str> = all.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["demo", "echo", "recall"]);
    let m = &all.body["data"][0];
    assert_eq!(
        (m["object"].as_str(), m["owned_by"].as_str()),
        (Some("model"), Some("agentwire"))
    );
    assert!(m["created"].as_u64().unwrap() > 1_700_000_000);
    let alice = s.get(&s.alice, "/v1/models").await;
    assert_eq!(alice.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(alice.body["data"][0]["id"], "echo");
    let one = s.get(&s.bob, "/v1/models/recall").await;
    assert_eq!((one.status, one.body["id"].as_str()), (200, Some("recall")));
    let hidden = s.get(&s.alice, "/v1/models/demo").await;
    assert_eq!(
        (hidden.status, code(&hidden).as_str()),
        (404, "model_not_found")
    );
    let unknown = s.get(&s.operator, "/v1/models/gpt-4o").await;
    assert_eq!(
        (unknown.status, code(&unknown).as_str()),
        (404, "model_not_found")
    );
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_completion_is_the_answer_with_its_usage_and_its_turn_is_journaled() {
    let s = setup().await;
    let a = s.chat(&s.bob, ask("demo", "calc (1 + 2) * 28")).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let b = &a.body;
    assert_eq!(b["object"], "chat.completion");
    assert_eq!(b["model"], "demo");
    let id = b["id"].as_str().unwrap();
    assert!(id.starts_with("chatcmpl-") && id.len() == 9 + 32, "{id}");
    assert_eq!(
        b["choices"][0]["message"],
        json!({"role": "assistant", "content": "84"})
    );
    assert_eq!(b["choices"][0]["finish_reason"], "stop");
    // The demo counts words: six in, one out.
    assert_eq!(
        b["usage"],
        json!({"prompt_tokens": 6, "completion_tokens": 1, "total_tokens": 7})
    );
    let turn = s
        .demo
        .lookup(&RequestId::new(format!("openai:{id}")).unwrap())
        .await
        .unwrap()
        .expect("journaled");
    assert_eq!(turn.protocol, "openai");
    assert_eq!(turn.route["requester"], "caller:bob");
    assert_eq!(turn.conversation_id.as_str(), format!("openai:{id}"));
    assert_eq!(turn.input.message, "calc (1 + 2) * 28");
    assert!(matches!(turn.outcome, Some(Outcome::Result(_))));
    // The operator's turns are the operator's; another request is another conversation.
    let again = s.chat(&s.operator, ask("echo", "hello")).await;
    assert_eq!(
        again.body["choices"][0]["message"]["content"],
        "You said: hello"
    );
    let id2 = again.body["id"].as_str().unwrap();
    assert_ne!(id2, id);
    let turn = s
        .demo
        .lookup(&RequestId::new(format!("openai:{id2}")).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(turn.route["requester"], "operator");
    s.server.shutdown().await;
}

#[tokio::test]
async fn the_messages_before_the_last_are_the_turns_history() {
    let s = setup().await;
    let body = json!({"model": "recall", "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": [{"type": "text", "text": "what is 2+2"}]},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "thanks"},
    ]});
    let a = s.chat(&s.bob, body).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(
        a.body["choices"][0]["message"]["content"],
        format!(
            "hi=>hello | what is 2+2=>4 || thanks\n\n{}\nbe brief",
            agentwire_openai_front::mapping::INSTRUCTIONS_HEADING
        )
    );
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_stream_is_the_role_the_deltas_the_finish_the_usage_and_done() {
    let s = setup().await;
    let mut body = ask("demo", "hello there");
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let (status, data) = s.stream(&s.bob, body).await;
    assert_eq!(status, 200);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{data:?}");
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let id = chunks[0]["id"].as_str().unwrap();
    assert!(chunks
        .iter()
        .all(|c| c["id"] == id && c["object"] == "chat.completion.chunk"));
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    let (usage, rest) = chunks.split_last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["prompt_tokens"], 2);
    assert_eq!(usage["usage"]["completion_tokens"], 4);
    assert_eq!(usage["usage"]["total_tokens"], 6);
    let (finish, deltas) = rest.split_last().unwrap();
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    assert_eq!(finish["choices"][0]["delta"], json!({}));
    let text: String = deltas
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "You said: hello there");
    assert!(
        deltas.len() >= 3,
        "the role, then the demo's two deltas: {data:?}"
    );
    assert!(deltas
        .iter()
        .all(|c| c["choices"][0]["finish_reason"].is_null()));
    // Without include_usage: no usage chunk, no usage field.
    let mut plain = ask("demo", "calc 6 * 7");
    plain["stream"] = json!(true);
    let (_, data) = s.stream(&s.bob, plain).await;
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(chunks.iter().all(|c| c.get("usage").is_none()), "{data:?}");
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "42");
    s.server.shutdown().await;
}

#[tokio::test]
async fn tokens_are_checked_and_answered_in_openais_shape() {
    let s = setup().await;
    let body = ask("demo", "hello").to_string();
    let none = answer(s.post_raw(None, &body, true).await).await;
    assert_eq!(
        (none.status, code(&none).as_str()),
        (401, "invalid_api_key")
    );
    assert_eq!(none.body["error"]["type"], "invalid_request_error");
    assert_eq!(none.headers["www-authenticate"], "Bearer");
    let wrong = answer(s.post_raw(Some(&"w".repeat(40)), &body, true).await).await;
    assert_eq!(
        (wrong.status, code(&wrong).as_str()),
        (401, "invalid_api_key")
    );
    let models = s.get("not-the-token", "/v1/models").await;
    assert_eq!(models.status, 401);
    s.server.shutdown().await;
}

#[tokio::test]
async fn requests_that_cannot_be_served_are_refused_in_openais_shape() {
    let s = setup().await;
    let unknown = s.chat(&s.operator, ask("gpt-4o", "hello")).await;
    assert_eq!(
        (unknown.status, code(&unknown).as_str()),
        (404, "model_not_found")
    );
    let not_granted = s.chat(&s.alice, ask("demo", "hello")).await;
    assert_eq!(
        (not_granted.status, code(&not_granted).as_str()),
        (404, "model_not_found")
    );
    assert_eq!(s.chat(&s.alice, ask("echo", "hello")).await.status, 200);
    let broken = answer(s.post_raw(Some(&s.operator), "{\"model\": ", true).await).await;
    assert_eq!(
        (broken.status, code(&broken).as_str()),
        (400, "invalid_json")
    );
    let no_messages = s.chat(&s.operator, json!({"model": "demo"})).await;
    assert_eq!(no_messages.status, 400);
    let last = s
        .chat(
            &s.operator,
            json!({"model": "demo", "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}),
        )
        .await;
    assert_eq!(
        (last.status, last.body["error"]["param"].as_str()),
        (400, Some("messages"))
    );
    let mut two = ask("demo", "hello");
    two["n"] = json!(2);
    let two = s.chat(&s.operator, two).await;
    assert_eq!(
        (two.status, two.body["error"]["param"].as_str()),
        (400, Some("n"))
    );
    let mut tools = ask("demo", "hello");
    tools["tools"] = json!([{"type": "function", "function": {"name": "f"}}]);
    let tools = s.chat(&s.operator, tools).await;
    assert_eq!(
        (tools.status, tools.body["error"]["param"].as_str()),
        (400, Some("tools"))
    );
    let image = json!({"model": "demo", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/x.png"}}]}]});
    assert_eq!(s.chat(&s.operator, image).await.status, 400);
    let too_big = s.chat(&s.operator, ask("demo", &"x".repeat(40_000))).await;
    assert_eq!(
        (too_big.status, code(&too_big).as_str()),
        (400, "context_length_exceeded")
    );
    let form = answer(
        s.post_raw(Some(&s.operator), &ask("demo", "x").to_string(), false)
            .await,
    )
    .await;
    assert_eq!(form.status, 415);
    code(&form);
    let get = s.get(&s.operator, "/v1/chat/completions").await;
    assert_eq!(
        (get.status, code(&get).as_str()),
        (405, "method_not_allowed")
    );
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_failed_turn_is_an_error_and_a_question_says_it_cannot_be_carried() {
    let s = setup().await;
    let failed = s.chat(&s.bob, ask("demo", "fail on purpose")).await;
    assert_eq!(
        (failed.status, code(&failed).as_str()),
        (500, "agent_failed")
    );
    assert_eq!(failed.body["error"]["message"], "on purpose");
    assert_eq!(failed.headers["x-should-retry"], "false");
    let asked = s.chat(&s.bob, ask("demo", "ask Which one? | a | b")).await;
    assert_eq!(
        (asked.status, code(&asked).as_str()),
        (400, "question_unsupported")
    );
    let message = asked.body["error"]["message"].as_str().unwrap();
    assert!(message.starts_with(ASKED_MESSAGE), "{message}");
    // Streamed: the error is the last event, with no [DONE].
    let mut body = ask("demo", "confirm Go on?");
    body["stream"] = json!(true);
    let (status, data) = s.stream(&s.bob, body).await;
    assert_eq!(status, 200);
    let last: Value = serde_json::from_str(data.last().unwrap()).unwrap();
    assert!(
        last["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with(ASKED_MESSAGE),
        "{data:?}"
    );
    assert!(!data.iter().any(|d| d == "[DONE]"));
    s.server.shutdown().await;
}

/// Waits until the demo engine's journal has turn `id` ended, and gives its outcome.
async fn ended(engine: &Engine, id: &str) -> Outcome {
    let id = RequestId::new(format!("openai:{id}")).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(o) = engine.lookup(&id).await.unwrap().and_then(|t| t.outcome) {
            return o;
        }
        assert!(tokio::time::Instant::now() < deadline, "{id} never ended");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_closed_stream_cancels_its_turn() {
    let s = setup().await;
    let mut body = ask("demo", "sleep 60000");
    body["stream"] = json!(true);
    let mut r = s.post_raw(Some(&s.bob), &body.to_string(), true).await;
    assert_eq!(r.status().as_u16(), 200);
    let first = r.chunk().await.unwrap().expect("the role chunk");
    let text = String::from_utf8_lossy(&first);
    let line = text.lines().next().unwrap_or_default();
    let data = line.strip_prefix("data:").expect("an event").trim();
    let chunk: Value = serde_json::from_str(data).unwrap();
    let id = chunk["id"].as_str().unwrap().to_string();
    drop(r);
    let outcome = ended(&s.demo, &id).await;
    assert!(outcome.is_cancelled(), "{outcome:?}");
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_request_given_up_before_its_answer_cancels_its_turn() {
    let s = setup().await;
    let r = s
        .http
        .post(format!("{}/v1/chat/completions", s.base))
        .bearer_auth(&s.bob)
        .header("content-type", "application/json")
        .body(ask("demo", "sleep 60000").to_string())
        .timeout(Duration::from_millis(500))
        .send()
        .await;
    assert!(r.is_err(), "the demo sleeps a minute");
    // The client got no id: the hub knows the turn.
    let filter = TurnFilter {
        protocol: Some("openai".into()),
        ..Default::default()
    };
    let turns = s.demo.watch_hub().turns(&filter, 10);
    assert_eq!(turns.len(), 1);
    let id = turns[0].id.as_str().strip_prefix("openai:").unwrap();
    let outcome = ended(&s.demo, id).await;
    assert!(outcome.is_cancelled(), "{outcome:?}");
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_full_agent_refuses_at_once_with_429() {
    let s = setup().await;
    s.demo.limit_running(1);
    let mut body = ask("demo", "sleep 60000");
    body["stream"] = json!(true);
    let r = s.post_raw(Some(&s.bob), &body.to_string(), true).await;
    assert_eq!(r.status().as_u16(), 200);
    let busy = s.chat(&s.bob, ask("demo", "hello")).await;
    assert_eq!(busy.status, 429, "{}", busy.body);
    assert_eq!(code(&busy), "capacity");
    assert!(busy.headers.contains_key("retry-after"));
    drop(r);
    s.server.shutdown().await;
}

#[tokio::test]
async fn one_caller_holds_at_most_its_share_of_an_agents_turns() {
    let s = setup().await;
    let mut body = ask("demo", "sleep 60000");
    body["stream"] = json!(true);
    let mut held = Vec::new();
    for _ in 0..agentwire_http::front::MAX_LIVE_TURNS_PER_CALLER {
        let r = s.post_raw(Some(&s.bob), &body.to_string(), true).await;
        assert_eq!(r.status().as_u16(), 200);
        held.push(r);
    }
    let busy = s.chat(&s.bob, ask("demo", "hello")).await;
    assert_eq!(busy.status, 429, "{}", busy.body);
    assert_eq!(code(&busy), "capacity");
    assert!(
        busy.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the most one caller may"),
        "{}",
        busy.body
    );
    // The operator, and another caller, are not held to bob's share.
    let op = s.chat(&s.operator, ask("demo", "hello")).await;
    assert_eq!(op.status, 200, "{}", op.body);
    let alice = s.chat(&s.alice, ask("echo", "hello")).await;
    assert_eq!(alice.status, 200, "{}", alice.body);
    // One of his ends (its stream closed, the turn cancelled): his next is taken.
    drop(held.pop());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let again = s.chat(&s.bob, ask("demo", "hello")).await;
        if again.status == 200 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{}", again.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(held);
    s.server.shutdown().await;
}
