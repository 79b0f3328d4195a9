//! Questions a running turn puts to its requester: one open at a time per turn, its window kept by the
//! core, answered, expired or cancelled once.

use super::*;

impl Engine {
    /// An answer to the question turn `id` waits on: the core checks that it is the question open and
    /// that the answer fits it.
    pub fn answer(&self, id: &RequestId, question_id: &str, answer: Answer) -> AnswerReply {
        let closed = {
            let mut st = self.lock();
            let checked = st.core.check_answer(id, question_id, &answer);
            if checked != AnswerReply::Taken {
                return checked;
            }
            let Some(q) = st.core.handle_question_settled(id, question_id) else {
                return AnswerReply::NotWaiting;
            };
            let said = answer.describe(&q.question.kind);
            let Some(t) = st.live.get_mut(id) else {
                return AnswerReply::NotWaiting;
            };
            if let Some(reply) = t.asking.take() {
                let _ = reply.send(Asked::Answered(answer));
            }
            (t.front.clone(), q.id, said)
        };
        let (front, question_id, said) = closed;
        front.question_answered(&question_id, &said);
        front.question_closed(&question_id);
        AnswerReply::Taken
    }

    /// The question's window closed with no answer. Returns whether it was still open.
    pub fn question_expired(&self, id: &RequestId, question_id: &str) -> bool {
        let closed = expire_question(&mut self.lock(), id, question_id);
        match closed {
            Some((front, qid)) => {
                front.question_closed(&qid);
                true
            }
            None => false,
        }
    }

    /// Restarts the window of the question turn `id` waits on, from now (fisk-ai `elicit.waiting`).
    /// Returns whether that question is open.
    pub fn extend_question(&self, id: &RequestId, question_id: &str, window: Duration) -> bool {
        let mut st = self.lock();
        let open = st
            .core
            .open_question(id)
            .is_some_and(|q| q.id == question_id);
        if open
            && st
                .core
                .handle_question_extended(id, question_id, window, now())
        {
            drop(st);
            self.timers_changed();
        }
        open
    }

    /// The question turn `id` waits on, if `question_id` names it: what a front checks an answer against,
    /// so that it keeps no copy of the engine's open question.
    pub fn waiting_question(&self, id: &RequestId, question_id: &str) -> Option<Question> {
        let st = self.lock();
        st.core
            .open_question(id)
            .filter(|q| q.id == question_id)
            .map(|q| q.question.clone())
    }

    /// The question turn `id` waits on, with its id: what a front shows and checks an answer against
    /// (the engine's own, never an observer's copy).
    pub fn open_question(&self, id: &RequestId) -> Option<(String, Question)> {
        let st = self.lock();
        let q = st.core.open_question(id)?;
        Some((q.id.clone(), q.question.clone()))
    }

    /// Whether turn `id` waits on question `question_id`.
    pub fn is_waiting_on(&self, id: &RequestId, question_id: &str) -> bool {
        let st = self.lock();
        st.core
            .open_question(id)
            .is_some_and(|q| q.id == question_id)
    }

    /// Puts `question` to turn `id`'s requester through its front, one open at a time.
    pub(super) fn put_question(
        self: &Arc<Self>,
        id: &RequestId,
        question: Question,
    ) -> BoxFuture<'static, Asked> {
        let mut guard = self.lock();
        let st = &mut *guard;
        let Some(t) = st.live.get_mut(id) else {
            return Box::pin(async { Asked::Cancelled });
        };
        if *t.cancel.borrow() {
            return Box::pin(async { Asked::Cancelled });
        }
        if !st.core.may_ask(id) {
            // One question at a time: an agent that asks again before the first is settled gets no second.
            return Box::pin(async { Asked::Unavailable });
        }
        if t.unsynced {
            // The question is the first the peer hears of the turn: its acceptance is durable first.
            drop(guard);
            let (this, id) = (Arc::clone(self), id.clone());
            return Box::pin(async move {
                this.acceptance_durable(&id).await;
                this.put_question(&id, question).await
            });
        }
        match t.front.ask(&question) {
            FrontAsk::Unavailable => Box::pin(async { Asked::Unavailable }),
            FrontAsk::Settled(a) => Box::pin(async move { a }),
            FrontAsk::Sent {
                question_id,
                window,
            } => {
                let (tx, rx) = oneshot::channel();
                t.asking = Some(tx);
                st.core
                    .handle_question_asked(id, &question_id, question, window, now());
                if window.is_some() {
                    drop(guard);
                    self.timers_changed();
                }
                Box::pin(async move { rx.await.unwrap_or(Asked::Cancelled) })
            }
        }
    }
}

/// A running turn's [`AskQuestion`]: questions go to the turn's front through the engine.
pub(super) struct TurnAsker {
    pub(super) engine: Weak<Engine>,
    pub(super) id: RequestId,
}

impl AskQuestion for TurnAsker {
    fn ask(&self, question: Question) -> BoxFuture<'static, Asked> {
        match self.engine.upgrade() {
            Some(engine) => engine.put_question(&self.id, question),
            None => Box::pin(async { Asked::Cancelled }),
        }
    }
}

/// Closes turn `id`'s question `question_id` unanswered under the engine's lock (the agent hears
/// `Unanswered`); returns the front to tell once the lock is let go.
pub(super) fn expire_question(
    st: &mut State,
    id: &RequestId,
    question_id: &str,
) -> Option<(Arc<dyn TurnFront>, String)> {
    let q = st.core.handle_question_settled(id, question_id)?;
    let t = st.live.get_mut(id)?;
    if let Some(reply) = t.asking.take() {
        let _ = reply.send(Asked::Unanswered);
    }
    Some((t.front.clone(), q.id))
}
