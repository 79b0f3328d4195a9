//! The daemon under test: `agentwire serve` started as a separate process on a temp data directory, with
//! the benchmark's configuration file, and read-outs of its memory and CPU time from `/proc`.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nostr::prelude::PublicKey;

/// How long the daemon may take to print its ready line.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The sender rate the benchmark gives the daemon (prompts per second per sender, and the burst). The
/// default (50/s, burst 100) protects a public agent from one noisy key; the latency phase sends one
/// client's prompts back to back, far faster than that, so the limit is lifted to measure the engine.
pub(crate) const BENCH_SENDER_RATE: f64 = 1_000_000.0;

/// The configuration file written for the daemon: the relay's per-connection event rate is turned off
/// (0) for the same reason as the sender rate; the connection caps (512 in all, 128 per address, and every
/// client connects from loopback) are raised so that they can never be what limits a run with many clients.
pub(crate) fn config_toml() -> String {
    "# Written by agentwire-bench: limits that protect a public deployment, lifted to measure the engine.\n\
     [relay.limits]\n\
     max_events_per_second_per_connection = 0\n\
     max_connections = 4096\n\
     max_connections_per_address = 4096\n"
        .to_string()
}

/// A running `agentwire serve`.
pub(crate) struct Daemon {
    child: Child,
    /// The embedded relay's URL.
    pub(crate) relay: String,
    /// The agent's public key.
    pub(crate) agent: PublicKey,
    /// Where its stderr goes.
    pub(crate) log: PathBuf,
    /// Its HTTP server and the token, from the ready line.
    pub(crate) http: Option<(String, String)>,
    /// Its roost supervisor's socket, from the ready line (the soak dispatches jobs on it).
    #[allow(dead_code)]
    pub(crate) roost_socket: Option<PathBuf>,
}

impl Daemon {
    /// Starts `binary serve` on a fresh data directory inside `dir` and waits for its ready line; with
    /// `http`, its HTTP server on a free port (without, the flag is not given, so that a build from before
    /// the HTTP server runs too).
    pub(crate) fn start(binary: &Path, dir: &Path, http: bool) -> Result<Daemon, String> {
        let rate = BENCH_SENDER_RATE.to_string();
        let mut args = vec!["--rate-per-second", &rate, "--rate-burst", &rate];
        if http {
            args.extend(["--http-listen", "127.0.0.1:0"]);
        }
        Self::start_with(binary, dir, &config_toml(), &args)
    }

    /// Starts `binary serve` with the configuration file `config` and `serve_args` after `serve`, on a
    /// fresh data directory inside `dir`, and waits for its ready line.
    pub(crate) fn start_with(
        binary: &Path,
        dir: &Path,
        config: &str,
        serve_args: &[&str],
    ) -> Result<Daemon, String> {
        let data_dir = dir.join("data");
        let config_path = dir.join("bench.toml");
        std::fs::write(&config_path, config).map_err(|e| format!("writing the config: {e}"))?;
        let log = dir.join("daemon.log");
        let log_file = std::fs::File::create(&log).map_err(|e| format!("creating the log: {e}"))?;
        let mut child = Command::new(binary)
            .arg("--config")
            .arg(&config_path)
            .arg("--data-dir")
            .arg(&data_dir)
            .args(["--log", "warn", "serve", "--relay-listen", "127.0.0.1:0"])
            .args(serve_args)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let _ = tx.send(reader.read_line(&mut line).map(|_| line));
            // Keep reading so the daemon never blocks on a full pipe.
            let mut sink = Vec::new();
            let _ = reader.read_to_end(&mut sink);
        });
        let line = match rx.recv_timeout(READY_TIMEOUT) {
            Ok(Ok(line)) if !line.is_empty() => line,
            other => {
                let _ = child.kill();
                let _ = child.wait();
                let tail = std::fs::read_to_string(&log).unwrap_or_default();
                return Err(format!(
                    "the daemon printed no ready line ({other:?}); its log:\n{tail}"
                ));
            }
        };
        let v: serde_json::Value = serde_json::from_str(&line)
            .map_err(|e| format!("ready line {line:?} is not JSON: {e}"))?;
        let relay = v["relay"]
            .as_str()
            .ok_or_else(|| format!("ready line {line:?} has no relay"))?
            .to_string();
        let agent = v["agent_pubkey"]
            .as_str()
            .and_then(|h| PublicKey::from_hex(h).ok())
            .ok_or_else(|| format!("ready line {line:?} has no agent_pubkey"))?;
        let http = v["http"]
            .as_str()
            .zip(v["http_token"].as_str())
            .map(|(u, t)| (u.to_string(), t.to_string()));
        let roost_socket = v["roost_socket"].as_str().map(PathBuf::from);
        Ok(Daemon {
            child,
            relay,
            agent,
            log,
            http,
            roost_socket,
        })
    }

    /// The daemon's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its memory figures now.
    pub(crate) fn memory(&self) -> Option<Memory> {
        Memory::of(self.pid())
    }

    /// Its CPU time so far (user + system), in seconds.
    pub(crate) fn cpu_seconds(&self) -> Option<f64> {
        cpu_seconds(&format!("/proc/{}/stat", self.pid()))
    }

    /// Whether it is still running.
    pub(crate) fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Resident memory of a process, from `/proc/<pid>/status`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Memory {
    /// Peak resident set (VmHWM), KiB.
    pub(crate) peak_kib: u64,
    /// Resident set now (VmRSS), KiB.
    pub(crate) rss_kib: u64,
}

