//! Rooms (a NIP-29 subset): groups addressed by the `h` tag, who may write in a closed one, and the
//! relay-signed metadata (39000 metadata, 39001 admins, 39002 members) that group clients read. Pure: the
//! relay's key and the time are passed in.
//!
//! Only rooms the relay knows are rooms, and an event is taken for a room only once it exists: one whose
//! `h` names no room is refused, so that nothing written before a room is created (closed, or private)
//! becomes its history. A room that is no longer configured is retired: its stored events stay, read by
//! nobody, until it is configured again or retention removes them.
//!
//! A private room's member list (39002) is read only by its members, like its events: NIP-29's `private`
//! is "only members can read", and who they are is part of what they read. Its name and admins (39000,
//! 39001) stay public, so that people can find the room and know whom to ask to be let in.
//!
//! <https://github.com/nostr-protocol/nips/blob/master/29.md>

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;

use nostr::event::{Event, EventBuilder, FinalizeEvent, Kind, Tag};
use nostr::key::{Keys, PublicKey};
use nostr::types::Timestamp;

/// NIP-29's group metadata kind (addressable, `d` = the room id), signed by the relay.
pub const GROUP_METADATA: u16 = 39000;
/// NIP-29's group admins kind.
pub const GROUP_ADMINS: u16 = 39001;
/// NIP-29's group members kind.
pub const GROUP_MEMBERS: u16 = 39002;
/// NIP-29's group roles kind (this relay publishes none, and takes none from clients).
pub const GROUP_ROLES: u16 = 39003;

/// Whether `kind` is NIP-29 group metadata (39000-39003), which only the relay writes.
pub fn is_room_metadata(kind: Kind) -> bool {
    (GROUP_METADATA..=GROUP_ROLES).contains(&kind.as_u16())
}

/// The longest room id (the tiny agent rules' own).
pub use agentwire_tinyagent::MAX_ROOM_ID_LEN;

/// One room as configured (`[[rooms]]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomConfig {
    /// The `h` tag value.
    pub id: String,
    /// Its display name.
    pub name: String,
    /// Writes with its `h` only from members (and admins).
    pub closed: bool,
    /// Reads need NIP-42 authentication by a member.
    pub private: bool,
    /// Who may write when it is closed.
    pub members: Vec<PublicKey>,
    /// Who administers it (members too).
    pub admins: Vec<PublicKey>,
}

/// Why a room configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoomError {
    /// The id is empty, too long, or not NIP-29's characters.
    Id(String),
    /// Two rooms with one id.
    Duplicate(String),
    /// The room's name (the id given) holds a control or bidirectional formatting character.
    Name(String),
}

impl fmt::Display for RoomError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Id(id) => write!(
                f,
                "room id {id:?} must be 1 to {MAX_ROOM_ID_LEN} characters of a-z, 0-9, '-' and '_'"
            ),
            Self::Duplicate(id) => write!(f, "room {id:?} is configured twice"),
            Self::Name(id) => write!(f, "room {id:?}: {NAME_CHARACTERS}"),
        }
    }
}

impl std::error::Error for RoomError {}

/// Why a room refuses an event or a read: the NIP-01 `OK` or `CLOSED` reason sent to the client, its
/// machine-readable prefix (`invalid:`, `restricted:`, `auth-required:`) included.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RoomRefusal {
    /// A moderation event without an `h` tag naming a valid room id.
    #[error("invalid: a moderation event needs an h tag naming a valid room id")]
    ModerationNeedsRoom,
    /// A `create-group` (9007) from someone who is not a relay admin.
    #[error("restricted: only the relay's admins may create rooms")]
    CreateByNonAdmin,
    /// A `create-group` (9007) for a room that exists.
    #[error("invalid: room {0:?} exists already")]
    RoomExists(String),
    /// A moderation event for a room that does not exist.
    #[error("invalid: no room {0:?}")]
    NoSuchRoom(String),
    /// A moderation event from someone who is neither a relay admin nor an admin of the room.
    #[error("restricted: only the relay's admins and room {0:?}'s admins may moderate it")]
    NotAdmin(String),
    /// A `p` tag of a moderation event that does not hold a hex public key.
    #[error("invalid: a p tag must hold a hex public key")]
    BadUser,
    /// An `e` tag of a `delete-event` (9005) that does not hold an event id.
    #[error("invalid: an e tag must hold an event id")]
    BadEvent,
    /// An `edit-metadata` (9002) that sets both tags of a pair (`private` and `public`, `closed` and
    /// `open`).
    #[error("invalid: a room is {yes} or {no}, not both")]
    BothFlags {
        /// The tag that sets the flag.
        yes: &'static str,
        /// The tag that clears it.
        no: &'static str,
    },
    /// An `edit-metadata` (9002) whose room name holds a control or bidirectional formatting character.
    #[error("invalid: {}", NAME_CHARACTERS)]
    Name,
    /// An event with more than one `h` tag.
    #[error("invalid: an event belongs to one room: one h tag")]
    OneRoom,
    /// Room metadata (39000-39003) not signed by the relay.
    #[error("restricted: room metadata is written by the relay")]
    Metadata,
    /// An event for a closed room from someone who is not its member.
    #[error("restricted: room {0:?} is closed; only its members may write in it")]
    Closed(String),
    /// An event for a room that does not exist (yet).
    #[error("invalid: there is no room {0:?} on this relay; a room takes events once it exists")]
    NoRoom(String),
    /// A read of a private room by a connection that has not authenticated.
    #[error("auth-required: room {0:?} is private; authenticate (NIP-42) as a member")]
    PrivateAuthRequired(String),
    /// A read of a private room by a connection authenticated as no member.
    #[error("restricted: room {0:?} is private and only its members may read it")]
    Private(String),
}

