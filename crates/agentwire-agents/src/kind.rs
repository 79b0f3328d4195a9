//! Agent kinds as plug-ins. An `[agents.<name>]` entry names its `kind`; the kind, one entry of the
//! binary's list, owns the rest of the entry: it reads its own keys into an [`AgentPlan`] (or says which
//! key is wrong and why), the plan shows itself as `agentwire config` prints it, and it builds the agent
//! that runs the turns when `serve` starts. Adding a kind is a module implementing [`AgentKind`] and one
//! line in that list.
//!
//! The keys every entry has whatever its kind (`kind`, `expose`, `max_concurrent_turns`, `nats_identity`,
//! `key_file`, `pricing_hints`) are the daemon's; a kind's own keys are the fields of its section's type
//! ([`keys_of`]), so the list a kind announces is the list it reads.

use agentwire_core::child_env::ChildEnv;
use agentwire_engine::metrics::Metrics;
use agentwire_engine::Agent;
use futures_util::future::BoxFuture;
use serde::de::DeserializeOwned;
use std::any::Any;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A kind of agent: one entry of the binary's list.
pub trait AgentKind: Send + Sync {
    /// Its name, as `[agents.<name>] kind` takes it.
    fn name(&self) -> &'static str;
    /// What its agents are, in a few words (listed when an entry names no kind there is).
    fn about(&self) -> &'static str;
    /// The keys of its entries beside the common ones ([`keys_of`] its section's type).
    fn keys(&self) -> &'static [&'static str];
    /// Whether its agents are served elsewhere and reached as their client: only those may be a model
    /// agent's delegates (none of them delegates in turn, so no call goes round).
    fn served_elsewhere(&self) -> bool {
        false
    }
    /// Reads entry `entry` (its own keys only) into its plan, or says which key is wrong and why.
    fn resolve(&self, entry: &KindEntry<'_>) -> Result<Arc<dyn AgentPlan>, KindError>;
}

/// An agent's settings, resolved by its kind: what `agentwire config` shows and how `serve` builds it.
pub trait AgentPlan: Send + Sync + std::fmt::Debug + Any {
    /// Its kind's name.
    fn kind(&self) -> &'static str;
    /// Its own keys as `agentwire config` prints them (after `kind`): nothing secret; a variable holding a
    /// secret is named, never read.
    fn view(&self) -> serde_json::Map<String, serde_json::Value>;
    /// The environment variables it reads and hands on ([`EnvUse`]).
    fn env_use(&self) -> EnvUse<'_> {
        EnvUse::default()
    }
    /// The roost profile whose jobs serve its turns, which the daemon's roost supervisor must have.
    fn roost_profile(&self) -> Option<&str> {
        None
    }
    /// The model its turns run on unless a prompt names another (for the GenAI metrics' `model`).
    fn default_model(&self) -> Option<&str> {
        None
    }
    /// The entries it calls as tools (so an entry served only through it is served).
    fn delegates(&self) -> Vec<&str> {
        Vec::new()
    }
    /// Builds the agent of entry `name`; `serve` calls it once, before any front starts.
    fn build<'a>(
        &'a self,
        name: &'a str,
        ctx: &'a BuildContext,
    ) -> BoxFuture<'a, Result<Arc<dyn Agent>, BuildError>>;
}

impl dyn AgentPlan {
    /// The plan as its own type, when it is a `T`.
    pub fn downcast_ref<T: AgentPlan>(&self) -> Option<&T> {
        (self as &dyn Any).downcast_ref()
    }
}

/// The environment variables a plan reads and hands on, so the daemon can refuse a configuration that
/// would pass a secret to a child or name a key that is not set.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct EnvUse<'a> {
    /// Variables that hold secrets (an API key, a token, a password): never passed on to any child.
    pub secrets: Vec<&'a str>,
    /// Variables passed on to the children it starts (`pass_env`, its MCP servers' too).
    pub passed: Vec<&'a str>,
    /// Variables that must be set when it starts (checked by `config` as by `serve`).
    pub required: Vec<(&'static str, &'a str)>,
}

/// An `[agents.<name>]` entry as its kind reads it.
pub struct KindEntry<'a> {
    /// The entry's name.
    pub name: &'a str,
    /// Its keys but the common ones (a JSON object).
    pub section: &'a serde_json::Value,
    /// Resolves another entry that this one names as its delegate.
    pub delegate: &'a DelegateLookup<'a>,
}

/// How an entry finds the plan of another entry it names as its delegate.
pub type DelegateLookup<'a> = dyn Fn(&str) -> Result<Arc<dyn AgentPlan>, Delegation> + 'a;

