//! The A2A operations over the engine and its watch hub, the same for both bindings: a message submitted as
//! a turn (or taken as the answer to the task's question), a task found and read (the hub while it is
//! recent, else the journal), listed, cancelled and followed. The bindings (`routes`) only read requests
//! and write answers.

use crate::errors::A2aError;
use crate::front::TurnSide;
use crate::mapping::{self, Tracker, PROTOCOL};
use crate::wire::{ListRequest, ListTasksResponse, SendRequest, StreamResponse, Task, TaskState};
use agentwire_core::{RequestId, TurnInput};
use agentwire_engine::{
    AnswerReply, CancelReply, StoredTurn, Submission, SubmitReply, TurnFilter, TurnPolicy,
    TurnState, TurnSummary, TurnWatch, WatchHub, WatchKind,
};
use agentwire_http::callers::Caller;
use agentwire_http::front::ExposedAgent;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The most subscribers (`SubscribeToTask` streams) one task has at a time: a few people watching and
/// their reconnects; past it a subscriber is asked to retry, so that one client looping on subscribe
/// cannot hold the server's connections.
pub const MAX_SUBSCRIBERS_PER_TASK: usize = 16;
/// The most turns a `ListTasks` request looks through: the hub holds the live turns and the
/// [`agentwire_engine::RECENT_TURNS_KEPT`] newest ended ones, so this bound is never reached by a daemon
/// within its own limits, and a list stays one bounded pass.
pub const MAX_LISTED_TURNS: usize = 10_000;
/// How long `CancelTask` waits for the cancelled task to end before answering with it as it stands: an
/// agent stops at its next boundary, well within this.
pub const CANCEL_WAIT: Duration = Duration::from_secs(10);

/// The longest answer to a question, in bytes: 16 KiB, room for any choice and a long free-text reply
/// (the MCP front's bound too); a longer one is refused before it reaches the engine.
pub const MAX_ANSWER_BYTES: usize = 16 * 1024;
/// When a client refused because the daemon cannot take tasks now may try again.
pub const UNAVAILABLE_RETRY_SECS: u64 = 5;

/// A task the caller may see: its turn as journaled, and the agent that runs it.
pub(crate) struct Found {
    pub(crate) id: RequestId,
    pub(crate) task: String,
    pub(crate) context: String,
    pub(crate) stored: StoredTurn,
}

/// What the handlers share.
#[derive(Clone)]
pub(crate) struct Served {
    pub(crate) agents: Arc<Vec<ExposedAgent>>,
    hub: Arc<WatchHub>,
    subscribers: Arc<Mutex<HashMap<RequestId, usize>>>,
}

/// A subscriber's place among a task's [`MAX_SUBSCRIBERS_PER_TASK`], given back when its stream ends.
pub(crate) struct SubscriberSlot {
    counts: Arc<Mutex<HashMap<RequestId, usize>>>,
    id: RequestId,
}

impl Drop for SubscriberSlot {
    fn drop(&mut self) {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = c.get_mut(&self.id) {
            *n -= 1;
            if *n == 0 {
                c.remove(&self.id);
            }
        }
    }
}

fn random_id() -> String {
    let mut bytes = [0u8; 16];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
    mapping::new_id(bytes)
}

/// The state a hub summary shows, without reading the turn's events.
fn summary_state(s: &TurnSummary) -> TaskState {
    match (&s.outcome, s.state) {
        (Some(o), _) => mapping::end_state(o),
        (None, TurnState::Queued) => TaskState::Submitted,
        (None, TurnState::Waiting) => TaskState::InputRequired,
        (None, _) => TaskState::Working,
    }
}

/// A task followed from a snapshot: what it streams next, to its end (or, for a stream that stops where
/// the client is asked for something, to its next question).
pub(crate) struct Following {
    hub: Arc<WatchHub>,
    id: RequestId,
    tracker: Tracker,
    /// The snapshot's last event: the watch's earlier ones are in it.
    seen: Option<u64>,
    watch: Option<TurnWatch>,
    pending: VecDeque<StreamResponse>,
    stop_at_input: bool,
    done: bool,
    _slot: Option<SubscriberSlot>,
}

