//! The roost agent protocol (spec: `shared/specs/roost-agent-protocol.md`): a supervisor runs agent jobs
//! and talks to them over a unix socket, one JSON object per line.
//!
//! [`wire`] parses and builds the lines; [`report`] validates an agent's report against the spec's fields
//! and bounds; [`supervisor`] holds jobs, replies, acks, the conversations jobs serve and the feed;
//! [`escalation`] decides what becomes of a stop's SIGKILL across a restart; [`turn_row`] shows an engine
//! turn on a hosted job's row. All five are pure; [`store`]
//! keeps them durable and [`daemon`] drives them.

pub mod agent;
pub mod client;
pub mod daemon;
pub mod escalation;
mod field;
pub mod profile;
pub mod report;
pub mod store;
pub mod supervisor;
pub mod turn_row;
pub mod wire;
