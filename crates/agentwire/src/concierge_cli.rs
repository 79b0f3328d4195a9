//! `agentwire concierge`: the roost concierge for a person at a terminal (M44-M46): turn it on and off,
//! see how it stands, ask it something and read its answer, set its policy, keep standing orders, undo
//! the last answer it gave in your place. Each is the hub's op on a controller's connection.

use agentwire_roost::client::Controller;
use agentwire_roost::proto::when::Zone;
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// Exit code of `ask` when the concierge said nothing within `--wait`.
const EXIT_NO_ANSWER: u8 = 4;

/// `concierge` flags.
#[derive(Debug, Args)]
pub(crate) struct ConciergeArgs {
    /// The roost supervisor's socket (default: the one of the `serve` running on the data dir).
    #[arg(long = "roost-socket", alias = "socket", global = true)]
    socket: Option<PathBuf>,
    /// Print the daemon's answer as JSON, for a program.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: ConciergeCommand,
}

#[derive(Debug, Subcommand)]
enum ConciergeCommand {
    /// Turn the concierge on: the job it had, or a new one of a profile (default `[roost] concierge`).
    #[command(
        after_help = "Examples:\n  agentwire concierge on\n  agentwire concierge on --profile butler"
    )]
    On {
        /// The profile (a roost profile, or an agent exposed on roost) to start it from.
        #[arg(long)]
        profile: Option<String>,
        /// Its first task (default: what a concierge is for).
        #[arg(long)]
        task: Option<String>,
    },
    /// Turn the concierge off (its job is stopped).
    #[command(after_help = "Example:\n  agentwire concierge off")]
    Off,
    /// How the concierge stands: on or off, its job, its policy, answers given, orders.
    #[command(after_help = "Example:\n  agentwire concierge status")]
    Status,
    /// Ask the concierge something, and print what it says back.
    #[command(after_help = "Example:\n  agentwire concierge ask \"what needs me?\"")]
    Ask {
        /// The question.
        text: String,
        /// Seconds to wait for what it says (0: do not wait).
        #[arg(long, default_value_t = 120)]
        wait: u64,
    },
    /// Show or set the policy: when it may answer sessions in your place, and whether it may act.
    #[command(
        after_help = "Examples:\n  agentwire concierge policy\n  agentwire concierge policy --answer routine --act off"
    )]
    Policy {
        /// `never` (it only suggests), `routine` (one of a question's choices) or `always`.
        #[arg(long)]
        answer: Option<String>,
        /// `on` lets it stop, respawn and dispatch jobs; `off` does not.
        #[arg(long)]
        act: Option<String>,
    },
    /// The standing orders; `add` keeps one (on a clock with `--when`), `rm` drops one.
    #[command(
        after_help = "Examples:\n  agentwire concierge orders\n  agentwire concierge orders add \"tell me what failed overnight\" --when \"daily 08:00\"\n  agentwire concierge orders rm 3"
    )]
    Orders {
        #[command(subcommand)]
        action: Option<OrdersCommand>,
    },
    /// Withdraw the last answer the concierge gave in your place (its session is told to disregard it).
    #[command(after_help = "Example:\n  agentwire concierge undo")]
    Undo,
}

#[derive(Debug, Subcommand)]
enum OrdersCommand {
    /// Keep a standing order.
    #[command(
        after_help = "Example:\n  agentwire concierge orders add \"tell me what failed overnight\" --when \"daily 08:00\""
    )]
    Add {
        /// The instruction.
        text: String,
        /// When it falls due: `every 30m`, `daily 18:00`, `weekdays 09:00` or `cron "<5 fields>"`.
        #[arg(long)]
        when: Option<String>,
    },
    /// Drop a standing order.
    #[command(after_help = "Example:\n  agentwire concierge orders rm 3")]
    Rm {
        /// Its id.
        id: u64,
    },
}

/// Runs `concierge ...` against the supervisor of `--roost-socket`, else of the daemon serving
/// `data_dir`, else at `configured`.
pub(crate) async fn run(
    args: ConciergeArgs,
    data_dir: &Path,
    configured: PathBuf,
) -> Result<ExitCode, String> {
    let mut c = crate::jobs::controller(args.socket, data_dir, &configured).await?;
    let human = !args.json;
    let print = |v: &Value, said: String| {
        match human {
            true => print!("{said}"),
            false => println!("{v}"),
        }
        Ok(ExitCode::SUCCESS)
    };
    match args.command {
        ConciergeCommand::On { profile, task } => {
            let launch = profile.map(|p| json!({ "profile": p, "task": task }));
            let r = call(
                &mut c,
                "concierge",
                json!({ "action": "on", "launch": launch }),
            )
            .await?;
            print(&r, status(&r))
        }
        ConciergeCommand::Off => {
            let r = call(&mut c, "concierge", json!({ "action": "off" })).await?;
            print(&r, status(&r))
        }
        ConciergeCommand::Status => {
            let r = call(&mut c, "concierge", json!({ "action": "status" })).await?;
            print(&r, status(&r))
        }
        ConciergeCommand::Undo => {
            let r = call(&mut c, "concierge", json!({ "action": "undo" })).await?;
            print(
                &r,
                "withdrew its last answer: the session was told to disregard it\n".into(),
            )
        }
        ConciergeCommand::Policy { answer, act } => {
            let mut r = call(&mut c, "concierge", json!({ "action": "status" })).await?;
            if let Some(a) = answer {
                r = call(
                    &mut c,
                    "concierge",
                    json!({ "action": "answer", "answer": a }),
                )
                .await?;
            }
            if let Some(a) = act {
                let act = match a.as_str() {
                    "on" | "true" | "yes" => true,
                    "off" | "false" | "no" => false,
                    other => return Err(format!("--act {other:?}: on or off")),
                };
                r = call(&mut c, "concierge", json!({ "action": "act", "act": act })).await?;
            }
            print(&r["policy"], policy(&r["policy"]))
        }
        ConciergeCommand::Orders { action } => {
            let (args, said) = match action {
                None => (json!({ "action": "list" }), None),
                Some(OrdersCommand::Add { text, when }) => (
                    json!({ "action": "add", "text": text, "when": when }),
                    Some("kept"),
                ),
                Some(OrdersCommand::Rm { id }) => {
                    (json!({ "action": "rm", "id": id }), Some("dropped"))
                }
            };
            let r = call(&mut c, "concierge-order", args).await?;
            let text = match (said, &r["order"]) {
                (Some(done), Value::Object(_)) => format!("{done} {}\n", order(&r["order"])),
                (Some(done), _) => format!("{done}\n"),
                (None, _) => orders(r["orders"].as_array().map_or(&[], |v| v)),
            };
            print(&r, text)
        }
        ConciergeCommand::Ask { text, wait } => ask(&mut c, &text, wait, human).await,
    }
}

