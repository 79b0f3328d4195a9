//! The one list of agent kinds the daemon runs, every one behind the same trait
//! ([`agentwire_agents::kind::AgentKind`]): an `[agents.<name>]` entry's `kind` is looked up here (an
//! unknown one is refused naming them all), and the kind reads the entry's own keys, shows them and
//! builds the agent. A new kind is one module implementing the trait (in its crate) and one line here.

use agentwire_agents::kind::AgentKind;

/// Every kind, in the order `agentwire config` and the errors list them.
pub(crate) const KINDS: &[&dyn AgentKind] = &[
    &agentwire_agents::kinds::demo::Demo,
    &agentwire_agents::kinds::roost::Roost,
    &agentwire_agents::kinds::cmd::Cmd,
    &agentwire_agents::kinds::openai::OpenAi,
    &agentwire_acp::kind::Acp,
    &agentwire_remote::kinds::nipxx::NipxxKind,
    &agentwire_remote::kinds::fisk::FiskKind,
    &agentwire_remote::kinds::a2a::A2aKind,
];

/// The kind named `name`.
pub(crate) fn kind(name: &str) -> Option<&'static dyn AgentKind> {
    KINDS.iter().copied().find(|k| k.name() == name)
}

/// Every kind's name and what it is, for an error naming them all.
pub(crate) fn listed() -> String {
    KINDS
        .iter()
        .map(|k| format!("{} ({})", k.name(), k.about()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_is_listed_once_and_reads_keys_of_its_own() {
        let mut names: Vec<&str> = KINDS.iter().map(|k| k.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), KINDS.len(), "a kind listed twice");
        // The common keys are the daemon's: no kind may read one as its own.
        let common = [
            "kind",
            "max_concurrent_turns",
            "expose",
            "nats_identity",
            "key_file",
            "pricing_hints",
        ];
        for k in KINDS {
            assert!(
                !k.keys().iter().any(|key| common.contains(key)),
                "kind {} reads a common key: {:?}",
                k.name(),
                k.keys()
            );
        }
    }
}
