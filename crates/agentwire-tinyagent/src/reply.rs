//! A person's answer to a question card as the kind 1111 reply the relay settles: its content from what
//! they typed (an option's id, its label or its number; several with commas; text where the card takes
//! it), and the NIP-22 tags that name the card. Pure: the inverse of [`crate::check_answer`].

use crate::{content, ContentError, QuestionCard, Selection};
use nostr::event::{Event, Tag};

/// Why what a person typed is no answer to a question card.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// It names no option of the card, which takes no free text: the options it could name.
    #[error("{typed:?} is not an option: {options}{}", several_with_commas(.several))]
    NotAnOption {
        /// What the person typed (trimmed).
        typed: String,
        /// The card's options as `number id (label)`, comma separated.
        options: String,
        /// The card takes several options.
        several: bool,
    },
    /// Its content does not fit the card as the relay reads it.
    #[error(transparent)]
    Content(#[from] ContentError),
}

fn several_with_commas(several: &bool) -> &'static str {
    if *several {
        "; several with commas"
    } else {
        ""
    }
}

/// The content of an answer to `card` from what a person typed, checked as the relay will check it.
pub fn answer_content(card: &QuestionCard, typed: &str) -> Result<String, AnswerError> {
    let typed = typed.trim();
    let answer = match card.selection {
        Selection::Text => typed.to_string(),
        Selection::Single => match option_of(card, typed) {
            Some(id) => id,
            None if card.freeform => serde_json::json!({ "text": typed }).to_string(),
            None => return Err(not_an_option(card, typed)),
        },
        Selection::Multiple => {
            let ids: Option<Vec<String>> = typed.split(',').map(|p| option_of(card, p)).collect();
            match ids {
                Some(ids) => serde_json::Value::from(ids).to_string(),
                None if card.freeform => serde_json::json!({ "text": typed }).to_string(),
                None => return Err(not_an_option(card, typed)),
            }
        }
    };
    content(card, &answer)?;
    Ok(answer)
}

/// The option `typed` names: an option's id, else an option's label (in any case), else its number (from
/// 1): an id always means its own option, even when another option's label reads the same.
fn option_of(card: &QuestionCard, typed: &str) -> Option<String> {
    let typed = typed.trim();
    card.options
        .iter()
        .find(|(id, _)| id == typed)
        .or_else(|| {
            card.options
                .iter()
                .find(|(_, label)| label.eq_ignore_ascii_case(typed))
        })
        .or_else(|| {
            let n: usize = typed.parse().ok()?;
            card.options.get(n.checked_sub(1)?)
        })
        .map(|(id, _)| id.clone())
}

fn not_an_option(card: &QuestionCard, typed: &str) -> AnswerError {
    let options: Vec<String> = card
        .options
        .iter()
        .enumerate()
        .map(|(i, (id, label))| format!("{} {id} ({label})", i + 1))
        .collect();
    AnswerError::NotAnOption {
        typed: typed.to_owned(),
        options: options.join(", "),
        several: card.selection == Selection::Multiple,
    }
}

/// The tags of an answer to the card `request` in `room`: its root and parent (`E`/`e`), their kind
/// (`K`/`k` 9) and author (`P`/`p`), and the room (`h`).
pub fn answer_tags(request: &Event, room: &str) -> Vec<Tag> {
    let id = request.id.to_hex();
    let author = request.pubkey.to_hex();
    [
        ["E", id.as_str()],
        ["e", id.as_str()],
        ["K", "9"],
        ["k", "9"],
        ["P", author.as_str()],
        ["p", author.as_str()],
        ["h", room],
    ]
    .into_iter()
    .filter_map(|t| Tag::parse(t).ok())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{check_answer, question};
    use nostr::prelude::{EventBuilder, FinalizeEvent, Keys, Kind, Timestamp};

    fn card(keys: &Keys, asked: &Keys, selection: &str, freeform: bool) -> Event {
        let mut tags = vec![
            vec!["h", "lab"],
            vec!["request", "question"],
            vec!["tinyagent", "1"],
            vec!["interaction", "question"],
            vec!["selection", selection],
        ];
        let p = asked.public_key().to_hex();
        tags.push(vec!["p", &p]);
        if selection != "text" {
            tags.push(vec!["option", "continue", "Continue playing"]);
            tags.push(vec!["option", "stop", "Stop here"]);
        }
        if freeform {
            tags.push(vec!["freeform", "true"]);
        }
        EventBuilder::new(Kind::Custom(9), "Go on?")
            .tags(tags.into_iter().map(|t| Tag::parse(t).unwrap()))
            .finalize(keys)
            .unwrap()
    }

    /// What the person typed, answered and checked by the relay's rules.
    fn settle(request: &Event, person: &Keys, typed: &str) -> Result<crate::Settlement, String> {
        let read = question(request).map_err(|e| e.to_string())?;
        let content = answer_content(&read, typed).map_err(|e| e.to_string())?;
        let answer = EventBuilder::new(Kind::Custom(1111), content)
            .tags(answer_tags(request, &read.room))
            .custom_created_at(request.created_at)
            .finalize(person)
            .unwrap();
        check_answer(request, &read, &answer, Timestamp::now()).map_err(|e| e.to_string())
    }

    #[test]
    fn what_a_person_types_settles_as_the_relay_reads_it() {
        let (agent, person) = (Keys::generate(), Keys::generate());
        let single = card(&agent, &person, "single", false);
        for typed in ["stop", "Stop here", "2", " STOP HERE "] {
            assert_eq!(
                settle(&single, &person, typed).unwrap().choices,
                ["stop"],
                "{typed}"
            );
        }
        let e = settle(&single, &person, "maybe").unwrap_err();
        assert!(
            e.contains("1 continue (Continue playing), 2 stop (Stop here)"),
            "{e}"
        );
        assert!(settle(&single, &person, "1,2").is_err());

        let multiple = card(&agent, &person, "multiple", false);
        assert_eq!(
            settle(&multiple, &person, "1, stop").unwrap().choices,
            ["continue", "stop"]
        );
        assert!(settle(&multiple, &person, "1, 1")
            .unwrap_err()
            .contains("twice"));

        let text = card(&agent, &person, "text", false);
        assert_eq!(
            settle(&text, &person, "why not").unwrap().text.as_deref(),
            Some("why not")
        );
        assert!(settle(&text, &person, "  ").is_err());

        let freeform = card(&agent, &person, "single", true);
        let s = settle(&freeform, &person, "after lunch").unwrap();
        assert_eq!(
            (s.choices.len(), s.text.as_deref()),
            (0, Some("after lunch"))
        );
        assert_eq!(
            settle(&freeform, &person, "continue").unwrap().choices,
            ["continue"]
        );
    }
}
