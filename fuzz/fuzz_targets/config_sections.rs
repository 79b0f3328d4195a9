//! The configuration file's sections that library crates read: every `[agents.<name>]` entry, read by
//! its kind (all eight kinds), and the plug-in fronts' sections (`[openai]`, `[mcp]`, `[a2a]`). Any text
//! is taken without panicking; a plan's view (what `agentwire config` prints) is a fixed point: read
//! again by its kind, it shows the same; and an `env` value is never shown.
#![no_main]

use agentwire_agents::kind::{AgentKind, AgentPlan, Delegation, KindEntry, REDACTED};
use agentwire_http::front::FrontKind;
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};
use std::sync::Arc;

/// The kinds fuzzed: every kind of the binary's `KINDS`.
const KINDS: &[&dyn AgentKind] = &[
    &agentwire_agents::kinds::demo::Demo,
    &agentwire_agents::kinds::roost::Roost,
    &agentwire_agents::kinds::cmd::Cmd,
    &agentwire_agents::kinds::openai::OpenAi,
    &agentwire_acp::kind::Acp,
    &agentwire_remote::kinds::nipxx::NipxxKind,
    &agentwire_remote::kinds::fisk::FiskKind,
    &agentwire_remote::kinds::a2a::A2aKind,
];

/// The plug-in fronts fuzzed.
const FRONTS: &[&dyn FrontKind] = &[
    &agentwire_openai_front::OpenAiFront,
    &agentwire_mcp_front::McpFront,
    &agentwire_a2a_front::A2aFront,
];

/// The keys every entry has, which are the daemon's, not its kind's.
const COMMON: [&str; 6] = [
    "kind",
    "max_concurrent_turns",
    "expose",
    "nats_identity",
    "key_file",
    "pricing_hints",
];

fuzz_target!(|text: &str| {
    let Ok(table) = text.parse::<toml::Table>() else {
        return;
    };
    let Ok(Value::Object(file)) = serde_json::to_value(&table) else {
        return;
    };
    for front in FRONTS {
        if let Ok(plan) = front.configure(file.get(front.name())) {
            let _ = plan.view();
        }
    }
    let Some(Value::Object(agents)) = file.get("agents") else {
        return;
    };
    for (name, entry) in agents {
        let Some(entry) = entry.as_object() else {
            continue;
        };
        let Some((kind, plan)) = resolved(name, entry, agents) else {
            continue;
        };
        let view = plan.view();
        let shown = Value::Object(view.clone()).to_string();
        for secret in env_values(entry) {
            assert!(!shown.contains(&secret), "an env value shown: {shown}");
        }
        if shown.contains(REDACTED) || !plan.delegates().is_empty() {
            continue;
        }
        let again = Value::Object(view.clone());
        let read = KindEntry {
            name,
            section: &again,
            delegate: &|_| Err(Delegation::NotAnEntry),
        };
        let plan = kind
            .resolve(&read)
            .unwrap_or_else(|e| panic!("its own view {shown} refused: {e}"));
        assert_eq!(plan.view(), view, "the view read back shows otherwise");
    }
});

/// Entry `name`'s kind and plan, when its kind takes it.
fn resolved(
    name: &str,
    entry: &Map<String, Value>,
    agents: &Map<String, Value>,
) -> Option<(&'static dyn AgentKind, Arc<dyn AgentPlan>)> {
    let kind = KINDS
        .iter()
        .copied()
        .find(|k| entry.get("kind").and_then(Value::as_str) == Some(k.name()))?;
    let own: Map<String, Value> = entry
        .iter()
        .filter(|(k, _)| !COMMON.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let section = Value::Object(own);
    // A delegate is another entry of a kind served elsewhere (none of which delegates in turn).
    let delegate = |d: &str| {
        let other = agents
            .get(d)
            .and_then(Value::as_object)
            .ok_or(Delegation::NotAnEntry)?;
        let elsewhere = KINDS.iter().any(|k| {
            k.served_elsewhere() && other.get("kind").and_then(Value::as_str) == Some(k.name())
        });
        if !elsewhere {
            return Err(Delegation::ServedHere {
                kind: String::new(),
            });
        }
        resolved(d, other, agents)
            .map(|(_, plan)| plan)
            .ok_or_else(|| Delegation::Refused("refused".into()))
    };
    let read = KindEntry {
        name,
        section: &section,
        delegate: &delegate,
    };
    Some((kind, kind.resolve(&read).ok()?))
}

/// The values of the entry's `env` and its MCP servers' `env` long enough not to turn up by chance.
fn env_values(entry: &Map<String, Value>) -> Vec<String> {
    let mcp = entry.get("mcp").and_then(Value::as_array);
    let envs = std::iter::once(entry.get("env"))
        .chain(mcp.into_iter().flatten().map(|m| m.get("env")))
        .flatten();
    envs.filter_map(Value::as_object)
        .flat_map(|e| e.values())
        .filter_map(Value::as_str)
        .filter(|v| v.len() >= 12)
        .map(str::to_string)
        .collect()
}
