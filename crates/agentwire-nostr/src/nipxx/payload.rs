//! The encrypted JSON payloads of NIP-XX, with the spec's schemas enforced on parse.
//!
//! `parse_*` take the decrypted plaintext: text that is not JSON is [`ErrorCode::ParseError`]; JSON that breaks
//! the schema (missing field, wrong type, `ver` other than 1, a value outside an enum) is
//! [`ErrorCode::InvalidSchema`]. Unknown fields are ignored, as the spec requires.

use super::{ErrorCode, Violation};
use serde::Serialize;
use serde_json::{Map, Value};

/// Thinking efforts a prompt may ask for.
pub const THINKING_LEVELS: [&str; 4] = ["low", "medium", "high", "max"];
/// Reasons a cancel may give.
pub const CANCEL_REASONS: [&str; 3] = ["user_cancel", "timeout", "policy"];
/// Status states.
pub const STATUS_STATES: [&str; 3] = ["thinking", "tool_use", "done"];
/// Most fallback models a prompt may list; more is abuse, not negotiation.
pub const MAX_FALLBACK_MODELS: usize = 16;

fn invalid(msg: impl Into<String>) -> Violation {
    Violation::new(ErrorCode::InvalidSchema, msg)
}

/// Parses plaintext as a JSON object with `ver: 1`.
pub fn parse_object(plaintext: &str) -> Result<Map<String, Value>, Violation> {
    let v: Value = serde_json::from_str(plaintext)
        .map_err(|e| Violation::new(ErrorCode::ParseError, format!("payload is not JSON: {e}")))?;
    let Value::Object(m) = v else {
        return Err(invalid("payload is not a JSON object"));
    };
    match m.get("ver") {
        Some(v) if v.as_u64() == Some(1) && v.is_u64() => Ok(m),
        Some(_) => Err(invalid("`ver` must be 1")),
        None => Err(invalid("`ver` is missing")),
    }
}

fn opt_str<'a>(
    m: &'a Map<String, Value>,
    key: &str,
    min_len: usize,
) -> Result<Option<&'a str>, Violation> {
    match m.get(key) {
        None => Ok(None),
        Some(Value::String(s)) if s.chars().count() >= min_len => Ok(Some(s)),
        Some(Value::String(_)) => Err(invalid(format!("`{key}` must not be empty"))),
        Some(_) => Err(invalid(format!("`{key}` must be a string"))),
    }
}

fn req_str<'a>(m: &'a Map<String, Value>, key: &str, min_len: usize) -> Result<&'a str, Violation> {
    opt_str(m, key, min_len)?.ok_or_else(|| invalid(format!("`{key}` is missing")))
}

fn opt_uint(
    m: &Map<String, Value>,
    key: &str,
    min: u64,
    max: u64,
) -> Result<Option<u64>, Violation> {
    match m.get(key) {
        None => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
            _ => Err(invalid(format!(
                "`{key}` must be an integer from {min} to {max}"
            ))),
        },
    }
}

fn opt_enum<'a>(
    m: &'a Map<String, Value>,
    key: &str,
    allowed: &[&str],
) -> Result<Option<&'a str>, Violation> {
    match opt_str(m, key, 0)? {
        Some(s) if allowed.contains(&s) => Ok(Some(s)),
        Some(s) => Err(invalid(format!("`{key}` {s:?} is not one of {allowed:?}"))),
        None => Ok(None),
    }
}

fn opt_object<'a>(
    m: &'a Map<String, Value>,
    key: &str,
) -> Result<Option<&'a Map<String, Value>>, Violation> {
    match m.get(key) {
        None => Ok(None),
        Some(Value::Object(o)) => Ok(Some(o)),
        Some(_) => Err(invalid(format!("`{key}` must be an object"))),
    }
}

/// An ai.prompt (25802) payload.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PromptPayload {
    /// The person's message (at least one character).
    pub message: String,
    /// Requested thinking effort.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    /// Provider hint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Requested model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Requested tool schema version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_schema_version: Option<u64>,
    /// Models to try when `model` is not offered.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fallback_models: Vec<String>,
}

impl PromptPayload {
    /// A prompt with only a message.
    pub fn new(message: impl Into<String>) -> Self {
        PromptPayload {
            message: message.into(),
            thinking: None,
            provider: None,
            model: None,
            tool_schema_version: None,
            fallback_models: Vec::new(),
        }
    }

