//! Agents that run turns. For now the built-in demo agent: offline, deterministic, for trying agentwire out
//! and for testing every path of every protocol.

mod calc;
mod demo;

pub use calc::{evaluate, CalcError, MAX_EXPR_BYTES};
pub use demo::{DemoAgent, DEMO_MAX_BIG_BYTES, DEMO_MAX_SLEEP_MS, DEMO_MODEL, DEMO_SHELL_TOOL};
