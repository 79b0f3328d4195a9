//! NIP-59 gift wrap for NIP-XX's privacy-first profile: a NIP-XX event becomes an unsigned rumor, sealed
//! (kind 13, signed by its author, NIP-44 to the receiver) and wrapped (kind 1059, signed by a one-time key,
//! NIP-44 to the receiver, `p` = receiver, `created_at` tweaked into the past). Relays see only the wrap's
//! one-time key, the receiver and a blurred time. The rumor inside is the same event the default profile
//! would sign, NIP-44 content and tags included, so it is validated by the same rules once unwrapped.

use crate::crypto::{Crypto, MAX_NIP44_PAYLOAD_BYTES, MAX_NIP44_PLAINTEXT_BYTES};
use crate::nipxx::{kinds, Message};
use nostr::nips::nip44::{self, Version};
use nostr::nips::nip59::{GiftWrapSealBuilder, UnwrappedGift};
use nostr::prelude::{
    Event, EventBuilder, FinalizeEvent, FinalizeUnsignedEvent, Keys, Kind, PublicKey, Tag,
    Timestamp, UnsignedEvent,
};
use std::time::Duration;

/// How far into the past NIP-59 moves a wrap's `created_at` (two days). A subscription for wraps must
/// look back this much further than it means to.
pub const MAX_TIMESTAMP_TWEAK: Duration = Duration::from_secs(2 * 24 * 60 * 60);

/// Why a gift wrap could not be made or opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Nip59Error {
    /// The event is not a kind-1059 gift wrap.
    #[error("not a gift wrap (kind 1059)")]
    NotGiftWrap,
    /// The wrap's content is larger than any NIP-44 payload.
    #[error("gift wrap content of {0} bytes is too large")]
    TooLarge(usize),
    /// The wrap or seal did not verify or decrypt, or the rumor's author is not the seal's.
    #[error("gift wrap does not open: {0}")]
    Unwrap(String),
    /// The rumor is too large to seal (a seal holds at most 65,535 bytes of rumor JSON).
    #[error("cannot wrap: {0}")]
    Wrap(String),
}

/// The unsigned rumor of an event built by `builder`, authored by us.
pub fn rumor(crypto: &Crypto, builder: EventBuilder) -> UnsignedEvent {
    let mut r = builder.finalize_unsigned(crypto.public_key());
    r.ensure_id();
    r
}

/// Seals `rumor` (ours) and wraps it for `receiver`.
///
/// Both layers stay within standard NIP-44 v2 (at most [`MAX_NIP44_PLAINTEXT_BYTES`] of plaintext each), so
/// any NIP-44 implementation can open them. Each layer carries the one inside it base64-encoded and padded,
/// so a rumor of more than about 40 KB of JSON (an NIP-XX payload of about 28 KB) does not fit, and is
/// refused here rather than sent in NIP-44's extended form that other implementations cannot read.
pub fn wrap(
    crypto: &Crypto,
    receiver: &PublicKey,
    mut rumor: UnsignedEvent,
) -> Result<Event, Nip59Error> {
    rumor.ensure_id();
    let rumor_len = rumor.as_json().len();
    if rumor_len > MAX_NIP44_PLAINTEXT_BYTES {
        return Err(Nip59Error::Wrap(format!(
            "the rumor is {rumor_len} bytes; a seal holds at most {MAX_NIP44_PLAINTEXT_BYTES}"
        )));
    }
    let seal = GiftWrapSealBuilder::new(rumor, *receiver)
        .finalize(crypto.keys())
        .map_err(|e| Nip59Error::Wrap(e.to_string()))?;
    let seal_json = seal.as_json();
    if seal_json.len() > MAX_NIP44_PLAINTEXT_BYTES {
        return Err(Nip59Error::Wrap(format!(
            "the seal is {} bytes; a gift wrap holds at most {MAX_NIP44_PLAINTEXT_BYTES}",
            seal_json.len()
        )));
    }
    let one_time = Keys::generate();
    let content = nip44::encrypt(one_time.secret_key(), receiver, seal_json, Version::V2)
        .map_err(|e| Nip59Error::Wrap(e.to_string()))?;
    // A fresh random draw (not the one-time key itself) picks how far back the wrap is dated.
    let draw = Keys::generate().secret_key().secret_bytes();
    let back = u64::from_le_bytes(draw[..8].try_into().unwrap_or_default())
        % MAX_TIMESTAMP_TWEAK.as_secs();
    let created_at = Timestamp::from(Timestamp::now().as_secs().saturating_sub(back));
    EventBuilder::new(Kind::GiftWrap, content)
        .tag(Tag::public_key(*receiver))
        .custom_created_at(created_at)
        .finalize(&one_time)
        .map_err(|e| Nip59Error::Wrap(e.to_string()))
}

