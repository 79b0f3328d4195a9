//! A full disk under the journal: a run that ends while the journal cannot write holds its terminal back
//! until the write succeeds, a prompt that arrives meanwhile gets no answer until the journal writes again
//! and is then served from the relay without a restart, and across the fault and a kill -9 no run ever
//! gets two terminals.
//!
//! The agent's data directory is a small tmpfs of its own (mounting one needs root, as CI runs; elsewhere
//! the test says it did not run). The relay is another daemon on the ordinary disk.

mod common;

use common::{health, Client, Daemon};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The tmpfs: large enough for the data directory's files, small enough to fill in a moment.
const TMPFS_SIZE: &str = "8m";

/// A tmpfs mounted on a temp dir, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount() -> Option<Tmpfs> {
        let dir = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={TMPFS_SIZE}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the filesystem with a file of its own; returns the file.
    fn fill(&self) -> PathBuf {
        let path = self.path().join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        while f.write_all(&chunk).is_ok() {}
        let _ = f.write_all(&[0u8; 512]);
        let _ = f.sync_all();
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_delays_terminals_and_never_doubles_them() {
    let Some(fs) = Tmpfs::mount() else {
        eprintln!("NOT RUN: mounting a tmpfs needs root (CI runs as root)");
        return;
    };
    let relay_dir = tempfile::tempdir().unwrap();
    let relay = Daemon::start(relay_dir.path(), &[]);
    let data = fs.path().join("agent");
    let sock = relay_dir.path().join("agent-roost.sock");
    // The agent has an embedded relay of its own too, for its `GET /health`.
    let args = [
        "--relay",
        relay.relay.as_str(),
        "--relay-listen",
        "127.0.0.1:0",
        "--roost-socket",
        sock.to_str().unwrap(),
    ];
    let mut agent = Daemon::start(&data, &args);
    let own_relay = agent.relay.clone();
    assert_eq!(health(&own_relay).0, 200);
    let mut c = Client::new(&relay.relay, agent.agent).await;
    assert_eq!(c.ask("quick before").await.text(), "before");

    // A run in progress when the disk fills up.
    let long = c.prompt_event("sleep 3000", None);
    c.watch(&long.id);
    c.publish(&long).await;
    c.wait_started(&long.id, Duration::from_secs(10)).await;
    let filler = fs.fill();
    // It ends while the journal cannot write: no terminal, not even an error.
    let held = c
        .collect(&long.id, Duration::from_millis(4500), Duration::ZERO)
        .await;
    assert_eq!(
        held.terminals, 0,
        "a terminal went out before it was durable"
    );
    assert!(!held.events.is_empty(), "the run streamed while it ran");

    // A prompt while the journal cannot write is not answered (the relay keeps it).
    let waiting = c.prompt_event("quick after the fault", None);
    c.watch(&waiting.id);
    c.publish(&waiting).await;
    let nothing = c
        .collect(&waiting.id, Duration::from_millis(1000), Duration::ZERO)
        .await;
    assert_eq!(
        nothing.terminals, 0,
        "answered while the journal could not record it"
    );

    // Space again: the held terminal goes out, and the waiting prompt is served, without a restart.
    std::fs::remove_file(&filler).unwrap();
    let done = c
        .collect(
            &long.id,
            Duration::from_secs(10),
            Duration::from_millis(300),
        )
        .await;
    assert_eq!(
        done.text(),
        "slept 3000 ms",
        "the real answer, not an error"
    );
    assert_eq!(done.terminals, 1);
    let served = c
        .collect(
            &waiting.id,
            Duration::from_secs(10),
            Duration::from_millis(300),
        )
        .await;
    assert_eq!(served.text(), "after the fault");
    assert_eq!(served.terminals, 1);
    assert_eq!(health(&own_relay).0, 200, "healthy again");

    // A crash and a restart: nothing is ended twice or run again.
    agent.kill();
    let _agent = Daemon::start(&data, &args);
    for id in [long.id, waiting.id] {
        let after = c.collect(&id, Duration::from_secs(2), Duration::ZERO).await;
        assert_eq!(after.terminals, 0, "a second terminal after the restart");
    }
    assert_eq!(c.ask("quick still serving").await.text(), "still serving");
}
