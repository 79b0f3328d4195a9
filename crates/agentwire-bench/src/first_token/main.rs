//! `first-token`: when a model's first words reach a caller, on every front and for a watcher, against the
//! real daemon.
//!
//! A fake OpenAI-compatible server (real HTTP on loopback, `TCP_NODELAY`) streams an answer of 11 chunks
//! 2 ms apart, its first at once. `agentwire serve` runs a model agent on it, exposed over NIP-XX (the
//! embedded relay) and fisk-ai (a real nats-server), with the HTTP server on. In alternating rounds the time
//! to the first text is taken:
//!
//! - **direct**: read from the model server itself (what no front can beat);
//! - **relay round trip** (not a first text): NIP-XX's transport alone, a signed, encrypted prompt to an
//!   echo peer in this process and its answer back through the same relay, with no engine and no journal;
//! - **NIP-XX**: a signed, encrypted prompt to the first in-order text of its deltas (decrypted, checked);
//! - **fisk-ai**: a prompt over NATS to the first `event.text`;
//! - **OpenAI-compatible front**: a streamed chat completion (`POST /v1/chat/completions`, the operator's
//!   token) to the first chunk whose delta holds text;
//! - **A2A**: `SendStreamingMessage` over HTTP+JSON (`/a2a/<agent>/message:stream`) to the first artifact
//!   update with text;
//! - **MCP**: a `tools/call` with a progress token, in a session opened before the rounds, to the first
//!   progress notification with text;
//! - **watcher**: for each NIP-XX and fisk-ai round, the first text `event` on an `/api/v1/events` stream
//!   opened before the rounds (a `watch_all` watcher of every turn), from the same start.
//!
//! Prints medians and p90s, and one JSON line. Run it from the workspace root after
//! `cargo build --release -p agentwire -p agentwire-bench`: `target/release/first-token --rounds 100`.
//! The figures and the method are in `docs/benchmarks.md`.

#[allow(dead_code)]
#[path = "../daemon.rs"]
mod daemon;
mod fronts;
#[allow(dead_code)]
#[path = "../peer.rs"]
mod peer;
mod sse;

use fronts::{addr_of, mcp_session};

use agentwire_testkit::fake_openai::{text_chunks, FakeOpenAi, Scripted};
use agentwire_testkit::NatsServer;
use clap::Parser;
use futures_util::StreamExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The time from `t` to the first streamed chunk with text, read directly from the model server.
async fn direct_first_text(base_url: &str, body: &str, t: Instant) -> Result<Duration, String> {
    let path = format!(
        "/{}/chat/completions",
        base_url
            .trim_start_matches("http://")
            .split_once('/')
            .map_or("", |(_, p)| p)
    );
    first_text(base_url, &path, &[], body, t, chunk_text).await
}

/// The answer's pieces and the time between two: eleven chunks 2 ms apart, about 22 ms in all.
const PIECES: usize = 11;
const GAP: Duration = Duration::from_millis(2);
/// How long one round may take before the benchmark gives up.
const ROUND_TIMEOUT: Duration = Duration::from_secs(10);
/// The fisk-ai identity the daemon serves the model agent under.
const IDENTITY: &str = "first";

/// Time to the first text, directly and through each front.
#[derive(Debug, Parser)]
#[command(name = "first-token", version, about)]
struct Args {
    /// Rounds of each kind.
    #[arg(long, default_value_t = 100)]
    rounds: usize,
    /// The agentwire binary to benchmark.
    #[arg(long, default_value = "target/release/agentwire")]
    daemon: PathBuf,
}

fn script() -> Scripted {
    let words: Vec<String> = (0..PIECES).map(|i| format!("word{i} ")).collect();
    let refs: Vec<&str> = words.iter().map(String::as_str).collect();
    Scripted::Stream {
        chunks: text_chunks(&refs, (5, PIECES as u64)),
        gap: GAP,
    }
}

fn quantiles(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q) as usize].as_secs_f64() * 1000.0;
    (at(0.5), at(0.9))
}

