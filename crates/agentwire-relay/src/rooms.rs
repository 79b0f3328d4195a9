//! Rooms (a NIP-29 subset): groups addressed by the `h` tag, who may write in a closed one, and the
//! relay-signed metadata (39000 metadata, 39001 admins, 39002 members) that group clients read. Pure: the
//! relay's key and the time are passed in.
//!
//! Only rooms the relay knows are rooms: an event whose `h` names no known room is an ordinary event.

use std::collections::{BTreeSet, HashMap};
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

/// The longest room id: NIP-29 ids are short (`[a-z0-9-_]`), and one is kept per room in memory and in
/// every room event's tag.
pub const MAX_ROOM_ID_LEN: usize = 64;

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
    /// A private room: reads restricted to authenticated members are not built yet, and a room said to
    /// be private must not be readable by anyone.
    PrivateUnsupported(String),
}

impl fmt::Display for RoomError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Id(id) => write!(
                f,
                "room id {id:?} must be 1 to {MAX_ROOM_ID_LEN} characters of a-z, 0-9, '-' and '_'"
            ),
            Self::Duplicate(id) => write!(f, "room {id:?} is configured twice"),
            Self::PrivateUnsupported(id) => write!(
                f,
                "room {id:?} is private, and private rooms are not supported yet (its events would be readable by anyone)"
            ),
        }
    }
}

impl std::error::Error for RoomError {}

#[derive(Debug, Clone)]
struct Room {
    name: String,
    closed: bool,
    private: bool,
    members: BTreeSet<PublicKey>,
    admins: BTreeSet<PublicKey>,
}

/// The rooms a relay knows.
#[derive(Debug, Clone, Default)]
pub struct Rooms {
    rooms: HashMap<String, Room>,
}

/// The room an event is addressed to (its first `h` tag), if it has one.
pub fn room_of(event: &Event) -> Option<&str> {
    event
        .tags
        .iter()
        .map(|t| t.as_slice())
        .find(|t| t.first().map(String::as_str) == Some("h"))
        .and_then(|t| t.get(1))
        .map(String::as_str)
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ROOM_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

impl Rooms {
    /// The configured rooms.
    pub fn new(configs: &[RoomConfig]) -> Result<Rooms, RoomError> {
        let mut rooms = HashMap::new();
        for c in configs {
            if !valid_id(&c.id) {
                return Err(RoomError::Id(c.id.clone()));
            }
            if c.private {
                return Err(RoomError::PrivateUnsupported(c.id.clone()));
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
        Ok(Rooms { rooms })
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

    /// Whether `event` may be stored: `Err` with the `restricted:` reason when it is addressed to a closed
    /// room its author is not a member of.
    pub fn check_write(&self, event: &Event) -> Result<(), String> {
        let Some(id) = room_of(event) else {
            return Ok(());
        };
        match self.rooms.get(id) {
            Some(room) if room.closed && !room.members.contains(&event.pubkey) => Err(format!(
                "restricted: room {id:?} is closed; only its members may write in it"
            )),
            _ => Ok(()),
        }
    }

    /// The relay-signed metadata of every room as of `now`: 39000, 39001 and 39002 per room.
    pub fn metadata(&self, relay: &Keys, now: Timestamp) -> Vec<Event> {
        let mut ids: Vec<&String> = self.rooms.keys().collect();
        ids.sort();
        let mut out = Vec::with_capacity(ids.len() * 3);
        for id in ids {
            let room = &self.rooms[id];
            let d = Tag::identifier(id.clone());
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
            .unwrap_err();
        assert!(
            refused.starts_with("restricted: ") && refused.contains("lab"),
            "{refused}"
        );
        assert!(rooms
            .check_write(&message(&stranger, Some("lobby")))
            .is_ok());
        // No room of that name, or no h at all: not a room event.
        assert!(rooms
            .check_write(&message(&stranger, Some("elsewhere")))
            .is_ok());
        assert!(rooms.check_write(&message(&stranger, None)).is_ok());
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
        let mut private = room("vault", true, &[], &[]);
        private.private = true;
        assert_eq!(
            Rooms::new(&[private]).unwrap_err(),
            RoomError::PrivateUnsupported("vault".into())
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
}
