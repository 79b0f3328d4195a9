//! `--nats-context NAME` on the fisk-ai client commands (`ask`, `cancel`, `read`, `discover`, `session`)
//! as a user of the `nats` CLI runs them: a context file in `$XDG_CONFIG_HOME/nats/context/` holding the
//! url, user and password of a real nats-server that demands them, read by the real binary, with
//! `--nats` and the config file's `[nats]` over the context's values, as for `serve --nats-context`. A
//! context that is not there is an error naming its file, and the password is never printed.

mod common;

use agentwire_testkit::NatsServer;
use common::Daemon;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const PASSWORD: &str = "ctx-pw-Q93-never-shown";
const WRONG_PASSWORD_VAR: &str = "AW_TEST_CTX_WRONG_PASSWORD";

/// A context file as `nats context save` writes it (every field, most empty).
fn write_context(xdg: &Path, name: &str, url: &str) {
    let dir = xdg.join("nats").join("context");
    std::fs::create_dir_all(&dir).unwrap();
    let body = serde_json::json!({
        "description": "", "url": url, "socks_proxy": "", "token": "", "user": "alice",
        "password": PASSWORD, "creds": "", "nkey": "", "cert": "", "key": "", "ca": "", "nsc": "",
        "jetstream_domain": "", "jetstream_api_prefix": "", "jetstream_event_prefix": "",
        "inbox_prefix": "", "user_jwt": "", "color_scheme": "", "tls_first": false
    });
    std::fs::write(dir.join(format!("{name}.json")), body.to_string()).unwrap();
}

