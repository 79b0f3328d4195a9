//! Tests of the tiny agent question and answer rules.

use nostr::event::{Event, EventBuilder, FinalizeEvent, Kind, Tag};
use nostr::key::Keys;
use nostr::types::Timestamp;

use super::*;

fn tag(parts: &[&str]) -> Tag {
    Tag::parse(parts.iter().map(|p| p.to_string()).collect::<Vec<_>>()).unwrap()
}

fn signed(keys: &Keys, kind: u16, content: &str, tags: Vec<Tag>, at: u64) -> Event {
    EventBuilder::new(Kind::from_u16(kind), content)
        .tags(tags)
        .custom_created_at(Timestamp::from_secs(at))
        .finalize(keys)
        .unwrap()
}

const AT: u64 = 1_800_000_000;

struct Parties {
    agent: Keys,
    asked: Keys,
    other: Keys,
}

fn parties() -> Parties {
    Parties {
        agent: Keys::generate(),
        asked: Keys::generate(),
        other: Keys::generate(),
    }
}

/// The native tags of a single-selection question asking `asked`, with `extra` tags after them.
fn question_tags(asked: &Keys, extra: &[&[&str]]) -> Vec<Tag> {
    let p = asked.public_key().to_hex();
    let mut tags = vec![
        tag(&["h", "lab"]),
        tag(&["p", &p]),
        tag(&["request", "question"]),
        tag(&["tinyagent", "1"]),
    ];
    tags.extend(extra.iter().map(|t| tag(t)));
    tags
}

fn ask(p: &Parties, extra: &[&[&str]]) -> Event {
    signed(&p.agent, 9, "Continue?", question_tags(&p.asked, extra), AT)
}

fn two_options() -> Vec<&'static [&'static str]> {
    vec![
        &["option", "continue", "Continue playing"],
        &["option", "stop", "Stop here"],
    ]
}

fn rule(p: &Parties, extra: &[&[&str]]) -> QuestionRule {
    question(&ask(p, extra)).unwrap_err()
}

#[test]
fn a_native_question_is_read_with_its_options_people_and_expiry() {
    let p = parties();
    let mention = p.asked.public_key().to_hex();
    let other = p.other.public_key().to_hex();
    let mut extra = two_options();
    let m: &[&str] = &["mention", &mention];
    let o: &[&str] = &["p", &other];
    extra.extend([
        &["interaction", "question"][..],
        &["selection", "single"],
        &["subject", "Next step"],
        &["expiration", "1800000600"],
        m,
        o,
    ]);
    let e = ask(&p, &extra);
    assert!(is_question(&e));
    let card = question(&e).unwrap();
    assert_eq!(card.interaction, Interaction::Question);
    assert_eq!(card.selection, Selection::Single);
    assert_eq!(
        card.options,
        vec![
            ("continue".to_string(), "Continue playing".to_string()),
            ("stop".to_string(), "Stop here".to_string())
        ]
    );
    assert_eq!(card.asked, vec![p.asked.public_key(), p.other.public_key()]);
    assert_eq!(card.room, "lab");
    assert_eq!(card.subject.as_deref(), Some("Next step"));
    assert_eq!(card.expiration, Some(Timestamp::from_secs(1_800_000_600)));
    // Only asked people also mentioned are notified.
    assert_eq!(card.to_notify(), vec![p.asked.public_key()]);
}

#[test]
fn only_kind_9_with_both_native_tags_is_a_question_card() {
    let p = parties();
    let plain = signed(&p.agent, 9, "approve?", vec![tag(&["h", "lab"])], AT);
    assert!(!is_question(&plain));
    let half = signed(
        &p.agent,
        9,
        "approve?",
        vec![tag(&["request", "question"]), tag(&["tinyagent", "2"])],
        AT,
    );
    assert!(!is_question(&half));
    let wrong_kind = signed(&p.agent, 1, "x", question_tags(&p.asked, &[]), AT);
    assert!(!is_question(&wrong_kind));
}

