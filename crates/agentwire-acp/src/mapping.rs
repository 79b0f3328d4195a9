//! ACP onto the turn model, pure: a session update as the turn's events, a prompt's stop reason as its
//! outcome, a permission request as an engine question and the answer back as the option chosen.

use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, PermissionOption, PermissionOptionId, PermissionOptionKind, Plan,
    PlanEntryStatus, RequestPermissionOutcome, RequestPermissionRequest, SelectedPermissionOutcome,
    SessionUpdate, StopReason, TextContent, ToolCall, ToolCallContent, ToolCallStatus,
    ToolCallUpdate,
};
use agentwire_core::{
    Answer, ApproveChoice, Failure, Outcome, Question, QuestionKind, QuestionOption, StatusState,
    TurnEvent, TurnFailure, TurnResult, Usage,
};
use std::collections::HashMap;

/// The tool name of an engine question that carries an ACP permission request.
pub const PERMISSION_TOOL: &str = "acp";

/// The most tool calls of one turn remembered (their names and start times, for their results): an agent
/// that starts more has the oldest forgotten, and their results named by their ids alone.
pub const MAX_TOOL_CALLS_KEPT: usize = 1024;

/// The most characters of a plan said in one status.
pub const MAX_PLAN_CHARS: usize = 2000;

/// The text of a content block: a text block's text, else a short note of what it holds.
pub fn block_text(b: &ContentBlock) -> String {
    match b {
        ContentBlock::Text(TextContent { text, .. }) => text.clone(),
        ContentBlock::Image(_) => "[image]".into(),
        ContentBlock::Audio(_) => "[audio]".into(),
        ContentBlock::ResourceLink(l) => format!("[{}]", l.uri),
        ContentBlock::Resource(_) => "[resource]".into(),
        _ => "[content]".into(),
    }
}

/// The tool calls of one turn, by their ACP ids: each one's name and start, so its result says which tool
/// it was and how long it ran.
#[derive(Debug, Default)]
pub struct ToolCalls {
    started: HashMap<String, (String, u64)>,
}

impl ToolCalls {
    fn start(&mut self, id: &str, name: &str, now_ms: u64) {
        if self.started.len() >= MAX_TOOL_CALLS_KEPT {
            if let Some(oldest) = self
                .started
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(k, _)| k.clone())
            {
                self.started.remove(&oldest);
            }
        }
        self.started
            .insert(id.to_string(), (name.to_string(), now_ms));
    }

    fn end(&mut self, id: &str, now_ms: u64) -> Option<(String, u64)> {
        self.started
            .remove(id)
            .map(|(name, at)| (name, now_ms.saturating_sub(at)))
    }
}

/// A tool call's name as ACP gives it: its `name` when the agent gives one, else its title.
fn tool_name(name: Option<&String>, title: &str) -> String {
    match name {
        Some(n) if !n.is_empty() => n.clone(),
        _ => title.to_string(),
    }
}

/// What a finished tool call gave: its raw output, else the text of its content.
fn tool_output(
    raw: Option<&serde_json::Value>,
    content: Option<&Vec<ToolCallContent>>,
) -> serde_json::Value {
    if let Some(v) = raw {
        return v.clone();
    }
    let text: Vec<String> = content
        .into_iter()
        .flatten()
        .filter_map(|c| match c {
            ToolCallContent::Content(c) => Some(block_text(&c.content)),
            _ => None,
        })
        .collect();
    match text.is_empty() {
        true => serde_json::Value::Null,
        false => serde_json::Value::String(text.join("\n")),
    }
}

fn finished(status: Option<&ToolCallStatus>) -> Option<bool> {
    match status {
        Some(ToolCallStatus::Completed) => Some(true),
        Some(ToolCallStatus::Failed) => Some(false),
        _ => None,
    }
}