#[derive(Debug, Clone)]
struct Room {
    name: String,
    closed: bool,
    private: bool,
    members: BTreeSet<PublicKey>,
    admins: BTreeSet<PublicKey>,
}

/// Why a room name is refused: what it may not hold.
const NAME_CHARACTERS: &str =
    "a room name may not hold control characters or bidirectional formatting characters (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069)";

/// Whether `c` reorders or hides the text around it: a control character, or one of Unicode's
/// bidirectional formatting characters (marks, embeddings, overrides, isolates). A name holding U+202E
/// (right-to-left override) shows as something else than it is.
fn is_hidden_formatting(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
        )
}

/// Whether `name` is fit to show as a room's name: no control or bidirectional formatting characters.
pub fn valid_name(name: &str) -> bool {
    !name.chars().any(is_hidden_formatting)
}

/// The rooms a relay knows.
#[derive(Debug, Clone, Default)]
pub struct Rooms {
    rooms: HashMap<String, Room>,
    /// Rooms no longer configured whose events are still stored: read by nobody, written by nobody.
    retired: BTreeSet<String>,
    /// Who may create rooms and moderate every room.
    relay_admins: BTreeSet<PublicKey>,
    /// The relay's own key, which signs the rooms' metadata; none: no client event is room metadata.
    relay_key: Option<PublicKey>,
}

/// NIP-29 moderation: add users (9000).
pub const PUT_USER: u16 = 9000;
/// NIP-29 moderation: remove users (9001).
pub const REMOVE_USER: u16 = 9001;
/// NIP-29 moderation: edit metadata (9002).
pub const EDIT_METADATA: u16 = 9002;
/// NIP-29 moderation: delete events of the room (9005).
pub const DELETE_EVENT: u16 = 9005;
/// NIP-29 moderation: create a room (9007).
pub const CREATE_GROUP: u16 = 9007;

/// Whether `kind` is a moderation kind this relay acts on.
pub fn is_moderation(kind: Kind) -> bool {
    matches!(
        kind.as_u16(),
        PUT_USER | REMOVE_USER | EDIT_METADATA | DELETE_EVENT | CREATE_GROUP
    )
}

/// What a valid moderation event changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Moderation {
    /// A new room, its creator its admin.
    Create {
        /// The room id.
        room: String,
        /// Its creator.
        by: PublicKey,
    },
    /// Users added (as admins when their `p` tag says `admin`).
    Put {
        /// The room id.
        room: String,
        /// Everyone added.
        members: Vec<PublicKey>,
        /// Those of them added as admins.
        admins: Vec<PublicKey>,
    },
    /// Users removed.
    Remove {
        /// The room id.
        room: String,
        /// Who.
        users: Vec<PublicKey>,
    },
    /// Events of the room deleted (`e` tags).
    Delete {
        /// The room id.
        room: String,
        /// The events.
        events: Vec<nostr::event::EventId>,
    },
    /// A new name and/or closed state.
    Edit {
        /// The room id.
        room: String,
        /// The new name.
        name: Option<String>,
        /// Closed (true) or open (false).
        closed: Option<bool>,
        /// Private (true) or public (false).
        private: Option<bool>,
    },
}

