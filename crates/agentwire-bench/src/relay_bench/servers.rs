//! The relays under test, each a separate process on a free loopback port with a fresh data directory:
//! `agentwire serve` (its embedded relay, with a closed room whose members are the benchmark's keys) and
//! `nostr-rs-relay` (its own configuration file, no limits set).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nostr::prelude::PublicKey;

use crate::daemon::{cpu_seconds, Daemon};

/// How long a relay may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The closed room the room-message and answer phases write to.
pub(crate) const ROOM: &str = "bench";

enum Process {
    Agentwire(Daemon),
    Other(Child),
}

/// A relay process.
pub(crate) struct Server {
    process: Process,
    /// Its WebSocket URL.
    pub(crate) url: String,
    /// What it is, for the report.
    pub(crate) name: &'static str,
}

impl Drop for Server {
    fn drop(&mut self) {
        // A `Daemon` stops itself when dropped.
        if let Process::Other(child) = &mut self.process {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Server {
    /// User + system CPU seconds the relay has used.
    pub(crate) fn cpu_seconds(&self) -> Option<f64> {
        match &self.process {
            Process::Agentwire(d) => d.cpu_seconds(),
            Process::Other(c) => cpu_seconds(&format!("/proc/{}/stat", c.id())),
        }
    }

    /// The CPU time the relay's threads have run, to the nanosecond (the scheduler's own account in
    /// `/proc/<pid>/task/*/schedstat`, where `stat` counts in 10 ms ticks): for short probes. Threads that
    /// have ended are not counted, so only differences over a stretch when none ends mean anything.
    pub(crate) fn cpu_seconds_exact(&self) -> Option<f64> {
        let pid = match &self.process {
            Process::Agentwire(d) => d.pid(),
            Process::Other(c) => c.id(),
        };
        threads_cpu_seconds(pid)
    }
}

/// The run time of every live thread of process `pid`, seconds, from `schedstat`.
pub(crate) fn threads_cpu_seconds(pid: u32) -> Option<f64> {
    let mut ns: u64 = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let path = task.ok()?.path().join("schedstat");
        // A thread that ended since the listing has no file any more: it is not counted.
        let Ok(stat) = std::fs::read_to_string(path) else {
            continue;
        };
        ns += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(ns as f64 / 1e9)
}

/// Starts `agentwire serve` with its relay's per-connection rate off and a closed room of `members`.
pub(crate) fn agentwire(
    binary: &Path,
    dir: &Path,
    members: &[PublicKey],
) -> Result<Server, String> {
    let members: Vec<String> = members
        .iter()
        .map(|k| format!("\"{}\"", k.to_hex()))
        .collect();
    let config = format!(
        "# Written by relay-bench: the public-deployment limits lifted to measure the relay.\n\
         [relay.limits]\nmax_events_per_second_per_connection = 0\nmax_connections = 4096\n\
         max_connections_per_address = 4096\nmax_subscriptions_per_connection = 128\n\n\
         [[rooms]]\nid = \"{ROOM}\"\nclosed = true\nmembers = [{}]\n",
        members.join(", ")
    );
    let socket = dir.join("roost.sock");
    let socket = socket.to_str().ok_or("a temp dir that is not UTF-8")?;
    let daemon = Daemon::start_with(
        binary,
        dir,
        &config,
        &["--roost-socket", socket, "--http-listen", "127.0.0.1:0"],
    )?;
    Ok(Server {
        url: daemon.relay.clone(),
        process: Process::Agentwire(daemon),
        name: "agentwire",
    })
}

fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

/// Starts `nostr-rs-relay` on a free loopback port with a database in `dir`.
pub(crate) fn nostr_rs_relay(binary: &Path, dir: &Path) -> Result<Server, String> {
    let port = free_port()?;
    let data = dir.join("nostr-rs-relay-data");
    std::fs::create_dir_all(&data).map_err(|e| e.to_string())?;
    let config: PathBuf = dir.join("nostr-rs-relay.toml");
    std::fs::write(
        &config,
        format!(
            "# Written by relay-bench: nostr-rs-relay's defaults, on loopback.\n\
             [info]\nrelay_url = \"ws://127.0.0.1:{port}/\"\nname = \"bench\"\n\n\
             [database]\ndata_directory = \"{}\"\n\n\
             [network]\naddress = \"127.0.0.1\"\nport = {port}\n",
            data.display()
        ),
    )
    .map_err(|e| format!("writing the nostr-rs-relay config: {e}"))?;
    let log = std::fs::File::create(dir.join("nostr-rs-relay.log")).map_err(|e| e.to_string())?;
    let child = Command::new(binary)
        .arg("--config")
        .arg(&config)
        .arg("--db")
        .arg(&data)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    let server = Server {
        process: Process::Other(child),
        url: format!("ws://127.0.0.1:{port}"),
        name: "nostr-rs-relay",
    };
    let deadline = Instant::now() + START_TIMEOUT;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err("nostr-rs-relay did not start listening".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(server)
}
