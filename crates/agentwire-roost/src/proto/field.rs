//! A JSON value as the hot decoders see it: any JSON is accepted (a wrong type is the validator's to
//! name, not the parser's), strings are borrowed from the line where they have no escapes, and only an
//! object builds a tree. Every report takes this path, so it allocates nothing for the usual report. Pure.

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::fmt;

/// One field's value.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) enum Field<'a> {
    /// Absent, or `null`.
    #[default]
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// Any number (no field the hot path reads is one).
    Number,
    /// A string.
    Str(Cow<'a, str>),
    /// An array.
    Array(Vec<Field<'a>>),
    /// An object.
    Object(Map<String, Value>),
}

struct FieldVisitor;

impl<'de> Visitor<'de> for FieldVisitor {
    type Value = Field<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Field<'de>, E> {
        Ok(Field::Bool(v))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Field<'de>, E> {
        Ok(Field::Number)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Field<'de>, E> {
        Ok(Field::Number)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Field<'de>, E> {
        Ok(Field::Number)
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Field<'de>, E> {
        Ok(Field::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Field<'de>, E> {
        Ok(Field::Str(Cow::Owned(v.to_string())))
    }
    fn visit_string<E>(self, v: String) -> Result<Field<'de>, E> {
        Ok(Field::Str(Cow::Owned(v)))
    }
    fn visit_unit<E>(self) -> Result<Field<'de>, E> {
        Ok(Field::Null)
    }
    fn visit_none<E>(self) -> Result<Field<'de>, E> {
        Ok(Field::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Field<'de>, D::Error> {
        Field::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Field<'de>, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Field<'de>>()? {
            items.push(item);
        }
        Ok(Field::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Field<'de>, A::Error> {
        let mut o = Map::new();
        while let Some((k, v)) = map.next_entry::<String, Value>()? {
            o.insert(k, v);
        }
        Ok(Field::Object(o))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Field<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Field<'a>, D::Error> {
        d.deserialize_any(FieldVisitor)
    }
}

/// A `T` read only from a JSON object. A derived struct also takes an array of its fields in order, which
/// the general path refuses; this keeps the hot path to what that path accepts.
pub(crate) struct ObjectOnly<T>(pub(crate) T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for ObjectOnly<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ObjectOnly<T>, D::Error> {
        struct Only<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Only<T> {
            type Value = T;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        d.deserialize_map(Only(std::marker::PhantomData))
            .map(ObjectOnly)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_json_kind_is_a_field_and_plain_strings_are_borrowed() {
        let line = r#"[null, true, 1.5, -2, "plain", "esc\naped", [1, "a"], {"k": 1}]"#;
        let v: Vec<Field<'_>> = serde_json::from_str(line).unwrap();
        assert_eq!(v[0], Field::Null);
        assert_eq!(v[1], Field::Bool(true));
        assert_eq!((v[2].clone(), v[3].clone()), (Field::Number, Field::Number));
        assert!(matches!(&v[4], Field::Str(Cow::Borrowed("plain"))));
        assert!(matches!(&v[5], Field::Str(Cow::Owned(s)) if s == "esc\naped"));
        assert_eq!(
            v[6],
            Field::Array(vec![Field::Number, Field::Str("a".into())])
        );
        assert!(matches!(&v[7], Field::Object(o) if o["k"] == 1));
    }

    #[test]
    fn an_object_only_struct_refuses_an_array_of_its_fields() {
        #[derive(serde::Deserialize)]
        struct Two {
            a: u8,
        }
        let ok: ObjectOnly<Two> = serde_json::from_str(r#"{"a": 1}"#).unwrap();
        assert_eq!(ok.0.a, 1);
        assert!(
            serde_json::from_str::<Two>("[1]").is_ok(),
            "what a derived struct alone takes"
        );
        assert!(serde_json::from_str::<ObjectOnly<Two>>("[1]").is_err());
    }

    #[test]
    fn a_field_reads_from_a_json_tree_too() {
        let tree = serde_json::json!({"a": "x", "b": [true]});
        let f = Field::deserialize(&tree["a"]).unwrap();
        assert_eq!(f, Field::Str("x".into()));
        let f = Field::deserialize(&tree["b"]).unwrap();
        assert_eq!(f, Field::Array(vec![Field::Bool(true)]));
        assert_eq!(Field::deserialize(&tree["missing"]).unwrap(), Field::Null);
    }
}
