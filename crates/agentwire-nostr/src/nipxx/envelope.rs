//! The structured text envelope (compatibility profile): `key=value` fields joined by `|`, values
//! percent-encoded. Read with the spec's camelCase aliases as their snake_case keys, and checked for the
//! keys the spec requires of each event (`event`, `phase`, `ts`, and the event's own); written with the
//! canonical keys. Pure.

use std::collections::BTreeMap;

/// The camelCase aliases the spec asks readers to accept, and the canonical key each stands for.
const ALIASES: [(&str, &str); 5] = [
    ("runId", "run_id"),
    ("sessionId", "session_id"),
    ("timestamp", "ts"),
    ("callId", "call_id"),
    ("finishReason", "finish_reason"),
];

/// The event whose text an envelope is: each requires its own keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvelopeOf {
    /// ai.response: `event=final`, `phase=end`, `text`.
    Response,
    /// ai.delta: `event=delta`, `phase`, and `text` or `block`.
    Delta,
    /// ai.tool_call: `event=tool`, `phase`, and `text` or `name`.
    ToolCall,
    /// ai.error: `event=error`, `phase=end`, `code`, `text`.
    Error,
}

impl EnvelopeOf {
    /// Its `event` value.
    pub fn event(self) -> &'static str {
        match self {
            EnvelopeOf::Response => "final",
            EnvelopeOf::Delta => "delta",
            EnvelopeOf::ToolCall => "tool",
            EnvelopeOf::Error => "error",
        }
    }
}

/// Why a text is not the envelope of an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// Not `key=value` fields joined by `|` with an `event` among them.
    #[error("not an envelope (`key=value` fields joined by `|`, one of them `event`)")]
    NotAnEnvelope,
    /// A key the spec requires is missing: the key, or the keys of which one is required.
    #[error("the envelope has no `{}`", .0.join("` or `"))]
    Missing(&'static [&'static str]),
    /// The `event` is not the one expected: the expected one.
    #[error("the envelope's event is not `{0}`")]
    Event(&'static str),
    /// A terminal's (ai.response, ai.error) envelope without `phase=end`.
    #[error("a terminal's envelope has `phase=end`")]
    NotEnd,
}

/// A checked envelope: its fields, aliases read as their canonical keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    fields: BTreeMap<String, String>,
}

impl Envelope {
    /// Reads `text` as the envelope of an `of` event; why not, when it is not one or lacks a key the spec
    /// requires.
    pub fn read(text: &str, of: EnvelopeOf) -> Result<Envelope, EnvelopeError> {
        if !is_envelope(text) {
            return Err(EnvelopeError::NotAnEnvelope);
        }
        let mut fields = parse(text);
        for (alias, key) in ALIASES {
            if let Some(v) = fields.remove(alias) {
                fields.entry(key.to_string()).or_insert(v);
            }
        }
        let e = Envelope { fields };
        for key in &["event", "phase", "ts"] {
            if e.get(key).is_none() {
                return Err(EnvelopeError::Missing(std::slice::from_ref(key)));
            }
        }
        if e.get("event") != Some(of.event()) {
            return Err(EnvelopeError::Event(of.event()));
        }
        let ends = matches!(of, EnvelopeOf::Response | EnvelopeOf::Error);
        if ends && e.get("phase") != Some("end") {
            return Err(EnvelopeError::NotEnd);
        }
        let needs: &'static [&'static [&'static str]] = match of {
            EnvelopeOf::Response => &[&["text"]],
            EnvelopeOf::Delta => &[&["text", "block"]],
            EnvelopeOf::ToolCall => &[&["text", "name"]],
            EnvelopeOf::Error => &[&["code"], &["text"]],
        };
        for any in needs {
            if !any.iter().any(|k| e.get(k).is_some()) {
                return Err(EnvelopeError::Missing(any));
            }
        }
        Ok(e)
    }

    /// A field, by its canonical key.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }

    /// The text it carries: `text`, else `block`.
    pub fn text(&self) -> Option<&str> {
        self.get("text").or_else(|| self.get("block"))
    }
}

/// Most fields read from one envelope; the rest are ignored (an envelope is a handful of keys).
pub const MAX_ENVELOPE_FIELDS: usize = 64;

/// Whether text looks like an envelope: `key=value` fields joined by `|`, one of them `event` (in any
/// place: the spec requires the keys, not their order).
pub fn is_envelope(text: &str) -> bool {
    text.contains('|')
        && text
            .split('|')
            .take(MAX_ENVELOPE_FIELDS)
            .any(|part| part.trim_start().starts_with("event="))
}

/// Parses an envelope into its fields. Parts without `=` or with an empty key are skipped; a value that is
/// not valid percent-encoding is kept as written.
pub fn parse(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for part in text.split('|').take(MAX_ENVELOPE_FIELDS) {
        let Some(idx) = part.find('=') else { continue };
        let key = part[..idx].trim().to_string();
        if key.is_empty() {
            continue;
        }
        let raw = &part[idx + 1..];
        out.insert(key, decode(raw).unwrap_or_else(|| raw.to_string()));
    }
    out
}

/// Builds an envelope from fields, in the order given.
pub fn encode<'a>(fields: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    fields
        .into_iter()
        .map(|(k, v)| format!("{k}={}", encode_value(v)))
        .collect::<Vec<_>>()
        .join("|")
}