    /// Parses and validates a prompt payload.
    pub fn parse(plaintext: &str) -> Result<Self, Violation> {
        let m = parse_object(plaintext)?;
        let fallback_models = match m.get("fallback_models") {
            None => Vec::new(),
            Some(Value::Array(a)) if a.len() <= MAX_FALLBACK_MODELS => a
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| invalid("`fallback_models` must hold strings"))
                })
                .collect::<Result<_, _>>()?,
            Some(Value::Array(_)) => {
                return Err(invalid(format!(
                    "`fallback_models` holds more than {MAX_FALLBACK_MODELS} models"
                )))
            }
            Some(_) => return Err(invalid("`fallback_models` must be an array")),
        };
        Ok(PromptPayload {
            message: req_str(&m, "message", 1)?.to_string(),
            thinking: opt_enum(&m, "thinking", &THINKING_LEVELS)?.map(str::to_string),
            provider: opt_str(&m, "provider", 1)?.map(str::to_string),
            model: opt_str(&m, "model", 1)?.map(str::to_string),
            tool_schema_version: opt_uint(&m, "tool_schema_version", 1, u64::MAX)?,
            fallback_models,
        })
    }

    /// The wire JSON.
    pub fn to_json(&self) -> String {
        with_ver(self)
    }
}

fn with_ver<T: Serialize>(t: &T) -> String {
    let mut v = serde_json::to_value(t).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.insert("ver".into(), Value::from(1));
    }
    v.to_string()
}

/// An ai.cancel (25806) payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CancelPayload {
    /// Why: `user_cancel`, `timeout` or `policy`.
    pub reason: String,
}

impl CancelPayload {
    /// Parses and validates a cancel payload.
    pub fn parse(plaintext: &str) -> Result<Self, Violation> {
        let m = parse_object(plaintext)?;
        let reason = opt_enum(&m, "reason", &CANCEL_REASONS)?
            .ok_or_else(|| invalid("`reason` is missing"))?;
        Ok(CancelPayload {
            reason: reason.into(),
        })
    }

    /// The wire JSON.
    pub fn to_json(&self) -> String {
        with_ver(self)
    }
}

/// Token usage in a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Tokens read.
    pub input_tokens: u64,
    /// Tokens written.
    pub output_tokens: u64,
}

/// An ai.response (25803) payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResponsePayload {
    /// The complete response text (or a compatibility envelope).
    pub text: String,
    /// Unix seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<u64>,
    /// Tokens spent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

impl ResponsePayload {
    /// Parses and validates a response payload.
    pub fn parse(plaintext: &str) -> Result<Self, Violation> {
        let m = parse_object(plaintext)?;
        let usage = match opt_object(&m, "usage")? {
            None => None,
            Some(u) => Some(Usage {
                input_tokens: opt_uint(u, "input_tokens", 0, u64::MAX)?
                    .ok_or_else(|| invalid("usage.input_tokens is missing"))?,
                output_tokens: opt_uint(u, "output_tokens", 0, u64::MAX)?
                    .ok_or_else(|| invalid("usage.output_tokens is missing"))?,
            }),
        };
        Ok(ResponsePayload {
            text: req_str(&m, "text", 0)?.to_string(),
            timestamp: opt_uint(&m, "timestamp", 0, u64::MAX)?,
            usage,
        })
    }

    /// The wire JSON.
    pub fn to_json(&self) -> String {
        with_ver(self)
    }
}

/// An ai.delta (25801) payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeltaPayload {
    /// The fragment (or a compatibility envelope).
    pub text: String,
    /// Position in the run, contiguous from 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// Unix seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<u64>,
}

impl DeltaPayload {
    /// Parses and validates a delta payload.
    pub fn parse(plaintext: &str) -> Result<Self, Violation> {
        let m = parse_object(plaintext)?;
        Ok(DeltaPayload {
            text: req_str(&m, "text", 0)?.to_string(),
            seq: opt_uint(&m, "seq", 0, u64::MAX)?,
            timestamp: opt_uint(&m, "timestamp", 0, u64::MAX)?,
        })
    }

    /// The wire JSON.
    pub fn to_json(&self) -> String {
        with_ver(self)
    }
}

/// An ai.status (25800) payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusPayload {
    /// `thinking`, `tool_use` or `done`.
    pub state: String,
    /// Percent done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<u64>,
    /// Free text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub info: Option<String>,
}

