//! `agentwire config`: prints the configuration in force, as TOML (or JSON with `--json`), in the config
//! file's own keys, so that what it prints can be read back with `--config`.
//!
//! Only what is in force is printed: no `[nats]` when the fisk-ai worker is off, no `[relay]` when the
//! embedded relay is off, only the `[agents.<name>]` entry being served. Nothing secret is printed: key
//! files are named by path only, and what can carry a credential, a URL's user-info
//! (`nats://user:password@host`) and each value of an `env` setting (a child's token), is printed as
//! [`REDACTED`].

use crate::config::{Resolved, ServeFlags};
use agentwire_nostr::relay_conn::RelayTls;
use agentwire_relay::RelayLimits;
use clap::Args;
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;

/// What stands in the output for a value that is set but secret (the agent kinds show theirs so too).
pub(crate) use agentwire_agents::kind::REDACTED;

/// `config` flags: the `serve` flags, whose effect it shows, and the output format.
#[derive(Debug, Args)]
pub(crate) struct ConfigArgs {
    #[command(flatten)]
    pub(crate) serve: ServeFlags,
    /// Print JSON instead of TOML.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Prints `config`; a CA file that `serve` could not load fails here as it would there.
pub(crate) fn run(json: bool, config: &Resolved) -> Result<ExitCode, String> {
    if let Some(path) = &config.relay_ca_file {
        RelayTls::new(Some(path)).map_err(|e| e.to_string())?;
    }
    // What `serve` would log as a warning, said here too (on stderr: the output stays readable TOML).
    for warning in &config.warnings {
        eprintln!("agentwire: warning: {warning}");
    }
    print!("{}", render(config, json)?);
    Ok(ExitCode::SUCCESS)
}

/// The configuration as TOML (with a heading comment) or as pretty JSON, ending in a newline.
pub(crate) fn render(config: &Resolved, json: bool) -> Result<String, String> {
    let view = View::of(config);
    if json {
        serde_json::to_string_pretty(&view)
            .map(|s| s + "\n")
            .map_err(|e| format!("cannot print the configuration: {e}"))
    } else {
        toml::to_string(&view)
            .map(|s| format!("# agentwire: the configuration in force (flags over --config over defaults)\n{s}"))
            .map_err(|e| format!("cannot print the configuration: {e}"))
    }
}

/// A URL (or a comma-separated list of them, as NATS takes) with any user-info replaced by [`REDACTED`].
pub(crate) fn redact_url(urls: &str) -> String {
    agentwire_core::redact_userinfo(urls, REDACTED)
}

// The printed shape: the file's keys, plain values before tables (as TOML needs).

#[derive(Serialize)]
struct View<'a> {
    data_dir: &'a Path,
    serve: ServeView<'a>,
    journal: JournalView<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    telemetry: Option<TelemetryView>,
    http: agentwire_http::settings::HttpView,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    agents: BTreeMap<&'a str, AgentView<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    notify: Option<NotifyView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    relay: Option<RelayView<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    rooms: Vec<RoomView<'a>>,
    /// The fronts' sections (`[nipxx]`, `[nats]`, `[roost]`, `[tasks]`, the plug-ins'), each as its
    /// front prints it ([`crate::fronts::sections`]).
    #[serde(flatten)]
    fronts: BTreeMap<&'static str, serde_json::Value>,
}

/// `[telemetry]`, when traces are exported.
#[derive(Serialize)]
struct TelemetryView {
    /// User-info redacted: a collector's URL may carry a credential.
    otlp_endpoint: String,
    content: bool,
}

#[derive(Serialize)]
struct NotifyView {
    /// Path and query hidden: a webhook URL often carries a token.
    webhook: String,
}

#[derive(Serialize)]
struct RoomView<'a> {
    id: &'a str,
    name: &'a str,
    closed: bool,
    private: bool,
    members: Vec<String>,
    admins: Vec<String>,
}

#[derive(Serialize)]
struct ServeView<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    relay_listen: Option<SocketAddr>,
    relays: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    relay_ca_file: Option<&'a Path>,
    agent: &'a str,
}

#[derive(Serialize)]
struct JournalView<'a> {
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    replicas: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    instance: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease_secs: Option<u64>,
    /// Days ended turns are kept (0: for ever).
    retention_days: f64,
}

/// A retention as the days `[journal] retention_days` takes (0: for ever).
fn retention_days(retention: Option<std::time::Duration>) -> f64 {
    retention.map_or(0.0, |d| d.as_secs_f64() / 86_400.0)
}

