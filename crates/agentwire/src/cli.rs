//! The command line's shape: the global options, every subcommand with its help and one example, and what
//! is generated from the same definitions (`completions <shell>`, `man`).

use crate::{
    ask, concierge_cli, config, fisk_cli, hub_cli, jobs, logging, rooms, session_cli, show_config,
    turns_cli,
};
use clap::builder::Resettable;
use clap::{ArgGroup, CommandFactory, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// The heading the options every command takes are shown under, once, after the command's own.
const GLOBAL: &str = "Global options";
/// The heading of `ask`'s and `cancel`'s fisk-ai options (as theirs in [`ask`]), so that --nats-context
/// is listed among them.
const FISK: &str = "fisk-ai options (with --nats or --nats-context)";
/// The flags that make `cancel` a fisk-ai cancel.
const FISK_SERVERS: &str = "fisk_servers";

/// Puts AI agents on the wire.
#[derive(Debug, Parser)]
#[command(name = "agentwire", version, about)]
pub(crate) struct Cli {
    /// A TOML config file; flags override its keys.
    #[arg(long, global = true, help_heading = GLOBAL, env = "AGENTWIRE_CONFIG")]
    pub(crate) config: Option<PathBuf>,
    /// The data directory (keys, journal, relay events). Default: $XDG_DATA_HOME/agentwire.
    #[arg(long, global = true, help_heading = GLOBAL, env = "AGENTWIRE_DATA_DIR")]
    pub(crate) data_dir: Option<PathBuf>,
    /// Log filter for stderr: a level (`info`, `debug`) or `target=level` pairs (`info,agentwire=debug`).
    /// Default: RUST_LOG, else `[log] filter`, else `info`.
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub(crate) log: Option<String>,
    /// Log lines as `text` for a person or `json` (one object a line) for a log collector. Default:
    /// `[log] format`, else text.
    #[arg(long, global = true, help_heading = GLOBAL, value_enum)]
    pub(crate) log_format: Option<logging::LogFormat>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the daemon: the embedded relay, the agents behind every front (NIP-XX, fisk-ai with --nats, task
    /// cards with [tasks], roost), the roost supervisor and the HTTP server.
    #[command(after_help = "Example:\n  agentwire serve --agent local --config agentwire.toml")]
    Serve(config::ServeFlags),
    /// Print the configuration `serve` would run with (flags over --config over defaults), as TOML.
    #[command(after_help = "Example:\n  agentwire --config agentwire.toml config --agent local")]
    Config(show_config::ConfigArgs),
    /// Prompt an agent and stream the answer: over NIP-XX, or over fisk-ai with --nats or --nats-context.
    #[command(
        after_help = "Examples:\n  agentwire ask \"what is 6*7?\"\n  agentwire ask --nats nats://127.0.0.1:4222 \"what is 6*7?\"\n  agentwire ask --nats-context prod --identity demo \"what is 6*7?\""
    )]
    Ask {
        #[command(flatten)]
        args: ask::AskArgs,
        // With it, a fisk-ai ask even without --nats (the servers are then `[nats] url`, else its url).
        #[command(flatten, next_help_heading = FISK)]
        context: fisk_cli::NatsContextArg,
    },
    /// Cancel a run you started, and say what became of it.
    #[command(
        after_help = "Example (the id `ask` printed as `run <id>`):\n  agentwire cancel 5c1f…e2",
        // --identity is fisk-ai's: with --nats or --nats-context.
        group = ArgGroup::new(FISK_SERVERS).args(["nats", "nats_context"]).multiple(true),
        mut_arg("identity", |a| a.requires(Resettable::Reset).requires(FISK_SERVERS)),
    )]
    Cancel {
        #[command(flatten)]
        args: ask::CancelArgs,
        // With it, a fisk-ai cancel even without --nats.
        #[command(flatten, next_help_heading = FISK)]
        context: fisk_cli::NatsContextArg,
    },
    /// Print an agent's ai.info (NIP-XX).
    #[command(after_help = "Example:\n  agentwire info --agent shout")]
    Info(ask::InfoArgs),
    /// Re-attach to a NIP-XX run (yours, by its prompt id) and show it to its end, as `ask` would.
    #[command(
        after_help = "Example (the id `ask` printed as `run <id>`):\n  agentwire attach 5c1f…e2"
    )]
    Attach(ask::AttachArgs),
    /// Your NIP-XX sessions with the agent (found on the relay by their `s` tags), or the runs in one.
    #[command(
        after_help = "Examples:\n  agentwire sessions\n  agentwire sessions --session session:5c1f…  # its runs, for `attach`"
    )]
    Sessions(ask::SessionsArgs),
    /// Read a fisk-ai conversation back (`request.read`).
    #[command(
        after_help = "Example (the token `ask --nats` printed):\n  agentwire read --nats nats://127.0.0.1:4222 --identity demo <token>"
    )]
    Read {
        #[command(flatten)]
        args: fisk_cli::ReadArgs,
        #[command(flatten)]
        context: fisk_cli::NatsContextArg,
    },
    /// Ask a fisk-ai worker what it is (its agent card).
    #[command(
        after_help = "Examples:\n  agentwire discover --nats nats://127.0.0.1:4222 demo\n  agentwire discover --nats-context prod demo"
    )]
    Discover {
        #[command(flatten)]
        args: fisk_cli::DiscoverArgs,
        #[command(flatten)]
        context: fisk_cli::NatsContextArg,
    },
    /// The fisk-ai conversations in this data dir's journal, for its operator: list, show, answer a
    /// parked call, remove.
    #[command(
        after_help = "Examples:\n  agentwire session list\n  agentwire session show fisk:5c1f…e2\n  agentwire session answer <token> call_1 green\n  agentwire session rm fisk:5c1f…e2",
        // As its --nats: given before or after the subcommand.
        mut_arg("nats_context", |a| a.global(true)),
    )]
    Session {
        #[command(flatten)]
        args: session_cli::SessionArgs,
        #[command(flatten)]
        context: fisk_cli::NatsContextArg,
    },
    /// Control the roost supervisor's jobs.
    #[command(
        after_help = "Example:\n  agentwire jobs dispatch coder \"fix the failing test\" --name fix-1"
    )]
    Jobs(jobs::JobsArgs),
    /// The roost concierge: turn it on or off, ask it, set its policy, keep standing orders.
    #[command(
        after_help = "Example:\n  agentwire concierge on && agentwire concierge ask \"what needs me?\""
    )]
    Concierge(concierge_cli::ConciergeArgs),
    /// List the daemon's recent turns, of every agent and front (the turn API).
    #[command(after_help = "Example:\n  agentwire turns --protocol fisk --state running")]
    Turns(turns_cli::TurnsArgs),
    /// The hub page: print its address (with the token) and open it in a browser when one is at hand.
    #[command(after_help = "Example:\n  agentwire hub --no-open")]
    Hub(hub_cli::HubArgs),
    /// Follow one turn as `ask` shows it, or every turn's events (the turn API).
    #[command(after_help = "Example (an id `turns` listed):\n  agentwire watch nipxx:5c1f…e2")]
    Watch(turns_cli::WatchArgs),
    /// Your client key (npub and hex), to put in a room's `members` or `[tasks] allowed`.
    #[command(after_help = "Example:\n  agentwire whoami")]
    Whoami(rooms::WhoamiArgs),
    /// The relay's rooms, and NIP-29 moderation for its admins (create a room, add members).
    #[command(
        after_help = "Example:\n  agentwire room create lab --closed && agentwire room add-member lab npub1…"
    )]
    Room(rooms::RoomArgs),
    /// Give the agent a task card in a room and follow it to its end, answering its questions here.
    #[command(
        after_help = "Example:\n  agentwire task --room lab \"summarise yesterday's build failures\""
    )]
    Task(rooms::TaskArgs),
    /// A room's open question cards and running tasks.
    #[command(after_help = "Example:\n  agentwire cards --room lab")]
    Cards(rooms::CardsArgs),
    /// Answer a question card (an option's number, id or label, or text).
    #[command(after_help = "Example (a card `cards` listed):\n  agentwire answer 3f9a…c1 2")]
    Answer(rooms::AnswerArgs),
    /// Print a shell's completion script for agentwire.
    #[command(
        after_help = "Example (bash):\n  agentwire completions bash > ~/.local/share/bash-completion/completions/agentwire"
    )]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print agentwire's man page (roff), or write a page per command, from the same definitions as this help.
    #[command(
        after_help = "Examples:\n  agentwire man > agentwire.1 && man ./agentwire.1\n  agentwire man --dir /usr/local/share/man/man1"
    )]
    Man {
        /// Write agentwire.1 and a page per command (agentwire-ask.1, …) into this directory.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

impl Command {
    /// The `--nats-context` of a fisk-ai client command (`serve` reads its own with its other flags).
    pub(crate) fn nats_context(&self) -> Option<&str> {
        match self {
            Command::Ask { context, .. }
            | Command::Cancel { context, .. }
            | Command::Read { context, .. }
            | Command::Discover { context, .. }
            | Command::Session { context, .. } => context.nats_context.as_deref(),
            _ => None,
        }
    }
}

/// Writes the completion script for `shell` to stdout.
pub(crate) fn completions(shell: clap_complete::Shell) -> ExitCode {
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "agentwire", &mut script);
    match crate::closed_pipe::write_stdout(&script) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agentwire: {e}");
            ExitCode::from(1)
        }
    }
}

