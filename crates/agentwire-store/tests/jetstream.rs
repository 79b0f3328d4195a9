//! The JetStream journal against a real `nats-server` with JetStream on: the journal conformance suite,
//! unchanged, each check under a fresh bucket prefix; a reopen is a new connection to the same buckets.

use agentwire_store::conformance::{self, Opener};
use agentwire_store::jetstream::{JetStreamConfig, JetStreamJournal, DEFAULT_LEASE};
use agentwire_store::Journal;
use agentwire_testkit::{NatsCluster, NatsServer};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

async fn open(url: &str, prefix: &str) -> Arc<dyn Journal> {
    let client = async_nats::connect(url).await.expect("nats reachable");
    let config = JetStreamConfig {
        prefix: prefix.to_string(),
        replicas: 1,
        lease: DEFAULT_LEASE,
    };
    Arc::new(
        JetStreamJournal::open(client, &config)
            .await
            .expect("the buckets open"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetstream_passes_the_conformance_suite() {
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start_jetstream(dir.path());
    let url = nats.url.clone();
    let n = AtomicUsize::new(0);
    conformance::run_all(|| {
        let prefix = format!("T{}", n.fetch_add(1, Ordering::SeqCst));
        let url = url.clone();
        // The suite opens synchronously (as a daemon does at start); the connection is made on this
        // runtime.
        Arc::new(move || {
            tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(open(&url, &prefix))
            })
        }) as Opener
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_accept_a_request_once_and_the_first_outcome_wins() {
    use agentwire_store::{Accepted, Finish, StoreError};
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start_jetstream(dir.path());
    // Two instances: two connections to the same buckets, each journaling under its own owner.
    let a = open(&nats.url, "SHARED").await;
    let b = open(&nats.url, "SHARED").await;
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (j, owner) = match i % 2 {
            0 => (a.clone(), "host-a"),
            _ => (b.clone(), "host-b"),
        };
        tasks.push(tokio::spawn(async move {
            let mut t = conformance::turn(7);
            t.owner = owner.into();
            (owner, j.accept(t).await.unwrap())
        }));
    }
    let mut winners = Vec::new();
    for t in tasks {
        let (owner, accepted) = t.await.unwrap();
        if accepted == Accepted::New {
            winners.push(owner);
        }
    }
    assert_eq!(
        winners.len(),
        1,
        "one request is taken once across instances"
    );
    let owner = winners[0];
    let id = conformance::turn(7).request_id;
    let stored = a.lookup(id.clone()).await.unwrap().unwrap();
    assert_eq!(stored.owner, owner, "the record is the winner's");
    // Only the owner's recovery sees it.
    let other = if owner == "host-a" {
        "host-b"
    } else {
        "host-a"
    };
    assert_eq!(a.interrupted(owner.into()).await.unwrap().len(), 1);
    assert!(b.interrupted(other.into()).await.unwrap().is_empty());
    // Both instances end it at once: one outcome wins, the other is told so.
    let outcome = |text: &str| conformance::result(text, Default::default());
    let (fa, fb) = tokio::join!(
        a.finish(Finish::new(id.clone(), outcome("from a"), 1)),
        b.finish(Finish::new(id.clone(), outcome("from b"), 1)),
    );
    let won = match (&fa, &fb) {
        (Ok(()), Err(StoreError::AlreadyEnded(_))) => "from a",
        (Err(StoreError::AlreadyEnded(_)), Ok(())) => "from b",
        other => panic!("expected one outcome to win: {other:?}"),
    };
    let stored = b.lookup(id).await.unwrap().unwrap();
    assert_eq!(stored.outcome, Some(outcome(won)));
    assert!(a.interrupted(owner.into()).await.unwrap().is_empty());
}

/// Connects to every node of `cluster` (the client moves to another when its node dies) and waits until
/// JetStream answers (the cluster has elected its leader).
async fn cluster_client(cluster: &NatsCluster) -> async_nats::Client {
    let addrs: Vec<async_nats::ServerAddr> =
        cluster.urls.iter().map(|u| u.parse().unwrap()).collect();
    let client = async_nats::ConnectOptions::new()
        .connect(addrs)
        .await
        .expect("the cluster is reachable");
    let js = async_nats::jetstream::new(client.clone());
    let deadline = tokio::time::Instant::now() + NatsCluster::ready_timeout();
    while js.query_account().await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "JetStream did not come up"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_three_node_cluster_r3_passes_the_suite_and_a_killed_node_loses_no_accepted_turn() {
    use agentwire_store::{Accepted, NewTurn};
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = NatsCluster::start(3, dir.path());
    let client = cluster_client(&cluster).await;
    let config = |prefix: &str| JetStreamConfig {
        prefix: prefix.to_string(),
        replicas: 3,
        lease: DEFAULT_LEASE,
    };
    let n = AtomicUsize::new(0);
    let suite_client = client.clone();
    conformance::run_all(|| {
        let prefix = format!("R{}", n.fetch_add(1, Ordering::SeqCst));
        let client = suite_client.clone();
        let config = config(&prefix);
        Arc::new(move || {
            tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(async {
                    Arc::new(
                        JetStreamJournal::open(client.clone(), &config)
                            .await
                            .unwrap(),
                    ) as Arc<dyn Journal>
                })
            })
        }) as Opener
    })
    .await;

    // Turns accepted while a node dies: every accept the journal acknowledged is there afterwards, once.
    let journal = Arc::new(
        JetStreamJournal::open(client.clone(), &config("KILL"))
            .await
            .unwrap(),
    );
    let turn = |i: u32| NewTurn {
        request_id: agentwire_core::RequestId::new(format!("kill:{i}")).unwrap(),
        ..conformance::turn(i)
    };
    let mut acknowledged = Vec::new();
    let mut refused = 0;
    for i in 0..60u32 {
        if i == 20 {
            // The node the client is on, so the client has to move too.
            let port = client.server_info().port;
            let at = cluster
                .urls
                .iter()
                .position(|u| u.ends_with(&format!(":{port}")))
                .unwrap();
            cluster.kill(at);
        }
        // As the engine does: a write the journal could not make is tried again.
        let mut tries = 0;
        loop {
            match journal.accept(turn(i)).await {
                Ok(Accepted::New) => {
                    acknowledged.push(i);
                    break;
                }
                Ok(Accepted::Existing(_)) => {
                    // A retry of a write that had committed before its answer was lost.
                    acknowledged.push(i);
                    break;
                }
                Err(e) if e.is_unwritable() && tries < 100 => {
                    refused += 1;
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(e) => panic!("turn {i}: {e}"),
            }
        }
    }
    assert_eq!(acknowledged.len(), 60, "every turn was taken in the end");
    let reopened = JetStreamJournal::open(client.clone(), &config("KILL"))
        .await
        .unwrap();
    for i in &acknowledged {
        assert!(
            reopened
                .lookup(turn(*i).request_id)
                .await
                .unwrap()
                .is_some(),
            "acknowledged turn {i} is in the journal"
        );
    }
    let view = reopened
        .conversation(conformance::turn(0).conversation_id, false)
        .await
        .unwrap();
    assert_eq!(view.turns.len(), 60, "each turn once in its conversation");
    eprintln!("writes refused while the node was down: {refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_whose_instance_stops_renewing_is_abandoned_after_its_lease_and_not_before() {
    use agentwire_store::Finish;
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start_jetstream(dir.path());
    let lease = std::time::Duration::from_secs(2);
    let open_leased = |url: String| async move {
        let client = async_nats::connect(&url).await.unwrap();
        let config = JetStreamConfig {
            prefix: "LEASED".into(),
            replicas: 1,
            lease,
        };
        Arc::new(JetStreamJournal::open(client, &config).await.unwrap()) as Arc<dyn Journal>
    };
    let a = open_leased(nats.url.clone()).await;
    let b = open_leased(nats.url.clone()).await;
    let mut mine = conformance::turn(1);
    mine.owner = "host-a".into();
    let mut theirs = conformance::turn(2);
    theirs.owner = "host-b".into();
    a.accept(mine.clone()).await.unwrap();
    b.accept(theirs.clone()).await.unwrap();
    // Both instances renew: past a whole lease, nothing is abandoned.
    tokio::time::sleep(lease + lease / 2).await;
    assert!(
        b.abandoned().await.unwrap().is_empty(),
        "renewed leases hold"
    );
    // Instance a stops (as a crash): once its lease has run out, its turn is abandoned, and only its.
    a.halt();
    tokio::time::sleep(lease + lease / 2).await;
    let gone: Vec<String> = b
        .abandoned()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.request_id.to_string())
        .collect();
    assert_eq!(gone, vec![mine.request_id.to_string()]);
    // Another instance ends it; then it is abandoned no more.
    let ended = conformance::result("ended elsewhere", Default::default());
    b.finish(Finish::new(mine.request_id.clone(), ended, 1))
        .await
        .unwrap();
    assert!(b.abandoned().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_runs_one_turn_at_a_time_across_instances() {
    use agentwire_store::{Claim, Finish};
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start_jetstream(dir.path());
    // Two seconds: the holders' renewals (every third of it) outlast a loaded machine's pauses.
    let lease = std::time::Duration::from_secs(2);
    let open_leased = |url: String| async move {
        let client = async_nats::connect(&url).await.unwrap();
        let config = JetStreamConfig {
            prefix: "CLAIMS".into(),
            replicas: 1,
            lease,
        };
        Arc::new(JetStreamJournal::open(client, &config).await.unwrap()) as Arc<dyn Journal>
    };
    let a = open_leased(nats.url.clone()).await;
    let b = open_leased(nats.url.clone()).await;
    let conv = conformance::turn(0).conversation_id;
    let id = |n: u32| conformance::turn(n).request_id;

    // Racing claims of one conversation from both instances: exactly one turn holds it.
    let mut racing = Vec::new();
    for n in 1..=8u32 {
        let j = if n % 2 == 0 { a.clone() } else { b.clone() };
        let conv = conv.clone();
        racing.push(tokio::spawn(async move {
            (n, j.claim(conv, id(n)).await.unwrap())
        }));
    }
    let mut taken = Vec::new();
    for r in racing {
        let (n, claim) = r.await.unwrap();
        if claim == Claim::Taken {
            taken.push(n);
        }
    }
    assert_eq!(taken.len(), 1, "one holder: {taken:?}");
    let holder = taken[0];
    // The holder claims again: still its. Another is told which turn runs, while the holder's record is
    // not written yet (its lease is) and once it is.
    assert_eq!(
        a.claim(conv.clone(), id(holder)).await.unwrap(),
        Claim::Taken
    );
    assert_eq!(
        b.claim(conv.clone(), id(20)).await.unwrap(),
        Claim::Busy(id(holder))
    );
    a.accept(conformance::turn(holder)).await.unwrap();
    assert_eq!(
        b.claim(conv.clone(), id(20)).await.unwrap(),
        Claim::Busy(id(holder))
    );
    // Its outcome frees the conversation for the next turn, on the other instance.
    let done = conformance::result("done", Default::default());
    a.finish(Finish::new(id(holder), done, 1)).await.unwrap();
    assert_eq!(b.claim(conv.clone(), id(20)).await.unwrap(), Claim::Taken);
    assert_eq!(
        a.claim(conv.clone(), id(21)).await.unwrap(),
        Claim::Busy(id(20))
    );
    // A claim whose turn was never written frees the conversation once its instance has died and the
    // lease that instance renewed meanwhile is gone, and not before.
    b.halt();
    let deadline = tokio::time::Instant::now() + lease * 6;
    loop {
        match a.claim(conv.clone(), id(21)).await.unwrap() {
            Claim::Taken => break,
            Claim::Busy(h) => assert_eq!(h, id(20)),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the dead claim never freed the conversation"
        );
        tokio::time::sleep(lease / 5).await;
    }
    // A turn whose instance died holds its conversation until another instance ends it; a resend of it
    // claiming again does not give it its lease back, so the sweep still finds it.
    a.accept(conformance::turn(21)).await.unwrap();
    a.halt();
    let c = open_leased(nats.url.clone()).await;
    tokio::time::sleep(lease * 3).await;
    assert_eq!(c.claim(conv.clone(), id(21)).await.unwrap(), Claim::Taken);
    assert_eq!(
        c.claim(conv.clone(), id(23)).await.unwrap(),
        Claim::Busy(id(21))
    );
    tokio::time::sleep(lease * 3).await;
    let abandoned: Vec<_> = c
        .abandoned()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.request_id)
        .collect();
    assert_eq!(abandoned, vec![id(21)], "no lease was revived");
    let ended = conformance::result("ended elsewhere", Default::default());
    c.finish(Finish::new(id(21), ended, 1)).await.unwrap();
    assert_eq!(c.claim(conv.clone(), id(23)).await.unwrap(), Claim::Taken);
    // Another conversation is not held by any of this.
    let other = agentwire_core::ConversationId::new("other").unwrap();
    assert_eq!(c.claim(other, id(22)).await.unwrap(), Claim::Taken);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_record_in_the_buckets_is_a_typed_error_and_harms_no_other_turn() {
    use agentwire_store::StoreError;
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start_jetstream(dir.path());
    let journal = open(&nats.url, "BROKEN").await;
    journal.accept(conformance::turn(1)).await.unwrap();
    journal.accept(conformance::turn(2)).await.unwrap();
    // Someone with access to the stream overwrites turn 2's record with bytes that are no record.
    let client = async_nats::connect(&nats.url).await.unwrap();
    let kv = async_nats::jetstream::new(client)
        .get_key_value("BROKEN_TURNS")
        .await
        .unwrap();
    let hex = agentwire_store::jetstream::bucket_key(conformance::turn(2).request_id.as_str());
    kv.put(hex, "{not json".into()).await.unwrap();
    match journal.lookup(conformance::turn(2).request_id).await {
        Err(StoreError::Corrupt(_)) => {}
        other => panic!("expected a corrupt-record error, got {other:?}"),
    }
    // The other turn reads back, and its outcome is taken.
    let stored = journal
        .lookup(conformance::turn(1).request_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.input, conformance::turn(1).input);
    let done = conformance::result("fine", Default::default());
    journal
        .finish(agentwire_store::Finish::new(
            conformance::turn(1).request_id,
            done,
            1,
        ))
        .await
        .unwrap();
    // The corrupt one cannot be ended over, nor read into its conversation as if it were whole.
    let ended = journal
        .finish(agentwire_store::Finish::new(
            conformance::turn(2).request_id,
            conformance::result("over it", Default::default()),
            1,
        ))
        .await;
    assert!(matches!(ended, Err(StoreError::Corrupt(_))), "{ended:?}");
    let view = journal
        .conversation(conformance::turn(0).conversation_id, false)
        .await;
    assert!(matches!(view, Err(StoreError::Corrupt(_))), "{view:?}");
    // A conversation's claim that is not a request id is a corrupt claim, for that conversation only.
    let claims = async_nats::jetstream::new(async_nats::connect(&nats.url).await.unwrap())
        .get_key_value("BROKEN_CLAIMS")
        .await
        .unwrap();
    let conv = conformance::turn(0).conversation_id;
    let conv_key = agentwire_store::jetstream::bucket_key(conv.as_str());
    claims
        .put(&conv_key, vec![0xff, 0xfe].into())
        .await
        .unwrap();
    let claim = journal
        .claim(conv.clone(), conformance::turn(3).request_id)
        .await;
    assert!(matches!(claim, Err(StoreError::Corrupt(_))), "{claim:?}");
    // An operator deletes the bad claim: the conversation is free again (a claim is written after the
    // key's delete marker, not refused as if the claim kept moving).
    claims.delete(&conv_key).await.unwrap();
    assert_eq!(
        journal
            .claim(conv.clone(), conformance::turn(3).request_id)
            .await
            .unwrap(),
        agentwire_store::Claim::Taken
    );
    let other = agentwire_core::ConversationId::new("elsewhere").unwrap();
    assert_eq!(
        journal
            .claim(other, conformance::turn(4).request_id)
            .await
            .unwrap(),
        agentwire_store::Claim::Taken
    );
}

/// A journal of `prefix` with a `lease`, as its concrete type (for what only the JetStream journal does).
async fn open_leased(url: &str, prefix: &str, lease: std::time::Duration) -> JetStreamJournal {
    let client = async_nats::connect(url).await.expect("nats reachable");
    let config = JetStreamConfig {
        prefix: prefix.to_string(),
        replicas: 1,
        lease,
    };
    JetStreamJournal::open(client, &config)
        .await
        .expect("the buckets open")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_name_is_held_by_one_live_process_and_freed_by_its_exit_or_death() {
    use agentwire_store::jetstream::HoldError;
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start_jetstream(dir.path());
    let lease = Duration::from_secs(2);
    let a = open_leased(&nats.url, "NAMES", lease).await;
    let b = open_leased(&nats.url, "NAMES", lease).await;
    a.hold_instance("vm").await.unwrap();
    b.hold_instance("other").await.unwrap();

    // A live holder renews its name: another process cannot take it, however long it looks.
    for _ in 0..2 {
        assert_eq!(
            b.hold_instance("vm").await,
            Err(HoldError::Taken { name: "vm".into() })
        );
    }

    // A clean exit frees it at once.
    a.close().await;
    let t = Instant::now();
    b.hold_instance("vm").await.unwrap();
    assert!(
        t.elapsed() < lease / 4,
        "taken without waiting: {:?}",
        t.elapsed()
    );

    // A process that dies (stops renewing) leaves it to the next within the takeover wait.
    b.halt();
    let c = open_leased(&nats.url, "NAMES", lease).await;
    let t = Instant::now();
    c.hold_instance("vm").await.unwrap();
    assert!(
        t.elapsed() >= lease / 3,
        "a holder is given its renewal period first: {:?}",
        t.elapsed()
    );
    let d = open_leased(&nats.url, "NAMES", lease).await;
    assert!(matches!(
        d.hold_instance("vm").await,
        Err(HoldError::Taken { .. })
    ));
}

/// Retention leaves nothing behind in the buckets: after turns of many conversations are pruned, the
/// turns, members, running, claims and meta streams hold what they held before them (no delete markers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruned_turns_leave_no_messages_behind_in_the_buckets() {
    use agentwire_core::{ConversationId, RequestId};
    use agentwire_store::{conformance::result, Finish, Prune};
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start_jetstream(dir.path());
    let j = open(&nats.url, "KEEPS").await;
    let client = async_nats::connect(&nats.url).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let held = || {
        let js = js.clone();
        async move {
            let mut counts = Vec::new();
            for b in ["TURNS", "MEMBERS", "RUNNING", "CLAIMS", "META"] {
                let mut s = js.get_stream(format!("KV_KEEPS_{b}")).await.unwrap();
                counts.push((b, s.info().await.unwrap().state.messages));
            }
            counts
        }
    };
    let before = held().await;
    for n in 0..40 {
        let mut t = conformance::turn(n);
        t.conversation_id = ConversationId::new(format!("c{}", n % 8)).unwrap();
        t.input.conversation_id = t.conversation_id.clone();
        t.conversation_meta = Some(serde_json::json!({ "n": n }));
        let (conversation, id) = (t.conversation_id.clone(), t.request_id.clone());
        j.claim(conversation, id.clone()).await.unwrap();
        j.accept(t).await.unwrap();
        let done = result("done", Default::default());
        j.finish(Finish::new(id, done, 500)).await.unwrap();
    }
    assert_ne!(held().await, before, "the turns are in the buckets");
    let pass = j
        .prune(Prune {
            ended_before: 1_000,
            keep: Vec::new(),
            limit: 100,
        })
        .await
        .unwrap();
    assert_eq!((pass.forgotten, pass.more), (40, false));
    assert_eq!(held().await, before, "every bucket is back where it was");
    assert!(j
        .lookup(RequestId::new("nipxx:0").unwrap())
        .await
        .unwrap()
        .is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_is_not_removed_while_a_turn_of_it_runs_and_takes_no_turn_while_it_goes() {
    use agentwire_store::{Claim, Finish, Removed};
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start_jetstream(dir.path());
    let a = open(&nats.url, "REMOVE").await;
    let operator = open(&nats.url, "REMOVE").await;
    let t = conformance::turn(1);
    let conv = t.conversation_id.clone();
    assert_eq!(
        a.claim(conv.clone(), t.request_id.clone()).await.unwrap(),
        Claim::Taken
    );
    a.accept(t.clone()).await.unwrap();
    // The turn runs: the removal is refused, naming it, and nothing went.
    assert_eq!(
        operator.remove_conversation(conv.clone()).await.unwrap(),
        Removed::Busy(t.request_id.clone())
    );
    assert_eq!(
        a.conversation(conv.clone(), false)
            .await
            .unwrap()
            .turns
            .len(),
        1
    );
    let ended = conformance::result("done", Default::default());
    a.finish(Finish::new(t.request_id.clone(), ended, 1))
        .await
        .unwrap();
    assert_eq!(
        operator.remove_conversation(conv.clone()).await.unwrap(),
        Removed::Gone { turns: 1 }
    );
    assert!(a
        .conversation(conv.clone(), false)
        .await
        .unwrap()
        .turns
        .is_empty());
    assert!(a
        .interrupted(agentwire_store::LOCAL_OWNER.into())
        .await
        .unwrap()
        .is_empty());
    // The removal let go of its claim: the next turn of that id takes it at once.
    let next = conformance::turn(2);
    assert_eq!(a.claim(conv, next.request_id).await.unwrap(), Claim::Taken);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_first_turns_of_a_conversation_journal_one_with_its_meta() {
    use agentwire_store::{Accepted, ClaimAccepted};
    use futures_util::StreamExt;
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start_jetstream(dir.path());
    let a = open(&nats.url, "RACE").await;
    let b = open(&nats.url, "RACE").await;
    // Turns of a new conversation, each with its own meta, from two instances at once: they carry their
    // hints and meta with their claims' writes ([`Journal::claim_accept`]).
    let mut racing = Vec::new();
    for n in 1..=8u32 {
        let (j, owner) = match n % 2 {
            0 => (a.clone(), "host-a"),
            _ => (b.clone(), "host-b"),
        };
        let mut t = conformance::turn(n);
        t.owner = owner.into();
        t.conversation_meta = Some(serde_json::json!({ "turn": n }));
        racing.push(tokio::spawn(async move {
            (n, j.claim_accept(t).await.unwrap())
        }));
    }
    let mut taken = Vec::new();
    for r in racing {
        match r.await.unwrap() {
            (n, ClaimAccepted::Taken(Ok(Accepted::New))) => taken.push(n),
            (_, ClaimAccepted::Busy(_)) => {}
            (n, other) => panic!("turn {n}: {other:?}"),
        }
    }
    assert_eq!(taken.len(), 1, "one turn journaled: {taken:?}");
    let winner = taken[0];
    let conv = conformance::turn(0).conversation_id;
    // The conversation's meta is the turn's that took it, whichever meta was created first.
    assert_eq!(
        a.conversation_meta(conv.clone()).await.unwrap(),
        Some(serde_json::json!({ "turn": winner }))
    );
    let view = b.conversation(conv, false).await.unwrap();
    assert_eq!(view.turns.len(), 1);
    assert_eq!(
        view.turns[0].turn.request_id,
        conformance::turn(winner).request_id
    );
    // The refused turns' running hints are dropped (after their refusal, not awaited by it).
    let js = async_nats::jetstream::new(async_nats::connect(&nats.url).await.unwrap());
    let running = js.get_key_value("RACE_RUNNING").await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let keys: Vec<String> = running
            .keys()
            .await
            .unwrap()
            .filter_map(|k| async move { k.ok() })
            .filter(|k| futures_util::future::ready(k != "ready"))
            .collect()
            .await;
        if keys.len() == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "running hints left: {keys:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_seen_before_its_lease_is_not_taken_for_dead() {
    use agentwire_store::jetstream::bucket_key;
    use agentwire_store::{Accepted, Claim, ClaimAccepted};
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start_jetstream(dir.path());
    let j = open(&nats.url, "GRACE").await;
    let js = async_nats::jetstream::new(async_nats::connect(&nats.url).await.unwrap());
    let claims = js.get_key_value("GRACE_CLAIMS").await.unwrap();
    let leases = js.get_key_value("GRACE_LEASES").await.unwrap();
    // A first turn's claim is created beside its lease, which may land a moment after it: a claim read
    // then, naming a turn with neither a record nor a lease, is looked at again a grace later.
    let conv = agentwire_core::ConversationId::new("speculated").unwrap();
    let holder = agentwire_core::RequestId::new("other:1").unwrap();
    claims
        .put(
            bucket_key(conv.as_str()),
            holder.as_str().as_bytes().to_vec().into(),
        )
        .await
        .unwrap();
    let late = leases.clone();
    let lease_key = bucket_key(holder.as_str());
    let landing = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        late.put(lease_key, Vec::new().into()).await.unwrap();
    });
    let mine = agentwire_core::RequestId::new("mine:1").unwrap();
    assert_eq!(
        j.claim(conv.clone(), mine.clone()).await.unwrap(),
        Claim::Busy(holder.clone())
    );
    landing.await.unwrap();
    // One whose lease never comes is dead, once seen so twice.
    let dead = agentwire_core::ConversationId::new("dead").unwrap();
    claims
        .put(
            bucket_key(dead.as_str()),
            holder.as_str().as_bytes().to_vec().into(),
        )
        .await
        .unwrap();
    leases.purge(bucket_key(holder.as_str())).await.unwrap();
    assert_eq!(j.claim(dead, mine).await.unwrap(), Claim::Taken);

    // A request journaled already, sent again as a new conversation's first turn (a caller's resend
    // mints a new one): answered from the journal, and the minted conversation keeps no state.
    let mut first = conformance::turn(1);
    first.conversation_meta = Some(serde_json::json!({ "m": 1 }));
    assert_eq!(
        j.claim_accept(first.clone()).await.unwrap(),
        ClaimAccepted::Taken(Ok(Accepted::New))
    );
    let done = conformance::result("done", Default::default());
    j.finish(agentwire_store::Finish::new(
        first.request_id.clone(),
        done,
        300,
    ))
    .await
    .unwrap();
    let minted = agentwire_core::ConversationId::new("minted").unwrap();
    let mut resend = first.clone();
    resend.conversation_id = minted.clone();
    resend.input.conversation_id = minted.clone();
    match j.claim_accept(resend).await.unwrap() {
        ClaimAccepted::Taken(Ok(Accepted::Existing(t))) => {
            assert_eq!(t.conversation_id, first.conversation_id);
            assert!(t.outcome.is_some());
        }
        other => panic!("a resend is answered from the journal, got {other:?}"),
    }
    assert_eq!(j.conversation_meta(minted.clone()).await.unwrap(), None);
    let listed = j.conversations("nipxx".into(), 10).await.unwrap();
    assert!(!listed.contains(&minted), "{listed:?}");
    // Its claim, member and meta are gone without a purge's marker: nothing under their keys at all.
    let members = js.get_key_value("GRACE_MEMBERS").await.unwrap();
    let meta = js.get_key_value("GRACE_META").await.unwrap();
    let mk = bucket_key(minted.as_str());
    let member = format!("{mk}.{}", bucket_key(first.request_id.as_str()));
    for (bucket, key) in [(&claims, &mk), (&members, &member), (&meta, &mk)] {
        assert!(!has_messages(bucket, key).await, "{} {key}", bucket.name);
    }
}

/// Whether `bucket`'s stream holds any message under `key`: a value, or a delete's or purge's marker.
async fn has_messages(bucket: &async_nats::jetstream::kv::Store, key: &str) -> bool {
    bucket
        .stream
        .raw_message_builder()
        .last_by_subject(format!("{}{key}", bucket.prefix))
        .send()
        .await
        .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_with_meta_that_finds_its_conversation_busy_leaves_no_member_behind() {
    use agentwire_store::jetstream::bucket_key;
    use agentwire_store::{Accepted, ClaimAccepted, Finish};
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start_jetstream(dir.path());
    let j = open(&nats.url, "BUSY").await;
    let js = async_nats::jetstream::new(async_nats::connect(&nats.url).await.unwrap());
    let members = js.get_key_value("BUSY_MEMBERS").await.unwrap();
    let running = js.get_key_value("BUSY_RUNNING").await.unwrap();
    let with_meta = |n: u32| {
        let mut t = conformance::turn(n);
        t.conversation_meta = Some(serde_json::json!({ "m": n }));
        t
    };
    let taken = ClaimAccepted::Taken(Ok(Accepted::New));
    let end = |t: &agentwire_store::NewTurn| {
        Finish::new(
            t.request_id.clone(),
            conformance::result("done", Default::default()),
            300,
        )
    };
    let (a, b, c) = (with_meta(1), with_meta(2), with_meta(3));
    assert_eq!(j.claim_accept(a.clone()).await.unwrap(), taken);
    // A later turn of the conversation that changes its meta (a fisk-ai turn after a forced drift, say)
    // is tried as a first turn: its claim's create is refused, and it finds the conversation busy. It
    // journals nothing: no member (not even a marker), no running hint, the meta still the first's.
    assert_eq!(
        j.claim_accept(b.clone()).await.unwrap(),
        ClaimAccepted::Busy(a.request_id.clone())
    );
    let conv = bucket_key(a.conversation_id.as_str());
    let member = format!("{conv}.{}", bucket_key(b.request_id.as_str()));
    assert!(!has_messages(&members, &member).await);
    let hint = format!(
        "{}.{}",
        bucket_key(&b.owner),
        bucket_key(b.request_id.as_str())
    );
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    while running.get(&hint).await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the running hint stays"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        j.conversation_meta(a.conversation_id.clone())
            .await
            .unwrap(),
        a.conversation_meta
    );
    // So when it is sent again after another turn ran, it is listed after that turn.
    j.finish(end(&a)).await.unwrap();
    assert_eq!(j.claim_accept(c.clone()).await.unwrap(), taken);
    j.finish(end(&c)).await.unwrap();
    assert_eq!(j.claim_accept(b.clone()).await.unwrap(), taken);
    let order: Vec<_> = j
        .conversation(a.conversation_id.clone(), false)
        .await
        .unwrap()
        .turns
        .into_iter()
        .map(|t| t.turn.request_id)
        .collect();
    assert_eq!(order, [a.request_id, c.request_id, b.request_id]);
}
