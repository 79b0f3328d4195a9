//! The deadline of `ask --nats --timeout`: the run as a whole must end within it, but the time a person
//! spends answering a question at the terminal does not count (the agent is not what is slow then).

use std::sync::Arc;
use tokio::sync::watch;
use tokio::time::Instant;

/// Where the deadline stands.
#[derive(Debug, Clone, Copy)]
struct State {
    deadline: Instant,
    /// A question is with the person, since then.
    paused_since: Option<Instant>,
}

/// A deadline that stops while a question is with the person.
#[derive(Debug)]
pub(crate) struct AskDeadline {
    state: watch::Sender<State>,
}

/// A question is with the person while this lives; dropping it moves the deadline by the time taken.
#[derive(Debug)]
pub(crate) struct Paused(Arc<AskDeadline>);

impl AskDeadline {
    /// A deadline `timeout` from now.
    pub(crate) fn new(timeout: std::time::Duration) -> Arc<AskDeadline> {
        let (state, _) = watch::channel(State {
            deadline: Instant::now() + timeout,
            paused_since: None,
        });
        Arc::new(AskDeadline { state })
    }

    /// Stops the clock until the returned guard is dropped.
    pub(crate) fn pause(self: &Arc<Self>) -> Paused {
        self.state.send_modify(|s| {
            s.paused_since.get_or_insert_with(Instant::now);
        });
        Paused(self.clone())
    }

    /// Completes once the deadline has passed with no question at the person.
    pub(crate) async fn passed(&self) {
        let mut rx = self.state.subscribe();
        loop {
            let now = *rx.borrow_and_update();
            match now.paused_since {
                Some(_) => {
                    let _ = rx.changed().await;
                }
                None => tokio::select! {
                    () = tokio::time::sleep_until(now.deadline) => return,
                    _ = rx.changed() => {}
                },
            }
        }
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        self.0.state.send_modify(|s| {
            if let Some(since) = s.paused_since.take() {
                s.deadline += since.elapsed();
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn time_at_a_question_does_not_count() {
        let d = AskDeadline::new(Duration::from_millis(300));
        let start = Instant::now();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let paused = d.pause();
        tokio::time::sleep(Duration::from_millis(600)).await;
        drop(paused);
        d.passed().await;
        // 300 ms of deadline, and the 600 ms at the question on top.
        assert!(
            start.elapsed() >= Duration::from_millis(900),
            "{:?}",
            start.elapsed()
        );
    }

    #[tokio::test]
    async fn passes_while_nobody_is_asked() {
        let d = AskDeadline::new(Duration::from_millis(200));
        let start = Instant::now();
        d.passed().await;
        assert!(start.elapsed() >= Duration::from_millis(200));
        // Once passed, it stays passed.
        tokio::time::timeout(Duration::from_secs(5), d.passed())
            .await
            .expect("passed at once");
    }

    #[tokio::test]
    async fn does_not_pass_while_a_question_is_with_the_person() {
        let d = AskDeadline::new(Duration::from_millis(100));
        let paused = d.pause();
        let waited = tokio::time::timeout(Duration::from_millis(500), d.passed()).await;
        assert!(waited.is_err(), "passed while paused");
        drop(paused);
    }
}
