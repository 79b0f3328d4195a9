//! Tests of the inbound decoders: good messages, each kind of refusal with its pointer, and robustness.

use super::*;
use proptest::prelude::*;
use serde_json::{json, Value};

const V1: &str = "io.choria.fisk-ai.v1.";

fn msg(name: &str, body: Value) -> Value {
    let mut m = json!({
        "protocol": format!("{V1}{name}"),
        "id": "3Hzmp2RBLG713TfOTU5aJpATRg2",
        "request": "docs1",
        "conversation": "docs1",
        "sequence": 0,
        "time": "2026-08-16T11:00:00Z",
        "sender": {"name": "peer1"},
    });
    for (k, v) in body.as_object().unwrap() {
        m[k] = v.clone();
    }
    m
}

fn bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

fn prompt() -> Value {
    msg(
        "request.prompt",
        json!({"prompt": "how many streams are there"}),
    )
}

fn task_err(v: &Value) -> WireError {
    decode_task(&bytes(v)).unwrap_err()
}

fn without(mut v: Value, key: &str) -> Value {
    v.as_object_mut().unwrap().remove(key);
    v
}

fn with(mut v: Value, key: &str, val: Value) -> Value {
    v[key] = val;
    v
}

#[test]
fn decodes_the_spec_prompt() {
    let TaskRequest::Prompt(p) = decode_task(&bytes(&prompt())).unwrap() else {
        panic!("not a prompt")
    };
    assert_eq!(p.prompt, "how many streams are there");
    assert_eq!(p.header.request, "docs1");
    assert_eq!(p.header.sender.name(), "peer1");
    assert_eq!(p.header.time, "2026-08-16T11:00:00Z");
    assert!(p.stream, "stream defaults to true");
    assert!(!p.force);
    assert_eq!(
        (p.replay, p.budget, p.conversation_token),
        (None, None, None)
    );
}

#[test]
fn decodes_every_prompt_field_and_ignores_unknown_ones() {
    let v = msg(
        "request.prompt",
        json!({
            "prompt": "p", "context": "c", "tool_hints": ["a", "b"],
            "budget": {"max_tokens": 10, "max_iterations": 2.0, "call_timeout": "60s", "extra": 1},
            "stream": false, "conversation_token": "tok_1", "replay": 500, "force": true,
            "recipient": {"name": "w", "instance": "i1"}, "parent": "p0", "must_understand": true,
            "traceparent": "00-x", "deltas": true, "future_field": {"x": null},
        }),
    );
    let TaskRequest::Prompt(p) = decode_task(&bytes(&v)).unwrap() else {
        panic!("not a prompt")
    };
    assert_eq!(p.context.as_deref(), Some("c"));
    assert_eq!(p.tool_hints, ["a", "b"]);
    let b = p.budget.unwrap();
    assert_eq!((b.max_tokens, b.max_iterations), (Some(10), Some(2)));
    assert_eq!(b.call_timeout.as_deref(), Some("60s"));
    assert!(!p.stream && p.force);
    assert_eq!(p.replay, Some(500), "the cap is the worker's to apply");
    assert_eq!(p.header.recipient.unwrap().instance(), Some("i1"));
    assert!(p.header.must_understand);
}

#[test]
fn decodes_answer_resume_and_read() {
    let answer = msg(
        "request.answer",
        json!({"conversation_token": "t", "answer": {"tool_use_id": "toolu_01", "kind": "approve",
            "answer": "choice", "choice": "once"}, "replay": 1}),
    );
    let TaskRequest::Answer(a) = decode_task(&bytes(&answer)).unwrap() else {
        panic!("not an answer")
    };
    assert_eq!(
        a.answer.decision(),
        Ok(Decision::Approve(ElicitChoice::Once))
    );
    assert_eq!(a.replay, Some(1));

    let resume = msg(
        "request.resume",
        json!({"conversation_token": "t", "force": true, "context": 5}),
    );
    let r = decode_task(&bytes(&resume)).unwrap();
    assert_eq!(r.conversation_token(), Some("t"));
    assert!(matches!(
        r,
        TaskRequest::Resume(ResumeRequest { force: true, .. })
    ));

    // Read takes nothing else, so `budget` there is an unknown field, whatever its value.
    let read = msg(
        "request.read",
        json!({"conversation_token": "t", "replay": 200, "budget": "anything"}),
    );
    let TaskRequest::Read(r) = decode_task(&bytes(&read)).unwrap() else {
        panic!("not a read")
    };
    assert_eq!(r.replay, 200);
}

