//! The fisk-ai worker's benchmark (`cargo bench -p agentwire-fisk --bench fisk`): against a real
//! nats-server on loopback, (a) the median request-to-ack latency of a prompt divided by a raw NATS
//! request/reply round trip on the same server, and (b) runs per second with 50 concurrent callers and 64
//! worker slots, with the process's peak RSS; and, for reading (a), the cost of one durable write on the same
//! disk, which every ack waits for, both as a raw write and as one journal commit of the same size (the
//! target: ack median <= 1.3 x (raw round trip + one journal commit)). The raw round trips, the acks, the
//! journal commits and the raw writes are sampled in turn, one of each per round, so the machine's load at
//! any moment weighs on all of them alike; the commit is also timed back to back, for comparison. Results
//! print as text and one JSON line.
//!
//! Flags (after `--`): `--samples N` (default 2000), `--callers N` (50), `--workers N` (64),
//! `--seconds N` (10). With `--scale`, the scale benchmark instead ([`scale`]: the SQLite and JetStream
//! journals, one to three instances; `--samples` 500 and `--seconds` 5 by default). With `--jobs`, the
//! queued-jobs benchmark instead ([`jobs`]: a prompt's whole round trip as a request and as a queued job,
//! sampled in turn, and how fast a backlog of jobs drains; `--samples` 500, `--backlog` 2000, `--workers`
//! 64 by default).

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

