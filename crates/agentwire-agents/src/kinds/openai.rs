//! `kind = "openai"`: a model behind an OpenAI-compatible chat completions API, with built-in tools, MCP
//! servers' tools and remote agents as tools (`delegates`).

use crate::kind::{
    self, AgentKind, AgentPlan, BuildContext, BuildError, Delegation, EnvUse, KindEntry, KindError,
};
use crate::openai::concierge_tools::{self, ConciergeTools, CONCIERGE_TOOL};
use crate::openai::mcp::{McpServerConfig, McpServers, MCP_START_TIMEOUT};
use crate::openai::roost_peer::RoostPeer;
use crate::openai::roost_tools::{self, ROOST_TOOL};
use crate::openai::{delegate, tools, ApiKey, OpenAiAgent, OpenAiConfig};
use agentwire_core::child_env::ChildEnv;
use agentwire_engine::Agent;
use futures_util::future::BoxFuture;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The kind's name.
pub const KIND: &str = "openai";

/// The most delegates one model agent may have: each is a tool in every model call.
pub const MAX_DELEGATES: usize = 16;
/// The most MCP servers one agent may have: each is a process and a share of the model's tool list.
pub const MAX_MCP_SERVERS: usize = 16;
/// The longest an MCP server may be given to start, in seconds: ten minutes, for one fetched on first use.
pub const MAX_MCP_START_TIMEOUT_SECS: u64 = 600;
/// The context window a model agent's card announces when `max_context_tokens` is not set: 8,192 tokens,
/// what the small local models most servers start with take.
pub const DEFAULT_MAX_CONTEXT_TOKENS: u64 = 8192;
/// The range of `max_context_tokens`: from a tiny model's 256 to 10 million, past the largest windows.
pub const MAX_CONTEXT_TOKENS: std::ops::RangeInclusive<u64> = 256..=10_000_000;
/// The most models one agent may list.
pub const MAX_AGENT_MODELS: usize = 32;

/// The model kind.
pub struct OpenAi;

/// Its section.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    /// The API's base URL (up to `/v1`).
    base_url: Option<String>,
    /// The models offered, the first the default.
    models: Option<Vec<String>>,
    /// The environment variable holding the API key.
    api_key_env: Option<String>,
    /// The system prompt.
    system_prompt: Option<String>,
    /// The built-in tools the model may call.
    tools: Option<Vec<String>>,
    /// How long one model call may take, in seconds.
    request_timeout_secs: Option<u64>,
    /// The context window on the agent's card, in tokens.
    max_context_tokens: Option<u64>,
    /// Where the `shell` tool runs commands.
    shell_dir: Option<PathBuf>,
    /// MCP servers whose tools the model may call (`[[agents.<name>.mcp]]`).
    mcp: Option<Vec<McpSection>>,
    /// Remote agents the model may call as tools, each under its name.
    delegates: Option<Vec<String>>,
    /// Variables set in the `shell` tool's environment, beside the allowlist.
    env: Option<BTreeMap<String, String>>,
    /// The daemon's variables passed on to the `shell` tool's commands by name.
    pass_env: Option<Vec<String>>,
}

/// `[[agents.<name>.mcp]]`: an MCP server over stdio.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct McpSection {
    /// Its name: its tools are `<name>__<tool>`.
    name: String,
    /// The program and its arguments.
    command: Vec<String>,
    /// How long it may take to answer the handshake, and then to list its tools.
    start_timeout_secs: Option<u64>,
    /// Variables set in its environment, beside the allowlist.
    env: Option<BTreeMap<String, String>>,
    /// The daemon's variables passed on to it by name.
    pass_env: Option<Vec<String>>,
}

impl AgentKind for OpenAi {
    fn name(&self) -> &'static str {
        KIND
    }
    fn about(&self) -> &'static str {
        "a model behind an OpenAI-compatible API"
    }
    fn keys(&self) -> &'static [&'static str] {
        kind::keys_of::<Section>()
    }
    fn resolve(&self, entry: &KindEntry<'_>) -> Result<Arc<dyn AgentPlan>, KindError> {
        Ok(Arc::new(resolve(entry)?))
    }
}

/// A model agent, resolved; its API key is read from `api_key_env` when it is built.
#[derive(Debug, Clone)]
pub struct OpenAiPlan {
    /// The API's base URL.
    pub base_url: String,
    /// The models offered (not empty), the first the default.
    pub models: Vec<String>,
    /// The environment variable holding the key, when the server needs one.
    pub api_key_env: Option<String>,
    /// The system prompt.
    pub system_prompt: Option<String>,
    /// Built-in tools the model may call.
    pub tools: Vec<String>,
    /// How long one model call may take.
    pub request_timeout: Duration,
    /// The context window on the card.
    pub max_context_tokens: u64,
    /// Where the `shell` tool runs commands, when set (else `<data dir>/work/<name>`).
    pub shell_dir: Option<PathBuf>,
    /// MCP servers whose tools join the agent's.
    pub mcp: Vec<McpServerConfig>,
    /// What the `shell` tool's commands get beyond the allowlist (`env`, `pass_env`).
    pub env: ChildEnv,
    /// The remote agents the model may call as tools (`delegates`), in the order given.
    pub delegates: Vec<Delegate>,
}

