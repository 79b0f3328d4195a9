//! The `shell` built-in: runs a model's command with `sh -c` in the agent's working directory, in a
//! process group of its own, for at most [`SHELL_TIMEOUT`], keeping at most [`MAX_SHELL_OUTPUT_BYTES`] of
//! its stdout and of its stderr. Whether it may run at all is asked of a person first (the driver does
//! that); this file only runs it.

use agentwire_core::child_env::ChildEnv;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};

/// How long one shell command may run: a tool call is a step of a turn, not a job (roost runs those).
pub const SHELL_TIMEOUT: Duration = Duration::from_secs(60);
/// The most bytes of a command's stdout (and, separately, its stderr) given back to the model: 64 KiB,
/// about 16,000 tokens, already a large part of a small model's window.
pub const MAX_SHELL_OUTPUT_BYTES: usize = 64 * 1024;

/// Reads `stream` to its end, keeping the first `cap` bytes; returns them and whether more came.
async fn capped(mut stream: impl AsyncRead + Unpin, cap: usize) -> (Vec<u8>, bool) {
    let (mut kept, mut cut, mut buf) = (Vec::new(), false, vec![0u8; 8192]);
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return (kept, cut),
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                cut |= n > room;
            }
        }
    }
}

/// Runs `command` in `dir`: its exit code, stdout and stderr (each cut to the cap, said when cut), or an
/// error for the model (it could not start, or ran past the timeout and was killed with its group).
///
/// Its environment is the allowlist of [`agentwire_core::child_env`] and `env` (the agent's `env` and
/// `pass_env`), never the daemon's (its API key, a NATS password). The command's whole process group is
/// killed when the call is dropped before the command ends (a cancelled turn), as on a timeout.
pub async fn run(
    command: &str,
    dir: &Path,
    timeout: Duration,
    env: &ChildEnv,
) -> Result<Value, String> {
    let mut child = tokio::process::Command::new("sh")
        .env_clear()
        .envs(env.vars(std::env::vars_os()))
        .arg("-c")
        .arg(command)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start sh: {e}"))?;
    let mut group = crate::cmd::GroupKill(child.id());
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let work = async {
        let out = async {
            match stdout {
                Some(s) => capped(s, MAX_SHELL_OUTPUT_BYTES).await,
                None => (Vec::new(), false),
            }
        };
        let err = async {
            match stderr {
                Some(s) => capped(s, MAX_SHELL_OUTPUT_BYTES).await,
                None => (Vec::new(), false),
            }
        };
        let ((out, out_cut), (err, err_cut)) = tokio::join!(out, err);
        let status = child.wait().await;
        (out, out_cut, err, err_cut, status)
    };
    let Ok((out, out_cut, err, err_cut, status)) = tokio::time::timeout(timeout, work).await else {
        group.kill();
        return Err(format!(
            "the command did not finish within {} s and was stopped",
            timeout.as_secs()
        ));
    };
    // Reaped: the group's id may be reused from here on.
    group.0 = None;
    let status = status.map_err(|e| format!("waiting for the command: {e}"))?;
    Ok(json!({
        "exit_code": status.code(),
        "stdout": String::from_utf8_lossy(&out),
        "stderr": String::from_utf8_lossy(&err),
        "truncated": out_cut || err_cut,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn runs_in_the_directory_and_caps_and_times_out() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("note.txt"), "hello").unwrap();
        let r = run(
            "cat note.txt; echo oops >&2; exit 3",
            dir.path(),
            SHELL_TIMEOUT,
            &ChildEnv::default(),
        )
        .await
        .unwrap();
        assert_eq!(r["stdout"], "hello");
        assert_eq!(r["stderr"], "oops\n");
        assert_eq!(r["exit_code"], 3);
        assert_eq!(r["truncated"], false);
        let r = run(
            "yes | head -c 200000",
            dir.path(),
            SHELL_TIMEOUT,
            &ChildEnv::default(),
        )
        .await
        .unwrap();
        assert_eq!(r["stdout"].as_str().unwrap().len(), MAX_SHELL_OUTPUT_BYTES);
        assert_eq!(r["truncated"], true);
        let started = std::time::Instant::now();
        let e = run(
            "sleep 30 & sleep 30",
            dir.path(),
            Duration::from_millis(300),
            &ChildEnv::default(),
        )
        .await
        .unwrap_err();
        assert!(e.contains("did not finish"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn only_the_allowlist_and_what_is_named_reach_a_command_and_a_dropped_call_kills_the_group(
    ) {
        let dir = tempfile::tempdir().unwrap();
        // Cargo sets CARGO_MANIFEST_DIR and CARGO_PKG_NAME for tests: they stand for the daemon's variables
        // (an API key, a NATS password) without touching this process's environment.
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        let env = ChildEnv {
            set: [("MODE".to_string(), "fast".to_string())].into(),
            pass: vec!["CARGO_PKG_NAME".into()],
        };
        let r = run(
            "echo \"[${CARGO_MANIFEST_DIR:-gone}] [$CARGO_PKG_NAME] [$MODE] [${PATH:+path}]\"",
            dir.path(),
            SHELL_TIMEOUT,
            &env,
        )
        .await
        .unwrap();
        assert_eq!(r["stdout"], "[gone] [agentwire-agents] [fast] [path]\n");
        let pidfile = dir.path().join("pid");
        let command = format!("sleep 60 & echo $! > {}; wait", pidfile.display());
        let call = tokio::spawn(async move {
            let dir = tempfile::tempdir().unwrap();
            run(&command, dir.path(), SHELL_TIMEOUT, &ChildEnv::default()).await
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !pidfile.exists() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        call.abort();
        let _ = call.await;
        let gone = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
                s.rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z'))
            })
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !gone() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(gone(), "the command's child outlived the dropped call");
    }
}
