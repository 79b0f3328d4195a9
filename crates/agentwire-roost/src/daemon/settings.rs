//! The roost front's configuration section, `[roost]`: its file shape, the profiles in force
//! (`[roost.profiles]` with a roost.json's `agentProfiles`, which win on a shared name, checked), the socket,
//! and what `agentwire config` shows of them (an `env` value never: it may be a token). Which engine agents
//! are hosted as profiles, and a `roost:<profile>` agent's profile, are decided with the agents, by the
//! daemon.

use crate::daemon::profile::{Profile, ProfileError, TaskMode};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// `[roost]` in the configuration file.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RoostSection {
    /// The socket (default `$XDG_RUNTIME_DIR/agentwire/roost.sock`).
    pub socket: Option<PathBuf>,
    /// A roost.json whose `agentProfiles` are read too.
    pub config: Option<PathBuf>,
    /// `[roost.profiles.<name>]`.
    pub profiles: HashMap<String, Profile>,
    /// The profile (a roost profile or a hosted agent) the concierge runs when the hub turns it on
    /// without naming one.
    pub concierge: Option<String>,
    /// The concierge's starting `answer` policy: `never` (the default), `routine` or `always`.
    pub concierge_answer: Option<crate::proto::concierge::Answer>,
    /// Whether the concierge may stop, respawn and dispatch at the start (default false).
    pub concierge_act: bool,
    /// The IANA time zone of schedules' and standing orders' times of day (default: the system's).
    pub timezone: Option<String>,
}

/// The concierge's setup from the section.
pub fn concierge(section: &RoostSection) -> crate::daemon::ConciergeSetup {
    crate::daemon::ConciergeSetup {
        launch: section.concierge.clone(),
        policy: crate::proto::concierge::Policy {
            answer: section.concierge_answer.unwrap_or_default(),
            act: section.concierge_act,
        },
    }
}

/// The zone schedules and orders are read in: `timezone`, else the system's; an unknown name is an
/// error that names it.
pub fn zone(
    section: &RoostSection,
) -> Result<crate::proto::when::Zone, crate::proto::when::WhenError> {
    match &section.timezone {
        Some(name) => crate::proto::when::Zone::named(name),
        None => Ok(crate::proto::when::Zone::system()),
    }
}

/// The profiles in force: the roost.json named by `config_flag` (`--roost-config`) or the section's
/// `config`, read by `read_json`, over `[roost.profiles]`; each checked. Returns the roost.json's path too.
pub fn profiles<E: From<ProfileError>>(
    section: &RoostSection,
    config_flag: Option<&Path>,
    read_json: impl FnOnce(&Path) -> Result<HashMap<String, Profile>, E>,
) -> Result<(Option<PathBuf>, HashMap<String, Profile>), E> {
    let config = config_flag
        .map(Path::to_path_buf)
        .or_else(|| section.config.clone());
    let mut profiles = section.profiles.clone();
    if let Some(path) = &config {
        profiles.extend(read_json(path)?);
    }
    crate::daemon::profile::check(&profiles)?;
    Ok((config, profiles))
}

/// The socket: `socket_flag` (`--roost-socket`), else the section's, else `default`.
pub fn socket(section: &RoostSection, socket_flag: Option<&Path>, default: PathBuf) -> PathBuf {
    socket_flag
        .map(Path::to_path_buf)
        .or_else(|| section.socket.clone())
        .unwrap_or(default)
}

/// `[roost]` as `agentwire config` prints what is in force.
#[derive(Debug, Serialize)]
pub struct RoostView<'a> {
    socket: &'a Path,
    #[serde(skip_serializing_if = "Option::is_none")]
    config: Option<&'a Path>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    profiles: BTreeMap<&'a str, ProfileView<'a>>,
}

/// One profile as `agentwire config` prints it: each `env` variable named, its value `redacted`.
#[derive(Debug, Serialize)]
pub struct ProfileView<'a> {
    command: &'a [String],
    task: &'static str,
    protocol: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'a str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pass_env: &'a [String],
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    env: BTreeMap<&'a str, &'static str>,
    #[serde(skip_serializing_if = "is_false")]
    controller_only: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// What `agentwire config` shows of the socket, the roost.json and the profiles; an `env` value is shown
/// as `redacted`.
pub fn view<'a>(
    socket: &'a Path,
    config: Option<&'a Path>,
    profiles: &'a HashMap<String, Profile>,
    redacted: &'static str,
) -> RoostView<'a> {
    RoostView {
        socket,
        config,
        profiles: profiles
            .iter()
            .map(|(name, p)| {
                let view = ProfileView {
                    command: &p.command,
                    task: match p.task {
                        TaskMode::Type => "type",
                        TaskMode::Argv => "argv",
                    },
                    protocol: p.protocol,
                    user: p.user.as_deref(),
                    pass_env: &p.pass_env,
                    env: p.env.keys().map(|k| (k.as_str(), redacted)).collect(),
                    controller_only: p.controller_only,
                };
                (name.as_str(), view)
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(command: &[&str]) -> Profile {
        serde_json::from_value(serde_json::json!({ "command": command })).unwrap()
    }

    #[test]
    fn the_roost_json_wins_on_a_shared_name_and_every_profile_is_checked() {
        let section = RoostSection {
            profiles: HashMap::from([
                ("a".to_string(), profile(&["from-file"])),
                ("b".to_string(), profile(&["b"])),
            ]),
            ..Default::default()
        };
        let (config, p) = profiles::<ProfileError>(&section, None, |_| unreachable!()).unwrap();
        assert_eq!((config, p.len()), (None, 2));
        let json = Path::new("/r/roost.json");
        let (config, p) = profiles::<ProfileError>(&section, Some(json), |path| {
            assert_eq!(path, json);
            Ok(HashMap::from([("a".to_string(), profile(&["from-json"]))]))
        })
        .unwrap();
        assert_eq!(config.as_deref(), Some(json));
        assert_eq!(p["a"].command, ["from-json"]);
        let empty = RoostSection {
            profiles: HashMap::from([("x".to_string(), profile(&[""]))]),
            ..Default::default()
        };
        assert!(profiles::<ProfileError>(&empty, None, |_| unreachable!()).is_err());
        assert_eq!(
            socket(&section, None, PathBuf::from("/run/d.sock")),
            PathBuf::from("/run/d.sock")
        );
        assert_eq!(
            socket(&section, Some(Path::new("/f.sock")), PathBuf::from("/d")),
            PathBuf::from("/f.sock")
        );
    }
}
