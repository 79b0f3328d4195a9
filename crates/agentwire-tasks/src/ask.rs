//! A running task's question as a tiny agent question card (kind 9 with `["tinyagent","1"]`), and a
//! settled answer back as the core answer. Pure: the caller signs the card and checks answers with
//! [`agentwire_tinyagent`], the same rules the embedded relay settles by.

use super::card::Thread;
use agentwire_core::{Answer, Question, QuestionKind};
use agentwire_tinyagent::{MAX_OPTIONS, OPTION_ID_CHARS, OPTION_LABEL_CHARS};
use nostr::prelude::{PublicKey, Tag};

/// A question the card cannot carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CardError {
    /// More options than a card takes.
    TooManyOptions(usize),
    /// An option with an empty label.
    EmptyLabel,
    /// An asked person who is not a public key.
    BadKey(String),
}

impl std::fmt::Display for CardError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CardError::TooManyOptions(n) => {
                write!(
                    f,
                    "{n} options; a question card takes at most {MAX_OPTIONS}"
                )
            }
            CardError::EmptyLabel => f.write_str("an option has an empty label"),
            CardError::BadKey(k) => write!(f, "{k:?} is not a public key"),
        }
    }
}

/// A card ready to sign, and how its option ids map back to the question's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuestionCardDraft {
    /// The card's content: the question as a person reads it.
    pub content: String,
    /// Its tags.
    pub tags: Vec<Tag>,
    /// The question's option ids, by the card's position: the card uses the question's own ids when
    /// they fit its rules, else `1`, `2`, ... in order.
    pub option_ids: Vec<(String, String)>,
    /// Who may answer.
    pub asked: Vec<PublicKey>,
}

fn keys(list: &[String]) -> Result<Vec<PublicKey>, CardError> {
    list.iter()
        .map(|k| PublicKey::parse(k).map_err(|_| CardError::BadKey(k.clone())))
        .collect()
}

/// The card of `question` from a task of `requester` in `thread`, open until `expires_at` (Unix seconds).
pub fn card(
    question: &Question,
    requester: &PublicKey,
    thread: &Thread,
    expires_at: u64,
) -> Result<QuestionCardDraft, CardError> {
    let kind = &question.kind;
    let options = kind.options();
    if options.len() > MAX_OPTIONS {
        return Err(CardError::TooManyOptions(options.len()));
    }
    if options.iter().any(|o| o.label.trim().is_empty()) {
        return Err(CardError::EmptyLabel);
    }
    let own_ids_fit = options.iter().enumerate().all(|(i, o)| {
        OPTION_ID_CHARS.contains(&o.id.chars().count())
            && !options[..i].iter().any(|p| p.id == o.id)
    });
    let option_ids: Vec<(String, String)> = options
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let card_id = if own_ids_fit {
                o.id.clone()
            } else {
                (i + 1).to_string()
            };
            (card_id, o.id.clone())
        })
        .collect();
    let mut asked = keys(&question.asked)?;
    if asked.is_empty() {
        asked.push(*requester);
    }
    let mut mention = keys(&question.mention)?;
    let text = kind.text();
    let npub = nostr::nips::nip19::ToBech32::to_bech32(requester).unwrap_or_default();
    if text.contains(&requester.to_hex()) || (!npub.is_empty() && text.contains(&npub)) {
        mention.push(*requester);
    }
    let mut tags = vec![
        super::card::tag(["h", &thread.room]),
        super::card::tag(["e", &thread.root.to_hex(), "", "root"]),
        super::card::tag(["request", "question"]),
        super::card::tag(["tinyagent", "1"]),
        super::card::tag(["interaction", kind.interaction().as_str()]),
        super::card::tag(["selection", kind.selection().as_str()]),
    ];
    for ((card_id, _), o) in option_ids.iter().zip(&options) {
        let label: String = o.label.chars().take(*OPTION_LABEL_CHARS.end()).collect();
        tags.push(super::card::tag(["option", card_id, &label]));
    }
    if kind.freeform() {
        tags.push(super::card::tag(["freeform", "true"]));
    }
    if let Some(s) = &question.subject {
        tags.push(super::card::tag(["subject", s]));
    }
    tags.push(super::card::tag(["expiration", &expires_at.to_string()]));
    let mut seen = Vec::new();
    for k in &asked {
        if !seen.contains(k) {
            tags.push(Tag::public_key(*k));
            seen.push(*k);
        }
    }
    mention.retain(|k| asked.contains(k));
    mention.dedup();
    for k in mention {
        tags.push(super::card::tag(["mention", &k.to_hex()]));
    }
    let content = match kind {
        QuestionKind::Approve { command, .. } if !command.is_empty() => {
            format!("{text}\n(tool: {})", question.tool)
        }
        _ => text,
    };
    Ok(QuestionCardDraft {
        content,
        tags,
        option_ids,
        asked,
    })
}

