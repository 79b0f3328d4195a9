//! The built-in tools a model agent may call (`tools = [...]` in its config): their JSON schemas for the
//! model's tool list and the fronts' discovery, and running the pure ones. `calculator` and `clock` need no
//! approval; `shell` ([`super::shell`]) runs only with a person's approval, asked for each call.

use crate::calc::evaluate;
use agentwire_engine::ToolSpec;
use serde_json::{json, Value};

/// The built-in tools, by name.
pub const BUILTIN_TOOLS: [&str; 3] = ["calculator", "clock", SHELL_TOOL];

/// The approval-gated built-in that runs commands.
pub const SHELL_TOOL: &str = "shell";

/// The spec of built-in `name`, if there is one.
pub fn builtin(name: &str) -> Option<ToolSpec> {
    let (description, input_schema) = match name {
        "calculator" => (
            "Evaluates an arithmetic expression: + - * / ^, parentheses, decimals.",
            json!({
                "type": "object",
                "properties": { "expression": { "type": "string", "description": "e.g. (2+3)*4" } },
                "required": ["expression"],
                "additionalProperties": false
            }),
        ),
        "clock" => (
            "The current date and time in UTC.",
            json!({ "type": "object", "properties": {}, "additionalProperties": false }),
        ),
        SHELL_TOOL => (
            "Runs a shell command (sh -c) in the agent's working directory, once a person approves it; \
             returns its exit code, stdout and stderr.",
            json!({
                "type": "object",
                "properties": { "command": { "type": "string", "description": "e.g. ls -l" } },
                "required": ["command"],
                "additionalProperties": false
            }),
        ),
        _ => return None,
    };
    Some(ToolSpec {
        name: name.into(),
        description: description.into(),
        input_schema,
        requires_approval: name == SHELL_TOOL,
        output_schema: None,
    })
}

/// The model's `arguments` (JSON text) as a JSON object (empty text is `{}`).
pub fn parse_arguments(arguments: &str) -> Result<Value, String> {
    if arguments.trim().is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_str(arguments).map_err(|e| format!("arguments are not JSON: {e}"))
}

/// Runs pure built-in `name` with the model's `arguments` (JSON text) at `now_secs` (Unix time): its output,
/// or an error for the model to read.
pub fn run_builtin(name: &str, arguments: &str, now_secs: u64) -> Result<Value, String> {
    let args = parse_arguments(arguments)?;
    match name {
        "calculator" => {
            let expr = args["expression"]
                .as_str()
                .ok_or("calculator takes {\"expression\": \"...\"}")?;
            let value = evaluate(expr).map_err(|e| e.to_string())?;
            Ok(json!({ "value": value }))
        }
        "clock" => Ok(json!({ "utc": rfc3339(now_secs), "unix": now_secs })),
        SHELL_TOOL => Err("shell runs through the driver, after its approval".into()),
        other => Err(format!("no tool named {other:?}")),
    }
}

/// `secs` since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ` (a clock past chrono's last instant, years after
/// 262,000, as that last one).
fn rfc3339(secs: u64) -> String {
    let at = i64::try_from(secs)
        .ok()
        .and_then(|s| chrono::DateTime::<chrono::Utc>::from_timestamp(s, 0))
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC);
    at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_right_across_leap_years() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_083_199), "2026-11-30T23:59:59Z");
        assert_eq!(rfc3339(4_107_542_400), "2100-03-01T00:00:00Z");
    }

    #[test]
    fn builtins_run_and_refuse_bad_arguments() {
        assert_eq!(
            run_builtin("calculator", r#"{"expression":"(2+3)*4"}"#, 0).unwrap()["value"],
            20.0
        );
        assert!(run_builtin("calculator", "{}", 0).is_err());
        assert!(run_builtin("calculator", "{oops", 0)
            .unwrap_err()
            .contains("not JSON"));
        assert_eq!(
            run_builtin("clock", "", 86_400).unwrap()["utc"],
            "1970-01-02T00:00:00Z"
        );
        assert!(run_builtin("rm", "{}", 0).is_err());
        for name in BUILTIN_TOOLS {
            assert!(builtin(name).is_some());
        }
        assert!(builtin("shell").unwrap().requires_approval);
        assert!(!builtin("clock").unwrap().requires_approval);
        assert!(builtin("rm").is_none());
    }
}
