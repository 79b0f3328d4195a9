//! Long task cards (`shared/specs/tinyagent-interactions-and-task-cards.md`, "Long task cards"), the pure
//! part: which kind 43001 requests the adapter takes, where a task's thread is anchored, which messages
//! cancel it, and the tags and contents of every event the adapter publishes. No I/O, no clock.

use agentwire_core::{Outcome, TurnFailure};
use agentwire_tinyagent::{first_value, tag_values};
use nostr::prelude::{Event, EventId, Kind, PublicKey, Tag};
use std::collections::HashSet;

/// A long task request.
pub const TASK_REQUEST: Kind = Kind::Custom(43001);
/// The task is being processed (published once, when its turn begins).
pub const TASK_ACCEPTED: Kind = Kind::Custom(43002);
/// The task's progress (throttled).
pub const TASK_PROGRESS: Kind = Kind::Custom(43003);
/// The task ended successfully.
pub const TASK_RESULT: Kind = Kind::Custom(43004);
/// The requester cancelled the task (nothing further is published).
pub const TASK_CANCEL: Kind = Kind::Custom(43005);
/// The task failed or was stopped.
pub const TASK_ERROR: Kind = Kind::Custom(43006);
/// A room chat message (NIP-29); `!cancel` comes as one, and so do question cards.
pub const CHAT: Kind = Kind::Custom(9);
/// A thread root (NIP-7D): a handoff opens one.
pub const THREAD: Kind = Kind::Custom(11);
/// A thread reply: every message of a task's conversation.
pub const THREAD_REPLY: Kind = Kind::Custom(12);

/// The most characters of a progress line, and of a result's first line: the spec's clip.
pub const MAX_CARD_LINE_CHARS: usize = 200;
/// The command that stops a running task when it mentions the agent.
pub const CANCEL_COMMAND: &str = "!cancel";
/// The content of a handoff thread whose handoff has no name.
pub const DEFAULT_HANDOFF_NAME: &str = "Handoff";

/// Who may give tasks, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acceptance {
    /// The agent's key: a request names it in `p`.
    pub agent: PublicKey,
    /// The rooms (`h`) watched.
    pub watch: HashSet<String>,
    /// Who may give tasks and send `!cancel`.
    pub allowed: HashSet<PublicKey>,
}

/// Why a kind 43001 is not a task for this agent (it is ignored, not answered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotATask {
    /// Not kind 43001.
    Kind,
    /// No `p` names the agent.
    NotForUs,
    /// No `h`, or a room the adapter does not watch.
    Room,
    /// The author may not give tasks.
    Author,
    /// Nothing to do.
    Empty,
}

/// Where a task's messages go: a room and the thread root, plus the request when it is not the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thread {
    /// The room (`h`).
    pub room: String,
    /// The thread's root.
    pub root: EventId,
    /// The request, when it replies in a thread it does not start (replies name it as their parent).
    pub reply_to: Option<EventId>,
}

impl Thread {
    /// The tags of a kind 12 reply in this thread.
    pub fn reply_tags(&self, requester: &PublicKey) -> Vec<Tag> {
        let mut tags = vec![
            tag(["h", &self.room]),
            tag(["e", &self.root.to_hex(), "", "root"]),
        ];
        if let Some(r) = self.reply_to {
            tags.push(tag(["e", &r.to_hex(), "", "reply"]));
        }
        tags.push(Tag::public_key(*requester));
        tags
    }
}

/// A request the adapter takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRequest {
    /// The request event's id.
    pub id: EventId,
    /// Who asked.
    pub requester: PublicKey,
    /// The room.
    pub room: String,
    /// Where its replies go.
    pub thread: Thread,
    /// What to do.
    pub prompt: String,
}

fn first(event: &Event, name: &str) -> Option<String> {
    first_value(event, name).map(str::to_owned)
}

/// A tag from its parts (the first is its name, never empty here).
pub(crate) fn tag<const N: usize>(parts: [&str; N]) -> Tag {
    Tag::parse(parts).expect("a tag with a name")
}

/// Whether `event` names `key` in a `p` tag.
pub fn names(event: &Event, key: &PublicKey) -> bool {
    let hex = key.to_hex();
    tag_values(event, "p").any(|t| t.get(1) == Some(&hex))
}

/// The root a request names in a marked `e` tag (`["e", id, relay, "root"]`), if any.
fn marked_root(event: &Event) -> Option<EventId> {
    tag_values(event, "e")
        .find(|t| t.get(3).map(String::as_str) == Some("root"))
        .and_then(|t| t.get(1))
        .and_then(|v| EventId::from_hex(v).ok())
}

impl Acceptance {
    /// Whether `event` is a task for this agent; the task if so.
    pub fn accept(&self, event: &Event) -> Result<TaskRequest, NotATask> {
        if event.kind != TASK_REQUEST {
            return Err(NotATask::Kind);
        }
        if !names(event, &self.agent) {
            return Err(NotATask::NotForUs);
        }
        let room = first(event, "h")
            .filter(|h| self.watch.contains(h))
            .ok_or(NotATask::Room)?;
        if !self.allowed.contains(&event.pubkey) {
            return Err(NotATask::Author);
        }
        if event.content.trim().is_empty() {
            return Err(NotATask::Empty);
        }
        let thread = match marked_root(event).filter(|r| *r != event.id) {
            Some(root) => Thread {
                room: room.clone(),
                root,
                reply_to: Some(event.id),
            },
            None => Thread {
                room: room.clone(),
                root: event.id,
                reply_to: None,
            },
        };
        Ok(TaskRequest {
            id: event.id,
            requester: event.pubkey,
            room,
            thread,
            prompt: event.content.trim().to_string(),
        })
    }