/// When the watcher saw the first text of any turn since it was last reset.
type FirstSeen = Arc<Mutex<Option<Instant>>>;

/// Opens the daemon's event stream and notes when a text event arrives while the slot is empty.
async fn watch_all(url: &str, token: &str, first: FirstSeen) -> Result<(), String> {
    let addr = url.trim_start_matches("http://").to_string();
    let mut s = tokio::net::TcpStream::connect(&addr)
        .await
        .map_err(|e| format!("watcher: {addr}: {e}"))?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    let req = format!(
        "GET /api/v1/events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n"
    );
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| format!("watcher: {e}"))?;
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        let mut pending = String::new();
        loop {
            let n = match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let now = Instant::now();
            pending.push_str(&String::from_utf8_lossy(&buf[..n]));
            while let Some(end) = pending.find('\n') {
                let line: String = pending.drain(..=end).collect();
                let Some(data) = line.trim_end().strip_prefix("data:") else {
                    continue;
                };
                let v: serde_json::Value = serde_json::from_str(data.trim()).unwrap_or_default();
                if v["type"] == "event" && v["event"]["type"] == "text" {
                    let mut slot = first.lock().unwrap_or_else(|p| p.into_inner());
                    slot.get_or_insert(now);
                }
            }
        }
    });
    Ok(())
}

