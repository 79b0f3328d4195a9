//! The roost wire: one JSON object per line. A request `{"id", "op", "args"}`, a response
//! `{"id", "ok": true, "result"}` or `{"id", "ok": false, "error", "code"}`, and unasked events
//! `{"event": ...}`. Unknown fields are ignored. Pure.

use serde::Serialize;
use serde_json::{Map, Value};

/// The longest request line: a longer one ends the connection (the spec's 4 MiB).
pub const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;
/// Most connections the daemon holds (the spec's number).
pub const MAX_CONNECTIONS: usize = 1024;
/// Most requests in flight on one connection; past it the connection is not read until some are answered.
pub const MAX_IN_FLIGHT: usize = 256;
/// Answers and events a client may leave unread before it is dropped (the spec's 16 MiB).
pub const MAX_UNREAD_BYTES: usize = 16 * 1024 * 1024;

/// The error codes of the protocol.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// Malformed.
    BadRequest,
    /// Wrong token: stop speaking for this job.
    Unauthorized,
    /// No such job.
    NotFound,
    /// Too many replies waiting.
    Full,
    /// Try again shortly.
    Busy,
    /// Not for this kind of job or connection.
    Unsupported,
    /// A code this version does not know (round-trips).
    Unknown(String),
}

impl ErrorCode {
    /// The code on the wire.
    pub fn as_str(&self) -> &str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Full => "full",
            ErrorCode::Busy => "busy",
            ErrorCode::Unsupported => "unsupported",
            ErrorCode::Unknown(s) => s,
        }
    }

    /// The code of a wire string.
    pub fn parse(s: &str) -> ErrorCode {
        match s {
            "bad_request" => ErrorCode::BadRequest,
            "unauthorized" => ErrorCode::Unauthorized,
            "not_found" => ErrorCode::NotFound,
            "full" => ErrorCode::Full,
            "busy" => ErrorCode::Busy,
            "unsupported" => ErrorCode::Unsupported,
            other => ErrorCode::Unknown(other.to_string()),
        }
    }
}

/// A refusal: a code and a message for people.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct Refusal {
    /// The code.
    pub code: ErrorCode,
    /// What was wrong.
    pub message: String,
}

impl Refusal {
    /// A refusal.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Refusal {
        Refusal {
            code,
            message: message.into(),
        }
    }

    /// A `bad_request`.
    pub fn bad(message: impl Into<String>) -> Refusal {
        Refusal::new(ErrorCode::BadRequest, message)
    }
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

/// A name folded to one line: line breaks and other control characters become spaces, runs of spaces
/// one, trimmed.
pub fn fold_name(name: &str) -> String {
    let spaced: String = name
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    spaced.split_whitespace().collect::<Vec<_>>().join(" ")
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
        assert!(check_request_id("a.b:c-d_9").is_ok());
        assert!(check_request_id("").is_err());
        assert!(check_request_id(&"x".repeat(65)).is_err());
        assert!(check_request_id("a b").is_err());
    }

    proptest! {
        #[test]
        fn any_bytes_parse_or_refuse_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = parse_request(&bytes);
        }
    }
}
