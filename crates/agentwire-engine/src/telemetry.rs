//! Traces of turns after the OpenTelemetry GenAI semantic conventions: the engine opens an
//! `invoke_agent {agent}` span for each turn it runs and hands the agent a [`TurnTrace`], under which a model
//! agent opens a `chat {model}` span for each model call and an `execute_tool {tool}` span for each tool call.
//!
//! This module speaks the OpenTelemetry API only: the exporter (OTLP/HTTP, batched on its own thread) is set
//! up by the binary, which hands the engines a [`Telemetry`] over its tracer. Without one, [`Telemetry::off`],
//! every span is a no-op and a turn has no trace id.
//!
//! What a span may carry: names, ids, models, token counts, finish reasons and error types. A prompt, an
//! answer, tool arguments and tool results go in only when the operator set `content = true`
//! ([`TurnTrace::content`]), and never a credential.

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Array, Context, KeyValue, StringValue, Value};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracer;
use std::collections::HashMap;
use std::sync::Arc;

/// The W3C trace-context header that carries a trace across a hop (HTTP, MCP `_meta`, fisk-ai).
pub const TRACEPARENT: &str = "traceparent";

/// Longest `traceparent` read from a peer: the W3C version-00 form is 55 characters, and a later version may
/// only append fields; anything much longer is not a trace context and is ignored rather than parsed.
pub const MAX_TRACEPARENT_LEN: usize = 256;

/// The GenAI semantic conventions' attribute names, and ours.
pub mod attr {
    /// What the span does: `invoke_agent`, `chat`, `execute_tool`.
    pub const OPERATION: &str = "gen_ai.operation.name";
    /// The agent's name.
    pub const AGENT_NAME: &str = "gen_ai.agent.name";
    /// The conversation the turn belongs to.
    pub const CONVERSATION_ID: &str = "gen_ai.conversation.id";
    /// The model asked for.
    pub const REQUEST_MODEL: &str = "gen_ai.request.model";
    /// The model that answered, as the server named it.
    pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
    /// Input tokens spent.
    pub const INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
    /// Output tokens spent.
    pub const OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
    /// Why the model (or the turn) stopped, one per choice.
    pub const FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
    /// The tool called.
    pub const TOOL_NAME: &str = "gen_ai.tool.name";
    /// The model's id for the tool call.
    pub const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
    /// The tool call's arguments (content: only with `content = true`).
    pub const TOOL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
    /// The tool call's result (content: only with `content = true`).
    pub const TOOL_RESULT: &str = "gen_ai.tool.call.result";
    /// The prompt, as GenAI input messages (content: only with `content = true`).
    pub const INPUT_MESSAGES: &str = "gen_ai.input.messages";
    /// The answer, as GenAI output messages (content: only with `content = true`).
    pub const OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
    /// The class of a failure (a failure code, a tool's error).
    pub const ERROR_TYPE: &str = "error.type";
    /// The front that took the turn: `nipxx`, `fisk`, `roost`, `tasks`, `http`.
    pub const PROTOCOL: &str = "agentwire.protocol";
}

/// The engines' tracer, or none: cheap to clone, shared by every engine of a daemon.
#[derive(Clone, Default)]
pub struct Telemetry {
    inner: Option<Arc<Exporting>>,
}

struct Exporting {
    tracer: SdkTracer,
    content: bool,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("exporting", &self.exporting())
            .field("content", &self.content())
            .finish()
    }
}

/// What the engine knows of a turn when its span opens.
#[derive(Debug, Clone, Copy)]
pub struct TurnSpan<'a> {
    /// The agent's name.
    pub agent: &'a str,
    /// The front that took the turn.
    pub protocol: &'a str,
    /// The turn's conversation.
    pub conversation: &'a str,
    /// The model the turn asks for.
    pub model: &'a str,
    /// The prompt (into the span only with `content = true`).
    pub prompt: &'a str,
    /// The W3C `traceparent` the requester sent: the turn's span continues that trace.
    pub traceparent: Option<&'a str>,
}

impl Telemetry {
    /// No traces: every span is a no-op.
    pub fn off() -> Self {
        Telemetry::default()
    }

    /// Traces through `tracer` (whose provider exports them); with `content`, prompts and answers go in.
    pub fn new(tracer: SdkTracer, content: bool) -> Self {
        Telemetry {
            inner: Some(Arc::new(Exporting { tracer, content })),
        }
    }

    /// Whether traces are exported.
    pub fn exporting(&self) -> bool {
        self.inner.is_some()
    }

    /// Whether the exported traces carry the conversation itself.
    pub fn content(&self) -> bool {
        self.inner.as_ref().is_some_and(|e| e.content)
    }

