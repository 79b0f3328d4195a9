//! The crypto a NIP-XX run needs on the agent's side, timed alone: the floor the daemon's CPU per run is
//! held to (issue 36: at most twice this).
//!
//! One run of the protocol asks the agent's side for four operations, once each: verify the prompt's
//! signature, decrypt its NIP-44 payload, encrypt the answer, sign the answer (the conversation key is
//! cached per peer, as the runtime caches it). They are timed here on one thread of this process, in
//! batches; the floor is the fastest batch's mean, since on a shared machine anything slower is the
//! machine's noise, not the work.

use std::time::Instant;

use agentwire_nostr::crypto::Crypto;
use agentwire_nostr::nipxx::payload::{PromptPayload, ResponsePayload, Usage};
use agentwire_nostr::nipxx::{kinds, tags, Message};
use nostr::prelude::{EventBuilder, Keys, Kind, Timestamp};

/// Operations timed in one batch: long enough that the clock's resolution does not matter, short enough
/// that a batch often runs without being preempted.
const BATCH: usize = 200;
/// Batches timed; the fastest is the floor.
const BATCHES: usize = 25;

/// The crypto floor of one run, in microseconds of one core.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CryptoFloor {
    pub(crate) verify_us: f64,
    pub(crate) decrypt_us: f64,
    pub(crate) encrypt_us: f64,
    pub(crate) sign_us: f64,
}

impl CryptoFloor {
    /// The four together: what one run needs.
    pub(crate) fn per_run_us(&self) -> f64 {
        self.verify_us + self.decrypt_us + self.encrypt_us + self.sign_us
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "verify_us": crate::stats::round3(self.verify_us),
            "decrypt_us": crate::stats::round3(self.decrypt_us),
            "encrypt_us": crate::stats::round3(self.encrypt_us),
            "sign_us": crate::stats::round3(self.sign_us),
            "per_run_us": crate::stats::round3(self.per_run_us()),
        })
    }
}

/// The fastest batch's mean time of `op`, in microseconds.
fn fastest(mut op: impl FnMut(usize)) -> f64 {
    let mut best = f64::INFINITY;
    for b in 0..BATCHES {
        let started = Instant::now();
        for i in 0..BATCH {
            op(b * BATCH + i);
        }
        best = best.min(started.elapsed().as_secs_f64() * 1e6 / BATCH as f64);
    }
    best
}

/// Times the four operations on the same kind of prompt and answer the benchmark's minimal run sends.
pub(crate) fn measure() -> CryptoFloor {
    let client = Crypto::new(Keys::generate());
    let agent = Crypto::new(Keys::generate());
    let payload = r#"{"ver":1,"message":"quick bench 1"}"#;
    let content = client
        .encrypt(&agent.public_key(), payload)
        .expect("a short payload encrypts");
    let prompt = client.sign(
        EventBuilder::new(Kind::Custom(kinds::PROMPT), content.clone())
            .tags(tags::prompt(&agent.public_key(), Some("bench"))),
    );
    // Warm the agent's conversation key, as a run after the first finds it.
    let _ = agent.decrypt(&prompt.pubkey, &prompt.content);
    let answer = ResponsePayload {
        text: "bench 1".into(),
        timestamp: Some(Timestamp::now().as_secs()),
        usage: Some(Usage {
            input_tokens: 2,
            output_tokens: 2,
        }),
    }
    .to_json();
    let message = Message::signed(prompt.clone());
    let verify_us = fastest(|_| assert!(prompt.verify().is_ok()));
    let decrypt_us = fastest(|_| {
        let plain = agent
            .decrypt(&prompt.pubkey, &prompt.content)
            .expect("the prompt decrypts");
        debug_assert!(PromptPayload::parse(&plain).is_ok());
    });
    let mut sealed = String::new();
    let encrypt_us = fastest(|_| {
        sealed = agent
            .encrypt(&prompt.pubkey, &answer)
            .expect("the answer encrypts");
    });
    let sign_us =
        fastest(|_| {
            let event =
                agent.sign(
                    EventBuilder::new(Kind::Custom(kinds::RESPONSE), sealed.clone())
                        .tags(tags::run(&prompt.pubkey, &message.id, "bench")),
                );
            std::hint::black_box(event);
        });
    CryptoFloor {
        verify_us,
        decrypt_us,
        encrypt_us,
        sign_us,
    }
}
