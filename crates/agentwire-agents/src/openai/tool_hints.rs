//! A requester's tool hints (fisk-ai's `tool_hints`) as the model reads them: a line after the system
//! prompt naming the suggested tools the agent has. A hint naming no tool of the agent's is left out (the
//! turn says so in a warning), so a hint can never offer the model a tool it does not have. Pure.

/// The most hints read from one turn: a hint names one tool, and an agent has few.
pub const MAX_TOOL_HINTS: usize = 32;

/// The system prompt with the hints the agent can honour (`tools`: its tools' names), and the hints it
/// cannot.
pub fn with_hints(
    system: Option<&str>,
    hints: &[String],
    tools: &[&str],
) -> (Option<String>, Vec<String>) {
    let mut known: Vec<&str> = Vec::new();
    let mut unknown: Vec<String> = Vec::new();
    for h in hints.iter().take(MAX_TOOL_HINTS) {
        match tools.iter().find(|t| **t == h.as_str()) {
            Some(t) if !known.contains(t) => known.push(t),
            Some(_) => {}
            None => unknown.push(agentwire_core::one_line(h, 64)),
        }
    }
    if known.is_empty() {
        return (system.map(str::to_string), unknown);
    }
    let line = format!(
        "The requester suggests these tools for this request: {}.",
        known.join(", ")
    );
    let system = match system {
        Some(s) if !s.trim().is_empty() => format!("{s}\n\n{line}"),
        _ => line,
    };
    (Some(system), unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_name_only_the_agents_tools() {
        let hints: Vec<String> = ["calculator", "teleport", "calculator"]
            .map(String::from)
            .to_vec();
        let (system, unknown) = with_hints(Some("Be brief."), &hints, &["calculator", "shell"]);
        assert_eq!(
            system.as_deref(),
            Some("Be brief.\n\nThe requester suggests these tools for this request: calculator.")
        );
        assert_eq!(unknown, vec!["teleport"]);
        let (system, unknown) = with_hints(None, &[], &["calculator"]);
        assert_eq!((system, unknown), (None, vec![]));
        let (system, _) = with_hints(None, &["shell".into()], &["shell"]);
        assert_eq!(
            system.as_deref(),
            Some("The requester suggests these tools for this request: shell.")
        );
        let many: Vec<String> = (0..100).map(|i| format!("t{i}")).collect();
        assert_eq!(with_hints(None, &many, &[]).1.len(), MAX_TOOL_HINTS);
    }
}
