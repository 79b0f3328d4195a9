//! A terminal agent (`protocol = false`) under `agentwire serve`: it runs in a pseudo-terminal, its row is
//! the terminal's last line, its task and replies are typed into it (the text, then Enter), another
//! session's message is refused (it would be typed as the agent's input), the terminal outlives a daemon killed mid-run (a reply after the
//! restart is typed into the same terminal), a reply sent again with its request id is typed once, and a
//! stop ends the agent and its terminal's holder. `output.log` keeps the transcript.

mod common;

use common::{json_of as json, roost_jobs as jobs, Daemon};
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// A terminal agent: says whether it has a terminal, its pid, then answers each line typed to it.
const AGENT: &str = r#"echo $$ > agent.pid
if [ -t 0 ] && [ -t 1 ]; then echo "on a terminal"; else echo "not on a terminal"; fi
while read line; do echo "heard: $line"; done"#;

fn config(dir: &Path) -> String {
    let cfg = dir.join("agentwire.toml");
    std::fs::write(
        &cfg,
        format!(
            "[roost.profiles.term]\ncommand = [\"sh\", \"-c\", {}]\ntask = \"type\"\nprotocol = false\n",
            serde_json::to_string(AGENT).unwrap()
        ),
    )
    .unwrap();
    cfg.to_str().unwrap().to_string()
}

/// Job `id`'s row once `pred` holds for it (within 15 s).
fn row_when(socket: &str, id: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let rows = json(&jobs(socket, &["ls"]));
        let row = rows["rows"]
            .as_array()
            .and_then(|r| r.iter().find(|r| r["id"] == id).cloned())
            .unwrap_or(Value::Null);
        if pred(&row) {
            return row;
        }
        assert!(Instant::now() < deadline, "{what}: {row}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Whether process `pid` runs (a zombie does not).
fn runs(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.split_whitespace().next() != Some("Z"))
        })
        .unwrap_or(false)
}

/// The parent of process `pid`.
fn parent(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let (_, rest) = stat.rsplit_once(')').unwrap();
    rest.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn a_terminal_agent_is_typed_into_and_its_terminal_outlives_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let mut d = Daemon::start(dir.path(), &["--config", &cfg]);
    let socket = d.ready["roost_socket"].as_str().unwrap().to_string();

    // Its task is typed into its terminal, and its row is the terminal's last line.
    let job = json(&jobs(&socket, &["dispatch", "term", "hello there"]));
    let id = job["id"].as_str().unwrap().to_string();
    row_when(&socket, &id, "the task typed", |r| {
        r["summary"] == "heard: hello there"
    });
    let job_dir = dir.path().join("roost").join("jobs").join(&id);
    let agent: u32 = std::fs::read_to_string(job_dir.join("agent.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let holder = parent(agent);
    assert!(runs(agent) && runs(holder));

    // A reply of several lines is typed as one line of text; a resend of it (same request id) is not
    // typed again.
    for _ in 0..2 {
        json(&jobs(
            &socket,
            &[
                "reply",
                &id,
                "second line\nwith a break",
                "--request-id",
                "r-1",
            ],
        ));
    }
    row_when(&socket, &id, "the reply typed", |r| {
        r["summary"] == "heard: second line with a break"
    });

    // Another session's message is refused: typed into a terminal, it would be the agent's input (a
    // shell would run it). Nothing is typed.
    let refused = jobs(
        &socket,
        &["send", &id, "ping; touch owned", "--as", "tester"],
    );
    assert_eq!(refused.status.code(), Some(1));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("unsupported") && said.contains("terminal agent"),
        "{said}"
    );

    // The daemon dies; the agent and its terminal do not, and the next daemon types into the same one.
    d.kill();
    assert!(runs(agent) && runs(holder), "the job outlives the daemon");
    let d = Daemon::start(dir.path(), &["--config", &cfg]);
    let socket = d.ready["roost_socket"].as_str().unwrap().to_string();
    json(&jobs(&socket, &["reply", &id, "after the restart"]));
    let row = row_when(&socket, &id, "typed after the restart", |r| {
        r["summary"] == "heard: after the restart"
    });
    // Still the job that ran before the restart (re-adopted, not started again); a terminal agent never
    // reports, so its state is the one before a first report.
    assert_eq!(row["state"], "starting", "{row}");
    assert_eq!(
        std::fs::read_to_string(job_dir.join("agent.pid"))
            .unwrap()
            .trim(),
        agent.to_string()
    );
    assert_eq!(row["pending"], 0, "every reply typed and acked: {row}");

    // The transcript: the agent saw a terminal, and each typed line is there once.
    let transcript = std::fs::read_to_string(job_dir.join("output.log")).unwrap();
    assert!(transcript.contains("on a terminal"), "{transcript}");
    assert!(!transcript.contains("not on a terminal"), "{transcript}");
    assert!(!transcript.contains("ping"), "{transcript}");
    assert!(!job_dir.join("owned").exists());
    for line in [
        "heard: hello there",
        "heard: second line with a break",
        "heard: after the restart",
    ] {
        assert_eq!(transcript.matches(line).count(), 1, "{line}: {transcript}");
    }

    // A stop ends the agent and its holder.
    json(&jobs(&socket, &["stop", &id]));
    let deadline = Instant::now() + Duration::from_secs(15);
    while runs(agent) || runs(holder) {
        assert!(Instant::now() < deadline, "still running after the stop");
        std::thread::sleep(Duration::from_millis(100));
    }
    row_when(&socket, &id, "stopped", |r| r["state"] == "stopped");
}

/// A profile with a `user` (run by a root daemon) is a terminal agent whose agent runs as that user, while
/// its terminal's holder stays the daemon's: the agent is typed into all the same.
#[test]
fn a_terminal_agent_of_another_user_runs_as_that_user_and_is_typed_into() {
    use std::os::unix::fs::MetadataExt;
    if std::fs::metadata("/proc/self").unwrap().uid() != 0 {
        eprintln!("skipped: a profile with a user needs a daemon running as root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agentwire.toml");
    let agent = r#"echo "uid=$(id -u) gid=$(id -g) groups=$(id -G) user=$USER"; while read line; do echo "$(id -u) heard: $line"; done"#;
    std::fs::write(
        &cfg,
        format!(
            "[roost.profiles.sandboxed]\ncommand = [\"sh\", \"-c\", {}]\ntask = \"type\"\nuser = \"nobody\"\n",
            serde_json::to_string(agent).unwrap()
        ),
    )
    .unwrap();
    let d = Daemon::start(dir.path(), &["--config", cfg.to_str().unwrap()]);
    let socket = d.ready["roost_socket"].as_str().unwrap().to_string();
    let job = json(&jobs(&socket, &["dispatch", "sandboxed", "first"]));
    let id = job["id"].as_str().unwrap().to_string();
    row_when(&socket, &id, "typed as nobody", |r| {
        r["summary"] == "65534 heard: first"
    });
    let transcript =
        std::fs::read_to_string(dir.path().join("roost/jobs").join(&id).join("output.log"))
            .unwrap();
    assert!(
        transcript.contains("uid=65534 gid=65534 groups=65534 user=nobody"),
        "{transcript}"
    );
    json(&jobs(&socket, &["stop", &id]));
    row_when(&socket, &id, "stopped", |r| r["state"] == "stopped");
}