/// The core answer of a settled card: the card's option ids mapped back to the question's.
pub fn answer(
    kind: &QuestionKind,
    option_ids: &[(String, String)],
    choices: &[String],
    text: Option<&str>,
) -> Option<Answer> {
    let mut ids = Vec::with_capacity(choices.len());
    for c in choices {
        ids.push(option_ids.iter().find(|(card, _)| card == c)?.1.clone());
    }
    kind.answer_from(&ids, text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire_core::{ApproveChoice, QuestionOption};
    use nostr::prelude::{EventBuilder, EventId, FinalizeEvent, Keys, Kind};

    fn thread() -> Thread {
        Thread {
            room: "lab".into(),
            root: EventId::from_byte_array([0; 32]),
            reply_to: None,
        }
    }

    /// The card signed and read back by the relay's own validation.
    fn relay_reads(draft: &QuestionCardDraft) -> agentwire_tinyagent::QuestionCard {
        let ev = EventBuilder::new(Kind::Custom(9), draft.content.clone())
            .tags(draft.tags.clone())
            .finalize(&Keys::generate())
            .unwrap();
        agentwire_tinyagent::question(&ev).expect("a card the relay takes")
    }

    #[test]
    fn an_approval_is_a_card_with_the_four_choices_and_maps_back() {
        let requester = Keys::generate().public_key();
        let q = Question::new(
            "shell",
            "call_1",
            QuestionKind::Approve {
                command: "rm".into(),
                display: "rm -rf build".into(),
                tag: None,
            },
        );
        let d = card(&q, &requester, &thread(), 2_000_000_000).unwrap();
        let read = relay_reads(&d);
        assert_eq!(read.asked, vec![requester]);
        assert!(read.mentions.is_empty(), "the text does not name them");
        let ids: Vec<&str> = read.options.iter().map(|(i, _)| i.as_str()).collect();
        assert_eq!(ids, ["once", "session", "always", "deny"]);
        assert_eq!(
            answer(&q.kind, &d.option_ids, &["session".into()], None),
            Some(Answer::Approve {
                choice: ApproveChoice::Session
            })
        );
    }

    #[test]
    fn long_or_repeated_ids_become_positions_and_the_requester_named_is_mentioned() {
        let requester = Keys::generate().public_key();
        let long = "x".repeat(80);
        let mut q = Question::new(
            "pick",
            "c",
            QuestionKind::Select {
                question: format!("{}, which one?", requester.to_hex()),
                options: vec![
                    QuestionOption::new(long.clone(), "Long"),
                    QuestionOption::new("b", "Bee"),
                ],
                multiple: true,
                freeform: true,
            },
        );
        q.subject = Some("Pick".into());
        let d = card(&q, &requester, &thread(), 2_000_000_000).unwrap();
        let read = relay_reads(&d);
        assert_eq!(read.mentions, vec![requester]);
        assert!(read.freeform);
        assert_eq!(read.subject.as_deref(), Some("Pick"));
        assert_eq!(read.options[0].0, "1");
        assert_eq!(
            answer(&q.kind, &d.option_ids, &["2".into(), "1".into()], None),
            Some(Answer::Choices {
                choices: vec!["b".into(), long],
                text: None
            })
        );
        assert_eq!(answer(&q.kind, &d.option_ids, &["9".into()], None), None);
    }

    #[test]
    fn a_question_past_the_cards_limits_is_refused() {
        let options = (0..13)
            .map(|i| QuestionOption::new(i.to_string(), "o"))
            .collect();
        let q = Question::new(
            "pick",
            "c",
            QuestionKind::Select {
                question: "q".into(),
                options,
                multiple: false,
                freeform: false,
            },
        );
        let requester = Keys::generate().public_key();
        assert_eq!(
            card(&q, &requester, &thread(), 1),
            Err(CardError::TooManyOptions(13))
        );
    }
}
