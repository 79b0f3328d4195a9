//! The demo agent: offline and deterministic, chosen by the prompt's first word.
//!
//! | prompt | what happens |
//! | --- | --- |
//! | `calc <expr>` | calls its `calculator` tool (start and result telemetry), replies with the value |
//! | `sleep <ms>` | streams a delta every 100 ms for that long, then replies (for cancel tests) |
//! | `fail <text>` | ends in failure with that text |
//! | `empty` | produces no text (the engine turns that into an empty-response failure) |
//! | `big <n>` | replies with n bytes |
//! | `quick <text>` | replies `<text>` at once, with no status or deltas (for latency benchmarks) |
//! | `ask <q> \| a \| b` | asks a person to pick one option (select), replies with the chosen option |
//! | `choose <q> \| a \| b` | asks a person to pick one or more options, replies with them joined by `, ` |
//! | `confirm <q>` | asks a yes/no question, replies `yes` or `no` |
//! | `input <q>` | asks for a line of text, replies with it |
//! | `approve <command>` | calls its approval-gated `shell` tool (which only pretends): `ran <command>` or `declined` |
//! | `file <name> <text>` | posts a file of that text (a task card links it), replies `Wrote <name>` |
//! | `handoff [name]` | hands the rest of the turn to a new thread (a task card opens one), replies `Continuing in <name>` |
//! | anything else | replies `You said: <message>`, streamed as at least two deltas |
//!
//! Usage counts words as tokens: the prompt's words in, the reply's words out.
//!
//! Under a protocol that parks on cancel (fisk-ai), `sleep` and the questions stop at their next boundary
//! and end suspended with a checkpoint; a resumed turn carries on from it (`sleep` sleeps what was left).

use crate::calc::evaluate;
use agentwire_core::{
    Failure, FailureCode, Outcome, Refusal, StatusState, TurnEvent, TurnFailure, TurnResult, Usage,
};
use agentwire_engine::{Agent, AgentCard, ToolSpec, TurnContext, TurnInput};
use futures_util::future::BoxFuture;
use std::time::{Duration, Instant};

mod ask;

/// The demo agent's one model.
pub const DEMO_MODEL: &str = "demo-1";
/// Longest `sleep` the demo agent does: ten minutes is plenty for any cancel test and keeps a typo from
/// tying up a conversation for days.
pub const DEMO_MAX_SLEEP_MS: u64 = 600_000;
/// Largest `big` reply: beyond what one NIP-44 v2 message holds (65,535 bytes of plaintext), so the tests
/// can show how each protocol carries an answer too large for one message, and small enough that a typo
/// does not fill a journal.
pub const DEMO_MAX_BIG_BYTES: usize = 200_000;
/// The demo agent's approval-gated tool.
pub const DEMO_SHELL_TOOL: &str = "shell";
/// How often `sleep` streams a delta.
const SLEEP_TICK: Duration = Duration::from_millis(100);

/// The demo agent.
#[derive(Debug, Default, Clone)]
pub struct DemoAgent;

fn words(s: &str) -> u64 {
    s.split_whitespace().count() as u64
}

fn reply(input: &TurnInput, text: String) -> Outcome {
    let usage = Usage {
        input_tokens: words(&input.message),
        output_tokens: words(&text),
    };
    Outcome::Result(TurnResult {
        text,
        usage,
        stop_reason: "stop".into(),
    })
}

fn failure(input: &TurnInput, code: impl Into<FailureCode>, message: String) -> Outcome {
    let mut f = Failure::new(code, message);
    f.usage.input_tokens = words(&input.message);
    Outcome::Failure(f)
}

/// A turn parked where a resume can pick it up.
fn parked(
    input: &TurnInput,
    code: impl Into<FailureCode>,
    message: String,
    checkpoint: serde_json::Value,
) -> Outcome {
    let mut f = Failure::new(code, message).with_checkpoint(checkpoint);
    f.usage.input_tokens = words(&input.message);
    Outcome::Failure(f)
}

fn format_number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

impl Agent for DemoAgent {
    fn card(&self) -> AgentCard {
        AgentCard {
            name: "demo".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description:
                "agentwire's offline demo agent: echoes, calculates, sleeps, fails on request"
                    .into(),
            models: vec![DEMO_MODEL.into()],
            default_model: DEMO_MODEL.into(),
            tools: vec![
                ToolSpec {
                    name: "calculator".into(),
                    description: "Evaluate arithmetic expressions".into(),
                    input_schema: serde_json::json!({
                        "type": "object",
                        "properties": { "expr": { "type": "string" } },
                        "required": ["expr"]
                    }),
                    requires_approval: false,
                    output_schema: None,
                },
                ToolSpec {
                    name: DEMO_SHELL_TOOL.into(),
                    description: "Run a shell command (the demo only pretends to)".into(),
                    input_schema: serde_json::json!({
                        "type": "object",
                        "properties": { "command": { "type": "string" } },
                        "required": ["command"]
                    }),
                    requires_approval: true,
                    output_schema: None,
                },
            ],
            max_prompt_bytes: 32_000,
            max_context_tokens: 8_192,
        }
    }

    fn run(&self, input: TurnInput, ctx: TurnContext) -> BoxFuture<'static, Outcome> {
        Box::pin(async move { run(input, ctx).await })
    }
}

