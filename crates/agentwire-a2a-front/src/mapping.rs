//! A turn as an A2A task, and back: the ids ([`request_id`], [`conversation_id`]), the task a turn's events
//! make ([`Tracker`], which also says what each event streams), an agent's card ([`agent_card`]), and a
//! client's text as the answer to the agent's question ([`answer_from_text`]). Pure.

use crate::wire::{
    Artifact, Message, Part, Role, StreamResponse, Task, TaskArtifactUpdateEvent, TaskState,
    TaskStatus, TaskStatusUpdateEvent,
};
use agentwire_core::{
    Answer, ConversationId, FailureCode, Outcome, Question, QuestionKind, RequestId, TurnEvent,
};
use agentwire_engine::{AgentCard, WatchKind};
use serde_json::{json, Value};

/// How much of an answer that fits no option an error quotes back: enough to see what was sent.
const QUOTED_ANSWER_CHARS: usize = 80;
/// The front's name, the protocol its turns are journaled under, and the prefix of their ids.
pub const PROTOCOL: &str = "a2a";
/// The id of the one artifact a task has: the agent's answer.
pub const ANSWER_ARTIFACT: &str = "answer";
/// The most messages a task's history keeps: the client's message, the agent's questions and its last
/// word; an agent that asks more than this in one task has its oldest questions left out of the history
/// (each was in its status when asked).
pub const MAX_HISTORY_MESSAGES: usize = 64;

/// The turn of task `task_id`: `a2a:<task id>`; `None` when the id cannot be one (so no task has it).
pub fn request_id(task_id: &str) -> Option<RequestId> {
    RequestId::new(format!("{PROTOCOL}:{task_id}")).ok()
}

/// The task id of turn `id` (its id without the `a2a:` prefix).
pub fn task_id_of(id: &RequestId) -> String {
    let s = id.as_str();
    s.strip_prefix(PROTOCOL)
        .and_then(|r| r.strip_prefix(':'))
        .unwrap_or(s)
        .to_string()
}

/// The conversation of context `context` of requester `requester`: `a2a:<requester>/<context>`. A context
/// is its caller's own: another caller naming the same context id starts a conversation of its own, and
/// never reads or extends this one.
pub fn conversation_id(requester: &str, context: &str) -> Option<ConversationId> {
    ConversationId::new(format!("{PROTOCOL}:{requester}/{context}")).ok()
}

/// The context id of conversation `conversation`, whose requester is `requester`.
pub fn context_of(conversation: &ConversationId, requester: &str) -> String {
    let s = conversation.as_str();
    s.strip_prefix(&format!("{PROTOCOL}:{requester}/"))
        .unwrap_or(s)
        .to_string()
}

