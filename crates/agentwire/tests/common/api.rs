//! The daemon's turn API as the hub page calls it, with the operator's token: the turns waiting on a
//! question, answers, cancels.

use super::Daemon;
use serde_json::{json, Value};
use std::time::Duration;

/// How long the daemon has to put a question out.
pub const ASKED: Duration = Duration::from_secs(15);

/// The turn API of the daemon (what the hub page calls).
pub struct Api {
    /// The server's base URL.
    pub base: String,
    /// The operator's token.
    pub token: String,
    /// A client for it.
    pub http: reqwest::Client,
}

impl Api {
    pub fn of(d: &Daemon) -> Api {
        Api {
            base: d.ready["http"].as_str().unwrap().into(),
            token: d.ready["http_token"].as_str().unwrap().into(),
            http: agentwire_agents::openai::http_client(Duration::from_secs(10)).unwrap(),
        }
    }

    pub async fn get(&self, path: &str) -> Value {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap();
        serde_json::from_slice(&r.bytes().await.unwrap()).unwrap_or(Value::Null)
    }

    /// The turns asked `prompt`, once there are at least `n` (within 15 s), newest first.
    pub async fn turns_asked(&self, prompt: &str, n: usize) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            let all = self.get("/api/v1/turns?limit=100").await;
            let mine: Vec<Value> = all["turns"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|t| t["prompt"] == prompt)
                .cloned()
                .collect();
            if mine.len() >= n {
                return mine;
            }
            assert!(tokio::time::Instant::now() < deadline, "{all}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The one turn waiting on a question, once there is one.
    pub async fn waiting_turn(&self) -> String {
        let deadline = tokio::time::Instant::now() + ASKED;
        loop {
            let body = self.get("/api/v1/turns?state=waiting").await;
            if let Some(id) = body["turns"][0]["id"].as_str() {
                return id.to_string();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no waiting turn: {body}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Answers turn `turn`'s open question with `choice`, as the hub's buttons do.
    pub async fn answer(&self, turn: &str, choice: &str) {
        let r = self
            .http
            .post(format!("{}/api/v1/turns/{turn}/answer", self.base))
            .bearer_auth(&self.token)
            .header("content-type", "application/json")
            .body(json!({ "choices": [choice] }).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status().as_u16(),
            200,
            "{}",
            text(&r.bytes().await.unwrap())
        );
    }
}

impl Api {
    /// Sends `text` to agent `agent` over A2A (HTTP+JSON, with the operator's token), at once: the task's
    /// id, which is its turn's id without the `a2a:` protocol.
    pub async fn a2a_send(&self, agent: &str, text: &str) -> String {
        let r = self
            .http
            .post(format!("{}/a2a/{agent}/message:send", self.base))
            .bearer_auth(&self.token)
            .header("content-type", "application/json")
            .header("A2A-Version", "1.0")
            .body(
                json!({"message": {"messageId": format!("m-{}", rand_id()), "role": "ROLE_USER",
                                   "parts": [{"text": text}]},
                       "configuration": {"returnImmediately": true}})
                .to_string(),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        let v: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
        v["task"]["id"].as_str().unwrap().to_string()
    }

    /// A2A task `task` of agent `agent` once it is in a final state.
    pub async fn a2a_final(&self, agent: &str, task: &str, within: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let t = self.get(&format!("/a2a/{agent}/tasks/{task}")).await;
            let state = t["status"]["state"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if [
                "TASK_STATE_COMPLETED",
                "TASK_STATE_FAILED",
                "TASK_STATE_CANCELED",
                "TASK_STATE_REJECTED",
            ]
            .contains(&state.as_str())
            {
                return t;
            }
            assert!(tokio::time::Instant::now() < deadline, "not final: {t}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Turn `turn` once its state is `state` (`running`, `waiting`, `ended`, ...).
    pub async fn until_state(&self, turn: &str, state: &str) -> Value {
        let deadline = tokio::time::Instant::now() + ASKED;
        loop {
            let t = self.get(&format!("/api/v1/turns/{turn}")).await;
            if t["turn"]["state"] == state || t["state"] == state {
                return t;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "turn {turn} not {state}: {t}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Cancels turn `turn`, as the hub's button does.
    pub async fn cancel(&self, turn: &str) -> u16 {
        self.http
            .post(format!("{}/api/v1/turns/{turn}/cancel", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }
}

/// A fresh id for a message.
fn rand_id() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
