//! `kind = "fisk"`: a fisk-ai worker on some NATS account, reached as its caller with this daemon's
//! credentials there.

use agentwire_agents::kind::{
    self, AgentKind, AgentPlan, BuildContext, BuildError, EnvUse, KindEntry, KindError,
};
use agentwire_engine::Agent;
use agentwire_fisk::connection::NatsConnect;
use agentwire_fisk::settings::NatsSection;
use agentwire_fisk::wire::Identity;
use futures_util::future::BoxFuture;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// The kind's name.
pub const KIND: &str = "fisk";

/// The remote fisk-ai kind.
pub struct FiskKind;

/// Its section.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    /// The NATS server(s) the worker is on (as `[nats] url`).
    url: Option<String>,
    /// The worker's fisk-ai identity.
    identity: Option<String>,
    /// This daemon's credentials and TLS on that NATS account, as `[nats]` takes them.
    nats: Option<NatsSection>,
    /// How long a turn may take there, in seconds.
    request_timeout_secs: Option<u64>,
}

impl AgentKind for FiskKind {
    fn name(&self) -> &'static str {
        KIND
    }
    fn about(&self) -> &'static str {
        "a fisk-ai worker on some NATS account"
    }
    fn keys(&self) -> &'static [&'static str] {
        kind::keys_of::<Section>()
    }
    fn served_elsewhere(&self) -> bool {
        true
    }
    fn resolve(&self, entry: &KindEntry<'_>) -> Result<Arc<dyn AgentPlan>, KindError> {
        let s: Section = entry.section()?;
        let Some(url) = &s.url else {
            return Err(KindError::setting(
                "url",
                "missing: the NATS server(s) the worker is reached on",
            ));
        };
        let Some(identity) = s.identity else {
            return Err(KindError::setting(
                "identity",
                "missing: the worker's fisk-ai identity",
            ));
        };
        Identity::new(identity.clone()).map_err(|_| {
            KindError::setting(
                "identity",
                format!("{identity:?} is not a fisk-ai identity (letters, digits, - and _)"),
            )
        })?;
        let section = s.nats.unwrap_or_default();
        let connect = agentwire_fisk::settings::connect(url, "[agents.<name>] url", &section)
            .map_err(|e| KindError::setting("nats", e.to_string()))?;
        let secrets = [&section.password_env, &section.token_env]
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        Ok(Arc::new(FiskPlan {
            connect: Box::new(connect),
            identity,
            timeout: kind::turn_timeout(s.request_timeout_secs)?,
            secrets,
        }))
    }
}

/// A remote fisk-ai worker, resolved.
#[derive(Debug, Clone)]
pub struct FiskPlan {
    /// The NATS servers and this daemon's credentials there.
    pub connect: Box<NatsConnect>,
    /// The worker's fisk-ai identity.
    pub identity: String,
    /// How long a turn may take there.
    pub timeout: Duration,
    /// The variables its credentials are read from (`password_env`, `token_env`).
    pub secrets: Vec<String>,
}

impl AgentPlan for FiskPlan {
    fn kind(&self) -> &'static str {
        KIND
    }
    // The servers with any credentials in them redacted; the credentials by file or variable.
    fn view(&self) -> serde_json::Map<String, serde_json::Value> {
        [
            ("url", self.connect.shown().into()),
            ("identity", self.identity.clone().into()),
            ("request_timeout_secs", self.timeout.as_secs().into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
    fn env_use(&self) -> EnvUse<'_> {
        EnvUse {
            secrets: self.secrets.iter().map(String::as_str).collect(),
            ..EnvUse::default()
        }
    }
    fn build<'a>(
        &'a self,
        name: &'a str,
        _ctx: &'a BuildContext,
    ) -> BoxFuture<'a, Result<Arc<dyn Agent>, BuildError>> {
        Box::pin(async move {
            Ok(Arc::new(crate::FiskRemote::new(
                name,
                crate::FiskRemoteSettings {
                    connect: (*self.connect).clone(),
                    identity: self.identity.clone(),
                    timeout: self.timeout,
                },
            )) as Arc<dyn Agent>)
        })
    }
}
