//! Turns that many can watch. Every turn's progress (its acceptance, events, questions and outcome) is
//! published to a hub beside the front that took the turn, which stays one subscriber among any number: a
//! web page, a CLI following a run, metrics.
//!
//! - [`WatchHub::watch`] follows one turn: what it has done so far, then what it does next, with no gap and
//!   no duplicate (the snapshot and the subscription are taken under the lock every publication holds).
//! - [`WatchHub::watch_all`] follows every turn of every engine that shares the hub; each event has an id
//!   that increases across the hub, and [`WatchHub::watch_all_since`] resumes after one.
//! - A watcher never slows a turn: publication never waits. One that falls more than
//!   [`WATCH_QUEUE_CAPACITY`] events behind is told how many it missed ([`Missed`]) and can read the turns
//!   again (here while they are recent, then from the journal).

use agentwire_core::{Outcome, Question, RequestId, TurnEvent};
use agentwire_store::StoredTurn;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::broadcast;

use crate::front::{FrontAsk, TurnFront};

/// What the hub publishes, plain data in the core (which the metrics read too).
pub(crate) use agentwire_core::watch as turn;
pub use turn::{TurnEnd, TurnState, TurnSummary, WatchEvent, WatchKind, MAX_PROMPT_SHOWN};

/// Events a watcher may fall behind by before it is told it missed some: a turn streams tens of events a
/// second, so this is seconds of every running turn's output, and a watcher that is further behind is not
/// reading (a stopped page, a full socket).
pub const WATCH_QUEUE_CAPACITY: usize = 4096;
/// Events kept per turn for a watcher that joins part way, as many as a turn's transcript keeps: past it the
/// oldest are let go (and counted), the outcome always kept.
pub const MAX_WATCHED_EVENTS_PER_TURN: usize = 4096;
/// Ended turns whose events stay in memory for late watchers and resumed streams; older ones are read from
/// the journal.
pub const RECENT_TURNS_KEPT: usize = 256;
/// A watcher fell behind by this many events (they are in the hub while their turns are recent, and in the
/// journal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("missed {0} events")]
pub struct Missed(pub u64);

struct TurnLog {
    events: VecDeque<Arc<WatchEvent>>,
    next_seq: u64,
    /// Events let go for the bound.
    dropped: u64,
    ended: bool,
    summary: TurnSummary,
}

impl TurnLog {
    fn new(turn: &RequestId, first_id: u64, at_ms: u64) -> TurnLog {
        TurnLog {
            events: VecDeque::new(),
            next_seq: 0,
            dropped: 0,
            ended: false,
            summary: TurnSummary {
                id: turn.clone(),
                agent: String::new(),
                protocol: String::new(),
                requester: String::new(),
                conversation: None,
                prompt: String::new(),
                state: TurnState::Running,
                question: None,
                outcome: None,
                started_ms: at_ms,
                ended_ms: None,
                first_id,
            },
        }
    }

    /// The summary after `kind`.
    fn note(&mut self, kind: &WatchKind, at_ms: u64) {
        self.summary.note(kind, at_ms);
    }
}

/// Which turns [`WatchHub::turns`] lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnFilter {
    /// Only this agent's.
    pub agent: Option<String>,
    /// Only this front's.
    pub protocol: Option<String>,
    /// Only this requester's.
    pub requester: Option<String>,
    /// Only those in this state.
    pub state: Option<TurnState>,
    /// Only those that ended so.
    pub end: Option<TurnEnd>,
    /// Only those older than the turn whose `first_id` this is (the next page).
    pub before: Option<u64>,
}

/// The requester a front journaled in a turn's route (`"requester"`, as the caller fronts do), else empty.
pub fn route_requester(route: &serde_json::Value) -> String {
    route
        .get("requester")
        .and_then(|r| r.as_str())
        .unwrap_or_default()
        .to_string()
}

