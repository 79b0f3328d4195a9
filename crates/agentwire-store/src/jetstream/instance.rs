//! An instance's name on the shared journal, held by one live process at a time.
//!
//! Turns are journaled under their instance's name, and an instance ends the unended turns of its own name
//! as ones a crash of its own cut off (at start, and when a prompt it finds journaled under its name comes
//! again). Two live processes with one name would therefore end each other's running turns. So a process
//! holds its name: a key `i.<hex name>` in the leases bucket, whose value is a nonce of this process,
//! renewed every third of a lease by a write at the revision it last wrote. Another process that finds the
//! key watches it for [`INSTANCE_TAKEOVER_WAIT_LEASES`] of a lease: renewed, the name is a live process's and
//! the start is refused; not renewed, its process died (or stopped) and the name is taken over. A clean
//! exit deletes the key, so a restart takes the name at once.

use super::{bucket_key, leader_entry, lock, put_at, JetStreamJournal};
use crate::StoreError;
use std::time::Duration;

/// How long, in leases, a start watches a name another process holds for a renewal before it takes the
/// name over: half a lease is more than the third of a lease between a live holder's renewals, and a
/// restart after a crash waits no longer than that.
pub const INSTANCE_TAKEOVER_WAIT_LEASES: f64 = 0.5;
/// How often a start looks at a held name while it waits.
const INSTANCE_TAKEOVER_POLL: Duration = Duration::from_millis(100);

/// Why an instance name cannot be held.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HoldError {
    /// Another live process holds it on this journal.
    #[error("another live instance holds the name {name:?} on this journal")]
    Taken {
        /// The name.
        name: String,
    },
    /// The journal could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The name a process holds, and its renewal.
pub(super) struct Held {
    key: String,
    pub(super) renewal: tokio::task::AbortHandle,
}

fn instance_key(name: &str) -> String {
    // `i` is no hex digit, so the key is no turn's lease.
    format!("i.{}", bucket_key(name))
}

fn nonce() -> Result<String, StoreError> {
    let mut bytes = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| StoreError::Sqlite("the system's random source failed".into()))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl JetStreamJournal {
    /// Holds instance name `name` for this process until [`Journal::close`](crate::Journal::close) (or
    /// the process ends, after which it ages out within a lease): [`HoldError::Taken`] while another live
    /// process holds it. May wait up to [`INSTANCE_TAKEOVER_WAIT_LEASES`] of a lease for a holder that
    /// stopped renewing it.
    pub async fn hold_instance(&self, name: &str) -> Result<(), HoldError> {
        let key = instance_key(name);
        let mine = nonce()?;
        let taken = || HoldError::Taken { name: name.into() };
        let (value, mut revision) = leader_entry(&self.leases, &key).await?;
        if value.is_some_and(|v| v != mine.as_bytes()) {
            let wait = self.lease.mul_f64(INSTANCE_TAKEOVER_WAIT_LEASES);
            let until = tokio::time::Instant::now() + wait;
            loop {
                tokio::time::sleep(INSTANCE_TAKEOVER_POLL).await;
                let (value, now) = leader_entry(&self.leases, &key).await?;
                if value.is_none() {
                    // Released, or aged out.
                    revision = now;
                    break;
                }
                if now != revision {
                    return Err(taken());
                }
                if tokio::time::Instant::now() >= until {
                    tracing::info!(instance = %name, "taking over an instance name its process stopped renewing");
                    break;
                }
            }
        }
        let Some(written) = self
            .put_at(&self.leases, &key, mine.clone().into_bytes(), revision)
            .await?
        else {
            // Another process wrote it meanwhile.
            return Err(taken());
        };
        let renewal = tokio::spawn(renew(
            self.js.clone(),
            self.leases.clone(),
            key.clone(),
            name.to_string(),
            mine,
            written,
            self.lease / 3,
        ));
        if let Some(old) = lock(&self.held).replace(Held {
            key,
            renewal: renewal.abort_handle(),
        }) {
            old.renewal.abort();
        }
        Ok(())
    }

    /// Stops renewing the held name and deletes it, so that a restart takes it at once.
    pub(super) async fn release_instance(&self) {
        let Some(held) = lock(&self.held).take() else {
            return;
        };
        held.renewal.abort();
        if self.writable().is_err() {
            return;
        }
        if let Err(e) = self.leases.delete(&held.key).await {
            tracing::debug!(error = %e, "the instance name stays until it ages out");
        }
    }
}

/// Renews a held name every `every`, each write at the revision of the one before; a name another process
/// took meanwhile (after this one could not renew it for longer than the takeover wait) is given up, loudly.
async fn renew(
    js: async_nats::jetstream::Context,
    leases: async_nats::jetstream::kv::Store,
    key: String,
    name: String,
    mine: String,
    mut revision: u64,
    every: Duration,
) {
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        tick.tick().await;
        match put_at(&js, &leases, &key, mine.clone().into_bytes(), revision).await {
            Ok(Some(r)) => revision = r,
            Ok(None) => match leader_entry(&leases, &key).await {
                // Aged out while the journal was unreachable: still nobody else's.
                Ok((None, r)) => revision = r,
                Ok((Some(v), r)) if v == mine.as_bytes() => revision = r,
                Ok((Some(_), _)) => {
                    tracing::error!(
                        instance = %name,
                        "another process took this instance's name after this one could not renew it; \
                         turns may be ended twice over: stop one of them, and give each its own name"
                    );
                    return;
                }
                Err(e) => tracing::warn!(error = %e, "could not renew the instance name"),
            },
            Err(e) => tracing::warn!(error = %e, "could not renew the instance name"),
        }
    }
}
