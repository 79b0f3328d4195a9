//! The engine's timer task: it sleeps until the pure core's next deadline, then closes expired questions,
//! wakes tasks that wait on the core (a claim's next look, a write's next try) and ends a drain's wait.

use super::*;

impl Engine {
    /// Tells the timer task that the core's timers changed (starting it the first time, and again should it
    /// ever have stopped: a front that panicked while told of a closed question must not leave every wait
    /// of the engine without its wake-up).
    pub(super) fn timers_changed(&self) {
        {
            let mut task = self.timer_task.lock().unwrap_or_else(|p| p.into_inner());
            if task.as_ref().is_none_or(|t| t.is_finished()) {
                *task = Some(tokio::spawn(drive_timers(
                    self.me.clone(),
                    self.timers_changed.clone(),
                )));
            }
        }
        self.timers_changed.notify_one();
    }

    /// Acts on every timer of the core due now: closes expired questions, wakes waiting tasks, ends a
    /// drain's wait.
    pub(super) fn fire_due_timers(&self) {
        let (mut closes, mut drain_over) = (Vec::new(), false);
        {
            let mut st = self.lock();
            st.core.handle_timeout(now());
            while let Some(action) = st.core.poll_action() {
                match action {
                    // Closed under the same lock as the timer fell due: an extension that comes after
                    // finds the question closed, never one whose window is gone.
                    Action::CloseQuestion { turn, question } => {
                        if let Some(closed) =
                            super::questions::expire_question(&mut st, &turn, &question)
                        {
                            closes.push(closed);
                        }
                    }
                    Action::Wake(id) => {
                        if let Some(waker) = st.wakers.remove(&id) {
                            let _ = waker.send(());
                        }
                    }
                    Action::DrainGraceOver => drain_over = true,
                }
            }
        }
        for (front, question) in closes.drain(..) {
            front.question_closed(&question);
        }
        if drain_over {
            self.ended.notify_waiters();
        }
    }

    /// Waits for the wake-up `schedule` sets in the core. Dropping the future drops its timer.
    pub(super) async fn wait_for(
        &self,
        schedule: impl FnOnce(&mut EngineCore, std::time::Instant) -> WakeId,
    ) {
        let (id, woken) = {
            let mut st = self.lock();
            let id = schedule(&mut st.core, now());
            let (tx, rx) = oneshot::channel();
            st.wakers.insert(id, tx);
            (id, rx)
        };
        self.timers_changed();
        struct Unwait<'a>(&'a Engine, WakeId);
        impl Drop for Unwait<'_> {
            fn drop(&mut self) {
                let mut st = self.0.lock();
                st.wakers.remove(&self.1);
                st.core.handle_wake_dropped(self.1);
            }
        }
        let _unwait = Unwait(self, id);
        let _ = woken.await;
    }
}

/// The driver's clock: tokio's, so that a test on paused time runs the engine's timers too.
pub(super) fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

/// The timer task: sleeps until the core's next deadline (or a change of its timers), then fires what is
/// due. Ends when the engine is gone.
pub(super) async fn drive_timers(engine: Weak<Engine>, changed: Arc<tokio::sync::Notify>) {
    loop {
        let next = match engine.upgrade() {
            Some(e) => e.lock().core.poll_timeout(),
            None => return,
        };
        match next {
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(tokio::time::Instant::from_std(at)) => {}
                    _ = changed.notified() => {}
                }
            }
            None => changed.notified().await,
        }
        match engine.upgrade() {
            Some(e) => e.fire_due_timers(),
            None => return,
        }
    }
}
