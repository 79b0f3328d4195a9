//! A CLI command run as a person runs it at a terminal: its stderr read as it comes, its stdin held open
//! (or written to), a signal sent to it, and its exit awaited with a bound, so a hang fails the test.

#![allow(dead_code, unreachable_pub)]

use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A running `agentwire` command.
pub struct CliChild {
    child: Child,
    /// Its stdin, open until dropped (a person who has not typed yet).
    pub stdin: Option<ChildStdin>,
    stderr: Arc<Mutex<String>>,
    stdout: Arc<Mutex<String>>,
    /// The threads reading stdout and stderr; they end at the pipes' end.
    readers: Vec<JoinHandle<()>>,
}

fn drain(mut from: impl Read + Send + 'static) -> (Arc<Mutex<String>>, JoinHandle<()>) {
    let text = Arc::new(Mutex::new(String::new()));
    let into = text.clone();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 1024];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                return;
            }
            into.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    (text, reader)
}

impl CliChild {
    /// Starts `agentwire ARGS...` with stdin, stdout and stderr piped.
    pub fn spawn(args: &[&str]) -> CliChild {
        let mut child = Command::new(env!("CARGO_BIN_EXE_agentwire"))
            .args(args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("agentwire runs");
        let (stderr, e) = drain(child.stderr.take().unwrap());
        let (stdout, o) = drain(child.stdout.take().unwrap());
        CliChild {
            stdin: child.stdin.take(),
            child,
            stderr,
            stdout,
            readers: vec![e, o],
        }
    }

    /// What it wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// What it wrote to stdout so far.
    pub fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    /// Waits until stderr holds `text`; panics with what it holds after `within`.
    pub fn wait_for(&self, text: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let now = self.stderr();
            if now.contains(text) {
                return now;
            }
            assert!(
                Instant::now() < deadline,
                "no {text:?} on stderr within {within:?}: {now}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Types a line.
    pub fn type_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends SIGINT, as Ctrl-C at a terminal does.
    pub fn interrupt(&self) {
        let sent = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    }

    /// Waits for the exit, at most `within` (then kills it and panics): its code (`None` for a signal).
    pub fn exit_code(&mut self, within: Duration) -> Option<i32> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // The pipes close with the process: the readers have everything once they end.
                for r in self.readers.drain(..) {
                    let _ = r.join();
                }
                return status.code();
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("still running after {within:?}; stderr: {}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for CliChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
