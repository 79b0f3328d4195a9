//! Retention on the JetStream journal ([`Journal::prune`](crate::Journal::prune)): ended turns past
//! their retention are removed from the buckets, with their conversation's claim and meta once it has no
//! turn left.
//!
//! The turns bucket keeps one message per turn (history 1), its newest record, so the bucket's stream is
//! in the order turns were last written: an ended turn where it ended. A pass reads it from where the last
//! one stopped ([`JetStreamJournal::prune_from`]) and forgets each ended turn of a pruned protocol, until it
//! meets one that ended after the cut: from there on every turn ended later still. A turn it passes over
//! stays behind for good only if it is kept (fisk-ai); one that still runs is written again when it
//! ends, further on. So no pass reads a kept turn twice, and the cursor lives in memory: after a restart
//! the first passes read the kept turns once more.
//!
//! Removal is a stream purge of the key's subject, which leaves no marker behind (a key-value delete
//! leaves one a key, for ever). Each purge is bounded by the sequence that was read, so a write another
//! instance makes meanwhile (a claim of the conversation, its meta) is not lost. A member goes before
//! its turn, so a pass cut off between the two leaves a turn the next pass finds again, never a member
//! nothing reads. A request sent again after its turn is forgotten is a new turn: the fronts refuse
//! requests older than the retention for that reason (NIP-XX prompts, task requests).

use super::{bucket_key, corrupt, leader_entry, unwritable, JetStreamJournal, MetaDoc, TurnDoc};
use crate::model::{Prune, Pruned};
use crate::StoreError;
use async_nats::jetstream::kv;
use async_nats::jetstream::stream::LastRawMessageErrorKind;

/// What a pass does with one message of the turns bucket.
enum Seen {
    /// Not a turn to forget now: a marker, a turn that runs or is kept, a record that does not parse.
    PassOver,
    /// An ended turn of a pruned protocol that ended before the cut.
    Forget(Box<TurnDoc>),
    /// A turn that ended after the cut: so did every one after it.
    Newer,
}

fn seen(m: &async_nats::jetstream::message::StreamMessage, ready: &str, p: &Prune) -> Seen {
    let removed = m
        .headers
        .get("KV-Operation")
        .is_some_and(|op| matches!(op.as_str(), "DEL" | "PURGE"));
    if removed || m.subject.as_str() == ready {
        return Seen::PassOver;
    }
    let doc: TurnDoc = match serde_json::from_slice(&m.payload) {
        Ok(doc) => doc,
        Err(e) => {
            // Left for an operator: a corrupt record is a typed error where it is read by id.
            tracing::debug!(subject = %m.subject, error = %e, "a turn record that does not parse is kept");
            return Seen::PassOver;
        }
    };
    if doc.outcome.is_none() || p.keep.contains(&doc.protocol) {
        return Seen::PassOver;
    }
    // Records from before turns carried their end: their acceptance is the nearest time there is.
    match doc.ended_at.unwrap_or(doc.accepted_at) < p.ended_before {
        true => Seen::Forget(Box::new(doc)),
        false => Seen::Newer,
    }
}

/// Removes `subject`'s messages of `bucket` up to sequence `through`, leaving any written after it.
async fn purge_through(
    bucket: &kv::Store,
    subject: String,
    through: u64,
) -> Result<(), StoreError> {
    bucket
        .stream
        .purge()
        .filter(subject)
        .sequence(through + 1)
        .await
        .map(|_| ())
        .map_err(unwritable)
}

impl JetStreamJournal {
    /// One pass of [`Journal::prune`](crate::Journal::prune).
    pub(super) async fn prune_turns(&self, p: Prune) -> Result<Pruned, StoreError> {
        self.writable()?;
        self.hints_dropped().await;
        let filter = format!("{}>", self.turns.prefix);
        let ready = format!("{}ready", self.turns.prefix);
        let mut from = (*super::lock(&self.prune_from)).max(1);
        let mut pass = Pruned::default();
        let mut looked = 0;
        loop {
            if looked == p.limit {
                pass.more = true;
                break;
            }
            let got = self
                .turns
                .stream
                .raw_message_builder()
                .next_by_subject(filter.clone())
                .sequence(from)
                .send()
                .await;
            let m = match got {
                Ok(m) => m,
                Err(e) if matches!(e.kind(), LastRawMessageErrorKind::NoMessageFound) => break,
                Err(e) => return Err(unwritable(e)),
            };
            looked += 1;
            match seen(&m, &ready, &p) {
                Seen::Newer => break,
                Seen::PassOver => {}
                Seen::Forget(doc) => {
                    self.forget_turn(&doc, m.sequence, &p).await?;
                    pass.forgotten += 1;
                }
            }
            from = m.sequence + 1;
            *super::lock(&self.prune_from) = from;
        }
        Ok(pass)
    }

    /// Removes an ended turn read at `sequence` of the turns bucket: its member, its running hint, its
    /// record; then its conversation's claim and meta when no turn of it is left.
    async fn forget_turn(&self, doc: &TurnDoc, sequence: u64, p: &Prune) -> Result<(), StoreError> {
        let (conv, id) = (
            bucket_key(&doc.conversation_id),
            bucket_key(&doc.request_id),
        );
        let member = format!("{}{conv}.{id}", self.members.prefix);
        self.members
            .stream
            .purge()
            .filter(member)
            .await
            .map_err(unwritable)?;
        // Its marker, left when the turn ended.
        let hint = format!("{}{}.{id}", self.running.prefix, bucket_key(&doc.owner));
        self.running
            .stream
            .purge()
            .filter(hint)
            .await
            .map_err(unwritable)?;
        purge_through(&self.turns, format!("{}{id}", self.turns.prefix), sequence).await?;
        if self.has_members(&conv).await? {
            return Ok(());
        }
        let (claim, revision) = leader_entry(&self.claims, &conv).await?;
        if revision > 0 && claim.is_none_or(|holder| holder == doc.request_id.as_bytes()) {
            purge_through(
                &self.claims,
                format!("{}{conv}", self.claims.prefix),
                revision,
            )
            .await?;
        }
        let (meta, revision) = leader_entry(&self.meta, &conv).await?;
        if let Some(meta) = meta {
            let meta: MetaDoc = serde_json::from_slice(&meta).map_err(corrupt)?;
            if p.keep.contains(&meta.protocol) || meta.updated_at >= p.ended_before {
                return Ok(());
            }
        }
        if revision > 0 {
            purge_through(&self.meta, format!("{}{conv}", self.meta.prefix), revision).await?;
        }
        Ok(())
    }

    /// Whether the conversation under bucket key `conv` has a member left.
    async fn has_members(&self, conv: &str) -> Result<bool, StoreError> {
        let got = self
            .members
            .stream
            .raw_message_builder()
            .next_by_subject(format!("{}{conv}.>", self.members.prefix))
            .sequence(1)
            .send()
            .await;
        match got {
            Ok(_) => Ok(true),
            Err(e) if matches!(e.kind(), LastRawMessageErrorKind::NoMessageFound) => Ok(false),
            Err(e) => Err(unwritable(e)),
        }
    }
}
