//! The clients of the roost daemon, the crate's top tier beside [`crate::front`]: [`controller`], a
//! controller's connection (what `agentwire jobs` and the hub use), and [`agent`], what a roost agent
//! written in Rust links to. Both speak [`crate::proto::wire`] over the daemon's socket; neither reaches
//! into the daemon's state.

pub mod agent;
pub mod controller;

pub use controller::{ClientError, Controller, CALL_TIMEOUT};
