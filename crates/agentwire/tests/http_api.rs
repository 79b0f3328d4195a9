//! The turn API over real HTTP on the real daemon: the token and the `Host` check, the agents, turns listed,
//! filtered and paged, one turn with its events, server-sent events that two watchers and the NIP-XX client
//! see alike (one joining mid-turn, one resuming with `Last-Event-ID`), a cancel that ends a NIP-XX run, an
//! answer that continues a turn waiting on its question and a cancel that ends a running one on fisk-ai, task
//! cards and roost controllers' jobs, and a remote listen refused.

#[path = "../../agentwire-fisk/tests/worker/caller.rs"]
mod caller;
mod common;

use agentwire_testkit::NatsServer;
use common::{Client, Daemon};
use serde_json::{json, Value};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The daemon's HTTP address and token, from its ready line.
struct Api {
    base: String,
    token: String,
    http: reqwest::Client,
}

impl Api {
    fn of(d: &Daemon) -> Api {
        Api {
            base: d.ready["http"]
                .as_str()
                .expect("the ready line names http")
                .into(),
            token: d.ready["http_token"]
                .as_str()
                .expect("and its token")
                .into(),
            // The model agent's client: reqwest with the workspace's own TLS provider.
            http: agentwire_agents::openai::http_client(Duration::from_secs(30)).unwrap(),
        }
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let body = r.bytes().await.unwrap_or_default();
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let body = r.bytes().await.unwrap_or_default();
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    /// `GET path` until its body satisfies `want` (the daemon's other views may be a moment ahead).
    async fn get_until(&self, path: &str, want: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            let (status, body) = self.get(path).await;
            if status == 200 && want(&body) {
                return body;
            }
            assert!(tokio::time::Instant::now() < deadline, "{path}: {body}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Opens the event stream (`path` with its query), resuming after `last` when given.
    async fn events(&self, path: &str, last: Option<u64>) -> Sse {
        let mut req = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(id) = last {
            req = req.header("last-event-id", id.to_string());
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        Sse {
            resp,
            buf: String::new(),
        }
    }
}

/// A server-sent event stream being read.
struct Sse {
    resp: reqwest::Response,
    buf: String,
}

/// One server-sent event: its id, its name and its JSON.
#[derive(Debug, Clone)]
struct Ev {
    id: Option<u64>,
    name: String,
    data: Value,
}

impl Sse {
    /// The next event within `wait`, `None` at the stream's end or the deadline.
    async fn next(&mut self, wait: Duration) -> Option<Ev> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(at) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..at + 2).collect();
                let mut ev = Ev {
                    id: None,
                    name: "message".into(),
                    data: Value::Null,
                };
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        ev.id = v.trim().parse().ok();
                    } else if let Some(v) = line.strip_prefix("event:") {
                        ev.name = v.trim().into();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if data.is_empty() {
                    continue; // a keep-alive comment
                }
                ev.data = serde_json::from_str(&data).unwrap();
                return Some(ev);
            }
            let chunk = tokio::time::timeout_at(deadline, self.resp.chunk())
                .await
                .ok()?
                .ok()??;
            self.buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// The events of turn `turn` up to and including its outcome.
    async fn turn(&mut self, turn: &str) -> Vec<Ev> {
        let mut out = Vec::new();
        while let Some(e) = self.next(Duration::from_secs(15)).await {
            if e.data["turn"] != turn {
                continue;
            }
            let end = e.name == "outcome";
            out.push(e);
            if end {
                return out;
            }
        }
        panic!("turn {turn} did not end on the stream: {out:?}");
    }
}

fn seqs(evs: &[Ev]) -> Vec<u64> {
    evs.iter()
        .map(|e| e.data["seq"].as_u64().unwrap())
        .collect()
}

/// A raw request with `host` as its Host header: its status.
async fn status_with_host(base: &str, path: &str, host: &str, token: &str) -> u16 {
    let addr = base.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_turn_api_lists_shows_streams_and_cancels_nipxx_runs() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let api = Api::of(&d);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("http.token"))
            .unwrap()
            .trim(),
        api.token,
        "the token is the data dir's"
    );