/// An id from 16 random bytes, in the UUID (version 4) form clients expect.
pub fn new_id(mut bytes: [u8; 16]) -> String {
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// The task state an outcome ends a turn in: completed, canceled, rejected (refused before it ran) or
/// failed.
pub fn end_state(outcome: &Outcome) -> TaskState {
    match outcome {
        Outcome::Result(_) => TaskState::Completed,
        Outcome::Failure(_) if outcome.is_cancelled() => TaskState::Canceled,
        Outcome::Failure(f) if matches!(f.code, FailureCode::Refused(_)) => TaskState::Rejected,
        Outcome::Failure(_) => TaskState::Failed,
    }
}

/// The question as the agent's message: the question, its options and how to answer, in text, and the
/// same as a data part (`questionId`, `kind`, `question`, `options` of `{id, label}`, `multiple`,
/// `freeform`, `default`).
pub fn question_message(
    message_id: String,
    task: &str,
    context: &str,
    question_id: &str,
    q: &Question,
) -> Message {
    let options = q.kind.options();
    let mut text = q.kind.text();
    if !options.is_empty() {
        let listed: Vec<String> = options
            .iter()
            .map(|o| match o.id == o.label {
                true => o.id.clone(),
                false => format!("{} ({})", o.id, o.label),
            })
            .collect();
        text.push_str(&format!("\nOptions: {}", listed.join(", ")));
    }
    let how = match &q.kind {
        QuestionKind::Input { .. } => "Answer with your text.",
        QuestionKind::Select { multiple: true, .. } => {
            "Answer with options' ids or labels, separated by commas."
        }
        QuestionKind::Select { freeform: true, .. } => {
            "Answer with an option's id or label, or with your own text."
        }
        _ => "Answer with an option's id or label.",
    };
    text.push_str(&format!("\n{how}"));
    let default = match &q.kind {
        QuestionKind::Input { default, .. } => default.clone(),
        _ => None,
    };
    let data = json!({
        "questionId": question_id,
        "kind": q.kind.name(),
        "question": q.kind.text(),
        "options": options.iter().map(|o| json!({"id": o.id, "label": o.label})).collect::<Vec<_>>(),
        "multiple": q.kind.selection() == agentwire_core::Selection::Multiple,
        "freeform": q.kind.freeform(),
        "default": default,
    });
    agent_message(
        message_id,
        task,
        context,
        vec![Part::text(text), Part::data(data)],
    )
}

fn agent_message(id: String, task: &str, context: &str, parts: Vec<Part>) -> Message {
    Message {
        message_id: id,
        context_id: Some(context.to_string()),
        task_id: Some(task.to_string()),
        role: Role::Agent,
        parts,
        metadata: None,
    }
}

/// The client's message of a task, as its history shows it.
pub fn user_message(message_id: &str, task: &str, context: &str, text: &str) -> Message {
    Message {
        message_id: message_id.to_string(),
        context_id: Some(context.to_string()),
        task_id: Some(task.to_string()),
        role: Role::User,
        parts: vec![Part::text(text)],
        metadata: None,
    }
}

/// Why a client's text is not an answer to the agent's question (the `InvalidParams` of a message that
/// answers a task in `TASK_STATE_INPUT_REQUIRED`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerTextError {
    /// The text names none of the question's options, and the question takes no free text.
    #[error("the answer does not fit the question: {text:?} is not one of the question's options: answer with an option's id or label: {options}")]
    NotAnOption {
        /// The text (its first 80 characters).
        text: String,
        /// The options, `id (label)`, comma-separated.
        options: String,
    },
    /// The options or the text it names are refused as the question's answer.
    #[error("the answer does not fit the question: {0}")]
    DoesNotFit(#[source] agentwire_http::answer::AnswerRefusal),
}

/// A client's text as the answer to a question of `kind`: text for an input question; otherwise an
/// option named by its id or its label (any case; several separated by commas where several may be
/// chosen), or, where the question takes free text beside its options, the text itself. `Err` says what
/// the question takes.
pub fn answer_from_text(kind: &QuestionKind, text: &str) -> Result<Answer, AnswerTextError> {
    let text = text.trim();
    if let QuestionKind::Input { .. } = kind {
        return agentwire_http::answer::answer_for(kind, &[], Some(text))
            .map_err(AnswerTextError::DoesNotFit);
    }
    let options = kind.options();
    let pick = |piece: &str| {
        let piece = piece.trim();
        options
            .iter()
            .find(|o| o.id.eq_ignore_ascii_case(piece) || o.label.eq_ignore_ascii_case(piece))
            .map(|o| o.id.clone())
    };
    let pieces: Vec<&str> = match kind.selection() {
        agentwire_core::Selection::Multiple => text.split(',').collect(),
        _ => vec![text],
    };
    let picked: Option<Vec<String>> = pieces.iter().map(|p| pick(p)).collect();
    let listed = || {
        options
            .iter()
            .map(|o| format!("{} ({})", o.id, o.label))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match picked {
        Some(ids) => agentwire_http::answer::answer_for(kind, &ids, None),
        None if kind.freeform() && !text.is_empty() => {
            agentwire_http::answer::answer_for(kind, &[], Some(text))
        }
        None => {
            return Err(AnswerTextError::NotAnOption {
                text: text.chars().take(QUOTED_ANSWER_CHARS).collect(),
                options: listed(),
            })
        }
    }
    .map_err(AnswerTextError::DoesNotFit)
}

/// What a turn's events make of its task, and what each of them streams.
#[derive(Debug, Clone)]
pub struct Tracker {
    task: String,
    context: String,
    state: TaskState,
    status: Option<Message>,
    status_ms: Option<u64>,
    user: Option<Message>,
    /// The agent's questions and its last word, oldest first.
    said: Vec<Message>,
    /// The answer's text streamed so far.
    streamed: String,
    /// The answer artifact has been streamed from (an update with `append` follows).
    artifact_open: bool,
    /// The final answer.
    answer: Option<String>,
    /// Status messages made so far (their ids' counter).
    made: u64,
}

impl Tracker {
    /// A task not yet accepted (submitted), with the client's message when it is known.
    pub fn new(task: &str, context: &str, user: Option<Message>) -> Tracker {
        Tracker {
            task: task.to_string(),
            context: context.to_string(),
            state: TaskState::Submitted,
            status: None,
            status_ms: None,
            user,
            said: Vec::new(),
            streamed: String::new(),
            artifact_open: false,
            answer: None,
            made: 0,
        }
    }

    /// Its state.
    pub fn state(&self) -> TaskState {
        self.state
    }

    /// When its status last changed, in Unix milliseconds.
    pub fn status_ms(&self) -> Option<u64> {
        self.status_ms
    }

    fn next_id(&mut self, what: &str) -> String {
        self.made += 1;
        format!("{}-{what}-{}", self.task, self.made)
    }

    fn update(&self) -> StreamResponse {
        StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: self.task.clone(),
            context_id: self.context.clone(),
            status: self.status(),
        })
    }

    fn artifact(&self, text: String, append: bool, last: bool) -> StreamResponse {
        StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
            task_id: self.task.clone(),
            context_id: self.context.clone(),
            artifact: Artifact {
                artifact_id: ANSWER_ARTIFACT.into(),
                name: Some(ANSWER_ARTIFACT.into()),
                parts: vec![Part::text(text)],
            },
            append,
            last_chunk: last,
        })
    }

    /// Moves to `state` with `message`, at `at_ms`: the status update it streams.
    fn to(&mut self, state: TaskState, message: Option<Message>, at_ms: u64) -> StreamResponse {
        self.state = state;
        self.status = message;
        self.status_ms = Some(at_ms);
        self.update()
    }

    fn working(&mut self, at_ms: u64, out: &mut Vec<StreamResponse>) {
        if self.state == TaskState::Submitted {
            out.push(self.to(TaskState::Working, None, at_ms));
        }
    }

    fn remember(&mut self, m: Message) {
        self.said.push(m);
        if self.said.len() > MAX_HISTORY_MESSAGES {
            self.said.remove(0);
        }
    }

    /// Takes what the turn did at `at_ms`, and returns what it streams (nothing once the task has ended).
    pub fn apply(&mut self, kind: &WatchKind, at_ms: u64) -> Vec<StreamResponse> {
        let mut out = Vec::new();
        if self.state.is_terminal() {
            return out;
        }
        match kind {
            WatchKind::Accepted { queued, .. } => {
                let state = match queued {
                    true => TaskState::Submitted,
                    false => TaskState::Working,
                };
                out.push(self.to(state, None, at_ms));
            }
            WatchKind::Event(TurnEvent::Text { text }) => {
                self.working(at_ms, &mut out);
                self.streamed.push_str(text);
                out.push(self.artifact(text.clone(), self.artifact_open, false));
                self.artifact_open = true;
            }
            WatchKind::Event(TurnEvent::Status {
                info: Some(info), ..
            }) if self.state != TaskState::InputRequired => {
                let id = self.next_id("status");
                let m = agent_message(id, &self.task, &self.context, vec![Part::text(info)]);
                out.push(self.to(TaskState::Working, Some(m), at_ms));
            }
            WatchKind::Event(TurnEvent::ToolCall { name, .. })
                if self.state != TaskState::InputRequired =>
            {
                let id = self.next_id("status");
                let text = format!("running tool {name}");
                let m = agent_message(id, &self.task, &self.context, vec![Part::text(text)]);
                out.push(self.to(TaskState::Working, Some(m), at_ms));
            }
            WatchKind::Event(_) => self.working(at_ms, &mut out),
            WatchKind::Question { id, question } => {
                let mid = self.next_id("question");
                let m = question_message(mid, &self.task, &self.context, id, question);
                self.remember(m.clone());
                out.push(self.to(TaskState::InputRequired, Some(m), at_ms));
            }
            WatchKind::QuestionClosed { answer, .. } => {
                // The answer, from whichever front took it, is the client's side of the task's history.
                if let Some(said) = answer {
                    let id = self.next_id("answer");
                    self.remember(user_message(&id, &self.task, &self.context, said));
                }
                out.push(self.to(TaskState::Working, None, at_ms));
            }
            WatchKind::Outcome(outcome) => out.extend(self.end(outcome, at_ms)),
            _ => {}
        }
        out
    }

    fn end(&mut self, outcome: &Outcome, at_ms: u64) -> Vec<StreamResponse> {
        let mut out = Vec::new();
        let state = end_state(outcome);
        let message = match outcome {
            Outcome::Result(r) => {
                // The deltas streamed were the answer's beginning: the rest follows them; otherwise (they
                // were progress, or some were let go) the whole answer replaces them.
                match r.text.strip_prefix(self.streamed.as_str()) {
                    Some(rest) if self.artifact_open => {
                        out.push(self.artifact(rest.to_string(), true, true))
                    }
                    _ => out.push(self.artifact(r.text.clone(), false, true)),
                }
                self.answer = Some(r.text.clone());
                let id = format!("{}-answer", self.task);
                agent_message(id, &self.task, &self.context, vec![Part::text(&r.text)])
            }
            Outcome::Failure(f) => {
                let id = format!("{}-failure", self.task);
                let mut m =
                    agent_message(id, &self.task, &self.context, vec![Part::text(&f.message)]);
                let mut meta = json!({ "code": f.code.as_str() });
                if let Some(secs) = f.retry_after {
                    meta["retryAfterSeconds"] = json!(secs);
                }
                m.metadata = Some(meta);
                m
            }
        };
        self.remember(message.clone());
        out.push(self.to(state, Some(message), at_ms));
        out
    }

    /// The task: its status, its answer artifact (the answer once it is in, the text streamed so far
    /// before) when `artifacts`, and its newest `history` messages (all when `None`; none for 0).
    pub fn task(&self, history: Option<usize>, artifacts: bool) -> Task {
        let artifacts = artifacts.then(|| {
            let text = self.answer.clone().unwrap_or_else(|| self.streamed.clone());
            match text.is_empty() && self.answer.is_none() {
                true => Vec::new(),
                false => vec![Artifact {
                    artifact_id: ANSWER_ARTIFACT.into(),
                    name: Some(ANSWER_ARTIFACT.into()),
                    parts: vec![Part::text(text)],
                }],
            }
        });
        let history = match history {
            Some(0) => None,
            n => {
                let all: Vec<Message> = self.user.iter().chain(self.said.iter()).cloned().collect();
                let keep = n.unwrap_or(usize::MAX).min(all.len());
                Some(all[all.len() - keep..].to_vec())
            }
        };
        Task {
            id: self.task.clone(),
            context_id: self.context.clone(),
            status: self.status(),
            artifacts,
            history,
        }
    }

    /// The current status.
    pub fn status(&self) -> TaskStatus {
        TaskStatus {
            state: self.state,
            message: self.status.clone(),
            timestamp: self.status_ms.map(crate::wire::timestamp),
        }
    }
}

