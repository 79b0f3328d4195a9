//! How `jobs` shows rows, events and profiles to a person: tables with headers, a blocked row's question and
//! choices under it, and a reply checked against the question it answers. Pure: JSON in, text out.

use serde_json::Value;

use crate::tabular::{cell, columns};

/// The widest a summary or a question is shown in a table (the whole is in `--json`).
const MAX_CELL_CHARS: usize = 60;

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or("")
}

/// A row's question and its choices, when it waits for one.
pub(crate) fn question(row: &Value) -> Option<(String, Vec<String>)> {
    let q = row["question"].as_str()?;
    let choices = row["choices"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|c| c.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    Some((q.to_string(), choices))
}

/// `jobs ls`: a table of the rows; under a blocked row, its question and numbered choices; under a row
/// whose agent reported them, its pull requests (`prLinks`) and where it is reached (`remoteAt`).
pub(crate) fn rows(rows: &[Value]) -> String {
    if rows.is_empty() {
        return "no jobs (start one with `agentwire jobs dispatch PROFILE TASK`)\n".into();
    }
    let mut out = String::new();
    let header = ["NAME", "ID", "PROFILE", "STATE", "SUMMARY"];
    let mut table = Vec::new();
    let mut under: Vec<Option<String>> = Vec::new();
    // As a person arranged them: pinned first, then in the order given, then the rest.
    let mut rows: Vec<&Value> = rows.iter().collect();
    rows.sort_by_key(|r| (r["pinned"] != true, r["order"].as_u64().unwrap_or(u64::MAX)));
    for r in rows {
        let mut state = s(r, "state").to_string();
        if r["pending"].as_u64().unwrap_or(0) > 0 {
            state = format!("{state} ({} waiting)", r["pending"]);
        }
        let pin = if r["pinned"] == true { "* " } else { "" };
        table.push(vec![
            format!("{pin}{}", s(r, "name")),
            s(r, "id").to_string(),
            s(r, "profile").to_string(),
            state,
            cell(
                r["error"]
                    .as_str()
                    .or(r["summary"].as_str())
                    .or(r["status"].as_str())
                    .unwrap_or(""),
                MAX_CELL_CHARS,
            ),
        ]);
        let mut extra = match (s(r, "state"), question(r)) {
            ("blocked", Some((q, choices))) => asked(&q, &choices),
            _ => String::new(),
        };
        extra.push_str(&links(r));
        under.push(Some(extra).filter(|e| !e.is_empty()));
    }
    let laid = columns(&header, &table);
    let mut lines = laid.lines();
    if let Some(h) = lines.next() {
        out.push_str(h);
        out.push('\n');
    }
    for (line, extra) in lines.zip(under) {
        out.push_str(line);
        out.push('\n');
        if let Some(e) = extra {
            out.push_str(&e);
        }
    }
    out
}

/// A row's pull requests and where its session is reached, indented under it (whole: a link cut short
/// is no link).
fn links(row: &Value) -> String {
    let mut out = String::new();
    for pr in row["prLinks"].as_array().into_iter().flatten() {
        if let Some(pr) = pr.as_str() {
            out.push_str(&format!("    pr: {}\n", cell(pr, usize::MAX)));
        }
    }
    if let Some(at) = row["remoteAt"].as_str() {
        out.push_str(&format!("    remote at: {}\n", cell(at, usize::MAX)));
    }
    out
}

/// A question and its choices, indented under its row.
fn asked(q: &str, choices: &[String]) -> String {
    let mut out = format!("    asks: {}\n", cell(q, MAX_CELL_CHARS * 2));
    for (i, c) in choices.iter().enumerate() {
        out.push_str(&format!("      {}. {}\n", i + 1, cell(c, MAX_CELL_CHARS)));
    }
    out
}

/// What a reply to a row says: the text to send, or why it does not answer the row's question (the row is
/// blocked on a question with choices, and the text is neither one of them, nor its number, nor a
/// comma-separated list of those). A choice's number becomes its label, as the agent asked it.
pub(crate) fn reply_text(row: &Value, text: &str) -> Result<String, String> {
    let Some((q, choices)) = question(row).filter(|_| s(row, "state") == "blocked") else {
        return Ok(text.to_string());
    };
    if choices.is_empty() || text.starts_with('/') {
        return Ok(text.to_string());
    }
    let one = |part: &str| -> Option<String> {
        agentwire_core::typed_option(part, &choices).map(|i| choices[i].clone())
    };
    if let Some(c) = one(text) {
        return Ok(c);
    }
    let parts: Option<Vec<String>> = text.split(',').map(one).collect();
    match parts {
        Some(list) if list.len() > 1 => Ok(list.join(", ")),
        _ => Err(format!(
            "{text:?} does not answer what {} asks: {q}\nit fits one of: {} (or its number; several with commas); --mode followUp sends it as it is",
            s(row, "name"),
            choices.join(" | ")
        )),
    }
}

/// `jobs events`: when, which job, what, and the detail.
pub(crate) fn events(events: &[Value], names: &dyn Fn(&str) -> String) -> String {
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|e| {
            vec![
                e["seq"].as_u64().map(|n| n.to_string()).unwrap_or_default(),
                time_of(&e["at"]),
                names(s(e, "id")),
                s(e, "what").to_string(),
                cell(s(e, "text"), MAX_CELL_CHARS),
            ]
        })
        .collect();
    columns(&["SEQ", "AT", "JOB", "WHAT", "DETAIL"], &rows)
}

