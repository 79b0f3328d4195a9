//! What an OpenAI-compatible server's refusal means for the turn: the canonical failure it maps to, and
//! whether the next model may be tried. Pure: status, headers and body in.
//!
//! The failure's message is fixed for each class of status and never carries the body: the turn's failure
//! goes to whoever prompted (over NIP-XX, anyone the policy lets in), and a server's body may echo the
//! request, its `Authorization: Bearer` key included. The body is only read to classify (a context overflow,
//! a missing model) and is logged at `debug` by the caller with secrets removed.

use agentwire_core::{Failure, TurnFailure};

/// A provider's answer that is not a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// What the turn fails with (when no fallback model takes it).
    pub failure: Failure,
    /// The model itself is unavailable: the next fallback model may serve the turn.
    pub try_next_model: bool,
}

/// The `message` and `code` (or `type`) of an OpenAI-style error body (`{"error":{"message":...,"code":...}}`),
/// or the body itself, lower-cased: what classifies the refusal. Never shown.
fn provider_words(body: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let error = parsed.as_ref().map(|v| v.get("error").unwrap_or(v));
    let message = error
        .and_then(|e| {
            e.get("message")
                .and_then(|m| m.as_str())
                .or_else(|| e.as_str())
        })
        .unwrap_or(body);
    let code = error
        .and_then(|e| e.get("code").or_else(|| e.get("type")))
        .and_then(|c| c.as_str())
        .unwrap_or_default();
    format!("{message} {code}").to_lowercase()
}

/// `Retry-After` in seconds (an HTTP date is not honoured: it needs a clock, and servers of chat
/// completions send seconds).
pub fn retry_after(header: Option<&str>) -> Option<u64> {
    header?.trim().parse::<u64>().ok()
}

/// What an HTTP status with `body` means. `model` names the model asked for (the prompt's or the
/// configuration's, not the server's words).
pub fn refused(status: u16, retry_after_header: Option<&str>, body: &str, model: &str) -> Refused {
    let words = provider_words(body);
    let model_missing = status == 404
        || words.contains("model_not_found")
        || (words.contains("model")
            && (words.contains("not found") || words.contains("does not exist")));
    let context = words.contains("context_length_exceeded")
        || words.contains("context length")
        || words.contains("context window")
        || words.contains("maximum context")
        || words.contains("too many tokens");
    let (code, text, try_next_model) = match status {
        429 => (
            TurnFailure::ProviderBusy,
            format!("the model server is rate limiting requests (HTTP {status})"),
            false,
        ),
        500..=599 => (
            TurnFailure::ProviderBusy,
            format!("the model server failed (HTTP {status})"),
            false,
        ),
        401 | 403 => (
            TurnFailure::ProviderRefused,
            format!("the model server refused the credentials (HTTP {status})"),
            false,
        ),
        _ if context => (
            TurnFailure::ContextExceeded,
            format!("the conversation is larger than {model}'s context window (HTTP {status})"),
            false,
        ),
        _ if model_missing => (
            TurnFailure::ProviderRefused,
            format!("model or endpoint not found: the model server does not offer {model} (HTTP {status})"),
            true,
        ),
        _ => (
            TurnFailure::AgentFailed,
            format!("the model server refused the request (HTTP {status})"),
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
        assert_eq!(
            busy.failure.message,
            "the model server is rate limiting requests (HTTP 429)"
        );
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
        assert_eq!(
            other.failure.message,
            "the model server refused the request (HTTP 422)"
        );
    }

    #[test]
    fn no_status_repeats_the_body() {
        let body = r#"{"error":{"message":"echo: Authorization: Bearer sk-live-9 (key sk-live-9)","code":"x"}}"#;
        for status in [400, 401, 402, 403, 404, 408, 413, 422, 429, 500, 502, 503] {
            let r = refused(status, Some("3"), body, "m");
            let m = &r.failure.message;
            assert!(
                !m.contains("sk-live-9") && !m.contains("Bearer") && !m.contains("echo"),
                "{status}: {m}"
            );
            assert!(m.contains(&format!("(HTTP {status})")), "{status}: {m}");
        }
    }

    #[test]
    fn retry_after_takes_seconds_only() {
        assert_eq!(retry_after(Some(" 30 ")), Some(30));
        assert_eq!(retry_after(Some("Wed, 21 Oct 2015 07:28:00 GMT")), None);
        assert_eq!(retry_after(None), None);
    }
}
