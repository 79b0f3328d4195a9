//! The one mapping of a turn's events and outcome onto NIP-XX run messages: which kind, which payload,
//! which hint tags. Pure: the clock comes in as `now`; signing, encryption and sending are the driver's.

use super::payload::{
    DeltaPayload, ErrorPayload, ResponsePayload, StatusPayload, ToolCallPayload, Usage,
};
use super::{envelope, kinds, ErrorCode};
use agentwire_core::{Outcome, StatusState, TurnEvent};
use nostr::prelude::Tag;

/// One run message before it is encrypted and signed.
#[derive(Debug, Clone, PartialEq)]
pub struct RunMessage {
    /// Its kind (25800 status, 25801 delta, ...).
    pub kind: u16,
    /// The payload JSON (the plaintext of the NIP-44 content).
    pub payload: String,
    /// Hint tags beside the run's own (`tool`, `phase`).
    pub hints: Vec<Tag>,
}

fn status(state: &str, progress: Option<u64>, info: Option<String>) -> RunMessage {
    let p = StatusPayload {
        state: state.into(),
        progress,
        info,
    };
    RunMessage {
        kind: kinds::STATUS,
        payload: p.to_json(),
        hints: vec![],
    }
}

/// The status a run sends when it waits behind an earlier run of its session.
pub fn queued() -> RunMessage {
    status(
        "thinking",
        Some(0),
        Some("queued behind an earlier run of this session".into()),
    )
}

/// The message of one event. `next_seq` numbers deltas from 0 and moves on with each; `private` (the
/// privacy-first profile) leaves tool arguments and output out.
pub fn event(event: TurnEvent, next_seq: &mut u64, private: bool, now: u64) -> RunMessage {
    match event {
        TurnEvent::Status {
            state,
            progress,
            info,
            ..
        } => {
            let state = match state {
                StatusState::Thinking => "thinking",
                StatusState::ToolUse => "tool_use",
                StatusState::Done => "done",
            };
            status(state, progress.map(u64::from), info)
        }
        TurnEvent::Text { text } => {
            let seq = *next_seq;
            *next_seq += 1;
            let p = DeltaPayload {
                text,
                seq: Some(seq),
                timestamp: Some(now),
            };
            RunMessage {
                kind: kinds::DELTA,
                payload: p.to_json(),
                hints: vec![],
            }
        }
        TurnEvent::Thinking { text } | TurnEvent::Warning { text, .. } => {
            status("thinking", None, Some(text))
        }
        TurnEvent::File { name, .. } => status("thinking", None, Some(format!("posted {name}"))),
        // NIP-XX has no event for a delegation: the person reads it as a status.
        TurnEvent::AgentCall { name, .. } => {
            status("tool_use", None, Some(format!("asked {name}")))
        }
        TurnEvent::Handoff { name } => status(
            "thinking",
            None,
            Some(format!(
                "handed off to {}",
                name.as_deref().unwrap_or("a new thread")
            )),
        ),
        TurnEvent::ToolCall {
            name, arguments, ..
        } => {
            let p = ToolCallPayload {
                name: Some(name.clone()),
                phase: Some("start".into()),
                arguments: Some(arguments).filter(|a| a.is_object() && !private),
                output: None,
                success: None,
                duration_ms: None,
                text: None,
            };
            RunMessage {
                kind: kinds::TOOL_CALL,
                payload: p.to_json(),
                hints: vec![Tag::custom("tool", [name]), Tag::custom("phase", ["start"])],
            }
        }
        TurnEvent::ToolResult {
            name,
            output,
            success,
            duration_ms,
            ..
        } => {
            let p = ToolCallPayload {
                name: Some(name.clone()),
                phase: Some("result".into()),
                arguments: None,
                output: Some(output).filter(|o| o.is_object() && !private),
                success: Some(success),
                duration_ms: Some(duration_ms),
                text: None,
            };
            RunMessage {
                kind: kinds::TOOL_CALL,
                payload: p.to_json(),
                hints: vec![
                    Tag::custom("tool", [name]),
                    Tag::custom("phase", ["result"]),
                ],
            }
        }
    }
}

/// The terminal message of an outcome: an ai.response or an ai.error with its code.
pub fn terminal(outcome: &Outcome, now: u64) -> RunMessage {
    match outcome {
        Outcome::Result(r) => {
            let p = ResponsePayload {
                text: r.text.clone(),
                timestamp: Some(now),
                usage: Some(Usage {
                    input_tokens: r.usage.input_tokens,
                    output_tokens: r.usage.output_tokens,
                }),
            };
            RunMessage {
                kind: kinds::RESPONSE,
                payload: p.to_json(),
                hints: vec![],
            }
        }
        Outcome::Failure(f) => {
            let e = ErrorPayload {
                code: ErrorCode::from(&f.code),
                message: if f.message.is_empty() {
                    "failed".into()
                } else {
                    f.message.clone()
                },
                retry_after: f.retry_after.filter(|s| *s >= 1),
                details: Some(serde_json::json!({
                    "usage": { "input_tokens": f.usage.input_tokens, "output_tokens": f.usage.output_tokens }
                })),
            };
            RunMessage {
                kind: kinds::ERROR,
                payload: e.to_json(),
                hints: vec![],
            }
        }
    }
}

