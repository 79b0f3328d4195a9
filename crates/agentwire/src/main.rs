//! `agentwire`: the daemon (`serve`) and the command-line client (`ask`, `cancel`, `info` over NIP-XX;
//! `ask --nats` or `--nats-context`, `cancel --nats`, `read`, `discover`, `session` over fisk-ai; `jobs`
//! for roost; `config` to see the configuration in force).

mod agent_kinds;
mod agents;
mod ask;
mod ask_deadline;
mod cli;
mod closed_pipe;
mod concierge_cli;
mod config;
mod data_dir_lock;
mod fd_limit;
mod fisk_cli;
mod fisk_questions;
mod fronts;
mod http_front;
mod hub_cli;
mod jobs;
mod keys;
mod logging;
mod pruning;
mod rooms;
mod roost_term;
mod serve;
mod serving;
mod session_cli;
mod show_config;
mod tabular;
mod telemetry;
mod turns_cli;

use clap::Parser;
use cli::{Cli, Command};
use std::process::ExitCode;

fn main() -> ExitCode {
    // Not a command of the CLI: the daemon runs this binary so to hold a terminal agent's terminal.
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new(roost_term::ARG)) {
        return roost_term::run(std::env::args_os().skip(2));
    }
    let cli = Cli::parse();
    // A client command whose reader went away stops quietly; the daemon keeps its default (a closed stdout
    // must not stop it).
    if !matches!(cli.command, Command::Serve(_)) {
        closed_pipe::exit_quietly_when_closed();
    }
    // Generated from the definitions alone: no config, log or runtime.
    match &cli.command {
        Command::Completions { shell } => return cli::completions(*shell),
        Command::Man { dir } => return cli::man(dir.as_deref()).unwrap_or_else(|e| fail(&e)),
        _ => {}
    }
    // The file first: its `[log]` section shapes the log, and a file that cannot be read is said plainly.
    let file = match &cli.config {
        Some(p) => match config::load(p) {
            Ok(f) => f,
            Err(e) => return fail(&e.to_string()),
        },
        None => config::FileConfig::default(),
    };
    if let Err(e) = logging::init(cli.log.as_deref(), cli.log_format, &file.log) {
        return fail(&e);
    }
    match run(cli, file) {
        Ok(code) => code,
        Err(e) => fail(&e),
    }
}

/// Says why the command could not run, and exits 1.
fn fail(why: &str) -> ExitCode {
    eprintln!("agentwire: {why}");
    ExitCode::from(1)
}

fn run(cli: Cli, mut file: config::FileConfig) -> Result<ExitCode, String> {
    let Cli {
        data_dir: data_dir_flag,
        command,
        ..
    } = cli;
    // A client command's --nats-context is over `[nats] context` for every NATS connection it makes.
    config::use_nats_context(&mut file, command.nats_context())?;
    let env = config::Environment::from_process();
    // What `serve` runs with, and what `config` prints: resolved in one place, before anything starts.
    let in_force = |flags: &config::ServeFlags| {
        config::in_force(config::Sources {
            data_dir: data_dir_flag.as_deref(),
            flags,
            file: &file,
            env: &env,
        })
        .map_err(|e| e.to_string())
    };
    let data_dir = config::data_dir(data_dir_flag.as_deref(), &file, &env);
    let roost_socket = file
        .roost
        .socket
        .clone()
        .unwrap_or_else(|| env.default_roost_socket(&data_dir));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    rt.block_on(async {
        match command {
            Command::Serve(flags) => serve::run(in_force(&flags)?).await,
            Command::Config(a) => show_config::run(a.json, &in_force(&a.serve)?),
            Command::Ask { args: a, context } => {
                let nats = match (&a.nats, &context.nats_context, a.fisk_flag()) {
                    (Some(_), ..) | (None, Some(_), _) => {
                        Some(config::client_nats_in_force(a.nats.as_deref(), &file)?)
                    }
                    // A fisk-ai flag alone: the NATS servers of the serve on this data dir.
                    (None, None, Some(flag)) => {
                        let list = serving::local_nats(&data_dir, flag)?;
                        Some(config::client_nats(&list, &file)?)
                    }
                    (None, None, None) => None,
                };
                ask::ask(a, nats, data_dir).await
            }
            Command::Cancel { args: a, context } => {
                let nats = match (&a.nats, &context.nats_context) {
                    (None, None) => None,
                    _ => Some(config::client_nats_in_force(a.nats.as_deref(), &file)?),
                };
                ask::cancel(a, nats, data_dir).await
            }
            Command::Info(a) => ask::info(a, data_dir).await,
            Command::Attach(a) => ask::attach(a, data_dir).await,
            Command::Sessions(a) => ask::sessions(a, data_dir).await,
            Command::Read { args: a, .. } => {
                let nats = config::client_nats_in_force(a.nats.as_deref(), &file)?;
                fisk_cli::read(a, &nats).await
            }
            Command::Discover { args: a, .. } => {
                let nats = config::client_nats_in_force(a.nats.as_deref(), &file)?;
                fisk_cli::discover(a, &nats).await
            }
            Command::Jobs(a) => jobs::run(a, &data_dir, roost_socket).await,
            Command::Concierge(a) => concierge_cli::run(a, &data_dir, roost_socket).await,
            Command::Turns(a) => turns_cli::turns(a, data_dir).await,
            Command::Watch(a) => turns_cli::watch(a, data_dir).await,
            Command::Hub(a) => hub_cli::hub(a, data_dir).await,
            Command::Session { args: a, .. } => session_cli::run(a, &data_dir, &file, &env).await,
            Command::Whoami(a) => rooms::whoami(a, &data_dir),
            Command::Room(a) => rooms::room(a, &data_dir).await,
            Command::Task(a) => rooms::task(a, &data_dir).await,
            Command::Cards(a) => rooms::cards(a, &data_dir).await,
            Command::Answer(a) => rooms::answer(a, &data_dir).await,
            Command::Completions { .. } | Command::Man { .. } => Ok(ExitCode::SUCCESS),
        }
    })
}
