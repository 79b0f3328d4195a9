//! Admission of a fisk-ai request, in the spec's order: `rejected` (the sender policy), `draining`, `capacity`, `duplicate_request`,
//! `conversation_busy`; then what the conversation allows (`unknown_conversation`, `config_drift`,
//! `budget_exhausted`, `turn_not_taken`, and for answers `answer_too_large`, `already_answered`,
//! `unknown_call`). A refusal is an `ack` with `accepted: false` and a reason, then an `error` with the code.

use super::front::TurnSetup;
use super::replyset::ReplySet;
use super::{request_id, Worker};
use crate::conversation::{self, allowance, mint_token, ConversationMeta, TOKEN_BYTES};
use crate::mapping;
use crate::wire::{self, Ack, Block, Header, Reply, TaskRequest, WireError};
use agentwire_core::{
    CallAnswer, ConversationId, FailureCode, Outcome, Refusal, TurnEvent, TurnFailure, Usage,
};
use agentwire_engine::{
    AdmitError, Admitted, Resume, Slot, SlotRefusal, StoreError, StoredTurn, TurnInput,
};
use agentwire_engine::{ConversationTurn, ConversationView};

/// What to do with a request.
pub(super) enum Plan {
    /// Refused before any ack with a 400 (an answer that does not fit its kind).
    Invalid(WireError),
    /// Refused with an ack and an error.
    Refuse {
        /// The code.
        code: FailureCode,
        /// Why, for people.
        message: String,
        /// The same request may be taken later (the worker is busy or draining, the conversation busy,
        /// the journal unreadable): a queued job stays queued instead of being answered with it.
        transient: bool,
    },
    /// A `request.read`.
    Read(Box<ReadPlan>),
    /// A turn to run (the slot is taken).
    Run(Box<RunPlan>),
}

/// A read-back.
pub(super) struct ReadPlan {
    pub(super) header: Header,
    pub(super) token: String,
    pub(super) conversation: ConversationId,
    pub(super) replay: u64,
}

/// A turn to run.
pub(super) struct RunPlan {
    pub(super) header: Header,
    pub(super) input: TurnInput,
    pub(super) setup: TurnSetup,
    pub(super) meta: ConversationMeta,
    /// The meta changed (a new conversation, a forced drift, a lowered budget): journal it first.
    pub(super) meta_changed: bool,
    /// The worker slot taken for it, kept by the engine until the turn ends.
    pub(super) slot: Option<Slot>,
    /// A resend of a request the journal holds (its record): answered from the journal, with no slot and
    /// no place in the conversation.
    pub(super) resend: Option<Box<StoredTurn>>,
}

fn refused(code: impl Into<FailureCode>, message: impl Into<String>) -> Plan {
    let code = code.into();
    let transient = matches!(
        code,
        FailureCode::Refused(
            Refusal::Draining
                | Refusal::Capacity
                | Refusal::ConversationBusy
                | Refusal::DuplicateRequest
        )
    );
    Plan::Refuse {
        code,
        message: message.into(),
        transient,
    }
}

/// The journal could not be read: refused `internal`; a queued job is taken again later unless what
/// was read is corrupt (it stays so however often it is read).
fn unreadable(e: StoreError) -> Plan {
    Plan::Refuse {
        code: TurnFailure::Internal.into(),
        message: format!("the journal could not be read: {e}"),
        transient: !matches!(e, StoreError::Corrupt(_)),
    }
}

fn random_token() -> String {
    let mut bytes = [0u8; TOKEN_BYTES];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
    mint_token(bytes)
}

fn used(u: Usage) -> u64 {
    u.input_tokens.saturating_add(u.output_tokens)
}

/// The conversation's turns (with their transcripts when asked for), or a refusal.
async fn record(
    worker: &Worker,
    conversation: &ConversationId,
    transcripts: bool,
) -> Result<ConversationView, Box<Plan>> {
    worker
        .engine
        .conversation(conversation, transcripts)
        .await
        .map_err(|e| Box::new(unreadable(e)))
}

/// Decides what to do with `task`. A `Run` holds a worker slot (the engine's), freed when its turn ends.
/// Why a `conversation_token` is refused as `unknown_conversation`: with the embedded SQLite journal a
/// conversation lives in the journal of the instance that began it, so a follow-up that another instance
/// of the same identity receives is not known there.
pub(crate) const UNKNOWN_CONVERSATION: &str = "the conversation_token names no conversation in this \
     instance's journal; send the prompt without one (a conversation continues on any instance only with \
     the shared JetStream journal, docs/scale-out.md)";