impl Moderation {
    /// The room it changes.
    pub fn room(&self) -> &str {
        match self {
            Self::Create { room, .. }
            | Self::Put { room, .. }
            | Self::Remove { room, .. }
            | Self::Delete { room, .. }
            | Self::Edit { room, .. } => room,
        }
    }
}

/// The `h` tags of an event, each as its parts.
fn h_tags(event: &Event) -> impl Iterator<Item = &[String]> {
    event
        .tags
        .iter()
        .map(|t| t.as_slice())
        .filter(|t| t.first().map(String::as_str) == Some("h"))
}

/// The room an event is addressed to (its `h` tag), if it has one. The relay stores no event with two
/// ([`Rooms::check_write`]).
pub fn room_of(event: &Event) -> Option<&str> {
    h_tags(event)
        .next()
        .and_then(|t| t.get(1))
        .map(String::as_str)
}

/// Whether `id` is a room id this relay takes: 1 to [`MAX_ROOM_ID_LEN`] of a-z, 0-9, `-` and `_`.
pub use agentwire_tinyagent::valid_room_id as valid_id;

impl Rooms {
    /// The configured rooms.
    pub fn new(configs: &[RoomConfig]) -> Result<Rooms, RoomError> {
        let mut rooms = HashMap::new();
        for c in configs {
            if !valid_id(&c.id) {
                return Err(RoomError::Id(c.id.clone()));
            }
            if !valid_name(&c.name) {
                return Err(RoomError::Name(c.id.clone()));
            }
            let admins: BTreeSet<PublicKey> = c.admins.iter().copied().collect();
            let mut members: BTreeSet<PublicKey> = c.members.iter().copied().collect();
            members.extend(admins.iter().copied());
            let room = Room {
                name: c.name.clone(),
                closed: c.closed,
                private: c.private,
                members,
                admins,
            };
            if rooms.insert(c.id.clone(), room).is_some() {
                return Err(RoomError::Duplicate(c.id.clone()));
            }
        }
        Ok(Rooms {
            rooms,
            retired: BTreeSet::new(),
            relay_admins: BTreeSet::new(),
            relay_key: None,
        })
    }

    /// Rooms no longer known whose events are still stored (`EventStore::retire_rooms`): their events are
    /// read by nobody. One that is known (configured again, or created again) is not retired.
    pub fn with_retired(mut self, ids: impl IntoIterator<Item = String>) -> Rooms {
        self.retired.extend(ids);
        self
    }

    /// The ids of the rooms it knows, sorted.
    pub fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.rooms.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// Whether room `id` is retired: no longer known, its stored events read by nobody.
    fn is_retired(&self, id: &str) -> bool {
        self.retired.contains(id) && !self.rooms.contains_key(id)
    }

    /// The relay's own key: room metadata (39000-39003) from a client is taken only signed by it.
    pub fn with_relay_key(mut self, key: Option<PublicKey>) -> Rooms {
        self.relay_key = key;
        self
    }

    /// Lets `admins` create rooms and moderate every room.
    pub fn with_relay_admins(mut self, admins: impl IntoIterator<Item = PublicKey>) -> Rooms {
        self.relay_admins.extend(admins);
        self
    }

