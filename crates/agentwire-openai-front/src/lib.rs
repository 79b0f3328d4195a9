//! The OpenAI-compatible chat completions front: each agent exposed on it is a model, so any OpenAI client
//! (the official SDKs, `curl`, a tool that takes a base URL and a key) talks to it with a chat completion
//! request, and the daemon runs that request as one turn of the agent.
//!
//! The binary lists [`OpenAiFront`] among its fronts; its section is `[openai]` (`enabled`, on by default).
//! Its routes are mounted on the daemon's one HTTP server, behind a caller's token or the operator's
//! (`Authorization: Bearer <token>`, the SDK's API key).
//!
//! # Routes
//!
//! | route | what |
//! | --- | --- |
//! | `GET /v1/models` | the agents the caller may call, as models (`owned_by` `agentwire`, `created` when the front started) |
//! | `GET /v1/models/{id}` | one of them |
//! | `POST /v1/chat/completions` | a turn of agent `model`: its answer whole (`chat.completion`), or streamed (`stream: true`) as server-sent `chat.completion.chunk`s and `[DONE]` |
//!
//! # A request as a turn
//!
//! Every request is a new conversation (its id and the turn's are `openai:chatcmpl-<32 hex>`, the completion
//! id `chatcmpl-<32 hex>`), journaled under protocol `openai` with the caller as its requester (`operator`
//! or `caller:<name>`, also in the turn's route). The request's `messages` carry the conversation:
//!
//! - the user messages after the last assistant message are the turn's message (joined by a blank line);
//! - before them, each run of user messages and the assistant messages after it is an earlier turn
//!   ([`agentwire_core::PastTurn`]), handed to an agent that reads its history (a model does), the newest
//!   [`mapping::MAX_PAST_TURNS`] of them;
//! - `system` and `developer` messages, wherever they stand, follow the person's words in the turn's message
//!   under the line [`mapping::INSTRUCTIONS_HEADING`]: the agent keeps its own system prompt, and the
//!   journal, the hub and an agent reading a command from the first word (the demo's `calc`) see the
//!   message start with what the person said;
//! - content is a string or an array of `{"type": "text"}` parts (joined by a newline); images, audio and
//!   files are refused (400).
//!
//! `reasoning_effort` is the turn's thinking (`low`, `medium`, `high`; `xhigh` is `max`). Accepted and not
//! used: `temperature`, `top_p`, `max_tokens`, `max_completion_tokens`, `stop`, `user`, `seed`,
//! `presence_penalty`, `frequency_penalty`, `metadata`, `store`, `parallel_tool_calls`, `n: 1`,
//! `logprobs: false`, `response_format: {"type": "text"}`, an empty `tools`, `tool_choice` `none` or `auto`,
//! and any field this version does not know (the SDKs send new ones). Refused (400), because they cannot be
//! kept: `n` above 1, `logprobs: true`, a `json_object` or `json_schema` response format, and client tools
//! (`tools`, `functions`, `tool_choice` naming one, `tool` messages, assistant `tool_calls`): the agent's
//! tools are its own and it runs them itself; its tool activity is not in the answer.
//!
//! # The answer
//!
//! Whole: the answer's text, `finish_reason` `stop` (`length` when the agent ran out of tokens), and the
//! turn's `usage` (`total_tokens` = prompt + completion). Streamed: a first chunk with the assistant's role,
//! a chunk per text delta as the agent streams it, what of the answer was not streamed (after a blank line
//! when the deltas were not the answer's beginning: progress, as the demo's `sleep` streams), a chunk with
//! the `finish_reason`, a chunk with `usage` and no choices when `stream_options.include_usage` asks for
//! it, then `data: [DONE]`. A quiet stream gets a comment every 15 s.
//!
//! A turn that fails is an error in OpenAI's shape (`{"error": {"message", "type", "param", "code"}}`);
//! whole, with an HTTP status ([`errors::ApiError::of_failure`]: 400 for what the request asked that
//! cannot be done, 429 for capacity, 499 `cancelled` for a turn the operator cancelled, 500 for the agent's
//! or a tool's failure, 502 for its model's, 503 when the daemon cannot take turns now), and streamed, as a
//! last `data: {"error": {...}}` event with no `[DONE]` after it. The `Retry-After` and `x-should-retry`
//! headers tell the SDKs when sending the same request again may help (they retry 5xx on their own, and a
//! failure of the agent's would only run again). A client that closes the connection before the answer
//! (whole or streamed) cancels the turn.
//!
//! An agent that asks a question (a choice, a confirmation) cannot be answered here: the agent hears that
//! nobody can answer, and a turn that fails for it says [`errors::ASKED_MESSAGE`]. An approval-gated tool
//! is declined the same way and the agent goes on.
//!
//! # Limits
//!
//! The body is at most 1 MiB (the server's [`agentwire_http::MAX_FRONT_BODY_BYTES`]), [`wire::MAX_MESSAGES`]
//! messages of [`wire::MAX_CONTENT_PARTS`] parts, and the turn's message at most the agent card's
//! `max_prompt_bytes` (400 `context_length_exceeded`). A caller's token opens the agents its grant lists
//! only: another agent is a 404 `model_not_found`, as if it did not exist.
//!
//! # What it does not do
//!
//! No conversation kept between requests (the client sends it each time), no questions, no client tools,
//! no images or audio, no legacy `/v1/completions`, embeddings or responses API. After a crash a turn that
//! was running is ended in the journal (its caller's connection is gone).
//!
//! # Structure
//!
//! [`wire`] (the bodies, a request checked), [`mapping`] (messages to a turn, outcome and events to
//! bodies) and [`errors`] are pure; `routes` (the axum handlers) and `front` (the daemon's traits) drive
//! them.

pub mod errors;
mod front;
pub mod mapping;
mod routes;
pub mod wire;

pub use front::{OpenAiFront, PROTOCOL};
