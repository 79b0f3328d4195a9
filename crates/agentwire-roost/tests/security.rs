//! The daemon against its own jobs, with real job processes on a real socket: a job's environment is the
//! allowlist, its profile's `env` and `pass_env` and its identity (not the daemon's variables); a job's
//! processes are refused the controller's ops (`unauthorized`) while the daemon's user elsewhere is served;
//! a connection that does not identify itself is closed (the owner's controllers past the few kept); jobs filling the connection cap leave the owner's
//! controllers room; and a profile's `user` runs its jobs as that user (or is refused when it cannot).

use agentwire_roost::daemon::profile::{Profile, TaskMode};
use agentwire_roost::daemon::{Daemon, DaemonConfig, IDENTIFY_TIMEOUT, SILENT_CONTROLLERS_KEPT};
use agentwire_roost::proto::wire::{CONTROLLER_RESERVE, MAX_CONNECTIONS};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// A controller's connection, one request at a time.
struct Client {
    reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    writer: tokio::net::unix::OwnedWriteHalf,
}

impl Client {
    async fn connect(socket: &Path) -> Client {
        let (r, w) = UnixStream::connect(socket)
            .await
            .expect("socket")
            .into_split();
        Client {
            reader: BufReader::new(r),
            writer: w,
        }
    }
    /// The answer to `op`, or None when the connection is closed instead.
    async fn call(&mut self, op: &str, args: Value) -> Option<Value> {
        let line = format!("{}\n", json!({"id": 1, "op": op, "args": args}));
        self.writer.write_all(line.as_bytes()).await.ok()?;
        loop {
            let mut l = String::new();
            match tokio::time::timeout(Duration::from_secs(10), self.reader.read_line(&mut l)).await
            {
                Ok(Ok(n)) if n > 0 => {
                    let v: Value = serde_json::from_str(&l).expect("a JSON line");
                    if v.get("event").is_none() {
                        return Some(v);
                    }
                }
                _ => return None,
            }
        }
    }
    async fn ok(&mut self, op: &str, args: Value) -> Value {
        let v = self.call(op, args).await.expect("an answer");
        assert_eq!(v["ok"], true, "{op}: {v}");
        v["result"].clone()
    }
}

fn sh(script: &str, task: TaskMode) -> Profile {
    Profile {
        command: vec!["sh".into(), "-c".into(), script.into(), "sh".into()],
        task,
        protocol: true,
        ..Profile::default()
    }
}

