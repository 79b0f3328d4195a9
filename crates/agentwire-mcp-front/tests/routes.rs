//! The MCP front over real HTTP: a real engine on a SQLite journal running the demo agent (under two
//! names), the daemon's HTTP server on a loopback port with the front's route, and MCP's streamable HTTP
//! spoken by hand as a client sends it (JSON-RPC in POSTs, answers read off server-sent events): tools per
//! caller, sessions bound to their caller and bounded, a call's progress and result, a question asked
//! again after an answer that does not fit, a closed stream cancelling its turn, and the 401.

use agentwire_agents::DemoAgent;
use agentwire_core::Outcome;
use agentwire_engine::{Engine, TurnFilter, TurnState, WatchHub};
use agentwire_http::callers::{caller_token, CallerGrant, CallerToken};
use agentwire_http::front::{ExposedAgent, FrontContext, FrontKind};
use agentwire_http::{HttpConfig, HttpContext, HttpServer, Token};
use agentwire_mcp_front::routes::{MAX_SESSIONS, MAX_SESSIONS_PER_CALLER};
use agentwire_mcp_front::McpFront;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// How long a test waits for one event of a stream.
const EVENT_WAIT: Duration = Duration::from_secs(10);

struct Setup {
    url: String,
    operator: String,
    /// May call `echo` only.
    alice: String,
    /// May call `demo` only.
    bob: String,
    http: reqwest::Client,
    hub: Arc<WatchHub>,
    server: HttpServer,
    _dir: tempfile::TempDir,
}

async fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let journal: Arc<dyn agentwire_store::Journal> =
        Arc::new(agentwire_store::SqliteJournal::open(&dir.path().join("journal.db")).unwrap());
    let hub = WatchHub::new();
    let demo = Engine::with_hub(journal, Arc::new(DemoAgent), "local", hub.clone());
    let exposed = |name: &str| ExposedAgent {
        name: name.into(),
        engine: demo.clone(),
        default: name == "demo",
    };
    let plan = McpFront.configure(None).unwrap();
    let started = plan
        .start(FrontContext {
            // `echo` is the demo agent under a second name.
            agents: vec![exposed("demo"), exposed("echo")],
            hub: hub.clone(),
        })
        .await
        .unwrap();
    assert_eq!(started.front.protocol(), "mcp");
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
            engines: agentwire_engine::Engines::new(vec![demo]),
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
        url: format!("{}/mcp", server.url()),
        operator: operator.reveal().to_string(),
        alice,
        bob,
        http: agentwire_agents::openai::http_client(Duration::from_secs(30)).unwrap(),
        hub,
        server,
        _dir: dir,
    }
}

/// A response's server-sent events, read one at a time.
struct Events {
    r: reqwest::Response,
    buf: String,
}

impl Events {
    /// The next event's JSON-RPC message (`None` when the stream ended).
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let event: String = self.buf.drain(..end + 2).collect();
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim)
                    .collect();
                if data.is_empty() || data.iter().all(|d| d.is_empty()) {
                    continue; // a comment, a priming event
                }
                return Some(serde_json::from_str(&data.join("\n")).unwrap());
            }
            let chunk = tokio::time::timeout(EVENT_WAIT, self.r.chunk())
                .await
                .expect("an event in time")
                .unwrap()?;
            self.buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

/// A session, as a client holds one.
struct Client<'a> {
    s: &'a Setup,
    token: String,
    session: String,
}

impl Setup {
    async fn post(
        &self,
        token: Option<&str>,
        session: Option<&str>,
        body: Value,
    ) -> reqwest::Response {
        let mut r = self
            .http
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        if let Some(id) = session {
            r = r
                .header("mcp-session-id", id)
                .header("mcp-protocol-version", "2025-06-18");
        }
        r.send().await.unwrap()
    }

