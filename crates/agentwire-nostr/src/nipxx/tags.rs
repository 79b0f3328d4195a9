//! The tags of NIP-XX run events: `p`, `e` with marker `root`, `encryption`, `s`; checked on the way in,
//! built on the way out.

use super::message::Message;
use super::{ErrorCode, Violation};
use nostr::prelude::{EventId, PublicKey, Tag};

/// Encryption tag values accepted on incoming events (`nip44_v2` is what some clients write).
pub const ACCEPTED_ENCRYPTION: [&str; 2] = ["nip44", "nip44_v2"];
/// The encryption tag value we send.
pub const SENT_ENCRYPTION: &str = "nip44";
/// Longest session id (`s`) accepted. A session id is a label or a hash; 128 bytes holds any hash encoding
/// and keeps the conversation key (`nipxx:<pubkey>:<session>`) within the engine's id bound.
pub const MAX_SESSION_BYTES: usize = 128;

/// Why tags were refused.
pub type TagError = Violation;

/// The routing facts of a run event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunTags {
    /// The recipient (`p`).
    pub recipient: PublicKey,
    /// The run (`e` with marker `root`); absent on prompts.
    pub root: Option<EventId>,
    /// The session (`s`), defaulted to `sender:<author hex>` when absent.
    pub session: String,
}

fn invalid(msg: impl Into<String>) -> Violation {
    Violation::new(ErrorCode::InvalidSchema, msg)
}

/// The default session of a sender.
pub fn default_session(sender: &PublicKey) -> String {
    format!("sender:{}", sender.to_hex())
}

fn values<'a>(event: &'a Message, name: &str) -> impl Iterator<Item = Vec<String>> + 'a {
    let name = name.to_string();
    event
        .tags
        .iter()
        .filter(move |t| t.kind() == name)
        .map(|t| t.as_slice().to_vec())
}

fn check_encryption(event: &Message) -> Result<(), Violation> {
    let enc: Vec<Vec<String>> = values(event, "encryption").collect();
    match enc.as_slice() {
        [] => Err(invalid("the `encryption` tag is missing")),
        [t] => match t.get(1) {
            Some(v) if ACCEPTED_ENCRYPTION.contains(&v.as_str()) => Ok(()),
            Some(v) => Err(Violation::new(
                ErrorCode::UnsupportedEncryption,
                format!("encryption {v:?} is not supported; use \"nip44\""),
            )),
            None => Err(invalid("the `encryption` tag has no value")),
        },
        _ => Err(invalid("more than one `encryption` tag")),
    }
}

fn recipient(event: &Message, me: Option<&PublicKey>) -> Result<PublicKey, Violation> {
    let mut found = None;
    for t in values(event, "p") {
        let v = t.get(1).ok_or_else(|| invalid("a `p` tag has no value"))?;
        let pk =
            PublicKey::from_hex(v).map_err(|_| invalid("a `p` tag is not a 64-hex public key"))?;
        if me.is_none_or(|m| *m == pk) && found.is_none() {
            found = Some(pk);
        }
    }
    found.ok_or_else(|| match me {
        Some(_) => invalid("no `p` tag names this agent"),
        None => invalid("the `p` tag is missing"),
    })
}

/// The session of an event: its `s` tag, or `sender:<author hex>` when it has none.
pub fn session(event: &Message) -> Result<String, Violation> {
    let s: Vec<Vec<String>> = values(event, "s").collect();
    match s.as_slice() {
        [] => Ok(default_session(&event.author)),
        [t] => match t.get(1) {
            Some(v)
                if !v.is_empty()
                    && v.len() <= MAX_SESSION_BYTES
                    && !v.chars().any(char::is_control) =>
            {
                Ok(v.clone())
            }
            Some(_) => Err(invalid(format!(
                "the `s` tag must be 1-{MAX_SESSION_BYTES} bytes without control characters"
            ))),
            None => Err(invalid("the `s` tag has no value")),
        },
        _ => Err(invalid("more than one `s` tag")),
    }
}

fn root(event: &Message) -> Result<EventId, Violation> {
    let roots: Vec<Vec<String>> = values(event, "e")
        .filter(|t| t.get(3).map(String::as_str) == Some("root"))
        .collect();
    match roots.as_slice() {
        [t] => EventId::from_hex(&t[1])
            .map_err(|_| invalid("the `e` root tag is not a 64-hex event id")),
        [] => Err(invalid("the `e` tag with marker `root` is missing")),
        _ => Err(invalid("more than one `e` root tag")),
    }
}

/// Checks the tags of an incoming prompt addressed to `me`.
pub fn prompt_tags(event: &Message, me: &PublicKey) -> Result<RunTags, Violation> {
    let recipient = recipient(event, Some(me))?;
    check_encryption(event)?;
    Ok(RunTags {
        recipient,
        root: None,
        session: session(event)?,
    })
}

/// Checks the tags of an incoming cancel addressed to `me`.
pub fn cancel_tags(event: &Message, me: &PublicKey) -> Result<RunTags, Violation> {
    let recipient = recipient(event, Some(me))?;
    let root = root(event)?;
    check_encryption(event)?;
    Ok(RunTags {
        recipient,
        root: Some(root),
        session: session(event)?,
    })
}

/// Checks the tags of an agent's run event as a client receives it.
pub fn run_event_tags(event: &Message, me: &PublicKey) -> Result<RunTags, Violation> {
    let recipient = recipient(event, Some(me))?;
    let root = root(event)?;
    check_encryption(event)?;
    Ok(RunTags {
        recipient,
        root: Some(root),
        session: session(event)?,
    })
}

/// Tags of a prompt from a client to `agent`.
pub fn prompt(agent: &PublicKey, session: Option<&str>) -> Vec<Tag> {
    let mut tags = vec![
        Tag::public_key(*agent),
        Tag::custom("encryption", [SENT_ENCRYPTION]),
    ];
    if let Some(s) = session {
        tags.push(Tag::custom("s", [s]));
    }
    tags
}

/// Tags of an event about run `prompt` sent to `peer` (the client, or the agent for a cancel).
pub fn run(peer: &PublicKey, prompt: &EventId, session: &str) -> Vec<Tag> {
    vec![
        Tag::public_key(*peer),
        Tag::custom("e", [prompt.to_hex(), String::new(), "root".into()]),
        Tag::custom("s", [session]),
        Tag::custom("encryption", [SENT_ENCRYPTION]),
    ]
}