/// Opens a gift wrap addressed to us: verifies the wrap and the seal, decrypts both, and checks that the
/// rumor's author is the seal's signer.
pub fn unwrap(crypto: &Crypto, gift: &Event) -> Result<Message, Nip59Error> {
    if gift.kind.as_u16() != kinds::GIFT_WRAP {
        return Err(Nip59Error::NotGiftWrap);
    }
    if gift.content.len() > MAX_NIP44_PAYLOAD_BYTES {
        return Err(Nip59Error::TooLarge(gift.content.len()));
    }
    let opened = UnwrappedGift::from_gift_wrap(crypto.keys(), gift)
        .map_err(|e| Nip59Error::Unwrap(e.to_string()))?;
    let mut rumor = opened.rumor;
    // The rumor's `id` field is the sender's claim; the run is named by the id its content hashes to, so
    // no one can take over another prompt's run id.
    rumor.id = None;
    rumor.ensure_id();
    Ok(Message::rumor(rumor))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (Crypto, Crypto) {
        (Crypto::new(Keys::generate()), Crypto::new(Keys::generate()))
    }

    #[test]
    fn a_wrapped_rumor_opens_for_its_receiver_with_its_author_and_id() {
        let (alice, bob) = pair();
        let content = alice.encrypt(&bob.public_key(), "{\"ver\":1}").unwrap();
        let r = rumor(
            &alice,
            EventBuilder::new(Kind::Custom(kinds::PROMPT), content.clone())
                .tags([Tag::public_key(bob.public_key())]),
        );
        let id = r.id.unwrap();
        let gift = wrap(&alice, &bob.public_key(), r).unwrap();
        assert_eq!(gift.kind.as_u16(), kinds::GIFT_WRAP);
        assert_ne!(gift.pubkey, alice.public_key(), "the wrap hides its author");
        assert!(gift.verify().is_ok());
        let m = unwrap(&bob, &gift).unwrap();
        assert_eq!(
            (m.id, m.author, m.kind, m.content, m.wrapped),
            (id, alice.public_key(), kinds::PROMPT, content, true)
        );
    }

    #[test]
    fn a_wrap_for_someone_else_or_altered_or_not_a_wrap_is_a_typed_error() {
        let (alice, bob) = pair();
        let carol = Crypto::new(Keys::generate());
        let gift = wrap(
            &alice,
            &bob.public_key(),
            rumor(&alice, EventBuilder::new(Kind::Custom(kinds::PROMPT), "x")),
        )
        .unwrap();
        assert!(matches!(unwrap(&carol, &gift), Err(Nip59Error::Unwrap(_))));
        let mut altered = gift.clone();
        altered.content = altered.content.replace('A', "B");
        assert!(matches!(unwrap(&bob, &altered), Err(Nip59Error::Unwrap(_))));
        let plain = alice.sign(EventBuilder::new(Kind::Custom(kinds::PROMPT), "x"));
        assert_eq!(unwrap(&bob, &plain), Err(Nip59Error::NotGiftWrap));
        let mut huge = gift;
        huge.content = "A".repeat(MAX_NIP44_PAYLOAD_BYTES + 1);
        assert!(matches!(unwrap(&bob, &huge), Err(Nip59Error::TooLarge(_))));
    }

    #[test]
    fn a_rumor_whose_author_is_not_the_seals_signer_is_refused() {
        let (alice, bob) = pair();
        let mallory = Crypto::new(Keys::generate());
        // Mallory seals a rumor that claims Alice wrote it.
        let forged = EventBuilder::new(Kind::Custom(kinds::PROMPT), "x")
            .finalize_unsigned(alice.public_key());
        let gift = wrap(&mallory, &bob.public_key(), forged).unwrap();
        assert!(matches!(unwrap(&bob, &gift), Err(Nip59Error::Unwrap(_))));
    }

    #[test]
    fn a_rumor_too_large_to_seal_is_a_typed_error() {
        let (alice, bob) = pair();
        let r = rumor(
            &alice,
            EventBuilder::new(Kind::Custom(kinds::RESPONSE), "a".repeat(50_000)),
        );
        assert!(matches!(
            wrap(&alice, &bob.public_key(), r),
            Err(Nip59Error::Wrap(_))
        ));
        let fits = rumor(
            &alice,
            EventBuilder::new(Kind::Custom(kinds::RESPONSE), "a".repeat(40_000)),
        );
        let gift = wrap(&alice, &bob.public_key(), fits).unwrap();
        assert_eq!(unwrap(&bob, &gift).unwrap().content.len(), 40_000);
    }
}
