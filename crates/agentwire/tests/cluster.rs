//! Two `agentwire serve` instances on a three-node NATS cluster, the journal in R3 buckets, and one node
//! killed while turns run: every turn a caller was told was accepted ends with one terminal, and none
//! runs twice. The agent is a command that appends each prompt it runs to a file, so a second run of a
//! turn would show there.

#[path = "../../agentwire-fisk/tests/worker/caller.rs"]
mod caller;
mod common;

use agentwire_testkit::NatsCluster;
use caller::{tag, token, Caller, Msg};
use common::Daemon;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

/// Turns sent; the node dies after a third of them.
const TURNS: usize = 30;
/// How long a caller keeps sending one request before the test gives up on it: a request sent while the
/// cluster elects new leaders may be refused (`capacity`), find nobody, or find its run still holding
/// its outcome back until the journal writes again (`duplicate_request`), and is sent again. An election
/// takes seconds.
const ANSWER_WITHIN: Duration = Duration::from_secs(60);

fn serve(dir: &Path, servers: &str, instance: &str, log: &Path) -> Daemon {
    let config = dir.join(format!("{instance}.toml"));
    std::fs::write(
        &config,
        format!(
            "[nats]\ninstance = \"{instance}\"\nworkers = 8\n\
             [journal]\nkind = \"jetstream\"\nstream = \"CLUSTER\"\nreplicas = 3\nlease_secs = 5\n\
             [agents.tally]\nkind = \"cmd\"\n\
             command = [\"sh\", \"-c\", \"read p; echo \\\"$p\\\" >> {}; echo \\\"$p\\\"\"]\n",
            log.display()
        ),
    )
    .unwrap();
    Daemon::start(
        &dir.join(instance),
        &[
            "--config",
            config.to_str().unwrap(),
            "--agent",
            "tally",
            "--nats",
            servers,
            "--identity",
            "tally",
        ],
    )
}

