//! `kind = "a2a"`: an A2A agent behind a URL, reached as its client.

use agentwire_agents::kind::{
    self, AgentKind, AgentPlan, BuildContext, BuildError, EnvUse, KindEntry, KindError,
};
use agentwire_engine::Agent;
use futures_util::future::BoxFuture;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// The kind's name.
pub const KIND: &str = "a2a";

/// The remote A2A kind.
pub struct A2aKind;

/// Its section.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    /// The agent card's URL.
    url: Option<String>,
    /// The environment variable holding the bearer token the agent's card asks for.
    token_env: Option<String>,
    /// How long a turn may take there, in seconds.
    request_timeout_secs: Option<u64>,
}

impl AgentKind for A2aKind {
    fn name(&self) -> &'static str {
        KIND
    }
    fn about(&self) -> &'static str {
        "an A2A agent behind a URL"
    }
    fn keys(&self) -> &'static [&'static str] {
        kind::keys_of::<Section>()
    }
    fn served_elsewhere(&self) -> bool {
        true
    }
    fn resolve(&self, entry: &KindEntry<'_>) -> Result<Arc<dyn AgentPlan>, KindError> {
        let s: Section = entry.section()?;
        let Some(url) = s.url else {
            return Err(KindError::setting("url", "missing: the agent card's URL"));
        };
        match url.parse::<reqwest::Url>() {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
            _ => {
                return Err(KindError::setting(
                    "url",
                    format!("{url:?} is not an http(s) URL"),
                ))
            }
        }
        if let Some(var) = &s.token_env {
            if !kind::is_var_name(var) {
                return Err(KindError::setting(
                    "token_env",
                    format!("{var:?} is not an environment variable's name"),
                ));
            }
        }
        Ok(Arc::new(A2aPlan {
            card_url: url,
            token_env: s.token_env,
            timeout: kind::turn_timeout(s.request_timeout_secs)?,
        }))
    }
}

/// A remote A2A agent, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct A2aPlan {
    /// Its agent card's URL.
    pub card_url: String,
    /// The environment variable holding the bearer token its card asks for, when it asks for one.
    pub token_env: Option<String>,
    /// How long a turn may take there.
    pub timeout: Duration,
}

impl AgentPlan for A2aPlan {
    fn kind(&self) -> &'static str {
        KIND
    }
    fn view(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut view = serde_json::Map::new();
        view.insert("url".into(), kind::shown_url(&self.card_url).into());
        if let Some(var) = &self.token_env {
            view.insert("token_env".into(), var.clone().into());
        }
        view.insert("request_timeout_secs".into(), self.timeout.as_secs().into());
        view
    }
    fn env_use(&self) -> EnvUse<'_> {
        EnvUse {
            secrets: self.token_env.iter().map(String::as_str).collect(),
            ..EnvUse::default()
        }
    }
    fn build<'a>(
        &'a self,
        name: &'a str,
        _ctx: &'a BuildContext,
    ) -> BoxFuture<'a, Result<Arc<dyn Agent>, BuildError>> {
        Box::pin(async move {
            let token = match &self.token_env {
                None => None,
                Some(var) => Some(kind::required_var(name, "token_env", var)?),
            };
            Ok(Arc::new(crate::A2aRemote::new(
                name,
                crate::A2aRemoteSettings {
                    card_url: self.card_url.clone(),
                    token,
                    timeout: self.timeout,
                },
            )) as Arc<dyn Agent>)
        })
    }
}
