//! The tools: each agent exposed on the front is one tool, `ask_<agent>`, described by its card, whose one
//! argument is the prompt. Its name, its input schema, and a call's arguments checked. Pure.

use serde_json::{json, Map, Value};

/// What every tool's name starts with: a tool is an agent to ask.
pub const TOOL_PREFIX: &str = "ask_";

/// The most characters in a tool's name: the MCP specification's bound (1 to 128), which clients enforce.
pub const MAX_TOOL_NAME_CHARS: usize = 128;

/// The most characters of an agent card's description in its tool's description: a client puts every
/// tool's description in its model's context, so a long card would crowd out the rest.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;

/// The tool's one argument: what the agent is asked.
pub const PROMPT_ARG: &str = "prompt";

/// The tool named after agent `agent`: [`TOOL_PREFIX`] and the name, each character outside the set MCP
/// allows in tool names (`A-Z a-z 0-9 _ - .`) as `_`, cut to [`MAX_TOOL_NAME_CHARS`].
pub fn tool_name(agent: &str) -> String {
    let safe = agent.chars().map(|c| match c {
        'A'..='Z' | 'a'..='z' | '0'..='9' | '_' | '-' | '.' => c,
        _ => '_',
    });
    TOOL_PREFIX
        .chars()
        .chain(safe)
        .take(MAX_TOOL_NAME_CHARS)
        .collect()
}

/// The tool's description: the agent's card's (cut to [`MAX_DESCRIPTION_CHARS`]), and what a call is.
pub fn description(agent: &str, card_description: &str) -> String {
    let card: String = card_description
        .trim()
        .chars()
        .take(MAX_DESCRIPTION_CHARS)
        .collect();
    let about = if card.is_empty() {
        format!("The agent {agent}.")
    } else {
        format!("The agent {agent}: {card}")
    };
    format!(
        "{about}\nEach call is one turn of the agent in a new conversation: `prompt` is what it is asked, \
         the result its answer."
    )
}

/// Every tool's input schema: an object with one required string, [`PROMPT_ARG`], and nothing else.
pub fn input_schema(max_prompt_bytes: usize) -> Map<String, Value> {
    let schema = json!({
        "type": "object",
        "properties": {
            PROMPT_ARG: {
                "type": "string",
                "description": format!("What the agent is asked (at most {max_prompt_bytes} bytes as UTF-8)."),
                "minLength": 1,
            }
        },
        "required": [PROMPT_ARG],
        "additionalProperties": false,
    });
    match schema {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// A call's arguments, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallArgs {
    /// What the agent is asked.
    pub prompt: String,
}

/// Why a call's arguments cannot be taken (told to the client as the tool's error, so that a model can
/// send them again right).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    /// No `prompt`.
    #[error("the argument `prompt` is missing: call the tool with {{\"prompt\": \"...\"}}")]
    Missing,
    /// `prompt` is not a string.
    #[error("the argument `prompt` is a string, not {0}")]
    NotText(&'static str),
    /// `prompt` is empty or only whitespace.
    #[error("the argument `prompt` is empty: there is nothing to ask")]
    Empty,
    /// An argument the tool does not take.
    #[error("the tool takes only `prompt`, not `{0}`")]
    Unknown(String),
    /// `prompt` is larger than the agent takes.
    #[error("the prompt has {bytes} bytes; this agent takes at most {max}")]
    TooLarge {
        /// Its size.
        bytes: usize,
        /// The agent's bound (its card's `max_prompt_bytes`).
        max: usize,
    },
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A call's `arguments` checked: exactly a non-empty `prompt` string of at most `max_prompt_bytes`.
pub fn parse_args(
    arguments: Option<&Map<String, Value>>,
    max_prompt_bytes: usize,
) -> Result<CallArgs, ArgsError> {
    let Some(args) = arguments else {
        return Err(ArgsError::Missing);
    };
    if let Some(other) = args.keys().find(|k| k.as_str() != PROMPT_ARG) {
        // A key is the client's text: shown cut, so an error line stays one short line.
        let shown: String = other.chars().take(64).collect();
        return Err(ArgsError::Unknown(shown));
    }
    let prompt = match args.get(PROMPT_ARG) {
        None => return Err(ArgsError::Missing),
        Some(Value::String(s)) => s,
        Some(other) => return Err(ArgsError::NotText(type_name(other))),
    };
    if prompt.trim().is_empty() {
        return Err(ArgsError::Empty);
    }
    if prompt.len() > max_prompt_bytes {
        return Err(ArgsError::TooLarge {
            bytes: prompt.len(),
            max: max_prompt_bytes,
        });
    }
    Ok(CallArgs {
        prompt: prompt.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("an object"),
        }
    }

    #[test]
    fn a_tool_is_named_after_its_agent_in_the_characters_mcp_allows() {
        assert_eq!(tool_name("demo"), "ask_demo");
        assert_eq!(tool_name("my-agent.v2"), "ask_my-agent.v2");
        assert_eq!(tool_name("a b/c€"), "ask_a_b_c_");
        let long = tool_name(&"x".repeat(500));
        assert_eq!(long.chars().count(), MAX_TOOL_NAME_CHARS);
        assert!(long.starts_with(TOOL_PREFIX));
    }

    #[test]
    fn the_description_is_the_cards_cut_and_says_what_a_call_is() {
        let d = description("demo", "echoes and calculates");
        assert!(
            d.starts_with("The agent demo: echoes and calculates"),
            "{d}"
        );
        assert!(d.contains("`prompt`"), "{d}");
        assert!(description("x", "  ").starts_with("The agent x."));
        let long = description("x", &"y".repeat(5000));
        assert!(long.matches('y').count() == MAX_DESCRIPTION_CHARS, "{long}");
    }

    #[test]
    fn the_schema_takes_one_required_prompt_and_nothing_else() {
        let s = input_schema(100);
        assert_eq!(s["type"], "object");
        assert_eq!(s["required"], json!(["prompt"]));
        assert_eq!(s["additionalProperties"], false);
        assert_eq!(s["properties"]["prompt"]["type"], "string");
        assert!(s["properties"]["prompt"]["description"]
            .as_str()
            .unwrap()
            .contains("100 bytes"));
    }

    #[test]
    fn arguments_are_exactly_a_prompt_within_the_agents_bound() {
        let ok = parse_args(Some(&args(json!({"prompt": "calc 1+1"}))), 100).unwrap();
        assert_eq!(ok.prompt, "calc 1+1");
        assert_eq!(parse_args(None, 100), Err(ArgsError::Missing));
        assert_eq!(
            parse_args(Some(&args(json!({}))), 100),
            Err(ArgsError::Missing)
        );
        assert_eq!(
            parse_args(Some(&args(json!({"prompt": 5}))), 100),
            Err(ArgsError::NotText("a number"))
        );
        assert_eq!(
            parse_args(Some(&args(json!({"prompt": " \n"}))), 100),
            Err(ArgsError::Empty)
        );
        assert_eq!(
            parse_args(Some(&args(json!({"prompt": "hi", "model": "x"}))), 100),
            Err(ArgsError::Unknown("model".into()))
        );
        let e = parse_args(Some(&args(json!({"prompt": "x".repeat(101)}))), 100).unwrap_err();
        assert_eq!(
            e,
            ArgsError::TooLarge {
                bytes: 101,
                max: 100
            }
        );
        assert!(e.to_string().contains("at most 100"), "{e}");
        assert!(parse_args(Some(&args(json!({"prompt": "x".repeat(100)}))), 100).is_ok());
    }
}
