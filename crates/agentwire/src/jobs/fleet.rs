//! `jobs board`, `jobs task ...`, `jobs peers` and `jobs send`: the roost fleet for a person at a
//! terminal. The board is acted on as the user (a controller's connection); `send` speaks as a foreground
//! peer (`peer_register`), so the message arrives as another session's.

use super::{call, pick};
use crate::tabular::{cell, columns};
use agentwire_roost::client::Controller;
use clap::Subcommand;
use serde_json::{json, Value};

/// The widest title cell in `board`.
const MAX_TITLE_CELL: usize = 60;

/// `jobs task` subcommands: the board as the user.
#[derive(Debug, Subcommand)]
pub(crate) enum TaskCommand {
    /// Add a task.
    #[command(after_help = "Example:\n  agentwire jobs task add \"write the docs\" --after 1")]
    Add {
        /// Its title (one line).
        title: String,
        /// More about it.
        #[arg(long)]
        detail: Option<String>,
        /// A task it waits for (again for several).
        #[arg(long)]
        after: Vec<u64>,
    },
    /// Mark a task done (its holder is told).
    #[command(after_help = "Example:\n  agentwire jobs task done 3 --result \"merged\"")]
    Done {
        /// The task's id.
        id: u64,
        /// What came of it.
        #[arg(long)]
        result: Option<String>,
    },
    /// Take a task from its holder (it is told).
    #[command(after_help = "Example:\n  agentwire jobs task release 3")]
    Release {
        /// The task's id.
        id: u64,
    },
    /// Take a task off the board (its holder is told).
    #[command(after_help = "Example:\n  agentwire jobs task drop 3")]
    Drop {
        /// The task's id.
        id: u64,
    },
    /// Send an open task to a job (a message with how to claim it).
    #[command(after_help = "Example:\n  agentwire jobs task assign 3 fix-1")]
    Assign {
        /// The task's id.
        id: u64,
        /// The job (its name or id).
        job: String,
    },
}

/// `jobs board`: the tasks, oldest first.
pub(crate) fn board(tasks: &[Value]) -> String {
    if tasks.is_empty() {
        return "the board is empty (add a task with `agentwire jobs task add TITLE`)\n".into();
    }
    let rows: Vec<Vec<String>> = tasks
        .iter()
        .map(|t| {
            let after: Vec<String> = t["after"]
                .as_array()
                .map(|a| a.iter().map(|x| format!("#{x}")).collect())
                .unwrap_or_default();
            let owner = t["owner"]["name"]
                .as_str()
                .map(String::from)
                .or_else(|| t["assigned"]["name"].as_str().map(|n| format!("({n})")))
                .unwrap_or_default();
            let mut title = t["title"].as_str().unwrap_or_default().to_string();
            if let Some(r) = t["result"].as_str() {
                title = format!("{title}: {r}");
            }
            vec![
                format!("#{}", t["id"]),
                t["state"].as_str().unwrap_or_default().to_string(),
                cell(&owner, 30),
                after.join(" "),
                cell(&title, MAX_TITLE_CELL),
            ]
        })
        .collect();
    columns(&["ID", "STATE", "OWNER", "AFTER", "TITLE"], &rows)
}

/// `jobs peers`: the jobs as a fleet, each with its parent.
pub(crate) fn peers(rows: &[Value]) -> String {
    if rows.is_empty() {
        return "no jobs\n".into();
    }
    let name_of = |id: &str| {
        rows.iter()
            .find(|r| r["id"] == id)
            .and_then(|r| r["name"].as_str())
            .unwrap_or(id)
            .to_string()
    };
    let lines: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r["name"].as_str().unwrap_or_default().to_string(),
                r["id"].as_str().unwrap_or_default().to_string(),
                r["state"].as_str().unwrap_or_default().to_string(),
                r["parent"].as_str().map(name_of).unwrap_or_default(),
                cell(r["summary"].as_str().unwrap_or_default(), MAX_TITLE_CELL),
            ]
        })
        .collect();
    columns(&["NAME", "ID", "STATE", "PARENT", "SUMMARY"], &lines)
}

/// Runs `task`: the board's answer, and what a person reads.
pub(crate) async fn task(
    c: &mut Controller,
    command: TaskCommand,
) -> Result<(Value, String), String> {
    let (args, said) = match command {
        TaskCommand::Add {
            title,
            detail,
            after,
        } => (
            json!({ "action": "add", "title": title, "detail": detail, "after": after }),
            "added",
        ),
        TaskCommand::Done { id, result } => (
            json!({ "action": "done", "id": id, "result": result }),
            "done",
        ),
        TaskCommand::Release { id } => (json!({ "action": "release", "id": id }), "released"),
        TaskCommand::Drop { id } => (json!({ "action": "drop", "id": id }), "dropped"),
        TaskCommand::Assign { id, job } => {
            let rows = call(c, "rows", json!({})).await?;
            let row = pick(rows["rows"].as_array().map_or(&[], |v| v), &job)?.clone();
            let r = call(
                c,
                "task",
                json!({ "action": "assign", "id": id, "to": row["id"] }),
            )
            .await?;
            let said = format!("#{id} sent to {job} ({})", r["sent"].as_str().unwrap_or(""));
            return Ok((r, said));
        }
    };
    let r = call(c, "task", args).await?;
    let said = format!(
        "#{} {said}: {}",
        r["task"]["id"],
        r["task"]["title"].as_str().unwrap_or_default()
    );
    Ok((r, said))
}

/// `send JOB TEXT --as NAME`: registers this connection as foreground peer `name` and sends.
pub(crate) async fn send(
    c: &mut Controller,
    to: &str,
    text: &str,
    name: &str,
) -> Result<(Value, String), String> {
    let rows = call(c, "rows", json!({})).await?;
    let row = pick(rows["rows"].as_array().map_or(&[], |v| v), to)?.clone();
    call(c, "peer_register", json!({ "name": name })).await?;
    let r = call(c, "send", json!({ "to": row["id"], "text": text })).await?;
    let said = format!("{to}: {}", r["outcome"].as_str().unwrap_or_default());
    Ok((r, said))
}
