//! What an OpenAI-compatible server's refusal means for the turn: the canonical failure it maps to, and
//! whether the next model may be tried. Pure: status, headers and body in.

use agentwire_core::{Failure, TurnFailure};

/// The most characters of a provider's error message carried into a turn's failure.
pub const MAX_PROVIDER_MESSAGE_CHARS: usize = 200;

/// A provider's answer that is not a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// What the turn fails with (when no fallback model takes it).
    pub failure: Failure,
    /// The model itself is unavailable: the next fallback model may serve the turn.
    pub try_next_model: bool,
}

/// The `message` of an OpenAI-style error body (`{"error":{"message":...,"code":...}}`), or the body's
/// start, clipped.
fn provider_message(body: &str) -> (String, Option<String>) {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let error = parsed.as_ref().map(|v| v.get("error").unwrap_or(v));
    let message = error
        .and_then(|e| {
            e.get("message")
                .and_then(|m| m.as_str())
                .or_else(|| e.as_str())
        })
        .map(String::from)
        .unwrap_or_else(|| body.trim().to_string());
    let code = error
        .and_then(|e| e.get("code").or_else(|| e.get("type")))
        .and_then(|c| c.as_str())
        .map(String::from);
    (clip(&message), code)
}

fn clip(s: &str) -> String {
    let s = s.replace(['\n', '\r'], " ");
    match s.char_indices().nth(MAX_PROVIDER_MESSAGE_CHARS) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s,
    }
}

/// `Retry-After` in seconds (an HTTP date is not honoured: it needs a clock, and servers of chat
/// completions send seconds).
pub fn retry_after(header: Option<&str>) -> Option<u64> {
    header?.trim().parse::<u64>().ok()
}

/// What an HTTP status with `body` means. `model` names the model asked for.
pub fn refused(status: u16, retry_after_header: Option<&str>, body: &str, model: &str) -> Refused {
    let (message, code) = provider_message(body);
    let lower = format!(
        "{} {}",
        message.to_lowercase(),
        code.clone().unwrap_or_default()
    );
    let model_missing = status == 404
        || lower.contains("model_not_found")
        || (lower.contains("model")
            && (lower.contains("not found") || lower.contains("does not exist")));
    let context = lower.contains("context_length_exceeded")
        || lower.contains("context length")
        || lower.contains("context window")
        || lower.contains("maximum context")
        || lower.contains("too many tokens");
    let (code, text, try_next_model) = match status {
        429 | 500..=599 => (
            TurnFailure::ProviderBusy,
            format!("the model server is busy ({status}): {message}"),
            false,
        ),
        // The body of a refused credential may echo part of the key: it is not repeated.
        401 | 403 => (
            TurnFailure::ProviderRefused,
            format!("the model server refused the credentials ({status})"),
            false,
        ),
        _ if context => (
            TurnFailure::ContextExceeded,
            format!("the conversation is larger than {model}'s context window: {message}"),
            false,
        ),
        _ if model_missing => (
            TurnFailure::ProviderRefused,
            format!("the model server does not offer {model} ({status}): {message}"),
            true,
        ),
        _ => (
            TurnFailure::AgentFailed,
            format!("the model server refused the request ({status}): {message}"),
            false,
        ),
    };
    let mut failure = Failure::new(code, text);
    if code == TurnFailure::ProviderBusy {
        failure.retry_after = retry_after(retry_after_header);
    }
    Refused {
        failure,
        try_next_model,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire_core::FailureCode;

    fn code(r: &Refused) -> FailureCode {
        r.failure.code.clone()
    }

    #[test]
    fn each_status_maps_to_its_failure() {
        let busy = refused(429, Some("7"), r#"{"error":{"message":"slow down"}}"#, "m");
        assert_eq!(code(&busy), TurnFailure::ProviderBusy);
        assert_eq!(busy.failure.retry_after, Some(7));
        assert!(busy.failure.message.contains("slow down"));
        let down = refused(503, None, "upstream unavailable", "m");
        assert_eq!(code(&down), TurnFailure::ProviderBusy);
        assert_eq!(down.failure.retry_after, None);
        let key = refused(
            401,
            None,
            r#"{"error":{"message":"Incorrect API key provided: sk-abc123"}}"#,
            "m",
        );
        assert_eq!(code(&key), TurnFailure::ProviderRefused);
        assert!(!key.failure.message.contains("sk-abc123"));
        assert_eq!(
            code(&refused(403, None, "", "m")),
            TurnFailure::ProviderRefused
        );
        let missing = refused(
            404,
            None,
            r#"{"error":{"message":"model 'x' not found"}}"#,
            "x",
        );
        assert_eq!(code(&missing), TurnFailure::ProviderRefused);
        assert!(missing.try_next_model);
        let missing = refused(
            400,
            None,
            r#"{"error":{"message":"The model `x` does not exist","code":"model_not_found"}}"#,
            "x",
        );
        assert!(missing.try_next_model);
        let long = refused(
            400,
            None,
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}"#,
            "m",
        );
        assert_eq!(code(&long), TurnFailure::ContextExceeded);
        assert!(!long.try_next_model);
        let other = refused(422, None, &"x".repeat(5000), "m");
        assert_eq!(code(&other), TurnFailure::AgentFailed);
        assert!(other.failure.message.chars().count() < MAX_PROVIDER_MESSAGE_CHARS + 80);
    }

    #[test]
    fn retry_after_takes_seconds_only() {
        assert_eq!(retry_after(Some(" 30 ")), Some(30));
        assert_eq!(retry_after(Some("Wed, 21 Oct 2015 07:28:00 GMT")), None);
        assert_eq!(retry_after(None), None);
    }
}
