//! `agentwire turns` and `agentwire watch`: the turn API from the command line. The daemon is found through
//! its data dir: `serve` writes the address it serves HTTP on (`serving.json`) and keeps its token there
//! (`http.token`); `--http URL` names another.
//!
//! A turn's state reads as the API and the hub page say it: `queued`, `running`, `waiting` (for an
//! answer), then `done`, `failed` or `cancelled`. What the turns carry from elsewhere (a peer's prompt, an
//! agent's name, streamed text) is printed through [`printable`], so it cannot drive the terminal.

use agentwire_core::display::{printable, printable_line};
use clap::Args;
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// How long a request to the daemon may take: it answers from memory.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Exit code when the watched turn ended in a failure.
const EXIT_FAILED: u8 = 2;
/// The widest a prompt is shown in the `turns` table (the API's `prompt` is its first line, up to 200
/// bytes; `--json` has it whole).
const MAX_PROMPT_CHARS: usize = 60;
/// What `--state` takes: where a turn is, or how an ended one ended (the turn API's `?state=`).
const STATES: [&str; 7] = [
    "queued",
    "running",
    "waiting",
    "ended",
    "done",
    "failed",
    "cancelled",
];
/// The longest a `watch` stays connected: a day of following the daemon; run it again for more.
const WATCH_MAX: Duration = Duration::from_secs(24 * 3600);

/// Where the daemon's HTTP server is, how to reach it.
#[derive(Debug, Args)]
pub(crate) struct HttpTarget {
    /// The daemon's HTTP server (default: what `serve` on the data dir wrote, else http://127.0.0.1:7780).
    #[arg(long)]
    http: Option<String>,
}

/// `agentwire turns`.
#[derive(Debug, Args)]
pub(crate) struct TurnsArgs {
    #[command(flatten)]
    target: HttpTarget,
    /// Only this agent's turns.
    #[arg(long)]
    agent: Option<String>,
    /// Only this front's (`nipxx`, `fisk`, `tasks`, `roost`).
    #[arg(long)]
    protocol: Option<String>,
    /// Only turns in this state: `queued`, `running`, `waiting` (for an answer), `ended`, or ended as
    /// `done`, `failed` or `cancelled`.
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(STATES))]
    state: Option<String>,
    /// At most this many (newest first).
    #[arg(long, default_value_t = 20)]
    limit: usize,
    /// Print the API's JSON.
    #[arg(long)]
    json: bool,
}

/// `agentwire watch`.
#[derive(Debug, Args)]
pub(crate) struct WatchArgs {
    #[command(flatten)]
    target: HttpTarget,
    /// The turn to follow (its id, as `turns` lists it); without it, every turn.
    turn: Option<String>,
}

/// The daemon's address and token.
pub(crate) struct Daemon {
    pub(crate) base: String,
    pub(crate) token: String,
    http: reqwest::Client,
    /// Found through the data dir's `serving.json` (not `--http`).
    found_in: Option<PathBuf>,
}

pub(crate) fn find(target: &HttpTarget, data_dir: &Path) -> Result<Daemon, String> {
    let (base, found_in) = match &target.http {
        Some(u) => (u.trim_end_matches('/').to_string(), None),
        None => {
            let serving = crate::serving::Serving::find(data_dir)
                .map_err(|none| format!("{none} (or name one with --http)"))?;
            match serving.http() {
                Some(u) => (u.to_string(), Some(serving.data_dir().to_path_buf())),
                None => {
                    return Err(format!(
                        "the agentwire serving data dir {} runs no HTTP server ([http] listen = \"off\")",
                        data_dir.display()
                    ))
                }
            }
        }
    };
    let token_file = data_dir.join(crate::http_front::TOKEN_FILE);
    let token = std::fs::read_to_string(&token_file)
        .map_err(|e| format!("the token {}: {e}", token_file.display()))?
        .trim()
        .to_string();
    let http = agentwire_agents::openai::http_client(REQUEST_TIMEOUT).map_err(|e| e.to_string())?;
    Ok(Daemon {
        base,
        token,
        http,
        found_in,
    })
}

