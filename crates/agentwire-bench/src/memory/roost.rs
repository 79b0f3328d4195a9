//! Roost jobs held idle: dispatched over the supervisor's socket (each a process that only waits), then
//! each spoken for over its own connection (a `report`, its task delivered and acked) and left connected,
//! as an agent waiting for its next item is.

use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

/// How long one request, event or a job's start may take before the phase fails.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// The profile the jobs run: a process that writes its environment (for its token) and waits. Its wait
/// is bounded so that jobs a failed run leaves behind end by themselves.
pub(crate) const PROFILE: &str = "[roost.profiles.hold]\ncommand = [\"sh\", \"-c\", \"env > env.txt; exec sleep 1200\"]\ntask = \"type\"\nprotocol = true\n";

/// One JSON-lines connection to the supervisor.
pub(crate) struct Line {
    lines: Lines<BufReader<OwnedReadHalf>>,
    w: OwnedWriteHalf,
    next: u64,
}

impl Line {
    pub(crate) async fn connect(socket: &Path) -> Result<Line, String> {
        let s = UnixStream::connect(socket)
            .await
            .map_err(|e| format!("{}: {e}", socket.display()))?;
        let (r, w) = s.into_split();
        Ok(Line {
            lines: BufReader::new(r).lines(),
            w,
            next: 0,
        })
    }

    async fn read(&mut self) -> Result<Value, String> {
        let line = tokio::time::timeout(STEP_TIMEOUT, self.lines.next_line())
            .await
            .map_err(|_| "no line in time".to_string())?
            .map_err(|e| e.to_string())?
            .ok_or("the daemon closed the connection")?;
        serde_json::from_str(&line).map_err(|e| e.to_string())
    }

    /// Sends `op` and returns its result (events met meanwhile are dropped).
    pub(crate) async fn call(&mut self, op: &str, args: Value) -> Result<Value, String> {
        self.next += 1;
        let id = self.next;
        let mut line = json!({ "id": id, "op": op, "args": args }).to_string();
        line.push('\n');
        self.w
            .write_all(line.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        loop {
            let v = self.read().await?;
            if v["id"] == id {
                return match v["ok"] == true {
                    true => Ok(v["result"].clone()),
                    false => Err(format!("{op}: {v}")),
                };
            }
        }
    }

    /// The next `deliver` event.
    async fn deliver(&mut self) -> Result<Value, String> {
        loop {
            let v = self.read().await?;
            if v["event"] == "deliver" {
                return Ok(v);
            }
        }
    }
}

/// Dispatches `count` jobs of [`PROFILE`] and returns their ids.
pub(crate) async fn dispatch(ctl: &mut Line, count: usize) -> Result<Vec<String>, String> {
    let mut ids = Vec::with_capacity(count);
    for n in 0..count {
        let job = ctl
            .call(
                "dispatch",
                json!({ "profile": "hold", "task": "hold", "name": format!("m{n}") }),
            )
            .await?;
        let id = job["id"].as_str().ok_or("a dispatch without an id")?;
        ids.push(id.to_string());
    }
    Ok(ids)
}

/// The job's token, once its process wrote its environment.
async fn token(data: &Path, id: &str) -> Result<String, String> {
    let path = data.join("roost").join("jobs").join(id).join("env.txt");
    let deadline = Instant::now() + STEP_TIMEOUT;
    while Instant::now() < deadline {
        if let Ok(text) = std::fs::read_to_string(&path) {
            if let Some(t) = text
                .lines()
                .find_map(|l| l.strip_prefix("ROOST_JOB_TOKEN="))
            {
                return Ok(t.to_string());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(format!("job {id} did not start"))
}

/// Speaks for each job over a connection of its own: a `report`, the task delivered and acked; the
/// connections are returned open.
pub(crate) async fn connect_all(
    socket: &Path,
    data: &Path,
    ids: &[String],
) -> Result<Vec<Line>, String> {
    let mut held = Vec::with_capacity(ids.len());
    for id in ids {
        let token = token(data, id).await?;
        let mut s = Line::connect(socket).await?;
        let report = json!({ "state": "working", "summary": "waiting" });
        s.call(
            "report",
            json!({ "id": id, "token": token, "report": report }),
        )
        .await?;
        let task = s.deliver().await?;
        s.call(
            "ack",
            json!({ "id": id, "token": token, "seq": task["seq"] }),
        )
        .await?;
        held.push(s);
    }
    Ok(held)
}

/// Removes the jobs (their processes are stopped); errors are ignored: this is the clean-up.
pub(crate) async fn remove(ctl: &mut Line, ids: &[String]) {
    for id in ids {
        let _ = ctl.call("rm", json!({ "id": id })).await;
    }
}
