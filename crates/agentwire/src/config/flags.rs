//! The `serve` flags, shared by `serve` and `config` (which prints what they resolve to).
//!
//! Every field is `None` (or empty, or `false`) unless given, so that [`super::resolve`] can tell a flag
//! from its file key and its default.

use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;

/// `serve` flags.
#[derive(Debug, Default, Args)]
pub(crate) struct ServeFlags {
    /// Address of the embedded relay (default 127.0.0.1:7777; port 0 picks a free one).
    #[arg(long, value_parser = super::listen_addr)]
    pub(crate) relay_listen: Option<SocketAddr>,
    /// Address of the HTTP server, the turn API (default 127.0.0.1:7780; port 0 picks one; `off`).
    #[arg(long, value_parser = super::http_listen)]
    pub(crate) http_listen: Option<super::HttpListen>,
    /// Use this external relay (repeatable). With it the embedded relay is off unless --relay-listen is given.
    #[arg(long = "relay", value_parser = super::relay_url)]
    pub(crate) relays: Vec<String>,
    /// A PEM file of CA certificates to trust for wss:// relays, besides Mozilla's roots.
    #[arg(long, env = "AGENTWIRE_RELAY_CA_FILE")]
    pub(crate) relay_ca_file: Option<PathBuf>,
    /// The agent to serve: `demo` (the default), the name of an `[agents.<name>]` entry in the config, or
    /// `roost:<profile>` (a roost job of that profile per conversation).
    #[arg(long)]
    pub(crate) agent: Option<String>,
    /// Only these senders may prompt (hex or npub; repeatable).
    #[arg(long)]
    pub(crate) allow: Vec<String>,
    /// Refuse these senders (hex or npub; repeatable).
    #[arg(long)]
    pub(crate) block: Vec<String>,
    /// Sustained prompts per second per sender.
    #[arg(long)]
    pub(crate) rate_per_second: Option<f64>,
    /// Burst of prompts per sender.
    #[arg(long)]
    pub(crate) rate_burst: Option<f64>,
    /// Serve stored prompts younger than this many seconds that arrived while the agent was down.
    #[arg(long)]
    pub(crate) backlog_horizon_secs: Option<u64>,
    /// Privacy-first profile: take only NIP-59 gift-wrapped prompts (plain ones are refused with
    /// UNSUPPORTED_FEATURE). Without it both are taken, each run answered in its prompt's form.
    #[arg(long)]
    pub(crate) nip59: bool,
    /// Serve the agent as a fisk-ai worker on these NATS servers (comma-separated; needs --identity).
    #[arg(long)]
    pub(crate) nats: Option<String>,
    /// The fisk-ai identity: subjects `choria.fisk-ai.*.<identity>` and the queue group.
    #[arg(long)]
    pub(crate) identity: Option<String>,
    /// fisk-ai runs at a time; past it requests are refused with `capacity` (default 1).
    #[arg(long)]
    pub(crate) nats_workers: Option<usize>,
    /// Put the agent's questions to fisk-ai callers (elicit); off refuses approval-gated tools.
    #[arg(long)]
    pub(crate) nats_elicit: bool,
    /// Serve the fisk-ai queued-jobs channel (`[nats] jobs = true`; the NATS server must run JetStream).
    #[arg(long)]
    pub(crate) nats_jobs: bool,
    /// Seconds a fisk-ai question is held open (`request_timeout`, default 120).
    #[arg(long)]
    pub(crate) nats_request_timeout: Option<u64>,
    /// A NATS context of the `nats` CLI's (`~/.config/nats/context/NAME.json`): its servers,
    /// credentials and TLS, under what --nats and `[nats]` give (`[nats] context`).
    #[arg(long, value_name = "NAME")]
    pub(crate) nats_context: Option<String>,
    /// The roost supervisor's socket (default `$XDG_RUNTIME_DIR/agentwire/roost.sock`).
    #[arg(long)]
    pub(crate) roost_socket: Option<PathBuf>,
    /// A roost.json whose `agentProfiles` the supervisor runs (besides `[roost.profiles]`).
    #[arg(long)]
    pub(crate) roost_config: Option<PathBuf>,
}