/// A remote agent a model agent may call as a tool.
#[derive(Debug, Clone)]
pub struct Delegate {
    /// Its `[agents.<name>]` name, the tool's name.
    pub name: String,
    /// What it is (of a kind served elsewhere).
    pub plan: Arc<dyn AgentPlan>,
}

fn resolve(entry: &KindEntry<'_>) -> Result<OpenAiPlan, KindError> {
    let name = entry.name;
    let s: Section = entry.section()?;
    let base_url = s.base_url.ok_or_else(|| {
        KindError::setting(
            "base_url",
            "missing: the API's URL up to /v1, e.g. http://127.0.0.1:11434/v1",
        )
    })?;
    crate::openai::check_base_url(&base_url)
        .map_err(|e| KindError::setting("base_url", e.to_string()))?;
    let models = s.models.unwrap_or_default();
    if models.is_empty()
        || models.len() > MAX_AGENT_MODELS
        || models.iter().any(|m| m.trim().is_empty())
    {
        return Err(KindError::setting(
            "models",
            format!("1 to {MAX_AGENT_MODELS} model names, none empty"),
        ));
    }
    let tools = s.tools.unwrap_or_default();
    if let Some(t) = tools.iter().find(|t| {
        !tools::BUILTIN_TOOLS.contains(&t.as_str())
            && t.as_str() != ROOST_TOOL
            && t.as_str() != CONCIERGE_TOOL
    }) {
        return Err(KindError::setting(
            "tools",
            format!(
                "no built-in tool {t:?}; built-ins: {}, {ROOST_TOOL} (the roost peer ops and task board) and {CONCIERGE_TOOL} (the roost concierge's ops)",
                tools::BUILTIN_TOOLS.join(", ")
            ),
        ));
    }
    // The roost tools speak as a foreground peer of the agent's name, and the daemon keeps one name for
    // its concierge. The concierge tools speak only as the agent's hosted job (the concierge's), never as
    // a foreground peer: the name does not matter to them.
    if tools.iter().any(|t| t == ROOST_TOOL)
        && name == agentwire_roost::proto::concierge::CONCIERGE_NAME
    {
        return Err(KindError::setting(
            "tools",
            format!("{ROOST_TOOL}: the roost tools speak as a peer named after the agent, and \"{name}\" is the roost concierge's name; rename the agent"),
        ));
    }
    let max_context_tokens = s.max_context_tokens.unwrap_or(DEFAULT_MAX_CONTEXT_TOKENS);
    if !MAX_CONTEXT_TOKENS.contains(&max_context_tokens) {
        return Err(KindError::setting(
            "max_context_tokens",
            format!(
                "{max_context_tokens} is out of range ({}-{})",
                MAX_CONTEXT_TOKENS.start(),
                MAX_CONTEXT_TOKENS.end()
            ),
        ));
    }
    if let Some(var) = &s.api_key_env {
        if !kind::is_var_name(var) {
            return Err(KindError::setting(
                "api_key_env",
                "the name of an environment variable",
            ));
        }
    }
    Ok(OpenAiPlan {
        base_url,
        models,
        api_key_env: s.api_key_env,
        system_prompt: s.system_prompt,
        tools,
        request_timeout: kind::turn_timeout(s.request_timeout_secs)?,
        max_context_tokens,
        shell_dir: s.shell_dir,
        mcp: mcp_servers(s.mcp.unwrap_or_default())?,
        env: kind::child_env(s.env, s.pass_env)?,
        delegates: delegates(entry, s.delegates.unwrap_or_default())?,
    })
}

