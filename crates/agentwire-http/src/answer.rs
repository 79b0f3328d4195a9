//! An answer given over HTTP (`{"choices": [...], "text": "..."}`) as the answer the open question takes,
//! by its kind: an approval's decision, yes or no, an option's id (or several, with free text), or text.
//! Pure.

use agentwire_core::{Answer, ApproveChoice, QuestionKind, APPROVE_OPTIONS};

/// Why `choices` and `text` are not an answer to the open question (the 400 reason of
/// `POST /api/v1/turns/{id}/answer`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerRefusal {
    /// An approval or a confirmation takes one choice and no text.
    #[error("give exactly one of choices")]
    NotOneChoice,
    /// The choice is none of an approval's options (nor `no`).
    #[error("{picked:?}: an approval is once, session, always or deny")]
    NotAnApproval {
        /// The choice given.
        picked: String,
    },
    /// The choice to a confirmation is neither `yes` nor `no`.
    #[error("{given:?}: the answer is yes or no")]
    NotYesOrNo {
        /// The choice given.
        given: String,
    },
    /// An input question was given choices, or no text.
    #[error("an input question takes text only")]
    InputTakesText,
    /// The answer is of the question's kind but does not fit it (an option it does not offer, several
    /// where one is taken, text where none is).
    #[error("the answer does not fit the question (an option it does not offer?)")]
    DoesNotFit,
}

/// `choices` and `text` as an answer to a question of `kind`, or why they are not one.
pub fn answer_for(
    kind: &QuestionKind,
    choices: &[String],
    text: Option<&str>,
) -> Result<Answer, AnswerRefusal> {
    let one = || match choices {
        [c] if text.is_none() => Ok(c.as_str()),
        _ => Err(AnswerRefusal::NotOneChoice),
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
                        return Err(AnswerRefusal::NotAnApproval {
                            picked: picked.to_string(),
                        })
                    }
                },
            };
            Answer::Approve { choice }
        }
        QuestionKind::Confirm { .. } => match one()? {
            "yes" => Answer::Confirm { confirmed: true },
            "no" => Answer::Confirm { confirmed: false },
            other => {
                return Err(AnswerRefusal::NotYesOrNo {
                    given: other.to_string(),
                })
            }
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
            _ => return Err(AnswerRefusal::InputTakesText),
        },
    };
    match answer.fits(kind) {
        true => Ok(answer),
        false => Err(AnswerRefusal::DoesNotFit),
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

    #[test]
    fn each_refusal_says_what_the_question_takes() {
        let approve = QuestionKind::Approve {
            command: "ls".into(),
            display: "ls".into(),
            tag: None,
        };
        let confirm = QuestionKind::Confirm {
            question: "ok?".into(),
        };
        let input = QuestionKind::Input {
            question: "name?".into(),
            default: None,
        };
        let refused = |kind: &QuestionKind, choices: &[&str], text: Option<&str>| {
            answer_for(kind, &s(choices), text).unwrap_err().to_string()
        };
        assert_eq!(
            refused(&approve, &["once", "deny"], None),
            "give exactly one of choices"
        );
        assert_eq!(
            refused(&confirm, &["yes"], Some("sure")),
            "give exactly one of choices"
        );
        assert_eq!(
            refused(&approve, &["sure"], None),
            "\"sure\": an approval is once, session, always or deny"
        );
        assert_eq!(
            refused(&confirm, &["maybe"], None),
            "\"maybe\": the answer is yes or no"
        );
        assert_eq!(
            refused(&input, &["x"], None),
            "an input question takes text only"
        );
        assert_eq!(
            refused(&input, &[], None),
            "an input question takes text only"
        );
        assert_eq!(
            refused(&select(false, false), &["blue"], None),
            "the answer does not fit the question (an option it does not offer?)"
        );
        assert_eq!(
            answer_for(&select(false, false), &s(&["red", "green"]), None),
            Err(AnswerRefusal::DoesNotFit)
        );
    }
}