impl Following {
    /// The task as it stands.
    pub(crate) fn task(&self, history: Option<usize>) -> Task {
        self.tracker.task(history, true)
    }

    fn finished(&self) -> bool {
        let s = self.tracker.state();
        s.is_terminal() || (self.stop_at_input && s == TaskState::InputRequired)
    }

    /// The next update, `None` once the task has ended (or asks, where the stream stops there).
    pub(crate) async fn next(&mut self) -> Option<StreamResponse> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some(item);
            }
            if self.done || self.finished() {
                return None;
            }
            let Some(watch) = self.watch.as_mut() else {
                self.done = true;
                continue;
            };
            match watch.next().await {
                Some(Ok(ev)) => {
                    if self.seen.is_some_and(|s| ev.seq <= s) {
                        continue;
                    }
                    self.seen = Some(ev.seq);
                    self.pending.extend(self.tracker.apply(&ev.kind, ev.at_ms));
                }
                Some(Err(_missed)) => {
                    // Fallen behind the hub: the task as it stands now, and on from there.
                    let user =
                        self.tracker.task(None, false).history.and_then(|h| {
                            h.into_iter().find(|m| m.role == crate::wire::Role::User)
                        });
                    let (task, context) = {
                        let t = self.tracker.task(Some(0), false);
                        (t.id, t.context_id)
                    };
                    if let Some((tracker, seen)) =
                        snapshot(&self.hub, &self.id, &task, &context, user)
                    {
                        self.tracker = tracker;
                        self.seen = seen;
                    }
                    self.watch = self.hub.watch(&self.id);
                    self.pending
                        .push_back(StreamResponse::Task(self.tracker.task(Some(0), true)));
                }
                None => self.done = true,
            }
        }
    }

    /// Follows to the end (or the next question), and returns the task then.
    pub(crate) async fn settle(mut self, history: Option<usize>) -> Task {
        while self.next().await.is_some() {}
        self.task(history)
    }
}

/// The task of turn `id` as the hub holds it (`None` when it holds it no more), and the seq of the last
/// event that made it.
fn snapshot(
    hub: &WatchHub,
    id: &RequestId,
    task: &str,
    context: &str,
    user: Option<crate::wire::Message>,
) -> Option<(Tracker, Option<u64>)> {
    let (_, events) = hub.turn(id)?;
    let mut t = Tracker::new(task, context, user);
    for e in &events {
        t.apply(&e.kind, e.at_ms);
    }
    Some((t, events.last().map(|e| e.seq)))
}

impl Served {
    pub(crate) fn new(agents: Vec<ExposedAgent>, hub: Arc<WatchHub>) -> Served {
        Served {
            agents: Arc::new(agents),
            hub,
            subscribers: Arc::default(),
        }
    }

    /// Agent `name`, when `caller` may call it.
    pub(crate) fn agent(&self, name: &str, caller: &Caller) -> Option<&ExposedAgent> {
        self.agents
            .iter()
            .find(|a| a.name == name && caller.may_call(&a.name))
    }

    /// Agent `name`, whoever calls (its card is public).
    pub(crate) fn exposed(&self, name: &str) -> Option<&ExposedAgent> {
        self.agents.iter().find(|a| a.name == name)
    }

    /// The `--agent` agent, when it is exposed here.
    pub(crate) fn default_agent(&self) -> Option<&ExposedAgent> {
        self.agents.iter().find(|a| a.default)
    }

