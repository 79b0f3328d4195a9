//! An instance's name on the shared journal, held by one live process at a time.
//!
//! Turns are journaled under their instance's name, and an instance ends the unended turns of its own name
//! as ones a crash of its own cut off (at start, and when a prompt it finds journaled under its name comes
//! again). Two live processes with one name would therefore end each other's running turns. So a process
//! holds its name: a key `i.<hex name>` in the leases bucket (whose entries age out after a lease), whose
//! value is a nonce of this process, renewed every third of a lease by a write at the revision it last
//! wrote. Another process that finds the key waits for it to age out: renewed meanwhile, the name is a live
//! process's and the start is refused; gone, its process died (or stopped for a whole lease) and the name
//! is taken. A clean exit deletes the key (at the revision this process wrote), so a restart takes it at
//! once. A process that finds its name taken after all (it could not renew for a whole lease) stops
//! writing: the journal halts, as after a crash, rather than let two processes end each other's turns.

use super::{bucket_key, leader_entry, lock, put_at, JetStreamJournal};
use crate::StoreError;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long, in leases, a start waits for a name another process holds to age out before it takes the
/// name over all the same: the bucket drops an entry a lease after its last renewal, and the server's
/// sweep of aged entries can lag a little behind that.
pub const INSTANCE_TAKEOVER_WAIT_LEASES: f64 = 1.5;
/// How often a start looks at a held name while it waits.
const INSTANCE_TAKEOVER_POLL: Duration = Duration::from_millis(100);
/// How soon a renewal that failed is tried again (rather than a third of a lease later): a holder has a
/// whole lease of renewals before its name ages out, and a stalled write should not spend most of it.
const INSTANCE_RENEW_RETRY: Duration = Duration::from_millis(200);
/// How many times a start tries to write the name after reading it free: each refusal means another
/// process wrote the key meanwhile (or it aged out between the read and the write).
const INSTANCE_HOLD_ATTEMPTS: usize = 4;

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
    /// The key's revision this process wrote last; `0` once the name is lost.
    revision: Arc<AtomicU64>,
}

fn instance_key(name: &str) -> String {
    // `i` is no hex digit, so the key is no turn's lease.
    format!("i.{}", bucket_key(name))
}

