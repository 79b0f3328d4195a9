//! Questions for clients that cannot show question cards (`[tasks] cards = "legacy"`): the question goes to
//! the task's thread as a plain kind 12 message saying how to answer, and an asked person's reply in the
//! thread, or a plain NIP-22 reply (kind 1111) to the message, is read as the answer: `approve` / `deny` (or an option's name) for an approval, `yes` / `no`
//! for a confirmation, an option's name or number (several, comma-separated, where several are taken) for a
//! choice, the text itself for an input. Pure.

use agentwire_core::{Answer, Question, QuestionKind};

/// The words that approve a gated call once, and those that refuse it.
const APPROVE_WORDS: [&str; 4] = ["approve", "approved", "yes", "ok"];
const DENY_WORDS: [&str; 3] = ["deny", "denied", "no"];

/// The message that asks `question` in the thread.
pub fn message(question: &Question) -> String {
    let kind = &question.kind;
    let how = match kind {
        QuestionKind::Approve { .. } => "Reply `approve` or `deny`.".to_string(),
        QuestionKind::Confirm { .. } => "Reply `yes` or `no`.".to_string(),
        QuestionKind::Select { multiple, .. } => {
            let options: Vec<String> = kind
                .options()
                .iter()
                .enumerate()
                .map(|(i, o)| format!("{}. {}", i + 1, o.label))
                .collect();
            let pick = match multiple {
                true => "Reply with the names or numbers you choose, separated by commas:",
                false => "Reply with the name or number of one:",
            };
            format!("{pick}\n{}", options.join("\n"))
        }
        QuestionKind::Input { .. } => "Reply with your answer.".to_string(),
    };
    format!("{}\n\n{how}", kind.text())
}

/// The answer `reply` gives to a question of `kind`, or none when it is not one.
pub fn answer(kind: &QuestionKind, reply: &str) -> Option<Answer> {
    let reply = reply.trim();
    if reply.is_empty() {
        return None;
    }
    let word = reply.trim_end_matches(['.', '!']).to_lowercase();
    let options = kind.options();
    // An option by its id, its label or its number.
    let pick = |part: &str| -> Option<String> {
        let p = part.trim().trim_end_matches(['.', '!']).to_lowercase();
        if let Ok(n) = p.parse::<usize>() {
            return options.get(n.checked_sub(1)?).map(|o| o.id.clone());
        }
        options
            .iter()
            .find(|o| o.id.to_lowercase() == p || o.label.to_lowercase() == p)
            .map(|o| o.id.clone())
    };
    let ids: Vec<String> = match kind {
        QuestionKind::Approve { .. } if APPROVE_WORDS.contains(&word.as_str()) => {
            vec!["once".into()]
        }
        QuestionKind::Approve { .. } if DENY_WORDS.contains(&word.as_str()) => vec!["deny".into()],
        QuestionKind::Input { .. } => return kind.answer_from(&[], Some(reply)),
        QuestionKind::Select { multiple: true, .. } => reply
            .split(',')
            .map(pick)
            .collect::<Option<Vec<String>>>()?,
        QuestionKind::Select { freeform: true, .. } => match pick(reply) {
            Some(id) => vec![id],
            None => return kind.answer_from(&[], Some(reply)),
        },
        _ => vec![pick(reply)?],
    };
    kind.answer_from(&ids, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire_core::{ApproveChoice, QuestionOption};

    fn select(multiple: bool, freeform: bool) -> QuestionKind {
        QuestionKind::Select {
            question: "Which colour?".into(),
            options: ["red", "green"]
                .map(|o| QuestionOption::new(o, o.to_uppercase()))
                .to_vec(),
            multiple,
            freeform,
        }
    }

    #[test]
    fn the_message_says_how_to_answer() {
        let q = Question::new("ask", "c1", select(false, false));
        assert_eq!(
            message(&q),
            "Which colour?\n\nReply with the name or number of one:\n1. RED\n2. GREEN"
        );
        let approve = QuestionKind::Approve {
            command: "rm".into(),
            display: "rm -rf build".into(),
            tag: None,
        };
        assert!(message(&Question::new("shell", "c2", approve)).contains("`approve` or `deny`"));
    }

    #[test]
    fn replies_are_read_as_the_kind_takes_them() {
        let approve = QuestionKind::Approve {
            command: "ls".into(),
            display: "ls".into(),
            tag: None,
        };
        assert_eq!(
            answer(&approve, "Approve."),
            Some(Answer::Approve {
                choice: ApproveChoice::Once
            })
        );
        assert_eq!(
            answer(&approve, "deny"),
            Some(Answer::Approve {
                choice: ApproveChoice::No
            })
        );
        assert_eq!(
            answer(&approve, "always approve"),
            Some(Answer::Approve {
                choice: ApproveChoice::Always
            }),
            "an option's label"
        );
        assert_eq!(answer(&approve, "maybe later"), None);
        let confirm = QuestionKind::Confirm {
            question: "Ship?".into(),
        };
        assert_eq!(
            answer(&confirm, "YES"),
            Some(Answer::Confirm { confirmed: true })
        );
        assert_eq!(
            answer(&select(false, false), "green"),
            Some(Answer::Select {
                value: "green".into()
            })
        );
        assert_eq!(
            answer(&select(false, false), "1"),
            Some(Answer::Select {
                value: "red".into()
            })
        );
        assert_eq!(answer(&select(false, false), "blue"), None);
        assert_eq!(answer(&select(false, false), "3"), None);
        assert_eq!(
            answer(&select(true, false), "red, 2"),
            Some(Answer::Choices {
                choices: vec!["red".into(), "green".into()],
                text: None
            })
        );
        assert_eq!(
            answer(&select(false, true), "a teal one"),
            Some(Answer::Choices {
                choices: vec![],
                text: Some("a teal one".into())
            })
        );
        let input = QuestionKind::Input {
            question: "Name?".into(),
            default: None,
        };
        assert_eq!(
            answer(&input, " Ada "),
            Some(Answer::Input {
                value: "Ada".into()
            })
        );
        assert_eq!(answer(&input, "  "), None);
    }
}