impl Memory {
    /// Reads the figures of `pid`.
    pub(crate) fn of(pid: u32) -> Option<Memory> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|n| n.parse().ok())
        };
        Some(Memory {
            peak_kib: field("VmHWM:")?,
            rss_kib: field("VmRSS:")?,
        })
    }
}

/// Clock ticks per second of `/proc/*/stat` times: `getconf CLK_TCK`, 100 (Linux's value everywhere we
/// run) if that cannot be asked.
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// CPU time used so far by the daemon, by this process and by the whole machine.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuSnapshot {
    daemon: Option<f64>,
    own: Option<f64>,
    machine: Option<f64>,
}

/// CPU seconds used between two snapshots.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuUse {
    /// By the daemon.
    pub(crate) daemon: f64,
    /// By the benchmark (clients and echo peer).
    pub(crate) bench: f64,
    /// By everything else on the machine: other people's work, which skews the figures.
    pub(crate) other: f64,
}

impl CpuSnapshot {
    /// Now.
    pub(crate) fn take(daemon: &Daemon) -> CpuSnapshot {
        CpuSnapshot {
            daemon: daemon.cpu_seconds(),
            own: cpu_seconds("/proc/self/stat"),
            machine: machine_busy_seconds(),
        }
    }

    /// What was used from `self` to `later` (NaN where `/proc` could not be read).
    pub(crate) fn until(&self, later: &CpuSnapshot) -> CpuUse {
        let d = |a: Option<f64>, b: Option<f64>| a.zip(b).map_or(f64::NAN, |(a, b)| b - a);
        let daemon = d(self.daemon, later.daemon);
        let bench = d(self.own, later.own);
        let machine = d(self.machine, later.machine);
        CpuUse {
            daemon,
            bench,
            other: (machine - daemon - bench).max(0.0),
        }
    }
}

/// Busy CPU seconds of the whole machine so far (all cores: user, nice, system, irq, softirq,
/// steal), from `/proc/stat`. What neither the daemon nor the benchmark used of it was used by
/// other processes, which skews the figures: the benchmark reports it.
pub(crate) fn machine_busy_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    // user nice system idle iowait irq softirq steal
    let busy = f.first()? + f.get(1)? + f.get(2)? + f.get(5)? + f.get(6)? + f.get(7)?;
    Some(busy / clock_ticks())
}

/// User + system CPU seconds of the process whose `stat` file is `path`.
pub(crate) fn cpu_seconds(path: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(path).ok()?;
    // The command name is in parentheses and may hold spaces: count fields after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ')' come state (field 3), ...; utime is field 14 and stime field 15 of the whole line.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / clock_ticks())
}
