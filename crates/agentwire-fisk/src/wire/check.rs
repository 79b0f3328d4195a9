//! The JSON Schema rules the inbound schemas use, read off a parsed object with a pointer for each failure.
//!
//! Only the keywords the fisk-ai v1 inbound schemas use are here: `type`, `required`, `pattern` (always the
//! id pattern), `minLength`, `maxLength`, `minimum`, `enum`, and `false` for a sibling kind's field.
//! Semantics follow JSON Schema 2020-12: lengths count characters, an integer is any number with no
//! fractional part, and a present `null` is a value of the wrong type rather than an absent field.

use super::error::{JsonType, WireError};
use super::limits::MAX_MESSAGE_BYTES;
use serde_json::{Map, Number, Value};

/// The pattern of ids, tags and identity names: a worker builds NATS subjects from them.
pub(crate) const ID_PATTERN: &str = "^[a-zA-Z0-9_-]+$";

/// Whether `s` matches [`ID_PATTERN`] (`$` ends the input: a trailing newline does not match).
pub(crate) fn is_id(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The rules one string field is held to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Text {
    id: bool,
    min: usize,
    max: Option<usize>,
}

impl Text {
    /// Any string.
    pub(crate) const ANY: Text = Text {
        id: false,
        min: 0,
        max: None,
    };
    /// A string matching [`ID_PATTERN`].
    pub(crate) const ID: Text = Text {
        id: true,
        min: 0,
        max: None,
    };

    /// An id of at most `max` characters.
    pub(crate) const fn id_max(max: usize) -> Text {
        Text {
            id: true,
            min: 0,
            max: Some(max),
        }
    }

    /// Any string of at most `max` characters.
    pub(crate) const fn max(max: usize) -> Text {
        Text {
            id: false,
            min: 0,
            max: Some(max),
        }
    }

    /// Any string of at least `min` characters.
    pub(crate) const fn min(min: usize) -> Text {
        Text {
            id: false,
            min,
            max: None,
        }
    }

    fn check(&self, pointer: impl FnOnce() -> String, s: &str) -> Result<(), WireError> {
        // Bytes bound characters from above, so most strings are settled without counting.
        if self.min > 0 && (s.len() < self.min || s.chars().count() < self.min) {
            return Err(WireError::TooShort {
                pointer: pointer(),
                min: self.min,
            });
        }
        if let Some(max) = self.max {
            if s.len() > max && s.chars().count() > max {
                return Err(WireError::TooLong {
                    pointer: pointer(),
                    max,
                });
            }
        }
        if self.id && !is_id(s) {
            return Err(WireError::Pattern {
                pointer: pointer(),
                pattern: ID_PATTERN,
            });
        }
        Ok(())
    }
}

/// Parses a message body: bounded by [`MAX_MESSAGE_BYTES`] before a byte of it is read.
pub(crate) fn parse(bytes: &[u8]) -> Result<Value, WireError> {
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(WireError::TooLarge {
            len: bytes.len(),
            max: MAX_MESSAGE_BYTES,
        });
    }
    serde_json::from_slice(bytes).map_err(|e| WireError::NotJson {
        detail: e.to_string(),
    })
}

/// One JSON object being read, with the pointer it sits at.
pub(crate) struct Obj<'a> {
    map: &'a Map<String, Value>,
    at: String,
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn wrong(pointer: String, expected: JsonType) -> WireError {
    WireError::WrongType { pointer, expected }
}

