//! The shared vocabulary of agentwire and the engine's turn rules, with no I/O.
//!
//! Every protocol maps onto one model: a **conversation** is an ordered journal of **turns**; a turn is
//! accepted, streams [`TurnEvent`]s, and ends in exactly one [`Outcome`]. The [`TurnBook`] is the pure state
//! machine that enforces the engine's invariants (one outcome per turn, idempotent cancel, one turn at a time
//! per conversation with later turns queued in order, a request id run once); the async drivers around it
//! journal each decision before acting on the wire.

mod backoff;
pub mod child_env;
pub mod display;
mod event;
mod ids;
mod input;
mod outcome;
pub mod peer_envelope;
mod question;
mod redact;
mod token_bucket;
mod tool_line;
mod turnbook;
pub mod watch;

pub use backoff::Backoff;
pub use event::{StatusState, TurnEvent, WarningAbout};
pub use ids::{ConversationId, IdError, RequestId, MAX_ID_LEN};
pub use input::{PastToolCall, PastTurn, Resume, TurnInput};
pub use outcome::{
    Failure, FailureCode, Outcome, Refusal, TurnFailure, TurnResult, Usage, REFUSALS, TURN_FAILURES,
};
pub use question::{
    typed_option, Answer, ApproveChoice, Asked, CallAnswer, Interaction, Question, QuestionKind,
    QuestionOption, Selection, APPROVE_OPTIONS, CONFIRM_OPTIONS,
};
pub use redact::{redact_secrets, redact_userinfo};
pub use token_bucket::TokenBucket;
pub use tool_line::{
    arguments_summary, one_line, output_summary, tool_line, tool_result_line, tool_start_line,
    MAX_ARGUMENTS_SUMMARY_CHARS,
};
pub use turnbook::{
    CancelDecision, Finished, Journaled, Submitted, TurnBook, TurnPhase,
    MAX_QUEUED_TURNS_PER_CONVERSATION,
};

/// The wall clock in Unix seconds (0 before 1970): the one place the daemon reads it for journal and wire
/// timestamps. Pure code takes `now` as an argument instead.
pub fn now_secs() -> u64 {
    now_ms() / 1000
}

/// The wall clock in Unix milliseconds (0 before 1970), for deadlines another process must read the same
/// way (a roost stop's SIGKILL deadline).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis().min(u128::from(u64::MAX)) as u64)
        .unwrap_or(0)
}
