//! ACP agents (`kind = "acp"`): a coding agent that speaks the Agent Client Protocol (Claude Code, Gemini
//! CLI, Codex and others through their ACP adapters) as an agentwire agent, reachable on every front.
//!
//! The daemon runs the agent's `command` itself, in a process group of its own, with the environment a
//! child gets ([`agentwire_core::child_env`]: the allowlist, the agent's `env` and `pass_env`) and its
//! `cwd` (default `<data dir>/work/<name>`), and speaks ACP to it over its stdio with the protocol's
//! official crate (`agent-client-protocol`, schema v1):
//!
//! | agentwire | ACP |
//! | --- | --- |
//! | the agent's first turn (and the first after its process ended) | the process started, `initialize` (protocol version 1; no file system and no terminal offered) |
//! | a conversation | one session (`session/new` with the agent's `cwd`); its next turn goes to the same session |
//! | a turn | `session/prompt` with the turn's message |
//! | the turn's text, thinking, tool calls and results, status | `session/update`: `agent_message_chunk`, `agent_thought_chunk`, `tool_call` / `tool_call_update` (completed or failed), `plan` |
//! | the turn's outcome | the prompt's `stopReason`: `end_turn` a result; `cancelled` cancelled; `refusal`, `max_tokens`, `max_turn_requests` an `agent_failed` failure saying which |
//! | a question (an approval: once, always, no) answered from any front that asks | `session/request_permission`, answered with the option of the kind chosen (`allow_once`, `allow_always`, `reject_once`); `cancelled` when the turn is cancelled while it asks |
//! | cancel | `session/cancel`; the turn ends when the prompt answers `cancelled`, or after [`agent::CANCEL_GRACE`] with the process group killed |
//! | the daemon's stop | the agent's stdin closed, its process group killed after [`process::STOP_GRACE`] |
//!
//! An agent whose process ends fails its running turns (`agent_failed`, with the last line it wrote on its
//! stderr) and is started again for the next turn, with new sessions. A process that cannot be started or
//! initialized fails the turn at once (`model_unavailable`).
//!
//! Limits: a line from the agent at most [`process::MAX_LINE_BYTES`] (a longer one ends the connection), a
//! prompt [`agent::MAX_PROMPT_BYTES`], an answer [`agent::MAX_ANSWER_BYTES`] (the agent is asked to stop
//! there), [`agent::MAX_SESSIONS`] conversations with a session (the least recently used forgotten past it).
//! A conversation's session is kept across restarts (`kept`, a file beside the journal): after a restart of
//! the daemon or of the agent, the conversation's next turn asks the new process to `session/load` it when
//! the agent offers that (its `loadSession` capability), and opens a new session when it does not (or no
//! longer knows the session).
//!
//! `mapping` is pure (updates, stop reasons, permissions); `process` is the child and its connection;
//! `agent` the [`AcpAgent`] over them.

pub mod agent;
pub mod kept;
pub mod kind;
pub mod mapping;
pub mod process;

pub use agent::{AcpAgent, AcpSettings};
pub use process::Launch;
