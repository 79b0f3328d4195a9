//! `agentwire`: the daemon (`serve`) and the command-line client (`ask`, `cancel`, `info` over NIP-XX;
//! `ask --nats`, `read`, `discover` over fisk-ai).

mod ask;
mod config;
mod fisk_cli;
mod jobs;
mod keys;
mod serve;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// Puts AI agents on the wire.
#[derive(Debug, Parser)]
#[command(name = "agentwire", version, about)]
struct Cli {
    /// A TOML config file; flags override its keys.
    #[arg(long, global = true, env = "AGENTWIRE_CONFIG")]
    config: Option<PathBuf>,
    /// The data directory (keys, journal, relay events). Default: $XDG_DATA_HOME/agentwire.
    #[arg(long, global = true, env = "AGENTWIRE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Log filter for stderr (e.g. `info`, `agentwire=debug`); RUST_LOG also works.
    #[arg(long, global = true, default_value = "info")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the daemon: the embedded relay and the agent behind NIP-XX.
    Serve(serve::ServeArgs),
    /// Prompt an agent over NIP-XX and stream the answer.
    Ask(ask::AskArgs),
    /// Cancel a run you started.
    Cancel(ask::CancelArgs),
    /// Print an agent's ai.info.
    Info(ask::InfoArgs),
    /// Read a fisk-ai conversation back (`request.read`).
    Read(fisk_cli::ReadArgs),
    /// Ask a fisk-ai worker what it is (its agent card).
    Discover(fisk_cli::DiscoverArgs),
    /// Control the roost supervisor's jobs.
    Jobs(jobs::JobsArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| cli.log.clone());
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(&filter).unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let file = match &cli.config {
        Some(p) => match config::load(p) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("agentwire: {e}");
                return ExitCode::from(1);
            }
        },
        None => config::FileConfig::default(),
    };
    let data_dir = cli
        .data_dir
        .clone()
        .or(file.data_dir.clone())
        .unwrap_or_else(config::default_data_dir);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("agentwire: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = rt.block_on(async move {
        match cli.command {
            Command::Serve(a) => serve::run(a, file, data_dir).await,
            Command::Ask(a) => ask::ask(a, data_dir).await,
            Command::Cancel(a) => ask::cancel(a, data_dir).await,
            Command::Info(a) => ask::info(a, data_dir).await,
            Command::Read(a) => fisk_cli::read(a).await,
            Command::Discover(a) => fisk_cli::discover(a).await,
            Command::Jobs(a) => jobs::run(a, data_dir).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("agentwire: {e}");
            ExitCode::from(1)
        }
    }
}
