//! The task-card side of one turn: 43002 when it begins, throttled 43003 progress, files and handoffs as
//! thread messages, question cards, and exactly one terminal (43004 with the full reply as a kind 12
//! message, or 43006), published in order by one task per turn with the terminal's retries.

use super::ask::{self, QuestionCardDraft};
use super::card::{
    self, Ending, Posted, Stopper, TaskRequest, Thread, DEFAULT_HANDOFF_NAME, TASK_ACCEPTED,
    TASK_ERROR, TASK_PROGRESS, TASK_RESULT, THREAD, THREAD_REPLY,
};
use super::progress::Progress;
use super::Shared;
use agentwire_core::{
    now_secs, Answer, ApproveChoice, Asked, Outcome, Question, QuestionKind, RequestId, TurnEvent,
};
use agentwire_engine::StoredTurn;
use agentwire_engine::{FrontAsk, TurnFront};
use agentwire_nostr::relay_conn::RelayConn;
use agentwire_nostr::runtime::{Outbox, TERMINAL_RETRY_DELAYS};
use nostr::prelude::{Event, EventBuilder, EventId, Kind, PublicKey, Tag};
use std::collections::HashSet;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// How the room is told a question was answered outside it (the reason of the card's withdrawal and the
/// thread's note), before the answer as said back.
pub const ANSWERED_OUTSIDE_THE_ROOM: &str =
    "answered outside the room (the agent's hub or turn API)";

/// Where a task's outcome goes; journaled as the turn's route so a restart can end it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TaskRoute {
    /// The request event id (hex).
    pub request: String,
    /// The requester (hex).
    pub requester: String,
    /// The room.
    pub room: String,
    /// The thread root (hex).
    pub root: String,
    /// The request, when it replied in a thread it did not start (hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
}

impl TaskRoute {
    /// The route of `task`.
    pub fn of(task: &TaskRequest) -> Self {
        TaskRoute {
            request: task.id.to_hex(),
            requester: task.requester.to_hex(),
            room: task.room.clone(),
            root: task.thread.root.to_hex(),
            reply_to: task.thread.reply_to.map(|r| r.to_hex()),
        }
    }

    /// The task it names, if it reads back.
    pub fn task(&self) -> Option<TaskRequest> {
        let id = EventId::from_hex(&self.request).ok()?;
        let reply_to = match &self.reply_to {
            Some(r) => Some(EventId::from_hex(r).ok()?),
            None => None,
        };
        Some(TaskRequest {
            id,
            requester: PublicKey::from_hex(&self.requester).ok()?,
            room: self.room.clone(),
            thread: Thread {
                room: self.room.clone(),
                root: EventId::from_hex(&self.root).ok()?,
                reply_to,
            },
            prompt: String::new(),
        })
    }
}

enum Publish {
    /// An event, published in turn (its OK awaited, a refusal logged).
    Event(Event),
    /// A reply or a file of the task: published like [`Publish::Event`], and a refusal is a failed send
    /// (a failure after it stays an error).
    Posted(Event),
    /// Something changed: publish progress if it is due.
    Progress,
    /// The terminal and what goes before it, each retried after 1 s and 3 s; the last message.
    Terminal(Vec<Event>),
}

struct State {
    /// Where replies go now (moved by a handoff).
    thread: Thread,
    posted: Posted,
    progress: Progress,
    /// The agent's text split at its tool calls: what it said between them went out as replies.
    interim: crate::interim::Interim,
    stopped: Option<Stopper>,
    /// The events `encode_outcome` built, until `deliver_outcome` sends them.
    encoded: Option<Vec<Event>>,
    /// Tools approved for the rest of this task.
    standing: HashSet<String>,
    /// The terminal was handed to the publisher.
    delivered: bool,
}

/// The front of one task's turn.
pub struct TaskFront {
    shared: Weak<Shared>,
    task: TaskRequest,
    request_id: RequestId,
    started: Instant,
    state: Mutex<State>,
    queue: mpsc::UnboundedSender<Publish>,
}

