//! `agentwire turns` and `agentwire watch`: the turn API from the command line. The daemon is found through
//! its data dir: `serve` writes the address it serves HTTP on (`serving.json`) and keeps its token there
//! (`http.token`); `--http URL` names another.

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
    /// Only turns in this state (`queued`, `running`, `waiting`, `ended`).
    #[arg(long)]
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
    let http = agentwire_agents::openai::http_client(REQUEST_TIMEOUT)?;
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
    }
    for t in rows {
        println!("{}", turn_line(&t));
    }
    Ok(ExitCode::SUCCESS)
}

/// A turn in one line: its id, agent, front, state or outcome, time and the prompt's first line.
fn turn_line(t: &Value) -> String {
    let outcome = match t["outcome"]["outcome"].as_str() {
        Some("result") => "answered".to_string(),
        Some(_) => format!("failed {}", t["outcome"]["code"].as_str().unwrap_or("?")),
        None => t["state"].as_str().unwrap_or("?").to_string(),
    };
    let took = match (t["started_ms"].as_u64(), t["ended_ms"].as_u64()) {
        (Some(s), Some(e)) => format!("{:.1}s", e.saturating_sub(s) as f64 / 1000.0),
        _ => "-".into(),
    };
    format!(
        "{}  {}  {}  {}  {}  {}",
        t["id"].as_str().unwrap_or("?"),
        t["agent"].as_str().unwrap_or("?"),
        t["protocol"].as_str().unwrap_or("?"),
        outcome,
        took,
        t["prompt"].as_str().unwrap_or("")
    )
}

/// `agentwire watch [TURN]`: one turn as `ask` shows it (its text on stdout, tools on stderr, the outcome),
/// or every turn's events a line each.
pub(crate) async fn watch(a: WatchArgs, data_dir: PathBuf) -> Result<ExitCode, String> {
    let mut d = find(&a.target, &data_dir)?;
    // A stream stays open as long as turns run.
    d.http = agentwire_agents::openai::http_client(WATCH_MAX)?;
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
                print!("{}", ev["event"]["text"].as_str().unwrap_or(""));
                let _ = std::io::stdout().flush();
            }
            Some("tool_call") => eprintln!(
                "[tool {} start {}]",
                ev["event"]["name"].as_str().unwrap_or("?"),
                ev["event"]["arguments"]
            ),
            Some("tool_result") => eprintln!(
                "[tool {} result {}]",
                ev["event"]["name"].as_str().unwrap_or("?"),
                ev["event"]["output"]
            ),
            _ => {}
        },
        "question" => eprintln!(
            "[question {}] (answer with POST /api/v1/turns/{}/answer)",
            ev["question_id"].as_str().unwrap_or("?"),
            ev["turn"].as_str().unwrap_or("?")
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
                        o["code"].as_str().unwrap_or("?"),
                        o["message"].as_str().unwrap_or("")
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
    let turn = ev["turn"].as_str().unwrap_or("?");
    let what = match ev["type"].as_str().unwrap_or("?") {
        "accepted" => format!(
            "accepted {} {} {}",
            ev["agent"].as_str().unwrap_or("?"),
            ev["protocol"].as_str().unwrap_or("?"),
            ev["prompt"].as_str().unwrap_or("")
        ),
        "event" => match ev["event"]["type"].as_str() {
            Some("text") => format!("text {}", ev["event"]["text"]),
            Some(t) => t.to_string(),
            None => "event".into(),
        },
        "outcome" => match ev["outcome"]["outcome"].as_str() {
            Some("result") => "answered".into(),
            _ => format!("failed {}", ev["outcome"]["code"].as_str().unwrap_or("?")),
        },
        other => other.to_string(),
    };
    println!("{turn} {what}");
}
