//! `roost-bench`: the roost fleet's targets (issue 21). It starts `agentwire serve`, dispatches `--jobs` jobs
//! whose processes only wait, speaks for each over its own socket connection (a report each), and measures,
//! alternating in one run:
//! - the report round trip: a session's `report` to its answer;
//! - the `send` round trip: a session's `send` to the target's `deliver` event (the target takes peer
//!   items and acks each by itself; senders take turns, so none meets the 30-a-minute rule).
//!
//! Then it fills the feed past its 1,000 events and reads the daemon's resident memory with every job live.
//! Run from the workspace root after `cargo build --release -p agentwire -p agentwire-bench`:
//! `target/release/roost-bench`. The figures are in `docs/benchmarks.md`.

#[allow(dead_code)]
#[path = "../daemon.rs"]
mod daemon;
#[allow(dead_code)]
#[path = "../stats.rs"]
mod stats;

use clap::Parser;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

/// How long one request or event may take before the benchmark gives up.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// Messages one sender sends in the run: under the daemon's 30 a minute per sender.
const SENDS_PER_SENDER: usize = 25;

/// The roost fleet's round trips and memory.
#[derive(Debug, Parser)]
#[command(name = "roost-bench", version, about)]
struct Args {
    /// Live jobs (each a process and a reporting connection).
    #[arg(long, default_value_t = 200)]
    jobs: usize,
    /// Round trips of each kind.
    #[arg(long, default_value_t = 2000)]
    rounds: usize,
    /// The agentwire binary.
    #[arg(long, default_value = "target/release/agentwire")]
    daemon: PathBuf,
}

/// One JSON-lines connection: requests answered in order, events kept aside.
struct Line {
    lines: Lines<BufReader<OwnedReadHalf>>,
    w: OwnedWriteHalf,
    next: u64,
}

impl Line {
    async fn connect(socket: &Path) -> Result<Line, String> {
        let s = UnixStream::connect(socket)
            .await
            .map_err(|e| format!("{}: {e}", socket.display()))?;
        let (r, w) = s.into_split();
        Ok(Line {
            lines: BufReader::new(r).lines(),
            w,
            next: 0,
        })
    }