/// Writes the man pages: `agentwire.1` to stdout, or with `dir`, it and a page per command
/// (`agentwire-ask.1`, …) into that directory, as `man agentwire-ask` finds them.
pub(crate) fn man(dir: Option<&std::path::Path>) -> Result<ExitCode, String> {
    let mut command = Cli::command();
    command.build();
    let page = |cmd: clap::Command| -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        clap_mangen::Man::new(cmd)
            .render(&mut out)
            .map_err(|e| format!("cannot render the man page: {e}"))?;
        Ok(out)
    };
    let Some(dir) = dir else {
        crate::closed_pipe::write_stdout(&page(command)?)?;
        return Ok(ExitCode::SUCCESS);
    };
    let write = |name: &str, bytes: Vec<u8>| {
        let path = dir.join(format!("{name}.1"));
        std::fs::write(&path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))
    };
    for sub in command
        .get_subcommands()
        .filter(|c| !c.is_hide_set() && c.get_name() != "help")
    {
        let name = format!("agentwire-{}", sub.get_name());
        write(
            &name,
            page(
                sub.clone()
                    .display_name(&name)
                    .bin_name(name.replace('-', " ")),
            )?,
        )?;
    }
    write("agentwire", page(command)?)?;
    Ok(ExitCode::SUCCESS)
}
