//! roost jobs of a profile of the agent's name: every agent on it is a hosted profile of the one roost
//! supervisor (which `serve` runs whatever fronts are on), each job of the profile a conversation with it.

use super::{DaemonFront, StartContext, Started};
use crate::agents::{Prepared, Shared};
use crate::config::Resolved;
use agentwire_roost::front::RoostHost;
use futures_util::future::BoxFuture;
use futures_util::FutureExt;

/// The roost front.
pub(crate) struct Roost;

impl DaemonFront for Roost {
    fn name(&self) -> &'static str {
        agentwire_roost::front::PROTOCOL
    }

    fn about(&self) -> &'static str {
        "roost jobs of a profile of the agent's name"
    }

    /// Unless the agent is a roost job already, or a roost profile has its name.
    fn serves_default(&self, config: &Resolved) -> bool {
        config.roost.hosted.contains(&config.agent.name)
    }

    /// `[roost]`: the supervisor's socket and profiles (a profile's secrets redacted).
    fn section(&self, config: &Resolved) -> Option<(&'static str, serde_json::Value)> {
        let r = &config.roost;
        Some((
            "roost",
            super::view_value(agentwire_roost::daemon::settings::view(
                &r.socket,
                r.config.as_deref(),
                &r.profiles,
                crate::show_config::REDACTED,
            )),
        ))
    }

    /// Its hosted profile, which the supervisor is started with.
    fn prepare(&self, agent: &mut Prepared, shared: &Shared<'_>) -> Result<(), String> {
        agent.roost = Some(RoostHost::new(
            agent.engine.clone(),
            &agent.spec.name,
            shared.hosted.clone(),
        ));
        Ok(())
    }

    /// The supervisor serves the hosted profiles: nothing more to start.
    fn start<'a>(
        &'a self,
        _agents: Vec<&'a Prepared>,
        _ctx: &'a StartContext<'a>,
    ) -> BoxFuture<'a, Result<Started, String>> {
        async { Ok(Started::default()) }.boxed()
    }

    /// Its jobs take replies once the engine's recovery pass has run.
    fn recovered(&self, agent: &Prepared) {
        if let Some(h) = &agent.roost {
            h.recovered();
        }
    }
}