    /// Task `task` of agent `agent`, when it is `caller`'s to see: another caller's task, another agent's,
    /// another front's turn or an id no turn has are all not found, alike.
    pub(crate) async fn find(
        &self,
        agent: &ExposedAgent,
        caller: &Caller,
        task: &str,
    ) -> Result<Found, A2aError> {
        let not_found = || A2aError::TaskNotFound(task.to_string());
        let id = mapping::request_id(task).ok_or_else(not_found)?;
        let stored = match agent.engine.lookup(&id).await {
            Ok(Some(s)) => s,
            Ok(None) => return Err(not_found()),
            Err(e) => {
                tracing::warn!(request = %id, error = %e, "could not read an A2A task from the journal");
                return Err(A2aError::Internal("the task could not be read".into()));
            }
        };
        let requester = agentwire_engine::watch::route_requester(&stored.route);
        if stored.protocol != PROTOCOL
            || stored.agent != agent.engine.card().name
            || !caller.owns(&requester)
        {
            return Err(not_found());
        }
        let context = stored
            .route
            .get("context")
            .and_then(|c| c.as_str())
            .map(str::to_string)
            .unwrap_or_else(|| mapping::context_of(&stored.conversation_id, &requester));
        Ok(Found {
            task: mapping::task_id_of(&id),
            id,
            context,
            stored,
        })
    }

    /// The task `found` as it stands: from the hub while it holds the turn, else from the journal.
    fn tracker(&self, found: &Found) -> (Tracker, Option<u64>) {
        let message_id = found
            .stored
            .route
            .get("message")
            .and_then(|m| m.as_str())
            .unwrap_or(&found.task)
            .to_string();
        let user = mapping::user_message(
            &message_id,
            &found.task,
            &found.context,
            &found.stored.input.message,
        );
        if let Some(s) = snapshot(
            &self.hub,
            &found.id,
            &found.task,
            &found.context,
            Some(user.clone()),
        ) {
            return s;
        }
        let mut t = Tracker::new(&found.task, &found.context, Some(user));
        let accepted = WatchKind::Accepted {
            queued: false,
            protocol: PROTOCOL.into(),
            agent: found.stored.agent.clone(),
            conversation: found.stored.conversation_id.clone(),
            prompt: String::new(),
            requester: String::new(),
        };
        t.apply(&accepted, found.stored.accepted_at.saturating_mul(1000));
        if let Some(o) = &found.stored.outcome {
            let at = found.stored.ended_at.unwrap_or(found.stored.accepted_at);
            t.apply(&WatchKind::Outcome(o.clone()), at.saturating_mul(1000));
        }
        (t, None)
    }

    /// Follows task `found` from a snapshot of it now, or (`from_start`, for a task just made) from its
    /// submission, so that a stream shows each of its updates.
    fn follow(
        &self,
        found: &Found,
        stop_at_input: bool,
        slot: Option<SubscriberSlot>,
        from_start: bool,
    ) -> Following {
        // Watch first, then read: what is published between the two is in the watch, after the snapshot.
        let watch = self.hub.watch(&found.id);
        let (mut tracker, mut seen) = self.tracker(found);
        if from_start && watch.is_some() {
            tracker = Tracker::new(
                &found.task,
                &found.context,
                tracker
                    .task(None, false)
                    .history
                    .and_then(|h| h.into_iter().next()),
            );
            seen = None;
        }
        Following {
            hub: self.hub.clone(),
            id: found.id.clone(),
            tracker,
            seen,
            watch,
            pending: VecDeque::new(),
            stop_at_input,
            done: false,
            _slot: slot,
        }
    }

    /// `GetTask`.
    pub(crate) async fn get(
        &self,
        agent: &ExposedAgent,
        caller: &Caller,
        task: &str,
        history: Option<usize>,
    ) -> Result<Task, A2aError> {
        let found = self.find(agent, caller, task).await?;
        Ok(self.tracker(&found).0.task(history, true))
    }