#[test]
fn refuses_a_sibling_kinds_field_like_the_spec_example() {
    let v = msg(
        "request.resume",
        json!({"conversation_token": "t", "prompt": "..."}),
    );
    let e = task_err(&v);
    assert_eq!(
        e,
        WireError::NotAllowed {
            pointer: "/prompt".into(),
            protocol: "request.resume"
        }
    );
    assert_eq!(
        e.to_string(),
        "the request is not a valid v1 message: at '/prompt': not allowed in request.resume"
    );
    let v = msg(
        "request.resume",
        json!({"conversation_token": "t", "replay": 2}),
    );
    assert_eq!(task_err(&v).pointer(), "/replay");
    let v = with(prompt(), "answer", Value::Null);
    assert!(matches!(task_err(&v), WireError::NotAllowed { .. }));
    let v = msg(
        "request.answer",
        json!({"conversation_token": "t", "prompt": "x",
            "answer": {"tool_use_id": "u", "kind": "input", "answer": "value", "value": ""}}),
    );
    assert_eq!(task_err(&v).pointer(), "/prompt");
}

#[test]
fn refuses_each_missing_required_field() {
    for key in [
        "protocol",
        "id",
        "request",
        "conversation",
        "sequence",
        "time",
        "sender",
        "prompt",
    ] {
        let e = task_err(&without(prompt(), key));
        assert_eq!(
            e,
            WireError::Missing {
                pointer: format!("/{key}")
            },
            "{key}"
        );
    }
    let v = with(prompt(), "sender", json!({"instance": "i"}));
    assert_eq!(task_err(&v).pointer(), "/sender/name");
    let read = msg("request.read", json!({"conversation_token": "t"}));
    assert_eq!(task_err(&read).pointer(), "/replay");
}

#[test]
fn refuses_broken_patterns_and_lengths() {
    for (key, val) in [
        ("id", "a b"),
        ("request", "docs.1"),
        ("conversation", ""),
        ("conversation_token", "t/1"),
    ] {
        let e = task_err(&with(prompt(), key, json!(val)));
        assert_eq!(e.pointer(), format!("/{key}"));
        assert!(matches!(e, WireError::Pattern { .. }), "{key}: {e}");
    }
    let e = task_err(&with(prompt(), "request", json!("r".repeat(65))));
    assert_eq!(
        e,
        WireError::TooLong {
            pointer: "/request".into(),
            max: 64
        }
    );
    assert!(decode_task(&bytes(&with(prompt(), "request", json!("r".repeat(64))))).is_ok());
    let e = task_err(&with(
        prompt(),
        "conversation_token",
        json!("t".repeat(129)),
    ));
    assert!(matches!(e, WireError::TooLong { max: 128, .. }));
    let e = task_err(&with(prompt(), "prompt", json!("")));
    assert!(matches!(e, WireError::TooShort { min: 1, .. }));
    let e = task_err(&with(
        prompt(),
        "recipient",
        json!({"name": "w", "instance": "a.b"}),
    ));
    assert_eq!(e.pointer(), "/recipient/instance");
}

