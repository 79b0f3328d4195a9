//! The A2A front over real HTTP: a real engine on a SQLite journal running the demo agent (and a small
//! agent that says back the history it was given), the daemon's HTTP server on a loopback port with the
//! front's routes, and requests as an A2A client sends them on both bindings: cards, tokens, tasks sent
//! blocking, at once and streamed, questions answered, cancels, subscribers, lists per caller, and the
//! spec's errors.

use agentwire_a2a_front::A2aFront;
use agentwire_agents::DemoAgent;
use agentwire_core::{Outcome, TurnResult, Usage};
use agentwire_engine::{Agent, AgentCard, Engine, TurnContext, TurnFilter, TurnInput, WatchHub};
use agentwire_http::callers::{caller_token, CallerGrant, CallerToken};
use agentwire_http::front::{ExposedAgent, FrontContext, FrontKind};
use agentwire_http::{HttpConfig, HttpContext, HttpServer, Token};
use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// An agent that answers with the earlier turns it was given and the message.
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
        let text = format!("[{}] {}", past.join(" | "), input.message);
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
    /// May call `demo` and `recall`.
    alice: String,
    /// May call `demo`.
    bob: String,
    http: reqwest::Client,
    hub: Arc<WatchHub>,
    _server: HttpServer,
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
    let plan = A2aFront.configure(None).unwrap();
    let started = plan
        .start(FrontContext {
            agents: vec![exposed("demo", &demo), exposed("recall", &recall)],
            hub: hub.clone(),
        })
        .await
        .unwrap();
    assert_eq!(started.front.protocol(), "a2a");
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
            grant: grant("alice", &["demo", "recall"]),
        },
        CallerToken {
            token: caller_token(&bob).unwrap(),
            grant: grant("bob", &["demo"]),
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
            hub: hub.clone(),
            engines: agentwire_engine::Engines::new(vec![demo, recall]),
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
        hub,
        _server: server,
        _dir: dir,
    }
}

/// An answer: its status and its body as JSON (null when it is not).
struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Value,
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

fn message(text: &str) -> Value {
    json!({"messageId": format!("m-{}", text.len()), "role": "ROLE_USER", "parts": [{"text": text}]})
}

impl Setup {
    async fn get(&self, token: Option<&str>, path: &str) -> Answer {
        let mut r = self.http.get(format!("{}{path}", self.base));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        answer(r.header("A2A-Version", "1.0").send().await.unwrap()).await
    }

    async fn post(&self, token: Option<&str>, path: &str, body: &str) -> reqwest::Response {
        let mut r = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send().await.unwrap()
    }

    /// A JSON-RPC call to agent `agent`: the HTTP status and the response.
    async fn rpc(&self, token: &str, agent: &str, method: &str, params: Value) -> Answer {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        answer(
            self.post(Some(token), &format!("/a2a/{agent}"), &body.to_string())
                .await,
        )
        .await
    }

    /// `SendMessage` over JSON-RPC: the task.
    async fn send(&self, token: &str, agent: &str, params: Value) -> Value {
        let a = self.rpc(token, agent, "SendMessage", params).await;
        assert_eq!(a.status, 200);
        assert!(a.body["error"].is_null(), "{}", a.body);
        a.body["result"]["task"].clone()
    }

    /// A stream: each event's `data`, parsed, in order.
    async fn stream(&self, token: &str, path: &str, body: &str) -> (u16, Vec<Value>) {
        let r = self.post(Some(token), path, body).await;
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        let data = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| serde_json::from_str(d.trim_start()).unwrap())
            .collect();
        (status, data)
    }
}

fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or_default()
}

