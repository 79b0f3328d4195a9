//! `agentwire jobs follow <job>`: the job's row each time it changes (its state, summary, question and
//! choices) and the new lines of its output, until it ends; the exit code says how it ended (5: still
//! running after a day of following).

use super::table;
use agentwire_roost::client::Controller;
use serde_json::{json, Value};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// How often the job's output file is read for new bytes.
const OUTPUT_POLL: Duration = Duration::from_millis(200);
/// The longest `follow` stays: a day; run it again for more.
const FOLLOW_MAX: Duration = Duration::from_secs(24 * 3600);
/// Exit code when the followed job failed.
const EXIT_FAILED: u8 = 2;
/// Exit code when the followed job was stopped, exited without saying it was done, or was removed.
const EXIT_STOPPED: u8 = 3;
/// Exit code when `follow` stopped following after [`FOLLOW_MAX`] with the job still running.
const EXIT_STILL_RUNNING: u8 = 5;
/// Exit code after Ctrl-C (the job goes on).
use crate::ask::EXIT_INTERRUPTED;

/// Where the supervisor keeps a job's output, under its jobs' directory (`about`'s `jobs`).
pub(crate) fn output_log(jobs: &Path, id: &str) -> PathBuf {
    jobs.join(id)
        .join(agentwire_roost::daemon::process::OUTPUT_FILE)
}

/// How a job's state ends `follow`, if it does.
fn ended(row: &Value) -> Option<u8> {
    if row["removed"] == true {
        return Some(EXIT_STOPPED);
    }
    match row["state"].as_str()? {
        "done" => Some(0),
        "failed" => Some(EXIT_FAILED),
        "stopped" | "exited" => Some(EXIT_STOPPED),
        _ => None,
    }
}

/// What a person reads of a row: `[state] summary`, and a question with its numbered choices.
fn said(row: &Value) -> String {
    let state = row["state"].as_str().unwrap_or("removed");
    let detail = row["error"]
        .as_str()
        .or(row["summary"].as_str())
        .or(row["status"].as_str())
        .unwrap_or("");
    let mut out = format!("[{state}] {detail}").trim_end().to_string() + "\n";
    if state == "blocked" {
        if let Some((q, choices)) = table::question(row) {
            out.push_str(&format!("asks: {q}\n"));
            for (i, c) in choices.iter().enumerate() {
                out.push_str(&format!("  {}. {c}\n", i + 1));
            }
        }
    }
    out
}

/// Follows `row`'s job on `c` until it ends.
pub(crate) async fn follow(
    mut c: Controller,
    row: Value,
    jobs: &Path,
    json: bool,
) -> Result<ExitCode, String> {
    let id = row["id"].as_str().unwrap_or_default().to_string();
    let subscribed = c
        .call("subscribe", json!({}))
        .await
        .map_err(|e| e.to_string())?;
    let mut current = subscribed["rows"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["id"] == id.as_str()).cloned())
        .unwrap_or(row);
    let mut shown = String::new();
    let mut show = |row: &Value| {
        let text = match json {
            true => format!("{row}\n"),
            false => said(row),
        };
        if text != shown {
            print!("{text}");
            let _ = std::io::stdout().flush();
            shown = text;
        }
    };
    show(&current);
    let mut output = Output::new(output_log(jobs, &id));
    let deadline = tokio::time::Instant::now() + FOLLOW_MAX;
    let mut poll = tokio::time::interval(OUTPUT_POLL);
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|e| format!("cannot watch for Ctrl-C: {e}"))?;
    loop {
        if let Some(code) = ended(&current) {
            output.drain(json);
            return Ok(ExitCode::from(code));
        }
        tokio::select! {
            event = c.next_event() => {
                let event = event.map_err(|e| format!("the supervisor: {e}"))?;
                if event["event"] == "row" && event["row"]["id"] == id.as_str() {
                    current = event["row"].clone();
                    output.drain(json);
                    show(&current);
                }
            }
            _ = poll.tick() => output.drain(json),
            _ = interrupt.recv() => return Ok(ExitCode::from(EXIT_INTERRUPTED)),
            _ = tokio::time::sleep_until(deadline) => return Ok(ExitCode::from(EXIT_STILL_RUNNING)),
        }
    }
}