impl<'a> Obj<'a> {
    /// The document itself, which must be an object (every message schema starts from the header object).
    pub(crate) fn root(v: &'a Value) -> Result<Obj<'a>, WireError> {
        match v {
            Value::Object(map) => Ok(Obj {
                map,
                at: String::new(),
            }),
            _ => Err(wrong(String::new(), JsonType::Object)),
        }
    }

    /// The pointer of `key` in this object.
    pub(crate) fn ptr(&self, key: &str) -> String {
        format!("{}/{}", self.at, escape(key))
    }

    /// Whether `key` is present at all (with any value, `null` included).
    pub(crate) fn has(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    /// Refuses `key` if present: the schema of `protocol` says `false` for it.
    pub(crate) fn forbid(&self, key: &str, protocol: &'static str) -> Result<(), WireError> {
        if self.has(key) {
            return Err(WireError::NotAllowed {
                pointer: self.ptr(key),
                protocol,
            });
        }
        Ok(())
    }

    fn required<T>(&self, key: &str, v: Option<T>) -> Result<T, WireError> {
        v.ok_or_else(|| WireError::Missing {
            pointer: self.ptr(key),
        })
    }

    /// An optional string held to `rule`.
    pub(crate) fn opt_str(&self, key: &str, rule: Text) -> Result<Option<&'a str>, WireError> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => {
                rule.check(|| self.ptr(key), s)?;
                Ok(Some(s))
            }
            Some(_) => Err(wrong(self.ptr(key), JsonType::String)),
        }
    }

    /// A required string held to `rule`.
    pub(crate) fn req_str(&self, key: &str, rule: Text) -> Result<&'a str, WireError> {
        let v = self.opt_str(key, rule)?;
        self.required(key, v)
    }

    /// An optional string that must be one of `allowed`: its position there.
    pub(crate) fn opt_enum(
        &self,
        key: &str,
        allowed: &'static [&'static str],
    ) -> Result<Option<usize>, WireError> {
        let Some(v) = self.map.get(key) else {
            return Ok(None);
        };
        // A schema `enum` compares whole values, so a non-string is simply not one of them.
        v.as_str()
            .and_then(|s| allowed.iter().position(|a| *a == s))
            .map(Some)
            .ok_or_else(|| WireError::NotInEnum {
                pointer: self.ptr(key),
                allowed,
            })
    }

    /// A required string that must be one of `allowed`: its position there.
    pub(crate) fn req_enum(
        &self,
        key: &str,
        allowed: &'static [&'static str],
    ) -> Result<usize, WireError> {
        let v = self.opt_enum(key, allowed)?;
        self.required(key, v)
    }

    /// An optional boolean.
    pub(crate) fn opt_bool(&self, key: &str) -> Result<Option<bool>, WireError> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(wrong(self.ptr(key), JsonType::Boolean)),
        }
    }

    /// A required boolean.
    pub(crate) fn req_bool(&self, key: &str) -> Result<bool, WireError> {
        let v = self.opt_bool(key)?;
        self.required(key, v)
    }

    /// An optional integer of at least `minimum`; see the module docs of `wire` for values past `u64`.
    pub(crate) fn opt_uint(&self, key: &str, minimum: u64) -> Result<Option<u64>, WireError> {
        let Some(v) = self.map.get(key) else {
            return Ok(None);
        };
        let Value::Number(n) = v else {
            return Err(wrong(self.ptr(key), JsonType::Integer));
        };
        match integer(n) {
            None => Err(wrong(self.ptr(key), JsonType::Integer)),
            Some(Some(u)) if u >= minimum => Ok(Some(u)),
            Some(_) => Err(WireError::BelowMinimum {
                pointer: self.ptr(key),
                minimum,
            }),
        }
    }

    /// A required integer of at least `minimum`.
    pub(crate) fn req_uint(&self, key: &str, minimum: u64) -> Result<u64, WireError> {
        let v = self.opt_uint(key, minimum)?;
        self.required(key, v)
    }

    /// An optional nested object.
    pub(crate) fn opt_obj(&self, key: &str) -> Result<Option<Obj<'a>>, WireError> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(Obj {
                map,
                at: self.ptr(key),
            })),
            Some(_) => Err(wrong(self.ptr(key), JsonType::Object)),
        }
    }

    /// A required nested object.
    pub(crate) fn req_obj(&self, key: &str) -> Result<Obj<'a>, WireError> {
        let v = self.opt_obj(key)?;
        self.required(key, v)
    }

    /// An optional array of strings (absent is empty).
    pub(crate) fn opt_str_array(&self, key: &str) -> Result<Vec<String>, WireError> {
        match self.map.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Value::String(s) => Ok(s.clone()),
                    _ => Err(wrong(format!("{}/{i}", self.ptr(key)), JsonType::String)),
                })
                .collect(),
            Some(_) => Err(wrong(self.ptr(key), JsonType::Array)),
        }
    }
}

/// A JSON Schema integer: `Some(Some(n))` for one of at least 0 (saturating past `u64::MAX`),
/// `Some(None)` for a negative one, `None` for a number with a fractional part.
fn integer(n: &Number) -> Option<Option<u64>> {
    if let Some(u) = n.as_u64() {
        return Some(Some(u));
    }
    if n.as_i64().is_some() {
        return Some(None);
    }
    let f = n.as_f64()?;
    if !f.is_finite() || f.fract() != 0.0 {
        return None;
    }
    // `-0.0 < 0.0` is false, as in JSON Schema; `as` saturates past u64::MAX.
    Some(if f < 0.0 { None } else { Some(f as u64) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_id_pattern_is_anchored_at_both_ends() {
        assert!(is_id("a-Z_09"));
        assert!(!is_id(""));
        assert!(!is_id("abc\n"));
        assert!(!is_id("a.b"));
        assert!(!is_id("é"));
    }

    #[test]
    fn integers_follow_json_schema() {
        let v = json!({"a": 1.0, "b": -0.0, "c": 1.5, "d": -1, "e": 1e300, "f": "1", "g": null});
        let o = Obj::root(&v).unwrap();
        assert_eq!(o.opt_uint("a", 1).unwrap(), Some(1));
        assert_eq!(o.opt_uint("b", 0).unwrap(), Some(0));
        assert!(matches!(
            o.opt_uint("c", 0),
            Err(WireError::WrongType { .. })
        ));
        assert!(matches!(
            o.opt_uint("d", 0),
            Err(WireError::BelowMinimum { .. })
        ));
        assert_eq!(o.opt_uint("e", 1).unwrap(), Some(u64::MAX));
        assert!(o.opt_uint("f", 0).is_err());
        assert!(o.opt_uint("g", 0).is_err());
        assert_eq!(o.opt_uint("missing", 0).unwrap(), None);
    }

    #[test]
    fn lengths_count_characters() {
        let v = json!({"s": "ééé"});
        let o = Obj::root(&v).unwrap();
        assert!(o.opt_str("s", Text::max(3)).is_ok());
        assert!(o.opt_str("s", Text::max(2)).is_err());
        assert!(o.opt_str("s", Text::min(4)).is_err());
    }

    #[test]
    fn pointers_escape_keys_and_index_arrays() {
        let v = json!({"a/b": {"c": [1]}});
        let o = Obj::root(&v).unwrap();
        assert_eq!(o.ptr("a/b"), "/a~1b");
        let inner = o.req_obj("a/b").unwrap();
        let err = inner.opt_str_array("c").unwrap_err();
        assert_eq!(err.pointer(), "/a~1b/c/0");
    }
}
