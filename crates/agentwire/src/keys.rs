//! Identities kept in the data directory: created once (atomically), owner-only.

use nostr::prelude::{Keys, PublicKey, ToBech32};
use std::fs;
use std::path::Path;

use agentwire_nostr::key_file;

/// Creates the data directory (owner-only) if needed.
pub(crate) fn ensure_data_dir(dir: &Path) -> Result<(), String> {
    key_file::ensure_private_dir(dir).map_err(|e| e.to_string())
}

/// Loads the key in `dir/name`, creating it (mode 0600) on first use ([`key_file::load_or_create`]).
pub(crate) fn load_or_create(dir: &Path, name: &str) -> Result<Keys, String> {
    key_file::load_or_create(dir, name).map_err(|e| e.to_string())
}

/// Loads the key in `path`, a file an operator provisioned ([`key_file::load_shared`]).
pub(crate) fn load_shared(path: &Path) -> Result<Keys, String> {
    key_file::load_shared(path).map_err(|e| e.to_string())
}

/// The public key in `dir/name`, if that key exists.
pub(crate) fn existing_public_key(dir: &Path, name: &str) -> Option<PublicKey> {
    let text = fs::read_to_string(dir.join(name)).ok()?;
    Keys::parse(text.trim()).ok().map(|k| k.public_key())
}

/// Parses a public key given as hex or npub.
pub(crate) fn parse_public_key(s: &str) -> Result<PublicKey, String> {
    PublicKey::parse(s).map_err(|_| format!("{s:?} is not a public key (64 hex or npub1...)"))
}

/// A public key as npub.
pub(crate) fn npub(pk: &PublicKey) -> String {
    pk.to_bech32().unwrap_or_default()
}
