//! Test helpers: the real `agentwire serve` on a free loopback port, and a NIP-XX client over a real socket.

#![allow(dead_code, unreachable_pub)]

pub mod api;

use agentwire_nostr::client::open;
use agentwire_nostr::client::{RunView, Terminal, Update};
use agentwire_nostr::crypto::Crypto;
use agentwire_nostr::nip59;
use agentwire_nostr::nipxx::{kinds, tags, Message};
use agentwire_nostr::relay_conn::{Incoming, RelayConn};
use nostr::prelude::{Event, EventBuilder, EventId, Filter, Keys, Kind, PublicKey, Tag};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

pub struct Daemon {
    pub child: Child,
    pub relay: String,
    pub agent: PublicKey,
    /// The whole ready line.
    pub ready: serde_json::Value,
    pub data_dir: PathBuf,
}

impl Daemon {
    pub fn start(data_dir: &Path, extra: &[&str]) -> Daemon {
        Self::start_with_env(data_dir, extra, &[])
    }

    /// Like [`Daemon::start`], with `env` set for the daemon (and its log on stderr).
    pub fn start_with_env(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        Self::start_logging(data_dir, extra, env, Stdio::inherit())
    }

    /// Like [`Daemon::start_with_env`], its log (stderr) going to `log`.
    pub fn start_logging(
        data_dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
        log: Stdio,
    ) -> Daemon {
        let mut args = vec!["serve", "--data-dir", data_dir.to_str().unwrap()];
        if !extra
            .iter()
            .any(|a| *a == "--relay" || *a == "--relay-listen")
        {
            args.extend(["--relay-listen", "127.0.0.1:0"]);
        }
        if !extra.contains(&"--http-listen") {
            args.extend(["--http-listen", "127.0.0.1:0"]);
        }
        let roost = data_dir.join("roost.sock");
        if !extra.contains(&"--roost-socket") {
            args.extend(["--roost-socket", roost.to_str().unwrap()]);
        }
        args.extend(extra);
        let mut child = Command::new(env!("CARGO_BIN_EXE_agentwire"))
            .args(&args)
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("agentwire starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("ready line");
        let v: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("ready line {line:?}: {e}"));
        assert_eq!(v["ready"], true);
        Daemon {
            child,
            relay: v["relay"].as_str().unwrap().to_string(),
            agent: PublicKey::from_hex(v["agent_pubkey"].as_str().unwrap()).unwrap(),
            data_dir: data_dir.to_path_buf(),
            ready: v,
        }
    }

    /// SIGKILL: a crash.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

pub struct Client {
    pub conn: RelayConn,
    pub rx: mpsc::Receiver<Incoming>,
    pub crypto: Arc<Crypto>,
    pub agent: PublicKey,
    /// Events of other runs seen while collecting one run, kept for their own `collect`.
    pub parked: Vec<Event>,
}

pub struct Run {
    pub prompt: EventId,
    /// The run's events (unwrapped when they came gift-wrapped) with their decrypted payloads.
    pub events: Vec<(Message, String)>,
    /// The events as the relay carried them (gift wraps, for a wrapped run).
    pub raw: Vec<Event>,
    pub updates: Vec<Update>,
    pub terminal: Option<Terminal>,
    pub terminals: usize,
}

impl Run {
    pub fn error_code(&self) -> String {
        match &self.terminal {
            Some(Terminal::Error(e)) => e.code.as_str().to_string(),
            other => panic!("expected an ai.error, got {other:?}"),
        }
    }
    pub fn text(&self) -> String {
        match &self.terminal {
            Some(t @ Terminal::Response(_)) => t.text().unwrap(),
            other => panic!("expected an ai.response, got {other:?}"),
        }
    }
    pub fn deltas(&self) -> Vec<serde_json::Value> {
        self.events
            .iter()
            .filter(|(e, _)| e.kind == kinds::DELTA)
            .map(|(_, p)| serde_json::from_str(p).unwrap())
            .collect()
    }
}

impl Client {
    pub async fn new(relay: &str, agent: PublicKey) -> Client {
        Self::with_keys(relay, agent, Keys::generate()).await
    }

    pub async fn with_keys(relay: &str, agent: PublicKey, keys: Keys) -> Client {
        let (conn, rx) = RelayConn::connect(relay);
        assert!(
            conn.wait_connected(Duration::from_secs(5)).await,
            "relay reachable"
        );
        Client {
            conn,
            rx,
            crypto: Arc::new(Crypto::new(keys)),
            agent,
            parked: Vec::new(),
        }
    }

    pub fn me(&self) -> PublicKey {
        self.crypto.public_key()
    }

    /// Builds a prompt with exactly these tags and this plaintext (encrypted with NIP-44 v2).
    pub fn raw_prompt(&self, tags: Vec<Tag>, plaintext: &str) -> Event {
        let content = self.crypto.encrypt(&self.agent, plaintext).unwrap();
        self.crypto
            .sign(EventBuilder::new(Kind::Custom(kinds::PROMPT), content).tags(tags))
    }

    pub fn prompt_event(&self, message: &str, session: Option<&str>) -> Event {
        let p = agentwire_nostr::nipxx::PromptPayload::new(message);
        self.raw_prompt(tags::prompt(&self.agent, session), &p.to_json())
    }

    /// The prompt gift-wrapped (NIP-59) for the agent, with the rumor's id (the run's name).
    pub fn wrapped_prompt(&self, message: &str, session: Option<&str>) -> (EventId, Event) {
        let p = agentwire_nostr::nipxx::PromptPayload::new(message);
        let content = self.crypto.encrypt(&self.agent, &p.to_json()).unwrap();
        let rumor = nip59::rumor(
            &self.crypto,
            EventBuilder::new(Kind::Custom(kinds::PROMPT), content)
                .tags(tags::prompt(&self.agent, session)),
        );
        let id = rumor.id.unwrap();
        (id, nip59::wrap(&self.crypto, &self.agent, rumor).unwrap())
    }