/// The current time in Unix milliseconds.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[derive(Default)]
struct HubState {
    next_id: u64,
    turns: HashMap<RequestId, TurnLog>,
    /// Ended turns, oldest first, so the oldest are let go past [`RECENT_TURNS_KEPT`].
    ended: VecDeque<RequestId>,
    /// Ids given to turns listed from the journal ([`WatchHub::remember`]): no event has them, so a
    /// watcher resuming before them has missed none.
    remembered: std::collections::BTreeSet<u64>,
}

/// The turns' events, for every watcher. Shared by the engines of one daemon.
pub struct WatchHub {
    state: Mutex<HubState>,
    tx: broadcast::Sender<Arc<WatchEvent>>,
    /// The daemon's metrics, the turns' counted here as they are published.
    metrics: Arc<crate::metrics::Metrics>,
}

impl std::fmt::Debug for WatchHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchHub").finish_non_exhaustive()
    }
}

impl Default for WatchHub {
    fn default() -> Self {
        WatchHub {
            state: Mutex::default(),
            tx: broadcast::channel(WATCH_QUEUE_CAPACITY).0,
            metrics: Arc::default(),
        }
    }
}

impl WatchHub {
    /// A hub with no turns.
    pub fn new() -> Arc<WatchHub> {
        Arc::new(WatchHub::default())
    }

    /// The daemon's metrics, the turns' among them.
    pub fn metrics(&self) -> &Arc<crate::metrics::Metrics> {
        &self.metrics
    }

    fn lock(&self) -> MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publishes what turn `turn` did. Never waits.
    pub(crate) fn publish(&self, turn: &RequestId, kind: WatchKind) {
        let at_ms = now_ms();
        let mut st = self.lock();
        let id = st.next_id;
        st.next_id += 1;
        let ends = matches!(kind, WatchKind::Outcome(_));
        let log = st
            .turns
            .entry(turn.clone())
            .or_insert_with(|| TurnLog::new(turn, id, at_ms));
        let before = crate::metrics::Before::of(&log.summary);
        log.note(&kind, at_ms);
        self.metrics
            .observe(before, &log.summary, &kind, ends && !log.ended);
        let event = Arc::new(WatchEvent {
            id,
            turn: turn.clone(),
            seq: log.next_seq,
            at_ms,
            kind,
        });
        log.next_seq += 1;
        if log.events.len() >= MAX_WATCHED_EVENTS_PER_TURN && !ends {
            log.events.pop_front();
            log.dropped += 1;
        }
        log.events.push_back(event.clone());
        if ends && !log.ended {
            log.ended = true;
            st.ended.push_back(turn.clone());
            while st.ended.len() > RECENT_TURNS_KEPT {
                if let Some(old) = st.ended.pop_front() {
                    st.turns.remove(&old);
                }
            }
        }
        // No receiver is fine; a full one is told what it missed when it reads.
        let _ = self.tx.send(event);
    }

    /// Lists ended turns the journal holds (`turns`, newest first, as [`Journal::latest`] reads them) among
    /// the recent ones, as a daemon does at start so that its turn list goes on where the last run left
    /// it. Their events are the journal's (a list entry, not a stream); a turn the hub knows already, or
    /// one without an outcome (recovery ends it, and the hub sees that), is left out. Past
    /// [`RECENT_TURNS_KEPT`], the oldest go first.
    ///
    /// [`Journal::latest`]: agentwire_store::Journal::latest
    pub fn remember(&self, turns: &[StoredTurn]) {
        let mut st = self.lock();
        for t in turns.iter().rev() {
            let Some(outcome) = &t.outcome else { continue };
            if st.turns.contains_key(&t.request_id) {
                continue;
            }
            let id = st.next_id;
            st.next_id += 1;
            st.remembered.insert(id);
            let started_ms = t.accepted_at.saturating_mul(1000);
            let mut log = TurnLog::new(&t.request_id, id, started_ms);
            log.ended = true;
            log.summary = TurnSummary {
                agent: t.agent.clone(),
                protocol: t.protocol.clone(),
                conversation: Some(t.conversation_id.clone()),
                prompt: first_line(&t.input.message),
                requester: route_requester(&t.route),
                state: TurnState::Ended,
                outcome: Some(outcome.clone()),
                // The journal keeps seconds: how long a turn of an earlier run took, to the second.
                ended_ms: t.ended_at.map(|e| e.saturating_mul(1000)),
                ..log.summary
            };
            st.turns.insert(t.request_id.clone(), log);
            st.ended.push_back(t.request_id.clone());
            while st.ended.len() > RECENT_TURNS_KEPT {
                if let Some(old) = st.ended.pop_front() {
                    st.turns.remove(&old);
                }
            }
        }
    }