/// The benchmarks' worker: `workers` slots, questions off, no token allowance, every sender served.
fn bench_config(
    nats: agentwire_fisk::connection::NatsConnect,
    identity: &str,
    workers: usize,
) -> WorkerConfig {
    WorkerConfig {
        nats,
        identity: identity.into(),
        workers,
        elicit: false,
        request_timeout: Duration::from_secs(120),
        system_prompt: String::new(),
        max_tokens: None,
        instance: None,
        senders: Default::default(),
        jobs: None,
    }
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

/// Durable 4 KiB writes (overwriting a file's allocated blocks, then `fdatasync`), one per `once`: the least
/// a journal commit can cost on this disk.
struct DurableWrites {
    file: std::fs::File,
    path: std::path::PathBuf,
    n: u64,
}

impl DurableWrites {
    fn new(dir: &std::path::Path) -> DurableWrites {
        use std::os::unix::fs::FileExt;
        let path = dir.join("durable-write-probe");
        let file = std::fs::File::create(&path).unwrap();
        file.write_all_at(&[7u8; 16 * 4096], 0).unwrap();
        file.sync_all().unwrap();
        DurableWrites { file, path, n: 0 }
    }

    fn once(&mut self) -> Duration {
        use std::os::unix::fs::FileExt;
        let t = Instant::now();
        self.file
            .write_all_at(&[9u8; 4096], (self.n % 16) * 4096)
            .unwrap();
        self.file.sync_data().unwrap();
        self.n += 1;
        t.elapsed()
    }
}

impl Drop for DurableWrites {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
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

/// The machine's CPU time so far, from `/proc/stat`: (busy, total) in clock ticks, over all cores.
fn cpu_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: u64 = fields.iter().sum();
    // idle and iowait are the 4th and 5th fields.
    let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// Where a setup of the scale benchmark journals.
#[derive(Clone, Copy, Debug)]
enum Journaled {
    Sqlite,
    JetStream { replicas: usize },
}

/// Starts `instances` workers of one identity, each with its own engine, NATS connections and journal
/// handle, over one journal: what several `agentwire serve` instances are, in one process.
async fn instances(
    urls: &[String],
    journaled: Journaled,
    n: usize,
    workers: usize,
    dir: &std::path::Path,
) -> Vec<Arc<Worker>> {
    let mut out = Vec::new();
    for i in 0..n {
        let journal: Arc<dyn agentwire_store::Journal> = match journaled {
            Journaled::Sqlite => {
                Arc::new(SqliteJournal::open(&dir.join("journal.sqlite")).unwrap())
            }
            Journaled::JetStream { replicas } => {
                let addrs: Vec<async_nats::ServerAddr> =
                    urls.iter().map(|u| u.parse().unwrap()).collect();
                let config = agentwire_store::jetstream::JetStreamConfig {
                    prefix: format!("BENCH{replicas}"),
                    replicas,
                    lease: agentwire_store::jetstream::DEFAULT_LEASE,
                };
                let deadline = Instant::now() + Duration::from_secs(60);
                loop {
                    let client = async_nats::ConnectOptions::new()
                        .connect(addrs.clone())
                        .await
                        .unwrap();
                    match agentwire_store::jetstream::JetStreamJournal::open(client, &config).await
                    {
                        Ok(j) => break Arc::new(j),
                        // A cluster just started elects its JetStream leader first.
                        Err(e) if Instant::now() < deadline => {
                            eprintln!("waiting for JetStream: {e}");
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                        Err(e) => panic!("JetStream: {e}"),
                    }
                }
            }
        };
        let engine = Engine::with_owner(journal, Arc::new(DemoAgent), format!("bench-{i}"));
        let worker = Worker::start(
            WorkerConfig {
                instance: Some(format!("i{i}")),
                ..bench_config(
                    agentwire_fisk::connection::NatsConnect {
                        servers: urls.to_vec(),
                        ..agentwire_fisk::connection::NatsConnect::to("")
                    },
                    "scale",
                    workers,
                )
            },
            engine,
        )
        .await
        .unwrap();
        out.push(worker);
    }
    out
}

/// The scale benchmark (`-- --scale`): fisk-ai ack latency and runs per second on the SQLite journal, the
/// JetStream journal on one server (R1) and on a three-node cluster (R3), and runs per second with one, two
/// and three instances sharing the R3 journal, all on this machine, in one run.
fn scale() {
    let samples = arg("--samples", 500) as usize;
    let callers = arg("--callers", 50) as usize;
    let workers = arg("--workers", 64) as usize;
    let seconds = arg("--seconds", 5);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let dir = tempfile::tempdir().unwrap();
        let single = NatsServer::start_jetstream(&dir.path().join("js1"));
        let cluster = agentwire_testkit::NatsCluster::start(3, &dir.path().join("js3"));
        let one_url = vec![single.url.clone()];
        let setups: [(&str, &[String], Journaled, usize); 5] = [
            ("SQLite, 1 instance", &one_url, Journaled::Sqlite, 1),
            ("JetStream R1, 1 instance", &one_url, Journaled::JetStream { replicas: 1 }, 1),
            ("JetStream R3, 1 instance", &cluster.urls, Journaled::JetStream { replicas: 3 }, 1),
            ("JetStream R3, 2 instances", &cluster.urls, Journaled::JetStream { replicas: 3 }, 2),
            ("JetStream R3, 3 instances", &cluster.urls, Journaled::JetStream { replicas: 3 }, 3),
        ];
        println!("fisk-ai scale benchmark ({samples} acks; {callers} callers for {seconds} s; {workers} slots an instance)");
        for (n, (name, urls, journaled, count)) in setups.into_iter().enumerate() {
            let setup_dir = dir.path().join(format!("setup{n}"));
            std::fs::create_dir_all(&setup_dir).unwrap();
            let running = instances(urls, journaled, count, workers, &setup_dir).await;
            let addrs: Vec<async_nats::ServerAddr> = urls.iter().map(|u| u.parse().unwrap()).collect();
            let caller = async_nats::ConnectOptions::new().connect(addrs.clone()).await.unwrap();
            for i in 0..50 {
                one(&caller, "scale", &format!("s{n}w{i}"), true).await;
            }
            // The floor of a JetStream setup: one write to a bucket made as the journal's are (its
            // replicas, file storage), a key's create at revision 0 as a turn's record is, timed in turn
            // with the acks so that the machine's load weighs on both alike.
            let floor = match journaled {
                Journaled::JetStream { replicas } => Some(floor_bucket(&caller, n, replicas).await),
                Journaled::Sqlite => None,
            };
            let mut acks = Vec::with_capacity(samples);
            let mut writes = Vec::with_capacity(samples);
            let mut ack_writes = Vec::with_capacity(samples);
            for i in 0..samples {
                acks.push(one(&caller, "scale", &format!("s{n}a{i}"), true).await);
                if let Some(bucket) = &floor {
                    let asked = Instant::now();
                    bucket.create(format!("k{i}"), Vec::new().into()).await.unwrap();
                    writes.push(asked.elapsed());
                    // The writes a new conversation's ack waits for, sent as the journal sends them:
                    // FIRST_ROUND_WRITES at once, then the record's create.
                    let asked = Instant::now();
                    let first = (0..FIRST_ROUND_WRITES)
                        .map(|w| bucket.create(format!("k{i}r{w}"), Vec::new().into()));
                    for r in futures_util::future::join_all(first).await {
                        r.unwrap();
                    }
                    bucket.create(format!("k{i}rec"), Vec::new().into()).await.unwrap();
                    ack_writes.push(asked.elapsed());
                }
            }
            let write50 = (!writes.is_empty()).then(|| median(writes).0);
            let ack_writes50 = (!ack_writes.is_empty()).then(|| median(ack_writes).0);
            let (ack50, ack90, ack99) = median(acks);
            let done = Arc::new(AtomicU64::new(0));
            let stop_at = Instant::now() + Duration::from_secs(seconds);
            let mut tasks = Vec::new();
            for c in 0..callers {
                let done = done.clone();
                let client = async_nats::ConnectOptions::new().connect(addrs.clone()).await.unwrap();
                tasks.push(tokio::spawn(async move {
                    let mut k = 0u64;
                    while Instant::now() < stop_at {
                        one(&client, "scale", &format!("s{n}c{c}x{k}"), true).await;
                        k += 1;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }));
            }
            let started = Instant::now();
            let (busy0, total0) = cpu_ticks();
            for t in tasks {
                t.await.unwrap();
            }
            let (busy1, total1) = cpu_ticks();
            let cpu = 100.0 * (busy1 - busy0) as f64 / (total1 - total0).max(1) as f64;
            let runs = done.load(Ordering::Relaxed);
            let per_sec = runs as f64 / started.elapsed().as_secs_f64();
            println!(
                "{name:28} ack median {ack50:>9?}  p90 {ack90:>9?}  p99 {ack99:>9?}   runs/s {per_sec:>6.0}   CPU busy {cpu:.0}%"
            );
            if let Some(w) = write50 {
                println!(
                    "{:28} one write (create) median {w:>9?}   ack = {:.1} writes",
                    "",
                    ack50.as_secs_f64() / w.as_secs_f64()
                );
            }
            if let Some(w) = ack_writes50 {
                println!(
                    "{:28} the ack's writes alone ({FIRST_ROUND_WRITES} at once, then 1) median {w:>9?}",
                    ""
                );
            }
            println!(
                "{}",
                serde_json::json!({
                    "setup": name, "instances": count, "ack_median_us": ack50.as_micros(),
                    "ack_p90_us": ack90.as_micros(), "ack_p99_us": ack99.as_micros(),
                    "runs_per_sec": per_sec, "runs": runs, "cpu_busy_percent": cpu,
                    "write_median_us": write50.map(|w| w.as_micros()),
                    "ack_writes_median_us": ack_writes50.map(|w| w.as_micros()),
                })
            );
            for w in running {
                w.shutdown(Duration::from_secs(5)).await;
            }
        }
    });
}

/// The replicated writes of a new fisk-ai conversation's first round trip on a JetStream journal: the
/// turn's lease, the conversation's claim, its member, the turn's running hint and the conversation's meta
/// (the record's create follows them).
const FIRST_ROUND_WRITES: usize = 5;

/// A bucket of setup `n` made as the journal's are (`replicas`, file storage, one value a key), once it
/// takes writes (a replicated bucket just made elects its leader first).
async fn floor_bucket(
    client: &async_nats::Client,
    n: usize,
    replicas: usize,
) -> async_nats::jetstream::kv::Store {
    let js = async_nats::jetstream::new(client.clone());
    let bucket = js
        .create_key_value(async_nats::jetstream::kv::Config {
            bucket: format!("FLOOR{n}"),
            history: 1,
            num_replicas: replicas,
            storage: async_nats::jetstream::stream::StorageType::File,
            ..Default::default()
        })
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(e) = bucket.put("ready", Vec::new().into()).await {
        assert!(Instant::now() < deadline, "the floor's bucket: {e}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bucket
}

/// Waits for the final message of the reply set arriving on `sub`.
async fn until_final(sub: &mut async_nats::Subscriber) {
    loop {
        let m = sub.next().await.expect("the reply set");
        if m.headers
            .as_ref()
            .is_some_and(|h| h.get(nats::HEADER_STREAM_FINAL).is_some())
        {
            return;
        }
    }
}

/// The queued-jobs benchmark: a nats-server with JetStream, a worker with jobs on (the demo agent, a SQLite
/// journal); (a) `--samples` prompts (`quick hi`) timed from publishing to their terminal, as a request on
/// the task subject and as a job on the jobs subject (its `PubAck` included), one of each per round; (b)
/// `--backlog` jobs enqueued as fast as the queue takes them (the worker draining it meanwhile), and the
/// time until every terminal came.
fn jobs() {
    let samples = arg("--samples", 500) as usize;
    let backlog = arg("--backlog", 2000) as usize;
    let workers = arg("--workers", 64) as usize;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let store = tempfile::tempdir().unwrap();
        let nats_server = NatsServer::start_jetstream(store.path());
        let dir = tempfile::tempdir().unwrap();
        let journal = Arc::new(SqliteJournal::open(&dir.path().join("journal.sqlite")).unwrap());
        let engine = Engine::new(journal, Arc::new(DemoAgent));
        let identity = "bench";
        let _worker = Worker::start(
            WorkerConfig {
                jobs: Some(Default::default()),
                ..bench_config(
                    agentwire_fisk::connection::NatsConnect::to(nats_server.url.clone()),
                    identity,
                    workers,
                )
            },
            engine,
        )
        .await
        .unwrap();
        let caller = async_nats::connect(&nats_server.url).await.unwrap();
        let js = async_nats::jetstream::new(caller.clone());
        let job = |request: String, inbox: &str| {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(nats::HEADER_REPLY_TO, inbox);
            let js = js.clone();
            async move {
                js.publish_with_headers(nats::jobs_subject(identity), headers, prompt(&request, "quick hi").into())
                    .await
                    .unwrap()
                    .await
                    .unwrap();
            }
        };
        let (mut asked, mut queued) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
        for i in 0..samples + 50 {
            let t = Instant::now();
            one(&caller, identity, &format!("r{i}"), true).await;
            let request = t.elapsed();
            let inbox = caller.new_inbox();
            let mut sub = caller.subscribe(inbox.clone()).await.unwrap();
            let t = Instant::now();
            job(format!("j{i}"), &inbox).await;
            until_final(&mut sub).await;
            let as_job = t.elapsed();
            // The first 50 of each warm up.
            if i >= 50 {
                asked.push(request);
                queued.push(as_job);
            }
        }
        let (r50, _, r99) = median(asked);
        let (j50, _, j99) = median(queued);
        // (b) A backlog: every job enqueued first (the queue holds them), then drained by `workers` slots.
        let inbox = caller.new_inbox();
        let mut sub = caller.subscribe(inbox.clone()).await.unwrap();
        let t = Instant::now();
        let mut acks = Vec::with_capacity(backlog);
        for i in 0..backlog {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(nats::HEADER_REPLY_TO, inbox.as_str());
            acks.push(
                js.publish_with_headers(
                    nats::jobs_subject(identity),
                    headers,
                    prompt(&format!("b{i}"), "quick hi").into(),
                )
                .await
                .unwrap(),
            );
            if acks.len() == 256 {
                for a in acks.drain(..) {
                    a.await.unwrap();
                }
            }
        }
        for a in acks {
            a.await.unwrap();
        }
        let enqueued = t.elapsed();
        let mut finals = 0;
        while finals < backlog {
            let m = sub.next().await.expect("a reply");
            if m.headers
                .as_ref()
                .is_some_and(|h| h.get(nats::HEADER_STREAM_FINAL).is_some())
            {
                finals += 1;
            }
        }
        let drained = t.elapsed();
        let ratio = j50.as_secs_f64() / r50.as_secs_f64();
        println!("fisk-ai queued jobs ({samples} samples each, {workers} slots, a backlog of {backlog})");
        println!("a prompt to its terminal, as a request: median {r50:?}  p99 {r99:?}");
        println!("the same as a queued job (publish + PubAck, pull, run, ack): median {j50:?}  p99 {j99:?}");
        println!("ratio of medians: {ratio:.2}");
        let per_sec = backlog as f64 / drained.as_secs_f64();
        println!(
            "a backlog of {backlog} jobs: enqueued in {enqueued:?}, every terminal in {drained:?}: {per_sec:.0} jobs/s"
        );
        println!(
            "{}",
            serde_json::json!({
                "request_median_us": r50.as_micros(), "request_p99_us": r99.as_micros(),
                "job_median_us": j50.as_micros(), "job_p99_us": j99.as_micros(), "ratio": ratio,
                "backlog": backlog, "backlog_enqueued_ms": enqueued.as_millis(),
                "backlog_drained_ms": drained.as_millis(), "jobs_per_sec": per_sec, "workers": workers,
            })
        );
    });
}

fn main() {
    if std::env::args().any(|a| a == "--scale") {
        return scale();
    }
    if std::env::args().any(|a| a == "--jobs") {
        return jobs();
    }
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
            bench_config(
                agentwire_fisk::connection::NatsConnect::to(nats_server.url.clone()),
                identity,
                workers,
            ),
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
        let (mut syncs, mut commits) = (DurableWrites::new(dir.path()), agentwire_store::probe::CommitProbe::open(dir.path(), "fisk").unwrap());
        for i in 0..200 {
            caller.request("bench.echo", body.clone().into()).await.unwrap();
            one(&caller, identity, &format!("w{i}"), true).await;
            commits.once().await.unwrap();
        }
        // One sample of each per round, in turn: whatever else the machine does at the moment weighs on
        // all four alike, so their ratios hold from run to run better than their absolute figures.
        let (mut raw, mut acks) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
        let (mut sync, mut commit) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
        for i in 0..samples {
            let t = Instant::now();
            caller.request("bench.echo", body.clone().into()).await.unwrap();
            raw.push(t.elapsed());
            acks.push(one(&caller, identity, &format!("a{i}"), true).await);
            commit.push(commits.once().await.unwrap());
            sync.push(syncs.once());
        }
        let (raw50, raw90, raw99) = median(raw);
        let (ack50, ack90, ack99) = median(acks);
        let (sync50, _, _) = median(sync);
        let (commit50, _, _) = median(commit);
        // The same commit back to back, for comparison: a writer thread and a disk kept busy answer faster
        // than an ack's commit ever finds them (one per request, after an idle gap).
        let mut back_to_back = Vec::with_capacity(1000);
        for _ in 0..1000 {
            back_to_back.push(commits.once().await.unwrap());
        }
        let (b2b50, _, _) = median(back_to_back);

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
            "one journal commit of a new conversation's first turn (SqliteJournal::accept), taken in turn with \
             the acks: median {commit50:?}; ack / (raw + commit) = {vs_floor:.2} (target <= 1.3)"
        );
        let vs_b2b = ack50.as_secs_f64() / (raw50 + b2b50).as_secs_f64();
        println!(
            "the same commit back to back (a busy writer): median {b2b50:?}; ack / (raw + that) = {vs_b2b:.2}"
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
                "journal_commit_back_to_back_median_us": b2b50.as_micros(), "ack_vs_rtt_plus_back_to_back_commit": vs_b2b,
                "callers": callers, "workers": workers, "peak_rss_kib": vm("VmHWM:"),
            })
        );
    });
}
