//! The structured text envelope (compatibility profile): `key=value` fields joined by `|`, values
//! percent-encoded.

use std::collections::BTreeMap;

/// Most fields read from one envelope; the rest are ignored (an envelope is a handful of keys).
pub const MAX_ENVELOPE_FIELDS: usize = 64;

/// Whether text looks like an envelope: it starts with `event=` and has a `|`.
pub fn is_envelope(text: &str) -> bool {
    text.starts_with("event=") && text.contains('|')
}

/// Parses an envelope into its fields. Parts without `=` or with an empty key are skipped; a value that is
/// not valid percent-encoding is kept as written.
pub fn parse(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for part in text.split('|').take(MAX_ENVELOPE_FIELDS) {
        let Some(idx) = part.find('=') else { continue };
        if idx == 0 {
            continue;
        }
        let key = part[..idx].trim().to_string();
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

/// The answer text an envelope carries, if `text` is an envelope with a `text` or `block` field.
pub fn text_of(text: &str) -> Option<String> {
    if !is_envelope(text) {
        return None;
    }
    let f = parse(text);
    f.get("text").or_else(|| f.get("block")).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_the_spec_examples() {
        let f = parse("event=tool|phase=start|name=web_fetch|call_id=call_123|target=https%3A%2F%2Fexample.com|ts=1771402416");
        assert_eq!(f["target"], "https://example.com");
        assert_eq!(f["phase"], "start");
        let r = "event=final|phase=end|text=Here%20is%20the%20answer...|finish_reason=stop|run_id=abc123|session_id=sender%3Aabc|ts=1771402425";
        assert_eq!(text_of(r).as_deref(), Some("Here is the answer..."));
        assert_eq!(parse("a=%ZZ|=x|noeq")["a"], "%ZZ");
        assert!(text_of("plain text").is_none());
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
            let _ = text_of(&s);
        }
    }
}
