//! Cancelling a NIP-XX run and saying what became of it: the relay's stored terminal (the run had already
//! ended), the agent's `CANCELLED` after the cancel (cancelled), or nothing (a run nobody knows, or an agent
//! that did not confirm in time).

use super::{cancel, open, run_filter, CancelRequest, ClientError, RunView, Terminal};
use crate::crypto::Crypto;
use crate::nipxx::{kinds, ErrorCode};
use crate::relay_conn::{Incoming, RelayConn};
use nostr::prelude::{Event, Filter, Kind};
use std::time::Duration;
use tokio::sync::mpsc::Receiver;

/// How long to wait for the relay to send a run's stored events (its EOSE) before cancelling: the bound the
/// client gives a relay to connect and to answer `info`.
pub const STORED_LOOKUP_WAIT: Duration = Duration::from_secs(5);
/// How long to wait, after the cancel, for the agent's terminal. An agent stops a run at its next boundary
/// (the demo agent within 100 ms, a model agent when its stream closes), so 5 s covers a loaded machine
/// without keeping the user long on an agent that will not answer.
pub const CANCEL_CONFIRM_WAIT: Duration = Duration::from_secs(5);
/// After the first terminal, how long to wait for a newer one (a response/cancel race), as `ask` does.
const TERMINAL_SETTLE: Duration = super::TERMINAL_SETTLE;

/// What became of a run that was cancelled.
#[derive(Debug, Clone, PartialEq)]
pub enum CancelOutcome {
    /// The agent ended the run `CANCELLED` after the cancel.
    Cancelled,
    /// The run had already ended, or ended otherwise as the cancel arrived: its terminal.
    AlreadyEnded(Terminal),
    /// The relay knows the run (its prompt or its events) but the agent did not end it within
    /// [`CANCEL_CONFIRM_WAIT`] of the cancel.
    Unconfirmed,
    /// Neither the relay nor the agent knows the run: no prompt, no events, no answer to the cancel.
    Unknown,
}

/// What the reading so far has found.
struct Watch {
    view: RunView,
    /// The relay holds the prompt or an event of the run.
    known: bool,
}

/// Cancels a run and finds out what became of it. First the relay's stored events of the run are read: a
/// stored terminal means the run already ended, and no cancel is sent (the spec has agents ignore it).
/// Otherwise the cancel goes out and the agent's terminal is awaited for [`CANCEL_CONFIRM_WAIT`].
pub async fn cancel_run(
    conn: &RelayConn,
    incoming: &mut Receiver<Incoming>,
    crypto: &Crypto,
    req: &CancelRequest,
) -> Result<CancelOutcome, ClientError> {
    let me = crypto.public_key();
    let sub = format!("cancel-{}", &req.prompt.to_hex()[..16]);
    let mut filters = vec![run_filter(me, req.agent, req.prompt, req.wrap)];
    if !req.wrap {
        // The prompt itself, so a run the agent has not answered yet is still known. (A wrapped prompt is a
        // rumor inside a wrap to the agent: not something we can look up.)
        filters.push(
            Filter::new()
                .id(req.prompt)
                .kind(Kind::Custom(kinds::PROMPT))
                .author(me),
        );
    }
    conn.subscribe(&sub, filters);
    let mut watch = Watch {
        view: RunView::new(me, req.agent, req.prompt),
        known: false,
    };
    let outcome = async {
        read(conn, incoming, crypto, &sub, &mut watch, Phase::Stored).await?;
        if let Some(t) = watch.view.terminal() {
            return Ok(CancelOutcome::AlreadyEnded(t.clone()));
        }
        cancel(conn, crypto, req).await?;
        read(conn, incoming, crypto, &sub, &mut watch, Phase::AfterCancel).await?;
        Ok(match watch.view.terminal() {
            Some(Terminal::Error(e)) if e.code == ErrorCode::Cancelled => CancelOutcome::Cancelled,
            Some(t) => CancelOutcome::AlreadyEnded(t.clone()),
            None if watch.known => CancelOutcome::Unconfirmed,
            None => CancelOutcome::Unknown,
        })
    }
    .await;
    conn.unsubscribe(&sub);
    outcome
}

/// Which part of [`cancel_run`] is reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The relay's stored events, until its EOSE.
    Stored,
    /// After the cancel: until a terminal has settled, or [`CANCEL_CONFIRM_WAIT`].
    AfterCancel,
}

async fn read(
    conn: &RelayConn,
    incoming: &mut Receiver<Incoming>,
    crypto: &Crypto,
    sub: &str,
    watch: &mut Watch,
    phase: Phase,
) -> Result<(), ClientError> {
    let wait = match phase {
        Phase::Stored => STORED_LOOKUP_WAIT,
        Phase::AfterCancel => CANCEL_CONFIRM_WAIT,
    };
    let mut until = tokio::time::Instant::now() + wait;
    loop {
        let m = match tokio::time::timeout_at(until, incoming.recv()).await {
            Ok(Some(m)) => m,
            Ok(None) => return Err(ClientError::Unreachable(conn.url().to_string())),
            Err(_) => return Ok(()),
        };
        match m {
            Incoming::Eose(s) if s == sub && phase == Phase::Stored => return Ok(()),
            Incoming::Event { sub: s, event } if s == sub => {
                let ended = watch.view.terminal().is_some();
                see(crypto, watch, *event);
                if phase == Phase::AfterCancel && !ended && watch.view.terminal().is_some() {
                    until = until.min(tokio::time::Instant::now() + TERMINAL_SETTLE);
                }
            }
            _ => {}
        }
    }
}

/// Applies one event of the subscription: the prompt (the run is known) or an event of the run.
fn see(crypto: &Crypto, watch: &mut Watch, event: Event) {
    if event.kind == Kind::Custom(kinds::PROMPT) {
        watch.known |= event.id == watch.view.prompt() && event.verify().is_ok();
        return;
    }
    let Some(message) = open(crypto, event) else {
        return;
    };
    let plain = crypto.decrypt(&message.author, &message.content).ok();
    if !watch.view.apply(&message, plain.as_deref()).is_empty() {
        watch.known = true;
    }
}