/// The Python the probing jobs run on (the interpreter itself, found once: a job's `PATH` is the
/// daemon's, but its path says plainly what runs).
fn python() -> String {
    let out = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 is needed for the probing jobs");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A JSON-lines request from Python, and the probe a job runs as a would-be controller: each op on a new
/// connection of its own (no `hello`), then the same from a child that left the job's process group.
const PROBE: &str = r#"
import json, os, socket, subprocess, sys

def call(op, args):
    s = socket.socket(socket.AF_UNIX)
    s.connect(os.environ["ROOST_SOCKET"])
    f = s.makefile("rw")
    f.write(json.dumps({"id": 1, "op": op, "args": args}) + "\n")
    f.flush()
    answer = json.loads(f.readline())
    s.close()
    return "ok" if answer["ok"] else answer["code"]

target = sys.argv[2]
codes = {
    "rows": call("rows", {}),
    "stop": call("stop", {"id": target}),
    "dispatch": call("dispatch", {"profile": "sleeper", "task": "x"}),
    "reply": call("reply", {"id": target, "text": "from another job"}),
}
out = sys.argv[1]
with open(out + ".tmp", "w") as f:
    json.dump(codes, f)
os.replace(out + ".tmp", out)
if not out.endswith(".escaped"):
    # A child in a session (and so a process group) of its own: still the job's, by its ancestry.
    subprocess.run(["setsid", sys.executable, __file__, out + ".escaped", target], check=True)
"#;

/// A job that opens as many connections as it may and holds them: first idle (never identified), counting
/// those the daemon kept and those it closed at once, then (once the idle ones are closed) each with a
/// `hello`, which identifies it, counting those answered.
const HOG: &str = r#"
import json, os, socket, sys, time

def count_open(socks):
    n = 0
    for s in socks:
        try:
            if s.recv(1, socket.MSG_DONTWAIT) == b"":
                continue
        except BlockingIOError:
            pass
        except OSError:
            continue
        n += 1
    return n

def write(name, value):
    with open(name + ".tmp", "w") as f:
        json.dump(value, f)
    os.replace(name + ".tmp", name)

want = int(sys.argv[1])
idle = []
for _ in range(want):
    s = socket.socket(socket.AF_UNIX)
    s.connect(os.environ["ROOST_SOCKET"])
    idle.append(s)
# Counted once the daemon has taken them all (kept, or closed at once over its limit): three counts alike.
counts = []
while len(counts) < 3 or len(set(counts[-3:])) > 1:
    time.sleep(0.3)
    counts.append(count_open(idle))
n = counts[-1]
write("idle.json", {"open": n, "at": time.time()})
deadline = time.time() + 30
while count_open(idle) and time.time() < deadline:
    time.sleep(0.1)
write("idle-closed.json", {"open": count_open(idle), "at": time.time()})
for s in idle:
    s.close()

said = []
for _ in range(want):
    s = socket.socket(socket.AF_UNIX)
    s.connect(os.environ["ROOST_SOCKET"])
    f = s.makefile("rw")
    try:
        f.write(json.dumps({"id": 1, "op": "hello", "args": {"protocol": 1}}) + "\n")
        f.flush()
        if f.readline():
            said.append((s, f))
            continue
    except OSError:
        pass
    s.close()
write("hello.json", {"open": len(said)})
time.sleep(60)
"#;

fn config(dir: &Path, extra: impl FnOnce(&mut HashMap<String, Profile>)) -> DaemonConfig {
    let mut profiles = HashMap::new();
    profiles.insert(
        "sleeper".to_string(),
        sh(
            "env > env.tmp; mv env.tmp env.txt; exec sleep 60",
            TaskMode::Type,
        ),
    );
    let mut dumper = sh(
        "env > env.tmp; mv env.tmp env.txt; exec sleep 60",
        TaskMode::Type,
    );
    dumper.env.insert("MODE".into(), "fast".into());
    dumper.env.insert("HOME".into(), "/srv/agent".into());
    // Cargo sets these for the test process, so the daemon (in it) has them: one passed on by name, the
    // other standing for every variable no setting names (an API key, a NATS password).
    dumper.pass_env.push("CARGO_PKG_NAME".into());
    profiles.insert("dumper".to_string(), dumper);
    extra(&mut profiles);
    DaemonConfig {
        socket: dir.join("run").join("roost.sock"),
        data_dir: dir.join("data"),
        profiles,
        hosted: Default::default(),
        retention: None,
        terminal_holder: None,
        concierge: Default::default(),
        calendar: Default::default(),
    }
}

/// The text of `path` once it exists (a job writes it whole, by rename).
async fn wait_file(path: &Path, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{} was not written within {within:?}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn job_dir(cfg: &DaemonConfig, id: &str) -> PathBuf {
    cfg.data_dir.join("jobs").join(id)
}

async fn dispatch(ctl: &mut Client, profile: &str, task: &str) -> String {
    ctl.ok("dispatch", json!({"profile": profile, "task": task}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_environment_is_the_allowlist_its_profile_and_its_identity() {
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some() && std::env::var_os("PATH").is_some());
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), |_| {});
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut ctl = Client::connect(&cfg.socket).await;
    let id = dispatch(&mut ctl, "dumper", "t").await;
    let text = wait_file(&job_dir(&cfg, &id).join("env.txt"), Duration::from_secs(10)).await;
    let env: HashMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
    assert_eq!(env.get("ROOST_JOB_ID"), Some(&id.as_str()), "{text}");
    assert!(env.contains_key("ROOST_JOB_TOKEN") && env.contains_key("ROOST_SOCKET"));
    assert_eq!(
        env.get("PATH").copied(),
        std::env::var("PATH").ok().as_deref()
    );
    assert_eq!(env.get("MODE"), Some(&"fast"), "the profile's env");
    assert_eq!(
        env.get("HOME"),
        Some(&"/srv/agent"),
        "the profile's env wins"
    );
    assert_eq!(
        env.get("CARGO_PKG_NAME"),
        Some(&"agentwire-roost"),
        "passed by name"
    );
    assert!(
        !env.contains_key("CARGO_MANIFEST_DIR"),
        "a variable no setting names stays the daemon's: {text}"
    );
    let plain = dispatch(&mut ctl, "sleeper", "t").await;
    let text = wait_file(
        &job_dir(&cfg, &plain).join("env.txt"),
        Duration::from_secs(10),
    )
    .await;
    assert!(
        !text.contains("CARGO_PKG_NAME=") && !text.contains("MODE="),
        "{text}"
    );
    if let Ok(home) = std::env::var("HOME") {
        assert!(text.contains(&format!("HOME={home}\n")), "{text}");
    }
    for job in [id, plain] {
        ctl.ok("rm", json!({"id": job})).await;
    }
    daemon.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_processes_are_refused_the_controllers_ops_and_the_owner_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let probe = dir.path().join("probe.py");
    std::fs::write(&probe, PROBE).unwrap();
    let python = python();
    let cfg = config(dir.path(), |p| {
        p.insert(
            "prober".into(),
            Profile {
                command: vec![
                    python.clone(),
                    probe.to_string_lossy().into_owned(),
                    "codes.json".into(),
                ],
                task: TaskMode::Argv,
                protocol: true,
                ..Profile::default()
            },
        );
    });
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut ctl = Client::connect(&cfg.socket).await;
    let victim = dispatch(&mut ctl, "sleeper", "t").await;
    let prober = dispatch(&mut ctl, "prober", &victim).await;
    let dir_of = job_dir(&cfg, &prober);
    for file in ["codes.json", "codes.json.escaped"] {
        let codes: Value =
            serde_json::from_str(&wait_file(&dir_of.join(file), Duration::from_secs(20)).await)
                .unwrap();
        assert_eq!(
            codes,
            json!({"rows": "unauthorized", "stop": "unauthorized", "dispatch": "unauthorized", "reply": "unauthorized"}),
            "{file}"
        );
    }
    // The daemon's user outside the jobs (this test) is still a controller, and nothing the job asked for
    // happened.
    let rows = ctl.ok("rows", json!({})).await["rows"].clone();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2, "no job dispatched by the prober: {rows:?}");
    let victim_row = rows.iter().find(|r| r["id"] == victim.as_str()).unwrap();
    assert_ne!(victim_row["state"], "stopped", "{victim_row}");
    assert_eq!(victim_row["pending"], 1, "only its task: {victim_row}");
    ctl.ok("stop", json!({"id": victim})).await;
    for job in [victim, prober] {
        ctl.ok("rm", json!({"id": job})).await;
    }
    daemon.shutdown();
}

/// The owner's controllers may stay silent, up to `SILENT_CONTROLLERS_KEPT` of them (a script that connects
/// on the ready line and speaks later keeps its connection); past that many, the oldest silent ones are
/// closed at their deadline, as a job's processes' are (`a_job_filling_the_connections_...` below).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_does_not_identify_itself_is_closed_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), |_| {});
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let started = Instant::now();
    let silent = UnixStream::connect(&cfg.socket).await.unwrap();
    // Only refused requests do not identify a connection either.
    let mut refused = Client::connect(&cfg.socket).await;
    let refused_at = Instant::now();
    assert_eq!(
        refused.call("frobnicate", json!({})).await.unwrap()["ok"],
        false
    );
    // As many silent controllers as are kept, opened after those two: the two are the excess.
    let mut kept = Vec::new();
    for _ in 0..SILENT_CONTROLLERS_KEPT {
        kept.push(Client::connect(&cfg.socket).await);
    }
    let mut agent = Client::connect(&cfg.socket).await;
    agent.ok("hello", json!({"protocol": 1})).await;
    let mut controller = Client::connect(&cfg.socket).await;
    controller.ok("rows", json!({})).await;
    let (mut silent_read, _keep) = silent.into_split();
    let mut byte = [0u8; 1];
    let closed = tokio::time::timeout(
        IDENTIFY_TIMEOUT + Duration::from_secs(5),
        tokio::io::AsyncReadExt::read(&mut silent_read, &mut byte),
    )
    .await;
    assert!(
        matches!(closed, Ok(Ok(0))),
        "a silent connection past the kept ones is closed within the bound: {closed:?}"
    );
    assert!(
        started.elapsed() >= IDENTIFY_TIMEOUT - Duration::from_millis(100),
        "not before it: {:?}",
        started.elapsed()
    );
    // Its own deadline, which began a moment after the silent one's.
    tokio::time::sleep_until((refused_at + IDENTIFY_TIMEOUT + Duration::from_millis(500)).into())
        .await;
    assert!(
        refused.call("rows", json!({})).await.is_none(),
        "a connection whose every request was refused is closed too"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Those that identified themselves stay, and so do the kept silent ones, which speak now.
    assert_eq!(
        agent.call("hello", json!({"protocol": 1})).await.unwrap()["ok"],
        true
    );
    controller.ok("rows", json!({})).await;
    for c in &mut kept {
        c.ok("rows", json!({})).await;
    }
    daemon.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_filling_the_connections_leaves_the_owners_controllers_room() {
    let dir = tempfile::tempdir().unwrap();
    let hog = dir.path().join("hog.py");
    std::fs::write(&hog, HOG).unwrap();
    let python = python();
    let cfg = config(dir.path(), |p| {
        p.insert(
            "hog".into(),
            Profile {
                command: vec![python.clone(), hog.to_string_lossy().into_owned()],
                task: TaskMode::Argv,
                protocol: true,
                ..Profile::default()
            },
        );
    });
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut ctl = Client::connect(&cfg.socket).await;
    let id = dispatch(&mut ctl, "hog", &MAX_CONNECTIONS.to_string()).await;
    let jobs = job_dir(&cfg, &id);
    // The jobs' share is the cap less the reserve, and this test's connection holds one of it.
    let share = MAX_CONNECTIONS - CONTROLLER_RESERVE - 1;
    let idle: Value =
        serde_json::from_str(&wait_file(&jobs.join("idle.json"), Duration::from_secs(30)).await)
            .unwrap();
    assert_eq!(idle["open"], share, "the job holds its whole share, idle");
    // A controller connecting now is served at once, while the idle connections hold the jobs' share.
    let mut now = Client::connect(&cfg.socket).await;
    assert_eq!(
        now.ok("rows", json!({})).await["rows"][0]["id"],
        id.as_str()
    );
    let closed: Value = serde_json::from_str(
        &wait_file(&jobs.join("idle-closed.json"), Duration::from_secs(30)).await,
    )
    .unwrap();
    assert_eq!(closed["open"], 0, "every idle connection was closed");
    let held_for = closed["at"].as_f64().unwrap() - idle["at"].as_f64().unwrap();
    assert!(
        held_for < IDENTIFY_TIMEOUT.as_secs_f64() + 3.0,
        "closed within the bound: {held_for} s after they were counted"
    );
    drop(now);
    // Connections that said hello are not closed: the job holds its share for good, and the owner's
    // controllers are still served, in the reserve.
    let hello: Value =
        serde_json::from_str(&wait_file(&jobs.join("hello.json"), Duration::from_secs(30)).await)
            .unwrap();
    assert!(
        hello["open"].as_u64().unwrap() >= (share - 1) as u64,
        "{hello}"
    );
    let mut served = Vec::new();
    for _ in 0..CONTROLLER_RESERVE / 2 {
        let mut c = Client::connect(&cfg.socket).await;
        c.ok("rows", json!({})).await;
        served.push(c);
    }
    ctl.ok("stop", json!({"id": id})).await;
    ctl.ok("rm", json!({"id": id})).await;
    daemon.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_with_a_user_runs_its_jobs_as_that_user_and_only_for_a_root_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), |p| {
        p.insert(
            "sandboxed".into(),
            Profile {
                command: vec![
                    "sh".into(),
                    "-c".into(),
                    "echo \"uid=$(id -u) gid=$(id -g) groups=$(id -G) home=$HOME user=$USER\"; exec sleep 60"
                        .into(),
                ],
                task: TaskMode::Type,
                protocol: false,
                user: Some("nobody".into()),
                ..Profile::default()
            },
        );
    });
    if !rustix::process::getuid().is_root() {
        let Err(e) = Daemon::start(cfg.clone()).await else {
            panic!("a daemon that is not root started jobs as another user");
        };
        let shown = e.to_string();
        assert!(
            shown.contains("profile \"sandboxed\"") && shown.contains("root"),
            "{shown}"
        );
        return;
    }
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut ctl = Client::connect(&cfg.socket).await;
    let id = dispatch(&mut ctl, "sandboxed", "t").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let summary = loop {
        let rows = ctl.ok("rows", json!({})).await;
        let summary = rows["rows"][0]["summary"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if summary.starts_with("uid=") {
            break summary;
        }
        assert!(Instant::now() < deadline, "no output: {rows}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        summary,
        "uid=65534 gid=65534 groups=65534 home=/nonexistent user=nobody"
    );
    ctl.ok("stop", json!({"id": id})).await;
    ctl.ok("rm", json!({"id": id})).await;
    daemon.shutdown();
}