impl StatusPayload {
    /// Parses and validates a status payload.
    pub fn parse(plaintext: &str) -> Result<Self, Violation> {
        let m = parse_object(plaintext)?;
        Ok(StatusPayload {
            state: opt_enum(&m, "state", &STATUS_STATES)?
                .ok_or_else(|| invalid("`state` is missing"))?
                .into(),
            progress: opt_uint(&m, "progress", 0, 100)?,
            info: opt_str(&m, "info", 0)?.map(str::to_string),
        })
    }

    /// The wire JSON.
    pub fn to_json(&self) -> String {
        with_ver(self)
    }
}

/// An ai.tool_call (25804) payload: canonical fields, or a compatibility envelope in `text`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCallPayload {
    /// Tool name (canonical form).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `start` or `result` (canonical form).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Arguments, on start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// Output, on result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Whether the tool succeeded, on result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub success: Option<bool>,
    /// Run time, on result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// Envelope form.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

impl ToolCallPayload {
    /// Parses and validates a tool-call payload (exactly one of the two forms, per the schema's `oneOf`).
    pub fn parse(plaintext: &str) -> Result<Self, Violation> {
        let m = parse_object(plaintext)?;
        let text = opt_str(&m, "text", 1)?.map(str::to_string);
        let name = opt_str(&m, "name", 1)?.map(str::to_string);
        let phase = opt_enum(&m, "phase", &["start", "result"])?.map(str::to_string);
        let canonical = name.is_some() && phase.is_some();
        if canonical == text.is_some() {
            return Err(invalid(
                "a tool call carries either `text` or both `name` and `phase`",
            ));
        }
        let success = match m.get("success") {
            None => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => return Err(invalid("`success` must be a boolean")),
        };
        Ok(ToolCallPayload {
            name,
            phase,
            arguments: opt_object(&m, "arguments")?.cloned().map(Value::Object),
            output: opt_object(&m, "output")?.cloned().map(Value::Object),
            success,
            duration_ms: opt_uint(&m, "duration_ms", 0, u64::MAX)?,
            text,
        })
    }

    /// The call as its canonical fields, read out of its compatibility envelope when it came in that form
    /// (`name`, `phase`, and `arguments`, `output`, `success`, `duration_ms` when the envelope has them);
    /// unchanged when it came canonical or its text is not a tool envelope (then only `text` says what it
    /// is). Canonical fields already present stay authoritative.
    pub fn read_envelope(mut self) -> Self {
        let Some(text) = self.text.as_deref() else {
            return self;
        };
        let Ok(e) = super::envelope::Envelope::read(text, super::envelope::EnvelopeOf::ToolCall)
        else {
            return self;
        };
        let object = |key: &str| {
            e.get(key)
                .and_then(|v| serde_json::from_str::<Value>(v).ok())
                .filter(Value::is_object)
        };
        self.name = self.name.or_else(|| e.get("name").map(str::to_string));
        self.phase = self.phase.or_else(|| {
            e.get("phase")
                .filter(|p| matches!(*p, "start" | "result"))
                .map(str::to_string)
        });
        self.arguments = self.arguments.or_else(|| object("arguments"));
        self.output = self.output.or_else(|| object("output"));
        self.success = self
            .success
            .or_else(|| e.get("success").and_then(|v| v.parse().ok()));
        self.duration_ms = self
            .duration_ms
            .or_else(|| e.get("duration_ms").and_then(|v| v.parse().ok()));
        self
    }

    /// The wire JSON.
    pub fn to_json(&self) -> String {
        with_ver(self)
    }
}

/// An ai.error (25805) payload.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorPayload {
    /// The code.
    #[serde(serialize_with = "ser_code")]
    pub code: ErrorCode,
    /// For people (at least one character).
    pub message: String,
    /// Seconds to wait before retrying.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
    /// Extra detail.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

fn ser_code<S: serde::Serializer>(c: &ErrorCode, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(c.as_str())
}

impl ErrorPayload {
    /// Parses and validates an error payload. A code outside the spec's enum is treated as
    /// `INVALID_SCHEMA`, as the spec says of unknown protocol content, with the agent's own code shown
    /// before its message; the error still ends the run.
    pub fn parse(plaintext: &str) -> Result<Self, Violation> {
        let m = parse_object(plaintext)?;
        let message = req_str(&m, "message", 1)?;
        let (code, message) = match ErrorCode::parse(req_str(&m, "code", 1)?) {
            ErrorCode::Unknown(raw) => (
                ErrorCode::InvalidSchema,
                format!("the agent's error code {raw:?} is not one of the spec's: {message}"),
            ),
            known => (known, message.to_string()),
        };
        Ok(ErrorPayload {
            code,
            message,
            retry_after: opt_uint(&m, "retry_after", 1, u64::MAX)?,
            details: opt_object(&m, "details")?.cloned().map(Value::Object),
        })
    }