/// `job` is the queued job's id when the request came off the jobs queue (journaled in the turn's route,
/// so a redelivery of the same job is known as such).
pub(super) async fn plan(worker: &Worker, task: &TaskRequest, job: Option<&str>) -> Plan {
    if let Err(why) = worker.config.senders.admits(task.header().sender.name()) {
        return refused(Refusal::Blocked, why.to_string());
    }
    if let TaskRequest::Read(r) = task {
        if worker.engine.draining() {
            return refused(Refusal::Draining, "the worker is shutting down");
        }
        let conversation = conversation::conversation_id(&r.conversation_token);
        return match worker.engine.conversation_meta(&conversation).await {
            Ok(Some(_)) => Plan::Read(Box::new(ReadPlan {
                header: r.header.clone(),
                token: r.conversation_token.clone(),
                conversation,
                replay: r.replay,
            })),
            Ok(None) => refused(Refusal::UnknownConversation, UNKNOWN_CONVERSATION),
            Err(e) => unreadable(e),
        };
    }
    let header = task.header().clone();
    let tag = header.request.clone();
    let mut conversation = task.conversation_token().map(conversation::conversation_id);
    if let (Some(job), None) = (job, &conversation) {
        // A queued job that starts a conversation, delivered again: its turn is in the journal under the
        // conversation its first delivery minted, and it is answered there.
        match worker.engine.lookup(&request_id(&tag)).await {
            Ok(Some(stored)) if stored.route[super::jobs::ROUTE_KEY].as_str() == Some(job) => {
                conversation = Some(stored.conversation_id)
            }
            Ok(_) => {}
            Err(e) => return unreadable(e),
        }
    }
    // One step of the engine's: a request of this conversation the journal holds is a resend, answered
    // from the journal (its terminal, or `duplicate_request` while it is still in flight) whatever this
    // instance runs now, so none of the refusals is given for a turn the caller may already have the
    // terminal of; else the spec's order: draining, capacity, duplicate_request, conversation_busy, the
    // slot taken before any read of ours, so concurrent requests cannot overbook.
    let admitted = worker
        .engine
        .admit(
            super::PROTOCOL,
            worker.config.workers,
            &request_id(&tag),
            conversation.as_ref(),
            true,
        )
        .await;
    let slot = match admitted {
        Ok(Admitted::New(slot)) => slot,
        Ok(Admitted::Resend(stored)) => {
            return match plan_turn(worker, task, header, Some(&stored), job).await {
                Plan::Run(mut run) => {
                    run.resend = Some(stored);
                    Plan::Run(run)
                }
                other => other,
            };
        }
        Err(AdmitError::Journal(e)) => return unreadable(e),
        Err(AdmitError::Slot(SlotRefusal::Draining)) => {
            return refused(
                Refusal::Draining,
                "the worker is shutting down and takes no new runs",
            )
        }
        Err(AdmitError::Slot(SlotRefusal::Capacity { slots })) => {
            return refused(
                Refusal::Capacity,
                format!("every worker slot ({slots}) is busy; retry, or ask another instance"),
            )
        }
        Err(AdmitError::Slot(SlotRefusal::Duplicate)) => {
            return refused(
                Refusal::DuplicateRequest,
                format!("a run with request {tag:?} is already in flight here"),
            )
        }
        Err(AdmitError::Slot(SlotRefusal::ConversationBusy)) => {
            return refused(
                Refusal::ConversationBusy,
                "a turn of this conversation is running here; wait for its terminal message",
            )
        }
    };
    match plan_turn(worker, task, header, None, job).await {
        Plan::Run(mut run) => {
            run.slot = Some(slot);
            Plan::Run(run)
        }
        // Refused: dropping the slot frees it.
        other => other,
    }
}

