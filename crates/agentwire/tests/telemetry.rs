//! Traces over OTLP/HTTP (`[telemetry]`), end to end: the real daemon serves a model agent (a fake
//! OpenAI-compatible server over real HTTP, a built-in tool and an MCP server's) over fisk-ai on a real
//! nats-server, and a test OTLP/HTTP receiver gets the turn's spans (`invoke_agent`, `chat`, `execute_tool`)
//! with the GenAI attributes, parented under the caller's `traceparent`; the model call and the MCP call carry
//! the trace on; the fisk-ai terminal's `trace_id` is that trace. Without an endpoint, no trace id and the
//! discovery card says `telemetry: false`; a collector that is down costs a turn nothing; the prompt and the
//! answer go into a span only with `content = true`.

mod common;

use agentwire_fisk::client::{new_request, Caller, PromptCall, Received, Reply};
use agentwire_testkit::fake_openai::{text_chunks, tool_call_chunks, FakeOpenAi, Scripted};
use agentwire_testkit::NatsServer;
use common::Daemon;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The caller's trace: its id and the span the worker's turn is a child of.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN: &str = "00f067aa0ba902b7";
/// What the prompt says: no span may carry it (`content = false`).
const PROMPT: &str = "secret words of the prompt";

/// A test OTLP/HTTP receiver: every span posted to `/v1/traces`, decoded.
struct Receiver {
    url: String,
    spans: Arc<Mutex<Vec<Span>>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
        let kept = spans.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let kept = kept.clone();
                async move {
                    let req = ExportTraceServiceRequest::decode(body).expect("an OTLP export");
                    let mut k = kept.lock().unwrap();
                    for rs in req.resource_spans {
                        for ss in rs.scope_spans {
                            k.extend(ss.spans);
                        }
                    }
                    (
                        [("content-type", "application/x-protobuf")],
                        Vec::<u8>::new(),
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { url, spans }
    }

    /// The spans received once `n` have arrived (within 20 s).
    async fn wait_for(&self, n: usize) -> Vec<Span> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let got = self.spans.lock().unwrap().clone();
            if got.len() >= n || Instant::now() > deadline {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a Any> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn str_attr<'a>(span: &'a Span, key: &str) -> &'a str {
    match attr(span, key) {
        Some(Any::StringValue(s)) => s,
        other => panic!("{}: {key} is {other:?}", span.name),
    }
}

fn int_attr(span: &Span, key: &str) -> i64 {
    match attr(span, key) {
        Some(Any::IntValue(i)) => *i,
        other => panic!("{}: {key} is {other:?}", span.name),
    }
}

fn strs_attr(span: &Span, key: &str) -> Vec<String> {
    match attr(span, key) {
        Some(Any::ArrayValue(a)) => a
            .values
            .iter()
            .filter_map(|v| match &v.value {
                Some(Any::StringValue(s)) => Some(s.clone()),
                _ => None,
            })
            .collect(),
        other => panic!("{}: {key} is {other:?}", span.name),
    }
}

fn stream(chunks: Vec<String>) -> Scripted {
    Scripted::Stream {
        chunks,
        gap: Duration::from_millis(2),
    }
}

fn no_operator() -> agentwire_fisk::client::Answerer {
    Box::new(|_| Box::pin(async { Reply::NoOperator }))
}

/// Prompts `identity` once and returns the reply set's terminal (`result` or `error`).
async fn ask(caller: &Caller, identity: &str, prompt: &str) -> Received {
    let request = new_request();
    let set = caller
        .prompt(
            PromptCall {
                identity,
                request: &request,
                prompt,
                token: None,
                timeout: Duration::from_secs(30),
            },
            |_| {},
            no_operator(),
        )
        .await
        .expect("a reply set");
    set.into_iter()
        .rev()
        .find(|m| matches!(m.kind(), "result" | "error"))
        .expect("a terminal")
}

fn mcp_python() -> (std::path::PathBuf, std::path::PathBuf) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = root.join("target/tools/venv/bin/python");
    assert!(
        python.exists(),
        "run ./scripts/test.sh: it installs the MCP Python SDK"
    );
    let script = root.join("crates/agentwire-agents/tests/mcp/mcp_server.py");
    (python, script)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_turn_with_tools_is_traced_under_the_fisk_callers_trace() {
    let receiver = Receiver::start().await;
    let fake = FakeOpenAi::start();
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (python, script) = mcp_python();
    let config = dir.path().join("agentwire.toml");
    std::fs::write(
        &config,
        format!(
            "[agents.local]\nkind = \"openai\"\nbase_url = \"{}\"\nmodels = [\"llama3.2\"]\ntools = [\"calculator\"]\n\
             [[agents.local.mcp]]\nname = \"notes\"\ncommand = [{:?}, {:?}]\n\
             [telemetry]\notlp_endpoint = \"{}\"\n",
            fake.base_url,
            python.to_str().unwrap(),
            script.to_str().unwrap(),
            receiver.url,
        ),
    )
    .unwrap();
    let _d = Daemon::start_with_env(
        &dir.path().join("data"),
        &[
            "--config",
            config.to_str().unwrap(),
            "--agent",
            "local",
            "--nats",
            &nats.url,
            "--identity",
            "local",
        ],
        // Batches leave at once rather than every 5 s.
        &[("OTEL_BSP_SCHEDULE_DELAY", "50")],
    );
    // Round one: the built-in calculator; two: the MCP server's traceparent tool; three: a tool that
    // fails; then the answer.
    fake.push(stream(tool_call_chunks(
        "c1",
        "calculator",
        &[r#"{"expression":"2+3"}"#],
    )));
    fake.push(stream(tool_call_chunks(
        "c2",
        "notes__traceparent",
        &["{}"],
    )));
    fake.push(stream(tool_call_chunks(
        "c3",
        "notes__refuse",
        &[r#"{"reason":"no"}"#],
    )));
    fake.push(stream(text_chunks(&["Five."], (7, 3))));

    let caller = Caller::connect(&nats.url, "tester")
        .await
        .unwrap()
        .with_traceparent(format!("00-{TRACE_ID}-{PARENT_SPAN}-01"));
    let card = caller.discover("local").await.unwrap();
    assert_eq!(card["telemetry"], true, "{card}");
    assert!(
        card.get("telemetry_content").is_none() || card["telemetry_content"] == false,
        "{card}"
    );

    let terminal = ask(&caller, "local", PROMPT).await;
    assert_eq!(terminal.kind(), "result", "{}", terminal.json);
    assert_eq!(terminal.json["text"], "Five.");
    assert_eq!(
        terminal.json["trace_id"], TRACE_ID,
        "the terminal names the caller's trace: {}",
        terminal.json
    );
    assert!(
        terminal.json.get("content_exported").is_none()
            || terminal.json["content_exported"] == false,
        "{}",
        terminal.json
    );

    // invoke_agent, four chat spans, three execute_tool spans.
    let spans = receiver.wait_for(8).await;
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    let named = |name: &str| -> Vec<&Span> { spans.iter().filter(|s| s.name == name).collect() };
    let turn = named("invoke_agent local");
    assert_eq!(turn.len(), 1, "{names:?}");
    let turn = turn[0];
    let chats = named("chat llama3.2");
    assert_eq!(chats.len(), 4, "{names:?}");
    let calculator = named("execute_tool calculator");
    let mcp = named("execute_tool notes__traceparent");
    let refused = named("execute_tool notes__refuse");
    assert_eq!(
        (calculator.len(), mcp.len(), refused.len()),
        (1, 1, 1),
        "{names:?}"
    );
    for s in &spans {
        assert_eq!(
            hex(&s.trace_id),
            TRACE_ID,
            "{} is in the caller's trace",
            s.name
        );
        // Nothing of the conversation without `content = true`.
        for kv in &s.attributes {
            let v = format!("{:?}", kv.value);
            assert!(!v.contains("secret words"), "{}: {} = {v}", s.name, kv.key);
        }
        assert!(attr(s, "gen_ai.input.messages").is_none());
        assert!(attr(s, "gen_ai.output.messages").is_none());
        assert!(attr(s, "gen_ai.tool.call.arguments").is_none());
    }

    // The turn: under the caller's span, with the GenAI attributes and the whole turn's usage.
    assert_eq!(hex(&turn.parent_span_id), PARENT_SPAN);
    assert_eq!(str_attr(turn, "gen_ai.operation.name"), "invoke_agent");
    assert_eq!(str_attr(turn, "gen_ai.agent.name"), "local");
    assert_eq!(str_attr(turn, "gen_ai.request.model"), "llama3.2");
    assert_eq!(str_attr(turn, "agentwire.protocol"), "fisk");
    assert!(!str_attr(turn, "gen_ai.conversation.id").is_empty());
    assert_eq!(int_attr(turn, "gen_ai.usage.input_tokens"), 7);
    assert_eq!(int_attr(turn, "gen_ai.usage.output_tokens"), 3);
    assert_eq!(strs_attr(turn, "gen_ai.response.finish_reasons"), ["stop"]);
    assert!(attr(turn, "error.type").is_none());

    // Each model call and tool call: a child of the turn's span.
    let turn_id = hex(&turn.span_id);
    for s in chats.iter().chain(&calculator).chain(&mcp).chain(&refused) {
        assert_eq!(
            hex(&s.parent_span_id),
            turn_id,
            "{} is the turn's child",
            s.name
        );
    }
    for c in &chats {
        assert_eq!(str_attr(c, "gen_ai.operation.name"), "chat");
        assert_eq!(str_attr(c, "gen_ai.request.model"), "llama3.2");
    }
    let mut reasons: Vec<String> = chats
        .iter()
        .flat_map(|c| strs_attr(c, "gen_ai.response.finish_reasons"))
        .collect();
    reasons.sort();
    assert_eq!(reasons, ["stop", "tool_calls", "tool_calls", "tool_calls"]);
    assert_eq!(
        str_attr(calculator[0], "gen_ai.operation.name"),
        "execute_tool"
    );
    assert_eq!(str_attr(calculator[0], "gen_ai.tool.name"), "calculator");
    assert_eq!(str_attr(calculator[0], "gen_ai.tool.call.id"), "c1");
    assert!(attr(calculator[0], "error.type").is_none());
    assert_eq!(str_attr(refused[0], "error.type"), "tool_error");

    // The model server was told each call's span, and the MCP server its tool call's (in `_meta`).
    let received = fake.received();
    assert_eq!(received.len(), 4);
    let mut chat_ids: Vec<String> = chats.iter().map(|c| hex(&c.span_id)).collect();
    let mut told: Vec<String> = received
        .iter()
        .map(|r| {
            let tp = r
                .traceparent
                .clone()
                .expect("a traceparent on the model call");
            assert!(tp.starts_with(&format!("00-{TRACE_ID}-")), "{tp}");
            tp[36..52].to_string()
        })
        .collect();
    chat_ids.sort();
    told.sort();
    assert_eq!(told, chat_ids, "each model call names its chat span");
    let tool_result = received[2].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .expect("the MCP tool's result")["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        tool_result.contains(&format!("00-{TRACE_ID}-{}-01", hex(&mcp[0].span_id))),
        "the MCP call's _meta named its execute_tool span: {tool_result}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_endpoint_there_is_no_trace_and_the_card_says_so() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let _d = Daemon::start_with_env(
        &dir.path().join("data"),
        &["--nats", &nats.url, "--identity", "plain"],
        // An empty variable is no endpoint.
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", "")],
    );
    let caller = Caller::connect(&nats.url, "tester")
        .await
        .unwrap()
        .with_traceparent(format!("00-{TRACE_ID}-{PARENT_SPAN}-01"));
    let card = caller.discover("plain").await.unwrap();
    assert!(
        card.get("telemetry").is_none() || card["telemetry"] == false,
        "{card}"
    );
    assert!(
        card.get("telemetry_content").is_none() || card["telemetry_content"] == false,
        "{card}"
    );
    let terminal = ask(&caller, "plain", "hello").await;
    assert_eq!(terminal.kind(), "result", "{}", terminal.json);
    assert_eq!(
        terminal.json["trace_id"].as_str().unwrap_or(""),
        "",
        "no trace id without an export, even with the caller's: {}",
        terminal.json
    );
    assert!(
        terminal.json.get("content_exported").is_none()
            || terminal.json["content_exported"] == false
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_costs_a_turn_nothing() {
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agentwire.toml");
    std::fs::write(
        &config,
        format!("[telemetry]\notlp_endpoint = \"http://127.0.0.1:{port}\"\ncontent = true\n"),
    )
    .unwrap();
    let _d = Daemon::start_with_env(
        &dir.path().join("data"),
        &[
            "--config",
            config.to_str().unwrap(),
            "--nats",
            &nats.url,
            "--identity",
            "down",
        ],
        &[("OTEL_BSP_SCHEDULE_DELAY", "10")],
    );
    let caller = Caller::connect(&nats.url, "tester").await.unwrap();
    let card = caller.discover("down").await.unwrap();
    assert_eq!(card["telemetry"], true, "{card}");
    assert_eq!(card["telemetry_content"], true, "{card}");
    let started = Instant::now();
    for n in 0..3 {
        let terminal = ask(&caller, "down", &format!("turn {n}")).await;
        assert_eq!(terminal.kind(), "result", "{}", terminal.json);
        let id = terminal.json["trace_id"].as_str().unwrap_or("");
        assert_eq!(id.len(), 32, "a trace of its own: {}", terminal.json);
        assert_eq!(terminal.json["content_exported"], true);
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "turns do not wait on the collector: {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_content_the_turns_span_carries_the_prompt_and_the_answer() {
    let receiver = Receiver::start().await;
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let _d = Daemon::start_with_env(
        &dir.path().join("data"),
        &["--nats", &nats.url, "--identity", "open"],
        // From the environment, as OpenTelemetry's own variable; `content` has no variable and is off.
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ],
    );
    let caller = Caller::connect(&nats.url, "tester").await.unwrap();
    let terminal = ask(&caller, "open", PROMPT).await;
    assert_eq!(terminal.kind(), "result", "{}", terminal.json);
    let trace = terminal.json["trace_id"].as_str().unwrap().to_string();
    assert!(terminal.json.get("content_exported").is_none());
    let spans = receiver.wait_for(1).await;
    let turn = spans
        .iter()
        .find(|s| s.name == "invoke_agent demo")
        .expect("the demo turn's span");
    assert_eq!(
        hex(&turn.trace_id),
        trace,
        "a trace of its own, the terminal's"
    );
    assert!(turn.parent_span_id.is_empty(), "a root span");
    assert!(attr(turn, "gen_ai.input.messages").is_none());

    // The same with `content = true` in the file.
    let receiver = Receiver::start().await;
    let config = dir.path().join("agentwire.toml");
    std::fs::write(
        &config,
        format!(
            "[telemetry]\notlp_endpoint = \"{}\"\ncontent = true\n",
            receiver.url
        ),
    )
    .unwrap();
    let _d = Daemon::start_with_env(
        &dir.path().join("data2"),
        &[
            "--config",
            config.to_str().unwrap(),
            "--nats",
            &nats.url,
            "--identity",
            "open2",
        ],
        &[("OTEL_BSP_SCHEDULE_DELAY", "50")],
    );
    let card = caller.discover("open2").await.unwrap();
    assert_eq!(card["telemetry_content"], true, "{card}");
    let terminal = ask(&caller, "open2", PROMPT).await;
    assert_eq!(terminal.json["content_exported"], true, "{}", terminal.json);
    let answer = terminal.json["text"].as_str().unwrap().to_string();
    let spans = receiver.wait_for(1).await;
    let turn = spans
        .iter()
        .find(|s| s.name == "invoke_agent demo")
        .expect("the demo turn's span");
    let input: serde_json::Value =
        serde_json::from_str(str_attr(turn, "gen_ai.input.messages")).unwrap();
    assert_eq!(input[0]["role"], "user");
    assert_eq!(input[0]["parts"][0]["content"], PROMPT);
    let output: serde_json::Value =
        serde_json::from_str(str_attr(turn, "gen_ai.output.messages")).unwrap();
    assert_eq!(output[0]["parts"][0]["content"], answer.as_str());
}
