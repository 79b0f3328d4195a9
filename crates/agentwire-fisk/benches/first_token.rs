//! When the first words reach a fisk-ai caller (`cargo bench -p agentwire-fisk --bench first_token`): a
//! model server streams an answer over about 22 ms (its first chunk at once), and in alternating rounds the
//! time to its first text is taken read directly from the model server (the same HTTP client the model agent
//! uses) and through the fisk-ai worker (a prompt over NATS to the first `event.text`, and to the terminal).
//! The model server is the scripted fake over real HTTP on loopback (`TCP_NODELAY`); the worker runs the
//! model agent on a real nats-server. Prints medians, p90s and one JSON line.
//!
//! Flags (after `--`): `--rounds N` (default 100).

use agentwire_agents::openai::{http_client, OpenAiAgent, OpenAiConfig};
use agentwire_engine::Engine;
use agentwire_fisk::wire::nats;
use agentwire_fisk::worker::{Worker, WorkerConfig};
use agentwire_store::SqliteJournal;
use agentwire_testkit::fake_openai::{text_chunks, FakeOpenAi, Scripted};
use agentwire_testkit::NatsServer;
use futures_util::StreamExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The answer's pieces and the time between two: eleven chunks 2 ms apart, about 22 ms in all.
const PIECES: usize = 11;
const GAP: Duration = Duration::from_millis(2);

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn script() -> Scripted {
    let words: Vec<String> = (0..PIECES).map(|i| format!("word{i} ")).collect();
    let refs: Vec<&str> = words.iter().map(String::as_str).collect();
    Scripted::Stream {
        chunks: text_chunks(&refs, (5, PIECES as u64)),
        gap: GAP,
    }
}

fn quantiles(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q) as usize];
    (at(0.5), at(0.9))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn prompt(request: &str) -> Vec<u8> {
    serde_json::json!({
        "protocol": "io.choria.fisk-ai.v1.request.prompt",
        "id": format!("m{request}"),
        "request": request,
        "conversation": "bench",
        "sequence": 0,
        "time": "2026-12-01T00:00:00Z",
        "sender": {"name": "bench"},
        "prompt": "say something",
    })
    .to_string()
    .into_bytes()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rounds = arg("--rounds", 100) as usize;
    let fake = FakeOpenAi::start();
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let client = http_client(Duration::from_secs(30)).unwrap();
    let agent = OpenAiAgent::new(
        OpenAiConfig {
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
        },
        client.clone(),
    );
    let journal = Arc::new(SqliteJournal::open(&dir.path().join("journal.sqlite")).unwrap());
    let _worker = Worker::start(
        WorkerConfig {
            nats: agentwire_fisk::connection::NatsConnect::to(nats.url.clone()),
            identity: "first".into(),
            workers: 4,
            elicit: false,
            request_timeout: Duration::from_secs(30),
            system_prompt: String::new(),
            max_tokens: None,
            instance: None,
            senders: Default::default(),
            jobs: None,
        },
        Engine::new(journal, Arc::new(agent)),
    )
    .await
    .unwrap();
    let caller = async_nats::connect(&nats.url).await.unwrap();
    let body = serde_json::json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "say something"}]}).to_string();

    let (mut direct, mut first, mut terminal) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        // Read directly from the model server: the time to its first chunk of text.
        fake.push(script());
        let t = Instant::now();
        let mut resp = client
            .post(format!("{}/chat/completions", fake.base_url))
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        let mut seen = String::new();
        while let Some(chunk) = resp.chunk().await.unwrap() {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.contains("\"content\"") {
                break;
            }
        }
        direct.push(t.elapsed());
        while resp.chunk().await.unwrap().is_some() {}

        // Through the fisk-ai worker: the first event.text, then the terminal.
        fake.push(script());
        let inbox = caller.new_inbox();
        let mut replies = caller.subscribe(inbox.clone()).await.unwrap();
        let t = Instant::now();
        caller
            .publish_with_reply(
                nats::task_subject("first"),
                inbox,
                prompt(&format!("r{round}")).into(),
            )
            .await
            .unwrap();
        let mut got_first = None;
        while let Some(m) = replies.next().await {
            let v: serde_json::Value = serde_json::from_slice(&m.payload).unwrap_or_default();
            let kind = v["protocol"].as_str().unwrap_or("");
            if got_first.is_none() && kind.ends_with("event.text") {
                got_first = Some(t.elapsed());
            }
            if kind.ends_with(".result") || kind.ends_with(".error") {
                terminal.push(t.elapsed());
                break;
            }
        }
        first.push(got_first.expect("the answer streams text"));
    }
    let (d50, d90) = quantiles(direct);
    let (f50, f90) = quantiles(first);
    let (t50, t90) = quantiles(terminal);
    println!(
        "first text, read from the model server:  median {:.2} ms, p90 {:.2} ms",
        ms(d50),
        ms(d90)
    );
    println!(
        "first text, through the fisk-ai worker:  median {:.2} ms, p90 {:.2} ms",
        ms(f50),
        ms(f90)
    );
    println!(
        "terminal, through the fisk-ai worker:    median {:.2} ms, p90 {:.2} ms",
        ms(t50),
        ms(t90)
    );
    println!(
        "{}",
        serde_json::json!({
            "rounds": rounds,
            "stream_ms": ms(GAP * PIECES as u32),
            "direct_first_ms": {"median": ms(d50), "p90": ms(d90)},
            "fisk_first_ms": {"median": ms(f50), "p90": ms(f90)},
            "fisk_terminal_ms": {"median": ms(t50), "p90": ms(t90)},
        })
    );
}
