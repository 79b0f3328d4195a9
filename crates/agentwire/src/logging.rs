//! The process's log on stderr: which lines (`--log`, `RUST_LOG`, `[log] filter`) and in which shape
//! (`--log-format`, `[log] format`: lines for a person, JSON objects for a log collector).
//!
//! A filter given to agentwire (`--log`, `[log] filter`) is checked before anything runs: a word that is
//! neither a level nor `target=level` is refused with the fix, rather than read as a module name that
//! matches nothing and silences the log. `RUST_LOG`, the environment's, is read as tracing reads it.

use clap::ValueEnum;
use serde::Deserialize;
use tracing_subscriber::EnvFilter;

/// The filter when none is given: the daemon's own news at `info`. The NATS client's own lines (each
/// connect, with the port) are left to `debug`: the daemon says what matters of its connections itself. So
/// are the MCP SDK's (about eight `info` lines for each MCP session the MCP front serves, with its id).
pub(crate) const DEFAULT_FILTER: &str = "info,async_nats=warn,rmcp=warn";

/// The levels a directive may name.
const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// How each log line is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LogFormat {
    /// One line per event for a person: time, level, message, fields.
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `fields.message`, the fields, `target`).
    Json,
}

/// `[log]` in the config file.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct LogSection {
    /// The filter, as `--log` takes it.
    pub(crate) filter: Option<String>,
    /// `text` or `json`.
    pub(crate) format: Option<LogFormat>,
}

/// The log in force: `--log` over `RUST_LOG` over `[log] filter` over [`DEFAULT_FILTER`]; `--log-format`
/// over `[log] format` over text.
pub(crate) fn init(
    flag_filter: Option<&str>,
    flag_format: Option<LogFormat>,
    section: &LogSection,
) -> Result<(), String> {
    let env_filter = std::env::var("RUST_LOG").ok().filter(|f| !f.is_empty());
    let (filter, from) = match (flag_filter, env_filter, &section.filter) {
        (Some(f), _, _) => (f.to_string(), "--log"),
        (None, Some(f), _) => (f, "RUST_LOG"),
        (None, None, Some(f)) => (f.clone(), "[log] filter"),
        (None, None, None) => (DEFAULT_FILTER.to_string(), "the default"),
    };
    let filter = match from {
        // RUST_LOG is the environment's, shared with other programs: read as tracing reads it, and one that
        // does not parse is said and replaced by the default rather than stopping the command.
        "RUST_LOG" => EnvFilter::try_new(&filter).unwrap_or_else(|e| {
            eprintln!("agentwire: RUST_LOG is not a log filter ({e}); using {DEFAULT_FILTER}");
            EnvFilter::new(DEFAULT_FILTER)
        }),
        _ => parse_filter(&filter).map_err(|e| format!("{from}: {e}"))?,
    };
    let format = flag_format.or(section.format).unwrap_or_default();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        // Colour only for a person at a terminal: a log file or a journal gets no escape sequences.
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
    Ok(())
}

/// Parses a filter, refusing a bare word that is not a level (`inf`, `verbose`): tracing would read it as
/// a module name at `trace` and show nothing the user meant.
pub(crate) fn parse_filter(filter: &str) -> Result<EnvFilter, String> {
    // Spaces after the commas are a person's, not part of a directive.
    let directives: Vec<&str> = filter
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .collect();
    for &directive in &directives {
        let bare = !directive.contains('=') && !directive.contains('[');
        if bare && !LEVELS.contains(&directive.to_ascii_lowercase().as_str()) {
            return Err(format!(
                "`{directive}` is not a level ({}); to filter a module write `{directive}=debug`",
                LEVELS.join(", ")
            ));
        }
    }
    EnvFilter::try_new(directives.join(","))
        .map_err(|e| format!("`{filter}` is not a log filter: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_and_targets_parse() {
        for ok in [
            "info",
            "DEBUG",
            "info,async_nats=warn",
            "agentwire_engine=debug",
            "warn, agentwire=trace",
        ] {
            assert!(parse_filter(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn a_misspelt_level_is_refused_with_the_fix() {
        let e = parse_filter("inf").unwrap_err();
        assert!(e.contains("`inf` is not a level"), "{e}");
        assert!(e.contains("inf=debug"), "{e}");
        assert!(parse_filter("info,verbose").is_err());
        assert!(parse_filter("agentwire=loud").is_err());
    }
}
