//! `kind = "acp"`: an agent speaking ACP over its stdio, its process kept across turns; the plug-in
//! ([`agentwire_agents::kind::AgentKind`]) that owns its `[agents.<name>]` section.

use agentwire_agents::kind::{
    self, AgentKind, AgentPlan, BuildContext, BuildError, EnvUse, KindEntry, KindError,
};
use agentwire_core::child_env::ChildEnv;
use agentwire_engine::Agent;
use futures_util::future::BoxFuture;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// The kind's name.
pub const KIND: &str = "acp";

/// Where each ACP agent's kept sessions are listed, in the data dir (`<name>.sessions.json`).
pub const SESSIONS_DIR: &str = "acp";

/// The ACP kind.
pub struct Acp;

/// Its section.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    /// The agent's program and arguments, run once and kept.
    command: Option<Vec<String>>,
    /// Its working directory and its sessions' `cwd` (absolute).
    cwd: Option<PathBuf>,
    /// Variables set in its environment, beside the allowlist.
    env: Option<BTreeMap<String, String>>,
    /// The daemon's variables passed on to it by name.
    pass_env: Option<Vec<String>>,
}

impl AgentKind for Acp {
    fn name(&self) -> &'static str {
        KIND
    }
    fn about(&self) -> &'static str {
        "an agent speaking ACP over its stdio"
    }
    fn keys(&self) -> &'static [&'static str] {
        kind::keys_of::<Section>()
    }
    fn resolve(&self, entry: &KindEntry<'_>) -> Result<Arc<dyn AgentPlan>, KindError> {
        let s: Section = entry.section()?;
        let command = kind::command(s.command)?;
        if let Some(p) = s.cwd.as_ref().filter(|p| !p.is_absolute()) {
            return Err(KindError::setting(
                "cwd",
                format!(
                    "{} is not an absolute path (ACP sessions take an absolute one)",
                    p.display()
                ),
            ));
        }
        Ok(Arc::new(AcpPlan {
            command,
            env: kind::child_env(s.env, s.pass_env)?,
            cwd: s.cwd,
        }))
    }
}

/// An ACP agent, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcpPlan {
    /// The program and its arguments (not empty).
    pub command: Vec<String>,
    /// What its environment holds beyond the allowlist (`env`, `pass_env`).
    pub env: ChildEnv,
    /// Its working directory and its sessions' `cwd` (absolute), when set (else
    /// `<data dir>/work/<name>`).
    pub cwd: Option<PathBuf>,
}

impl AgentPlan for AcpPlan {
    fn kind(&self) -> &'static str {
        KIND
    }
    fn view(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut view = serde_json::Map::new();
        view.insert("command".into(), serde_json::json!(self.command));
        if let Some(cwd) = &self.cwd {
            view.insert("cwd".into(), cwd.display().to_string().into());
        }
        kind::show_env(&self.env, &mut view);
        view
    }
    fn env_use(&self) -> EnvUse<'_> {
        EnvUse {
            passed: self.env.pass.iter().map(String::as_str).collect(),
            ..EnvUse::default()
        }
    }
    fn build<'a>(
        &'a self,
        name: &'a str,
        ctx: &'a BuildContext,
    ) -> BoxFuture<'a, Result<Arc<dyn Agent>, BuildError>> {
        Box::pin(async move {
            let cwd = match &self.cwd {
                Some(c) => c.clone(),
                None => {
                    std::path::absolute(ctx.work_dir(name)).map_err(|source| BuildError::Io {
                        agent: name.to_string(),
                        what: "its directory".into(),
                        source,
                    })?
                }
            };
            let launch = crate::process::Launch {
                name: name.to_string(),
                command: self.command.clone(),
                env: self.env.vars(std::env::vars_os()).into_iter().collect(),
                cwd,
            };
            let sessions = ctx
                .data_dir
                .join(SESSIONS_DIR)
                .join(format!("{name}.sessions.json"));
            Ok(Arc::new(crate::AcpAgent::new(
                name,
                crate::AcpSettings {
                    launch,
                    sessions_file: Some(sessions),
                },
            )) as Arc<dyn Agent>)
        })
    }
}
