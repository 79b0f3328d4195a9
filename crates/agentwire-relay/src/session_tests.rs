//! Unit and property tests of the sans-IO session: every client message, driven with a virtual
//! clock and no sockets.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nostr::event::{Event, EventBuilder, FinalizeEvent, Kind, Tag};
use nostr::filter::Filter;
use nostr::key::Keys;
use nostr::message::{ClientMessage, RelayMessage, SubscriptionId};
use nostr::types::Timestamp;
use proptest::prelude::*;

use super::{Command, Published, QueryRequest, QueueDelivery, Session};
use crate::limits::RelayLimits;
use crate::own_urls::OwnUrls;
use crate::store::{InsertOutcome, StoredEvent};

fn session_with(limits: RelayLimits, unlimited: &[&Keys]) -> (Session, Instant) {
    let now = Instant::now();
    let set: HashSet<_> = unlimited.iter().map(|k| k.public_key()).collect();
    (
        Session::new(
            limits,
            Arc::new(set),
            now,
            Arc::default(),
            CHALLENGE.to_owned(),
            Arc::new(OwnUrls::new("127.0.0.1:7447".parse().unwrap(), &[]).unwrap()),
            Arc::default(),
        ),
        now,
    )
}

const CHALLENGE: &str = "challenge-for-tests";

fn session() -> (Session, Instant) {
    session_with(RelayLimits::default(), &[])
}

fn event(keys: &Keys, kind: u16, tags: Vec<Tag>) -> Event {
    EventBuilder::new(Kind::from_u16(kind), "hello")
        .tags(tags)
        .finalize(keys)
        .unwrap()
}

fn wall() -> Timestamp {
    Timestamp::now()
}

fn event_msg(e: &Event) -> String {
    ClientMessage::event(e.clone()).as_json()
}

fn req_msg(sub: &str, filters: Vec<Filter>) -> String {
    ClientMessage::req(SubscriptionId::new(sub), filters).as_json()
}

/// The frames among `commands`, parsed.
fn sent(commands: &[Command]) -> Vec<RelayMessage<'static>> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Send(frame) => Some(RelayMessage::from_json(frame).expect("valid frame")),
            _ => None,
        })
        .collect()
}

fn parse(frames: &[String]) -> Vec<RelayMessage<'static>> {
    frames
        .iter()
        .map(|f| RelayMessage::from_json(f).expect("valid frame"))
        .collect()
}

fn only_ok(commands: &[Command]) -> (bool, String) {
    assert_eq!(commands.len(), 1, "{commands:?}");
    match &sent(commands)[..] {
        [RelayMessage::Ok {
            status, message, ..
        }] => (*status, message.to_string()),
        other => panic!("expected one OK, got {other:?}"),
    }
}

fn only_closed(commands: &[Command]) -> (String, String) {
    assert_eq!(commands.len(), 1, "{commands:?}");
    match &sent(commands)[..] {
        [RelayMessage::Closed {
            subscription_id,
            message,
        }] => (subscription_id.to_string(), message.to_string()),
        other => panic!("expected one CLOSED, got {other:?}"),
    }
}

fn only_notice(commands: &[Command]) -> String {
    assert_eq!(commands.len(), 1, "{commands:?}");
    match &sent(commands)[..] {
        [RelayMessage::Notice(message)] => message.to_string(),
        other => panic!("expected one NOTICE, got {other:?}"),
    }
}

fn only_query(commands: Vec<Command>) -> QueryRequest {
    match <[Command; 1]>::try_from(commands) {
        Ok([Command::Query(q)]) => q,
        other => panic!("expected one query, got {other:?}"),
    }
}

fn stored(e: &Event) -> StoredEvent {
    StoredEvent {
        id: e.id,
        created_at: e.created_at,
        json: e.as_json(),
    }
}

fn published(e: &Event) -> Arc<Published> {
    Arc::new(Published {
        event: e.clone(),
        json: e.as_json(),
    })
}

