//! A fake OpenAI-compatible model server over real HTTP on a loopback port, for the model agent's tests
//! (no model server runs here). Each `POST …/chat/completions` gets the next scripted reply: a stream of
//! server-sent events (chunks a given time apart, then `data: [DONE]`) or a status with a body. It keeps
//! every such request (its `Authorization` header and JSON body) and counts streams the client walked away
//! from. `GET …/models` (the agent's check at start) is answered with an empty list and only counted.

use serde_json::{json, Value};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The most bytes of a request's head the fake reads.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Streamed events whose send times are kept until taken ([`FakeOpenAi::take_sent`]).
const MAX_SENT_KEPT: usize = 100_000;

/// One scripted reply.
#[derive(Debug, Clone)]
pub enum Scripted {
    /// `200 text/event-stream`: each item is one event's data, sent `gap` apart, then `[DONE]`.
    Stream {
        /// The events' data.
        chunks: Vec<String>,
        /// Time between two events.
        gap: Duration,
    },
    /// `200 text/event-stream` cut short: each item is one event's data, sent `gap` apart, then the server
    /// closes the connection with no `[DONE]` (a model server that died or a proxy that timed out).
    CutStream {
        /// The events' data.
        chunks: Vec<String>,
        /// Time between two events.
        gap: Duration,
    },
    /// `200 application/json`: a whole completion (a server that ignores `stream`).
    Whole(Value),
    /// Any status, with headers and a body.
    Status {
        /// The status code.
        status: u16,
        /// Extra headers.
        headers: Vec<(String, String)>,
        /// The body.
        body: String,
    },
}

/// A request the fake received.
#[derive(Debug, Clone)]
pub struct Received {
    /// The request path.
    pub path: String,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The `traceparent` header (W3C trace context), if any.
    pub traceparent: Option<String>,
    /// The JSON body.
    pub body: Value,
}

#[derive(Default)]
struct State {
    script: VecDeque<Scripted>,
    received: Vec<Received>,
    aborted: usize,
    models_asked: usize,
    /// Each streamed event's data and the moment its write returned, oldest first (a benchmark's clock).
    sent: Vec<(String, Instant)>,
}

/// The fake server; stops accepting when dropped.
pub struct FakeOpenAi {
    /// `http://127.0.0.1:<port>/v1`.
    pub base_url: String,
    state: Arc<Mutex<State>>,
}