/// The text a chat completion chunk's delta holds.
fn chunk_text(v: &serde_json::Value) -> String {
    v["choices"][0]["delta"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The text an A2A stream response's artifact update holds (HTTP+JSON: the `StreamResponse` itself).
fn a2a_text(v: &serde_json::Value) -> String {
    v["artifactUpdate"]["artifact"]["parts"]
        .as_array()
        .map(|parts| parts.iter().filter_map(|p| p["text"].as_str()).collect())
        .unwrap_or_default()
}

/// The text an MCP progress notification's message holds.
fn mcp_text(v: &serde_json::Value) -> String {
    match v["method"].as_str() {
        Some("notifications/progress") => v["params"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        _ => String::new(),
    }
}

/// Posts `body` to `path` at `url`'s address with `headers` on a fresh connection (as a client's first call
/// makes one), and returns the time from `t` to the first `data:` line in which `text` finds text.
async fn first_text(
    url: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    t: Instant,
    text: fn(&serde_json::Value) -> String,
) -> Result<Duration, String> {
    let mut first = None;
    let head = sse::post(addr_of(url), path, headers, body, |v, at| {
        if first.is_none() && !text(v).is_empty() {
            first = Some(at.saturating_duration_since(t));
        }
    })
    .await?;
    if head.status != 200 {
        return Err(format!("{url}{path}: HTTP {}", head.status));
    }
    first.ok_or_else(|| format!("{url}{path} sent no text"))
}

fn fisk_prompt(request: &str) -> Vec<u8> {
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

fn config(base_url: &str, nats_url: &str) -> String {
    format!(
        "{}\n[serve]\nagent = \"model\"\n\n[agents.model]\nkind = \"openai\"\nbase_url = \"{base_url}\"\nmodels = [\"m\"]\n\n[nats]\nurl = \"{nats_url}\"\nidentity = \"{IDENTITY}\"\nelicit = false\n",
        daemon::config_toml()
    )
}

struct Figures {
    direct: Vec<Duration>,
    /// One journal commit alone, on the same disk: what every turn waits for before it runs.
    commit: Vec<Duration>,
    relay_round_trip: Vec<Duration>,
    nipxx: Vec<Duration>,
    fisk: Vec<Duration>,
    watcher_nipxx: Vec<Duration>,
    watcher_fisk: Vec<Duration>,
    openai: Vec<Duration>,
    a2a: Vec<Duration>,
    mcp: Vec<Duration>,
}

async fn bench(args: &Args) -> Result<Figures, String> {
    let fake = FakeOpenAi::start();
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let rate = daemon::BENCH_SENDER_RATE.to_string();
    let d = daemon::Daemon::start_with(
        &args.daemon,
        dir.path(),
        &config(&fake.base_url, &nats.url),
        &[
            "--rate-per-second",
            &rate,
            "--rate-burst",
            &rate,
            "--http-listen",
            "127.0.0.1:0",
        ],
    )?;
    let (http, token) = d.http.clone().ok_or("the daemon runs no HTTP server")?;
    let first_seen: FirstSeen = Arc::default();
    watch_all(&http, &token, first_seen.clone()).await?;
    let mut client = peer::BenchClient::connect(&d.relay, d.agent).await?;
    let echo = peer::spawn_echo(&d.relay).await?;
    let mut raw = peer::BenchClient::connect(&d.relay, echo).await?;
    let caller = async_nats::connect(&nats.url)
        .await
        .map_err(|e| format!("nats: {e}"))?;
    let body = serde_json::json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "say something"}]}).to_string();
    let body_for_front = serde_json::json!({"model": "model", "stream": true, "messages": [{"role": "user", "content": "say something"}]}).to_string();

    let mut f = Figures {
        direct: vec![],
        commit: vec![],
        relay_round_trip: vec![],
        nipxx: vec![],
        fisk: vec![],
        watcher_nipxx: vec![],
        watcher_fisk: vec![],
        openai: vec![],
        a2a: vec![],
        mcp: vec![],
    };
    let bearer = format!("Bearer {token}");
    let session = mcp_session(&http, &bearer).await?;
    let reset = || *first_seen.lock().unwrap_or_else(|p| p.into_inner()) = None;
    let seen_since = |t: Instant| {
        first_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map(|at| at.saturating_duration_since(t))
    };
    let mut probe = agentwire_store::probe::CommitProbe::open(dir.path(), "openai")
        .map_err(|e| format!("the commit probe: {e}"))?;
    for round in 0..args.rounds {
        // One journal commit, as a turn's acceptance makes it, after the idle gap a round starts with.
        f.commit.push(
            probe
                .once()
                .await
                .map_err(|e| format!("the commit probe: {e}"))?,
        );
        // Directly from the model server: the time to its first chunk of text.
        fake.push(script());
        let t = Instant::now();
        f.direct
            .push(direct_first_text(&fake.base_url, &body, t).await?);

        // NIP-XX's transport alone: a prompt to the echo peer and its answer back through the same relay.
        let rt = raw
            .run(ROUND_TIMEOUT)
            .await
            .map_err(|e| format!("raw round {round}: {e:?}"))?;
        f.relay_round_trip.push(rt.total);

        // Over NIP-XX, and the watcher of every turn.
        fake.push(script());
        reset();
        let t = Instant::now();
        let first = client
            .first_text("say something", ROUND_TIMEOUT)
            .await
            .map_err(|e| format!("NIP-XX round {round}: {e:?}"))?;
        f.nipxx.push(first);
        f.watcher_nipxx
            .push(seen_since(t).ok_or("the watcher saw no text of the NIP-XX run")?);

        // Over fisk-ai, and the watcher.
        fake.push(script());
        reset();
        let inbox = caller.new_inbox();
        let mut replies = caller
            .subscribe(inbox.clone())
            .await
            .map_err(|e| e.to_string())?;
        let t = Instant::now();
        caller
            .publish_with_reply(
                agentwire_fisk::wire::nats::task_subject(IDENTITY),
                inbox,
                fisk_prompt(&format!("r{round}")).into(),
            )
            .await
            .map_err(|e| e.to_string())?;
        let mut got_first = None;
        loop {
            let m = tokio::time::timeout(ROUND_TIMEOUT, replies.next())
                .await
                .map_err(|_| format!("fisk-ai round {round}: no reply in time"))?
                .ok_or("the reply subscription ended")?;
            let v: serde_json::Value = serde_json::from_slice(&m.payload).unwrap_or_default();
            let kind = v["protocol"].as_str().unwrap_or("");
            if got_first.is_none() && kind.ends_with("event.text") {
                got_first = Some(t.elapsed());
            }
            if kind.ends_with(".result") || kind.ends_with(".error") {
                break;
            }
        }
        f.fisk
            .push(got_first.ok_or_else(|| format!("fisk-ai round {round}: no event.text"))?);
        f.watcher_fisk
            .push(seen_since(t).ok_or("the watcher saw no text of the fisk-ai run")?);

        // Over the OpenAI-compatible front: a streamed chat completion of the model agent.
        fake.push(script());
        let t = Instant::now();
        let auth = [("Authorization", bearer.as_str())];
        f.openai.push(
            first_text(
                &http,
                "/v1/chat/completions",
                &auth,
                &body_for_front,
                t,
                chunk_text,
            )
            .await
            .map_err(|e| format!("OpenAI front round {round}: {e}"))?,
        );

        // Over A2A: SendStreamingMessage (HTTP+JSON) to its first artifact update with text.
        fake.push(script());
        let a2a_body = serde_json::json!({"message": {"messageId": format!("m{round}"),
            "role": "ROLE_USER", "parts": [{"text": "say something"}]}})
        .to_string();
        let t = Instant::now();
        let headers = [
            ("Authorization", bearer.as_str()),
            ("A2A-Version", "1.0"),
            ("Accept", "text/event-stream"),
        ];
        f.a2a.push(
            first_text(
                &http,
                "/a2a/model/message:stream",
                &headers,
                &a2a_body,
                t,
                a2a_text,
            )
            .await
            .map_err(|e| format!("A2A round {round}: {e}"))?,
        );

        // Over MCP: a tools/call with a progress token to its first progress notification with text.
        fake.push(script());
        let call = serde_json::json!({"jsonrpc": "2.0", "id": round + 1, "method": "tools/call",
            "params": {"name": "ask_model", "arguments": {"prompt": "say something"},
                       "_meta": {"progressToken": round}}})
        .to_string();
        let t = Instant::now();
        let headers = [
            ("Authorization", bearer.as_str()),
            ("Accept", "application/json, text/event-stream"),
            ("Mcp-Session-Id", session.as_str()),
            ("Mcp-Protocol-Version", "2025-06-18"),
        ];
        f.mcp.push(
            first_text(&http, "/mcp", &headers, &call, t, mcp_text)
                .await
                .map_err(|e| format!("MCP round {round}: {e}"))?,
        );
    }
    Ok(f)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let args = Args::parse();
    let f = match bench(&args).await {
        Ok(f) => f,
        Err(e) => {
            eprintln!("first-token: {e}");
            return ExitCode::FAILURE;
        }
    };
    let rows = [
        ("direct", "first text, read from the model server", f.direct),
        (
            "commit",
            "one journal commit alone (the floor's part)",
            f.commit,
        ),
        (
            "relay_round_trip",
            "a raw NIP-XX round trip (no engine)",
            f.relay_round_trip,
        ),
        ("nipxx", "first text, through NIP-XX", f.nipxx),
        (
            "watcher_nipxx",
            "first text, a watcher of the NIP-XX run",
            f.watcher_nipxx,
        ),
        ("fisk", "first text, through fisk-ai", f.fisk),
        (
            "watcher_fisk",
            "first text, a watcher of the fisk-ai run",
            f.watcher_fisk,
        ),
        (
            "openai",
            "first text, through the OpenAI-compatible front",
            f.openai,
        ),
        ("a2a", "first text, through A2A (HTTP+JSON stream)", f.a2a),
        ("mcp", "first text, through MCP (progress)", f.mcp),
    ];
    let mut json = serde_json::json!({"rounds": args.rounds, "stream_ms": (GAP * PIECES as u32).as_secs_f64() * 1000.0});
    for (key, what, v) in rows {
        let (m, p90) = quantiles(v);
        eprintln!("{what:<48} median {m:.2} ms, p90 {p90:.2} ms");
        json[key] = serde_json::json!({"median_ms": m, "p90_ms": p90});
    }
    println!("{json}");
    ExitCode::SUCCESS
}