/// `encodeURIComponent`.
pub fn encode_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `decodeURIComponent`; `None` for a bad escape or bytes that are not UTF-8.
pub fn decode(v: &str) -> Option<String> {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The text an `of` event's envelope carries, if `text` is such an envelope with every key the spec
/// requires (else the text is shown as it came).
pub fn text_of(text: &str, of: EnvelopeOf) -> Option<String> {
    Envelope::read(text, of)
        .ok()
        .and_then(|e| e.text().map(str::to_string))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_key_of_only_whitespace_is_no_key_and_the_fields_write_back_as_they_read() {
        // Found by the fuzz target nipxx_envelope: a key of vertical tabs was kept as the empty key, which
        // written again (`=value`) read back as no field.
        let f = parse("event=delta|\u{b}\u{b}=x| =y|phase=update");
        assert_eq!(f.keys().collect::<Vec<_>>(), ["event", "phase"]);
        let written = encode(f.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        assert_eq!(parse(&written), f);
    }

    #[test]
    fn parses_the_spec_examples() {
        let f = parse("event=tool|phase=start|name=web_fetch|call_id=call_123|target=https%3A%2F%2Fexample.com|ts=1771402416");
        assert_eq!(f["target"], "https://example.com");
        assert_eq!(f["phase"], "start");
        let r = "event=final|phase=end|text=Here%20is%20the%20answer...|finish_reason=stop|run_id=abc123|session_id=sender%3Aabc|ts=1771402425";
        assert_eq!(
            text_of(r, EnvelopeOf::Response).as_deref(),
            Some("Here is the answer...")
        );
        let d = "event=delta|mode=thinking|status=update|phase=update|block=Looking%20up%20latest%20pricing|text=Looking%20up%20latest%20pricing|run_id=abc123|session_id=sender%3Aabc|ts=1771402418";
        assert_eq!(
            text_of(d, EnvelopeOf::Delta).as_deref(),
            Some("Looking up latest pricing")
        );
        let t = Envelope::read(
            "event=tool|phase=start|name=web_fetch|call_id=call_123|target=https%3A%2F%2Fexample.com|ts=1771402416",
            EnvelopeOf::ToolCall,
        )
        .unwrap();
        assert_eq!(t.get("name"), Some("web_fetch"));
        assert_eq!(parse("a=%ZZ|=x|noeq")["a"], "%ZZ");
        assert!(text_of("plain text", EnvelopeOf::Response).is_none());
    }

    #[test]
    fn camel_case_aliases_are_read_as_the_canonical_keys() {
        // Keys in any order.
        let e = Envelope::read(
            "ts=1|run_id=r|event=final|phase=end|text=ok",
            EnvelopeOf::Response,
        )
        .unwrap();
        assert_eq!(e.text(), Some("ok"));
        let e = Envelope::read(
            "event=error|phase=end|code=TIMEOUT|text=too%20slow|runId=r1|sessionId=s1|timestamp=5|callId=c",
            EnvelopeOf::Error,
        )
        .unwrap();
        assert_eq!(e.get("run_id"), Some("r1"));
        assert_eq!(e.get("session_id"), Some("s1"));
        assert_eq!(e.get("ts"), Some("5"), "`timestamp` stands for `ts`");
        assert_eq!(e.get("call_id"), Some("c"));
        assert_eq!(e.get("runId"), None);
        // The canonical key wins over its alias.
        let e = Envelope::read(
            "event=final|phase=end|text=x|ts=1|timestamp=2",
            EnvelopeOf::Response,
        )
        .unwrap();
        assert_eq!(e.get("ts"), Some("1"));
    }

    #[test]
    fn each_event_needs_its_own_keys() {
        let no = |text: &str, of| Envelope::read(text, of).unwrap_err().to_string();
        assert!(no("event=final|phase=end|text=x", EnvelopeOf::Response).contains("`ts`"));
        assert!(no("event=final|text=x|ts=1", EnvelopeOf::Response).contains("`phase`"));
        assert!(
            no("event=final|phase=update|text=x|ts=1", EnvelopeOf::Response).contains("phase=end")
        );
        assert!(no("event=final|phase=end|ts=1", EnvelopeOf::Response).contains("`text`"));
        assert!(no("event=delta|phase=end|text=x|ts=1", EnvelopeOf::Response).contains("`final`"));
        assert!(
            no("event=delta|phase=update|ts=1", EnvelopeOf::Delta).contains("`text` or `block`")
        );
        assert!(
            no("event=tool|phase=start|ts=1", EnvelopeOf::ToolCall).contains("`text` or `name`")
        );
        assert!(no("event=error|phase=end|text=x|ts=1", EnvelopeOf::Error).contains("`code`"));
        assert!(no("event=error|phase=end|code=X|ts=1", EnvelopeOf::Error).contains("`text`"));
        // An envelope without what the spec requires is shown as it came.
        assert_eq!(
            text_of("event=final|phase=end|text=x", EnvelopeOf::Response),
            None
        );
    }

    proptest! {
        #[test]
        fn round_trips(v in ".{0,50}") {
            let e = encode([("event", "delta"), ("text", v.as_str())]);
            prop_assert_eq!(parse(&e).get("text").cloned(), Some(v));
        }

        #[test]
        fn never_panics(s in ".{0,200}") {
            let _ = parse(&s);
            for of in [EnvelopeOf::Response, EnvelopeOf::Delta, EnvelopeOf::ToolCall, EnvelopeOf::Error] {
                let _ = text_of(&s, of);
            }
        }
    }
}
