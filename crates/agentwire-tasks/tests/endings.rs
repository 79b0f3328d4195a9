//! How a task ends, against the real embedded relay: a turn that fails after the adapter posted a reply
//! ends with a 43004 result linking it (a 43006 when the relay refused that reply), and on start a
//! request whose 43006 error or 43005 cancel is on the relay already is not run again, however little the
//! journal knows.

mod common;

use agentwire_core::{Failure, Outcome, TurnEvent, TurnFailure};
use agentwire_engine::{Agent, AgentCard, Front, TurnContext, TurnInput};
use common::*;
use futures_util::future::BoxFuture;
use nostr::prelude::{Event, Tag};
use std::sync::Arc;
use std::time::Duration;

/// What the agent says before it calls its tool: the task's interim reply.
const SAID: &str = "Let me read the build logs.\nThere are three failures.";
/// How the agent's turn fails after it.
const FAILED: &str = "the model server went away";

/// An agent that says something, calls a tool, and then fails, as a model agent does when its server goes
/// away after the first round.
struct SaysThenFails;

impl Agent for SaysThenFails {
    fn card(&self) -> AgentCard {
        agentwire_agents::DemoAgent.card()
    }

    fn run(&self, _input: TurnInput, ctx: TurnContext) -> BoxFuture<'static, Outcome> {
        Box::pin(async move {
            let _ = ctx.events.send(TurnEvent::Text { text: SAID.into() }).await;
            let _ = ctx
                .events
                .send(TurnEvent::ToolCall {
                    call_id: "c1".into(),
                    name: "calculator".into(),
                    arguments: serde_json::json!({ "expr": "1+1" }),
                })
                .await;
            // The reply is on the relay (or refused) before the turn ends, as after a model's round trip.
            tokio::time::sleep(Duration::from_millis(500)).await;
            Outcome::Failure(Failure::new(TurnFailure::AgentFailed, FAILED))
        })
    }
}

fn is_reply(ev: &Event) -> bool {
    ev.kind.as_u16() == 12
}

#[tokio::test]
async fn a_task_that_fails_after_its_agent_posted_a_reply_ends_with_a_result_linking_it() {
    let s = setup().await;
    let url = s.relay.url();
    let (_engine, _adapter) = adapter_with(
        s._dir.path(),
        config(&url, &s),
        &s.agent,
        Arc::new(SaysThenFails),
    )
    .await;
    let mut alice = Person::join(&url, s.alice.clone()).await;
    let req = alice
        .task(s.agent.public_key(), "why is the build red?", vec![])
        .await;
    let card = alice.card(&req.id, Duration::from_millis(1500)).await;
    let reply = card
        .iter()
        .find(|e| is_reply(e))
        .expect("the interim reply in the thread");
    assert_eq!(reply.content, SAID);
    let t = terminals(&card);
    assert_eq!(t.len(), 1, "one terminal: {:?}", kinds(&card));
    assert_eq!(
        t[0].kind.as_u16(),
        43004,
        "a failure after a posted reply is a result: {:?}",
        t[0].content
    );
    assert_eq!(
        t[0].content, "Let me read the build logs.",
        "its first line"
    );
    let es = values(t[0], "e");
    assert_eq!(es[0], req.id.to_hex());
    assert!(es.contains(&reply.id.to_hex().as_str()), "links the reply");
}

#[tokio::test]
async fn a_task_whose_reply_the_relay_refused_ends_with_its_error() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_url = format!("ws://{}", listener.local_addr().unwrap());
    let s = setup_with(vec![proxy_url]).await;
    let url = s.relay.url();
    let (proxy, refused) = refusing_proxy(listener, url.clone(), is_reply).await;
    let (_engine, _adapter) = adapter_with(
        s._dir.path(),
        config(&proxy, &s),
        &s.agent,
        Arc::new(SaysThenFails),
    )
    .await;
    let mut alice = Person::join(&url, s.alice.clone()).await;
    let req = alice
        .task(s.agent.public_key(), "why is the build red?", vec![])
        .await;
    let card = alice.card(&req.id, Duration::from_millis(1500)).await;
    assert_eq!(refused.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(!card.iter().any(is_reply), "the reply was refused");
    let t = terminals(&card);
    assert_eq!(t.len(), 1, "one terminal: {:?}", kinds(&card));
    assert_eq!(
        t[0].kind.as_u16(),
        43006,
        "a failed send: {:?}",
        t[0].content
    );
    assert_eq!(t[0].content, FAILED);
}

/// An adapter on a fresh journal, started after `alice` put `skipped` on the relay with what ends them, and
/// `open` with nothing: `open` runs (so the adapter has read the relay), none of `skipped` does.
async fn only_the_open_one_runs(s: &Setup, alice: &mut Person, open: &Event, skipped: &[&Event]) {
    let fresh = tempfile::tempdir().unwrap();
    let (engine, _adapter) = adapter(fresh.path(), config(&s.relay.url(), s), &s.agent).await;
    let card = alice.card(&open.id, Duration::from_millis(1500)).await;
    assert_eq!(terminals(&card)[0].content, "4", "the open one runs");
    for ev in skipped {
        // The journal is the witness: a 43002 of a second run can be the first one's very event (same
        // second, same tags), which the relay does not send again.
        let turn = engine
            .lookup(&agentwire_tasks::request_id(&ev.id))
            .await
            .unwrap();
        assert!(turn.is_none(), "{:?} ran again", ev.content);
        let again = alice
            .next(Duration::from_millis(100), |e| {
                e.kind.as_u16() == 43002 && values(e, "e").contains(&ev.id.to_hex().as_str())
            })
            .await;
        assert!(again.is_none(), "{:?} was accepted again", ev.content);
    }
}

#[tokio::test]
async fn with_a_fresh_journal_a_task_the_relay_shows_failed_does_not_run_again() {
    let s = setup().await;
    let url = s.relay.url();
    let mut alice = Person::join(&url, s.alice.clone()).await;
    let first = tempfile::tempdir().unwrap();
    let (_engine, adapter1) = adapter(first.path(), config(&url, &s), &s.agent).await;
    let failed = alice
        .task(s.agent.public_key(), "fail on purpose", vec![])
        .await;
    let card = alice.card(&failed.id, Duration::from_millis(200)).await;
    let t = terminals(&card);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].kind.as_u16(), 43006, "its error is on the relay");
    adapter1.stop().await;
    let open = alice.task(s.agent.public_key(), "calc 2+2", vec![]).await;
    only_the_open_one_runs(&s, &mut alice, &open, &[&failed]).await;
}

#[tokio::test]
async fn with_a_fresh_journal_a_task_its_requester_cancelled_does_not_run() {
    let s = setup().await;
    let url = s.relay.url();
    let mut alice = Person::join(&url, s.alice.clone()).await;
    // Given and cancelled while no adapter ran.
    let cancelled = alice.task(s.agent.public_key(), "calc 3+3", vec![]).await;
    alice
        .publish(
            43005,
            "",
            vec![
                Tag::event(cancelled.id),
                Tag::public_key(s.agent.public_key()),
                tag(&["h", "lab"]),
            ],
        )
        .await;
    let open = alice.task(s.agent.public_key(), "calc 2+2", vec![]).await;
    only_the_open_one_runs(&s, &mut alice, &open, &[&cancelled]).await;
}
