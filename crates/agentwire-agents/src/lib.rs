//! Agents that run turns: the built-in demo agent (offline, deterministic, for trying agentwire out and for
//! testing every path of every protocol), and [`RoostJobAgent`], which serves turns with a roost job.

mod calc;
mod demo;
mod roost;

pub use calc::{evaluate, CalcError, MAX_EXPR_BYTES};
pub use demo::{DemoAgent, DEMO_MAX_BIG_BYTES, DEMO_MAX_SLEEP_MS, DEMO_MODEL, DEMO_SHELL_TOOL};
pub use roost::{RoostJobAgent, ROOST_TURN_TIMEOUT};
