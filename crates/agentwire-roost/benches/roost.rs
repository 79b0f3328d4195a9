//! The roost supervisor's benchmark (`cargo build --release -p agentwire && cargo bench -p agentwire-roost
//! --bench roost`): against the real daemon (`agentwire serve`, a separate process), (a) the median round
//! trip of an agent's `report` divided by a raw JSON-lines echo over a unix socket in the same run, and
//! (b) 1024 connected agents (each said `hello` and reported) held at once, with the daemon's RSS.
//!
//! Flags (after `--`): `--daemon PATH` (default target/release/agentwire), `--samples N` (20000),
//! `--agents N` (1024).

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

struct Conn {
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::net::unix::OwnedReadHalf>>,
    w: tokio::net::unix::OwnedWriteHalf,
    next: u64,
}

impl Conn {
    async fn open(p: &Path) -> Conn {
        let (r, w) = UnixStream::connect(p).await.unwrap().into_split();
        Conn {
            lines: tokio::io::BufReader::new(r).lines(),
            w,
            next: 0,
        }
    }
    async fn call(&mut self, op: &str, args: Value) -> Value {
        self.next += 1;
        let mut l = json!({"id": self.next, "op": op, "args": args}).to_string();
        l.push('\n');
        self.w.write_all(l.as_bytes()).await.unwrap();
        loop {
            let v: Value =
                serde_json::from_str(&self.lines.next_line().await.unwrap().unwrap()).unwrap();
            if v.get("event").is_none() {
                assert_eq!(v["ok"], true, "{op}: {v}");
                return v["result"].clone();
            }
        }
    }
}

fn pct(mut v: Vec<Duration>, q: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * q) as usize]
}

