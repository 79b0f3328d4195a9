//! `stream-lag`: how long after the model sends a piece of an answer it reaches a caller of each HTTP front
//! and every watcher of the turn API's event stream, against the real daemon (issue 36, target 4: a
//! streamed event reaches a client at most 1 ms after the engine publishes it, p50, with 1 and 50 watchers).
//!
//! A fake OpenAI-compatible server (real HTTP on loopback) streams an answer of [`PIECES`] pieces [`GAP`]
//! apart and notes the moment each piece's write returned. `agentwire serve` runs a model agent on it with
//! its HTTP server on. Each piece carries a word no other piece has (`zz<round>x<piece>`), so wherever a
//! client first sees the word, the time since the model sent it is that piece's lag. Taken, in turn, for:
//!
//! - **direct**: the model server read directly (the loopback and the parsing no front can avoid);
//! - **OpenAI-compatible**: a streamed chat completion (`POST /v1/chat/completions`);
//! - **A2A**: `SendStreamingMessage` over HTTP+JSON (`/a2a/<agent>/message:stream`);
//! - **MCP**: a `tools/call` with a progress token (its progress notifications);
//! - **watchers**: each of the `--watchers` clients on `GET /api/v1/events` (the turn API's stream of every
//!   turn, which the hub reads) during the three calls above.
//!
//! The lag is from the model's send, so it holds more than the hop from the engine's publication to the
//! client: the daemon's read of the model's stream, the agent's parse and the engine itself. It is therefore
//! an upper bound of what the target measures. Run for each count of watchers in `--watchers` (default 1
//! and 50), a fresh daemon each. Human text on stderr, one JSON line on stdout. Run it from the workspace
//! root after `cargo build --release -p agentwire -p agentwire-bench`: `target/release/stream-lag`.

#[allow(dead_code)]
#[path = "../daemon.rs"]
mod daemon;
#[path = "../first_token/fronts.rs"]
mod fronts;
#[path = "../first_token/sse.rs"]
mod sse;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentwire_testkit::fake_openai::{text_chunks, FakeOpenAi, Scripted};
use clap::Parser;
use fronts::{addr_of, mcp_session};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Pieces of each answer, and the time between two: 20 pieces 5 ms apart, about 100 ms a call.
const PIECES: usize = 20;
const GAP: Duration = Duration::from_millis(5);
/// How long the watchers may take to see the last piece of a call before the round fails.
const SETTLE: Duration = Duration::from_secs(5);
/// The lag the target allows at the median, in milliseconds.
const TARGET_MS: f64 = 1.0;

/// The lag of streamed pieces, directly and through each HTTP front, with watchers.
#[derive(Debug, Parser)]
#[command(name = "stream-lag", version, about)]
struct Args {
    /// Calls of each front (each streams [`PIECES`] pieces) for each count of watchers.
    #[arg(long, default_value_t = 20)]
    rounds: usize,
    /// The counts of watchers to run with, comma-separated (the daemon allows at most 64 streams).
    #[arg(long, value_delimiter = ',', default_value = "1,50")]
    watchers: Vec<usize>,
    /// The agentwire binary to benchmark.
    #[arg(long, default_value = "target/release/agentwire")]
    daemon: PathBuf,
}

/// The word of piece `piece` of call `call`: found wherever it appears, whatever the front's framing.
fn word(call: usize, piece: usize) -> String {
    format!("zz{call}x{piece}")
}

fn script(call: usize) -> Scripted {
    let words: Vec<String> = (0..PIECES).map(|i| format!("{} ", word(call, i))).collect();
    let refs: Vec<&str> = words.iter().map(String::as_str).collect();
    Scripted::Stream {
        chunks: text_chunks(&refs, (5, PIECES as u64)),
        gap: GAP,
    }
}

/// Every `zz…x…` word in `s`.
fn words_of(s: &str, out: &mut Vec<String>) {
    out.extend(
        s.split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| w.starts_with("zz") && w.contains('x'))
            .map(str::to_string),
    );
}

/// Every `zz…x…` word in any string of `v`.
fn words_in(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::String(s) => words_of(s, out),
        serde_json::Value::Array(a) => a.iter().for_each(|x| words_in(x, out)),
        serde_json::Value::Object(o) => o.values().for_each(|x| words_in(x, out)),
        _ => {}
    }
}

/// When a client first saw each word.
#[derive(Default)]
struct Seen(HashMap<String, Instant>);

impl Seen {
    fn note(&mut self, v: &serde_json::Value, at: Instant) {
        let mut words = Vec::new();
        words_in(v, &mut words);
        self.note_words(words, at);
    }