#[test]
fn every_malformed_question_is_refused_naming_its_rule() {
    let p = parties();
    let long_id = "i".repeat(65);
    let long_label = "l".repeat(201);
    let with = |extra: &[&[&str]]| {
        let mut v = two_options();
        v.extend_from_slice(extra);
        rule(&p, &v)
    };
    assert_eq!(
        with(&[&["interaction", "poll"]]),
        QuestionRule::UnknownInteraction("poll".into())
    );
    assert_eq!(
        with(&[&["selection", "ranked"]]),
        QuestionRule::UnknownSelection("ranked".into())
    );
    assert_eq!(
        with(&[&["selection", "single"], &["selection", "multiple"]]),
        QuestionRule::Repeated("selection")
    );
    let thirteen: Vec<Vec<String>> = (0..13)
        .map(|i| vec!["option".into(), format!("o{i}"), format!("Option {i}")])
        .collect();
    let thirteen: Vec<Vec<&str>> = thirteen
        .iter()
        .map(|t| t.iter().map(String::as_str).collect())
        .collect();
    let thirteen: Vec<&[&str]> = thirteen.iter().map(Vec::as_slice).collect();
    assert_eq!(rule(&p, &thirteen), QuestionRule::TooManyOptions(13));
    assert_eq!(with(&[&["option", "x"]]), QuestionRule::IncompleteOption);
    assert_eq!(
        with(&[&["option", "", "Empty id"]]),
        QuestionRule::OptionId(String::new())
    );
    assert_eq!(
        with(&[&["option", &long_id, "Long id"]]),
        QuestionRule::OptionId(long_id.clone())
    );
    assert_eq!(
        with(&[&["option", "e", ""]]),
        QuestionRule::OptionLabel("e".into())
    );
    assert_eq!(
        with(&[&["option", "long", &long_label]]),
        QuestionRule::OptionLabel("long".into())
    );
    assert_eq!(
        with(&[&["option", "stop", "Stop again"]]),
        QuestionRule::DuplicateOption("stop".into())
    );
    assert_eq!(with(&[&["selection", "text"]]), QuestionRule::OptionsOnText);
    assert_eq!(
        rule(&p, &[&["selection", "text"], &["freeform", "true"]]),
        QuestionRule::FreeformWithoutOptions
    );
    assert_eq!(
        rule(&p, &[&["freeform", "true"]]),
        QuestionRule::FreeformWithoutOptions
    );
    assert_eq!(rule(&p, &[]), QuestionRule::NoOptions);
    assert_eq!(
        with(&[&["freeform", "yes"]]),
        QuestionRule::BadFreeform("yes".into())
    );
    for bad in ["soon", "-5", "+5", "1.5", ""] {
        assert_eq!(
            with(&[&["expiration", bad]]),
            QuestionRule::BadExpiration(bad.into()),
            "{bad:?}"
        );
    }
    assert_eq!(
        with(&[&["mention", "not-a-key"]]),
        QuestionRule::BadPublicKey("mention")
    );
    let no_p = signed(
        &p.agent,
        9,
        "?",
        vec![
            tag(&["h", "lab"]),
            tag(&["request", "question"]),
            tag(&["tinyagent", "1"]),
            tag(&["selection", "text"]),
        ],
        AT,
    );
    assert_eq!(question(&no_p).unwrap_err(), QuestionRule::NoAskedPerson);
    let no_h = signed(
        &p.agent,
        9,
        "?",
        vec![
            tag(&["p", &p.asked.public_key().to_hex()]),
            tag(&["request", "question"]),
            tag(&["tinyagent", "1"]),
            tag(&["selection", "text"]),
        ],
        AT,
    );
    assert_eq!(question(&no_h).unwrap_err(), QuestionRule::NoRoom);
    // Each reason says what is wrong in words.
    assert!(QuestionRule::TooManyOptions(13)
        .to_string()
        .contains("at most 12"));
}

#[test]
fn the_limits_themselves_are_accepted_and_counted_in_characters() {
    let p = parties();
    let twelve: Vec<Vec<String>> = (0..12)
        .map(|i| vec!["option".into(), format!("o{i}"), format!("Option {i}")])
        .collect();
    let twelve: Vec<Vec<&str>> = twelve
        .iter()
        .map(|t| t.iter().map(String::as_str).collect())
        .collect();
    let twelve: Vec<&[&str]> = twelve.iter().map(Vec::as_slice).collect();
    assert_eq!(question(&ask(&p, &twelve)).unwrap().options.len(), 12);
    // 64 two-byte characters: 128 bytes, still 64 characters.
    let id = "é".repeat(64);
    let label = "ü".repeat(200);
    let card = question(&ask(&p, &[&["option", &id, &label]])).unwrap();
    assert_eq!(card.options[0].0, id);
    let text = question(&ask(&p, &[&["selection", "text"]])).unwrap();
    assert_eq!(text.selection, Selection::Text);
}

