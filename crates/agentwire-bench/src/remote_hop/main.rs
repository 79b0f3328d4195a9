//! `remote-hop`: what a remote hop costs. One `agentwire serve` (the remote) runs the demo agent over NIP-XX,
//! fisk-ai (a real nats-server) and A2A (its HTTP server); for each remote kind a second `agentwire serve`
//! (the near one) serves that agent as `[agents.far] kind = "<kind>"`, reached as its client. A NIP-XX
//! client times, in alternating rounds, the same prompt sent to the remote agent directly and through each
//! near daemon: the first answer text and the terminal, from the start of the prompt's encryption. The
//! difference is the hop: the near daemon's NIP-XX runtime, engine and journal, and the remote protocol's
//! client and round trip.
//!
//! Prints medians and p90s, and one JSON line. Run it from the workspace root after
//! `cargo build --release -p agentwire -p agentwire-bench`: `target/release/remote-hop --rounds 100`.
//! The figures and the method are in `docs/benchmarks.md`.

#[allow(dead_code)]
#[path = "../daemon.rs"]
mod daemon;
#[allow(dead_code)]
#[path = "../peer.rs"]
mod peer;

use agentwire_testkit::NatsServer;
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// How long one round may take before the benchmark gives up.
const ROUND_TIMEOUT: Duration = Duration::from_secs(30);
/// The variable the near daemon reads the remote's HTTP token from (its A2A front asks for it).
const TOKEN_ENV: &str = "REMOTE_HOP_A2A_TOKEN";

#[derive(Parser)]
struct Args {
    /// Rounds of each path.
    #[arg(long, default_value_t = 100)]
    rounds: usize,
    /// The agentwire binary to benchmark.
    #[arg(long, default_value = "target/release/agentwire")]
    daemon: PathBuf,
    /// The remote kinds to time, comma-separated.
    #[arg(long, default_value = "nipxx,fisk,a2a", value_delimiter = ',')]
    kinds: Vec<String>,
}

/// The near daemon's agent section for `kind`, reaching the remote daemon.
fn far(kind: &str, remote: &daemon::Daemon, nats: &str) -> Result<String, String> {
    let (http, _) = remote
        .http
        .clone()
        .ok_or("the remote runs no HTTP server")?;
    Ok(match kind {
        "nipxx" => format!(
            "[agents.far]\nkind = \"nipxx\"\npubkey = \"{}\"\nrelays = [\"{}\"]\n",
            remote.agent.to_hex(),
            remote.relay
        ),
        "fisk" => format!("[agents.far]\nkind = \"fisk\"\nurl = \"{nats}\"\nidentity = \"demo\"\n"),
        "a2a" => format!(
            "[agents.far]\nkind = \"a2a\"\nurl = \"{http}/a2a/demo/.well-known/agent-card.json\"\ntoken_env = \"{TOKEN_ENV}\"\n"
        ),
        other => return Err(format!("no remote kind {other:?} (nipxx, fisk, a2a)")),
    })
}

/// One path's samples.
struct Path {
    name: String,
    first: Vec<Duration>,
    terminal: Vec<Duration>,
    client: peer::BenchClient,
}

async fn bench(args: &Args) -> Result<Vec<Path>, String> {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let rate = daemon::BENCH_SENDER_RATE.to_string();
    let limits = ["--rate-per-second", &rate, "--rate-burst", &rate];
    let remote_dir = dir.path().join("remote");
    std::fs::create_dir_all(&remote_dir).map_err(|e| e.to_string())?;
    let mut remote_args = limits.to_vec();
    remote_args.extend([
        "--http-listen",
        "127.0.0.1:0",
        "--nats",
        &nats.url,
        "--identity",
        "demo",
    ]);
    let remote = daemon::Daemon::start_with(
        &args.daemon,
        &remote_dir,
        &daemon::config_toml(),
        &remote_args,
    )?;
    if let Some((_, token)) = &remote.http {
        // The near daemons inherit it; the A2A client sends it as the remote card asks.
        std::env::set_var(TOKEN_ENV, token);
    }
    let mut nears = Vec::new();
    let mut paths = vec![Path {
        name: "direct".into(),
        first: vec![],
        terminal: vec![],
        client: peer::BenchClient::connect(&remote.relay, remote.agent).await?,
    }];
    for kind in &args.kinds {
        let near_dir = dir.path().join(kind);
        std::fs::create_dir_all(&near_dir).map_err(|e| e.to_string())?;
        let config = format!(
            "{}{}",
            daemon::config_toml(),
            far(kind, &remote, &nats.url)?
        );
        let mut near_args = limits.to_vec();
        near_args.extend(["--agent", "far", "--http-listen", "127.0.0.1:0"]);
        let near = daemon::Daemon::start_with(&args.daemon, &near_dir, &config, &near_args)?;
        paths.push(Path {
            name: kind.clone(),
            first: vec![],
            terminal: vec![],
            client: peer::BenchClient::connect(&near.relay, near.agent).await?,
        });
        nears.push(near);
    }
    // One warm-up round each (connections, ai.info, cards, the first turn's tables).
    for round in 0..=args.rounds {
        for p in paths.iter_mut() {
            let text = format!("hop {round}");
            let (first, terminal) = p
                .client
                .first_and_terminal(&text, &format!("You said: {text}"), ROUND_TIMEOUT)
                .await
                .map_err(|e| format!("{} round {round}: {e:?}", p.name))?;
            if round > 0 {
                p.first.push(first);
                p.terminal.push(terminal);
            }
        }
    }
    drop(nears);
    Ok(paths)
}

fn ms(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let args = Args::parse();
    let paths = match bench(&args).await {
        Ok(p) => p,
        Err(e) => {
            eprintln!("remote-hop: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut json = serde_json::json!({"rounds": args.rounds});
    let direct = (
        peer_summary(&paths[0].first),
        peer_summary(&paths[0].terminal),
    );
    for p in &paths {
        let (first, terminal) = (peer_summary(&p.first), peer_summary(&p.terminal));
        let label = match p.name.as_str() {
            "direct" => "the remote agent directly".to_string(),
            kind => format!("through a near daemon, kind = {kind:?}"),
        };
        eprintln!(
            "{label:<44} first text median {:.2} ms (p90 {:.2}), terminal median {:.2} ms (p90 {:.2}); hop +{:.2} / +{:.2} ms",
            first.0, first.1, terminal.0, terminal.1, first.0 - direct.0 .0, terminal.0 - direct.1 .0
        );
        json[&p.name] = serde_json::json!({
            "first_text": {"median_ms": ms(first.0), "p90_ms": ms(first.1)},
            "terminal": {"median_ms": ms(terminal.0), "p90_ms": ms(terminal.1)},
        });
    }
    println!("{json}");
    ExitCode::SUCCESS
}

/// The median and p90 of `v`, in milliseconds.
fn peer_summary(v: &[Duration]) -> (f64, f64) {
    let mut v = v.to_vec();
    v.sort_unstable();
    let at = |q: f64| {
        let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len().max(1)) - 1;
        v.get(i).map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
    };
    (at(0.5), at(0.9))
}