impl Daemon {
    pub(crate) async fn get(&self, path: &str) -> Result<reqwest::Response, String> {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| match (&self.found_in, e.is_connect()) {
                (Some(dir), true) => format!(
                    "no agentwire is serving data dir {} ({} does not answer: it stopped without cleaning up); start it with `agentwire serve`",
                    dir.display(),
                    self.base
                ),
                _ => format!("{}: {e}", self.base),
            })?;
        if !resp.status().is_success() {
            let status = resp.status();
            let body = resp.bytes().await.unwrap_or_default();
            let why: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            return Err(format!(
                "{status}: {}",
                why["error"].as_str().unwrap_or("the daemon refused")
            ));
        }
        Ok(resp)
    }
}

/// `agentwire turns`: the daemon's recent turns.
pub(crate) async fn turns(a: TurnsArgs, data_dir: PathBuf) -> Result<ExitCode, String> {
    let d = find(&a.target, &data_dir)?;
    let mut query = vec![format!("limit={}", a.limit)];
    for (k, v) in [
        ("agent", &a.agent),
        ("protocol", &a.protocol),
        ("state", &a.state),
    ] {
        if let Some(v) = v {
            query.push(format!("{k}={v}"));
        }
    }
    let resp = d.get(&format!("/api/v1/turns?{}", query.join("&"))).await?;
    let body: Value = serde_json::from_slice(&resp.bytes().await.map_err(|e| e.to_string())?)
        .map_err(|e| format!("the daemon's answer: {e}"))?;
    if a.json {
        println!("{body}");
        return Ok(ExitCode::SUCCESS);
    }
    let rows = body["turns"].as_array().cloned().unwrap_or_default();
    if rows.is_empty() {
        eprintln!("no turns");
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", table(&rows, agentwire_core::now_ms()));
    Ok(ExitCode::SUCCESS)
}

/// The `turns` table: a header, then a turn a line, newest first.
fn table(rows: &[Value], now_ms: u64) -> String {
    let header = [
        "STARTED (UTC)",
        "ID",
        "AGENT",
        "FRONT",
        "BY",
        "STATE",
        "TOOK",
        "PROMPT",
    ];
    let text = |t: &Value, key: &str| printable_line(t[key].as_str().unwrap_or("?")).into_owned();
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|t| {
            vec![
                t["started_ms"]
                    .as_u64()
                    .map_or("-".into(), |ms| utc(ms / 1000)),
                text(t, "id"),
                text(t, "agent"),
                text(t, "protocol"),
                requester(t),
                state_of(t),
                took(t, now_ms),
                crate::tabular::cell(
                    &printable_line(t["prompt"].as_str().unwrap_or("")),
                    MAX_PROMPT_CHARS,
                ),
            ]
        })
        .collect();
    crate::tabular::columns(&header, &rows)
}

/// Who asked for a turn, short: a caller (`caller:alice`), the `operator`, a NATS identity as it is, and a
/// key (64 hex digits, a NIP-XX requester) as its first 8 digits; `-` when the daemon does not say.
fn requester(t: &Value) -> String {
    let r = printable_line(t["requester"].as_str().unwrap_or("")).into_owned();
    match r.len() {
        0 => "-".into(),
        64 if r.bytes().all(|b| b.is_ascii_hexdigit()) => format!("{}…", &r[..8]),
        _ => crate::tabular::cell(&r, MAX_REQUESTER_CHARS),
    }
}

/// The widest a requester is shown in the table.
const MAX_REQUESTER_CHARS: usize = 24;

/// Where a turn is, or how it ended (a failure with its code): the API's `ended_as`, read from the outcome
/// when a daemon from before it answers.
fn state_of(t: &Value) -> String {
    let o = &t["outcome"];
    let ended = t["ended_as"].as_str().or(match o["outcome"].as_str() {
        Some("result") => Some("done"),
        Some(_) if o["code"] == "cancelled" => Some("cancelled"),
        Some(_) => Some("failed"),
        None => None,
    });
    match ended {
        Some("failed") => format!(
            "failed ({})",
            printable_line(o["code"].as_str().unwrap_or("?"))
        ),
        Some(end) => printable_line(end).into_owned(),
        None => printable_line(t["state"].as_str().unwrap_or("?")).into_owned(),
    }
}

/// How long a turn took, or has run so far (`…`): to the second for a turn of an earlier run, whose times
/// are the journal's.
fn took(t: &Value, now_ms: u64) -> String {
    let Some(started) = t["started_ms"].as_u64() else {
        return "-".into();
    };
    match t["ended_ms"].as_u64() {
        Some(ended) => duration(ended.saturating_sub(started)),
        None if t["state"] == "ended" => "-".into(),
        None => format!("{}…", duration(now_ms.saturating_sub(started))),
    }
}

