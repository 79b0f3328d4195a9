//! Three `agentwire serve` processes sharing one fisk-ai identity (one queue group) and one JetStream
//! journal: whichever instance NATS hands a request to, the caller gets the answer one daemon would give.
//! Each check repeats its request until every instance has answered it (NATS picks a queue member at
//! random), so the path where the request reaches an instance that does not run the turn is taken.

#[path = "../../agentwire-fisk/tests/worker/caller.rs"]
mod caller;
mod common;

use agentwire_fisk::wire::nats;
use agentwire_testkit::NatsServer;
use caller::{check_set, code, header, tag, token, with, Caller, Msg, SET_TIMEOUT};
use common::Daemon;
use serde_json::json;
use std::collections::HashSet;
use std::path::Path;

const INSTANCES: [&str; 3] = ["host-a", "host-b", "host-c"];
/// Requests sent before a check gives up waiting for every instance to answer one: NATS picks a queue
/// member at random, so 40 tries miss one of three instances with odds of about 1 in 10^6.
const TRIES: usize = 40;

fn serve(dir: &Path, url: &str, instance: &str) -> Daemon {
    let config = dir.join(format!("{instance}.toml"));
    std::fs::write(
        &config,
        format!(
            "[nats]\ninstance = \"{instance}\"\nworkers = 4\nelicit = true\nrequest_timeout_secs = 1\n\
             [journal]\nkind = \"jetstream\"\nurl = \"{url}\"\nstream = \"FLEET\"\nlease_secs = 2\n"
        ),
    )
    .unwrap();
    Daemon::start(
        &dir.join(instance),
        &[
            "--config",
            config.to_str().unwrap(),
            "--nats",
            url,
            "--identity",
            "fleet",
        ],
    )
}

