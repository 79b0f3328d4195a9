//! What an operator installs agentwire with: the systemd unit, installed by the steps its head and
//! docs/operations.md give (the binary, its man pages, the unit), passes `systemd-analyze verify` and is
//! hardened as documented; the license files are the ones Cargo.toml declares; the container image builds
//! and runs where a container engine answers.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The install steps the unit's head gives: its `#   ` lines after "Install it", as written.
fn unit_install_steps(unit: &str) -> Vec<String> {
    unit.lines()
        .skip_while(|l| !l.contains("Install it"))
        .skip(1)
        .map_while(|l| l.strip_prefix("#   "))
        .map(str::to_string)
        .collect()
}

/// The install steps docs/operations.md gives: the `sh` block after "To install it".
fn documented_install_steps(doc: &str) -> Vec<String> {
    doc.lines()
        .skip_while(|l| !l.contains("To install it"))
        .skip_while(|l| !l.trim().starts_with("```sh"))
        .skip(1)
        .map(str::trim)
        .take_while(|l| !l.starts_with("```"))
        .map(str::to_string)
        .collect()
}

/// `path` (absolute, as a step names it) under `scratch`.
fn under(scratch: &Path, path: &str) -> PathBuf {
    scratch.join(path.trim_start_matches('/'))
}

/// Follows the install steps into `scratch`, as root would on a host: the binary built for the tests stands in
/// for `cargo install`, each other command runs with its absolute paths under `scratch`, and `systemctl` (which
/// would start the unit) is left out.
fn install_into(scratch: &Path, steps: &[String]) {
    // What a host has before: systemd's unit directory and the local man tree (with no section in it).
    for dir in ["/etc/systemd/system", "/usr/local/share/man"] {
        std::fs::create_dir_all(under(scratch, dir)).unwrap();
    }
    for step in steps {
        let words: Vec<&str> = step.split_whitespace().collect();
        match words[0] {
            "cargo" => {
                assert!(step.contains("--root /usr/local"), "{step}");
                let bin = under(scratch, "/usr/local/bin");
                std::fs::create_dir_all(&bin).unwrap();
                std::fs::copy(env!("CARGO_BIN_EXE_agentwire"), bin.join("agentwire")).unwrap();
            }
            "systemctl" => {}
            program => {
                let args = words[1..].iter().map(|w| match w.starts_with('/') {
                    true => under(scratch, w).into_os_string(),
                    false => w.into(),
                });
                let program = match program.starts_with('/') {
                    true => under(scratch, program),
                    false => PathBuf::from(program),
                };
                let done = Command::new(&program)
                    .args(args)
                    .current_dir(root())
                    .status()
                    .unwrap_or_else(|e| panic!("{step}: {e}"));
                assert!(done.success(), "{step}");
            }
        }
    }
}

/// `systemd-analyze verify` of a unit: its output, empty when the unit is clean (verify exits 0 on an
/// unknown key or a bad value, and says so).
fn verify(unit: &Path, manpath: &Path) -> String {
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(unit)
        .env("MANPATH", manpath)
        .output()
        .unwrap();
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    match out.status.success() {
        true => said,
        false => format!("(exit {:?}) {said}", out.status.code()),
    }
}

#[test]
fn the_systemd_unit_is_hardened_and_installed_as_documented_verifies() {
    let unit = std::fs::read_to_string(root().join("contrib/agentwire.service")).unwrap();
    for line in [
        "DynamicUser=yes",
        "StateDirectory=agentwire",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "Environment=AGENTWIRE_DATA_DIR=%S/agentwire",
        "ExecStart=/usr/local/bin/agentwire serve",
        // Every front's connection caps fit in it (docs/security.md, "File descriptors").
        "LimitNOFILE=8192",
    ] {
        assert!(unit.lines().any(|l| l == line), "the unit has {line}");
    }
    // The install steps: the unit's head and docs/operations.md say the same, and they install the man
    // pages the unit's Documentation= names where man looks by default.
    let steps = unit_install_steps(&unit);
    let doc = std::fs::read_to_string(root().join("docs/operations.md")).unwrap();
    assert_eq!(steps, documented_install_steps(&doc));
    let pages = steps
        .iter()
        .find(|s| s.contains(" man --dir "))
        .unwrap_or_else(|| panic!("no install step writes the man pages: {steps:?}"));
    assert!(
        pages.ends_with("--dir /usr/local/share/man/man1"),
        "{pages}"
    );
    for doc in ["man:agentwire(1)", "man:agentwire-serve(1)"] {
        assert!(unit.contains(doc), "the unit names {doc}");
    }

    let scratch = tempfile::tempdir().unwrap();
    install_into(scratch.path(), &steps);
    let installed = under(scratch.path(), "/etc/systemd/system/agentwire.service");
    let pages = under(scratch.path(), "/usr/local/share/man");
    assert!(pages.join("man1/agentwire.1").exists());
    assert!(pages.join("man1/agentwire-serve.1").exists());
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!(
            "skipped systemd-analyze verify: systemd-analyze is not installed (the unit's steps and content \
             were checked above)"
        );
        return;
    }
    // The unit as installed, its ExecStart naming the binary where the scratch root has it.
    let bin = under(scratch.path(), "/usr/local/bin/agentwire");
    let text = std::fs::read_to_string(&installed).unwrap();
    std::fs::write(
        &installed,
        text.replace("/usr/local/bin/agentwire", bin.to_str().unwrap()),
    )
    .unwrap();
    let said = verify(&installed, &pages);
    assert!(said.is_empty(), "systemd-analyze verify: {said}");
    // Without the man pages it is not clean: the step above is what makes it so.
    let none = scratch.path().join("no-man");
    std::fs::create_dir_all(&none).unwrap();
    let said = verify(&installed, &none);
    assert!(
        said.contains("man agentwire(1)"),
        "without the pages: {said}"
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
