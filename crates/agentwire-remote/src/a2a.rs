//! An A2A agent behind a URL, reached as its client (`kind = "a2a"`).
//!
//! Being built (issue 35): until then every turn fails `unsupported_feature`.

use agentwire_core::{Failure, Outcome, TurnFailure};
use agentwire_engine::{Agent, AgentCard, TurnContext, TurnInput};
use futures_util::future::BoxFuture;
use std::time::Duration;

/// How a remote A2A agent is reached.
#[derive(Clone)]
pub struct A2aRemoteSettings {
    /// Its agent card's URL.
    pub card_url: String,
    /// The bearer token its card asks for, when it asks for one (read from `token_env` at start).
    pub token: Option<String>,
    /// How long a turn may take there.
    pub timeout: Duration,
}

/// A remote A2A agent.
pub struct A2aRemote {
    name: String,
    settings: A2aRemoteSettings,
}

impl A2aRemote {
    /// The agent `name`, reached as `settings` say.
    pub fn new(name: impl Into<String>, settings: A2aRemoteSettings) -> Self {
        A2aRemote {
            name: name.into(),
            settings,
        }
    }
}

impl Agent for A2aRemote {
    fn card(&self) -> AgentCard {
        AgentCard {
            name: self.name.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: format!("the A2A agent at {}", self.settings.card_url),
            models: vec!["a2a".into()],
            default_model: "a2a".into(),
            tools: vec![],
            max_prompt_bytes: 60_000,
            max_context_tokens: 0,
        }
    }

    fn run(&self, _input: TurnInput, _ctx: TurnContext) -> BoxFuture<'static, Outcome> {
        Box::pin(async {
            Outcome::Failure(Failure::new(
                TurnFailure::UnsupportedFeature,
                "remote A2A agents are not built yet",
            ))
        })
    }
}