    fn note_words(&mut self, words: Vec<String>, at: Instant) {
        for w in words {
            self.0.entry(w).or_insert(at);
        }
    }
}

/// When the model sent each word, from the fake's log of the pieces it wrote.
fn sent_words(fake: &FakeOpenAi) -> HashMap<String, Instant> {
    let mut out = HashMap::new();
    for (data, at) in fake.take_sent() {
        let v: serde_json::Value = serde_json::from_str(&data).unwrap_or_default();
        let mut words = Vec::new();
        words_in(&v, &mut words);
        for w in words {
            out.entry(w).or_insert(at);
        }
    }
    out
}

/// The lags (ms) of the words of `call` that `seen` has, against when they were sent; errs when one is
/// missing (a client that never saw a piece).
fn lags(
    call: usize,
    seen: &Seen,
    sent: &HashMap<String, Instant>,
    who: &str,
) -> Result<Vec<f64>, String> {
    (0..PIECES)
        .map(|i| {
            let w = word(call, i);
            let s = sent.get(&w).ok_or(format!("the model sent no {w}"))?;
            let r = seen.0.get(&w).ok_or(format!("{who} never saw {w}"))?;
            Ok(r.saturating_duration_since(*s).as_secs_f64() * 1000.0)
        })
        .collect()
}

/// One watcher of every turn on `GET /api/v1/events`, noting when it first sees each word.
async fn watch(http: &str, token: &str) -> Result<Arc<Mutex<Seen>>, String> {
    let addr = addr_of(http).to_string();
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
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let noted = seen.clone();
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
                // The words are found in the raw line, not a parsed one: fifty watchers parsing every
                // event's JSON on this process's two threads would delay each other's reads.
                if let Some(data) = line.trim_end().strip_prefix("data:") {
                    let mut words = Vec::new();
                    words_of(data, &mut words);
                    if !words.is_empty() {
                        noted
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .note_words(words, now);
                    }
                }
            }
        }
    });
    Ok(seen)
}

/// The lags of one setting (a count of watchers), by client.
#[derive(Default)]
struct Lags {
    direct: Vec<f64>,
    openai: Vec<f64>,
    a2a: Vec<f64>,
    mcp: Vec<f64>,
    watchers: Vec<f64>,
}

