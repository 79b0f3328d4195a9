//! Why an inbound message was refused: one variant per kind of failure, each naming where (a JSON pointer).

use super::elicit::QuestionKind;
use super::request::AnswerField;
use std::fmt;

/// What every refusal's text starts with: the fisk-ai worker's words for a message that fails validation.
const PREFIX: &str = "the request is not a valid v1 message";

/// A JSON type a schema asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum JsonType {
    /// A JSON object.
    Object,
    /// A JSON array.
    Array,
    /// A JSON string.
    String,
    /// A JSON number with no fractional part.
    Integer,
    /// `true` or `false`.
    Boolean,
}

impl fmt::Display for JsonType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            JsonType::Object => "an object",
            JsonType::Array => "an array",
            JsonType::String => "a string",
            JsonType::Integer => "an integer",
            JsonType::Boolean => "a boolean",
        })
    }
}

/// An inbound message the v1 schemas refuse (or, for [`WireError::AnswerDoesNotFit`], an answer that does
/// not fit its question). Every variant is a `400` on the wire; `Display` is the text to send with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The message is over [`MAX_MESSAGE_BYTES`](super::MAX_MESSAGE_BYTES); it was not parsed.
    #[error("{}: it is {len} bytes, over the {max}-byte limit", PREFIX)]
    TooLarge {
        /// Its size in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The bytes are not one JSON value.
    #[error("{}: not JSON: {detail}", PREFIX)]
    NotJson {
        /// The parser's account of where it failed.
        detail: String,
    },
    /// A value of the wrong JSON type (including `null` for an optional field).
    #[error("{}: at '{pointer}': must be {expected}", PREFIX)]
    WrongType {
        /// Where.
        pointer: String,
        /// What the schema asks for.
        expected: JsonType,
    },
    /// A required field is absent.
    #[error("{}: at '{pointer}': required", PREFIX)]
    Missing {
        /// The absent field.
        pointer: String,
    },
    /// A field the message's kind refuses (a `false` schema), such as `prompt` on a resume.
    #[error("{}: at '{pointer}': not allowed in {protocol}", PREFIX)]
    NotAllowed {
        /// The field.
        pointer: String,
        /// The kind that refuses it, e.g. `request.resume`.
        protocol: &'static str,
    },
    /// The `protocol` id names no message this decoder takes (unknown, or one for another subject).
    #[error("{}: at '/protocol': {found:?} is not {expected}", PREFIX)]
    UnexpectedProtocol {
        /// The id that arrived.
        found: String,
        /// What this decoder takes, in words.
        expected: &'static str,
    },
    /// A string that does not match its pattern.
    #[error("{}: at '{pointer}': does not match {pattern}", PREFIX)]
    Pattern {
        /// Where.
        pointer: String,
        /// The schema's pattern.
        pattern: &'static str,
    },
    /// A string longer than its `maxLength` (counted in characters, as JSON Schema counts).
    #[error("{}: at '{pointer}': longer than {max} characters", PREFIX)]
    TooLong {
        /// Where.
        pointer: String,
        /// The most characters allowed.
        max: usize,
    },
    /// A string shorter than its `minLength`.
    #[error("{}: at '{pointer}': must hold at least {min} character(s)", PREFIX)]
    TooShort {
        /// Where.
        pointer: String,
        /// The fewest characters allowed.
        min: usize,
    },
    /// An integer below its `minimum`.
    #[error("{}: at '{pointer}': less than {minimum}", PREFIX)]
    BelowMinimum {
        /// Where.
        pointer: String,
        /// The smallest value allowed.
        minimum: u64,
    },
    /// A string outside its `enum`.
    #[error("{}: at '{pointer}': not one of {}", PREFIX, .allowed.join(", "))]
    NotInEnum {
        /// Where.
        pointer: String,
        /// The values allowed.
        allowed: &'static [&'static str],
    },
    /// A `request.answer` whose `answer` names a field that does not answer its `kind` of question, or
    /// whose named field is absent. The schema leaves this to the worker; [`Answer::decision`] checks it.
    ///
    /// [`Answer::decision`]: super::Answer::decision
    #[error(
        "{}: at '/answer/answer': {answer} does not answer a {kind} question",
        PREFIX
    )]
    AnswerDoesNotFit {
        /// The question's kind.
        kind: QuestionKind,
        /// The field the answer named.
        answer: AnswerField,
    },
}

impl WireError {
    /// The JSON pointer of what failed; `""` (the whole document) for size and syntax failures.
    pub fn pointer(&self) -> &str {
        match self {
            WireError::TooLarge { .. } | WireError::NotJson { .. } => "",
            WireError::UnexpectedProtocol { .. } => "/protocol",
            WireError::AnswerDoesNotFit { .. } => "/answer/answer",
            WireError::WrongType { pointer, .. }
            | WireError::Missing { pointer }
            | WireError::NotAllowed { pointer, .. }
            | WireError::Pattern { pointer, .. }
            | WireError::TooLong { pointer, .. }
            | WireError::TooShort { pointer, .. }
            | WireError::BelowMinimum { pointer, .. }
            | WireError::NotInEnum { pointer, .. } => pointer,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_reads_like_the_spec() {
        let e = WireError::NotAllowed {
            pointer: "/prompt".into(),
            protocol: "request.resume",
        };
        assert_eq!(
            e.to_string(),
            "the request is not a valid v1 message: at '/prompt': not allowed in request.resume"
        );
        assert_eq!(e.pointer(), "/prompt");
        let e = WireError::NotInEnum {
            pointer: "/choice".into(),
            allowed: &["no", "once", "always"],
        };
        assert!(e
            .to_string()
            .ends_with("at '/choice': not one of no, once, always"));
        let e = WireError::TooLarge { len: 10, max: 5 };
        assert_eq!(e.pointer(), "");
        assert!(e.to_string().contains("10 bytes, over the 5-byte limit"));
    }
}