    /// Follows turn `turn`: what it did so far, then what it does next. `None` when the hub does not know
    /// it (never seen here, or ended long ago: read it from the journal).
    pub fn watch(&self, turn: &RequestId) -> Option<TurnWatch> {
        let st = self.lock();
        let log = st.turns.get(turn)?;
        let so_far: Vec<Arc<WatchEvent>> = log.events.iter().cloned().collect();
        let ended = log.ended;
        // Subscribed under the lock every publication holds: nothing published between the two is lost or
        // seen twice.
        let rx = (!ended).then(|| self.tx.subscribe());
        Some(TurnWatch {
            turn: turn.clone(),
            so_far: so_far.into(),
            dropped: log.dropped,
            rx,
        })
    }

    /// The turns the hub holds (live, and the newest ended ones) that `filter` lets through, newest first,
    /// at most `limit`.
    pub fn turns(&self, filter: &TurnFilter, limit: usize) -> Vec<TurnSummary> {
        let st = self.lock();
        let mut out: Vec<TurnSummary> = st
            .turns
            .values()
            .map(|l| &l.summary)
            .filter(|s| filter.agent.as_ref().is_none_or(|a| *a == s.agent))
            .filter(|s| filter.protocol.as_ref().is_none_or(|p| *p == s.protocol))
            .filter(|s| filter.requester.as_ref().is_none_or(|r| *r == s.requester))
            .filter(|s| filter.state.is_none_or(|x| x == s.state))
            .filter(|s| filter.end.is_none_or(|e| s.end() == Some(e)))
            .filter(|s| filter.before.is_none_or(|b| s.first_id < b))
            .cloned()
            .collect();
        out.sort_by_key(|s| std::cmp::Reverse(s.first_id));
        out.truncate(limit);
        out
    }

    /// One turn the hub holds, and its events so far.
    pub fn turn(&self, turn: &RequestId) -> Option<(TurnSummary, Vec<Arc<WatchEvent>>)> {
        let st = self.lock();
        let log = st.turns.get(turn)?;
        Some((log.summary.clone(), log.events.iter().cloned().collect()))
    }

    /// Follows every turn from now on.
    pub fn watch_all(&self) -> AllWatch {
        let _st = self.lock();
        AllWatch {
            rx: self.tx.subscribe(),
        }
    }

    /// Follows every turn, from the events after `id` the hub still holds: [`Missed`] first when some after
    /// it are gone.
    pub fn watch_all_since(&self, id: u64) -> (Vec<Arc<WatchEvent>>, Option<Missed>, AllWatch) {
        let st = self.lock();
        let mut out: Vec<Arc<WatchEvent>> = st
            .turns
            .values()
            .flat_map(|l| l.events.iter().filter(|e| e.id > id).cloned())
            .collect();
        out.sort_by_key(|e| e.id);
        let remembered = st.remembered.range(id.saturating_add(1)..).count() as u64;
        let wanted = st
            .next_id
            .saturating_sub(id.saturating_add(1))
            .saturating_sub(remembered);
        let missed = (wanted > out.len() as u64).then(|| Missed(wanted - out.len() as u64));
        let rx = self.tx.subscribe();
        drop(st);
        (out, missed, AllWatch { rx })
    }
}