/// The raw baseline: a JSON-lines echo over a unix socket, served by tokio as the daemon is, in a process
/// of its own as the daemon is.
fn echo_server(path: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let listener = UnixListener::bind(path).unwrap();
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (r, mut w) = s.into_split();
                let mut lines = tokio::io::BufReader::new(r).lines();
                while let Ok(Some(mut l)) = lines.next_line().await {
                    l.push('\n');
                    if w.write_all(l.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
}

fn main() {
    if let Some(path) = arg("--echo-serve") {
        echo_server(&path);
        return;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let daemon_bin = arg("--daemon")
        .map(PathBuf::from)
        .unwrap_or(root.join("target/release/agentwire"));
    let samples: usize = arg("--samples")
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let agents: usize = arg("--agents").and_then(|s| s.parse().ok()).unwrap_or(1024);
    assert!(
        daemon_bin.exists(),
        "build the daemon first: cargo build --release -p agentwire ({})",
        daemon_bin.display()
    );
    let dir = tempfile::Builder::new()
        .prefix("rb")
        .tempdir_in("/tmp")
        .unwrap();
    let cfg = dir.path().join("a.toml");
    std::fs::write(&cfg, "[roost.profiles.t]\ncommand = [\"sh\", \"-c\", \"echo $ROOST_JOB_TOKEN > token\"]\ntask = \"argv\"\nprotocol = true\n").unwrap();
    let socket = dir.path().join("r.sock");
    let mut child = Command::new(&daemon_bin)
        .args([
            "--data-dir",
            dir.path().join("d").to_str().unwrap(),
            "--config",
            cfg.to_str().unwrap(),
            "serve",
            "--relay-listen",
            "127.0.0.1:0",
            "--roost-socket",
            socket.to_str().unwrap(),
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.path().join("daemon.log")).unwrap())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    let pid = child.id();
    // The daemon goes with the benchmark, a panic included.
    struct Kill(u32);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = Command::new("kill").arg(self.0.to_string()).status();
        }
    }
    let _kill = Kill(pid);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let result = rt.block_on(async {
        let echo_path = dir.path().join("e.sock");
        let mut echo_child = Command::new(std::env::current_exe().unwrap())
            .args(["--echo-serve", echo_path.to_str().unwrap()])
            .spawn()
            .unwrap();
        for _ in 0..200 {
            if echo_path.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let data = dir.path().join("d");
        let mut ctl = Conn::open(&socket).await;
        // Jobs for the agents (their processes only write their token and exit).
        let mut jobs = Vec::new();
        for n in 0..agents {
            let j = ctl.call("dispatch", json!({"profile": "t", "task": format!("t{n}")})).await;
            jobs.push(j["id"].as_str().unwrap().to_string());
        }
        let mut tokens = Vec::new();
        for id in &jobs {
            let path = data.join("roost").join("jobs").join(id).join("token");
            let mut t = String::new();
            for _ in 0..400 {
                if let Ok(s) = std::fs::read_to_string(&path) {
                    if !s.trim().is_empty() { t = s.trim().to_string(); break; }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            tokens.push(t);
        }
        let report = |id: &str, token: &str, n: usize| json!({"id": id, "token": token,
            "report": {"state": "working", "status": "busy", "summary": format!("step {n} of the work")}});
        // (a) Round trips, interleaved so both see the same machine.
        let mut agent = Conn::open(&socket).await;
        agent.call("hello", json!({"protocol": 1, "capabilities": ["report", "replies"]})).await;
        let mut echo = Conn::open(&echo_path).await;
        let (mut r_times, mut e_times) = (Vec::new(), Vec::new());
        // The client does the same work on both sides: the line is encoded before the clock starts and the
        // answer read as a line (and checked after it stops); so the difference is what the daemon adds.
        let line = |n: usize| {
            let mut l = json!({"id": n, "op": "report", "args": report(&jobs[0], &tokens[0], n)})
                .to_string();
            l.push('\n');
            l
        };
        for n in 0..(samples + 1000) {
            // Each pair runs in either order, half the time each: neither side always follows the other.
            let (mut r, mut e) = (Duration::ZERO, Duration::ZERO);
            for side in [n % 2, 1 - n % 2] {
                let l = line(n);
                let t = Instant::now();
                if side == 0 {
                    agent.w.write_all(l.as_bytes()).await.unwrap();
                    let answer = agent.lines.next_line().await.unwrap().unwrap();
                    r = t.elapsed();
                    let answer: Value = serde_json::from_str(&answer).unwrap();
                    assert_eq!(answer["ok"], true, "{answer}");
                } else {
                    echo.w.write_all(l.as_bytes()).await.unwrap();
                    let echoed = echo.lines.next_line().await.unwrap().unwrap();
                    e = t.elapsed();
                    assert_eq!(echoed.len() + 1, l.len());
                }
            }
            if n >= 1000 { r_times.push(r); e_times.push(e); }
        }
        let (r50, e50) = (pct(r_times.clone(), 0.5), pct(e_times.clone(), 0.5));
        // (b) Every agent connected at once, each after hello and a report: the daemon's whole connection
        // budget (1024), so the controller and the round-trip agent leave first.
        drop(ctl);
        drop(agent);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let before = status_kib(pid, "VmRSS:");
        let mut held = Vec::new();
        for (id, token) in jobs.iter().zip(&tokens) {
            let mut c = Conn::open(&socket).await;
            c.call("hello", json!({"protocol": 1, "capabilities": ["report"]})).await;
            c.call("report", report(id, token, 0)).await;
            held.push(c);
        }
        // Every one answered its report on a live connection; all are still open here.
        let mut connected = 0;
        for c in held.iter_mut() {
            c.call("hello", json!({"protocol": 1})).await;
            connected += 1;
        }
        let rss = status_kib(pid, "VmRSS:");
        let hwm = status_kib(pid, "VmHWM:");
        let _ = echo_child.kill();
        let _ = echo_child.wait();
        // The same ratio over five consecutive stretches of the run: how steady the machine was.
        let stretch = (r_times.len() / 5).max(1);
        let stretches: Vec<f64> = r_times
            .chunks(stretch)
            .zip(e_times.chunks(stretch))
            .map(|(r, e)| {
                pct(r.to_vec(), 0.5).as_secs_f64() / pct(e.to_vec(), 0.5).as_secs_f64()
            })
            .collect();
        (r50, pct(r_times, 0.99), e50, pct(e_times, 0.99), connected, before, rss, hwm, stretches)
    });
    let (r50, r99, e50, e99, connected, before, rss, hwm, stretches) = result;
    let ratio = r50.as_secs_f64() / e50.as_secs_f64();
    println!("roost supervisor benchmark ({samples} samples, {agents} agents)");
    println!("report round trip:        median {r50:?}  p99 {r99:?}");
    println!("raw JSON-lines echo:      median {e50:?}  p99 {e99:?}");
    println!("ratio of medians: {ratio:.2} (target <= 1.3)");
    let spread: Vec<String> = stretches.iter().map(|r| format!("{r:.2}")).collect();
    println!(
        "the same ratio over five stretches of the run: {}",
        spread.join(" ")
    );
    println!("agents connected at once: {connected}; daemon RSS {rss} KiB (before them {before} KiB, peak {hwm} KiB)");
    println!(
        "{}",
        json!({"report_median_us": r50.as_secs_f64() * 1e6, "echo_median_us": e50.as_secs_f64() * 1e6,
        "ratio": ratio, "ratio_by_stretch": stretches, "agents_connected": connected, "daemon_rss_kib": rss, "daemon_rss_before_kib": before, "daemon_peak_kib": hwm})
    );
    let _ = child.kill();
    let _ = child.wait();
}
