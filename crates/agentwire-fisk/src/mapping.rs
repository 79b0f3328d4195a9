//! Between the core vocabulary and fisk-ai v1 wire values: events to blocks, outcomes to `result` /
//! `error`, failure codes to fisk-ai codes (the one place this mapping lives), questions to
//! `elicit.request.*`, and answers back. Pure.

use crate::wire::{
    self, Ask, Block, Decision, ElicitAnswer, ElicitChoice, ErrorCode, Reply, StopReason, TurnError,
};
use agentwire_core::{
    Answer, ApproveChoice, FailureCode, Outcome, QuestionKind, Refusal, StatusState, TurnEvent,
    TurnFailure, Usage, WarningAbout,
};

/// The most bytes of answer text a `result` carries (and of message an `error` carries): with the header,
/// usage and JSON escaping (at most six bytes per byte, for control characters; text is rarely that), the
/// message stays under [`wire::MAX_MESSAGE_BYTES`] for any ordinary text. Longer text is cut on a character
/// boundary and says so.
pub const MAX_TERMINAL_TEXT_BYTES: usize = 512 * 1024;

/// `text` cut to at most `max` bytes on a character boundary, with a note when cut.
pub fn trim_terminal_text(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    const NOTE: &str = "\n[truncated: the whole answer is in the worker's journal]";
    let end = text.floor_char_boundary(max.saturating_sub(NOTE.len()));
    format!("{}{NOTE}", &text[..end])
}

/// The fisk-ai code of a core failure.
pub fn error_code(code: &FailureCode) -> ErrorCode {
    match code {
        FailureCode::Turn(t) => turn_code(*t),
        FailureCode::Refused(r) => refusal_code(*r),
        FailureCode::Unknown(s) => ErrorCode::parse(s),
    }
}

/// The fisk-ai code of a turn's failure. Exhaustive: a new failure does not compile until it is mapped.
fn turn_code(t: TurnFailure) -> ErrorCode {
    match t {
        // Every cancel on this channel comes from the caller, and a caller's cancel parks the run.
        TurnFailure::Cancelled | TurnFailure::Suspended => ErrorCode::Suspended,
        TurnFailure::Deferred => ErrorCode::Deferred,
        TurnFailure::ProviderBusy => ErrorCode::ProviderBusy,
        TurnFailure::ProviderRefused | TurnFailure::ModelUnavailable => ErrorCode::ProviderRefused,
        TurnFailure::ContextExceeded => ErrorCode::ContextExceeded,
        // The allowance ran out part way through the turn: the code's stop reason is `budget_exhausted`
        // too, as the spec has it for a run that hit the cap after it started.
        TurnFailure::OverBudget => ErrorCode::BudgetExhausted,
        TurnFailure::Crashed => ErrorCode::Crashed,
        // Cut off by a restart of the worker, not by the caller.
        TurnFailure::Interrupted => ErrorCode::Canceled,
        // Taken and never run: the worker stopped first.
        TurnFailure::NotStarted => ErrorCode::NotStarted,
        TurnFailure::UnsupportedFeature
        | TurnFailure::EmptyResponse
        | TurnFailure::ToolError
        | TurnFailure::AgentFailed
        | TurnFailure::Internal => ErrorCode::Failed,
    }
}

/// The fisk-ai code of a refusal. Exhaustive: a new refusal does not compile until it is mapped.
fn refusal_code(r: Refusal) -> ErrorCode {
    match r {
        Refusal::Capacity => ErrorCode::Capacity,
        Refusal::Draining => ErrorCode::Draining,
        Refusal::DuplicateRequest => ErrorCode::DuplicateRequest,
        Refusal::ConversationBusy => ErrorCode::ConversationBusy,
        Refusal::UnknownConversation => ErrorCode::UnknownConversation,
        Refusal::TurnNotTaken => ErrorCode::TurnNotTaken,
        Refusal::ConfigDrift => ErrorCode::ConfigDrift,
        Refusal::BudgetExhausted => ErrorCode::BudgetExhausted,
        Refusal::UnknownCall => ErrorCode::UnknownCall,
        Refusal::AlreadyAnswered => ErrorCode::AlreadyAnswered,
        Refusal::AnswerTooLarge => ErrorCode::AnswerTooLarge,
        Refusal::RateLimited => ErrorCode::ProviderBusy,
        Refusal::Unauthorized
        | Refusal::Blocked
        | Refusal::UnsupportedModel
        | Refusal::UnsupportedSchemaVersion
        | Refusal::UnsupportedEncryption
        | Refusal::UnsupportedFeature
        | Refusal::ParseError
        | Refusal::InvalidSchema
        | Refusal::SessionLimit => ErrorCode::Rejected,
    }
}