#[test]
fn regular_event_goes_to_the_store() {
    let (mut s, now) = session();
    let e = event(&Keys::generate(), 1, vec![]);
    let commands = s.handle_text(&event_msg(&e), now, wall());
    match &commands[..] {
        [Command::Store(p)] => {
            assert_eq!(p.event, e);
            assert_eq!(p.json, e.as_json());
        }
        other => panic!("{other:?}"),
    }
    let ok = RelayMessage::from_json(s.handle_stored(e.id, Ok(InsertOutcome::Inserted))).unwrap();
    assert_eq!(ok, RelayMessage::ok(e.id, true, ""));
    let dup = RelayMessage::from_json(s.handle_stored(e.id, Ok(InsertOutcome::Duplicate))).unwrap();
    assert!(
        matches!(dup, RelayMessage::Ok { status: true, message, .. } if message.starts_with("duplicate:"))
    );
}

#[test]
fn ephemeral_event_is_broadcast_and_acknowledged() {
    let (mut s, now) = session();
    let e = event(&Keys::generate(), 25800, vec![]);
    let commands = s.handle_text(&event_msg(&e), now, wall());
    assert!(matches!(&commands[0], Command::Broadcast(p) if p.event == e));
    assert_eq!(sent(&commands), vec![RelayMessage::ok(e.id, true, "")]);
    for kind in [25802, 25803, 25805] {
        let e = event(&Keys::generate(), kind, vec![]);
        let commands = s.handle_text(&event_msg(&e), now, wall());
        assert!(matches!(&commands[..], [Command::Store(_)]), "{kind}");
    }
}

#[test]
fn every_event_answered_is_counted_by_its_result_and_an_auth_is_not() {
    use crate::stats::EventResult;
    let limits = RelayLimits {
        max_events_per_second_per_connection: 3,
        ..RelayLimits::default()
    };
    let (mut s, now) = session_with(limits, &[]);
    let keys = Keys::generate();
    let stored = event(&keys, 1, vec![]);
    assert!(matches!(
        &s.handle_text(&event_msg(&stored), now, wall())[..],
        [Command::Store(_)]
    ));
    s.handle_stored(stored.id, Ok(InsertOutcome::Inserted));
    s.handle_stored(stored.id, Ok(InsertOutcome::Duplicate));
    s.handle_stored(stored.id, Err(crate::RelayError::Internal("disk".into())));
    let ephemeral = event(&keys, 25800, vec![]);
    s.handle_text(&event_msg(&ephemeral), now, wall());
    let auth = event(&keys, 22242, vec![]);
    let (ok, _) = only_ok(&s.handle_text(&event_msg(&auth), now, wall()));
    assert!(!ok, "an AUTH event sent as an EVENT is refused");
    let (ok, _) = only_ok(&s.handle_text(&event_msg(&stored), now, wall()));
    assert!(!ok, "the bucket is spent");
    // An AUTH answers with an OK too, but it is not an EVENT.
    s.handle_text(&auth_msg(&keys), now, wall());
    let counted: Vec<u64> = EventResult::ALL
        .iter()
        .map(|r| s.stats.events(*r))
        .collect();
    // accepted, duplicate, rate_limited, rejected, error
    assert_eq!(counted, vec![2, 1, 1, 1, 1]);
}

