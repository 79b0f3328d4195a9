//! What a child process (a `cmd` agent's command, a roost job, the `shell` tool's command, an MCP server)
//! finds in its environment: never the daemon's whole environment, which holds its secrets (a model API
//! key, a NATS password or token), but an allowlist of what programs need to run ([`INHERITED_VARS`] and the
//! `LC_*` locale variables), what the configuration passes on by name (`pass_env`) and what it sets
//! (`env`). The spawn site clears the environment and sets these, then its protocol's own variables. Pure:
//! the parent's variables come in as an argument.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};

/// The daemon's variables every child gets (when the daemon has them): what a program needs to find
/// programs (`PATH`), its user's files (`HOME`, `USER`, `LOGNAME`), its temporary directory (`TMPDIR`), its
/// language and time zone (`LANG`, `LC_ALL`, `TZ`) and its terminal (`TERM`). None of them is a secret.
pub const INHERITED_VARS: [&str; 9] = [
    "PATH", "HOME", "LANG", "LC_ALL", "TERM", "USER", "LOGNAME", "TMPDIR", "TZ",
];
/// Variables with this prefix are passed on too: the locale categories (`LC_CTYPE`, `LC_TIME`, ...).
pub const INHERITED_PREFIX: &str = "LC_";
/// The most variables one `env` or `pass_env` setting may name: a configuration, not a data store.
pub const MAX_CHILD_ENV_VARS: usize = 64;
/// The most bytes of one `env` value: an environment is limited (about 128 KiB a string on Linux) and a
/// value this large is a file's job.
pub const MAX_CHILD_ENV_VALUE_BYTES: usize = 16 * 1024;

/// What a configuration adds to a child's environment beyond the allowlist.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ChildEnv {
    /// Variables set to these values (`env = { NAME = "value" }`).
    pub set: BTreeMap<String, String>,
    /// Variables passed on from the daemon's environment when it has them (`pass_env = ["NAME"]`).
    pub pass: Vec<String>,
}

/// The values may be secrets (a token an MCP server needs): `Debug` names the variables only.
impl std::fmt::Debug for ChildEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildEnv")
            .field("set", &self.set.keys().collect::<Vec<_>>())
            .field("pass", &self.pass)
            .finish()
    }
}

/// Why an `env` or `pass_env` setting is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChildEnvError {
    /// A name that cannot be an environment variable's.
    #[error("{0:?} is not a variable name (1-256 of A-Z a-z 0-9 _, not starting with a digit)")]
    BadName(String),
    /// More variables than [`MAX_CHILD_ENV_VARS`].
    #[error("more than {MAX_CHILD_ENV_VARS} variables")]
    TooMany,
    /// A value over [`MAX_CHILD_ENV_VALUE_BYTES`], or holding a NUL byte. The value is not repeated.
    #[error("the value of {0} is over {MAX_CHILD_ENV_VALUE_BYTES} bytes or holds a NUL byte")]
    BadValue(String),
}

/// Whether `name` may name a variable: what a POSIX shell takes, so a shell child can read it too.
fn check_name(name: &str) -> Result<(), ChildEnvError> {
    let fit = (1..=256).contains(&name.len())
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if fit {
        Ok(())
    } else {
        Err(ChildEnvError::BadName(name.to_string()))
    }
}

/// Whether the daemon's variable `name` is one every child gets.
pub fn inherited(name: &OsStr) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    INHERITED_VARS.contains(&name) || name.starts_with(INHERITED_PREFIX)
}

impl ChildEnv {
    /// Checks the names and values against the limits.
    pub fn check(&self) -> Result<(), ChildEnvError> {
        if self.set.len() > MAX_CHILD_ENV_VARS || self.pass.len() > MAX_CHILD_ENV_VARS {
            return Err(ChildEnvError::TooMany);
        }
        for name in self.set.keys().chain(&self.pass) {
            check_name(name)?;
        }
        for (name, value) in &self.set {
            if value.len() > MAX_CHILD_ENV_VALUE_BYTES || value.contains('\0') {
                return Err(ChildEnvError::BadValue(name.clone()));
            }
        }
        Ok(())
    }

    /// Every variable a child gets, given the daemon's (`std::env::vars_os()` at a spawn site): the
    /// allowlisted ones, then the passed ones the daemon has, then the set ones (which win). The spawn site
    /// clears the child's environment first (`env_clear`) and sets its protocol's variables after.
    pub fn vars(
        &self,
        parent: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> BTreeMap<OsString, OsString> {
        let mut out: BTreeMap<OsString, OsString> = parent
            .into_iter()
            .filter(|(name, _)| inherited(name) || self.pass.iter().any(|p| OsStr::new(p) == name))
            .collect();
        for (name, value) in &self.set {
            out.insert(name.into(), value.into());
        }
        out
    }

    /// Whether a child may get variable `name` from the daemon's environment: it is allowlisted or passed.
    /// (A configuration check refuses a `pass_env` naming a variable the configuration holds a secret in.)
    pub fn passes(&self, name: &str) -> bool {
        inherited(OsStr::new(name)) || self.pass.iter().any(|p| p == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parent() -> Vec<(OsString, OsString)> {
        [
            ("PATH", "/usr/bin"),
            ("HOME", "/home/me"),
            ("LC_TIME", "C"),
            ("OPENAI_API_KEY", "sk-secret"),
            ("NATS_PW", "hunter2"),
            ("GITHUB_TOKEN", "ghp-1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect()
    }

    #[test]
    fn only_the_allowlist_and_what_is_named_reach_a_child() {
        let names = |v: BTreeMap<OsString, OsString>| -> Vec<String> {
            v.keys().map(|k| k.to_string_lossy().into_owned()).collect()
        };
        assert_eq!(
            names(ChildEnv::default().vars(parent())),
            ["HOME", "LC_TIME", "PATH"]
        );
        let env = ChildEnv {
            set: [
                ("MODE".to_string(), "fast".to_string()),
                ("HOME".into(), "/srv".into()),
            ]
            .into_iter()
            .collect(),
            pass: vec!["GITHUB_TOKEN".into(), "MISSING".into()],
        };
        let vars = env.vars(parent());
        assert_eq!(
            names(vars.clone()),
            ["GITHUB_TOKEN", "HOME", "LC_TIME", "MODE", "PATH"]
        );
        assert_eq!(vars[OsStr::new("HOME")], "/srv", "a set value wins");
        assert!(env.passes("GITHUB_TOKEN") && env.passes("PATH") && !env.passes("NATS_PW"));
    }

    #[test]
    fn names_values_and_counts_are_checked_and_debug_shows_no_value() {
        let mut env = ChildEnv::default();
        env.set.insert("TOKEN".into(), "s3cret".into());
        assert!(env.check().is_ok());
        assert!(!format!("{env:?}").contains("s3cret"), "{env:?}");
        for bad in ["", "A=B", "1X", "A B", "Ä"] {
            let e = ChildEnv {
                pass: vec![bad.into()],
                ..Default::default()
            };
            assert_eq!(e.check(), Err(ChildEnvError::BadName(bad.into())));
        }
        let mut big = ChildEnv::default();
        big.set
            .insert("X".into(), "v".repeat(MAX_CHILD_ENV_VALUE_BYTES + 1));
        let e = big.check().unwrap_err();
        assert!(!e.to_string().contains("vvv"), "{e}");
        let many = ChildEnv {
            pass: (0..=MAX_CHILD_ENV_VARS).map(|n| format!("V{n}")).collect(),
            ..Default::default()
        };
        assert_eq!(many.check(), Err(ChildEnvError::TooMany));
    }
}