/// Waits until the cluster's JetStream answers (it has elected its leader).
async fn jetstream_up(url: &str) {
    let client = async_nats::connect(url).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let deadline = tokio::time::Instant::now() + NatsCluster::ready_timeout();
    while js.query_account().await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "JetStream did not come up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The terminal of a set, if it has one.
fn terminal(set: &[Msg]) -> Option<&Msg> {
    set.last()
        .filter(|m| m.service_error.is_none() && m.last)
        .filter(|m| m.protocol().ends_with(".result") || m.protocol().ends_with(".error"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_while_turns_run_loses_no_accepted_turn_and_runs_none_twice() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = NatsCluster::start(3, &dir.path().join("nats"));
    jetstream_up(&cluster.urls[0]).await;
    let log = dir.path().join("runs.log");
    // One instance on the node that dies first in its list, the other on a node that stays.
    let reversed: Vec<String> = cluster.urls.iter().rev().cloned().collect();
    let _a = serve(dir.path(), &cluster.url_list(), "host-a", &log);
    let _b = serve(dir.path(), &reversed.join(","), "host-b", &log);
    let c = Caller::connect(&cluster.urls[0], "tally").await;

    let mut sends = 0;
    for n in 0..TURNS {
        if n == TURNS / 3 {
            cluster.kill(2);
        }
        let r = tag("turn");
        let prompt = format!("turn-{n}");
        let (text, t) = answered(&c, &r, &prompt, json!({}), &mut sends).await;
        assert_eq!(text.trim(), prompt);
        // Sent again in its conversation: answered from the journal, not run again. While leaders
        // move, the resend may be refused before acceptance as the first send was; never run again.
        let (again, _) = answered(
            &c,
            &r,
            &prompt,
            json!({ "conversation_token": t }),
            &mut sends,
        )
        .await;
        assert_eq!(again, text);
    }
    let runs = std::fs::read_to_string(&log).unwrap();
    for n in 0..TURNS {
        let times = runs.lines().filter(|l| *l == format!("turn-{n}")).count();
        assert_eq!(times, 1, "turn-{n} ran {times} times:\n{runs}");
    }
    eprintln!("{TURNS} turns in {sends} sends, across a node kill");
}

/// Conversations of two turns each on the two instances; a node dies after the first third.
const CONVERSATIONS: usize = 9;
/// Copies of a resend sent at once, right after a terminal: NATS hands them to both instances.
const RESENDS_AT_ONCE: usize = 4;

/// Sends `prompt` as request `r` (with `extra`) until it is answered with a result, as a caller does
/// while leaders move (a send refused before acceptance ran nothing and is sent again shortly): its
/// text and token. Counts each send in `sends`.
async fn answered(
    c: &Caller,
    r: &str,
    prompt: &str,
    extra: serde_json::Value,
    sends: &mut usize,
) -> (String, String) {
    let deadline = tokio::time::Instant::now() + ANSWER_WITHIN;
    while tokio::time::Instant::now() < deadline {
        *sends += 1;
        let set = c.prompt(r, prompt, extra.clone()).await;
        match terminal(&set) {
            Some(t) if t.protocol().ends_with(".result") => {
                return (
                    t.json["text"].as_str().unwrap_or_default().to_string(),
                    token(&set),
                )
            }
            Some(t) => {
                let code = t.json["code"].as_str().unwrap_or_default();
                assert!(
                    ["capacity", "duplicate_request"].contains(&code),
                    "{r}: {set:#?}"
                );
            }
            None => {}
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{r} never answered");
}

/// Resends each `(request, prompt, text)` of the conversation of `token` several times at once, and again
/// until both instances have answered: every copy gets the journaled terminal, never `duplicate_request`
/// or `conversation_busy` (a `capacity` refusal while the journal elects a leader is sent again). Returns
/// the instances that answered.
async fn resends_get_the_terminal(
    c: &Caller,
    token: &str,
    turns: &[(String, String, String)],
) -> std::collections::HashSet<String> {
    let mut seen = std::collections::HashSet::new();
    for _ in 0..10 {
        let sends = turns.iter().flat_map(|(r, prompt, text)| {
            (0..RESENDS_AT_ONCE).map(move |_| async move {
                let set = c
                    .prompt(r, prompt, json!({ "conversation_token": token }))
                    .await;
                (set, text)
            })
        });
        for (set, text) in futures_util::future::join_all(sends).await {
            let end = terminal(&set).unwrap_or_else(|| panic!("no terminal: {set:#?}"));
            // While leaders move, the journal may not answer for a moment: the resend is then refused
            // before acceptance (`capacity`, sent again by a caller), never run or refused as busy.
            if end.protocol().ends_with(".error") && end.json["code"] == json!("capacity") {
                continue;
            }
            assert!(
                end.protocol().ends_with(".result") && end.json["text"] == json!(text),
                "a resend of a finished turn gets its journaled terminal: {set:#?}"
            );
            seen.insert(
                set[0].json["sender"]["instance"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
        }
        if seen.len() == 2 {
            break;
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resends_of_finished_turns_get_their_terminal_from_every_instance_across_a_node_kill() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = NatsCluster::start(3, &dir.path().join("nats"));
    jetstream_up(&cluster.urls[0]).await;
    let log = dir.path().join("runs.log");
    let reversed: Vec<String> = cluster.urls.iter().rev().cloned().collect();
    let _a = serve(dir.path(), &cluster.url_list(), "aw-a", &log);
    let _b = serve(dir.path(), &reversed.join(","), "aw-b", &log);
    let c = Caller::connect(&cluster.urls[0], "tally").await;
    let mut instances = std::collections::HashSet::new();
    for n in 0..CONVERSATIONS {
        if n == CONVERSATIONS / 3 {
            cluster.kill(2);
        }
        let (r1, p1) = (tag("one"), format!("conv-{n}-one"));
        let (text1, t) = answered(&c, &r1, &p1, json!({}), &mut 0).await;
        let first = (r1, p1, text1);
        instances.extend(resends_get_the_terminal(&c, &t, std::slice::from_ref(&first)).await);
        let (r2, p2) = (tag("two"), format!("conv-{n}-two"));
        let (text2, _) = answered(&c, &r2, &p2, json!({ "conversation_token": t }), &mut 0).await;
        let both = [first, (r2, p2, text2)];
        instances.extend(resends_get_the_terminal(&c, &t, &both).await);
    }
    assert_eq!(
        instances.len(),
        2,
        "both instances answered resends: {instances:?}"
    );
    let runs = std::fs::read_to_string(&log).unwrap();
    for n in 0..CONVERSATIONS {
        for turn in ["one", "two"] {
            let times = runs
                .lines()
                .filter(|l| *l == format!("conv-{n}-{turn}"))
                .count();
            assert_eq!(times, 1, "conv-{n}-{turn} ran {times} times:\n{runs}");
        }
    }
}