/// Streams call `call` through one client (`post` to `path` with `headers`), then collects the caller's
/// and every watcher's lags of its pieces.
#[allow(clippy::too_many_arguments)]
async fn one_call(
    fake: &FakeOpenAi,
    call: usize,
    addr: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    watchers: &[Arc<Mutex<Seen>>],
    to_watchers: Option<&mut Vec<f64>>,
) -> Result<Vec<f64>, String> {
    fake.push(script(call));
    let mut seen = Seen::default();
    let head = sse::post(addr, path, headers, body, |v, at| seen.note(v, at)).await?;
    if head.status != 200 {
        return Err(format!("{path}: HTTP {}", head.status));
    }
    let sent = sent_words(fake);
    let mine = lags(call, &seen, &sent, path)?;
    if let Some(out) = to_watchers {
        let last = word(call, PIECES - 1);
        let deadline = Instant::now() + SETTLE;
        for (i, w) in watchers.iter().enumerate() {
            // A watcher reads on its own task: wait until it has the call's last piece.
            loop {
                let got = w
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .0
                    .contains_key(&last);
                if got {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!("watcher {i} did not see {last}"));
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let seen = std::mem::take(&mut *w.lock().unwrap_or_else(|p| p.into_inner()));
            out.extend(lags(call, &seen, &sent, &format!("watcher {i}"))?);
        }
    }
    Ok(mine)
}

fn config(base_url: &str) -> String {
    format!(
        "{}\n[serve]\nagent = \"model\"\n\n[agents.model]\nkind = \"openai\"\nbase_url = \"{base_url}\"\nmodels = [\"m\"]\n",
        daemon::config_toml()
    )
}

async fn setting(args: &Args, watchers: usize) -> Result<Lags, String> {
    let fake = FakeOpenAi::start();
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let rate = daemon::BENCH_SENDER_RATE.to_string();
    let d = daemon::Daemon::start_with(
        &args.daemon,
        dir.path(),
        &config(&fake.base_url),
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
    let mut watching = Vec::with_capacity(watchers);
    for _ in 0..watchers {
        watching.push(watch(&http, &token).await?);
    }
    let bearer = format!("Bearer {token}");
    let session = mcp_session(&http, &bearer).await?;
    let addr = addr_of(&http).to_string();
    let model_addr = addr_of(&fake.base_url).to_string();
    let model_path = format!(
        "/{}/chat/completions",
        fake.base_url
            .trim_start_matches("http://")
            .split_once('/')
            .map_or("", |(_, p)| p)
    );
    let direct_body = serde_json::json!({"model": "m", "stream": true,
        "messages": [{"role": "user", "content": "say something"}]})
    .to_string();
    let openai_body = serde_json::json!({"model": "model", "stream": true,
        "messages": [{"role": "user", "content": "say something"}]})
    .to_string();
    let mut out = Lags::default();
    let mut call = 0;
    for round in 0..args.rounds {
        call += 1;
        out.direct.extend(
            one_call(
                &fake,
                call,
                &model_addr,
                &model_path,
                &[],
                &direct_body,
                &[],
                None,
            )
            .await?,
        );
        call += 1;
        let auth = [("Authorization", bearer.as_str())];
        out.openai.extend(
            one_call(
                &fake,
                call,
                &addr,
                "/v1/chat/completions",
                &auth,
                &openai_body,
                &watching,
                Some(&mut out.watchers),
            )
            .await?,
        );
        call += 1;
        let a2a_body = serde_json::json!({"message": {"messageId": format!("m{round}"),
            "role": "ROLE_USER", "parts": [{"text": "say something"}]}})
        .to_string();
        let headers = [
            ("Authorization", bearer.as_str()),
            ("A2A-Version", "1.0"),
            ("Accept", "text/event-stream"),
        ];
        out.a2a.extend(
            one_call(
                &fake,
                call,
                &addr,
                "/a2a/model/message:stream",
                &headers,
                &a2a_body,
                &watching,
                Some(&mut out.watchers),
            )
            .await?,
        );
        call += 1;
        let mcp_call =
            serde_json::json!({"jsonrpc": "2.0", "id": round + 1, "method": "tools/call",
            "params": {"name": "ask_model", "arguments": {"prompt": "say something"},
                       "_meta": {"progressToken": round}}})
            .to_string();
        let headers = [
            ("Authorization", bearer.as_str()),
            ("Accept", "application/json, text/event-stream"),
            ("Mcp-Session-Id", session.as_str()),
            ("Mcp-Protocol-Version", "2025-06-18"),
        ];
        out.mcp.extend(
            one_call(
                &fake,
                call,
                &addr,
                "/mcp",
                &headers,
                &mcp_call,
                &watching,
                Some(&mut out.watchers),
            )
            .await?,
        );
    }
    Ok(out)
}

/// Median, p90 and p99 of `v` (ms).
fn quantiles(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q) as usize];
    (at(0.5), at(0.9), at(0.99))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let args = Args::parse();
    let mut json = serde_json::json!({"bench": "stream-lag", "rounds": args.rounds,
        "pieces": PIECES, "gap_ms": GAP.as_secs_f64() * 1000.0, "target_ms": TARGET_MS});
    let mut met = true;
    for &w in &args.watchers {
        let lags = match setting(&args, w).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("stream-lag: with {w} watchers: {e}");
                return ExitCode::FAILURE;
            }
        };
        eprintln!(
            "== {w} watcher(s) on /api/v1/events, {} calls of each front, {PIECES} pieces each",
            args.rounds
        );
        let mut figures = serde_json::json!({});
        let direct_median = quantiles(lags.direct.clone()).0;
        for (key, what, v) in [
            ("direct", "read from the model server", lags.direct),
            ("openai", "OpenAI-compatible caller", lags.openai),
            ("a2a", "A2A caller", lags.a2a),
            ("mcp", "MCP caller (progress)", lags.mcp),
            ("watchers", "each watcher (turn API stream)", lags.watchers),
        ] {
            let n = v.len();
            let (m, p90, p99) = quantiles(v);
            let through = key != "direct";
            let verdict = if !through {
                String::new()
            } else if m <= TARGET_MS {
                format!(
                    " (target <= {TARGET_MS} ms: met; {:.3} ms over direct)",
                    m - direct_median
                )
            } else {
                met = false;
                format!(
                    " (target <= {TARGET_MS} ms: NOT met; {:.3} ms over direct)",
                    m - direct_median
                )
            };
            eprintln!("  {what:<34} lag median {m:.3} ms  p90 {p90:.3} ms  p99 {p99:.3} ms  ({n} pieces){verdict}");
            figures[key] =
                serde_json::json!({"median_ms": m, "p90_ms": p90, "p99_ms": p99, "pieces": n});
        }
        json[format!("watchers_{w}")] = figures;
    }
    json["met"] = serde_json::json!(met);
    println!("{json}");
    ExitCode::SUCCESS
}
