//! The roost protocol and the supervisor's rules, pure (no I/O, no clock: time is passed in), the crate's
//! lowest tier: nothing here imports [`crate::daemon`] or [`crate::client`].
//!
//! [`wire`] parses and builds the lines; [`report`] validates an agent's report against the spec's fields
//! and bounds; [`supervisor`] holds jobs, replies, acks, the conversations jobs serve and the feed;
//! [`escalation`] decides what becomes of a stop's SIGKILL across a restart; [`turn_row`] shows an engine
//! turn on a hosted job's row; [`when`] reads a schedule's `when` (`every 30m`, `daily 18:00`, ...) and says
//! when it is next due; [`concierge`] keeps the concierge's policy, orders and digests, and [`schedule`]
//! the jobs started on a clock; [`board`] the shared task board; [`peer_item`] what one session sends
//! another; [`watch`] a session's watch on another; [`spawn_rules`] bounds what a session may spawn.

pub mod board;
pub mod concierge;
pub mod escalation;
pub mod feed;
mod field;
pub mod job_env;
pub mod op;
pub mod peer_item;
pub mod refusal;
pub mod report;
pub mod schedule;
pub mod spawn_rules;
pub mod supervisor;
pub mod turn_row;
pub mod watch;
pub mod when;
pub mod wire;