async fn call(c: &mut Controller, op: &str, args: Value) -> Result<Value, String> {
    c.call(op, args).await.map_err(|e| e.to_string())
}

/// `ask`: the question as a reply to the concierge, then what it says next (a `concierge` push), within
/// `wait` seconds.
async fn ask(c: &mut Controller, text: &str, wait: u64, human: bool) -> Result<ExitCode, String> {
    if wait > 0 {
        // Subscribed first, so that nothing it says in answer is missed.
        call(c, "subscribe", json!({})).await?;
    }
    let r = call(c, "concierge-ask", json!({ "text": text })).await?;
    if wait == 0 {
        match human {
            true => println!("asked (reply {})", r["seq"]),
            false => println!("{r}"),
        }
        return Ok(ExitCode::SUCCESS);
    }
    let said = tokio::time::timeout(Duration::from_secs(wait), async {
        loop {
            let e = c.next_event().await.map_err(|e| e.to_string())?;
            if e["event"] == "concierge" && e.get("said").is_some() {
                return Ok::<Value, String>(e);
            }
        }
    })
    .await;
    match said {
        Ok(Ok(e)) => {
            match human {
                true => println!(
                    "{}: {}",
                    e["said"]["kind"].as_str().unwrap_or("info"),
                    crate::tabular::printable(e["said"]["text"].as_str().unwrap_or_default())
                ),
                false => println!("{e}"),
            }
            Ok(ExitCode::SUCCESS)
        }
        Ok(Err(e)) => Err(e),
        Err(_) => {
            eprintln!("agentwire: the concierge said nothing within {wait} s (it has the question: `agentwire jobs events` shows what it does)");
            Ok(ExitCode::from(EXIT_NO_ANSWER))
        }
    }
}

/// The status as a person reads it.
fn status(s: &Value) -> String {
    let on = match s["on"].as_bool() {
        Some(true) => "on",
        _ => "off",
    };
    let job = match s["id"].as_str() {
        Some(id) => format!(", job {id} ({})", s["state"].as_str().unwrap_or("gone")),
        None => String::new(),
    };
    format!(
        "concierge {on}{job}\n{}answered for you: {}; standing orders: {}\n",
        policy(&s["policy"]),
        s["answered"],
        s["orders"]
    )
}

fn policy(p: &Value) -> String {
    let act = match p["act"].as_bool() {
        Some(true) => "may stop, respawn and dispatch jobs",
        _ => "may not act on jobs",
    };
    format!(
        "policy: answer {}; {act}\n",
        p["answer"].as_str().unwrap_or("never")
    )
}

/// One standing order on a line.
fn order(o: &Value) -> String {
    let clock = match (o["when"].as_str(), o["nextAt"].as_u64()) {
        (Some(w), Some(n)) => format!(" [{w}, next {}]", Zone::system().show(n)),
        (Some(w), None) => format!(" [{w}]"),
        _ => String::new(),
    };
    format!(
        "#{} ({}){clock}: {}",
        o["id"],
        o["by"].as_str().unwrap_or_default(),
        crate::tabular::printable(o["text"].as_str().unwrap_or_default())
    )
}

/// The standing orders, one a line.
fn orders(list: &[Value]) -> String {
    if list.is_empty() {
        return "no standing orders (keep one with `agentwire concierge orders add TEXT`)\n".into();
    }
    list.iter().map(|o| order(o) + "\n").collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_and_an_order_read_as_sentences() {
        let s = json!({"on": true, "id": "ab12", "state": "working", "answered": 2, "orders": 1,
            "policy": {"answer": "routine", "act": false}});
        assert_eq!(
            status(&s),
            "concierge on, job ab12 (working)\npolicy: answer routine; may not act on jobs\nanswered for you: 2; standing orders: 1\n"
        );
        let o = json!({"id": 3, "by": "user", "text": "report\u{1b}[2J", "when": null});
        assert_eq!(order(&o), "#3 (user): report [2J");
        assert!(orders(&[]).contains("orders add"));
    }
}
