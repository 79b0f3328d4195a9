//! What this instance knows of its own turns without asking the journal again, so that the paths to a
//! turn's ack and to its outcome each skip a read from a bucket's leader (a round trip through the
//! cluster):
//!
//! - a turn whose claim found its record unwritten (the claim reads the record beside the conversation's
//!   claim, in the same round trip): its accept writes the turn's hints at once instead of reading the
//!   record again;
//! - a turn it accepted, as it wrote it, with the revision of that write: its outcome is written at that
//!   revision without reading the record back.
//!
//! Neither decides anything. The turn's create and its outcome's update stay conditional writes that the
//! server decides; one refused falls back to the read (another instance accepted or ended the turn
//! meanwhile), so a note that went stale costs a round trip, never a guarantee. Both are bounded: a note
//! is taken once, and past [`MAX_NOTED`] entries (turns claimed but never accepted here, or accepted but
//! ended elsewhere) the notes are dropped, and the reads are made as before.

use super::{lock, TurnDoc};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// The most turns of each kind noted at once: many times the turns one instance runs at a time (its
/// capacity slots), so only notes nothing will take fill it, and a noted record holds a turn's input.
pub(super) const MAX_NOTED: usize = 4096;

/// The notes of one journal handle.
#[derive(Default)]
pub(super) struct Known {
    /// Turns whose claim found no record.
    unwritten: Mutex<HashSet<String>>,
    /// Turns accepted here: their record as written, and its revision.
    accepted: Mutex<HashMap<String, (TurnDoc, u64)>>,
}

impl Known {
    /// Notes that turn `id`'s record was not written when its claim read it.
    pub(super) fn note_unwritten(&self, id: &str) {
        let mut unwritten = lock(&self.unwritten);
        if unwritten.len() >= MAX_NOTED {
            unwritten.clear();
        }
        unwritten.insert(id.to_string());
    }

    /// Whether turn `id`'s claim found its record unwritten (the note is taken).
    pub(super) fn take_unwritten(&self, id: &str) -> bool {
        lock(&self.unwritten).remove(id)
    }

    /// Notes turn `id`'s record as this instance wrote it, at `revision`.
    pub(super) fn note_accepted(&self, id: &str, doc: TurnDoc, revision: u64) {
        let mut accepted = lock(&self.accepted);
        if accepted.len() >= MAX_NOTED {
            accepted.clear();
        }
        accepted.insert(id.to_string(), (doc, revision));
    }

    /// Whether this instance accepted turn `id` and its outcome is not written yet (the note stays).
    pub(super) fn accepted_here(&self, id: &str) -> bool {
        lock(&self.accepted).contains_key(id)
    }

    /// Turn `id`'s record as this instance accepted it, and its revision (the note is taken).
    pub(super) fn take_accepted(&self, id: &str) -> Option<(TurnDoc, u64)> {
        lock(&self.accepted).remove(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(id: &str) -> TurnDoc {
        serde_json::from_value(serde_json::json!({
            "request_id": id, "conversation_id": "c", "protocol": "p", "owner": "o",
            "route": null, "input": null, "accepted_at": 1,
        }))
        .unwrap()
    }

    #[test]
    fn an_accepted_turn_is_known_until_its_note_is_taken() {
        let k = Known::default();
        assert!(!k.accepted_here("a"));
        k.note_accepted("a", doc("a"), 7);
        assert!(k.accepted_here("a"), "looking does not take the note");
        assert_eq!(k.take_accepted("a").map(|(_, r)| r), Some(7));
        assert!(!k.accepted_here("a"));
    }

    #[test]
    fn a_note_is_taken_once_and_the_notes_stay_bounded() {
        let k = Known::default();
        k.note_unwritten("a");
        assert!(k.take_unwritten("a"));
        assert!(!k.take_unwritten("a"));
        k.note_accepted("a", doc("a"), 7);
        assert_eq!(k.take_accepted("a").map(|(_, r)| r), Some(7));
        assert!(k.take_accepted("a").is_none());
        for n in 0..MAX_NOTED + 10 {
            k.note_unwritten(&n.to_string());
            k.note_accepted(&n.to_string(), doc("x"), 1);
        }
        assert!(lock(&k.unwritten).len() <= MAX_NOTED);
        assert!(lock(&k.accepted).len() <= MAX_NOTED);
    }
}
