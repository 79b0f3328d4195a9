//! `kind = "demo"`: the offline demo agent, which has no keys of its own.

use crate::kind::{AgentKind, AgentPlan, BuildContext, BuildError, KindEntry, KindError};
use agentwire_engine::Agent;
use futures_util::future::BoxFuture;
use serde::Deserialize;
use std::sync::Arc;

/// The kind's name.
pub const KIND: &str = "demo";

/// The demo kind.
pub struct Demo;

/// Its section: no keys.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {}

impl AgentKind for Demo {
    fn name(&self) -> &'static str {
        KIND
    }
    fn about(&self) -> &'static str {
        "the offline demo agent"
    }
    fn keys(&self) -> &'static [&'static str] {
        crate::kind::keys_of::<Section>()
    }
    fn resolve(&self, entry: &KindEntry<'_>) -> Result<Arc<dyn AgentPlan>, KindError> {
        entry.section::<Section>()?;
        Ok(plan())
    }
}

/// The demo agent's plan (also what `--agent demo` serves without an entry).
pub fn plan() -> Arc<dyn AgentPlan> {
    Arc::new(DemoPlan)
}

/// The demo agent, resolved: nothing to settle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoPlan;

impl AgentPlan for DemoPlan {
    fn kind(&self) -> &'static str {
        KIND
    }
    fn view(&self) -> serde_json::Map<String, serde_json::Value> {
        serde_json::Map::new()
    }
    fn build<'a>(
        &'a self,
        _name: &'a str,
        _ctx: &'a BuildContext,
    ) -> BoxFuture<'a, Result<Arc<dyn Agent>, BuildError>> {
        Box::pin(async { Ok(Arc::new(crate::DemoAgent) as Arc<dyn Agent>) })
    }
}