/// Plans the turn of `task`; `resend` is the journal's record of it when the engine found it a resend,
/// `job` the queued job it came as.
async fn plan_turn(
    worker: &Worker,
    task: &TaskRequest,
    header: Header,
    resend: Option<&StoredTurn>,
    job: Option<&str>,
) -> Plan {
    let same_job =
        resend.filter(|s| job.is_some_and(|j| s.route[super::jobs::ROUTE_KEY].as_str() == Some(j)));
    let (token, conversation, new) = match (task.conversation_token(), same_job) {
        (Some(t), _) => (Some(t.to_string()), conversation::conversation_id(t), false),
        // The same queued job delivered again: its first delivery minted the conversation's token, which
        // is never kept, so it is answered in the journal's conversation without one.
        (None, Some(stored)) => (None, stored.conversation_id.clone(), false),
        (None, None) => {
            let t = random_token();
            let c = conversation::conversation_id(&t);
            (Some(t), c, true)
        }
    };
    let fingerprint = worker.profile.fingerprint.clone();
    let tools = worker.profile.tools.clone();
    let (mut meta, mut meta_changed) = if new {
        (
            ConversationMeta {
                fingerprint: fingerprint.clone(),
                tools: tools.clone(),
                approvals: vec![],
                max_tokens: None,
            },
            true,
        )
    } else {
        match worker.engine.conversation_meta(&conversation).await {
            Ok(Some(m)) => match serde_json::from_value::<ConversationMeta>(m) {
                Ok(m) => (m, false),
                Err(e) => {
                    return refused(
                        TurnFailure::Internal,
                        format!("the conversation's record is unreadable: {e}"),
                    )
                }
            },
            Ok(None) => return refused(Refusal::UnknownConversation, UNKNOWN_CONVERSATION),
            Err(e) => return unreadable(e),
        }
    };
    // A conversation minted just now has no turns: no journal read on the path to a new prompt's ack. The
    // transcripts are read only for a replay; deciding on the turn needs the turns alone.
    let wants_replay = match task {
        TaskRequest::Prompt(p) => p.replay.is_some(),
        TaskRequest::Answer(a) => a.replay.is_some(),
        _ => false,
    };
    let record = if new {
        ConversationView::default()
    } else {
        match record(worker, &conversation, wants_replay).await {
            Ok(r) => r,
            Err(p) => return *p,
        }
    };
    let id = request_id(&header.request);
    if let Some(stored) = resend {
        // A resend of a request of this conversation: the engine answers it from the journal
        // (`TurnFront::replay`), whatever the conversation's rules would say of it now.
        let input = stored.input.clone();
        let (total, tool_calls) = record.usage();
        return Plan::Run(Box::new(RunPlan {
            header,
            setup: TurnSetup {
                request_id: id,
                conversation,
                token,
                stream: streams(task),
                elicit: worker.config.elicit,
                window: worker.config.request_timeout,
                approvals: meta.approvals.clone(),
                max_tokens: allowance(worker.config.max_tokens, meta.max_tokens, None),
                replay: vec![],
                prior_usage: (total, tool_calls),
                // Answered from the journal: it does not run, so it has no trace.
                traceparent: None,
            },
            input,
            meta,
            meta_changed: false,
            slot: None,
            resend: None,
        }));
    }
    let force = match task {
        TaskRequest::Prompt(p) => p.force,
        TaskRequest::Resume(r) => r.force,
        _ => false,
    };
    let drift = meta.fingerprint.drift(&fingerprint);
    if !drift.is_empty() {
        if !force {
            return refused(
                Refusal::ConfigDrift,
                format!(
                    "the agent's configuration changed since the conversation started: {}; start a new conversation or send again with force",
                    drift.join(", ")
                ),
            );
        }
        meta.fingerprint = fingerprint;
        meta.approvals.clear();
        meta_changed = true;
    }
    if meta.tools != tools {
        // A changed tool set does not end the conversation, but its standing approvals go.
        meta.tools = tools;
        meta.approvals.clear();
        meta_changed = true;
    }
    let requested = match task {
        TaskRequest::Prompt(p) => p.budget.as_ref().and_then(|b| b.max_tokens),
        TaskRequest::Answer(a) => a.budget.as_ref().and_then(|b| b.max_tokens),
        TaskRequest::Resume(r) => r.budget.as_ref().and_then(|b| b.max_tokens),
        _ => None,
    };
    let lowered = allowance(None, meta.max_tokens, requested);
    if lowered != meta.max_tokens {
        meta.max_tokens = lowered;
        meta_changed = true;
    }
    let (total, tool_calls) = record.usage();
    let limit = allowance(worker.config.max_tokens, meta.max_tokens, None);
    if let Some(limit) = limit {
        if used(total) >= limit {
            if meta_changed && !new {
                // The allowance belongs to the conversation: a request that lowered it under what was
                // used has finished the conversation, for every later turn too.
                let value = serde_json::to_value(&meta).unwrap_or_default();
                if let Err(e) = worker
                    .engine
                    .put_conversation_meta(&conversation, super::PROTOCOL, &value)
                    .await
                {
                    tracing::warn!(error = %e, "could not record a lowered allowance");
                }
            }
            return refused(
                Refusal::BudgetExhausted,
                format!(
                    "the conversation has used {} of its {limit} tokens and is finished; send a prompt without a conversation_token to start a new one",
                    used(total)
                ),
            );
        }
    }
    let last = record.last();
    let parked = conversation::parked(last.and_then(|t| t.outcome.as_ref()));
    let parked_input: Option<TurnInput> = last.map(|t| t.input.clone());
    let model = worker.profile.model.clone();
    let tool_hints = match task {
        TaskRequest::Prompt(p) => p.tool_hints.clone(),
        // A resumed turn keeps the hints its prompt gave.
        _ => parked_input
            .as_ref()
            .map(|i| i.tool_hints.clone())
            .unwrap_or_default(),
    };
    let (message, resume, stream, replay) = match task {
        TaskRequest::Prompt(p) => {
            if parked
                .as_ref()
                .is_some_and(|p| p.code == TurnFailure::Deferred)
            {
                return refused(
                    Refusal::TurnNotTaken,
                    "the conversation waits on a deferred call; answer it first",
                );
            }
            let mut message = p.prompt.clone();
            if let Some(c) = &p.context {
                message = format!("{message}\n\n{c}");
            }
            (message, None, p.stream, p.replay)
        }
        TaskRequest::Resume(r) => {
            let (Some(parked), Some(input)) = (parked, parked_input) else {
                return refused(
                    Refusal::TurnNotTaken,
                    "nothing to resume: the conversation's last turn finished; send a prompt",
                );
            };
            let resume = Resume {
                checkpoint: parked.checkpoint,
                answers: vec![],
            };
            (input.message, Some(resume), r.stream, None)
        }
        TaskRequest::Answer(a) => {
            let decision = match a.answer.decision() {
                Ok(d) => d,
                Err(e) => return Plan::Invalid(e),
            };
            let size = a.answer.value.as_ref().map_or(0, String::len);
            if size > wire::MAX_ANSWER_BYTES {
                return refused(
                    Refusal::AnswerTooLarge,
                    format!("the answer is {size} bytes; the limit is 256KB"),
                );
            }
            let call = &a.answer.tool_use_id;
            let answered_before = record.turns.iter().any(|t| {
                t.turn
                    .input
                    .resume
                    .as_ref()
                    .is_some_and(|r| r.answers.iter().any(|x| &x.call_id == call))
            });
            if answered_before {
                return refused(
                    Refusal::AlreadyAnswered,
                    format!("call {call} already has an answer"),
                );
            }
            let (Some(parked), Some(input)) = (parked, parked_input) else {
                return refused(
                    Refusal::UnknownCall,
                    format!("no call {call} is waiting for an answer"),
                );
            };
            if parked.call_id.as_deref() != Some(call.as_str()) {
                return refused(
                    Refusal::UnknownCall,
                    format!("no call {call} is waiting for an answer"),
                );
            }
            let resume = Resume {
                checkpoint: parked.checkpoint,
                answers: vec![CallAnswer {
                    call_id: call.clone(),
                    answer: mapping::decided_answer(&decision),
                }],
            };
            (input.message, Some(resume), a.stream, a.replay)
        }
        _ => return refused(TurnFailure::Internal, "not a turn"),
    };
    let replay = match replay {
        Some(n) => replay_replies(&record, n),
        None => vec![],
    };
    let setup = TurnSetup {
        request_id: id.clone(),
        conversation: conversation.clone(),
        token,
        stream,
        elicit: worker.config.elicit,
        window: worker.config.request_timeout,
        approvals: meta.approvals.clone(),
        max_tokens: limit,
        replay,
        prior_usage: (total, tool_calls),
        traceparent: header.traceparent.clone(),
    };
    Plan::Run(Box::new(RunPlan {
        header,
        input: TurnInput {
            tool_hints,
            resume,
            ..TurnInput::new(id, conversation, message, model)
        },
        setup,
        meta,
        meta_changed,
        slot: None,
        resend: None,
    }))
}