    /// Opens a turn's `invoke_agent {agent}` span, under the requester's trace when it sent one.
    pub fn start_turn(&self, turn: TurnSpan<'_>) -> TurnTrace {
        let Some(e) = &self.inner else {
            return TurnTrace::off();
        };
        let parent = turn.traceparent.map(parent_context).unwrap_or_default();
        let mut attributes = vec![
            KeyValue::new(attr::OPERATION, "invoke_agent"),
            KeyValue::new(attr::AGENT_NAME, turn.agent.to_string()),
            KeyValue::new(attr::CONVERSATION_ID, turn.conversation.to_string()),
            KeyValue::new(attr::PROTOCOL, turn.protocol.to_string()),
        ];
        if !turn.model.is_empty() {
            attributes.push(KeyValue::new(attr::REQUEST_MODEL, turn.model.to_string()));
        }
        if e.content {
            attributes.push(KeyValue::new(
                attr::INPUT_MESSAGES,
                messages("user", turn.prompt),
            ));
        }
        let span = e
            .tracer
            .span_builder(format!("invoke_agent {}", turn.agent))
            .with_kind(SpanKind::Internal)
            .with_attributes(attributes)
            .start_with_context(&e.tracer, &parent);
        TurnTrace {
            inner: Some(Arc::new(Traced {
                tracer: e.tracer.clone(),
                cx: parent.with_span(span),
                content: e.content,
            })),
        }
    }
}

/// The context a W3C `traceparent` names; an empty one (a new trace) when it is not one.
fn parent_context(traceparent: &str) -> Context {
    if traceparent.len() > MAX_TRACEPARENT_LEN {
        return Context::new();
    }
    let carrier = HashMap::from([(TRACEPARENT.to_string(), traceparent.trim().to_string())]);
    TraceContextPropagator::new().extract(&carrier)
}

/// GenAI messages of one `role` with one text part, as the conventions' JSON.
fn messages(role: &str, text: &str) -> String {
    serde_json::json!([{ "role": role, "parts": [{ "type": "text", "content": text }] }])
        .to_string()
}

/// One open span of a turn (the turn's own, or a model or tool call's under it): cheap to clone. The span
/// ends at [`end`](Self::end), or when the last clone is dropped. Without telemetry every call is a no-op.
#[derive(Clone, Default)]
pub struct TurnTrace {
    inner: Option<Arc<Traced>>,
}

struct Traced {
    tracer: SdkTracer,
    cx: Context,
    content: bool,
}

impl std::fmt::Debug for TurnTrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.trace_id() {
            Some(id) => write!(f, "TurnTrace({id})"),
            None => f.write_str("TurnTrace(off)"),
        }
    }
}

impl TurnTrace {
    /// No trace: every call is a no-op.
    pub fn off() -> Self {
        TurnTrace::default()
    }

    /// The trace's id (32 lowercase hex digits), when traces are exported.
    pub fn trace_id(&self) -> Option<String> {
        let t = self.inner.as_ref()?;
        Some(t.cx.span().span_context().trace_id().to_string())
    }

    /// Whether this trace carries the conversation's text (prompts, answers, tool arguments and results).
    pub fn content(&self) -> bool {
        self.inner.as_ref().is_some_and(|t| t.content)
    }

    /// The W3C `traceparent` naming this span, for the next hop (a model call, an MCP call).
    pub fn traceparent(&self) -> Option<String> {
        let t = self.inner.as_ref()?;
        let mut carrier = HashMap::new();
        TraceContextPropagator::new().inject_context(&t.cx, &mut carrier);
        carrier.remove(TRACEPARENT)
    }

    /// Opens a `chat {model}` span under this one, for one model call.
    pub fn chat(&self, model: &str) -> TurnTrace {
        self.child(
            format!("chat {model}"),
            SpanKind::Client,
            vec![
                KeyValue::new(attr::OPERATION, "chat"),
                KeyValue::new(attr::REQUEST_MODEL, model.to_string()),
            ],
        )
    }

    /// Opens an `execute_tool {tool}` span under this one, for one tool call (`call_id`: the model's id).
    pub fn execute_tool(&self, tool: &str, call_id: &str) -> TurnTrace {
        self.child(
            format!("execute_tool {tool}"),
            SpanKind::Internal,
            vec![
                KeyValue::new(attr::OPERATION, "execute_tool"),
                KeyValue::new(attr::TOOL_NAME, tool.to_string()),
                KeyValue::new(attr::TOOL_CALL_ID, call_id.to_string()),
            ],
        )
    }

