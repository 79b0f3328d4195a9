//! `agentwire ask`, `cancel` and `info`: a NIP-XX client on the command line (`--nats` hands `ask` and
//! `cancel` to the fisk-ai caller). `ask` names the session it asks in, and `cancel` says what became of the
//! run: cancelled, already ended (and how), or unknown.

use crate::config;
use crate::keys;
use crate::tabular::printable;
use agentwire_nostr::client::{
    self, AskRequest, CancelOutcome, CancelReason, CancelRequest, ClientError, Terminal, Update,
    CANCEL_CONFIRM_WAIT,
};
use agentwire_nostr::crypto::Crypto;
use agentwire_nostr::nipxx::payload::{InfoPayload, PromptPayload};
use agentwire_nostr::nipxx::tags;
use agentwire_nostr::relay_conn::{Incoming, RelayConn};
use clap::Args;
use nostr::prelude::{EventId, PublicKey};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Exit code when the agent answered with ai.error.
pub(crate) const EXIT_AGENT_ERROR: u8 = 2;
/// Exit code when no terminal arrived in time.
pub(crate) const EXIT_TIMEOUT: u8 = 3;
/// Exit code after Ctrl-C (128 + SIGINT, as shells report it); the run was sent an ai.cancel.
pub(crate) const EXIT_INTERRUPTED: u8 = 130;
/// Exit code of `cancel` for a run nobody knows (no prompt or events on the relay, no answer from the agent;
/// under fisk-ai, no worker running it).
pub(crate) const EXIT_UNKNOWN_RUN: u8 = 4;

/// The characters of a prompt `sessions` shows: its first line, cut to fit a terminal's row.
const PROMPT_COLUMN_CHARS: usize = 60;
/// The heading of the options only NIP-XX uses.
const NIPXX: &str = "NIP-XX options";
/// The heading of the options only fisk-ai uses.
const FISK: &str = "fisk-ai options (with --nats or --nats-context)";

/// Where and to whom.
#[derive(Debug, Args)]
pub(crate) struct Target {
    /// The relay (ws:// or wss://). Default: the relay of the `serve` running on the data dir.
    #[arg(long, help_heading = NIPXX, value_parser = config::relay_url)]
    relay: Option<String>,
    /// A PEM file of CA certificates to trust for a wss:// relay, besides Mozilla's roots.
    #[arg(long, help_heading = NIPXX, env = "AGENTWIRE_RELAY_CA_FILE")]
    relay_ca_file: Option<PathBuf>,
    /// The agent (hex, npub, or the name of an agent the local `serve` runs). Default: the local `serve`'s
    /// `--agent` agent.
    #[arg(long, help_heading = NIPXX)]
    agent: Option<String>,
    /// Your key file (hex secret); default `client.key` in the data dir, created on first use.
    #[arg(long, help_heading = NIPXX)]
    key: Option<PathBuf>,
}

/// `ask` flags.
#[derive(Debug, Args)]
pub(crate) struct AskArgs {
    #[command(flatten)]
    target: Target,
    /// The session (`s` tag) to ask in, e.g. one an earlier `ask` printed as `session <tag>`; a bare tag
    /// (`3f9a…`) means `session:3f9a…`. Default `sender:<your pubkey>`: every ask from your key is one
    /// conversation, its history growing.
    #[arg(long, help_heading = NIPXX, value_parser = session_tag)]
    session: Option<String>,
    /// Start a new session (a fresh random tag, printed as `session <tag>` for `--session`).
    #[arg(long, help_heading = NIPXX, conflicts_with_all = ["session", "conversation"])]
    new: bool,
    /// Model to ask for (one the agent's ai.info lists).
    #[arg(long, help_heading = NIPXX)]
    model: Option<String>,
    /// Thinking effort.
    #[arg(long, help_heading = NIPXX, value_parser = clap::builder::PossibleValuesParser::new(agentwire_nostr::nipxx::payload::THINKING_LEVELS))]
    thinking: Option<String>,
    /// Seconds to wait for the answer (at least 1); then the run is cancelled. (With --nats, time spent
    /// answering the agent's questions does not count.)
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..))]
    timeout: u64,
    /// Privacy-first profile: gift-wrap the prompt (NIP-59) and read the wrapped answer. The agent must
    /// announce `supports_nip59`.
    #[arg(long, help_heading = NIPXX)]
    nip59: bool,
    /// fisk-ai: ask a worker on these NATS servers (comma-separated) instead of NIP-XX; `[nats]` in the
    /// config gives credentials and TLS.
    #[arg(long, help_heading = FISK)]
    pub(crate) nats: Option<String>,
    /// fisk-ai: the worker's identity (default: the local serve's). Without --nats: the local serve's NATS
    /// servers.
    #[arg(long, help_heading = FISK)]
    identity: Option<String>,
    /// Continue this fisk-ai conversation (the token a previous `ask --nats` printed). Without --nats: the
    /// local serve's NATS servers.
    #[arg(long, help_heading = FISK)]
    conversation: Option<String>,
    /// fisk-ai: enqueue the prompt as a job on the worker's queue (served with `[nats] jobs = true`) and
    /// wait for its answer however long it queues; --timeout or Ctrl-C before a worker takes it takes it
    /// off the queue. Without --nats: the local serve's NATS servers.
    #[arg(long, help_heading = FISK)]
    queue: bool,
    /// The prompt.
    #[arg(required = true, num_args = 1..)]
    prompt: Vec<String>,
}

