//! The event store's synchronous API, used directly: outcomes, replacement rules, queries,
//! NIP-40 purge, index use, and agreement with `Filter::match_event`.

use std::collections::BTreeSet;

use agentwire_relay::store::{EventStore, InsertOutcome};
use nostr::event::{Event, EventBuilder, FinalizeEvent, Kind, Tag};
use nostr::filter::{Filter, MatchEventOptions, SingleLetterTag};
use nostr::key::Keys;
use nostr::types::Timestamp;
use proptest::prelude::*;
use tempfile::TempDir;

fn store() -> (EventStore, TempDir) {
    let dir = TempDir::new().unwrap();
    let store = EventStore::open(&dir.path().join("events.sqlite")).unwrap();
    (store, dir)
}

fn at(keys: &Keys, kind: u16, content: &str, tags: Vec<Tag>, secs: u64) -> Event {
    EventBuilder::new(Kind::from_u16(kind), content)
        .tags(tags)
        .custom_created_at(Timestamp::from_secs(secs))
        .finalize(keys)
        .unwrap()
}

const NOW: u64 = 1_700_000_000;

#[test]
fn insert_outcomes() {
    let (mut store, _dir) = store();
    let keys = Keys::generate();
    let note = at(&keys, 1, "n", vec![], NOW);
    assert_eq!(store.insert(&note).unwrap(), InsertOutcome::Inserted);
    assert_eq!(store.insert(&note).unwrap(), InsertOutcome::Duplicate);
    let status = at(&keys, 25800, "s", vec![], NOW);
    assert_eq!(store.insert(&status).unwrap(), InsertOutcome::NotStored);
    for kind in [25802, 25803, 25805] {
        assert_eq!(
            store.insert(&at(&keys, kind, "x", vec![], NOW)).unwrap(),
            InsertOutcome::Inserted
        );
    }
    assert_eq!(store.count().unwrap(), 4);
}

#[test]
fn replaceable_keeps_newest_and_lowest_id_on_ties() {
    let (mut store, _dir) = store();
    let keys = Keys::generate();
    let d = |v: &str| vec![Tag::identifier(v)];
    let v1 = at(&keys, 31340, "v1", d("a"), NOW);
    let v2 = at(&keys, 31340, "v2", d("a"), NOW + 1);
    assert_eq!(store.insert(&v1).unwrap(), InsertOutcome::Inserted);
    assert_eq!(store.insert(&v2).unwrap(), InsertOutcome::Replaced);
    assert_eq!(store.insert(&v1).unwrap(), InsertOutcome::RejectedOlder);
    // Another d tag is another address.
    assert_eq!(
        store.insert(&at(&keys, 31340, "b", d("b"), NOW)).unwrap(),
        InsertOutcome::Inserted
    );
    // Same second: the lowest id wins whichever arrives first.
    let x = at(&keys, 31340, "tie-x", d("a"), NOW + 1);
    let (low, high) = if x.id < v2.id {
        (x, v2.clone())
    } else {
        (v2.clone(), x)
    };
    let (mut store2, _dir2) = self::store();
    assert_eq!(store2.insert(&high).unwrap(), InsertOutcome::Inserted);
    assert_eq!(store2.insert(&low).unwrap(), InsertOutcome::Replaced);
    assert_eq!(store2.insert(&high).unwrap(), InsertOutcome::RejectedOlder);
    let kept = store2
        .query(&[Filter::new()], Timestamp::from_secs(NOW))
        .unwrap();
    assert_eq!(kept, vec![low]);
    // Replaceable kinds 0, 3 and 10000-19999 are keyed by author and kind alone.
    for kind in [0, 3, 10_002] {
        let a = at(&keys, kind, "a", d("ignored"), NOW);
        let b = at(&keys, kind, "b", d("other"), NOW + 1);
        assert_eq!(store.insert(&a).unwrap(), InsertOutcome::Inserted);
        assert_eq!(store.insert(&b).unwrap(), InsertOutcome::Replaced);
        let found = store
            .query(
                &[Filter::new().kind(Kind::from_u16(kind))],
                Timestamp::from_secs(NOW),
            )
            .unwrap();
        assert_eq!(found, vec![b]);
    }
}