/// One turn followed.
#[derive(Debug)]
pub struct TurnWatch {
    turn: RequestId,
    so_far: VecDeque<Arc<WatchEvent>>,
    /// Events of the turn let go before the watch began.
    dropped: u64,
    /// `None` once the turn has ended (nothing more comes).
    rx: Option<broadcast::Receiver<Arc<WatchEvent>>>,
}

impl TurnWatch {
    /// How many of the turn's first events were let go before this watch began (past
    /// [`MAX_WATCHED_EVENTS_PER_TURN`]).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The turn's next event: first those it did before the watch began, then the live ones; `None` after
    /// its outcome. [`Missed`] when this watcher fell behind.
    pub async fn next(&mut self) -> Option<Result<Arc<WatchEvent>, Missed>> {
        if let Some(e) = self.so_far.pop_front() {
            if matches!(e.kind, WatchKind::Outcome(_)) {
                self.rx = None;
            }
            return Some(Ok(e));
        }
        loop {
            let rx = self.rx.as_mut()?;
            match rx.recv().await {
                Ok(e) if e.turn == self.turn => {
                    if matches!(e.kind, WatchKind::Outcome(_)) {
                        self.rx = None;
                    }
                    return Some(Ok(e));
                }
                Ok(_) => continue,
                Err(broadcast::error::RecvError::Lagged(n)) => return Some(Err(Missed(n))),
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

/// Every turn followed.
#[derive(Debug)]
pub struct AllWatch {
    rx: broadcast::Receiver<Arc<WatchEvent>>,
}

impl AllWatch {
    /// The next event of any turn; [`Missed`] when this watcher fell behind.
    pub async fn next(&mut self) -> Option<Result<Arc<WatchEvent>, Missed>> {
        match self.rx.recv().await {
            Ok(e) => Some(Ok(e)),
            Err(broadcast::error::RecvError::Lagged(n)) => Some(Err(Missed(n))),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }
}

/// The first line of `message`, at most [`MAX_PROMPT_SHOWN`] bytes (at a character boundary).
pub(crate) fn first_line(message: &str) -> String {
    // A peer's item (a roost envelope) is shown as who sent what, not as the envelope's words to the agent.
    let shown = agentwire_core::peer_envelope::for_people(message);
    let line = shown.lines().next().unwrap_or("");
    let mut end = line.len().min(MAX_PROMPT_SHOWN);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    line[..end].to_string()
}

/// A turn's front as the engine holds it: the protocol's front, and the hub beside it.
pub(crate) struct WatchedFront {
    pub(crate) inner: Arc<dyn TurnFront>,
    pub(crate) hub: Arc<WatchHub>,
    pub(crate) turn: RequestId,
    /// What the acceptance tells watchers.
    pub(crate) accepted: WatchKind,
    /// The open question's answer, as said back, between its `question_answered` and its
    /// `question_closed` (which tells watchers).
    pub(crate) answered: std::sync::Mutex<Option<(String, String)>>,
}

impl WatchedFront {
    /// A turn a crash cut off, ended now: watchers learn whose it was (its acceptance, to the hub alone:
    /// the requester was told long ago) and how it ended; the front sends the outcome.
    pub(crate) fn recovered(&self, outcome: &Outcome, wire: Option<&str>) {
        self.hub.publish(&self.turn, self.accepted.clone());
        self.deliver_outcome(outcome, wire);
    }
}

impl TurnFront for WatchedFront {
    fn accepted(&self, queued: bool) {
        let mut kind = self.accepted.clone();
        if let WatchKind::Accepted { queued: q, .. } = &mut kind {
            *q = queued;
        }
        self.hub.publish(&self.turn, kind);
        self.inner.accepted(queued);
    }

    fn event(&self, event: TurnEvent) {
        self.hub
            .publish(&self.turn, WatchKind::Event(event.clone()));
        self.inner.event(event);
    }

    fn encode_outcome(&self, outcome: &Outcome) -> Option<String> {
        self.inner.encode_outcome(outcome)
    }

    fn token_budget(&self) -> Option<u64> {
        self.inner.token_budget()
    }

    fn traceparent(&self) -> Option<String> {
        self.inner.traceparent()
    }

    fn traced(&self, trace_id: &str, content: bool) {
        self.inner.traced(trace_id, content)
    }

    fn deliver_outcome(&self, outcome: &Outcome, wire: Option<&str>) {
        self.inner.deliver_outcome(outcome, wire);
        self.hub
            .publish(&self.turn, WatchKind::Outcome(outcome.clone()));
    }

    fn ask(&self, question: &Question) -> FrontAsk {
        let asked = self.inner.ask(question);
        if let FrontAsk::Sent { question_id, .. } = &asked {
            self.hub.publish(
                &self.turn,
                WatchKind::Question {
                    id: question_id.clone(),
                    question: question.clone(),
                },
            );
        }
        asked
    }

    fn question_answered(&self, question_id: &str, said: &str) {
        if let Ok(mut a) = self.answered.lock() {
            *a = Some((question_id.to_string(), said.to_string()));
        }
        self.inner.question_answered(question_id, said);
    }

    fn question_closed(&self, question_id: &str) {
        let answer = self
            .answered
            .lock()
            .ok()
            .and_then(|mut a| a.take())
            .filter(|(id, _)| id == question_id)
            .map(|(_, said)| said);
        self.hub.publish(
            &self.turn,
            WatchKind::QuestionClosed {
                id: question_id.to_string(),
                answer,
            },
        );
        self.inner.question_closed(question_id);
    }

    fn replay(&self, stored: &StoredTurn) {
        // A resend answered from the journal: the turn does nothing new.
        self.inner.replay(stored);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire_core::ConversationId;

    fn id(n: u32) -> RequestId {
        RequestId::new(format!("t:{n}")).unwrap()
    }

    fn text(s: &str) -> WatchKind {
        WatchKind::Event(TurnEvent::Text { text: s.into() })
    }

    fn done() -> WatchKind {
        WatchKind::Outcome(Outcome::Result(agentwire_core::TurnResult {
            text: "ok".into(),
            usage: Default::default(),
            stop_reason: "stop".into(),
        }))
    }

    #[tokio::test]
    async fn a_late_watcher_gets_the_turn_so_far_then_live_without_gap_or_duplicate() {
        let hub = WatchHub::new();
        hub.publish(&id(1), text("a"));
        hub.publish(&id(2), text("other"));
        hub.publish(&id(1), text("b"));
        let mut w = hub.watch(&id(1)).expect("a live turn");
        hub.publish(&id(1), text("c"));
        hub.publish(&id(1), done());
        let mut seqs = Vec::new();
        while let Some(e) = w.next().await {
            seqs.push(e.unwrap().seq);
        }
        assert_eq!(seqs, [0, 1, 2, 3]);
        // An ended turn is watched whole, and ends.
        let mut again = hub.watch(&id(1)).unwrap();
        let mut n = 0;
        while again.next().await.is_some() {
            n += 1;
        }
        assert_eq!(n, 4);
        assert!(hub.watch(&id(9)).is_none());
    }

    #[tokio::test]
    async fn a_watcher_that_stops_reading_holds_up_nothing_and_is_told_what_it_missed() {
        let hub = WatchHub::new();
        let mut slow = hub.watch_all();
        let extra = 10;
        for n in 0..(WATCH_QUEUE_CAPACITY + extra) {
            hub.publish(&id(1), text(&n.to_string()));
        }
        assert_eq!(slow.next().await, Some(Err(Missed(extra as u64))));
        assert!(matches!(slow.next().await, Some(Ok(_))));
    }

    #[tokio::test]
    async fn a_stream_resumes_after_an_id_and_says_when_some_are_gone() {
        let hub = WatchHub::new();
        for n in 0..5 {
            hub.publish(&id(n), text("x"));
        }
        let (after, missed, _live) = hub.watch_all_since(2);
        assert_eq!(after.iter().map(|e| e.id).collect::<Vec<_>>(), [3, 4]);
        assert_eq!(missed, None);
        for n in 0..(RECENT_TURNS_KEPT as u32 + 3) {
            hub.publish(&id(100 + n), done());
        }
        let (_, missed, _) = hub.watch_all_since(0);
        assert!(missed.is_some(), "ended turns past the bound are let go");
    }

    fn failed(code: agentwire_core::TurnFailure) -> WatchKind {
        WatchKind::Outcome(Outcome::Failure(agentwire_core::Failure::new(code, "m")))
    }

    #[test]
    fn turns_are_listed_by_how_they_ended() {
        use agentwire_core::TurnFailure;
        let hub = WatchHub::new();
        hub.publish(&id(1), done());
        hub.publish(&id(2), failed(TurnFailure::Cancelled));
        hub.publish(&id(3), failed(TurnFailure::ToolError));
        hub.publish(&id(4), text("still running"));
        let listed = |end: Option<TurnEnd>| -> Vec<String> {
            let f = TurnFilter {
                end,
                ..TurnFilter::default()
            };
            hub.turns(&f, 10).iter().map(|t| t.id.to_string()).collect()
        };
        assert_eq!(listed(Some(TurnEnd::Done)), ["t:1"]);
        assert_eq!(listed(Some(TurnEnd::Cancelled)), ["t:2"]);
        assert_eq!(listed(Some(TurnEnd::Failed)), ["t:3"]);
        assert_eq!(listed(None), ["t:4", "t:3", "t:2", "t:1"]);
        for e in [TurnEnd::Done, TurnEnd::Failed, TurnEnd::Cancelled] {
            assert_eq!(TurnEnd::parse(e.as_str()), Some(e));
        }
        assert_eq!(TurnEnd::parse("answered"), None);
    }

    #[test]
    fn a_turn_of_an_earlier_run_keeps_when_it_started_and_ended() {
        let conversation = ConversationId::new("c").unwrap();
        let input: agentwire_core::TurnInput = serde_json::from_value(serde_json::json!({
            "request_id": "t:7", "conversation_id": "c", "message": "hello\nthere", "model": "m"
        }))
        .unwrap();
        let turn = StoredTurn {
            request_id: id(7),
            conversation_id: conversation,
            protocol: "nipxx".into(),
            owner: "o".into(),
            agent: "demo".into(),
            route: serde_json::Value::Null,
            input,
            accepted_at: 100,
            outcome: Some(Outcome::Result(agentwire_core::TurnResult {
                text: "ok".into(),
                usage: Default::default(),
                stop_reason: "stop".into(),
            })),
            ended_at: Some(103),
            wire: None,
            tool_calls: 0,
        };
        let hub = WatchHub::new();
        hub.remember(std::slice::from_ref(&turn));
        let (t, _) = hub.turn(&id(7)).unwrap();
        assert_eq!((t.started_ms, t.ended_ms), (100_000, Some(103_000)));
        assert_eq!((t.prompt.as_str(), t.end()), ("hello", Some(TurnEnd::Done)));
    }

    #[test]
    fn the_prompt_shown_is_its_first_line_cut_at_a_character() {
        assert_eq!(first_line("hello\nworld"), "hello");
        let long = "é".repeat(MAX_PROMPT_SHOWN);
        assert!(first_line(&long).len() <= MAX_PROMPT_SHOWN);
        let item = "<roost-item kind=\"message\" from=\"lead\">\nFrom another session.\n\nhi\n</roost-item>";
        assert_eq!(first_line(item), "[message from lead] hi");
    }
}
