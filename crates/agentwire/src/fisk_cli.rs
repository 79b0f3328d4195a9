//! `agentwire ask --nats`, `read` and `discover`: a fisk-ai caller on the command line. Answers stream to
//! stdout, tool activity and questions go to stderr, and questions are answered at the terminal while the
//! question is held open with `elicit.waiting`.

use crate::ask::{EXIT_AGENT_ERROR, EXIT_TIMEOUT};
use agentwire_fisk::client::{new_request, Caller, ClientError, PromptCall, Received, Reply};
use agentwire_fisk::connection::NatsConnect;
use agentwire_fisk::wire::ElicitChoice;
use clap::Args;
use serde_json::Value;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

/// The name this client sends as `sender`.
const CALLER_NAME: &str = "agentwire-cli";

/// `read` flags.
#[derive(Debug, Args)]
pub(crate) struct ReadArgs {
    /// The NATS servers (a comma-separated list); `[nats]` in the config gives credentials and TLS.
    #[arg(long)]
    pub(crate) nats: String,
    /// The worker's identity.
    #[arg(long)]
    identity: String,
    /// How many blocks to read back (the worker caps it at 200).
    #[arg(long, default_value_t = 200)]
    replay: u64,
    /// The conversation token (printed by `ask --nats`).
    token: String,
}

/// `discover` flags.
#[derive(Debug, Args)]
pub(crate) struct DiscoverArgs {
    /// The NATS servers (a comma-separated list); `[nats]` in the config gives credentials and TLS.
    #[arg(long)]
    pub(crate) nats: String,
    /// The worker's identity.
    identity: String,
}

fn err(e: ClientError) -> String {
    e.to_string()
}

/// Reads a line from the terminal without blocking the runtime; `None` at end of input.
async fn read_line(prompt: String) -> Option<String> {
    tokio::task::spawn_blocking(move || {
        eprint!("{prompt}");
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        match std::io::stdin().read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line.trim_end_matches(['\n', '\r']).to_string()),
        }
    })
    .await
    .ok()
    .flatten()
}

