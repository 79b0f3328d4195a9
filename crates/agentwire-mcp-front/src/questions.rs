//! An agent's question as an MCP elicitation (form mode): the message a person reads and the flat form
//! schema a client renders, and the client's reply (`accept` with the form's content, `decline`, `cancel`)
//! checked and turned into the engine's [`Answer`]. Pure.
//!
//! | question | form |
//! | --- | --- |
//! | confirm | `confirmed`: a boolean |
//! | approve | `decision`: one of `once`, `session`, `always`, `deny` (titled by their labels) |
//! | select one | `choice`: one of the option ids (titled by their labels) |
//! | select several | `option_1` … `option_n`: a boolean per option, titled by its label |
//! | either, with free text | also `text`: a string (not required) |
//! | input | `answer`: a string (its default pre-filled) |
//!
//! Enums are the `enum` + `enumNames` form, which clients of protocol 2025-06-18 and 2025-11-25 both
//! render; several choices are booleans rather than an array, which 2025-06-18 clients cannot return.

use agentwire_core::{Answer, ApproveChoice, QuestionKind, APPROVE_OPTIONS};
use serde_json::{json, Map, Value};

/// The most bytes of text in an answer (free text, an input): a person's words for an agent's question;
/// far more would be a paste that belongs in a prompt, and the engine keeps the answer in its journal.
pub const MAX_ANSWER_TEXT_BYTES: usize = 16 * 1024;

/// The most options put in a form: each becomes a field (a boolean when several may be chosen), and a
/// form of hundreds of fields is no question a person answers.
pub const MAX_FORM_OPTIONS: usize = 64;

/// A question as a form.
#[derive(Debug, Clone, PartialEq)]
pub struct Form {
    /// What the person reads.
    pub message: String,
    /// The requested schema: an object of flat, primitive properties.
    pub schema: Map<String, Value>,
}

/// What the client said to the form.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Submitted, with the form's content.
    Accept(Option<Value>),
    /// Declined explicitly.
    Decline,
    /// Dismissed without a choice.
    Cancel,
}

/// What the front does with the client's reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Give the engine this answer.
    Answer(Answer),
    /// The person dismissed the question: the call (the turn) is cancelled.
    CancelTurn,
}

/// Why a submitted form cannot be an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormError {
    /// No content, or not an object.
    #[error("the form's content is missing or not an object")]
    NotAnObject,
    /// A field the form did not ask for.
    #[error("the form has no field `{0}`")]
    UnknownField(String),
    /// A required field is missing.
    #[error("the field `{0}` is required")]
    Missing(&'static str),
    /// A field of the wrong type.
    #[error("the field `{field}` is {wanted}")]
    WrongType {
        /// The field.
        field: String,
        /// What it should be.
        wanted: &'static str,
    },
    /// Text longer than [`MAX_ANSWER_TEXT_BYTES`].
    #[error("the answer has {0} bytes of text; at most {MAX_ANSWER_TEXT_BYTES} are taken")]
    TooLong(usize),
    /// The choices do not fit the question (an id not offered, none chosen).
    #[error("the answer does not fit the question: {0}")]
    DoesNotFit(String),
}

const CONFIRMED: &str = "confirmed";
const DECISION: &str = "decision";
const CHOICE: &str = "choice";
const TEXT: &str = "text";
const ANSWER: &str = "answer";

fn option_field(i: usize) -> String {
    format!("option_{}", i + 1)
}

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn schema(properties: Map<String, Value>, required: &[&str]) -> Map<String, Value> {
    object(json!({
        "type": "object",
        "properties": properties,
        "required": required,
    }))
}

fn titled_enum(title: &str, ids: Vec<String>, labels: Vec<String>) -> Value {
    json!({ "type": "string", "title": title, "enum": ids, "enumNames": labels })
}

