//! Watches (M43): a session asks to be told once, as a `notice` item, when another session is next idle
//! (its next stop: done, a question, failed, stopped, removed) or has ended (failed, stopped, removed).
//! Pure: what a watch is, when a row's state fires it, and the notice's text.

use serde::{Deserialize, Serialize};

/// Watches one session may hold (the spec's 20).
pub const MAX_WATCHES_PER_SESSION: usize = 20;
/// How long a watch lasts unless it fires (the spec's 12 hours).
pub const WATCH_TTL_MS: u64 = 12 * 3600 * 1000;

/// What a watch waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum When {
    /// Its next stop.
    Idle,
    /// Its end.
    Ended,
}

impl When {
    /// `idle` or `ended`, else none.
    pub fn parse(s: &str) -> Option<When> {
        match s {
            "idle" => Some(When::Idle),
            "ended" => Some(When::Ended),
            _ => None,
        }
    }

    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            When::Idle => "idle",
            When::Ended => "ended",
        }
    }

    /// Whether a row in `state` (a row's state: `working`, `blocked`, `done`, `failed`, `stopped`,
    /// `exited`, `starting`, or `removed` for a job that is gone) is what this waits for.
    pub fn fired_by(self, state: &str) -> bool {
        let ended = matches!(state, "failed" | "stopped" | "exited" | "removed");
        match self {
            When::Ended => ended,
            When::Idle => ended || matches!(state, "done" | "blocked"),
        }
    }
}

/// One watch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Watch {
    /// The session told.
    pub watcher: String,
    /// The session watched.
    pub target: String,
    /// Its name when the watch was set (a removed job's is gone with it).
    pub name: String,
    /// What it waits for.
    pub when: When,
    /// Unix milliseconds after which it is dropped unfired.
    pub until_ms: u64,
}

/// The notice's text when `name` fired a watch for `when` in `state` (with its summary, if any).
pub fn notice_text(name: &str, when: When, state: &str, summary: Option<&str>) -> String {
    let what = match when {
        When::Idle => "is idle",
        When::Ended => "has ended",
    };
    match summary.filter(|s| !s.is_empty()) {
        Some(s) => format!("{name} {what} ({state}): {s}"),
        None => format!("{name} {what} ({state})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_is_the_next_stop_and_ended_the_end() {
        for state in ["done", "blocked", "failed", "stopped", "exited", "removed"] {
            assert!(When::Idle.fired_by(state), "{state}");
        }
        for state in ["working", "starting"] {
            assert!(!When::Idle.fired_by(state), "{state}");
        }
        for state in ["failed", "stopped", "exited", "removed"] {
            assert!(When::Ended.fired_by(state), "{state}");
        }
        for state in ["done", "blocked", "working", "starting"] {
            assert!(!When::Ended.fired_by(state), "{state}");
        }
        assert_eq!(When::parse("idle"), Some(When::Idle));
        assert_eq!(When::parse("soon"), None);
    }

    #[test]
    fn a_notice_says_who_and_how_it_stands() {
        assert_eq!(
            notice_text("helper", When::Idle, "done", Some("docs written")),
            "helper is idle (done): docs written"
        );
        assert_eq!(
            notice_text("helper", When::Ended, "removed", None),
            "helper has ended (removed)"
        );
    }
}