/// The wire usage of a core usage.
pub fn usage(u: Usage) -> wire::Usage {
    wire::Usage {
        input_tokens: u.input_tokens,
        output_tokens: u.output_tokens,
        ..wire::Usage::default()
    }
}

/// The wire usage of a conversation that spent `tokens` in `tool_calls` tool calls.
pub fn usage_with(tokens: Usage, tool_calls: u64) -> wire::Usage {
    wire::Usage {
        tool_calls,
        ..usage(tokens)
    }
}

/// The terminal message of an outcome; `conversation` is the whole conversation's usage, this turn's
/// included.
pub fn terminal(outcome: &Outcome, conversation: wire::Usage) -> Reply {
    match outcome {
        Outcome::Result(r) => {
            let stop = match r.stop_reason.as_str() {
                "" | "stop" => StopReason::EndTurn,
                other => StopReason::parse(other),
            };
            let mut t =
                wire::TurnResult::new(stop, trim_terminal_text(&r.text, MAX_TERMINAL_TEXT_BYTES));
            t.usage = Some(conversation);
            Reply::Result(t)
        }
        Outcome::Failure(f) => {
            let message = if f.message.is_empty() {
                "the run failed".to_string()
            } else {
                f.message.clone()
            };
            let message = trim_terminal_text(&message, MAX_TERMINAL_TEXT_BYTES);
            let mut e = TurnError::new(error_code(&f.code), message);
            e.usage = Some(conversation);
            Reply::Error(e)
        }
    }
}

/// `terminal` (a `result` or an `error`) carrying the turn's trace: `trace_id`, the trace the worker
/// recorded, and `content_exported`, whether the conversation's text went into it. Other replies are
/// left as they are.
pub fn with_trace(terminal: &mut Reply, trace_id: &str, content_exported: bool) {
    match terminal {
        Reply::Result(r) => {
            r.trace_id = Some(trace_id.to_string());
            r.content_exported = content_exported;
        }
        Reply::Error(e) => {
            e.trace_id = Some(trace_id.to_string());
            e.content_exported = content_exported;
        }
        _ => {}
    }
}

/// A refusal before the run: code and message, no usage.
pub fn refusal(code: impl Into<FailureCode>, message: impl Into<String>) -> Reply {
    Reply::Error(TurnError::new(error_code(&code.into()), message))
}

/// The block of one event (text is sent by the caller of this, which knows which text is final).
/// `iteration` counts the turn's status events.
pub fn block(event: &TurnEvent, iteration: u64) -> Block {
    match event {
        TurnEvent::Text { text } => Block::text(wire::trim_block_text(text), false),
        TurnEvent::Thinking { text } => Block::thinking(wire::trim_block_text(text)),
        TurnEvent::Status {
            state, usage: u, ..
        } => {
            let phase = match state {
                StatusState::Thinking => "thinking",
                StatusState::ToolUse => "tool_use",
                StatusState::Done => "done",
            };
            // What the model call that just ended consumed (the spec: "its `usage` is what one model call
            // consumed").
            Block::iteration(iteration, phase, u.map(usage))
        }
        TurnEvent::AgentCall {
            call_id,
            name,
            task,
        } => Block::agent_call(call_id, name, task),
        TurnEvent::ToolCall {
            call_id,
            name,
            arguments,
        } => {
            let input = match arguments {
                serde_json::Value::Object(m) => m.clone(),
                other => {
                    let mut m = serde_json::Map::new();
                    m.insert("value".into(), other.clone());
                    m
                }
            };
            Block::tool_call(call_id, name, input)
        }
        TurnEvent::ToolResult {
            call_id,
            output,
            success,
            ..
        } => {
            // A command's output is its stdout, or its stderr when it failed and said nothing on stdout.
            let field = |k: &str| output.get(k).and_then(serde_json::Value::as_str);
            let text = match (field("stdout"), field("stderr")) {
                (Some(out), Some(err)) if !success && out.trim().is_empty() => err.to_string(),
                (Some(out), _) => out.to_string(),
                (None, _) => output.to_string(),
            };
            Block::tool_result(call_id, wire::trim_block_text(&text), !success)
        }
        TurnEvent::Warning { text, about } => agent_warning(text, about.as_ref()),
        TurnEvent::File { name, .. } => {
            warning(WARNING_FILE_POSTED, |w| w.name = Some(value(name)))
        }
        TurnEvent::Handoff { name } => {
            warning(WARNING_HANDOFF, |w| w.name = name.as_deref().map(value))
        }
    }
}