    /// What a moderation event (9000, 9001, 9002, 9007) would change, or why it is refused (`restricted:`
    /// for an author who may not, `invalid:` for a malformed one). `Ok(None)` for any other kind.
    pub fn moderate(&self, event: &Event) -> Result<Option<Moderation>, RoomRefusal> {
        if !is_moderation(event.kind) {
            return Ok(None);
        }
        let id = room_of(event)
            .filter(|id| valid_id(id))
            .ok_or(RoomRefusal::ModerationNeedsRoom)?
            .to_owned();
        let by = event.pubkey;
        let kind = event.kind.as_u16();
        if kind == CREATE_GROUP {
            if !self.relay_admins.contains(&by) {
                return Err(RoomRefusal::CreateByNonAdmin);
            }
            if self.rooms.contains_key(&id) {
                return Err(RoomRefusal::RoomExists(id));
            }
            return Ok(Some(Moderation::Create { room: id, by }));
        }
        let Some(room) = self.rooms.get(&id) else {
            return Err(RoomRefusal::NoSuchRoom(id));
        };
        if !self.relay_admins.contains(&by) && !room.admins.contains(&by) {
            return Err(RoomRefusal::NotAdmin(id));
        }
        let users = || -> Result<Vec<(PublicKey, bool)>, RoomRefusal> {
            event
                .tags
                .iter()
                .map(|t| t.as_slice())
                .filter(|t| t.first().map(String::as_str) == Some("p"))
                .map(|t| {
                    let key = t
                        .get(1)
                        .and_then(|v| PublicKey::from_hex(v).ok())
                        .ok_or(RoomRefusal::BadUser)?;
                    Ok((key, t.get(2).map(String::as_str) == Some("admin")))
                })
                .collect()
        };
        Ok(Some(match kind {
            PUT_USER => {
                let users = users()?;
                Moderation::Put {
                    room: id,
                    members: users.iter().map(|(k, _)| *k).collect(),
                    admins: users.iter().filter(|(_, a)| *a).map(|(k, _)| *k).collect(),
                }
            }
            REMOVE_USER => Moderation::Remove {
                room: id,
                users: users()?.into_iter().map(|(k, _)| k).collect(),
            },
            DELETE_EVENT => Moderation::Delete {
                room: id,
                events: event
                    .tags
                    .iter()
                    .map(|t| t.as_slice())
                    .filter(|t| t.first().map(String::as_str) == Some("e"))
                    .map(|t| {
                        t.get(1)
                            .and_then(|v| nostr::event::EventId::from_hex(v).ok())
                            .ok_or(RoomRefusal::BadEvent)
                    })
                    .collect::<Result<_, _>>()?,
            },
            _ => {
                let has = |name: &str| event.tags.iter().any(|t| t.kind() == name);
                // A flag tag pair: `yes`, `no`, neither (unchanged), never both.
                let flag = |yes: &'static str, no: &'static str| match (has(yes), has(no)) {
                    (true, true) => Err(RoomRefusal::BothFlags { yes, no }),
                    (y, n) => Ok((y || n).then_some(y)),
                };
                let private = flag("private", "public")?;
                let closed = flag("closed", "open")?;
                let name = event
                    .tags
                    .iter()
                    .find(|t| t.kind() == "name")
                    .and_then(|t| t.content())
                    .map(str::to_owned);
                if name.as_deref().is_some_and(|n| !valid_name(n)) {
                    return Err(RoomRefusal::Name);
                }
                Moderation::Edit {
                    room: id,
                    name,
                    closed,
                    private,
                }
            }
        }))
    }

    /// Applies a moderation [`moderate`](Self::moderate) allowed.
    pub fn apply(&mut self, change: &Moderation) {
        match change {
            Moderation::Create { room, by } => {
                let one = BTreeSet::from([*by]);
                self.rooms.entry(room.clone()).or_insert(Room {
                    name: room.clone(),
                    closed: false,
                    private: false,
                    members: one.clone(),
                    admins: one,
                });
            }
            Moderation::Put {
                room,
                members,
                admins,
            } => {
                if let Some(r) = self.rooms.get_mut(room) {
                    r.members.extend(members.iter().copied());
                    r.admins.extend(admins.iter().copied());
                }
            }
            // The store deletes the events; the room itself does not change.
            Moderation::Delete { .. } => {}
            Moderation::Remove { room, users } => {
                if let Some(r) = self.rooms.get_mut(room) {
                    for u in users {
                        r.members.remove(u);
                        r.admins.remove(u);
                    }
                }
            }
            Moderation::Edit {
                room,
                name,
                closed,
                private,
            } => {
                if let Some(r) = self.rooms.get_mut(room) {
                    if let Some(p) = private {
                        r.private = *p;
                    }
                    if let Some(n) = name {
                        r.name = n.clone();
                    }
                    if let Some(c) = closed {
                        r.closed = *c;
                    }
                }
            }
        }
    }

    /// Whether any room is known.
    pub fn is_empty(&self) -> bool {
        self.rooms.is_empty()
    }

    /// Lets `key` write in every room (the operator's agent, in the rooms it watches).
    pub fn add_member_everywhere(&mut self, key: PublicKey) {
        for room in self.rooms.values_mut() {
            room.members.insert(key);
        }
    }

