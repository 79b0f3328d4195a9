//! The roost agent protocol (spec: `shared/specs/roost-agent-protocol.md`): a supervisor runs agent jobs
//! and talks to them over a unix socket, one JSON object per line.
//!
//! The crate is in three tiers, each importing only those below it:
//! - [`proto`]: the protocol's lines and the supervisor's rules, pure (time passed in);
//! - [`daemon`]: the supervisor daemon: its socket and connections, its store, the jobs' processes and
//!   terminals, profiles and settings, and the ops applied to the rules;
//! - [`client`] (a controller's connection and the Rust agent client) and [`front`] (an engine agent hosted
//!   as a roost profile), which reach the daemon over its socket.

//! # Trust model
//!
//! The socket is the daemon's user's alone (0600, in a directory made 0700): only that user (and root)
//! can connect. On it, the person's controllers (a hub, `agentwire jobs`, agentwire's own roost-backed
//! turns) are trusted; jobs are not trusted to control one another. A job's processes may speak for their
//! own job with its token (`report`, `ack`) but the controller's ops (`rows`, `dispatch`, `reply`, `stop`,
//! ...) are refused `unauthorized` on any connection from them, found by their process group or ancestry
//! ([`daemon::peer`]); the last [`proto::wire::CONTROLLER_RESERVE`] connection places are kept for the owner's
//! controllers, and a connection that does not identify itself within [`daemon::IDENTIFY_TIMEOUT`] is
//! closed (beyond the [`daemon::SILENT_CONTROLLERS_KEPT`] silent ones of the owner's controllers). A
//! job's environment holds none of the daemon's secrets: only an allowlist (`PATH`, `HOME`, locale, ...),
//! what its profile sets or passes by name, and its `ROOST_*` identity ([`agentwire_core::child_env`]).
//!
//! These guard against a job that misbehaves; they are not a boundary. A job runs as the daemon's user,
//! so it can read what that user can (the daemon's store, with every job's token, its config, its key
//! files), signal the user's processes, and leave its process group and parent (a double fork) to connect
//! unrecognised. An agent that is not trusted belongs under another user: `user = "<name>"` on its profile
//! (a daemon running as root starts its jobs with that uid and gid and no supplementary groups; any other
//! daemon refuses the profile at start). Such a job cannot reach the owner-only socket, so the profile must
//! be a terminal agent (`protocol = false`); it runs in that user's home directory (or `/`).

pub mod client;
pub mod daemon;
pub mod front;
pub mod proto;
