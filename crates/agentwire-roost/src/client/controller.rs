//! A controller's connection to the roost daemon (what `agentwire jobs` uses): requests answered in order,
//! events (`row` pushes after `subscribe`) kept aside.

use crate::proto::wire::ErrorCode;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};

/// How long a controller waits for an answer: the daemon answers at once, a durable write included.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket could not be reached or the connection broke.
    #[error("roost socket {0}")]
    Io(String),
    /// The daemon refused the request.
    #[error("{message} ({})", code.as_str())]
    Refused {
        /// The code.
        code: ErrorCode,
        /// What the daemon said.
        message: String,
    },
    /// No answer in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// A controller connection. A reader task routes answers to their calls and events to a queue, so every
/// wait here is cancel-safe.
pub struct Controller {
    writer: tokio::net::unix::OwnedWriteHalf,
    next: u64,
    answers: Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>,
    events: mpsc::UnboundedReceiver<Value>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Controller {
    /// Connects to the daemon's socket.
    pub async fn connect(socket: &Path) -> Result<Controller, ClientError> {
        let s = UnixStream::connect(socket)
            .await
            .map_err(|e| ClientError::Io(format!("{}: {e}", socket.display())))?;
        let (r, w) = s.into_split();
        let answers: Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>> = Arc::default();
        let (tx, events) = mpsc::unbounded_channel();
        let routes = answers.clone();
        let reader = tokio::spawn(async move {
            let mut lines = BufReader::new(r).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(v) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if v.get("event").is_some() {
                    let _ = tx.send(v);
                } else if let Some(id) = v["id"].as_u64() {
                    if let Some(a) = routes.lock().unwrap_or_else(|p| p.into_inner()).remove(&id) {
                        let _ = a.send(v);
                    }
                }
            }
            // The connection is gone: pending calls see their senders dropped.
            routes.lock().unwrap_or_else(|p| p.into_inner()).clear();
        });
        Ok(Controller {
            writer: w,
            next: 0,
            answers,
            events,
            reader,
        })
    }

    /// Sends `op` with `args` and returns its result.
    pub async fn call(&mut self, op: &str, args: Value) -> Result<Value, ClientError> {
        self.next += 1;
        let id = self.next;
        let (tx, rx) = oneshot::channel();
        self.answers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, tx);
        let mut line = json!({ "id": id, "op": op, "args": args }).to_string();
        line.push('\n');
        self.writer
            .write_all(line.as_bytes())
            .await
            .map_err(|e| ClientError::Io(e.to_string()))?;
        let v = match tokio::time::timeout(CALL_TIMEOUT, rx).await {
            Err(_) => return Err(ClientError::Timeout(CALL_TIMEOUT)),
            Ok(Err(_)) => return Err(ClientError::Io("the daemon closed the connection".into())),
            Ok(Ok(v)) => v,
        };
        if v["ok"] == true {
            return Ok(v["result"].clone());
        }
        Err(ClientError::Refused {
            code: ErrorCode::parse(v["code"].as_str().unwrap_or("")),
            message: v["error"].as_str().unwrap_or("").to_string(),
        })
    }

    /// The next event (after `subscribe`). Cancel-safe.
    pub async fn next_event(&mut self) -> Result<Value, ClientError> {
        self.events
            .recv()
            .await
            .ok_or_else(|| ClientError::Io("the daemon closed the connection".into()))
    }
}