impl FakeOpenAi {
    /// Starts the fake on a free loopback port.
    pub fn start() -> FakeOpenAi {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().expect("its address").port();
        let state = Arc::new(Mutex::new(State::default()));
        let shared = Arc::downgrade(&state);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Some(state) = shared.upgrade() else {
                    return;
                };
                let Ok(stream) = stream else { continue };
                std::thread::spawn(move || serve(stream, &state));
            }
        });
        FakeOpenAi {
            base_url: format!("http://127.0.0.1:{port}/v1"),
            state,
        }
    }

    /// Queues `reply` for the next request.
    pub fn push(&self, reply: Scripted) {
        self.lock().script.push_back(reply);
    }

    /// Every request so far.
    pub fn received(&self) -> Vec<Received> {
        self.lock().received.clone()
    }

    /// How many times `GET …/models` was asked.
    pub fn models_asked(&self) -> usize {
        self.lock().models_asked
    }

    /// How many streams the client closed before their end.
    pub fn aborted(&self) -> usize {
        self.lock().aborted
    }

    /// Takes the streamed events' data sent so far, each with the moment its write to the socket returned.
    pub fn take_sent(&self) -> Vec<(String, Instant)> {
        std::mem::take(&mut self.lock().sent)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn serve(stream: TcpStream, state: &Mutex<State>) {
    // Each chunk leaves when it is written, as a model server streaming tokens sends them.
    let _ = stream.set_nodelay(true);
    let mut reader = BufReader::new(stream.try_clone().expect("a second handle"));
    let (mut head, mut line) = (Vec::new(), String::new());
    let mut content_length = 0usize;
    let mut authorization = None;
    let mut traceparent = None;
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || head.len() > MAX_HEAD_BYTES {
            return;
        }
        if line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            content_length = v.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("authorization:") {
            authorization = Some(line["authorization:".len()..].trim().to_string());
        }
        if lower.starts_with("traceparent:") {
            traceparent = Some(line["traceparent:".len()..].trim().to_string());
        }
        head.push(line.clone());
    }
    let mut body = vec![0u8; content_length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let mut request_line = head
        .first()
        .map(|l| l.split_whitespace())
        .into_iter()
        .flatten();
    let method = request_line.next().unwrap_or("").to_string();
    let path = request_line.next().unwrap_or("").to_string();
    if method == "GET" && path.ends_with("/models") {
        state.lock().unwrap_or_else(|p| p.into_inner()).models_asked += 1;
        let mut out = stream;
        respond(
            &mut out,
            200,
            &[("content-type".into(), "application/json".into())],
            r#"{"object":"list","data":[]}"#,
        );
        return;
    }
    let reply = {
        let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
        s.received.push(Received {
            path,
            authorization,
            traceparent,
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        });
        s.script.pop_front()
    };
    let mut out = stream;
    match reply {
        None => respond(
            &mut out,
            500,
            &[],
            r#"{"error":{"message":"the fake has no reply scripted"}}"#,
        ),
        Some(Scripted::Status {
            status,
            headers,
            body,
        }) => respond(&mut out, status, &headers, &body),
        Some(Scripted::Whole(v)) => respond(
            &mut out,
            200,
            &[("content-type".into(), "application/json".into())],
            &v.to_string(),
        ),
        Some(Scripted::Stream { chunks, gap }) => {
            stream_events(&mut out, state, &chunks, gap, true)
        }
        Some(Scripted::CutStream { chunks, gap }) => {
            stream_events(&mut out, state, &chunks, gap, false)
        }
    }
}

/// Sends `chunks` as server-sent events `gap` apart, then `[DONE]` when `done`; the connection closes after.
fn stream_events(
    out: &mut TcpStream,
    state: &Mutex<State>,
    chunks: &[String],
    gap: Duration,
    done: bool,
) {
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n";
    let mut ok = out.write_all(head.as_bytes()).is_ok();
    let end: &[&str] = if done { &["[DONE]"] } else { &[] };
    for data in chunks.iter().map(String::as_str).chain(end.iter().copied()) {
        if !ok {
            break;
        }
        ok = out
            .write_all(format!("data: {data}\n\n").as_bytes())
            .is_ok()
            && out.flush().is_ok();
        if ok {
            let at = Instant::now();
            let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
            // Bounded: a test that never takes them keeps only the latest.
            if s.sent.len() >= MAX_SENT_KEPT {
                s.sent.clear();
            }
            s.sent.push((data.to_string(), at));
        }
        if !gap.is_zero() {
            std::thread::sleep(gap);
        }
    }
    if !ok {
        state.lock().unwrap_or_else(|p| p.into_inner()).aborted += 1;
    }
}

fn respond(out: &mut TcpStream, status: u16, headers: &[(String, String)], body: &str) {
    let mut head = format!(
        "HTTP/1.1 {status} Scripted\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
    {
        head.push_str("content-type: application/json\r\n");
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let _ = out.write_all(head.as_bytes());
    let _ = out.write_all(body.as_bytes());
}

/// Chunks streaming `pieces` of answer text, then `stop` and a usage chunk.
pub fn text_chunks(pieces: &[&str], usage: (u64, u64)) -> Vec<String> {
    let mut chunks: Vec<String> = pieces
        .iter()
        .map(|p| json!({"choices":[{"index":0,"delta":{"content":p}}]}).to_string())
        .collect();
    chunks.push(json!({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}).to_string());
    chunks.push(
        json!({"choices":[],"usage":{"prompt_tokens":usage.0,"completion_tokens":usage.1}})
            .to_string(),
    );
    chunks
}

/// Chunks of one tool call whose arguments arrive in `arguments` pieces, then `tool_calls`.
pub fn tool_call_chunks(id: &str, name: &str, arguments: &[&str]) -> Vec<String> {
    let mut chunks = vec![json!({"choices":[{"index":0,"delta":{"tool_calls":[
        {"index":0,"id":id,"type":"function","function":{"name":name,"arguments":""}}]}}]})
    .to_string()];
    for a in arguments {
        chunks.push(
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":a}}]}}]})
                .to_string(),
        );
    }
    chunks
        .push(json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}).to_string());
    chunks
}