/// The real binary with `args`, contexts under `xdg`.
fn agentwire(xdg: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args(args)
        .env("RUST_LOG", "info")
        .env("XDG_CONFIG_HOME", xdg)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("agentwire runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Neither stream holds the password.
fn no_password(out: &Output) {
    let all = text(&out.stdout) + &text(&out.stderr);
    assert!(!all.contains(PASSWORD), "the password was printed: {all}");
}

fn answered(out: &Output) {
    no_password(out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout {} stderr {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(text(&out.stdout).trim(), "5");
}

/// Refused (exit code 1) with an error holding every one of `words`, and no password.
fn refused(out: &Output, words: &[&str]) {
    no_password(out);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for w in words {
        assert!(err.contains(w), "{w:?} not in {err}");
    }
}

#[test]
fn the_client_commands_connect_with_a_nats_context_and_explicit_settings_override_it() {
    let server = NatsServer::start_with_config(&format!(
        "authorization {{ user: alice, password: \"{PASSWORD}\" }}"
    ));
    let xdg = tempfile::tempdir().unwrap();
    write_context(xdg.path(), "prod", &server.url);
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("serve.log");
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let xdg_env = xdg.path().to_str().unwrap();
    let d = Daemon::start_logging(
        &data,
        &["--nats-context", "prod", "--identity", "ctx1"],
        &[("XDG_CONFIG_HOME", xdg_env), ("RUST_LOG", "info")],
        Stdio::from(std::fs::File::create(&log_path).unwrap()),
    );
    assert_eq!(d.ready["nats"]["identity"], "ctx1");

    // Nothing but the context: its url, user and password.
    let ask = |extra: &[&str]| {
        let mut args = vec!["ask"];
        args.extend_from_slice(extra);
        args.extend(["--identity", "ctx1", "calc", "2+3"]);
        agentwire(xdg.path(), &args, &[])
    };
    let out = ask(&["--nats-context", "prod"]);
    answered(&out);
    let token = text(&out.stderr)
        .lines()
        .find_map(|l| l.strip_prefix("conversation "))
        .expect("the token is printed")
        .to_string();
    let out = agentwire(
        xdg.path(),
        &[
            "read",
            "--nats-context",
            "prod",
            "--identity",
            "ctx1",
            &token,
        ],
        &[],
    );
    no_password(&out);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("> calc 2+3"),
        "{}",
        text(&out.stdout)
    );
    let out = agentwire(
        xdg.path(),
        &["discover", "--nats-context", "prod", "ctx1"],
        &[],
    );
    no_password(&out);
    let card: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stderr)));
    assert_eq!(card["name"], "ctx1");
    // `cancel` reaches the worker (which runs no such run) after the subcommand's flags too.
    let out = agentwire(
        xdg.path(),
        &[
            "cancel",
            "--identity",
            "ctx1",
            "never-sent",
            "--nats-context",
            "prod",
        ],
        &[],
    );
    no_password(&out);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("is not running on any worker of ctx1"));

    // --nats is over the context's url, which its user and password still go with.
    write_context(xdg.path(), "stale", "nats://127.0.0.1:1");
    answered(&ask(&["--nats-context", "stale", "--nats", &server.url]));
    // So is `[nats] url`, and the flag is over `[nats] context`.
    let config = dir.path().join("agentwire.toml");
    let write_config = |nats: &str| std::fs::write(&config, format!("[nats]\n{nats}\n")).unwrap();
    let config_arg = config.to_str().unwrap();
    write_config(&format!("url = \"{}\"\ncontext = \"missing\"", server.url));
    let mut args = vec!["--config", config_arg];
    args.extend(["ask", "--nats-context", "stale", "--identity", "ctx1"]);
    answered(&agentwire(
        xdg.path(),
        &[&args[..], &["calc", "2+3"]].concat(),
        &[],
    ));
    // `[nats] context` alone is read by `read` and `discover` (which need no --nats with it).
    write_config("context = \"prod\"");
    let out = agentwire(
        xdg.path(),
        &["--config", config_arg, "discover", "ctx1"],
        &[],
    );
    no_password(&out);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The file's user and password are over the context's: a wrong one is refused by the server.
    write_config("user = \"alice\"\npassword_env = \"AW_TEST_CTX_WRONG_PASSWORD\"");
    let out = agentwire(
        xdg.path(),
        &[
            "--config",
            config_arg,
            "ask",
            "--nats-context",
            "prod",
            "--identity",
            "ctx1",
            "calc",
            "2+3",
        ],
        &[(WRONG_PASSWORD_VAR, "not-the-password")],
    );
    no_password(&out);
    assert_ne!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).to_lowercase().contains("authorization"),
        "{}",
        text(&out.stderr)
    );

    // A context that is not there names the flag and its file, whichever command is given it.
    let missing = xdg.path().join("nats").join("context").join("staging.json");
    let missing = missing.to_str().unwrap();
    for args in [
        &[
            "ask",
            "--nats-context",
            "staging",
            "--identity",
            "ctx1",
            "hi",
        ][..],
        &[
            "cancel",
            "--nats-context",
            "staging",
            "--identity",
            "ctx1",
            "r1",
        ],
        &[
            "read",
            "--nats-context",
            "staging",
            "--identity",
            "ctx1",
            "t",
        ],
        &["discover", "--nats-context", "staging", "ctx1"],
        &["session", "list", "--nats-context", "staging"],
    ] {
        refused(
            &agentwire(xdg.path(), args, &[]),
            &["--nats-context", "\"staging\"", missing],
        );
    }
    // A context without a url, and no other servers, says so.
    let dir_of = xdg.path().join("nats").join("context");
    std::fs::write(dir_of.join("nourl.json"), r#"{"user": "alice"}"#).unwrap();
    refused(
        &agentwire(
            xdg.path(),
            &["discover", "--nats-context", "nourl", "ctx1"],
            &[],
        ),
        &["no NATS servers", "\"nourl\"", "has no url"],
    );
    refused(
        &agentwire(xdg.path(), &["discover", "ctx1"], &[]),
        &["no NATS servers", "--nats URL"],
    );

    drop(d);
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(!log.contains(PASSWORD), "the password is in serve's log");
}