    async fn write(&mut self, op: &str, args: Value) -> Result<u64, String> {
        self.next += 1;
        let mut line = json!({ "id": self.next, "op": op, "args": args }).to_string();
        line.push('\n');
        self.w
            .write_all(line.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        Ok(self.next)
    }

    async fn read(&mut self) -> Result<Value, String> {
        let line = tokio::time::timeout(STEP_TIMEOUT, self.lines.next_line())
            .await
            .map_err(|_| "no line in time".to_string())?
            .map_err(|e| e.to_string())?
            .ok_or("the daemon closed the connection")?;
        serde_json::from_str(&line).map_err(|e| e.to_string())
    }

    /// Sends `op` and returns its result (events met meanwhile are dropped).
    async fn call(&mut self, op: &str, args: Value) -> Result<Value, String> {
        let id = self.write(op, args).await?;
        loop {
            let v = self.read().await?;
            if v["id"] == id {
                return match v["ok"] == true {
                    true => Ok(v["result"].clone()),
                    false => Err(format!("{op}: {v}")),
                };
            }
        }
    }

    /// The next `deliver` event.
    async fn deliver(&mut self) -> Result<Value, String> {
        loop {
            let v = self.read().await?;
            if v["event"] == "deliver" {
                return Ok(v);
            }
        }
    }
}

fn config() -> String {
    format!(
        "{}\n[roost.profiles.hold]\ncommand = [\"sh\", \"-c\", \"env > env.txt; exec sleep 3600\"]\ntask = \"type\"\nprotocol = true\n",
        daemon::config_toml()
    )
}

/// The job's token, once its process wrote its environment.
async fn token(data: &Path, id: &str) -> Result<String, String> {
    let path = data.join("roost").join("jobs").join(id).join("env.txt");
    let deadline = Instant::now() + STEP_TIMEOUT;
    while Instant::now() < deadline {
        if let Ok(text) = std::fs::read_to_string(&path) {
            if let Some(t) = text
                .lines()
                .find_map(|l| l.strip_prefix("ROOST_JOB_TOKEN="))
            {
                return Ok(t.to_string());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(format!("job {id} did not start"))
}

async fn bench(args: Args) -> Result<Value, String> {
    if !args.daemon.exists() {
        return Err(format!(
            "{} not found: run `cargo build --release -p agentwire -p agentwire-bench` first",
            args.daemon.display()
        ));
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let d = daemon::Daemon::start_with(
        &args.daemon,
        dir.path(),
        &config(),
        &["--http-listen", "off"],
    )?;
    let socket = d
        .roost_socket
        .clone()
        .ok_or("no roost socket in the ready line")?;
    let data = dir.path().join("data");
    let mut ctl = Line::connect(&socket).await?;
    let mut sessions = Vec::new();
    for n in 0..args.jobs.max(2) {
        let job = ctl
            .call(
                "dispatch",
                json!({ "profile": "hold", "task": "hold", "name": format!("j{n}") }),
            )
            .await?;
        let id = job["id"]
            .as_str()
            .ok_or("a dispatch without an id")?
            .to_string();
        let token = token(&data, &id).await?;
        let mut s = Line::connect(&socket).await?;
        // The target (the first) takes peer items; every session acks its task.
        let report = json!({ "state": "working", "agentItems": n == 0 });
        s.call(
            "report",
            json!({ "id": id, "token": token, "report": report }),
        )
        .await?;
        let task = s.deliver().await?;
        s.call(
            "ack",
            json!({ "id": id, "token": token, "seq": task["seq"] }),
        )
        .await?;
        sessions.push((id, token, s));
    }
    let (target_id, target_token, mut target) = sessions.remove(0);
    let mut report_rtt = Vec::with_capacity(args.rounds);
    let mut send_rtt = Vec::with_capacity(args.rounds);
    let senders = sessions.len();
    if args.rounds > senders * SENDS_PER_SENDER {
        return Err(format!(
            "{} rounds need more senders than {senders} (at most {SENDS_PER_SENDER} sends each)",
            args.rounds
        ));
    }
    for round in 0..args.rounds {
        let (id, token, s) = &mut sessions[round % senders];
        let started = Instant::now();
        s.call(
            "report",
            json!({ "id": id, "token": token, "report": { "state": "working", "summary": format!("round {round}") } }),
        )
        .await?;
        report_rtt.push(started.elapsed());
        let started = Instant::now();
        s.write(
            "send",
            json!({ "to": target_id, "text": format!("message {round}") }),
        )
        .await?;
        let item = target.deliver().await?;
        send_rtt.push(started.elapsed());
        // The sender's answer, and the target's exact ack (20 items may wait, no more).
        let answer = s.read().await?;
        if answer["ok"] != true {
            return Err(format!("send refused: {answer}"));
        }
        target
            .call(
                "ack",
                json!({ "id": target_id, "token": target_token, "seq": item["seq"], "exact": true }),
            )
            .await?;
    }
    let events = ctl.call("events", json!({})).await?;
    let feed = events["events"].as_array().map_or(0, Vec::len);
    let memory = d.memory().ok_or("the daemon is gone")?;
    // The jobs' processes outlive a daemon: removed, they are stopped.
    for id in std::iter::once(&target_id).chain(sessions.iter().map(|(id, _, _)| id)) {
        ctl.call("rm", json!({ "id": id })).await?;
    }
    let (report, send) = (
        stats::Summary::of(&report_rtt),
        stats::Summary::of(&send_rtt),
    );
    Ok(json!({
        "jobs": args.jobs,
        "rounds": args.rounds,
        "report_round_trip": report.json(),
        "send_round_trip": send.json(),
        "send_over_report_median": stats::round3(send.median / report.median),
        "feed_events": feed,
        "rss_mib": stats::round3(memory.rss_kib as f64 / 1024.0),
        "peak_rss_mib": stats::round3(memory.peak_kib as f64 / 1024.0),
    }))
}

#[tokio::main]
async fn main() -> ExitCode {
    match bench(Args::parse()).await {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("roost-bench: {e}");
            ExitCode::from(1)
        }
    }
}
