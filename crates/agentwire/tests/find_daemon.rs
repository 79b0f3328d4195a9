//! Client commands find the daemon through its data dir, over the real binary: a `serve` on ports of its
//! own (and another roost socket, and NATS) is reached by `ask`, `info`, `cancel`, `turns`, `jobs` and
//! `ask --nats` with no address flag; with no daemon, or one that died without cleaning up, they say so at
//! once.

mod common;

use agentwire_testkit::NatsServer;
use common::Daemon;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// `agentwire --data-dir DIR ARGS...`, with nothing from the caller's environment to find a daemon by.
fn agentwire(data_dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .env_remove("AGENTWIRE_CONFIG")
        .env_remove("XDG_RUNTIME_DIR")
        .env("RUST_LOG", "warn")
        .output()
        .expect("agentwire runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn every_client_command_finds_a_daemon_on_ports_of_its_own() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // Free ports picked by the daemon (not 7777 or 7780), its roost socket in a place of its own.
    let socket = dir.path().join("elsewhere.sock");
    let mut d = Daemon::start(
        &data,
        &[
            "--roost-socket",
            socket.to_str().unwrap(),
            "--nats",
            &nats.url,
            "--identity",
            "found",
        ],
    );
    assert!(!d.relay.ends_with(":7777"));

    let out = agentwire(&data, &["ask", "hello", "there"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "You said: hello there");
    let run = text(&out.stderr)
        .lines()
        .find_map(|l| l.strip_prefix("run ").map(str::to_string))
        .expect("ask names its run");

    let out = agentwire(&data, &["info"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(info["supported_models"].is_array(), "{info}");

    // The run ended: cancel finds it on the daemon's relay and says so.
    let out = agentwire(&data, &["cancel", &run]);
    assert!(
        text(&out.stderr).contains("already ended"),
        "{}",
        text(&out.stderr)
    );

    let out = agentwire(&data, &["turns"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&run), "{}", text(&out.stdout));

    let out = agentwire(&data, &["jobs", "ls", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(rows["rows"].is_array(), "{rows}");

    // fisk-ai: the worker's identity is the local serve's.
    let out = agentwire(&data, &["ask", "--nats", &nats.url, "calc", "2+3"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "5");

    // A daemon that died without cleaning up is no daemon, said at once.
    d.kill();
    for args in [
        &["ask", "hi"][..],
        &["info"][..],
        &["turns"][..],
        &["jobs", "ls"][..],
    ] {
        let out = agentwire(&data, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!(
                "no agentwire is serving data dir {}",
                data.display()
            )) && err.contains("stopped without cleaning up"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn with_no_daemon_the_commands_say_so_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let run = "ab".repeat(32);
    for args in [
        &["ask", "hi"][..],
        &["info"][..],
        &["cancel", &run][..],
        &["turns"][..],
        &["watch"][..],
        &["jobs", "ls"][..],
    ] {
        let started = Instant::now();
        let out = agentwire(dir.path(), args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!(
                "no agentwire is serving data dir {}; start it with `agentwire serve`",
                dir.path().display()
            )),
            "{args:?}: {err}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{args:?} said so at once"
        );
    }
}