    /// Whether `event` may be stored: `Err` with the `invalid:` reason when it names more than one room or a
    /// room that does not exist, and with the `restricted:` reason when it is room metadata not signed by the
    /// relay or is addressed to a closed room its author is not a member of.
    /// Moderation events are judged by [`moderate`](Self::moderate) otherwise.
    pub fn check_write(&self, event: &Event) -> Result<(), RoomRefusal> {
        // Writes are judged by one room, while a `#h` query matches any of an event's `h` tags: a second `h`
        // would carry a stranger's event into a closed or private room judged by the first.
        if h_tags(event).nth(1).is_some() {
            return Err(RoomRefusal::OneRoom);
        }
        // Group clients believe 39000-39003 from the relay's key only, but they are addressable: a client's
        // own, dated ahead, would show as the room's name, admins and members to anyone who does not check.
        if is_room_metadata(event.kind) && self.relay_key != Some(event.pubkey) {
            return Err(RoomRefusal::Metadata);
        }
        if is_moderation(event.kind) {
            return Ok(());
        }
        let Some(id) = room_of(event) else {
            return Ok(());
        };
        match self.rooms.get(id) {
            Some(room) if room.closed && !room.members.contains(&event.pubkey) => {
                Err(RoomRefusal::Closed(id.to_owned()))
            }
            Some(_) => Ok(()),
            // Taken now, it would be the room's history once someone creates it, closed or private.
            None => Err(RoomRefusal::NoRoom(id.to_owned())),
        }
    }

    /// The room whose readers `event` is for: its `h`, or for a room's member list (39002, which the
    /// relay signs) its `d`.
    fn read_room(event: &Event) -> Option<&str> {
        if event.kind.as_u16() == GROUP_MEMBERS {
            return event
                .tags
                .iter()
                .map(|t| t.as_slice())
                .find(|t| t.first().map(String::as_str) == Some("d"))
                .and_then(|t| t.get(1))
                .map(String::as_str);
        }
        room_of(event)
    }

    /// Whether a connection authenticated (NIP-42) as `authed` may read `event`: anything but an event
    /// (or the member list) of a private room, which only its members may read, and an event of a retired
    /// room, which nobody may.
    pub fn may_read(&self, event: &Event, authed: &HashSet<PublicKey>) -> bool {
        let Some(id) = Self::read_room(event) else {
            return true;
        };
        match self.rooms.get(id) {
            Some(room) if room.private => authed.iter().any(|k| room.members.contains(k)),
            Some(_) => true,
            None => !self.is_retired(id),
        }
    }

    /// Whether `authed` may read room `id` (`Err` with the `auth-required:` or `restricted:` reason).
    pub fn check_read(&self, id: &str, authed: &HashSet<PublicKey>) -> Result<(), RoomRefusal> {
        match self.rooms.get(id) {
            Some(room) if room.private && !authed.iter().any(|k| room.members.contains(k)) => {
                Err(if authed.is_empty() {
                    RoomRefusal::PrivateAuthRequired(id.to_owned())
                } else {
                    RoomRefusal::Private(id.to_owned())
                })
            }
            _ => Ok(()),
        }
    }

    /// The rooms `authed` may not read: the private rooms it is no member of, and the retired ones.
    pub fn hidden_from(&self, authed: &HashSet<PublicKey>) -> Vec<String> {
        let mut ids: Vec<String> = self
            .rooms
            .iter()
            .filter(|(_, r)| r.private && !authed.iter().any(|k| r.members.contains(k)))
            .map(|(id, _)| id.clone())
            .chain(
                self.retired
                    .iter()
                    .filter(|id| self.is_retired(id))
                    .cloned(),
            )
            .collect();
        ids.sort();
        ids
    }

    /// The relay-signed metadata of every room as of `now`: 39000, 39001 and 39002 per room.
    pub fn metadata(&self, relay: &Keys, now: Timestamp) -> Vec<Event> {
        let mut ids: Vec<&String> = self.rooms.keys().collect();
        ids.sort();
        ids.into_iter()
            .flat_map(|id| self.room_metadata(id, relay, now))
            .collect()
    }

