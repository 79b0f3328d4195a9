//! MCP servers as tools of a model agent (`[[agents.<name>.mcp]]`), over stdio with the official Rust SDK
//! (`rmcp`). Each server is started and supervised: restarted when it exits, after a backoff that doubles
//! from [`MCP_RESTART_FIRST`] to [`MCP_RESTART_MAX`]. Its tools join the agent's tools as
//! `<server>__<tool>`; a call goes to the server, bounded by [`MCP_CALL_TIMEOUT`], and fails at once with a
//! clear error while the server is down, so a turn never hangs on it. A server's environment is the
//! allowlist of [`agentwire_core::child_env`] and its own `env` and `pass_env` (a token it needs), never the
//! daemon's secrets.

use agentwire_core::child_env::ChildEnv;
use agentwire_engine::ToolSpec;
use rmcp::model::{CallToolRequestParams, RequestParamsMeta as _};
use rmcp::service::{Peer, RoleClient};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::ServiceExt;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long `serve` waits for each server's first list of tools before it goes on without them (they join
/// when the server comes up).
pub const MCP_START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long one tool call may take.
pub const MCP_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// The first wait before a server that exited is started again.
pub const MCP_RESTART_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between two starts of a server that keeps exiting.
pub const MCP_RESTART_MAX: Duration = Duration::from_secs(30);
/// How long a server must have run for its next restart to wait only [`MCP_RESTART_FIRST`] again.
const MCP_HEALTHY_RUN: Duration = Duration::from_secs(60);
/// The most tools taken from one server: more would crowd the model's tool list and context.
pub const MAX_MCP_TOOLS_PER_SERVER: usize = 128;
/// The most bytes of a tool's result given to the model.
pub const MAX_MCP_RESULT_BYTES: usize = 64 * 1024;
/// Joins a server's name and its tool's name in the agent's tool list.
pub const MCP_TOOL_SEPARATOR: &str = "__";
/// The longest tool name chat completion APIs take.
const MAX_TOOL_NAME_CHARS: usize = 64;
/// The most characters of a tool's description kept: the model reads every description on every call.
pub const MAX_MCP_DESCRIPTION_CHARS: usize = 1024;
/// The largest input schema of a tool taken (as JSON): a larger one is left out, with a warning.
pub const MAX_MCP_SCHEMA_BYTES: usize = 16 * 1024;

/// One configured MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    /// Its name: the prefix of its tools.
    pub name: String,
    /// The program and its arguments.
    pub command: Vec<String>,
    /// What its environment holds beyond the allowlist (`env`, `pass_env` of `[[agents.<name>.mcp]]`).
    pub env: ChildEnv,
    /// How long it may take to answer the handshake, and then to list its tools ([`MCP_START_TIMEOUT`]
    /// unless configured: a server fetched on first use, as `npx -y` does, may need longer).
    pub start_timeout: Duration,
}

struct Server {
    config: McpServerConfig,
    /// The connection while the server is up.
    peer: Mutex<Option<Peer<RoleClient>>>,
    /// Its tools as the agent offers them, from its last listing; none while it is down (the agent's card,
    /// and so its ai.info, lists only tools of servers that are up).
    tools: Mutex<Vec<(ToolSpec, String)>>,
    /// The names of the tools it last listed, kept while it is down: a call of one of them is told the
    /// server is down (a turn that began while it was up), a call of any other that there is no such tool.
    listed: Mutex<Vec<String>>,
}

/// The MCP servers of one agent.
pub struct McpServers {
    servers: Vec<Arc<Server>>,
}

