//! The user a profile's jobs run as (`user = "name"`): its entry in `/etc/passwd`, looked up once when the
//! daemon starts. Only a daemon running as root can start a process as another user; any other is refused
//! at start with an error naming the profile, rather than failing each dispatch. Users only `/etc/passwd`
//! knows of (not NSS sources such as LDAP) are found.

use crate::daemon::profile::{Profile, ProfileError};
use std::collections::HashMap;
use std::path::PathBuf;

/// The file users are looked up in.
const PASSWD: &str = "/etc/passwd";

/// A user a job runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    /// The user's name (its `USER` and `LOGNAME`).
    pub name: String,
    /// Its uid.
    pub uid: u32,
    /// Its primary group (the job has no supplementary groups).
    pub gid: u32,
    /// Its home directory (its `HOME`, and the job's working directory when it exists: the job's own
    /// directory under the daemon's data directory is the daemon's user's).
    pub home: PathBuf,
}

/// `user`'s entry in `passwd` (the text of an `/etc/passwd`), for profile `profile` of a daemon running as
/// `daemon_uid`.
pub fn lookup(
    profile: &str,
    user: &str,
    passwd: &str,
    daemon_uid: u32,
) -> Result<RunAs, ProfileError> {
    let refuse = |reason: String| ProfileError::User {
        profile: profile.to_string(),
        user: user.to_string(),
        reason,
    };
    if daemon_uid != 0 {
        return Err(refuse(format!(
            "only a daemon running as root can start jobs as another user (this one runs as uid {daemon_uid})"
        )));
    }
    for line in passwd.lines() {
        // name:password:uid:gid:gecos:home:shell
        let fields: Vec<&str> = line.split(':').collect();
        if fields.len() < 7 || fields[0] != user {
            continue;
        }
        let (Ok(uid), Ok(gid)) = (fields[2].parse::<u32>(), fields[3].parse::<u32>()) else {
            return Err(refuse(format!(
                "its {PASSWD} entry has no numeric uid and gid"
            )));
        };
        if uid == 0 {
            return Err(refuse(
                "it is root: a job runs as the daemon's user unless another is named".into(),
            ));
        }
        return Ok(RunAs {
            name: user.to_string(),
            uid,
            gid,
            home: PathBuf::from(fields[5]),
        });
    }
    Err(refuse(format!("no such user in {PASSWD}")))
}

/// The users of every profile that names one, as this daemon (its uid, `/etc/passwd`) can serve them.
pub fn resolve(
    profiles: &HashMap<String, Profile>,
) -> Result<HashMap<String, RunAs>, ProfileError> {
    let mut out = HashMap::new();
    let mut passwd = None;
    for (name, p) in profiles {
        let Some(user) = &p.user else { continue };
        let text =
            passwd.get_or_insert_with(|| std::fs::read_to_string(PASSWD).unwrap_or_default());
        let daemon_uid = rustix::process::getuid().as_raw();
        out.insert(name.clone(), lookup(name, user, text, daemon_uid)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD_TEXT: &str = "root:x:0:0:root:/root:/bin/bash\n\
        nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n\
        odd:x:abc:1:odd:/:/bin/sh\n";

    #[test]
    fn a_user_is_found_only_for_a_root_daemon() {
        assert_eq!(
            lookup("sandboxed", "nobody", PASSWD_TEXT, 0).unwrap(),
            RunAs {
                name: "nobody".into(),
                uid: 65534,
                gid: 65534,
                home: "/nonexistent".into()
            }
        );
        let e = lookup("sandboxed", "nobody", PASSWD_TEXT, 1000).unwrap_err();
        let shown = e.to_string();
        assert!(
            shown.contains("profile \"sandboxed\"")
                && shown.contains("only a daemon running as root"),
            "{shown}"
        );
        for user in ["ghost", "odd", "root"] {
            let e = lookup("p", user, PASSWD_TEXT, 0).unwrap_err();
            assert!(e.to_string().contains("profile \"p\""), "{e}");
        }
    }
}