impl TaskFront {
    /// Asks `question` as a plain kind 12 message in the task's thread (`cards = "legacy"`); an asked
    /// person's reply there is its answer.
    fn ask_in_a_message(
        &self,
        shared: &Arc<super::Shared>,
        question: &Question,
        thread: &card::Thread,
        window: Duration,
    ) -> FrontAsk {
        let mut asked: Vec<PublicKey> = question
            .asked
            .iter()
            .filter_map(|k| PublicKey::parse(k).ok())
            .collect();
        if asked.is_empty() {
            asked.push(self.task.requester);
        }
        let mut tags = thread.reply_tags(&self.task.requester);
        for k in asked.iter().filter(|k| **k != self.task.requester) {
            tags.push(Tag::public_key(*k));
        }
        let Some(ev) = self.sign(THREAD_REPLY, crate::legacy::message(question), tags) else {
            return FrontAsk::Unavailable;
        };
        shared.open_legacy(
            ev.id,
            super::LegacyQuestion {
                request_id: self.request_id.clone(),
                task: self.task.id,
                room: thread.room.clone(),
                tool: question.tool.clone(),
                kind: question.kind.clone(),
                root: thread.root,
                asked,
                at: ev.created_at,
            },
        );
        let question_id = ev.id.to_hex();
        self.send(Publish::Event(ev));
        FrontAsk::Sent {
            question_id,
            window: Some(window),
        }
    }
    /// The front of `task`, with its publisher running on `relay`.
    pub(super) fn start(
        shared: &Arc<Shared>,
        task: TaskRequest,
        request_id: RequestId,
    ) -> Arc<TaskFront> {
        let (tx, rx) = mpsc::unbounded_channel();
        let front = Arc::new(TaskFront {
            shared: Arc::downgrade(shared),
            request_id,
            started: Instant::now(),
            state: Mutex::new(State {
                thread: task.thread.clone(),
                posted: Posted::default(),
                progress: Progress::new(shared.config.progress_interval.as_millis() as u64),
                interim: Default::default(),
                stopped: None,
                encoded: None,
                standing: HashSet::new(),
                delivered: false,
            }),
            task,
            queue: tx,
        });
        tokio::spawn(publisher(
            Arc::downgrade(&front),
            shared.relay.clone(),
            shared.outbox.clone(),
            rx,
        ));
        front
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The task.
    pub fn task(&self) -> &TaskRequest {
        &self.task
    }

    /// The turn's request id.
    pub fn request_id(&self) -> &RequestId {
        &self.request_id
    }

    /// Who stopped the task, set before the engine is asked to cancel it. The first stopper counts.
    pub fn stop(&self, by: Stopper) {
        let mut st = self.lock();
        if st.stopped.is_none() {
            st.stopped = Some(by);
        }
    }

    /// `tool` is approved for the rest of this task.
    pub fn approve_for_task(&self, tool: &str) {
        self.lock().standing.insert(tool.to_string());
    }

    fn sign(&self, kind: Kind, content: String, tags: Vec<Tag>) -> Option<Event> {
        let shared = self.shared.upgrade()?;
        Some(
            shared
                .crypto
                .sign(EventBuilder::new(kind, content).tags(tags)),
        )
    }

    fn card_event(&self, kind: Kind, content: String, extra: Vec<Tag>) -> Option<Event> {
        let mut tags = card::card_tags(&self.task.id, &self.task.requester, &self.task.room);
        tags.extend(extra);
        self.sign(kind, content, tags)
    }

    fn send(&self, p: Publish) {
        let _ = self.queue.send(p);
    }

    /// The events that end the task: the full reply (when there is one) and the terminal; none when the
    /// requester cancelled.
    fn ending_events(&self, outcome: &Outcome) -> Vec<Event> {
        let mut st = self.lock();
        let mut events = Vec::new();
        // The answer without what the agent said between its tool rounds: that went out already.
        let outcome = match outcome {
            Outcome::Result(r) => {
                let mut r = r.clone();
                r.text = st.interim.final_text(&r.text).to_string();
                Outcome::Result(r)
            }
            other => other.clone(),
        };
        if st.stopped.is_none() {
            if let Outcome::Result(r) = &outcome {
                if !r.text.trim().is_empty() {
                    let tags = st.thread.reply_tags(&self.task.requester);
                    if let Some(ev) = self.sign(THREAD_REPLY, r.text.clone(), tags) {
                        st.posted.reply = Some(ev.id);
                        events.push(ev);
                    }
                }
            }
        }
        let ending = card::ending(&outcome, &st.posted, st.stopped);
        drop(st);
        let terminal = match ending {
            Ending::Silent => return Vec::new(),
            Ending::Result { content, links } => self.card_event(
                TASK_RESULT,
                content,
                links.into_iter().map(Tag::event).collect(),
            ),
            Ending::Error(text) => self.card_event(TASK_ERROR, text, vec![]),
        };
        events.extend(terminal);
        events
    }

    fn standing(&self, question: &Question) -> Option<ApproveChoice> {
        if !matches!(question.kind, QuestionKind::Approve { .. }) {
            return None;
        }
        if self.lock().standing.contains(&question.tool) {
            return Some(ApproveChoice::Session);
        }
        let shared = self.shared.upgrade()?;
        shared
            .room_approves(&self.task.room, &question.tool)
            .then_some(ApproveChoice::Always)
    }
}

impl TurnFront for TaskFront {
    fn accepted(&self, queued: bool) {
        // 43002 goes out when the turn begins; a turn queued behind another waits for its own start.
        if !queued {
            if let Some(ev) = self.card_event(TASK_ACCEPTED, String::new(), vec![]) {
                self.send(Publish::Event(ev));
            }
        }
    }

