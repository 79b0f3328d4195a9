//! `soak`: does a long-running daemon level off? It starts `agentwire serve` (embedded relay, demo agent,
//! a room with the task-card adapter, the agent hosted as a roost profile) with a short retention, loads
//! it for a long time with NIP-XX runs from many clients (closed loop), task cards in the room and roost
//! jobs dispatched over the supervisor's socket, and samples every minute the daemon's
//! resident memory (VmRSS), its data dir's size and what was served. A daemon that levels off has both
//! flat once the retention has come round; one that leaks rises to the end.
//!
//! fisk-ai is not in the load: its conversations are kept until an operator removes them (as its spec
//! says), so a journal serving new fisk-ai conversations grows by design.
//!
//! Run it from the workspace root after `cargo build --release -p agentwire -p agentwire-bench`:
//! `target/release/soak --duration-secs 1800`. The figures are in `docs/benchmarks.md`.

#[allow(dead_code)]
#[path = "../daemon.rs"]
mod daemon;
#[allow(dead_code)]
#[path = "../peer.rs"]
mod peer;

use agentwire_nostr::relay_conn::{Incoming, RelayConn};
use clap::Parser;
use nostr::prelude::{EventBuilder, Filter, FinalizeEvent, Keys, Kind, Tag, Timestamp};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long one NIP-XX run or task may take before it counts as a failure.
const RUN_TIMEOUT: Duration = Duration::from_secs(30);
/// The room the task cards go to.
const ROOM: &str = "soak";

/// A long load against the real daemon, sampling its memory and data dir.
#[derive(Debug, Parser)]
#[command(name = "soak", version, about)]
struct Args {
    /// How long the load runs, seconds.
    #[arg(long, default_value_t = 1800)]
    duration_secs: u64,
    /// Seconds between two samples.
    #[arg(long, default_value_t = 60)]
    sample_secs: u64,
    /// Concurrent NIP-XX clients, each running prompts back to back.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Pause between two prompts of one client, milliseconds (0: back to back).
    #[arg(long, default_value_t = 5)]
    pause_ms: u64,
    /// Task cards posted per second.
    #[arg(long, default_value_t = 2.0)]
    tasks_per_sec: f64,
    /// Roost jobs dispatched per second (each a job of the hosted demo agent with one turn).
    #[arg(long, default_value_t = 1.0)]
    jobs_per_sec: f64,
    /// How long ended turns and the relay's run events and room events are kept, seconds.
    #[arg(long, default_value_t = 300)]
    retention_secs: u64,
    /// The agentwire binary.
    #[arg(long, default_value = "target/release/agentwire")]
    daemon: PathBuf,
}

/// What was served so far.
#[derive(Default)]
struct Counts {
    runs: AtomicU64,
    run_failures: AtomicU64,
    tasks: AtomicU64,
    task_failures: AtomicU64,
    jobs: AtomicU64,
    job_failures: AtomicU64,
}

fn config(retention_days: f64, tasker: &Keys) -> String {
    let hex = tasker.public_key().to_hex();
    format!(
        "{}\n[relay.retention]\nagent_days = {retention_days}\nrooms_days = {retention_days}\nother_days = {retention_days}\n\n[journal]\nretention_days = {retention_days}\n\n[[rooms]]\nid = \"{ROOM}\"\nclosed = true\nmembers = [\"{hex}\"]\n\n[tasks]\nwatch = [\"{ROOM}\"]\nallowed = [\"{hex}\"]\nmax_running = 16\n",
        daemon::config_toml()
    )
}

/// The size of every file under `dir`, in bytes.
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(_) => e.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}

/// One NIP-XX client running prompts until `until`.
async fn nipxx_client(
    relay: String,
    agent: nostr::prelude::PublicKey,
    counts: Arc<Counts>,
    pause: Duration,
    until: Instant,
) -> Result<(), String> {
    let mut c = peer::BenchClient::connect(&relay, agent).await?;
    while Instant::now() < until {
        match c.run(RUN_TIMEOUT).await {
            Ok(_) => counts.runs.fetch_add(1, Ordering::Relaxed),
            Err(_) => counts.run_failures.fetch_add(1, Ordering::Relaxed),
        };
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
    }
    Ok(())
}

