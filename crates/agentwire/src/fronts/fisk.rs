//! fisk-ai prompts on NATS: every agent on it has a worker of its own under its identity (the `--agent`
//! agent's `[nats] identity`, a further agent's `nats_identity`, else its name) on the one NATS server.

use super::{DaemonFront, StartContext, Started};
use crate::agents::Prepared;
use crate::config::Resolved;
use agentwire_engine::Front;
use agentwire_fisk::worker::{Worker, WorkerConfig};
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use std::sync::{Arc, Weak};

/// The fisk-ai front.
pub(crate) struct Fisk;

impl DaemonFront for Fisk {
    fn name(&self) -> &'static str {
        agentwire_fisk::worker::PROTOCOL
    }

    fn about(&self) -> &'static str {
        "fisk-ai prompts on NATS"
    }

    /// With a NATS server (`--nats`, `[nats] url`).
    fn serves_default(&self, config: &Resolved) -> bool {
        config.nats.is_some()
    }

    /// `[nats]`, when a NATS server is given (its URL's user-info redacted).
    fn section(&self, config: &Resolved) -> Option<(&'static str, serde_json::Value)> {
        let nats = config.nats.as_ref()?;
        Some((
            "nats",
            super::view_value(agentwire_fisk::settings::view(
                nats,
                crate::show_config::redact_url,
            )),
        ))
    }

    fn start<'a>(
        &'a self,
        agents: Vec<&'a Prepared>,
        ctx: &'a StartContext<'a>,
    ) -> BoxFuture<'a, Result<Started, String>> {
        async move {
            let mut started = Started::default();
            let Some(nats) = &ctx.config.nats else {
                return Ok(started);
            };
            let mut workers: Vec<Weak<Worker>> = Vec::new();
            for p in agents {
                let Some(identity) = &p.spec.fisk_identity else {
                    continue;
                };
                let config = WorkerConfig {
                    identity: identity.clone(),
                    ..nats.clone()
                };
                let w = Worker::start(config, p.engine.clone()).await.map_err(|e| {
                    match p.spec.default {
                        true => format!("fisk-ai worker: {e}"),
                        false => format!("[agents.{}] fisk-ai worker: {e}", p.spec.name),
                    }
                })?;
                let mut fields = serde_json::Map::new();
                fields.insert("identity".into(), w.identity().into());
                started.ready_of_agent.push((p.spec.name.clone(), fields));
                // The `--agent` agent's worker is the one client commands reach by default.
                if p.spec.default {
                    let mut nats = serde_json::json!({ "url": w.url(), "identity": w.identity() });
                    if let Some(jobs) = w.jobs_subject() {
                        nats["jobs"] = jobs.into();
                    }
                    started.ready = Some(("nats", nats));
                }
                if w.jobs_subject().is_some() {
                    workers.push(Arc::downgrade(&w));
                }
                started.own.push((p.spec.name.clone(), w as Arc<dyn Front>));
            }
            // The queued jobs' depth of each worker serving the jobs channel.
            if !workers.is_empty() {
                started.scrape = Some(Arc::new(move |m| {
                    let queued: Vec<(String, i64)> = workers
                        .iter()
                        .filter_map(|w| {
                            let w = w.upgrade()?;
                            let n = w.jobs_queued()?;
                            Some((
                                w.identity().to_string(),
                                i64::try_from(n).unwrap_or(i64::MAX),
                            ))
                        })
                        .collect();
                    m.set_fisk_jobs_queued(&queued);
                }));
            }
            Ok(started)
        }
        .boxed()
    }
}