#[test]
fn refuses_wrong_types_and_nulls() {
    for (key, val, want) in [
        ("sequence", json!("0"), JsonType::Integer),
        ("sequence", json!(0.5), JsonType::Integer),
        ("stream", Value::Null, JsonType::Boolean),
        ("force", json!(1), JsonType::Boolean),
        ("context", json!(["c"]), JsonType::String),
        ("tool_hints", json!("a"), JsonType::Array),
        ("budget", json!([]), JsonType::Object),
        ("sender", json!("peer1"), JsonType::Object),
        ("parent", Value::Null, JsonType::String),
        ("must_understand", json!("yes"), JsonType::Boolean),
    ] {
        let e = task_err(&with(prompt(), key, val));
        assert_eq!(
            e,
            WireError::WrongType {
                pointer: format!("/{key}"),
                expected: want
            }
        );
    }
    let e = task_err(&with(prompt(), "tool_hints", json!(["a", 2])));
    assert_eq!(e.pointer(), "/tool_hints/1");
    let e = task_err(&with(prompt(), "budget", json!({"max_tokens": -1})));
    assert_eq!(
        e,
        WireError::BelowMinimum {
            pointer: "/budget/max_tokens".into(),
            minimum: 0
        }
    );
    let e = task_err(&with(prompt(), "budget", json!({"call_timeout": 60})));
    assert_eq!(e.pointer(), "/budget/call_timeout");
}

#[test]
fn refuses_counts_below_their_minimum() {
    let e = task_err(&with(prompt(), "sequence", json!(-1)));
    assert!(matches!(e, WireError::BelowMinimum { minimum: 0, .. }));
    let e = task_err(&with(prompt(), "replay", json!(0)));
    assert_eq!(
        e,
        WireError::BelowMinimum {
            pointer: "/replay".into(),
            minimum: 1
        }
    );
    let read = msg(
        "request.read",
        json!({"conversation_token": "t", "replay": 0}),
    );
    assert_eq!(task_err(&read).pointer(), "/replay");
    // JSON Schema integers include 1.0.
    assert!(decode_task(&bytes(&with(prompt(), "replay", json!(1.0)))).is_ok());
}

#[test]
fn refuses_unknown_and_misrouted_protocols() {
    for p in [
        "io.choria.fisk-ai.v1.request",
        "io.choria.fisk-ai.v2.request.prompt",
        "io.choria.fisk-ai.v1.cancel",
        "",
    ] {
        let e = task_err(&with(prompt(), "protocol", json!(p)));
        assert!(
            matches!(&e, WireError::UnexpectedProtocol { found, .. } if found == p),
            "{e}"
        );
        assert_eq!(e.pointer(), "/protocol");
    }
    let e = task_err(&with(prompt(), "protocol", json!(1)));
    assert!(matches!(e, WireError::WrongType { .. }));
}

#[test]
fn refuses_what_is_not_a_json_object_or_is_too_big() {
    assert!(matches!(decode_task(b""), Err(WireError::NotJson { .. })));
    assert!(matches!(
        decode_task(b"{\"a\":"),
        Err(WireError::NotJson { .. })
    ));
    assert!(matches!(
        decode_task(b"{} x"),
        Err(WireError::NotJson { .. })
    ));
    let e = decode_task(b"[1]").unwrap_err();
    assert_eq!(
        (e.pointer(), e.clone()),
        (
            "",
            WireError::WrongType {
                pointer: String::new(),
                expected: JsonType::Object
            }
        )
    );
    let mut big = bytes(&with(
        prompt(),
        "prompt",
        json!("x".repeat(MAX_MESSAGE_BYTES)),
    ));
    assert!(matches!(decode_task(&big), Err(WireError::TooLarge { .. })));
    big.truncate(10);
    assert!(matches!(decode_task(&big), Err(WireError::NotJson { .. })));
    // Exactly at the bound is still read.
    let base = bytes(&with(prompt(), "prompt", json!("")));
    let fill = MAX_MESSAGE_BYTES - base.len();
    let at_bound = bytes(&with(prompt(), "prompt", json!("y".repeat(fill))));
    assert_eq!(at_bound.len(), MAX_MESSAGE_BYTES);
    assert!(decode_task(&at_bound).is_ok());
}

