//! The roost wire: one JSON object per line. A request `{"id", "op", "args"}`, a response
//! `{"id", "ok": true, "result"}` or `{"id", "ok": false, "error", "code"}`, and unasked events
//! `{"event": ...}`. Unknown fields are ignored. Pure.

use crate::proto::field::{Field, ObjectOnly};
pub use crate::proto::refusal::{fold_name, ErrorCode, Refusal};
use crate::proto::report::{Report, ReportFields};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::borrow::Cow;

/// The longest request line: a longer one ends the connection (the spec's 4 MiB).
pub const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;
/// Most connections the daemon holds (the spec's number).
pub const MAX_CONNECTIONS: usize = 1024;
/// Of [`MAX_CONNECTIONS`], the places only the owner's controllers may take: connections from the daemon's
/// own user that are none of the jobs' processes (`SO_PEERCRED`). Jobs' processes share the other 960, so a
/// job that opens connections and holds them (an idle one is closed after `IDENTIFY_TIMEOUT`, one that
/// said `hello` is not) cannot lock out the person who would stop it: 64 is more controllers (a hub, CLI
/// calls, agentwire's own roost-backed turns) than run at once, and a small share of the cap.
pub const CONTROLLER_RESERVE: usize = 64;
/// Most requests in flight on one connection (the spec's bound); past it the connection is not read until
/// some are answered. This daemon holds itself well inside it: it reads a connection's next request only
/// after answering the last, so one is in flight and the rest wait, unread, in the socket.
pub const MAX_IN_FLIGHT: usize = 256;
/// Answers and events a client may leave unread before it is dropped (the spec's 16 MiB).
pub const MAX_UNREAD_BYTES: usize = 16 * 1024 * 1024;

/// A numbered thing's id (a task's, an order's, a schedule's): a positive integer, or a string of digits;
/// `what` names it in the refusal.
pub fn numbered_id(v: &serde_json::Value, what: &str) -> Result<u64, Refusal> {
    let n = match v {
        serde_json::Value::Number(n) => n.as_u64(),
        serde_json::Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse().ok()
        }
        _ => None,
    };
    n.filter(|n| *n > 0).ok_or_else(|| {
        Refusal::bad(format!(
            "{what} is a positive integer, or a string of digits"
        ))
    })
}

/// A request line.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The client's number for matching the response (any JSON value; echoed as given).
    pub id: Value,
    /// The operation.
    pub op: String,
    /// Its arguments (an object; absent is empty).
    pub args: Map<String, Value>,
}

/// Why a line is not a request. With an `id` (when one could be read), it is answered `bad_request`;
/// without, it cannot be answered and is answered with a null id.
#[derive(Debug, Clone, PartialEq)]
pub struct BadLine {
    /// The id, if the line had a readable one.
    pub id: Value,
    /// What was wrong.
    pub refusal: Refusal,
}

/// Parses one request line (without its `\n`).
pub fn parse_request(line: &[u8]) -> Result<Request, BadLine> {
    let bad = |id: Value, m: &str| BadLine {
        id,
        refusal: Refusal::bad(m),
    };
    let v: Value =
        serde_json::from_slice(line).map_err(|e| bad(Value::Null, &format!("not JSON: {e}")))?;
    let Value::Object(mut o) = v else {
        return Err(bad(Value::Null, "a request is a JSON object"));
    };
    let id = o.remove("id").unwrap_or(Value::Null);
    if !(id.is_number() || id.is_string()) {
        return Err(bad(
            Value::Null,
            "a request needs an `id` (a number or a string)",
        ));
    }
    let op = match o.remove("op") {
        Some(Value::String(op)) if !op.is_empty() => op,
        _ => return Err(bad(id, "a request needs an `op` (a string)")),
    };
    let args = match o.remove("args") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(a)) => a,
        Some(_) => return Err(bad(id, "`args` is an object")),
    };
    Ok(Request { id, op, args })
}

/// A `report` request read straight off its line, without a JSON tree: the hot path, taken by every
/// report of every agent.
#[derive(Debug)]
pub struct ReportRequest<'a> {
    /// The request's id.
    pub id: Value,
    /// `args.id`: the job.
    pub job: Cow<'a, str>,
    /// `args.token`.
    pub token: Cow<'a, str>,
    /// `args.report`, validated.
    pub report: Result<Report, Refusal>,
}