/// The MCP servers, checked: at most [`MAX_MCP_SERVERS`], each named once (1-32 of A-Z a-z 0-9 - _), each
/// with a command.
fn mcp_servers(servers: Vec<McpSection>) -> Result<Vec<McpServerConfig>, KindError> {
    let bad = |reason: String| KindError::setting("mcp", reason);
    if servers.len() > MAX_MCP_SERVERS {
        return Err(bad(format!("at most {MAX_MCP_SERVERS} servers")));
    }
    let mut seen = BTreeSet::new();
    servers
        .into_iter()
        .map(|s| {
            let fit = !s.name.is_empty()
                && s.name.len() <= 32
                && s.name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !fit {
                return Err(bad(format!(
                    "server name {:?}: 1-32 of A-Z a-z 0-9 - _",
                    s.name
                )));
            }
            if !seen.insert(s.name.clone()) {
                return Err(bad(format!("server name {:?} given twice", s.name)));
            }
            if s.command.first().is_none_or(|p| p.is_empty()) {
                return Err(bad(format!("server {:?} needs a command", s.name)));
            }
            let start_timeout = match s.start_timeout_secs {
                None => MCP_START_TIMEOUT,
                Some(n) if (1..=MAX_MCP_START_TIMEOUT_SECS).contains(&n) => Duration::from_secs(n),
                Some(n) => {
                    return Err(bad(format!(
                        "server {:?}: start_timeout_secs {n} is not 1-{MAX_MCP_START_TIMEOUT_SECS}",
                        s.name
                    )))
                }
            };
            let env = ChildEnv {
                set: s.env.unwrap_or_default(),
                pass: s.pass_env.unwrap_or_default(),
            };
            env.check()
                .map_err(|e| bad(format!("server {:?}: env: {e}", s.name)))?;
            Ok(McpServerConfig {
                name: s.name,
                command: s.command,
                env,
                start_timeout,
            })
        })
        .collect()
}

/// The `delegates`: each the name of another entry of a kind served elsewhere (none of those delegates
/// in turn, so no call goes round), at most [`MAX_DELEGATES`], none twice, and none a name a built-in
/// tool has.
fn delegates(entry: &KindEntry<'_>, names: Vec<String>) -> Result<Vec<Delegate>, KindError> {
    let bad = |reason: String| KindError::setting("delegates", reason);
    if names.len() > MAX_DELEGATES {
        return Err(bad(format!("at most {MAX_DELEGATES} agents")));
    }
    let mut out: Vec<Delegate> = Vec::new();
    for d in names {
        if out.iter().any(|o| o.name == d) {
            return Err(bad(format!("{d:?} is named twice")));
        }
        if tools::BUILTIN_TOOLS.contains(&d.as_str())
            || roost_tools::is_roost_tool(&d)
            || concierge_tools::is_concierge_tool(&d)
        {
            return Err(bad(format!("{d:?} is the name of a built-in tool")));
        }
        if d.contains('.') {
            return Err(bad(format!("{d:?}: a tool's name has no '.'")));
        }
        if d == entry.name {
            return Err(bad(format!("{d:?} is not another [agents.<name>] entry")));
        }
        let plan = match (entry.delegate)(&d) {
            Ok(plan) => plan,
            Err(Delegation::NotAnEntry) => {
                return Err(bad(format!("{d:?} is not another [agents.<name>] entry")))
            }
            Err(Delegation::ServedHere { kind }) => {
                return Err(bad(format!(
                    "{d:?} is of kind {kind:?}: a delegate is an agent served elsewhere (nipxx, fisk or a2a)"
                )))
            }
            Err(Delegation::Refused(e)) => return Err(KindError::Delegate(e)),
        };
        out.push(Delegate { name: d, plan });
    }
    Ok(out)
}

impl AgentPlan for OpenAiPlan {
    fn kind(&self) -> &'static str {
        KIND
    }

    // The key's variable is named; the key itself is never read here.
    fn view(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut view = serde_json::Map::new();
        // A key in the query (some cloud APIs take one) is not shown either.
        let base_url = match kind::shown_url(&self.base_url).split_once('?') {
            Some((base, _)) => format!("{base}?{}", kind::REDACTED),
            None => kind::shown_url(&self.base_url),
        };
        view.insert("base_url".into(), base_url.into());
        view.insert("models".into(), serde_json::json!(self.models));
        if let Some(var) = &self.api_key_env {
            view.insert("api_key_env".into(), var.clone().into());
        }
        if let Some(p) = &self.system_prompt {
            view.insert("system_prompt".into(), p.clone().into());
        }
        view.insert("tools".into(), serde_json::json!(self.tools));
        view.insert(
            "request_timeout_secs".into(),
            self.request_timeout.as_secs().into(),
        );
        view.insert("max_context_tokens".into(), self.max_context_tokens.into());
        if let Some(d) = &self.shell_dir {
            view.insert("shell_dir".into(), d.display().to_string().into());
        }
        if !self.delegates.is_empty() {
            let names: Vec<&str> = self.delegates.iter().map(|d| d.name.as_str()).collect();
            view.insert("delegates".into(), serde_json::json!(names));
        }
        if !self.mcp.is_empty() {
            let servers: Vec<serde_json::Value> = self
                .mcp
                .iter()
                .map(|m| {
                    let mut server = serde_json::Map::new();
                    server.insert("name".into(), m.name.clone().into());
                    server.insert("command".into(), serde_json::json!(m.command));
                    server.insert(
                        "start_timeout_secs".into(),
                        m.start_timeout.as_secs().into(),
                    );
                    kind::show_env(&m.env, &mut server);
                    server.into()
                })
                .collect();
            view.insert("mcp".into(), servers.into());
        }
        kind::show_env(&self.env, &mut view);
        view
    }

    fn env_use(&self) -> EnvUse<'_> {
        let mcp = self.mcp.iter().flat_map(|m| &m.env.pass);
        EnvUse {
            secrets: self.api_key_env.iter().map(String::as_str).collect(),
            passed: self
                .env
                .pass
                .iter()
                .chain(mcp)
                .map(String::as_str)
                .collect(),
            required: self
                .api_key_env
                .iter()
                .map(|v| ("api_key_env", v.as_str()))
                .collect(),
        }
    }

    fn default_model(&self) -> Option<&str> {
        self.models.first().map(String::as_str)
    }

    fn delegates(&self) -> Vec<&str> {
        self.delegates.iter().map(|d| d.name.as_str()).collect()
    }

    fn build<'a>(
        &'a self,
        name: &'a str,
        ctx: &'a BuildContext,
    ) -> BoxFuture<'a, Result<Arc<dyn Agent>, BuildError>> {
        Box::pin(async move { Ok(self.agent(name, ctx).await? as Arc<dyn Agent>) })
    }
}

