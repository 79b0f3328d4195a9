//! The fisk-ai worker's benchmark (`cargo bench -p agentwire-fisk --bench fisk`): against a real
//! nats-server on loopback, (a) the median request-to-ack latency of a prompt divided by a raw NATS
//! request/reply round trip on the same server, and (b) runs per second with 50 concurrent callers and 64
//! worker slots, with the process's peak RSS; and, for reading (a), the cost of one durable write on the same
//! disk, which every ack waits for, both as a raw write and as one journal commit of the same size (the
//! target: ack median <= 1.3 x (raw round trip + one journal commit)). Results print as text and one JSON
//! line.
//!
//! Flags (after `--`): `--samples N` (default 2000), `--callers N` (50), `--workers N` (64),
//! `--seconds N` (10).

use agentwire_agents::DemoAgent;
use agentwire_engine::Engine;
use agentwire_fisk::wire::nats;
use agentwire_fisk::worker::{Worker, WorkerConfig};
use agentwire_store::SqliteJournal;
use agentwire_testkit::NatsServer;
use futures_util::StreamExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn prompt(request: &str, text: &str) -> Vec<u8> {
    serde_json::json!({
        "protocol": "io.choria.fisk-ai.v1.request.prompt",
        "id": format!("m{request}"),
        "request": request,
        "conversation": "bench",
        "sequence": 0,
        "time": "2026-11-30T00:00:00Z",
        "sender": {"name": "bench"},
        "prompt": text,
    })
    .to_string()
    .into_bytes()
}

fn median(mut v: Vec<Duration>) -> (Duration, Duration, Duration) {
    v.sort();
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q) as usize];
    (at(0.5), at(0.9), at(0.99))
}

fn vm(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

/// `n` durable 4 KiB writes (overwriting a file's allocated blocks, then `fdatasync`), each timed: the least
/// a journal commit can cost on this disk.
fn durable_writes(dir: &std::path::Path, n: usize) -> Vec<Duration> {
    use std::os::unix::fs::FileExt;
    let path = dir.join("durable-write-probe");
    let f = std::fs::File::create(&path).unwrap();
    f.write_all_at(&[7u8; 16 * 4096], 0).unwrap();
    f.sync_all().unwrap();
    let block = [9u8; 4096];
    let times = (0..n)
        .map(|i| {
            let t = Instant::now();
            f.write_all_at(&block, (i % 16) as u64 * 4096).unwrap();
            f.sync_data().unwrap();
            t.elapsed()
        })
        .collect();
    let _ = std::fs::remove_file(&path);
    times
}

/// `n` journal commits of a turn the size of a benchmark prompt's, one at a time through a journal of its
/// own on the same disk: what the ack waits for, measured alone.
async fn journal_commits(dir: &std::path::Path, n: usize) -> Vec<Duration> {
    use agentwire_store::{Journal, NewTurn, LOCAL_OWNER};
    let journal = SqliteJournal::open(&dir.join("commit-probe.sqlite")).unwrap();
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let turn = NewTurn {
            request_id: agentwire_core::RequestId::new(format!("fisk:probe{i}")).unwrap(),
            conversation_id: agentwire_core::ConversationId::new(format!("fisk:{i:064}")).unwrap(),
            protocol: "fisk".into(),
            owner: LOCAL_OWNER.into(),
            route: serde_json::json!({ "request": format!("probe{i}") }),
            input: serde_json::json!({"request_id": format!("fisk:probe{i}"), "message": "quick hi", "model": "demo"}),
            accepted_at: 0,
            conversation_meta: Some(
                serde_json::json!({"fingerprint": {"model": "demo"}, "tools": ["calculator", "shell"]}),
            ),
        };
        let t = Instant::now();
        journal.accept(turn).await.unwrap();
        times.push(t.elapsed());
    }
    times
}

/// Sends one prompt and waits for its ack; returns the latency. Reads the rest of the set when `full`.
async fn one(client: &async_nats::Client, identity: &str, request: &str, full: bool) -> Duration {
    let inbox = client.new_inbox();
    let mut sub = client.subscribe(inbox.clone()).await.unwrap();
    let started = Instant::now();
    client
        .publish_with_reply(
            nats::task_subject(identity),
            inbox,
            prompt(request, "quick hi").into(),
        )
        .await
        .unwrap();
    let first = sub.next().await.expect("an ack");
    let latency = started.elapsed();
    let mut last = first
        .headers
        .as_ref()
        .is_some_and(|h| h.get(nats::HEADER_STREAM_FINAL).is_some());
    while full && !last {
        let m = sub.next().await.expect("the rest of the set");
        last = m
            .headers
            .as_ref()
            .is_some_and(|h| h.get(nats::HEADER_STREAM_FINAL).is_some());
    }
    latency
}