#[test]
fn queries_order_limit_and_union() {
    let (mut store, _dir) = store();
    let keys = Keys::generate();
    let events: Vec<Event> = (0..6)
        .map(|i| at(&keys, 1 + (i % 2) as u16, &format!("{i}"), vec![], NOW + i))
        .collect();
    store.insert_batch(&events).unwrap();
    let now = Timestamp::from_secs(NOW);
    let all = store.query(&[Filter::new()], now).unwrap();
    let newest_first: Vec<Event> = events.iter().rev().cloned().collect();
    assert_eq!(all, newest_first);
    let two = store.query(&[Filter::new().limit(2)], now).unwrap();
    assert_eq!(two, newest_first[..2].to_vec());
    // Two filters, each with its own limit, merged newest first without duplicates.
    let ones = Filter::new().kind(Kind::from_u16(1)).limit(1);
    let twos = Filter::new().kind(Kind::from_u16(2)).limit(1);
    let merged = store
        .query(&[ones, twos, Filter::new().limit(1)], now)
        .unwrap();
    assert_eq!(merged, vec![events[5].clone(), events[4].clone()]);
    let window = Filter::new()
        .since(Timestamp::from_secs(NOW + 1))
        .until(Timestamp::from_secs(NOW + 3));
    assert_eq!(store.query(&[window], now).unwrap().len(), 3);
    let by_id = Filter::new().id(events[2].id);
    assert_eq!(store.query(&[by_id], now).unwrap(), vec![events[2].clone()]);
}

#[test]
fn expired_events_are_hidden_and_purged() {
    let (mut store, _dir) = store();
    let keys = Keys::generate();
    let lasting = at(&keys, 1, "lasting", vec![], NOW);
    let brief = at(
        &keys,
        1,
        "brief",
        vec![Tag::expiration(Timestamp::from_secs(NOW + 10))],
        NOW,
    );
    store
        .insert_batch(&[lasting.clone(), brief.clone()])
        .unwrap();
    let before = store
        .query(&[Filter::new()], Timestamp::from_secs(NOW + 9))
        .unwrap();
    assert_eq!(before.len(), 2);
    // NIP-40: expired from the expiration second itself on.
    let after = store
        .query(&[Filter::new()], Timestamp::from_secs(NOW + 10))
        .unwrap();
    assert_eq!(after, vec![lasting.clone()]);
    assert_eq!(
        store.purge_expired(Timestamp::from_secs(NOW + 9)).unwrap(),
        0
    );
    assert_eq!(
        store.purge_expired(Timestamp::from_secs(NOW + 10)).unwrap(),
        1
    );
    assert_eq!(store.count().unwrap(), 1);
    // Its tags went with it: a tag query finds nothing and nothing dangles.
    let t = Filter::new().custom_tag(SingleLetterTag::LOWERCASE_P, "x");
    assert!(store
        .query(&[t], Timestamp::from_secs(0))
        .unwrap()
        .is_empty());
}

#[test]
fn data_survives_reopening() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("events.sqlite");
    let keys = Keys::generate();
    let prompt = at(&keys, 25802, "p", vec![], NOW);
    {
        let mut store = EventStore::open(&path).unwrap();
        store.insert(&prompt).unwrap();
    }
    let store = EventStore::open(&path).unwrap();
    assert_eq!(
        store
            .query(&[Filter::new()], Timestamp::from_secs(NOW))
            .unwrap(),
        vec![prompt]
    );
}

#[test]
fn a_newer_schema_is_refused() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("events.sqlite");
    drop(EventStore::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    assert!(matches!(
        EventStore::open(&path),
        Err(agentwire_relay::RelayError::SchemaTooNew {
            found: 99,
            supported: 1
        })
    ));
}

#[test]
fn tag_queries_use_the_tag_index() {
    let (store, _dir) = store();
    let pk = Keys::generate().public_key();
    for filter in [
        Filter::new().pubkey(pk),
        Filter::new()
            .pubkey(pk)
            .kind(Kind::from_u16(25802))
            .limit(10),
        Filter::new()
            .custom_tag(SingleLetterTag::LOWERCASE_S, "session:x")
            .limit(500),
        Filter::new()
            .identifier("agent")
            .kind(Kind::from_u16(31340)),
        Filter::new()
            .event(nostr::event::EventId::from_byte_array([1; 32]))
            .author(pk)
            .kinds([Kind::from_u16(25803), Kind::from_u16(25805)]),
    ] {
        let plan = store.explain(&filter).unwrap().join("\n");
        assert!(plan.contains("SEARCH tags USING PRIMARY KEY"), "{plan}");
        assert!(
            plan.contains("SEARCH events USING INTEGER PRIMARY KEY"),
            "{plan}"
        );
        assert!(!plan.contains("SCAN events"), "{plan}");
    }
    let by_author = store
        .explain(&Filter::new().author(pk).limit(10))
        .unwrap()
        .join("\n");
    assert!(
        by_author.contains("SEARCH events USING INDEX events_pubkey"),
        "{by_author}"
    );
}

