//! fisk-ai conversations on the core journal: the token a worker hands out, the conversation id it
//! names, and what the worker keeps about a conversation between turns (pure; no I/O).
//!
//! The token is a credential ("holding it is the authorization to add a turn"), so it is never stored or
//! logged: the journal knows a conversation by `fisk:` plus a SHA-256 of its token, and a request's token
//! finds its conversation by hashing it again.

use agentwire_core::{ConversationId, FailureCode, Outcome, TurnFailure, Usage};
use serde::{Deserialize, Serialize};

/// Random bytes in a conversation token: 144 bits, above the 128 the issue asks for.
pub const TOKEN_BYTES: usize = 18;
/// Hex digits of the token hash kept in the conversation id: 128 bits, collision-free in practice.
const CONVERSATION_HASH_HEX: usize = 32;

/// A new conversation token from `random` bytes (hex, 36 characters: inside the wire's
/// `^[a-zA-Z0-9_-]+$` and 128-character bounds).
pub fn mint_token(random: [u8; TOKEN_BYTES]) -> String {
    random.iter().map(|b| format!("{b:02x}")).collect()
}

/// The conversation a token names.
pub fn conversation_id(token: &str) -> ConversationId {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    ConversationId::new(format!("fisk:{}", &hex[..CONVERSATION_HASH_HEX]))
        .expect("a short ascii id is valid")
}

/// What the conversation was started with: a change refuses a resume (`config_drift`) unless forced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// The model.
    pub model: String,
    /// The system prompt.
    pub system_prompt: String,
    /// The thinking mode.
    pub thinking: String,
    /// The reasoning effort.
    pub effort: String,
}

impl Fingerprint {
    /// The names of what changed from `self` to `now`, in the spec's words.
    pub fn drift(&self, now: &Fingerprint) -> Vec<&'static str> {
        let mut changed = Vec::new();
        if self.model != now.model {
            changed.push("model");
        }
        if self.system_prompt != now.system_prompt {
            changed.push("system prompt");
        }
        if self.thinking != now.thinking {
            changed.push("thinking mode");
        }
        if self.effort != now.effort {
            changed.push("reasoning effort");
        }
        changed
    }
}

/// What a worker keeps about a conversation between turns (journaled as the conversation's meta).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConversationMeta {
    /// The configuration the conversation runs under.
    pub fingerprint: Fingerprint,
    /// The tool names it runs with: a change drops standing approvals.
    pub tools: Vec<String>,
    /// Tools approved `always` for the rest of the conversation.
    #[serde(default)]
    pub approvals: Vec<String>,
    /// The lowest token allowance any request set (the worker's own is the ceiling).
    #[serde(default)]
    pub max_tokens: Option<u64>,
}

/// The token allowance in force: the lowest of the worker's, the conversation's and the request's.
pub fn allowance(
    worker: Option<u64>,
    conversation: Option<u64>,
    request: Option<u64>,
) -> Option<u64> {
    [worker, conversation, request].into_iter().flatten().min()
}

/// A turn parked part way: what a resume or an answer continues.
#[derive(Debug, Clone, PartialEq)]
pub struct Parked {
    /// `suspended` or `deferred`.
    pub code: FailureCode,
    /// The agent's checkpoint.
    pub checkpoint: serde_json::Value,
    /// The call it waits on, if it names one.
    pub call_id: Option<String>,
}

/// The parked state of a conversation from its last turn's outcome: parked if that turn ended suspended or
/// deferred with a checkpoint.
pub fn parked(last: Option<&Outcome>) -> Option<Parked> {
    match last {
        Some(Outcome::Failure(f))
            if matches!(
                f.code,
                FailureCode::Turn(TurnFailure::Suspended | TurnFailure::Deferred)
            ) || f.code == TurnFailure::Cancelled =>
        {
            let checkpoint = f.checkpoint.clone().unwrap_or(serde_json::Value::Null);
            let call_id = checkpoint
                .get("call_id")
                .and_then(serde_json::Value::as_str)
                .map(String::from);
            Some(Parked {
                code: f.code.clone(),
                checkpoint,
                call_id,
            })
        }
        _ => None,
    }
}

/// The usage of a whole conversation: the sum over its turns' outcomes.
pub fn total_usage<'a>(outcomes: impl IntoIterator<Item = &'a Outcome>) -> Usage {
    outcomes
        .into_iter()
        .fold(Usage::default(), |acc, o| match o {
            Outcome::Result(r) => acc.plus(r.usage),
            Outcome::Failure(f) => acc.plus(f.usage),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire_core::{Failure, TurnResult};

    #[test]
    fn a_token_names_one_conversation_and_is_not_in_its_id() {
        let t = mint_token([7; TOKEN_BYTES]);
        assert_eq!(t.len(), 36);
        assert!(t.chars().all(|c| c.is_ascii_hexdigit()));
        let id = conversation_id(&t);
        assert_eq!(id, conversation_id(&t));
        assert_ne!(id, conversation_id(&mint_token([8; TOKEN_BYTES])));
        assert!(!id.as_str().contains(&t));
        assert!(id.as_str().starts_with("fisk:"));
    }

    #[test]
    fn drift_names_what_changed() {
        let a = Fingerprint {
            model: "m".into(),
            system_prompt: "s".into(),
            thinking: "off".into(),
            effort: "".into(),
        };
        assert!(a.drift(&a).is_empty());
        let b = Fingerprint {
            model: "n".into(),
            effort: "high".into(),
            ..a.clone()
        };
        assert_eq!(a.drift(&b), vec!["model", "reasoning effort"]);
    }

    #[test]
    fn allowance_takes_the_lowest_and_usage_sums_the_conversation() {
        assert_eq!(allowance(None, None, None), None);
        assert_eq!(allowance(Some(100), Some(50), Some(80)), Some(50));
        assert_eq!(allowance(Some(100), None, Some(500)), Some(100));
        let u = |i, o| Usage {
            input_tokens: i,
            output_tokens: o,
        };
        let outcomes = [
            Outcome::Result(TurnResult {
                text: "a".into(),
                usage: u(1, 2),
                stop_reason: "stop".into(),
            }),
            Outcome::Failure(Failure::new(TurnFailure::Suspended, "x").with_usage(u(3, 4))),
        ];
        assert_eq!(total_usage(&outcomes), u(4, 6));
        let p = parked(outcomes.last()).unwrap();
        assert_eq!(p.code, TurnFailure::Suspended);
        assert_eq!(parked(outcomes.first()), None);
    }
}