/// The form for a question of `kind`.
pub fn form(kind: &QuestionKind) -> Form {
    let message = kind.text();
    let mut props = Map::new();
    let required: &[&str] = match kind {
        QuestionKind::Confirm { .. } => {
            props.insert(
                CONFIRMED.into(),
                json!({ "type": "boolean", "title": "Yes", "description": "checked: yes; unchecked: no" }),
            );
            &[CONFIRMED]
        }
        QuestionKind::Approve { .. } => {
            let ids = APPROVE_OPTIONS.iter().map(|o| o.0.to_string()).collect();
            let labels = APPROVE_OPTIONS.iter().map(|o| o.1.to_string()).collect();
            props.insert(DECISION.into(), titled_enum("Decision", ids, labels));
            &[DECISION]
        }
        QuestionKind::Select {
            options,
            multiple,
            freeform,
            ..
        } => {
            let options = &options[..options.len().min(MAX_FORM_OPTIONS)];
            if *multiple {
                for (i, o) in options.iter().enumerate() {
                    props.insert(
                        option_field(i),
                        json!({ "type": "boolean", "title": o.label, "default": false }),
                    );
                }
            } else {
                let ids = options.iter().map(|o| o.id.clone()).collect();
                let labels = options.iter().map(|o| o.label.clone()).collect();
                props.insert(CHOICE.into(), titled_enum("Choice", ids, labels));
            }
            if *freeform {
                props.insert(
                    TEXT.into(),
                    json!({ "type": "string", "title": "Or in your own words", "maxLength": MAX_ANSWER_TEXT_BYTES }),
                );
            }
            match (*multiple, *freeform) {
                (false, false) => &[CHOICE],
                _ => &[],
            }
        }
        QuestionKind::Input { default, .. } => {
            let mut field =
                json!({ "type": "string", "title": "Answer", "maxLength": MAX_ANSWER_TEXT_BYTES });
            if let (Some(d), Value::Object(f)) = (default, &mut field) {
                f.insert("default".into(), Value::String(d.clone()));
            }
            props.insert(ANSWER.into(), field);
            &[ANSWER]
        }
    };
    Form {
        message,
        schema: schema(props, required),
    }
}

/// What the front does with `action`, the client's reply to the form of a question of `kind`: a
/// submitted form is the answer it gives (or an error saying why it is none); a declined approval is
/// denied and another declined question is answered [`Answer::NoOperator`] (the person will not answer:
/// the agent goes on without it); a dismissed one cancels the call.
pub fn reply(kind: &QuestionKind, action: Action) -> Result<Reply, FormError> {
    match action {
        Action::Cancel => Ok(Reply::CancelTurn),
        Action::Decline => Ok(Reply::Answer(match kind {
            QuestionKind::Approve { .. } => Answer::Approve {
                choice: ApproveChoice::No,
            },
            _ => Answer::NoOperator,
        })),
        Action::Accept(content) => {
            let Some(Value::Object(content)) = content else {
                return Err(FormError::NotAnObject);
            };
            accepted(kind, &content).map(Reply::Answer)
        }
    }
}

/// The fields a form of `kind` has.
fn fields(kind: &QuestionKind) -> Vec<String> {
    form(kind)
        .schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

fn text_of(content: &Map<String, Value>, field: &str) -> Result<Option<String>, FormError> {
    match content.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.len() > MAX_ANSWER_TEXT_BYTES => {
            Err(FormError::TooLong(s.len()))
        }
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(FormError::WrongType {
            field: field.into(),
            wanted: "a string",
        }),
    }
}

fn flag_of(content: &Map<String, Value>, field: &str) -> Result<Option<bool>, FormError> {
    match content.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(FormError::WrongType {
            field: field.into(),
            wanted: "a boolean",
        }),
    }
}

