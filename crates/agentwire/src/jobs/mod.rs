//! `agentwire jobs`: the roost supervisor's controller on the command line, for people: tables with
//! headers, a blocked job's question with its choices, a reply checked against that question, names wherever
//! ids go, `follow` to watch one job, `profiles`, `log`; `--json` gives the daemon's answers as they come.
//!
//! - [`table`]: how rows, events and profiles are shown (pure);
//! - [`follow`]: one job's row and output as they change.

mod fleet;
mod follow;
mod schedules;
mod table;

use agentwire_roost::client::Controller;
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Exit code of a reply that does not answer the question its job asks, and of a followed job that failed.
pub(crate) const EXIT_NOT_AN_ANSWER: u8 = 2;

/// `jobs` flags.
#[derive(Debug, Args)]
pub(crate) struct JobsArgs {
    /// The roost supervisor's socket (default: the one of the `serve` running on the data dir).
    #[arg(long = "roost-socket", alias = "socket", global = true)]
    socket: Option<PathBuf>,
    /// Print the daemon's answer as JSON, for a program.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: JobsCommand,
}

#[derive(Debug, Subcommand)]
enum JobsCommand {
    /// Start a job from a profile (`jobs profiles` lists them).
    #[command(
        after_help = "Example:\n  agentwire jobs dispatch coder \"fix the failing test\" --name fix-1"
    )]
    Dispatch {
        /// The profile.
        profile: String,
        /// The first task.
        task: Option<String>,
        /// The job's name (any command then takes it in place of the id).
        #[arg(long)]
        name: Option<String>,
        /// A request id, so a resend is taken once.
        #[arg(long)]
        request_id: Option<String>,
    },
    /// The jobs, as a table (a blocked job with its question and choices).
    #[command(after_help = "Example:\n  agentwire jobs ls")]
    Ls,
    /// Reply to a job. To a job that asks a question with choices, the reply is one of them (or its number).
    #[command(after_help = "Example:\n  agentwire jobs reply fix-1 \"yes, go on\"")]
    Reply {
        /// The job (its name or id).
        job: String,
        /// The reply (`/stop` stops the job).
        text: String,
        /// `steer` (join the work under way) or `followUp`; either sends the text whatever the job asks.
        #[arg(long)]
        mode: Option<String>,
        /// A request id, so a resend is taken once.
        #[arg(long)]
        request_id: Option<String>,
    },
    /// Stop a job.
    #[command(after_help = "Example:\n  agentwire jobs stop fix-1")]
    Stop {
        /// The job (its name or id).
        job: String,
    },
    /// Stop and forget a job.
    #[command(after_help = "Example:\n  agentwire jobs rm fix-1")]
    Rm {
        /// The job (its name or id).
        job: String,
    },
    /// Start a job's process again.
    #[command(after_help = "Example:\n  agentwire jobs respawn fix-1")]
    Respawn {
        /// The job (its name or id).
        job: String,
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
        /// Only this job (its name or id).
        #[arg(long = "job", alias = "id")]
        job: Option<String>,
        /// Keep printing new events as they happen (until Ctrl-C).
        #[arg(long)]
        follow: bool,
    },
    /// The task board.
    #[command(after_help = "Example:\n  agentwire jobs board")]
    Board,
    /// Act on the task board as the user: add, done, release, drop, assign.
    #[command(
        subcommand,
        after_help = "Examples:\n  agentwire jobs task add \"write the docs\"\n  agentwire jobs task assign 3 fix-1\n  agentwire jobs task done 3 --result \"merged\""
    )]
    Task(fleet::TaskCommand),
    /// The schedules: jobs started on a clock.
    #[command(after_help = "Example:\n  agentwire jobs schedules")]
    Schedules,
    /// Add, remove, pause or resume a schedule.
    #[command(
        subcommand,
        after_help = "Examples:\n  agentwire jobs schedule add coder \"run the nightly checks\" --when \"daily 02:00\" --name nightly\n  agentwire jobs schedule pause 2"
    )]
    Schedule(schedules::ScheduleCommand),
    /// The jobs as a fleet: each with its parent (the job that spawned it).
    #[command(after_help = "Example:\n  agentwire jobs peers")]
    Peers,
    /// Message a job as another session would (a peer item, not a reply from the user).
    #[command(after_help = "Example:\n  agentwire jobs send fix-1 \"the tests pass now\" --as me")]
    Send {
        /// The job (its name or id).
        job: String,
        /// The message.
        text: String,
        /// The name it comes from (a foreground peer's).
        #[arg(long = "as", default_value = "cli")]
        from: String,
    },
    /// Follow one job: its row as it changes and its output, until it ends (exit 0 done, 2 failed, 3
    /// stopped or gone, 5 still running after a day of following).
    #[command(after_help = "Example:\n  agentwire jobs follow fix-1")]
    Follow {
        /// The job (its name or id).
        job: String,
    },
    /// The profiles a job can be dispatched from, and the engine agents.
    #[command(after_help = "Example:\n  agentwire jobs profiles")]
    Profiles,
    /// Pin a job: `ls` shows it first (`--off` unpins it).
    #[command(after_help = "Example:\n  agentwire jobs pin fix-1")]
    Pin {
        /// The job (its name or id).
        job: String,
        /// Unpin it.
        #[arg(long)]
        off: bool,
    },
    /// Name a job: the name stands whatever its agent reports.
    #[command(after_help = "Example:\n  agentwire jobs rename fix-1 \"flaky test\"")]
    Rename {
        /// The job (its name or id).
        job: String,
        /// Its new name.
        name: String,
    },
    /// Put jobs in this order: `ls` shows them so, after the pinned ones; the others follow.
    #[command(after_help = "Example:\n  agentwire jobs reorder fix-1 docs-2")]
    Reorder {
        /// The jobs (names or ids), first first.
        #[arg(required = true)]
        jobs: Vec<String>,
    },
    /// A job's output (`output.log` in its directory).
    #[command(after_help = "Example:\n  agentwire jobs log fix-1")]
    Log {
        /// The job (its name or id).
        job: String,
    },
}