impl AskArgs {
    /// The flag that makes this a fisk-ai ask without `--nats` (the NATS servers are then the local
    /// serve's), if any.
    pub(crate) fn fisk_flag(&self) -> Option<&'static str> {
        match (self.queue, &self.conversation, &self.identity) {
            (true, _, _) => Some("--queue"),
            (_, Some(_), _) => Some("--conversation"),
            (_, _, Some(_)) => Some("--identity"),
            _ => None,
        }
    }
}

/// `cancel` flags.
#[derive(Debug, Args)]
pub(crate) struct CancelArgs {
    #[command(flatten)]
    target: Target,
    /// The session tag the run used.
    #[arg(long, help_heading = NIPXX, value_parser = session_tag)]
    session: Option<String>,
    /// Gift-wrap the cancel (NIP-59), for a run that was asked with `--nip59`.
    #[arg(long, help_heading = NIPXX)]
    nip59: bool,
    /// fisk-ai: cancel a run on these NATS servers (comma-separated) instead of NIP-XX; `[nats]` in the
    /// config gives credentials and TLS.
    #[arg(long, help_heading = FISK)]
    pub(crate) nats: Option<String>,
    /// fisk-ai: the worker's identity (default: the local serve's).
    #[arg(long, help_heading = FISK, requires = "nats")]
    identity: Option<String>,
    /// The run: its prompt event id, or with --nats its request (both printed by `ask` as `run <id>`).
    #[arg(value_name = "RUN")]
    prompt_id: String,
}

/// `attach` flags.
#[derive(Debug, Args)]
pub(crate) struct AttachArgs {
    #[command(flatten)]
    target: Target,
    /// Seconds to wait for the run's end (at least 1).
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..))]
    timeout: u64,
    /// The run: its prompt event id (`ask` printed it as `run <id>`).
    #[arg(value_name = "RUN")]
    prompt_id: String,
}

/// A `--session` as the `s` tag it names: a tag with a `prefix:` is taken as it is (`session:…`, `sender:…`
/// or another client's), and a bare one is the hex part of a `session:<hex>` tag as `ask --new` prints it, so
/// that typing only that part continues the session instead of silently starting another.
fn session_tag(arg: &str) -> Result<String, String> {
    let arg = arg.trim();
    if arg.is_empty() {
        return Err(
            "a session tag is not empty (e.g. session:3f9a…, as `ask --new` prints it)".into(),
        );
    }
    Ok(match arg.contains(':') {
        true => arg.to_string(),
        false => format!("session:{arg}"),
    })
}

/// `sessions` flags.
#[derive(Debug, Args)]
pub(crate) struct SessionsArgs {
    #[command(flatten)]
    target: Target,
    /// List the runs of this session (its `s` tag) instead of the sessions.
    #[arg(long, help_heading = NIPXX, value_parser = session_tag)]
    session: Option<String>,
}

/// `info` flags.
#[derive(Debug, Args)]
pub(crate) struct InfoArgs {
    #[command(flatten)]
    target: Target,
}

/// Where the agent is and who it is: `--relay` and `--agent`, else what the `serve` running on the data dir
/// wrote ([`crate::serving`]); with neither, the user is told that no daemon serves the data dir.
struct Reach {
    relay: String,
    agent: PublicKey,
}

