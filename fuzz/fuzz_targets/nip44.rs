//! NIP-44 v2 payloads as a peer sends them: decrypting any text never panics, and any plaintext NIP-44
//! carries (1 to 65,535 bytes) encrypts to a payload that decrypts to it.
#![no_main]

use agentwire_nostr::crypto::{Crypto, MAX_NIP44_PLAINTEXT_BYTES};
use libfuzzer_sys::fuzz_target;
use nostr::prelude::{Keys, SecretKey};
use std::sync::OnceLock;

fn pair() -> &'static (Crypto, Crypto) {
    static PAIR: OnceLock<(Crypto, Crypto)> = OnceLock::new();
    PAIR.get_or_init(|| {
        let key = |b: u8| Keys::new(SecretKey::from_slice(&[b; 32]).expect("a valid secret key"));
        (Crypto::new(key(1)), Crypto::new(key(2)))
    })
}

fuzz_target!(|data: &[u8]| {
    let (me, peer) = pair();
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = me.decrypt(&peer.public_key(), text);
        if !text.is_empty() && text.len() <= MAX_NIP44_PLAINTEXT_BYTES {
            let sealed = peer
                .encrypt(&me.public_key(), text)
                .expect("NIP-44 carries it");
            assert_eq!(me.decrypt(&peer.public_key(), &sealed).as_deref(), Ok(text));
        }
    }
});