/// Runs `jobs` against `--roost-socket`, else the socket of the daemon serving `data_dir`, else `configured`
/// (the supervisor's socket as `serve` would resolve it); with none, says that no daemon serves the data
/// dir.
pub(crate) async fn run(
    args: JobsArgs,
    data_dir: &Path,
    configured: PathBuf,
) -> Result<ExitCode, String> {
    let socket = socket(
        args.socket,
        &crate::serving::Serving::find(data_dir),
        &configured,
    )?;
    let mut c = Controller::connect(&socket)
        .await
        .map_err(|e| e.to_string())?;
    let human = !args.json;
    let out = |v: &Value, said: String| {
        match human {
            true => println!("{said}"),
            false => println!("{v}"),
        }
        Ok(ExitCode::SUCCESS)
    };
    match args.command {
        JobsCommand::Profiles => {
            // The daemon behind the socket says what it serves, whichever data dir it runs on.
            let about = call(&mut c, "about", json!({})).await?;
            let list = about["profiles"].as_array().cloned().unwrap_or_default();
            match args.json {
                true => println!("{}", json!({ "profiles": list })),
                false => print!("{}", table::profiles(&list)),
            }
            Ok(ExitCode::SUCCESS)
        }
        JobsCommand::Dispatch {
            profile,
            task,
            name,
            request_id,
        } => {
            let args =
                json!({ "profile": profile, "task": task, "name": name, "requestId": request_id });
            let r = call(&mut c, "dispatch", args).await?;
            out(
                &r,
                format!(
                    "started {} ({}) from {profile}",
                    r["name"].as_str().unwrap_or(""),
                    r["id"].as_str().unwrap_or("")
                ),
            )
        }
        JobsCommand::Ls => listing(&mut c, "rows", json!({}), "rows", human, table::rows).await,
        JobsCommand::Reply {
            job,
            text,
            mode,
            request_id,
        } => {
            let row = find_row(&mut c, &job).await?;
            let text = match &mode {
                Some(_) => text,
                None => match table::reply_text(&row, &text) {
                    Ok(t) => t,
                    Err(why) => {
                        eprintln!("agentwire: {why}");
                        return Ok(ExitCode::from(EXIT_NOT_AN_ANSWER));
                    }
                },
            };
            let id = row["id"].as_str().unwrap_or_default();
            let args = json!({ "id": id, "text": text, "mode": mode, "requestId": request_id });
            let r = call(&mut c, "reply", args).await?;
            let said = match (&r["duplicate"], &r["stopped"]) {
                (Value::Bool(true), _) => format!("{job}: taken before (the same request id)"),
                (_, Value::Bool(true)) => format!("{job}: stopped"),
                _ => format!("{job}: reply {} saved", r["seq"]),
            };
            out(&r, said)
        }
        JobsCommand::Stop { job } => lifecycle(&mut c, "stop", &job, "stopped")
            .await
            .and_then(|r| out(&r.0, r.1)),
        JobsCommand::Rm { job } => lifecycle(&mut c, "rm", &job, "removed")
            .await
            .and_then(|r| out(&r.0, r.1)),
        JobsCommand::Respawn { job } => lifecycle(&mut c, "respawn", &job, "started again")
            .await
            .and_then(|r| out(&r.0, r.1)),
        JobsCommand::Board => {
            let args = json!({ "action": "list" });
            listing(&mut c, "task", args, "tasks", human, fleet::board).await
        }
        JobsCommand::Task(command) => {
            let (r, said) = fleet::task(&mut c, command).await?;
            out(&r, said)
        }
        JobsCommand::Schedules => {
            listing(
                &mut c,
                "schedules",
                json!({}),
                "schedules",
                human,
                schedules::schedules,
            )
            .await
        }
        JobsCommand::Schedule(command) => {
            let (r, said) = schedules::schedule(&mut c, command).await?;
            out(&r, said)
        }
        JobsCommand::Peers => listing(&mut c, "rows", json!({}), "rows", human, fleet::peers).await,
        JobsCommand::Send { job, text, from } => {
            let (r, said) = fleet::send(&mut c, &job, &text, &from).await?;
            out(&r, said)
        }
        JobsCommand::Events {
            after,
            limit,
            job,
            follow: true,
        } => {
            let rows = call(&mut c, "rows", json!({})).await?;
            let rows = rows["rows"].as_array().cloned().unwrap_or_default();
            let id = match &job {
                Some(j) => Some(pick(&rows, j)?["id"].clone()),
                None => None,
            };
            follow::events(c, after, limit, id, human).await
        }
        JobsCommand::Events {
            after, limit, job, ..
        } => {
            let rows = call(&mut c, "rows", json!({})).await?;
            let rows = rows["rows"].as_array().cloned().unwrap_or_default();
            let id = match &job {
                Some(j) => Some(pick(&rows, j)?["id"].clone()),
                None => None,
            };
            let r = call(
                &mut c,
                "events",
                json!({ "after": after, "limit": limit, "id": id }),
            )
            .await?;
            match human {
                true => {
                    let names = |id: &str| {
                        rows.iter()
                            .find(|r| r["id"] == id)
                            .and_then(|r| r["name"].as_str())
                            .unwrap_or(id)
                            .to_string()
                    };
                    let list = r["events"].as_array().map_or(&[][..], |v| v);
                    print!("{}", table::events(list, &names));
                }
                false => println!("{r}"),
            }
            Ok(ExitCode::SUCCESS)
        }
        JobsCommand::Pin { job, off } => {
            let row = find_row(&mut c, &job).await?;
            let r = call(&mut c, "pin", json!({ "id": row["id"], "pinned": !off })).await?;
            out(
                &r,
                format!("{job}: {}", if off { "unpinned" } else { "pinned" }),
            )
        }
        JobsCommand::Rename { job, name } => {
            let row = find_row(&mut c, &job).await?;
            let r = call(&mut c, "rename", json!({ "id": row["id"], "name": name })).await?;
            out(&r, format!("{job}: named {name}"))
        }
        JobsCommand::Reorder { jobs } => {
            let rows = call(&mut c, "rows", json!({})).await?;
            let rows = rows["rows"].as_array().cloned().unwrap_or_default();
            let ids = jobs
                .iter()
                .map(|j| pick(&rows, j).map(|r| r["id"].clone()))
                .collect::<Result<Vec<_>, _>>()?;
            let r = call(&mut c, "reorder", json!({ "ids": ids })).await?;
            out(&r, format!("in this order: {}", jobs.join(", ")))
        }
        JobsCommand::Follow { job } => {
            let home = jobs_dir(&mut c).await?;
            let row = find_row(&mut c, &job).await?;
            follow::follow(c, row, &home, args.json).await
        }
        JobsCommand::Log { job } => {
            let home = jobs_dir(&mut c).await?;
            let row = find_row(&mut c, &job).await?;
            let path = follow::output_log(&home, row["id"].as_str().unwrap_or_default());
            let mut file = std::fs::File::open(&path)
                .map_err(|e| format!("{job}'s output {}: {e}", path.display()))?;
            // Streamed, not read whole: a job's output can be long.
            let copied = std::io::copy(&mut file, &mut std::io::stdout().lock()).map(|_| ());
            crate::closed_pipe::quiet_when_closed(copied)
                .map_err(|e| format!("cannot write the output: {e}"))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Where the daemon behind `c` keeps its jobs' directories (a job's output is in `<dir>/<id>`), as it says.
async fn jobs_dir(c: &mut Controller) -> Result<PathBuf, String> {
    let about = call(c, "about", json!({})).await?;
    about["jobs"]
        .as_str()
        .map(PathBuf::from)
        .ok_or_else(|| "the supervisor did not say where its jobs' directories are".to_string())
}

/// The supervisor's socket: `flag` (`--roost-socket`), else the socket of the daemon serving the data dir,
/// else `configured` when it is there; with none, says that no daemon serves the data dir.
fn socket(
    flag: Option<PathBuf>,
    serving: &Result<crate::serving::Serving, String>,
    configured: &Path,
) -> Result<PathBuf, String> {
    match (flag, serving) {
        (Some(s), _) => Ok(s),
        (None, Ok(s)) => Ok(s.roost_socket().unwrap_or(configured.to_path_buf())),
        (None, Err(_)) if configured.exists() => Ok(configured.to_path_buf()),
        (None, Err(none)) => Err(format!("{none} (or name a socket with --roost-socket)")),
    }
}

/// A controller's connection to the supervisor of `--roost-socket`, else of the daemon serving
/// `data_dir`, else at `configured`.
pub(crate) async fn controller(
    flag: Option<PathBuf>,
    data_dir: &Path,
    configured: &Path,
) -> Result<Controller, String> {
    let socket = socket(flag, &crate::serving::Serving::find(data_dir), configured)?;
    Controller::connect(&socket)
        .await
        .map_err(|e| e.to_string())
}

/// Calls `op` and prints the list under `key` of its answer as `table` lays it out for a person, or the
/// answer as it came (`--json`).
async fn listing(
    c: &mut Controller,
    op: &str,
    args: Value,
    key: &str,
    human: bool,
    table: fn(&[Value]) -> String,
) -> Result<ExitCode, String> {
    let r = call(c, op, args).await?;
    match human {
        true => print!("{}", table(r[key].as_array().map_or(&[], |v| v))),
        false => println!("{r}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// Calls `op`, the daemon's refusal as the error.
async fn call(c: &mut Controller, op: &str, args: Value) -> Result<Value, String> {
    c.call(op, args).await.map_err(|e| e.to_string())
}

/// `stop`, `rm` or `respawn` of `job` (a name or an id): the answer, and what a person reads.
async fn lifecycle(
    c: &mut Controller,
    op: &str,
    job: &str,
    done: &str,
) -> Result<(Value, String), String> {
    let row = find_row(c, job).await?;
    let r = call(c, op, json!({ "id": row["id"] })).await?;
    Ok((r, format!("{job}: {done}")))
}

/// The row of `job`: the one with that id, else the one job of that name.
async fn find_row(c: &mut Controller, job: &str) -> Result<Value, String> {
    let rows = call(c, "rows", json!({})).await?;
    pick(rows["rows"].as_array().map_or(&[], |v| v), job).cloned()
}

/// `job` among `rows`: its id, else its name (which must be one job's).
fn pick<'a>(rows: &'a [Value], job: &str) -> Result<&'a Value, String> {
    if let Some(r) = rows.iter().find(|r| r["id"] == job) {
        return Ok(r);
    }
    let named: Vec<&Value> = rows.iter().filter(|r| r["name"] == job).collect();
    match named.as_slice() {
        [one] => Ok(one),
        [] => Err(format!(
            "not_found: no job has the id or name {job:?} (`agentwire jobs ls` lists them)"
        )),
        many => Err(format!(
            "{} jobs are named {job:?}: name one by its id ({})",
            many.len(),
            many.iter()
                .filter_map(|r| r["id"].as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}