    // No token, a wrong one, a foreign Host.
    let bare = api
        .http
        .get(format!("{}/api/v1/agents", api.base))
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status().as_u16(), 401);
    assert!(bare.text().await.unwrap().contains("\"error\""));
    let wrong = api
        .http
        .get(format!("{}/api/v1/agents", api.base))
        .bearer_auth("0".repeat(64))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status().as_u16(), 401);
    assert_eq!(
        status_with_host(&api.base, "/api/v1/agents", "evil.example:7780", &api.token).await,
        403
    );
    let port = api.base.rsplit(':').next().unwrap();
    assert_eq!(
        status_with_host(
            &api.base,
            "/api/v1/agents",
            &format!("localhost:{port}"),
            &api.token
        )
        .await,
        200
    );
    let health = api
        .http
        .get(format!("{}/health", api.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200, "health needs no token");

    let (status, agents) = api.get("/api/v1/agents").await;
    assert_eq!(status, 200);
    assert_eq!(agents["agents"][0]["name"], "demo");
    assert_eq!(agents["agents"][0]["kind"], "demo");
    assert!(agents["agents"][0]["fronts"]
        .as_array()
        .unwrap()
        .contains(&json!("nipxx")));

    // A run watched by a stream opened before it, one opened mid-turn, and its NIP-XX client.
    let mut early = api.events("/api/v1/events", None).await;
    let mut c = Client::new(&d.relay, d.agent).await;
    let prompt = c.prompt_event("sleep 800", None);
    c.watch(&prompt.id);
    c.publish(&prompt).await;
    let turn = format!("nipxx:{}", prompt.id.to_hex());
    c.wait_started(&prompt.id, Duration::from_secs(10)).await;
    let mut late = api
        .events(&format!("/api/v1/events?turn={turn}"), None)
        .await;
    let run = c
        .collect(
            &prompt.id,
            Duration::from_secs(10),
            Duration::from_millis(100),
        )
        .await;
    assert_eq!(run.text(), "slept 800 ms");
    let from_early = early.turn(&turn).await;
    let from_late = late.turn(&turn).await;
    assert_eq!(seqs(&from_early), seqs(&from_late), "one turn, seen alike");
    assert_eq!(
        seqs(&from_early),
        (0..from_early.len() as u64).collect::<Vec<_>>(),
        "from its start, without a gap"
    );
    assert_eq!(from_early[0].name, "accepted");
    assert_eq!(from_early[0].data["prompt"], "sleep 800");
    let deltas = from_early
        .iter()
        .filter(|e| e.data["event"]["type"] == "text")
        .count();
    assert_eq!(deltas, run.deltas().len(), "every delta the client got");
    assert_eq!(
        from_early.last().unwrap().data["outcome"]["outcome"],
        "result"
    );

    // Resumed after an id: the rest, then live.
    let resume_after = from_early[2].id.unwrap();
    let mut resumed = api.events("/api/v1/events", Some(resume_after)).await;
    let mut rest = Vec::new();
    while rest.len() < from_early.len() - 3 {
        let e = resumed
            .next(Duration::from_secs(5))
            .await
            .expect("the rest");
        if e.data["turn"] == turn.as_str() {
            rest.push(e.id.unwrap());
        }
    }
    let expected: Vec<u64> = from_early[3..].iter().map(|e| e.id.unwrap()).collect();
    assert_eq!(rest, expected, "no gap, no duplicate");

    // The turn, listed and alone.
    let (_, one) = api.get(&format!("/api/v1/turns/{turn}")).await;
    assert_eq!(one["state"], "ended");
    assert_eq!(one["agent"], "demo");
    assert_eq!(one["protocol"], "nipxx");
    assert_eq!(one["events"].as_array().unwrap().len(), from_early.len());
    let (status, _) = api.get("/api/v1/turns/nipxx:nothing").await;
    assert_eq!(status, 404);

    // More turns, paged.
    for n in 0..3 {
        assert_eq!(c.ask(&format!("quick {n}")).await.text(), n.to_string());
    }
    let (_, page) = api.get("/api/v1/turns?limit=2").await;
    let first: Vec<String> = page["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["prompt"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(first, ["quick 2", "quick 1"], "newest first");
    let cursor = page["cursor"].as_u64().expect("a next page");
    let (_, next) = api
        .get(&format!("/api/v1/turns?limit=2&cursor={cursor}"))
        .await;
    let second: Vec<&str> = next["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["prompt"].as_str().unwrap())
        .collect();
    assert_eq!(second, ["quick 0", "sleep 800"]);
    let (_, running) = api.get("/api/v1/turns?state=running").await;
    assert_eq!(running["turns"].as_array().unwrap().len(), 0);
    let (status, _) = api.get("/api/v1/turns?state=asleep").await;
    assert_eq!(status, 400);
    let (_, other) = api.get("/api/v1/turns?protocol=fisk").await;
    assert!(other["turns"].as_array().unwrap().is_empty());

    // Cancelled through the API: the client gets one CANCELLED.
    let long = c.prompt_event("sleep 20000", None);
    c.watch(&long.id);
    c.publish(&long).await;
    c.wait_started(&long.id, Duration::from_secs(10)).await;
    let long_turn = format!("nipxx:{}", long.id.to_hex());
    let (status, body) = api
        .post(&format!("/api/v1/turns/{long_turn}/cancel"), json!({}))
        .await;
    assert_eq!((status, body), (200, json!({"cancelled": true})));
    let run = c
        .collect(
            &long.id,
            Duration::from_secs(10),
            Duration::from_millis(200),
        )
        .await;
    assert_eq!((run.error_code(), run.terminals), ("CANCELLED".into(), 1));
    let (status, _) = api
        .post(&format!("/api/v1/turns/{long_turn}/cancel"), json!({}))
        .await;
    assert_eq!(status, 409, "it has ended");

    // One vocabulary: an ended turn ended as done, failed or cancelled, and is listed by it.
    assert_eq!(
        c.ask("fail on purpose").await.error_code(),
        "INTERNAL_ERROR"
    );
    let ended_as = |body: &Value| -> Vec<(String, String)> {
        body["turns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                assert_eq!(t["state"], "ended", "{t}");
                (
                    t["prompt"].as_str().unwrap().to_string(),
                    t["ended_as"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let (_, cancelled) = api.get("/api/v1/turns?state=cancelled").await;
    assert_eq!(
        ended_as(&cancelled),
        [("sleep 20000".to_string(), "cancelled".to_string())]
    );
    let (_, failed) = api.get("/api/v1/turns?state=failed").await;
    assert_eq!(
        ended_as(&failed),
        [("fail on purpose".to_string(), "failed".to_string())]
    );
    let (_, done) = api.get("/api/v1/turns?state=done&limit=3").await;
    assert_eq!(
        ended_as(&done),
        ["quick 2", "quick 1", "quick 0"].map(|p| (p.to_string(), "done".to_string()))
    );
    let (_, ended) = api.get("/api/v1/turns?state=ended").await;
    assert_eq!(ended["turns"].as_array().unwrap().len(), 6, "{ended}");
    let (status, refusal) = api.get("/api/v1/turns?state=answered").await;
    assert_eq!(status, 400);
    assert!(
        refusal["error"]
            .as_str()
            .unwrap()
            .contains("done, failed or cancelled"),
        "{refusal}"
    );
    // A page goes on from any turn: each carries its cursor.
    let (_, all) = api.get("/api/v1/turns").await;
    let third = &all["turns"][2];
    let (_, after) = api
        .get(&format!("/api/v1/turns?limit=1&cursor={}", third["cursor"]))
        .await;
    assert_eq!(after["turns"][0]["id"], all["turns"][3]["id"], "{all}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_and_a_cancel_through_the_api_continue_and_end_fisk_runs() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(
        dir.path(),
        &["--nats", &nats.url, "--identity", "hub", "--nats-elicit"],
    );
    let api = Api::of(&d);
    let c = caller::Caller::connect(&nats.url, "hub").await;
    let r = caller::tag("q");
    let mut run = c.open_prompt(&r, "ask colour? | red | green").await;
    run.until(|m| m.protocol().contains("elicit.request")).await;
    let turn = format!("fisk:{r}");
    let waiting = api
        .get_until("/api/v1/turns?state=waiting", |b| b["turns"][0].is_object())
        .await;
    assert_eq!(waiting["turns"][0]["id"], turn.as_str(), "{waiting}");
    let (status, _) = api
        .post(
            &format!("/api/v1/turns/{turn}/answer"),
            json!({"choices": ["blue"]}),
        )
        .await;
    assert_eq!(status, 400, "an option the question does not offer");
    let (_, one) = api.get(&format!("/api/v1/turns/{turn}")).await;
    let option = one["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "question")
        .and_then(|e| {
            e["question"]["kind"]["options"][1]["id"]
                .as_str()
                .map(String::from)
        })
        .expect("the question's options");
    let (status, body) = api
        .post(
            &format!("/api/v1/turns/{turn}/answer"),
            json!({ "choices": [option] }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let set = run.finish().await;
    let last = set.last().unwrap();
    assert_eq!(last.json["text"], "green", "{set:#?}");
    let (status, _) = api
        .post(
            &format!("/api/v1/turns/{turn}/answer"),
            json!({ "choices": [option] }),
        )
        .await;
    assert_eq!(status, 409, "no question is open any more");

    // A cancel through the API ends a running fisk-ai run as the caller's own cancel would: parked at the
    // agent's next boundary (`suspended`), the caller's reply set ending with it.
    let r = caller::tag("long");
    let mut run = c.open_prompt(&r, "sleep 2000").await;
    run.until(|m| m.protocol().ends_with("event.text")).await;
    let turn = format!("fisk:{r}");
    let (status, body) = api
        .post(&format!("/api/v1/turns/{turn}/cancel"), json!({}))
        .await;
    assert_eq!((status, body), (200, json!({"cancelled": true})));
    let set = run.finish().await;
    assert_eq!(caller::code(&set), "suspended", "{set:#?}");
    let (_, one) = api.get(&format!("/api/v1/turns/{turn}")).await;
    assert_eq!(one["state"], "ended", "{one}");
}

#[test]
fn a_listen_beyond_this_host_is_refused_without_allow_remote() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args([
            "serve",
            "--data-dir",
            dir.path().join("d").to_str().unwrap(),
            "--relay-listen",
            "127.0.0.1:0",
            "--http-listen",
            "0.0.0.0:0",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("allow_remote"), "{err}");
    assert!(!dir.path().join("d").exists(), "nothing made");
}

/// `agentwire turns` and `agentwire watch` on the data dir of a running daemon: they find it (its
/// `serving.json` and `http.token`), list its turns and follow one as `ask` shows it; with no daemon
/// serving the data dir, they say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_and_watch_find_the_daemon_of_their_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let cli = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_agentwire"))
            .arg("--data-dir")
            .arg(dir.path())
            .args(args)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap()
    };
    let out = cli(&["turns"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no agentwire is serving data dir"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut d = Daemon::start(dir.path(), &[]);
    let serving = std::fs::read_to_string(dir.path().join("serving.json")).unwrap();
    assert!(serving.contains(d.ready["http"].as_str().unwrap()));
    assert!(
        !serving.contains(d.ready["http_token"].as_str().unwrap()),
        "no secret in it"
    );
    let mut c = Client::new(&d.relay, d.agent).await;
    assert_eq!(c.ask("quick listed").await.text(), "listed");
    // A prompt that would retitle and clear the operator's terminal, and turn a line round.
    let attack = "quick \u{1b}]0;PWNED\u{7}\u{1b}[2J\u{9b}1m \u{202e}gnp.exe";
    c.ask(attack).await.text();
    assert_eq!(c.ask("fail listed").await.error_code(), "INTERNAL_ERROR");
    let out = cli(&["turns"]);
    let listed = String::from_utf8_lossy(&out.stdout).to_string();
    let rows = table(&listed);
    assert_eq!(
        rows[0],
        [
            "STARTED (UTC)",
            "ID",
            "AGENT",
            "FRONT",
            "BY",
            "STATE",
            "TOOK",
            "PROMPT"
        ],
        "{listed}"
    );
    let row = |prompt: &str| -> Vec<String> {
        rows.iter()
            .find(|r| r.last().is_some_and(|p| p.starts_with(prompt)))
            .unwrap_or_else(|| panic!("{prompt}: {listed}"))
            .clone()
    };
    let quick = row("quick listed");
    // Who asked: the client's key, its first 8 digits.
    let by = format!("{}…", &c.me().to_hex()[..8]);
    assert_eq!(
        quick[2..6],
        ["demo", "nipxx", by.as_str(), "done"],
        "{listed}"
    );
    assert!(
        quick[0].len() == 19 && quick[0].as_bytes()[10] == b' ',
        "{listed}"
    );
    assert_eq!(row("fail listed")[5], "failed (agent_failed)", "{listed}");
    assert!(
        !listed.chars().any(|c| c.is_control() && c != '\n') && !listed.contains('\u{202e}'),
        "no escape reaches the terminal: {listed:?}"
    );
    assert!(listed.contains("]0;PWNED"), "shown, not obeyed: {listed:?}");
    // The states as the API and the hub name them.
    for (state, want) in [("done", 2), ("failed", 1), ("cancelled", 0), ("ended", 3)] {
        let out = cli(&["turns", "--state", state]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let n = table(&String::from_utf8_lossy(&out.stdout))
            .len()
            .saturating_sub(1);
        assert_eq!(n, want, "--state {state}");
    }
    let out = cli(&["turns", "--state", "answered"]);
    assert_eq!(out.status.code(), Some(2), "refused by the CLI");

    // Followed while it runs: its text, then exit 0 at its outcome.
    let prompt = c.prompt_event("sleep 600", None);
    c.watch(&prompt.id);
    c.publish(&prompt).await;
    c.wait_started(&prompt.id, Duration::from_secs(10)).await;
    let turn = format!("nipxx:{}", prompt.id.to_hex());
    let watched = tokio::task::spawn_blocking({
        let dir = dir.path().to_path_buf();
        move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_agentwire"))
                .arg("--data-dir")
                .arg(&dir)
                .args(["watch", &turn])
                .env("RUST_LOG", "warn")
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    assert_eq!(watched.status.code(), Some(0));
    let text = String::from_utf8_lossy(&watched.stdout);
    let run = c
        .collect(&prompt.id, Duration::from_secs(5), Duration::ZERO)
        .await;
    let streamed: String = run
        .deltas()
        .iter()
        .map(|d| d["text"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        !streamed.is_empty() && text.contains(streamed.trim()),
        "watch showed {text:?}, the client streamed {streamed:?}"
    );

    // Stopped: the file goes with it.
    let pid = d.child.id().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    d.child.wait().unwrap();
    assert!(!dir.path().join("serving.json").exists());

    // A daemon that died without cleaning up is named as gone, at once.
    std::fs::write(
        dir.path().join("serving.json"),
        r#"{"ready":true,"http":"http://127.0.0.1:1"}"#,
    )
    .unwrap();
    let out = cli(&["turns"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("stopped without cleaning up"), "{err}");

    // Started again: the list goes on where the last run left it (from the journal), with how long each
    // turn of the earlier run took.
    std::fs::remove_file(dir.path().join("serving.json")).unwrap();
    let _d = Daemon::start(dir.path(), &[]);
    let out = cli(&["turns"]);
    let listed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{listed}");
    let rows = table(&listed);
    let earlier = rows
        .iter()
        .find(|r| r.last().is_some_and(|p| p == "quick listed"))
        .unwrap_or_else(|| panic!("{listed}"));
    // Who asked is known again: every turn's requester is journaled (in its route).
    assert_eq!(earlier[4..6], [by.as_str(), "done"], "{listed}");
    assert!(
        earlier[6].ends_with('s') && earlier[6] != "-",
        "a duration from the journal's times: {listed}"
    );
}

/// A table `turns` printed, a row of cells a line (cells are two spaces or more apart).
fn table(out: &str) -> Vec<Vec<String>> {
    out.lines()
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(String::from)
                .collect()
        })
        .collect()
}

/// A task card (43001) in a room, from `keys` to `agent`.
fn task_card(
    keys: &nostr::prelude::Keys,
    agent: &nostr::prelude::PublicKey,
    prompt: &str,
) -> nostr::prelude::Event {
    use nostr::prelude::{EventBuilder, FinalizeEvent, Kind, Tag};
    EventBuilder::new(Kind::Custom(43001), prompt)
        .tags([Tag::public_key(*agent), Tag::parse(["h", "lab"]).unwrap()])
        .finalize(keys)
        .unwrap()
}

/// The next event on `rx` that `want` takes.
async fn next_event(
    rx: &mut tokio::sync::mpsc::Receiver<agentwire_nostr::relay_conn::Incoming>,
    want: impl Fn(&nostr::prelude::Event) -> bool,
) -> nostr::prelude::Event {
    use agentwire_nostr::relay_conn::Incoming;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(Incoming::Event { event, .. })) if want(&event) => return *event,
            Ok(Some(_)) => {}
            other => panic!("not seen: {other:?}"),
        }
    }
}

/// The turn API on task cards: an answer through it settles the task's question card and the task goes on
/// to its result; a cancel through it ends a running task with its error card.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_and_a_cancel_through_the_api_continue_and_end_task_cards() {
    use agentwire_nostr::relay_conn::RelayConn;
    use nostr::prelude::{Filter, Keys, Kind, SingleLetterTag};
    let dir = tempfile::tempdir().unwrap();
    let alice = Keys::generate();
    let config = dir.path().join("agentwire.toml");
    std::fs::write(
        &config,
        format!(
            "[[rooms]]\nid = \"lab\"\nclosed = true\nmembers = [\"{a}\"]\n\n[tasks]\nwatch = [\"lab\"]\nallowed = [\"{a}\"]\n",
            a = alice.public_key().to_hex()
        ),
    )
    .unwrap();
    let d = Daemon::start(
        &dir.path().join("data"),
        &["--config", config.to_str().unwrap()],
    );
    let api = Api::of(&d);
    let (conn, mut rx) = RelayConn::connect(&d.relay);
    assert!(conn.wait_connected(Duration::from_secs(10)).await);
    conn.subscribe(
        "room",
        vec![Filter::new()
            .kinds([9, 43002, 43003, 43004, 43005, 43006].map(Kind::Custom))
            .custom_tags(SingleLetterTag::from_char('h').unwrap(), ["lab"])],
    );
    let about = |e: &nostr::prelude::Event, id: &nostr::prelude::EventId| {
        e.tags
            .iter()
            .any(|t| t.as_slice().get(1) == Some(&id.to_hex()))
    };

    // A question card, answered through the API.
    let asking = task_card(&alice, &d.agent, "ask colour? | red | green");
    assert!(conn.publish(&asking).await.unwrap().accepted);
    let card = next_event(&mut rx, |e| e.kind.as_u16() == 9).await;
    let waiting = api
        .get_until("/api/v1/turns?state=waiting", |b| b["turns"][0].is_object())
        .await;
    let turn = waiting["turns"][0]["id"]
        .as_str()
        .expect("a waiting turn")
        .to_string();
    assert_eq!(waiting["turns"][0]["protocol"], "tasks", "{waiting}");
    let (_, one) = api.get(&format!("/api/v1/turns/{turn}")).await;
    let question = one["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "question")
        .expect("its question")
        .clone();
    assert_eq!(
        question["question_id"],
        card.id.to_hex(),
        "the card is the question: {question}"
    );
    let option = question["question"]["kind"]["options"][1]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, body) = api
        .post(
            &format!("/api/v1/turns/{turn}/answer"),
            json!({ "choices": [option] }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let result = next_event(&mut rx, |e| {
        e.kind.as_u16() == 43004 && about(e, &asking.id)
    })
    .await;
    assert_eq!(result.content, "green");

    // A running task, cancelled through the API.
    let long = task_card(&alice, &d.agent, "sleep 60000");
    assert!(conn.publish(&long).await.unwrap().accepted);
    next_event(&mut rx, |e| e.kind.as_u16() == 43002 && about(e, &long.id)).await;
    let running = api
        .get_until("/api/v1/turns?state=running", |b| b["turns"][0].is_object())
        .await;
    let turn = running["turns"][0]["id"]
        .as_str()
        .expect("a running turn")
        .to_string();
    let (status, body) = api
        .post(&format!("/api/v1/turns/{turn}/cancel"), json!({}))
        .await;
    assert_eq!((status, body), (200, json!({"cancelled": true})));
    let ended = next_event(&mut rx, |e| {
        matches!(e.kind.as_u16(), 43004 | 43006) && about(e, &long.id)
    })
    .await;
    assert_eq!(
        ended.kind.as_u16(),
        43006,
        "ended with an error card: {}",
        ended.content
    );
}

/// The turn API on turns of engine agents behind roost controllers: an answer through it settles the
/// blocked job's question and its row goes on to done; a cancel through it ends the job's running turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_and_a_cancel_through_the_api_continue_and_end_roost_turns() {
    use agentwire_roost::client::Controller;
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), &[]);
    let api = Api::of(&d);
    let socket = std::path::PathBuf::from(d.ready["roost_socket"].as_str().unwrap());
    let call = |op: &'static str, args: Value| {
        let socket = socket.clone();
        async move {
            let mut c = Controller::connect(&socket).await.unwrap();
            c.call(op, args)
                .await
                .unwrap_or_else(|e| panic!("{op}: {e}"))
        }
    };
    let row_state = |id: String, want: &'static str| {
        let socket = socket.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
            loop {
                let mut c = Controller::connect(&socket).await.unwrap();
                let rows = c.call("rows", json!({})).await.unwrap();
                let row = rows["rows"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|r| r["id"] == id.as_str())
                    .cloned();
                if let Some(r) = row.filter(|r| r["state"] == want) {
                    return r;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "job {id} not {want}"
                );
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        }
    };

    let job = call(
        "dispatch",
        json!({ "profile": "demo", "task": "confirm Ship it?", "name": "ship" }),
    )
    .await;
    let id = job["id"].as_str().unwrap().to_string();
    row_state(id.clone(), "blocked").await;
    let waiting = api
        .get_until("/api/v1/turns?state=waiting&protocol=roost", |b| {
            b["turns"][0].is_object()
        })
        .await;
    let turn = waiting["turns"][0]["id"]
        .as_str()
        .expect("a waiting roost turn")
        .to_string();
    let (_, one) = api.get(&format!("/api/v1/turns/{turn}")).await;
    let question = one["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "question")
        .expect("its question")["question"]["kind"]
        .clone();
    assert_eq!(
        (&question["kind"], &question["question"]),
        (&json!("confirm"), &json!("Ship it?")),
        "{question}"
    );
    let yes = "yes";
    let (status, body) = api
        .post(
            &format!("/api/v1/turns/{turn}/answer"),
            json!({ "choices": [yes] }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let r = row_state(id.clone(), "done").await;
    assert_eq!(r["summary"], "yes", "{r}");

    call("reply", json!({ "id": id, "text": "sleep 60000" })).await;
    row_state(id.clone(), "working").await;
    let running = api
        .get_until("/api/v1/turns?state=running&protocol=roost", |b| {
            b["turns"][0].is_object()
        })
        .await;
    let turn = running["turns"][0]["id"]
        .as_str()
        .expect("a running roost turn")
        .to_string();
    let (status, body) = api
        .post(&format!("/api/v1/turns/{turn}/cancel"), json!({}))
        .await;
    assert_eq!((status, body), (200, json!({"cancelled": true})));
    let one = api
        .get_until(&format!("/api/v1/turns/{turn}"), |t| t["state"] == "ended")
        .await;
    assert_eq!(one["outcome"]["code"], "cancelled", "{one}");
}

/// `/metrics` as scraped: its text, read by a Prometheus text parser.
struct Scraped {
    text: String,
    parsed: prometheus_parse::Scrape,
}

impl Scraped {
    /// Scrapes `/metrics` (no token: it needs none).
    async fn of(api: &Api) -> Scraped {
        let scrape = api
            .http
            .get(format!("{}/metrics", api.base))
            .send()
            .await
            .unwrap();
        assert_eq!(scrape.status().as_u16(), 200, "no token needed");
        assert!(scrape.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text"));
        let text = scrape.text().await.unwrap();
        let lines = text.lines().map(|l| Ok(l.to_string()));
        let parsed = prometheus_parse::Scrape::parse(lines).expect("Prometheus text");
        Scraped { text, parsed }
    }

    /// The sum of the counters' or gauges' samples of `name` with these labels.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples(name, labels)
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => 0.0,
            })
            .sum()
    }

    /// How many observations the histograms `name` with these labels counted (their `+Inf` buckets).
    fn count(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples(name, labels)
            .map(|s| match &s.value {
                prometheus_parse::Value::Histogram(buckets) => {
                    buckets.iter().map(|b| b.count).fold(0.0, f64::max)
                }
                other => panic!("{name}: a histogram, not {other:?}"),
            })
            .sum()
    }

    fn samples<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&str, &str)],
    ) -> impl Iterator<Item = &'a prometheus_parse::Sample> {
        self.parsed
            .samples
            .iter()
            .filter(move |s| s.metric == name)
            .filter(move |s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
    }
}

/// `/metrics` after a known set of turns, read by a Prometheus text parser: the counts and histograms
/// match what ran, per protocol and agent; the journal's commits and the embedded relay's connections and
/// answers are counted; no label carries an id; no token needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_the_turns_that_ran() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let api = Api::of(&d);
    let mut c = Client::new(&d.relay, d.agent).await;
    for prompt in ["calc 2+2", "calc 6*7", "fail on purpose"] {
        c.ask(prompt).await;
    }
    // One more still running.
    let waiting = c.prompt_event("sleep 8000", None);
    c.watch(&waiting.id);
    c.publish(&waiting).await;
    let turn = format!("nipxx:{}", waiting.id.to_hex());
    api.get_until(&format!("/api/v1/turns/{turn}"), |t| {
        t["state"] == "running"
    })
    .await;
    // The relay answers a prompt sent again as a duplicate, and refuses an AUTH event sent as an EVENT.
    let again = c.conn.publish(&waiting).await.expect("an OK");
    assert!(
        again.accepted && again.message.starts_with("duplicate:"),
        "{again:?}"
    );
    let auth = c.crypto.sign(nostr::prelude::EventBuilder::new(
        nostr::prelude::Kind::Authentication,
        "",
    ));
    let refused = c.conn.publish(&auth).await.expect("an OK");
    assert!(!refused.accepted, "{refused:?}");

    let m = Scraped::of(&api).await;
    let text = &m.text;
    let demo = [("protocol", "nipxx"), ("agent", "demo")];
    assert_eq!(
        m.value("agentwire_turns_started_total", &demo),
        4.0,
        "{text}"
    );
    assert_eq!(
        m.value(
            "agentwire_turns_ended_total",
            &[
                ("protocol", "nipxx"),
                ("agent", "demo"),
                ("outcome", "result")
            ]
        ),
        2.0,
        "{text}"
    );
    assert_eq!(m.value("agentwire_turns_ended_total", &demo), 3.0, "{text}");
    assert_eq!(
        m.value(
            "agentwire_turns_ended_total",
            &[("outcome", "agent_failed")]
        ),
        1.0,
        "the failure by its core code: {text}"
    );
    assert_eq!(
        m.value(
            "agentwire_tool_calls_total",
            &[("agent", "demo"), ("tool", "calculator"), ("result", "ok")]
        ),
        2.0,
        "{text}"
    );
    assert!(
        text.contains("agentwire_gen_ai_client_token_usage_count{agent=\"demo\",model=\"\",token_type=\"input\"} 3"),
        "each ended turn's tokens: {text}"
    );
    assert_eq!(m.value("agentwire_turns_running", &demo), 1.0, "{text}");
    assert_eq!(m.value("agentwire_questions_open", &[]), 0.0, "{text}");
    assert_eq!(m.value("agentwire_journal_writable", &[]), 1.0, "{text}");
    assert_eq!(
        m.count("agentwire_turn_duration_seconds", &[]),
        3.0,
        "three turns ended: {text}"
    );
    // Four turns accepted and three finished, each a commit the engine waited on.
    assert!(
        m.count("agentwire_journal_commit_seconds", &[]) >= 7.0,
        "{text}"
    );
    // The agent's runtime and this client are connected to the embedded relay.
    assert!(m.value("agentwire_relay_connections", &[]) >= 2.0, "{text}");
    let events = |result| m.value("agentwire_relay_events_total", &[("result", result)]);
    // Four prompts, and the agent's own events answering them.
    assert!(events("accepted") >= 4.0, "{text}");
    assert_eq!(events("duplicate"), 1.0, "{text}");
    assert_eq!(events("rejected"), 1.0, "{text}");
    assert_eq!(events("error"), 0.0, "{text}");
    // No model agent here: the model-call families have no series.
    assert_eq!(
        m.count("agentwire_gen_ai_client_operation_duration_seconds", &[]),
        0.0,
        "{text}"
    );
    assert!(text.contains(&format!(
        "agentwire_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    )));
    // Bounded labels: the routes are patterns, never a turn's id.
    assert!(text.contains("route=\"/api/v1/turns/{id}\""), "{text}");
    assert!(!text.contains(&waiting.id.to_hex()), "no id in a label");
    assert!(!text.contains("sleep 8000"), "no prompt in a label");
}

/// A model agent's calls to a fake OpenAI-compatible server over real HTTP, in `/metrics`: one duration
/// for every call (streamed, whole, or refused by the server), one time to first token for every streamed
/// call that said something, labelled with the agent and the model it asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_time_the_model_calls() {
    use agentwire_testkit::fake_openai::{text_chunks, tool_call_chunks, FakeOpenAi, Scripted};
    let fake = FakeOpenAi::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agentwire.toml");
    std::fs::write(
        &config,
        format!(
            "[agents.local]\nkind = \"openai\"\nbase_url = \"{}\"\nmodels = [\"llama3.2\", \"qwen2.5\"]\ntools = [\"calculator\"]\n",
            fake.base_url
        ),
    )
    .unwrap();
    let d = Daemon::start(
        &dir.path().join("data"),
        &["--config", config.to_str().unwrap(), "--agent", "local"],
    );
    let api = Api::of(&d);
    let mut c = Client::new(&d.relay, d.agent).await;
    let stream = |chunks| Scripted::Stream {
        chunks,
        gap: Duration::from_millis(20),
    };
    // One call; then two (a tool call, then the answer); then one whole completion; then one refused.
    fake.push(stream(text_chunks(&["Hel", "lo"], (9, 2))));
    assert_eq!(c.ask("hi").await.text(), "Hello");
    fake.push(stream(tool_call_chunks(
        "call_1",
        "calculator",
        &["{\"expression\":\"6*7\"}"],
    )));
    fake.push(stream(text_chunks(&["42"], (20, 1))));
    assert_eq!(c.ask("what is 6*7").await.text(), "42");
    fake.push(Scripted::Whole(json!({
        "choices": [{"message": {"role": "assistant", "content": "whole"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    })));
    assert_eq!(c.ask("at once").await.text(), "whole");
    fake.push(Scripted::Status {
        status: 429,
        headers: vec![("retry-after".into(), "9".into())],
        body: r#"{"error":{"message":"rate limited"}}"#.into(),
    });
    assert_eq!(c.ask("again").await.error_code(), "RATE_LIMIT");
    assert_eq!(fake.received().len(), 5, "five model calls");

    let m = Scraped::of(&api).await;
    let text = &m.text;
    let local = [("agent", "local"), ("model", "llama3.2")];
    assert_eq!(
        m.count("agentwire_gen_ai_client_operation_duration_seconds", &local),
        5.0,
        "every call: {text}"
    );
    assert_eq!(
        m.count(
            "agentwire_gen_ai_server_time_to_first_token_seconds",
            &local
        ),
        3.0,
        "the streamed calls: {text}"
    );
    // The streamed calls took at least the gaps between their chunks (ten of 20 ms before their ends), and
    // each one's first token came before its end.
    let seconds = m.value(
        "agentwire_gen_ai_client_operation_duration_seconds_sum",
        &local,
    );
    assert!(seconds >= 0.2, "{text}");
    let first = m.value(
        "agentwire_gen_ai_server_time_to_first_token_seconds_sum",
        &local,
    );
    assert!(first <= seconds, "{text}");
    assert_eq!(
        m.value("agentwire_turns_ended_total", &[("agent", "local")]),
        4.0,
        "{text}"
    );
}
