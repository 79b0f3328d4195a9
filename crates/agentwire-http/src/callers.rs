//! Who calls the caller fronts (A2A, the OpenAI-compatible API, MCP): the operator, whose token opens
//! everything, or a caller, a program of someone's with a token of its own (`[[http.callers]]`) that
//! opens only the caller fronts and only the agents it is given. Every turn records its caller as its
//! requester ([`Caller::requester`]); a caller sees, answers and cancels only its own turns. Pure.

use crate::access::Token;
use std::collections::BTreeSet;
use std::sync::Arc;

/// The fewest characters a caller's token has: 32 (128 bits as hex, past guessing at any rate the
/// server takes requests). A shorter one is refused at start.
pub const MIN_CALLER_TOKEN_CHARS: usize = 32;
/// The most characters a caller's token has: 512, far more than any generator makes; a header is bounded.
pub const MAX_CALLER_TOKEN_CHARS: usize = 512;
/// The most callers one server knows: each request's token is compared with every caller's (in constant
/// time each), so the list stays short; 64 programs is a large deployment of one daemon.
pub const MAX_CALLERS: usize = 64;

/// The requester recorded for the operator's turns.
pub const OPERATOR: &str = "operator";

/// Who sent a request to a caller front.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The operator (the data dir's `http.token`): every agent, every turn.
    Operator,
    /// A caller of `[[http.callers]]`.
    Program(Arc<CallerGrant>),
}

/// What a caller's token opens.
#[derive(Debug, PartialEq, Eq)]
pub struct CallerGrant {
    /// Its name.
    pub name: String,
    /// The agents it may call; `None`: every agent exposed on the front.
    pub agents: Option<BTreeSet<String>>,
}

impl Caller {
    /// The requester its turns are journaled under: `operator`, or `caller:<name>`.
    pub fn requester(&self) -> String {
        match self {
            Caller::Operator => OPERATOR.to_string(),
            Caller::Program(g) => format!("caller:{}", g.name),
        }
    }

    /// Whether it may call agent `agent`.
    pub fn may_call(&self, agent: &str) -> bool {
        match self {
            Caller::Operator => true,
            Caller::Program(g) => g.agents.as_ref().is_none_or(|a| a.contains(agent)),
        }
    }

    /// Whether a turn whose requester is `requester` is its to see, answer or cancel.
    pub fn owns(&self, requester: &str) -> bool {
        match self {
            Caller::Operator => true,
            Caller::Program(_) => requester == self.requester(),
        }
    }
}

/// A caller's token and grant, as the server checks them.
#[derive(Debug, Clone)]
pub struct CallerToken {
    /// Its token.
    pub token: Token,
    /// What it opens.
    pub grant: Arc<CallerGrant>,
}

/// Which token a request presents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Presented {
    /// The operator's.
    Operator,
    /// A caller's.
    Caller(Caller),
    /// None that the server knows.
    Wrong,
}

/// Which of `operator` and `callers` token `presented` is. Every token is compared, each in constant
/// time, so how long the check takes does not say which one matched or how much of one.
pub fn identify(presented: &str, operator: &Token, callers: &[CallerToken]) -> Presented {
    let mut found = match operator.matches(presented) {
        true => Presented::Operator,
        false => Presented::Wrong,
    };
    for c in callers {
        if c.token.matches(presented) && found == Presented::Wrong {
            found = Presented::Caller(Caller::Program(Arc::clone(&c.grant)));
        }
    }
    found
}

/// Why a caller's token (read from its variable or file) is refused. It never holds the token, nor any
/// part of it: only its length.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallerTokenError {
    /// Too short to be beyond guessing, or too long.
    #[error("a caller's token has {MIN_CALLER_TOKEN_CHARS} to {MAX_CALLER_TOKEN_CHARS} characters (this one has {chars}); make one with `openssl rand -hex 32`")]
    Length {
        /// The characters it has.
        chars: usize,
    },
    /// It has a space, a control character or a character beyond ASCII.
    #[error("a caller's token is visible ASCII characters, no spaces")]
    NotVisible,
}

/// A caller's token read from its variable or file, checked: [`MIN_CALLER_TOKEN_CHARS`] to
/// [`MAX_CALLER_TOKEN_CHARS`] visible ASCII characters (surrounding whitespace, such as a file's last
/// newline, is not part of it).
pub fn caller_token(text: &str) -> Result<Token, CallerTokenError> {
    let t = text.trim();
    if !(MIN_CALLER_TOKEN_CHARS..=MAX_CALLER_TOKEN_CHARS).contains(&t.len()) {
        return Err(CallerTokenError::Length { chars: t.len() });
    }
    if !t.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(CallerTokenError::NotVisible);
    }
    Ok(Token::secret(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(name: &str, agents: Option<&[&str]>) -> Arc<CallerGrant> {
        Arc::new(CallerGrant {
            name: name.into(),
            agents: agents.map(|a| a.iter().map(|s| s.to_string()).collect()),
        })
    }

    #[test]
    fn each_token_says_who_calls_and_a_wrong_one_nobody() {
        let operator = Token::generate().unwrap();
        let alice = caller_token(&"a".repeat(40)).unwrap();
        let bob = caller_token(&"b".repeat(40)).unwrap();
        let callers = [
            CallerToken {
                token: alice.clone(),
                grant: grant("alice", Some(&["demo"])),
            },
            CallerToken {
                token: bob.clone(),
                grant: grant("bob", None),
            },
        ];
        assert_eq!(
            identify(operator.reveal(), &operator, &callers),
            Presented::Operator
        );
        let Presented::Caller(a) = identify(alice.reveal(), &operator, &callers) else {
            panic!("alice's token is alice's");
        };
        assert_eq!(a.requester(), "caller:alice");
        assert!(a.may_call("demo") && !a.may_call("coder"));
        assert!(a.owns("caller:alice") && !a.owns("caller:bob") && !a.owns(OPERATOR));
        let Presented::Caller(b) = identify(bob.reveal(), &operator, &callers) else {
            panic!("bob's token is bob's");
        };
        assert!(b.may_call("coder"), "no list: every agent");
        assert_eq!(
            identify(&"c".repeat(40), &operator, &callers),
            Presented::Wrong
        );
        assert_eq!(identify("", &operator, &callers), Presented::Wrong);
        assert!(Caller::Operator.owns("caller:alice") && Caller::Operator.may_call("x"));
    }

    #[test]
    fn a_caller_token_is_long_enough_and_visible() {
        let short = "x".repeat(MIN_CALLER_TOKEN_CHARS - 1);
        let e = caller_token(&short).unwrap_err();
        assert_eq!(
            e.to_string(),
            "a caller's token has 32 to 512 characters (this one has 31); make one with `openssl rand -hex 32`"
        );
        assert!(!format!("{e} {e:?}").contains(&short), "never shown");
        assert!(caller_token(&"x".repeat(MAX_CALLER_TOKEN_CHARS + 1)).is_err());
        assert!(caller_token(&format!("{}\n", "x".repeat(32))).is_ok());
        let spaced = format!("{} {}", "x".repeat(20), "y".repeat(20));
        let e = caller_token(&spaced).unwrap_err();
        assert_eq!(
            e.to_string(),
            "a caller's token is visible ASCII characters, no spaces"
        );
        assert!(!format!("{e} {e:?}").contains("xxxx"), "never shown");
        let t = caller_token(&"s".repeat(40)).unwrap();
        assert!(!format!("{t:?}").contains("ssss"), "never shown");
    }
}
