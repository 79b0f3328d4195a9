//! One accepted fisk-ai turn on the wire: the conversation's record first, the cancel and elicit
//! subscriptions before the ack, the engine runs it (and frees its worker slot when it ends).

use super::admission::RunPlan;
use super::front::FiskFront;
use super::replyset::{service_error, single, BeforeFinal, ReplySet};
use super::{Worker, PROTOCOL};
use crate::conversation::ConversationMeta;
use crate::mapping;
use crate::wire::{self, nats, Ack, Reply};
use agentwire_core::{Answer, ConversationId, Refusal, RequestId};
use agentwire_engine::{AnswerReply, Submission, SubmitReply, TurnPolicy};
use futures_util::StreamExt;
use std::sync::{Arc, Mutex};
use tokio::sync::{oneshot, watch};

/// How fisk-ai wants its turns handled: refuse a second turn of a busy conversation, park on cancel, and
/// keep transcripts for `request.read`.
pub(crate) const FISK_POLICY: TurnPolicy = TurnPolicy {
    exclusive: true,
    park_on_cancel: true,
    keep_transcript: true,
    refuse_when_full: true,
    accepted_silently: false,
};

/// A queued job's: as a request's, but a job the agent is too busy for right now (its
/// `max_concurrent_turns`) waits for a turn to end instead of being refused `capacity`: it came off a
/// queue to be run, and the worker takes no more jobs than it has slots.
pub(crate) const FISK_JOB_POLICY: TurnPolicy = TurnPolicy {
    refuse_when_full: false,
    ..FISK_POLICY
};

/// The requester recorded for fisk-ai turns: a request carries no verified caller identity, so a cancel is
/// authorised by reaching the subject, as the spec says.
const REQUESTER: &str = "fisk";

/// How an admitted request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ran {
    /// Its reply set ended: the turn's outcome is durable (it ran, or was answered from the journal), or
    /// it was refused for good.
    Answered,
    /// Not taken after all (the conversation busy on another instance, the journal unwritable, the
    /// worker draining, the same request live): a request was refused so; a queued job was sent nothing
    /// and stays queued.
    NotTaken,
}

