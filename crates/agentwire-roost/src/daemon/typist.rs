//! Replies to terminal agents, typed into their terminals ([`crate::daemon::terminal`]): a terminal agent never
//! connects, so what waits for it (its task when its profile types it, replies, peers' messages as their
//! envelopes) is typed by its holder, oldest first, and counts as delivered (acked, written) only once the
//! holder says it was typed. A daemon that dies between the two types it again after its restart, as the
//! spec allows ("a crash between the two types it again"), unless the same holder still runs: it knows the
//! seqs it typed, and answers a repeat as typed. A job whose agent has connected and reported speaks the
//! protocol after all: its replies go on its connection, and nothing is typed to it.

use super::state::Shared;
use super::HOUSEKEEPING_INTERVAL;
use crate::daemon::terminal::Typing;
use crate::proto::supervisor::Life;
use std::path::PathBuf;
use std::sync::Arc;

/// One reply to type: the job, its token (for the ack), its dir, its holder's pid, and the reply.
struct ToType {
    job: String,
    token: String,
    dir: PathBuf,
    holder: u32,
    seq: u64,
    text: String,
}

impl Shared {
    /// Whether job `id` is a terminal agent whose replies are typed: its profile does not speak the
    /// protocol and this daemon has a holder to run it under.
    pub(super) fn typed_to(&self, profile: &str) -> bool {
        self.config.terminal_holder.is_some()
            && self
                .config
                .profiles
                .get(profile)
                .is_some_and(|p| !p.protocol)
    }

    /// The oldest reply waiting for each running terminal agent.
    fn to_type(&self) -> Vec<ToType> {
        let st = self.lock();
        st.sup
            .jobs
            .values()
            .filter(|j| j.life == Life::Running && self.typed_to(&j.profile))
            .filter(|j| j.report.is_none() && !st.job_conn.contains_key(&j.id))
            .filter_map(|j| {
                let p = j.pending.front()?;
                Some(ToType {
                    job: j.id.clone(),
                    token: j.token.clone(),
                    dir: self.config.data_dir.join("jobs").join(&j.id),
                    holder: j.pid?,
                    seq: p.seq,
                    text: p.text.clone(),
                })
            })
            .collect()
    }

    /// Types what waits for terminal agents, until nothing more can be typed now. A job whose holder does
    /// not answer (it is starting, or has just exited) is tried again at the next round.
    async fn type_waiting(&self) {
        loop {
            let mut typed_any = false;
            for t in self.to_type() {
                match crate::daemon::terminal::type_into(&t.dir, t.holder, t.seq, &t.text).await {
                    Typing::Typed => {
                        // Typed: acked as its agent would, and written before the next is typed.
                        if let Err(e) = self.ack(&t.job, &t.token, t.seq, true) {
                            tracing::warn!(job = t.job, error = %e.message, "typed a reply but could not record it; trying again");
                            return;
                        }
                        typed_any = true;
                    }
                    Typing::Refused(why) => {
                        // It will never be typed: dropped, so what waits behind it is typed.
                        tracing::warn!(
                            job = t.job,
                            seq = t.seq,
                            why,
                            "a reply could not be typed into a terminal agent; dropped"
                        );
                        if self.ack(&t.job, &t.token, t.seq, true).is_err() {
                            return;
                        }
                        typed_any = true;
                    }
                    Typing::Later(why) => {
                        tracing::debug!(
                            job = t.job,
                            why,
                            "could not type into a terminal agent yet"
                        )
                    }
                }
            }
            if !typed_any {
                return;
            }
        }
    }
}

/// Types replies into terminal agents while the daemon serves: at once when one is queued
/// ([`Shared::typing`]), and each [`HOUSEKEEPING_INTERVAL`] for what could not be typed before.
pub(super) async fn run(shared: Arc<Shared>, mut stop: tokio::sync::watch::Receiver<bool>) {
    if shared.config.terminal_holder.is_none() {
        return;
    }
    loop {
        tokio::select! {
            _ = shared.typing.notified() => {}
            _ = tokio::time::sleep(HOUSEKEEPING_INTERVAL) => {}
            _ = stop.changed() => return,
        }
        shared.type_waiting().await;
    }
}