    /// `SendMessage` / `SendStreamingMessage`: a new task (the next turn of its context), or the answer to
    /// the question task `taskId` waits on. Returns the task followed from its first state; a stream stops
    /// where the task ends or asks. A new task is followed from its submission when `from_start` (a stream
    /// shows each of its updates), else from where it stands.
    pub(crate) async fn send(
        &self,
        agent: &ExposedAgent,
        caller: &Caller,
        req: SendRequest,
        from_start: bool,
    ) -> Result<Following, A2aError> {
        if let Some(task) = req.task_id.clone() {
            return self.answer(agent, caller, &task, req).await;
        }
        let engine = &agent.engine;
        let card = engine.card();
        if req.text.len() > card.max_prompt_bytes {
            return Err(A2aError::InvalidParams(format!(
                "the message is {} bytes; agent {} takes at most {}",
                req.text.len(),
                agent.name,
                card.max_prompt_bytes
            )));
        }
        let requester = caller.requester();
        let context = req.context_id.clone().unwrap_or_else(random_id);
        let task = random_id();
        let Some(conversation) = mapping::conversation_id(&requester, &context) else {
            return Err(A2aError::InvalidParams(
                "contextId is too long to name a conversation".into(),
            ));
        };
        let Some(id) = mapping::request_id(&task) else {
            return Err(A2aError::Internal(
                "a fresh task id is not a turn id".into(),
            ));
        };
        let sub = Submission {
            input: TurnInput::new(
                id.clone(),
                conversation,
                req.text.clone(),
                card.default_model,
            ),
            protocol: PROTOCOL.into(),
            requester: requester.clone(),
            route: serde_json::json!({
                "requester": requester,
                "task": task,
                "context": context,
                "message": req.message_id,
            }),
            front: Arc::new(TurnSide),
            policy: TurnPolicy {
                refuse_when_full: true,
                keep_transcript: true,
                ..Default::default()
            },
            conversation_meta: None,
            slot: None,
        };
        match agentwire_http::front::submit_for(engine, caller, sub).await {
            // A refusal was journaled and published: the task is rejected, and says why.
            SubmitReply::Accepted { .. } | SubmitReply::Refused(_) => {}
            SubmitReply::Draining => {
                return Err(A2aError::Unavailable {
                    message: "the agent is stopping and takes no new tasks; send it again".into(),
                    retry_after: UNAVAILABLE_RETRY_SECS,
                })
            }
            SubmitReply::JournalUnavailable(why) => {
                tracing::warn!(request = %id, %why, "an A2A message was not taken: the journal cannot be written");
                return Err(A2aError::Unavailable {
                    message: "the agent cannot take tasks now (its journal cannot be written)"
                        .into(),
                    retry_after: UNAVAILABLE_RETRY_SECS,
                });
            }
            SubmitReply::DuplicateLive
            | SubmitReply::DuplicateStored(_)
            | SubmitReply::ConversationBusy => {
                return Err(A2aError::Internal(
                    "a fresh task id met a turn already journaled".into(),
                ))
            }
        }
        // The task just made is in the hub (its acceptance, or its refusal, is published before the
        // submission returns): followed from there, with no journal read before its first update.
        let user = mapping::user_message(&req.message_id, &task, &context, &req.text);
        if let Some(f) = self.follow_submitted(&id, &task, &context, user, from_start) {
            return Ok(f);
        }
        let found = self.find(agent, caller, &task).await?;
        Ok(self.follow(&found, true, None, from_start))
    }

    /// Follows task `task` (turn `id`, in context `context`, asked with `user`) just submitted, from the
    /// hub: from its submission when `from_start`, else from where it stands. `None` when the hub does not
    /// hold it (then it is read from the journal).
    fn follow_submitted(
        &self,
        id: &RequestId,
        task: &str,
        context: &str,
        user: crate::wire::Message,
        from_start: bool,
    ) -> Option<Following> {
        // Watch first, then read: what is published between the two is in the watch, after the snapshot.
        let watch = self.hub.watch(id)?;
        let (tracker, seen) = match from_start {
            true => (Tracker::new(task, context, Some(user)), None),
            false => snapshot(&self.hub, id, task, context, Some(user))?,
        };
        Some(Following {
            hub: self.hub.clone(),
            id: id.clone(),
            tracker,
            seen,
            watch: Some(watch),
            pending: VecDeque::new(),
            stop_at_input: true,
            done: false,
            _slot: None,
        })
    }

