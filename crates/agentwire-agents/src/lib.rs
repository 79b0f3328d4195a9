//! Agents that run turns: the built-in demo agent (offline, deterministic, for trying agentwire out and for
//! testing every path of every protocol), [`RoostJobAgent`], which serves turns with a roost job, and
//! [`CmdAgent`], which runs a command for each turn, and [`openai::OpenAiAgent`], a model behind an
//! OpenAI-compatible chat completions API, with tools.

mod calc;
mod cmd;
mod demo;
pub mod kind;
pub mod kinds;
pub mod openai;
mod roost;

pub use calc::{evaluate, CalcError, MAX_EXPR_BYTES};
pub use cmd::{
    CmdAgent, CMD_MODEL, DEFAULT_CMD_TIMEOUT, MAX_CMD_OUTPUT_BYTES, MAX_CMD_STATUS_CHARS,
    MAX_CMD_STDERR_LINE_BYTES,
};
pub use demo::{DemoAgent, DEMO_MAX_BIG_BYTES, DEMO_MAX_SLEEP_MS, DEMO_MODEL, DEMO_SHELL_TOOL};
pub use roost::{RoostJobAgent, ROOST_TURN_TIMEOUT};
