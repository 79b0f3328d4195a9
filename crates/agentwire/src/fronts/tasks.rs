//! Task cards in Nostr rooms (`[tasks]`): the `--agent` agent only, with its NIP-XX key, on the embedded
//! relay when it runs, else on the first relay given.

use super::{DaemonFront, StartContext, Started};
use crate::agents::Prepared;
use crate::config::Resolved;
use agentwire_engine::Front;
use agentwire_nostr::crypto::Crypto;
use agentwire_tasks::{TaskAdapter, TaskConfig};
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use std::sync::Arc;

/// The task-card front.
pub(crate) struct Tasks;

impl DaemonFront for Tasks {
    fn name(&self) -> &'static str {
        agentwire_tasks::PROTOCOL
    }

    fn about(&self) -> &'static str {
        "task cards in Nostr rooms (the --agent agent only)"
    }

    fn further(&self) -> bool {
        false
    }

    /// With `[tasks] watch` naming rooms.
    fn serves_default(&self, config: &Resolved) -> bool {
        config.tasks.is_some()
    }

    fn section(&self, config: &Resolved) -> Option<(&'static str, serde_json::Value)> {
        let t = config.tasks.as_ref()?;
        Some((
            "tasks",
            super::view_value(agentwire_tasks::settings::view(t)),
        ))
    }

    fn start<'a>(
        &'a self,
        agents: Vec<&'a Prepared>,
        ctx: &'a StartContext<'a>,
    ) -> BoxFuture<'a, Result<Started, String>> {
        async move {
            let mut started = Started::default();
            let Some(t) = &ctx.config.tasks else {
                return Ok(started);
            };
            let config = TaskConfig {
                relay: ctx.relays.first().cloned().unwrap_or_default(),
                watch: t.watch.iter().cloned().collect(),
                allowed: t.allowed.iter().copied().collect(),
                home: t.home.clone(),
                progress_interval: t.progress_interval,
                question_window: t.question_window,
                backlog_horizon: ctx.config.nipxx.backlog_horizon,
                max_running: t.max_running,
                merge_waiting: t.merge_waiting,
                legacy_cards: t.legacy_cards,
                verified_relay: ctx.embedded.is_some(),
                max_request_age: ctx.retention(),
            };
            for p in agents {
                let keys = p
                    .keys
                    .clone()
                    .ok_or("the task cards' agent has no NIP-XX key")?;
                let adapter = TaskAdapter::start(
                    config.clone(),
                    Arc::new(Crypto::new(keys)),
                    p.engine.clone(),
                )
                .await;
                started
                    .own
                    .push((p.spec.name.clone(), adapter as Arc<dyn Front>));
            }
            // Who may post tasks (public keys, no secret): `agentwire task` says so when its key is not one.
            let allowed: Vec<String> = t.allowed.iter().map(|k| k.to_hex()).collect();
            started.ready = Some((
                "tasks",
                serde_json::json!({ "watch": t.watch, "home": t.home, "allowed": allowed }),
            ));
            Ok(started)
        }
        .boxed()
    }
}
