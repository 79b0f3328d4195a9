//! `agentwire jobs`: the roost supervisor's controller on the command line (dispatch, ls, reply, stop, rm,
//! respawn, events).

use agentwire_roost::client::Controller;
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `jobs` flags.
#[derive(Debug, Args)]
pub(crate) struct JobsArgs {
    /// The roost supervisor's socket (default: the one of the `serve` running on the data dir).
    #[arg(long = "roost-socket", alias = "socket", global = true)]
    socket: Option<PathBuf>,
    #[command(subcommand)]
    command: JobsCommand,
}

#[derive(Debug, Subcommand)]
enum JobsCommand {
    /// Start a job from a profile.
    #[command(
        after_help = "Example:\n  agentwire jobs dispatch coder \"fix the failing test\" --name fix-1"
    )]
    Dispatch {
        /// The profile.
        profile: String,
        /// The first task.
        task: Option<String>,
        /// The job's name.
        #[arg(long)]
        name: Option<String>,
        /// A request id, so a resend is taken once.
        #[arg(long)]
        request_id: Option<String>,
    },
    /// The jobs' rows.
    #[command(after_help = "Example:\n  agentwire jobs ls")]
    Ls {
        /// As JSON.
        #[arg(long)]
        json: bool,
    },
    /// Reply to a job.
    #[command(after_help = "Example:\n  agentwire jobs reply fix-1 \"yes, go on\"")]
    Reply {
        /// The job.
        id: String,
        /// The reply (`/stop` stops the job).
        text: String,
        /// `steer` (join the work under way) or `followUp`.
        #[arg(long)]
        mode: Option<String>,
        /// A request id, so a resend is taken once.
        #[arg(long)]
        request_id: Option<String>,
    },
    /// Stop a job.
    #[command(after_help = "Example:\n  agentwire jobs stop fix-1")]
    Stop {
        /// The job.
        id: String,
    },
    /// Stop and forget a job.
    #[command(after_help = "Example:\n  agentwire jobs rm fix-1")]
    Rm {
        /// The job.
        id: String,
    },
    /// Start a job's process again.
    #[command(after_help = "Example:\n  agentwire jobs respawn fix-1")]
    Respawn {
        /// The job.
        id: String,
    },
    /// What happened across the jobs.
    #[command(after_help = "Example:\n  agentwire jobs events --after 120 --limit 50")]
    Events {
        /// Only after this cursor.
        #[arg(long)]
        after: Option<u64>,
        /// At most this many.
        #[arg(long)]
        limit: Option<u64>,
        /// Only this job.
        #[arg(long)]
        id: Option<String>,
    },
}

/// Runs `jobs` against `--roost-socket`, else the socket of the daemon serving `data_dir`, else `configured` (the
/// supervisor's socket as `serve` would resolve it); with none, says that no daemon serves the data dir.
pub(crate) async fn run(
    args: JobsArgs,
    data_dir: &Path,
    configured: PathBuf,
) -> Result<ExitCode, String> {
    let serving = crate::serving::Serving::find(data_dir);
    let socket = match (args.socket, &serving) {
        (Some(s), _) => s,
        (None, Ok(s)) => s.roost_socket().unwrap_or(configured),
        (None, Err(_)) if configured.exists() => configured,
        (None, Err(none)) => return Err(format!("{none} (or name a socket with --roost-socket)")),
    };
    let mut c = Controller::connect(&socket)
        .await
        .map_err(|e| e.to_string())?;
    let (op, a) = match args.command {
        JobsCommand::Dispatch {
            profile,
            task,
            name,
            request_id,
        } => (
            "dispatch",
            json!({ "profile": profile, "task": task, "name": name, "requestId": request_id }),
        ),
        JobsCommand::Ls { json } => {
            let rows = c.call("rows", json!({})).await.map_err(|e| e.to_string())?;
            if json {
                println!("{rows}");
            } else {
                for r in rows["rows"].as_array().cloned().unwrap_or_default() {
                    println!("{}", line(&r));
                }
            }
            return Ok(ExitCode::SUCCESS);
        }
        JobsCommand::Reply {
            id,
            text,
            mode,
            request_id,
        } => (
            "reply",
            json!({ "id": id, "text": text, "mode": mode, "requestId": request_id }),
        ),
        JobsCommand::Stop { id } => ("stop", json!({ "id": id })),
        JobsCommand::Rm { id } => ("rm", json!({ "id": id })),
        JobsCommand::Respawn { id } => ("respawn", json!({ "id": id })),
        JobsCommand::Events { after, limit, id } => (
            "events",
            json!({ "after": after, "limit": limit, "id": id }),
        ),
    };
    let result = c.call(op, a).await.map_err(|e| e.to_string())?;
    println!("{result}");
    Ok(ExitCode::SUCCESS)
}

fn line(r: &Value) -> String {
    let s = |k: &str| r[k].as_str().unwrap_or("").to_string();
    format!(
        "{}  {:<20} {:<10} {:<9} {}{}",
        s("id"),
        s("name"),
        s("profile"),
        s("state"),
        s("summary"),
        if r["pending"].as_u64().unwrap_or(0) > 0 {
            format!("  [{} waiting]", r["pending"])
        } else {
            String::new()
        }
    )
}