    /// A message naming task `task`: the answer to the question it waits on.
    async fn answer(
        &self,
        agent: &ExposedAgent,
        caller: &Caller,
        task: &str,
        req: SendRequest,
    ) -> Result<Following, A2aError> {
        let found = self.find(agent, caller, task).await?;
        if let Some(c) = &req.context_id {
            if *c != found.context {
                return Err(A2aError::InvalidParams(format!(
                    "contextId {c:?} is not task {task:?}'s context"
                )));
            }
        }
        let (tracker, _) = self.tracker(&found);
        let state = tracker.state();
        if state.is_terminal() {
            return Err(A2aError::UnsupportedOperation(format!(
                "task {task:?} is {}: it takes no more messages (send a new message in its contextId to go on with the conversation)",
                state.name()
            )));
        }
        let waiting = || {
            A2aError::UnsupportedOperation(format!(
                "task {task:?} is not waiting for input (it is {}): only its question's answer can be sent to it",
                state.name()
            ))
        };
        let question_id = self
            .hub
            .turn(&found.id)
            .and_then(|(s, _)| s.question)
            .ok_or_else(waiting)?;
        let question = agent
            .engine
            .waiting_question(&found.id, &question_id)
            .ok_or_else(waiting)?;
        if req.text.len() > MAX_ANSWER_BYTES {
            return Err(A2aError::InvalidParams(format!(
                "an answer is at most {MAX_ANSWER_BYTES} bytes (this one has {})",
                req.text.len()
            )));
        }
        let answer = mapping::answer_from_text(&question.kind, &req.text)
            .map_err(|e| A2aError::InvalidParams(e.to_string()))?;
        match agent.engine.answer(&found.id, &question_id, answer) {
            AnswerReply::Taken => Ok(self.follow(&found, true, None, false)),
            AnswerReply::NotWaiting => Err(waiting()),
            AnswerReply::DoesNotFit => Err(A2aError::InvalidParams(
                "the answer does not fit the question".into(),
            )),
        }
    }

    /// `CancelTask`: the engine's cancel, then the task once it has ended (or after [`CANCEL_WAIT`]).
    pub(crate) async fn cancel(
        &self,
        agent: &ExposedAgent,
        caller: &Caller,
        task: &str,
    ) -> Result<Task, A2aError> {
        let found = self.find(agent, caller, task).await?;
        let not_cancelable = |state: TaskState| A2aError::TaskNotCancelable {
            task: task.to_string(),
            state: state.name(),
        };
        let state = self.tracker(&found).0.state();
        if state.is_terminal() {
            return Err(not_cancelable(state));
        }
        let reply = match caller {
            Caller::Operator => agent.engine.cancel_by_operator(&found.id).await,
            Caller::Program(_) => agent.engine.cancel(&found.id, &caller.requester()).await,
        };
        let following = self.follow(&found, false, None, false);
        let settled = tokio::time::timeout(CANCEL_WAIT, following.settle(None)).await;
        let task_now = match settled {
            Ok(t) => t,
            Err(_) => self.tracker(&found).0.task(None, true),
        };
        match (reply, task_now.status.state) {
            (CancelReply::Ignored, s) if s.is_terminal() && s != TaskState::Canceled => {
                Err(not_cancelable(s))
            }
            // Not live here and not ended: it runs elsewhere (another instance on a shared journal),
            // where this cancel does not reach.
            (CancelReply::Ignored, s) if !s.is_terminal() => Err(not_cancelable(s)),
            _ => Ok(task_now),
        }
    }

