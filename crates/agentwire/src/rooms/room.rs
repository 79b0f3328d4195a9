//! `agentwire whoami` (the client key, to put in `allowed` and `members`) and `agentwire room list | create
//! | add-member` (NIP-29 moderation: 9007 creates a room, 9002 sets its name and access, 9000 adds people;
//! the relay takes them from its admins and the room's).

use super::{tag, RelayTarget, Session};
use crate::tabular::columns;
use clap::{Args, Subcommand};
use nostr::prelude::{EventBuilder, Filter, Kind};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// NIP-29: put users into a room.
const PUT_USER: u16 = 9000;
/// NIP-29: edit a room's metadata.
const EDIT_METADATA: u16 = 9002;
/// NIP-29: create a room.
const CREATE_GROUP: u16 = 9007;
/// NIP-29: a room's metadata, signed by the relay.
const GROUP_METADATA: u16 = 39000;
/// NIP-29: a room's members, signed by the relay.
const GROUP_MEMBERS: u16 = 39002;
/// The most rooms `room list` reads.
const MAX_LISTED_ROOMS: usize = 500;

/// `whoami` flags.
#[derive(Debug, Args)]
pub(crate) struct WhoamiArgs {
    /// The key file (hex secret); default `client.key` in the data dir, created on first use.
    #[arg(long)]
    key: Option<PathBuf>,
}

/// `room` flags.
#[derive(Debug, Args)]
pub(crate) struct RoomArgs {
    #[command(flatten)]
    target: RelayTarget,
    #[command(subcommand)]
    command: RoomCommand,
}

#[derive(Debug, Subcommand)]
enum RoomCommand {
    /// The relay's rooms: id, name, access, members.
    #[command(after_help = "Example:\n  agentwire room list")]
    List,
    /// Create a room (a relay admin's).
    #[command(after_help = "Example:\n  agentwire room create lab --name \"The lab\" --closed")]
    Create {
        /// The room id (a-z, 0-9, - and _).
        id: String,
        /// Its display name.
        #[arg(long)]
        name: Option<String>,
        /// Only members may write in it.
        #[arg(long)]
        closed: bool,
        /// Only members may read it (after NIP-42 authentication).
        #[arg(long)]
        private: bool,
    },
    /// Add people to a room (a relay admin's or the room's admins').
    #[command(
        after_help = "Example (a key `agentwire whoami` printed):\n  agentwire room add-member lab npub1…"
    )]
    AddMember {
        /// The room id.
        id: String,
        /// Their public keys (npub or hex).
        #[arg(required = true)]
        keys: Vec<String>,
        /// As the room's admins.
        #[arg(long)]
        admin: bool,
    },
}

/// `agentwire whoami`.
pub(crate) fn whoami(args: WhoamiArgs, data_dir: &Path) -> Result<ExitCode, String> {
    let keys = super::client_keys(args.key.as_deref(), data_dir)?;
    let pk = keys.public_key();
    println!("npub {}", crate::keys::npub(&pk));
    println!("hex  {}", pk.to_hex());
    match &args.key {
        Some(p) => println!("key  {}", p.display()),
        None => println!("key  {}", data_dir.join("client.key").display()),
    }
    Ok(ExitCode::SUCCESS)
}

/// `agentwire room ...`.
pub(crate) async fn room(args: RoomArgs, data_dir: &Path) -> Result<ExitCode, String> {
    let mut s = Session::open(&args.target, data_dir).await?;
    match args.command {
        RoomCommand::List => list(&mut s).await,
        RoomCommand::Create {
            id,
            name,
            closed,
            private,
        } => {
            if !agentwire_tinyagent::valid_room_id(&id) {
                return Err(format!(
                    "{id:?} is not a room id: 1-{} of a-z, 0-9, - and _",
                    agentwire_tinyagent::MAX_ROOM_ID_LEN
                ));
            }
            let h = tag(&["h", &id])?;
            s.publish(EventBuilder::new(Kind::Custom(CREATE_GROUP), "").tags([h.clone()]))
                .await
                .map_err(|e| format!("room {id}: {e}"))?;
            let mut edit = vec![h];
            if let Some(n) = &name {
                edit.push(tag(&["name", n])?);
            }
            edit.push(tag(&[if closed { "closed" } else { "open" }])?);
            edit.push(tag(&[if private { "private" } else { "public" }])?);
            s.publish(EventBuilder::new(Kind::Custom(EDIT_METADATA), "").tags(edit))
                .await
                .map_err(|e| format!("room {id} was created, but its settings were not: {e}"))?;
            println!(
                "created room {id} ({}, {})",
                if closed { "closed" } else { "open" },
                if private { "private" } else { "public" }
            );
            Ok(ExitCode::SUCCESS)
        }
        RoomCommand::AddMember { id, keys, admin } => {
            let mut tags = vec![tag(&["h", &id])?];
            for k in &keys {
                let pk = crate::keys::parse_public_key(k)?;
                let hex = pk.to_hex();
                tags.push(match admin {
                    true => tag(&["p", &hex, "admin"])?,
                    false => tag(&["p", &hex])?,
                });
            }
            s.publish(EventBuilder::new(Kind::Custom(PUT_USER), "").tags(tags))
                .await
                .map_err(|e| format!("room {id}: {e}"))?;
            println!(
                "added {} {} to room {id}",
                keys.len(),
                match (keys.len(), admin) {
                    (1, false) => "member",
                    (_, false) => "members",
                    (1, true) => "admin",
                    (_, true) => "admins",
                }
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `room list`: the relay's metadata (39000) and member lists (39002), as a table.
async fn list(s: &mut Session) -> Result<ExitCode, String> {
    let found = s
        .query(vec![Filter::new()
            .kinds([Kind::Custom(GROUP_METADATA), Kind::Custom(GROUP_MEMBERS)])
            .limit(MAX_LISTED_ROOMS * 2)])
        .await?;
    let d =
        |e: &nostr::prelude::Event| agentwire_tinyagent::first_value(e, "d").map(str::to_string);
    let mut rooms: Vec<_> = found
        .iter()
        .filter(|e| e.kind.as_u16() == GROUP_METADATA)
        .filter_map(|e| Some((d(e)?, e)))
        .collect();
    rooms.sort_by(|a, b| a.0.cmp(&b.0));
    rooms.dedup_by(|a, b| a.0 == b.0);
    if rooms.is_empty() {
        println!("no rooms (a relay admin makes one with `agentwire room create ID`)");
        return Ok(ExitCode::SUCCESS);
    }
    let has = |e: &nostr::prelude::Event, name: &str| e.tags.iter().any(|t| t.kind() == name);
    let rows: Vec<Vec<String>> = rooms
        .iter()
        .map(|(id, meta)| {
            let members = found
                .iter()
                .filter(|e| e.kind.as_u16() == GROUP_MEMBERS && d(e).as_deref() == Some(id))
                .map(|e| agentwire_tinyagent::tag_values(e, "p").count())
                .max()
                .unwrap_or(0);
            vec![
                id.clone(),
                agentwire_tinyagent::first_value(meta, "name")
                    .unwrap_or(id)
                    .to_string(),
                format!(
                    "{}, {}",
                    if has(meta, "closed") {
                        "closed"
                    } else {
                        "open"
                    },
                    if has(meta, "private") {
                        "private"
                    } else {
                        "public"
                    }
                ),
                members.to_string(),
            ]
        })
        .collect();
    print!("{}", columns(&["ROOM", "NAME", "ACCESS", "MEMBERS"], &rows));
    Ok(ExitCode::SUCCESS)
}
