//! `kind = "nipxx"`: a NIP-XX agent on some relay, reached as its client with a key of this daemon's.

use agentwire_agents::kind::{
    self, AgentKind, AgentPlan, BuildContext, BuildError, KindEntry, KindError,
};
use agentwire_engine::Agent;
use futures_util::future::BoxFuture;
use nostr::prelude::PublicKey;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// The kind's name.
pub const KIND: &str = "nipxx";

/// The most relays a remote NIP-XX agent may list: a turn uses the first that connects.
pub const MAX_REMOTE_RELAYS: usize = 8;

/// Where this daemon's client keys for remote agents are kept, in the data dir (one per entry, kept, so
/// the remote agent sees one sender).
pub const CLIENT_KEYS_DIR: &str = "remote";

/// The remote NIP-XX kind.
pub struct NipxxKind;

/// Its section.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    /// The remote agent's public key (hex or npub).
    pubkey: Option<String>,
    /// The relays it is on.
    relays: Option<Vec<String>>,
    /// How long a turn may take there, in seconds.
    request_timeout_secs: Option<u64>,
}

impl AgentKind for NipxxKind {
    fn name(&self) -> &'static str {
        KIND
    }
    fn about(&self) -> &'static str {
        "a NIP-XX agent on some relay"
    }
    fn keys(&self) -> &'static [&'static str] {
        kind::keys_of::<Section>()
    }
    fn served_elsewhere(&self) -> bool {
        true
    }
    fn resolve(&self, entry: &KindEntry<'_>) -> Result<Arc<dyn AgentPlan>, KindError> {
        let s: Section = entry.section()?;
        let agent = match &s.pubkey {
            Some(k) => PublicKey::parse(k).map_err(|_| {
                KindError::setting("pubkey", format!("{k:?} is not a public key (hex or npub)"))
            })?,
            None => {
                return Err(KindError::setting(
                    "pubkey",
                    "missing: the remote agent's key (hex or npub)",
                ))
            }
        };
        let relays = s.relays.unwrap_or_default();
        if relays.is_empty() || relays.len() > MAX_REMOTE_RELAYS {
            return Err(KindError::setting(
                "relays",
                format!("1 to {MAX_REMOTE_RELAYS} relay URLs the remote agent is on"),
            ));
        }
        for url in &relays {
            agentwire_nostr::relay_conn::check_relay_url(url)
                .map_err(|e| KindError::setting("relays", format!("{url}: {e}")))?;
        }
        Ok(Arc::new(NipxxPlan {
            agent,
            relays,
            timeout: kind::turn_timeout(s.request_timeout_secs)?,
        }))
    }
}

/// A remote NIP-XX agent, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NipxxPlan {
    /// The agent's key.
    pub agent: PublicKey,
    /// Its relays (not empty), tried in order.
    pub relays: Vec<String>,
    /// How long a turn may take there.
    pub timeout: Duration,
}

impl AgentPlan for NipxxPlan {
    fn kind(&self) -> &'static str {
        KIND
    }
    fn view(&self) -> serde_json::Map<String, serde_json::Value> {
        let relays: Vec<String> = self.relays.iter().map(|u| kind::shown_url(u)).collect();
        [
            ("pubkey", self.agent.to_hex().into()),
            ("relays", relays.into()),
            ("request_timeout_secs", self.timeout.as_secs().into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
    fn build<'a>(
        &'a self,
        name: &'a str,
        ctx: &'a BuildContext,
    ) -> BoxFuture<'a, Result<Arc<dyn Agent>, BuildError>> {
        Box::pin(async move {
            let keys = agentwire_nostr::key_file::load_or_create(
                &ctx.data_dir.join(CLIENT_KEYS_DIR),
                &format!("{name}.key"),
            )
            .map_err(|e| BuildError::Part {
                agent: name.to_string(),
                what: "its client key",
                source: Box::new(e),
            })?;
            Ok(Arc::new(crate::NipxxRemote::new(
                name,
                crate::NipxxRemoteSettings {
                    agent: self.agent,
                    relays: self.relays.clone(),
                    keys,
                    timeout: self.timeout,
                },
            )) as Arc<dyn Agent>)
        })
    }
}