/// A small universe so random filters often match.
fn arb_event(keys: &[Keys]) -> impl Strategy<Value = Event> + '_ {
    (
        0..keys.len(),
        prop::sample::select(vec![1u16, 7, 25802, 25803]),
        0u64..6,
        prop::collection::vec(
            (
                prop::sample::select(vec!["p", "e", "s", "t", "P", "expiration"]),
                0u8..3,
            ),
            0..4,
        ),
        0u32..1_000_000,
    )
        .prop_map(move |(k, kind, dt, tags, nonce)| {
            let tags = tags
                .into_iter()
                .map(|(name, v)| match name {
                    "expiration" => Tag::expiration(Timestamp::from_secs(NOW + u64::from(v))),
                    _ => Tag::custom(name, [format!("v{v}")]),
                })
                .collect();
            at(&keys[k], kind, &nonce.to_string(), tags, NOW + dt)
        })
}

fn arb_filter(keys: &[Keys]) -> impl Strategy<Value = Filter> + '_ {
    (
        prop::option::of(prop::collection::btree_set(0..keys.len(), 0..3)),
        prop::option::of(prop::collection::btree_set(
            prop::sample::select(vec![1u16, 7, 25802, 9]),
            0..3,
        )),
        prop::option::of(0u64..6),
        prop::option::of(0u64..6),
        prop::collection::vec(
            (
                prop::sample::select(vec!['p', 'e', 's', 'P', 'x']),
                prop::collection::btree_set(0u8..3, 0..3),
            ),
            0..3,
        ),
        prop::option::of(0usize..5),
    )
        .prop_map(move |(authors, kinds, since, until, tags, limit)| {
            let mut f = Filter::new();
            if let Some(a) = authors {
                f = f.authors(a.into_iter().map(|i| keys[i].public_key()));
            }
            if let Some(k) = kinds {
                f = f.kinds(k.into_iter().map(Kind::from_u16));
            }
            if let Some(s) = since {
                f = f.since(Timestamp::from_secs(NOW + s));
            }
            if let Some(u) = until {
                f = f.until(Timestamp::from_secs(NOW + u));
            }
            for (letter, values) in tags {
                let tag = SingleLetterTag::from_char(letter).unwrap();
                f = f.custom_tags(tag, values.into_iter().map(|v| format!("v{v}")));
            }
            if let Some(l) = limit {
                f = f.limit(l);
            }
            f
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    /// Whatever SQL the store runs, it returns exactly what `match_event` selects, ordered
    /// newest first and cut at the limit.
    #[test]
    fn queries_agree_with_match_event(
        (events, filters, now) in {
            let keys: &'static [Keys] = Box::leak((0..3).map(|_| Keys::generate()).collect::<Vec<_>>().into_boxed_slice());
            (prop::collection::vec(arb_event(keys), 0..25), prop::collection::vec(arb_filter(keys), 1..3), 0u64..4)
        }
    ) {
        let (mut store, _dir) = store();
        store.insert_batch(&events).unwrap();
        let now = Timestamp::from_secs(NOW + now);
        let got = store.query(&filters, now).unwrap();

        let live: Vec<&Event> = events
            .iter()
            .filter(|e| e.tags.expiration().is_none_or(|at| at > now))
            .collect();
        let mut expected: BTreeSet<Event> = BTreeSet::new();
        for filter in &filters {
            // `Event`'s order is newest first, then lowest id.
            let mut matching: Vec<Event> = live
                .iter()
                .filter(|e| filter.match_event(e, MatchEventOptions::new()))
                .map(|e| (*e).clone())
                .collect();
            matching.sort();
            matching.dedup();
            if let Some(limit) = filter.limit {
                matching.truncate(limit);
            }
            expected.extend(matching);
        }
        let expected: Vec<Event> = expected.into_iter().collect();
        prop_assert_eq!(got, expected);
    }
}

#[test]
fn retention_prunes_each_class_by_age_and_keeps_open_questions_and_kept_kinds() {
    use agentwire_relay::retention::RetentionPolicy;
    let (mut store, _dir) = store();
    let keys = Keys::generate();
    const DAY: u64 = 86_400;
    let now = NOW + 400 * DAY;
    let old = NOW; // 400 days before `now`
    let recent = now - DAY;
    let tag = |parts: &[&str]| {
        Tag::parse(parts.iter().map(|p| p.to_string()).collect::<Vec<_>>()).unwrap()
    };
    let agent_old = at(&keys, 25_802, "prompt", vec![], old);
    let agent_new = at(&keys, 25_802, "prompt 2", vec![], recent);
    let note_old = at(&keys, 1, "note", vec![], old);
    let chat_old = at(&keys, 9, "chat", vec![tag(&["h", "lab"])], old);
    let info = at(&keys, 31_340, "info", vec![tag(&["d", ""])], old);
    let moderation = at(&keys, 9_007, "", vec![tag(&["h", "lab"])], old);
    let p = keys.public_key().to_hex();
    let open_question = at(
        &keys,
        9,
        "still asking",
        vec![
            tag(&["h", "lab"]),
            tag(&["p", &p]),
            tag(&["request", "question"]),
            tag(&["tinyagent", "1"]),
            tag(&["selection", "text"]),
        ],
        old,
    );
    store
        .insert_batch(&[
            agent_old.clone(),
            agent_new.clone(),
            note_old.clone(),
            chat_old.clone(),
            info.clone(),
            moderation.clone(),
            open_question.clone(),
        ])
        .unwrap();
    let policy = RetentionPolicy {
        agent_days: 30.0,
        rooms_days: 90.0,
        other_days: 90.0,
    };
    let pruned = store.prune(Timestamp::from_secs(now), &policy).unwrap();
    assert_eq!(
        pruned, 3,
        "the old run event, the old note and the old chat message"
    );
    let left: Vec<_> = store
        .query(&[Filter::new()], Timestamp::from_secs(now))
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    for kept in [&agent_new, &info, &moderation, &open_question] {
        assert!(left.contains(&kept.id), "kind {} kept", kept.kind);
    }
    for gone in [&agent_old, &note_old, &chat_old] {
        assert!(!left.contains(&gone.id), "kind {} pruned", gone.kind);
    }
    // Zero days keeps a class forever.
    let keep_all = RetentionPolicy {
        agent_days: 0.0,
        rooms_days: 0.0,
        other_days: 0.0,
    };
    assert_eq!(
        store
            .prune(Timestamp::from_secs(now * 2), &keep_all)
            .unwrap(),
        0
    );
}

/// The writer checkpoints its WAL once WAL_CHECKPOINT_PAGES have piled up (not at SQLite's 1,000), and the
/// file is cut back to WAL_SIZE_LIMIT_BYTES once a checkpoint has emptied it: a busy relay's WAL grows past
/// SQLite's 4 MiB window, stays near the limit, and when a long read held it back it shrinks again.
#[test]
fn the_wal_grows_to_the_checkpoint_window_and_is_cut_back_to_its_limit() {
    use agentwire_relay::store::WAL_SIZE_LIMIT_BYTES;
    use nostr::event::EventId;
    use nostr::key::PublicKey;
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("events.sqlite");
    let wal = dir.path().join("events.sqlite-wal");
    let mut store = EventStore::open(&path).unwrap();
    let keys = Keys::generate();
    let signed = at(&keys, 1, "x", vec![], NOW);
    let content = "w".repeat(8_000);
    let mut batch = 0u32;
    // 250 events of 8 kB (about 2 MB of pages) a batch; the store trusts its caller with ids and
    // signatures, so distinct ids are enough here. Returns the WAL's size after the batch.
    let mut write = |store: &mut EventStore| {
        let events: Vec<Event> = (0..250u32)
            .map(|i| {
                let mut id = [0u8; 32];
                id[..4].copy_from_slice(&batch.to_be_bytes());
                id[4..8].copy_from_slice(&i.to_be_bytes());
                Event::new(
                    EventId::from_byte_array(id),
                    PublicKey::from_slice(&keys.public_key().to_bytes()).unwrap(),
                    Timestamp::from_secs(NOW),
                    Kind::TextNote,
                    [],
                    content.clone(),
                    signed.sig,
                )
            })
            .collect();
        batch += 1;
        let outcomes = store.insert_batch(&events).unwrap();
        assert!(outcomes.iter().all(|o| *o == InsertOutcome::Inserted));
        std::fs::metadata(&wal).unwrap().len()
    };
    // One batch may land past the limit before the checkpoint that follows it.
    let bound = WAL_SIZE_LIMIT_BYTES as u64 + 4 * 1024 * 1024;
    let largest = (0..40).map(|_| write(&mut store)).max().unwrap();
    assert!(
        largest > 3 * 1_000 * 4096,
        "the WAL was checkpointed at SQLite's default window: largest {largest} bytes"
    );
    assert!(largest <= bound, "the WAL grew to {largest} bytes");

    // A reader holding one snapshot keeps the WAL from starting over, so it grows past the limit...
    let reader = rusqlite::Connection::open(&path).unwrap();
    reader.execute_batch("BEGIN").unwrap();
    let _: i64 = reader
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap();
    let held = (0..40).map(|_| write(&mut store)).max().unwrap();
    assert!(held > bound, "the held-back WAL stayed at {held} bytes");
    // ...and once it lets go, the next checkpoints empty the WAL and cut the file back.
    reader.execute_batch("COMMIT").unwrap();
    drop(reader);
    let after = (0..20).map(|_| write(&mut store)).last().unwrap();
    assert!(
        after <= bound,
        "the WAL stayed at {after} bytes after the reader let go"
    );
}