/// Posts task cards at `per_sec` until `until`, and counts their results and errors.
async fn tasker(
    relay: String,
    agent: nostr::prelude::PublicKey,
    keys: Keys,
    counts: Arc<Counts>,
    per_sec: f64,
    until: Instant,
) -> Result<(), String> {
    let (conn, mut rx) = RelayConn::connect(&relay);
    if !conn.wait_connected(Duration::from_secs(5)).await {
        return Err("the tasker cannot reach the relay".into());
    }
    conn.subscribe(
        "ends",
        vec![Filter::new()
            .kinds([Kind::Custom(43004), Kind::Custom(43006)])
            .author(agent)
            .pubkey(keys.public_key())
            .since(Timestamp::now())],
    );
    let ends = counts.clone();
    tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            if let Incoming::Event { event, .. } = m {
                match event.kind.as_u16() {
                    43004 => ends.tasks.fetch_add(1, Ordering::Relaxed),
                    _ => ends.task_failures.fetch_add(1, Ordering::Relaxed),
                };
            }
        }
    });
    let every = Duration::from_secs_f64(1.0 / per_sec.max(0.001));
    let mut tick = tokio::time::interval(every);
    let mut n = 0u64;
    while Instant::now() < until {
        tick.tick().await;
        n += 1;
        let tags = [
            Tag::parse(["p", &agent.to_hex()]).map_err(|e| e.to_string())?,
            Tag::parse(["h", ROOM]).map_err(|e| e.to_string())?,
        ];
        let event = EventBuilder::new(Kind::Custom(43001), format!("calc {n} * 2"))
            .tags(tags)
            .finalize(&keys)
            .map_err(|e| e.to_string())?;
        conn.send(&event);
    }
    Ok(())
}