    /// `SubscribeToTask`: the task followed to its end, by any number of subscribers up to
    /// [`MAX_SUBSCRIBERS_PER_TASK`]; a task that has ended cannot be subscribed to.
    pub(crate) async fn subscribe(
        &self,
        agent: &ExposedAgent,
        caller: &Caller,
        task: &str,
    ) -> Result<Following, A2aError> {
        let found = self.find(agent, caller, task).await?;
        let state = self.tracker(&found).0.state();
        if state.is_terminal() {
            return Err(A2aError::UnsupportedOperation(format!(
                "task {task:?} is {}: a task that has ended cannot be subscribed to (read it with GetTask)",
                state.name()
            )));
        }
        let slot = {
            let mut c = self.subscribers.lock().unwrap_or_else(|p| p.into_inner());
            let n = c.entry(found.id.clone()).or_insert(0);
            if *n >= MAX_SUBSCRIBERS_PER_TASK {
                return Err(A2aError::Unavailable {
                    message: format!(
                        "task {task:?} has {MAX_SUBSCRIBERS_PER_TASK} subscribers, the most it takes; try again later"
                    ),
                    retry_after: UNAVAILABLE_RETRY_SECS,
                });
            }
            *n += 1;
            SubscriberSlot {
                counts: self.subscribers.clone(),
                id: found.id.clone(),
            }
        };
        Ok(self.follow(&found, false, Some(slot), false))
    }

    /// `ListTasks`: the caller's tasks of this agent the hub holds (the operator's list is everyone's),
    /// newest first, filtered and paged.
    pub(crate) async fn list(
        &self,
        agent: &ExposedAgent,
        caller: &Caller,
        req: ListRequest,
    ) -> Result<ListTasksResponse, A2aError> {
        let filter = TurnFilter {
            agent: Some(agent.engine.card().name),
            protocol: Some(PROTOCOL.into()),
            requester: match caller {
                Caller::Operator => None,
                Caller::Program(_) => Some(caller.requester()),
            },
            ..Default::default()
        };
        let matching: Vec<(TurnSummary, String)> = self
            .hub
            .turns(&filter, MAX_LISTED_TURNS)
            .into_iter()
            .filter_map(|s| {
                let context = s
                    .conversation
                    .as_ref()
                    .map(|c| mapping::context_of(c, &s.requester))?;
                let state = summary_state(&s);
                let keep = req.context_id.as_ref().is_none_or(|c| *c == context)
                    && req.status.is_none_or(|st| st == state)
                    && req
                        .after_ms
                        .is_none_or(|after| s.ended_ms.is_none_or(|e| e >= after));
                keep.then_some((s, context))
            })
            .collect();
        let total = matching.len();
        let rest: Vec<&(TurnSummary, String)> = matching
            .iter()
            .filter(|(s, _)| req.before.is_none_or(|b| s.first_id < b))
            .collect();
        let page = &rest[..rest.len().min(req.page_size)];
        let next_page_token = match (rest.len() > page.len(), page.last()) {
            (true, Some((s, _))) => s.first_id.to_string(),
            _ => String::new(),
        };
        let history = req.history_length.filter(|n| *n > 0);
        let mut tasks = Vec::with_capacity(page.len());
        for (s, context) in page {
            let task = mapping::task_id_of(&s.id);
            let mut t = match history {
                // History asked for: the client's message is the journal's.
                Some(_) => match self.find(agent, caller, &task).await {
                    Ok(found) => self.tracker(&found).0,
                    Err(_) => continue,
                },
                None => match snapshot(&self.hub, &s.id, &task, context, None) {
                    Some((t, _)) => t,
                    None => continue,
                },
            }
            .task(history.or(Some(0)), req.include_artifacts);
            if !req.include_artifacts {
                t.artifacts = None;
            }
            tasks.push(t);
        }
        Ok(ListTasksResponse {
            tasks,
            next_page_token,
            page_size: req.page_size as i32,
            total_size: i32::try_from(total).unwrap_or(i32::MAX),
        })
    }
}