/// Whether the request streams its text and events.
fn streams(task: &TaskRequest) -> bool {
    match task {
        TaskRequest::Prompt(p) => p.stream,
        TaskRequest::Answer(a) => a.stream,
        TaskRequest::Resume(r) => r.stream,
        _ => true,
    }
}

/// Sends a refusal: an ack with `accepted: false` and the reason, then the error that closes the set.
pub(super) async fn refuse(
    worker: &Worker,
    inbox: Option<async_nats::Subject>,
    header: Header,
    code: impl Into<FailureCode>,
    message: String,
) {
    let code = code.into();
    worker
        .engine
        .watch_hub()
        .metrics()
        .refused(super::PROTOCOL, &code);
    let (set, done) = ReplySet::start(worker.client.clone(), inbox, header, worker.me.clone());
    set.send(Reply::Ack(Ack::refused(message.clone())));
    set.finish(mapping::refusal(code, message));
    let _ = done.await;
}

/// The replay of a conversation: `replay` blocks at most (capped at [`wire::REPLAY_CAP`]) counted from the
/// end and rounded outwards to whole turns, between `replay_start` and `replay_end`.
pub(super) fn replay_replies(view: &ConversationView, replay: u64) -> Vec<Reply> {
    let record = &view.turns;
    let want = replay.clamp(1, wire::REPLAY_CAP) as usize;
    let mut turns: Vec<Vec<Block>> = Vec::new();
    for ConversationTurn {
        turn: t,
        transcript,
    } in record
    {
        let Some(outcome) = &t.outcome else { continue };
        let prompt = (t.input.resume.is_none()).then(|| t.input.message.clone());
        let events: &[TurnEvent] = transcript.as_deref().unwrap_or_default();
        let answered = matches!(outcome, Outcome::Result(_));
        let mut blocks = mapping::replay_blocks(prompt.as_deref(), events, answered);
        if let Outcome::Result(r) = outcome {
            // As live: the answer is the one final text block.
            let last_is_answer = matches!(blocks.iter().rev().find(|b| matches!(b, Block::Text(_))), Some(Block::Text(x)) if x.text == r.text);
            if !last_is_answer {
                for b in blocks.iter_mut() {
                    if let Block::Text(x) = b {
                        x.is_final = false;
                    }
                }
                blocks.push(Block::text(wire::trim_block_text(&r.text), true));
            }
        }
        turns.push(blocks);
    }
    let total_blocks: usize = turns.iter().map(Vec::len).sum();
    let mut taken = 0;
    let mut first = turns.len();
    while first > 0 && taken < want {
        first -= 1;
        taken += turns[first].len();
    }
    let truncated = taken < total_blocks;
    let (tokens, tool_calls) = view.usage();
    let usage = mapping::usage_with(tokens, tool_calls);
    let mut out = vec![Reply::Event(Block::replay_start())];
    for blocks in turns.into_iter().skip(first) {
        out.extend(blocks.into_iter().map(Reply::Event));
    }
    out.push(Reply::Event(Block::replay_end(
        taken as u64,
        truncated,
        usage,
    )));
    out
}

/// Answers a `request.read`: the ack, then the replay between its markers, then a `result` closing the set.
pub(super) async fn read(worker: &Worker, inbox: async_nats::Subject, plan: ReadPlan) {
    let record = match record(worker, &plan.conversation, true).await {
        Ok(r) => r,
        Err(p) => match *p {
            Plan::Refuse { code, message, .. } => {
                return refuse(worker, Some(inbox), plan.header, code, message).await
            }
            _ => return,
        },
    };
    let (set, done) = ReplySet::start(
        worker.client.clone(),
        Some(inbox),
        plan.header,
        worker.me.clone(),
    );
    set.send(Reply::Ack(
        Ack::accepted().with_conversation_token(plan.token),
    ));
    for r in replay_replies(&record, plan.replay) {
        set.send(r);
    }
    // A read ends as a turn does, with a `result`: no text, `end_turn`, the conversation's usage.
    let (tokens, tool_calls) = record.usage();
    let mut end = wire::TurnResult::new(wire::StopReason::EndTurn, String::new());
    end.usage = Some(mapping::usage_with(tokens, tool_calls));
    set.finish(Reply::Result(end));
    let _ = done.await;
}