/// The instance that sent a reply.
fn instance(m: &Msg) -> String {
    m.json["sender"]["instance"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Sends what `send` sends until every instance has answered it, checking each answer with `check`.
async fn from_every_instance<F, Fut>(what: &str, mut send: F, check: impl Fn(&[Msg]))
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Vec<Msg>>,
{
    let mut answered = HashSet::new();
    for _ in 0..TRIES {
        let set = send().await;
        check(&set);
        answered.insert(instance(&set[0]));
        if answered.len() == INSTANCES.len() {
            return;
        }
    }
    panic!("{what}: only {answered:?} answered in {TRIES} tries");
}

/// A conversation whose first turn has ended and whose second, `sleep <ms>`, runs on one instance:
/// its token, the running request's tag, its open reply set and its ack.
async fn a_conversation_running_a_long_turn(
    c: &Caller,
    ms: u64,
) -> (String, String, caller::Pending, Msg) {
    let first = tag("first");
    let set = c.prompt(&first, "calc 2+3", json!({})).await;
    assert_eq!(check_set(&set, &first).json["text"], "5");
    let t = token(&set);
    let long = tag("long");
    let body = with(
        header("request.prompt", &long),
        json!({ "prompt": format!("sleep {ms}"), "conversation_token": t }),
    );
    let mut running = c.open(nats::task_subject("fleet"), &body).await;
    let ack = running
        .until(|m| m.protocol() == "io.choria.fisk-ai.v1.ack")
        .await;
    assert_eq!(ack.json["accepted"], true, "{ack:?}");
    (t, long, running, ack)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_answer_one_conversation_as_one_daemon_would() {
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start_jetstream(&dir.path().join("js"));
    let _fleet: Vec<Daemon> = INSTANCES
        .iter()
        .map(|i| serve(dir.path(), &nats.url, i))
        .collect();
    let caller = Caller::connect(&nats.url, "fleet").await;
    let c = &caller;
    // A long turn of a conversation runs on one instance.
    let (t, long, mut running, _) = a_conversation_running_a_long_turn(c, 12000).await;
    running
        .until(|m| m.protocol() == "io.choria.fisk-ai.v1.event.text")
        .await;

    // Another turn of it is refused by every instance, not only the one running it.
    from_every_instance(
        "conversation_busy",
        || {
            let (r, extra) = (tag("next"), json!({ "conversation_token": t }));
            async move { c.prompt(&r, "and then", extra).await }
        },
        |set| assert_eq!(code(set), "conversation_busy", "{set:#?}"),
    )
    .await;
    // A resend of the running request is a duplicate on every instance, and runs nowhere again.
    from_every_instance(
        "duplicate_request",
        || {
            let (r, extra) = (long.clone(), json!({ "conversation_token": t }));
            async move { c.prompt(&r, "sleep 12000", extra).await }
        },
        |set| assert_eq!(code(set), "duplicate_request", "{set:#?}"),
    )
    .await;

    // The cancel reaches the instance that runs it: the turn parks, suspended.
    let cancelled = c.cancel(&long).await;
    assert_eq!(cancelled[0].json["accepted"], true, "{cancelled:#?}");
    let parked = running.finish().await;
    check_set(&parked, &long);
    assert_eq!(code(&parked), "suspended");
    let runner = instance(&parked[0]);

    // Resent now, every instance answers it from the shared journal with the same terminal.
    from_every_instance(
        "a resend of the ended request",
        || {
            let (r, extra) = (long.clone(), json!({ "conversation_token": t }));
            async move { c.prompt(&r, "sleep 12000", extra).await }
        },
        |set| {
            check_set(set, &long);
            assert_eq!(code(set), "suspended", "{set:#?}");
            assert_eq!(
                set.last().unwrap().json["message"],
                parked.last().unwrap().json["message"]
            );
        },
    )
    .await;

    // The conversation takes its next turns anywhere, each with the whole conversation behind it.
    let resume = tag("resume");
    let resumed = c
        .task(&with(
            header("request.resume", &resume),
            json!({ "conversation_token": t }),
        ))
        .await;
    assert_eq!(
        check_set(&resumed, &resume).json["text"],
        "slept 12000 ms",
        "{resumed:#?}"
    );
    let mut served = HashSet::from([runner]);
    let mut sent = vec!["calc 2+3".to_string(), "sleep 12000".to_string()];
    for n in 0..TRIES {
        let r = tag("more");
        sent.push(format!("echo {n}"));
        let set = c
            .prompt(
                &r,
                &sent[sent.len() - 1],
                json!({ "conversation_token": t }),
            )
            .await;
        check_set(&set, &r);
        served.insert(instance(&set[0]));
        if served.len() == INSTANCES.len() {
            break;
        }
    }
    assert_eq!(served.len(), INSTANCES.len(), "turns served by {served:?}");
    from_every_instance(
        "read",
        || {
            let r = tag("read");
            let body = with(
                header("request.read", &r),
                json!({ "conversation_token": t, "replay": 200 }),
            );
            async move { c.task(&body).await }
        },
        |set| {
            let prompts: Vec<&str> = set
                .iter()
                .filter(|m| m.protocol() == "io.choria.fisk-ai.v1.event.prompt")
                .filter_map(|m| m.json["block"]["text"].as_str())
                .collect();
            // Whole turns, newest kept when the read is capped (the long turn's ticks are many blocks):
            // the newest of the prompts sent, in order, whichever instances ran them.
            assert!(prompts.len() >= 2, "{set:#?}");
            assert_eq!(prompts, sent[sent.len() - prompts.len()..], "{set:#?}");
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_are_answered_live_or_later_whichever_instance_takes_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start_jetstream(&dir.path().join("js"));
    let _fleet: Vec<Daemon> = INSTANCES
        .iter()
        .map(|i| serve(dir.path(), &nats.url, i))
        .collect();
    let c = Caller::connect(&nats.url, "fleet").await;
    // A question answered while it is open reaches the instance that asked, as a cancel does; the
    // standing approval it gives is in the shared journal, so no instance asks again.
    let r = tag("ap");
    let mut run = c.open_prompt(&r, "approve make deploy").await;
    let asked_msg = run.until(|m| m.protocol().contains("elicit.request")).await;
    let (asked, q) = (instance(&asked_msg), asked_msg.json);
    c.elicit(
        &r,
        "elicit.reply.approve",
        q["question_id"].as_str().unwrap(),
        json!({"choice": "always"}),
    )
    .await;
    let set = run.finish().await;
    assert_eq!(check_set(&set, &r).json["text"], "ran make deploy");
    let t = token(&set);
    let mut served = HashSet::from([asked]);
    for _ in 0..TRIES {
        let r = tag("again");
        let again = c
            .prompt(
                &r,
                "approve make deploy",
                json!({ "conversation_token": t }),
            )
            .await;
        assert_eq!(check_set(&again, &r).json["text"], "ran make deploy");
        assert!(
            again.iter().all(|m| !m.protocol().contains("elicit")),
            "asked again: {again:#?}"
        );
        served.insert(instance(&again[0]));
        if served.len() == INSTANCES.len() {
            break;
        }
    }
    assert_eq!(served.len(), INSTANCES.len(), "served by {served:?}");
    for _ in 0..TRIES {
        // Nobody holds the question open, so the run parks with the call deferred.
        let r = tag("ap");
        let set = c.prompt(&r, "approve rm -rf /", json!({})).await;
        assert_eq!(code(&set), "suspended", "{set:#?}");
        let asked = instance(&set[0]);
        let q = set
            .iter()
            .find(|m| m.protocol().contains("elicit.request.approve"))
            .expect("the approval was asked")
            .json
            .clone();
        let t = token(&set);
        let ra = tag("answer");
        let answered = c
            .task(&with(
                header("request.answer", &ra),
                json!({ "conversation_token": t, "answer": {
                    "tool_use_id": q["tool_use_id"], "kind": "approve", "answer": "choice",
                    "choice": "no" } }),
            ))
            .await;
        assert_eq!(check_set(&answered, &ra).json["text"], "declined");
        if instance(&answered[0]) != asked {
            return;
        }
    }
    panic!("no answer reached another instance in {TRIES} tries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_kill_9_of_the_runner_the_conversation_waits_out_its_lease_then_goes_on_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start_jetstream(&dir.path().join("js"));
    let mut fleet: Vec<Daemon> = INSTANCES[..2]
        .iter()
        .map(|i| serve(dir.path(), &nats.url, i))
        .collect();
    let caller = Caller::connect(&nats.url, "fleet").await;
    let (t, long, _running, ack) = a_conversation_running_a_long_turn(&caller, 60000).await;
    let c = &caller;
    let runner = instance(&ack);
    let at = INSTANCES.iter().position(|i| *i == runner).unwrap();
    let survivor = INSTANCES[1 - at];
    fleet[at].kill();

    // Until the survivor ends the dead instance's turn (a lease after the kill, then its sweep), the
    // conversation is busy; then the next turn runs there, after the first two.
    let mut deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(15);
    let (mut refused, mut lost) = (0, 0);
    let served = loop {
        let r = tag("after");
        let set = c
            .prompt(&r, "and after", json!({ "conversation_token": t }))
            .await;
        // The first request after the kill may reach the dead instance's subscription before the NATS
        // server has seen its connection close (more likely on a loaded machine): it is lost with it, and
        // the caller asks again after its timeout, as a fisk-ai caller does. Only that one may be lost.
        if set.is_empty() {
            assert!(
                refused == 0 && lost == 0,
                "a request after the first went unanswered"
            );
            lost += 1;
            deadline += SET_TIMEOUT;
            continue;
        }
        if set.last().unwrap().protocol() == "io.choria.fisk-ai.v1.error" {
            assert_eq!(code(&set), "conversation_busy", "{set:#?}");
            refused += 1;
            assert!(
                tokio::time::Instant::now() < deadline,
                "the conversation never went on"
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            continue;
        }
        break set;
    };
    assert!(
        refused > 0,
        "the dead instance's turn held the conversation"
    );
    assert_eq!(instance(&served[0]), survivor);
    assert_eq!(
        served.last().unwrap().json["text"],
        "You said: and after",
        "{served:#?}"
    );
    // The cut-off turn has the one terminal a crash gives, and a resend is answered with it.
    let resent = c
        .prompt(&long, "sleep 60000", json!({ "conversation_token": t }))
        .await;
    check_set(&resent, &long);
    assert_eq!(code(&resent), "canceled", "{resent:#?}");
}