/// A NIP-22 reply to `request` by `by`, with every tag right unless `drop` names one to leave out.
fn reply(by: &Keys, request: &Event, content: &str, at: u64, drop: Option<&str>) -> Event {
    let id = request.id.to_hex();
    let author = request.pubkey.to_hex();
    let tags: Vec<Tag> = [
        ["E", id.as_str()],
        ["e", id.as_str()],
        ["K", "9"],
        ["k", "9"],
        ["P", author.as_str()],
        ["p", author.as_str()],
        ["h", "lab"],
    ]
    .iter()
    .filter(|t| Some(t[0]) != drop)
    .map(|t| tag(t))
    .collect();
    signed(by, 1111, content, tags, at)
}

fn now() -> Timestamp {
    Timestamp::from_secs(AT + 10)
}

#[test]
fn a_valid_single_answer_settles_with_its_choice() {
    let p = parties();
    let q = ask(&p, &two_options());
    let card = question(&q).unwrap();
    let a = reply(&p.asked, &q, "stop", AT + 5, None);
    assert_eq!(answered_request(&a), Some(q.id));
    assert_eq!(
        check_answer(&q, &card, &a, now()).unwrap(),
        Settlement {
            choices: vec!["stop".into()],
            text: None
        }
    );
}

#[test]
fn a_comment_has_one_root_and_one_parent_and_names_both() {
    let p = parties();
    let q = ask(&p, &two_options());
    let other = ask(&p, &[]);
    let a = reply(&p.asked, &q, "stop", AT + 5, None);
    assert_eq!(check_comment(&a), Ok(()));
    assert_eq!(named_requests(&a), vec![q.id]);
    // No root: the parent is still named, so the card holds it to its rules.
    let no_root = reply(&p.asked, &q, "stop", AT + 5, Some("E"));
    assert_eq!(answered_request(&no_root), None);
    assert_eq!(named_requests(&no_root), vec![q.id]);
    let two_roots = signed(
        &p.asked,
        1111,
        "stop",
        vec![tag(&["E", &other.id.to_hex()]), tag(&["E", &q.id.to_hex()])],
        AT + 5,
    );
    assert!(check_comment(&two_roots).unwrap_err().contains("one E tag"));
    assert_eq!(answered_request(&two_roots), None);
    assert_eq!(named_requests(&two_roots), vec![other.id, q.id]);
    let two_parents = signed(
        &p.asked,
        1111,
        "stop",
        vec![tag(&["e", &other.id.to_hex()]), tag(&["e", &q.id.to_hex()])],
        AT + 5,
    );
    assert!(check_comment(&two_parents)
        .unwrap_err()
        .contains("one e tag"));
    // Only comments are held to it.
    let note = signed(
        &p.asked,
        1,
        "",
        vec![tag(&["e", "x"]), tag(&["e", "y"])],
        AT,
    );
    assert_eq!(check_comment(&note), Ok(()));
    assert!(named_requests(&note).is_empty());
}

#[test]
fn an_answer_from_someone_not_asked_or_at_the_wrong_time_is_refused() {
    let p = parties();
    let mut extra = two_options();
    extra.push(&["expiration", "1800000100"]);
    let q = ask(&p, &extra);
    let card = question(&q).unwrap();
    let not_asked = reply(&p.other, &q, "stop", AT + 5, None);
    let e = check_answer(&q, &card, &not_asked, now()).unwrap_err();
    assert_eq!(e, AnswerRefusal::NotAsked);
    assert_eq!(e.prefix(), "restricted");
    let early = reply(&p.asked, &q, "stop", AT - 1, None);
    assert_eq!(
        check_answer(&q, &card, &early, now()),
        Err(AnswerRefusal::BeforeQuestion)
    );
    // Created at the question's own second is in time; at the expiration second it is not.
    let same_second = reply(&p.asked, &q, "stop", AT, None);
    assert!(check_answer(&q, &card, &same_second, now()).is_ok());
    let at_expiry = reply(&p.asked, &q, "stop", AT + 100, None);
    assert_eq!(
        check_answer(&q, &card, &at_expiry, Timestamp::from_secs(AT + 100)),
        Err(AnswerRefusal::Expired(Timestamp::from_secs(AT + 100)))
    );
    let last_second = reply(&p.asked, &q, "stop", AT + 99, None);
    assert!(check_answer(&q, &card, &last_second, Timestamp::from_secs(AT + 99)).is_ok());
    // 60 s of clock skew is tolerated, 61 is not.
    let no_expiry = ask(&p, &two_options());
    let card2 = question(&no_expiry).unwrap();
    let skewed = reply(&p.asked, &no_expiry, "stop", AT + 70, None);
    assert!(check_answer(&no_expiry, &card2, &skewed, now()).is_ok());
    let future = reply(&p.asked, &no_expiry, "stop", AT + 71, None);
    assert_eq!(
        check_answer(&no_expiry, &card2, &future, now()),
        Err(AnswerRefusal::FromTheFuture)
    );
}