/// The kinds of the `event.warning`s this worker sends beside
/// [`WARNING_QUESTION_ANSWERED`](crate::worker::WARNING_QUESTION_ANSWERED): a warning names its kind and
/// carries its values (`name`, `count`, `params`, `error`), and the caller words it (the spec's rule).
///
/// The agent posted a file for the person; `name` is the file's name (its text stays in the journal).
pub const WARNING_FILE_POSTED: &str = "file_posted";
/// The agent handed the rest of the turn to a new thread; `name` is the thread's name, absent when it has
/// none.
pub const WARNING_HANDOFF: &str = "handoff";
/// Tool hints the prompt gave name no tool of the agent's and were left out; `params` are those hints.
pub const WARNING_UNKNOWN_TOOL_HINTS: &str = "unknown_tool_hints";
/// The oldest turns of the conversation were left out of the model call to fit its context window;
/// `count` is how many.
pub const WARNING_HISTORY_TRIMMED: &str = "history_trimmed";
/// A model call failed and the next configured model is tried; `name` is that model, `error` the failure.
pub const WARNING_MODEL_FALLBACK: &str = "model_fallback";
/// A warning of the agent's own this worker has no kind for; `error` holds the agent's words, as display
/// text.
pub const WARNING_AGENT: &str = "agent";

/// A value for a warning's field, cut to fit a block.
fn value(s: &str) -> String {
    wire::trim_block_text(s).to_string()
}

fn warning(kind: &str, fill: impl FnOnce(&mut wire::WarningBlock)) -> Block {
    let mut b = Block::warning(kind);
    if let Block::Warning(w) = &mut b {
        fill(w);
    }
    b
}

/// A warning as its kind and values: those agentwire raised by what they are about, an agent's own as kind
/// [`WARNING_AGENT`] with its words as display text.
fn agent_warning(text: &str, about: Option<&WarningAbout>) -> Block {
    match about {
        Some(WarningAbout::UnknownToolHints { hints }) => {
            warning(WARNING_UNKNOWN_TOOL_HINTS, |w| {
                w.params = hints.iter().map(|h| value(h)).collect()
            })
        }
        Some(WarningAbout::HistoryTrimmed { count }) => {
            warning(WARNING_HISTORY_TRIMMED, |w| w.count = Some(*count))
        }
        Some(WarningAbout::ModelFallback { model, error }) => {
            warning(WARNING_MODEL_FALLBACK, |w| {
                w.name = Some(value(model));
                w.error = Some(value(error));
            })
        }
        None => warning(WARNING_AGENT, |w| w.error = Some(value(text))),
    }
}

