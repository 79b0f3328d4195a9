//! The two ends of the benchmark: a NIP-XX client that runs one prompt at a time, and the echo peer that
//! answers a prompt directly (no engine, no journal) for the raw round trip.
//!
//! Both do the work a real client or agent does per event: NIP-44 v2 with the conversation key cached per
//! peer ([`Crypto`]), signing with seeded randomness, verifying the other side's signature, the NIP-XX tag
//! and payload builders and checks, and the client's [`RunView`] reconciliation.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentwire_nostr::client::{RunView, Terminal, Update};
use agentwire_nostr::crypto::Crypto;
use agentwire_nostr::nipxx::payload::{PromptPayload, ResponsePayload, Usage};
use agentwire_nostr::nipxx::{kinds, tags, Message};
use agentwire_nostr::relay_conn::{Incoming, RelayConn};
use nostr::prelude::{EventBuilder, Filter, Keys, Kind, PublicKey, Timestamp};
use tokio::sync::mpsc;

/// How long connecting and the first subscription's EOSE may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why one run did not end in the expected ai.response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RunError {
    /// The relay refused the prompt (`OK false`) or did not confirm it.
    Refused(String),
    /// The run ended in an ai.error with this code.
    AiError(String),
    /// The response text was not what `quick` echoes.
    WrongText,
    /// No terminal within the timeout.
    Timeout,
    /// The connection is gone.
    Closed,
}

/// How long one run took.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// From the start of the prompt's encryption to the decrypted, checked answer (and the prompt's OK).
    pub(crate) total: Duration,
    /// From the same start to the relay's OK for the prompt: the prompt is stored and has gone out to
    /// live subscribers, so `total - ok` is roughly the peer's work plus the answer's way back.
    pub(crate) ok: Duration,
}

/// A NIP-XX client with its own key and connection, following every run it starts through one
/// long-lived subscription (`#p` = its key, `authors` = the peer, `since` = its start).
pub(crate) struct BenchClient {
    conn: RelayConn,
    rx: mpsc::Receiver<Incoming>,
    crypto: Crypto,
    peer: PublicKey,
    counter: u64,
}

async fn wait_eose(rx: &mut mpsc::Receiver<Incoming>, sub: &str) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + CONNECT_TIMEOUT;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(Incoming::Eose(s))) if s == sub => return Ok(()),
            Ok(Some(Incoming::Closed { sub: s, message })) if s == sub => {
                return Err(format!("relay closed subscription {sub}: {message}"))
            }
            Ok(Some(_)) => {}
            Ok(None) => return Err("relay connection closed".into()),
            Err(_) => return Err(format!("no EOSE for {sub} within {CONNECT_TIMEOUT:?}")),
        }
    }
}

async fn connect(url: &str) -> Result<(RelayConn, mpsc::Receiver<Incoming>), String> {
    let (conn, rx) = RelayConn::connect(url);
    if !conn.wait_connected(CONNECT_TIMEOUT).await {
        return Err(format!("cannot connect to {url}"));
    }
    Ok((conn, rx))
}

impl BenchClient {
    /// Connects with a fresh key and subscribes to the run events `peer` sends it.
    pub(crate) async fn connect(url: &str, peer: PublicKey) -> Result<BenchClient, String> {
        let crypto = Crypto::new(Keys::generate());
        let (conn, mut rx) = connect(url).await?;
        conn.subscribe(
            "runs",
            vec![Filter::new()
                .kinds(kinds::RUN_KINDS.map(Kind::Custom))
                .pubkey(crypto.public_key())
                .author(peer)
                .since(Timestamp::now())],
        );
        wait_eose(&mut rx, "runs").await?;
        Ok(BenchClient {
            conn,
            rx,
            crypto,
            peer,
            counter: 0,
        })
    }

    /// Runs one `quick` prompt: encrypt and sign it, publish it, wait for the relay's OK and for the
    /// terminal of this run, verify and decrypt each event, and check the answer. Returns the time from
    /// the first byte of work to the decrypted answer, and to the relay's OK of the prompt.
    pub(crate) async fn run(&mut self, timeout: Duration) -> Result<Timing, RunError> {
        self.counter += 1;
        let text = format!("bench {}", self.counter);
        let (followed, terminal) = self.follow(&format!("quick {text}"), timeout).await?;
        match terminal {
            Terminal::Response(r) if r.text == text => Ok(followed.timing),
            Terminal::Response(_) => Err(RunError::WrongText),
            Terminal::Error(e) => Err(RunError::AiError(e.code.as_str().to_string())),
        }
    }

    /// Sends `text` as a prompt and follows its run to the terminal; returns the time from the start of the
    /// prompt's encryption to the first answer text in order (decrypted and checked by the run view).
    /// (Used by the `first-token` binary, which includes this file too.)
    #[allow(dead_code)]
    pub(crate) async fn first_text(
        &mut self,
        text: &str,
        timeout: Duration,
    ) -> Result<Duration, RunError> {
        match self.follow(text, timeout).await? {
            (followed, Terminal::Response(_)) => followed.first_text.ok_or(RunError::WrongText),
            (_, Terminal::Error(e)) => Err(RunError::AiError(e.code.as_str().to_string())),
        }
    }