    /// The wire JSON.
    pub fn to_json(&self) -> String {
        with_ver(self)
    }
}

/// An ai.info (31340) payload (unencrypted).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InfoPayload {
    /// Streams deltas.
    pub supports_streaming: bool,
    /// Accepts and sends NIP-59 gift wraps.
    pub supports_nip59: bool,
    /// Not a NIP-90 DVM.
    pub dvm_compatible: bool,
    /// Encryption schemes (always holds `nip44`).
    pub encryption: Vec<String>,
    /// Models offered.
    pub supported_models: Vec<String>,
    /// Model used when a prompt names none.
    pub default_model: String,
    /// Tool names.
    pub tool_names: Vec<String>,
    /// The tool schema version in force.
    pub tool_schema_version: u64,
    /// Largest prompt message accepted, in bytes.
    pub max_prompt_bytes: u64,
    /// Largest context, in tokens.
    pub max_context_tokens: u64,
    /// Largest answer sent whole in a plain response, in bytes (an extension: one NIP-44 message holds
    /// the response; a larger answer is cut to fit and says so).
    pub max_response_bytes: u64,
    /// The same for a gift-wrapped run (NIP-59), whose response is sealed and wrapped in NIP-44 twice.
    pub max_response_bytes_nip59: u64,
    /// Per-tool schemas.
    pub tool_schemas: Map<String, Value>,
    /// What the agent's tokens cost, when its operator says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pricing_hints: Option<PricingHints>,
}

/// The most a price per 1,000 tokens may be: far beyond any model's, so a typo (a price per million given
/// per thousand) is caught rather than published.
pub const MAX_PRICE_PER_1K: f64 = 1000.0;

/// ai.info's `pricing_hints`: a currency and the price of 1,000 prompt and output tokens.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PricingHints {
    /// ISO 4217 code (`USD`).
    pub currency: String,
    /// Per 1,000 prompt tokens.
    pub per_1k_prompt_tokens: f64,
    /// Per 1,000 output tokens.
    pub per_1k_output_tokens: f64,
}

/// Why [`PricingHints`] cannot be published.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PricingError {
    /// The currency is not three capital letters.
    #[error("currency {0:?} is not an ISO 4217 code such as \"USD\"")]
    Currency(String),
    /// A price is negative, not finite, or above [`MAX_PRICE_PER_1K`].
    #[error("{what} {price} is not a price from 0 to {max}", max = MAX_PRICE_PER_1K)]
    Price {
        /// Which price (`per_1k_prompt_tokens`, `per_1k_output_tokens`).
        what: &'static str,
        /// Its value.
        price: f64,
    },
}

impl PricingHints {
    /// Checked: three capital letters, and prices from 0 to [`MAX_PRICE_PER_1K`]; why not otherwise.
    pub fn new(currency: &str, prompt: f64, output: f64) -> Result<PricingHints, PricingError> {
        if currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(PricingError::Currency(currency.to_owned()));
        }
        for (what, v) in [
            ("per_1k_prompt_tokens", prompt),
            ("per_1k_output_tokens", output),
        ] {
            if !(v.is_finite() && (0.0..=MAX_PRICE_PER_1K).contains(&v)) {
                return Err(PricingError::Price { what, price: v });
            }
        }
        Ok(PricingHints {
            currency: currency.to_string(),
            per_1k_prompt_tokens: prompt,
            per_1k_output_tokens: output,
        })
    }
}

impl InfoPayload {
    /// The wire JSON.
    pub fn to_json(&self) -> String {
        with_ver(self)
    }

    /// Checks an ai.info content against the spec's schema (required `ver`, `encryption` holding `nip44`,
    /// `tool_names`), returning the object.
    pub fn validate(content: &str) -> Result<Map<String, Value>, Violation> {
        let m = parse_object(content)?;
        match m.get("encryption") {
            Some(Value::Array(a)) if a.iter().any(|v| v == "nip44") => {}
            _ => return Err(invalid("`encryption` must be an array holding \"nip44\"")),
        }
        match m.get("tool_names") {
            Some(Value::Array(a)) if a.iter().all(Value::is_string) => {}
            _ => return Err(invalid("`tool_names` must be an array of strings")),
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests;
