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
//!
//! [`a2a::A2aRemote`] (`kind = "a2a"`): an A2A 1.0 agent behind a URL, reached as its client. Its card is
//! read first (cached for [`a2a::CARD_TTL`]) for its JSON-RPC interface; a turn is one task there, sent
//! with `SendStreamingMessage` (the bearer token from `token_env`, when set), its text streamed through as
//! it comes. A conversation here is one context there (a SHA-256 of the conversation id, the same after a
//! restart); a question there (`TASK_STATE_INPUT_REQUIRED`) is asked here and its answer sent back in the
//! same task; a cancel here is a `CancelTask` there; a dropped stream is followed again with
//! `SubscribeToTask` (a few times); a card or endpoint that cannot be reached fails the turn at once
//! (`model_unavailable`), and a turn takes at most its `request_timeout_secs` (time waiting for a person
//! not counted).

pub mod a2a;
pub mod fisk;
pub mod kinds;
pub mod nipxx;

pub use a2a::{A2aRemote, A2aRemoteSettings};
pub use fisk::{FiskRemote, FiskRemoteSettings};
pub use nipxx::{NipxxRemote, NipxxRemoteSettings};