#[test]
fn forged_events_are_invalid() {
    let (mut s, now) = session();
    let keys = Keys::generate();
    let e = event(&keys, 1, vec![]);
    // Changed content: the id no longer matches.
    let mut json: serde_json::Value = serde_json::from_str(&e.as_json()).unwrap();
    json["content"] = "tampered".into();
    let msg = format!(r#"["EVENT",{json}]"#);
    let (ok, message) = only_ok(&s.handle_text(&msg, now, wall()));
    assert!(!ok && message.starts_with("invalid:"), "{message}");
    // Another event's signature: the id matches, the signature does not.
    let other = EventBuilder::new(Kind::from_u16(1), "other")
        .finalize(&keys)
        .unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&e.as_json()).unwrap();
    json["sig"] = other.sig.to_string().into();
    let msg = format!(r#"["EVENT",{json}]"#);
    let (ok, message) = only_ok(&s.handle_text(&msg, now, wall()));
    assert_eq!((ok, message.as_str()), (false, "invalid: bad signature"));
}

#[test]
fn expired_events_are_refused() {
    let (mut s, now) = session();
    let past = Timestamp::from_secs(Timestamp::now().as_secs() - 10);
    let e = event(&Keys::generate(), 1, vec![Tag::expiration(past)]);
    let (ok, message) = only_ok(&s.handle_text(&event_msg(&e), now, wall()));
    assert_eq!((ok, message.as_str()), (false, "invalid: event is expired"));
    // At the expiration second itself it is expired already; a second before, it is not.
    let at = Timestamp::from_secs(1_800_000_000);
    let e = event(&Keys::generate(), 1, vec![Tag::expiration(at)]);
    let (ok, _) = only_ok(&s.handle_text(&event_msg(&e), now, at));
    assert!(!ok);
    let before = Timestamp::from_secs(at.as_secs() - 1);
    assert!(matches!(
        s.handle_text(&event_msg(&e), now, before).as_slice(),
        [Command::Store(_)]
    ));
}

#[test]
fn events_dated_too_far_ahead_are_refused() {
    use crate::limits::MAX_FUTURE_SKEW_SECS;
    let (mut s, now) = session();
    let keys = Keys::generate();
    let at = |secs: u64| {
        EventBuilder::new(Kind::from_u16(1), "ahead")
            .custom_created_at(Timestamp::from_secs(secs))
            .finalize(&keys)
            .unwrap()
    };
    let wall = Timestamp::from_secs(1_800_000_000);
    for ahead in [MAX_FUTURE_SKEW_SECS + 1, 86_400, 30 * 365 * 86_400] {
        let e = at(wall.as_secs() + ahead);
        let (ok, message) = only_ok(&s.handle_text(&event_msg(&e), now, wall));
        assert!(!ok, "{ahead} s ahead was taken");
        assert!(
            message.starts_with("invalid: created_at is too far in the future"),
            "{message}"
        );
    }
    // Up to the bound a clock ahead of the relay's is fine.
    for ahead in [0, 60, MAX_FUTURE_SKEW_SECS] {
        let e = at(wall.as_secs() + ahead);
        assert!(
            matches!(
                s.handle_text(&event_msg(&e), now, wall).as_slice(),
                [Command::Store(_)]
            ),
            "{ahead} s ahead was refused"
        );
    }
}

#[test]
fn a_connection_without_subscriptions_is_idle_from_its_last_message() {
    let (mut s, opened) = session();
    let timeout = Duration::from_secs(60);
    assert_eq!(s.idle_deadline(timeout), Some(opened + timeout));
    // Any message starts the wait again; a subscription ends it while it is open.
    let later = opened + Duration::from_secs(30);
    s.handle_text(
        &req_msg("sub", vec![Filter::new().kind(Kind::from_u16(1))]),
        later,
        wall(),
    );
    assert_eq!(s.idle_deadline(timeout), None);
    let closed_at = later + Duration::from_secs(300);
    s.handle_text(r#"["CLOSE","sub"]"#, closed_at, wall());
    assert_eq!(s.idle_deadline(timeout), Some(closed_at + timeout));
    let e = event(&Keys::generate(), 1, vec![]);
    let sent_at = closed_at + Duration::from_secs(10);
    s.handle_text(&event_msg(&e), sent_at, wall());
    assert_eq!(s.idle_deadline(timeout), Some(sent_at + timeout));
    let notice = s.handle_idle(timeout);
    assert!(
        notice.contains("no subscription and no message for 60 s"),
        "{notice}"
    );
}

#[test]
fn events_over_the_size_limit_are_refused() {
    let limits = RelayLimits {
        max_event_bytes: 600,
        ..RelayLimits::default()
    };
    let (mut s, now) = session_with(limits, &[]);
    let keys = Keys::generate();
    let small = EventBuilder::new(Kind::from_u16(1), "x".repeat(100))
        .finalize(&keys)
        .unwrap();
    assert!(matches!(
        &s.handle_text(&event_msg(&small), now, wall())[..],
        [Command::Store(_)]
    ));
    let big = EventBuilder::new(Kind::from_u16(1), "x".repeat(600))
        .finalize(&keys)
        .unwrap();
    let (ok, message) = only_ok(&s.handle_text(&event_msg(&big), now, wall()));
    assert!(
        !ok && message.starts_with("invalid: event too large"),
        "{message}"
    );
}

/// This relay's URL in the sessions of these tests.
const URL: &str = "ws://127.0.0.1:7447";

/// An `AUTH` message signing this session's challenge as `keys`.
fn auth_msg(keys: &Keys) -> String {
    let auth = EventBuilder::new(Kind::Authentication, "")
        .tags([
            Tag::parse(["relay", URL]).unwrap(),
            Tag::parse(["challenge", CHALLENGE]).unwrap(),
        ])
        .finalize(keys)
        .unwrap();
    ClientMessage::auth(auth).as_json()
}

#[test]
fn a_connection_authenticated_as_an_unlimited_author_is_exempt_for_any_key() {
    let limits = RelayLimits {
        max_events_per_second_per_connection: 2,
        ..RelayLimits::default()
    };
    let operator = Keys::generate();
    let (mut s, now) = session_with(limits, &[&operator]);
    // The operator's own signed events, resent, prove nothing: they count like anyone's.
    let info = event(&operator, 31340, vec![]);
    assert!(matches!(
        &s.handle_text(&event_msg(&info), now, wall())[..],
        [Command::Store(_)]
    ));
    let e = event(&Keys::generate(), 1059, vec![]);
    assert!(matches!(
        &s.handle_text(&event_msg(&e), now, wall())[..],
        [Command::Store(_)]
    ));
    let again = event(&operator, 31340, vec![]);
    let (ok, message) = only_ok(&s.handle_text(&event_msg(&again), now, wall()));
    assert!(!ok && message.starts_with("rate-limited:"), "{message}");
    // Authenticating as the operator makes the connection theirs (the driver is told once, before the
    // OK): one-time keys then pass too. The AUTH does not wait for the spent bucket.
    let commands = s.handle_text(&auth_msg(&operator), now, wall());
    assert!(
        matches!(&commands[..], [Command::Exempt, Command::Send(_)]),
        "{commands:?}"
    );
    assert!(only_ok(&commands[1..]).0);
    let commands = s.handle_text(&auth_msg(&operator), now, wall());
    assert!(matches!(&commands[..], [Command::Send(_)]), "{commands:?}");
    for _ in 0..20 {
        let e = event(&Keys::generate(), 1059, vec![]);
        assert!(matches!(
            &s.handle_text(&event_msg(&e), now, wall())[..],
            [Command::Store(_)]
        ));
    }
}

#[test]
fn a_connection_sends_a_bounded_number_of_auth_messages() {
    use crate::limits::MAX_AUTH_MESSAGES_PER_CONNECTION;
    let (mut s, now) = session();
    let keys = Keys::generate();
    for _ in 0..MAX_AUTH_MESSAGES_PER_CONNECTION {
        assert!(only_ok(&s.handle_text(&auth_msg(&keys), now, wall())).0);
    }
    let (ok, message) = only_ok(&s.handle_text(&auth_msg(&keys), now, wall()));
    assert!(!ok && message.starts_with("restricted:"), "{message}");
}

#[test]
fn authenticating_as_another_key_exempts_nothing() {
    let limits = RelayLimits {
        max_events_per_second_per_connection: 3,
        ..RelayLimits::default()
    };
    let operator = Keys::generate();
    let (mut s, now) = session_with(limits, &[&operator]);
    let stranger = Keys::generate();
    let commands = s.handle_text(&auth_msg(&stranger), now, wall());
    assert!(only_ok(&commands).0);
    for _ in 0..3 {
        let e = event(&stranger, 1, vec![]);
        assert!(matches!(
            &s.handle_text(&event_msg(&e), now, wall())[..],
            [Command::Store(_)]
        ));
    }
    // Not even events of the unlimited author pass the spent bucket.
    let e = event(&operator, 25801, vec![]);
    let (ok, message) = only_ok(&s.handle_text(&event_msg(&e), now, wall()));
    assert!(!ok && message.starts_with("rate-limited:"), "{message}");
    // A second later the stranger may publish again.
    let later = now + Duration::from_secs(1);
    let e = event(&stranger, 1, vec![]);
    assert!(matches!(
        &s.handle_text(&event_msg(&e), later, wall())[..],
        [Command::Store(_)]
    ));
}

#[test]
fn req_then_stored_then_eose_then_live() {
    let (mut s, now) = session();
    let keys = Keys::generate();
    let old = event(&keys, 1, vec![]);
    let q = only_query(s.handle_text(
        &req_msg("sub", vec![Filter::new().kind(Kind::from_u16(1))]),
        now,
        wall(),
    ));
    assert_eq!(q.subscription_id.as_str(), "sub");
    assert_eq!(
        q.filters[0].limit,
        Some(RelayLimits::default().max_query_limit)
    );
    // A live event while the query runs waits, and one the query also found is not sent twice.
    let during = EventBuilder::new(Kind::from_u16(1), "during")
        .finalize(&keys)
        .unwrap();
    assert!(s.handle_live(&published(&during)).is_empty());
    assert!(s.handle_live(&published(&old)).is_empty());
    let frames =
        parse(&s.handle_query_result(&q.subscription_id, q.generation, Ok(vec![stored(&old)])));
    let sub = SubscriptionId::new("sub");
    assert_eq!(
        frames,
        vec![
            RelayMessage::event(sub.clone(), old.clone()),
            RelayMessage::eose(sub.clone()),
            RelayMessage::event(sub.clone(), during.clone()),
        ]
    );
    let live = EventBuilder::new(Kind::from_u16(1), "live")
        .finalize(&keys)
        .unwrap();
    assert_eq!(
        parse(&s.handle_live(&published(&live))),
        vec![RelayMessage::event(sub, live)]
    );
    // Not matching: nothing.
    assert!(s
        .handle_live(&published(&event(&keys, 7, vec![])))
        .is_empty());
    // A stored event whose live broadcast comes only after the query's result (it was committed just
    // before the query ran) is not sent a second time.
    assert!(
        s.handle_live(&published(&old)).is_empty(),
        "sent once, as stored"
    );
}

#[test]
fn re_req_replaces_and_close_closes() {
    let (mut s, now) = session();
    let first = only_query(s.handle_text(&req_msg("a", vec![Filter::new()]), now, wall()));
    let second = only_query(s.handle_text(
        &req_msg("a", vec![Filter::new().kind(Kind::from_u16(2))]),
        now,
        wall(),
    ));
    assert_eq!(s.subscription_count(), 1);
    assert!(s
        .handle_query_result(&first.subscription_id, first.generation, Ok(vec![]))
        .is_empty());
    assert_eq!(
        s.handle_query_result(&second.subscription_id, second.generation, Ok(vec![]))
            .len(),
        1
    );
    let e = event(&Keys::generate(), 1, vec![]);
    assert!(
        s.handle_live(&published(&e)).is_empty(),
        "the replaced filter no longer applies"
    );
    assert!(s.handle_text(r#"["CLOSE","a"]"#, now, wall()).is_empty());
    assert_eq!(s.subscription_count(), 0);
    let e = event(&Keys::generate(), 2, vec![]);
    assert!(s.handle_live(&published(&e)).is_empty());
}

#[test]
fn req_limits() {
    let limits = RelayLimits {
        max_subscriptions_per_connection: 2,
        max_filters_per_req: 2,
        max_subscription_id_len: 8,
        max_query_limit: 10,
        ..RelayLimits::default()
    };
    let (mut s, now) = session_with(limits, &[]);
    let q = only_query(s.handle_text(&req_msg("a", vec![Filter::new().limit(1000)]), now, wall()));
    assert_eq!(q.filters[0].limit, Some(10));
    let q = only_query(s.handle_text(&req_msg("b", vec![Filter::new().limit(3)]), now, wall()));
    assert_eq!(q.filters[0].limit, Some(3));
    let (sub, message) =
        only_closed(&s.handle_text(&req_msg("c", vec![Filter::new()]), now, wall()));
    assert_eq!(sub, "c");
    assert!(
        message.starts_with("error: too many subscriptions"),
        "{message}"
    );
    // Replacing an open one is fine at the limit.
    only_query(s.handle_text(&req_msg("b", vec![Filter::new()]), now, wall()));
    let (_, message) =
        only_closed(&s.handle_text(&req_msg("a", vec![Filter::new(); 3]), now, wall()));
    assert!(message.starts_with("error: too many filters"), "{message}");
    assert_eq!(
        s.subscription_count(),
        1,
        "a refused re-REQ closes the old subscription"
    );
    let (_, message) =
        only_closed(&s.handle_text(&req_msg("123456789", vec![Filter::new()]), now, wall()));
    assert!(
        message.starts_with("invalid: subscription id is longer"),
        "{message}"
    );
    let (_, message) = only_closed(&s.handle_text(&req_msg("", vec![Filter::new()]), now, wall()));
    assert_eq!(message, "invalid: subscription id is empty");
    let (_, message) =
        only_closed(&s.handle_text(&req_msg("s", vec![Filter::new().search("x")]), now, wall()));
    assert!(message.starts_with("unsupported:"), "{message}");
}

#[test]
fn malformed_messages_get_typed_answers() {
    let (mut s, now) = session();
    assert!(only_notice(&s.handle_text("not json", now, wall()))
        .starts_with("invalid: message is not JSON"));
    assert!(only_notice(&s.handle_text("{}", now, wall())).starts_with("invalid:"));
    assert!(only_notice(&s.handle_text("[1]", now, wall())).starts_with("invalid:"));
    assert!(only_notice(&s.handle_text(r#"["HELLO"]"#, now, wall())).starts_with("unsupported:"));
    assert!(only_notice(&s.handle_text(r#"["EVENT"]"#, now, wall()))
        .starts_with("invalid: malformed EVENT"));
    let id = "a".repeat(64);
    let (ok, message) =
        only_ok(&s.handle_text(&format!(r#"["EVENT",{{"id":"{id}"}}]"#), now, wall()));
    assert!(
        !ok && message.starts_with("invalid: malformed event"),
        "{message}"
    );
    let (sub, message) = only_closed(&s.handle_text(r#"["REQ","x",{"ids":["zz"]}]"#, now, wall()));
    assert_eq!(sub, "x");
    assert!(message.starts_with("invalid: bad filter"), "{message}");
    let (_, message) = only_closed(&s.handle_text(r#"["REQ","x"]"#, now, wall()));
    assert!(message.starts_with("invalid: REQ needs"), "{message}");
    // A COUNT is a count to run (NIP-45), and opens no subscription.
    assert!(matches!(
        s.handle_text(r#"["COUNT","x",{}]"#, now, wall()).as_slice(),
        [Command::Count { .. }]
    ));
    assert!(only_notice(&s.handle_binary()).starts_with("invalid:"));
}

#[test]
fn lagging_closes_every_subscription() {
    let (mut s, now) = session();
    only_query(s.handle_text(&req_msg("a", vec![Filter::new()]), now, wall()));
    only_query(s.handle_text(&req_msg("b", vec![Filter::new()]), now, wall()));
    let frames = parse(&s.handle_lagged(42));
    let closed = frames
        .iter()
        .filter(|m| matches!(m, RelayMessage::Closed { message, .. } if message.contains("42 live events")))
        .count();
    assert_eq!(closed, 2, "{frames:?}");
    assert_eq!(s.subscription_count(), 0);
}

/// A session of the operator's agent with one live subscription to kind 1, made exempt.
fn exempt_session() -> (Session, Keys) {
    let operator = Keys::generate();
    let (mut s, now) = session_with(RelayLimits::default(), &[&operator]);
    let q = only_query(s.handle_text(
        &req_msg("a", vec![Filter::new().kind(Kind::from_u16(1))]),
        now,
        wall(),
    ));
    s.handle_query_result(&q.subscription_id, q.generation, Ok(vec![]));
    let commands = s.handle_text(&auth_msg(&operator), now, wall());
    assert!(matches!(commands[0], Command::Exempt), "{commands:?}");
    (s, operator)
}

fn live_event() -> Arc<Published> {
    published(&event(&Keys::generate(), 1, vec![]))
}

#[test]
fn an_exempt_connection_reads_the_ring_backlog_then_only_its_queue() {
    let (mut s, _) = exempt_session();
    assert!(s.reads_ring());
    // Two ring events were sent before its queue existed: those come from the ring.
    s.handle_registered(2);
    assert_eq!(s.handle_ring(&live_event()).len(), 1);
    assert!(s.reads_ring());
    assert_eq!(s.handle_ring(&live_event()).len(), 1);
    assert!(!s.reads_ring(), "the ring's part is done");
    // A later ring copy is not delivered: the queue brings it, once.
    let later = live_event();
    assert!(s.handle_ring(&later).is_empty());
    assert_eq!(
        parse(&s.handle_queued(&later, 0)),
        vec![RelayMessage::event(
            SubscriptionId::new("a"),
            later.event.clone()
        )]
    );
    assert_eq!(s.subscription_count(), 1);
}

#[test]
fn with_no_ring_backlog_an_exempt_connection_stops_reading_the_ring_at_once() {
    let (mut s, _) = exempt_session();
    s.handle_registered(0);
    assert!(!s.reads_ring());
    // A lag of the ring it no longer reads loses nothing.
    assert!(s.handle_lagged(5000).is_empty());
    assert_eq!(s.subscription_count(), 1);
}

#[test]
fn a_ring_lag_during_the_handoff_counts_only_the_backlog() {
    let (mut s, _) = exempt_session();
    s.handle_registered(5);
    assert_eq!(s.handle_ring(&live_event()).len(), 1);
    // Of ten events lost, four preceded the queue: those are the ones this connection lost.
    let frames = parse(&s.handle_lagged(10));
    assert!(
        frames.iter().any(
            |m| matches!(m, RelayMessage::Closed { message, .. } if message.contains(" 4 live events"))
        ),
        "{frames:?}"
    );
    assert!(!s.reads_ring());
    assert_eq!(s.subscription_count(), 0);

    // A smaller lag leaves the rest of the backlog to read.
    let (mut s, _) = exempt_session();
    s.handle_registered(5);
    assert_eq!(s.handle_lagged(2).len(), 2, "CLOSED and NOTICE");
    assert!(s.reads_ring());
    for _ in 0..3 {
        assert!(s.reads_ring());
        s.handle_ring(&live_event());
    }
    assert!(!s.reads_ring());
}

#[test]
fn events_the_queue_missed_close_every_subscription_as_too_slow() {
    let (mut s, _) = exempt_session();
    s.handle_registered(0);
    let e = live_event();
    let frames = parse(&s.handle_queued(&e, 3));
    assert_eq!(
        frames[0],
        RelayMessage::event(SubscriptionId::new("a"), e.event.clone())
    );
    assert!(
        matches!(&frames[1], RelayMessage::Closed { message, .. }
            if message.starts_with("error: too slow: 3 live events")),
        "{frames:?}"
    );
    assert_eq!(s.subscription_count(), 0);
}

#[test]
fn a_publisher_waits_on_an_exempt_queue_only_when_that_cannot_deadlock() {
    let (ordinary, _) = session();
    assert_eq!(ordinary.queue_delivery(false, false), QueueDelivery::Wait);
    // A queue that already missed events is not waited on again.
    assert_eq!(ordinary.queue_delivery(false, true), QueueDelivery::TryOnly);
    let (exempt, _) = exempt_session();
    // Never on one's own queue: delivered on the spot.
    assert_eq!(exempt.queue_delivery(true, false), QueueDelivery::Inline);
    assert_eq!(exempt.queue_delivery(true, true), QueueDelivery::Inline);
    // Never from one exempt connection on another's.
    assert_eq!(exempt.queue_delivery(false, false), QueueDelivery::TryOnly);
}

/// A valid `EVENT` message to mutate.
fn sample_event_message() -> String {
    event_msg(&event(
        &Keys::generate(),
        1,
        vec![Tag::public_key(Keys::generate().public_key())],
    ))
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        ".{0,12}".prop_map(serde_json::Value::from),
        Just(serde_json::Value::from("a".repeat(64))),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map(
                prop_oneof![
                    Just("ids".to_owned()),
                    Just("kinds".to_owned()),
                    Just("#p".to_owned()),
                    Just("limit".to_owned()),
                    Just("id".to_owned()),
                    ".{0,4}"
                ],
                inner,
                0..4
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

fn client_message_like() -> impl Strategy<Value = String> {
    let verb = prop_oneof![
        Just("EVENT"),
        Just("REQ"),
        Just("CLOSE"),
        Just("COUNT"),
        Just("AUTH"),
        Just("NEG-OPEN"),
        Just("NEG-MSG"),
        Just("NEG-CLOSE"),
        Just("OTHER"),
    ];
    (verb, prop::collection::vec(json_value(), 0..4)).prop_map(|(verb, rest)| {
        let mut items = vec![serde_json::Value::from(verb)];
        items.extend(rest);
        serde_json::Value::from(items).to_string()
    })
}

/// Every answer to junk is a well-formed frame, and junk never reaches the store or the
/// subscriptions.
fn check_answer(s: &mut Session, text: &str) {
    let commands = s.handle_text(text, Instant::now(), Timestamp::now());
    for command in &commands {
        match command {
            Command::Send(frame) => {
                RelayMessage::from_json(frame).expect("frames are valid relay messages");
            }
            Command::Store(p) | Command::Broadcast(p) => {
                assert!(p.event.verify().is_ok(), "only verified events are stored");
            }
            Command::Query(_) | Command::Count { .. } => {}
            Command::Exempt => panic!("junk never makes a connection exempt"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    #[test]
    fn arbitrary_strings_never_panic(text in ".*") {
        let (mut s, _) = session();
        let commands = s.handle_text(&text, Instant::now(), Timestamp::now());
        // Not a client message: exactly one NOTICE (or a typed answer if it happens to parse).
        if serde_json::from_str::<serde_json::Value>(&text).is_err() {
            prop_assert!(only_notice(&commands).starts_with("invalid:"));
        }
        check_answer(&mut s, &text);
    }

    #[test]
    fn message_shaped_junk_gets_typed_answers(text in client_message_like()) {
        let (mut s, _) = session();
        check_answer(&mut s, &text);
    }

    #[test]
    fn mutated_events_never_panic(cut in 0usize..400, byte in any::<u8>(), pos in 0usize..400) {
        let (mut s, _) = session();
        let valid = sample_event_message();
        let mut bytes = valid.into_bytes();
        let pos = pos % bytes.len();
        bytes[pos] = byte;
        bytes.truncate(bytes.len().saturating_sub(cut % 8));
        let text = String::from_utf8_lossy(&bytes).into_owned();
        check_answer(&mut s, &text);
    }
}
