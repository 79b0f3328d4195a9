//! What the supervisor's socket tests share: a JSON-lines client that reads answers in order and keeps
//! the events it meets aside.

#![allow(dead_code)]

use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// A JSON-lines client for tests: requests answered in order; events kept aside.
pub(crate) struct Client {
    pub(crate) reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    pub(crate) writer: tokio::net::unix::OwnedWriteHalf,
    pub(crate) next: u64,
    pub(crate) events: Vec<Value>,
}

impl Client {
    pub(crate) async fn connect(socket: &Path) -> Client {
        let s = UnixStream::connect(socket).await.expect("socket");
        let (r, w) = s.into_split();
        Client {
            reader: BufReader::new(r),
            writer: w,
            next: 0,
            events: vec![],
        }
    }
    pub(crate) async fn line(&mut self) -> Option<Value> {
        let mut l = String::new();
        match tokio::time::timeout(Duration::from_secs(5), self.reader.read_line(&mut l)).await {
            Ok(Ok(n)) if n > 0 => Some(serde_json::from_str(&l).expect("a JSON line")),
            _ => None,
        }
    }
    pub(crate) async fn call(&mut self, op: &str, args: Value) -> Value {
        self.next += 1;
        let id = self.next;
        let mut line = json!({"id": id, "op": op, "args": args}).to_string();
        line.push('\n');
        self.writer.write_all(line.as_bytes()).await.unwrap();
        loop {
            let v = self.line().await.expect("an answer");
            if v.get("event").is_some() {
                self.events.push(v);
                continue;
            }
            assert_eq!(v["id"], id, "answers in order");
            return v;
        }
    }
    pub(crate) async fn ok(&mut self, op: &str, args: Value) -> Value {
        let v = self.call(op, args).await;
        assert_eq!(v["ok"], true, "{op}: {v}");
        v["result"].clone()
    }
    pub(crate) async fn code(&mut self, op: &str, args: Value) -> String {
        let v = self.call(op, args).await;
        assert_eq!(v["ok"], false, "{op}: {v}");
        v["code"].as_str().unwrap().to_string()
    }
    /// The next deliver event (from those already read, or the socket).
    pub(crate) async fn deliver(&mut self) -> Value {
        if let Some(i) = self.events.iter().position(|e| e["event"] == "deliver") {
            return self.events.remove(i);
        }
        loop {
            let v = self.line().await.expect("a deliver event");
            if v["event"] == "deliver" {
                return v;
            }
            self.events.push(v);
        }
    }
}

/// The token of job `id` under `jobs` (the daemon's `jobs` dir), once its process has written its
/// environment to `env.txt` there.
pub(crate) async fn job_token(jobs: &Path, id: &str) -> String {
    let path = jobs.join(id).join("env.txt");
    for _ in 0..200 {
        if let Some(t) = std::fs::read_to_string(&path).ok().and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("ROOST_JOB_TOKEN="))
                .map(str::to_string)
        }) {
            return t;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("job {id} did not start");
}

/// A protocol agent played by the test: its process records its environment in `env.txt` (its token
/// among it) and waits.
pub(crate) fn protocol_agent_profile() -> agentwire_roost::daemon::profile::Profile {
    use agentwire_roost::daemon::profile::{Profile, TaskMode};
    Profile {
        command: vec![
            "sh".into(),
            "-c".into(),
            "env > env.txt; exec sleep 60".into(),
        ],
        task: TaskMode::Type,
        protocol: true,
        ..Default::default()
    }
}

/// A daemon under `dir` with one profile, `agent`: [`protocol_agent_profile`].
pub(crate) fn protocol_agent_config(dir: &Path) -> agentwire_roost::daemon::DaemonConfig {
    let profile = protocol_agent_profile();
    agentwire_roost::daemon::DaemonConfig {
        socket: dir.join("run").join("roost.sock"),
        data_dir: dir.join("data"),
        profiles: [("agent".to_string(), profile)].into(),
        hosted: Default::default(),
        retention: None,
        terminal_holder: None,
        concierge: Default::default(),
        calendar: Default::default(),
    }
}
