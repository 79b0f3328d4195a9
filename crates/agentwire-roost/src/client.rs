//! A controller's connection to the roost daemon (what `agentwire jobs` uses): requests answered in order,
//! events (`row` pushes after `subscribe`) kept aside.

use crate::wire::ErrorCode;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

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

/// A controller connection.
pub struct Controller {
    reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    writer: tokio::net::unix::OwnedWriteHalf,
    next: u64,
    /// Events received while waiting for answers.
    pub events: VecDeque<Value>,
}

impl Controller {
    /// Connects to the daemon's socket.
    pub async fn connect(socket: &Path) -> Result<Controller, ClientError> {
        let s = UnixStream::connect(socket)
            .await
            .map_err(|e| ClientError::Io(format!("{}: {e}", socket.display())))?;
        let (r, w) = s.into_split();
        Ok(Controller {
            reader: BufReader::new(r),
            writer: w,
            next: 0,
            events: VecDeque::new(),
        })
    }

    async fn read(&mut self) -> Result<Value, ClientError> {
        let mut line = String::new();
        match tokio::time::timeout(CALL_TIMEOUT, self.reader.read_line(&mut line)).await {
            Err(_) => Err(ClientError::Timeout(CALL_TIMEOUT)),
            Ok(Err(e)) => Err(ClientError::Io(e.to_string())),
            Ok(Ok(0)) => Err(ClientError::Io("the daemon closed the connection".into())),
            Ok(Ok(_)) => serde_json::from_str(&line).map_err(|e| ClientError::Io(e.to_string())),
        }
    }

    /// Sends `op` with `args` and returns its result.
    pub async fn call(&mut self, op: &str, args: Value) -> Result<Value, ClientError> {
        self.next += 1;
        let id = self.next;
        let mut line = json!({ "id": id, "op": op, "args": args }).to_string();
        line.push('\n');
        self.writer
            .write_all(line.as_bytes())
            .await
            .map_err(|e| ClientError::Io(e.to_string()))?;
        loop {
            let v = self.read().await?;
            if v.get("event").is_some() {
                self.events.push_back(v);
                continue;
            }
            if v["id"] != id {
                continue;
            }
            if v["ok"] == true {
                return Ok(v["result"].clone());
            }
            return Err(ClientError::Refused {
                code: ErrorCode::parse(v["code"].as_str().unwrap_or("")),
                message: v["error"].as_str().unwrap_or("").to_string(),
            });
        }
    }

    /// The next event (after `subscribe`).
    pub async fn next_event(&mut self) -> Result<Value, ClientError> {
        if let Some(e) = self.events.pop_front() {
            return Ok(e);
        }
        loop {
            let v = self.read().await?;
            if v.get("event").is_some() {
                return Ok(v);
            }
        }
    }
}
