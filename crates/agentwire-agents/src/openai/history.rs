//! A conversation's earlier turns as chat messages, fitted to the model's context window: the oldest turns
//! are dropped first, whole, until the estimate fits. Pure.

use agentwire_engine::PastTurn;
use serde_json::{json, Value};

/// The share of the context window the messages may fill, in percent: the rest is left for the answer.
pub const CONTEXT_SHARE_PERCENT: u64 = 75;
/// Bytes per token in the estimate: about four for English text with the tokenizers of today's models;
/// no server tells us the real count before the call.
pub const BYTES_PER_TOKEN: u64 = 4;
/// Tokens a message costs besides its text (role and framing).
const MESSAGE_OVERHEAD_TOKENS: u64 = 4;

/// The estimated tokens of `messages`.
pub fn estimate_tokens(messages: &[Value]) -> u64 {
    messages
        .iter()
        .map(|m| m.to_string().len() as u64 / BYTES_PER_TOKEN + MESSAGE_OVERHEAD_TOKENS)
        .sum()
}

/// The messages of one earlier turn: the person's message, the tool calls and results, the answer.
fn turn_messages(turn: &PastTurn) -> Vec<Value> {
    let mut out = vec![json!({ "role": "user", "content": turn.message })];
    if !turn.tools.is_empty() {
        out.push(json!({
            "role": "assistant",
            "content": Value::Null,
            "tool_calls": turn.tools.iter().map(|c| json!({
                "id": c.call_id,
                "type": "function",
                "function": { "name": c.name, "arguments": c.arguments.to_string() },
            })).collect::<Vec<_>>(),
        }));
        for c in &turn.tools {
            out.push(json!({ "role": "tool", "tool_call_id": c.call_id, "content": c.output.to_string() }));
        }
    }
    out.push(json!({ "role": "assistant", "content": turn.answer }));
    out
}

/// The messages of a turn: the system prompt, as many of the newest earlier turns as fit
/// [`CONTEXT_SHARE_PERCENT`] of `context_tokens`, and the person's message. Returns them and how many
/// earlier turns were left out.
pub fn messages(
    system: Option<&str>,
    history: &[PastTurn],
    message: &str,
    context_tokens: u64,
) -> (Vec<Value>, usize) {
    let head: Vec<Value> = system
        .map(|s| json!({ "role": "system", "content": s }))
        .into_iter()
        .collect();
    let tail = json!({ "role": "user", "content": message });
    let budget = context_tokens.saturating_mul(CONTEXT_SHARE_PERCENT) / 100;
    let mut used = estimate_tokens(&head) + estimate_tokens(std::slice::from_ref(&tail));
    let mut kept: Vec<Vec<Value>> = Vec::new();
    for turn in history.iter().rev() {
        let m = turn_messages(turn);
        let cost = estimate_tokens(&m);
        if used + cost > budget {
            break;
        }
        used += cost;
        kept.push(m);
    }
    let dropped = history.len() - kept.len();
    let mut out = head;
    out.extend(kept.into_iter().rev().flatten());
    out.push(tail);
    (out, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire_engine::PastToolCall;

    fn turn(message: &str, answer: &str) -> PastTurn {
        PastTurn {
            message: message.into(),
            tools: vec![],
            answer: answer.into(),
        }
    }

    #[test]
    fn earlier_turns_come_in_order_with_their_tool_calls() {
        let mut first = turn("what is 2+3?", "5");
        first.tools.push(PastToolCall {
            call_id: "c1".into(),
            name: "calculator".into(),
            arguments: json!({"expression": "2+3"}),
            output: json!({"value": 5.0}),
        });
        let (m, dropped) = messages(Some("sys"), &[first, turn("and 4?", "4")], "now?", 8192);
        assert_eq!(dropped, 0);
        let roles: Vec<_> = m.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(
            roles,
            vec![
                "system",
                "user",
                "assistant",
                "tool",
                "assistant",
                "user",
                "assistant",
                "user"
            ]
        );
        assert_eq!(
            m[2]["tool_calls"][0]["function"]["arguments"],
            r#"{"expression":"2+3"}"#
        );
        assert_eq!(m[3]["tool_call_id"], "c1");
        assert_eq!(m[4]["content"], "5");
        assert_eq!(m[7]["content"], "now?");
    }

    #[test]
    fn the_oldest_turns_are_dropped_to_fit_the_window() {
        let long = "x".repeat(4000); // about 1,000 tokens a turn
        let history: Vec<PastTurn> = (0..10)
            .map(|i| turn(&format!("q{i} {long}"), "a"))
            .collect();
        let (m, dropped) = messages(None, &history, "last", 4000);
        // 75% of 4,000 tokens: two of the ~1,000-token turns fit, the newest two.
        assert_eq!(dropped, 8);
        assert!(m[0]["content"].as_str().unwrap().starts_with("q8 "));
        assert!(m[2]["content"].as_str().unwrap().starts_with("q9 "));
        assert!(estimate_tokens(&m) <= 3000);
        let (m, dropped) = messages(None, &history, "last", 256);
        assert_eq!(
            (m.len(), dropped),
            (1, 10),
            "nothing fits but the message itself"
        );
    }
}