#[test]
fn an_answer_missing_any_nip22_tag_is_refused_naming_it() {
    let p = parties();
    let q = ask(&p, &two_options());
    let card = question(&q).unwrap();
    for name in ["E", "e", "K", "k", "P", "p", "h"] {
        let a = reply(&p.asked, &q, "stop", AT + 5, Some(name));
        match check_answer(&q, &card, &a, now()) {
            Err(AnswerRefusal::Tag(rule)) => assert!(rule.starts_with(name), "{name}: {rule}"),
            other => panic!("{name}: {other:?}"),
        }
    }
}

fn content_of(p: &Parties, extra: &[&[&str]], content: &str) -> Result<Settlement, AnswerRefusal> {
    let q = ask(p, extra);
    let card = question(&q).unwrap();
    check_answer(
        &q,
        &card,
        &reply(&p.asked, &q, content, AT + 5, None),
        now(),
    )
}

fn refused(r: Result<Settlement, AnswerRefusal>) -> String {
    match r {
        Err(AnswerRefusal::Content(why)) => why.to_string(),
        other => panic!("expected a content refusal, got {other:?}"),
    }
}

#[test]
fn the_content_must_fit_the_selection() {
    let p = parties();
    let single = two_options();
    assert!(refused(content_of(&p, &single, "maybe")).contains("not an option"));
    assert!(refused(content_of(&p, &single, "[\"stop\"]")).contains("not an option"));
    let mut multiple = two_options();
    multiple.push(&["selection", "multiple"]);
    assert_eq!(
        content_of(&p, &multiple, "[\"stop\",\"continue\"]")
            .unwrap()
            .choices,
        vec!["stop", "continue"]
    );
    assert!(refused(content_of(&p, &multiple, "[\"stop\",\"stop\"]")).contains("twice"));
    assert!(refused(content_of(&p, &multiple, "[]")).contains("at least one"));
    assert!(refused(content_of(&p, &multiple, "stop")).contains("JSON array"));
    assert!(refused(content_of(&p, &multiple, "[\"nope\"]")).contains("not an option"));
    let text: &[&[&str]] = &[&["selection", "text"]];
    assert_eq!(
        content_of(&p, text, "Ship it on Friday")
            .unwrap()
            .text
            .as_deref(),
        Some("Ship it on Friday")
    );
    assert!(refused(content_of(&p, text, "  ")).contains("empty"));
    let long = "x".repeat(MAX_ANSWER_CHARS + 1);
    assert!(refused(content_of(&p, text, &long)).contains("at most 8000"));
    assert!(content_of(&p, text, &"x".repeat(MAX_ANSWER_CHARS)).is_ok());
}

#[test]
fn freeform_answers_take_text_alone_or_with_choices_and_nothing_else() {
    let p = parties();
    let mut single = two_options();
    single.push(&["freeform", "true"]);
    assert_eq!(
        content_of(&p, &single, r#"{"text":"Not yet"}"#).unwrap(),
        Settlement {
            choices: vec![],
            text: Some("Not yet".into())
        }
    );
    assert_eq!(
        content_of(
            &p,
            &single,
            r#"{"choices":["stop"],"text":"The run needs review."}"#
        )
        .unwrap(),
        Settlement {
            choices: vec!["stop".into()],
            text: Some("The run needs review.".into())
        }
    );
    // A plain choice is still an answer.
    assert_eq!(
        content_of(&p, &single, "stop").unwrap().choices,
        vec!["stop"]
    );
    assert!(refused(content_of(
        &p,
        &single,
        r#"{"choices":["stop","continue"],"text":"both"}"#
    ))
    .contains("exactly one"));
    assert!(refused(content_of(&p, &single, r#"{"choices":["stop"]}"#)).contains("freeform"));
    assert!(refused(content_of(&p, &single, r#"{"text":"x","why":"y"}"#)).contains("nothing else"));
    assert!(refused(content_of(&p, &single, r#"{"text":""}"#)).contains("empty"));
    let mut multiple = two_options();
    multiple.extend([&["freeform", "true"][..], &["selection", "multiple"]]);
    assert_eq!(
        content_of(
            &p,
            &multiple,
            r#"{"choices":["stop","continue"],"text":"both"}"#
        )
        .unwrap()
        .choices,
        vec!["stop", "continue"]
    );
    // Without freeform, the JSON forms are not answers.
    assert!(
        refused(content_of(&p, &two_options(), r#"{"text":"Not yet"}"#)).contains("not an option")
    );
}