async fn run(input: TurnInput, ctx: TurnContext) -> Outcome {
    let events = ctx.events.clone();
    let msg = input.message.trim();
    let (word, rest) = match msg.split_once(char::is_whitespace) {
        Some((w, r)) => (w, r.trim()),
        None => (msg, ""),
    };
    let send = |ev: TurnEvent| {
        let events = events.clone();
        async move {
            // The receiver is gone only when the turn was cancelled; the engine drops this future then.
            let _ = events.send(ev).await;
        }
    };
    match word {
        "quick" => reply(&input, rest.to_string()),
        "empty" => reply(&input, String::new()),
        "fail" => {
            let text = if rest.is_empty() {
                "failed on request"
            } else {
                rest
            };
            failure(&input, TurnFailure::AgentFailed, text.to_string())
        }
        "big" => match rest.parse::<usize>() {
            Ok(n) if n <= DEMO_MAX_BIG_BYTES => {
                send(TurnEvent::Status {
                    state: StatusState::Thinking,
                    progress: None,
                    info: None,
                    usage: None,
                })
                .await;
                let text: String = "abcdefghijklmnopqrstuvwxyz"
                    .chars()
                    .cycle()
                    .take(n)
                    .collect();
                reply(&input, text)
            }
            _ => failure(
                &input,
                Refusal::InvalidSchema,
                format!("big takes a byte count from 0 to {DEMO_MAX_BIG_BYTES}"),
            ),
        },
        "sleep" => match rest.parse::<u64>() {
            Ok(ms) if ms <= DEMO_MAX_SLEEP_MS => {
                // A resumed sleep carries on from where it was parked.
                let already = input
                    .resume
                    .as_ref()
                    .and_then(|r| r.checkpoint.get("slept_ms"))
                    .and_then(serde_json::Value::as_u64)
                    .unwrap_or(0)
                    .min(ms);
                send(TurnEvent::Status {
                    state: StatusState::Thinking,
                    progress: Some(0),
                    info: Some(format!("sleeping {} ms", ms - already)),
                    usage: None,
                })
                .await;
                let start = Instant::now();
                let end = start + Duration::from_millis(ms - already);
                let mut ticks = 0u64;
                while Instant::now() < end {
                    if *ctx.cancel.borrow() {
                        let slept = already + start.elapsed().as_millis() as u64;
                        return parked(
                            &input,
                            TurnFailure::Suspended,
                            format!("suspended after {slept} of {ms} ms"),
                            serde_json::json!({ "slept_ms": slept }),
                        );
                    }
                    tokio::time::sleep(
                        SLEEP_TICK.min(end.saturating_duration_since(Instant::now())),
                    )
                    .await;
                    ticks += 1;
                    send(TurnEvent::Text {
                        text: format!("tick {ticks}\n"),
                    })
                    .await;
                }
                reply(&input, format!("slept {ms} ms"))
            }
            _ => failure(
                &input,
                Refusal::InvalidSchema,
                format!("sleep takes milliseconds from 0 to {DEMO_MAX_SLEEP_MS}"),
            ),
        },
        "calc" => {
            send(TurnEvent::Status {
                state: StatusState::ToolUse,
                progress: None,
                info: Some("calculator".into()),
                usage: None,
            })
            .await;
            let call_id = "call_1".to_string();
            send(TurnEvent::ToolCall {
                call_id: call_id.clone(),
                name: "calculator".into(),
                arguments: serde_json::json!({ "expr": rest }),
            })
            .await;
            let started = Instant::now();
            let result = evaluate(rest);
            let duration_ms = started.elapsed().as_millis() as u64;
            match result {
                Ok(v) => {
                    let value = format_number(v);
                    send(TurnEvent::ToolResult {
                        call_id,
                        name: "calculator".into(),
                        output: serde_json::json!({ "stdout": value, "stderr": "", "exit_code": 0 }),
                        success: true,
                        duration_ms,
                    })
                    .await;
                    send(TurnEvent::Text {
                        text: value.clone(),
                    })
                    .await;
                    reply(&input, value)
                }
                Err(e) => {
                    send(TurnEvent::ToolResult {
                        call_id,
                        name: "calculator".into(),
                        output: serde_json::json!({ "stdout": "", "stderr": e.to_string(), "exit_code": 1 }),
                        success: false,
                        duration_ms,
                    })
                    .await;
                    failure(&input, TurnFailure::ToolError, format!("calculator: {e}"))
                }
            }
        }
        "file" => {
            let (name, text) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            if name.is_empty() || text.trim().is_empty() {
                return failure(
                    &input,
                    Refusal::InvalidSchema,
                    "file takes a name and its text: file <name> <text>".into(),
                );
            }
            send(TurnEvent::File {
                name: name.into(),
                text: text.trim().into(),
            })
            .await;
            reply(&input, format!("Wrote {name}"))
        }
        "handoff" => {
            let name = Some(rest.to_string()).filter(|n| !n.is_empty());
            send(TurnEvent::Handoff { name: name.clone() }).await;
            let text = format!("Continuing in {}", name.as_deref().unwrap_or("Handoff"));
            send(TurnEvent::Text { text: text.clone() }).await;
            reply(&input, text)
        }
        "ask" | "choose" | "confirm" | "input" | "approve" => {
            ask::run(word, rest, &input, &ctx).await
        }
        _ => {
            send(TurnEvent::Status {
                state: StatusState::Thinking,
                progress: None,
                info: None,
                usage: None,
            })
            .await;
            let text = format!("You said: {msg}");
            send(TurnEvent::Text {
                text: "You said: ".into(),
            })
            .await;
            send(TurnEvent::Text {
                text: msg.to_string(),
            })
            .await;
            reply(&input, text)
        }
    }
}
