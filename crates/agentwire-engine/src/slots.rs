//! Capacity slots: a front with a fixed number of runs at a time (fisk-ai's workers) takes a [`Slot`] for
//! a request as the first step of admitting it, before its reads, so concurrent requests cannot overbook;
//! the slot also marks the request id in flight (`duplicate_request`). The engine keeps the slot with the
//! turn and frees it when the turn ends; a slot whose request is refused is freed when it is dropped.

use agentwire_core::RequestId;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// What [`Engine::admit`](crate::Engine::admit) found for a request.
#[derive(Debug)]
pub enum Admitted {
    /// The journal holds this request of this conversation: a resend, answered from the journal by
    /// [`Engine::answer_resend`](crate::Engine::answer_resend) with no slot and no place in its conversation.
    Resend(Box<agentwire_store::StoredTurn>),
    /// A new request, with the slot to hand to the submission.
    New(Slot),
}

/// Why [`Engine::admit`](crate::Engine::admit) refused a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmitError {
    /// Refused for its slot (draining, capacity, a duplicate, a busy conversation).
    #[error("refused: {0:?}")]
    Slot(SlotRefusal),
    /// The journal could not say whether the request is a resend.
    #[error("the journal could not be read")]
    Journal(#[source] agentwire_store::StoreError),
}

/// Why no slot was taken, in the order they are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotRefusal {
    /// The engine is draining for a shutdown.
    Draining,
    /// Every slot of the protocol is taken.
    Capacity {
        /// The protocol's slots.
        slots: usize,
    },
    /// The request id is in flight already (being admitted, or live).
    Duplicate,
    /// Under an exclusive policy, a turn of the conversation lives.
    ConversationBusy,
}

#[derive(Default)]
pub(crate) struct SlotTable {
    in_use: HashMap<String, usize>,
    requests: HashSet<RequestId>,
}

pub(crate) type Slots = Arc<Mutex<SlotTable>>;

fn lock(slots: &Slots) -> std::sync::MutexGuard<'_, SlotTable> {
    slots.lock().unwrap_or_else(|p| p.into_inner())
}

/// Takes a slot of `protocol` (which has `slots` of them) for `request`, unless it is `live` already.
pub(crate) fn take(
    table: &Slots,
    protocol: &str,
    slots: usize,
    request: &RequestId,
    live: bool,
) -> Result<Slot, SlotRefusal> {
    let mut t = lock(table);
    let used = t.in_use.get(protocol).copied().unwrap_or(0);
    if used >= slots {
        return Err(SlotRefusal::Capacity { slots });
    }
    if live || t.requests.contains(request) {
        return Err(SlotRefusal::Duplicate);
    }
    t.in_use.insert(protocol.to_string(), used + 1);
    t.requests.insert(request.clone());
    Ok(Slot {
        table: table.clone(),
        protocol: protocol.to_string(),
        request: request.clone(),
    })
}

/// How many slots of `protocol` are taken.
pub(crate) fn in_use(table: &Slots, protocol: &str) -> usize {
    lock(table).in_use.get(protocol).copied().unwrap_or(0)
}

/// A taken slot; freed when dropped. Its own lock, never the engine's, so it may be dropped anywhere.
pub struct Slot {
    table: Slots,
    protocol: String,
    request: RequestId,
}

impl Slot {
    /// The request it was taken for.
    pub fn request(&self) -> &RequestId {
        &self.request
    }
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("protocol", &self.protocol)
            .field("request", &self.request)
            .finish()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut t = lock(&self.table);
        if let Some(n) = t.in_use.get_mut(&self.protocol) {
            *n = n.saturating_sub(1);
        }
        t.requests.remove(&self.request);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_bound_a_protocol_and_mark_requests_until_dropped() {
        let table = Slots::default();
        let id = |n: u32| RequestId::new(format!("f:{n}")).unwrap();
        let a = take(&table, "fisk", 2, &id(1), false).unwrap();
        assert_eq!(
            take(&table, "fisk", 2, &id(1), false).unwrap_err(),
            SlotRefusal::Duplicate
        );
        let b = take(&table, "fisk", 2, &id(2), false).unwrap();
        assert_eq!(
            take(&table, "fisk", 2, &id(3), false).unwrap_err(),
            SlotRefusal::Capacity { slots: 2 }
        );
        assert!(
            take(&table, "other", 1, &id(3), false).is_ok(),
            "per protocol"
        );
        assert_eq!(
            take(&table, "x", 1, &id(9), true).unwrap_err(),
            SlotRefusal::Duplicate,
            "a live request"
        );
        drop(a);
        assert_eq!(in_use(&table, "fisk"), 1);
        let c = take(&table, "fisk", 2, &id(1), false).unwrap();
        drop((b, c));
        assert_eq!(in_use(&table, "fisk"), 0);
    }
}