#[test]
fn nesting_is_bounded() {
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let text = String::from_utf8(bytes(&prompt())).unwrap();
    let v = text.replacen('{', &format!("{{\"deep\":{deep},"), 1);
    assert!(matches!(
        decode_task(v.as_bytes()),
        Err(WireError::NotJson { .. })
    ));
    let shallow = text.replacen('{', "{\"deep\":[[[[[[[[1]]]]]]]],", 1);
    assert!(decode_task(shallow.as_bytes()).is_ok());
}

#[test]
fn answer_objects_are_checked_by_the_schema_then_by_their_kind() {
    let req = |answer: Value| {
        msg(
            "request.answer",
            json!({"conversation_token": "t", "answer": answer}),
        )
    };
    let e = task_err(&req(
        json!({"tool_use_id": "u", "kind": "pick", "answer": "value"}),
    ));
    assert!(matches!(e, WireError::NotInEnum { .. }));
    assert_eq!(e.pointer(), "/answer/kind");
    let e = task_err(&req(
        json!({"tool_use_id": "u", "kind": "approve", "answer": "choice", "choice": "yes"}),
    ));
    assert_eq!(e.pointer(), "/answer/choice");
    let e = task_err(&req(json!({"kind": "approve", "answer": "choice"})));
    assert_eq!(e.pointer(), "/answer/tool_use_id");
    let e = task_err(&req(
        json!({"tool_use_id": "u".repeat(257), "kind": "input", "answer": "value"}),
    ));
    assert!(matches!(e, WireError::TooLong { max: 256, .. }));
    let e = task_err(&req(
        json!({"tool_use_id": "u", "kind": "input", "answer": "value", "value": "v".repeat(4097)}),
    ));
    assert_eq!(e.pointer(), "/answer/value");

    // The schema accepts an answer that does not fit its kind; `decision` refuses it.
    let decode = |answer: Value| match decode_task(&bytes(&req(answer))).unwrap() {
        TaskRequest::Answer(a) => a.answer.decision(),
        _ => panic!("not an answer"),
    };
    assert_eq!(
        decode(json!({"tool_use_id": "u", "kind": "approve", "answer": "value", "value": "x"})),
        Err(WireError::AnswerDoesNotFit {
            kind: QuestionKind::Approve,
            answer: AnswerField::Value
        })
    );
    assert_eq!(
        decode(json!({"tool_use_id": "u", "kind": "confirm", "answer": "confirmed"})),
        Err(WireError::Missing {
            pointer: "/answer/confirmed".into()
        })
    );
    assert_eq!(
        decode(json!({"tool_use_id": "u", "kind": "select", "answer": "value", "value": "b"})),
        Ok(Decision::Select("b".into()))
    );
    assert_eq!(
        decode(json!({"tool_use_id": "u", "kind": "input", "answer": "value", "value": ""})),
        Ok(Decision::Input(String::new()))
    );
    assert_eq!(
        decode(json!({"tool_use_id": "u", "kind": "select", "answer": "no_operator"})),
        Ok(Decision::NoOperator)
    );
    assert_eq!(
        decode(
            json!({"tool_use_id": "u", "kind": "confirm", "answer": "confirmed", "confirmed": false})
        ),
        Ok(Decision::Confirm(false))
    );
}

#[test]
fn decodes_and_refuses_cancels() {
    let c = decode_cancel(&bytes(&msg("cancel", json!({"reason": "user"})))).unwrap();
    assert_eq!(c.reason.as_deref(), Some("user"));
    assert_eq!(c.header.request, "docs1");
    assert!(decode_cancel(&bytes(&msg("cancel", json!({})))).is_ok());
    let e = decode_cancel(&bytes(&msg("cancel", json!({"reason": 1})))).unwrap_err();
    assert_eq!(e.pointer(), "/reason");
    let e = decode_cancel(&bytes(&prompt())).unwrap_err();
    assert!(matches!(e, WireError::UnexpectedProtocol { .. }));
    let e = decode_cancel(&bytes(&without(msg("cancel", json!({})), "time"))).unwrap_err();
    assert_eq!(e.pointer(), "/time");
}

