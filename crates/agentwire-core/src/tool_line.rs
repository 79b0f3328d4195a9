//! A tool call as a person reads it in a progress line: the tool's name and a short summary of its
//! arguments (`shell ls -la`, `search limit=5, query=rust`), never a JSON dump; and the one way every
//! command shows a tool's activity, whatever front the turn came through (`[tool calculator start 6*7]`,
//! `[tool calculator result 42]`, `[tool calculator error division by zero]`).

use serde_json::Value;

/// The longest argument summary, in characters: a progress line is one line on a card or a terminal.
pub const MAX_ARGUMENTS_SUMMARY_CHARS: usize = 80;

/// `name` and a summary of `arguments`: an object's one value alone (`calculator 6*7`), else its
/// `key=value` pairs by key; strings unquoted, nested values as `{…}` and `[…]`, cut to
/// [`MAX_ARGUMENTS_SUMMARY_CHARS`] with `…`.
pub fn tool_line(name: &str, arguments: &Value) -> String {
    let summary = arguments_summary(arguments);
    match summary.is_empty() {
        true => name.to_string(),
        false => format!("{name} {summary}"),
    }
}

/// A summary of a tool's arguments, as [`tool_line`] shows them.
pub fn arguments_summary(arguments: &Value) -> String {
    let summary = match arguments {
        Value::Object(map) if map.len() == 1 => map.values().map(scalar).collect(),
        // By key, whatever order the map keeps (serde_json's `preserve_order` is on in some builds): the
        // same arguments read the same everywhere.
        Value::Object(map) => {
            let mut pairs: Vec<(&String, &Value)> = map.iter().collect();
            pairs.sort_by(|a, b| a.0.cmp(b.0));
            pairs
                .into_iter()
                .map(|(k, v)| format!("{k}={}", scalar(v)))
                .collect::<Vec<_>>()
                .join(", ")
        }
        Value::Null => String::new(),
        other => scalar(other),
    };
    one_line(&summary, MAX_ARGUMENTS_SUMMARY_CHARS)
}

/// `text` on one line (control characters, newlines among them, and bidi controls as spaces), cut to `max` characters
/// with `…` when it is longer.
pub fn one_line(text: &str, max: usize) -> String {
    let line: String = text
        .chars()
        .map(|c| match crate::display::is_unprintable(c) {
            true => ' ',
            false => c,
        })
        .collect();
    match line.chars().count() > max {
        true => line
            .chars()
            .take(max.saturating_sub(1))
            .chain(['…'])
            .collect(),
        false => line,
    }
}

/// What a tool returned, on one line: a command's output (`{"stdout", "stderr", "exit_code"}`) as its
/// stdout, or its stderr when it failed and said nothing on stdout; a string as it is; anything else
/// summarised as arguments are.
pub fn output_summary(output: &Value, success: bool) -> String {
    let field = |k: &str| output.get(k).and_then(Value::as_str).map(str::trim);
    let text = match (field("stdout"), field("stderr"), output) {
        (Some(out), Some(err), _) if !success && out.is_empty() => err.to_string(),
        (Some(out), _, _) => out.to_string(),
        (None, _, Value::String(s)) => s.trim().to_string(),
        _ => return arguments_summary(output),
    };
    one_line(&text, MAX_ARGUMENTS_SUMMARY_CHARS)
}

/// A tool call starting, as every command shows it: `[tool NAME start ARGUMENTS]`.
pub fn tool_start_line(name: &str, arguments: &Value) -> String {
    bracketed(name, "start", &arguments_summary(arguments))
}

/// A tool's return, as every command shows it: `[tool NAME result OUTPUT]`, or `[tool NAME error OUTPUT]`
/// when it failed.
pub fn tool_result_line(name: &str, success: bool, output: &Value) -> String {
    let word = if success { "result" } else { "error" };
    bracketed(name, word, &output_summary(output, success))
}

fn bracketed(name: &str, word: &str, summary: &str) -> String {
    let name = one_line(name, MAX_ARGUMENTS_SUMMARY_CHARS);
    match summary.is_empty() {
        true => format!("[tool {name} {word}]"),
        false => format!("[tool {name} {word} {summary}]"),
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Object(m) if m.is_empty() => "{}".into(),
        Value::Object(_) => "{…}".into(),
        Value::Array(a) if a.is_empty() => "[]".into(),
        Value::Array(_) => "[…]".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn one_line_takes_out_controls_and_bidi_overrides() {
        assert_eq!(one_line("a\x1b]0;x\x07b\u{202e}c\nd", 40), "a ]0;x b c d");
        assert_eq!(one_line("abcdef", 4), "abc…");
    }

    #[test]
    fn a_tool_call_reads_as_its_name_and_its_arguments_in_short() {
        assert_eq!(
            tool_line("calculator", &json!({"expression": "6*7"})),
            "calculator 6*7"
        );
        assert_eq!(
            tool_line(
                "search",
                &json!({"query": "rust", "limit": 5, "filters": {"a": 1}})
            ),
            "search filters={…}, limit=5, query=rust"
        );
        assert_eq!(tool_line("clock", &json!({})), "clock");
        assert_eq!(tool_line("clock", &Value::Null), "clock");
        let long = tool_line("shell", &json!({"command": "x".repeat(500)}));
        assert_eq!(
            long.chars().count(),
            "shell ".len() + MAX_ARGUMENTS_SUMMARY_CHARS
        );
        assert!(long.ends_with('…'));
        assert_eq!(
            tool_line("shell", &json!({"command": "ls\n-la"})),
            "shell ls -la"
        );
    }

    #[test]
    fn a_tools_activity_reads_the_same_whatever_its_output_looks_like() {
        assert_eq!(
            tool_start_line("calculator", &json!({"expression": "6*7"})),
            "[tool calculator start 6*7]"
        );
        assert_eq!(tool_start_line("clock", &json!({})), "[tool clock start]");
        let command = json!({"stdout": "42\n", "stderr": "", "exit_code": 0});
        assert_eq!(
            tool_result_line("calculator", true, &command),
            "[tool calculator result 42]"
        );
        // The same result as fisk-ai carries it (a string) reads the same.
        assert_eq!(
            tool_result_line("calculator", true, &json!("42")),
            "[tool calculator result 42]"
        );
        let failed = json!({"stdout": "", "stderr": "division by zero", "exit_code": 1});
        assert_eq!(
            tool_result_line("calculator", false, &failed),
            "[tool calculator error division by zero]"
        );
        assert_eq!(
            tool_result_line("search", true, &json!({"hits": 3})),
            "[tool search result 3]"
        );
        assert_eq!(
            tool_result_line("clock", true, &Value::Null),
            "[tool clock result]"
        );
    }
}
