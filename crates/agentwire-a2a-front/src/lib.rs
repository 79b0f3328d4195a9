//! The A2A front: each agent exposed on it is an A2A agent (Agent2Agent protocol 1.0), so any A2A client
//! (the official SDKs, another agent) finds it by its card and sends it tasks over JSON-RPC or HTTP+JSON;
//! each task is a turn of the agent, journaled under protocol `a2a`.
//!
//! The binary lists [`A2aFront`] among its fronts; its section is `[a2a]` (`enabled`, on by default). Its
//! routes are mounted on the daemon's one HTTP server: the cards for anyone, the rest behind a caller's
//! token or the operator's (`Authorization: Bearer <token>`).
//!
//! # Routes
//!
//! | route | what |
//! | --- | --- |
//! | `GET /.well-known/agent-card.json` | the `--agent` agent's card (public) |
//! | `GET /a2a/<agent>/.well-known/agent-card.json` | each agent's card (public) |
//! | `POST /a2a/<agent>` | the JSON-RPC endpoint: `SendMessage`, `SendStreamingMessage`, `GetTask`, `ListTasks`, `CancelTask`, `SubscribeToTask`, the push notification methods and `GetExtendedAgentCard` |
//! | `POST /a2a/<agent>/message:send`, `message:stream` | HTTP+JSON `SendMessage`, `SendStreamingMessage` |
//! | `GET /a2a/<agent>/tasks/<id>`, `GET /a2a/<agent>/tasks` | `GetTask`, `ListTasks` (query parameters) |
//! | `POST /a2a/<agent>/tasks/<id>:cancel` | `CancelTask` |
//! | `POST` (or `GET`) `/a2a/<agent>/tasks/<id>:subscribe` | `SubscribeToTask` |
//! | `/a2a/<agent>/tasks/<id>/pushNotificationConfigs[/<config>]`, `GET /a2a/<agent>/extendedAgentCard` | their spec errors |
//!
//! A card's `supportedInterfaces` name `JSONRPC` and `HTTP+JSON` at the same URL, `http://<host>/a2a/<agent>`
//! (the request's own `Host`, which the server checks against its addresses; `https://` when a TLS
//! terminator says so in `X-Forwarded-Proto` or `Forwarded`), protocol version `1.0`; its
//! `capabilities` say streaming, no push notifications and no extended card; `securitySchemes` has one
//! `bearer` HTTP scheme, required by `securityRequirements`; its skills are the agent's tools (the agent
//! itself when it has none). A card holds nothing secret. A client pointed at the daemon's base URL reads
//! the `--agent` agent's card; pointed at `http://<host>/a2a/<agent>`, that agent's.
//!
//! # Tasks and turns
//!
//! - A task is a turn. Its id is a fresh UUID; the turn's request id is `a2a:<task id>`.
//! - A `contextId` is a conversation: a message without one starts a fresh context (a UUID); a message
//!   naming one is the next turn of that conversation, so an agent that reads its history (a model) gets
//!   the context's earlier turns from the journal. A context is its caller's own: the conversation is
//!   `a2a:<requester>/<contextId>`, so another caller (or the operator) naming the same id starts a
//!   conversation of its own. Two messages in one context run one after the other (the second is
//!   `TASK_STATE_SUBMITTED` until the first ends).
//! - The message's text parts, joined by a newline, are the turn's message; a file, URL or data part is
//!   refused (`ContentTypeNotSupportedError`), as are output modes without text.
//! - States: `SUBMITTED` (waiting behind its context), `WORKING`, `INPUT_REQUIRED` (the agent asks),
//!   `COMPLETED`, `FAILED` (the failure's message in the status message, its code in that message's
//!   `metadata.code`), `CANCELED`, `REJECTED` (refused before it ran: capacity, ...).
//! - Output: the answer is the task's one artifact, `answer`. Streamed, each text delta is an artifact
//!   update (`append` after the first); the outcome closes it (`lastChunk`): with the rest of the answer
//!   when the deltas were its beginning, else (they were progress, as the demo's `sleep` streams) with the
//!   whole answer replacing them (`append` false). Progress and tool calls are `WORKING` status updates
//!   with a message; the end is a status update with the answer (or the failure) as its message.
//! - History: the client's message, the agent's questions and its last word (the answer or the failure),
//!   at most [`mapping::MAX_HISTORY_MESSAGES`]; `historyLength` keeps the newest. The client's answers to
//!   questions are not in it.
//! - A question is `TASK_STATE_INPUT_REQUIRED` with the question in the status message: its text, its
//!   options (`id (label)`) and how to answer, and a data part with the same (`questionId`, `kind`,
//!   `options`, ...). A message with the task's `taskId` (and its `contextId`, or none) answers it: an
//!   option's id or label in any case (several, comma-separated, where several may be chosen), free text
//!   where the question takes it; a text that fits no option is refused (`InvalidParamsError`, naming the
//!   options) and the question stays open. It stays open [`INPUT_REQUIRED_WINDOW`]. A message to a
//!   task that is not waiting is `UnsupportedOperationError`.
//! - `SendMessage` waits until the task ends or asks (blocking, the default); with `returnImmediately`
//!   it answers with the task at once. `SendStreamingMessage` streams the task, then its updates, and
//!   closes when it ends or asks (section 11.7). `SubscribeToTask` does the same for a task that has not
//!   ended, through the end (an answer in between included), for up to
//!   [`MAX_SUBSCRIBERS_PER_TASK`] subscribers at once; a task that ended is
//!   `UnsupportedOperationError`. A stream whose client goes away leaves its task running.
//! - `CancelTask` is the engine's cancel (the operator's cancel for the operator), answered with the task
//!   once it has ended (or after [`CANCEL_WAIT`]); a task that ended is `TaskNotCancelableError`.
//! - `ListTasks` lists the caller's tasks of the agent (the operator's list is everyone's) that the hub
//!   holds (the live ones and the newest ended ones, which the daemon fills from the journal at start),
//!   newest created first, filtered by `contextId`, `status` and `statusTimestampAfter` (a live task always
//!   passes), `pageSize` 1 to 100 (50 by default), `nextPageToken` always present (empty on the last page);
//!   artifacts only with `includeArtifacts`, history only with a `historyLength`. `GetTask` reads a task
//!   from the hub while it is recent, else from the journal.
//! - A caller lists, reads, subscribes to, answers and cancels only its own tasks: another's is
//!   `TaskNotFoundError`, as if it did not exist. The operator's token sees every task.
//!
//! # Errors
//!
//! JSON-RPC errors are answered with HTTP 200 and the spec's codes (-32001 task not found, -32002 not
//! cancelable, -32003 push notifications, -32004 unsupported operation, -32005 content type, -32009
//! version; -32700, -32600, -32601, -32602 for a request that is not JSON, not a request, an unknown
//! method, wrong params; -32603 internal), with a `google.rpc.ErrorInfo` in `data`. HTTP+JSON errors
//! are a `google.rpc.Status` with the spec's HTTP status and an `ErrorInfo` `reason` (`TASK_NOT_FOUND`,
//! ...). A request without a token that opens the routes is a 401 with `WWW-Authenticate: Bearer` and a
//! body that reads as either ([`errors::unauthenticated_body`]).
//!
//! `A2A-Version` (header, or query parameter): `1.0` is served (a patch number is not considered); any
//! other is `VersionNotSupportedError`. A request without one is served as 1.0: the spec reads no
//! version as 0.3, which this server does not speak; its cards say 1.0.
//!
//! # Limits
//!
//! The body is at most 1 MiB (the server's [`agentwire_http::MAX_FRONT_BODY_BYTES`]); a message has at most
//! [`wire::MAX_PARTS`] parts, ids at most [`wire::MAX_ID_CHARS`] characters, and its text at most the agent
//! card's `max_prompt_bytes`; a list page at most [`wire::MAX_PAGE_SIZE`] tasks.
//!
//! # What it does not do
//!
//! No push notifications, no extended card, no gRPC binding, no tenants, no files or data in messages,
//! no messages to a working task other than an answer, and no 0.3 (the legacy shapes). A task a crash cut
//! off ends `FAILED` (the agent restarted) and is read from the journal.
//!
//! # Structure
//!
//! [`wire`] (the bodies, a request checked), [`mapping`] (a turn as a task, the card, answers) and
//! [`errors`] are pure; `service` (the operations over the engine and the hub), `routes` (the bindings)
//! and `front` (the daemon's traits) drive them.

pub mod errors;
mod front;
pub mod mapping;
mod routes;
mod service;
pub mod wire;

pub use front::{A2aFront, INPUT_REQUIRED_WINDOW, PROTOCOL};
pub use routes::VERSION_HEADER;
pub use service::{
    CANCEL_WAIT, MAX_ANSWER_BYTES, MAX_LISTED_TURNS, MAX_SUBSCRIBERS_PER_TASK,
    UNAVAILABLE_RETRY_SECS,
};
