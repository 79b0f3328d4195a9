//! NIP-XX AI agent messages on Nostr relays: every agent on it signs with its own key (the `--agent`
//! agent's `agent.key` in the data dir, or `[nipxx] key_file`; a further agent's `agents/<name>.key`, or
//! its `key_file`) and has a runtime of its own on the daemon's relays.

use super::{DaemonFront, StartContext, Started};
use crate::agents::{Prepared, Shared, AGENT_KEYS_DIR, AGENT_KEY_FILE};
use crate::config::Resolved;
use crate::keys;
use agentwire_engine::Front;
use agentwire_nostr::crypto::Crypto;
use agentwire_nostr::runtime::{Runtime, RuntimeConfig};
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use std::sync::Arc;

/// The NIP-XX front.
pub(crate) struct Nipxx;

impl DaemonFront for Nipxx {
    fn name(&self) -> &'static str {
        agentwire_nostr::runtime::PROTOCOL
    }

    fn about(&self) -> &'static str {
        "NIP-XX AI agent messages on Nostr relays"
    }

    /// The `--agent` agent is always on NIP-XX: its key is the daemon's identity on the relays.
    fn serves_default(&self, _config: &Resolved) -> bool {
        true
    }

    fn section(&self, config: &Resolved) -> Option<(&'static str, serde_json::Value)> {
        Some((
            "nipxx",
            super::view_value(agentwire_nostr::settings::view(&config.nipxx)),
        ))
    }

    /// Loads (or makes) the agent's key: the embedded relay lets it write without a rate.
    fn prepare(&self, agent: &mut Prepared, shared: &Shared<'_>) -> Result<(), String> {
        let spec = &agent.spec;
        let keys = match (&spec.key_file, spec.default) {
            (Some(path), _) => keys::load_shared(path)?,
            (None, true) => keys::load_or_create(shared.data_dir, AGENT_KEY_FILE)?,
            (None, false) => keys::load_or_create(
                &shared.data_dir.join(AGENT_KEYS_DIR),
                &crate::agents::key_file(&spec.name),
            )?,
        };
        agent.keys = Some(keys);
        Ok(())
    }

    fn start<'a>(
        &'a self,
        agents: Vec<&'a Prepared>,
        ctx: &'a StartContext<'a>,
    ) -> BoxFuture<'a, Result<Started, String>> {
        async move {
            let nipxx = &ctx.config.nipxx;
            let config = RuntimeConfig {
                relays: ctx.relays.to_vec(),
                allow: nipxx.allow.clone().map(|a| a.into_iter().collect()),
                block: nipxx.block.iter().copied().collect(),
                rate: nipxx.rate,
                backlog_horizon: nipxx.backlog_horizon,
                nip59: nipxx.nip59,
                text_envelope: nipxx.text_envelope,
                // Each agent's own, set below.
                pricing_hints: None,
                // The embedded relay checks ids and signatures before it stores or sends an event.
                verified_relays: ctx.embedded.iter().cloned().collect(),
                max_prompt_age: ctx.retention(),
            };
            let mut started = Started::default();
            for p in agents {
                let keys = p.keys.clone().ok_or("an agent on NIP-XX has no key")?;
                let config = RuntimeConfig {
                    pricing_hints: p.spec.pricing.clone(),
                    ..config.clone()
                };
                let mut crypto = Crypto::new(keys);
                if let Some(signed_here) = ctx.signed_here.clone() {
                    crypto = crypto.with_signed_hook(Arc::new(move |e| signed_here.remember(e)));
                }
                let runtime = Runtime::start(config, Arc::new(crypto), p.engine.clone()).await;
                started
                    .own
                    .push((p.spec.name.clone(), runtime as Arc<dyn Front>));
            }
            Ok(started)
        }
        .boxed()
    }
}
