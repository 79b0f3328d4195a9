//! `kind = "cmd"`: a command run once a turn, the prompt on its stdin and its stdout the result.

use crate::kind::{
    self, AgentKind, AgentPlan, BuildContext, BuildError, EnvUse, KindEntry, KindError,
};
use agentwire_core::child_env::ChildEnv;
use agentwire_engine::Agent;
use futures_util::future::BoxFuture;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The kind's name.
pub const KIND: &str = "cmd";

/// The command kind.
pub struct Cmd;

/// Its section.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    /// The program and its arguments.
    command: Option<Vec<String>>,
    /// How long a turn may run, in seconds.
    request_timeout_secs: Option<u64>,
    /// Variables set in the command's environment, beside the allowlist.
    env: Option<BTreeMap<String, String>>,
    /// The daemon's variables passed on by name.
    pass_env: Option<Vec<String>>,
}

impl AgentKind for Cmd {
    fn name(&self) -> &'static str {
        KIND
    }
    fn about(&self) -> &'static str {
        "a command run once a turn"
    }
    fn keys(&self) -> &'static [&'static str] {
        kind::keys_of::<Section>()
    }
    fn resolve(&self, entry: &KindEntry<'_>) -> Result<Arc<dyn AgentPlan>, KindError> {
        let s: Section = entry.section()?;
        Ok(Arc::new(CmdPlan {
            command: kind::command(s.command)?,
            timeout: kind::turn_timeout(s.request_timeout_secs)?,
            env: kind::child_env(s.env, s.pass_env)?,
        }))
    }
}

/// A command agent, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmdPlan {
    /// The program and its arguments (not empty).
    pub command: Vec<String>,
    /// How long a turn may run.
    pub timeout: Duration,
    /// What its environment holds beyond the allowlist.
    pub env: ChildEnv,
}

impl AgentPlan for CmdPlan {
    fn kind(&self) -> &'static str {
        KIND
    }
    fn view(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut view = serde_json::Map::new();
        view.insert("command".into(), serde_json::json!(self.command));
        view.insert("request_timeout_secs".into(), self.timeout.as_secs().into());
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
        _ctx: &'a BuildContext,
    ) -> BoxFuture<'a, Result<Arc<dyn Agent>, BuildError>> {
        Box::pin(async move {
            let agent = crate::CmdAgent::new(name, self.command.clone(), self.timeout)
                .with_env(self.env.clone());
            Ok(Arc::new(agent) as Arc<dyn Agent>)
        })
    }
}
