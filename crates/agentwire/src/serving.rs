//! What a running `serve` listens on, for the client commands on the same data dir: `serve` writes its ready
//! line (without the HTTP token, which has a file of its own) to `serving.json` and removes it when it stops;
//! `ask`, `info`, `cancel`, `jobs`, `turns` and `watch` read it, so a daemon on a non-default port or config
//! is found without flags. A file left by a daemon that died is known by its pid being gone.

use serde_json::Value;
use std::path::{Path, PathBuf};

/// The file, in the data dir.
pub(crate) const SERVING_FILE: &str = "serving.json";

/// A running daemon's addresses, as its ready line gave them.
#[derive(Debug, Clone)]
pub(crate) struct Serving {
    ready: Value,
    data_dir: PathBuf,
}

impl Serving {
    /// Writes what `ready` says (less the HTTP token) with this process's pid.
    pub(crate) fn write(data_dir: &Path, ready: &Value) -> std::io::Result<PathBuf> {
        let path = data_dir.join(SERVING_FILE);
        let mut shown = ready.clone();
        if let Some(o) = shown.as_object_mut() {
            o.remove("http_token");
            o.insert("pid".into(), std::process::id().into());
        }
        // Written aside and renamed into place: a client never reads half a file.
        let partial = data_dir.join(format!("{SERVING_FILE}.partial"));
        std::fs::write(&partial, format!("{shown}\n"))?;
        std::fs::rename(&partial, &path)?;
        Ok(path)
    }

    /// The daemon serving `data_dir`, or why there is none, said so that the user knows what to do.
    pub(crate) fn find(data_dir: &Path) -> Result<Serving, String> {
        let none = || {
            format!(
                "no agentwire is serving data dir {}; start it with `agentwire serve`",
                data_dir.display()
            )
        };
        let text = std::fs::read_to_string(data_dir.join(SERVING_FILE)).map_err(|_| none())?;
        let ready: Value = serde_json::from_str(&text).map_err(|_| none())?;
        let alive = match ready["pid"].as_u64() {
            // Where /proc is not mounted the pid cannot be checked: the file is taken as it is.
            Some(pid) => {
                !Path::new("/proc/self").exists() || Path::new(&format!("/proc/{pid}")).exists()
            }
            None => false,
        };
        if !alive {
            return Err(format!(
                "no agentwire is serving data dir {} (the one that did stopped without cleaning up); start it with `agentwire serve`",
                data_dir.display()
            ));
        }
        Ok(Serving {
            ready,
            data_dir: data_dir.to_path_buf(),
        })
    }

    /// The data dir it serves.
    pub(crate) fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Its first relay (the embedded one when it runs).
    pub(crate) fn relay(&self) -> Option<&str> {
        self.ready["relay"].as_str()
    }

    /// Its HTTP server's URL, when it runs one.
    pub(crate) fn http(&self) -> Option<&str> {
        self.ready["http"].as_str()
    }

    /// The `--agent` agent's public key (hex).
    pub(crate) fn agent_pubkey(&self) -> Option<&str> {
        self.ready["agent_pubkey"].as_str()
    }

    /// The public key (hex) of the agent it serves under `name`, if that agent is on NIP-XX.
    pub(crate) fn agent_named(&self, name: &str) -> Option<&str> {
        self.ready["agents"]
            .as_array()?
            .iter()
            .find(|a| a["name"] == name)?["pubkey"]
            .as_str()
    }

    /// The roost supervisor's socket.
    pub(crate) fn roost_socket(&self) -> Option<PathBuf> {
        self.ready["roost_socket"].as_str().map(PathBuf::from)
    }

    /// The rooms the task-card adapter watches and who may post tasks (hex keys), when it runs.
    pub(crate) fn tasks(&self) -> Option<(Vec<String>, Vec<String>)> {
        let t = self.ready.get("tasks")?;
        let list = |k: &str| -> Vec<String> {
            t[k].as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        Some((list("watch"), list("allowed")))
    }

    /// The NATS servers of the `--agent` agent's fisk-ai worker, when it serves fisk-ai.
    pub(crate) fn nats_url(&self) -> Option<&str> {
        self.ready["nats"]["url"].as_str()
    }

    /// The fisk-ai identity of the `--agent` agent, when it serves fisk-ai.
    pub(crate) fn nats_identity(&self) -> Option<&str> {
        self.ready["nats"]["identity"].as_str()
    }
}

/// The relay a client command reaches: `flag` (`--relay`), else the one the local serve runs (`serving`,
/// as [`Serving::find`] gave it); with neither, what is missing and how to name one.
pub(crate) fn relay(
    flag: Option<&str>,
    serving: &Result<Serving, String>,
) -> Result<String, String> {
    match (flag, serving) {
        (Some(r), _) => Ok(r.to_string()),
        (None, Ok(s)) => s
            .relay()
            .map(str::to_string)
            .ok_or_else(|| "the local serve names no relay".to_string()),
        (None, Err(none)) => Err(format!("{none} (or name a relay with --relay)")),
    }
}

/// The NATS servers of the serve on `data_dir`'s fisk-ai worker, for a fisk-ai `flag` given without
/// `--nats`: said plainly when none serves there.
pub(crate) fn local_nats(data_dir: &Path, flag: &str) -> Result<String, String> {
    let serving = Serving::find(data_dir)
        .map_err(|e| format!("{flag} asks over fisk-ai: give --nats URL ({e})"))?;
    serving.nats_url().map(str::to_string).ok_or_else(|| {
        format!(
            "{flag} asks over fisk-ai, and the agentwire serving data dir {} runs no fisk-ai worker: give --nats URL, or start serve with --nats",
            data_dir.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_serve_writes_is_found_without_the_token_and_a_dead_pid_is_no_daemon() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Serving::find(dir.path())
            .unwrap_err()
            .contains("no agentwire is serving data dir"));
        let ready = serde_json::json!({
            "ready": true, "relay": "ws://127.0.0.1:1234", "http": "http://127.0.0.1:5678",
            "http_token": "secret-token", "agent_pubkey": "ab",
            "agents": [{"name": "shout", "pubkey": "cd"}],
            "roost_socket": "/tmp/r.sock", "nats": {"identity": "me"},
        });
        let path = Serving::write(dir.path(), &ready).unwrap();
        assert!(!std::fs::read_to_string(&path)
            .unwrap()
            .contains("secret-token"));
        let s = Serving::find(dir.path()).unwrap();
        assert_eq!(s.relay(), Some("ws://127.0.0.1:1234"));
        assert_eq!(s.http(), Some("http://127.0.0.1:5678"));
        assert_eq!(s.agent_named("shout"), Some("cd"));
        assert_eq!(s.agent_named("other"), None);
        assert_eq!(s.nats_identity(), Some("me"));
        assert_eq!(s.roost_socket(), Some(PathBuf::from("/tmp/r.sock")));

        // A daemon that died: its pid is no process.
        let mut dead = ready.clone();
        dead["pid"] = u32::MAX.into();
        std::fs::write(&path, dead.to_string()).unwrap();
        let e = Serving::find(dir.path()).unwrap_err();
        assert!(e.contains("stopped without cleaning up"), "{e}");
    }
}
