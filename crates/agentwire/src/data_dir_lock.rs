//! One `serve` per data dir: the first takes an exclusive lock on `serve.lock` (holding its pid) before it
//! opens any port; a second one is refused at once, naming the pid of the one that serves it. The lock is the
//! kernel's (`flock`): a daemon that dies, however it dies, lets go of it.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::Path;

/// The lock file, in the data dir.
pub(crate) const LOCK_FILE: &str = "serve.lock";

/// The data dir held by this process until dropped.
#[derive(Debug)]
pub(crate) struct DataDirLock {
    _file: File,
}

impl DataDirLock {
    /// Creates the data dir if needed (owner-only) and takes it, or says who has it.
    pub(crate) fn take(data_dir: &Path) -> Result<DataDirLock, String> {
        crate::keys::ensure_data_dir(data_dir)?;
        let path = data_dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let pid = match holder.trim().parse::<u32>() {
                    Ok(pid) => format!("pid {pid}"),
                    Err(_) => "a process that is still starting".into(),
                };
                return Err(format!(
                    "data dir {} is in use by another agentwire serve ({pid}); stop it, or give this one its own --data-dir",
                    data_dir.display()
                ));
            }
            Err(TryLockError::Error(e)) => {
                return Err(format!("cannot lock {}: {e}", path.display()))
            }
        }
        file.set_len(0)
            .and_then(|_| file.rewind())
            .and_then(|_| writeln!(file, "{}", std::process::id()))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(DataDirLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_taker_is_refused_with_the_pid_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let first = DataDirLock::take(&data).unwrap();
        let e = DataDirLock::take(&data).unwrap_err();
        assert!(
            e.contains(&format!(
                "in use by another agentwire serve (pid {})",
                std::process::id()
            )),
            "{e}"
        );
        drop(first);
        DataDirLock::take(&data).expect("free again once the first let go");
    }
}