/// `ms` short: `0.4s`, `12.0s`, `3m05s`, `2h07m`.
fn duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{:.1}s", ms as f64 / 1000.0),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s / 60 % 60),
    }
}

/// Unix seconds as UTC `YYYY-MM-DD HH:MM:SS` (the number itself past chrono's last instant).
fn utc(unix: u64) -> String {
    i64::try_from(unix)
        .ok()
        .and_then(|s| chrono::DateTime::<chrono::Utc>::from_timestamp(s, 0))
        .map_or_else(
            || unix.to_string(),
            |at| at.format("%Y-%m-%d %H:%M:%S").to_string(),
        )
}

/// `agentwire watch [TURN]`: one turn as `ask` shows it (its text on stdout, tools on stderr, the outcome),
/// or every turn's events a line each.
pub(crate) async fn watch(a: WatchArgs, data_dir: PathBuf) -> Result<ExitCode, String> {
    let mut d = find(&a.target, &data_dir)?;
    // A stream stays open as long as turns run.
    d.http = agentwire_agents::openai::http_client(WATCH_MAX).map_err(|e| e.to_string())?;
    let path = match &a.turn {
        Some(t) => format!("/api/v1/events?turn={t}"),
        None => "/api/v1/events".to_string(),
    };
    let mut resp = d.get(&path).await?;
    let mut buf = String::new();
    let one = a.turn.is_some();
    loop {
        while let Some(at) = buf.find("\n\n") {
            let block: String = buf.drain(..at + 2).collect();
            let data: String = block
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            if data.is_empty() {
                continue;
            }
            let ev: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
            if one {
                if let Some(code) = show_one(&ev) {
                    return Ok(code);
                }
            } else {
                show_all(&ev);
            }
        }
        match resp.chunk().await.map_err(|e| e.to_string())? {
            Some(chunk) => buf.push_str(&String::from_utf8_lossy(&chunk)),
            None => return Ok(ExitCode::SUCCESS),
        }
    }
}

/// Shows one event of the followed turn as `ask` would; the exit code once the turn has ended.
fn show_one(ev: &Value) -> Option<ExitCode> {
    match ev["type"].as_str()? {
        "event" => match ev["event"]["type"].as_str() {
            Some("text") => {
                print!("{}", printable(ev["event"]["text"].as_str().unwrap_or("")));
                let _ = std::io::stdout().flush();
            }
            // As `ask` shows a tool, whatever front the turn came from.
            Some("tool_call") => eprintln!(
                "{}",
                printable_line(&agentwire_core::tool_start_line(
                    ev["event"]["name"].as_str().unwrap_or("?"),
                    &ev["event"]["arguments"]
                ))
            ),
            Some("tool_result") => eprintln!(
                "{}",
                printable_line(&agentwire_core::tool_result_line(
                    ev["event"]["name"].as_str().unwrap_or("?"),
                    ev["event"]["success"] != false,
                    &ev["event"]["output"]
                ))
            ),
            _ => {}
        },
        "question" => eprintln!(
            "[question {}] (answer with POST /api/v1/turns/{}/answer)",
            printable_line(ev["question_id"].as_str().unwrap_or("?")),
            printable_line(ev["turn"].as_str().unwrap_or("?"))
        ),
        "missed" => eprintln!("[missed {} events]", ev["missed"]),
        "outcome" => {
            println!();
            let o = &ev["outcome"];
            return Some(match o["outcome"].as_str() {
                Some("result") => ExitCode::SUCCESS,
                _ => {
                    eprintln!(
                        "error {}: {}",
                        printable_line(o["code"].as_str().unwrap_or("?")),
                        printable(o["message"].as_str().unwrap_or(""))
                    );
                    ExitCode::from(EXIT_FAILED)
                }
            });
        }
        _ => {}
    }
    None
}

/// Shows one event of any turn, a line each.
fn show_all(ev: &Value) {
    println!("{}", all_line(ev));
}

