//! The task-card front's configuration section, `[tasks]`: its file shape, its resolution into
//! [`TaskSettings`] (which rooms, who may give tasks, the pace of progress and question cards), and what
//! `agentwire config` shows of it. The daemon reads the file and reports a [`SettingError`]; the rules are
//! the front's.

use nostr::prelude::PublicKey;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::ops::RangeInclusive;
use std::time::Duration;

/// The spec's progress interval: one 43003 per task at most every 15 s.
pub const DEFAULT_PROGRESS_INTERVAL_SECS: u64 = 15;
/// The progress interval's bounds: never more often than the spec's once every 15 s ("at most once every 15
/// seconds per task"; a room is read by people, and a client redraws the card for each), and less than one
/// an hour is none. Tests that want quick progress give the adapter its interval directly
/// ([`crate::TaskConfig::progress_interval`], a `Duration`), not through this setting.
pub const PROGRESS_INTERVAL_SECS: RangeInclusive<u64> = DEFAULT_PROGRESS_INTERVAL_SECS..=3600;
/// A question card's window's bounds: at least a minute for a person to answer, at most a day.
pub const QUESTION_WINDOW_SECS: RangeInclusive<u64> = 60..=86_400;
/// The most tasks that run at once (the engine's slots for the adapter).
pub const MAX_RUNNING_TASKS: usize = 64;

/// `[tasks]` in the configuration file: the adapter runs when `watch` names a room.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TasksSection {
    /// The rooms watched (`h` values); the adapter runs when any is given.
    pub watch: Vec<String>,
    /// Who may give tasks and send `!cancel` (hex or npub).
    pub allowed: Vec<String>,
    /// Where handoff threads open (default: the task's own room).
    pub home: Option<String>,
    /// The least seconds between two progress updates of a task.
    pub progress_interval_secs: Option<u64>,
    /// How long a question card stays open, in seconds.
    pub question_window_secs: Option<u64>,
    /// Tasks that run at once.
    pub max_running: Option<usize>,
    /// Fold a requester's second request in a thread into their first while it waits for a slot.
    pub merge_waiting: Option<bool>,
    /// How questions are asked: `native` (question cards, the default) or `legacy` (plain kind 12
    /// messages answered by a reply in the thread).
    pub cards: Option<String>,
}

/// The adapter's settings, resolved and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSettings {
    /// The rooms watched.
    pub watch: BTreeSet<String>,
    /// Who may give tasks.
    pub allowed: BTreeSet<PublicKey>,
    /// Where handoff threads open.
    pub home: Option<String>,
    /// The least time between two progress updates of a task.
    pub progress_interval: Duration,
    /// How long a question card stays open.
    pub question_window: Duration,
    /// Tasks that run at once.
    pub max_running: usize,
    /// Fold a requester's second request in a thread into their first while it waits for a slot.
    pub merge_waiting: bool,
    /// Questions as plain kind 12 messages answered by a reply (`cards = "legacy"`).
    pub legacy_cards: bool,
}

/// Why `[tasks]` cannot be used; the text names the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[tasks] {0}")]
pub struct SettingError(String);

/// The adapter's settings from `section`, or `None` when it watches no room (the adapter is off).
pub fn resolve(section: &TasksSection) -> Result<Option<TaskSettings>, SettingError> {
    let t = section;
    if t.watch.is_empty() {
        return Ok(None);
    }
    for id in t.watch.iter().chain(&t.home) {
        if !agentwire_tinyagent::valid_room_id(id) {
            return Err(SettingError(format!(
                "{id:?} is not a room id (1-{} of a-z 0-9 - _)",
                agentwire_tinyagent::MAX_ROOM_ID_LEN
            )));
        }
    }
    let allowed = t
        .allowed
        .iter()
        .map(|s| {
            PublicKey::parse(s).map_err(|_| {
                SettingError(format!(
                    "allowed: {s:?} is not a public key (64 hex or npub1...)"
                ))
            })
        })
        .collect::<Result<BTreeSet<_>, _>>()?;
    if allowed.is_empty() {
        return Err(SettingError(
            "allowed is empty: nobody could give the agent a task".into(),
        ));
    }
    let secs = |v: Option<u64>, default: u64, range: RangeInclusive<u64>, key: &str| {
        let v = v.unwrap_or(default);
        match range.contains(&v) {
            true => Ok(Duration::from_secs(v)),
            false => Err(SettingError(format!(
                "{key} must be {} to {}, not {v}",
                range.start(),
                range.end()
            ))),
        }
    };
    let max_running = t.max_running.unwrap_or(crate::DEFAULT_MAX_RUNNING_TASKS);
    if !(1..=MAX_RUNNING_TASKS).contains(&max_running) {
        return Err(SettingError(format!(
            "max_running must be 1 to {MAX_RUNNING_TASKS}, not {max_running}"
        )));
    }
    let legacy_cards = match t.cards.as_deref() {
        None | Some("native") => false,
        Some("legacy") => true,
        Some(other) => {
            return Err(SettingError(format!(
                "cards must be \"native\" or \"legacy\", not {other:?}"
            )))
        }
    };
    Ok(Some(TaskSettings {
        watch: t.watch.iter().cloned().collect(),
        allowed,
        home: t.home.clone(),
        progress_interval: secs(
            t.progress_interval_secs,
            DEFAULT_PROGRESS_INTERVAL_SECS,
            PROGRESS_INTERVAL_SECS,
            "progress_interval_secs",
        )?,
        question_window: secs(
            t.question_window_secs,
            crate::DEFAULT_QUESTION_WINDOW.as_secs(),
            QUESTION_WINDOW_SECS,
            "question_window_secs",
        )?,
        max_running,
        merge_waiting: t.merge_waiting.unwrap_or(true),
        legacy_cards,
    }))
}

