//! Validated identifiers: the request id that names a turn and the conversation a turn belongs to.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Longest identifier accepted. A NIP-XX prompt id is 64 hex characters, a fisk-ai request at most 64; the
/// protocol prefix (`nipxx:`) and room for other protocols' ids fit well under this.
pub const MAX_ID_LEN: usize = 256;

/// Why an identifier was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// The identifier was empty.
    #[error("identifier is empty")]
    Empty,
    /// The identifier was longer than [`MAX_ID_LEN`].
    #[error("identifier is {0} bytes, over the limit of {MAX_ID_LEN}")]
    TooLong(usize),
    /// The identifier held a control character or whitespace.
    #[error("identifier holds a control or whitespace character")]
    BadCharacter,
}

fn check(s: &str) -> Result<(), IdError> {
    if s.is_empty() {
        return Err(IdError::Empty);
    }
    if s.len() > MAX_ID_LEN {
        return Err(IdError::TooLong(s.len()));
    }
    if s.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(IdError::BadCharacter);
    }
    Ok(())
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Validates and wraps an identifier.
            pub fn new(s: impl Into<String>) -> Result<Self, IdError> {
                let s = s.into();
                check(&s)?;
                Ok(Self(s))
            }

            /// The identifier as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(s: String) -> Result<Self, IdError> {
                Self::new(s)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

id_type!(
    /// The id that names one turn: a protocol prefix and the protocol's request id (`nipxx:<prompt event id>`).
    RequestId
);
id_type!(
    /// The conversation a turn belongs to (`nipxx:<agent>:<client>:<session>` for a NIP-XX session).
    ConversationId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_empty_long_and_control() {
        assert_eq!(RequestId::new(""), Err(IdError::Empty));
        assert_eq!(
            RequestId::new("a".repeat(MAX_ID_LEN + 1)),
            Err(IdError::TooLong(MAX_ID_LEN + 1))
        );
        assert_eq!(RequestId::new("a b"), Err(IdError::BadCharacter));
        assert_eq!(ConversationId::new("x\n"), Err(IdError::BadCharacter));
        assert!(RequestId::new("nipxx:abc").is_ok());
    }

    #[test]
    fn serde_validates() {
        assert!(serde_json::from_str::<RequestId>("\"\"").is_err());
        let id: RequestId = serde_json::from_str("\"nipxx:1\"").unwrap();
        assert_eq!(id.as_str(), "nipxx:1");
    }
}
