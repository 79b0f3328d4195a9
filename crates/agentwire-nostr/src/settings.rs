//! The NIP-XX front's configuration section, `[nipxx]`, and its `serve` flags: the file shape, the
//! resolution into [`NipxxSettings`] (the sender policy, the per-sender rate, the backlog horizon, the
//! privacy profile and the key file), and what `agentwire config` shows. The daemon reads the file and
//! reports a [`SettingError`] naming the flag or key; the rules are the front's.

use crate::nipxx::policy::RateLimit;
use nostr::prelude::PublicKey;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Prompts stored while the agent was down are served on start if younger than this (one hour): old enough
/// to cover a restart or an upgrade, young enough that nobody is surprised by an answer to yesterday's prompt.
pub const DEFAULT_BACKLOG_HORIZON_SECS: u64 = 3600;
/// Default sustained prompts per second per sender.
pub const DEFAULT_RATE_PER_SECOND: f64 = 50.0;
/// Default burst of prompts per sender.
pub const DEFAULT_RATE_BURST: f64 = 100.0;
/// The least sustained prompt rate: zero means a sender's burst, once spent, never refills; below zero
/// means nothing.
pub const MIN_RATE_PER_SECOND: f64 = 0.0;
/// The least burst: a bucket that cannot hold one prompt would refuse every sender.
pub const MIN_RATE_BURST: f64 = 1.0;

/// Where a value came from, as the user wrote it: a flag (`--rate-burst`) or a file key
/// (`[nipxx] rate_burst`).
pub type Setting = &'static str;

/// `[nipxx]` in the configuration file.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NipxxSection {
    /// Only these senders (hex or npub) may prompt.
    pub allow: Option<Vec<String>>,
    /// These senders are refused.
    pub block: Vec<String>,
    /// Sustained prompts per second per sender.
    pub rate_per_second: Option<f64>,
    /// Burst per sender.
    pub rate_burst: Option<f64>,
    /// Backlog horizon in seconds.
    pub backlog_horizon_secs: Option<u64>,
    /// The privacy-first profile (NIP-59 gift wrap in and out).
    pub nip59: Option<bool>,
    /// Send each delta's, response's and tool call's text in the compatibility text envelope too, for
    /// runtimes that read telemetry from text.
    pub text_envelope: Option<bool>,
    /// The `--agent` agent's secret key (hex or nsec), read from this file instead of `agent.key` in the
    /// data dir: one key that several instances serve.
    pub key_file: Option<PathBuf>,
}

/// The `serve` flags of this front.
#[derive(Debug, Default, Clone, Copy)]
pub struct NipxxFlags<'a> {
    /// `--allow` (replaces `[nipxx] allow` when given).
    pub allow: &'a [String],
    /// `--block` (replaces `[nipxx] block` when given).
    pub block: &'a [String],
    /// `--rate-per-second`.
    pub rate_per_second: Option<f64>,
    /// `--rate-burst`.
    pub rate_burst: Option<f64>,
    /// `--backlog-horizon-secs`.
    pub backlog_horizon_secs: Option<u64>,
    /// `--nip59`.
    pub nip59: bool,
}

/// The runtime's sender policy and profile, resolved and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct NipxxSettings {
    /// Only these senders may prompt, when set.
    pub allow: Option<BTreeSet<PublicKey>>,
    /// These senders are refused.
    pub block: BTreeSet<PublicKey>,
    /// The per-sender prompt rate.
    pub rate: RateLimit,
    /// Stored prompts younger than this are served after a restart.
    pub backlog_horizon: Duration,
    /// The privacy-first profile (NIP-59 gift wrap in and out).
    pub nip59: bool,
    /// Texts in the compatibility envelope too (`[nipxx] text_envelope`).
    pub text_envelope: bool,
    /// The agent's key from this file (shared by several instances), not the data dir's.
    pub key_file: Option<PathBuf>,
}

/// Why `[nipxx]` or its flags cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SettingError {
    /// A sender key that is neither 64 hex nor an npub.
    #[error("{setting}: {value:?} is not a public key (64 hex or npub1...)")]
    PublicKey {
        /// Where it came from.
        setting: Setting,
        /// The value.
        value: String,
    },
    /// A number below its minimum, or not finite.
    #[error("{setting} must be a finite number of at least {min}, not {value}")]
    Number {
        /// Where it came from.
        setting: Setting,
        /// The value.
        value: f64,
        /// The least value allowed.
        min: f64,
    },
}

fn keys(list: &[String], setting: Setting) -> Result<BTreeSet<PublicKey>, SettingError> {
    list.iter()
        .map(|s| {
            PublicKey::parse(s).map_err(|_| SettingError::PublicKey {
                setting,
                value: s.clone(),
            })
        })
        .collect()
}

fn at_least(value: f64, min: f64, setting: Setting) -> Result<f64, SettingError> {
    match value.is_finite() && value >= min {
        true => Ok(value),
        false => Err(SettingError::Number {
            setting,
            value,
            min,
        }),
    }
}

