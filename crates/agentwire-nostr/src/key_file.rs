//! Secret keys kept in files: one the daemon makes for itself on first use (created atomically,
//! owner-only), or one an operator provisioned for several instances (never created, refused when others
//! may read it).

use nostr::prelude::Keys;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a key file could not be used. Never holds the key.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    /// Its directory could not be made, or made owner-only.
    #[error("cannot create data dir {}: {source}", dir.display())]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// A new key could not be written or linked into place.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// The file holds no secret key (hex or nsec).
    #[error("{} holds no valid secret key (hex or nsec)", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
    },
    /// A provisioned key file that is not there.
    #[error("key file {}: {source} (copy one instance's agent.key there, mode 0600)", path.display())]
    Missing {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// A provisioned key file others than its owner may read.
    #[error("key file {} may be read by others (mode {mode:o}): chmod 600 it", path.display())]
    Readable {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
}

/// Creates `dir` if needed and makes it owner-only.
pub fn ensure_private_dir(dir: &Path) -> Result<(), KeyFileError> {
    let failed = |source| KeyFileError::Dir {
        dir: dir.to_path_buf(),
        source,
    };
    fs::create_dir_all(dir).map_err(failed)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(failed)
}

/// Loads the key in `dir/name`, creating it (mode 0600) on first use.
///
/// Creating is atomic, so that several commands started at once on a fresh data dir agree on one key: the
/// new key is written and synced under a name of its own, then linked to `name`, which fails if another
/// process linked its key first; the loser reads the winner's key, which is whole (a link never shows a
/// half-written file).
pub fn load_or_create(dir: &Path, name: &str) -> Result<Keys, KeyFileError> {
    let path = dir.join(name);
    if path.exists() {
        return read_key(&path);
    }
    ensure_private_dir(dir)?;
    let keys = Keys::generate();
    let part = dir.join(format!(
        ".{name}.{}.{}.part",
        std::process::id(),
        &keys.public_key().to_hex()[..16]
    ));
    let written = write_new_key(&part, &keys).map(|()| fs::hard_link(&part, &path));
    let _ = fs::remove_file(&part);
    match written? {
        Ok(()) => {
            // The new name is durable once its directory is.
            if let Ok(d) = fs::File::open(dir) {
                let _ = d.sync_all();
            }
            Ok(keys)
        }
        // Another command made the key first: it is the one.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_key(&path),
        Err(source) => Err(KeyFileError::Write { path, source }),
    }
}

/// The key in `path`.
fn read_key(path: &Path) -> Result<Keys, KeyFileError> {
    let text = fs::read_to_string(path).map_err(|source| KeyFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    Keys::parse(text.trim()).map_err(|_| KeyFileError::Invalid {
        path: path.to_path_buf(),
    })
}

/// Writes `keys`' secret to a new file at `part` (mode 0600) and syncs it.
fn write_new_key(part: &Path, keys: &Keys) -> Result<(), KeyFileError> {
    let fail = |source| KeyFileError::Write {
        path: part.to_path_buf(),
        source,
    };
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
pub fn load_shared(path: &Path) -> Result<Keys, KeyFileError> {
    let meta = fs::metadata(path).map_err(|source| KeyFileError::Missing {
        path: path.to_path_buf(),
        source,
    })?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(KeyFileError::Readable {
            path: path.to_path_buf(),
            mode,
        });
    }
    read_key(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_started_at_once_agree_on_one_key() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("fresh");
        let made: Vec<Result<Keys, KeyFileError>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..16)
                .map(|_| s.spawn(|| load_or_create(&data, "client.key")))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let keys: Vec<_> = made
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

    #[test]
    fn a_provisioned_key_is_refused_when_missing_readable_by_others_or_not_a_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared.key");
        assert!(matches!(
            load_shared(&path),
            Err(KeyFileError::Missing { .. })
        ));
        fs::write(&path, Keys::generate().secret_key().to_secret_hex()).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let e = load_shared(&path).unwrap_err();
        assert!(e.to_string().contains("chmod 600"), "{e}");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        assert!(load_shared(&path).is_ok());
        fs::write(&path, "not a key").unwrap();
        let e = load_shared(&path).unwrap_err();
        assert!(matches!(e, KeyFileError::Invalid { .. }), "{e}");
        assert!(!e.to_string().contains("not a key"), "{e}");
    }
}