    fn event(&self, event: TurnEvent) {
        let mut st = self.lock();
        st.progress.note(&event);
        if let Some(said) = st.interim.note(&event) {
            let tags = st.thread.reply_tags(&self.task.requester);
            let line = card::first_line(&said);
            if let Some(ev) = self.sign(THREAD_REPLY, said, tags) {
                st.posted.said = Some((ev.id, line));
                self.send(Publish::Posted(ev));
            }
        }
        match &event {
            TurnEvent::File { name, text } => {
                let mut tags = st.thread.reply_tags(&self.task.requester);
                tags.push(card::tag(["file", name]));
                if let Some(ev) = self.sign(THREAD_REPLY, text.clone(), tags) {
                    st.posted.files.push((name.clone(), ev.id));
                    self.send(Publish::Posted(ev));
                }
            }
            TurnEvent::Handoff { name } => {
                let home = self
                    .shared
                    .upgrade()
                    .and_then(|s| s.config.home.clone())
                    .unwrap_or_else(|| self.task.room.clone());
                let content = name.clone().unwrap_or_else(|| DEFAULT_HANDOFF_NAME.into());
                let tags = vec![
                    card::tag(["h", &home]),
                    Tag::public_key(self.task.requester),
                    Tag::event(self.task.id),
                ];
                if let Some(ev) = self.sign(THREAD, content, tags) {
                    st.thread = Thread {
                        room: home,
                        root: ev.id,
                        reply_to: None,
                    };
                    self.send(Publish::Event(ev));
                }
            }
            _ => {}
        }
        drop(st);
        self.send(Publish::Progress);
    }

    fn encode_outcome(&self, outcome: &Outcome) -> Option<String> {
        let events = self.ending_events(outcome);
        let json = serde_json::to_string(&events).ok()?;
        self.lock().encoded = Some(events);
        Some(json)
    }

    fn deliver_outcome(&self, outcome: &Outcome, wire: Option<&str>) {
        let kept = self.lock().encoded.take();
        let events = match (kept, wire) {
            (Some(k), Some(w)) if k.first().is_none_or(|e| w.contains(&e.id.to_hex())) => k,
            (_, Some(w)) => serde_json::from_str::<Vec<Event>>(w).unwrap_or_default(),
            (Some(k), None) => k,
            (None, None) => self.ending_events(outcome),
        };
        self.lock().delivered = true;
        self.send(Publish::Terminal(events));
        if let Some(s) = self.shared.upgrade() {
            s.task_ended(&self.task.id);
        }
    }

    fn ask(&self, question: &Question) -> FrontAsk {
        if let Some(choice) = self.standing(question) {
            return FrontAsk::Settled(Asked::Answered(Answer::Approve { choice }));
        }
        let Some(shared) = self.shared.upgrade() else {
            return FrontAsk::Unavailable;
        };
        let window = question
            .expires_in_secs
            .map(Duration::from_secs)
            .unwrap_or(shared.config.question_window);
        let thread = self.lock().thread.clone();
        if shared.config.legacy_cards {
            return self.ask_in_a_message(&shared, question, &thread, window);
        }
        let draft: QuestionCardDraft = match ask::card(
            question,
            &self.task.requester,
            &thread,
            now_secs() + window.as_secs().max(1),
        ) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(task = %self.task.id, error = %e, "a question the card cannot carry");
                return FrontAsk::Unavailable;
            }
        };
        let Some(ev) = self.sign(card::CHAT, draft.content.clone(), draft.tags.clone()) else {
            return FrontAsk::Unavailable;
        };
        let parsed = match agentwire_tinyagent::question(&ev) {
            Ok(p) => p,
            Err(rule) => {
                tracing::error!(task = %self.task.id, %rule, "a question card the relay's rules refuse");
                return FrontAsk::Unavailable;
            }
        };
        let question_id = ev.id.to_hex();
        shared.open_card(super::OpenCard {
            card: ev.clone(),
            parsed,
            request_id: self.request_id.clone(),
            task: self.task.id,
            room: thread.room.clone(),
            tool: question.tool.clone(),
            kind: question.kind.clone(),
            option_ids: draft.option_ids,
        });
        self.send(Publish::Event(ev));
        FrontAsk::Sent {
            question_id,
            window: Some(window),
        }
    }

    fn question_answered(&self, question_id: &str, said: &str) {
        let (Some(shared), Ok(id)) = (self.shared.upgrade(), EventId::from_hex(question_id)) else {
            return;
        };
        // An answer from the room is on the relay already, where it settled the card.
        if shared.answered_from_room(&id, said) {
            return;
        }
        let Some((asked_as, room)) = shared.open_question(&id) else {
            return;
        };
        // Answered outside the room (the hub, the turn API): the room holds no answer, so the card is
        // withdrawn (NIP-09, which the relay also takes as "no more answers") with the answer as its
        // reason, and the thread says it, so every client showing the card closes it.
        let said = format!(
            "{ANSWERED_OUTSIDE_THE_ROOM}: {}",
            agentwire_core::one_line(said, card::MAX_CARD_LINE_CHARS)
        );
        let withdrawal = vec![
            Tag::event(id),
            card::tag(["k", &asked_as.as_u16().to_string()]),
            card::tag(["h", &room]),
        ];
        let note = self.lock().thread.reply_tags(&self.task.requester);
        for ev in [
            self.sign(Kind::EventDeletion, said.clone(), withdrawal),
            self.sign(THREAD_REPLY, said, note),
        ]
        .into_iter()
        .flatten()
        {
            self.send(Publish::Event(ev));
        }
    }

    fn question_closed(&self, question_id: &str) {
        if let (Some(s), Ok(id)) = (self.shared.upgrade(), EventId::from_hex(question_id)) {
            s.close_card(&id);
        }
    }

    fn replay(&self, stored: &StoredTurn) {
        // A task the journal has ended, whose terminal the relay does not show: its journaled events go
        // out again, byte for byte.
        if let Some(events) = stored
            .wire
            .as_deref()
            .and_then(|w| serde_json::from_str::<Vec<Event>>(w).ok())
        {
            self.send(Publish::Terminal(events));
        }
    }
}

