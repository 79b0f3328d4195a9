//! The MCP front: agentwire as a Model Context Protocol server, so that any MCP client (Claude Desktop,
//! an IDE, a program written with an MCP SDK) can call the daemon's agents as tools. Built on `rmcp`, the
//! official Rust SDK, with its streamable HTTP transport (protocol revisions 2024-11-05 to 2025-11-25).
//!
//! The binary lists [`McpFront`] among its fronts; its section is `[mcp]` (`enabled`, on by default).
//! Its route is mounted on the daemon's one HTTP server, behind a caller's token or the operator's
//! (`Authorization: Bearer <token>`), and the server's `Host` and `Origin` checks.
//!
//! # Route
//!
//! | route | what |
//! | --- | --- |
//! | `POST /mcp` | a JSON-RPC message: `initialize` opens a session (`Mcp-Session-Id`), a request is answered on its own server-sent event stream |
//! | `GET /mcp` | the session's stream for messages not tied to a request |
//! | `DELETE /mcp` | ends the session |
//!
//! Without a token, or with a wrong one, the answer is 401 with `WWW-Authenticate: Bearer` and a JSON-RPC
//! error body ([`errors::unauthorized_body`]). A session belongs to the caller that opened it: another
//! caller's request naming it is answered 404, as for a session that does not exist.
//!
//! # Tools
//!
//! Each agent exposed on the front is a tool, `ask_<agent>` ([`tools::tool_name`]), described by its
//! card ([`tools::description`]), whose input is `{"prompt": string}` and nothing else
//! ([`tools::input_schema`]). `tools/list` shows the agents the caller may call; a call to another is
//! refused as an unknown tool (JSON-RPC invalid params), as if it did not exist.
//!
//! # A call as a turn
//!
//! A `tools/call` is one turn of the agent in a new conversation (its id and the turn's are
//! `mcp:<32 hex>`), journaled under protocol `mcp` with the caller as its requester (`operator` or
//! `caller:<name>`, also in the turn's route, with the tool's name). The result is the answer's text as
//! one text content; a turn that fails, or that the agent did not take (busy, the daemon stopping), is a
//! result with `isError: true` whose text names the failure's code and says its message
//! ([`errors::ToolReply`]), as are arguments that cannot be taken: the client's model reads them.
//!
//! - **Progress**: when the request carries a `progressToken`, each event of the turn is a
//!   `notifications/progress` on the call's stream, `progress` counting up from 1 and `message` what
//!   happened: a text delta, the status, a tool line (`[tool calculator start 6*7]`), a warning
//!   ([`progress::message`]; the agent's reasoning is not sent).
//! - **Questions**: an agent's question (a choice, a confirmation, a line of text, an approval) goes to
//!   the client as `elicitation/create` in form mode on the call's stream when the client declared the
//!   `elicitation` capability in `initialize` ([`questions::form`] maps each kind to a flat form).
//!   Accepted, the form's content is the answer; an answer that does not fit is asked again, at most
//!   [`handler::MAX_ASKS`] times in all, then the question is closed unanswered. Declined, an approval is
//!   denied and another question answered "no operator" (the agent goes on without it); dismissed
//!   (`cancel`), the call's turn is cancelled. Unanswered for [`front::QUESTION_WINDOW`], the question
//!   closes and the agent hears nobody answered. A client without the capability cannot be asked: the
//!   agent hears so, and a call that fails for it says [`errors::NO_ELICITATION_MESSAGE`].
//! - **Cancellation**: `notifications/cancelled` naming the call cancels its turn (no result is sent,
//!   as the specification says); so does a client that closes the call's stream, and a session that ends.
//!
//! # Limits
//!
//! A request body is at most 1 MiB (the server's [`agentwire_http::MAX_FRONT_BODY_BYTES`]), the prompt
//! at most the agent card's `max_prompt_bytes`, [`handler::MAX_CALLS_PER_SESSION`] calls at once in a
//! session, [`routes::MAX_SESSIONS`] sessions and [`routes::MAX_SESSIONS_PER_CALLER`] of one caller's (503
//! past either), a session closed after
//! [`routes::SESSION_IDLE`] with no message either way; an answer's text at most
//! [`questions::MAX_ANSWER_TEXT_BYTES`], a form [`questions::MAX_FORM_OPTIONS`] options, a progress
//! message [`progress::MAX_PROGRESS_MESSAGE_BYTES`].
//!
//! # What it does not do
//!
//! No conversation kept between calls (each is a new one), no resources, prompts, sampling or tasks, no
//! URL-mode elicitation, no resumable streams (a stream cut off ends its call: the turn is cancelled),
//! no protocol revision 2026-07-28 (stateless, without server-to-client requests), no OAuth (the bearer
//! token is the daemon's own). After a crash a turn that was running is ended in the journal (its
//! client's session is gone).
//!
//! A question settled while the client still shows it (answered in the hub or the turn API, its window
//! closed) or whose turn ended is withdrawn: `notifications/cancelled` names its `elicitation/create`
//! request; a late answer is ignored.
//!
//! # Structure
//!
//! [`tools`] (names, schema, arguments), [`questions`] (a question as a form, a reply as an answer),
//! [`progress`] (events as progress) and [`errors`] (results and errors) are pure; `handler` (rmcp's
//! server handler), `routes` (the route around rmcp's tower service) and `front` (the daemon's traits)
//! drive them.

pub mod errors;
mod front;
pub mod handler;
pub mod progress;
pub mod questions;
pub mod routes;
pub mod tools;

pub use front::{McpFront, PROTOCOL, QUESTION_WINDOW};
