//! The relays under test, each a separate process on a free loopback port with a fresh data directory:
//! `agentwire serve` (its embedded relay, with a closed room whose members are the benchmark's keys) and
//! `nostr-rs-relay` (its own configuration file, no limits set).

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nostr::prelude::PublicKey;

/// How long a relay may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The closed room the room-message and answer phases write to.
pub(crate) const ROOM: &str = "bench";

/// A relay process.
pub(crate) struct Server {
    child: Child,
    /// Its WebSocket URL.
    pub(crate) url: String,
    /// What it is, for the report.
    pub(crate) name: &'static str,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// User + system CPU seconds the relay has used.
    pub(crate) fn cpu_seconds(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?;
        let rest = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let utime: f64 = fields.get(11)?.parse().ok()?;
        let stime: f64 = fields.get(12)?.parse().ok()?;
        Some((utime + stime) / 100.0)
    }
}

/// Starts `agentwire serve` with its relay's per-connection rate off and a closed room of `members`.
pub(crate) fn agentwire(
    binary: &Path,
    dir: &Path,
    members: &[PublicKey],
) -> Result<Server, String> {
    let config = dir.join("agentwire.toml");
    let members: Vec<String> = members
        .iter()
        .map(|k| format!("\"{}\"", k.to_hex()))
        .collect();
    std::fs::write(
        &config,
        format!(
            "# Written by relay-bench: the public-deployment limits lifted to measure the relay.\n\
             [relay.limits]\nmax_events_per_second_per_connection = 0\nmax_connections = 4096\n\
             max_subscriptions_per_connection = 128\n\n\
             [[rooms]]\nid = \"{ROOM}\"\nclosed = true\nmembers = [{}]\n",
            members.join(", ")
        ),
    )
    .map_err(|e| format!("writing the agentwire config: {e}"))?;
    let log = std::fs::File::create(dir.join("agentwire.log")).map_err(|e| e.to_string())?;
    let mut child = Command::new(binary)
        .arg("--config")
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.join("agentwire-data"))
        .args(["--log", "warn", "serve", "--relay-listen", "127.0.0.1:0"])
        .arg("--roost-socket")
        .arg(dir.join("roost.sock"))
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        let _ = tx.send(reader.read_line(&mut line).map(|_| line));
        let mut sink = Vec::new();
        let _ = reader.read_to_end(&mut sink);
    });
    let line = match rx.recv_timeout(START_TIMEOUT) {
        Ok(Ok(l)) if !l.is_empty() => l,
        other => {
            let _ = child.kill();
            return Err(format!("agentwire printed no ready line: {other:?}"));
        }
    };
    let v: serde_json::Value =
        serde_json::from_str(&line).map_err(|e| format!("ready line {line:?}: {e}"))?;
    let url = v["relay"]
        .as_str()
        .ok_or("no relay in the ready line")?
        .to_string();
    Ok(Server {
        child,
        url,
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
        child,
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
