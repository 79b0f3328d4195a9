//! An answer given over HTTP (`{"choices": [...], "text": "..."}`) as the answer the open question takes,
//! by its kind: an approval's decision, yes or no, an option's id (or several, with free text), or text.
//! Pure.

use agentwire_core::{Answer, ApproveChoice, QuestionKind, APPROVE_OPTIONS};

/// `choices` and `text` as an answer to a question of `kind`, or why they are not one.
pub fn answer_for(
    kind: &QuestionKind,
    choices: &[String],
    text: Option<&str>,
) -> Result<Answer, String> {
    let one = || match choices {
        [c] if text.is_none() => Ok(c.as_str()),
        _ => Err("give exactly one of choices".to_string()),
    };
    let answer = match kind {
        QuestionKind::Approve { .. } => {
            // The options' ids as the question offers them (`deny` among them), and `no` for `deny`.
            let picked = one()?;
            let choice = match picked {
                "no" => ApproveChoice::No,
                _ => match APPROVE_OPTIONS.iter().find(|(id, ..)| *id == picked) {
                    Some((.., choice)) => *choice,
                    None => {
                        return Err(format!(
                            "{picked:?}: an approval is once, session, always or deny"
                        ))
                    }
                },
            };
            Answer::Approve { choice }
        }
        QuestionKind::Confirm { .. } => match one()? {
            "yes" => Answer::Confirm { confirmed: true },
            "no" => Answer::Confirm { confirmed: false },
            other => return Err(format!("{other:?}: the answer is yes or no")),
        },
        QuestionKind::Select {
            multiple: false, ..
        } if text.is_none() && choices.len() == 1 => Answer::Select {
            value: choices[0].clone(),
        },
        QuestionKind::Select { .. } => Answer::Choices {
            choices: choices.to_vec(),
            text: text.map(str::to_string),
        },
        QuestionKind::Input { .. } => match (choices, text) {
            ([], Some(t)) => Answer::Input {
                value: t.to_string(),
            },
            _ => return Err("an input question takes text only".into()),
        },
    };
    match answer.fits(kind) {
        true => Ok(answer),
        false => Err("the answer does not fit the question (an option it does not offer?)".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire_core::QuestionOption;

    fn select(multiple: bool, freeform: bool) -> QuestionKind {
        QuestionKind::Select {
            question: "colour?".into(),
            options: ["red", "green"]
                .map(|o| QuestionOption {
                    id: o.into(),
                    label: o.to_uppercase(),
                })
                .to_vec(),
            multiple,
            freeform,
        }
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn each_kind_takes_its_own_answer_and_refuses_others() {
        let approve = QuestionKind::Approve {
            command: "ls".into(),
            display: "ls".into(),
            tag: None,
        };
        assert_eq!(
            answer_for(&approve, &s(&["once"]), None),
            Ok(Answer::Approve {
                choice: ApproveChoice::Once
            })
        );
        assert!(answer_for(&approve, &s(&["sure"]), None).is_err());
        // Every option the question offers is an answer, `deny` as much as `no`.
        for (id, _, choice) in APPROVE_OPTIONS {
            assert_eq!(
                answer_for(&approve, &s(&[id]), None),
                Ok(Answer::Approve { choice })
            );
        }
        assert_eq!(
            answer_for(&approve, &s(&["no"]), None),
            Ok(Answer::Approve {
                choice: ApproveChoice::No
            })
        );
        let confirm = QuestionKind::Confirm {
            question: "ok?".into(),
        };
        assert_eq!(
            answer_for(&confirm, &s(&["no"]), None),
            Ok(Answer::Confirm { confirmed: false })
        );
        assert!(answer_for(&confirm, &s(&["maybe"]), None).is_err());
        assert_eq!(
            answer_for(&select(false, false), &s(&["green"]), None),
            Ok(Answer::Select {
                value: "green".into()
            })
        );
        assert!(answer_for(&select(false, false), &s(&["blue"]), None).is_err());
        assert!(answer_for(&select(false, false), &s(&["red", "green"]), None).is_err());
        assert_eq!(
            answer_for(&select(true, true), &s(&["red", "green"]), Some("and blue")),
            Ok(Answer::Choices {
                choices: s(&["red", "green"]),
                text: Some("and blue".into())
            })
        );
        let input = QuestionKind::Input {
            question: "name?".into(),
            default: None,
        };
        assert_eq!(
            answer_for(&input, &[], Some("ada")),
            Ok(Answer::Input {
                value: "ada".into()
            })
        );
        assert!(answer_for(&input, &s(&["x"]), None).is_err());
    }
}