    /// Sends `text` as a prompt and follows its run to the terminal: the time to its first answer text in
    /// order and to its terminal, from the start of the prompt's encryption; an answer other than
    /// `expected` is [`RunError::WrongText`]. (Used by the `remote-hop` binary, which includes this file.)
    #[allow(dead_code)]
    pub(crate) async fn first_and_terminal(
        &mut self,
        text: &str,
        expected: &str,
        timeout: Duration,
    ) -> Result<(Duration, Duration), RunError> {
        match self.follow(text, timeout).await? {
            (followed, Terminal::Response(r)) if r.text == expected => Ok((
                followed.first_text.ok_or(RunError::WrongText)?,
                followed.timing.total,
            )),
            (_, Terminal::Response(_)) => Err(RunError::WrongText),
            (_, Terminal::Error(e)) => Err(RunError::AiError(e.code.as_str().to_string())),
        }
    }

    /// Encrypts, signs and publishes `text` as a prompt, and follows its run to the terminal through the
    /// client's run view (each event verified and decrypted), timing it from the first byte of work.
    async fn follow(
        &mut self,
        text: &str,
        timeout: Duration,
    ) -> Result<(Followed, Terminal), RunError> {
        let started = Instant::now();
        let payload = PromptPayload::new(text.to_string()).to_json();
        let content = self
            .crypto
            .encrypt(&self.peer, &payload)
            .map_err(|e| RunError::Refused(e.to_string()))?;
        let prompt = self.crypto.sign(
            EventBuilder::new(Kind::Custom(kinds::PROMPT), content)
                .tags(tags::prompt(&self.peer, None)),
        );
        let mut view = RunView::new(self.crypto.public_key(), self.peer, prompt.id);
        let (conn, rx, crypto) = (&self.conn, &mut self.rx, &self.crypto);
        let published = async {
            match conn.publish(&prompt).await {
                Ok(ok) if ok.accepted => Ok(started.elapsed()),
                Ok(ok) => Err(RunError::Refused(ok.message)),
                Err(e) => Err(RunError::Refused(e.to_string())),
            }
        };
        let answered = async {
            let mut first_text = None;
            loop {
                let event = match rx.recv().await {
                    Some(Incoming::Event { event, .. }) => event,
                    Some(_) => continue,
                    None => return Err(RunError::Closed),
                };
                if event.verify().is_err() {
                    continue;
                }
                let plain = crypto.decrypt(&event.pubkey, &event.content).ok();
                let updates = view.apply(&Message::signed(*event), plain.as_deref());
                if first_text.is_none() && updates.iter().any(|u| matches!(u, Update::Text(_))) {
                    first_text = Some(started.elapsed());
                }
                if updates.contains(&Update::Terminal) {
                    return Ok(first_text);
                }
            }
        };
        let both = async { tokio::try_join!(published, answered) };
        let (ok, first_text) = match tokio::time::timeout(timeout, both).await {
            Err(_) => return Err(RunError::Timeout),
            Ok(r) => r?,
        };
        let timing = Timing {
            total: started.elapsed(),
            ok,
        };
        let terminal = view.terminal().cloned().ok_or(RunError::Timeout)?;
        Ok((Followed { timing, first_text }, terminal))
    }
}

/// One run followed to its terminal.
struct Followed {
    timing: Timing,
    /// When its first answer text came, if any did.
    first_text: Option<Duration>,
}

/// Starts the echo peer on `url`: its own key and connection, a subscription to the prompts addressed to
/// it (as the agent's runtime has), and for each prompt what the agent's path does minus the engine and
/// the journal: verify, check the tags, decrypt, parse the payload, then build the ai.response the demo
/// agent's `quick` gives (same payload fields, same tags), encrypt, sign and publish it, waiting for the OK
/// in its own task as the agent's terminal delivery does. Returns the peer's public key.
pub(crate) async fn spawn_echo(url: &str) -> Result<PublicKey, String> {
    let crypto = Arc::new(Crypto::new(Keys::generate()));
    let me = crypto.public_key();
    let (conn, mut rx) = connect(url).await?;
    conn.subscribe(
        "prompts",
        vec![Filter::new()
            .kind(Kind::Custom(kinds::PROMPT))
            .pubkey(me)
            .since(Timestamp::now())],
    );
    wait_eose(&mut rx, "prompts").await?;
    tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            if let Incoming::Event { event, .. } = m {
                if event.verify().is_err() || event.kind.as_u16() != kinds::PROMPT {
                    continue;
                }
                if let Some(reply) = echo_reply(&crypto, Message::signed(*event)) {
                    let conn = conn.clone();
                    tokio::spawn(async move {
                        let _ = conn.publish(&reply).await;
                    });
                }
            }
        }
    });
    Ok(me)
}

fn echo_reply(crypto: &Crypto, prompt: Message) -> Option<nostr::prelude::Event> {
    let me = crypto.public_key();
    let run = tags::prompt_tags(&prompt, &me).ok()?;
    let plain = crypto.decrypt(&prompt.author, &prompt.content).ok()?;
    let p = PromptPayload::parse(&plain).ok()?;
    let text = p.message.strip_prefix("quick ").unwrap_or(&p.message);
    let words = |s: &str| s.split_whitespace().count() as u64;
    let response = ResponsePayload {
        text: text.to_string(),
        timestamp: Some(Timestamp::now().as_secs()),
        usage: Some(Usage {
            input_tokens: words(&p.message),
            output_tokens: words(text),
        }),
    };
    let content = crypto.encrypt(&prompt.author, &response.to_json()).ok()?;
    Some(crypto.sign(
        EventBuilder::new(Kind::Custom(kinds::RESPONSE), content).tags(tags::run(
            &prompt.author,
            &prompt.id,
            &run.session,
        )),
    ))
}
