//! The ACP sessions kept across the daemon's restarts: which session each conversation had, in a small
//! JSON file of the data dir (`<data dir>/acp/<agent>.sessions.json`), written whole and atomically (a
//! temporary file renamed over it) each time a conversation gets a session. After a restart the agent's
//! new process is asked to `session/load` the conversation's session when it offers that, so the
//! conversation goes on where it was; an agent that does not, or a session it no longer knows, gets a new
//! one.
//!
//! The file is the agent process's companion, not the journal's: an ACP session lives in a process on
//! this machine, so another instance sharing a JetStream journal could not load it anyway.

use agent_client_protocol::v1::schema::SessionId;
use agentwire_core::ConversationId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The most conversations whose session is kept: past it the least recently used is forgotten (its next
/// turn after a restart opens a new session). 4,096 entries are a few hundred KiB.
pub const MAX_KEPT_SESSIONS: usize = 4096;
/// The largest file read back: what [`MAX_KEPT_SESSIONS`] entries of the longest ids take, with room.
const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// One conversation's session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    session: String,
    /// When it was last used (a count, not a time: the order is what matters).
    used: u64,
}

/// The kept sessions of one agent.
#[derive(Debug)]
pub struct KeptSessions {
    path: Option<PathBuf>,
    entries: BTreeMap<String, Entry>,
    uses: u64,
}

impl KeptSessions {
    /// Those of file `path` (none kept when `None`). A missing file is no sessions; an unreadable or
    /// malformed one is said in the log and started afresh (a conversation then opens a new session).
    pub fn open(path: Option<PathBuf>) -> Self {
        let entries = path.as_deref().map(read).unwrap_or_default();
        let uses = entries.values().map(|e| e.used).max().unwrap_or(0);
        KeptSessions {
            path,
            entries,
            uses,
        }
    }

    /// The session `conversation` had, if kept.
    pub fn get(&self, conversation: &ConversationId) -> Option<SessionId> {
        self.entries
            .get(conversation.as_str())
            .map(|e| SessionId::new(e.session.clone()))
    }

    /// Keeps `session` as `conversation`'s, and writes the file. A write that fails is said in the log:
    /// the conversation's turns go on; only a restart would open a new session for it.
    pub fn put(&mut self, conversation: &ConversationId, session: &SessionId) {
        self.uses += 1;
        self.entries.insert(
            conversation.as_str().to_string(),
            Entry {
                session: session.0.to_string(),
                used: self.uses,
            },
        );
        while self.entries.len() > MAX_KEPT_SESSIONS {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(c, _)| c.clone());
            match oldest {
                Some(c) => self.entries.remove(&c),
                None => break,
            };
        }
        if let Some(path) = &self.path {
            if let Err(e) = write(path, &self.entries) {
                tracing::warn!(file = %path.display(), error = %e, "could not keep the ACP sessions; after a restart their conversations open new sessions");
            }
        }
    }

    /// Forgets `conversation`'s session (the agent no longer knows it).
    pub fn forget(&mut self, conversation: &ConversationId) {
        if self.entries.remove(conversation.as_str()).is_some() {
            if let Some(path) = &self.path {
                if let Err(e) = write(path, &self.entries) {
                    tracing::warn!(file = %path.display(), error = %e, "could not keep the ACP sessions");
                }
            }
        }
    }
}

fn read(path: &Path) -> BTreeMap<String, Entry> {
    let text = match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return BTreeMap::new(),
        Ok(m) if m.len() > MAX_FILE_BYTES => {
            tracing::warn!(file = %path.display(), bytes = m.len(), "the kept ACP sessions file is too large; starting afresh");
            return BTreeMap::new();
        }
        _ => std::fs::read_to_string(path),
    };
    match text.map(|t| serde_json::from_str::<BTreeMap<String, Entry>>(&t)) {
        Ok(Ok(entries)) => entries
            .into_iter()
            .filter(|(c, e)| ConversationId::new(c.clone()).is_ok() && !e.session.is_empty())
            .collect(),
        Ok(Err(e)) => {
            tracing::warn!(file = %path.display(), error = %e, "the kept ACP sessions file is not what it should be; starting afresh");
            BTreeMap::new()
        }
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "could not read the kept ACP sessions; starting afresh");
            BTreeMap::new()
        }
    }
}

fn write(path: &Path, entries: &BTreeMap<String, Entry>) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let part = path.with_extension("json.part");
    let text = serde_json::to_vec(entries).map_err(std::io::Error::other)?;
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&part)?;
        f.write_all(&text)?;
        f.sync_all()?;
    }
    std::fs::rename(&part, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(s: &str) -> ConversationId {
        ConversationId::new(s).unwrap()
    }

    #[test]
    fn sessions_are_kept_across_an_open_bounded_and_a_bad_file_starts_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("acp").join("coder.sessions.json");
        let mut kept = KeptSessions::open(Some(path.clone()));
        kept.put(&conv("a"), &SessionId::new("s1"));
        kept.put(&conv("b"), &SessionId::new("s2"));
        let again = KeptSessions::open(Some(path.clone()));
        assert_eq!(again.get(&conv("a")), Some(SessionId::new("s1")));
        assert_eq!(again.get(&conv("b")), Some(SessionId::new("s2")));
        let mut again = again;
        again.forget(&conv("a"));
        assert_eq!(KeptSessions::open(Some(path.clone())).get(&conv("a")), None);

        std::fs::write(&path, b"{not json").unwrap();
        assert_eq!(KeptSessions::open(Some(path.clone())).get(&conv("b")), None);

        let mut many = KeptSessions::open(None);
        for i in 0..MAX_KEPT_SESSIONS + 3 {
            many.put(&conv(&format!("c{i}")), &SessionId::new(format!("s{i}")));
        }
        assert_eq!(many.entries.len(), MAX_KEPT_SESSIONS);
        assert_eq!(
            many.get(&conv("c0")),
            None,
            "the least recently used went first"
        );
        assert!(many
            .get(&conv(&format!("c{}", MAX_KEPT_SESSIONS + 2)))
            .is_some());
    }
}