    fn child(&self, name: String, kind: SpanKind, attributes: Vec<KeyValue>) -> TurnTrace {
        let Some(t) = &self.inner else {
            return TurnTrace::off();
        };
        let span = t
            .tracer
            .span_builder(name)
            .with_kind(kind)
            .with_attributes(attributes)
            .start_with_context(&t.tracer, &t.cx);
        TurnTrace {
            inner: Some(Arc::new(Traced {
                tracer: t.tracer.clone(),
                cx: t.cx.with_span(span),
                content: t.content,
            })),
        }
    }

    /// Sets a string attribute.
    pub fn set_str(&self, key: &'static str, value: &str) {
        self.set(KeyValue::new(key, value.to_string()));
    }

    /// Sets an integer attribute (token counts: saturated at `i64::MAX`).
    pub fn set_u64(&self, key: &'static str, value: u64) {
        self.set(KeyValue::new(key, i64::try_from(value).unwrap_or(i64::MAX)));
    }

    /// Sets a string-array attribute (`gen_ai.response.finish_reasons`).
    pub fn set_strs(&self, key: &'static str, values: &[&str]) {
        let values: Vec<StringValue> = values.iter().map(|v| v.to_string().into()).collect();
        self.set(KeyValue::new(key, Value::Array(Array::String(values))));
    }

    /// Sets the token usage attributes.
    pub fn set_usage(&self, input_tokens: u64, output_tokens: u64) {
        self.set_u64(attr::INPUT_TOKENS, input_tokens);
        self.set_u64(attr::OUTPUT_TOKENS, output_tokens);
    }

    /// Sets a content attribute (a prompt, an answer, tool arguments or a result), made only when this
    /// trace carries content: otherwise nothing is built and nothing is set.
    pub fn set_content(&self, key: &'static str, value: impl FnOnce() -> String) {
        if self.content() {
            self.set(KeyValue::new(key, value()));
        }
    }

    /// Sets the answer, as GenAI output messages (only when this trace carries content).
    pub fn set_answer(&self, text: &str) {
        self.set_content(attr::OUTPUT_MESSAGES, || messages("assistant", text));
    }

    /// Marks the span failed: `error.type` and an error status with `error_type` as its description (a
    /// failure code or a class of error, never a message that may quote content).
    pub fn fail(&self, error_type: &str) {
        if let Some(t) = &self.inner {
            let span = t.cx.span();
            span.set_attribute(KeyValue::new(attr::ERROR_TYPE, error_type.to_string()));
            span.set_status(Status::error(error_type.to_string()));
        }
    }

    /// Ends the span (later calls on it, and on its clones, change nothing).
    pub fn end(&self) {
        if let Some(t) = &self.inner {
            t.cx.span().end();
        }
    }

    fn set(&self, kv: KeyValue) {
        if let Some(t) = &self.inner {
            t.cx.span().set_attribute(kv);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_is_silent() {
        let t = Telemetry::off().start_turn(TurnSpan {
            agent: "a",
            protocol: "fisk",
            conversation: "c",
            model: "m",
            prompt: "secret",
            traceparent: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        });
        assert_eq!(t.trace_id(), None, "no trace id without an export");
        assert_eq!(t.traceparent(), None);
        assert!(!t.content());
        assert!(t.chat("m").trace_id().is_none());
    }

    #[test]
    fn a_turn_continues_the_callers_trace_and_hands_it_on() {
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        use opentelemetry::trace::TracerProvider as _;
        let telemetry = Telemetry::new(provider.tracer("test"), false);
        let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let turn = telemetry.start_turn(TurnSpan {
            agent: "a",
            protocol: "fisk",
            conversation: "c",
            model: "m",
            prompt: "p",
            traceparent: Some(parent),
        });
        assert_eq!(
            turn.trace_id().as_deref(),
            Some("0af7651916cd43dd8448eb211c80319c")
        );
        let chat = turn.chat("m");
        let header = chat
            .traceparent()
            .expect("a traceparent for the model call");
        assert!(header.starts_with("00-0af7651916cd43dd8448eb211c80319c-"));
        assert_ne!(header, parent, "the next hop's parent is the chat span");
        let fresh = telemetry.start_turn(TurnSpan {
            traceparent: Some("not a trace context"),
            ..TurnSpan {
                agent: "a",
                protocol: "fisk",
                conversation: "c",
                model: "m",
                prompt: "p",
                traceparent: None,
            }
        });
        let id = fresh.trace_id().unwrap();
        assert_eq!(id.len(), 32);
        assert_ne!(id, "0af7651916cd43dd8448eb211c80319c");
        assert_ne!(id, "0".repeat(32), "a bad traceparent starts a new trace");
    }
}
