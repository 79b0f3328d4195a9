//! The roost agent protocol (spec: `shared/specs/roost-agent-protocol.md`): a supervisor runs agent jobs
//! and talks to them over a unix socket, one JSON object per line.
//!
//! [`wire`] parses and builds the lines; [`report`] validates an agent's report against the spec's fields
//! and bounds; [`supervisor`] holds jobs, replies, acks, the conversations jobs serve and the feed;
//! [`escalation`] decides what becomes of a stop's SIGKILL across a restart; [`turn_row`] shows an engine
//! turn on a hosted job's row; [`when`] reads a schedule's `when` (`every 30m`, `daily 18:00`, ...) and says
//! when it is next due; [`concierge`] keeps the concierge's policy, orders and digests, and [`schedule`]
//! the jobs started on a clock; [`spawn_rules`] bounds what a session may spawn. All nine are pure;
//! [`store`] keeps them durable and [`daemon`] drives them.
//!
//! # Trust model
//!
//! The socket is the daemon's user's alone (0600, in a directory made 0700): only that user (and root)
//! can connect. On it, the person's controllers (a hub, `agentwire jobs`, agentwire's own roost-backed
//! turns) are trusted; jobs are not trusted to control one another. A job's processes may speak for their
//! own job with its token (`report`, `ack`) but the controller's ops (`rows`, `dispatch`, `reply`, `stop`,
//! ...) are refused `unauthorized` on any connection from them, found by their process group or ancestry
//! ([`daemon::peer`]); the last [`wire::CONTROLLER_RESERVE`] connection places are kept for the owner's
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

pub mod agent;
pub mod board;
pub mod client;
pub mod concierge;
pub mod daemon;
pub mod escalation;
mod field;
pub mod front;
pub mod peer_item;
pub mod profile;
pub mod report;
pub mod schedule;
pub mod settings;
pub mod spawn_rules;
pub mod store;
pub mod supervisor;
pub mod terminal;
pub mod turn_row;
pub mod watch;
pub mod when;
pub mod wire;