async fn publisher(
    front: Weak<TaskFront>,
    relay: RelayConn,
    outbox: Arc<Outbox>,
    mut rx: mpsc::UnboundedReceiver<Publish>,
) {
    loop {
        let due = front.upgrade().and_then(|f| {
            let at = f.lock().progress.next_due()?;
            Some(f.started + Duration::from_millis(at))
        });
        let next = match due {
            Some(at) => tokio::select! {
                m = rx.recv() => m,
                _ = tokio::time::sleep_until(at.into()) => Some(Publish::Progress),
            },
            None => rx.recv().await,
        };
        let Some(next) = next else { return };
        match next {
            Publish::Event(ev) => {
                publish_once(&relay, &ev).await;
            }
            Publish::Posted(ev) => {
                if !publish_once(&relay, &ev).await {
                    if let Some(f) = front.upgrade() {
                        f.lock().posted.failed_send = true;
                    }
                }
            }
            Publish::Progress => {
                let Some(f) = front.upgrade() else { continue };
                let content = {
                    let mut st = f.lock();
                    if st.delivered {
                        None
                    } else {
                        let now = f.started.elapsed().as_millis() as u64;
                        st.progress.poll(now)
                    }
                };
                if let Some(ev) = content.and_then(|c| f.card_event(TASK_PROGRESS, c, vec![])) {
                    publish_once(&relay, &ev).await;
                }
            }
            Publish::Terminal(events) => {
                outbox.start();
                for ev in &events {
                    publish_retried(&relay, ev).await;
                }
                outbox.done();
                return;
            }
        }
    }
}

/// Publishes `ev` once; whether the relay took it.
async fn publish_once(relay: &RelayConn, ev: &Event) -> bool {
    match relay.publish(ev).await {
        Ok(ok) if ok.accepted => true,
        Ok(ok) => {
            tracing::warn!(event = %ev.id, kind = ev.kind.as_u16(), message = %ok.message, "relay refused a task event");
            false
        }
        Err(e) => {
            tracing::warn!(event = %ev.id, kind = ev.kind.as_u16(), error = %e, "task event not confirmed");
            false
        }
    }
}

/// Publishes `ev`, again after 1 s and 3 s while the relay refuses it or does not answer.
async fn publish_retried(relay: &RelayConn, ev: &Event) {
    let mut delays = TERMINAL_RETRY_DELAYS.iter();
    loop {
        match relay.publish(ev).await {
            Ok(ok) if ok.accepted => return,
            Ok(ok) => {
                tracing::warn!(event = %ev.id, kind = ev.kind.as_u16(), message = %ok.message, "relay refused a task's terminal")
            }
            Err(e) => {
                tracing::warn!(event = %ev.id, kind = ev.kind.as_u16(), error = %e, "task terminal not confirmed")
            }
        }
        match delays.next() {
            Some(d) => tokio::time::sleep(*d).await,
            None => {
                tracing::error!(event = %ev.id, "giving up on a task's terminal after retries");
                return;
            }
        }
    }
}