fn artifact_text(task: &Value) -> String {
    task["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn rpc_code(a: &Answer) -> i64 {
    a.body["error"]["code"].as_i64().unwrap_or_default()
}

#[tokio::test]
async fn cards_are_public_name_both_bindings_and_hold_no_secret() {
    let s = setup().await;
    let root = s.get(None, "/.well-known/agent-card.json").await;
    assert_eq!(root.status, 200);
    assert_eq!(root.body["name"], "demo", "the --agent agent's card");
    let host = s.base.trim_start_matches("http://");
    let url = format!("http://{host}/a2a/demo");
    let ifaces = root.body["supportedInterfaces"].as_array().unwrap();
    let bindings: Vec<(&str, &str, &str)> = ifaces
        .iter()
        .map(|i| {
            (
                i["protocolBinding"].as_str().unwrap(),
                i["url"].as_str().unwrap(),
                i["protocolVersion"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        bindings,
        [
            ("JSONRPC", url.as_str(), "1.0"),
            ("HTTP+JSON", url.as_str(), "1.0")
        ]
    );
    assert_eq!(root.body["capabilities"]["streaming"], true);
    let skills: Vec<&str> = root.body["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["id"].as_str().unwrap())
        .collect();
    assert_eq!(skills, ["calculator", "shell"], "the demo agent's tools");
    assert_eq!(
        root.body["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"],
        "Bearer"
    );
    assert!(root.body["securityRequirements"][0]["schemes"]["bearer"].is_object());
    let recall = s.get(None, "/a2a/recall/.well-known/agent-card.json").await;
    assert_eq!(recall.status, 200);
    assert_eq!(recall.body["name"], "recall");
    assert!(recall.body["supportedInterfaces"][0]["url"]
        .as_str()
        .unwrap()
        .ends_with("/a2a/recall"));
    for card in [&root.body, &recall.body] {
        let text = card.to_string().to_lowercase();
        for word in ["token", "secret", "password", "apikey", "api_key"] {
            assert!(!text.contains(word), "{word} in the card: {text}");
        }
        assert!(!text.contains(&s.operator) && !text.contains(&s.alice));
    }
    let none = s.get(None, "/a2a/nobody/.well-known/agent-card.json").await;
    assert_eq!(none.status, 404);
    // Behind a TLS terminator that says so, the card's URLs are https://; any other word is http://.
    for (name, value, scheme) in [
        ("x-forwarded-proto", "https", "https"),
        (
            "forwarded",
            "for=192.0.2.1;proto=https;by=10.0.0.1",
            "https",
        ),
        ("x-forwarded-proto", "gopher", "http"),
    ] {
        let r = s
            .http
            .get(format!("{}/.well-known/agent-card.json", s.base))
            .header(name, value)
            .send()
            .await
            .unwrap();
        let vary = r.headers()["vary"].to_str().unwrap().to_string();
        assert!(vary.contains("x-forwarded-proto"), "{vary}");
        let card: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
        assert_eq!(
            card["supportedInterfaces"][0]["url"],
            format!("{scheme}://{host}/a2a/demo"),
            "{name}: {value}"
        );
    }
}

#[tokio::test]
async fn a_missing_or_wrong_token_is_401_on_both_bindings() {
    let s = setup().await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}});
    for token in [None, Some("c".repeat(40))] {
        let r = answer(
            s.post(token.as_deref(), "/a2a/demo", &body.to_string())
                .await,
        )
        .await;
        assert_eq!(r.status, 401);
        assert_eq!(r.headers["www-authenticate"], "Bearer");
        assert_eq!(r.body["jsonrpc"], "2.0");
        assert_eq!(r.body["error"]["status"], "UNAUTHENTICATED");
        let rest = s.get(token.as_deref(), "/a2a/demo/tasks").await;
        assert_eq!(rest.status, 401);
        assert_eq!(rest.body["error"]["code"], 401);
        assert!(
            !rest.body.to_string().contains(&"c".repeat(40)),
            "no token said back"
        );
    }
}

#[tokio::test]
async fn a_blocking_message_completes_with_the_answer_as_the_artifact() {
    let s = setup().await;
    let task = s
        .send(
            &s.alice,
            "demo",
            json!({"message": message("calc (1 + 2) * 28")}),
        )
        .await;
    assert_eq!(state(&task), "TASK_STATE_COMPLETED");
    assert_eq!(artifact_text(&task), "84");
    let id = task["id"].as_str().unwrap();
    assert_eq!(id.len(), 36, "a UUID: {id}");
    assert_eq!(task["contextId"].as_str().unwrap().len(), 36);
    // Read back over HTTP+JSON, with its history.
    let got = s
        .get(
            Some(&s.alice),
            &format!("/a2a/demo/tasks/{id}?historyLength=10"),
        )
        .await;
    assert_eq!(got.status, 200, "{}", got.body);
    assert_eq!(state(&got.body), "TASK_STATE_COMPLETED");
    let history = got.body["history"].as_array().unwrap();
    assert_eq!(history[0]["role"], "ROLE_USER");
    assert_eq!(history[0]["parts"][0]["text"], "calc (1 + 2) * 28");
    assert_eq!(history.last().unwrap()["role"], "ROLE_AGENT");
    assert!(got.body["status"]["timestamp"]
        .as_str()
        .unwrap()
        .ends_with('Z'));
    // The turn API and the hub see it, under protocol a2a and its caller.
    let listed = s.hub.turns(
        &TurnFilter {
            protocol: Some("a2a".into()),
            ..Default::default()
        },
        10,
    );
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].requester, "caller:alice");
    assert_eq!(listed[0].id.as_str(), format!("a2a:{id}"));
}

