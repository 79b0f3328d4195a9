//! Signatures this process made: events the relay need not verify a second time.
//!
//! An agent served by the same daemon signs its events with its own key and publishes them to the
//! embedded relay, which would spend a Schnorr verification (about 50 µs, a quarter of a run's crypto) on a
//! signature made microseconds before in the same process. The signer remembers each `(id, signature)` it
//! makes here; the relay, having checked that the event's id is the hash of what it carries, skips the
//! signature check for an event whose signature is exactly one remembered for that id. A peer cannot use
//! this: the id fixes every field but the signature, and only the very signature made here matches, so the
//! event is byte for byte one this process signed (a peer resending it is fine: it is valid). Anything not
//! remembered is verified as always.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

use nostr::event::Signature;
use nostr::prelude::{Event, EventId};

/// Signatures remembered at most; the oldest is forgotten first. An event is published within moments of
/// being signed, so this covers thousands of events in flight; one forgotten is only verified again.
pub const MAX_REMEMBERED_SIGNATURES: usize = 4_096;

/// What is remembered of one signature: the event's id and the signature.
type Signed = (EventId, Signature);

/// The signatures made in this process, shared by the signers and the relay.
#[derive(Default)]
pub struct SignedHere {
    inner: Mutex<Remembered>,
}

impl std::fmt::Debug for SignedHere {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignedHere")
            .field("remembered", &self.len())
            .finish()
    }
}

#[derive(Default)]
struct Remembered {
    signed: HashSet<Signed>,
    /// In the order remembered, for forgetting the oldest (may hold entries already taken).
    order: VecDeque<Signed>,
}

impl SignedHere {
    /// Nothing remembered yet.
    pub fn new() -> SignedHere {
        SignedHere::default()
    }

    /// Remembers the signature of an event this process has just signed.
    pub fn remember(&self, event: &Event) {
        let entry = (event.id, event.sig);
        let mut r = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        while r.order.len() >= MAX_REMEMBERED_SIGNATURES {
            if let Some(old) = r.order.pop_front() {
                r.signed.remove(&old);
            }
        }
        if r.signed.insert(entry) {
            r.order.push_back(entry);
        }
    }

    /// Whether `event` carries a signature this process made for its id; the caller has checked that the id
    /// is the hash of the event. Forgets it (an event is stored once; a resend is verified).
    pub fn vouches_for(&self, event: &Event) -> bool {
        let entry = (event.id, event.sig);
        let mut r = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        r.signed.remove(&entry)
    }

    /// Signatures remembered now.
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .signed
            .len()
    }

    /// Whether none is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::event::{EventBuilder, FinalizeEvent, Kind};
    use nostr::key::Keys;

    fn event(keys: &Keys, text: &str) -> Event {
        EventBuilder::new(Kind::TextNote, text)
            .finalize(keys)
            .expect("signs")
    }

    #[test]
    fn vouches_only_for_the_very_signature_made_here_and_once() {
        let keys = Keys::generate();
        let here = SignedHere::new();
        let signed = event(&keys, "made here");
        here.remember(&signed);
        // The same id with another valid signature (signing again draws new randomness) is not vouched for.
        let mut other = signed.clone();
        other.sig = event(&keys, "made here").sig;
        assert!(!here.vouches_for(&other));
        // Nor an event never remembered.
        assert!(!here.vouches_for(&event(&keys, "elsewhere")));
        assert!(here.vouches_for(&signed));
        assert!(!here.vouches_for(&signed), "taken once");
    }

    #[test]
    fn forgets_the_oldest_past_its_bound() {
        let keys = Keys::generate();
        let here = SignedHere::new();
        let first = event(&keys, "first");
        here.remember(&first);
        for i in 0..MAX_REMEMBERED_SIGNATURES {
            here.remember(&event(&keys, &format!("n{i}")));
        }
        assert_eq!(here.len(), MAX_REMEMBERED_SIGNATURES);
        assert!(!here.vouches_for(&first));
    }
}
