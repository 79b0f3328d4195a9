//! Identities kept in the data directory: created once (atomically), owner-only.

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
///
/// Creating is atomic, so that several commands started at once on a fresh data dir agree on one key: the
/// new key is written and synced under a name of its own, then linked to `name`, which fails if another
/// process linked its key first; the loser reads the winner's key, which is whole (a link never shows a
/// half-written file).
pub(crate) fn load_or_create(dir: &Path, name: &str) -> Result<Keys, String> {
    let path = dir.join(name);
    if path.exists() {
        return read_key(&path);
    }
    ensure_data_dir(dir)?;
    let keys = Keys::generate();
    let part = dir.join(format!(
        ".{name}.{}.{}.part",
        std::process::id(),
        &keys.public_key().to_hex()[..16]
    ));
    let written = write_new_key(&part, &keys);
    let linked = written.and_then(|()| {
        fs::hard_link(&part, &path).map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => None,
            _ => Some(format!("cannot create {}: {e}", path.display())),
        })
    });
    let _ = fs::remove_file(&part);
    match linked {
        Ok(()) => {
            // The new name is durable once its directory is.
            if let Ok(d) = fs::File::open(dir) {
                let _ = d.sync_all();
            }
            Ok(keys)
        }
        // Another command made the key first: it is the one.
        Err(None) => read_key(&path),
        Err(Some(e)) => Err(e),
    }
}

fn read_key(path: &Path) -> Result<Keys, String> {
    let text =
        fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Keys::parse(text.trim())
        .map_err(|e| format!("{} holds no valid secret key: {e}", path.display()))
}

/// Writes `keys`' secret to a new file at `part` (mode 0600) and syncs it.
fn write_new_key(part: &Path, keys: &Keys) -> Result<(), Option<String>> {
    let fail = |e: std::io::Error| Some(format!("cannot write {}: {e}", part.display()));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(part)
        .map_err(fail)?;
    writeln!(f, "{}", keys.secret_key().to_secret_hex()).map_err(fail)?;
    f.sync_all().map_err(fail)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_started_at_once_agree_on_one_key() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("fresh");
        let made: Vec<Result<Keys, String>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..16)
                .map(|_| s.spawn(|| load_or_create(&data, "client.key")))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let keys: Vec<PublicKey> = made
            .into_iter()
            .map(|k| k.expect("every command gets the key").public_key())
            .collect();
        assert!(keys.iter().all(|k| *k == keys[0]), "one key: {keys:?}");
        assert_eq!(
            load_or_create(&data, "client.key").unwrap().public_key(),
            keys[0]
        );
        let mode = fs::metadata(data.join("client.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let left: Vec<_> = fs::read_dir(&data)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            left,
            vec![std::ffi::OsString::from("client.key")],
            "no part files left"
        );
    }
}