/// An `[agents.<name>]` entry as resolved: its kind's own keys as the kind shows them, then the keys every
/// entry has.
#[derive(Serialize)]
struct AgentView<'a> {
    kind: &'static str,
    #[serde(flatten)]
    own: serde_json::Map<String, serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_concurrent_turns: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expose: Option<Vec<&'static str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nats_identity: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key_file: Option<&'a Path>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pricing_hints: Option<&'a agentwire_nostr::nipxx::payload::PricingHints>,
}

impl<'a> AgentView<'a> {
    /// An `[agents.<name>]` entry as resolved.
    fn of(agent: &'a crate::config::AgentChoice) -> Self {
        AgentView {
            kind: agent.plan.kind(),
            own: agent.plan.view(),
            max_concurrent_turns: agent.max_concurrent_turns,
            expose: None,
            nats_identity: None,
            key_file: None,
            pricing_hints: agent.pricing.as_ref(),
        }
    }
}

#[derive(Serialize)]
struct RelayView<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    admins: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    public_urls: Vec<String>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    allowed_origins: &'a [String],
    limits: RelayLimits,
    retention: agentwire_relay::RetentionPolicy,
}

impl<'a> View<'a> {
    fn of(c: &'a Resolved) -> Self {
        let mut agents = BTreeMap::new();
        if c.agent.entry {
            agents.insert(c.agent.name.as_str(), AgentView::of(&c.agent));
        }
        for m in &c.more_agents {
            let view = AgentView {
                expose: Some(m.fronts.clone()),
                nats_identity: m.fisk_identity.as_deref(),
                key_file: m.key_file.as_deref(),
                ..AgentView::of(&m.choice)
            };
            agents.insert(m.choice.name.as_str(), view);
        }
        View {
            data_dir: &c.data_dir,
            serve: ServeView {
                relay_listen: c.relay.as_ref().map(|r| r.listen),
                relays: c.relays.iter().map(|u| redact_url(u)).collect(),
                relay_ca_file: c.relay_ca_file.as_deref(),
                agent: &c.agent.name,
            },
            http: agentwire_http::settings::view(c.http.as_ref()),
            fronts: crate::fronts::sections(c).into_iter().collect(),
            telemetry: c.telemetry.otlp_endpoint.as_ref().map(|e| TelemetryView {
                otlp_endpoint: redact_url(e),
                content: c.telemetry.content,
            }),
            journal: match &c.journal {
                crate::config::JournalChoice::Sqlite => JournalView {
                    kind: "sqlite",
                    url: None,
                    stream: None,
                    replicas: None,
                    instance: None,
                    lease_secs: None,
                    retention_days: retention_days(c.journal_retention),
                },
                crate::config::JournalChoice::JetStream(j) => JournalView {
                    kind: "jetstream",
                    url: Some(redact_url(&j.nats.servers.join(","))),
                    stream: Some(&j.prefix),
                    replicas: Some(j.replicas),
                    instance: Some(j.instance.shown(&c.data_dir)),
                    lease_secs: Some(j.lease.as_secs()),
                    retention_days: retention_days(c.journal_retention),
                },
            },
            agents,
            notify: c.notify_webhook.as_ref().map(|w| NotifyView {
                webhook: agentwire_relay::notify::redacted_webhook_url(w),
            }),
            relay: c.relay.as_ref().map(|r| RelayView {
                name: &r.name,
                admins: {
                    let mut a: Vec<String> = r.admins.iter().map(|k| k.to_hex()).collect();
                    a.sort();
                    a
                },
                public_urls: r.public_urls.iter().map(|u| redact_url(u)).collect(),
                allowed_origins: &r.allowed_origins,
                limits: r.limits,
                retention: r.retention,
            }),
            rooms: c
                .relay
                .iter()
                .flat_map(|r| &r.rooms)
                .map(|r| RoomView {
                    id: &r.id,
                    name: &r.name,
                    closed: r.closed,
                    private: r.private,
                    members: r.members.iter().map(|k| k.to_hex()).collect(),
                    admins: r.admins.iter().map(|k| k.to_hex()).collect(),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_info_in_a_url_is_redacted() {
        assert_eq!(
            redact_url("nats://alice:s3cret@nats.example:4222"),
            "nats://<set>@nats.example:4222"
        );
        assert_eq!(redact_url("nats://tok@host"), "nats://<set>@host");
        assert_eq!(
            redact_url("nats://a:b@one:4222,nats://c:d@two:4222"),
            "nats://<set>@one:4222,nats://<set>@two:4222"
        );
        assert_eq!(
            redact_url("wss://relay.example/path?x=a@b"),
            "wss://relay.example/path?x=a@b"
        );
        assert_eq!(redact_url("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
    }
}
