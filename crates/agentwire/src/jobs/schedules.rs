//! `jobs schedules` and `jobs schedule add | rm | pause`: jobs started on a clock, for a person at a
//! terminal. Times are shown in this machine's zone; the daemon reads `when` in its `[roost] timezone`.

use super::call;
use crate::tabular::{cell, columns};
use agentwire_roost::client::Controller;
use agentwire_roost::proto::when::Zone;
use clap::Subcommand;
use serde_json::{json, Value};

/// The widest task cell in `schedules`.
const MAX_TASK_CELL: usize = 50;

/// `jobs schedule` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum ScheduleCommand {
    /// Start a job of a profile with a task on a clock.
    #[command(
        after_help = "Examples:\n  agentwire jobs schedule add coder \"run the nightly checks\" --when \"daily 02:00\"\n  agentwire jobs schedule add coder \"triage new issues\" --when 'cron \"0 9 * * 1-5\"' --name triage"
    )]
    Add {
        /// The profile its jobs run.
        profile: String,
        /// The task each job is given.
        task: String,
        /// When: `every 30m` (m, h, d), `daily 18:00`, `weekdays 09:00` or `cron "<5 fields>"`.
        #[arg(long)]
        when: String,
        /// Its name (its jobs go by it; default the profile's).
        #[arg(long)]
        name: Option<String>,
    },
    /// Remove a schedule (the jobs it started stay).
    #[command(after_help = "Example:\n  agentwire jobs schedule rm 2")]
    Rm {
        /// The schedule's id.
        id: u64,
    },
    /// Pause a schedule (`--off` resumes it: it runs next at its next time from now).
    #[command(after_help = "Example:\n  agentwire jobs schedule pause 2")]
    Pause {
        /// The schedule's id.
        id: u64,
        /// Resume it.
        #[arg(long)]
        off: bool,
    },
}

/// Runs `schedule ...`: the daemon's answer, and what a person reads.
pub(crate) async fn schedule(
    c: &mut Controller,
    command: ScheduleCommand,
) -> Result<(Value, String), String> {
    match command {
        ScheduleCommand::Add {
            profile,
            task,
            when,
            name,
        } => {
            let args = json!({ "profile": profile, "task": task, "when": when, "name": name });
            let r = call(c, "schedule-add", args).await?;
            let s = &r["schedule"];
            let said = format!(
                "schedule #{} {} ({}): next run {}",
                s["id"],
                s["name"].as_str().unwrap_or_default(),
                s["when"].as_str().unwrap_or_default(),
                next_run(s)
            );
            Ok((r, said))
        }
        ScheduleCommand::Rm { id } => {
            let r = call(c, "schedule-rm", json!({ "id": id })).await?;
            Ok((r, format!("schedule #{id} removed")))
        }
        ScheduleCommand::Pause { id, off } => {
            let r = call(c, "schedule-pause", json!({ "id": id, "paused": !off })).await?;
            let said = match off {
                true => format!(
                    "schedule #{id} resumed: next run {}",
                    next_run(&r["schedule"])
                ),
                false => format!("schedule #{id} paused"),
            };
            Ok((r, said))
        }
    }
}

/// When a schedule runs next, in this machine's zone.
fn next_run(s: &Value) -> String {
    match (s["paused"].as_bool(), s["nextAt"].as_u64()) {
        (Some(true), _) => "paused".into(),
        (_, Some(at)) => Zone::system().show(at),
        _ => "never".into(),
    }
}

/// `jobs schedules`: each with its clock, next run, runs and the job it started last.
pub(crate) fn schedules(list: &[Value]) -> String {
    if list.is_empty() {
        return "no schedules (add one with `agentwire jobs schedule add PROFILE TASK --when WHEN`)\n"
            .into();
    }
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|s| {
            let text = |k: &str| s[k].as_str().unwrap_or_default().to_string();
            vec![
                format!("#{}", s["id"]),
                text("name"),
                text("profile"),
                text("when"),
                next_run(s),
                s["runs"].as_u64().unwrap_or(0).to_string(),
                text("lastJob"),
                cell(&text("task"), MAX_TASK_CELL),
            ]
        })
        .collect();
    columns(
        &[
            "ID", "NAME", "PROFILE", "WHEN", "NEXT", "RUNS", "LAST JOB", "TASK",
        ],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paused_schedule_says_so_and_an_empty_list_says_how_to_add_one() {
        let list = [
            json!({"id": 1, "name": "nightly", "profile": "coder", "when": "daily 02:00",
            "paused": true, "nextAt": 1, "runs": 3, "lastJob": "ab12", "task": "check"}),
        ];
        let out = schedules(&list);
        let line = out.lines().nth(1).unwrap();
        assert!(
            line.starts_with("#1  nightly  coder    daily 02:00  paused"),
            "{out}"
        );
        assert!(line.ends_with("3     ab12      check"), "{out}");
        assert!(schedules(&[]).contains("schedule add"));
    }
}
