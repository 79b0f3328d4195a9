//! The one list of fronts the daemon knows. Names in `expose` are checked against it (an unknown one is
//! refused naming them all), `agentwire config` prints what each resolved to, and the agents' front lists
//! come from it.
//!
//! A plug-in front ([`agentwire_http::front::FrontKind`]) is one crate and one line in [`FRONTS`]: its
//! section of the configuration file (`[<name>]`) is handed to it whole, it resolves and prints it, and it
//! starts for the agents exposed on it (an HTTP front mounts its routes on the one HTTP server). The four
//! protocols the daemon was built around are listed here by name; their sections, flags and start are
//! still wired in `config/` and `agents.rs`.

use agentwire_http::front::FrontKind;

/// A front of the list.
pub(crate) enum Entry {
    /// Wired by hand: its name, and whether a further agent may list it in `expose` (the task cards serve
    /// the `--agent` agent only).
    BuiltIn {
        name: &'static str,
        about: &'static str,
        further: bool,
    },
    /// A plug-in.
    PlugIn(&'static dyn FrontKind),
}

impl Entry {
    /// Its name.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Entry::BuiltIn { name, .. } => name,
            Entry::PlugIn(k) => k.name(),
        }
    }

    /// What it serves.
    pub(crate) fn about(&self) -> &'static str {
        match self {
            Entry::BuiltIn { about, .. } => about,
            Entry::PlugIn(k) => k.about(),
        }
    }
}

/// Every front.
pub(crate) const FRONTS: &[Entry] = &[
    Entry::BuiltIn {
        name: "nipxx",
        about: "NIP-XX AI agent messages on Nostr relays",
        further: true,
    },
    Entry::BuiltIn {
        name: "fisk",
        about: "fisk-ai prompts on NATS",
        further: true,
    },
    Entry::BuiltIn {
        name: "roost",
        about: "roost jobs of a profile of the agent's name",
        further: true,
    },
    Entry::BuiltIn {
        name: "tasks",
        about: "task cards in Nostr rooms (the --agent agent only)",
        further: false,
    },
    Entry::PlugIn(&agentwire_openai_front::OpenAiFront),
    Entry::PlugIn(&agentwire_mcp_front::McpFront),
    Entry::PlugIn(&agentwire_a2a_front::A2aFront),
];

/// The plug-in fronts.
pub(crate) fn plug_ins() -> impl Iterator<Item = &'static dyn FrontKind> {
    FRONTS.iter().filter_map(|e| match e {
        Entry::PlugIn(k) => Some(*k),
        Entry::BuiltIn { .. } => None,
    })
}

/// The front named `name`.
pub(crate) fn find(name: &str) -> Option<&'static Entry> {
    FRONTS.iter().find(|e| e.name() == name)
}

/// Whether a further agent may be exposed on front `name` (it is one, and not the `--agent` agent's only).
pub(crate) fn exposable(name: &str) -> Result<(), String> {
    match find(name) {
        Some(Entry::BuiltIn { further: false, .. }) => {
            Err(format!("{name:?} serves the --agent agent only"))
        }
        Some(_) => Ok(()),
        None => Err(format!(
            "{name:?} is not a front; fronts: {}",
            FRONTS
                .iter()
                .filter(|e| !matches!(e, Entry::BuiltIn { further: false, .. }))
                .map(|e| format!("{} ({})", e.name(), e.about()))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_an_unknown_one_is_refused_naming_them_all() {
        let mut names: Vec<_> = FRONTS.iter().map(Entry::name).collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n, "one entry a name");
        assert!(exposable("nipxx").is_ok() && exposable("openai").is_ok());
        let e = exposable("smtp").unwrap_err();
        for name in ["nipxx", "fisk", "roost", "openai"] {
            assert!(e.contains(name), "{e}");
        }
        assert!(exposable("tasks")
            .unwrap_err()
            .contains("--agent agent only"));
    }
}
