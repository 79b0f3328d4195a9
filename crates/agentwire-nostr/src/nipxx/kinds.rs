//! The event kinds NIP-XX reserves.

/// ai.status: agent -> client state updates (ephemeral).
pub const STATUS: u16 = 25800;
/// ai.delta: agent -> client streamed fragment (ephemeral).
pub const DELTA: u16 = 25801;
/// ai.prompt: client -> agent invocation (kept by relays).
pub const PROMPT: u16 = 25802;
/// ai.response: agent -> client terminal response (kept by relays).
pub const RESPONSE: u16 = 25803;
/// ai.tool_call: agent tool telemetry (ephemeral).
pub const TOOL_CALL: u16 = 25804;
/// ai.error: terminal failure (kept by relays).
pub const ERROR: u16 = 25805;
/// ai.cancel: client -> agent cancellation (ephemeral).
pub const CANCEL: u16 = 25806;
/// ai.info: agent capability discovery (addressable).
pub const INFO: u16 = 31340;
/// The fixed `d` value of our ai.info.
pub const INFO_D: &str = "agent-info";
/// NIP-59 gift wrap, for the privacy-first profile.
pub const GIFT_WRAP: u16 = 1059;
/// Every kind an agent sends for a run.
pub const RUN_KINDS: [u16; 5] = [STATUS, DELTA, RESPONSE, TOOL_CALL, ERROR];
/// The terminal kinds.
pub const TERMINAL_KINDS: [u16; 2] = [RESPONSE, ERROR];
