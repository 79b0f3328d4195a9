//! The fisk-ai queued-jobs channel against a real nats-server with JetStream and the real daemon: a
//! prompt enqueued on `choria.fisk-ai.jobs.<identity>` runs once and leaves the queue; a job waits for a
//! worker that is down; a job cut off by `kill -9` is delivered again and answered from the journal, never
//! run twice; follow-ups of one conversation wait their turn; other request kinds and garbage are refused;
//! a job taken back before a worker took it never runs; the queue's bounds hold.

mod cli_child;
mod common;

use agentwire_fisk::wire::{self, nats as subjects, Header, Identity, PromptRequest, TaskRequest};
use agentwire_testkit::NatsServer;
use cli_child::CliChild;
use common::Daemon;
use futures_util::StreamExt;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime};

/// The ack wait the tests' workers run with: a dead worker's job moves on after it.
const ACK_WAIT_SECS: u64 = 2;

/// A config serving `agent_toml` (none: the demo agent) as fisk-ai worker `identity` with jobs on.
fn config(dir: &Path, url: &str, identity: &str, workers: usize, agent_toml: &str) -> PathBuf {
    let path = dir.join("agentwire.toml");
    std::fs::write(
        &path,
        format!(
            "[nats]\nurl = {url:?}\nidentity = {identity:?}\nworkers = {workers}\njobs = true\n\
             jobs_ack_wait_secs = {ACK_WAIT_SECS}\n\n{agent_toml}"
        ),
    )
    .unwrap();
    path
}

/// A command agent that notes each run in `count` (one line per run), then answers its prompt after
/// `secs` seconds.
fn counting_agent(count: &Path, secs: u64) -> String {
    let script = format!("echo run >> {}; sleep {secs}; cat", count.display());
    format!(
        "[agents.counter]\nkind = \"cmd\"\ncommand = {}\n",
        serde_json::to_string(&["sh", "-c", &script]).unwrap()
    )
}

