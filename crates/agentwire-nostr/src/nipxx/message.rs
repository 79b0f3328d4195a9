//! A NIP-XX event as its receiver sees it, whichever profile carried it: a signed event (default profile)
//! or the rumor inside a NIP-59 gift wrap (privacy-first profile). Either way its author is verified before
//! a `Message` exists: by the event's signature, or by the seal's signature and the rumor-seal author check.
//! Validation (tags, payloads) works on `Message`, so both profiles go through the same rules.

use nostr::prelude::{Event, EventId, PublicKey, Tags, Timestamp, UnsignedEvent};

/// One NIP-XX event, unwrapped when it came gift-wrapped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The event id (the rumor's id for a wrapped event). Runs are named by the prompt's id.
    pub id: EventId,
    /// The verified author.
    pub author: PublicKey,
    /// When the author says it was made (a rumor's `created_at` is the real one; the wrap's is tweaked).
    pub created_at: Timestamp,
    /// The NIP-XX kind.
    pub kind: u16,
    /// The event's (or rumor's) tags.
    pub tags: Tags,
    /// The NIP-44 payload.
    pub content: String,
    /// Whether it arrived in a NIP-59 gift wrap (and should be answered in one).
    pub wrapped: bool,
}

impl Message {
    /// A signed event whose id and signature the caller has verified.
    pub fn signed(event: Event) -> Self {
        Message {
            id: event.id,
            author: event.pubkey,
            created_at: event.created_at,
            kind: event.kind.as_u16(),
            tags: event.tags,
            content: event.content,
            wrapped: false,
        }
    }

    /// The rumor of a gift wrap whose seal the caller has verified (its author is the seal's author).
    pub fn rumor(mut rumor: UnsignedEvent) -> Self {
        Message {
            id: rumor.id(),
            author: rumor.pubkey,
            created_at: rumor.created_at,
            kind: rumor.kind.as_u16(),
            tags: rumor.tags,
            content: rumor.content,
            wrapped: true,
        }
    }
}

impl From<Event> for Message {
    fn from(event: Event) -> Self {
        Message::signed(event)
    }
}
