//! Admission of one prompt, as the spec orders it: when it was made ([`dated_within`]), sender policy,
//! tags, NIP-44 decryption, the payload schema and the prompt's size, then model and tool-schema
//! negotiation. Pure: the clock comes in as `now`, decryption as a function, and what the agent offers as
//! an [`Offer`].

use super::payload::PromptPayload;
use super::policy::SenderPolicy;
use super::{tags, ErrorCode, Message, Violation};
use crate::crypto::Nip44Error;
use nostr::prelude::PublicKey;

/// The tool schema version this agent speaks.
pub const TOOL_SCHEMA_VERSION: u64 = 1;

/// How far ahead of the agent's clock a prompt's `created_at` may be: 900 s (15 minutes), the embedded
/// relay's bound too (`agentwire_relay::limits::MAX_FUTURE_SKEW_SECS`), for prompts from any relay.
///
/// A prompt is served while it is younger than the journal remembers turns (`max_age`), counted from its
/// `created_at`. Dated a day ahead, it would stay young a day longer than its turn is remembered, and a
/// relay that delivers it again after that (a restart asks for the backlog) would have it run twice. With
/// this bound a prompt is never older than the clock by more than it, and the journal keeps an ended turn
/// this much longer than `max_age` (`agentwire`'s `pruning`): a prompt it could still serve is always one
/// whose turn it remembers. A clock fast by minutes is still served.
pub const MAX_FUTURE_SKEW: std::time::Duration = std::time::Duration::from_secs(900);

/// How far ahead a prompt may be dated, in seconds, with a `max_age` (the journal's retention): at most
/// [`MAX_FUTURE_SKEW`], and never more than the retention itself, so that the journal's margin for it (the
/// same figure, `agentwire`'s `pruning`) stays in proportion to a short retention.
pub fn future_skew(max_age: Option<u64>) -> u64 {
    let most = MAX_FUTURE_SKEW.as_secs();
    max_age.map_or(most, |age| age.min(most))
}

/// Whether a prompt made at `created_at` may be served at `now` (Unix seconds): dated at most
/// [`future_skew`] ahead, not before `serve_since` (the backlog horizon at start) and, with a `max_age`
/// (the journal's retention, seconds), not older than that.
pub fn dated_within(created_at: u64, now: u64, serve_since: u64, max_age: Option<u64>) -> bool {
    let floor = max_age.map_or(0, |age| now.saturating_sub(age));
    created_at <= now.saturating_add(future_skew(max_age))
        && created_at >= serve_since
        && created_at >= floor
}

/// What the agent offers, from its card.
#[derive(Debug, Clone, Copy)]
pub struct Offer<'a> {
    /// Models it runs.
    pub models: &'a [String],
    /// The model used when a prompt names none.
    pub default_model: &'a str,
    /// Largest prompt message it takes, in bytes.
    pub max_prompt_bytes: usize,
    /// The privacy-first profile: only gift-wrapped prompts are taken.
    pub wrapped_only: bool,
}

/// A prompt that passed every rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Admitted {
    /// Its decrypted payload.
    pub payload: PromptPayload,
    /// Its session.
    pub session: String,
    /// The model it runs on.
    pub model: String,
}

/// A prompt refused: the rule it broke, a retry hint (RATE_LIMIT), and the session its error goes to.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    /// The rule and its code.
    pub violation: Violation,
    /// Seconds after which a retry may pass.
    pub retry_after: Option<u64>,
    /// The session the refusal is answered in (the prompt's own, whatever else was wrong with it).
    pub session: String,
    /// The message, when the payload decrypted and parsed (for the journal).
    pub message: String,
}