fn runs(count: &Path) -> usize {
    std::fs::read_to_string(count)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

fn start(data: &Path, config: &Path, agent: Option<&str>) -> Daemon {
    let mut args = vec!["--config", config.to_str().unwrap()];
    if let Some(a) = agent {
        args.extend(["--agent", a]);
    }
    Daemon::start(data, &args)
}

/// What a test's worker serves.
enum Agent {
    /// The demo agent.
    Demo,
    /// [`counting_agent`] answering after that many seconds, as `--agent counter`.
    Counting(u64),
    /// An `[agents.<name>]` entry of its own, as `--agent <name>`.
    Entry(&'static str, &'static str),
}

/// A nats-server with JetStream and one worker's files: its config (jobs on) and data dir.
struct Setup {
    _store: tempfile::TempDir,
    nats: NatsServer,
    _dir: tempfile::TempDir,
    config: PathBuf,
    data: PathBuf,
    /// Where a counting agent notes its runs.
    count: PathBuf,
    agent: Option<&'static str>,
}

impl Setup {
    fn new(identity: &str, workers: usize, agent: Agent) -> Setup {
        let store = tempfile::tempdir().unwrap();
        let nats = NatsServer::start_jetstream(store.path());
        let dir = tempfile::tempdir().unwrap();
        let count = dir.path().join("count");
        let (toml, name) = match agent {
            Agent::Demo => (String::new(), None),
            Agent::Counting(secs) => (counting_agent(&count, secs), Some("counter")),
            Agent::Entry(name, toml) => (toml.to_string(), Some(name)),
        };
        let config = config(dir.path(), &nats.url, identity, workers, &toml);
        Setup {
            _store: store,
            data: dir.path().join("data"),
            nats,
            _dir: dir,
            config,
            count,
            agent: name,
        }
    }

    /// Starts the worker (again).
    fn start(&self) -> Daemon {
        start(&self.data, &self.config, self.agent)
    }

    /// How many times the counting agent ran.
    fn runs(&self) -> usize {
        runs(&self.count)
    }
}

fn agentwire(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("agentwire runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A `request.prompt` as a peer writes it.
fn prompt_job(request: &str, prompt: &str, token: Option<&str>) -> Vec<u8> {
    let id = agentwire_fisk::worker::message_id().parse().unwrap();
    let header = Header::new(
        id,
        request,
        request,
        0,
        SystemTime::now(),
        Identity::new("peer1").unwrap(),
    );
    TaskRequest::Prompt(PromptRequest {
        header,
        prompt: prompt.into(),
        context: None,
        tool_hints: vec![],
        budget: None,
        stream: true,
        conversation_token: token.map(String::from),
        replay: None,
        force: false,
    })
    .to_bytes()
}

/// A caller's connection to the server: it publishes jobs and reads their reply subjects.
struct Peer {
    client: async_nats::Client,
    js: async_nats::jetstream::Context,
}

impl Peer {
    async fn connect(url: &str) -> Peer {
        let client = async_nats::connect(url).await.unwrap();
        let js = async_nats::jetstream::new(client.clone());
        Peer { client, js }
    }

    /// Subscribes to a fresh reply subject and enqueues `body` naming it (`reply`: false names none).
    async fn enqueue(
        &self,
        identity: &str,
        body: Vec<u8>,
        reply: bool,
    ) -> Option<async_nats::Subscriber> {
        let inbox = self.client.new_inbox();
        let sub = self.client.subscribe(inbox.clone()).await.unwrap();
        let mut headers = async_nats::HeaderMap::new();
        if reply {
            headers.insert(subjects::HEADER_REPLY_TO, inbox.as_str());
        }
        self.js
            .publish_with_headers(subjects::jobs_subject(identity), headers, body.into())
            .await
            .unwrap()
            .await
            .expect("the queue takes the job");
        reply.then_some(sub)
    }

    /// Jobs waiting in `identity`'s queue (taken but not acknowledged ones count too).
    async fn queued(&self, identity: &str) -> u64 {
        let mut s = self
            .js
            .get_stream(subjects::jobs_stream(identity))
            .await
            .unwrap();
        s.info().await.unwrap().state.messages
    }

    /// Waits until `identity`'s queue is empty.
    async fn wait_empty(&self, identity: &str, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let n = self.queued(identity).await;
            if n == 0 {
                return;
            }
            assert!(Instant::now() < deadline, "{n} jobs still queued");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The messages on `sub` until one with `Fisk-AI-Stream-Final` (a service error counts as final, as
/// `{"service_error": text, "code": code}`), within `within`.
async fn reply_set(sub: &mut async_nats::Subscriber, within: Duration) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + within;
    let mut out = Vec::new();
    loop {
        let m = tokio::time::timeout_at(deadline, sub.next())
            .await
            .unwrap_or_else(|_| panic!("no final message within {within:?}; got {out:#?}"))
            .expect("the subscription lives");
        let headers = m.headers.clone().unwrap_or_default();
        if let Some(e) = headers.get(subjects::HEADER_SERVICE_ERROR) {
            out.push(serde_json::json!({
                "service_error": e.as_str(),
                "code": headers.get(subjects::HEADER_SERVICE_ERROR_CODE).map(|c| c.to_string()),
            }));
            return out;
        }
        out.push(serde_json::from_slice(&m.payload).unwrap());
        if headers.get(subjects::HEADER_STREAM_FINAL).is_some() {
            return out;
        }
    }
}

/// How a reply set ended: its last message's kind and text.
fn ended(set: &[Value]) -> (&str, Option<&str>) {
    let last = set.last().expect("a reply set");
    (kind(last), last["text"].as_str())
}

fn kind(m: &Value) -> &str {
    m["protocol"]
        .as_str()
        .unwrap_or("")
        .trim_start_matches(wire::PROTOCOL_NAMESPACE)
        .trim_start_matches('.')
}

#[test]
fn ask_queue_runs_a_job_once_it_leaves_the_queue_and_read_shows_it() {
    let w = Setup::new("jq1", 1, Agent::Demo);
    let (nats, d) = (&w.nats, w.start());
    assert_eq!(d.ready["nats"]["identity"], "jq1");
    assert_eq!(d.ready["nats"]["jobs"], "choria.fisk-ai.jobs.jq1");

    let out = agentwire(&[
        "ask",
        "--nats",
        &nats.url,
        "--identity",
        "jq1",
        "--queue",
        "calc",
        "2+3",
    ]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(text(&out.stdout).trim(), "5");
    assert!(err.contains("[tool calculator start"), "{err}");
    let token = err
        .lines()
        .find_map(|l| l.strip_prefix("conversation "))
        .expect("the conversation token is printed")
        .to_string();

    // Acknowledged once answered: nothing is left in the work queue.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let peer = Peer::connect(&nats.url).await;
        peer.wait_empty("jq1", Duration::from_secs(5)).await;
    });

    // A follow-up enqueued in the conversation, then the conversation read back over the task subject.
    let out = agentwire(&[
        "ask",
        "--nats",
        &nats.url,
        "--identity",
        "jq1",
        "--queue",
        "--conversation",
        &token,
        "again",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "You said: again");
    let out = agentwire(&["read", "--nats", &nats.url, "--identity", "jq1", &token]);
    let shown = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        shown.contains("calc 2+3") && shown.contains("You said: again"),
        "{shown}"
    );

    // With no --nats, --queue asks the serve on the data dir, on its NATS servers and identity.
    let data = w.data.to_str().unwrap();
    let out = agentwire(&["--data-dir", data, "ask", "--queue", "calc", "1+1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "2");
    // Where nothing serves fisk-ai, it says what to give.
    let empty = tempfile::tempdir().unwrap();
    let out = agentwire(&[
        "--data-dir",
        empty.path().to_str().unwrap(),
        "ask",
        "--queue",
        "hi",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("--queue asks over fisk-ai: give --nats URL"),
        "{}",
        text(&out.stderr)
    );
}

/// `agentwire_refusals_total{protocol="fisk",reason}` as `/metrics` gives it now (0: no such sample).
async fn fisk_refusals(http: &str, reason: &str) -> f64 {
    let client = agentwire_agents::openai::http_client(Duration::from_secs(10)).unwrap();
    let text = client
        .get(format!("{http}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let prefix = format!("agentwire_refusals_total{{protocol=\"fisk\",reason=\"{reason}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

/// Refusals the worker gives before a turn reaches the engine (nothing journaled) are counted too: an
/// unknown conversation token, a request that is no request, on the request subject and the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_before_the_engine_are_counted_in_the_metrics() {
    let w = Setup::new("jq15", 1, Agent::Demo);
    let (nats, d) = (&w.nats, w.start());
    let http = d.ready["http"].as_str().unwrap().to_string();
    let out = tokio::task::spawn_blocking({
        let url = nats.url.clone();
        move || {
            agentwire(&[
                "ask",
                "--nats",
                &url,
                "--identity",
                "jq15",
                "--conversation",
                "no-such-conversation-token",
                "hi",
            ])
        }
    })
    .await
    .unwrap();
    assert!(
        text(&out.stderr).contains("unknown_conversation"),
        "{}",
        text(&out.stderr)
    );
    let peer = Peer::connect(&nats.url).await;
    let answer = peer
        .client
        .request(subjects::task_subject("jq15"), "not a request".into())
        .await
        .unwrap();
    assert!(answer.headers.is_some(), "a 400 service error");
    let mut sub = peer
        .enqueue("jq15", b"not a job".to_vec(), true)
        .await
        .unwrap();
    reply_set(&mut sub, Duration::from_secs(10)).await;

    assert_eq!(fisk_refusals(&http, "unknown_conversation").await, 1.0);
    assert_eq!(fisk_refusals(&http, "invalid_request").await, 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_enqueued_while_no_worker_runs_is_answered_when_one_starts() {
    let w = Setup::new("jq2", 1, Agent::Counting(0));
    let nats = &w.nats;
    // The first start makes the queue; then the worker is away.
    let mut d = w.start();
    d.kill();

    let mut waiting = CliChild::spawn(&[
        "ask",
        "--nats",
        &nats.url,
        "--identity",
        "jq2",
        "--queue",
        "queued while away",
    ]);
    let peer = Peer::connect(&nats.url).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while peer.queued("jq2").await == 0 {
        assert!(Instant::now() < deadline, "the job was never queued");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(waiting.stdout(), "", "no answer while no worker runs");
    assert_eq!(peer.queued("jq2").await, 1, "the job waits in the queue");

    let _d = w.start();
    assert_eq!(
        waiting.exit_code(Duration::from_secs(20)),
        Some(0),
        "{}",
        waiting.stderr()
    );
    assert_eq!(waiting.stdout().trim(), "queued while away");
    assert_eq!(w.runs(), 1);
    peer.wait_empty("jq2", Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_cut_off_by_kill_9_is_answered_from_the_journal_and_never_runs_twice() {
    let w = Setup::new("jq3", 1, Agent::Counting(30));
    let nats = &w.nats;
    let mut d = w.start();
    let peer = Peer::connect(&nats.url).await;
    let mut sub = peer
        .enqueue("jq3", prompt_job("cut-job", "long work", None), true)
        .await
        .unwrap();
    // The job is taken and its turn journaled (the ack) and running (the command noted its run).
    let first = tokio::time::timeout(Duration::from_secs(10), sub.next())
        .await
        .expect("the ack arrives")
        .unwrap();
    let ack: Value = serde_json::from_slice(&first.payload).unwrap();
    assert_eq!((kind(&ack), &ack["accepted"]), ("ack", &Value::Bool(true)));
    let deadline = Instant::now() + Duration::from_secs(10);
    while w.runs() == 0 {
        assert!(Instant::now() < deadline, "the command never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    d.kill();
    assert_eq!(
        peer.queued("jq3").await,
        1,
        "unacknowledged, it stays queued"
    );

    // Restarted, the worker gets the job again once its ack wait passes, and answers it from the journal:
    // the run the crash cut off ended, once, and is not started again.
    let _d = w.start();
    let set = reply_set(&mut sub, Duration::from_secs(30)).await;
    let last = set.last().unwrap();
    assert_eq!(kind(last), "error", "{set:#?}");
    assert_eq!(last["code"], "canceled", "{set:#?}");
    assert_eq!(last["request"], "cut-job");
    peer.wait_empty("jq3", Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_secs(ACK_WAIT_SECS + 1)).await;
    assert_eq!(w.runs(), 1, "the job ran once");
    assert!(
        tokio::time::timeout(Duration::from_millis(200), sub.next())
            .await
            .is_err(),
        "no third reply set"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_sent_again_is_answered_from_the_journal() {
    // Longer than the ack wait: the worker's progress notes keep the job its own while it runs.
    let w = Setup::new("jq4", 1, Agent::Counting(ACK_WAIT_SECS + 2));
    let (nats, _d) = (&w.nats, w.start());
    let peer = Peer::connect(&nats.url).await;
    let mut sub = peer
        .enqueue("jq4", prompt_job("first", "one", None), true)
        .await
        .unwrap();
    let set = reply_set(&mut sub, Duration::from_secs(20)).await;
    assert_eq!(kind(set.last().unwrap()), "result", "{set:#?}");
    let token = set[0]["conversation_token"].as_str().unwrap().to_string();
    // The same request of the conversation enqueued again (a caller retrying after the queue's duplicate
    // window): its journaled answer, not a second run.
    let mut again = peer
        .enqueue("jq4", prompt_job("first", "one", Some(&token)), true)
        .await
        .unwrap();
    let set = reply_set(&mut again, Duration::from_secs(20)).await;
    assert_eq!(ended(&set), ("result", Some("one")), "{set:#?}");
    assert_eq!(w.runs(), 1);
    peer.wait_empty("jq4", Duration::from_secs(5)).await;
}

/// Starts a turn of conversation `token` on the request subject of worker `identity` (the demo agent's
/// `sleep ms`), returning once it is acked: the conversation is busy until it ends.
async fn hold_conversation(
    url: &str,
    identity: &'static str,
    token: &str,
    ms: u64,
) -> tokio::task::JoinHandle<()> {
    use agentwire_fisk::client::{Caller, PromptCall, Received, Reply};
    let caller = Caller::connect(url, "holder").await.unwrap();
    let (acked_tx, acked) = tokio::sync::oneshot::channel();
    let token = token.to_string();
    let held = tokio::spawn(async move {
        let mut acked_tx = Some(acked_tx);
        let prompt = format!("sleep {ms}");
        caller
            .prompt(
                PromptCall {
                    identity,
                    request: "holder",
                    prompt: &prompt,
                    token: Some(&token),
                    timeout: Duration::from_secs(30),
                },
                |m: &Received| {
                    if m.kind() == "ack" {
                        if let Some(tx) = acked_tx.take() {
                            let _ = tx.send(());
                        }
                    }
                },
                Box::new(|_| Box::pin(async { Reply::NoOperator })),
            )
            .await
            .unwrap();
    });
    tokio::time::timeout(Duration::from_secs(10), acked)
        .await
        .expect("the holding turn is acked")
        .unwrap();
    held
}

/// A new conversation on worker `identity`, by a first job: its token.
async fn open_conversation(peer: &Peer, identity: &str) -> String {
    let mut sub = peer
        .enqueue(identity, prompt_job("opening", "hello", None), true)
        .await
        .unwrap();
    let set = reply_set(&mut sub, Duration::from_secs(20)).await;
    set[0]["conversation_token"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_ups_queued_while_their_conversation_is_busy_run_in_queue_order() {
    const FOLLOW_UPS: usize = 5;
    // A slot for every job and the holding turn: nothing but the conversation orders them.
    let w = Setup::new("jq5", FOLLOW_UPS + 1, Agent::Demo);
    let (nats, _d) = (&w.nats, w.start());
    let peer = Peer::connect(&nats.url).await;
    let token = open_conversation(&peer, "jq5").await;
    // A turn of the conversation on the request subject holds it while the follow-ups queue up: the
    // first well before the others, so that it has been tried (and found the conversation busy) more
    // often than they have when the conversation frees. It still goes first.
    let held = hold_conversation(&nats.url, "jq5", &token, 2500).await;
    let mut subs = Vec::new();
    for i in 0..FOLLOW_UPS {
        if i == 1 {
            tokio::time::sleep(Duration::from_millis(1200)).await;
        }
        let job = prompt_job(&format!("next{i}"), &format!("follow-up {i}"), Some(&token));
        subs.push(peer.enqueue("jq5", job, true).await.unwrap());
    }
    let ends = futures_util::future::join_all(subs.iter_mut().map(|sub| async move {
        let set = reply_set(sub, Duration::from_secs(60)).await;
        (set, Instant::now())
    }))
    .await;
    held.await.unwrap();
    for (i, (set, _)) in ends.iter().enumerate() {
        let said = format!("You said: follow-up {i}");
        assert_eq!(ended(set), ("result", Some(said.as_str())), "{set:#?}");
    }
    let order: Vec<usize> = {
        let mut by_end: Vec<(Instant, usize)> =
            ends.iter().enumerate().map(|(i, (_, t))| (*t, i)).collect();
        by_end.sort();
        by_end.into_iter().map(|(_, i)| i).collect()
    };
    assert_eq!(order, (0..FOLLOW_UPS).collect::<Vec<_>>(), "queue order");
    peer.wait_empty("jq5", Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_taken_back_while_the_worker_held_it_never_runs() {
    let w = Setup::new("jq11", 2, Agent::Demo);
    let (nats, _d) = (&w.nats, w.start());
    let peer = Peer::connect(&nats.url).await;
    let token = open_conversation(&peer, "jq11").await;
    let held = hold_conversation(&nats.url, "jq11", &token, 3000).await;
    // The worker takes the job and holds it behind the busy conversation; its caller gives up meanwhile.
    let out = agentwire(&[
        "ask",
        "--nats",
        &nats.url,
        "--identity",
        "jq11",
        "--queue",
        "--conversation",
        &token,
        "--timeout",
        "1",
        "never mind",
    ]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("taken off the queue"), "{err}");
    held.await.unwrap();
    // The next job of the conversation runs, and the one taken back never did.
    let mut sub = peer
        .enqueue("jq11", prompt_job("after", "after it", Some(&token)), true)
        .await
        .unwrap();
    let set = reply_set(&mut sub, Duration::from_secs(20)).await;
    assert_eq!(kind(set.last().unwrap()), "result", "{set:#?}");
    let out = agentwire(&["read", "--nats", &nats.url, "--identity", "jq11", &token]);
    let shown = text(&out.stdout);
    assert!(shown.contains("after it"), "{shown}");
    assert!(!shown.contains("never mind"), "{shown}");
    peer.wait_empty("jq11", Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_request_kinds_and_garbage_are_refused_and_leave_the_queue() {
    let w = Setup::new("jq6", 1, Agent::Demo);
    let (nats, _d) = (&w.nats, w.start());
    let peer = Peer::connect(&nats.url).await;

    let id = agentwire_fisk::worker::message_id();
    let read = serde_json::json!({
        "protocol": "io.choria.fisk-ai.v1.request.read",
        "id": id, "request": "r1", "conversation": "r1", "sequence": 0,
        "time": "2026-12-04T10:00:00Z", "sender": {"name": "peer1"},
        "conversation_token": "0123456789abcdef0123456789abcdef0123", "replay": 10,
    });
    let mut sub = peer
        .enqueue("jq6", serde_json::to_vec(&read).unwrap(), true)
        .await
        .unwrap();
    let set = reply_set(&mut sub, Duration::from_secs(10)).await;
    assert_eq!(set.len(), 1, "{set:#?}");
    assert_eq!(set[0]["code"], "400");
    let said = set[0]["service_error"].as_str().unwrap();
    assert!(
        said.contains("request.prompt only") && said.contains("choria.fisk-ai.task.jq6"),
        "{said}"
    );

    let mut sub = peer
        .enqueue("jq6", b"not a request".to_vec(), true)
        .await
        .unwrap();
    let set = reply_set(&mut sub, Duration::from_secs(10)).await;
    assert_eq!(set[0]["code"], "400", "{set:#?}");

    // A reply subject no reply can go to: the job cannot be answered and is dropped, not retried.
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(subjects::HEADER_REPLY_TO, "replies.*");
    peer.js
        .publish_with_headers(
            subjects::jobs_subject("jq6"),
            headers,
            prompt_job("wild", "hi", None).into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    peer.wait_empty("jq6", Duration::from_secs(5)).await;

    // A job naming no reply subject still runs: the conversation it joined shows it.
    let mut sub = peer
        .enqueue("jq6", prompt_job("open", "first", None), true)
        .await
        .unwrap();
    let token = reply_set(&mut sub, Duration::from_secs(10)).await[0]["conversation_token"]
        .as_str()
        .unwrap()
        .to_string();
    peer.enqueue(
        "jq6",
        prompt_job("quiet", "fire and forget", Some(&token)),
        false,
    )
    .await;
    peer.wait_empty("jq6", Duration::from_secs(10)).await;
    let out = agentwire(&["read", "--nats", &nats.url, "--identity", "jq6", &token]);
    let shown = text(&out.stdout);
    assert!(shown.contains("You said: fire and forget"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_taken_back_before_a_worker_took_it_never_runs() {
    let w = Setup::new("jq7", 1, Agent::Counting(0));
    let (nats, mut d) = (&w.nats, w.start());
    d.kill();
    let out = agentwire(&[
        "ask",
        "--nats",
        &nats.url,
        "--identity",
        "jq7",
        "--queue",
        "--timeout",
        "1",
        "never mind",
    ]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("taken off the queue"), "{err}");
    let peer = Peer::connect(&nats.url).await;
    assert_eq!(peer.queued("jq7").await, 0);
    let _d = w.start();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(w.runs(), 0, "the withdrawn job never ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_refuses_a_job_past_its_bounds() {
    let w = Setup::new("jq8", 1, Agent::Demo);
    let (nats, mut d) = (&w.nats, w.start());
    d.kill();
    let peer = Peer::connect(&nats.url).await;
    // Too large for a request: refused by the queue, not left for a worker to refuse.
    let big = prompt_job("big", &"x".repeat(wire::MAX_MESSAGE_BYTES), None);
    let refused = peer
        .js
        .publish(subjects::jobs_subject("jq8"), big.into())
        .await
        .unwrap()
        .await;
    assert!(refused.is_err(), "a job over the message bound is refused");

    // Full: the queue holds MAX_QUEUED_JOBS and refuses the next.
    let mut left = agentwire_fisk::worker::MAX_QUEUED_JOBS;
    while left > 0 {
        // In batches: the client bounds the acks in flight.
        let mut acks = Vec::new();
        for _ in 0..left.min(500) {
            acks.push(
                peer.js
                    .publish(subjects::jobs_subject("jq8"), "x".into())
                    .await
                    .unwrap(),
            );
        }
        left -= acks.len() as i64;
        for a in acks {
            a.await.unwrap();
        }
    }
    assert_eq!(
        peer.queued("jq8").await,
        agentwire_fisk::worker::MAX_QUEUED_JOBS as u64
    );
    let out = agentwire(&[
        "ask",
        "--nats",
        &nats.url,
        "--identity",
        "jq8",
        "--queue",
        "one more",
    ]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("the jobs queue did not take the job"), "{err}");

    // An identity with no queue at all says so.
    let out = agentwire(&[
        "ask",
        "--nats",
        &nats.url,
        "--identity",
        "nobody",
        "--queue",
        "hi",
    ]);
    let err = text(&out.stderr);
    assert!(err.contains("no jobs queue for nobody"), "{err}");
}

#[test]
fn jobs_on_a_server_without_jetstream_stop_serve_with_the_reason() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &nats.url, "jq9", 1, "");
    let data = dir.path().join("data");
    let out = agentwire(&[
        "serve",
        "--data-dir",
        data.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--relay-listen",
        "127.0.0.1:0",
        "--http-listen",
        "127.0.0.1:0",
        "--roost-socket",
        data.join("roost.sock").to_str().unwrap(),
    ]);
    let err = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("jobs stream (does the server run JetStream?)"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_not_allowed_to_take_a_job_back_is_told_it_still_runs() {
    let store = tempfile::tempdir().unwrap();
    // carol may enqueue and read the stream's info, not delete from it.
    let nats = NatsServer::start_with_config(&format!(
        "jetstream {{ store_dir: {:?} }}\nauthorization {{ users: [\n\
         {{ user: worker, password: wpw }}\n\
         {{ user: carol, password: cpw, permissions: {{\n\
           publish: [\"choria.fisk-ai.jobs.jq10\", \"choria.fisk-ai.cancel.jq10.*\",\n\
                     \"$JS.API.STREAM.INFO.FISK_AI_JOBS_jq10\"]\n\
           subscribe: [\"_INBOX.>\"] }} }}\n] }}\n",
        store.path().display().to_string()
    ));
    let port = nats.url.rsplit(':').next().unwrap();
    let worker_url = format!("nats://worker:wpw@127.0.0.1:{port}");
    let carol_url = format!("nats://carol:cpw@127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let count = dir.path().join("count");
    let config = config(
        dir.path(),
        &worker_url,
        "jq10",
        1,
        &counting_agent(&count, 0),
    );
    let data = dir.path().join("data");
    let mut d = start(&data, &config, Some("counter"));
    d.kill();
    let out = agentwire(&[
        "ask",
        "--nats",
        &carol_url,
        "--identity",
        "jq10",
        "--queue",
        "--timeout",
        "1",
        "still wanted",
    ]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("could not be taken off the queue") && err.contains("runs when a worker"),
        "{err}"
    );
    let client = async_nats::ConnectOptions::new()
        .user_and_password("worker".into(), "wpw".into())
        .connect(format!("nats://127.0.0.1:{port}"))
        .await
        .unwrap();
    let peer = Peer {
        js: async_nats::jetstream::new(client.clone()),
        client,
    };
    assert_eq!(peer.queued("jq10").await, 1, "the job is still queued");
    let _d = start(&data, &config, Some("counter"));
    peer.wait_empty("jq10", Duration::from_secs(10)).await;
    assert_eq!(runs(&count), 1, "it ran when a worker took it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_enqueued_twice_with_one_tag_is_queued_once() {
    use agentwire_fisk::client::{Caller, ClientError, PromptCall, Reply};
    let w = Setup::new("jq12", 1, Agent::Demo);
    let (nats, mut d) = (&w.nats, w.start());
    d.kill();
    let caller = std::sync::Arc::new(Caller::connect(&nats.url, "twice").await.unwrap());
    let call = |caller: std::sync::Arc<Caller>| async move {
        caller
            .enqueue_until(
                PromptCall {
                    identity: "jq12",
                    request: "same-tag",
                    prompt: "once only",
                    token: None,
                    timeout: Duration::from_secs(20),
                },
                std::future::pending(),
                |_| {},
                Box::new(|_| Box::pin(async { Reply::NoOperator })),
            )
            .await
    };
    let first = tokio::spawn(call(caller.clone()));
    let peer = Peer::connect(&nats.url).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while peer.queued("jq12").await == 0 {
        assert!(Instant::now() < deadline, "the first was never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    match call(caller.clone()).await {
        Err(ClientError::NotQueued(why)) => assert!(why.contains("queued already"), "{why}"),
        other => panic!("the second was taken: {other:?}"),
    }
    assert_eq!(peer.queued("jq12").await, 1);
    // The first is answered once a worker runs.
    let _d = w.start();
    let p = tokio::time::timeout(Duration::from_secs(20), first)
        .await
        .expect("the first job is answered")
        .unwrap()
        .unwrap();
    let last = p.messages.last().unwrap();
    assert_eq!(last.json["text"], "You said: once only", "{last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_for_an_agent_busy_on_another_front_waits_and_runs() {
    let w = Setup::new(
        "jq13",
        1,
        Agent::Entry(
            "one",
            "[agents.one]\nkind = \"demo\"\nmax_concurrent_turns = 1\n",
        ),
    );
    let (nats, d) = (&w.nats, w.start());
    // A NIP-XX turn holds the agent's one turn at a time.
    let mut alice = common::Client::new(&d.relay, d.agent).await;
    let long = alice.prompt_event("sleep 2000", None);
    alice.watch(&long.id);
    alice.publish(&long).await;
    alice.wait_started(&long.id, Duration::from_secs(10)).await;
    // A request would be refused `capacity`; a job waits for the agent and runs.
    let peer = Peer::connect(&nats.url).await;
    let mut sub = peer
        .enqueue("jq13", prompt_job("patient", "waited", None), true)
        .await
        .unwrap();
    let set = reply_set(&mut sub, Duration::from_secs(20)).await;
    assert_eq!(
        ended(&set),
        ("result", Some("You said: waited")),
        "{set:#?}"
    );
    let first = alice
        .collect(&long.id, Duration::from_secs(10), Duration::ZERO)
        .await;
    assert_eq!(first.text(), "slept 2000 ms");
    peer.wait_empty("jq13", Duration::from_secs(5)).await;
}

/// `agentwire_fisk_jobs_queued{identity}` as `/metrics` gives it now (none: no such sample).
async fn queued_metric(http: &str, identity: &str) -> Option<f64> {
    let client = agentwire_agents::openai::http_client(Duration::from_secs(10)).unwrap();
    let text = client
        .get(format!("{http}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let prefix = format!("agentwire_fisk_jobs_queued{{identity=\"{identity}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_depth_is_in_the_metrics() {
    // Four jobs of 3 s each: the queue holds some for 12 s, past two of the worker's 5-s reads of it.
    let w = Setup::new("jq14", 1, Agent::Counting(3));
    let d = w.start();
    let http = d.ready["http"].as_str().unwrap().to_string();
    let peer = Peer::connect(&w.nats.url).await;
    // One job runs, three wait behind it: four in the queue until the first is acked.
    for i in 0..4 {
        peer.enqueue("jq14", prompt_job(&format!("d{i}"), "deep", None), false)
            .await;
    }
    let seen = |want: f64, within: Duration| {
        let http = http.clone();
        async move {
            let deadline = Instant::now() + within;
            loop {
                let now = queued_metric(&http, "jq14").await;
                if now == Some(want) {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "the metric says {now:?}, not {want}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    // The depth is read every 5 s: some reading between 1 and 4 while the jobs run, then 0.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let now = queued_metric(&http, "jq14").await;
        if now.is_some_and(|n| n >= 1.0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the metric never showed the backlog: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    seen(0.0, Duration::from_secs(20)).await;
    assert_eq!(w.runs(), 4);
}