impl KindEntry<'_> {
    /// Its section read into `T`: a value of the wrong type is refused naming its key and place.
    pub fn section<T: DeserializeOwned>(&self) -> Result<T, KindError> {
        serde_path_to_error::deserialize(self.section).map_err(|e| {
            let first = e.path().iter().next().map(|s| s.to_string());
            let key = first
                .and_then(|f| keys_of::<T>().iter().find(|k| **k == f).copied())
                .unwrap_or("kind");
            let at = e.path().to_string();
            let reason = match at.as_str() {
                "." => e.inner().to_string(),
                _ => format!("{at}: {}", e.inner()),
            };
            KindError::Setting { key, reason }
        })
    }
}

/// Why another entry cannot be this one's delegate.
#[derive(Debug)]
pub enum Delegation {
    /// No other `[agents.<name>]` entry has that name.
    NotAnEntry,
    /// The entry is of a kind served here, not elsewhere.
    ServedHere {
        /// Its kind.
        kind: String,
    },
    /// The entry itself is wrong (its error, as the daemon reports it).
    Refused(Box<dyn std::error::Error + Send + Sync>),
}

/// Why an entry cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KindError {
    /// A key is missing or wrong.
    #[error("{key}: {reason}")]
    Setting {
        /// The key.
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A delegate's own entry is wrong.
    #[error(transparent)]
    Delegate(Box<dyn std::error::Error + Send + Sync>),
}

impl KindError {
    /// Key `key` is wrong for `reason`.
    pub fn setting(key: &'static str, reason: impl Into<String>) -> Self {
        KindError::Setting {
            key,
            reason: reason.into(),
        }
    }
}

/// What an agent is built with: the daemon's parts its kind may need.
#[derive(Clone)]
pub struct BuildContext {
    /// The data directory (a kind keeps its files under it: keys, session lists, work directories).
    pub data_dir: PathBuf,
    /// The roost supervisor's socket this daemon runs.
    pub roost_socket: PathBuf,
    /// The hosted roost jobs served here: a model agent serving one's turn speaks as the job.
    pub hosted: Arc<agentwire_roost::front::HostedSessions>,
    /// The daemon's metrics, which a model agent times its calls into.
    pub metrics: Arc<Metrics>,
}

impl BuildContext {
    /// Entry `name`'s own directory under `<data dir>/work`, the default for where it runs commands.
    pub fn work_dir(&self, name: &str) -> PathBuf {
        self.data_dir.join("work").join(name)
    }
}

/// Why an agent could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A variable its configuration names is not set.
    #[error("[agents.{agent}] {key}: the environment variable {var} is not set")]
    VarNotSet {
        /// The entry.
        agent: String,
        /// The key naming the variable.
        key: &'static str,
        /// The variable.
        var: String,
    },
    /// A file or directory it needs could not be made or read.
    #[error("[agents.{agent}] {what}: {source}")]
    Io {
        /// The entry.
        agent: String,
        /// What it was making or reading.
        what: String,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// Something else it needs could not be made.
    #[error("[agents.{agent}] {what}: {source}")]
    Part {
        /// The entry.
        agent: String,
        /// What it was making.
        what: &'static str,
        /// Why not.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// The value of variable `var` (named by key `key` of entry `agent`), which must be set and not empty.
pub fn required_var(agent: &str, key: &'static str, var: &str) -> Result<String, BuildError> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Ok(v),
        _ => Err(BuildError::VarNotSet {
            agent: agent.to_string(),
            key,
            var: var.to_string(),
        }),
    }
}

/// The keys a section of type `T` reads: the field names its `Deserialize` asks for.
pub fn keys_of<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut keys: &'static [&'static str] = &[];
    let _ = T::deserialize(fields::FieldsOf(&mut keys));
    keys
}

mod fields {
    //! A deserializer that answers nothing and notes the fields a struct asks for.

    use serde::de::Visitor;
    use serde::Deserializer;