/// A plan as one status line: each entry with its state, in order.
pub fn plan_text(plan: &Plan) -> String {
    let mut s = String::from("plan:");
    for e in &plan.entries {
        let mark = match e.status {
            PlanEntryStatus::Completed => "[x]",
            PlanEntryStatus::InProgress => "[~]",
            _ => "[ ]",
        };
        s.push_str(&format!(" {mark} {};", e.content));
    }
    let s = s.trim_end_matches(';').to_string();
    match s.char_indices().nth(MAX_PLAN_CHARS) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

/// The turn's events for session update `update` at `now_ms`, in order: the answer's text, the agent's
/// thinking, its tool calls and their results, its plan as a status. Updates that say nothing of the turn
/// (its commands, its mode) give none.
pub fn events(update: &SessionUpdate, tools: &mut ToolCalls, now_ms: u64) -> Vec<TurnEvent> {
    match update {
        SessionUpdate::AgentMessageChunk(ContentChunk { content, .. }) => {
            let text = block_text(content);
            match text.is_empty() {
                true => vec![],
                false => vec![TurnEvent::Text { text }],
            }
        }
        SessionUpdate::AgentThoughtChunk(ContentChunk { content, .. }) => {
            let text = block_text(content);
            match text.is_empty() {
                true => vec![],
                false => vec![TurnEvent::Thinking { text }],
            }
        }
        SessionUpdate::ToolCall(tc) => tool_call(tc, tools, now_ms),
        SessionUpdate::ToolCallUpdate(u) => tool_call_update(u, tools, now_ms),
        SessionUpdate::Plan(p) => vec![TurnEvent::Status {
            state: StatusState::Thinking,
            progress: None,
            info: Some(plan_text(p)),
            usage: None,
        }],
        _ => vec![],
    }
}

fn tool_call(tc: &ToolCall, tools: &mut ToolCalls, now_ms: u64) -> Vec<TurnEvent> {
    let id = tc.tool_call_id.0.to_string();
    let name = tool_name(tc.name.as_ref(), &tc.title);
    tools.start(&id, &name, now_ms);
    let mut out = vec![TurnEvent::ToolCall {
        call_id: id.clone(),
        name: name.clone(),
        arguments: tc.raw_input.clone().unwrap_or(serde_json::json!({})),
    }];
    if let Some(success) = finished(Some(&tc.status)) {
        tools.end(&id, now_ms);
        out.push(TurnEvent::ToolResult {
            call_id: id,
            name,
            output: tool_output(tc.raw_output.as_ref(), Some(&tc.content)),
            success,
            duration_ms: 0,
        });
    }
    out
}

fn tool_call_update(u: &ToolCallUpdate, tools: &mut ToolCalls, now_ms: u64) -> Vec<TurnEvent> {
    let Some(success) = finished(u.fields.status.as_ref()) else {
        return vec![];
    };
    let id = u.tool_call_id.0.to_string();
    let (name, duration_ms) = match tools.end(&id, now_ms) {
        Some(known) => known,
        None => (
            tool_name(
                u.fields.name.as_ref(),
                u.fields.title.as_deref().unwrap_or(&id),
            ),
            0,
        ),
    };
    vec![TurnEvent::ToolResult {
        call_id: id,
        name,
        output: tool_output(u.fields.raw_output.as_ref(), u.fields.content.as_ref()),
        success,
        duration_ms,
    }]
}

/// The outcome of a prompt that stopped for `stop`, with `text` the answer streamed.
pub fn outcome(stop: &StopReason, text: String) -> Outcome {
    let fail = |code, message: &str| Outcome::Failure(Failure::new(code, message));
    match stop {
        StopReason::EndTurn => Outcome::Result(TurnResult {
            text,
            usage: Usage::default(),
            stop_reason: "end_turn".into(),
        }),
        StopReason::Cancelled => fail(TurnFailure::Cancelled, "cancelled"),
        StopReason::Refusal => fail(TurnFailure::AgentFailed, "the agent refused to go on"),
        StopReason::MaxTokens => fail(
            TurnFailure::AgentFailed,
            "the agent reached its token limit before it was done",
        ),
        StopReason::MaxTurnRequests => fail(
            TurnFailure::AgentFailed,
            "the agent reached its most model requests for one turn before it was done",
        ),
        _ => fail(
            TurnFailure::AgentFailed,
            "the agent stopped for a reason this daemon does not know",
        ),
    }
}

/// The approval an option of kind `kind` gives.
fn choice_of(kind: &PermissionOptionKind) -> Option<ApproveChoice> {
    match kind {
        PermissionOptionKind::AllowOnce => Some(ApproveChoice::Once),
        PermissionOptionKind::AllowAlways => Some(ApproveChoice::Always),
        PermissionOptionKind::RejectOnce | PermissionOptionKind::RejectAlways => {
            Some(ApproveChoice::No)
        }
        _ => None,
    }
}

/// Permission request `req` as an engine question: an approval (every front asks one: yes once, always,
/// no) when its options are the usual allow and reject kinds, else a choice among its options by name.
/// `call_id` names the call in the question.
pub fn permission_question(req: &RequestPermissionRequest, call_id: &str) -> Question {
    let title = req
        .tool_call
        .fields
        .title
        .clone()
        .unwrap_or_else(|| req.tool_call.tool_call_id.0.to_string());
    let allows = req
        .options
        .iter()
        .any(|o| choice_of(&o.kind).is_some_and(|c| c.approves()));
    let rejects = req
        .options
        .iter()
        .any(|o| choice_of(&o.kind) == Some(ApproveChoice::No));
    let kind = if allows && rejects {
        let input = req
            .tool_call
            .fields
            .raw_input
            .as_ref()
            .map(|v| format!(" {v}"))
            .unwrap_or_default();
        QuestionKind::Approve {
            command: title.clone(),
            display: format!("{title}{input}"),
            tag: req
                .tool_call
                .fields
                .kind
                .as_ref()
                .map(|k| format!("{k:?}").to_lowercase()),
        }
    } else {
        QuestionKind::Select {
            question: format!("{title}: allow?"),
            options: req
                .options
                .iter()
                .map(|o| QuestionOption::new(o.option_id.0.to_string(), o.name.clone()))
                .collect(),
            multiple: false,
            freeform: false,
        }
    };
    Question::new(PERMISSION_TOOL, call_id, kind)
}

/// The first option of `options` whose kind gives `want`, else one that gives `fallback`.
fn option_for(
    options: &[PermissionOption],
    want: &[PermissionOptionKind],
) -> Option<PermissionOptionId> {
    want.iter().find_map(|k| {
        options
            .iter()
            .find(|o| &o.kind == k)
            .map(|o| o.option_id.clone())
    })
}

/// The outcome a permission request with `options` gets for `answer`: the option of the kind the answer
/// names (an "always" answered with the agent's allow-always option, else its allow-once), a rejection
/// (nobody there to answer is a rejection too), or the option a choice named. `None` when no option fits:
/// the request is then answered cancelled.
pub fn permission_answer(
    options: &[PermissionOption],
    answer: &Answer,
) -> RequestPermissionOutcome {
    use PermissionOptionKind::*;
    let chosen = match answer {
        Answer::Approve { choice } => match choice {
            ApproveChoice::Once => option_for(options, &[AllowOnce, AllowAlways]),
            ApproveChoice::Session | ApproveChoice::Always => {
                option_for(options, &[AllowAlways, AllowOnce])
            }
            ApproveChoice::No => option_for(options, &[RejectOnce, RejectAlways]),
        },
        Answer::NoOperator => option_for(options, &[RejectOnce, RejectAlways]),
        Answer::Select { value } => options
            .iter()
            .find(|o| &*o.option_id.0 == value.as_str())
            .map(|o| o.option_id.clone()),
        Answer::Confirm { confirmed: true } => option_for(options, &[AllowOnce, AllowAlways]),
        Answer::Confirm { confirmed: false } => option_for(options, &[RejectOnce, RejectAlways]),
        _ => None,
    };
    match chosen {
        Some(id) => RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(id)),
        None => RequestPermissionOutcome::Cancelled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema::{
        ContentChunk, PlanEntry, PlanEntryPriority, SessionId, ToolCallId, ToolCallUpdateFields,
    };

    fn text_chunk(s: &str) -> ContentChunk {
        ContentChunk::new(ContentBlock::from(s))
    }

    fn option(id: &str, kind: PermissionOptionKind) -> PermissionOption {
        PermissionOption::new(PermissionOptionId::new(id), id.to_string(), kind)
    }

    fn request(options: Vec<PermissionOption>) -> RequestPermissionRequest {
        RequestPermissionRequest::new(
            SessionId::new("s1"),
            ToolCallUpdate::new(
                ToolCallId::new("call_1"),
                ToolCallUpdateFields::new()
                    .title("Write notes.txt".to_string())
                    .raw_input(serde_json::json!({"path": "notes.txt"})),
            ),
            options,
        )
    }

    #[test]
    fn chunks_are_text_and_thinking_and_a_plan_is_a_status() {
        let mut tools = ToolCalls::default();
        assert_eq!(
            events(
                &SessionUpdate::AgentMessageChunk(text_chunk("hel")),
                &mut tools,
                0
            ),
            vec![TurnEvent::Text { text: "hel".into() }]
        );
        assert_eq!(
            events(
                &SessionUpdate::AgentThoughtChunk(text_chunk("hmm")),
                &mut tools,
                0
            ),
            vec![TurnEvent::Thinking { text: "hmm".into() }]
        );
        assert!(events(
            &SessionUpdate::AgentMessageChunk(text_chunk("")),
            &mut tools,
            0
        )
        .is_empty());
        let plan = Plan::new(vec![
            PlanEntry::new(
                "read".to_string(),
                PlanEntryPriority::High,
                PlanEntryStatus::Completed,
            ),
            PlanEntry::new(
                "write".to_string(),
                PlanEntryPriority::Low,
                PlanEntryStatus::Pending,
            ),
        ]);
        let [TurnEvent::Status {
            info: Some(info), ..
        }] = &events(&SessionUpdate::Plan(plan), &mut tools, 0)[..]
        else {
            panic!("one status");
        };
        assert_eq!(info, "plan: [x] read; [ ] write");
    }

    #[test]
    fn a_tool_call_and_its_update_are_the_call_and_its_result_with_the_time_between() {
        let mut tools = ToolCalls::default();
        let call = ToolCall::new(ToolCallId::new("c1"), "Read file".to_string())
            .raw_input(serde_json::json!({"path": "a"}));
        let started = events(&SessionUpdate::ToolCall(call), &mut tools, 1_000);
        assert_eq!(
            started,
            vec![TurnEvent::ToolCall {
                call_id: "c1".into(),
                name: "Read file".into(),
                arguments: serde_json::json!({"path": "a"}),
            }]
        );
        let pending = ToolCallUpdate::new(
            ToolCallId::new("c1"),
            ToolCallUpdateFields::new().status(ToolCallStatus::InProgress),
        );
        assert!(events(&SessionUpdate::ToolCallUpdate(pending), &mut tools, 1_100).is_empty());
        let done = ToolCallUpdate::new(
            ToolCallId::new("c1"),
            ToolCallUpdateFields::new()
                .status(ToolCallStatus::Failed)
                .raw_output(serde_json::json!({"error": "no such file"})),
        );
        assert_eq!(
            events(&SessionUpdate::ToolCallUpdate(done), &mut tools, 1_250),
            vec![TurnEvent::ToolResult {
                call_id: "c1".into(),
                name: "Read file".into(),
                output: serde_json::json!({"error": "no such file"}),
                success: false,
                duration_ms: 250,
            }]
        );
    }

    #[test]
    fn stop_reasons_end_the_turn_with_their_outcomes() {
        assert!(matches!(
            outcome(&StopReason::EndTurn, "hi".into()),
            Outcome::Result(r) if r.text == "hi"
        ));
        for (stop, code) in [
            (StopReason::Cancelled, TurnFailure::Cancelled),
            (StopReason::Refusal, TurnFailure::AgentFailed),
            (StopReason::MaxTokens, TurnFailure::AgentFailed),
            (StopReason::MaxTurnRequests, TurnFailure::AgentFailed),
        ] {
            let Outcome::Failure(f) = outcome(&stop, String::new()) else {
                panic!("{stop:?}");
            };
            assert_eq!(f.code, code, "{stop:?}");
        }
    }

    #[test]
    fn a_permission_request_is_an_approval_answered_with_the_option_of_its_kind() {
        use PermissionOptionKind::*;
        let options = vec![
            option("no", RejectOnce),
            option("yes", AllowOnce),
            option("always", AllowAlways),
        ];
        let q = permission_question(&request(options.clone()), "p1");
        let QuestionKind::Approve {
            command, display, ..
        } = &q.kind
        else {
            panic!("{q:?}");
        };
        assert_eq!(command, "Write notes.txt");
        assert!(display.contains("notes.txt"), "{display}");
        let picked = |choice| match permission_answer(&options, &Answer::Approve { choice }) {
            RequestPermissionOutcome::Selected(s) => s.option_id.0.to_string(),
            other => panic!("{other:?}"),
        };
        assert_eq!(picked(ApproveChoice::Once), "yes");
        assert_eq!(picked(ApproveChoice::Always), "always");
        assert_eq!(picked(ApproveChoice::Session), "always");
        assert_eq!(picked(ApproveChoice::No), "no");
        assert!(matches!(
            permission_answer(&options, &Answer::NoOperator),
            RequestPermissionOutcome::Selected(s) if &*s.option_id.0 == "no"
        ));
        // An agent that offers no "always" gets its "once" for it.
        let once_only = vec![option("no", RejectOnce), option("yes", AllowOnce)];
        assert!(matches!(
            permission_answer(&once_only, &Answer::Approve { choice: ApproveChoice::Always }),
            RequestPermissionOutcome::Selected(s) if &*s.option_id.0 == "yes"
        ));
    }

    #[test]
    fn options_that_are_not_allow_and_reject_are_a_choice_by_name() {
        let options = vec![option("a", PermissionOptionKind::AllowOnce)];
        let q = permission_question(&request(options.clone()), "p1");
        let QuestionKind::Select { options: shown, .. } = &q.kind else {
            panic!("{q:?}");
        };
        assert_eq!(shown[0].id, "a");
        assert!(matches!(
            permission_answer(&options, &Answer::Select { value: "a".into() }),
            RequestPermissionOutcome::Selected(_)
        ));
        assert!(matches!(
            permission_answer(&options, &Answer::Select { value: "zz".into() }),
            RequestPermissionOutcome::Cancelled
        ));
    }
}
