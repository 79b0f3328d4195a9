//! `kind = "roost"`: turns served by jobs of a roost profile on the daemon's own supervisor.

use crate::kind::{AgentKind, AgentPlan, BuildContext, BuildError, KindEntry, KindError};
use agentwire_engine::Agent;
use futures_util::future::BoxFuture;
use serde::Deserialize;
use std::sync::Arc;

/// The kind's name.
pub const KIND: &str = "roost";

/// The roost kind.
pub struct Roost;

/// Its section.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    /// The profile whose jobs serve the turns.
    profile: Option<String>,
}

impl AgentKind for Roost {
    fn name(&self) -> &'static str {
        KIND
    }
    fn about(&self) -> &'static str {
        "jobs of a roost profile"
    }
    fn keys(&self) -> &'static [&'static str] {
        crate::kind::keys_of::<Section>()
    }
    fn resolve(&self, entry: &KindEntry<'_>) -> Result<Arc<dyn AgentPlan>, KindError> {
        match entry.section::<Section>()?.profile {
            Some(profile) => Ok(plan(&profile)),
            None => Err(KindError::setting(
                "profile",
                "missing: the roost profile whose jobs serve the turns",
            )),
        }
    }
}

/// The plan of an agent served by jobs of `profile` (also what `--agent roost:<profile>` serves).
pub fn plan(profile: &str) -> Arc<dyn AgentPlan> {
    Arc::new(RoostPlan {
        profile: profile.to_string(),
    })
}

/// A roost agent, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoostPlan {
    /// The profile (checked against the supervisor's profiles by the daemon).
    pub profile: String,
}

impl AgentPlan for RoostPlan {
    fn kind(&self) -> &'static str {
        KIND
    }
    fn view(&self) -> serde_json::Map<String, serde_json::Value> {
        [("profile".to_string(), self.profile.clone().into())]
            .into_iter()
            .collect()
    }
    fn roost_profile(&self) -> Option<&str> {
        Some(&self.profile)
    }
    fn build<'a>(
        &'a self,
        _name: &'a str,
        ctx: &'a BuildContext,
    ) -> BoxFuture<'a, Result<Arc<dyn Agent>, BuildError>> {
        Box::pin(async move {
            Ok(Arc::new(crate::RoostJobAgent::new(
                ctx.roost_socket.clone(),
                &self.profile,
            )) as Arc<dyn Agent>)
        })
    }
}