    /// A session opened by `token`'s caller (declaring elicitation when `elicitation`).
    async fn client(&self, token: &str, elicitation: bool) -> Client<'_> {
        let capabilities = match elicitation {
            true => json!({"elicitation": {}}),
            false => json!({}),
        };
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": capabilities,
            "clientInfo": {"name": "routes-test", "version": "1"}}});
        let r = self.post(Some(token), None, init).await;
        assert_eq!(r.status().as_u16(), 200);
        let session = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
        let answer = events(r).next().await.unwrap();
        assert_eq!(
            answer["result"]["serverInfo"]["name"], "agentwire",
            "{answer}"
        );
        let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let r = self.post(Some(token), Some(&session), done).await;
        assert_eq!(r.status().as_u16(), 202);
        Client {
            s: self,
            token: token.to_string(),
            session,
        }
    }

    /// The outcome of the `mcp` turn asked `prompt`, once it ended.
    async fn ended(&self, prompt: &str) -> Outcome {
        let filter = TurnFilter {
            protocol: Some("mcp".into()),
            ..Default::default()
        };
        for _ in 0..200 {
            let turns = self.hub.turns(&filter, 100);
            if let Some(t) = turns.iter().find(|t| t.prompt == prompt) {
                if t.state == TurnState::Ended {
                    return t.outcome.clone().expect("an ended turn's outcome");
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the turn {prompt:?} did not end");
    }
}

fn events(r: reqwest::Response) -> Events {
    Events {
        r,
        buf: String::new(),
    }
}

impl Client<'_> {
    /// Sends request `method` (id `id`) and returns its stream.
    async fn request(&self, id: u64, method: &str, params: Value) -> Events {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let r = self
            .s
            .post(Some(&self.token), Some(&self.session), body)
            .await;
        assert_eq!(r.status().as_u16(), 200, "{method}");
        events(r)
    }

    /// The answer to request `method`.
    async fn call(&self, id: u64, method: &str, params: Value) -> Value {
        let mut e = self.request(id, method, params).await;
        loop {
            let m = e.next().await.expect("an answer");
            if m.get("id") == Some(&json!(id)) {
                return m;
            }
        }
    }

    async fn tools(&self) -> Vec<String> {
        let r = self.call(1, "tools/list", json!({})).await;
        let mut names: Vec<String> = r["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect();
        names.sort();
        names
    }

    /// Answers the client's side of server request `id` with `result`.
    async fn answer(&self, id: &Value, result: Value) {
        let body = json!({"jsonrpc": "2.0", "id": id, "result": result});
        let r = self
            .s
            .post(Some(&self.token), Some(&self.session), body)
            .await;
        assert_eq!(r.status().as_u16(), 202);
    }
}

#[tokio::test]
async fn each_caller_sees_its_own_tools_and_sessions() {
    let s = setup().await;
    let alice = s.client(&s.alice, false).await;
    let bob = s.client(&s.bob, false).await;
    let operator = s.client(&s.operator, false).await;
    assert_eq!(alice.tools().await, ["ask_echo"]);
    assert_eq!(bob.tools().await, ["ask_demo"]);
    assert_eq!(operator.tools().await, ["ask_demo", "ask_echo"]);
    // A tool the caller may not call is unknown to it.
    let r = alice
        .call(
            2,
            "tools/call",
            json!({"name": "ask_demo", "arguments": {"prompt": "hi"}}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown tool"),
        "{r}"
    );
    // Another caller's session does not exist for bob.
    let list = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"});
    let r = s
        .post(Some(&s.bob), Some(&alice.session), list.clone())
        .await;
    assert_eq!(r.status().as_u16(), 404);
    let r = s.post(Some(&s.alice), Some(&alice.session), list).await;
    assert_eq!(r.status().as_u16(), 200);
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_call_is_a_turn_with_progress_and_its_answer() {
    let s = setup().await;
    let bob = s.client(&s.bob, false).await;
    let mut e = bob
        .request(
            7,
            "tools/call",
            json!({"name": "ask_demo", "arguments": {"prompt": "calc (1 + 2) * 28"},
                   "_meta": {"progressToken": "p7"}}),
        )
        .await;
    let mut progress = Vec::new();
    let result = loop {
        let m = e.next().await.expect("the result");
        if m["method"] == "notifications/progress" {
            assert_eq!(m["params"]["progressToken"], "p7");
            progress.push((
                m["params"]["progress"].as_f64().unwrap(),
                m["params"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            ));
        } else if m["id"] == 7 {
            break m;
        }
    };
    assert_eq!(result["result"]["isError"], false, "{result}");
    assert!(result["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("84"));
    assert!(progress.len() >= 2, "{progress:?}");
    let counters: Vec<f64> = progress.iter().map(|p| p.0).collect();
    assert!(counters.windows(2).all(|w| w[0] < w[1]), "{counters:?}");
    assert!(
        progress.iter().any(|p| p.1.contains("calculator")),
        "{progress:?}"
    );
    // Journaled under the caller.
    let filter = TurnFilter {
        protocol: Some("mcp".into()),
        requester: Some("caller:bob".into()),
        ..Default::default()
    };
    assert_eq!(s.hub.turns(&filter, 10).len(), 1);
    // Arguments that cannot be taken are the tool's error.
    let r = bob
        .call(
            8,
            "tools/call",
            json!({"name": "ask_demo", "arguments": {"prompt": ""}}),
        )
        .await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(r["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("empty"));
    s.server.shutdown().await;
}

#[tokio::test]
async fn an_answer_that_does_not_fit_is_asked_again() {
    let s = setup().await;
    let bob = s.client(&s.bob, true).await;
    let mut e = bob
        .request(
            4,
            "tools/call",
            json!({"name": "ask_demo", "arguments": {"prompt": "ask Which? | red | blue"}}),
        )
        .await;
    let mut asked = Vec::new();
    let result = loop {
        let m = e.next().await.expect("the result");
        if m["method"] == "elicitation/create" {
            asked.push(m["params"]["message"].as_str().unwrap().to_string());
            let choice = if asked.len() == 1 { "green" } else { "red" };
            bob.answer(
                &m["id"],
                json!({"action": "accept", "content": {"choice": choice}}),
            )
            .await;
        } else if m["id"] == 4 {
            break m;
        }
    };
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert_eq!(asked[0], "Which?");
    assert!(asked[1].contains("could not be taken"), "{asked:?}");
    assert_eq!(result["result"]["content"][0]["text"], "red", "{result}");
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_closed_stream_cancels_its_turn() {
    let s = setup().await;
    let bob = s.client(&s.bob, false).await;
    let mut e = bob
        .request(
            5,
            "tools/call",
            json!({"name": "ask_demo", "arguments": {"prompt": "sleep 30000"},
                   "_meta": {"progressToken": 1}}),
        )
        .await;
    let first = e.next().await.unwrap();
    assert_eq!(first["method"], "notifications/progress", "{first}");
    drop(e);
    let outcome = s.ended("sleep 30000").await;
    assert!(outcome.is_cancelled(), "{outcome:?}");
    s.server.shutdown().await;
}

#[tokio::test]
async fn cancelled_notification_cancels_the_turn() {
    let s = setup().await;
    let bob = s.client(&s.bob, false).await;
    let mut e = bob
        .request(
            6,
            "tools/call",
            json!({"name": "ask_demo", "arguments": {"prompt": "sleep 30001"},
                   "_meta": {"progressToken": 1}}),
        )
        .await;
    e.next().await.unwrap();
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": 6, "reason": "enough"}});
    let r = s.post(Some(&s.bob), Some(&bob.session), cancel).await;
    assert_eq!(r.status().as_u16(), 202);
    let outcome = s.ended("sleep 30001").await;
    assert!(outcome.is_cancelled(), "{outcome:?}");
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_request_without_a_token_gets_a_json_rpc_401() {
    let s = setup().await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    for token in [None, Some("c".repeat(40))] {
        let r = s.post(token.as_deref(), None, ping.clone()).await;
        assert_eq!(r.status().as_u16(), 401);
        assert_eq!(r.headers()["www-authenticate"], "Bearer");
        let body: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
        assert_eq!(body["jsonrpc"], "2.0");
        assert_eq!(body["error"]["code"], -32001);
        assert!(body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("bearer token"));
    }
    s.server.shutdown().await;
}

#[tokio::test]
async fn sessions_are_bounded_for_each_caller_and_in_all_and_an_ended_one_frees_its_place() {
    let s = setup().await;
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "one-too-many", "version": "1"}}});
    // One caller holds at most its share, opened ten at once (fewer connections at once than the
    // server's places for connections that have not yet shown a token).
    let mut opened = Vec::new();
    for _ in 0..(MAX_SESSIONS_PER_CALLER + 8) / 10 {
        opened.extend(
            futures_util::future::join_all(
                (0..10).map(|_| s.post(Some(&s.bob), None, init.clone())),
            )
            .await,
        );
    }
    let taken: Vec<String> = opened
        .iter()
        .filter(|r| r.status().as_u16() == 200)
        .filter_map(|r| r.headers().get("mcp-session-id"))
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    assert_eq!(
        taken.len(),
        MAX_SESSIONS_PER_CALLER,
        "bob's share, even opened at once"
    );
    let r = s.post(Some(&s.bob), None, init.clone()).await;
    assert_eq!(r.status().as_u16(), 503);
    assert!(r.text().await.unwrap().contains("this caller has"));
    // Another caller is not kept out by him.
    let r = s.post(Some(&s.alice), None, init.clone()).await;
    assert_eq!(r.status().as_u16(), 200);
    // The operator is held to the bound in all.
    let mut open = Vec::new();
    for _ in 0..MAX_SESSIONS - MAX_SESSIONS_PER_CALLER - 1 {
        open.push(s.client(&s.operator, false).await);
    }
    let r = s.post(Some(&s.operator), None, init.clone()).await;
    assert_eq!(r.status().as_u16(), 503);
    assert!(r.headers().contains_key("retry-after"));
    let one = open.pop().unwrap();
    let r = s
        .http
        .delete(&s.url)
        .bearer_auth(&s.operator)
        .header("mcp-session-id", &one.session)
        .header("mcp-protocol-version", "2025-06-18")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 204);
    let r = s.post(Some(&s.operator), None, init).await;
    assert_eq!(r.status().as_u16(), 200);
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_question_answered_wrong_too_often_is_closed_unanswered() {
    let s = setup().await;
    let bob = s.client(&s.bob, true).await;
    let mut e = bob
        .request(
            4,
            "tools/call",
            json!({"name": "ask_demo", "arguments": {"prompt": "ask Which? | red | blue"}}),
        )
        .await;
    let mut asks = 0;
    let result = loop {
        let m = e.next().await.expect("the result");
        if m["method"] == "elicitation/create" {
            asks += 1;
            bob.answer(
                &m["id"],
                json!({"action": "accept", "content": {"choice": "green"}}),
            )
            .await;
        } else if m["id"] == 4 {
            break m;
        }
    };
    assert_eq!(asks, agentwire_mcp_front::handler::MAX_ASKS);
    // The agent heard nobody answered: the demo parks its turn, waiting for an answer.
    assert_eq!(result["result"]["isError"], true, "{result}");
    assert!(
        result["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("deferred"),
        "{result}"
    );
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_session_runs_a_bounded_number_of_calls_at_once() {
    let s = setup().await;
    // The operator's session: a caller meets its share of the agent's turns
    // (`MAX_LIVE_TURNS_PER_CALLER`, fewer) first.
    let bob = s.client(&s.operator, false).await;
    let max = agentwire_mcp_front::handler::MAX_CALLS_PER_SESSION;
    let mut running = Vec::new();
    for i in 0..max {
        let mut e = bob
            .request(
                100 + i as u64,
                "tools/call",
                json!({"name": "ask_demo", "arguments": {"prompt": format!("sleep {}", 20000 + i)},
                       "_meta": {"progressToken": i}}),
            )
            .await;
        // Running: its first progress came.
        e.next().await.unwrap();
        running.push(e);
    }
    let r = bob
        .call(
            99,
            "tools/call",
            json!({"name": "ask_demo", "arguments": {"prompt": "calc 1 + 1"}}),
        )
        .await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(
        r["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains(&format!("already runs {max} calls")),
        "{r}"
    );
    // One ended (its stream closed) frees a place, once its handler is done.
    drop(running.pop());
    s.ended(&format!("sleep {}", 20000 + max - 1)).await;
    let mut freed = false;
    for id in 0..50u64 {
        let r = bob
            .call(
                200 + id,
                "tools/call",
                json!({"name": "ask_demo", "arguments": {"prompt": "calc 1 + 1"}}),
            )
            .await;
        if r["result"]["isError"] == false {
            freed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(freed, "a place is free again");
    s.server.shutdown().await;
}
