//! Job profiles: the command a job runs, how it gets its first task, and whether its agent speaks the
//! protocol. From `[roost.profiles.<name>]` in agentwire's config, or `agentProfiles` in a roost.json.

use serde::Deserialize;
use std::collections::HashMap;

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
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
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
            },
        );
    }
    check(&out)?;
    Ok(out)
}

/// Checks every profile has a command.
pub fn check(profiles: &HashMap<String, Profile>) -> Result<(), ProfileError> {
    for (name, p) in profiles {
        if p.command.is_empty() || p.command[0].is_empty() {
            return Err(ProfileError::EmptyCommand(name.clone()));
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
}
