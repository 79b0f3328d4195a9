//! NIP-44 v2 with conversation keys cached per peer, and event signing with a seeded CSPRNG.
//!
//! Deriving a conversation key is an ECDH (~50-100 µs); a run sends several events to one peer, so the key
//! is derived once per peer. `EventBuilder::finalize` draws signing randomness from the OS on every call;
//! here the BIP-340 auxiliary randomness comes from SHA-256 over a seed drawn once and a counter.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use bitcoin_hashes::{sha256, HashEngine};
use nostr::nips::nip44::v2::{self, ConversationKey};
use nostr::prelude::{
    Event, EventBuilder, FinalizeUnsignedEvent, Keys, PublicKey, Timestamp, UnsignedEvent,
};
use secp256k1::{All, Secp256k1};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Most conversation keys kept. Each is 32 bytes; past this the cache is cleared and refilled, which only
/// costs the ECDH again.
pub const MAX_CACHED_CONVERSATION_KEYS: usize = 65_536;
/// Largest NIP-44 payload (base64) we try to decrypt. NIP-44 v2 carries at most 65,535 plaintext bytes,
/// which encode to under 88,000 base64 characters; anything longer is not a payload we could have sent.
pub const MAX_NIP44_PAYLOAD_BYTES: usize = 88_000;
/// Largest plaintext NIP-44 v2 encrypts (its two-byte length prefix).
pub const MAX_NIP44_PLAINTEXT_BYTES: usize = 65_535;

/// Why a NIP-44 payload could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Nip44Error {
    /// Not base64, or not version 2 (e.g. a NIP-04 payload).
    #[error("content is not a NIP-44 v2 payload")]
    NotNip44,
    /// Longer than [`MAX_NIP44_PAYLOAD_BYTES`].
    #[error("payload of {0} bytes is too large")]
    TooLarge(usize),
    /// The MAC did not match or the padding was wrong: not for us, or altered.
    #[error("payload failed to decrypt: {0}")]
    Decrypt(String),
    /// The plaintext is not UTF-8.
    #[error("plaintext is not UTF-8")]
    NotUtf8,
    /// The plaintext is over [`MAX_NIP44_PLAINTEXT_BYTES`].
    #[error("plaintext of {0} bytes exceeds NIP-44's limit of 65535")]
    PlaintextTooLarge(usize),
}

/// Keys plus the caches that make NIP-44 and signing cheap.
pub struct Crypto {
    keys: Keys,
    secp: Secp256k1<All>,
    seed: [u8; 32],
    counter: AtomicU64,
    conversation_keys: Mutex<HashMap<PublicKey, ConversationKey>>,
    /// Told of every event signed here (the embedded relay's cache of signatures it need not verify).
    on_signed: Option<SignedHook>,
}

/// Called with each event [`Crypto`] signs.
pub type SignedHook = Arc<dyn Fn(&Event) + Send + Sync + std::panic::RefUnwindSafe>;

impl Crypto {
    /// Wraps keys.
    pub fn new(keys: Keys) -> Self {
        // A fresh secret key is 32 bytes from the OS CSPRNG: a good seed.
        let seed = Keys::generate().secret_key().secret_bytes();
        Crypto {
            keys,
            secp: Secp256k1::new(),
            seed,
            counter: AtomicU64::new(0),
            conversation_keys: Mutex::new(HashMap::new()),
            on_signed: None,
        }
    }

    /// Tells `hook` of every event signed from now on (e.g. the embedded relay, which then need not verify
    /// the signature again).
    pub fn with_signed_hook(mut self, hook: SignedHook) -> Self {
        self.on_signed = Some(hook);
        self
    }

    /// Our public key.
    pub fn public_key(&self) -> PublicKey {
        self.keys.public_key()
    }

    /// Our keys.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    fn conversation_key(&self, peer: &PublicKey) -> Result<ConversationKey, Nip44Error> {
        let mut cache = self
            .conversation_keys
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(k) = cache.get(peer) {
            return Ok(ConversationKey::new(
                k.as_bytes().try_into().map_err(|_| Nip44Error::NotNip44)?,
            ));
        }
        let k = ConversationKey::derive(self.keys.secret_key(), peer)
            .map_err(|e| Nip44Error::Decrypt(e.to_string()))?;
        if cache.len() >= MAX_CACHED_CONVERSATION_KEYS {
            cache.clear();
        }
        let copy = ConversationKey::new(k.as_bytes().try_into().map_err(|_| Nip44Error::NotNip44)?);
        cache.insert(*peer, k);
        Ok(copy)
    }

    fn random32(&self) -> [u8; 32] {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let mut e = sha256::Hash::engine();
        e.input(&self.seed);
        e.input(&n.to_le_bytes());
        sha256::Hash::from_engine(e).to_byte_array()
    }

    /// Encrypts plaintext for `peer` (NIP-44 v2, fresh nonce), base64.
    pub fn encrypt(&self, peer: &PublicKey, plaintext: &str) -> Result<String, Nip44Error> {
        if plaintext.len() > MAX_NIP44_PLAINTEXT_BYTES {
            return Err(Nip44Error::PlaintextTooLarge(plaintext.len()));
        }
        let key = self.conversation_key(peer)?;
        let bytes = v2::encrypt_to_bytes_with_nonce(&key, plaintext.as_bytes(), self.random32())
            .map_err(|e| Nip44Error::Decrypt(e.to_string()))?;
        Ok(STANDARD.encode(bytes))
    }

    /// Decrypts a NIP-44 v2 payload from `peer`.
    pub fn decrypt(&self, peer: &PublicKey, payload: &str) -> Result<String, Nip44Error> {
        if payload.len() > MAX_NIP44_PAYLOAD_BYTES {
            return Err(Nip44Error::TooLarge(payload.len()));
        }
        if payload.starts_with('#') || payload.contains("?iv=") {
            return Err(Nip44Error::NotNip44);
        }
        let raw = STANDARD.decode(payload).map_err(|_| Nip44Error::NotNip44)?;
        if raw.first() != Some(&2) {
            return Err(Nip44Error::NotNip44);
        }
        let key = self.conversation_key(peer)?;
        let plain =
            v2::decrypt_to_bytes(&key, &raw).map_err(|e| Nip44Error::Decrypt(e.to_string()))?;
        String::from_utf8(plain).map_err(|_| Nip44Error::NotUtf8)
    }

    /// Signs an event built from `builder` with our keys.
    pub fn sign(&self, builder: EventBuilder) -> Event {
        let unsigned: UnsignedEvent = builder.finalize_unsigned(self.keys.public_key());
        self.sign_unsigned(unsigned)
    }

    /// Signs an unsigned event (its id is computed here).
    pub fn sign_unsigned(&self, mut unsigned: UnsignedEvent) -> Event {
        let id = unsigned.id();
        let sig = self
            .keys
            .sign_schnorr_with_aux_rand(&self.secp, id.as_bytes(), &self.random32());
        let event = Event::new(
            id,
            unsigned.pubkey,
            unsigned.created_at,
            unsigned.kind,
            unsigned.tags,
            unsigned.content,
            sig,
        );
        if let Some(hook) = &self.on_signed {
            hook(&event);
        }
        event
    }

    /// The current time as a Nostr timestamp.
    pub fn now() -> Timestamp {
        Timestamp::now()
    }
}