/// The `elicit.request.*` form of a question. fisk-ai's `select` takes exactly one option, by position,
/// and nothing beside it; its `input` takes any text. So a question that takes more than one option, or
/// the person's own words beside (or instead of) the options, goes out as `input` whose question lists the
/// options and says what may be typed: options by their labels, separated by commas, and (where the
/// question takes it) free text. [`live_answer`] reads the typed value back the same way.
pub fn ask(kind: &QuestionKind) -> Ask {
    match kind.clone() {
        QuestionKind::Approve {
            command,
            display,
            tag,
        } => Ask::Approve {
            command,
            display,
            tag,
        },
        QuestionKind::Confirm { question } => Ask::Confirm { question },
        QuestionKind::Select {
            question,
            options,
            multiple: false,
            freeform: false,
        } => Ask::Select {
            question,
            options: options.into_iter().map(|o| o.label).collect(),
        },
        QuestionKind::Select {
            question,
            options,
            multiple,
            freeform,
        } => {
            let labels: Vec<&str> = options.iter().map(|o| o.label.as_str()).collect();
            let labels = labels.join(", ");
            let how = match (multiple, freeform) {
                (true, false) => format!("one or more of: {labels}; separated by commas"),
                (true, true) => {
                    format!("one or more of: {labels}, separated by commas; and/or your own answer")
                }
                _ => format!("one of: {labels}; or your own answer"),
            };
            Ask::Input {
                question: format!("{question} ({how})"),
                default: None,
            }
        }
        QuestionKind::Input { question, default } => Ask::Input { question, default },
    }
}

/// The option `typed` names among `options`: by label or id as given, else by label in any case.
fn named_option<'o>(
    typed: &str,
    options: &'o [agentwire_core::QuestionOption],
) -> Option<&'o agentwire_core::QuestionOption> {
    options
        .iter()
        .find(|o| o.label == typed || o.id == typed)
        .or_else(|| options.iter().find(|o| o.label.eq_ignore_ascii_case(typed)))
}

/// The answer an `input` value gives a select question sent as `input` (see [`ask`]): the options it names
/// (comma-separated where several are taken) and, where the question takes free text, the rest as the
/// person's own words. `None` when it does not fit (an unknown option without free text, an option twice,
/// several options for one, nothing at all).
fn typed_choices(value: &str, kind: &QuestionKind) -> Option<Answer> {
    let QuestionKind::Select {
        options,
        multiple,
        freeform,
        ..
    } = kind
    else {
        return None;
    };
    let typed = value.trim();
    let a = if *multiple {
        let mut choices = Vec::new();
        let mut own = Vec::new();
        for part in typed.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match named_option(part, options) {
                Some(o) => choices.push(o.id.clone()),
                None => own.push(part),
            }
        }
        let text = match (own.is_empty(), *freeform) {
            (true, _) => None,
            (false, true) => Some(own.join(", ")),
            (false, false) => return None,
        };
        Answer::Choices { choices, text }
    } else {
        match named_option(typed, options) {
            Some(o) => Answer::Select {
                value: o.id.clone(),
            },
            None => Answer::Choices {
                choices: vec![],
                text: Some(typed.to_string()),
            },
        }
    };
    a.fits(kind).then_some(a)
}

fn choice(c: ElicitChoice) -> ApproveChoice {
    match c {
        ElicitChoice::No => ApproveChoice::No,
        ElicitChoice::Once => ApproveChoice::Once,
        ElicitChoice::Always => ApproveChoice::Always,
    }
}

/// A live `elicit.reply.*` as a core answer to `kind`; `None` if it cannot be one (a select position
/// outside the options, a reply of another question's kind).
pub fn live_answer(reply: &ElicitAnswer, kind: &QuestionKind) -> Option<Answer> {
    let a = match (reply, kind) {
        (ElicitAnswer::NoOperator, _) => Answer::NoOperator,
        (ElicitAnswer::Approve(c), QuestionKind::Approve { .. }) => {
            Answer::Approve { choice: choice(*c) }
        }
        (ElicitAnswer::Confirm(b), QuestionKind::Confirm { .. }) => {
            Answer::Confirm { confirmed: *b }
        }
        (
            ElicitAnswer::Select(i),
            QuestionKind::Select {
                options,
                multiple: false,
                ..
            },
        ) => Answer::Select {
            value: options.get(usize::try_from(*i).ok()?)?.id.clone(),
        },
        (ElicitAnswer::Input(v), QuestionKind::Select { .. }) => return typed_choices(v, kind),
        (ElicitAnswer::Input(v), QuestionKind::Input { .. }) => Answer::Input { value: v.clone() },
        _ => return None,
    };
    Some(a)
}

