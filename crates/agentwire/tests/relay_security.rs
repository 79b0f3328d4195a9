//! The embedded relay's doors, through the real daemon: `[relay] allowed_origins` lets a listed web page open a
//! WebSocket while any other page gets HTTP 403 (native clients, which send no `Origin`, are unaffected); a
//! prompt dated within the relay's skew ahead runs once, even after its journal retention has passed and the
//! daemon restarts (the turn is kept for the retention plus the skew), and one dated a day ahead is refused
//! by the relay; rooms taken out of the configuration are said to be retired in an `info` line, not a
//! warning.

mod common;

use agentwire_nostr::nipxx::{kinds, tags, PromptPayload};
use agentwire_testkit::fake_openai::{text_chunks, FakeOpenAi, Scripted};
use common::{Client, Daemon};
use nostr::event::FinalizeEvent;
use nostr::prelude::{EventBuilder, Keys, Kind, Tag, Timestamp};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

/// The status of a WebSocket upgrade to `relay` sent with `origin` (101 when it was taken).
async fn upgrade_status(relay: &str, origin: Option<&str>) -> u16 {
    let mut request = relay.into_client_request().unwrap();
    if let Some(origin) = origin {
        request
            .headers_mut()
            .insert("Origin", HeaderValue::from_str(origin).unwrap());
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok((_, response)) => response.status().as_u16(),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => response.status().as_u16(),
        Err(other) => panic!("upgrade failed: {other}"),
    }
}

fn write_config(dir: &Path, text: &str) -> String {
    let path = dir.join("agentwire.toml");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_allowed_web_origins_may_open_the_relay() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "[relay]\nallowed_origins = [\"https://app.example.com\"]\n",
    );
    let d = Daemon::start(&dir.path().join("data"), &["--config", &config]);
    assert_eq!(upgrade_status(&d.relay, None).await, 101);
    assert_eq!(
        upgrade_status(&d.relay, Some("https://app.example.com")).await,
        101
    );
    for other in ["https://evil.example.com", "http://localhost:8080", "null"] {
        assert_eq!(upgrade_status(&d.relay, Some(other)).await, 403, "{other}");
    }
    // The agent itself (a native client) still takes prompts.
    let mut c = Client::new(&d.relay, d.agent).await;
    let run = c.ask("echo hello").await;
    assert!(run.terminal.is_some(), "no answer");
}

/// A prompt signed by `c` for its agent, dated `at`.
fn prompt_at(c: &Client, message: &str, at: u64) -> nostr::prelude::Event {
    let content = c
        .crypto
        .encrypt(&c.agent, &PromptPayload::new(message).to_json())
        .unwrap();
    c.crypto.sign(
        EventBuilder::new(Kind::Custom(kinds::PROMPT), content)
            .tags(tags::prompt(&c.agent, None))
            .custom_created_at(Timestamp::from_secs(at)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_dated_ahead_runs_once_across_its_retention_and_a_restart() {
    const RETENTION_SECS: f64 = 6.0;
    // How far ahead the prompt is dated: within the skew a 6-s retention allows (the retention itself), and
    // enough that it is still young after a pass that forgets turns older than the retention alone.
    const AHEAD_SECS: u64 = 5;
    let fake = FakeOpenAi::start();
    let dir = tempfile::tempdir().unwrap();
    let days = RETENTION_SECS / 86_400.0;
    let config = write_config(
        dir.path(),
        &format!(
            "[agents.local]\nkind = \"openai\"\nbase_url = \"{}\"\nmodels = [\"m\"]\n\n\
             [journal]\nretention_days = {days}\n\n[relay.retention]\nagent_days = {days}\n\n\
             [nipxx]\nbacklog_horizon_secs = 6\n",
            fake.base_url
        ),
    );
    let data = dir.path().join("data");
    let args = ["--config", config.as_str(), "--agent", "local"];
    let mut d = Daemon::start(&data, &args);
    let keys = Keys::generate();
    let mut c = Client::with_keys(&d.relay, d.agent, keys.clone()).await;

    // A day ahead: the relay refuses it.
    let now = Timestamp::now().as_secs();
    let far = prompt_at(&c, "from tomorrow", now + 86_400);
    let ok = c.conn.publish(&far).await.expect("the relay answers");
    assert!(!ok.accepted, "a prompt a day ahead was taken");
    assert!(
        ok.message
            .starts_with("invalid: created_at is too far in the future"),
        "{}",
        ok.message
    );

    // A few seconds ahead (a fast clock, within the bound): served once.
    fake.push(Scripted::Stream {
        chunks: text_chunks(&["once"], (3, 1)),
        gap: Duration::from_millis(1),
    });
    let ahead = prompt_at(&c, "a little fast", now + AHEAD_SECS);
    let run = c.send_and_collect(ahead.clone()).await;
    assert_eq!(run.text(), "once");
    let chats = || {
        fake.received()
            .iter()
            .filter(|r| r.path.ends_with("/chat/completions"))
            .count()
    };
    assert_eq!(chats(), 1);
    drop(c);

    // Past the journal's retention (and a pass of its pruning), the prompt is still young: it was dated
    // ahead. Restarted, the daemon asks the relay for its backlog and gets the prompt again.
    tokio::time::sleep(Duration::from_secs_f64(RETENTION_SECS + 2.5)).await;
    d.kill();
    fake.push(Scripted::Stream {
        chunks: text_chunks(&["twice"], (3, 1)),
        gap: Duration::from_millis(1),
    });
    let d = Daemon::start(&data, &args);
    let mut c = Client::with_keys(&d.relay, d.agent, keys).await;
    c.watch(&ahead.id);
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(chats(), 1, "the prompt ran again after a restart");
    let again = c
        .collect(&ahead.id, Duration::from_millis(500), Duration::ZERO)
        .await;
    assert!(
        again.terminal.as_ref().and_then(|t| t.text()).as_deref() != Some("twice"),
        "answered by a second run"
    );
}

#[test]
fn rooms_taken_out_of_the_config_are_said_to_be_retired_at_info() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let member = Keys::generate();
    let config = write_config(
        dir.path(),
        &format!(
            "[[rooms]]\nid = \"lab\"\nmembers = [\"{}\"]\n\n[[rooms]]\nid = \"ops\"\n",
            member.public_key().to_hex()
        ),
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    {
        let d = Daemon::start(&data, &["--config", &config]);
        runtime.block_on(async {
            let c = Client::new(&d.relay, d.agent).await;
            let hello = EventBuilder::new(Kind::from_u16(9), "hello")
                .tags([Tag::parse(["h", "lab"]).unwrap()])
                .finalize(&member)
                .unwrap();
            c.publish(&hello).await;
        });
    }
    let log_path = dir.path().join("second.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let d = Daemon::start_logging(
        &data,
        &[],
        &[("RUST_LOG", "info"), ("NO_COLOR", "1")],
        Stdio::from(log),
    );
    drop(d);
    let logged = std::fs::read_to_string(&log_path).unwrap();
    let line = logged
        .lines()
        .find(|l| l.contains("rooms no longer in the configuration were taken off the relay"))
        .unwrap_or_else(|| panic!("no line about the rooms: {logged}"));
    assert!(line.contains("INFO"), "{line}");
    assert!(line.contains("lab, ops"), "{line}");
    assert!(line.contains("metadata_events=6"), "{line}");
    assert!(line.contains("events_kept=1"), "{line}");
    assert!(
        !logged.contains("removed stored"),
        "a warning about the rooms' metadata: {logged}"
    );
}