#[tokio::test]
async fn a_failure_is_failed_with_its_message() {
    let s = setup().await;
    let task = s
        .send(
            &s.operator,
            "demo",
            json!({"message": message("fail boom")}),
        )
        .await;
    assert_eq!(state(&task), "TASK_STATE_FAILED");
    let said = &task["status"]["message"];
    assert!(
        said["parts"][0]["text"].as_str().unwrap().contains("boom"),
        "{said}"
    );
    assert!(said["metadata"]["code"].is_string());
}

#[tokio::test]
async fn a_message_sent_at_once_is_working_then_polled_to_its_end() {
    let s = setup().await;
    let task = s
        .send(
            &s.bob,
            "demo",
            json!({"message": message("sleep 300"), "configuration": {"returnImmediately": true}}),
        )
        .await;
    assert!(
        ["TASK_STATE_WORKING", "TASK_STATE_SUBMITTED"].contains(&state(&task)),
        "{task}"
    );
    let id = task["id"].as_str().unwrap().to_string();
    let mut last = Value::Null;
    for _ in 0..100 {
        last = s
            .rpc(&s.bob, "demo", "GetTask", json!({"id": id}))
            .await
            .body["result"]
            .clone();
        if state(&last) == "TASK_STATE_COMPLETED" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(state(&last), "TASK_STATE_COMPLETED");
    assert_eq!(artifact_text(&last), "slept 300 ms");
}

#[tokio::test]
async fn a_streamed_message_is_the_task_then_its_updates_to_the_end() {
    let s = setup().await;
    let body = json!({"message": message("hello there")});
    let (status, events) = s
        .stream(&s.alice, "/a2a/demo/message:stream", &body.to_string())
        .await;
    assert_eq!(status, 200);
    assert!(events[0]["task"]["id"].is_string(), "{}", events[0]);
    let streamed: String = events
        .iter()
        .filter_map(|e| e["artifactUpdate"]["artifact"]["parts"][0]["text"].as_str())
        .collect();
    assert_eq!(streamed, "You said: hello there");
    let chunks = events
        .iter()
        .filter(|e| e["artifactUpdate"].is_object())
        .count();
    assert!(chunks >= 2, "streamed as it came: {events:?}");
    let last = events.last().unwrap();
    assert_eq!(
        last["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    // The JSON-RPC binding streams the same, each event a response to the request's id.
    let rpc =
        json!({"jsonrpc": "2.0", "id": "s1", "method": "SendStreamingMessage", "params": body});
    let (_, events) = s.stream(&s.alice, "/a2a/demo", &rpc.to_string()).await;
    assert!(events
        .iter()
        .all(|e| e["id"] == "s1" && e["jsonrpc"] == "2.0"));
    assert!(events[0]["result"]["task"].is_object());
    assert_eq!(
        events.last().unwrap()["result"]["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
}

#[tokio::test]
async fn a_question_is_input_required_and_the_answer_continues_the_task() {
    let s = setup().await;
    let task = s
        .send(
            &s.alice,
            "demo",
            json!({"message": message("ask Which colour? | Red | Green")}),
        )
        .await;
    assert_eq!(state(&task), "TASK_STATE_INPUT_REQUIRED", "{task}");
    let asked = task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(
        asked.contains("Which colour?") && asked.contains("Green"),
        "{asked}"
    );
    let options = &task["status"]["message"]["parts"][1]["data"]["options"];
    assert_eq!(options[1]["label"], "Green");
    let (id, context) = (task["id"].clone(), task["contextId"].clone());
    let reply = |text: &str| {
        json!({"message": {"messageId": "m-2", "role": "ROLE_USER", "taskId": id,
            "contextId": context, "parts": [{"text": text}]}})
    };
    // A wrong answer is refused, naming the options; the question stays open.
    let wrong = s.rpc(&s.alice, "demo", "SendMessage", reply("Blue")).await;
    assert_eq!(rpc_code(&wrong), -32602);
    let why = wrong.body["error"]["message"].as_str().unwrap();
    assert!(why.contains("Red") && why.contains("Green"), "{why}");
    // An answer past the bound is refused before the engine, and not echoed back whole.
    let long = "g".repeat(agentwire_a2a_front::MAX_ANSWER_BYTES + 1);
    let too_long = s.rpc(&s.alice, "demo", "SendMessage", reply(&long)).await;
    assert_eq!(rpc_code(&too_long), -32602);
    let why = too_long.body["error"]["message"].as_str().unwrap();
    assert!(why.contains("at most") && why.len() < 1000, "{why}");
    // Another caller cannot answer it: the task is not theirs.
    let bob = s.rpc(&s.bob, "demo", "SendMessage", reply("green")).await;
    assert_eq!(rpc_code(&bob), -32001);
    let done = s.send(&s.alice, "demo", reply("green")).await;
    assert_eq!(state(&done), "TASK_STATE_COMPLETED", "{done}");
    assert_eq!(artifact_text(&done), "Green");
    // An ended task takes no more messages.
    let after = s.rpc(&s.alice, "demo", "SendMessage", reply("red")).await;
    assert_eq!(rpc_code(&after), -32004);
    // A taskId with another context is refused.
    let t2 = s
        .send(
            &s.alice,
            "demo",
            json!({"message": message("confirm Proceed?")}),
        )
        .await;
    let mismatch = json!({"message": {"messageId": "m-3", "role": "ROLE_USER", "taskId": t2["id"],
        "contextId": "another", "parts": [{"text": "yes"}]}});
    assert_eq!(
        rpc_code(&s.rpc(&s.alice, "demo", "SendMessage", mismatch).await),
        -32602
    );
    let yes = json!({"message": {"messageId": "m-4", "role": "ROLE_USER", "taskId": t2["id"],
        "parts": [{"text": "YES"}]}});
    let done = s.send(&s.alice, "demo", yes).await;
    assert_eq!(artifact_text(&done), "yes");
}

#[tokio::test]
async fn cancel_ends_a_task_once_and_a_finished_one_is_not_cancelable() {
    let s = setup().await;
    let task = s
        .send(
            &s.bob,
            "demo",
            json!({"message": message("sleep 60000"), "configuration": {"returnImmediately": true}}),
        )
        .await;
    let id = task["id"].as_str().unwrap();
    // Alice cannot cancel Bob's task: to her it does not exist.
    let a = answer(
        s.post(Some(&s.alice), &format!("/a2a/demo/tasks/{id}:cancel"), "")
            .await,
    )
    .await;
    assert_eq!(a.status, 404);
    assert_eq!(a.body["error"]["details"][0]["reason"], "TASK_NOT_FOUND");
    let c = answer(
        s.post(Some(&s.bob), &format!("/a2a/demo/tasks/{id}:cancel"), "")
            .await,
    )
    .await;
    assert_eq!(c.status, 200, "{}", c.body);
    assert_eq!(state(&c.body), "TASK_STATE_CANCELED");
    let again = s.rpc(&s.bob, "demo", "CancelTask", json!({"id": id})).await;
    assert_eq!(rpc_code(&again), -32002);
    let rest = answer(
        s.post(Some(&s.bob), &format!("/a2a/demo/tasks/{id}:cancel"), "{}")
            .await,
    )
    .await;
    assert_eq!(rest.status, 400);
    assert_eq!(
        rest.body["error"]["details"][0]["reason"],
        "TASK_NOT_CANCELABLE"
    );
}

#[tokio::test]
async fn two_subscribers_see_the_same_updates_to_the_end() {
    let s = setup().await;
    let task = s
        .send(
            &s.alice,
            "demo",
            json!({"message": message("sleep 600"), "configuration": {"returnImmediately": true}}),
        )
        .await;
    let id = task["id"].as_str().unwrap().to_string();
    let path = format!("/a2a/demo/tasks/{id}:subscribe");
    let path = path.as_str();
    let rpc = json!({"jsonrpc": "2.0", "id": 9, "method": "SubscribeToTask", "params": {"id": id}});
    let rpc = rpc.to_string();
    let (one, two) = tokio::join!(
        s.stream(&s.alice, path, ""),
        s.stream(&s.operator, "/a2a/demo", &rpc)
    );
    assert_eq!(one.0, 200);
    assert!(one.1[0]["task"]["id"] == id.as_str(), "the task first");
    assert!(two.1[0]["result"]["task"]["id"] == id.as_str());
    let end = |e: &Value| e["statusUpdate"]["status"]["state"].clone();
    assert_eq!(end(one.1.last().unwrap()), "TASK_STATE_COMPLETED");
    assert_eq!(
        end(&two.1.last().unwrap()["result"]),
        "TASK_STATE_COMPLETED"
    );
    let last_artifact = |events: Vec<Value>| {
        events
            .into_iter()
            .map(|e| match e.get("result") {
                Some(r) => r.clone(),
                None => e,
            })
            .filter(|e| e["artifactUpdate"]["lastChunk"] == true)
            .map(|e| e["artifactUpdate"]["artifact"]["parts"][0]["text"].clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(last_artifact(one.1), [json!("slept 600 ms")]);
    assert_eq!(last_artifact(two.1), [json!("slept 600 ms")]);
    // Bob may not subscribe to Alice's task; nobody may subscribe to a finished one.
    let (status, _) = s.stream(&s.bob, path, "").await;
    assert_eq!(status, 404);
    let finished = answer(s.post(Some(&s.alice), path, "").await).await;
    assert_eq!(finished.status, 400);
    assert_eq!(
        finished.body["error"]["details"][0]["reason"],
        "UNSUPPORTED_OPERATION"
    );
    let finished = s
        .rpc(&s.alice, "demo", "SubscribeToTask", json!({"id": id}))
        .await;
    assert_eq!(rpc_code(&finished), -32004);
}

#[tokio::test]
async fn each_caller_lists_its_own_tasks_and_the_operator_everyones() {
    let s = setup().await;
    let ctx = json!({"messageId": "m", "role": "ROLE_USER", "contextId": "shared-ctx",
        "parts": [{"text": "quick one"}]});
    let a1 = s.send(&s.alice, "demo", json!({"message": ctx})).await;
    let a2 = s
        .send(&s.alice, "demo", json!({"message": message("quick two")}))
        .await;
    let b1 = s.send(&s.bob, "demo", json!({"message": ctx})).await;
    let ids = |a: &Answer| -> Vec<String> {
        a.body["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_string())
            .collect()
    };
    let id = |t: &Value| t["id"].as_str().unwrap().to_string();
    let alice = s.get(Some(&s.alice), "/a2a/demo/tasks").await;
    assert_eq!(alice.status, 200, "{}", alice.body);
    assert_eq!(ids(&alice), [id(&a2), id(&a1)], "newest first, hers only");
    assert_eq!(alice.body["nextPageToken"], "");
    assert_eq!(alice.body["totalSize"], 2);
    assert!(alice.body["tasks"][0].get("artifacts").is_none());
    let bob = s.rpc(&s.bob, "demo", "ListTasks", json!({})).await;
    let bob_ids: Vec<&str> = bob.body["result"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(bob_ids, [id(&b1)]);
    let all = s.get(Some(&s.operator), "/a2a/demo/tasks?pageSize=2").await;
    assert_eq!(ids(&all), [id(&b1), id(&a2)]);
    let token = all.body["nextPageToken"].as_str().unwrap().to_string();
    assert!(!token.is_empty());
    let next = s
        .get(
            Some(&s.operator),
            &format!("/a2a/demo/tasks?pageSize=2&pageToken={token}"),
        )
        .await;
    assert_eq!(ids(&next), [id(&a1)]);
    assert_eq!(next.body["nextPageToken"], "");
    // The same context id is each caller's own.
    let ctx_alice = s
        .get(
            Some(&s.alice),
            "/a2a/demo/tasks?contextId=shared-ctx&includeArtifacts=true",
        )
        .await;
    assert_eq!(ids(&ctx_alice), [id(&a1)]);
    assert_eq!(artifact_text(&ctx_alice.body["tasks"][0]), "one");
    let done = s
        .get(
            Some(&s.operator),
            "/a2a/demo/tasks?status=TASK_STATE_WORKING",
        )
        .await;
    assert_eq!(ids(&done), Vec::<String>::new());
    // Bob cannot read Alice's task.
    let got = s
        .get(Some(&s.bob), &format!("/a2a/demo/tasks/{}", id(&a1)))
        .await;
    assert_eq!(got.status, 404);
    let bad = s.get(Some(&s.alice), "/a2a/demo/tasks?pageSize=101").await;
    assert_eq!(bad.status, 400);
}

#[tokio::test]
async fn a_context_carries_its_earlier_turns_and_a_new_one_none() {
    let s = setup().await;
    let first = s
        .send(&s.alice, "recall", json!({"message": message("one")}))
        .await;
    assert_eq!(artifact_text(&first), "[] one");
    let ctx = first["contextId"].clone();
    let second = s
        .send(
            &s.alice,
            "recall",
            json!({"message": {"messageId": "m2", "role": "ROLE_USER", "contextId": ctx,
                "parts": [{"text": "two"}]}}),
        )
        .await;
    assert_eq!(artifact_text(&second), "[one=>[] one] two");
    assert_eq!(second["contextId"], ctx);
    let fresh = s
        .send(&s.alice, "recall", json!({"message": message("three")}))
        .await;
    assert_eq!(artifact_text(&fresh), "[] three");
    // Bob may not call recall at all.
    let r = s
        .rpc(
            &s.bob,
            "recall",
            "SendMessage",
            json!({"message": message("x")}),
        )
        .await;
    assert_eq!(rpc_code(&r), -32601);
}

#[tokio::test]
async fn bad_requests_get_the_specs_errors() {
    let s = setup().await;
    for (body, code) in [
        ("{not json", -32700),
        ("[]", -32600),
        (r#"{"jsonrpc":"1.0","id":1,"method":"GetTask"}"#, -32600),
        (r#"{"jsonrpc":"2.0","method":"GetTask"}"#, -32600),
        (r#"{"jsonrpc":"2.0","id":1,"method":"Nope"}"#, -32601),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":[1]}"#,
            -32602,
        ),
    ] {
        let a = answer(s.post(Some(&s.operator), "/a2a/demo", body).await).await;
        assert_eq!(a.status, 200, "{body}");
        assert_eq!(rpc_code(&a), code, "{body}: {}", a.body);
    }
    let bad = s
        .rpc(
            &s.operator,
            "demo",
            "SendMessage",
            json!({"message": {"role": "ROLE_USER"}}),
        )
        .await;
    assert_eq!(rpc_code(&bad), -32602);
    let file = s
        .rpc(
            &s.operator,
            "demo",
            "SendMessage",
            json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"url": "https://x/y.png"}]}}),
        )
        .await;
    assert_eq!(rpc_code(&file), -32005);
    let missing = s
        .rpc(
            &s.operator,
            "demo",
            "GetTask",
            json!({"id": "no-such-task"}),
        )
        .await;
    assert_eq!(rpc_code(&missing), -32001);
    assert_eq!(missing.body["error"]["data"][0]["reason"], "TASK_NOT_FOUND");
    for m in [
        "CreateTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
    ] {
        assert_eq!(
            rpc_code(&s.rpc(&s.operator, "demo", m, json!({"taskId": "x"})).await),
            -32003
        );
    }
    assert_eq!(
        rpc_code(
            &s.rpc(&s.operator, "demo", "GetExtendedAgentCard", json!({}))
                .await
        ),
        -32004
    );
    // Versions: 0.3 refused on both bindings; none served as 1.0.
    let old = s
        .http
        .post(format!("{}/a2a/demo", s.base))
        .bearer_auth(&s.operator)
        .header("content-type", "application/json")
        .header("A2A-Version", "0.3")
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(rpc_code(&answer(old).await), -32009);
    let old = s
        .http
        .get(format!("{}/a2a/demo/tasks", s.base))
        .bearer_auth(&s.operator)
        .header("A2A-Version", "0.3")
        .send()
        .await
        .unwrap();
    let old = answer(old).await;
    assert_eq!(old.status, 400);
    assert_eq!(
        old.body["error"]["details"][0]["reason"],
        "VERSION_NOT_SUPPORTED"
    );
    let none = s.rpc(&s.operator, "demo", "ListTasks", json!({})).await;
    assert!(
        none.body["result"]["tasks"].is_array(),
        "no A2A-Version: served as 1.0"
    );
    let rest404 = s
        .get(Some(&s.operator), "/a2a/demo/tasks/no-such-task")
        .await;
    assert_eq!(rest404.status, 404);
    assert_eq!(rest404.body["error"]["status"], "NOT_FOUND");
    let push = s
        .get(
            Some(&s.operator),
            "/a2a/demo/tasks/x/pushNotificationConfigs",
        )
        .await;
    assert_eq!(
        push.body["error"]["details"][0]["reason"],
        "PUSH_NOTIFICATION_NOT_SUPPORTED"
    );
}

#[tokio::test]
async fn a_task_takes_a_bounded_number_of_subscribers() {
    let s = setup().await;
    let task = s
        .send(
            &s.alice,
            "demo",
            json!({"message": message("sleep 60000"), "configuration": {"returnImmediately": true}}),
        )
        .await;
    let id = task["id"].as_str().unwrap();
    let path = format!("/a2a/demo/tasks/{id}:subscribe");
    // Streams held open (their headers are in; their bodies run until the task ends).
    let mut open = Vec::new();
    for _ in 0..agentwire_a2a_front::MAX_SUBSCRIBERS_PER_TASK {
        let r = s.post(Some(&s.alice), &path, "").await;
        assert_eq!(r.status().as_u16(), 200);
        open.push(r);
    }
    let over = answer(s.post(Some(&s.alice), &path, "").await).await;
    assert_eq!(over.status, 503, "{}", over.body);
    assert!(over.headers.contains_key("retry-after"));
    // One let go makes room for another.
    drop(open.pop());
    let mut room = false;
    for _ in 0..50 {
        let r = s.post(Some(&s.alice), &path, "").await;
        if r.status().as_u16() == 200 {
            room = true;
            open.push(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(room, "a closed subscriber's place is given back");
    let c = s
        .rpc(&s.alice, "demo", "CancelTask", json!({"id": id}))
        .await;
    assert_eq!(state(&c.body["result"]), "TASK_STATE_CANCELED");
    for r in open {
        let text = r.text().await.unwrap();
        assert!(
            text.contains("TASK_STATE_CANCELED"),
            "every subscriber sees the end"
        );
    }
}
