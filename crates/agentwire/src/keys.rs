//! Identities kept in the data directory: created once, owner-only.

use nostr::prelude::{Keys, PublicKey, ToBech32};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Creates the data directory (owner-only) if needed.
pub(crate) fn ensure_data_dir(dir: &Path) -> Result<(), String> {
    fs::create_dir_all(dir)
        .map_err(|e| format!("cannot create data dir {}: {e}", dir.display()))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .map_err(|e| format!("cannot restrict data dir {}: {e}", dir.display()))
}

/// Loads the key in `dir/name`, creating it (mode 0600) on first use.
pub(crate) fn load_or_create(dir: &Path, name: &str) -> Result<Keys, String> {
    let path = dir.join(name);
    if path.exists() {
        let text = fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        return Keys::parse(text.trim())
            .map_err(|e| format!("{} holds no valid secret key: {e}", path.display()));
    }
    ensure_data_dir(dir)?;
    let keys = Keys::generate();
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    writeln!(f, "{}", keys.secret_key().to_secret_hex())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    f.sync_all()
        .map_err(|e| format!("cannot sync {}: {e}", path.display()))?;
    Ok(keys)
}

/// Loads the key in `path`, a file an operator provisioned (several instances serve one agent with it):
/// never created here, so an instance cannot quietly become an agent of its own, and refused when others
/// than its owner may read it.
pub(crate) fn load_shared(path: &Path) -> Result<Keys, String> {
    let meta = fs::metadata(path).map_err(|e| {
        format!(
            "key file {}: {e} (copy one instance's agent.key there, mode 0600)",
            path.display()
        )
    })?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "key file {} may be read by others (mode {mode:o}): chmod 600 it",
            path.display()
        ));
    }
    let text =
        fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Keys::parse(text.trim())
        .map_err(|_| format!("{} holds no valid secret key (hex or nsec)", path.display()))
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
