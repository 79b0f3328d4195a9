//! The daemon's Prometheus metrics (`GET /metrics`): one registry, its families named `agentwire_*`, the
//! turns' own fed by the engine's watch hub as it publishes (so they count every turn of every
//! front, exactly, without a watcher that could fall behind), and the rest set by their owners: the model
//! agents' calls as they end, the engine's journal writes as they commit, the HTTP server's requests, and
//! the journal's health, the embedded relay's counters and the roost jobs when scraped.
//!
//! Labels are bounded: a protocol is a front's name, an agent a configured agent's, a model one the agent
//! offers (another is `other`), an outcome `result` or a failure code (one the daemon does not know is
//! `unknown`), a tool one an agent offers (its configured and MCP tools, named by
//! [`Metrics::name_tools`], up to [`MAX_TOOL_LABELS`]; a name a model made up is `other`), a relay
//! event's `result` one of the relay's own few. Never an id, a prompt or a user.

use agentwire_core::watch::{TurnSummary, WatchKind};
use agentwire_core::{FailureCode, Outcome, TurnEvent, Usage};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Duration;

/// Distinct tool names that get a label of their own; later ones are counted as `other`. Tools come from
/// the config and its MCP servers, which may offer many: this keeps the series a scrape returns bounded.
pub const MAX_TOOL_LABELS: usize = 100;
/// Distinct agent names that get a label of their own (agents are configured, so this is never reached
/// in practice; it bounds what a bug could add).
pub const MAX_AGENT_LABELS: usize = 100;
/// Distinct model names that get a label of their own (a model agent labels only the models it offers,
/// so this too bounds only what a bug could add).
pub const MAX_MODEL_LABELS: usize = 100;
/// The content type of `/metrics`: OpenMetrics text, which Prometheus asks for and reads.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A turn's duration buckets, in seconds: the OpenTelemetry GenAI operation-duration buckets (10 ms to
/// 82 s, doubling), and longer ones for agents that work for minutes.
const DURATION_BUCKETS: [f64; 17] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92, 300.0,
    900.0, 3600.0,
];
/// Time-to-first-token buckets, in seconds: the OpenTelemetry GenAI time-to-first-token buckets (1 ms to
/// 10 s), and longer ones for a local model reading a long prompt on a CPU before it says anything.
const FIRST_TOKEN_BUCKETS: [f64; 19] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
];
/// Journal commit buckets, in seconds, doubling from 0.25 ms: an fsync of SQLite's WAL on an SSD takes
/// well under a millisecond to a few, a replicated JetStream publish a few milliseconds; seconds mean a
/// failing disk or a cluster that lost its quorum.
const COMMIT_BUCKETS: [f64; 16] = [
    0.00025, 0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024,
    2.048, 4.096, 8.192,
];
/// Token-usage buckets: the OpenTelemetry GenAI client token-usage buckets (powers of 4).
const TOKEN_BUCKETS: [f64; 14] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TurnLabels {
    protocol: String,
    agent: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndLabels {
    protocol: String,
    agent: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusalLabels {
    protocol: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    agent: String,
    tool: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    agent: String,
    model: String,
    token_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    agent: String,
    model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabel {
    version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    route: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct IdentityLabel {
    identity: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

fn token_histogram() -> Histogram {
    Histogram::new(TOKEN_BUCKETS)
}

fn first_token_histogram() -> Histogram {
    Histogram::new(FIRST_TOKEN_BUCKETS)
}

/// Names that get a label of their own, up to a bound.
#[derive(Debug, Default)]
struct Bounded {
    seen: Mutex<HashSet<String>>,
}

impl Bounded {
    /// Gives `name` a label of its own if fewer than `max` have one.
    fn admit(&self, name: &str, max: usize) {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() < max && !seen.contains(name) {
            seen.insert(name.to_string());
        }
    }

    /// `name` if it was admitted, else `other`.
    fn label_admitted(&self, name: &str) -> String {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        match seen.contains(name) {
            true => name.to_string(),
            false => "other".to_string(),
        }
    }

    fn label(&self, name: &str, max: usize) -> String {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.contains(name) {
            return name.to_string();
        }
        if seen.len() < max {
            seen.insert(name.to_string());
            return name.to_string();
        }
        "other".to_string()
    }
}

/// How a turn's summary stood before an event (what the metrics compare with, without a copy of it).
#[derive(Debug, Clone, Copy)]
pub struct Before {
    /// A question was open.
    pub question: bool,
    /// It had been accepted.
    pub accepted: bool,
}

impl Before {
    /// How `s` stands now, to compare with once the next event is noted.
    pub fn of(s: &TurnSummary) -> Before {
        Before {
            question: s.question.is_some(),
            accepted: !s.protocol.is_empty(),
        }
    }
}

/// The daemon's metrics.
pub struct Metrics {
    registry: Registry,
    started: Family<TurnLabels, Counter>,
    ended: Family<EndLabels, Counter>,
    running: Family<TurnLabels, Gauge>,
    duration: HistogramFamily<TurnLabels>,
    refusals: Family<RefusalLabels, Counter>,
    questions_open: Gauge,
    tool_calls: Family<ToolLabels, Counter>,
    tokens: HistogramFamily<TokenLabels>,
    model_calls: HistogramFamily<ModelLabels>,
    first_tokens: HistogramFamily<ModelLabels>,
    journal_writable: Gauge,
    journal_commits: Histogram,
    http_requests: Family<HttpLabels, Counter>,
    roost_jobs: Family<StateLabel, Gauge>,
    fisk_jobs_queued: Family<IdentityLabel, Gauge>,
    relay_connections: Gauge,
    relay_events: Family<ResultLabel, Counter>,
    tools: Bounded,
    agents: Bounded,
    model_names: Bounded,
    /// Each agent's model, for the GenAI metrics' `model` label (none: `""`).
    models: Mutex<HashMap<String, String>>,
    http_token_failures: Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Every family registered, none with a value yet.
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let build = Family::<VersionLabel, Gauge>::default();
        build
            .get_or_create(&VersionLabel {
                version: env!("CARGO_PKG_VERSION").to_string(),
            })
            .set(1);
        registry.register(
            "agentwire_build_info",
            "The agentwire version running (always 1)",
            build,
        );
        let m = Metrics {
            started: Family::default(),
            ended: Family::default(),
            running: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
            refusals: Family::default(),
            questions_open: Gauge::default(),
            tool_calls: Family::default(),
            tokens: Family::new_with_constructor(token_histogram),
            model_calls: Family::new_with_constructor(duration_histogram),
            first_tokens: Family::new_with_constructor(first_token_histogram),
            journal_writable: Gauge::default(),
            journal_commits: Histogram::new(COMMIT_BUCKETS),
            http_requests: Family::default(),
            roost_jobs: Family::default(),
            fisk_jobs_queued: Family::default(),
            relay_connections: Gauge::default(),
            relay_events: Family::default(),
            tools: Bounded::default(),
            agents: Bounded::default(),
            model_names: Bounded::default(),
            models: Mutex::default(),
            http_token_failures: Counter::default(),
            registry: Registry::default(),
        };
        registry.register(
            "agentwire_turns_started",
            "Turns taken, by front and agent (refusals included)",
            m.started.clone(),
        );
        registry.register(
            "agentwire_turns_ended",
            "Turns ended, by front, agent and outcome (result, or the failure code)",
            m.ended.clone(),
        );
        registry.register(
            "agentwire_turns_running",
            "Turns taken and not yet ended",
            m.running.clone(),
        );
        registry.register(
            "agentwire_turn_duration_seconds",
            "How long turns took, from taken to ended",
            m.duration.clone(),
        );
        registry.register(
            "agentwire_refusals",
            "Requests refused before they ran, by front and reason",
            m.refusals.clone(),
        );
        registry.register(
            "agentwire_questions_open",
            "Questions put to a person and not yet settled",
            m.questions_open.clone(),
        );
        registry.register(
            "agentwire_tool_calls",
            "Tool calls that returned, by agent, tool and result (ok or error)",
            m.tool_calls.clone(),
        );
        registry.register(
            "agentwire_gen_ai_client_token_usage",
            "Tokens a turn used, by agent, model and token_type (input or output)",
            m.tokens.clone(),
        );
        registry.register(
            "agentwire_gen_ai_client_operation_duration_seconds",
            "How long a model agent's calls to its model server took, from sent to the answer's end, by agent and model requested",
            m.model_calls.clone(),
        );
        registry.register(
            "agentwire_gen_ai_server_time_to_first_token_seconds",
            "How long a model agent's streamed calls waited for their first token, by agent and model requested",
            m.first_tokens.clone(),
        );
        registry.register(
            "agentwire_journal_writable",
            "1 while the journal takes writes, 0 while it does not",
            m.journal_writable.clone(),
        );
        registry.register(
            "agentwire_journal_commit_seconds",
            "How long the journal took to commit each write a turn waited on (accept, finish, conversation state)",
            m.journal_commits.clone(),
        );
        registry.register(
            "agentwire_http_requests",
            "HTTP requests answered, by route and status",
            m.http_requests.clone(),
        );
        registry.register(
            "agentwire_roost_jobs",
            "roost jobs, by the state their row shows",
            m.roost_jobs.clone(),
        );
        registry.register(
            "agentwire_fisk_jobs_queued",
            "jobs in a fisk-ai identity's jobs queue, waiting or taken and not yet acknowledged (as last read)",
            m.fisk_jobs_queued.clone(),
        );
        registry.register(
            "agentwire_relay_connections",
            "WebSocket connections the embedded relay holds open",
            m.relay_connections.clone(),
        );
        registry.register(
            "agentwire_relay_events",
            "EVENTs the embedded relay answered, by result (accepted, duplicate, rate_limited, rejected, error)",
            m.relay_events.clone(),
        );
        registry.register(
            "agentwire_http_token_failures",
            "HTTP requests that presented a wrong token (bearer, cookie or the page's ?token=)",
            m.http_token_failures.clone(),
        );
        Metrics { registry, ..m }
    }

    /// The model each agent runs, for the `model` label.
    pub fn set_models(&self, models: HashMap<String, String>) {
        *self.models.lock().unwrap_or_else(|p| p.into_inner()) = models;
    }

    fn model(&self, agent: &str) -> String {
        self.models
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(agent)
            .cloned()
            .unwrap_or_default()
    }

    fn turn_labels(&self, s: &TurnSummary) -> TurnLabels {
        TurnLabels {
            protocol: s.protocol.clone(),
            agent: self.agents.label(&s.agent, MAX_AGENT_LABELS),
        }
    }

    /// What a turn did, as the hub publishes it (the hub calls it for every event, under its lock, so the
    /// turns' counts are exact): `before` is how its summary stood before, `after` its summary after;
    /// `first_end` says this is its outcome, published for the first time.
    pub fn observe(&self, before: Before, after: &TurnSummary, kind: &WatchKind, first_end: bool) {
        let opened = after.question.is_some() as i64 - before.question as i64;
        if opened != 0 {
            self.questions_open.inc_by(opened);
        }
        match kind {
            WatchKind::Accepted { .. } if !before.accepted => {
                let l = self.turn_labels(after);
                self.started.get_or_create(&l).inc();
                self.running.get_or_create(&l).inc();
            }
            WatchKind::Event(TurnEvent::ToolResult { name, success, .. }) => {
                let labels = ToolLabels {
                    agent: self.agents.label(&after.agent, MAX_AGENT_LABELS),
                    tool: self.tools.label_admitted(name),
                    result: if *success { "ok" } else { "error" }.into(),
                };
                self.tool_calls.get_or_create(&labels).inc();
            }
            WatchKind::Outcome(outcome) if first_end && !after.protocol.is_empty() => {
                let l = self.turn_labels(after);
                self.running.get_or_create(&l).dec();
                let (code, usage) = match outcome {
                    Outcome::Result(r) => ("result".to_string(), r.usage),
                    Outcome::Failure(f) => (failure_label(&f.code), f.usage),
                };
                if let Outcome::Failure(f) = outcome {
                    if let FailureCode::Refused(r) = &f.code {
                        self.refusals
                            .get_or_create(&RefusalLabels {
                                protocol: l.protocol.clone(),
                                reason: r.as_str().to_string(),
                            })
                            .inc();
                    }
                }
                self.ended
                    .get_or_create(&EndLabels {
                        protocol: l.protocol.clone(),
                        agent: l.agent.clone(),
                        outcome: code,
                    })
                    .inc();
                let ended = after.ended_ms.unwrap_or(after.started_ms);
                let secs = ended.saturating_sub(after.started_ms) as f64 / 1000.0;
                self.duration.get_or_create(&l).observe(secs);
                self.usage(&l.agent, usage);
            }
            _ => {}
        }
    }

    fn usage(&self, agent: &str, usage: Usage) {
        if usage == Usage::default() {
            return;
        }
        let model = self.model(agent);
        for (kind, n) in [
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
        ] {
            self.tokens
                .get_or_create(&TokenLabels {
                    agent: agent.to_string(),
                    model: model.clone(),
                    token_type: kind.into(),
                })
                .observe(n as f64);
        }
    }

    fn model_labels(&self, agent: &str, model: &str) -> ModelLabels {
        ModelLabels {
            agent: self.agents.label(agent, MAX_AGENT_LABELS),
            model: self.model_names.label(model, MAX_MODEL_LABELS),
        }
    }

    /// A model agent's call to its model server that ended (with an answer or the server's error) `took`
    /// after it was sent: `agent` is the agent's name, `model` the model requested (one it offers).
    pub fn model_call(&self, agent: &str, model: &str, took: Duration) {
        self.model_calls
            .get_or_create(&self.model_labels(agent, model))
            .observe(took.as_secs_f64());
    }

    /// The first token (text, reasoning or a tool call) of a model agent's streamed call, `took` after the
    /// call was sent.
    pub fn first_token(&self, agent: &str, model: &str, took: Duration) {
        self.first_tokens
            .get_or_create(&self.model_labels(agent, model))
            .observe(took.as_secs_f64());
    }

    /// Whether the journal takes writes now.
    pub fn set_journal_writable(&self, writable: bool) {
        self.journal_writable.set(writable as i64);
    }

    /// A journal write a turn waited on committed, `took` after it was asked for.
    pub fn journal_commit(&self, took: Duration) {
        self.journal_commits.observe(took.as_secs_f64());
    }

    /// The embedded relay's counters as they stand now: the connections it holds, and how many `EVENT`s it
    /// has answered with each result (a running total, never smaller than the last one set).
    pub fn set_relay(&self, connections: u64, events: &[(&str, u64)]) {
        self.relay_connections
            .set(i64::try_from(connections).unwrap_or(i64::MAX));
        for (result, n) in events {
            self.relay_events
                .get_or_create(&ResultLabel {
                    result: result.to_string(),
                })
                .inner()
                .store(*n, Ordering::Relaxed);
        }
    }

    /// An HTTP request answered: its route (the route's pattern, never its path) and status.
    pub fn http_request(&self, route: &str, status: u16) {
        self.http_requests
            .get_or_create(&HttpLabels {
                route: route.to_string(),
                status: status.to_string(),
            })
            .inc();
    }

    /// The roost jobs by state, as counted now (states not given are zero).
    pub fn set_roost_jobs(&self, by_state: &[(&str, i64)]) {
        for state in [
            "starting", "working", "blocked", "done", "failed", "stopped", "exited",
        ] {
            let n = by_state
                .iter()
                .find(|(s, _)| *s == state)
                .map_or(0, |(_, n)| *n);
            self.roost_jobs
                .get_or_create(&StateLabel {
                    state: state.to_string(),
                })
                .set(n);
        }
    }

    /// Tools an agent offers (from its config, or an MCP server's list): only these are tool labels, so
    /// a prompter cannot fill the labels with names a model made up and push real tools into `other`.
    pub fn name_tools<'a>(&self, tools: impl IntoIterator<Item = &'a str>) {
        for name in tools {
            self.tools.admit(name, MAX_TOOL_LABELS);
        }
    }

    /// A request a front refused before it reached the engine (so no journaled refusal counts it): a
    /// fisk-ai prompt naming an unknown conversation, a NIP-XX prompt dropped past the refusal budget.
    /// `protocol` is the front's own name and the reason the failure's code, both bounded.
    pub fn refused(&self, protocol: &str, code: &FailureCode) {
        self.refusals
            .get_or_create(&RefusalLabels {
                protocol: protocol.to_string(),
                reason: failure_label(code),
            })
            .inc();
    }

    /// A request a front could not even read (not the protocol's shape): counted as a refusal with the
    /// reason [`INVALID_REQUEST`].
    pub fn refused_invalid(&self, protocol: &str) {
        self.refusals
            .get_or_create(&RefusalLabels {
                protocol: protocol.to_string(),
                reason: INVALID_REQUEST.to_string(),
            })
            .inc();
    }

    /// The jobs in each served fisk-ai identity's queue (identities are configured, so the label is
    /// bounded).
    pub fn set_fisk_jobs_queued(&self, by_identity: &[(String, i64)]) {
        for (identity, n) in by_identity {
            self.fisk_jobs_queued
                .get_or_create(&IdentityLabel {
                    identity: identity.clone(),
                })
                .set(*n);
        }
    }

    /// An HTTP request presented a wrong token.
    pub fn http_token_failed(&self) {
        self.http_token_failures.inc();
    }

    /// The metrics as OpenMetrics text ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!(error = %e, "could not encode the metrics");
        }
        out
    }
}

/// The refusal reason of a request that was not the protocol's shape.
pub const INVALID_REQUEST: &str = "invalid_request";

/// A failure code as an `outcome` label: the core code in snake case; a code the daemon does not know
/// (a peer's) is `unknown`, so peers cannot add series.
fn failure_label(code: &FailureCode) -> String {
    match code {
        FailureCode::Unknown(_) => "unknown".to_string(),
        known => known.as_str().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_past_the_bound_is_other() {
        let b = Bounded::default();
        for n in 0..3 {
            assert_eq!(b.label(&format!("t{n}"), 3), format!("t{n}"));
        }
        assert_eq!(b.label("t9", 3), "other");
        assert_eq!(b.label("t1", 3), "t1");
    }

    #[test]
    fn only_the_tools_an_agent_offers_are_labels() {
        let m = Metrics::new();
        m.name_tools(["calculator"]);
        let after = TurnSummary {
            id: agentwire_core::RequestId::new("nipxx:1").unwrap(),
            agent: "demo".into(),
            protocol: "nipxx".into(),
            conversation: None,
            prompt: String::new(),
            requester: String::new(),
            state: agentwire_core::watch::TurnState::Running,
            question: None,
            outcome: None,
            started_ms: 0,
            ended_ms: None,
            first_id: 0,
        };
        let result = |name: &str| {
            WatchKind::Event(TurnEvent::ToolResult {
                call_id: "c".into(),
                name: name.into(),
                output: serde_json::Value::Null,
                success: true,
                duration_ms: 1,
            })
        };
        let before = Before::of(&after);
        // A prompter's model calls made-up tools past the bound; the real one keeps its label.
        for n in 0..=MAX_TOOL_LABELS {
            m.observe(before, &after, &result(&format!("made_up_{n}")), false);
        }
        m.observe(before, &after, &result("calculator"), false);
        let text = m.encode();
        assert!(
            text.contains(
                "agentwire_tool_calls_total{agent=\"demo\",tool=\"calculator\",result=\"ok\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "agentwire_tool_calls_total{{agent=\"demo\",tool=\"other\",result=\"ok\"}} {}",
                MAX_TOOL_LABELS + 1
            )),
            "{text}"
        );
        assert!(!text.contains("made_up"), "{text}");
    }

    #[test]
    fn an_unknown_failure_code_is_one_label() {
        assert_eq!(
            failure_label(&FailureCode::Unknown("made up by a peer".into())),
            "unknown"
        );
    }

    #[test]
    fn the_text_names_every_family_and_the_version() {
        let m = Metrics::new();
        m.set_roost_jobs(&[("working", 2)]);
        m.set_fisk_jobs_queued(&[("support".to_string(), 7)]);
        let text = m.encode();
        assert!(
            text.contains("agentwire_fisk_jobs_queued{identity=\"support\"} 7"),
            "{text}"
        );
        assert!(text.contains(&format!(
            "agentwire_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )));
        assert!(
            text.contains("agentwire_roost_jobs{state=\"working\"} 2"),
            "{text}"
        );
        assert!(text.contains("# TYPE agentwire_roost_jobs gauge"), "{text}");
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn model_calls_commits_and_the_relay_read_as_they_were_set() {
        let m = Metrics::new();
        m.model_call("local", "llama3.2", Duration::from_millis(300));
        m.model_call("local", "llama3.2", Duration::from_secs(2));
        m.first_token("local", "llama3.2", Duration::from_millis(30));
        m.journal_commit(Duration::from_millis(3));
        m.set_relay(2, &[("accepted", 7), ("duplicate", 1)]);
        m.set_relay(1, &[("accepted", 9), ("duplicate", 1)]);
        let text = m.encode();
        for line in [
            "agentwire_gen_ai_client_operation_duration_seconds_count{agent=\"local\",model=\"llama3.2\"} 2",
            "agentwire_gen_ai_server_time_to_first_token_seconds_count{agent=\"local\",model=\"llama3.2\"} 1",
            "agentwire_journal_commit_seconds_count 1",
            "agentwire_journal_commit_seconds_bucket{le=\"0.004\"} 1",
            "agentwire_relay_connections 1",
            "agentwire_relay_events_total{result=\"accepted\"} 9",
            "agentwire_relay_events_total{result=\"duplicate\"} 1",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }
}