fn reach(target: &Target, data_dir: &Path) -> Result<Reach, String> {
    let serving = crate::serving::Serving::find(data_dir);
    let relay = crate::serving::relay(target.relay.as_deref(), &serving)?;
    let served = serving.as_ref().ok();
    let agent = match (&target.agent, served) {
        (Some(name), Some(s)) if s.agent_named(name).is_some() => {
            keys::parse_public_key(s.agent_named(name).unwrap_or_default())?
        }
        (None, Some(s)) if s.agent_pubkey().is_some() => {
            keys::parse_public_key(s.agent_pubkey().unwrap_or_default())?
        }
        _ => agent_key(target, data_dir)?,
    };
    Ok(Reach { relay, agent })
}

/// The fisk-ai worker to ask: `--identity`, else the one the `serve` running on the data dir serves.
fn fisk_identity(flag: Option<&str>, data_dir: &Path) -> Result<String, String> {
    if let Some(identity) = flag {
        return Ok(identity.to_string());
    }
    match crate::serving::Serving::find(data_dir) {
        Ok(s) => s.nats_identity().map(str::to_string).ok_or_else(|| {
            "fisk-ai (--nats or --nats-context) needs --identity NAME (the local serve runs no fisk-ai worker)".to_string()
        }),
        Err(none) => Err(format!(
            "fisk-ai (--nats or --nats-context) needs --identity NAME ({none})"
        )),
    }
}

/// Connects to `relay`, trusting the target's CA file if one is given.
async fn connect(
    target: &Target,
    relay: &str,
) -> Result<(RelayConn, mpsc::Receiver<Incoming>), String> {
    config::install_relay_ca_file(target.relay_ca_file.as_deref())?;
    client::connect(relay).await.map_err(|e| e.to_string())
}

fn client_crypto(target: &Target, data_dir: &Path) -> Result<Arc<Crypto>, String> {
    let keys = crate::rooms::client_keys(target.key.as_deref(), data_dir)?;
    Ok(Arc::new(Crypto::new(keys)))
}

fn agent_key(target: &Target, data_dir: &Path) -> Result<PublicKey, String> {
    match &target.agent {
        // A key, or the name of a further agent the local `serve` runs (its key in the data dir).
        Some(a) => keys::parse_public_key(a).or_else(|e| {
            let by_name = crate::agents::key_file(a);
            let dir = data_dir.join(crate::agents::AGENT_KEYS_DIR);
            let fit = !a.starts_with('.')
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
            match fit {
                true => keys::existing_public_key(&dir, &by_name).ok_or_else(|| {
                    format!(
                        "{e}, nor the name of an agent with a key in {}",
                        dir.display()
                    )
                }),
                false => Err(e),
            }
        }),
        None => {
            keys::existing_public_key(data_dir, crate::agents::AGENT_KEY_FILE).ok_or_else(|| {
                format!(
                    "no --agent given and no agent key in {}",
                    data_dir.display()
                )
            })
        }
    }
}