#[derive(Deserialize)]
struct ReportLine<'a> {
    #[serde(default)]
    id: Value,
    #[serde(borrow, default)]
    op: Field<'a>,
    #[serde(borrow, default)]
    args: Option<ObjectOnly<ReportArgs<'a>>>,
}

#[derive(Deserialize)]
struct ReportArgs<'a> {
    #[serde(borrow, default)]
    id: Field<'a>,
    #[serde(borrow, default)]
    token: Field<'a>,
    #[serde(borrow, default)]
    report: Option<ObjectOnly<ReportFields<'a>>>,
}

/// Most `[` and `{` in a line the hot path reads: a value nested deeper than the general path's JSON parser
/// allows (128) needs more, and a report has a handful.
const MAX_FAST_PATH_BRACKETS: usize = 64;

/// Whether the hot path may read `line` at all. It skips values it does not use (unknown fields) without
/// checking all that the general path checks of them: their UTF-8, their `\u` escapes, their depth. A line
/// that could hold any of those goes the general way, as does one that is not an object.
fn plain_object_line(line: &[u8]) -> bool {
    if line.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{')
        || std::str::from_utf8(line).is_err()
    {
        return false;
    }
    let mut brackets = 0;
    for (i, b) in line.iter().enumerate() {
        match b {
            b'[' | b'{' => brackets += 1,
            b'\\' if line.get(i + 1) == Some(&b'u') => return false,
            _ => {}
        }
    }
    brackets < MAX_FAST_PATH_BRACKETS
}

/// Reads `line` as a well-formed `report` request. `None` when it is anything else (another op, or a
/// line whose refusal [`parse_request`] and the op's own checks word): such a line takes the general
/// path, so both paths answer every line alike.
pub fn parse_report_line(line: &[u8]) -> Option<ReportRequest<'_>> {
    if !plain_object_line(line) {
        return None;
    }
    let l: ReportLine<'_> = serde_json::from_slice(line).ok()?;
    if !(l.id.is_number() || l.id.is_string()) || l.op != Field::Str(Cow::Borrowed("report")) {
        return None;
    }
    let args = l.args?.0;
    let (Field::Str(job), Field::Str(token), Some(ObjectOnly(report))) =
        (args.id, args.token, args.report)
    else {
        return None;
    };
    Some(ReportRequest {
        id: l.id,
        job,
        token,
        report: report.validate(),
    })
}

/// A success response line (with its `\n`).
pub fn ok_line(id: &Value, result: &impl Serialize) -> String {
    // Written directly rather than through a JSON object: the answer to every report takes this path.
    let result = serde_json::to_string(result).unwrap_or_else(|_| "{}".into());
    let id = serde_json::to_string(id).unwrap_or_else(|_| "null".into());
    format!("{{\"id\":{id},\"ok\":true,\"result\":{result}}}\n")
}

/// A refusal response line (with its `\n`).
pub fn err_line(id: &Value, refusal: &Refusal) -> String {
    let mut line = serde_json::json!({
        "id": id,
        "ok": false,
        "error": refusal.message,
        "code": refusal.code.as_str(),
    })
    .to_string();
    line.push('\n');
    line
}

/// An event line (with its `\n`): `{"event": name, ...fields}`.
pub fn event_line(name: &str, fields: Map<String, Value>) -> String {
    let mut o = Map::new();
    o.insert("event".into(), Value::String(name.into()));
    o.extend(fields);
    let mut line = Value::Object(o).to_string();
    line.push('\n');
    line
}

/// Argument readers that refuse with `bad_request` naming the field.
pub trait Args {
    /// A required string.
    fn req_str(&self, key: &str) -> Result<&str, Refusal>;
    /// An optional string (absent or null is `None`).
    fn opt_str(&self, key: &str) -> Result<Option<&str>, Refusal>;
    /// A required non-negative integer.
    fn req_u64(&self, key: &str) -> Result<u64, Refusal>;
    /// An optional non-negative integer.
    fn opt_u64(&self, key: &str) -> Result<Option<u64>, Refusal>;
}

