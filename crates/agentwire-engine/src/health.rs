//! Whether the journal can be written: the engine's health, watched by fronts and shown to users.

use std::sync::Arc;
use tokio::sync::watch;

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
