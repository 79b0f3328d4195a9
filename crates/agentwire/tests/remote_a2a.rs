//! Remote A2A agents: an agent another daemon serves over A2A is an agent here. Two real daemons on
//! loopback: the remote one serves the demo agent on its A2A front (behind its operator's token); this one
//! serves it as `kind = "a2a"` (`far`, its `--agent`), reached as its client from the remote's card. Its
//! answer streams through as it comes, a conversation here is one context there, its question is asked
//! and answered here, a cancel here cancels the task there (and so does a crash here, once this daemon is
//! back), and a card that cannot be reached (or a token it refuses) fails the turn at once.

mod common;

use common::api::Api;
use common::{Client, Daemon};
use std::path::Path;
use std::time::{Duration, Instant};

/// The remote daemon's card URL: its `--agent` agent's (the demo).
fn card_url(remote: &Daemon) -> String {
    format!(
        "{}/.well-known/agent-card.json",
        remote.ready["http"].as_str().unwrap()
    )
}

/// This daemon, serving the A2A agent at `url` as `far` (its `--agent`), with `token` in `FAR_TOKEN`.
fn near(dir: &Path, url: &str, token: &str) -> Daemon {
    near_within(dir, url, token, 60)
}

/// [`near`], its turns taking at most `secs` there.
fn near_within(dir: &Path, url: &str, token: &str, secs: u64) -> Daemon {
    let config = dir.join("agentwire.toml");
    std::fs::write(
        &config,
        format!(
            "[agents.far]\nkind = \"a2a\"\nurl = \"{url}\"\ntoken_env = \"FAR_TOKEN\"\nrequest_timeout_secs = {secs}\n"
        ),
    )
    .unwrap();
    Daemon::start_with_env(
        &dir.join("data"),
        &["--config", config.to_str().unwrap(), "--agent", "far"],
        &[("FAR_TOKEN", token)],
    )
}