/// Runs an admitted turn to the end of its reply set, sent to `inbox` (none: a queued job that names no
/// reply subject). `job` is the queued job's id when the request came off the jobs queue.
pub(super) async fn run(
    worker: Arc<Worker>,
    inbox: Option<async_nats::Subject>,
    plan: RunPlan,
    job: Option<String>,
) -> Ran {
    let tag = plan.header.request.clone();
    let conversation = plan.input.conversation_id.clone();
    let identity = worker.config.identity.clone();
    let request_id = plan.setup.request_id.clone();
    let (stop_tx, stop_rx) = watch::channel(false);
    let stop_tx = Arc::new(stop_tx);
    let stop_now = stop_tx.clone();
    let (cancels_gone_tx, cancels_gone) = oneshot::channel::<()>();
    let (elicits_gone_tx, elicits_gone) = oneshot::channel::<()>();
    let before_final: BeforeFinal = Box::new(move || {
        Box::pin(async move {
            stop_tx.send_replace(true);
            let _ = cancels_gone.await;
            let _ = elicits_gone.await;
            // The UNSUBs go out on the same connection before the final message, so the server has dropped
            // the subscriptions when the caller sees the terminal. (The slot and the request tag are free
            // by then too: the engine frees them before it hands the outcome to the front.)
        })
    });
    let (subscribed_tx, subscribed) = oneshot::channel::<()>();
    let (set, done) = ReplySet::start_with(
        worker.client.clone(),
        inbox,
        plan.header.clone(),
        worker.me.clone(),
        plan.setup.stream,
        Some(before_final),
        Some(subscribed),
    );
    let front = Arc::new(FiskFront::new(
        set.clone(),
        plan.setup,
        Arc::downgrade(&worker.engine),
        plan.header.sender.name(),
    ));
    let meta_record = plan
        .meta_changed
        .then(|| serde_json::to_value(&plan.meta).unwrap_or_default());
    let meta = Arc::new(Mutex::new(plan.meta));
    // The cancel and elicit subscriptions are made while the engine journals the turn (the commit is most
    // of an ack's latency). The reply set publishes nothing, its ack included, until they are sent: the
    // server handles one connection's SUB before a PUB that follows it, so they are live before the caller
    // can see the ack. (A flush would add a round trip to every ack.)
    let resend = plan.resend;
    let is_resend = resend.is_some();
    let subscribe = async {
        if is_resend {
            // Answered from the journal: nothing to cancel or answer here, and a second subscriber to the
            // subjects of a turn live on this instance would take answers meant for it.
            drop((cancels_gone_tx, elicits_gone_tx));
            let _ = subscribed_tx.send(());
            return;
        }
        let subs = async {
            let c = worker
                .client
                .subscribe(nats::cancel_subject(&identity, &tag))
                .await?;
            let e = worker
                .client
                .subscribe(nats::elicit_subject(&identity, &tag))
                .await?;
            Ok::<_, async_nats::SubscribeError>((c, e))
        };
        match subs.await {
            Ok((cancels, elicits)) => {
                tokio::spawn(serve_cancels(
                    worker.clone(),
                    cancels,
                    request_id.clone(),
                    stop_rx.clone(),
                    cancels_gone_tx,
                ));
                tokio::spawn(serve_elicits(
                    worker.clone(),
                    elicits,
                    front.clone(),
                    conversation.clone(),
                    meta,
                    stop_rx,
                    elicits_gone_tx,
                ));
            }
            // Only a closed connection refuses a subscription, and then nothing reaches the caller
            // either: the turn runs to its journaled outcome, which a resend is answered from.
            Err(e) => tracing::warn!(
                request = %tag, error = %e,
                "could not subscribe for cancels and answers; the run goes on without them"
            ),
        }
        let _ = subscribed_tx.send(());
    };
    let sub = Submission {
        input: plan.input,
        protocol: PROTOCOL.into(),
        requester: REQUESTER.into(),
        route: match &job {
            Some(job) => serde_json::json!({ "request": tag, super::jobs::ROUTE_KEY: job }),
            None => serde_json::json!({ "request": tag }),
        },
        front: front.clone(),
        policy: match job {
            Some(_) => FISK_JOB_POLICY,
            None => FISK_POLICY,
        },
        // A new or changed conversation record is journaled with the turn: one durable write before the ack.
        conversation_meta: meta_record,
        slot: plan.slot,
    };
    let engine = &worker.engine;
    let submit = async move {
        match resend {
            Some(stored) => engine.answer_resend(sub, stored).await,
            None => engine.submit(sub).await,
        }
    };
    let (submitted, ()) = tokio::join!(submit, subscribe);
    let not_taken = matches!(
        submitted,
        SubmitReply::ConversationBusy
            | SubmitReply::JournalUnavailable(_)
            | SubmitReply::Draining
            | SubmitReply::DuplicateLive
    );
    if not_taken && job.is_some() {
        // A queued job waits in the queue: nothing is sent, and the turn's subscriptions go (their end
        // lets the reply set's task end with nothing published).
        tracing::debug!(request = %tag, "a queued job was not taken now; it stays queued");
        stop_now.send_replace(true);
        return Ran::NotTaken;
    }
    match submitted {
        SubmitReply::Accepted { .. } | SubmitReply::Refused(_) => {}
        SubmitReply::ConversationBusy => {
            set.send(Reply::Ack(Ack::refused("the conversation is busy")));
            set.finish(mapping::refusal(
                Refusal::ConversationBusy,
                "a turn of this conversation is running (here, or on another instance sharing the journal); wait for its terminal message",
            ));
        }
        SubmitReply::JournalUnavailable(why) => {
            // Not journaled, so not taken: the caller may send it again here or to another instance.
            tracing::warn!(request = %tag, error = %why, "refused a run: the journal cannot be written");
            set.send(Reply::Ack(Ack::refused(
                "the worker cannot record runs now",
            )));
            set.finish(mapping::refusal(
                Refusal::Capacity,
                "the worker cannot record runs now (its journal cannot be written); retry, or ask another instance",
            ));
        }
        SubmitReply::Draining => {
            set.send(Reply::Ack(Ack::refused("draining")));
            set.finish(mapping::refusal(
                Refusal::Draining,
                "the worker is shutting down and takes no new runs",
            ));
        }
        SubmitReply::DuplicateLive => {
            set.send(Reply::Ack(Ack::refused("duplicate request")));
            set.finish(mapping::refusal(
                Refusal::DuplicateRequest,
                format!("a run with request {tag:?} is already in flight here"),
            ));
        }
        // The front answered a resend from the journal.
        SubmitReply::DuplicateStored(_) => {}
    }
    let _ = done.await;
    match not_taken {
        true => Ran::NotTaken,
        false => Ran::Answered,
    }
}

