//! `agentwire ask`, `cancel` and `info`: a NIP-XX client on the command line.

use crate::config;
use crate::keys;
use agentwire_nostr::client::{self, AskRequest, ClientError, Terminal, Update};
use agentwire_nostr::crypto::Crypto;
use agentwire_nostr::nipxx::payload::PromptPayload;
use clap::Args;
use nostr::prelude::{EventId, PublicKey};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Exit code when the agent answered with ai.error.
pub(crate) const EXIT_AGENT_ERROR: u8 = 2;
/// Exit code when no terminal arrived in time.
pub(crate) const EXIT_TIMEOUT: u8 = 3;

/// Where and to whom.
#[derive(Debug, Args)]
pub(crate) struct Target {
    /// The relay.
    #[arg(long, default_value = config::DEFAULT_RELAY_URL)]
    relay: String,
    /// The agent (hex or npub). Default: the agent key in the data dir (the local `serve`).
    #[arg(long)]
    agent: Option<String>,
    /// Your key file (hex secret); default `client.key` in the data dir, created on first use.
    #[arg(long)]
    key: Option<PathBuf>,
}

/// `ask` flags.
#[derive(Debug, Args)]
pub(crate) struct AskArgs {
    #[command(flatten)]
    target: Target,
    /// Session tag (`s`); default `sender:<your pubkey>`.
    #[arg(long)]
    session: Option<String>,
    /// Model to ask for.
    #[arg(long)]
    model: Option<String>,
    /// Thinking effort: low, medium, high or max.
    #[arg(long)]
    thinking: Option<String>,
    /// Seconds to wait for the answer.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// The prompt.
    #[arg(required = true, num_args = 1..)]
    prompt: Vec<String>,
}

/// `cancel` flags.
#[derive(Debug, Args)]
pub(crate) struct CancelArgs {
    #[command(flatten)]
    target: Target,
    /// The session tag the run used.
    #[arg(long)]
    session: Option<String>,
    /// The run's prompt event id (printed by `ask`).
    prompt_id: String,
}

/// `info` flags.
#[derive(Debug, Args)]
pub(crate) struct InfoArgs {
    #[command(flatten)]
    target: Target,
}

fn client_crypto(target: &Target, data_dir: &Path) -> Result<Arc<Crypto>, String> {
    let keys = match &target.key {
        Some(p) => {
            let t = std::fs::read_to_string(p)
                .map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            nostr::prelude::Keys::parse(t.trim()).map_err(|e| format!("{}: {e}", p.display()))?
        }
        None => keys::load_or_create(data_dir, "client.key")?,
    };
    Ok(Arc::new(Crypto::new(keys)))
}

fn agent_key(target: &Target, data_dir: &Path) -> Result<PublicKey, String> {
    match &target.agent {
        Some(a) => keys::parse_public_key(a),
        None => keys::existing_public_key(data_dir, "agent.key").ok_or_else(|| {
            format!(
                "no --agent given and no agent key in {}",
                data_dir.display()
            )
        }),
    }
}

/// Runs `ask`.
pub(crate) async fn ask(args: AskArgs, data_dir: PathBuf) -> Result<ExitCode, String> {
    let crypto = client_crypto(&args.target, &data_dir)?;
    let agent = agent_key(&args.target, &data_dir)?;
    let (conn, mut incoming) = client::connect(&args.target.relay)
        .await
        .map_err(|e| e.to_string())?;
    let mut prompt = PromptPayload::new(args.prompt.join(" "));
    prompt.model = args.model.clone();
    prompt.thinking = args.thinking.clone();
    let live = std::io::stdout().is_terminal();
    let mut streamed = String::new();
    let req = AskRequest {
        agent,
        session: args.session.clone(),
        prompt,
        timeout: Duration::from_secs(args.timeout),
    };
    let result = client::ask(
        &conn,
        &mut incoming,
        &crypto,
        req,
        |id| eprintln!("run {}", id.to_hex()),
        |u| match u {
            Update::Text(t) => {
                streamed.push_str(t);
                if live {
                    print!("{t}");
                    let _ = std::io::stdout().flush();
                }
            }
            Update::Status(s) => eprintln!(
                "[{}{}]",
                s.state,
                s.info
                    .as_deref()
                    .map(|i| format!(": {i}"))
                    .unwrap_or_default()
            ),
            Update::Tool(t) => eprintln!(
                "[tool {} {}{}]",
                t.name.as_deref().unwrap_or("?"),
                t.phase.as_deref().unwrap_or(""),
                t.output
                    .as_ref()
                    .or(t.arguments.as_ref())
                    .map(|v| format!(" {v}"))
                    .unwrap_or_default()
            ),
            Update::Gap => eprintln!("[streaming degraded: a delta is missing]"),
            Update::Terminal => {}
        },
    )
    .await;
    match result {
        Ok(Terminal::Response(r)) => {
            let text = Terminal::Response(r.clone()).text().unwrap_or_default();
            if live {
                if streamed != text {
                    // The final render comes from the response, not the stream.
                    println!("\n---\n{text}");
                } else {
                    println!();
                }
            } else {
                println!("{text}");
            }
            if let Some(u) = r.usage {
                eprintln!("[usage: {} in, {} out]", u.input_tokens, u.output_tokens);
            }
            Ok(ExitCode::SUCCESS)
        }
        Ok(Terminal::Error(e)) => {
            if live && !streamed.is_empty() {
                println!();
            }
            let retry = e
                .retry_after
                .map(|s| format!(" (retry after {s} s)"))
                .unwrap_or_default();
            eprintln!("error {}: {}{retry}", e.code, e.message);
            Ok(ExitCode::from(EXIT_AGENT_ERROR))
        }
        Err(ClientError::Timeout(d)) => {
            eprintln!("agentwire: no answer within {d:?}");
            Ok(ExitCode::from(EXIT_TIMEOUT))
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Runs `cancel`.
pub(crate) async fn cancel(args: CancelArgs, data_dir: PathBuf) -> Result<ExitCode, String> {
    let crypto = client_crypto(&args.target, &data_dir)?;
    let agent = agent_key(&args.target, &data_dir)?;
    let prompt = EventId::from_hex(&args.prompt_id)
        .map_err(|_| format!("{:?} is not an event id", args.prompt_id))?;
    let (conn, _incoming) = client::connect(&args.target.relay)
        .await
        .map_err(|e| e.to_string())?;
    let session = args
        .session
        .clone()
        .unwrap_or_else(|| format!("sender:{}", crypto.public_key().to_hex()));
    client::cancel(&conn, &crypto, &agent, &prompt, &session)
        .await
        .map_err(|e| e.to_string())?;
    eprintln!("cancel sent for run {}", prompt.to_hex());
    Ok(ExitCode::SUCCESS)
}

/// Runs `info`.
pub(crate) async fn info(args: InfoArgs, data_dir: PathBuf) -> Result<ExitCode, String> {
    let agent = agent_key(&args.target, &data_dir)?;
    let (conn, mut incoming) = client::connect(&args.target.relay)
        .await
        .map_err(|e| e.to_string())?;
    match client::info(&conn, &mut incoming, &agent)
        .await
        .map_err(|e| e.to_string())?
    {
        Some(ev) => {
            let v: serde_json::Value = serde_json::from_str(&ev.content).unwrap_or_default();
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            Ok(ExitCode::SUCCESS)
        }
        None => {
            eprintln!(
                "agentwire: no ai.info from {} on {}",
                agent.to_hex(),
                args.target.relay
            );
            Ok(ExitCode::from(EXIT_AGENT_ERROR))
        }
    }
}