/// The job's output file, read from where the last read stopped (from its start: `follow` shows what the
/// job said so far).
struct Output {
    path: PathBuf,
    at: u64,
}

impl Output {
    fn new(path: PathBuf) -> Self {
        Output { path, at: 0 }
    }

    /// Prints what was added since the last read (on stderr under `--json`, so stdout stays rows).
    fn drain(&mut self, json: bool) {
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return;
        };
        if f.seek(SeekFrom::Start(self.at)).is_err() {
            return;
        }
        let mut added = Vec::new();
        if let Ok(n) = f.read_to_end(&mut added) {
            self.at += n as u64;
        }
        if added.is_empty() {
            return;
        }
        let _ = match json {
            true => std::io::stderr().write_all(&added),
            // The reader went away (`jobs follow JOB | head`): the command ends, quietly.
            false => crate::closed_pipe::quiet_when_closed(
                std::io::stdout()
                    .write_all(&added)
                    .and_then(|()| std::io::stdout().flush()),
            ),
        };
    }
}

/// How often `events --follow` asks for new events: the feed is for people, a second is live enough.
const EVENTS_POLL: Duration = Duration::from_secs(1);

/// `events --follow`: the feed (after `after`, else its newest `limit`), then each new event as it comes,
/// until Ctrl-C (exit 130).
pub(crate) async fn events(
    mut c: Controller,
    after: Option<u64>,
    limit: Option<u64>,
    job: Option<Value>,
    human: bool,
) -> Result<ExitCode, String> {
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|e| format!("cannot watch for Ctrl-C: {e}"))?;
    let mut cursor = after;
    let mut header = true;
    let mut poll = tokio::time::interval(EVENTS_POLL);
    loop {
        tokio::select! {
            _ = poll.tick() => {}
            _ = interrupt.recv() => return Ok(ExitCode::from(EXIT_INTERRUPTED)),
        }
        let args = match cursor {
            Some(a) => json!({ "after": a, "id": job }),
            None => json!({ "limit": limit, "id": job }),
        };
        let r = c.call("events", args).await.map_err(|e| e.to_string())?;
        let list = r["events"].as_array().cloned().unwrap_or_default();
        if let Some(last) = list.last().and_then(|e| e["seq"].as_u64()) {
            cursor = Some(last);
        } else if cursor.is_none() {
            cursor = Some(r["cursor"].as_u64().unwrap_or(0));
        }
        if list.is_empty() {
            continue;
        }
        match human {
            true => {
                let rows = c.call("rows", json!({})).await.map_err(|e| e.to_string())?;
                let rows = rows["rows"].as_array().cloned().unwrap_or_default();
                let names = |id: &str| {
                    rows.iter()
                        .find(|r| r["id"] == id)
                        .and_then(|r| r["name"].as_str())
                        .unwrap_or(id)
                        .to_string()
                };
                let table = table::events(&list, &names);
                let skip = if header { 0 } else { 1 };
                for line in table.lines().skip(skip) {
                    println!("{line}");
                }
                header = false;
            }
            false => {
                for e in &list {
                    println!("{e}");
                }
            }
        }
        let _ = std::io::stdout().flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_ends_follow_by_its_state() {
        assert_eq!(ended(&json!({"state": "done"})), Some(0));
        assert_eq!(ended(&json!({"state": "failed"})), Some(EXIT_FAILED));
        assert_eq!(ended(&json!({"state": "stopped"})), Some(EXIT_STOPPED));
        assert_eq!(
            ended(&json!({"id": "j", "removed": true})),
            Some(EXIT_STOPPED)
        );
        assert_eq!(ended(&json!({"state": "blocked"})), None);
        let text = said(&json!({"state": "blocked", "summary": "at the fork",
                                "question": "Which way?", "choices": ["left", "right"]}));
        assert_eq!(
            text,
            "[blocked] at the fork\nasks: Which way?\n  1. left\n  2. right\n"
        );
    }
}
