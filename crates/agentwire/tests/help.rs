//! Help that teaches, over the real binary: every command's `--help` has an example and shows the global
//! options once, under their own heading; `ask` says which options belong to which protocol; completions
//! for bash, zsh and fish and the man pages come from the same definitions.

use std::process::{Command, Output};

fn agentwire(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args(args)
        .env_remove("AGENTWIRE_CONFIG")
        .env_remove("AGENTWIRE_DATA_DIR")
        .output()
        .expect("agentwire runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The commands as `agentwire --help` lists them (`help` aside).
fn commands() -> Vec<String> {
    let out = agentwire(&["--help"]);
    let help = text(&out.stdout);
    help.split("Commands:")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .unwrap_or("")
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

#[test]
fn every_command_has_an_example_and_the_global_options_once() {
    let commands = commands();
    assert!(commands.len() >= 12, "{commands:?}");
    let jobs = ["dispatch", "ls", "reply", "stop", "rm", "respawn", "events"];
    let mut pages: Vec<(String, String)> = commands
        .iter()
        .map(|c| (c.clone(), text(&agentwire(&[c, "--help"]).stdout)))
        .collect();
    pages.extend(jobs.iter().map(|j| {
        (
            format!("jobs {j}"),
            text(&agentwire(&["jobs", j, "--help"]).stdout),
        )
    }));
    for (command, help) in &pages {
        assert!(
            help.contains("\nExample"),
            "`{command} --help` has no example:\n{help}"
        );
        assert_eq!(
            help.matches("Global options:").count(),
            1,
            "`{command} --help`:\n{help}"
        );
        assert_eq!(
            help.matches("--data-dir <DATA_DIR>").count(),
            1,
            "{command}"
        );
    }
}

#[test]
fn ask_says_which_options_belong_to_which_protocol() {
    let help = text(&agentwire(&["ask", "--help"]).stdout);
    let nipxx = help.find("NIP-XX options:").expect("a NIP-XX heading");
    let fisk = help
        .find("fisk-ai options (with --nats):")
        .expect("a fisk-ai heading");
    let at = |flag: &str| {
        help.find(flag)
            .unwrap_or_else(|| panic!("{flag} in:\n{help}"))
    };
    for flag in ["--session <", "--nip59", "--thinking <", "--relay <"] {
        assert!(
            at(flag) > nipxx && at(flag) < fisk,
            "{flag} is under NIP-XX"
        );
    }
    for flag in ["--identity <", "--conversation <"] {
        assert!(at(flag) > fisk, "{flag} is under fisk-ai");
    }
    let serve = text(&agentwire(&["serve", "--help"]).stdout);
    assert!(
        serve.contains("[agents.<name>]") && serve.contains("roost:<profile>"),
        "{serve}"
    );
}

#[test]
fn completions_for_bash_zsh_and_fish_name_every_command() {
    let commands = commands();
    for shell in ["bash", "zsh", "fish"] {
        let out = agentwire(&["completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let script = text(&out.stdout);
        for c in &commands {
            assert!(script.contains(c.as_str()), "{shell} completes {c}");
        }
        assert!(script.contains("roost-socket"), "{shell}: jobs' options");
    }
    // bash reads its script without a syntax error.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agentwire.bash");
    std::fs::write(&path, agentwire(&["completions", "bash"]).stdout).unwrap();
    let checked = Command::new("bash").arg("-n").arg(&path).status().unwrap();
    assert!(checked.success(), "bash -n accepts the completions");
    let out = agentwire(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2), "an unknown shell is refused");
}

#[test]
fn the_man_pages_come_from_the_same_definitions() {
    let out = agentwire(&["man"]);
    assert_eq!(out.status.code(), Some(0));
    let page = text(&out.stdout);
    assert!(page.contains(".TH agentwire 1"), "{page}");
    let dir = tempfile::tempdir().unwrap();
    let out = agentwire(&["man", "--dir", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for c in commands() {
        let page = std::fs::read_to_string(dir.path().join(format!("agentwire-{c}.1")))
            .unwrap_or_else(|e| panic!("agentwire-{c}.1: {e}"));
        assert!(page.contains(&format!(".TH agentwire-{c} 1")), "{c}");
    }
    let ask = std::fs::read_to_string(dir.path().join("agentwire-ask.1")).unwrap();
    assert!(
        ask.contains("\\-\\-nip59") && ask.contains("\\-\\-conversation"),
        "{ask}"
    );
}
