//! The name an instance journals its turns under on a shared journal: the one a setting gives, or by
//! default the host's name and an id kept in the data dir, so that two instances on one host (two services,
//! a test, containers that share a host name) never share a name by accident.
//!
//! Two live processes with one name would end each other's running turns (each takes the other's for its
//! own, cut off by a crash); the journal refuses a name another live process holds
//! (`JetStreamJournal::hold_instance`).

use super::error::Setting;
use std::path::Path;

/// The file in the data dir that keeps the data dir's instance id.
pub(crate) const INSTANCE_ID_FILE: &str = "instance-id";
/// Hex digits of an instance id: 32 bits tell the data dirs of one host apart.
const INSTANCE_ID_HEX: usize = 8;
/// The longest instance name (a key of the journal's buckets, and part of log lines).
pub(crate) const MAX_INSTANCE_NAME: usize = 64;

/// Where an instance's name comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum InstanceName {
    /// Named by a setting (`[journal] instance`, `[nats] instance`).
    Named {
        /// The name.
        name: String,
        /// The setting that names it.
        setting: Setting,
    },
    /// The host's name and the data dir's id: `<host>-<id>`.
    PerDataDir {
        /// The host's name.
        host: String,
    },
}

impl InstanceName {
    /// The setting an operator changes to give this instance another name.
    pub(crate) fn setting(&self) -> Setting {
        match self {
            InstanceName::Named { setting, .. } => setting,
            InstanceName::PerDataDir { .. } => "[journal] instance",
        }
    }

    /// The name in data dir `data_dir`, making the data dir's id on first use.
    pub(crate) fn in_data_dir(&self, data_dir: &Path) -> Result<String, String> {
        match self {
            InstanceName::Named { name, .. } => Ok(name.clone()),
            InstanceName::PerDataDir { host } => {
                let id = match read_id(data_dir)? {
                    Some(id) => id,
                    None => make_id(data_dir)?,
                };
                Ok(per_data_dir(host, &id))
            }
        }
    }

    /// The name as `agentwire config` shows it: the data dir's id once it has one, else a placeholder that
    /// says when it is made.
    pub(crate) fn shown(&self, data_dir: &Path) -> String {
        match self {
            InstanceName::Named { name, .. } => name.clone(),
            InstanceName::PerDataDir { host } => match read_id(data_dir) {
                Ok(Some(id)) => per_data_dir(host, &id),
                _ => format!("{host}-<id made by the first serve>"),
            },
        }
    }
}

fn per_data_dir(host: &str, id: &str) -> String {
    let room = MAX_INSTANCE_NAME - INSTANCE_ID_HEX - 1;
    let host: String = host.chars().take(room).collect();
    format!("{host}-{id}")
}

fn valid_id(id: &str) -> bool {
    id.len() == INSTANCE_ID_HEX && id.bytes().all(|b| b.is_ascii_hexdigit())
}

fn read_id(data_dir: &Path) -> Result<Option<String>, String> {
    let path = data_dir.join(INSTANCE_ID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(s) if valid_id(s.trim()) => Ok(Some(s.trim().to_ascii_lowercase())),
        Ok(_) => Err(format!(
            "{} is not an instance id ({INSTANCE_ID_HEX} hex digits); remove it to make a new one, or set [journal] instance",
            path.display()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

fn make_id(data_dir: &Path) -> Result<String, String> {
    let mut bytes = [0u8; INSTANCE_ID_HEX / 2];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| "the system's random source failed".to_string())?;
    let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::create_dir_all(data_dir)
        .map_err(|e| format!("cannot create {}: {e}", data_dir.display()))?;
    let path = data_dir.join(INSTANCE_ID_FILE);
    // Written whole, then moved into place: a crash leaves no half-written id.
    let part = data_dir.join(format!("{INSTANCE_ID_FILE}.part"));
    std::fs::write(&part, format!("{id}\n"))
        .and_then(|()| std::fs::rename(&part, &path))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_dirs_name_is_the_host_and_an_id_kept_in_the_dir() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let name = InstanceName::PerDataDir { host: "vm".into() };
        assert_eq!(name.shown(a.path()), "vm-<id made by the first serve>");
        let first = name.in_data_dir(a.path()).unwrap();
        assert!(first.starts_with("vm-") && first.len() == 3 + INSTANCE_ID_HEX);
        assert_eq!(name.in_data_dir(a.path()).unwrap(), first, "kept");
        assert_eq!(name.shown(a.path()), first);
        assert_ne!(
            name.in_data_dir(b.path()).unwrap(),
            first,
            "another data dir on the same host has another name"
        );
        let long = InstanceName::PerDataDir {
            host: "h".repeat(80),
        };
        assert_eq!(long.in_data_dir(a.path()).unwrap().len(), MAX_INSTANCE_NAME);
    }

    #[test]
    fn a_named_instance_keeps_its_name_and_a_bad_id_file_is_named() {
        let d = tempfile::tempdir().unwrap();
        let named = InstanceName::Named {
            name: "aw-a".into(),
            setting: "[journal] instance",
        };
        assert_eq!(named.in_data_dir(d.path()).unwrap(), "aw-a");
        assert!(!d.path().join(INSTANCE_ID_FILE).exists());
        std::fs::write(d.path().join(INSTANCE_ID_FILE), "not hex!").unwrap();
        let e = InstanceName::PerDataDir { host: "vm".into() }
            .in_data_dir(d.path())
            .unwrap_err();
        assert!(
            e.contains("instance-id") && e.contains("[journal] instance"),
            "{e}"
        );
    }
}
