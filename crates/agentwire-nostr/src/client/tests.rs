//! The reconciliation rules of the run view.

use super::*;
use crate::crypto::Crypto;
use nostr::prelude::Keys;

struct Fixture {
    agent: Crypto,
    client: PublicKey,
    prompt: EventId,
}

impl Fixture {
    fn new() -> Self {
        let client = Keys::generate().public_key();
        Fixture {
            agent: Crypto::new(Keys::generate()),
            client,
            prompt: EventId::from_byte_array([0; 32]),
        }
    }
    fn event(&self, kind: u16, plain: &str, at: u64) -> (Message, String) {
        let ev = self.agent.sign(
            EventBuilder::new(Kind::Custom(kind), "x")
                .tags(tags::run(&self.client, &self.prompt, "s"))
                .custom_created_at(Timestamp::from(at)),
        );
        (Message::signed(ev), plain.to_string())
    }
    fn view(&self) -> RunView {
        RunView::new(self.client, self.agent.public_key(), self.prompt)
    }
}

fn apply(v: &mut RunView, e: &(Message, String)) -> Vec<Update> {
    v.apply(&e.0, Some(&e.1))
}

#[test]
fn orders_by_seq_dedupes_and_reports_gaps() {
    let f = Fixture::new();
    let mut v = f.view();
    // Created in order, arriving out of it.
    let d1 = f.event(kinds::DELTA, r#"{"ver":1,"text":"b","seq":1}"#, 10);
    let d0 = f.event(kinds::DELTA, r#"{"ver":1,"text":"a","seq":0}"#, 9);
    let d3 = f.event(kinds::DELTA, r#"{"ver":1,"text":"d","seq":3}"#, 12);
    assert_eq!(apply(&mut v, &d1), vec![Update::Gap]);
    assert_eq!(apply(&mut v, &d1), vec![], "same event id is dropped");
    assert_eq!(
        apply(&mut v, &d0),
        vec![Update::Text("a".into()), Update::Text("b".into())]
    );
    assert_eq!(apply(&mut v, &d3), vec![]);
    let dup_seq = f.event(kinds::DELTA, r#"{"ver":1,"text":"a","seq":0}"#, 13);
    assert_eq!(apply(&mut v, &dup_seq), vec![]);
}

#[test]
fn newest_terminal_wins_and_nothing_applies_after_it() {
    let f = Fixture::new();
    let mut v = f.view();
    let resp = f.event(kinds::RESPONSE, r#"{"ver":1,"text":"done"}"#, 20);
    let older_err = f.event(
        kinds::ERROR,
        r#"{"ver":1,"code":"CANCELLED","message":"c"}"#,
        19,
    );
    let newer_err = f.event(
        kinds::ERROR,
        r#"{"ver":1,"code":"CANCELLED","message":"c"}"#,
        21,
    );
    assert_eq!(apply(&mut v, &resp), vec![Update::Terminal]);
    assert_eq!(v.terminal().unwrap().text().as_deref(), Some("done"));
    assert_eq!(apply(&mut v, &older_err), vec![]);
    let late_delta = f.event(kinds::DELTA, r#"{"ver":1,"text":"z","seq":0}"#, 22);
    assert_eq!(apply(&mut v, &late_delta), vec![]);
    assert_eq!(apply(&mut v, &newer_err), vec![Update::Terminal]);
    assert!(matches!(v.terminal(), Some(Terminal::Error(_))));
}

#[test]
fn ignores_other_runs_authors_and_recipients() {
    let f = Fixture::new();
    let mut v = f.view();
    let other = Crypto::new(Keys::generate());
    let forged = other.sign(
        EventBuilder::new(Kind::Custom(kinds::RESPONSE), "x")
            .tags(tags::run(&f.client, &f.prompt, "s")),
    );
    assert_eq!(
        v.apply(&Message::signed(forged), Some(r#"{"ver":1,"text":"evil"}"#)),
        vec![]
    );
    let other_run =
        f.agent.sign(
            EventBuilder::new(Kind::Custom(kinds::RESPONSE), "x").tags(tags::run(
                &f.client,
                &EventId::from_byte_array([1; 32]),
                "s",
            )),
        );
    assert_eq!(
        v.apply(
            &Message::signed(other_run),
            Some(r#"{"ver":1,"text":"other"}"#)
        ),
        vec![]
    );
    assert!(v.terminal().is_none());
}

#[test]
fn final_text_unwraps_the_compatibility_envelope() {
    let f = Fixture::new();
    let mut v = f.view();
    let resp = f.event(
        kinds::RESPONSE,
        r#"{"ver":1,"text":"event=final|phase=end|text=Here%20it%20is|ts=1"}"#,
        5,
    );
    apply(&mut v, &resp);
    assert_eq!(v.terminal().unwrap().text().as_deref(), Some("Here it is"));
    // A delta's envelope in camelCase, and a response's without its `ts`: the first is unwrapped, the
    // second shown as it came.
    let mut v = f.view();
    let d = f.event(
        kinds::DELTA,
        r#"{"ver":1,"seq":0,"text":"event=delta|phase=update|text=hi|runId=r|timestamp=4"}"#,
        4,
    );
    assert_eq!(apply(&mut v, &d), vec![Update::Text("hi".into())]);
    // `mode=thinking` is the agent's thinking, in its place in the order, not answer text.
    let t = f.event(
        kinds::DELTA,
        r#"{"ver":1,"seq":1,"text":"event=delta|mode=thinking|phase=update|text=hmm|ts=5"}"#,
        5,
    );
    assert_eq!(apply(&mut v, &t), vec![Update::Thinking("hmm".into())]);
    let raw = "event=final|phase=end|text=Here%20it%20is";
    let resp = f.event(
        kinds::RESPONSE,
        &format!(r#"{{"ver":1,"text":"{raw}"}}"#),
        5,
    );
    apply(&mut v, &resp);
    assert_eq!(v.terminal().unwrap().text().as_deref(), Some(raw));
}

#[test]
fn new_sessions_are_the_spec_form_and_distinct() {
    let (a, b) = (new_session(), new_session());
    assert!(
        a.starts_with("session:") && a.len() == "session:".len() + 32,
        "{a}"
    );
    assert!(a["session:".len()..].chars().all(|c| c.is_ascii_hexdigit()));
    assert_ne!(a, b);
}

#[test]
fn a_broken_sequence_is_flagged_once_and_rendering_goes_on() {
    let f = Fixture::new();
    let mut v = f.view();
    let d0 = f.event(kinds::DELTA, r#"{"ver":1,"text":"a","seq":0}"#, 10);
    let d1 = f.event(kinds::DELTA, r#"{"ver":1,"text":"b","seq":1}"#, 11);
    assert_eq!(apply(&mut v, &d0), vec![Update::Text("a".into())]);
    assert_eq!(apply(&mut v, &d1), vec![Update::Text("b".into())]);
    // seq 1 again with other text: INVALID_SEQUENCE, and the first text stays.
    let other = f.event(kinds::DELTA, r#"{"ver":1,"text":"B","seq":1}"#, 12);
    assert_eq!(
        apply(&mut v, &other),
        vec![Update::InvalidSequence { seq: 1 }]
    );
    // seq 3 created before seq 1: out of order, but reported once only; seq 2 then renders both.
    let d3 = f.event(kinds::DELTA, r#"{"ver":1,"text":"d","seq":3}"#, 5);
    assert_eq!(apply(&mut v, &d3), vec![Update::Gap]);
    let d2 = f.event(kinds::DELTA, r#"{"ver":1,"text":"c","seq":2}"#, 13);
    assert_eq!(
        apply(&mut v, &d2),
        vec![Update::Text("c".into()), Update::Text("d".into())]
    );

    // A fresh run: the first break is reported.
    let mut v = f.view();
    assert_eq!(apply(&mut v, &d0), vec![Update::Text("a".into())]);
    let early = f.event(kinds::DELTA, r#"{"ver":1,"text":"x","seq":4}"#, 5);
    assert_eq!(
        apply(&mut v, &early),
        vec![Update::InvalidSequence { seq: 4 }, Update::Gap]
    );
    // The same (seq, text) again is a duplicate, not a break.
    let mut v = f.view();
    assert_eq!(apply(&mut v, &d0), vec![Update::Text("a".into())]);
    let again = f.event(kinds::DELTA, r#"{"ver":1,"text":"a","seq":0}"#, 14);
    assert_eq!(apply(&mut v, &again), vec![]);
}

#[test]
fn a_run_joined_part_way_renders_from_the_first_delta_seen() {
    let f = Fixture::new();
    let mut v = f.view().joining();
    let d5 = f.event(kinds::DELTA, r#"{"ver":1,"text":"f","seq":5}"#, 10);
    let d6 = f.event(kinds::DELTA, r#"{"ver":1,"text":"g","seq":6}"#, 11);
    assert_eq!(apply(&mut v, &d5), vec![Update::Text("f".into())]);
    assert_eq!(apply(&mut v, &d6), vec![Update::Text("g".into())]);
    // A fresh view waits for seq 0.
    let mut v = f.view();
    assert_eq!(apply(&mut v, &d5), vec![Update::Gap]);
    // The highest seq there is does not overflow the order check.
    let mut v = f.view();
    let top = f.event(
        kinds::DELTA,
        &format!(r#"{{"ver":1,"text":"x","seq":{}}}"#, u64::MAX),
        10,
    );
    assert_eq!(apply(&mut v, &top), vec![Update::Gap]);
    let d0 = f.event(kinds::DELTA, r#"{"ver":1,"text":"a","seq":0}"#, 9);
    assert_eq!(apply(&mut v, &d0), vec![Update::Text("a".into())]);
}