fn main() {
    let samples = arg("--samples", 2000) as usize;
    let callers = arg("--callers", 50) as usize;
    let workers = arg("--workers", 64) as usize;
    let seconds = arg("--seconds", 10);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let nats_server = NatsServer::start();
        let dir = tempfile::tempdir().unwrap();
        let journal = Arc::new(SqliteJournal::open(&dir.path().join("journal.sqlite")).unwrap());
        let engine = Engine::new(journal, Arc::new(DemoAgent));
        let identity = "bench";
        let _worker = Worker::start(
            WorkerConfig {
                url: nats_server.url.clone(),
                identity: identity.into(),
                workers,
                elicit: false,
                request_timeout: Duration::from_secs(120),
                system_prompt: String::new(),
                max_tokens: None,
                instance: None,
            },
            engine,
        )
        .await
        .unwrap();

        // (a) Raw request/reply: an echo responder on its own connection, as the worker has its own.
        let responder = async_nats::connect(&nats_server.url).await.unwrap();
        let mut echo = responder.subscribe("bench.echo").await.unwrap();
        let r2 = responder.clone();
        tokio::spawn(async move {
            while let Some(m) = echo.next().await {
                if let Some(reply) = m.reply {
                    let _ = r2.publish(reply, m.payload).await;
                }
            }
        });
        responder.flush().await.unwrap();
        let caller = async_nats::connect(&nats_server.url).await.unwrap();
        let body = prompt("raw", "quick hi");
        for _ in 0..200 {
            caller.request("bench.echo", body.clone().into()).await.unwrap();
        }
        let mut raw = Vec::with_capacity(samples);
        for _ in 0..samples {
            let t = Instant::now();
            caller.request("bench.echo", body.clone().into()).await.unwrap();
            raw.push(t.elapsed());
        }
        for i in 0..200 {
            one(&caller, identity, &format!("w{i}"), true).await;
        }
        let mut acks = Vec::with_capacity(samples);
        for i in 0..samples {
            acks.push(one(&caller, identity, &format!("a{i}"), true).await);
        }
        let (raw50, raw90, raw99) = median(raw);
        let (ack50, ack90, ack99) = median(acks);
        let (sync50, _, _) = median(durable_writes(dir.path(), 1000));
        let (commit50, _, _) = median(journal_commits(dir.path(), 1000).await);

        // (b) Throughput: callers in a closed loop, each a conversation of its own per prompt.
        let done = Arc::new(AtomicU64::new(0));
        let stop_at = Instant::now() + Duration::from_secs(seconds);
        let mut tasks = Vec::new();
        for c in 0..callers {
            let (done, client) = (done.clone(), async_nats::connect(&nats_server.url).await.unwrap());
            tasks.push(tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < stop_at {
                    one(&client, identity, &format!("c{c}x{n}"), true).await;
                    n += 1;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        let started = Instant::now();
        for t in tasks {
            t.await.unwrap();
        }
        let runs = done.load(Ordering::Relaxed);
        let per_sec = runs as f64 / started.elapsed().as_secs_f64();
        let ratio = ack50.as_secs_f64() / raw50.as_secs_f64();
        println!("fisk-ai worker benchmark ({samples} samples; {callers} callers, {workers} slots, {seconds} s)");
        println!("raw NATS request/reply: median {raw50:?}  p90 {raw90:?}  p99 {raw99:?}");
        println!("request -> ack:         median {ack50:?}  p90 {ack90:?}  p99 {ack99:?}");
        println!("ratio of medians: {ratio:.2} (target <= 1.3)");
        let floor = (raw50 + sync50).as_secs_f64() / raw50.as_secs_f64();
        println!(
            "one durable 4 KiB write (write + fdatasync) in the journal's directory: median {sync50:?}; \
             an ack that waits for it cannot beat (raw + that) / raw = {floor:.2}"
        );
        let vs_floor = ack50.as_secs_f64() / (raw50 + commit50).as_secs_f64();
        println!(
            "one journal commit of a new conversation's first turn (SqliteJournal::accept): median {commit50:?}; \
             ack / (raw + commit) = {vs_floor:.2} (target <= 1.3)"
        );
        println!("runs/s with {callers} callers: {per_sec:.0} ({runs} runs)");
        println!("peak RSS (whole benchmark process: worker, NATS clients, callers): {} KiB", vm("VmHWM:"));
        println!(
            "{}",
            serde_json::json!({
                "raw_rtt_median_us": raw50.as_micros(), "ack_median_us": ack50.as_micros(),
                "ack_p99_us": ack99.as_micros(), "ratio": ratio, "runs_per_sec": per_sec,
                "durable_write_median_us": sync50.as_micros(), "floor_ratio": floor,
                "journal_commit_median_us": commit50.as_micros(), "ack_vs_rtt_plus_commit": vs_floor,
                "callers": callers, "workers": workers, "peak_rss_kib": vm("VmHWM:"),
            })
        );
    });
}
