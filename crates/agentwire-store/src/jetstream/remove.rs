//! An operator's reach into the JetStream journal ([`Journal::conversations`](crate::Journal::conversations),
//! [`Journal::remove_conversation`](crate::Journal::remove_conversation)): the conversations of a protocol,
//! and a conversation removed for good.
//!
//! A removal first claims the conversation under a request id of its own, as a turn would: from then on
//! every instance that tries to start a turn of it finds the claim held by something with a live lease
//! and refuses the turn (`conversation_busy`), so nothing is written into the conversation while it goes.
//! Then its members, turns, running hints, leases and state are purged (a purge leaves no marker), and
//! the claim last, with the removal's lease.
//!
//! What the claim does not cover: an instance that read the conversation's state just before the removal
//! and claims just after it runs that one turn into a conversation with no state left, whose next turn is
//! then `unknown_conversation` as it would have been. A conversation over [`MAX_CONVERSATION_TURNS`] keeps
//! the turns past it (its members go, so nothing reads them).
//!
//! [`MAX_CONVERSATION_TURNS`]: super::MAX_CONVERSATION_TURNS

use super::{bucket_key, corrupt, unhex, unwritable, JetStreamJournal, MetaDoc};
use crate::{Claim, Removed, StoreError};
use agentwire_core::{ConversationId, RequestId};
use futures_util::StreamExt;

impl JetStreamJournal {
    /// [`Journal::conversations`](crate::Journal::conversations): the meta bucket's keys whose state
    /// names `protocol`.
    pub(super) async fn protocol_conversations(
        &self,
        protocol: &str,
        limit: usize,
    ) -> Result<Vec<ConversationId>, StoreError> {
        let mut keys = self.meta.keys().await.map_err(unwritable)?;
        let mut out = Vec::new();
        while let Some(k) = keys.next().await {
            if out.len() >= limit {
                break;
            }
            let k = k.map_err(unwritable)?;
            // The bucket's readiness marker and probes are no conversation: a conversation's key is hex.
            let Some(conv) = unhex(&k) else { continue };
            let Some((value, _)) = super::leader_get(&self.meta, &k).await? else {
                continue;
            };
            let Ok(doc) = serde_json::from_slice::<MetaDoc>(&value) else {
                tracing::debug!(key = %k, "a conversation's state that does not parse is left out");
                continue;
            };
            if doc.protocol == protocol {
                out.push(ConversationId::new(conv).map_err(corrupt)?);
            }
        }
        Ok(out)
    }

    /// [`Journal::remove_conversation`](crate::Journal::remove_conversation).
    pub(super) async fn remove(
        &self,
        conversation: &ConversationId,
    ) -> Result<Removed, StoreError> {
        self.writable()?;
        let conv = conversation.as_str();
        let remover = RequestId::new(format!("remove:{conv}")).map_err(corrupt)?;
        match self
            .claim_conversation(conv, remover.as_str(), None, &mut super::Hinted::No)
            .await?
        {
            Claim::Busy(turn) => return Ok(Removed::Busy(turn)),
            Claim::Taken => {}
        }
        // The removal is no turn: no accept takes what its claim noted of it.
        self.known.take_unwritten(remover.as_str());
        let removed = self.purge_conversation(conv).await;
        // Whatever the purge did, the removal's claim and lease go: a failed removal is sent again.
        self.stop_renewing(remover.as_str());
        let ck = bucket_key(conv);
        let claim = self
            .claims
            .stream
            .purge()
            .filter(format!("{}{ck}", self.claims.prefix))
            .await;
        let lease = self.leases.purge(bucket_key(remover.as_str())).await;
        let turns = removed?;
        claim.map_err(unwritable)?;
        lease.map_err(unwritable)?;
        Ok(Removed::Gone { turns })
    }

    /// Purges conversation `conv`'s members, turns (with their hints and leases) and state: how many turns.
    async fn purge_conversation(&self, conv: &str) -> Result<usize, StoreError> {
        let ck = bucket_key(conv);
        let ids = self.member_ids(conv).await?;
        let mut turns = 0;
        for id in &ids {
            let ik = bucket_key(id);
            if let Some((doc, _)) = self.turn_entry(id).await? {
                let hint = format!("{}{}.{ik}", self.running.prefix, bucket_key(&doc.owner));
                self.running
                    .stream
                    .purge()
                    .filter(hint)
                    .await
                    .map_err(unwritable)?;
                self.turns
                    .stream
                    .purge()
                    .filter(format!("{}{ik}", self.turns.prefix))
                    .await
                    .map_err(unwritable)?;
                turns += 1;
            }
            self.leases.purge(&ik).await.map_err(unwritable)?;
        }
        // The members last of the turns: a removal cut off part way leaves members the next one finds.
        self.members
            .stream
            .purge()
            .filter(format!("{}{ck}.>", self.members.prefix))
            .await
            .map_err(unwritable)?;
        self.meta
            .stream
            .purge()
            .filter(format!("{}{ck}", self.meta.prefix))
            .await
            .map_err(unwritable)?;
        Ok(turns)
    }
}
