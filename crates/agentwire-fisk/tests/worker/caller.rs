//! A fisk-ai caller for tests, on a real NATS connection: sends requests, collects whole reply sets.

#![allow(dead_code, unreachable_pub)]

use agentwire_fisk::wire::nats;
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long a test waits for a reply set to end.
pub const SET_TIMEOUT: Duration = Duration::from_secs(15);

/// One message of a reply set.
#[derive(Debug, Clone)]
pub struct Msg {
    pub json: Value,
    pub last: bool,
    /// A service error instead of a message: (code, text).
    pub service_error: Option<(String, String)>,
}

impl Msg {
    pub fn protocol(&self) -> &str {
        self.json["protocol"].as_str().unwrap_or("")
    }
}

/// A reply set being received.
pub struct Pending {
    sub: async_nats::Subscriber,
    pub msgs: Vec<Msg>,
    done: bool,
}

impl Pending {
    async fn next(&mut self, deadline: tokio::time::Instant) -> Option<Msg> {
        if self.done {
            return None;
        }
        let m = tokio::time::timeout_at(deadline, self.sub.next())
            .await
            .ok()??;
        let headers = m.headers.clone().unwrap_or_default();
        let msg = if let Some(err) = headers.get(nats::HEADER_SERVICE_ERROR) {
            let code = headers
                .get(nats::HEADER_SERVICE_ERROR_CODE)
                .map(|c| c.to_string())
                .unwrap_or_default();
            Msg {
                json: Value::Null,
                last: true,
                service_error: Some((code, err.to_string())),
            }
        } else if m.status.is_some() && m.payload.is_empty() {
            Msg {
                json: Value::Null,
                last: true,
                service_error: Some(("503".into(), "no responders".into())),
            }
        } else {
            Msg {
                json: serde_json::from_slice(&m.payload).expect("a JSON message"),
                last: headers.get(nats::HEADER_STREAM_FINAL).is_some(),
                service_error: None,
            }
        };
        self.done = msg.last;
        self.msgs.push(msg.clone());
        Some(msg)
    }

    /// Reads until a message matches `pred`, and returns it.
    pub async fn until(&mut self, pred: impl Fn(&Msg) -> bool) -> Msg {
        if let Some(m) = self.msgs.iter().find(|m| pred(m)) {
            return m.clone();
        }
        let deadline = tokio::time::Instant::now() + SET_TIMEOUT;
        while let Some(m) = self.next(deadline).await {
            if pred(&m) {
                return m;
            }
        }
        panic!("no such message in {:#?}", self.msgs);
    }

    /// Reads the rest of the set.
    pub async fn finish(mut self) -> Vec<Msg> {
        let deadline = tokio::time::Instant::now() + SET_TIMEOUT;
        while self.next(deadline).await.is_some() {}
        self.msgs
    }
}

pub struct Caller {
    pub client: async_nats::Client,
    pub identity: String,
    next: AtomicU64,
}

static REQUESTS: AtomicU64 = AtomicU64::new(0);

/// A fresh `request` tag.
pub fn tag(prefix: &str) -> String {
    format!("{prefix}{}", REQUESTS.fetch_add(1, Ordering::Relaxed))
}

pub fn header(protocol: &str, request: &str) -> Value {
    json!({
        "protocol": format!("io.choria.fisk-ai.v1.{protocol}"),
        "id": format!("m{}", REQUESTS.fetch_add(1, Ordering::Relaxed)),
        "request": request,
        "conversation": "conv",
        "sequence": 0,
        "time": "2026-11-30T00:00:00Z",
        "sender": {"name": "tester"},
    })
}

pub fn with(mut base: Value, extra: Value) -> Value {
    if let (Some(b), Some(e)) = (base.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    base
}

impl Caller {
    pub async fn connect(url: &str, identity: &str) -> Caller {
        Caller {
            client: async_nats::connect(url).await.expect("nats reachable"),
            identity: identity.to_string(),
            next: AtomicU64::new(0),
        }
    }

    /// Sends `body` to `subject`; the reply set is read from the returned [`Pending`].
    pub async fn open(&self, subject: String, body: &Value) -> Pending {
        let inbox = self.client.new_inbox();
        let sub = self.client.subscribe(inbox.clone()).await.unwrap();
        self.client
            .publish_with_reply(subject, inbox, body.to_string().into())
            .await
            .unwrap();
        self.client.flush().await.unwrap();
        Pending {
            sub,
            msgs: Vec::new(),
            done: false,
        }
    }

    /// Sends `body` to `subject` and collects the reply set: until the message with the final header, a
    /// service error, or the timeout.
    pub async fn send(&self, subject: String, body: &Value) -> Vec<Msg> {
        self.open(subject, body).await.finish().await
    }

    /// Opens a prompt's reply set.
    pub async fn open_prompt(&self, request: &str, prompt: &str) -> Pending {
        self.open_prompt_with(request, prompt, json!({})).await
    }

    /// Opens the reply set of a prompt with `extra` fields (a conversation token, say).
    pub async fn open_prompt_with(&self, request: &str, prompt: &str, extra: Value) -> Pending {
        let body = with(
            with(
                header("request.prompt", request),
                json!({ "prompt": prompt }),
            ),
            extra,
        );
        self.open(nats::task_subject(&self.identity), &body).await
    }

    pub async fn task(&self, body: &Value) -> Vec<Msg> {
        self.send(nats::task_subject(&self.identity), body).await
    }

    pub async fn prompt(&self, request: &str, prompt: &str, extra: Value) -> Vec<Msg> {
        self.open_prompt_with(request, prompt, extra)
            .await
            .finish()
            .await
    }

    pub async fn cancel(&self, request: &str) -> Vec<Msg> {
        self.send(
            nats::cancel_subject(&self.identity, request),
            &header("cancel", request),
        )
        .await
    }

    pub async fn elicit(
        &self,
        request: &str,
        protocol: &str,
        question: &str,
        extra: Value,
    ) -> Vec<Msg> {
        let body = with(
            with(
                header(protocol, request),
                json!({ "question_id": question }),
            ),
            extra,
        );
        self.send(nats::elicit_subject(&self.identity, request), &body)
            .await
    }
}

/// Checks the reply-set invariants every set must keep, and returns the terminal message.
pub fn check_set(set: &[Msg], request: &str) -> Msg {
    assert!(!set.is_empty(), "an empty reply set");
    assert_eq!(
        set[0].protocol(),
        "io.choria.fisk-ai.v1.ack",
        "the ack comes first: {set:#?}"
    );
    for (i, m) in set.iter().enumerate() {
        assert!(m.service_error.is_none(), "{set:#?}");
        assert_eq!(
            m.json["sequence"],
            (i + 1) as u64,
            "sequence from 1 without gaps: {set:#?}"
        );
        assert_eq!(m.json["request"], request);
        assert_eq!(
            m.last,
            i + 1 == set.len(),
            "only the last message is final: {set:#?}"
        );
    }
    set.last().unwrap().clone()
}

/// The `conversation_token` of a set's ack.
pub fn token(set: &[Msg]) -> String {
    set[0].json["conversation_token"]
        .as_str()
        .expect("an accepting ack carries the token")
        .to_string()
}

/// The error code of a set's terminal message.
pub fn code(set: &[Msg]) -> String {
    let last = set.last().expect("a message");
    assert_eq!(last.protocol(), "io.choria.fisk-ai.v1.error", "{set:#?}");
    last.json["code"].as_str().unwrap().to_string()
}
