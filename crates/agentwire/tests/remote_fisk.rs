//! Remote fisk-ai agents, and the cross of protocols: a NIP-XX prompt (or an A2A one) to an agent that is
//! a fisk-ai worker elsewhere. A real nats-server and two real daemons on loopback: the remote one serves
//! the demo agent on fisk-ai (`--nats`, questions on); this one serves it as `kind = "fisk"` (`far`),
//! reached as its caller. Its answer streams through as it comes, two turns of a conversation here are one
//! conversation there, a question asked there is answered here through the turn API, a cancel here cancels
//! the run there (and so does a crash here, once this daemon is back), a turn past its time is cancelled
//! there, and NATS that cannot be reached (or no worker on it) fails the turn at once.

mod common;

use agentwire_testkit::NatsServer;
use common::api::Api;
use common::{Client, Daemon};
use std::path::Path;
use std::time::{Duration, Instant};

/// The remote worker's fisk-ai identity.
const WORKER: &str = "far-worker";

/// The remote daemon: the demo agent as fisk-ai worker [`WORKER`] on `nats`, asking questions.
fn remote(dir: &Path, nats: &NatsServer) -> Daemon {
    Daemon::start(
        &dir.join("remote"),
        &["--nats", &nats.url, "--identity", WORKER, "--nats-elicit"],
    )
}

