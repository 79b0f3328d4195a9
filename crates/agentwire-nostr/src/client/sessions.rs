//! A sender's sessions and the runs in one, found on the relay by the spec's session recovery recipe:
//! the prompts the sender signed to the agent (`authors`, `#p`), and with a session named, its `#s`. Each
//! prompt is read back (the sender can open what it encrypted to the agent) for its first line.
//!
//! Gift-wrapped runs are found in the wraps addressed to the sender, as their wraps carry neither the
//! sender nor the session: the copy of each wrapped prompt the client wraps to itself when it sends one
//! (as NIP-17 clients keep theirs), and the agent's run events, whose rumors name the run and session.

use super::{ClientError, STORED_LOOKUP_WAIT};
use crate::crypto::Crypto;
use crate::nip59;
use crate::nipxx::payload::PromptPayload;
use crate::nipxx::{kinds, tags, Message};
use crate::relay_conn::{Incoming, RelayConn};
use nostr::prelude::{EventId, Filter, Kind, PublicKey, SingleLetterTag, Timestamp};

/// The most prompts one lookup reads: a long history is read newest first, so the sessions in use now are
/// among them.
pub const MAX_PROMPTS_LISTED: usize = 1000;

/// The most gift wraps addressed to the sender one lookup opens (newest first): each costs two decryptions
/// and a signature check, and wraps hold every event of every wrapped run, so this bounds the lookup's work.
pub(super) const MAX_WRAPS_READ: usize = 5000;

/// One prompt the sender sent: a run.
#[derive(Debug, Clone, PartialEq)]
pub struct SentPrompt {
    /// The run (the prompt's id).
    pub id: EventId,
    /// Its session.
    pub session: String,
    /// When it was sent.
    pub at: Timestamp,
    /// The prompt's first line, when it opens.
    pub first_line: Option<String>,
}

/// The prompts `crypto`'s key sent to `agent`, newest first; only those in `session` when one is named
/// (found by its `#s`, as the recovery recipe says).
pub async fn sent_prompts(
    conn: &RelayConn,
    incoming: &mut tokio::sync::mpsc::Receiver<Incoming>,
    crypto: &Crypto,
    agent: PublicKey,
    session: Option<&str>,
) -> Result<Vec<SentPrompt>, ClientError> {
    let me = crypto.public_key();
    let mut filter = Filter::new()
        .kind(Kind::Custom(kinds::PROMPT))
        .author(me)
        .pubkey(agent)
        .limit(MAX_PROMPTS_LISTED);
    // The default session is also every prompt sent with no `s` tag (older clients'): those are found by
    // author and picked out here; any other session by its `#s`, as the recovery recipe says.
    let default = tags::default_session(&me);
    if let Some(s) = session.filter(|s| *s != default) {
        let tag = SingleLetterTag::from_char('s').map_err(|e| ClientError::Other(e.to_string()))?;
        filter = filter.custom_tag(tag, s);
    }
    // Every wrap addressed to the sender, whenever sent: wraps are back-dated, so no `since` would be sure.
    let wraps = Filter::new()
        .kind(Kind::Custom(kinds::GIFT_WRAP))
        .pubkey(me)
        .limit(MAX_WRAPS_READ);
    let sub = "sessions";
    conn.subscribe(sub, vec![filter, wraps]);
    let mut wraps_read = 0;
    let mut found: Vec<SentPrompt> = Vec::new();
    let deadline = tokio::time::Instant::now() + STORED_LOOKUP_WAIT;
    loop {
        let m = match tokio::time::timeout_at(deadline, incoming.recv()).await {
            Ok(Some(m)) => m,
            Ok(None) => return Err(ClientError::Unreachable(conn.url().to_string())),
            Err(_) => break,
        };
        match m {
            Incoming::Eose(s) if s == sub => break,
            Incoming::Event { sub: s, event }
                if s == sub && event.kind.as_u16() == kinds::GIFT_WRAP =>
            {
                wraps_read += 1;
                if wraps_read > MAX_WRAPS_READ {
                    continue;
                }
                let Ok(rumor) = nip59::unwrap(crypto, &event) else {
                    continue;
                };
                if let Some(p) = wrapped_run(crypto, &rumor, agent, session) {
                    add(&mut found, p);
                }
            }
            Incoming::Event { sub: s, event } if s == sub => {
                if event.verify().is_err()
                    || event.pubkey != me
                    || found.len() >= MAX_PROMPTS_LISTED
                {
                    continue;
                }
                let message = Message::signed(*event);
                let Ok(in_session) = tags::session(&message) else {
                    continue;
                };
                if session.is_some_and(|s| s != in_session) {
                    continue;
                }
                let first_line = first_line(crypto, agent, &message);
                add(
                    &mut found,
                    SentPrompt {
                        id: message.id,
                        session: in_session,
                        at: message.created_at,
                        first_line,
                    },
                );
            }
            _ => {}
        }
    }
    conn.unsubscribe(sub);
    found.sort_by_key(|p| std::cmp::Reverse((p.at, p.id)));
    found.truncate(MAX_PROMPTS_LISTED);
    Ok(found)
}

/// The first line of a prompt the sender encrypted to `agent`, when it opens.
fn first_line(crypto: &Crypto, agent: PublicKey, prompt: &Message) -> Option<String> {
    crypto
        .decrypt(&agent, &prompt.content)
        .ok()
        .and_then(|plain| PromptPayload::parse(&plain).ok())
        .map(|p| p.message.lines().next().unwrap_or("").to_string())
}

/// The run a gift-wrapped rumor tells of, when it is one between the sender and `agent` in `session` (any,
/// when None): the sender's own copy of a prompt to `agent`, or an event of the agent's run (which names
/// its prompt and session, though not the prompt's text).
fn wrapped_run(
    crypto: &Crypto,
    rumor: &Message,
    agent: PublicKey,
    session: Option<&str>,
) -> Option<SentPrompt> {
    let me = crypto.public_key();
    let (id, first) = if rumor.kind == kinds::PROMPT && rumor.author == me {
        tags::prompt_tags(rumor, &agent).ok()?;
        (rumor.id, first_line(crypto, agent, rumor))
    } else if kinds::RUN_KINDS.contains(&rumor.kind) && rumor.author == agent {
        (tags::run_event_tags(rumor, &me).ok()?.root?, None)
    } else {
        return None;
    };
    let in_session = tags::session(rumor).ok()?;
    if session.is_some_and(|s| s != in_session) {
        return None;
    }
    Some(SentPrompt {
        id,
        session: in_session,
        at: rumor.created_at,
        first_line: first,
    })
}

/// Adds `p` to `found`, or, for a run already there, keeps what the two know: the first line, and the
/// earliest time (the prompt's, not its events').
fn add(found: &mut Vec<SentPrompt>, p: SentPrompt) {
    match found.iter_mut().find(|f| f.id == p.id) {
        Some(f) => {
            if f.first_line.is_none() {
                f.first_line = p.first_line;
            }
            f.at = f.at.min(p.at);
        }
        None => found.push(p),
    }
}
