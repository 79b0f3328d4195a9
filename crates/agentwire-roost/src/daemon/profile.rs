//! Job profiles: the command a job runs, how it gets its first task, whether its agent speaks the
//! protocol, what its environment holds beyond the allowlist (`env`, `pass_env`) and the user it runs as
//! (`user`), and whether only a controller starts it (`controller_only`). From `[roost.profiles.<name>]` in
//! agentwire's config, or `agentProfiles` in a roost.json (which has no `env`, `pass_env`, `user` or
//! `controller_only`).

use agentwire_core::child_env::{ChildEnv, ChildEnvError};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};

/// How the first task reaches the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TaskMode {
    /// As reply 1.
    #[default]
    Type,
    /// Appended to the command line.
    Argv,
}

/// One profile.
#[derive(Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// The program and its arguments.
    pub command: Vec<String>,
    /// How the first task is given.
    #[serde(default)]
    pub task: TaskMode,
    /// Whether the agent speaks the roost protocol (else it is a terminal agent: its output is its row).
    #[serde(default)]
    pub protocol: bool,
    /// Variables set in the job's environment (`env = { NAME = "value" }`), beside the allowlist every
    /// child gets ([`agentwire_core::child_env`]) and the job's own `ROOST_*` variables (which win).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The daemon's variables passed on to the job by name (`pass_env = ["NAME"]`); no other is.
    #[serde(default)]
    pub pass_env: Vec<String>,
    /// The user the job runs as (`user = "name"`, from `/etc/passwd`): only when the daemon runs as root.
    #[serde(default)]
    pub user: Option<String>,
    /// Only a controller (a person: `agentwire jobs dispatch`, a schedule, the concierge they let act)
    /// starts its jobs; a session's `spawn` of it is refused ([`crate::proto::spawn_rules::spawnable`]).
    #[serde(default)]
    pub controller_only: bool,
}

/// `env` values may be secrets: shown by name only.
impl std::fmt::Debug for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profile")
            .field("command", &self.command)
            .field("task", &self.task)
            .field("protocol", &self.protocol)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("pass_env", &self.pass_env)
            .field("user", &self.user)
            .field("controller_only", &self.controller_only)
            .finish()
    }
}

impl Profile {
    /// What the job's environment holds beyond the allowlist.
    pub fn child_env(&self) -> ChildEnv {
        ChildEnv {
            set: self.env.clone(),
            pass: self.pass_env.clone(),
        }
    }
}

/// Why profiles could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// Not JSON, or not the shape roost.json has.
    #[error("{0}")]
    Parse(String),
    /// A profile with no command.
    #[error("profile {0:?} has an empty command")]
    EmptyCommand(String),
    /// A profile whose `env` or `pass_env` is refused.
    #[error("profile {profile:?}: env/pass_env: {error}")]
    Env {
        /// The profile.
        profile: String,
        /// Why.
        error: ChildEnvError,
    },
    /// A profile with a `user` that cannot be served.
    #[error("profile {profile:?}: user = {user:?}: {reason}")]
    User {
        /// The profile.
        profile: String,
        /// The user named.
        user: String,
        /// Why.
        reason: String,
    },
}

#[derive(Deserialize)]
struct RoostJson {
    #[serde(rename = "agentProfiles", default)]
    agent_profiles: HashMap<String, RoostJsonProfile>,
}

#[derive(Deserialize)]
struct RoostJsonProfile {
    command: Vec<String>,
    #[serde(default)]
    task: TaskMode,
    #[serde(default)]
    protocol: bool,
}

/// The profiles of a roost.json (`agentProfiles`; other keys are roost's and ignored).
pub fn from_roost_json(text: &str) -> Result<HashMap<String, Profile>, ProfileError> {
    let parsed: RoostJson =
        serde_json::from_str(text).map_err(|e| ProfileError::Parse(e.to_string()))?;
    let mut out = HashMap::new();
    for (name, p) in parsed.agent_profiles {
        out.insert(
            name,
            Profile {
                command: p.command,
                task: p.task,
                protocol: p.protocol,
                ..Profile::default()
            },
        );
    }
    check(&out)?;
    Ok(out)
}

/// Checks every profile has a command, a fit `env` and `pass_env`, and that one with a `user` is a terminal
/// agent: a job run as another user cannot reach the daemon's owner-only socket, so it could never report.
/// (Whether the daemon may start jobs as that user is `run_as`'s to say, at start.)
pub fn check(profiles: &HashMap<String, Profile>) -> Result<(), ProfileError> {
    for (name, p) in profiles {
        if p.command.is_empty() || p.command[0].is_empty() {
            return Err(ProfileError::EmptyCommand(name.clone()));
        }
        p.child_env().check().map_err(|error| ProfileError::Env {
            profile: name.clone(),
            error,
        })?;
        if let (Some(user), true) = (&p.user, p.protocol) {
            return Err(ProfileError::User {
                profile: name.clone(),
                user: user.clone(),
                reason:
                    "a job run as another user cannot reach the daemon's owner-only socket, so the \
                         profile must be a terminal agent (protocol = false)"
                        .into(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roost_json_profiles_are_read_and_other_keys_ignored() {
        let p = from_roost_json(
            r#"{"theme":"dark","agentProfiles":{"mine":{"command":["python3","a.py"],"task":"type","protocol":true},
                "term":{"command":["bash"],"task":"argv"}}}"#,
        )
        .unwrap();
        assert_eq!(p["mine"].command, vec!["python3", "a.py"]);
        assert!(p["mine"].protocol);
        assert_eq!(p["term"].task, TaskMode::Argv);
        assert!(!p["term"].protocol);
        assert!(from_roost_json(r#"{"agentProfiles":{"x":{"command":[]}}}"#).is_err());
        assert!(from_roost_json("nope").is_err());
    }

    #[test]
    fn env_pass_env_and_user_are_checked() {
        let with = |f: &dyn Fn(&mut Profile)| {
            let mut p = Profile {
                command: vec!["sh".into()],
                ..Profile::default()
            };
            f(&mut p);
            check(&[("p".to_string(), p)].into_iter().collect())
        };
        assert!(with(&|p| {
            p.env.insert("MODE".into(), "secret-value".into());
            p.pass_env.push("GITHUB_TOKEN".into());
            p.user = Some("nobody".into());
        })
        .is_ok());
        let e = with(&|p| p.pass_env.push("NOT=A NAME".into())).unwrap_err();
        assert!(e.to_string().contains("profile \"p\""), "{e}");
        let e = with(&|p| {
            p.user = Some("nobody".into());
            p.protocol = true;
        })
        .unwrap_err();
        assert!(e.to_string().contains("terminal agent"), "{e}");
        let mut p = Profile::default();
        p.env.insert("TOKEN".into(), "s3cret".into());
        assert!(!format!("{p:?}").contains("s3cret"));
    }
}