/// The names of the run an envelope carries (`[nipxx] text_envelope`): its prompt id and session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvelopeIds {
    /// The run (the prompt's id, hex).
    pub run_id: String,
    /// The session.
    pub session_id: String,
}

/// `m` with its text in the compatibility envelope as well, for runtimes that read telemetry from text
/// (`[nipxx] text_envelope = true`): a delta's and a response's `text` becomes the envelope carrying it, and
/// a tool call is sent in the envelope form alone (`ver`, `text`, `timestamp`: the schema allows one form),
/// its envelope carrying the name, phase and whatever else the canonical form had. A status has
/// no envelope; an error goes as canonical JSON only, since its payload (`code`, `message`) has no `text`
/// for the spec's error envelope to be carried in.
pub fn in_envelope(mut m: RunMessage, ids: &EnvelopeIds, now: u64) -> RunMessage {
    let Ok(serde_json::Value::Object(mut p)) = serde_json::from_str(&m.payload) else {
        return m;
    };
    let ts = now.to_string();
    let common = [
        ("run_id", ids.run_id.as_str()),
        ("session_id", ids.session_id.as_str()),
        ("ts", ts.as_str()),
    ];
    let text = p
        .get("text")
        .and_then(|t| t.as_str())
        .unwrap_or("")
        .to_string();
    let wrapped = match m.kind {
        kinds::DELTA => [
            ("event", "delta"),
            ("phase", "update"),
            ("text", text.as_str()),
        ]
        .into_iter()
        .chain(common)
        .collect::<Vec<_>>(),
        kinds::RESPONSE => [
            ("event", "final"),
            ("phase", "end"),
            ("text", text.as_str()),
        ]
        .into_iter()
        .chain(common)
        .collect(),
        kinds::TOOL_CALL => {
            // One form only (the schema's `oneOf`): the envelope carries what the canonical fields did.
            let field = |key: &str| match p.get(key) {
                None | Some(serde_json::Value::Null) => None,
                Some(serde_json::Value::String(s)) => Some(s.clone()),
                Some(other) => Some(other.to_string()),
            };
            let carried: Vec<(&str, String)> = [
                "phase",
                "name",
                "arguments",
                "output",
                "success",
                "duration_ms",
            ]
            .into_iter()
            .filter_map(|key| field(key).map(|v| (key, v)))
            .collect();
            let fields = [("event", "tool")]
                .into_iter()
                .chain(carried.iter().map(|(k, v)| (*k, v.as_str())))
                .chain(common);
            let mut only = serde_json::Map::new();
            only.insert("ver".into(), 1.into());
            only.insert("text".into(), envelope::encode(fields).into());
            only.insert("timestamp".into(), now.into());
            m.payload = object_json(only);
            return m;
        }
        _ => return m,
    };
    p.insert("text".into(), envelope::encode(wrapped).into());
    m.payload = object_json(p);
    m
}

fn object_json(p: serde_json::Map<String, serde_json::Value>) -> String {
    serde_json::Value::Object(p).to_string()
}

/// The largest answer a plain response carries whole, in bytes of text JSON need not escape: one NIP-44
/// message holds 65,535 bytes of plaintext, less the response's other fields (at most about 150 bytes:
/// `ver`, `timestamp`, `usage` with 20-digit counts). Published in ai.info as `max_response_bytes`.
pub const MAX_RESPONSE_BYTES: usize = 65_000;

/// The same for a gift-wrapped run: its response is NIP-44 inside a rumor, sealed with NIP-44 and wrapped
/// with NIP-44 again, each layer base64 and padded, all within 65,535 bytes of plaintext per layer, which
/// leaves about 28,600 bytes of response JSON. Published in ai.info as `max_response_bytes_nip59`.
pub const MAX_RESPONSE_BYTES_NIP59: usize = 28_000;

/// The stop reason of an answer cut to fit one response: an LLM API's word for an answer that hit its
/// length limit.
pub const CUT_STOP_REASON: &str = "length";

/// The answer text a response carries of an answer of `whole` bytes that does not fit one message: its
/// head, then a line saying it was cut (so a person reading it knows), naming ai.info's limits.
pub fn cut_answer(head: &str, whole: usize) -> String {
    format!(
        "{head}\n\n[cut: the whole answer is {whole} bytes, more than one NIP-XX response carries \
         (max_response_bytes in the agent's ai.info)]"
    )
}

