//! Whether the journal can be written: the engine's health, watched by fronts and shown to users.

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// First wait before writing again after the journal failed a write: short, so a passing fault (a
/// moment of full disk) costs little latency.
pub const RETRY_FIRST: Duration = Duration::from_millis(100);
/// Longest wait between tries: a journal that stays unwritable is probed this often, so a freed disk is
/// noticed within it.
pub const RETRY_MAX: Duration = Duration::from_secs(2);

/// Shared, cheap to clone.
#[derive(Clone)]
pub(crate) struct Health {
    writable: Arc<watch::Sender<bool>>,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            writable: Arc::new(watch::channel(true).0),
        }
    }
}

impl Health {
    pub(crate) fn writable(&self) -> bool {
        *self.writable.borrow()
    }

    pub(crate) fn watch(&self) -> watch::Receiver<bool> {
        self.writable.subscribe()
    }

    /// Sets the state; returns whether it changed.
    pub(crate) fn set_writable(&self, on: bool) -> bool {
        self.writable.send_if_modified(|w| {
            let changed = *w != on;
            *w = on;
            changed
        })
    }
}
