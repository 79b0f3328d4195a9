//! What an operator reads in `serve`'s log at `info`: one line when a turn starts and one when it ends (its
//! agent, protocol, conversation, request, outcome, duration and tokens), a warning with the cause when it
//! failed for the agent's reasons (its model server unreachable), and never the prompt.

mod common;

use common::{Client, Daemon};
use std::process::Stdio;
use std::time::Duration;

/// The daemon's log so far.
fn log(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Waits until the log has a line with every one of `words`, and returns that line.
async fn line_with(path: &std::path::Path, words: &[&str]) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(l) = log(path)
            .lines()
            .find(|l| words.iter().all(|w| l.contains(w)))
        {
            return l.to_string();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no line with {words:?} in:\n{}",
            log(path)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_starts_and_ends_in_the_log_and_an_unreachable_model_server_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    // A model server that is not there: a port bound, then let go.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let config = dir.path().join("agentwire.toml");
    std::fs::write(
        &config,
        format!(
            "[agents.gone]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\nmodels = [\"m\"]\nexpose = [\"nipxx\"]\n"
        ),
    )
    .unwrap();
    let log_path = dir.path().join("serve.log");
    let log_file = std::fs::File::create(&log_path).unwrap();
    let d = Daemon::start_logging(
        &dir.path().join("data"),
        &["--config", config.to_str().unwrap()],
        &[("RUST_LOG", "info")],
        Stdio::from(log_file),
    );

    let mut c = Client::new(&d.relay, d.agent).await;
    assert_eq!(
        c.ask("quick secret-words-here").await.text(),
        "secret-words-here"
    );
    let started = line_with(&log_path, &["turn started", "agent=demo", "protocol=nipxx"]).await;
    let ended = line_with(&log_path, &["turn ended", "outcome=result", "duration_ms="]).await;
    assert!(
        started.contains("request=nipxx:") && started.contains("conversation="),
        "{started}"
    );
    assert!(ended.contains("input_tokens="), "{ended}");

    // The model agent's server is unreachable: the client gets its error, and the operator a warning that
    // says why.
    let gone = nostr::prelude::PublicKey::from_hex(
        d.ready["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == "gone")
            .and_then(|a| a["pubkey"].as_str())
            .expect("the further agent's key on the ready line"),
    )
    .unwrap();
    let mut c = Client::new(&d.relay, gone).await;
    let run = c.ask("hello there model").await;
    assert!(run.terminal.is_some());
    let warned = line_with(
        &log_path,
        &["WARN", "turn failed for the agent's reasons", "agent=gone"],
    )
    .await;
    assert!(warned.contains("cause="), "{warned}");

    let all = log(&log_path);
    assert!(
        !all.contains("secret-words-here") && !all.contains("hello there model"),
        "no prompt in the log:\n{all}"
    );
}