/// `[tasks]` as `agentwire config` prints what is in force.
#[derive(Debug, Serialize)]
pub struct TasksView<'a> {
    watch: Vec<&'a str>,
    allowed: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    home: Option<&'a str>,
    progress_interval_secs: u64,
    question_window_secs: u64,
    max_running: usize,
    merge_waiting: bool,
    cards: &'static str,
}

/// What `agentwire config` shows of `t`.
pub fn view(t: &TaskSettings) -> TasksView<'_> {
    TasksView {
        watch: t.watch.iter().map(String::as_str).collect(),
        allowed: t.allowed.iter().map(|k| k.to_hex()).collect(),
        home: t.home.as_deref(),
        progress_interval_secs: t.progress_interval.as_secs(),
        question_window_secs: t.question_window.as_secs(),
        max_running: t.max_running,
        merge_waiting: t.merge_waiting,
        cards: if t.legacy_cards { "legacy" } else { "native" },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(f: impl FnOnce(&mut TasksSection)) -> Result<Option<TaskSettings>, SettingError> {
        let mut s = TasksSection {
            watch: vec!["lab".into()],
            allowed: vec![nostr::prelude::Keys::generate().public_key().to_hex()],
            ..Default::default()
        };
        f(&mut s);
        resolve(&s)
    }

    #[test]
    fn off_without_rooms_and_the_defaults_otherwise() {
        assert_eq!(resolve(&TasksSection::default()), Ok(None));
        let t = with(|_| {}).unwrap().unwrap();
        assert_eq!(
            t.progress_interval,
            Duration::from_secs(DEFAULT_PROGRESS_INTERVAL_SECS)
        );
        assert_eq!(t.question_window, crate::DEFAULT_QUESTION_WINDOW);
        assert_eq!(t.max_running, crate::DEFAULT_MAX_RUNNING_TASKS);
        assert!(t.merge_waiting, "on unless turned off");
        assert!(!t.legacy_cards, "question cards unless told");
    }

    #[test]
    fn progress_is_never_set_more_often_than_the_specs_15_seconds() {
        for ok in [15, 60, 3600] {
            let t = with(|s| s.progress_interval_secs = Some(ok))
                .unwrap()
                .unwrap();
            assert_eq!(t.progress_interval, Duration::from_secs(ok));
        }
        for refused in [0, 1, 14, 3601] {
            assert!(
                with(|s| s.progress_interval_secs = Some(refused)).is_err(),
                "{refused} s taken"
            );
        }
    }

    #[test]
    fn each_refusal_names_its_key() {
        let says = |r: Result<Option<TaskSettings>, SettingError>, what: &str| {
            let e = r.unwrap_err().to_string();
            assert!(e.starts_with("[tasks] ") && e.contains(what), "{e}");
        };
        says(with(|s| s.watch = vec!["Lab!".into()]), "not a room id");
        says(with(|s| s.home = Some("".into())), "not a room id");
        says(with(|s| s.allowed = vec!["alice".into()]), "allowed");
        says(with(|s| s.allowed.clear()), "allowed is empty");
        says(
            with(|s| s.progress_interval_secs = Some(0)),
            "progress_interval_secs must be 15 to 3600, not 0",
        );
        says(
            with(|s| s.progress_interval_secs = Some(14)),
            "progress_interval_secs must be 15 to 3600, not 14",
        );
        says(
            with(|s| s.question_window_secs = Some(59)),
            "question_window_secs",
        );
        says(with(|s| s.max_running = Some(0)), "max_running");
        says(with(|s| s.cards = Some("html".into())), "cards");
        says(
            with(|s| s.max_running = Some(MAX_RUNNING_TASKS + 1)),
            "max_running",
        );
    }
}
