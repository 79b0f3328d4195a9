//! What an operator installs agentwire with: the systemd unit passes `systemd-analyze verify` (with the built
//! binary and its generated man pages in place) and is hardened as documented; the license files are the
//! ones Cargo.toml declares; the container image builds and runs where a container engine answers.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn the_systemd_unit_is_hardened_and_verifies() {
    let unit = std::fs::read_to_string(root().join("contrib/agentwire.service")).unwrap();
    for line in [
        "DynamicUser=yes",
        "StateDirectory=agentwire",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "Environment=AGENTWIRE_DATA_DIR=%S/agentwire",
        "ExecStart=/usr/local/bin/agentwire serve",
    ] {
        assert!(unit.lines().any(|l| l == line), "the unit has {line}");
    }
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped systemd-analyze verify: systemd-analyze is not installed");
        return;
    }
    // The unit as installed: its binary where ExecStart names it, its man pages where Documentation does.
    let dir = tempfile::tempdir().unwrap();
    let man = dir.path().join("man");
    std::fs::create_dir_all(man.join("man1")).unwrap();
    let made = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args(["man", "--dir", man.join("man1").to_str().unwrap()])
        .status()
        .unwrap();
    assert!(made.success());
    let installed = dir.path().join("agentwire.service");
    std::fs::write(
        &installed,
        unit.replace("/usr/local/bin/agentwire", env!("CARGO_BIN_EXE_agentwire")),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&installed)
        .env("MANPATH", &man)
        .output()
        .unwrap();
    // verify exits 0 on an unknown key or a bad value, and says so: a clean unit says nothing.
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze verify: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

#[test]
fn the_license_files_are_the_ones_cargo_toml_declares() {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    assert!(manifest.contains("license = \"MIT OR Apache-2.0\""));
    let mit = std::fs::read_to_string(root().join("LICENSE-MIT")).unwrap();
    assert!(mit.starts_with("MIT License") && mit.contains("Permission is hereby granted"));
    let apache = std::fs::read_to_string(root().join("LICENSE-APACHE")).unwrap();
    assert!(apache.contains("Apache License") && apache.contains("Version 2.0, January 2004"));
    assert!(root().join("CHANGELOG.md").exists());
}

/// The container engine that answers here (`docker` or `podman`), if any.
fn container_engine() -> Option<&'static str> {
    ["docker", "podman"].into_iter().find(|engine| {
        Command::new(engine)
            .arg("info")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

#[test]
fn the_container_image_builds_and_runs_where_an_engine_answers() {
    let Some(engine) = container_engine() else {
        eprintln!(
            "skipped the container build: no docker or podman engine answers on this machine"
        );
        return;
    };
    let tag = "agentwire-packaging-test";
    let built = Command::new(engine)
        .args(["build", "-f", "Containerfile", "-t", tag, "."])
        .current_dir(root())
        .status()
        .unwrap();
    assert!(built.success(), "{engine} build");
    let out = Command::new(engine)
        .args(["run", "--rm", tag, "--version"])
        .output()
        .unwrap();
    assert!(
        text(&out.stdout).starts_with("agentwire "),
        "{}",
        text(&out.stderr)
    );
    // It runs as its own user, not root.
    let out = Command::new(engine)
        .args(["run", "--rm", "--entrypoint", "id", tag, "-u"])
        .output()
        .unwrap();
    assert_eq!(text(&out.stdout).trim(), "10001");
}