fn accepted(kind: &QuestionKind, content: &Map<String, Value>) -> Result<Answer, FormError> {
    let known = fields(kind);
    if let Some(other) = content.keys().find(|k| !known.contains(k)) {
        return Err(FormError::UnknownField(other.chars().take(64).collect()));
    }
    let fit = |choices: &[String], text: Option<&str>| {
        kind.answer_from(choices, text).ok_or_else(|| {
            FormError::DoesNotFit(match (choices.is_empty(), text) {
                (true, None) => "nothing was chosen".into(),
                _ => "a choice that was not offered".into(),
            })
        })
    };
    match kind {
        QuestionKind::Confirm { .. } => match flag_of(content, CONFIRMED)? {
            Some(confirmed) => Ok(Answer::Confirm { confirmed }),
            None => Err(FormError::Missing(CONFIRMED)),
        },
        QuestionKind::Approve { .. } => match text_of(content, DECISION)? {
            Some(id) => fit(&[id], None),
            None => Err(FormError::Missing(DECISION)),
        },
        QuestionKind::Input { .. } => match text_of(content, ANSWER)? {
            Some(value) => Ok(Answer::Input { value }),
            None => Err(FormError::Missing(ANSWER)),
        },
        QuestionKind::Select {
            options, multiple, ..
        } => {
            let text = text_of(content, TEXT)?.filter(|t| !t.trim().is_empty());
            let mut choices = Vec::new();
            if *multiple {
                for (i, o) in options.iter().take(MAX_FORM_OPTIONS).enumerate() {
                    if flag_of(content, &option_field(i))? == Some(true) {
                        choices.push(o.id.clone());
                    }
                }
            } else if let Some(id) = text_of(content, CHOICE)? {
                choices.push(id);
            }
            fit(&choices, text.as_deref())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire_core::QuestionOption;

    fn select(multiple: bool, freeform: bool) -> QuestionKind {
        QuestionKind::Select {
            question: "which?".into(),
            options: vec![
                QuestionOption::new("a", "Alpha"),
                QuestionOption::new("b", "Beta"),
            ],
            multiple,
            freeform,
        }
    }

    fn accept(v: Value) -> Action {
        Action::Accept(Some(v))
    }

    #[test]
    fn a_confirmation_is_a_required_boolean() {
        let kind = QuestionKind::Confirm {
            question: "Deploy?".into(),
        };
        let f = form(&kind);
        assert_eq!(f.message, "Deploy?");
        assert_eq!(f.schema["properties"]["confirmed"]["type"], "boolean");
        assert_eq!(f.schema["required"], json!(["confirmed"]));
        assert_eq!(
            reply(&kind, accept(json!({"confirmed": true}))),
            Ok(Reply::Answer(Answer::Confirm { confirmed: true }))
        );
        assert_eq!(
            reply(&kind, accept(json!({"confirmed": "yes"}))),
            Err(FormError::WrongType {
                field: "confirmed".into(),
                wanted: "a boolean"
            })
        );
        assert_eq!(
            reply(&kind, accept(json!({}))),
            Err(FormError::Missing("confirmed"))
        );
    }

    #[test]
    fn one_choice_is_an_enum_of_the_option_ids_titled_by_their_labels() {
        let kind = select(false, false);
        let f = form(&kind);
        assert_eq!(f.schema["properties"]["choice"]["enum"], json!(["a", "b"]));
        assert_eq!(
            f.schema["properties"]["choice"]["enumNames"],
            json!(["Alpha", "Beta"])
        );
        assert_eq!(f.schema["required"], json!(["choice"]));
        assert_eq!(
            reply(&kind, accept(json!({"choice": "b"}))),
            Ok(Reply::Answer(Answer::Select { value: "b".into() }))
        );
        assert!(matches!(
            reply(&kind, accept(json!({"choice": "zzz"}))),
            Err(FormError::DoesNotFit(_))
        ));
        assert_eq!(
            reply(&kind, accept(json!({"choice": "a", "extra": 1}))),
            Err(FormError::UnknownField("extra".into()))
        );
    }

    #[test]
    fn several_choices_are_a_boolean_per_option() {
        let kind = select(true, false);
        let f = form(&kind);
        assert_eq!(f.schema["properties"]["option_1"]["title"], "Alpha");
        assert_eq!(f.schema["properties"]["option_2"]["type"], "boolean");
        assert_eq!(
            reply(&kind, accept(json!({"option_1": true, "option_2": true}))),
            Ok(Reply::Answer(Answer::Choices {
                choices: vec!["a".into(), "b".into()],
                text: None
            }))
        );
        assert_eq!(
            reply(&kind, accept(json!({"option_1": false}))),
            Err(FormError::DoesNotFit("nothing was chosen".into()))
        );
    }

    #[test]
    fn free_text_comes_beside_the_options_and_is_bounded() {
        let kind = select(false, true);
        assert!(form(&kind).schema["properties"]["text"].is_object());
        assert_eq!(
            reply(&kind, accept(json!({"text": "neither"}))),
            Ok(Reply::Answer(Answer::Choices {
                choices: vec![],
                text: Some("neither".into())
            }))
        );
        let long = "x".repeat(MAX_ANSWER_TEXT_BYTES + 1);
        assert_eq!(
            reply(&kind, accept(json!({ "text": long }))),
            Err(FormError::TooLong(MAX_ANSWER_TEXT_BYTES + 1))
        );
    }

    #[test]
    fn an_approval_names_its_decision_and_a_decline_denies_it() {
        let kind = QuestionKind::Approve {
            command: "rm".into(),
            display: "rm -rf x".into(),
            tag: None,
        };
        let f = form(&kind);
        assert!(f.message.contains("rm -rf x"));
        assert_eq!(
            f.schema["properties"]["decision"]["enum"],
            json!(["once", "session", "always", "deny"])
        );
        assert_eq!(
            reply(&kind, accept(json!({"decision": "once"}))),
            Ok(Reply::Answer(Answer::Approve {
                choice: ApproveChoice::Once
            }))
        );
        assert_eq!(
            reply(&kind, Action::Decline),
            Ok(Reply::Answer(Answer::Approve {
                choice: ApproveChoice::No
            }))
        );
    }

    #[test]
    fn an_input_is_a_string_with_its_default() {
        let kind = QuestionKind::Input {
            question: "Name?".into(),
            default: Some("Ada".into()),
        };
        assert_eq!(form(&kind).schema["properties"]["answer"]["default"], "Ada");
        assert_eq!(
            reply(&kind, accept(json!({"answer": ""}))),
            Ok(Reply::Answer(Answer::Input { value: "".into() }))
        );
        assert_eq!(
            reply(&kind, accept(json!({"answer": 3}))),
            Err(FormError::WrongType {
                field: "answer".into(),
                wanted: "a string"
            })
        );
    }

    #[test]
    fn a_decline_is_no_operator_and_a_cancel_ends_the_call() {
        let kind = select(false, false);
        assert_eq!(
            reply(&kind, Action::Decline),
            Ok(Reply::Answer(Answer::NoOperator))
        );
        assert_eq!(reply(&kind, Action::Cancel), Ok(Reply::CancelTurn));
        assert_eq!(
            reply(&kind, Action::Accept(None)),
            Err(FormError::NotAnObject)
        );
        assert_eq!(
            reply(&kind, accept(json!("b"))),
            Err(FormError::NotAnObject)
        );
    }

    #[test]
    fn every_form_is_a_schema_the_sdk_sends() {
        let kinds = [
            QuestionKind::Confirm {
                question: "ok?".into(),
            },
            QuestionKind::Approve {
                command: "ls".into(),
                display: "ls -la".into(),
                tag: None,
            },
            select(false, false),
            select(true, false),
            select(false, true),
            select(true, true),
            QuestionKind::Input {
                question: "name?".into(),
                default: Some("x".into()),
            },
        ];
        for kind in kinds {
            let f = form(&kind);
            let parsed = rmcp::model::ElicitationSchema::from_json_schema(f.schema.clone());
            assert!(parsed.is_ok(), "{kind:?}: {parsed:?}");
            // What goes on the wire keeps every field and what is required.
            let wire = serde_json::to_value(parsed.unwrap()).unwrap();
            assert_eq!(wire["properties"], f.schema["properties"], "{kind:?}");
        }
    }

    #[test]
    fn a_form_holds_at_most_the_bounded_number_of_options() {
        let options = (0..200)
            .map(|i| QuestionOption::new(format!("o{i}"), format!("O{i}")))
            .collect();
        let kind = QuestionKind::Select {
            question: "many".into(),
            options,
            multiple: true,
            freeform: false,
        };
        let f = form(&kind);
        assert_eq!(
            f.schema["properties"].as_object().unwrap().len(),
            MAX_FORM_OPTIONS
        );
    }
}