async fn serve_cancels(
    worker: Arc<Worker>,
    mut cancels: async_nats::Subscriber,
    id: RequestId,
    mut stop: watch::Receiver<bool>,
    gone: oneshot::Sender<()>,
) {
    loop {
        let msg = tokio::select! {
            m = cancels.next() => match m { Some(m) => m, None => return },
            _ = stop.changed() => {
                let _ = cancels.unsubscribe().await;
                let _ = gone.send(());
                return
            }
        };
        let Some(reply) = msg.reply.clone() else {
            // A fire-and-forget cancel still cancels.
            if wire::decode_cancel(&msg.payload).is_ok() {
                worker.engine.cancel(&id, REQUESTER).await;
            }
            continue;
        };
        match wire::decode_cancel(&msg.payload) {
            Err(e) => {
                service_error(&worker.client, reply, nats::STATUS_INVALID, &e.to_string()).await
            }
            Ok(c) => {
                worker.engine.cancel(&id, REQUESTER).await;
                single(
                    &worker.client,
                    reply,
                    &c.header,
                    &worker.me,
                    Reply::Ack(Ack::accepted()),
                )
                .await;
            }
        }
    }
}

async fn serve_elicits(
    worker: Arc<Worker>,
    mut elicits: async_nats::Subscriber,
    front: Arc<FiskFront>,
    conversation: ConversationId,
    meta: Arc<Mutex<ConversationMeta>>,
    mut stop: watch::Receiver<bool>,
    gone: oneshot::Sender<()>,
) {
    const GONE: &str = "no question with that id is waiting on this run";
    loop {
        let msg = tokio::select! {
            m = elicits.next() => match m { Some(m) => m, None => return },
            _ = stop.changed() => {
                let _ = elicits.unsubscribe().await;
                let _ = gone.send(());
                return
            }
        };
        let Some(reply) = msg.reply.clone() else {
            continue;
        };
        let m = match wire::decode_elicit(&msg.payload) {
            Ok(m) => m,
            Err(e) => {
                service_error(&worker.client, reply, nats::STATUS_INVALID, &e.to_string()).await;
                continue;
            }
        };
        let Some((kind, tool)) = front.open_question(&m.question_id) else {
            service_error(&worker.client, reply, nats::STATUS_NO_QUESTION, GONE).await;
            continue;
        };
        let ok = |worker: Arc<Worker>, reply, header| async move {
            single(
                &worker.client,
                reply,
                &header,
                &worker.me,
                Reply::Ack(Ack::accepted()),
            )
            .await
        };
        match m.kind {
            wire::ElicitKind::Waiting => {
                if front.hold_open(&m.question_id) {
                    ok(worker.clone(), reply, m.header).await;
                } else {
                    service_error(&worker.client, reply, nats::STATUS_NO_QUESTION, GONE).await;
                }
            }
            wire::ElicitKind::Answer(a) => {
                let Some(answer) = mapping::live_answer(&a, &kind) else {
                    service_error(
                        &worker.client,
                        reply,
                        nats::STATUS_INVALID,
                        "the answer does not fit the question",
                    )
                    .await;
                    continue;
                };
                let always = matches!(answer, Answer::Approve { choice } if choice.stands());
                // Who answered what, for the caller when it is somebody else.
                let said = answer.describe(&kind);
                front.answering(&m.question_id, Some((m.header.sender.name(), said)));
                let taken = worker
                    .engine
                    .answer(front.request_id(), &m.question_id, answer);
                if taken != AnswerReply::Taken {
                    front.answering(&m.question_id, None);
                }
                match taken {
                    AnswerReply::Taken => {
                        if always {
                            // `always` stops the asking about this tool for the rest of the conversation.
                            let updated = {
                                let mut meta = meta.lock().unwrap_or_else(|p| p.into_inner());
                                if !meta.approvals.contains(&tool) {
                                    meta.approvals.push(tool.clone());
                                }
                                serde_json::to_value(&*meta).unwrap_or_default()
                            };
                            if let Err(e) = worker
                                .engine
                                .put_conversation_meta(&conversation, PROTOCOL, &updated)
                                .await
                            {
                                tracing::warn!(error = %e, "could not record a standing approval");
                            }
                        }
                        ok(worker.clone(), reply, m.header).await;
                    }
                    AnswerReply::NotWaiting => {
                        service_error(&worker.client, reply, nats::STATUS_NO_QUESTION, GONE).await
                    }
                    AnswerReply::DoesNotFit => {
                        service_error(
                            &worker.client,
                            reply,
                            nats::STATUS_INVALID,
                            "the answer does not fit the question",
                        )
                        .await
                    }
                }
            }
        }
    }
}