/// Admits `event`, addressed to `me`, at `now` (Unix seconds). `policy`: the sender policy (allow, block,
/// rate) to apply; none for a prompt it was applied to already.
pub fn admit(
    event: &Message,
    me: &PublicKey,
    policy: Option<&mut SenderPolicy>,
    decrypt: impl FnOnce(&PublicKey, &str) -> Result<String, Nip44Error>,
    offer: Offer<'_>,
    now: f64,
) -> Result<Admitted, Refused> {
    let fallback_session =
        || tags::session(event).unwrap_or_else(|_| tags::default_session(&event.author));
    let refuse = |violation: Violation, retry_after: Option<u64>, message: String| Refused {
        violation,
        retry_after,
        session: fallback_session(),
        message,
    };
    if let Some(policy) = policy {
        policy
            .admit(&event.author, now)
            .map_err(|(v, retry)| refuse(v, retry, String::new()))?;
    }
    if offer.wrapped_only && !event.wrapped {
        return Err(refuse(
            Violation::new(
                ErrorCode::UnsupportedFeature,
                "this agent takes only NIP-59 gift-wrapped prompts (the privacy-first profile)",
            ),
            None,
            String::new(),
        ));
    }
    let t = tags::prompt_tags(event, me).map_err(|v| refuse(v, None, String::new()))?;
    let plain = decrypt(&event.author, &event.content)
        .map_err(|e| refuse(decrypt_violation(e), None, String::new()))?;
    let p = PromptPayload::parse(&plain).map_err(|v| refuse(v, None, String::new()))?;
    let with_session = |violation: Violation, message: String| Refused {
        violation,
        retry_after: None,
        session: t.session.clone(),
        message,
    };
    if p.message.len() > offer.max_prompt_bytes {
        return Err(with_session(
            Violation::new(
                ErrorCode::InvalidSchema,
                format!(
                    "message is {} bytes; this agent takes at most {} (max_prompt_bytes)",
                    p.message.len(),
                    offer.max_prompt_bytes
                ),
            ),
            String::new(),
        ));
    }
    match negotiate(&p, offer) {
        Ok(model) => Ok(Admitted {
            payload: p,
            session: t.session,
            model,
        }),
        Err(v) => {
            let message = p.message.clone();
            Err(with_session(v, message))
        }
    }
}

/// Picks the model (requested, then fallbacks, then the default) and checks the tool schema version.
pub fn negotiate(p: &PromptPayload, offer: Offer<'_>) -> Result<String, Violation> {
    if let Some(v) = p.tool_schema_version {
        if v != TOOL_SCHEMA_VERSION {
            return Err(Violation::new(
                ErrorCode::UnsupportedSchemaVersion,
                format!("tool_schema_version {v} is not supported; this agent speaks {TOOL_SCHEMA_VERSION}"),
            ));
        }
    }
    match &p.model {
        None => Ok(offer.default_model.to_string()),
        Some(m) => std::iter::once(m)
            .chain(p.fallback_models.iter())
            .find(|m| offer.models.contains(m))
            .cloned()
            .ok_or_else(|| {
                Violation::new(
                    ErrorCode::UnsupportedModel,
                    format!("model {m:?} is not offered; supported: {:?}", offer.models),
                )
            }),
    }
}

