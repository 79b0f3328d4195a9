//! A plug-in front ([`FrontKind`], one crate each) as an entry of the daemon's list: on when its section
//! says so and the HTTP server runs, started once for every agent exposed on it.

use super::{DaemonFront, StartContext, Started};
use crate::agents::Prepared;
use crate::config::Resolved;
use agentwire_http::front::{ExposedAgent, FrontContext, FrontKind};
use futures_util::future::BoxFuture;
use futures_util::FutureExt;

/// A plug-in front.
pub(crate) struct PlugIn(pub(crate) &'static dyn FrontKind);

impl DaemonFront for PlugIn {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn about(&self) -> &'static str {
        self.0.about()
    }

    fn plug_in(&self) -> Option<&'static dyn FrontKind> {
        Some(self.0)
    }

    /// Every plug-in front that runs serves the `--agent` agent.
    fn serves_default(&self, config: &Resolved) -> bool {
        config
            .fronts
            .iter()
            .any(|f| f.kind.name() == self.name() && f.runs(config.http.is_some()))
    }

    fn section(&self, config: &Resolved) -> Option<(&'static str, serde_json::Value)> {
        let f = config
            .fronts
            .iter()
            .find(|f| f.kind.name() == self.name())?;
        Some((self.name(), f.plan.view()))
    }

    fn start<'a>(
        &'a self,
        agents: Vec<&'a Prepared>,
        ctx: &'a StartContext<'a>,
    ) -> BoxFuture<'a, Result<Started, String>> {
        async move {
            let name = self.name();
            let plan = ctx
                .plug_in(name)
                .ok_or_else(|| format!("the {name} front has no settings"))?;
            let agents = agents
                .into_iter()
                .map(|p| ExposedAgent {
                    name: p.name().to_string(),
                    engine: p.engine().clone(),
                    default: p.is_default(),
                })
                .collect();
            let s = plan
                .plan
                .start(FrontContext {
                    agents,
                    hub: ctx.hub.clone(),
                })
                .await
                .map_err(|e| e.to_string())?;
            Ok(Started {
                shared: Some(s.front),
                routes: s.routes,
                ..Started::default()
            })
        }
        .boxed()
    }
}
