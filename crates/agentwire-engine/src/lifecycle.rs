//! A protocol front's life in the daemon. `serve` starts each front (each has its own configuration),
//! then drives them all the same way: one recovery pass over every protocol's interrupted turns, and on
//! shutdown the engine's drain followed by each front's own drain and stop.

use crate::engine::Engine;
use crate::front::TurnFront;
use agentwire_store::{StoreError, StoredTurn};
use futures_util::future::BoxFuture;
use std::sync::Arc;
use std::time::Duration;

/// A running protocol front.
pub trait Front: Send + Sync {
    /// The protocol name its turns are journaled under.
    fn protocol(&self) -> &'static str;
    /// The front that ends a journaled turn of this protocol that a crash cut off (none: the outcome is
    /// journaled only, and a resend is answered from there).
    fn recovery_front(&self, turn: &StoredTurn) -> Option<Arc<dyn TurnFront>>;
    /// After the engine has drained: what this front still has going out (terminals being published) is
    /// waited for, up to `grace`. Returns how many were left.
    fn drain(&self, grace: Duration) -> BoxFuture<'_, usize>;
    /// Leaves the wire (unsubscribes, so another instance takes new requests).
    fn stop(&self) -> BoxFuture<'_, ()>;
}

/// The recovery front of a protocol whose requester cannot be told how a crash ended its turn (its HTTP
/// connection is gone): the outcome is journaled (a read of the turn finds it) and watchers see the turn
/// end, so the turn lists show it; nothing goes on the wire.
pub struct Unreachable;

impl TurnFront for Unreachable {
    fn accepted(&self, _queued: bool) {}

    fn event(&self, _event: agentwire_core::TurnEvent) {}

    fn encode_outcome(&self, _outcome: &agentwire_core::Outcome) -> Option<String> {
        None
    }

    fn deliver_outcome(&self, _outcome: &agentwire_core::Outcome, _wire: Option<&str>) {}
}

impl Engine {
    /// One recovery pass at start over every protocol's interrupted turns, whichever fronts are on: a turn
    /// of a protocol that is not running now is ended in the journal alone.
    pub async fn recover_fronts(
        self: &Arc<Self>,
        fronts: &[Arc<dyn Front>],
    ) -> Result<usize, StoreError> {
        self.recover(|t| {
            fronts
                .iter()
                .find(|f| f.protocol() == t.protocol)
                .and_then(|f| f.recovery_front(t))
        })
        .await
    }

    /// Shuts the fronts down: the engine drains (running turns finish within `grace`, new ones are
    /// refused), then each front drains what it still sends and stops. Returns the turns still running.
    pub async fn shut_down(self: &Arc<Self>, fronts: &[Arc<dyn Front>], grace: Duration) -> usize {
        let left = self.drain(grace).await;
        for f in fronts {
            let unsent = f.drain(grace).await;
            if unsent > 0 {
                tracing::warn!(
                    protocol = f.protocol(),
                    unsent,
                    "messages still going out after the drain grace"
                );
            }
            f.stop().await;
        }
        self.agent().stop().await;
        left
    }
}
