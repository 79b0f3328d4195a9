//! Agents served elsewhere as agents here, on every front of this daemon (issue 35, remote agents).
//!
//! [`nipxx::NipxxRemote`] (`kind = "nipxx"`): a NIP-XX agent on some relay, reached as its client with a key
//! of this daemon's. Its ai.info is read first (cached for [`nipxx::INFO_TTL`]): a prompt it would refuse is
//! not sent, and a prompt goes gift-wrapped (NIP-59) when the agent takes only that. A conversation here is
//! one session there (`session:<the first 32 hex digits of the conversation id's SHA-256>`, the same after a
//! restart); the remote run's deltas, thinking, tool telemetry and statuses stream through as this turn's
//! events as they come; its terminal is this turn's outcome (its error code mapped back); a cancel here is an
//! ai.cancel there; a relay that cannot be reached fails the turn at once (`model_unavailable`).
//!
//! Limits: one relay used a turn (the first of `relays` that connects), a turn at most its
//! `request_timeout_secs` (then cancelled there), no questions (NIP-XX has none).
//!
//! [`fisk::FiskRemote`] (`kind = "fisk"`): a fisk-ai worker on some NATS account, reached as its caller with
//! this daemon's credentials there. A conversation here is one conversation there (the worker's
//! `conversation_token`, kept in memory for at most [`fisk::MAX_CONVERSATIONS`] conversations: after a
//! restart here a conversation's next turn starts a new one there); the reply set's text, thinking, tool
//! telemetry, warnings and statuses stream through as they come; its `result` or `error` is this turn's
//! outcome (codes mapped to the same meaning); a question there is asked here, its answer sent back, and the
//! run goes on; a cancel here cancels the run there; NATS that cannot be reached, or no worker serving the
//! identity, fails the turn at once (`model_unavailable`), and a turn takes at most its
//! `request_timeout_secs` (time waiting for a person not counted; then cancelled there).

pub mod a2a;
pub mod fisk;
pub mod nipxx;

pub use a2a::{A2aRemote, A2aRemoteSettings};
pub use fisk::{FiskRemote, FiskRemoteSettings};
pub use nipxx::{NipxxRemote, NipxxRemoteSettings};