/// This daemon, serving the worker `identity` on `url` as `far` (its `--agent`), turns at most `secs`.
fn near(dir: &Path, url: &str, identity: &str, secs: u64) -> Daemon {
    let config = dir.join("agentwire.toml");
    std::fs::write(
        &config,
        format!(
            "[agents.far]\nkind = \"fisk\"\nurl = \"{url}\"\nidentity = \"{identity}\"\nrequest_timeout_secs = {secs}\n"
        ),
    )
    .unwrap();
    Daemon::start(
        &dir.join("near"),
        &["--config", config.to_str().unwrap(), "--agent", "far"],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_of_protocol_a_nipxx_prompt_to_a_fisk_worker_streams_and_keeps_one_conversation() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let r = remote(dir.path(), &nats);
    let d = near(dir.path(), &nats.url, WORKER, 60);
    let mut c = Client::new(&d.relay, d.agent).await;

    let run = c.ask("hello far away").await;
    assert_eq!(run.text(), "You said: hello far away");
    assert!(
        run.deltas().len() >= 2,
        "streamed through as it came: {:?}",
        run.deltas()
    );
    let run = c.ask("calc 6*7").await;
    assert_eq!(run.text(), "42");
    let tools: Vec<_> = run
        .events
        .iter()
        .map(|(_, p)| p.as_str())
        .filter(|p| p.contains("calculator"))
        .collect();
    assert!(!tools.is_empty(), "tool telemetry came through");

    // Two prompts of one conversation here are one conversation there; another conversation is another.
    for (session, prompt) in [
        ("here-1", "one of a pair"),
        ("here-1", "one of a pair"),
        ("here-2", "one of a pair"),
    ] {
        let ev = c.prompt_event(prompt, Some(session));
        assert_eq!(
            c.send_and_collect(ev).await.text(),
            format!("You said: {prompt}")
        );
    }
    let there = Api::of(&r).turns_asked("one of a pair", 3).await;
    let convs: Vec<&str> = there
        .iter()
        .map(|t| t["conversation"].as_str().unwrap_or(""))
        .collect();
    let distinct: std::collections::BTreeSet<_> = convs.iter().collect();
    assert_eq!(distinct.len(), 2, "two conversations there: {convs:?}");

    // A worker that no longer knows the conversation (another one took its identity, with a journal of
    // its own) takes its next turn as a new conversation.
    drop(r);
    let r = Daemon::start(
        &dir.path().join("remote-2"),
        &["--nats", &nats.url, "--identity", WORKER, "--nats-elicit"],
    );
    let ev = c.prompt_event("after the move", Some("here-1"));
    assert_eq!(
        c.send_and_collect(ev).await.text(),
        "You said: after the move"
    );
    Api::of(&r).turns_asked("after the move", 1).await;

    // A failure there is a failure here, with its message (an agent's failure is NIP-XX's INTERNAL_ERROR).
    let run = c.ask("fail on purpose").await;
    assert_eq!(run.error_code(), "INTERNAL_ERROR");
    assert!(
        format!("{:?}", run.terminal).contains("on purpose"),
        "{:?}",
        run.terminal
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_asked_there_is_answered_here_through_the_turn_api() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let r = remote(dir.path(), &nats);
    let d = near(dir.path(), &nats.url, WORKER, 60);
    let (api, remote_api) = (Api::of(&d), Api::of(&r));

    // Over A2A here, which can ask: the worker's approval is this turn's question.
    let prompt = "approve rm -rf /tmp/far";
    let task = api.a2a_send("far", prompt).await;
    let turn = api.waiting_turn().await;
    assert_eq!(turn, format!("a2a:{task}"));
    let open = api.until_state(&turn, "waiting").await.to_string();
    assert!(open.contains("rm -rf /tmp/far"), "{open}");
    api.answer(&turn, "once").await;
    let t = api.a2a_final("far", &task, Duration::from_secs(15)).await;
    assert_eq!(t["status"]["state"], "TASK_STATE_COMPLETED", "{t}");
    assert!(t.to_string().contains("ran rm -rf /tmp/far"), "{t}");
    let there = remote_api.turns_asked(prompt, 1).await;
    let there = there[0]["id"].as_str().unwrap().to_string();
    let ended = remote_api.until_state(&there, "ended").await;
    assert_eq!(ended["ended_as"], "done", "the run there: {ended}");

    // Over NIP-XX, which cannot ask, nobody answers: the command stays unrun there.
    let mut c = Client::new(&d.relay, d.agent).await;
    assert_eq!(c.ask("approve rm -rf /tmp/nobody").await.text(), "declined");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_here_cancels_the_run_there() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let r = remote(dir.path(), &nats);
    let d = near(dir.path(), &nats.url, WORKER, 60);
    let (api, remote_api) = (Api::of(&d), Api::of(&r));
    let mut c = Client::new(&d.relay, d.agent).await;

    let ev = c.prompt_event("sleep 30000", None);
    c.watch(&ev.id);
    c.publish(&ev).await;
    let turn = format!("nipxx:{}", ev.id.to_hex());
    api.until_state(&turn, "running").await;
    let there = remote_api.turns_asked("sleep 30000", 1).await;
    let there = there[0]["id"].as_str().unwrap().to_string();
    remote_api.until_state(&there, "running").await;
    assert_eq!(api.cancel(&turn).await, 200);
    let run = c
        .collect(&ev.id, Duration::from_secs(10), Duration::from_millis(200))
        .await;
    assert_eq!(run.error_code(), "CANCELLED", "{:?}", run.terminal);
    // The run there parks where the conversation can go on.
    let ended = remote_api.until_state(&there, "ended").await;
    assert!(
        ended.to_string().contains("suspended"),
        "the run there: {ended}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_here_mid_turn_ends_the_turn_once_and_cancels_the_run_there() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let r = remote(dir.path(), &nats);
    let mut d = near(dir.path(), &nats.url, WORKER, 60);
    let remote_api = Api::of(&r);
    // Sent over this daemon's A2A front, whose client does not send it again after the restart (a NIP-XX
    // prompt still on the relay could be taken again, and end the turn, before the recovery pass).
    let task = Api::of(&d).a2a_send("far", "sleep 30000").await;
    let there = remote_api.turns_asked("sleep 30000", 1).await;
    let there = there[0]["id"].as_str().unwrap().to_string();
    remote_api.until_state(&there, "running").await;

    // SIGKILL mid-turn, then a start on the same data dir (nothing of the run's request kept but the
    // turn's own journal): the turn here ends interrupted, and the run there is cancelled (it parks,
    // suspended) rather than left to sleep its 30 s out.
    d.kill();
    let d = near(dir.path(), &nats.url, WORKER, 60);
    let ended = remote_api.until_state(&there, "ended").await;
    assert!(
        ended.to_string().contains("suspended"),
        "the run there: {ended}"
    );
    let here = Api::of(&d)
        .until_state(&format!("a2a:{task}"), "ended")
        .await;
    assert_eq!(here["ended_as"], "failed", "{here}");
    assert_eq!(here["outcome"]["code"], "interrupted", "{here}");

    // The agent serves on after the restart.
    let mut c = Client::new(&d.relay, d.agent).await;
    assert_eq!(c.ask("still there?").await.text(), "You said: still there?");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_past_its_time_is_cancelled_there() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let r = remote(dir.path(), &nats);
    let d = near(dir.path(), &nats.url, WORKER, 2);
    let remote_api = Api::of(&r);
    let mut c = Client::new(&d.relay, d.agent).await;

    let started = Instant::now();
    let run = c.ask("sleep 30000").await;
    assert_eq!(run.error_code(), "MODEL_UNAVAILABLE", "{:?}", run.terminal);
    assert!(
        format!("{:?}", run.terminal).contains("did not finish within 2 s"),
        "{:?}",
        run.terminal
    );
    assert!(started.elapsed() < Duration::from_secs(12), "no hang");
    let there = remote_api.turns_asked("sleep 30000", 1).await;
    let there = there[0]["id"].as_str().unwrap().to_string();
    let ended = remote_api.until_state(&there, "ended").await;
    assert!(
        ended.to_string().contains("suspended"),
        "the run there: {ended}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fisk_worker_that_cannot_be_reached_fails_at_once() {
    // NATS where nothing listens.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("nats://{}", closed.local_addr().unwrap());
    drop(closed);
    let dir = tempfile::tempdir().unwrap();
    let d = near(dir.path(), &url, WORKER, 60);
    let mut c = Client::new(&d.relay, d.agent).await;
    let started = Instant::now();
    let run = c.ask("anyone there?").await;
    assert_eq!(run.error_code(), "MODEL_UNAVAILABLE", "{:?}", run.terminal);
    assert!(
        format!("{:?}", run.terminal).contains("cannot be reached"),
        "{:?}",
        run.terminal
    );
    assert!(started.elapsed() < Duration::from_secs(10), "no hang");
    drop(d);

    // NATS up, but no worker serves the identity: no responders, at once.
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = near(dir.path(), &nats.url, "nobody-here", 60);
    let mut c = Client::new(&d.relay, d.agent).await;
    let started = Instant::now();
    let run = c.ask("anyone there?").await;
    assert_eq!(run.error_code(), "MODEL_UNAVAILABLE", "{:?}", run.terminal);
    assert!(
        format!("{:?}", run.terminal).contains("no fisk-ai worker answers"),
        "{:?}",
        run.terminal
    );
    assert!(started.elapsed() < Duration::from_secs(5), "no hang");
}