    /// Notes the field names into its slot.
    pub(super) struct FieldsOf<'a>(pub(super) &'a mut &'static [&'static str]);

    /// Every answer: there is no value here.
    #[derive(Debug)]
    pub(super) struct NoValue;

    impl std::fmt::Display for NoValue {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("no value: only the field names are read")
        }
    }

    impl std::error::Error for NoValue {}

    impl serde::de::Error for NoValue {
        fn custom<T: std::fmt::Display>(_: T) -> Self {
            NoValue
        }
    }

    impl<'de> Deserializer<'de> for FieldsOf<'_> {
        type Error = NoValue;

        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, NoValue> {
            Err(NoValue)
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, NoValue> {
            *self.0 = fields;
            Err(NoValue)
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
            unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
}

/// The range of an agent's `request_timeout_secs`: at least a second, at most a day (a turn that runs
/// longer is a job for roost).
pub const AGENT_TIMEOUT_SECS: std::ops::RangeInclusive<u64> = 1..=86_400;

/// A `request_timeout_secs` (default [`crate::DEFAULT_CMD_TIMEOUT`]), checked against
/// [`AGENT_TIMEOUT_SECS`].
pub fn turn_timeout(secs: Option<u64>) -> Result<Duration, KindError> {
    match secs {
        None => Ok(crate::DEFAULT_CMD_TIMEOUT),
        Some(v) if AGENT_TIMEOUT_SECS.contains(&v) => Ok(Duration::from_secs(v)),
        Some(v) => Err(KindError::setting(
            "request_timeout_secs",
            format!(
                "{v} is out of range ({}-{})",
                AGENT_TIMEOUT_SECS.start(),
                AGENT_TIMEOUT_SECS.end()
            ),
        )),
    }
}

/// A `command`: a program and its arguments, the program not empty.
pub fn command(command: Option<Vec<String>>) -> Result<Vec<String>, KindError> {
    match command {
        Some(c) if c.first().is_some_and(|p| !p.is_empty()) => Ok(c),
        _ => Err(KindError::setting(
            "command",
            "missing: a program and its arguments, e.g. [\"tr\", \"a-z\", \"A-Z\"]",
        )),
    }
}

/// An entry's `env` and `pass_env`, checked.
pub fn child_env(
    set: Option<std::collections::BTreeMap<String, String>>,
    pass: Option<Vec<String>>,
) -> Result<ChildEnv, KindError> {
    let env = ChildEnv {
        set: set.unwrap_or_default(),
        pass: pass.unwrap_or_default(),
    };
    env.check()
        .map_err(|e| KindError::setting("env", e.to_string()))?;
    Ok(env)
}

/// Whether `var` can be an environment variable's name as a key naming one takes it.
pub fn is_var_name(var: &str) -> bool {
    !var.is_empty() && !var.contains('=') && !var.contains('\0')
}

/// What `agentwire config` prints for a value that is a secret or holds one.
pub const REDACTED: &str = "<set>";

/// A URL (or a comma-separated list) as shown: its user-info [`REDACTED`].
pub fn shown_url(url: &str) -> String {
    agentwire_core::redact_userinfo(url, REDACTED)
}

/// An `env` and `pass_env` as shown, into `view`: each variable named, its value [`REDACTED`] (it may be a
/// token); nothing when both are empty.
pub fn show_env(env: &ChildEnv, view: &mut serde_json::Map<String, serde_json::Value>) {
    if !env.pass.is_empty() {
        view.insert("pass_env".into(), serde_json::json!(env.pass));
    }
    if !env.set.is_empty() {
        let set: serde_json::Map<String, serde_json::Value> = env
            .set
            .keys()
            .map(|k| (k.clone(), REDACTED.into()))
            .collect();
        view.insert("env".into(), set.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Section {
        command: Option<Vec<String>>,
        #[serde(rename = "request_timeout_secs")]
        timeout: Option<u64>,
    }

    fn entry(section: &serde_json::Value) -> KindEntry<'_> {
        KindEntry {
            name: "x",
            section,
            delegate: &|_| Err(Delegation::NotAnEntry),
        }
    }

    #[test]
    fn a_sections_keys_are_the_names_it_reads() {
        assert_eq!(keys_of::<Section>(), ["command", "request_timeout_secs"]);
    }

    #[test]
    fn a_wrong_value_is_refused_naming_its_key_and_place() {
        let bad = serde_json::json!({"command": ["a", 7]});
        let e = entry(&bad).section::<Section>().err().unwrap();
        let KindError::Setting { key, reason } = &e else {
            panic!("{e}")
        };
        assert_eq!(*key, "command");
        assert!(reason.starts_with("command[1]: invalid type"), "{reason}");
        let unknown = serde_json::json!({"comand": ["a"]});
        let e = entry(&unknown).section::<Section>().err().unwrap();
        assert!(e.to_string().contains("unknown field `comand`"), "{e}");
    }

    #[test]
    fn timeouts_outside_a_second_to_a_day_are_refused() {
        assert_eq!(turn_timeout(None).unwrap(), crate::DEFAULT_CMD_TIMEOUT);
        assert_eq!(turn_timeout(Some(86_400)).unwrap().as_secs(), 86_400);
        for bad in [0, 86_401] {
            let e = turn_timeout(Some(bad)).unwrap_err().to_string();
            assert_eq!(
                e,
                format!("request_timeout_secs: {bad} is out of range (1-86400)")
            );
        }
    }

    #[test]
    fn an_empty_command_or_program_is_refused() {
        for bad in [None, Some(vec![]), Some(vec![String::new()])] {
            assert!(command(bad).is_err());
        }
        assert_eq!(command(Some(vec!["tr".into()])).unwrap(), ["tr"]);
    }

    #[test]
    fn env_values_are_never_shown() {
        let env = child_env(
            Some([("TOKEN".to_string(), "s3cret".to_string())].into()),
            Some(vec!["HOME".into()]),
        )
        .unwrap();
        let mut view = serde_json::Map::new();
        show_env(&env, &mut view);
        let shown = serde_json::Value::from(view).to_string();
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("TOKEN") && shown.contains("HOME"), "{shown}");
    }
}