/// The agent card of agent `name` (its engine's card `card`), served at `base` (`http://<host>/a2a/<name>`):
/// both bindings at that URL, protocol 1.0, streaming, no push notifications and no extended card, the
/// bearer scheme, and a skill per tool (one for the agent itself when it has none). Nothing in it is
/// secret.
pub fn agent_card(name: &str, card: &AgentCard, base: &str) -> Value {
    let mut skills: Vec<Value> = card
        .tools
        .iter()
        .map(|t| {
            json!({
                "id": t.name,
                "name": t.name,
                "description": if t.description.is_empty() { t.name.clone() } else { t.description.clone() },
                "tags": ["tool"],
            })
        })
        .collect();
    if skills.is_empty() {
        skills.push(json!({
            "id": name,
            "name": name,
            "description": card.description,
            "tags": ["chat"],
        }));
    }
    let interface = |binding: &str| json!({ "url": base, "protocolBinding": binding, "protocolVersion": crate::wire::PROTOCOL_VERSION });
    json!({
        "name": name,
        "description": if card.description.is_empty() { name.to_string() } else { card.description.clone() },
        "version": card.version,
        "supportedInterfaces": [interface("JSONRPC"), interface("HTTP+JSON")],
        "capabilities": {
            "streaming": true,
            "pushNotifications": false,
            "extendedAgentCard": false,
        },
        "securitySchemes": {
            "bearer": {
                "httpAuthSecurityScheme": {
                    "scheme": "Bearer",
                    "description": "Authorization: Bearer with a caller's credential from the daemon's [[http.callers]], or the operator's",
                }
            }
        },
        "securityRequirements": [{ "schemes": { "bearer": { "list": [] } } }],
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": skills,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire_core::{Failure, QuestionOption, Refusal, TurnFailure, TurnResult, Usage};
    use agentwire_engine::ToolSpec;

    fn accepted(queued: bool) -> WatchKind {
        WatchKind::Accepted {
            queued,
            protocol: PROTOCOL.into(),
            agent: "demo".into(),
            conversation: ConversationId::new("a2a:operator/c").unwrap(),
            prompt: "p".into(),
            requester: "operator".into(),
        }
    }

    fn result(text: &str) -> WatchKind {
        WatchKind::Outcome(Outcome::Result(TurnResult {
            text: text.into(),
            usage: Usage::default(),
            stop_reason: "stop".into(),
        }))
    }

    fn text(t: &str) -> WatchKind {
        WatchKind::Event(TurnEvent::Text { text: t.into() })
    }

    fn pick() -> Question {
        Question::new(
            "ask",
            "call-1",
            QuestionKind::Select {
                question: "Which colour?".into(),
                options: vec![
                    QuestionOption::new("r", "Red"),
                    QuestionOption::new("g", "Green"),
                ],
                multiple: false,
                freeform: false,
            },
        )
    }

    #[test]
    fn ids_round_trip_and_a_context_is_its_callers_own() {
        let id = new_id([0xab; 16]);
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4", "a version 4 UUID: {id}");
        let rid = request_id(&id).unwrap();
        assert_eq!(rid.as_str(), format!("a2a:{id}"));
        assert_eq!(task_id_of(&rid), id);
        assert!(request_id("has space").is_none());
        let alice = conversation_id("caller:alice", "ctx").unwrap();
        let bob = conversation_id("caller:bob", "ctx").unwrap();
        assert_ne!(alice, bob, "the same context id names two conversations");
        assert_eq!(context_of(&alice, "caller:alice"), "ctx");
    }

    #[test]
    fn streamed_text_is_the_answer_artifact_and_the_outcome_completes_it() {
        let mut t = Tracker::new("t1", "c1", None);
        let first = t.apply(&accepted(false), 1_000);
        assert!(
            matches!(&first[..], [StreamResponse::StatusUpdate(u)] if u.status.state == TaskState::Working)
        );
        let a = t.apply(&text("You said"), 1_001);
        let b = t.apply(&text(": hi"), 1_002);
        match (&a[..], &b[..]) {
            ([StreamResponse::ArtifactUpdate(a)], [StreamResponse::ArtifactUpdate(b)]) => {
                assert!(
                    !a.append && b.append,
                    "the first opens the artifact, the next append"
                );
                assert_eq!(a.artifact.artifact_id, ANSWER_ARTIFACT);
            }
            other => panic!("{other:?}"),
        }
        let end = t.apply(&result("You said: hi"), 1_003);
        match &end[..] {
            [StreamResponse::ArtifactUpdate(last), StreamResponse::StatusUpdate(done)] => {
                assert!(last.append && last.last_chunk);
                assert_eq!(last.artifact.parts[0].text.as_deref(), Some(""));
                assert_eq!(done.status.state, TaskState::Completed);
            }
            other => panic!("{other:?}"),
        }
        let task = t.task(None, true);
        assert_eq!(
            task.artifacts.unwrap()[0].parts[0].text.as_deref(),
            Some("You said: hi")
        );
        assert_eq!(
            task.status.timestamp.as_deref(),
            Some("1970-01-01T00:00:01.003Z")
        );
        assert!(
            t.apply(&text("late"), 2_000).is_empty(),
            "nothing after the end"
        );
    }

    #[test]
    fn progress_that_is_not_the_answer_is_replaced_by_it() {
        let mut t = Tracker::new("t1", "c1", None);
        t.apply(&accepted(false), 0);
        t.apply(&text("tick 1\n"), 1);
        let end = t.apply(&result("slept 100 ms"), 2);
        match &end[0] {
            StreamResponse::ArtifactUpdate(u) => {
                assert!(!u.append && u.last_chunk);
                assert_eq!(u.artifact.parts[0].text.as_deref(), Some("slept 100 ms"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_question_is_input_required_with_its_options_and_an_answer_resumes_work() {
        let user = user_message("m1", "t1", "c1", "ask Which colour? | Red | Green");
        let mut t = Tracker::new("t1", "c1", Some(user));
        t.apply(&accepted(false), 0);
        let asked = t.apply(
            &WatchKind::Question {
                id: "q1".into(),
                question: pick(),
            },
            5,
        );
        let [StreamResponse::StatusUpdate(u)] = &asked[..] else {
            panic!("{asked:?}")
        };
        assert_eq!(u.status.state, TaskState::InputRequired);
        let m = u.status.message.as_ref().unwrap();
        let said = m.parts[0].text.as_deref().unwrap();
        assert!(
            said.contains("Which colour?") && said.contains("g (Green)"),
            "{said}"
        );
        assert_eq!(m.parts[1].data.as_ref().unwrap()["options"][1]["id"], "g");
        assert_eq!(m.parts[1].data.as_ref().unwrap()["questionId"], "q1");
        let back = t.apply(
            &WatchKind::QuestionClosed {
                id: "q1".into(),
                answer: Some("g (Green)".into()),
            },
            6,
        );
        assert!(
            matches!(&back[..], [StreamResponse::StatusUpdate(u)] if u.status.state == TaskState::Working)
        );
        t.apply(&result("Green"), 7);
        let h = t.task(None, false).history.unwrap();
        assert_eq!(
            h.len(),
            4,
            "the message, the question, its answer, the agent's answer"
        );
        assert_eq!(h[0].role, Role::User);
        assert_eq!(h[2].role, Role::User);
        assert_eq!(h[2].parts[0].text.as_deref(), Some("g (Green)"));
        assert_eq!(t.task(Some(1), false).history.unwrap().len(), 1);
        assert!(t.task(Some(0), false).history.is_none());
        assert!(t.task(None, false).artifacts.is_none());
    }

    #[test]
    fn the_history_keeps_the_newest_messages_within_its_bound() {
        let user = user_message("m1", "t1", "c1", "ask");
        let mut t = Tracker::new("t1", "c1", Some(user));
        t.apply(&accepted(false), 0);
        for i in 0..MAX_HISTORY_MESSAGES + 5 {
            let id = format!("q{i}");
            t.apply(
                &WatchKind::Question {
                    id: id.clone(),
                    question: pick(),
                },
                1,
            );
            t.apply(&WatchKind::QuestionClosed { id, answer: None }, 2);
        }
        let h = t.task(None, false).history.unwrap();
        assert_eq!(
            h.len(),
            MAX_HISTORY_MESSAGES + 1,
            "the client's message and the newest"
        );
        assert_eq!(h[0].role, Role::User);
        let newest = h.last().unwrap().parts[1].data.as_ref().unwrap();
        assert_eq!(
            newest["questionId"],
            format!("q{}", MAX_HISTORY_MESSAGES + 4)
        );
    }

    #[test]
    fn outcomes_map_to_the_specs_end_states() {
        let fail = |code: FailureCode| Outcome::Failure(Failure::new(code, "m"));
        assert_eq!(
            end_state(&fail(TurnFailure::Cancelled.into())),
            TaskState::Canceled
        );
        assert_eq!(
            end_state(&fail(Refusal::Capacity.into())),
            TaskState::Rejected
        );
        assert_eq!(
            end_state(&fail(TurnFailure::AgentFailed.into())),
            TaskState::Failed
        );
        let mut t = Tracker::new("t", "c", None);
        let out = t.apply(
            &WatchKind::Outcome(Outcome::Failure(
                Failure::new(TurnFailure::AgentFailed, "failed on request").retry_after(3),
            )),
            9,
        );
        let [StreamResponse::StatusUpdate(u)] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!(u.status.state, TaskState::Failed);
        let m = u.status.message.as_ref().unwrap();
        assert_eq!(m.parts[0].text.as_deref(), Some("failed on request"));
        assert_eq!(m.metadata.as_ref().unwrap()["retryAfterSeconds"], 3);
    }

    #[test]
    fn an_answer_is_an_option_by_id_or_label_or_text_where_text_is_taken() {
        let k = pick().kind;
        assert_eq!(
            answer_from_text(&k, " green "),
            Ok(Answer::Select { value: "g".into() })
        );
        assert_eq!(
            answer_from_text(&k, "R"),
            Ok(Answer::Select { value: "r".into() })
        );
        let e = answer_from_text(&k, "blue").unwrap_err().to_string();
        assert_eq!(
            e,
            "the answer does not fit the question: \"blue\" is not one of the question's options: answer with an option's id or label: r (Red), g (Green)"
        );
        let long = answer_from_text(&k, &"b".repeat(200)).unwrap_err();
        let AnswerTextError::NotAnOption { text, .. } = &long else {
            panic!("{long:?}")
        };
        assert_eq!(text.chars().count(), QUOTED_ANSWER_CHARS);
        let refusal =
            AnswerTextError::DoesNotFit(agentwire_http::answer::AnswerRefusal::InputTakesText);
        assert_eq!(
            refusal.to_string(),
            "the answer does not fit the question: an input question takes text only"
        );
        assert!(std::error::Error::source(&refusal).is_some());
        let confirm = QuestionKind::Confirm {
            question: "Sure?".into(),
        };
        assert_eq!(
            answer_from_text(&confirm, "YES"),
            Ok(Answer::Confirm { confirmed: true })
        );
        assert!(answer_from_text(&confirm, "maybe").is_err());
        let input = QuestionKind::Input {
            question: "Name?".into(),
            default: None,
        };
        assert_eq!(
            answer_from_text(&input, "Ada"),
            Ok(Answer::Input {
                value: "Ada".into()
            })
        );
        let many = QuestionKind::Select {
            question: "Which?".into(),
            options: vec![QuestionOption::new("a", "A"), QuestionOption::new("b", "B")],
            multiple: true,
            freeform: true,
        };
        assert_eq!(
            answer_from_text(&many, "a, B"),
            Ok(Answer::Choices {
                choices: vec!["a".into(), "b".into()],
                text: None
            })
        );
        assert_eq!(
            answer_from_text(&many, "something else"),
            Ok(Answer::Choices {
                choices: vec![],
                text: Some("something else".into())
            })
        );
    }

    #[test]
    fn the_card_names_both_bindings_the_bearer_scheme_and_the_tools() {
        let card = AgentCard {
            name: "demo".into(),
            version: "1".into(),
            description: "d".into(),
            models: vec![],
            default_model: String::new(),
            tools: vec![ToolSpec {
                name: "calculator".into(),
                description: "Evaluate arithmetic".into(),
                input_schema: json!({}),
                requires_approval: false,
                output_schema: None,
            }],
            max_prompt_bytes: 1,
            max_context_tokens: 1,
        };
        let c = agent_card("demo", &card, "http://127.0.0.1:1/a2a/demo");
        assert_eq!(c["supportedInterfaces"][0]["protocolBinding"], "JSONRPC");
        assert_eq!(c["supportedInterfaces"][1]["protocolBinding"], "HTTP+JSON");
        assert_eq!(
            c["supportedInterfaces"][1]["url"],
            "http://127.0.0.1:1/a2a/demo"
        );
        assert_eq!(c["capabilities"]["streaming"], true);
        assert_eq!(c["skills"][0]["id"], "calculator");
        assert_eq!(
            c["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"],
            "Bearer"
        );
        let none = AgentCard {
            tools: vec![],
            ..card
        };
        assert_eq!(agent_card("x", &none, "u")["skills"][0]["id"], "x");
    }
}