/// A name fit for a chat completion tool: letters, digits, `_` and `-`, at most 64 characters.
fn tool_name(server: &str, tool: &str) -> String {
    format!("{server}{MCP_TOOL_SEPARATOR}{tool}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_TOOL_NAME_CHARS)
        .collect()
}

/// The tools of server `server` as the agent offers them, each with its own name on the server: named
/// `<server>__<tool>`, descriptions cut to [`MAX_MCP_DESCRIPTION_CHARS`], at most
/// [`MAX_MCP_TOOLS_PER_SERVER`]. A tool whose name comes out as an earlier one's is left out (the API refuses
/// a list with a name twice), and so is one whose schema is over [`MAX_MCP_SCHEMA_BYTES`] (it would crowd
/// every call).
fn fit_tools(
    server: &str,
    tools: impl IntoIterator<Item = (String, String, Value, Option<Value>)>,
) -> Vec<(ToolSpec, String)> {
    let mut listed: Vec<(ToolSpec, String)> = Vec::new();
    for (tool, description, schema, output_schema) in tools {
        if listed.len() == MAX_MCP_TOOLS_PER_SERVER {
            tracing::warn!(%server, "MCP server lists more than {MAX_MCP_TOOLS_PER_SERVER} tools; the rest are left out");
            break;
        }
        let name = tool_name(server, &tool);
        if listed.iter().any(|(s, _)| s.name == name)
            || schema.to_string().len() > MAX_MCP_SCHEMA_BYTES
            || output_schema
                .as_ref()
                .is_some_and(|o| o.to_string().len() > MAX_MCP_SCHEMA_BYTES)
        {
            tracing::warn!(%server, %tool, "MCP tool left out: its name repeats another's or its schema is too large");
            continue;
        }
        let spec = ToolSpec {
            name,
            description: description
                .chars()
                .take(MAX_MCP_DESCRIPTION_CHARS)
                .collect(),
            input_schema: schema,
            requires_approval: false,
            output_schema,
        };
        listed.push((spec, tool));
    }
    listed
}

impl McpServers {
    /// Starts every server and its supervisor, and waits (up to the longest start timeout, for the
    /// handshake and again for the listing) for each one's first list of tools.
    pub async fn start(configs: Vec<McpServerConfig>) -> Arc<McpServers> {
        let mut ready = Vec::new();
        let servers: Vec<Arc<Server>> = configs
            .into_iter()
            .map(|config| {
                let server = Arc::new(Server {
                    config,
                    peer: Mutex::new(None),
                    tools: Mutex::new(Vec::new()),
                    listed: Mutex::new(Vec::new()),
                });
                let (tx, rx) = watch::channel(false);
                ready.push(rx);
                tokio::spawn(supervise(Arc::downgrade(&server), tx));
                server
            })
            .collect();
        // One deadline for all: the servers start side by side. Each has its handshake and its listing.
        let longest = servers
            .iter()
            .map(|s| s.config.start_timeout)
            .max()
            .unwrap_or(MCP_START_TIMEOUT);
        let deadline = tokio::time::Instant::now() + longest * 2;
        for mut rx in ready {
            let _ = tokio::time::timeout_at(deadline, rx.wait_for(|r| *r)).await;
        }
        Arc::new(McpServers { servers })
    }

    /// Every server's tools.
    pub fn tools(&self) -> Vec<ToolSpec> {
        self.servers
            .iter()
            .flat_map(|s| {
                lock(&s.tools)
                    .iter()
                    .map(|(spec, _)| spec.clone())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Calls tool `name` (as the agent lists it) with the model's `arguments` (JSON text): its result, or
    /// an error for the model. `None` when no server has a tool of that name. A `traceparent` (the tool
    /// call's span) goes in the request's `_meta`, so a traced MCP server continues the turn's trace.
    pub async fn call(
        &self,
        name: &str,
        arguments: &str,
        traceparent: Option<&str>,
    ) -> Option<Result<Value, String>> {
        let found = self.servers.iter().find_map(|s| {
            lock(&s.tools)
                .iter()
                .find(|(spec, _)| spec.name == name)
                .map(|(_, tool)| (s.clone(), tool.clone()))
        });
        match found {
            Some((server, tool)) => Some(server.call(&tool, arguments, traceparent).await),
            // A tool of a server that is down (a turn that began while it was up): say so.
            None => self
                .servers
                .iter()
                .find(|s| lock(&s.peer).is_none() && lock(&s.listed).iter().any(|n| n == name))
                .map(|s| {
                    Err(format!(
                        "the MCP server {} is down (it is being restarted)",
                        s.config.name
                    ))
                }),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Server {
    async fn call(
        &self,
        tool: &str,
        arguments: &str,
        traceparent: Option<&str>,
    ) -> Result<Value, String> {
        let name = &self.config.name;
        let Some(peer) = lock(&self.peer).clone() else {
            return Err(format!(
                "the MCP server {name} is down (it is being restarted)"
            ));
        };
        let args = super::tools::parse_arguments(arguments)?;
        let Value::Object(args) = args else {
            return Err("arguments must be a JSON object".into());
        };
        let mut params = CallToolRequestParams::new(tool.to_string()).with_arguments(args);
        if let Some(tp) = traceparent {
            params.set_traceparent(tp);
        }
        let result = match tokio::time::timeout(MCP_CALL_TIMEOUT, peer.call_tool(params)).await {
            Err(_) => {
                return Err(format!(
                    "the MCP server {name} did not answer within {} s",
                    MCP_CALL_TIMEOUT.as_secs()
                ))
            }
            Ok(Err(e)) => return Err(format!("the MCP server {name}: {e}")),
            Ok(Ok(r)) => r,
        };
        let text: String = result
            .content
            .iter()
            .filter_map(|c| serde_json::to_value(c).ok())
            .filter_map(|c| c["text"].as_str().map(String::from))
            .collect::<Vec<_>>()
            .join("\n");
        let mut text = text;
        if text.len() > MAX_MCP_RESULT_BYTES {
            text.truncate(text.floor_char_boundary(MAX_MCP_RESULT_BYTES));
        }
        if result.is_error == Some(true) {
            return Err(if text.is_empty() {
                format!("{tool} failed")
            } else {
                text
            });
        }
        Ok(match result.structured_content {
            Some(v) if v.to_string().len() <= MAX_MCP_RESULT_BYTES => v,
            _ => Value::String(text),
        })
    }
}

/// Runs `server` for as long as the agent holds it: start, list, wait for the end, back off, start again.
async fn supervise(server: std::sync::Weak<Server>, ready: watch::Sender<bool>) {
    let mut backoff = agentwire_core::Backoff::new(MCP_RESTART_FIRST, MCP_RESTART_MAX);
    loop {
        let Some(s) = server.upgrade() else { return };
        let config = s.config.clone();
        drop(s);
        let started = Instant::now();
        // A server that does not come up (or list its tools) in time is stopped and started again.
        match tokio::time::timeout(config.start_timeout, connect(&config))
            .await
            .unwrap_or(Err(StartError::HandshakeTimedOut))
        {
            Ok(running) => {
                let peer = running.peer().clone();
                let listed = tokio::time::timeout(config.start_timeout, peer.list_all_tools())
                    .await
                    .map_err(|_| StartError::ListTimedOut)
                    .and_then(|r| r.map_err(StartError::List));
                match listed {
                    Ok(tools) => {
                        let Some(s) = server.upgrade() else { return };
                        let listed = fit_tools(
                            &config.name,
                            tools.into_iter().map(|t| {
                                (
                                    t.name.to_string(),
                                    t.description.as_deref().unwrap_or("").to_string(),
                                    Value::Object((*t.input_schema).clone()),
                                    t.output_schema
                                        .as_ref()
                                        .map(|o| Value::Object((**o).clone())),
                                )
                            }),
                        );
                        tracing::info!(server = %config.name, tools = listed.len(), "MCP server up");
                        *lock(&s.listed) =
                            listed.iter().map(|(spec, _)| spec.name.clone()).collect();
                        *lock(&s.tools) = listed;
                        *lock(&s.peer) = Some(peer);
                        drop(s);
                        let _ = ready.send(true);
                        let ended = running.waiting().await;
                        if let Some(s) = server.upgrade() {
                            *lock(&s.peer) = None;
                            // Its tools go with it: the agent's card changes, and ai.info says so.
                            lock(&s.tools).clear();
                        }
                        tracing::warn!(server = %config.name, ?ended, "MCP server ended");
                    }
                    Err(error) => {
                        tracing::warn!(server = %config.name, %error, "MCP server did not list its tools");
                        let _ = running.cancel().await;
                    }
                }
            }
            Err(error) => {
                tracing::warn!(server = %config.name, %error, "MCP server did not start");
            }
        }
        // A start that failed counts as ready too: `serve` goes on, and the tools join once it is up.
        let _ = ready.send(true);
        if started.elapsed() >= MCP_HEALTHY_RUN {
            backoff.reset();
        }
        let wait = backoff.take();
        tracing::info!(server = %config.name, wait_ms = wait.as_millis() as u64, "restarting MCP server");
        tokio::time::sleep(wait).await;
    }
}

/// Why an MCP server did not come up: it did not start, answer the handshake or list its tools (in time).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Its `command` is empty.
    #[error("the MCP server has no command")]
    NoCommand,
    /// Its program could not be started.
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why not.
        #[source]
        source: std::io::Error,
    },
    /// The MCP handshake (`initialize`) failed (boxed: rmcp's error is large).
    #[error("{0}")]
    Handshake(#[source] Box<rmcp::service::ClientInitializeError>),
    /// No handshake within its start timeout.
    #[error("it did not answer the MCP handshake in time")]
    HandshakeTimedOut,
    /// `tools/list` failed.
    #[error("{0}")]
    List(#[source] rmcp::ServiceError),
    /// No `tools/list` answer within its start timeout.
    #[error("it did not list its tools in time")]
    ListTimedOut,
}

async fn connect(
    config: &McpServerConfig,
) -> Result<rmcp::service::RunningService<RoleClient, ()>, StartError> {
    let (program, args) = config.command.split_first().ok_or(StartError::NoCommand)?;
    let transport = TokioChildProcess::new(tokio::process::Command::new(program).configure(|c| {
        c.args(args)
            .env_clear()
            .envs(config.env.vars(std::env::vars_os()));
    }))
    .map_err(|source| StartError::Spawn {
        program: program.clone(),
        source,
    })?;
    ().serve(transport)
        .await
        .map_err(|e| StartError::Handshake(Box::new(e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_names_and_large_schemas_are_left_out_and_the_count_and_descriptions_are_bounded() {
        let schema = || serde_json::json!({ "type": "object" });
        let huge = serde_json::json!({ "type": "object", "description": "x".repeat(MAX_MCP_SCHEMA_BYTES) });
        let tools = vec![
            ("read.file".to_string(), "d".repeat(5000), schema(), None),
            // Comes out as `files__read_file` too.
            ("read_file".to_string(), String::new(), schema(), None),
            ("big".to_string(), String::new(), huge.clone(), None),
            (
                "write".to_string(),
                "writes".to_string(),
                schema(),
                Some(schema()),
            ),
            (
                "big_result".to_string(),
                String::new(),
                schema(),
                Some(huge),
            ),
        ];
        let fit = fit_tools("files", tools);
        let names: Vec<(&str, &str)> = fit
            .iter()
            .map(|(s, t)| (s.name.as_str(), t.as_str()))
            .collect();
        assert_eq!(
            names,
            [("files__read_file", "read.file"), ("files__write", "write")]
        );
        assert_eq!(
            fit[0].0.description.chars().count(),
            MAX_MCP_DESCRIPTION_CHARS
        );
        assert_eq!(
            fit[1].0.output_schema,
            Some(schema()),
            "its result's schema"
        );
        let many = (0..MAX_MCP_TOOLS_PER_SERVER + 5)
            .map(|n| (format!("t{n}"), String::new(), schema(), None));
        assert_eq!(fit_tools("s", many).len(), MAX_MCP_TOOLS_PER_SERVER);
    }

    #[test]
    fn tool_names_are_fit_for_the_api() {
        assert_eq!(tool_name("files", "read_file"), "files__read_file");
        assert_eq!(tool_name("my files", "read.file"), "my_files__read_file");
        assert_eq!(tool_name("s", &"x".repeat(100)).len(), MAX_TOOL_NAME_CHARS);
    }
}