    /// Subscribes to the gift wraps addressed to us (back-dated up to two days).
    pub fn watch_wraps(&self) {
        let since =
            nostr::prelude::Timestamp::now().as_secs() - nip59::MAX_TIMESTAMP_TWEAK.as_secs();
        self.conn.subscribe(
            "wraps",
            vec![Filter::new()
                .kind(Kind::Custom(kinds::GIFT_WRAP))
                .pubkey(self.me())
                .since(nostr::prelude::Timestamp::from(since))],
        );
    }

    pub fn watch(&self, prompt: &EventId) {
        self.conn.subscribe(
            &prompt.to_hex()[..20],
            vec![Filter::new()
                .kinds(kinds::RUN_KINDS.map(Kind::Custom))
                .pubkey(self.me())
                .event(*prompt)
                .author(self.agent)],
        );
    }

    pub async fn publish(&self, ev: &Event) {
        let ok = self.conn.publish(ev).await.expect("relay answers");
        assert!(ok.accepted, "relay refused: {}", ok.message);
    }

    /// Collects a run's events until a terminal and then `settle` more time.
    pub async fn collect(&mut self, prompt: &EventId, wait: Duration, settle: Duration) -> Run {
        let mut view = RunView::new(self.me(), self.agent, *prompt);
        let mut run = Run {
            prompt: *prompt,
            events: vec![],
            raw: vec![],
            updates: vec![],
            terminal: None,
            terminals: 0,
        };
        let deadline = tokio::time::Instant::now() + wait;
        let mut until = deadline;
        let mut parked = std::mem::take(&mut self.parked).into_iter();
        loop {
            let event = match parked.next() {
                Some(e) => Box::new(e),
                None => {
                    let m = match tokio::time::timeout_at(until, self.rx.recv()).await {
                        Ok(Some(m)) => m,
                        _ => break,
                    };
                    let Incoming::Event { event, .. } = m else {
                        continue;
                    };
                    event
                }
            };
            let Some(message) = open(&self.crypto, (*event).clone()) else {
                continue;
            };
            if !names_prompt(&message, prompt) {
                self.parked.push(*event);
                continue;
            }
            let plain = self
                .crypto
                .decrypt(&message.author, &message.content)
                .unwrap_or_default();
            let k = message.kind;
            if k == kinds::RESPONSE || k == kinds::ERROR {
                run.terminals += 1;
                if until == deadline {
                    until = tokio::time::Instant::now() + settle;
                }
            }
            run.updates.extend(view.apply(&message, Some(&plain)));
            run.events.push((message, plain));
            run.raw.push(*event);
        }
        run.terminal = view.terminal().cloned();
        run
    }

    /// Waits for the agent's first event about `prompt` (its run was taken), and keeps every event read
    /// for the next [`Client::collect`].
    pub async fn wait_started(&mut self, prompt: &EventId, wait: Duration) {
        let crypto = self.crypto.clone();
        let about = |e: &Event| open(&crypto, e.clone()).is_some_and(|m| names_prompt(&m, prompt));
        if self.parked.iter().any(about) {
            return;
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(Incoming::Event { event, .. })) => {
                    let found = about(&event);
                    self.parked.push(*event);
                    if found {
                        return;
                    }
                }
                Ok(Some(_)) => {}
                _ => panic!("no event about the prompt within {wait:?}"),
            }
        }
    }

    pub async fn ask(&mut self, message: &str) -> Run {
        let ev = self.prompt_event(message, None);
        self.send_and_collect(ev).await
    }

    pub async fn send_and_collect(&mut self, ev: Event) -> Run {
        self.watch(&ev.id);
        self.publish(&ev).await;
        self.collect(&ev.id, Duration::from_secs(15), Duration::from_millis(300))
            .await
    }

    pub fn cancel_event(&self, prompt: &EventId, session: &str) -> Event {
        let content = self
            .crypto
            .encrypt(&self.agent, r#"{"ver":1,"reason":"user_cancel"}"#)
            .unwrap();
        self.crypto.sign(
            EventBuilder::new(Kind::Custom(kinds::CANCEL), content).tags(tags::run(
                &self.agent,
                prompt,
                session,
            )),
        )
    }
}

/// Whether `message` is about `prompt` (names it in a tag).
fn names_prompt(message: &Message, prompt: &EventId) -> bool {
    message
        .tags
        .iter()
        .any(|t| t.as_slice().get(1).map(String::as_str) == Some(&prompt.to_hex()))
}

/// `GET /health` on a relay's port: the status code and the body (`0` when nothing listens).
pub fn health(relay: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let addr = relay.trim_start_matches("ws://");
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return (0, String::new());
    };
    s.write_all(b"GET /health HTTP/1.1\r\nHost: test\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

/// `agentwire jobs --json --roost-socket SOCKET ARGS...`: the roost daemon's answers, as a program reads them.
pub fn roost_jobs(socket: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args(["jobs", "--json", "--roost-socket", socket])
        .args(args)
        .output()
        .expect("agentwire runs")
}

/// A command's stdout as JSON, once it exited 0 (its stderr shown when it did not).
pub fn json_of(out: &std::process::Output) -> serde_json::Value {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

/// Sends SIGTERM to `child` (a clean stop) and waits for it to exit, at most 30 s; its exit status.
pub fn sigterm(child: &mut std::process::Child) -> std::process::ExitStatus {
    let sent = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success(), "SIGTERM to {}", child.id());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the daemon did not stop within 30 s of SIGTERM"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
