//! The roost agent protocol (spec: `shared/specs/roost-agent-protocol.md`): a supervisor runs agent jobs
//! and talks to them over a unix socket, one JSON object per line.
//!
//! [`wire`] parses and builds the lines; [`report`] validates an agent's report against the spec's fields
//! and bounds; [`supervisor`] holds jobs, replies, acks and the feed. All three are pure.

pub mod agent;
pub mod client;
pub mod daemon;
mod field;
pub mod profile;
pub mod report;
pub mod store;
pub mod supervisor;
pub mod wire;