fn nonce() -> Result<String, StoreError> {
    let mut bytes = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| StoreError::Unavailable("the system's random source failed"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl JetStreamJournal {
    /// Holds instance name `name` for this process until [`Journal::close`](crate::Journal::close) (or
    /// the process ends, after which it ages out within a lease): [`HoldError::Taken`] while another live
    /// process holds it. Waits, up to [`INSTANCE_TAKEOVER_WAIT_LEASES`] of a lease, for a name whose
    /// holder stopped renewing it.
    pub async fn hold_instance(&self, name: &str) -> Result<(), HoldError> {
        let key = instance_key(name);
        let mine = nonce()?;
        let taken = || HoldError::Taken { name: name.into() };
        for _ in 0..INSTANCE_HOLD_ATTEMPTS {
            let (value, seen) = leader_entry(&self.leases, &key).await?;
            let revision = match value {
                None => seen,
                Some(_) => match self.wait_for_silence(&key, seen).await? {
                    Some(revision) => revision,
                    None => return Err(taken()),
                },
            };
            let Some(written) = self
                .put_at(&self.leases, &key, mine.clone().into_bytes(), revision)
                .await?
            else {
                // Written meanwhile by another process, or aged out between the read and the write: read
                // it again.
                continue;
            };
            let revision = Arc::new(AtomicU64::new(written));
            let renewal = tokio::spawn(renew(Renewal {
                js: self.js.clone(),
                leases: self.leases.clone(),
                key: key.clone(),
                name: name.to_string(),
                mine,
                revision: revision.clone(),
                every: self.lease / 3,
                halted: self.halted.clone(),
            }));
            if let Some(old) = lock(&self.held).replace(Held {
                key,
                renewal: renewal.abort_handle(),
                revision,
            }) {
                old.renewal.abort();
            }
            return Ok(());
        }
        Err(taken())
    }

    /// Watches a name another process holds (last written at `revision`): `None` when it is renewed (a
    /// live holder), else the revision to take it at, once it is gone or has gone unrenewed for
    /// [`INSTANCE_TAKEOVER_WAIT_LEASES`] of a lease.
    async fn wait_for_silence(&self, key: &str, revision: u64) -> Result<Option<u64>, StoreError> {
        let until = tokio::time::Instant::now() + self.lease.mul_f64(INSTANCE_TAKEOVER_WAIT_LEASES);
        loop {
            tokio::time::sleep(INSTANCE_TAKEOVER_POLL).await;
            let (value, now) = leader_entry(&self.leases, key).await?;
            if value.is_none() {
                return Ok(Some(now));
            }
            if now != revision {
                return Ok(None);
            }
            if tokio::time::Instant::now() >= until {
                tracing::info!("taking over an instance name its process stopped renewing");
                return Ok(Some(now));
            }
        }
    }

    /// Stops renewing the held name and deletes it (only if this process wrote it last), so that a restart
    /// takes it at once.
    pub(super) async fn release_instance(&self) {
        let Some(held) = lock(&self.held).take() else {
            return;
        };
        held.renewal.abort();
        let revision = held.revision.load(Ordering::SeqCst);
        if revision == 0 || self.writable().is_err() {
            return;
        }
        if let Err(e) = self
            .leases
            .delete_expect_revision(&held.key, Some(revision))
            .await
        {
            tracing::debug!(error = %e, "the instance name stays until it ages out");
        }
    }
}

/// What the renewal of a held name works with.
struct Renewal {
    js: async_nats::jetstream::Context,
    leases: async_nats::jetstream::kv::Store,
    key: String,
    name: String,
    mine: String,
    revision: Arc<AtomicU64>,
    every: Duration,
    halted: Arc<AtomicBool>,
}

/// Renews a held name every `every`, each write at the revision of the one before, and a failed one again
/// soon after. A name another process took meanwhile halts the journal.
async fn renew(r: Renewal) {
    let mut next = tokio::time::Instant::now() + r.every;
    loop {
        tokio::time::sleep_until(next).await;
        if r.halted.load(Ordering::SeqCst) {
            return;
        }
        let at = r.revision.load(Ordering::SeqCst);
        let written = put_at(&r.js, &r.leases, &r.key, r.mine.clone().into_bytes(), at).await;
        let renewed = match written {
            Ok(Some(revision)) => {
                r.revision.store(revision, Ordering::SeqCst);
                true
            }
            // Refused: the key moved. Ours still (a write whose ack was lost), aged out (the journal was
            // unreachable a while), or another process's.
            Ok(None) => match leader_entry(&r.leases, &r.key).await {
                Ok((None, revision)) => {
                    r.revision.store(revision, Ordering::SeqCst);
                    false
                }
                Ok((Some(v), revision)) if v == r.mine.as_bytes() => {
                    r.revision.store(revision, Ordering::SeqCst);
                    true
                }
                Ok((Some(_), _)) => {
                    tracing::error!(
                        instance = %r.name,
                        "another process took this instance's name after this one could not renew it for a \
                         whole lease; the journal stops here, as after a crash: restart this instance, and give \
                         each instance its own name"
                    );
                    r.revision.store(0, Ordering::SeqCst);
                    r.halted.store(true, Ordering::SeqCst);
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not renew the instance name");
                    false
                }
            },
            Err(e) => {
                tracing::warn!(error = %e, "could not renew the instance name");
                false
            }
        };
        next = match renewed {
            true => tokio::time::Instant::now() + r.every,
            false => tokio::time::Instant::now() + INSTANCE_RENEW_RETRY,
        };
    }
}