impl Args for Map<String, Value> {
    fn req_str(&self, key: &str) -> Result<&str, Refusal> {
        self.opt_str(key)?
            .ok_or_else(|| Refusal::bad(format!("`{key}` is required")))
    }
    fn opt_str(&self, key: &str) -> Result<Option<&str>, Refusal> {
        match self.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(Refusal::bad(format!("`{key}` is a string"))),
        }
    }
    fn req_u64(&self, key: &str) -> Result<u64, Refusal> {
        self.opt_u64(key)?
            .ok_or_else(|| Refusal::bad(format!("`{key}` is required")))
    }
    fn opt_u64(&self, key: &str) -> Result<Option<u64>, Refusal> {
        match self.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| Refusal::bad(format!("`{key}` is a non-negative integer"))),
        }
    }
}

/// A `requestId`: 1-64 of `A-Z a-z 0-9 _ . : -`.
pub fn check_request_id(id: &str) -> Result<(), Refusal> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Refusal::bad("`requestId` is 1-64 of A-Z a-z 0-9 _ . : -"))
    }
}

/// Longest conversation label a job is dispatched with: agentwire's conversation ids are at most 256 bytes
/// (`agentwire_core::MAX_ID_LEN`), and a label is kept with its job and shown in its row.
pub const MAX_CONVERSATION_BYTES: usize = 256;

