//! A sender's sessions and the runs in one, found on the relay by the spec's session recovery recipe:
//! the prompts the sender signed to the agent (`authors`, `#p`), and with a session named, its `#s`. Each
//! prompt is read back (the sender can open what it encrypted to the agent) for its first line. Prompts
//! sent gift-wrapped are not found so: their wraps carry neither the sender nor the session.

use super::{ClientError, STORED_LOOKUP_WAIT};
use crate::crypto::Crypto;
use crate::nipxx::payload::PromptPayload;
use crate::nipxx::{kinds, tags, Message};
use crate::relay_conn::{Incoming, RelayConn};
use nostr::prelude::{EventId, Filter, Kind, PublicKey, SingleLetterTag, Timestamp};

/// The most prompts one lookup reads: a long history is read newest first, so the sessions in use now are
/// among them.
pub const MAX_PROMPTS_LISTED: usize = 1000;

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
    let sub = "sessions";
    conn.subscribe(sub, vec![filter]);
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
                if session.is_some_and(|s| s != in_session)
                    || found.iter().any(|p| p.id == message.id)
                {
                    continue;
                }
                let first_line = crypto
                    .decrypt(&agent, &message.content)
                    .ok()
                    .and_then(|plain| PromptPayload::parse(&plain).ok())
                    .map(|p| p.message.lines().next().unwrap_or("").to_string());
                found.push(SentPrompt {
                    id: message.id,
                    session: in_session,
                    at: message.created_at,
                    first_line,
                });
            }
            _ => {}
        }
    }
    conn.unsubscribe(sub);
    found.sort_by_key(|p| std::cmp::Reverse((p.at, p.id)));
    Ok(found)
}