fn decrypt_violation(e: Nip44Error) -> Violation {
    match e {
        Nip44Error::NotNip44 => Violation::new(
            ErrorCode::UnsupportedEncryption,
            "content is not a NIP-44 v2 payload",
        ),
        other => Violation::new(ErrorCode::ParseError, other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::Crypto;
    use proptest::prelude::*;

    #[test]
    fn a_prompt_is_served_from_its_horizon_to_the_skew_ahead() {
        let now = 1_800_000_000;
        let skew = MAX_FUTURE_SKEW.as_secs();
        let day = 86_400;
        assert!(dated_within(now, now, now - 60, Some(day)));
        assert!(dated_within(now + skew, now, now - 60, Some(day)));
        assert!(!dated_within(now + skew + 1, now, now - 60, Some(day)));
        assert!(!dated_within(now + day, now, 0, None));
        assert!(!dated_within(now - 61, now, now - 60, Some(day)));
        assert!(dated_within(now - 61, now, 0, Some(day)));
        assert!(!dated_within(now - day - 1, now, 0, Some(day)));
        assert!(dated_within(0, now, 0, None));
        assert!(!dated_within(u64::MAX, now, 0, None));
        // A retention shorter than the skew bounds the skew too.
        assert_eq!(future_skew(Some(4)), 4);
        assert_eq!(future_skew(Some(day)), skew);
        assert!(dated_within(now + 4, now, 0, Some(4)));
        assert!(!dated_within(now + 5, now, 0, Some(4)));
    }

    proptest! {
        /// A prompt served once is either served no more, or is one made no later than the skew after it was
        /// first served: however long after, it is never newer than that.
        #[test]
        fn a_prompt_served_is_never_dated_past_the_skew_after(
            created_at in 0u64..4_000_000_000,
            served_at in 0u64..4_000_000_000,
        ) {
            if dated_within(created_at, served_at, 0, None) {
                prop_assert!(created_at <= served_at + MAX_FUTURE_SKEW.as_secs());
            }
        }
    }
    use crate::nipxx::kinds;
    use crate::nipxx::policy::RateLimit;
    use nostr::prelude::{EventBuilder, Keys, Kind, Tag};
    use std::collections::HashSet;

    fn prompt(client: &Crypto, agent: &PublicKey, json: &str) -> Message {
        let content = client.encrypt(agent, json).unwrap();
        let ev = client.sign(
            EventBuilder::new(Kind::Custom(kinds::PROMPT), content).tags([
                Tag::public_key(*agent),
                Tag::custom("encryption", [tags::SENT_ENCRYPTION]),
                Tag::custom("s", ["s1"]),
            ]),
        );
        Message::signed(ev)
    }

    fn offer(models: &[String]) -> Offer<'_> {
        Offer {
            models,
            default_model: "m1",
            max_prompt_bytes: 10,
            wrapped_only: false,
        }
    }

    fn policy(block: HashSet<PublicKey>) -> SenderPolicy {
        SenderPolicy::new(
            None,
            block,
            RateLimit {
                per_second: 1.0,
                burst: 1.0,
            },
        )
    }

    /// The spec's `nip44`, and `nip44_v2` as the draft NIP's pull request names it, are taken; any other
    /// value is `UNSUPPORTED_ENCRYPTION`.
    #[test]
    fn the_encryption_tag_may_say_nip44_or_nip44_v2_and_nothing_else() {
        let (agent, client) = (Crypto::new(Keys::generate()), Crypto::new(Keys::generate()));
        let me = agent.public_key();
        let models = vec!["m1".to_string()];
        let decrypt = |from: &PublicKey, c: &str| agent.decrypt(from, c);
        for (value, taken) in [("nip44", true), ("nip44_v2", true), ("nip04", false)] {
            let content = client.encrypt(&me, r#"{"ver":1,"message":"hi"}"#).unwrap();
            let ev = client.sign(
                EventBuilder::new(Kind::Custom(kinds::PROMPT), content).tags([
                    Tag::public_key(me),
                    Tag::custom("encryption", [value]),
                    Tag::custom("s", ["s1"]),
                ]),
            );
            let r = admit(
                &Message::signed(ev),
                &me,
                None,
                decrypt,
                offer(&models),
                0.0,
            );
            match (taken, r) {
                (true, Ok(a)) => assert_eq!(a.session, "s1"),
                (false, Err(r)) => {
                    assert_eq!(
                        r.violation.code,
                        ErrorCode::UnsupportedEncryption,
                        "{value}"
                    )
                }
                (_, r) => panic!("encryption {value}: {:?}", r.map(|a| a.session)),
            }
        }
    }

    #[test]
    fn a_blocked_sender_is_refused_before_anything_is_decrypted() {
        let (agent, client) = (Crypto::new(Keys::generate()), Crypto::new(Keys::generate()));
        let me = agent.public_key();
        let m = prompt(&client, &me, r#"{"ver":1,"message":"hi"}"#);
        let mut p = policy([client.public_key()].into());
        let models = vec!["m1".to_string()];
        let r = admit(
            &m,
            &me,
            Some(&mut p),
            |_, _| panic!("decrypted"),
            offer(&models),
            0.0,
        );
        let r = r.unwrap_err();
        assert_eq!(r.violation.code, ErrorCode::BlockedSender);
        assert_eq!(r.session, "s1", "answered in the prompt's own session");
    }

    #[test]
    fn rules_apply_in_order_with_the_clock_passed_in() {
        let (agent, client) = (Crypto::new(Keys::generate()), Crypto::new(Keys::generate()));
        let me = agent.public_key();
        let models = vec!["m1".to_string()];
        let mut p = policy(HashSet::new());
        let decrypt = |from: &PublicKey, c: &str| agent.decrypt(from, c);
        let ok = prompt(&client, &me, r#"{"ver":1,"message":"hi"}"#);
        let a = admit(&ok, &me, Some(&mut p), decrypt, offer(&models), 100.0).unwrap();
        assert_eq!((a.model.as_str(), a.session.as_str()), ("m1", "s1"));
        // The burst of one is spent at t=100; a second later it has refilled.
        let again = admit(&ok, &me, Some(&mut p), decrypt, offer(&models), 100.0).unwrap_err();
        assert_eq!(again.violation.code, ErrorCode::RateLimit);
        assert!(again.retry_after.is_some());
        let long = prompt(&client, &me, r#"{"ver":1,"message":"far too long"}"#);
        let r = admit(&long, &me, Some(&mut p), decrypt, offer(&models), 101.0).unwrap_err();
        assert_eq!(r.violation.code, ErrorCode::InvalidSchema);
        let other = prompt(&client, &me, r#"{"ver":1,"message":"hi","model":"x"}"#);
        let r = admit(&other, &me, Some(&mut p), decrypt, offer(&models), 102.0).unwrap_err();
        assert_eq!(r.violation.code, ErrorCode::UnsupportedModel);
        assert_eq!(r.message, "hi", "the message is kept for the journal");
        // The privacy-first profile refuses a plain prompt.
        let strict = Offer {
            wrapped_only: true,
            ..offer(&models)
        };
        let r = admit(&ok, &me, Some(&mut p), decrypt, strict, 200.0).unwrap_err();
        assert_eq!(r.violation.code, ErrorCode::UnsupportedFeature);
    }
}