/// A `conversation` label: 1-256 bytes without control characters or whitespace (it is shown in a row, on
/// one line, and compared as it is).
pub fn check_conversation(conversation: &str) -> Result<(), Refusal> {
    let ok = !conversation.is_empty()
        && conversation.len() <= MAX_CONVERSATION_BYTES
        && !conversation
            .chars()
            .any(|c| c.is_control() || c.is_whitespace());
    if ok {
        Ok(())
    } else {
        Err(Refusal::bad(format!(
            "`conversation` is 1-{MAX_CONVERSATION_BYTES} bytes without control characters or spaces"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_request_parses_and_bad_lines_say_why() {
        let r =
            parse_request(br#"{"id":1,"op":"hello","args":{"protocol":1},"extra":true}"#).unwrap();
        assert_eq!((r.id, r.op.as_str()), (Value::from(1), "hello"));
        assert_eq!(r.args["protocol"], 1);
        let r = parse_request(br#"{"id":"a","op":"rows"}"#).unwrap();
        assert!(r.args.is_empty());
        for (line, id) in [
            (&b"nope"[..], Value::Null),
            (br#"[1]"#, Value::Null),
            (br#"{"op":"x"}"#, Value::Null),
            (br#"{"id":2}"#, Value::from(2)),
            (br#"{"id":3,"op":"x","args":[]}"#, Value::from(3)),
        ] {
            let e = parse_request(line).unwrap_err();
            assert_eq!(e.id, id);
            assert_eq!(e.refusal.code, ErrorCode::BadRequest);
        }
    }

    #[test]
    fn lines_end_in_a_newline_and_carry_the_code() {
        let l = err_line(
            &Value::from(7),
            &Refusal::new(ErrorCode::Full, "50 waiting"),
        );
        assert!(l.ends_with('\n') && !l[..l.len() - 1].contains('\n'));
        let v: Value = serde_json::from_str(&l).unwrap();
        assert_eq!(
            (v["ok"].clone(), v["code"].clone()),
            (Value::Bool(false), Value::from("full"))
        );
        let v: Value =
            serde_json::from_str(&ok_line(&Value::from(1), &serde_json::json!({}))).unwrap();
        assert_eq!(v["ok"], true);
        assert_eq!(
            ErrorCode::parse("limit"),
            ErrorCode::Unknown("limit".into())
        );
        assert_eq!(ErrorCode::parse("busy").as_str(), "busy");
    }

    #[test]
    fn names_fold_and_request_ids_are_checked() {
        assert_eq!(fold_name(" a\nb\t\tc \r\n"), "a b c");
        // A bidi override would show a name reversed (in the hub, in a table): it goes like a control.
        assert_eq!(fold_name("evil\u{202e}gnp.exe"), "evil gnp.exe");
        assert!(check_request_id("a.b:c-d_9").is_ok());
        assert!(check_request_id("").is_err());
        assert!(check_request_id(&"x".repeat(65)).is_err());
        assert!(check_request_id("a b").is_err());
        assert!(check_conversation("nipxx:ab12:s-1").is_ok());
        assert!(check_conversation(&"x".repeat(MAX_CONVERSATION_BYTES)).is_ok());
        for bad in [
            String::new(),
            "x".repeat(MAX_CONVERSATION_BYTES + 1),
            "a b".into(),
            "a\nb".into(),
        ] {
            assert_eq!(
                check_conversation(&bad).unwrap_err().code,
                ErrorCode::BadRequest
            );
        }
    }

    /// What the general path makes of a line that is a report: the id, the job and token, the report.
    fn general_report(line: &[u8]) -> Option<(Value, String, String, Result<Report, Refusal>)> {
        let r = parse_request(line).ok()?;
        if r.op != "report" {
            return None;
        }
        let job = r.args.req_str("id").ok()?.to_string();
        let token = r.args.req_str("token").ok()?.to_string();
        let report = Report::parse(r.args.get("report").unwrap_or(&Value::Null));
        Some((r.id, job, token, report))
    }

    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(Value::from),
            prop_oneof![
                Just("working".to_string()),
                Just("blocked".to_string()),
                Just("busy".to_string()),
                Just("question".to_string()),
                Just("report".to_string()),
                ".{0,8}",
                "\\PC{0,3}\n\"",
            ]
            .prop_map(Value::String),
        ];
        leaf.prop_recursive(2, 8, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::vec(("[a-z]{1,3}", inner), 0..3)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    fn report_key() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("state"),
            Just("status"),
            Just("waitingFor"),
            Just("summary"),
            Just("question"),
            Just("choices"),
            Just("tool"),
            Just("error"),
            Just("name"),
            Just("model"),
            Just("thinking"),
            Just("context"),
            Just("usage"),
            Just("agentItems"),
            Just("prLinks"),
            Just("remoteAt"),
            Just("other"),
        ]
        .prop_map(String::from)
    }

    #[test]
    fn the_report_fast_path_takes_a_plain_report_and_leaves_odd_lines_to_the_general_path() {
        let line = br#"{"id":7,"op":"report","args":{"id":"j1","token":"t1","report":{"state":"working","summary":"a\nb","x":[1]}}}"#;
        let fast = parse_report_line(line).unwrap();
        assert_eq!(
            (fast.id, &*fast.job, &*fast.token),
            (Value::from(7), "j1", "t1")
        );
        assert_eq!(fast.report.unwrap().summary.as_deref(), Some("a\nb"));
        let deep = format!(
            r#"{{"id":7,"op":"report","x":{}1{},"args":{{"id":"j1","token":"t","report":{{"state":"done"}}}}}}"#,
            "[".repeat(300),
            "]".repeat(300)
        );
        let mut bad_utf8 =
            br#"{"id":7,"op":"report","x":"??","args":{"id":"j1","token":"t","report":{"state":"done"}}}"#
                .to_vec();
        let at = bad_utf8.iter().position(|b| *b == b'?').unwrap();
        bad_utf8[at..at + 2].copy_from_slice(&[0xff, 0xfe]);
        let others: Vec<Vec<u8>> = vec![
            br#"{"id":7,"op":"ack","args":{"id":"j1","token":"t","seq":1}}"#.to_vec(),
            br#"{"id":7,"op":"report","args":{"id":"j1","token":"t","report":"no"}}"#.to_vec(),
            br#"{"id":[7],"op":"report","args":{"id":"j1","token":"t","report":{}}}"#.to_vec(),
            br#"{"id":7,"op":"report","args":{"id":"j1","token":"t","report":{"state":"done","state":"x"}}}"#.to_vec(),
            // Arrays where the general path wants objects.
            br#"[1,"report",["j","t",["working"]]]"#.to_vec(),
            br#"{"id":1,"op":"report","args":["j","t",{"state":"working"}]}"#.to_vec(),
            br#"{"id":1,"op":"report","args":{"id":"j","token":"t","report":["done"]}}"#.to_vec(),
            // What the general path refuses inside a value the fast path would skip.
            br#"{"id":1,"op":"report","x":"\ud800","args":{"id":"j","token":"t","report":{"state":"done"}}}"#.to_vec(),
            bad_utf8,
            deep.into_bytes(),
        ];
        for other in &others {
            assert!(
                parse_report_line(other).is_none(),
                "{}",
                String::from_utf8_lossy(other)
            );
        }
        for refused in &others[4..] {
            let general = general_report(refused);
            assert!(
                general.as_ref().is_none_or(|(_, _, _, r)| r.is_err()),
                "the general path refuses {}",
                String::from_utf8_lossy(refused)
            );
        }
    }

    /// The fast path's answer to `line`, if it takes it, against the general path's.
    fn agree(line: &[u8]) -> Result<(), TestCaseError> {
        if let Some(fast) = parse_report_line(line) {
            let (gid, gjob, gtoken, greport) = general_report(line).ok_or_else(|| {
                TestCaseError::fail(format!(
                    "the general path refuses {}",
                    String::from_utf8_lossy(line)
                ))
            })?;
            prop_assert_eq!(fast.id, gid);
            prop_assert_eq!(fast.job.to_string(), gjob);
            prop_assert_eq!(fast.token.to_string(), gtoken);
            prop_assert_eq!(fast.report, greport);
        }
        Ok(())
    }

    proptest! {
        /// The fast path answers a line exactly as the general path would, or leaves it to that path.
        #[test]
        fn the_report_fast_path_agrees_with_the_general_path(
            id in prop_oneof![Just(Value::from(1)), Just(Value::from("a")), Just(Value::Null), Just(Value::from(1.5))],
            job in prop_oneof![Just(Value::from("j1")), Just(Value::Null), Just(Value::from(3))],
            fields in proptest::collection::vec((report_key(), any_json()), 0..6),
            report_is_object in proptest::bool::weighted(0.9),
        ) {
            let report = if report_is_object {
                Value::Object(fields.into_iter().collect())
            } else {
                Value::from("working")
            };
            let line = serde_json::json!({"id": id, "op": "report",
                "args": {"id": job, "token": "t", "report": report}}).to_string();
            let general = general_report(line.as_bytes());
            match parse_report_line(line.as_bytes()) {
                Some(fast) => {
                    let (gid, gjob, gtoken, greport) = general.expect("the general path reads it too");
                    prop_assert_eq!(fast.id, gid);
                    prop_assert_eq!(fast.job.to_string(), gjob);
                    prop_assert_eq!(fast.token.to_string(), gtoken);
                    prop_assert_eq!(fast.report, greport);
                }
                None => {
                    // Left to the general path: only lines the fast path must not word itself.
                    let plain = id.is_number() || id.is_string();
                    prop_assert!(
                        !(plain && job.is_string() && report_is_object && plain_object_line(line.as_bytes())),
                        "{}",
                        line
                    );
                }
            }
        }

        /// Lines near a valid report (bytes replaced, inserted or removed; JSON's punctuation likely): the
        /// fast path takes only those the general path reads the same way.
        #[test]
        fn the_report_fast_path_agrees_on_lines_near_a_report(
            edits in proptest::collection::vec(
                (any::<prop::sample::Index>(), 0u8..3, prop_oneof![
                    prop::sample::select(b"{}[]\",:\\u0 \n".to_vec()), any::<u8>()
                ]),
                1..4,
            ),
        ) {
            let mut line = br#"{"id":5,"op":"report","args":{"id":"j1","token":"t","report":{"state":"blocked","waitingFor":"question","choices":["a","b"],"summary":"s","n":[1,{"k":null}]}}}"#.to_vec();
            for (at, kind, byte) in edits {
                let i = at.index(line.len());
                match kind {
                    0 => line[i] = byte,
                    1 => line.insert(i, byte),
                    _ => {
                        line.remove(i);
                    }
                }
            }
            agree(&line)?;
        }

        #[test]
        fn any_bytes_parse_or_refuse_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = parse_request(&bytes);
        }
    }
}