/// The runtime's settings from `flags` over `section` over the defaults.
pub fn resolve(
    flags: NipxxFlags<'_>,
    section: &NipxxSection,
) -> Result<NipxxSettings, SettingError> {
    let allow = match (flags.allow, &section.allow) {
        ([], None) => None,
        ([], Some(list)) => Some(keys(list, "[nipxx] allow")?),
        (list, _) => Some(keys(list, "--allow")?),
    };
    let block = match flags.block {
        [] => keys(&section.block, "[nipxx] block")?,
        list => keys(list, "--block")?,
    };
    let (per_second, setting) = match (flags.rate_per_second, section.rate_per_second) {
        (Some(v), _) => (v, "--rate-per-second"),
        (None, Some(v)) => (v, "[nipxx] rate_per_second"),
        (None, None) => (DEFAULT_RATE_PER_SECOND, "[nipxx] rate_per_second"),
    };
    let per_second = at_least(per_second, MIN_RATE_PER_SECOND, setting)?;
    let (burst, setting) = match (flags.rate_burst, section.rate_burst) {
        (Some(v), _) => (v, "--rate-burst"),
        (None, Some(v)) => (v, "[nipxx] rate_burst"),
        (None, None) => (DEFAULT_RATE_BURST, "[nipxx] rate_burst"),
    };
    let burst = at_least(burst, MIN_RATE_BURST, setting)?;
    let horizon = flags
        .backlog_horizon_secs
        .or(section.backlog_horizon_secs)
        .unwrap_or(DEFAULT_BACKLOG_HORIZON_SECS);
    Ok(NipxxSettings {
        allow,
        block,
        rate: RateLimit { per_second, burst },
        backlog_horizon: Duration::from_secs(horizon),
        nip59: flags.nip59 || section.nip59.unwrap_or(false),
        text_envelope: section.text_envelope.unwrap_or(false),
        key_file: section.key_file.clone(),
    })
}

/// `[nipxx]` as `agentwire config` prints what is in force (keys in hex).
#[derive(Debug, Serialize)]
pub struct NipxxView<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    allow: Option<Vec<String>>,
    block: Vec<String>,
    rate_per_second: f64,
    rate_burst: f64,
    backlog_horizon_secs: u64,
    nip59: bool,
    text_envelope: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    key_file: Option<&'a Path>,
}

/// What `agentwire config` shows of `n`.
pub fn view(n: &NipxxSettings) -> NipxxView<'_> {
    let hex = |set: &BTreeSet<PublicKey>| set.iter().map(|k| k.to_hex()).collect();
    NipxxView {
        allow: n.allow.as_ref().map(hex),
        block: hex(&n.block),
        rate_per_second: n.rate.per_second,
        rate_burst: n.rate.burst,
        backlog_horizon_secs: n.backlog_horizon.as_secs(),
        nip59: n.nip59,
        text_envelope: n.text_envelope,
        key_file: n.key_file.as_deref(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_replace_the_section_which_replaces_the_defaults() {
        let d = resolve(NipxxFlags::default(), &NipxxSection::default()).unwrap();
        assert_eq!(d.allow, None, "anyone may prompt by default");
        assert_eq!(d.rate.per_second, DEFAULT_RATE_PER_SECOND);
        assert_eq!(d.rate.burst, DEFAULT_RATE_BURST);
        assert_eq!(
            d.backlog_horizon,
            Duration::from_secs(DEFAULT_BACKLOG_HORIZON_SECS)
        );
        let (a, b) = (
            nostr::prelude::Keys::generate().public_key(),
            nostr::prelude::Keys::generate().public_key(),
        );
        let section = NipxxSection {
            allow: Some(vec![a.to_hex()]),
            rate_burst: Some(5.0),
            ..Default::default()
        };
        let from_file = resolve(NipxxFlags::default(), &section).unwrap();
        assert_eq!(from_file.allow, Some(BTreeSet::from([a])));
        assert_eq!(from_file.rate.burst, 5.0);
        let flag = [b.to_hex()];
        let flags = NipxxFlags {
            allow: &flag,
            rate_burst: Some(7.0),
            nip59: true,
            ..Default::default()
        };
        let from_flags = resolve(flags, &section).unwrap();
        assert_eq!(from_flags.allow, Some(BTreeSet::from([b])));
        assert_eq!(from_flags.rate.burst, 7.0);
        assert!(from_flags.nip59);
    }

    #[test]
    fn each_refusal_names_its_flag_or_key() {
        let bad = ["alice".to_string()];
        let flags = NipxxFlags {
            block: &bad,
            ..Default::default()
        };
        assert_eq!(
            resolve(flags, &NipxxSection::default()),
            Err(SettingError::PublicKey {
                setting: "--block",
                value: "alice".into()
            })
        );
        let section = NipxxSection {
            rate_burst: Some(0.5),
            ..Default::default()
        };
        assert!(matches!(
            resolve(NipxxFlags::default(), &section),
            Err(SettingError::Number {
                setting: "[nipxx] rate_burst",
                ..
            })
        ));
        let flags = NipxxFlags {
            rate_per_second: Some(f64::NAN),
            ..Default::default()
        };
        assert!(matches!(
            resolve(flags, &NipxxSection::default()),
            Err(SettingError::Number {
                setting: "--rate-per-second",
                ..
            })
        ));
    }
}