/// A time the daemon gave (Unix seconds) as UTC `HH:MM:SS`, or as it came.
fn time_of(at: &Value) -> String {
    match at.as_u64() {
        Some(unix) => {
            let secs = unix % 86_400;
            format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
        }
        None => at.as_str().unwrap_or("").to_string(),
    }
}

/// `jobs profiles`: what a job can be dispatched from.
pub(crate) fn profiles(profiles: &[Value]) -> String {
    if profiles.is_empty() {
        return "no profiles ([roost.profiles.<name>] or --roost-config name them)\n".into();
    }
    let rows: Vec<Vec<String>> = profiles
        .iter()
        .map(|p| match s(p, "kind") {
            "agent" => vec![
                s(p, "name").to_string(),
                "engine agent".into(),
                format!("the agent {}", s(p, "name")),
            ],
            _ => vec![
                s(p, "name").to_string(),
                if p["protocol"] == true {
                    "roost agent"
                } else {
                    "terminal"
                }
                .into(),
                format!("{} (task by {})", s(p, "program"), s(p, "task")),
            ],
        })
        .collect();
    columns(&["PROFILE", "KIND", "RUNS"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn blocked() -> Value {
        json!({"id": "j1", "name": "fix", "profile": "coder", "state": "blocked",
               "question": "Which branch?", "choices": ["main", "dev"], "pending": 0})
    }

    #[test]
    fn a_table_has_a_header_and_a_blocked_row_its_question_and_choices() {
        let rows = [
            json!({"id": "j0", "name": "chores", "profile": "sleeper", "state": "working",
                   "summary": "tidying", "pending": 2}),
            blocked(),
        ];
        let t = super::rows(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[0].starts_with("NAME") && lines[0].contains("SUMMARY"),
            "{t}"
        );
        assert!(
            lines[1].contains("working (2 waiting)") && lines[1].contains("tidying"),
            "{t}"
        );
        assert!(lines[2].starts_with("fix"), "{t}");
        assert_eq!(lines[3], "    asks: Which branch?");
        assert_eq!(lines[4], "      1. main");
        assert_eq!(lines[5], "      2. dev");
        // Columns line up.
        assert_eq!(lines[1].find("j0"), lines[2].find("j1"));
    }

    #[test]
    fn a_rows_pull_requests_and_remote_place_are_shown_under_it() {
        let rows = [
            json!({"id": "j0", "name": "coder", "profile": "pi", "state": "working",
                   "summary": "opened a PR", "pending": 0,
                   "prLinks": ["https://github.com/o/r/pull/7", "https://github.com/o/r/pull/8"],
                   "remoteAt": "https://pi.example/s/abc"}),
            json!({"id": "j1", "name": "quiet", "profile": "pi", "state": "working",
                   "pending": 0, "prLinks": [], "remoteAt": null}),
        ];
        let t = super::rows(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[1].starts_with("coder"), "{t}");
        assert_eq!(lines[2], "    pr: https://github.com/o/r/pull/7");
        assert_eq!(lines[3], "    pr: https://github.com/o/r/pull/8");
        assert_eq!(lines[4], "    remote at: https://pi.example/s/abc");
        assert!(lines[5].starts_with("quiet"), "{t}");
        assert_eq!(lines.len(), 6, "{t}");
    }

    #[test]
    fn a_reply_must_answer_the_question_it_replies_to() {
        let row = blocked();
        assert_eq!(reply_text(&row, "DEV").unwrap(), "dev");
        assert_eq!(reply_text(&row, "2").unwrap(), "dev");
        let e = reply_text(&row, "maybe").unwrap_err();
        assert!(
            e.contains("Which branch?") && e.contains("main | dev"),
            "{e}"
        );
        assert!(reply_text(&row, "3").is_err());
        assert_eq!(reply_text(&row, "1, dev").unwrap(), "main, dev");
        assert!(reply_text(&row, "main, maybe").is_err());
        assert_eq!(reply_text(&row, "/stop").unwrap(), "/stop");
        let working = json!({"state": "working", "question": null});
        assert_eq!(reply_text(&working, "anything").unwrap(), "anything");
    }
}
