//! The README's fisk-ai tour run as written, line by line and in order, against a real `nats-server` with
//! JetStream: `serve` with the tour's flags, then each client line (the question answered at the terminal,
//! the token the first `ask` printed filled in where the README says `<token>`). Only the environment
//! differs from a user's: the NATS server's port, and a data dir and free loopback ports through
//! `AGENTWIRE_DATA_DIR` and `AGENTWIRE_CONFIG`. A README line that stops working fails here.

use agentwire_testkit::NatsServer;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

/// The NATS URL the README's lines name.
const README_NATS: &str = "nats://127.0.0.1:4222";

/// The ```sh block under `heading` in the README, its lines with their `# comments` taken off.
fn block_under(heading: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    let section = readme
        .split_once(heading)
        .unwrap_or_else(|| panic!("no {heading:?} in the README"))
        .1;
    let block = section
        .split_once("```sh\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .expect("a sh block")
        .0;
    block
        .lines()
        .map(|l| strip_comment(l).trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// `line` without a trailing `# comment` (a `#` outside quotes).
fn strip_comment(line: &str) -> &str {
    let mut quote = None;
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') => return &line[..i],
            _ => {}
        }
    }
    line
}

/// A shell line's words, as the shell splits them (double and single quotes; no expansions in the tour).
fn words(line: &str) -> Vec<String> {
    let (mut out, mut word, mut quote, mut started) = (Vec::new(), String::new(), None, false);
    for c in line.chars() {
        match (quote, c) {
            (None, '"' | '\'') => {
                quote = Some(c);
                started = true;
            }
            (Some(q), c) if c == q => quote = None,
            (None, c) if c.is_whitespace() => {
                if started {
                    out.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            (_, c) => {
                word.push(c);
                started = true;
            }
        }
    }
    if started {
        out.push(word);
    }
    out
}

/// The user's environment: a data dir of the tour's own, and free loopback ports.
fn environment(dir: &Path) -> Vec<(String, String)> {
    let config = dir.join("agentwire.toml");
    std::fs::write(
        &config,
        format!(
            "[serve]\nrelay_listen = \"127.0.0.1:0\"\n[http]\nlisten = \"127.0.0.1:0\"\n[roost]\nsocket = \"{}\"\n",
            dir.join("roost.sock").display()
        ),
    )
    .unwrap();
    vec![
        (
            "AGENTWIRE_DATA_DIR".into(),
            dir.join("data").display().to_string(),
        ),
        ("AGENTWIRE_CONFIG".into(), config.display().to_string()),
        ("RUST_LOG".into(), "warn".into()),
    ]
}

fn agentwire(args: &[String], env: &[(String, String)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_agentwire"));
    c.args(args).envs(env.iter().map(|(k, v)| (k, v)));
    c
}

/// Runs a client line, with `stdin` typed at its prompt.
fn run(args: &[String], env: &[(String, String)], stdin: &str) -> Output {
    let mut child = agentwire(args, env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("agentwire runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

struct Serving(Child);

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_fisk_ai_tour_runs_as_written() {
    let store = tempfile::tempdir().unwrap();
    let nats = NatsServer::start_jetstream(store.path());
    let dir = tempfile::tempdir().unwrap();
    let env = environment(dir.path());
    let lines = block_under("### fisk-ai over NATS");
    assert!(lines.len() >= 5, "{lines:?}");
    let mut token = None;
    let mut serving = None;
    for line in &lines {
        let mut args = words(line);
        assert_eq!(args.remove(0), "agentwire", "{line}");
        for a in args.iter_mut() {
            if a == README_NATS {
                *a = nats.url.clone();
            }
            if a == "<token>" {
                *a = token
                    .clone()
                    .expect("a token printed before <token> is used");
            }
        }
        if args[0] == "serve" {
            let mut child = agentwire(&args, &env)
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("serve starts");
            let mut ready = String::new();
            BufReader::new(child.stdout.take().unwrap())
                .read_line(&mut ready)
                .unwrap();
            assert!(ready.contains("\"ready\":true"), "{line}: {ready}");
            serving = Some(Serving(child));
            continue;
        }
        assert!(serving.is_some(), "the tour starts serve first");
        // The question the agent asks is answered at the terminal, as the README's comment says.
        let typed = if line.contains("ask colour?") {
            "red\n"
        } else {
            ""
        };
        let out = run(&args, &env, typed);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        );
        assert_eq!(out.status.code(), Some(0), "`{line}`:\n{stdout}\n{stderr}");
        if let Some(t) = stderr.lines().find_map(|l| l.strip_prefix("conversation ")) {
            token.get_or_insert_with(|| t.to_string());
        }
        let expect = match args.iter().any(|a| a == "calc 6*7") {
            true => Some("42"),
            false if args.iter().any(|a| a == "calc 1+1") => Some("2"),
            false if line.contains("ask colour?") => Some("red"),
            _ => None,
        };
        if let Some(want) = expect {
            assert!(stdout.contains(want), "`{line}` printed {stdout:?}");
        }
    }
}

#[test]
fn lines_are_split_as_the_shell_splits_them() {
    assert_eq!(
        words(r#"agentwire ask --nats nats://x "calc 6*7""#),
        ["agentwire", "ask", "--nats", "nats://x", "calc 6*7"]
    );
    assert_eq!(
        strip_comment(r#"agentwire ask "a # b"   # a comment"#).trim(),
        r#"agentwire ask "a # b""#
    );
    assert_eq!(words("a '' b"), ["a", "", "b"]);
}
