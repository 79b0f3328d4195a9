//! A fisk-ai worker on some NATS account, reached as its caller (`kind = "fisk"`).
//!
//! Being built (issue 35): until then every turn fails `unsupported_feature`.

use agentwire_core::{Failure, Outcome, TurnFailure};
use agentwire_engine::{Agent, AgentCard, TurnContext, TurnInput};
use agentwire_fisk::connection::NatsConnect;
use futures_util::future::BoxFuture;
use std::time::Duration;

/// How a remote fisk-ai worker is reached.
#[derive(Clone)]
pub struct FiskRemoteSettings {
    /// The NATS servers and this daemon's credentials there.
    pub connect: NatsConnect,
    /// The worker's fisk-ai identity.
    pub identity: String,
    /// How long a turn may take there.
    pub timeout: Duration,
}

/// A remote fisk-ai worker.
pub struct FiskRemote {
    name: String,
    settings: FiskRemoteSettings,
}

impl FiskRemote {
    /// The agent `name`, reached as `settings` say.
    pub fn new(name: impl Into<String>, settings: FiskRemoteSettings) -> Self {
        FiskRemote {
            name: name.into(),
            settings,
        }
    }
}

impl Agent for FiskRemote {
    fn card(&self) -> AgentCard {
        AgentCard {
            name: self.name.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: format!("the fisk-ai worker {}", self.settings.identity),
            models: vec!["fisk".into()],
            default_model: "fisk".into(),
            tools: vec![],
            max_prompt_bytes: 60_000,
            max_context_tokens: 0,
        }
    }

    fn run(&self, _input: TurnInput, _ctx: TurnContext) -> BoxFuture<'static, Outcome> {
        Box::pin(async {
            Outcome::Failure(Failure::new(
                TurnFailure::UnsupportedFeature,
                "remote fisk-ai agents are not built yet",
            ))
        })
    }
}