    /// Whether `event` is a `!cancel` from an allowed user mentioning the agent: the thread roots (or
    /// request ids) it names in `e` tags, empty when it was sent to the room at large.
    pub fn cancel_command(&self, event: &Event) -> Option<Vec<EventId>> {
        if event.kind != CHAT && event.kind != THREAD_REPLY {
            return None;
        }
        if !self.allowed.contains(&event.pubkey) {
            return None;
        }
        let first_word = event.content.split_whitespace().next()?;
        if first_word != CANCEL_COMMAND {
            return None;
        }
        let npub = nostr::nips::nip19::ToBech32::to_bech32(&self.agent).unwrap_or_default();
        let mentions =
            names(event, &self.agent) || event.content.contains(&npub) && !npub.is_empty();
        if !mentions {
            return None;
        }
        Some(
            tag_values(event, "e")
                .filter_map(|t| t.get(1))
                .filter_map(|v| EventId::from_hex(v).ok())
                .collect(),
        )
    }
}

/// The room a card event (or any room event) carries in `h`.
pub fn room_of(event: &Event) -> Option<String> {
    first(event, "h")
}

/// The request a card event names in its first `e` tag.
pub fn request_of(event: &Event) -> Option<EventId> {
    first(event, "e").and_then(|v| EventId::from_hex(&v).ok())
}

/// The tags every card event of a task carries: `e` the request, `p` the requester, `h` the room.
pub fn card_tags(request: &EventId, requester: &PublicKey, room: &str) -> Vec<Tag> {
    vec![
        Tag::event(*request),
        Tag::public_key(*requester),
        tag(["h", room]),
    ]
}

/// `text` clipped to [`MAX_CARD_LINE_CHARS`] characters.
pub fn clip(text: &str) -> String {
    text.chars().take(MAX_CARD_LINE_CHARS).collect()
}

/// The first non-empty line of `text`, clipped.
pub fn first_line(text: &str) -> String {
    clip(
        text.lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or(""),
    )
}

/// How a task ended, as its terminal says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// 43004 with this content; the extra `e` tags name the reply and the posted files.
    Result {
        /// The card's content.
        content: String,
        /// The thread messages it links (the full reply first, then each file).
        links: Vec<EventId>,
    },
    /// 43006 with this content.
    Error(String),
    /// The requester cancelled (43005): nothing is published.
    Silent,
}

/// What the adapter knows of a task when its turn ends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Posted {
    /// The kind 12 message holding the full reply, once signed.
    pub reply: Option<EventId>,
    /// The newest reply posted while the turn ran (what the agent said between its tool rounds), with its
    /// first line clipped: when the turn then fails, it is the task's reply and the result links it.
    pub said: Option<(EventId, String)>,
    /// The files posted, by name, with their messages.
    pub files: Vec<(String, EventId)>,
    /// The relay refused (or never confirmed) a reply or a file the adapter posted: a failed send, after
    /// which a failure stays an error.
    pub failed_send: bool,
}

/// Who stopped a task, when someone did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopper {
    /// The requester, with a 43005.
    Requester,
    /// An allowed user, with `!cancel`.
    Command(PublicKey),
}

/// The terminal of a task whose turn ended in `outcome`, given what was posted and who stopped it.
pub fn ending(outcome: &Outcome, posted: &Posted, stopped: Option<Stopper>) -> Ending {
    match stopped {
        Some(Stopper::Requester) => return Ending::Silent,
        Some(Stopper::Command(by)) => {
            return Ending::Error(format!("Cancelled by {}", by.to_hex()))
        }
        None => {}
    }
    let files_line = (!posted.files.is_empty()).then(|| {
        let names: Vec<&str> = posted.files.iter().map(|(n, _)| n.as_str()).collect();
        clip(&format!("Posted {}", names.join(", ")))
    });
    let links = || -> Vec<EventId> {
        posted
            .reply
            .iter()
            .copied()
            .chain(posted.files.iter().map(|(_, id)| *id))
            .collect()
    };
    match outcome {
        Outcome::Result(r) => {
            let mut lines = Vec::new();
            let first = first_line(&r.text);
            if !first.is_empty() {
                lines.push(first);
            }
            lines.extend(files_line);
            let content = if lines.is_empty() {
                "Done".to_string()
            } else {
                lines.join("\n")
            };
            Ending::Result {
                content,
                links: links(),
            }
        }
        Outcome::Failure(f) => {
            let cancelled = matches!(
                f.code,
                agentwire_core::FailureCode::Turn(TurnFailure::Cancelled)
            );
            if cancelled {
                return Ending::Error("Cancelled".into());
            }
            // The agent failed after the adapter posted a reply or a file for the task, every one of them
            // taken by the relay: the task has a result (the spec's 43004 "when Hermes reports a failure
            // but the adapter itself posted a reply or a file"), its first line the newest reply's.
            if !posted.failed_send && (posted.said.is_some() || files_line.is_some()) {
                let lines: Vec<String> = posted
                    .said
                    .iter()
                    .map(|(_, line)| line.clone())
                    .filter(|l| !l.is_empty())
                    .chain(files_line)
                    .collect();
                let links = posted
                    .said
                    .iter()
                    .map(|(id, _)| *id)
                    .chain(posted.files.iter().map(|(_, id)| *id))
                    .collect();
                let content = match lines.is_empty() {
                    true => "Done".to_string(),
                    false => lines.join("\n"),
                };
                return Ending::Result { content, links };
            }
            let message = f.message.trim();
            Ending::Error(if message.is_empty() {
                "The task failed".into()
            } else {
                message.to_string()
            })
        }
    }
}

#[cfg(test)]
#[path = "card_tests.rs"]
mod tests;