/// The remote daemon's operator token (its A2A front takes it).
fn token(remote: &Daemon) -> String {
    remote.ready["http_token"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_a2a_agent_answers_streams_and_keeps_one_context_a_conversation() {
    let dir = tempfile::tempdir().unwrap();
    let remote = Daemon::start(&dir.path().join("remote"), &[]);
    let d = near(dir.path(), &card_url(&remote), &token(&remote));
    let mut c = Client::new(&d.relay, d.agent).await;

    let run = c.ask("hello far away").await;
    assert_eq!(run.text(), "You said: hello far away");
    assert!(
        run.deltas().len() >= 2,
        "streamed through as it came: {:?}",
        run.deltas()
    );
    assert_eq!(c.ask("calc 6*7").await.text(), "42");

    // Two prompts of one conversation here are one context there; another conversation is another.
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
    let there = Api::of(&remote).turns_asked("one of a pair", 3).await;
    assert!(there.iter().all(|t| t["protocol"] == "a2a"), "{there:?}");
    let convs: Vec<&str> = there
        .iter()
        .map(|t| t["conversation"].as_str().unwrap())
        .collect();
    let distinct: std::collections::BTreeSet<_> = convs.iter().collect();
    assert_eq!(distinct.len(), 2, "two contexts there: {convs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_there_is_asked_here_and_its_answer_goes_back() {
    let dir = tempfile::tempdir().unwrap();
    let remote = Daemon::start(&dir.path().join("remote"), &[]);
    let d = near(dir.path(), &card_url(&remote), &token(&remote));
    let (api, remote_api) = (Api::of(&d), Api::of(&remote));

    // Asked over this daemon's A2A front (NIP-XX cannot put questions to a person).
    let task = api.a2a_send("far", "approve rm /tmp/x").await;
    let turn = api.waiting_turn().await;
    assert_eq!(turn, format!("a2a:{task}"));
    let asked = api.get(&format!("/api/v1/turns/{turn}")).await;
    assert!(
        asked.to_string().contains("rm /tmp/x"),
        "the approval names the command: {asked}"
    );
    api.answer(&turn, "once").await;

    let done = api.a2a_final("far", &task, Duration::from_secs(20)).await;
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    assert!(done.to_string().contains("ran rm /tmp/x"), "{done}");
    let there = remote_api.turns_asked("approve rm /tmp/x", 1).await;
    let there = there[0]["id"].as_str().unwrap().to_string();
    let ended = remote_api.until_state(&there, "ended").await;
    assert_eq!(ended["ended_as"], "done", "the task there: {ended}");
    assert!(
        ended["outcome"].to_string().contains("ran rm /tmp/x"),
        "approved there: {ended}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_here_cancels_the_task_there() {
    let dir = tempfile::tempdir().unwrap();
    let remote = Daemon::start(&dir.path().join("remote"), &[]);
    let d = near(dir.path(), &card_url(&remote), &token(&remote));
    let (api, remote_api) = (Api::of(&d), Api::of(&remote));
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
    let ended = remote_api.until_state(&there, "ended").await;
    assert_eq!(ended["ended_as"], "cancelled", "the task there: {ended}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_here_mid_turn_ends_the_turn_once_and_cancels_the_task_there() {
    let dir = tempfile::tempdir().unwrap();
    let remote = Daemon::start(&dir.path().join("remote"), &[]);
    let mut d = near(dir.path(), &card_url(&remote), &token(&remote));
    let remote_api = Api::of(&remote);
    // Sent over this daemon's A2A front, whose client does not send it again after the restart (a NIP-XX
    // prompt still on the relay could be taken again, and end the turn, before the recovery pass).
    let task = Api::of(&d).a2a_send("far", "sleep 30000").await;
    let there = remote_api.turns_asked("sleep 30000", 1).await;
    let there = there[0]["id"].as_str().unwrap().to_string();
    remote_api.until_state(&there, "running").await;

    // SIGKILL mid-turn, then a start on the same data dir: the turn here ends interrupted, and the task
    // there (found by the conversation's context) is cancelled rather than left to sleep its 30 s out.
    d.kill();
    let d = near(dir.path(), &card_url(&remote), &token(&remote));
    let ended = remote_api.until_state(&there, "ended").await;
    assert_eq!(ended["ended_as"], "cancelled", "the task there: {ended}");
    let here = Api::of(&d)
        .until_state(&format!("a2a:{task}"), "ended")
        .await;
    assert_eq!(here["ended_as"], "failed", "{here}");
    assert_eq!(here["outcome"]["code"], "interrupted", "{here}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_a2a_agent_that_cannot_be_reached_fails_at_once() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://{}/.well-known/agent-card.json",
        closed.local_addr().unwrap()
    );
    drop(closed);
    let d = near(dir.path(), &url, "any-token");
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
    let turn = format!("nipxx:{}", run.prompt.to_hex());
    let ended = Api::of(&d).until_state(&turn, "ended").await;
    assert_eq!(
        ended["outcome"]["code"], "model_unavailable",
        "the turn here: {ended}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_the_remote_refuses_fails_the_turn_without_showing_it() {
    let dir = tempfile::tempdir().unwrap();
    let remote = Daemon::start(&dir.path().join("remote"), &[]);
    let wrong = "not-the-remote-token-".to_string() + &"z".repeat(32);
    let d = near(dir.path(), &card_url(&remote), &wrong);
    let mut c = Client::new(&d.relay, d.agent).await;
    let run = c.ask("let me in").await;
    let shown = format!("{:?}", run.terminal);
    assert!(shown.contains("credentials"), "{shown}");
    assert!(!shown.contains(&wrong), "the token is never shown: {shown}");
    let turn = format!("nipxx:{}", run.prompt.to_hex());
    let ended = Api::of(&d).until_state(&turn, "ended").await;
    assert_eq!(
        ended["outcome"]["code"], "provider_refused",
        "the turn here: {ended}"
    );
    assert!(!ended.to_string().contains(&wrong), "{ended}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_past_its_timeout_ends_here_and_is_cancelled_there() {
    let dir = tempfile::tempdir().unwrap();
    let remote = Daemon::start(&dir.path().join("remote"), &[]);
    let d = near_within(dir.path(), &card_url(&remote), &token(&remote), 2);
    let remote_api = Api::of(&remote);
    let mut c = Client::new(&d.relay, d.agent).await;
    let started = Instant::now();
    let run = c.ask("sleep 30000").await;
    assert_eq!(run.error_code(), "MODEL_UNAVAILABLE", "{:?}", run.terminal);
    assert!(
        format!("{:?}", run.terminal).contains("within 2 s"),
        "{:?}",
        run.terminal
    );
    assert!(started.elapsed() < Duration::from_secs(10), "bounded");
    let there = remote_api.turns_asked("sleep 30000", 1).await;
    let there = there[0]["id"].as_str().unwrap().to_string();
    let ended = remote_api.until_state(&there, "ended").await;
    assert_eq!(ended["ended_as"], "cancelled", "the task there: {ended}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_by_the_remotes_crash_is_followed_again_to_the_tasks_end() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("remote");
    let mut remote = Daemon::start(&data, &[]);
    let http = remote.ready["http"].as_str().unwrap().to_string();
    let listen = http.trim_start_matches("http://").to_string();
    let d = near(dir.path(), &card_url(&remote), &token(&remote));
    let api = Api::of(&d);
    let mut c = Client::new(&d.relay, d.agent).await;

    let ev = c.prompt_event("sleep 30000", None);
    c.watch(&ev.id);
    c.publish(&ev).await;
    let turn = format!("nipxx:{}", ev.id.to_hex());
    api.until_state(&turn, "running").await;
    let there = Api::of(&remote).turns_asked("sleep 30000", 1).await;
    let there = there[0]["id"].as_str().unwrap().to_string();
    Api::of(&remote).until_state(&there, "running").await;

    // The remote crashes mid-task and comes back on the same address: the stream is followed again
    // (SubscribeToTask), the task has ended there (cut off by the crash), and is read (GetTask).
    remote.kill();
    let remote = Daemon::start(&data, &["--http-listen", &listen]);
    assert_eq!(remote.ready["http"].as_str().unwrap(), http);
    let ended = api.until_state(&turn, "ended").await;
    assert_eq!(
        ended["outcome"]["code"], "interrupted",
        "the task's end there is the turn's here: {ended}"
    );
    let run = c
        .collect(&ev.id, Duration::from_secs(10), Duration::from_millis(200))
        .await;
    assert!(run.terminal.is_some(), "the client heard the end");
}