#[test]
fn decodes_and_refuses_discovery_requests() {
    let d = decode_discovery(&bytes(&msg("discovery.request", json!({"x": 1})))).unwrap();
    assert_eq!(d.header.sender.name(), "peer1");
    let e = decode_discovery(&bytes(&msg("discovery.reply", json!({})))).unwrap_err();
    assert!(matches!(e, WireError::UnexpectedProtocol { .. }));
    let e = decode_discovery(&bytes(&with(
        msg("discovery.request", json!({})),
        "sequence",
        json!(-3),
    )))
    .unwrap_err();
    assert_eq!(e.pointer(), "/sequence");
}

fn elicit(name: &str, body: Value) -> Result<ElicitMessage, WireError> {
    let mut b = json!({"question_id": "3Hzq7RvnWMtU0XstDiYlhG8OMxz"});
    for (k, v) in body.as_object().unwrap() {
        b[k] = v.clone();
    }
    decode_elicit(&bytes(&msg(name, b)))
}

#[test]
fn decodes_every_elicit_message() {
    let kind = |name, body| elicit(name, body).unwrap().kind;
    assert_eq!(
        kind("elicit.reply.approve", json!({"choice": "once"})),
        ElicitKind::Answer(ElicitAnswer::Approve(ElicitChoice::Once))
    );
    assert_eq!(
        kind("elicit.reply.confirm", json!({"confirmed": false})),
        ElicitKind::Answer(ElicitAnswer::Confirm(false))
    );
    assert_eq!(
        kind("elicit.reply.select", json!({"index": 0})),
        ElicitKind::Answer(ElicitAnswer::Select(0))
    );
    assert_eq!(
        kind("elicit.reply.input", json!({"value": ""})),
        ElicitKind::Answer(ElicitAnswer::Input(String::new()))
    );
    assert_eq!(
        kind("elicit.reply.no_operator", json!({})),
        ElicitKind::Answer(ElicitAnswer::NoOperator)
    );
    assert_eq!(kind("elicit.waiting", json!({})), ElicitKind::Waiting);
    let m = elicit("elicit.waiting", json!({})).unwrap();
    assert_eq!(m.question_id, "3Hzq7RvnWMtU0XstDiYlhG8OMxz");
    assert_eq!(m.protocol(), "io.choria.fisk-ai.v1.elicit.waiting");
}

#[test]
fn refuses_bad_elicit_messages() {
    let err = |name, body| elicit(name, body).unwrap_err();
    // The zero value is an answer and must be sent.
    assert_eq!(
        err("elicit.reply.confirm", json!({})).pointer(),
        "/confirmed"
    );
    assert_eq!(err("elicit.reply.select", json!({})).pointer(), "/index");
    assert_eq!(err("elicit.reply.input", json!({})).pointer(), "/value");
    assert_eq!(err("elicit.reply.approve", json!({})).pointer(), "/choice");
    let e = err("elicit.reply.approve", json!({"choice": "maybe"}));
    assert!(matches!(e, WireError::NotInEnum { .. }));
    let e = err("elicit.reply.select", json!({"index": -1}));
    assert!(matches!(e, WireError::BelowMinimum { .. }));
    let e = err("elicit.reply.input", json!({"value": "v".repeat(4097)}));
    assert!(matches!(e, WireError::TooLong { max: 4096, .. }));
    // Sibling answer fields are refused, with any value.
    let e = err(
        "elicit.reply.approve",
        json!({"choice": "no", "confirmed": true}),
    );
    assert_eq!(
        e,
        WireError::NotAllowed {
            pointer: "/confirmed".into(),
            protocol: "elicit.reply.approve"
        }
    );
    assert_eq!(
        err("elicit.waiting", json!({"value": null})).pointer(),
        "/value"
    );
    assert_eq!(
        err("elicit.reply.no_operator", json!({"index": 1})).pointer(),
        "/index"
    );
    let e = err(
        "elicit.reply.approve",
        json!({"choice": "no", "question_id": "q.1"}),
    );
    assert_eq!(e.pointer(), "/question_id");
    let e = err("elicit.reply", json!({}));
    assert!(matches!(e, WireError::UnexpectedProtocol { .. }));
    let e = elicit("elicit.waiting", json!({"question_id": null})).unwrap_err();
    assert!(matches!(e, WireError::WrongType { .. }));
}

