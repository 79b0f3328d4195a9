//! The supervisor's event feed: one entry per thing that happened to a job, with a cursor, kept (up to
//! the supervisor's bound) for `events` and the concierge's digests. Pure data.

use serde::{Deserialize, Serialize};

/// One entry of the event feed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeedEvent {
    /// Its cursor.
    pub seq: u64,
    /// Unix seconds.
    pub at: u64,
    /// The job.
    pub id: String,
    /// What happened: `start`, `state`, `reply`, `stop`, `exit`, `rm`, `respawn`, `restart`, `rename`, and
    /// the peer items: `message`, `report`, `notice`.
    pub what: String,
    /// Details.
    pub text: String,
    /// The name of the session that caused it (a message's sender), if a session did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub who: Option<String>,
    /// That session's id: names can be shared.
    #[serde(default, rename = "whoId", skip_serializing_if = "Option::is_none")]
    pub who_id: Option<String>,
    /// Why, for a `task` event: `add`, `claim`, `release`, `done`, `drop` or `assign`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}