/// A `request.answer`'s decision as a core answer.
pub fn decided_answer(d: &Decision) -> Answer {
    match d {
        Decision::Approve(c) => Answer::Approve { choice: choice(*c) },
        Decision::Confirm(b) => Answer::Confirm { confirmed: *b },
        Decision::Select(v) => Answer::Select { value: v.clone() },
        Decision::Input(v) => Answer::Input { value: v.clone() },
        Decision::NoOperator => Answer::NoOperator,
    }
}

/// The blocks a turn sent, rebuilt from its journaled transcript: the same blocks in the same order, the
/// last text of a turn that ended in a result marked final. `prompt` opens the turn when it was a prompt.
pub fn replay_blocks(prompt: Option<&str>, events: &[TurnEvent], answered: bool) -> Vec<Block> {
    let mut blocks = Vec::new();
    if let Some(p) = prompt {
        blocks.push(Block::prompt(wire::trim_block_text(p)));
    }
    let mut iteration = 0;
    for e in events {
        if matches!(e, TurnEvent::Status { .. }) {
            iteration += 1;
        }
        blocks.push(block(e, iteration));
    }
    if answered {
        if let Some(Block::Text(t)) = blocks
            .iter_mut()
            .rev()
            .find(|b| matches!(b, Block::Text(_)))
        {
            t.is_final = true;
        }
    }
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire_core::{Failure, TurnResult};

    #[test]
    fn every_core_failure_has_a_fisk_code_and_cancel_parks() {
        assert_eq!(
            error_code(&TurnFailure::Cancelled.into()),
            ErrorCode::Suspended
        );
        assert_eq!(
            error_code(&TurnFailure::Deferred.into()),
            ErrorCode::Deferred
        );
        assert_eq!(error_code(&TurnFailure::Crashed.into()), ErrorCode::Crashed);
        assert_eq!(
            error_code(&TurnFailure::AgentFailed.into()),
            ErrorCode::Failed
        );
        assert_eq!(
            error_code(&TurnFailure::Interrupted.into()),
            ErrorCode::Canceled
        );
        assert_eq!(
            error_code(&FailureCode::Unknown("provider_busy".into())),
            ErrorCode::ProviderBusy
        );
    }

    #[test]
    fn every_core_code_maps_to_a_fisk_code_of_the_spec() {
        let known = |c: &ErrorCode| !matches!(ErrorCode::parse(c.as_str()), ErrorCode::Unknown(_));
        for t in agentwire_core::TURN_FAILURES {
            assert!(known(&error_code(&t.into())), "{t:?}");
        }
        for r in agentwire_core::REFUSALS {
            let c = error_code(&r.into());
            assert!(known(&c), "{r:?}");
            assert!(
                !matches!(c, ErrorCode::Failed | ErrorCode::Crashed),
                "a refusal is not a run that failed: {r:?}"
            );
        }
        assert_eq!(
            error_code(&FailureCode::Unknown("new_code".into())).as_str(),
            "new_code"
        );
    }

    #[test]
    fn a_result_carries_the_conversation_usage() {
        let o = Outcome::Result(TurnResult {
            text: "hi".into(),
            usage: Usage::default(),
            stop_reason: "stop".into(),
        });
        let total = Usage {
            input_tokens: 5,
            output_tokens: 7,
        };
        match terminal(&o, usage(total)) {
            Reply::Result(r) => {
                assert_eq!(r.stop_reason, StopReason::EndTurn);
                assert_eq!(r.usage.unwrap().output_tokens, 7);
            }
            other => panic!("{other:?}"),
        }
        let f = Outcome::Failure(Failure::new(TurnFailure::Suspended, "parked"));
        match terminal(&f, usage(total)) {
            Reply::Error(e) => assert_eq!(e.code, ErrorCode::Suspended),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_turn_stopped_by_its_budget_is_budget_exhausted_in_code_and_stop_reason() {
        let total = Usage {
            input_tokens: 80,
            output_tokens: 30,
        };
        let f = Outcome::Failure(Failure::new(TurnFailure::OverBudget, "spent").with_usage(total));
        match terminal(&f, usage(total)) {
            Reply::Error(e) => {
                assert_eq!(e.code, ErrorCode::BudgetExhausted);
                assert_eq!(e.stop_reason, StopReason::BudgetExhausted);
                assert_eq!(e.usage.unwrap().input_tokens, 80);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_huge_answer_is_cut_to_fit_one_message() {
        let o = Outcome::Result(TurnResult {
            text: "é".repeat(400 * 1024),
            usage: Usage::default(),
            stop_reason: "stop".into(),
        });
        let reply = terminal(&o, usage(Usage::default()));
        let header = wire::Header::new(
            wire::Ksuid::new(std::time::SystemTime::now(), [1; 16]),
            "r",
            "c",
            9,
            std::time::SystemTime::now(),
            wire::Identity::new("w").unwrap(),
        );
        let bytes = wire::encode_reply(&header, &reply);
        assert!(bytes.len() < wire::MAX_MESSAGE_BYTES, "{}", bytes.len());
        match reply {
            Reply::Result(r) => assert!(r.text.ends_with("journal]")),
            other => panic!("{other:?}"),
        }
        assert_eq!(trim_terminal_text("short", 10), "short");
    }

    #[test]
    fn a_select_reply_picks_by_position_and_a_wrong_kind_is_none() {
        let kind = QuestionKind::Select {
            question: "q".into(),
            options: vec![
                agentwire_core::QuestionOption::new("a", "Alpha"),
                agentwire_core::QuestionOption::new("b", "Beta"),
            ],
            multiple: false,
            freeform: false,
        };
        assert!(matches!(ask(&kind), Ask::Select { options, .. } if options == ["Alpha", "Beta"]));
        assert_eq!(
            live_answer(&ElicitAnswer::Select(1), &kind),
            Some(Answer::Select { value: "b".into() })
        );
        assert_eq!(live_answer(&ElicitAnswer::Select(2), &kind), None);
        assert_eq!(live_answer(&ElicitAnswer::Confirm(true), &kind), None);
        assert_eq!(
            live_answer(&ElicitAnswer::NoOperator, &kind),
            Some(Answer::NoOperator)
        );
    }

    #[test]
    fn several_choices_go_out_as_input_and_come_back_as_option_ids() {
        let kind = QuestionKind::Select {
            question: "Which?".into(),
            options: vec![
                agentwire_core::QuestionOption::new("a", "Alpha"),
                agentwire_core::QuestionOption::new("b", "Beta"),
            ],
            multiple: true,
            freeform: false,
        };
        match ask(&kind) {
            Ask::Input { question, .. } => assert!(question.contains("Alpha, Beta"), "{question}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            live_answer(&ElicitAnswer::Input("Beta, a".into()), &kind),
            Some(Answer::Choices {
                choices: vec!["b".into(), "a".into()],
                text: None
            })
        );
        assert_eq!(
            live_answer(&ElicitAnswer::Input("Gamma".into()), &kind),
            None
        );
        assert_eq!(
            live_answer(&ElicitAnswer::Input("a, a".into()), &kind),
            None
        );
        assert_eq!(live_answer(&ElicitAnswer::Select(0), &kind), None);
    }

    fn pick(multiple: bool, freeform: bool) -> QuestionKind {
        QuestionKind::Select {
            question: "Which?".into(),
            options: vec![
                agentwire_core::QuestionOption::new("a", "Alpha"),
                agentwire_core::QuestionOption::new("b", "Beta"),
            ],
            multiple,
            freeform,
        }
    }

    fn typed(v: &str, kind: &QuestionKind) -> Option<Answer> {
        live_answer(&ElicitAnswer::Input(v.into()), kind)
    }

    #[test]
    fn free_text_beside_the_options_goes_out_as_input_saying_so_and_comes_back_as_text() {
        // One option or the person's own words.
        let one = pick(false, true);
        match ask(&one) {
            Ask::Input { question, default } => {
                assert_eq!(question, "Which? (one of: Alpha, Beta; or your own answer)");
                assert_eq!(default, None);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            typed(" beta ", &one),
            Some(Answer::Select { value: "b".into() })
        );
        assert_eq!(
            typed("Gamma, please", &one),
            Some(Answer::Choices {
                choices: vec![],
                text: Some("Gamma, please".into())
            })
        );
        assert_eq!(typed("", &one), None, "an empty answer chose nothing");
        assert_eq!(typed("Gamma", &one).unwrap().describe(&one), "Gamma");

        // Several options and the person's own words beside them.
        let several = pick(true, true);
        match ask(&several) {
            Ask::Input { question, .. } => assert_eq!(
                question,
                "Which? (one or more of: Alpha, Beta, separated by commas; and/or your own answer)"
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            typed("Alpha, Gamma, Delta", &several),
            Some(Answer::Choices {
                choices: vec!["a".into()],
                text: Some("Gamma, Delta".into())
            })
        );
        assert_eq!(
            typed("only mine", &several),
            Some(Answer::Choices {
                choices: vec![],
                text: Some("only mine".into())
            })
        );
        assert_eq!(typed("a, Alpha", &several), None, "an option twice");
        assert_eq!(typed(" , ", &several), None, "nothing chosen or said");

        // Without free text, words that name no option are refused.
        assert_eq!(typed("Gamma", &pick(true, false)), None);
        // One option, no free text: a plain select.
        assert!(matches!(ask(&pick(false, false)), Ask::Select { .. }));
    }

    fn warned(e: TurnEvent) -> wire::WarningBlock {
        match block(&e, 0) {
            Block::Warning(w) => w,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_warning_names_its_kind_and_carries_values_not_a_sentence() {
        let w = warned(TurnEvent::File {
            name: "notes.md".into(),
            text: "x".into(),
        });
        assert_eq!(
            (w.kind.as_str(), w.name.as_deref()),
            (WARNING_FILE_POSTED, Some("notes.md"))
        );
        assert!(w.params.is_empty() && w.error.is_none());
        let w = warned(TurnEvent::Handoff {
            name: Some("deploy".into()),
        });
        assert_eq!(
            (w.kind.as_str(), w.name.as_deref()),
            (WARNING_HANDOFF, Some("deploy"))
        );
        assert_eq!(warned(TurnEvent::Handoff { name: None }).name, None);

        // The warnings agentwire raises, by what they are about (whatever their words).
        let w = warned(TurnEvent::Warning {
            text: "some words".into(),
            about: Some(WarningAbout::UnknownToolHints {
                hints: vec!["kv".into(), "stream".into()],
            }),
        });
        assert_eq!(w.kind, WARNING_UNKNOWN_TOOL_HINTS);
        assert_eq!(w.params, ["kv", "stream"]);
        let w = warned(TurnEvent::Warning {
            text: "some words".into(),
            about: Some(WarningAbout::HistoryTrimmed { count: 3 }),
        });
        assert_eq!(
            (w.kind.as_str(), w.count),
            (WARNING_HISTORY_TRIMMED, Some(3))
        );
        let w = warned(TurnEvent::Warning {
            text: "some words".into(),
            about: Some(WarningAbout::ModelFallback {
                model: "qwen2.5".into(),
                error: "model m1 is busy (429)".into(),
            }),
        });
        assert_eq!(w.kind, WARNING_MODEL_FALLBACK);
        assert_eq!(w.name.as_deref(), Some("qwen2.5"));
        assert_eq!(w.error.as_deref(), Some("model m1 is busy (429)"));

        // Words of an agent's own: kind agent, the words as display text, no params.
        let w = warned(TurnEvent::Warning {
            text: "disk nearly full; trying harder now".into(),
            about: None,
        });
        assert_eq!(w.kind, WARNING_AGENT);
        assert_eq!(
            w.error.as_deref(),
            Some("disk nearly full; trying harder now")
        );
        assert!(w.params.is_empty());
    }

    #[test]
    fn replay_marks_the_answer_final() {
        let events = vec![
            TurnEvent::Text { text: "a".into() },
            TurnEvent::Text { text: "b".into() },
        ];
        let blocks = replay_blocks(Some("hi"), &events, true);
        assert_eq!(blocks.len(), 3);
        assert!(matches!(&blocks[0], Block::Prompt(p) if p.text == "hi"));
        assert!(matches!(&blocks[1], Block::Text(t) if !t.is_final));
        assert!(matches!(&blocks[2], Block::Text(t) if t.is_final));
    }
}