/// One event of any turn in a line: the turn, then what happened (an outcome in the words `turns` shows).
fn all_line(ev: &Value) -> String {
    let s = |v: &Value| v.as_str().unwrap_or("?").to_string();
    let turn = s(&ev["turn"]);
    let what = match ev["type"].as_str().unwrap_or("?") {
        "accepted" => format!(
            "accepted {} {} {}",
            s(&ev["agent"]),
            s(&ev["protocol"]),
            ev["prompt"].as_str().unwrap_or("")
        ),
        "event" => match ev["event"]["type"].as_str() {
            Some("text") => format!("text {}", ev["event"]["text"]),
            Some(t) => t.to_string(),
            None => "event".into(),
        },
        "outcome" => {
            let o = &ev["outcome"];
            match o["outcome"].as_str() {
                Some("result") => "done".into(),
                _ if o["code"] == "cancelled" => "cancelled".into(),
                _ => format!("failed ({})", s(&o["code"])),
            }
        }
        other => other.to_string(),
    };
    printable_line(&format!("{turn} {what}")).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn turn(state: &str, outcome: Value, ended_ms: Option<u64>) -> Value {
        json!({"id": "nipxx:ab", "agent": "demo", "protocol": "nipxx", "prompt": "quick 1", "state": state,
               "requester": "ab".repeat(32),
               "outcome": outcome, "started_ms": 1_700_000_000_000u64, "ended_ms": ended_ms})
    }

    #[test]
    fn the_table_has_a_header_start_times_and_one_vocabulary() {
        let failed = json!({"outcome": "failure", "code": "tool_error", "message": "m"});
        let rows = [
            turn("running", Value::Null, None),
            turn(
                "ended",
                json!({"outcome": "result", "text": "1"}),
                Some(1_700_000_002_500),
            ),
            turn(
                "ended",
                json!({"outcome": "failure", "code": "cancelled"}),
                Some(1_700_000_000_400),
            ),
            turn("ended", failed, Some(1_700_000_185_000)),
        ];
        let out = table(&rows, 1_700_000_012_000);
        let lines: Vec<&str> = out.lines().collect();
        let header: Vec<&str> = lines[0]
            .split("  ")
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .collect();
        assert_eq!(
            header,
            [
                "STARTED (UTC)",
                "ID",
                "AGENT",
                "FRONT",
                "BY",
                "STATE",
                "TOOK",
                "PROMPT"
            ]
        );
        assert!(
            lines[1].starts_with("2023-11-14 22:13:20  nipxx:ab  demo   nipxx  abababab…"),
            "{out}"
        );
        assert!(
            lines[1].contains("running") && lines[1].contains("12.0s…"),
            "{out}"
        );
        assert!(
            lines[2].contains(" done ") && lines[2].contains("2.5s"),
            "{out}"
        );
        assert!(
            lines[3].contains(" cancelled ") && lines[3].contains("0.4s"),
            "{out}"
        );
        assert!(
            lines[4].contains("failed (tool_error)") && lines[4].contains("3m05s"),
            "{out}"
        );
        assert!(!out.contains("answered"), "{out}");
    }

    #[test]
    fn a_peers_escapes_never_reach_the_terminal() {
        let mut t = turn(
            "ended",
            json!({"outcome": "result"}),
            Some(1_700_000_001_000),
        );
        t["prompt"] = json!("\u{1b}]0;PWNED\u{7}\u{1b}[2Jhi \u{202e}txt");
        t["agent"] = json!("ev\u{9b}il");
        let out = table(&[t], 0);
        let unsafe_char = |c: char| agentwire_core::display::is_unprintable(c) && c != '\n';
        assert!(!out.chars().any(unsafe_char), "{out:?}");
        assert!(out.contains("]0;PWNED  [2Jhi  txt"), "{out:?}");
        let ev = json!({"type": "accepted", "turn": "t\u{1b}[2J", "agent": "a", "protocol": "p",
                        "prompt": "x\u{7}\u{202e}y"});
        assert_eq!(all_line(&ev), "t [2J accepted a p x  y");
        let outcome = json!({"type": "outcome", "turn": "t", "outcome": {"outcome": "result"}});
        assert_eq!(all_line(&outcome), "t done");
    }

    #[test]
    fn times_read_as_the_civil_calendar() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13:20");
        assert_eq!(utc(4_102_444_799), "2099-12-31 23:59:59");
        assert_eq!(duration(400), "0.4s");
        assert_eq!(duration(7_500_000), "2h05m");
    }
}