    /// The relay-signed metadata of room `id` (none if there is no such room).
    pub fn room_metadata(&self, id: &str, relay: &Keys, now: Timestamp) -> Vec<Event> {
        let mut out = Vec::with_capacity(3);
        if let Some(room) = self.rooms.get(id) {
            let d = Tag::identifier(id.to_owned());
            let flag = |on: bool, yes: &str, no: &str| {
                Tag::parse([if on { yes } else { no }.to_owned()]).expect("a one-word tag")
            };
            let metadata = vec![
                d.clone(),
                Tag::parse(["name".to_owned(), room.name.clone()]).expect("a two-word tag"),
                flag(room.private, "private", "public"),
                flag(room.closed, "closed", "open"),
            ];
            let admins = std::iter::once(d.clone()).chain(room.admins.iter().map(|p| {
                Tag::parse(["p".to_owned(), p.to_hex(), "admin".to_owned()]).expect("a p tag")
            }));
            let members = std::iter::once(d)
                .chain(room.members.iter().map(|p| Tag::public_key(*p)))
                .collect::<Vec<_>>();
            for (kind, tags) in [
                (GROUP_METADATA, metadata),
                (GROUP_ADMINS, admins.collect()),
                (GROUP_MEMBERS, members),
            ] {
                let event = EventBuilder::new(Kind::from_u16(kind), "")
                    .tags(tags)
                    .custom_created_at(now)
                    .finalize(relay);
                if let Ok(event) = event {
                    out.push(event);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn room(id: &str, closed: bool, members: &[&Keys], admins: &[&Keys]) -> RoomConfig {
        RoomConfig {
            id: id.into(),
            name: id.to_uppercase(),
            closed,
            private: false,
            members: members.iter().map(|k| k.public_key()).collect(),
            admins: admins.iter().map(|k| k.public_key()).collect(),
        }
    }

    fn message(keys: &Keys, room: Option<&str>) -> Event {
        let tags = room
            .map(|r| vec![Tag::parse(["h", r]).unwrap()])
            .unwrap_or_default();
        EventBuilder::new(Kind::from_u16(9), "hi")
            .tags(tags)
            .finalize(keys)
            .unwrap()
    }

    #[test]
    fn a_closed_room_takes_writes_from_its_members_and_admins_only() {
        let (member, admin, stranger) = (Keys::generate(), Keys::generate(), Keys::generate());
        let rooms = Rooms::new(&[
            room("lab", true, &[&member], &[&admin]),
            room("lobby", false, &[], &[]),
        ])
        .unwrap();
        assert!(rooms.check_write(&message(&member, Some("lab"))).is_ok());
        assert!(rooms.check_write(&message(&admin, Some("lab"))).is_ok());
        let refused = rooms
            .check_write(&message(&stranger, Some("lab")))
            .unwrap_err()
            .to_string();
        assert!(
            refused.starts_with("restricted: ") && refused.contains("lab"),
            "{refused}"
        );
        assert!(rooms
            .check_write(&message(&stranger, Some("lobby")))
            .is_ok());
        // No h at all: not a room event. A room that does not exist takes nothing, from anyone: what it took
        // would be its history once created.
        assert!(rooms.check_write(&message(&stranger, None)).is_ok());
        for keys in [&stranger, &member] {
            assert_eq!(
                rooms
                    .check_write(&message(keys, Some("elsewhere")))
                    .unwrap_err().to_string(),
                "invalid: there is no room \"elsewhere\" on this relay; a room takes events once it exists"
            );
        }
        // One room per event, whoever writes: a second h would smuggle it into lab.
        for keys in [&stranger, &member] {
            let two = EventBuilder::new(Kind::from_u16(9), "hi")
                .tags([
                    Tag::parse(["h", "lobby"]).unwrap(),
                    Tag::parse(["h", "lab"]).unwrap(),
                ])
                .finalize(keys)
                .unwrap();
            assert_eq!(
                rooms.check_write(&two).unwrap_err().to_string(),
                "invalid: an event belongs to one room: one h tag"
            );
        }
        // Room metadata only from the relay's key (none set: from nobody).
        let relay = Keys::generate();
        let fake = |kind: u16, keys: &Keys| {
            EventBuilder::new(Kind::from_u16(kind), "")
                .tags([Tag::identifier("lab")])
                .finalize(keys)
                .unwrap()
        };
        for kind in [GROUP_METADATA, GROUP_ADMINS, GROUP_MEMBERS, GROUP_ROLES] {
            assert_eq!(
                rooms
                    .check_write(&fake(kind, &relay))
                    .unwrap_err()
                    .to_string(),
                "restricted: room metadata is written by the relay"
            );
        }
        let rooms = rooms.with_relay_key(Some(relay.public_key()));
        assert!(rooms.check_write(&fake(GROUP_METADATA, &relay)).is_ok());
        assert!(rooms
            .check_write(&fake(GROUP_ADMINS, &member))
            .unwrap_err()
            .to_string()
            .starts_with("restricted: "));
        assert!(rooms.check_write(&fake(39004, &member)).is_ok());
        let mut rooms = rooms;
        rooms.add_member_everywhere(stranger.public_key());
        assert!(rooms.check_write(&message(&stranger, Some("lab"))).is_ok());
    }

    #[test]
    fn bad_room_ids_and_duplicates_are_refused() {
        for id in ["", "Lab", "a b", &"x".repeat(65)] {
            assert_eq!(
                Rooms::new(&[room(id, false, &[], &[])]).unwrap_err(),
                RoomError::Id(id.to_string())
            );
        }
        assert_eq!(
            Rooms::new(&[room("lab", false, &[], &[]), room("lab", true, &[], &[])]).unwrap_err(),
            RoomError::Duplicate("lab".into())
        );
    }

    #[test]
    fn metadata_is_signed_by_the_relay_with_nip29_tags() {
        let (relay, member, admin) = (Keys::generate(), Keys::generate(), Keys::generate());
        let rooms = Rooms::new(&[room("lab", true, &[&member], &[&admin])]).unwrap();
        let events = rooms.metadata(&relay, Timestamp::from_secs(1_800_000_000));
        let kinds: Vec<u16> = events.iter().map(|e| e.kind.as_u16()).collect();
        assert_eq!(kinds, vec![39000, 39001, 39002]);
        for e in &events {
            assert_eq!(e.pubkey, relay.public_key());
            assert!(e.verify().is_ok());
            assert_eq!(e.tags.identifier().as_deref(), Some("lab"));
        }
        let tags = |e: &Event| -> Vec<Vec<String>> {
            e.tags.iter().map(|t| t.as_slice().to_vec()).collect()
        };
        let meta = tags(&events[0]);
        for want in [&["name", "LAB"][..], &["public"], &["closed"]] {
            assert!(meta.iter().any(|t| t == want), "{want:?} in {meta:?}");
        }
        assert!(tags(&events[1]).contains(&vec![
            "p".to_string(),
            admin.public_key().to_hex(),
            "admin".to_string()
        ]));
        let members = tags(&events[2]);
        for k in [&member, &admin] {
            assert!(members.contains(&vec!["p".to_string(), k.public_key().to_hex()]));
        }
    }

    fn moderation(keys: &Keys, kind: u16, room: &str, extra: &[&[&str]]) -> Event {
        let mut tags = vec![Tag::parse(["h", room]).unwrap()];
        tags.extend(extra.iter().map(|t| Tag::parse(t.iter().copied()).unwrap()));
        EventBuilder::new(Kind::from_u16(kind), "")
            .tags(tags)
            .finalize(keys)
            .unwrap()
    }

    #[test]
    fn the_relays_admins_create_rooms_and_room_admins_moderate_theirs() {
        let (boss, lead, user, stranger) = (
            Keys::generate(),
            Keys::generate(),
            Keys::generate(),
            Keys::generate(),
        );
        let mut rooms = Rooms::new(&[])
            .unwrap()
            .with_relay_admins([boss.public_key()]);
        let create = moderation(&stranger, CREATE_GROUP, "ops", &[]);
        assert!(rooms
            .moderate(&create)
            .unwrap_err()
            .to_string()
            .starts_with("restricted: "));
        let create = moderation(&boss, CREATE_GROUP, "ops", &[]);
        let change = rooms.moderate(&create).unwrap().unwrap();
        rooms.apply(&change);
        assert!(rooms
            .moderate(&create)
            .unwrap_err()
            .to_string()
            .contains("exists already"));
        let (lead_hex, user_hex) = (lead.public_key().to_hex(), user.public_key().to_hex());
        for event in [
            moderation(&boss, PUT_USER, "ops", &[&["p", &lead_hex, "admin"]]),
            moderation(&lead, PUT_USER, "ops", &[&["p", &user_hex]]),
            moderation(
                &lead,
                EDIT_METADATA,
                "ops",
                &[&["name", "Operations"], &["closed"]],
            ),
        ] {
            let change = rooms.moderate(&event).unwrap().unwrap();
            rooms.apply(&change);
        }
        let says = |k: &Keys| rooms.check_write(&message(k, Some("ops")));
        assert!(says(&user).is_ok() && says(&lead).is_ok());
        assert!(says(&stranger)
            .unwrap_err()
            .to_string()
            .starts_with("restricted: "));
        // A plain member may not moderate; a removed user may no longer write.
        assert!(rooms
            .moderate(&moderation(&user, REMOVE_USER, "ops", &[&["p", &lead_hex]]))
            .unwrap_err()
            .to_string()
            .starts_with("restricted: "));
        let remove = moderation(&lead, REMOVE_USER, "ops", &[&["p", &user_hex]]);
        rooms.apply(&rooms.moderate(&remove).unwrap().unwrap());
        assert!(rooms.check_write(&message(&user, Some("ops"))).is_err());
        let meta = rooms.room_metadata("ops", &boss, Timestamp::from_secs(1));
        assert!(meta[0]
            .tags
            .iter()
            .any(|t| t.as_slice() == ["name", "Operations"]));
        // Malformed ones say why.
        for (event, why) in [
            (moderation(&boss, PUT_USER, "nowhere", &[]), "no room"),
            (
                moderation(&boss, PUT_USER, "ops", &[&["p", "zz"]]),
                "hex public key",
            ),
            (
                moderation(&boss, EDIT_METADATA, "ops", &[&["private"], &["public"]]),
                "not both",
            ),
            (
                moderation(&boss, EDIT_METADATA, "ops", &[&["open"], &["closed"]]),
                "not both",
            ),
            (
                moderation(&boss, CREATE_GROUP, "Bad Id", &[]),
                "valid room id",
            ),
        ] {
            let e = rooms.moderate(&event).unwrap_err().to_string();
            assert!(e.starts_with("invalid: ") && e.contains(why), "{why}: {e}");
        }
    }

    #[test]
    fn a_room_name_holds_no_bidi_or_control_characters() {
        let admin = Keys::generate();
        for bad in [
            "inv\u{202E}gnp.exe",
            "a\u{202A}b",
            "a\u{2066}b\u{2069}",
            "a\u{200F}b",
            "a\u{061C}b",
            "bell\u{7}",
            "esc\u{1b}[2J",
            "c1\u{9b}",
        ] {
            assert!(!valid_name(bad), "{bad:?}");
            let mut config = room("lab", false, &[], &[&admin]);
            config.name = bad.to_owned();
            let e = Rooms::new(&[config]).unwrap_err();
            assert_eq!(e, RoomError::Name("lab".into()));
            assert!(e.to_string().contains("U+202A-U+202E"), "{e}");
            let rooms = Rooms::new(&[room("lab", false, &[], &[&admin])]).unwrap();
            let edit = moderation(&admin, EDIT_METADATA, "lab", &[&["name", bad]]);
            let e = rooms.moderate(&edit).unwrap_err().to_string();
            assert!(e.starts_with("invalid: a room name may not hold"), "{e}");
        }
        for fine in ["Lab", "Laboratoire d'été", "مختبر", "実験室 2"] {
            assert!(valid_name(fine), "{fine:?}");
        }
    }

    #[test]
    fn a_private_rooms_member_list_is_read_by_its_members_only() {
        let (relay, member, stranger) = (Keys::generate(), Keys::generate(), Keys::generate());
        let mut vault = room("vault", true, &[&member], &[]);
        vault.private = true;
        let rooms = Rooms::new(&[vault, room("lab", true, &[&member], &[])]).unwrap();
        let at = Timestamp::from_secs(1_800_000_000);
        let authed = |k: &Keys| HashSet::from([k.public_key()]);
        for (id, private) in [("vault", true), ("lab", false)] {
            let meta = rooms.room_metadata(id, &relay, at);
            let [metadata, admins, members] = &meta[..] else {
                panic!("{meta:?}")
            };
            for who in [HashSet::new(), authed(&stranger)] {
                assert!(rooms.may_read(metadata, &who) && rooms.may_read(admins, &who));
                assert_eq!(rooms.may_read(members, &who), !private, "{id}");
            }
            assert!(rooms.may_read(members, &authed(&member)));
        }
        assert_eq!(rooms.hidden_from(&authed(&stranger)), vec!["vault"]);
        assert!(rooms.hidden_from(&authed(&member)).is_empty());
    }

    #[test]
    fn a_retired_rooms_events_are_read_by_nobody_until_it_is_known_again() {
        let (admin, member) = (Keys::generate(), Keys::generate());
        let mut rooms = Rooms::new(&[room("lab", false, &[&member], &[])])
            .unwrap()
            .with_relay_admins([admin.public_key()])
            .with_retired(["old".to_owned(), "lab".to_owned()]);
        let everyone = HashSet::from([member.public_key(), admin.public_key()]);
        // "lab" is known again: not retired.
        assert!(rooms.may_read(&message(&member, Some("lab")), &everyone));
        assert!(!rooms.may_read(&message(&member, Some("old")), &everyone));
        assert_eq!(rooms.hidden_from(&everyone), vec!["old"]);
        assert!(rooms.check_write(&message(&member, Some("old"))).is_err());
        // Created again, it is read again.
        let create = moderation(&admin, CREATE_GROUP, "old", &[]);
        rooms.apply(&rooms.moderate(&create).unwrap().unwrap());
        assert!(rooms.may_read(&message(&member, Some("old")), &everyone));
        assert!(rooms.hidden_from(&everyone).is_empty());
    }
}