/// Runs `ask`.
pub(crate) async fn ask(
    args: AskArgs,
    nats: Option<agentwire_fisk::connection::NatsConnect>,
    data_dir: PathBuf,
) -> Result<ExitCode, String> {
    if let Some(nats) = &nats {
        let identity = fisk_identity(args.identity.as_deref(), &data_dir)?;
        let identity = identity.as_str();
        // A fisk-ai ask without --conversation always starts a new conversation: --new has nothing to do.
        let sending = crate::fisk_cli::Sending::Prompt {
            token: args.conversation.as_deref(),
            prompt: &args.prompt.join(" "),
            queued: args.queue,
        };
        return crate::fisk_cli::follow(nats, identity, sending, Duration::from_secs(args.timeout))
            .await;
    }
    let crypto = client_crypto(&args.target, &data_dir)?;
    let Reach { relay, agent } = reach(&args.target, &data_dir)?;
    let (conn, mut incoming) = connect(&args.target, &relay).await?;
    let mut prompt = PromptPayload::new(args.prompt.join(" "));
    prompt.model = args.model.clone();
    prompt.thinking = args.thinking.clone();
    // What the agent takes, read before the prompt goes (the spec's defaults when it publishes no ai.info):
    // a prompt it would refuse is not sent.
    let info = client::info(&conn, &mut incoming, &agent)
        .await
        .map_err(|e| e.to_string())?;
    let info = info.and_then(|ev| InfoPayload::validate(&ev.content).ok());
    let offer = client::Offer::of(info.as_ref());
    if !offer.announced {
        eprintln!("[no ai.info from the agent: assuming streaming, NIP-44 and no tools]");
    }
    offer
        .check(&prompt, args.nip59)
        .map_err(|why| format!("not sent: {why}"))?;
    let live = std::io::stdout().is_terminal();
    let mut streamed = String::new();
    // The session the run joins, named on stderr: the default one keeps every ask from this key in one
    // conversation, which the user should see.
    let session = match args.new {
        true => client::new_session(),
        false => args
            .session
            .clone()
            .unwrap_or_else(|| tags::default_session(&crypto.public_key())),
    };
    // The session is always tagged (the default `sender:<pubkey>` too), so `sessions` and the recovery
    // recipe find it by its `#s`.
    let req = AskRequest {
        agent,
        session: Some(session.clone()),
        prompt,
        timeout: Duration::from_secs(args.timeout),
        wrap: args.nip59,
        settle: client::TERMINAL_SETTLE,
    };
    let sent: std::cell::Cell<Option<EventId>> = std::cell::Cell::new(None);
    let asking = client::ask(
        &conn,
        &mut incoming,
        &crypto,
        req,
        |id| {
            sent.set(Some(*id));
            eprintln!("run {}", id.to_hex());
            eprintln!("session {session}");
        },
        |u| show_update(u, live, &mut streamed),
    );
    let result = tokio::select! {
        r = asking => r,
        _ = tokio::signal::ctrl_c() => {
            // Ctrl-C stops the run, not just the watching: the agent gets an ai.cancel.
            let Some(prompt) = sent.get() else {
                return Ok(ExitCode::from(EXIT_INTERRUPTED));
            };
            if live && !streamed.is_empty() {
                println!();
            }
            let req = CancelRequest {
                agent,
                prompt,
                session: session.clone(),
                wrap: args.nip59,
                reason: CancelReason::UserCancel,
            };
            match client::cancel(&conn, &crypto, &req).await {
                Ok(()) => eprintln!("cancel sent for run {}", prompt.to_hex()),
                Err(e) => eprintln!("agentwire: could not cancel run {}: {e}", prompt.to_hex()),
            }
            return Ok(ExitCode::from(EXIT_INTERRUPTED));
        }
    };
    match result {
        Ok(t) => Ok(show_terminal(t, live, &streamed)),
        Err(ClientError::Timeout(d)) => {
            eprintln!("agentwire: no answer within {d:?}");
            // Given up on, the run is cancelled rather than left running for nobody.
            if let Some(prompt) = sent.get() {
                let req = CancelRequest {
                    agent,
                    prompt,
                    session,
                    wrap: args.nip59,
                    reason: CancelReason::Timeout,
                };
                say_cancelled(
                    client::cancel_run(&conn, &mut incoming, &crypto, &req).await,
                    &prompt,
                );
            }
            Ok(ExitCode::from(EXIT_TIMEOUT))
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Shows one update of a run: its text on stdout as it comes (on a terminal), the rest on stderr.
fn show_update(u: &Update, live: bool, streamed: &mut String) {
    match u {
        Update::Text(t) => {
            streamed.push_str(t);
            if live {
                print!("{}", printable(t));
                let _ = std::io::stdout().flush();
            }
        }
        Update::Status(s) => eprintln!(
            "[{}{}]",
            printable(&s.state),
            s.info
                .as_deref()
                .map(|i| format!(": {}", printable(i)))
                .unwrap_or_default()
        ),
        Update::Tool(t) => {
            let Some(name) = t.name.as_deref() else {
                // A tool call in text form whose text is no tool envelope: its text is all it says.
                let said = t.text.as_deref().unwrap_or_default();
                eprintln!("[tool {}]", printable(said));
                return;
            };
            let none = serde_json::Value::Null;
            match t.phase.as_deref() {
                Some("result") => eprintln!(
                    "{}",
                    printable(&agentwire_core::tool_result_line(
                        name,
                        t.success.unwrap_or(true),
                        t.output.as_ref().unwrap_or(&none)
                    ))
                ),
                _ => eprintln!(
                    "{}",
                    printable(&agentwire_core::tool_start_line(
                        name,
                        t.arguments.as_ref().unwrap_or(&none)
                    ))
                ),
            }
        }
        Update::Thinking(t) => eprintln!("[thinking] {}", printable(t)),
        Update::Gap => eprintln!("[streaming degraded: a delta is missing]"),
        Update::InvalidSequence { seq } => eprintln!(
            "[INVALID_SEQUENCE: the agent's delta seq {seq} breaks the run's order; showing it best-effort]"
        ),
        Update::Terminal => {}
    }
}

/// Shows a run's terminal (the final text from the response, not the stream) and gives the exit code.
fn show_terminal(t: Terminal, live: bool, streamed: &str) -> ExitCode {
    match t {
        Terminal::Response(r) => {
            let text = Terminal::Response(r.clone()).text().unwrap_or_default();
            if live {
                if streamed != text {
                    // The final render comes from the response, not the stream.
                    println!("\n---\n{}", printable(&text));
                } else {
                    println!();
                }
            } else {
                println!("{}", printable(&text));
            }
            if let Some(u) = r.usage {
                eprintln!("[usage: {} in, {} out]", u.input_tokens, u.output_tokens);
            }
            ExitCode::SUCCESS
        }
        Terminal::Error(e) => {
            if live && !streamed.is_empty() {
                println!();
            }
            let retry = e
                .retry_after
                .map(|s| format!(" (retry after {s} s)"))
                .unwrap_or_default();
            eprintln!(
                "error {}: {}{retry}",
                printable(e.code.as_str()),
                printable(&e.message)
            );
            ExitCode::from(EXIT_AGENT_ERROR)
        }
    }
}

/// Runs `attach`: finds run `RUN` on the relay (its events so far and those still coming) and shows it to
/// its end as `ask` would.
pub(crate) async fn attach(args: AttachArgs, data_dir: PathBuf) -> Result<ExitCode, String> {
    let crypto = client_crypto(&args.target, &data_dir)?;
    let prompt = EventId::from_hex(&args.prompt_id)
        .map_err(|_| format!("{:?} is not an event id", args.prompt_id))?;
    let Reach { relay, agent } = reach(&args.target, &data_dir)?;
    let (conn, mut incoming) = connect(&args.target, &relay).await?;
    let live = std::io::stdout().is_terminal();
    let mut streamed = String::new();
    let timeout = Duration::from_secs(args.timeout);
    match client::attach(&conn, &mut incoming, &crypto, agent, prompt, timeout, |u| {
        show_update(u, live, &mut streamed)
    })
    .await
    {
        Ok(t) => Ok(show_terminal(t, live, &streamed)),
        Err(ClientError::Timeout(d)) => {
            if live && !streamed.is_empty() {
                println!();
            }
            eprintln!(
                "agentwire: run {} has not ended within {d:?} (still running, or not a run of yours on {relay})",
                prompt.to_hex()
            );
            Ok(ExitCode::from(EXIT_TIMEOUT))
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Runs `sessions`: your sessions with the agent (newest first, with their runs and the last prompt), or
/// with `--session` the runs in one.
pub(crate) async fn sessions(args: SessionsArgs, data_dir: PathBuf) -> Result<ExitCode, String> {
    let crypto = client_crypto(&args.target, &data_dir)?;
    let Reach { relay, agent } = reach(&args.target, &data_dir)?;
    let (conn, mut incoming) = connect(&args.target, &relay).await?;
    let sent = client::sent_prompts(
        &conn,
        &mut incoming,
        &crypto,
        agent,
        args.session.as_deref(),
    )
    .await
    .map_err(|e| e.to_string())?;
    let now = nostr::prelude::Timestamp::now().as_secs();
    let when = |at: nostr::prelude::Timestamp| crate::tabular::ago(at.as_secs(), now);
    if sent.is_empty() {
        eprintln!(
            "no prompts from {} to this agent on {relay}{}",
            crypto.public_key().to_hex(),
            args.session
                .as_deref()
                .map(|s| format!(" in session {s}"))
                .unwrap_or_default()
        );
        return Ok(ExitCode::SUCCESS);
    }
    // A peer's text shown at a terminal: one short line, control characters out.
    let line = |p: &client::SentPrompt| {
        crate::tabular::cell(
            &printable(p.first_line.as_deref().unwrap_or("(does not open)")),
            PROMPT_COLUMN_CHARS,
        )
    };
    let mut rows: Vec<Vec<String>> = Vec::new();
    let header: &[&str] = match &args.session {
        Some(_) => {
            for p in &sent {
                rows.push(vec![p.id.to_hex(), when(p.at), line(p)]);
            }
            &["RUN", "SENT", "PROMPT"]
        }
        None => {
            let mut seen: Vec<&str> = Vec::new();
            for p in &sent {
                if seen.contains(&p.session.as_str()) {
                    continue;
                }
                seen.push(&p.session);
                let runs = sent.iter().filter(|q| q.session == p.session).count();
                rows.push(vec![
                    printable(&p.session),
                    runs.to_string(),
                    when(p.at),
                    p.id.to_hex(),
                    line(p),
                ]);
            }
            &["SESSION", "RUNS", "LAST", "LAST RUN", "LAST PROMPT"]
        }
    };
    print!("{}", crate::tabular::columns(header, &rows));
    if sent.len() >= client::MAX_PROMPTS_LISTED {
        eprintln!("(the newest {} prompts only)", client::MAX_PROMPTS_LISTED);
    }
    Ok(ExitCode::SUCCESS)
}

/// Says what became of a cancelled run, and the exit code that goes with it: 0 cancelled or already ended,
/// [`EXIT_TIMEOUT`] when the agent did not confirm, [`EXIT_UNKNOWN_RUN`] for a run nobody knows.
fn say_cancelled(outcome: Result<CancelOutcome, ClientError>, prompt: &EventId) -> ExitCode {
    let run = prompt.to_hex();
    match outcome {
        Ok(CancelOutcome::Cancelled) => {
            eprintln!("cancelled run {run}");
            ExitCode::SUCCESS
        }
        Ok(CancelOutcome::AlreadyEnded(t)) => {
            let how = match t {
                Terminal::Response(_) => "answered".to_string(),
                Terminal::Error(e) => {
                    format!(
                        "error {}: {}",
                        printable(e.code.as_str()),
                        printable(&e.message)
                    )
                }
            };
            eprintln!("run {run} already ended: {how}");
            ExitCode::SUCCESS
        }
        Ok(CancelOutcome::Unconfirmed) => {
            eprintln!(
                "agentwire: cancel sent for run {run}; the agent has not confirmed it within \
                 {CANCEL_CONFIRM_WAIT:?}"
            );
            ExitCode::from(EXIT_TIMEOUT)
        }
        Ok(CancelOutcome::Unknown) => {
            eprintln!(
                "agentwire: unknown run {run}: the relay has no events of it and the agent did not \
                 answer the cancel"
            );
            ExitCode::from(EXIT_UNKNOWN_RUN)
        }
        Err(e) => {
            eprintln!("agentwire: could not cancel run {run}: {e}");
            ExitCode::from(1)
        }
    }
}

/// Runs `cancel`.
pub(crate) async fn cancel(
    args: CancelArgs,
    nats: Option<agentwire_fisk::connection::NatsConnect>,
    data_dir: PathBuf,
) -> Result<ExitCode, String> {
    if let Some(nats) = &nats {
        let identity = fisk_identity(args.identity.as_deref(), &data_dir)?;
        let identity = identity.as_str();
        return crate::fisk_cli::cancel(nats, identity, &args.prompt_id).await;
    }
    let crypto = client_crypto(&args.target, &data_dir)?;
    let prompt = EventId::from_hex(&args.prompt_id)
        .map_err(|_| format!("{:?} is not an event id", args.prompt_id))?;
    let Reach { relay, agent } = reach(&args.target, &data_dir)?;
    let (conn, mut incoming) = connect(&args.target, &relay).await?;
    let session = args
        .session
        .clone()
        .unwrap_or_else(|| tags::default_session(&crypto.public_key()));
    let req = CancelRequest {
        agent,
        prompt,
        session,
        wrap: args.nip59,
        reason: CancelReason::UserCancel,
    };
    Ok(say_cancelled(
        client::cancel_run(&conn, &mut incoming, &crypto, &req).await,
        &prompt,
    ))
}

/// Runs `info`.
pub(crate) async fn info(args: InfoArgs, data_dir: PathBuf) -> Result<ExitCode, String> {
    let Reach { relay, agent } = reach(&args.target, &data_dir)?;
    let (conn, mut incoming) = connect(&args.target, &relay).await?;
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
            eprintln!("agentwire: no ai.info from {} on {}", agent.to_hex(), relay);
            Ok(ExitCode::from(EXIT_AGENT_ERROR))
        }
    }
}