/// Puts a question to the person at the terminal.
async fn ask_person(q: Value) -> Reply {
    let kind = q["protocol"]
        .as_str()
        .unwrap_or("")
        .rsplit('.')
        .next()
        .unwrap_or("")
        .to_string();
    match kind.as_str() {
        "approve" => {
            eprintln!("[approval] run: {}", q["display"].as_str().unwrap_or(""));
            loop {
                match read_line("allow? [no/once/always] ".into())
                    .await
                    .as_deref()
                {
                    None => return Reply::NoOperator,
                    Some("once") | Some("o") | Some("y") | Some("yes") => {
                        return Reply::Approve(ElicitChoice::Once)
                    }
                    Some("always") | Some("a") => return Reply::Approve(ElicitChoice::Always),
                    Some("no") | Some("n") | Some("") => return Reply::Approve(ElicitChoice::No),
                    Some(_) => continue,
                }
            }
        }
        "confirm" => {
            eprintln!("[question] {}", q["question"].as_str().unwrap_or(""));
            match read_line("[y/n] ".into()).await.as_deref() {
                None => Reply::NoOperator,
                Some(a) => Reply::Confirm(matches!(a, "y" | "yes" | "Y")),
            }
        }
        "select" => {
            eprintln!("[question] {}", q["question"].as_str().unwrap_or(""));
            let options: Vec<String> = q["options"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|o| o.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            for (i, o) in options.iter().enumerate() {
                eprintln!("  {}) {o}", i + 1);
            }
            loop {
                let Some(a) = read_line("choose a number: ".into()).await else {
                    return Reply::NoOperator;
                };
                if let Some(i) = a
                    .trim()
                    .parse::<u64>()
                    .ok()
                    .filter(|i| *i >= 1 && (*i as usize) <= options.len())
                {
                    return Reply::Select(i - 1);
                }
                if let Some(i) = options.iter().position(|o| o == a.trim()) {
                    return Reply::Select(i as u64);
                }
            }
        }
        _ => {
            eprintln!("[question] {}", q["question"].as_str().unwrap_or(""));
            match read_line("> ".into()).await {
                None => Reply::NoOperator,
                Some(a) => Reply::Input(a),
            }
        }
    }
}

/// Runs `ask --nats`.
pub(crate) async fn ask(
    nats: &NatsConnect,
    identity: &str,
    token: Option<&str>,
    prompt: &str,
    timeout: Duration,
) -> Result<ExitCode, String> {
    let caller = Caller::connect_with(nats, CALLER_NAME).await.map_err(err)?;
    let request = new_request();
    let live = std::io::stdout().is_terminal();
    let mut streamed_final = None;
    let mut printed_any = false;
    let result = caller
        .prompt(
            PromptCall {
                identity,
                request: &request,
                prompt,
                token,
                timeout,
            },
            |m: &Received| match m.kind() {
                "ack" if m.json["accepted"] == true => eprintln!("run {request}"),
                "event.text" => {
                    let text = m.json["block"]["text"].as_str().unwrap_or("");
                    if m.json["block"]["final"] == true {
                        streamed_final = Some(text.to_string());
                    }
                    if live {
                        print!("{text}");
                        let _ = std::io::stdout().flush();
                        printed_any = true;
                    }
                }
                "event.tool_call" => eprintln!(
                    "[tool {} start {}]",
                    m.json["block"]["name"].as_str().unwrap_or("?"),
                    m.json["block"]["input"]
                ),
                "event.tool_result" => eprintln!(
                    "[tool result{} {}]",
                    if m.json["block"]["is_error"] == true {
                        " (error)"
                    } else {
                        ""
                    },
                    m.json["block"]["output"].as_str().unwrap_or("")
                ),
                "event.thinking" => eprintln!(
                    "[thinking] {}",
                    m.json["block"]["text"].as_str().unwrap_or("")
                ),
                "event.warning" => eprintln!("[warning] {}", m.json["block"]),
                _ => {}
            },
            Box::new(|q| Box::pin(ask_person(q))),
        )
        .await;
    let set = match result {
        Ok(s) => s,
        Err(ClientError::Timeout(_)) => {
            eprintln!("agentwire: no answer within {timeout:?}");
            return Ok(ExitCode::from(EXIT_TIMEOUT));
        }
        Err(e) => return Err(err(e)),
    };
    if live && printed_any {
        println!();
    }
    let token = set
        .first()
        .and_then(|a| a.json["conversation_token"].as_str())
        .map(String::from);
    let last = set.last().map(|m| m.json.clone()).unwrap_or(Value::Null);
    let code = match last["protocol"].as_str().unwrap_or("") {
        p if p.ends_with(".result") => {
            let text = last["text"].as_str().unwrap_or("");
            if !live || streamed_final.as_deref() != Some(text) {
                println!("{text}");
            }
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!(
                "error {}: {}",
                last["code"].as_str().unwrap_or("?"),
                last["error"].as_str().unwrap_or("")
            );
            ExitCode::from(EXIT_AGENT_ERROR)
        }
    };
    if let Some(u) = last.get("usage").filter(|u| u.is_object()) {
        eprintln!(
            "[usage: {} in, {} out, whole conversation]",
            u["input_tokens"].as_u64().unwrap_or(0),
            u["output_tokens"].as_u64().unwrap_or(0)
        );
    }
    if let Some(t) = token {
        // A credential for this conversation: shown to the person who owns it, for `--conversation`.
        eprintln!("conversation {t}");
    }
    Ok(code)
}

/// Runs `read`.
pub(crate) async fn read(args: ReadArgs, nats: &NatsConnect) -> Result<ExitCode, String> {
    let caller = Caller::connect_with(nats, CALLER_NAME).await.map_err(err)?;
    let set = caller
        .read(&args.identity, &args.token, args.replay)
        .await
        .map_err(err)?;
    if set.first().is_some_and(|a| a.json["accepted"] != true) {
        let last = set.last().map(|m| m.json.clone()).unwrap_or_default();
        eprintln!(
            "error {}: {}",
            last["code"].as_str().unwrap_or("?"),
            last["error"].as_str().unwrap_or("")
        );
        return Ok(ExitCode::from(EXIT_AGENT_ERROR));
    }
    for m in &set[1..] {
        let b = &m.json["block"];
        match m.kind() {
            "event.prompt" => println!("> {}", b["text"].as_str().unwrap_or("")),
            "event.text" if b["final"] == true => println!("{}", b["text"].as_str().unwrap_or("")),
            "event.tool_call" => println!(
                "[tool {} {}]",
                b["name"].as_str().unwrap_or("?"),
                b["input"]
            ),
            "event.status" if b["phase"] == "replay_end" => eprintln!(
                "[{} blocks{}; usage {} in, {} out]",
                b["count"],
                if b["truncated"] == true {
                    ", older ones left out"
                } else {
                    ""
                },
                b["usage"]["input_tokens"].as_u64().unwrap_or(0),
                b["usage"]["output_tokens"].as_u64().unwrap_or(0)
            ),
            _ => {}
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `discover`.
pub(crate) async fn discover(args: DiscoverArgs, nats: &NatsConnect) -> Result<ExitCode, String> {
    let caller = Caller::connect_with(nats, CALLER_NAME).await.map_err(err)?;
    let card = caller.discover(&args.identity).await.map_err(err)?;
    println!(
        "{}",
        serde_json::to_string_pretty(&card).unwrap_or_default()
    );
    Ok(ExitCode::SUCCESS)
}