/// The ai.error sent instead of a response of `text_len` bytes when not even a cut answer fits (a seal whose
/// tags alone fill it).
pub fn oversized(text_len: usize, wrapped: bool) -> RunMessage {
    let holder = if wrapped {
        "one NIP-44 message inside a NIP-59 seal (about 28,600 bytes of response JSON)"
    } else {
        "one NIP-44 message (65,535 bytes of JSON)"
    };
    let e = ErrorPayload {
        code: ErrorCode::InternalError,
        message: format!("the response of {text_len} bytes exceeds what {holder} holds"),
        retry_after: None,
        details: None,
    };
    RunMessage {
        kind: kinds::ERROR,
        payload: e.to_json(),
        hints: vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire_core::{Failure, Refusal, TurnFailure};

    #[test]
    fn the_text_envelope_carries_what_the_spec_requires_and_the_canonical_fields_stay() {
        use crate::nipxx::envelope::{Envelope, EnvelopeOf};
        let ids = EnvelopeIds {
            run_id: "abc".into(),
            session_id: "sender:x".into(),
        };
        let text = |m: &RunMessage| {
            let v: serde_json::Value = serde_json::from_str(&m.payload).unwrap();
            assert_eq!(v["ver"], 1, "{v}");
            v["text"].as_str().unwrap().to_string()
        };
        let mut seq = 0;
        let d = in_envelope(
            event(
                TurnEvent::Text {
                    text: "a b|c".into(),
                },
                &mut seq,
                false,
                7,
            ),
            &ids,
            7,
        );
        let e = Envelope::read(&text(&d), EnvelopeOf::Delta).unwrap();
        assert_eq!(e.text(), Some("a b|c"));
        assert_eq!(
            (e.get("run_id"), e.get("session_id"), e.get("ts")),
            (Some("abc"), Some("sender:x"), Some("7"))
        );
        let v: serde_json::Value = serde_json::from_str(&d.payload).unwrap();
        assert_eq!(v["seq"], 0, "the seq stays canonical");
        let r = in_envelope(
            terminal(
                &Outcome::Result(agentwire_core::TurnResult {
                    text: "done".into(),
                    usage: Default::default(),
                    stop_reason: "stop".into(),
                }),
                8,
            ),
            &ids,
            8,
        );
        assert_eq!(
            Envelope::read(&text(&r), EnvelopeOf::Response)
                .unwrap()
                .text(),
            Some("done")
        );
        let call = TurnEvent::ToolCall {
            call_id: "c1".into(),
            name: "calculator".into(),
            arguments: serde_json::json!({"expr": "1+1"}),
        };
        let t = in_envelope(event(call, &mut seq, false, 9), &ids, 9);
        let v: serde_json::Value = serde_json::from_str(&t.payload).unwrap();
        assert_eq!(
            (v.get("name"), v.get("phase"), v.get("arguments")),
            (None, None, None),
            "one form only: {v}"
        );
        let read = ToolCallPayload::parse(&t.payload)
            .expect("the schema's oneOf holds")
            .read_envelope();
        assert_eq!(
            (read.name.as_deref(), read.phase.as_deref()),
            (Some("calculator"), Some("start"))
        );
        assert_eq!(read.arguments, Some(serde_json::json!({"expr": "1+1"})));
        let e = Envelope::read(&text(&t), EnvelopeOf::ToolCall).unwrap();
        assert_eq!(e.get("run_id"), Some("abc"));
        // A status goes as it is.
        let st = status("thinking", None, None);
        assert_eq!(in_envelope(st.clone(), &ids, 1), st);
    }

    #[test]
    fn deltas_are_numbered_from_zero_and_other_events_do_not_count() {
        let mut seq = 0;
        let a = event(TurnEvent::Text { text: "a".into() }, &mut seq, false, 7);
        let s = event(
            TurnEvent::Thinking { text: "hm".into() },
            &mut seq,
            false,
            7,
        );
        let b = event(TurnEvent::Text { text: "b".into() }, &mut seq, false, 7);
        assert_eq!(
            (a.kind, s.kind, b.kind),
            (kinds::DELTA, kinds::STATUS, kinds::DELTA)
        );
        assert!(a.payload.contains(r#""seq":0"#) && b.payload.contains(r#""seq":1"#));
        assert_eq!(seq, 2);
    }

    #[test]
    fn the_private_profile_discloses_no_tool_arguments_or_output() {
        let call = || TurnEvent::ToolCall {
            call_id: "c".into(),
            name: "calculator".into(),
            arguments: serde_json::json!({"expression": "1+1"}),
        };
        let mut seq = 0;
        let open = event(call(), &mut seq, false, 1);
        let private = event(call(), &mut seq, true, 1);
        assert!(open.payload.contains("expression"));
        assert!(!private.payload.contains("expression"));
        assert_eq!(private.hints.len(), 2, "tool and phase hints stay");
    }

    #[test]
    fn a_failure_keeps_its_code_and_a_retry_hint_of_at_least_a_second() {
        let f = Failure::new(Refusal::RateLimited, "slow down").retry_after(0);
        let m = terminal(&Outcome::Failure(f), 1);
        assert_eq!(m.kind, kinds::ERROR);
        assert!(m.payload.contains("RATE_LIMIT"));
        assert!(!m.payload.contains("retry_after"), "0 is no hint");
        let m = terminal(
            &Outcome::Failure(Failure::new(TurnFailure::Internal, "").retry_after(5)),
            1,
        );
        assert!(m.payload.contains(r#""retry_after":5"#) && m.payload.contains("failed"));
    }
}
