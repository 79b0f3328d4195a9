//! The caller fronts (A2A, the OpenAI-compatible API) in the real daemon across a crash: a turn each front
//! was running when the daemon was killed is ended on the next start, and the turn lists show it ended,
//! with its caller: the operator's turn list and the caller's own A2A task list.

mod common;

use common::Daemon;
use serde_json::{json, Value};
use std::time::Duration;

const CONFIG: &str = r#"
[agents.slow]
kind = "cmd"
command = ["sh", "-c", "echo started; sleep 60"]
expose = ["openai", "a2a"]

[[http.callers]]
name = "alice"
token_env = "ALICE_TOKEN"
"#;

async fn get(http: &reqwest::Client, url: &str, token: &str) -> Value {
    let r = http
        .get(url)
        .bearer_auth(token)
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "{url}");
    serde_json::from_slice(&r.bytes().await.unwrap()).unwrap()
}

/// The operator's turns of `protocol`, once `want` holds of them (within 15 s).
async fn turns_until(
    http: &reqwest::Client,
    d: &Daemon,
    protocol: &str,
    want: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let base = d.ready["http"].as_str().unwrap();
    let token = d.ready["http_token"].as_str().unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let body = get(
            http,
            &format!("{base}/api/v1/turns?protocol={protocol}&limit=500"),
            token,
        )
        .await;
        let turns = body["turns"].as_array().cloned().unwrap_or_default();
        if want(&turns) {
            return turns;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{protocol}: {turns:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_a_crash_cut_off_is_listed_ended_with_its_caller_after_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agentwire.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let data = dir.path().join("data");
    let alice = "alice-".to_string() + &"a".repeat(40);
    let env = [("ALICE_TOKEN", alice.as_str())];
    let args = ["--config", config.to_str().unwrap()];
    let mut d = Daemon::start_with_env(&data, &args, &env);
    let base = d.ready["http"].as_str().unwrap().to_string();
    let http = agentwire_agents::openai::http_client(Duration::from_secs(30)).unwrap();

    // A streamed completion, left open, and an A2A task answered at once: both running.
    let completion = http
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(&alice)
        .header("content-type", "application/json")
        .body(
            json!({"model": "slow", "stream": true,
                   "messages": [{"role": "user", "content": "an openai turn"}]})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(completion.status().as_u16(), 200);
    let sent = http
        .post(format!("{base}/a2a/slow/message:send"))
        .bearer_auth(&alice)
        .header("content-type", "application/json")
        .header("A2A-Version", "1.0")
        .body(
            json!({"message": {"messageId": "m-1", "role": "ROLE_USER",
                               "parts": [{"text": "an a2a turn"}]},
                   "configuration": {"returnImmediately": true}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status().as_u16(), 200);
    let sent: Value = serde_json::from_slice(&sent.bytes().await.unwrap()).unwrap();
    let task = sent["task"]["id"].as_str().unwrap().to_string();
    for protocol in ["openai", "a2a"] {
        turns_until(&http, &d, protocol, |t| {
            t.iter().any(|t| t["state"] == "running")
        })
        .await;
    }

    // A crash, and the next start on the same data dir.
    d.kill();
    drop(completion);
    let d = Daemon::start_with_env(&data, &args, &env);
    let base = d.ready["http"].as_str().unwrap().to_string();
    for (protocol, prompt) in [("openai", "an openai turn"), ("a2a", "an a2a turn")] {
        let turns = turns_until(&http, &d, protocol, |t| {
            t.iter().any(|t| t["prompt"] == prompt)
        })
        .await;
        let t = turns.iter().find(|t| t["prompt"] == prompt).unwrap();
        assert_eq!(t["state"], "ended", "{t}");
        assert_eq!(t["ended_as"], "failed", "{t}");
        assert_eq!(t["requester"], "caller:alice", "{t}");
        assert_eq!(t["outcome"]["code"], "interrupted", "{t}");
    }
    // Alice's task list has her task, failed; reading it gives the same.
    let listed = get(&http, &format!("{base}/a2a/slow/tasks"), &alice).await;
    let mine = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == task.as_str())
        .unwrap_or_else(|| panic!("task {task} is not in alice's list: {listed}"))
        .clone();
    assert_eq!(mine["status"]["state"], "TASK_STATE_FAILED", "{mine}");
    let read = get(&http, &format!("{base}/a2a/slow/tasks/{task}"), &alice).await;
    assert_eq!(read["status"]["state"], "TASK_STATE_FAILED", "{read}");
}
