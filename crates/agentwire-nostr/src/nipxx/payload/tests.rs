//! Each schema rule of each payload, and decoders that never panic on arbitrary input.

use super::*;
use proptest::prelude::*;

fn code(r: Result<impl std::fmt::Debug, Violation>) -> ErrorCode {
    r.expect_err("expected a violation").code
}

#[test]
fn prompt_rules() {
    assert_eq!(
        PromptPayload::parse(r#"{"ver":1,"message":"hi"}"#)
            .unwrap()
            .message,
        "hi"
    );
    assert_eq!(
        code(PromptPayload::parse("not json")),
        ErrorCode::ParseError
    );
    assert_eq!(code(PromptPayload::parse("[1]")), ErrorCode::InvalidSchema);
    assert_eq!(
        code(PromptPayload::parse(r#"{"message":"hi"}"#)),
        ErrorCode::InvalidSchema
    );
    assert_eq!(
        code(PromptPayload::parse(r#"{"ver":2,"message":"hi"}"#)),
        ErrorCode::InvalidSchema
    );
    assert_eq!(
        code(PromptPayload::parse(r#"{"ver":"1","message":"hi"}"#)),
        ErrorCode::InvalidSchema
    );
    assert_eq!(
        code(PromptPayload::parse(r#"{"ver":1}"#)),
        ErrorCode::InvalidSchema
    );
    assert_eq!(
        code(PromptPayload::parse(r#"{"ver":1,"message":""}"#)),
        ErrorCode::InvalidSchema
    );
    assert_eq!(
        code(PromptPayload::parse(r#"{"ver":1,"message":5}"#)),
        ErrorCode::InvalidSchema
    );
    assert_eq!(
        code(PromptPayload::parse(
            r#"{"ver":1,"message":"a","thinking":"huge"}"#
        )),
        ErrorCode::InvalidSchema
    );
    assert_eq!(
        code(PromptPayload::parse(
            r#"{"ver":1,"message":"a","model":""}"#
        )),
        ErrorCode::InvalidSchema
    );
    assert_eq!(
        code(PromptPayload::parse(
            r#"{"ver":1,"message":"a","tool_schema_version":0}"#
        )),
        ErrorCode::InvalidSchema
    );
    assert_eq!(
        code(PromptPayload::parse(
            r#"{"ver":1,"message":"a","fallback_models":[1]}"#
        )),
        ErrorCode::InvalidSchema
    );
    let p = PromptPayload::parse(r#"{"ver":1,"message":"a","thinking":"max","model":"m","tool_schema_version":1,"fallback_models":["x"],"extra":true}"#).unwrap();
    assert_eq!(p.thinking.as_deref(), Some("max"));
    assert_eq!(PromptPayload::parse(&p.to_json()).unwrap(), p);
}

#[test]
fn cancel_status_delta_response_error_tool_rules() {
    assert_eq!(
        CancelPayload::parse(r#"{"ver":1,"reason":"timeout"}"#)
            .unwrap()
            .reason,
        "timeout"
    );
    assert_eq!(
        code(CancelPayload::parse(r#"{"ver":1,"reason":"bored"}"#)),
        ErrorCode::InvalidSchema
    );
    assert_eq!(
        code(CancelPayload::parse(r#"{"ver":1}"#)),
        ErrorCode::InvalidSchema
    );
    assert_eq!(
        code(StatusPayload::parse(r#"{"ver":1,"state":"sleeping"}"#)),
        ErrorCode::InvalidSchema
    );
    assert_eq!(
        code(StatusPayload::parse(
            r#"{"ver":1,"state":"done","progress":101}"#
        )),
        ErrorCode::InvalidSchema
    );
    assert_eq!(
        code(DeltaPayload::parse(r#"{"ver":1,"text":"a","seq":-1}"#)),
        ErrorCode::InvalidSchema
    );
    assert_eq!(
        DeltaPayload::parse(r#"{"ver":1,"text":"a","seq":3}"#)
            .unwrap()
            .seq,
        Some(3)
    );
    assert_eq!(
        code(ResponsePayload::parse(r#"{"ver":1,"usage":{}}"#)),
        ErrorCode::InvalidSchema
    );
    assert_eq!(
        code(ResponsePayload::parse(
            r#"{"ver":1,"text":"a","usage":{"input_tokens":1}}"#
        )),
        ErrorCode::InvalidSchema
    );
    assert_eq!(
        code(ErrorPayload::parse(
            r#"{"ver":1,"code":"RATE_LIMIT","message":""}"#
        )),
        ErrorCode::InvalidSchema
    );
    assert_eq!(
        code(ErrorPayload::parse(
            r#"{"ver":1,"code":"RATE_LIMIT","message":"x","retry_after":0}"#
        )),
        ErrorCode::InvalidSchema
    );
    // An unknown code is INVALID_SCHEMA, as the spec says, with the agent's own code shown beside it.
    let e = ErrorPayload::parse(r#"{"ver":1,"code":"SOMETHING_NEW","message":"x"}"#).unwrap();
    assert_eq!(e.code, ErrorCode::InvalidSchema);
    assert!(
        e.message.contains("\"SOMETHING_NEW\"") && e.message.ends_with(": x"),
        "{}",
        e.message
    );
    assert_eq!(
        code(ToolCallPayload::parse(r#"{"ver":1}"#)),
        ErrorCode::InvalidSchema
    );
    assert_eq!(
        code(ToolCallPayload::parse(
            r#"{"ver":1,"name":"c","phase":"start","text":"x"}"#
        )),
        ErrorCode::InvalidSchema
    );
    assert_eq!(
        code(ToolCallPayload::parse(
            r#"{"ver":1,"name":"c","phase":"middle"}"#
        )),
        ErrorCode::InvalidSchema
    );
    assert!(ToolCallPayload::parse(r#"{"ver":1,"text":"event=tool|phase=start|ts=1"}"#).is_ok());
    assert_eq!(
        code(InfoPayload::validate(
            r#"{"ver":1,"encryption":["nip04"],"tool_names":[]}"#
        )),
        ErrorCode::InvalidSchema
    );
}

proptest! {
    #[test]
    fn decoders_never_panic_on_arbitrary_text(s in ".{0,300}") {
        let _ = PromptPayload::parse(&s);
        let _ = CancelPayload::parse(&s);
        let _ = ResponsePayload::parse(&s);
        let _ = DeltaPayload::parse(&s);
        let _ = StatusPayload::parse(&s);
        let _ = ToolCallPayload::parse(&s);
        let _ = ErrorPayload::parse(&s);
        let _ = InfoPayload::validate(&s);
    }

    #[test]
    fn decoders_give_typed_errors_on_arbitrary_json(v in arb_json()) {
        let s = v.to_string();
        for e in [PromptPayload::parse(&s).err(), CancelPayload::parse(&s).err(), StatusPayload::parse(&s).err()].into_iter().flatten() {
            prop_assert!(e.code == ErrorCode::InvalidSchema || e.code == ErrorCode::ParseError);
        }
    }
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        ".{0,10}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::btree_map(
                prop_oneof![
                    Just("ver".to_string()),
                    Just("message".to_string()),
                    Just("reason".to_string()),
                    Just("state".to_string()),
                    ".{0,5}"
                ],
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}
