//! Help that teaches, over the real binary: every command's `--help`, and every subcommand's at any depth,
//! has an example and shows the global options once, under their own heading; `ask` says which options belong to which protocol; completions
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
    subcommands(&text(&agentwire(&["--help"]).stdout))
}

/// The subcommands a help page lists under "Commands:" (`help` aside).
fn subcommands(help: &str) -> Vec<String> {
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

/// Every command and subcommand, at any depth (`jobs task add`, `concierge orders rm`), with its help.
fn every_page() -> Vec<(String, String)> {
    let mut pages = Vec::new();
    let mut todo: Vec<Vec<String>> = commands().into_iter().map(|c| vec![c]).collect();
    while let Some(path) = todo.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let help = text(&agentwire(&args).stdout);
        todo.extend(subcommands(&help).into_iter().map(|sub| {
            let mut deeper = path.clone();
            deeper.push(sub);
            deeper
        }));
        pages.push((path.join(" "), help));
    }
    pages
}

#[test]
fn every_command_has_an_example_and_the_global_options_once() {
    let commands = commands();
    assert!(commands.len() >= 12, "{commands:?}");
    let pages = every_page();
    for nested in [
        "jobs dispatch",
        "jobs task",
        "jobs task add",
        "jobs schedule",
        "concierge orders add",
    ] {
        assert!(
            pages.iter().any(|(c, _)| c == nested),
            "{nested} among {:?}",
            pages.iter().map(|(c, _)| c).collect::<Vec<_>>()
        );
    }
    let without: Vec<&str> = pages
        .iter()
        .filter(|(_, help)| !help.contains("\nExample"))
        .map(|(c, _)| c.as_str())
        .collect();
    assert!(without.is_empty(), "`--help` with no example: {without:?}");
    for (command, help) in &pages {
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
        .find("fisk-ai options (with --nats or --nats-context):")
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