#[test]
fn decode_then_encode_gives_the_message_back() {
    let cases = [
        prompt(),
        msg(
            "request.answer",
            json!({"conversation_token": "t", "answer": {"tool_use_id": "u", "kind": "confirm",
                "answer": "confirmed", "confirmed": true}, "stream": false}),
        ),
        msg(
            "request.resume",
            json!({"conversation_token": "t", "budget": {"max_tokens": 5}}),
        ),
        msg(
            "request.read",
            json!({"conversation_token": "t", "replay": 3}),
        ),
    ];
    for v in cases {
        let decoded = decode_task(&bytes(&v)).unwrap();
        let again: Value = serde_json::from_slice(&decoded.to_bytes()).unwrap();
        assert_eq!(again, v);
    }
    let c = msg("cancel", json!({"reason": "r"}));
    let again: Value =
        serde_json::from_slice(&decode_cancel(&bytes(&c)).unwrap().to_bytes()).unwrap();
    assert_eq!(again, c);
    let d = msg("discovery.request", json!({}));
    let again: Value =
        serde_json::from_slice(&decode_discovery(&bytes(&d)).unwrap().to_bytes()).unwrap();
    assert_eq!(again, d);
    for (name, body) in [
        ("elicit.reply.select", json!({"index": 2})),
        ("elicit.reply.input", json!({"value": "x"})),
        ("elicit.waiting", json!({})),
    ] {
        let m = elicit(name, body).unwrap();
        let again = decode_elicit(&m.to_bytes()).unwrap();
        assert_eq!(again, m);
    }
}

/// Arbitrary JSON, nested a few levels.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::String),
        "[a-z_]{1,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,12}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

const FIELDS: &[&str] = &[
    "protocol",
    "id",
    "request",
    "conversation",
    "sequence",
    "time",
    "sender",
    "recipient",
    "parent",
    "must_understand",
    "prompt",
    "answer",
    "context",
    "tool_hints",
    "budget",
    "stream",
    "conversation_token",
    "replay",
    "force",
    "reason",
    "question_id",
    "choice",
    "confirmed",
    "index",
    "value",
];

const NAMES: &[&str] = &[
    "request.prompt",
    "request.answer",
    "request.resume",
    "request.read",
    "cancel",
    "discovery.request",
    "elicit.reply.approve",
    "elicit.reply.confirm",
    "elicit.reply.select",
    "elicit.reply.input",
    "elicit.reply.no_operator",
    "elicit.waiting",
];

/// Every decoder gives Ok or a typed error whose pointer is a JSON pointer; none panics.
fn all_decoders_hold(b: &[u8]) {
    for r in [
        decode_task(b).map(|_| ()),
        decode_cancel(b).map(|_| ()),
        decode_elicit(b).map(|_| ()),
        decode_discovery(b).map(|_| ()),
    ] {
        if let Err(e) = r {
            let p = e.pointer();
            assert!(p.is_empty() || p.starts_with('/'), "{p}");
            assert!(e
                .to_string()
                .starts_with("the request is not a valid v1 message"));
        }
    }
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..256)) {
        all_decoders_hold(&b);
    }

    #[test]
    fn arbitrary_json_never_panics(v in json_value()) {
        all_decoders_hold(&bytes(&v));
    }

    #[test]
    fn mutated_messages_never_panic(
        name in prop::sample::select(NAMES),
        field in prop::sample::select(FIELDS),
        val in json_value(),
        drop in prop::sample::select(FIELDS),
    ) {
        let mut v = msg(name, json!({"prompt": "p", "conversation_token": "t", "replay": 1,
            "question_id": "q", "choice": "no"}));
        v[field] = val;
        v.as_object_mut().unwrap().remove(drop);
        all_decoders_hold(&bytes(&v));
    }
}