/// Dispatches jobs of the hosted demo agent at `per_sec` until `until`, and counts those whose row ends
/// `done` (a job that fails, or dispatches refused, count as failures).
async fn dispatcher(
    socket: PathBuf,
    counts: Arc<Counts>,
    per_sec: f64,
    until: Instant,
) -> Result<(), String> {
    use agentwire_roost::client::Controller;
    let connect = || async {
        Controller::connect(&socket)
            .await
            .map_err(|e| format!("the roost socket: {e}"))
    };
    let mut watcher = connect().await?;
    watcher
        .call("subscribe", json!({}))
        .await
        .map_err(|e| e.to_string())?;
    let in_flight: Arc<std::sync::Mutex<std::collections::HashSet<String>>> = Arc::default();
    let (ends, flying) = (counts.clone(), in_flight.clone());
    tokio::spawn(async move {
        while let Ok(e) = watcher.next_event().await {
            let row = &e["row"];
            let Some(id) = row["id"].as_str() else {
                continue;
            };
            let counter = match row["state"].as_str() {
                Some("done") => &ends.jobs,
                Some("failed" | "exited" | "stopped") => &ends.job_failures,
                _ => continue,
            };
            if flying.lock().unwrap_or_else(|p| p.into_inner()).remove(id) {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    let mut ctl = connect().await?;
    let every = Duration::from_secs_f64(1.0 / per_sec.max(0.001));
    let mut tick = tokio::time::interval(every);
    let mut n = 0u64;
    while Instant::now() < until {
        tick.tick().await;
        n += 1;
        let task = format!("calc {n} * 3");
        match ctl
            .call("dispatch", json!({ "profile": "demo", "task": task }))
            .await
        {
            Ok(v) => {
                if let Some(id) = v["id"].as_str() {
                    in_flight
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(id.to_string());
                }
            }
            Err(_) => {
                counts.job_failures.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Ok(())
}

async fn soak(args: Args) -> Result<serde_json::Value, String> {
    if !args.daemon.exists() {
        return Err(format!(
            "{} not found: run `cargo build --release -p agentwire -p agentwire-bench` first",
            args.daemon.display()
        ));
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let keys = Keys::generate();
    let retention_days = args.retention_secs as f64 / 86_400.0;
    let rate = daemon::BENCH_SENDER_RATE.to_string();
    let horizon = (args.retention_secs / 2).max(1).to_string();
    let d = daemon::Daemon::start_with(
        &args.daemon,
        dir.path(),
        &config(retention_days, &keys),
        &[
            "--rate-per-second",
            &rate,
            "--rate-burst",
            &rate,
            "--backlog-horizon-secs",
            &horizon,
            "--http-listen",
            "off",
        ],
    )?;
    let data_dir = dir.path().join("data");
    let counts = Arc::new(Counts::default());
    let started = Instant::now();
    let until = started + Duration::from_secs(args.duration_secs);
    let mut load = Vec::new();
    for _ in 0..args.clients {
        load.push(tokio::spawn(nipxx_client(
            d.relay.clone(),
            d.agent,
            counts.clone(),
            Duration::from_millis(args.pause_ms),
            until,
        )));
    }
    load.push(tokio::spawn(tasker(
        d.relay.clone(),
        d.agent,
        keys,
        counts.clone(),
        args.tasks_per_sec,
        until,
    )));
    if args.jobs_per_sec > 0.0 {
        let socket = d
            .roost_socket
            .clone()
            .ok_or("the daemon runs no roost socket")?;
        load.push(tokio::spawn(dispatcher(
            socket,
            counts.clone(),
            args.jobs_per_sec,
            until,
        )));
    }
    // The jobs the supervisor holds, sampled: retention keeps them level.
    let mut rows = match &d.roost_socket {
        Some(s) => agentwire_roost::client::Controller::connect(s).await.ok(),
        None => None,
    };
    let mut samples = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_secs(args.sample_secs.max(1)));
    eprintln!(
        "minute  runs       failed  tasks   failed  jobs    failed  held    rss_mib  data_mib"
    );
    loop {
        tick.tick().await;
        let memory = d.memory().ok_or("the daemon is gone")?;
        let held = match rows.as_mut() {
            Some(c) => c
                .call("rows", json!({}))
                .await
                .ok()
                .and_then(|v| v["rows"].as_array().map(Vec::len)),
            None => None,
        };
        let sample = json!({
            "secs": started.elapsed().as_secs(),
            "runs": counts.runs.load(Ordering::Relaxed),
            "run_failures": counts.run_failures.load(Ordering::Relaxed),
            "tasks": counts.tasks.load(Ordering::Relaxed),
            "task_failures": counts.task_failures.load(Ordering::Relaxed),
            "jobs": counts.jobs.load(Ordering::Relaxed),
            "job_failures": counts.job_failures.load(Ordering::Relaxed),
            "jobs_held": held,
            "rss_kib": memory.rss_kib,
            "data_dir_bytes": dir_bytes(&data_dir),
        });
        eprintln!(
            "{:>6.1}  {:>9}  {:>6}  {:>6}  {:>6}  {:>6}  {:>6}  {:>6}  {:>7.1}  {:>8.1}",
            started.elapsed().as_secs_f64() / 60.0,
            sample["runs"].to_string(),
            sample["run_failures"].to_string(),
            sample["tasks"].to_string(),
            sample["task_failures"].to_string(),
            sample["jobs"].to_string(),
            sample["job_failures"].to_string(),
            sample["jobs_held"].to_string(),
            memory.rss_kib as f64 / 1024.0,
            sample["data_dir_bytes"].as_u64().unwrap_or(0) as f64 / 1_048_576.0,
        );
        samples.push(sample);
        if Instant::now() >= until {
            break;
        }
    }
    for l in load {
        if let Ok(Err(e)) = l.await {
            return Err(e);
        }
    }
    Ok(json!({
        "duration_secs": args.duration_secs,
        "clients": args.clients,
        "tasks_per_sec": args.tasks_per_sec,
        "jobs_per_sec": args.jobs_per_sec,
        "retention_secs": args.retention_secs,
        "samples": samples,
    }))
}

#[tokio::main]
async fn main() -> ExitCode {
    match soak(Args::parse()).await {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("soak: {e}");
            ExitCode::from(1)
        }
    }
}