impl OpenAiPlan {
    /// The model agent of entry `name`: its key read from its variable, its tools, MCP servers and
    /// delegates started; the model server is asked for its models beside it.
    async fn agent(&self, name: &str, ctx: &BuildContext) -> Result<Arc<OpenAiAgent>, BuildError> {
        let api_key = match &self.api_key_env {
            None => None,
            Some(var) => Some(ApiKey(kind::required_var(name, "api_key_env", var)?)),
        };
        let http =
            crate::openai::http_client(self.request_timeout).map_err(|e| BuildError::Part {
                agent: name.to_string(),
                what: "its HTTP client",
                source: e.into(),
            })?;
        let shell_dir = match &self.shell_dir {
            Some(d) => d.clone(),
            None => ctx.work_dir(name),
        };
        if self.tools.iter().any(|t| t == tools::SHELL_TOOL) {
            std::fs::create_dir_all(&shell_dir).map_err(|source| BuildError::Io {
                agent: name.to_string(),
                what: format!("shell_dir {}", shell_dir.display()),
                source,
            })?;
        }
        let agent = OpenAiAgent::new(
            OpenAiConfig {
                name: name.to_string(),
                base_url: self.base_url.clone(),
                models: self.models.clone(),
                api_key,
                system_prompt: self.system_prompt.clone(),
                tools: self.tools.clone(),
                request_timeout: self.request_timeout,
                max_context_tokens: self.max_context_tokens,
                shell_dir,
                env: self.env.clone(),
            },
            http,
        )
        .with_metrics(ctx.metrics.clone());
        // The roost tools speak as a foreground peer of the agent's name, on the supervisor this daemon
        // runs (always): the connection is made once the supervisor is up.
        let agent = match self.tools.iter().any(|t| t == ROOST_TOOL) {
            true => agent.with_roost(Arc::new(RoostPeer::start(
                &ctx.roost_socket,
                name,
                ctx.hosted.clone(),
            ))),
            false => agent,
        };
        // The concierge tools speak only as the agent's hosted roost job (the concierge's, once the hub
        // made it so), on that job's connection: no connection of their own.
        let agent = match self.tools.iter().any(|t| t == CONCIERGE_TOOL) {
            true => agent.with_concierge(Arc::new(ConciergeTools::new(ctx.hosted.clone()))),
            false => agent,
        };
        // Its delegates: remote agents (no delegate delegates in turn), each reached as this daemon's
        // client like any remote agent it serves.
        let mut delegates = Vec::new();
        for d in &self.delegates {
            delegates.push(delegate::Delegate {
                name: d.name.clone(),
                agent: d.plan.build(&d.name, ctx).await?,
            });
        }
        let agent = agent.with_delegates(delegate::Delegates::new(delegates));
        let agent = match self.mcp.is_empty() {
            true => Arc::new(agent),
            false => Arc::new(agent.with_mcp(McpServers::start(self.mcp.clone()).await)),
        };
        // The model server is asked at start, beside it: a failure is a warning naming the server, so an
        // operator learns of a wrong URL or key before a user's turn fails on it.
        let probed = agent.clone();
        let name = name.to_string();
        tokio::spawn(async move {
            if let Err(why) = probed.probe().await {
                tracing::warn!(
                    agent = %name, server = %probed.server(),
                    "the model server did not answer GET /models well: {why}; check base_url and the key"
                );
            }
        });
        Ok(agent)
    }
}
