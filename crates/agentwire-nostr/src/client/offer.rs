//! What a client reads off an agent's ai.info before it prompts (the spec's "Clients SHOULD use ai.info
//! before sending prompts"), with the spec's defaults when the agent publishes none, and the checks a
//! prompt must pass before it is sent: its size against `max_prompt_bytes`, its model against
//! `supported_models`, gift wrapping against `supports_nip59`. Pure.

use crate::nipxx::payload::PromptPayload;
use serde_json::{Map, Value};

/// What the agent offers, as its ai.info says or the spec's defaults for an agent without one.
#[derive(Debug, Clone, PartialEq)]
pub struct Offer {
    /// Whether an ai.info was found (else these are the spec's defaults).
    pub announced: bool,
    /// Streams deltas (default true).
    pub streaming: bool,
    /// Takes gift-wrapped prompts.
    pub nip59: bool,
    /// Takes NIP-44 encrypted prompts (the only encryption this client sends).
    pub nip44: bool,
    /// Its tools (default none: tool UI off).
    pub tool_names: Vec<String>,
    /// Models it takes, when it lists them.
    pub supported_models: Vec<String>,
    /// Its default model, when it names one.
    pub default_model: Option<String>,
    /// The largest prompt message it takes, when it says.
    pub max_prompt_bytes: Option<u64>,
}

/// Why an agent would refuse a prompt, by what its ai.info offers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PromptRefusal {
    /// The agent does not take NIP-44, the only encryption this client sends.
    #[error("the agent's ai.info does not list nip44 among its encryption, the only one this client sends")]
    NoNip44,
    /// The prompt is longer than the agent's `max_prompt_bytes`.
    #[error(
        "the prompt is {len} bytes; the agent takes at most {max} (its ai.info's max_prompt_bytes)"
    )]
    TooLarge {
        /// The prompt message's length in bytes.
        len: u64,
        /// The most the agent takes.
        max: u64,
    },
    /// The prompt asks for a model the agent does not list among its `supported_models`.
    #[error("the agent does not offer model {model:?} (its ai.info lists {})", .supported.join(", "))]
    Model {
        /// The model asked for.
        model: String,
        /// The models the agent lists.
        supported: Vec<String>,
    },
    /// A gift-wrapped prompt to an agent whose ai.info does not announce `supports_nip59`.
    #[error("the agent's ai.info does not announce supports_nip59: ask without --nip59")]
    Nip59NotAnnounced,
    /// A gift-wrapped prompt to an agent that publishes no ai.info, so announces no `supports_nip59`.
    #[error("the agent publishes no ai.info, so it does not announce supports_nip59: ask without --nip59")]
    Nip59WithoutInfo,
}

impl Offer {
    /// The offer of an ai.info's content (checked by `InfoPayload::validate`), or the spec's defaults for
    /// an agent that publishes none: streaming, NIP-44, no tools.
    pub fn of(info: Option<&Map<String, Value>>) -> Offer {
        let Some(m) = info else {
            return Offer {
                announced: false,
                streaming: true,
                nip59: false,
                nip44: true,
                tool_names: Vec::new(),
                supported_models: Vec::new(),
                default_model: None,
                max_prompt_bytes: None,
            };
        };
        let strings = |key: &str| -> Vec<String> {
            m.get(key)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        Offer {
            announced: true,
            streaming: m
                .get("supports_streaming")
                .and_then(Value::as_bool)
                .unwrap_or(true),
            nip59: m
                .get("supports_nip59")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            nip44: strings("encryption").iter().any(|e| e == "nip44"),
            tool_names: strings("tool_names"),
            supported_models: strings("supported_models"),
            default_model: m
                .get("default_model")
                .and_then(Value::as_str)
                .map(String::from),
            max_prompt_bytes: m.get("max_prompt_bytes").and_then(Value::as_u64),
        }
    }

    /// Why `prompt` (gift-wrapped when `wrap`) would be refused by this agent, before it is sent.
    pub fn check(&self, prompt: &PromptPayload, wrap: bool) -> Result<(), PromptRefusal> {
        if !self.nip44 {
            return Err(PromptRefusal::NoNip44);
        }
        if let Some(max) = self.max_prompt_bytes {
            let len = prompt.message.len() as u64;
            if len > max {
                return Err(PromptRefusal::TooLarge { len, max });
            }
        }
        if let Some(model) = &prompt.model {
            if self.announced
                && !self.supported_models.is_empty()
                && !self.supported_models.contains(model)
            {
                return Err(PromptRefusal::Model {
                    model: model.clone(),
                    supported: self.supported_models.clone(),
                });
            }
        }
        if wrap && !self.nip59 {
            return Err(match self.announced {
                true => PromptRefusal::Nip59NotAnnounced,
                false => PromptRefusal::Nip59WithoutInfo,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn without_ai_info_the_spec_defaults_hold() {
        let o = Offer::of(None);
        assert!(!o.announced && o.streaming && o.tool_names.is_empty());
        let mut p = PromptPayload::new("hi");
        assert_eq!(o.check(&p, false), Ok(()));
        p.model = Some("any".into());
        assert_eq!(o.check(&p, false), Ok(()), "no list to check it against");
        assert!(o
            .check(&p, true)
            .unwrap_err()
            .to_string()
            .contains("no ai.info"));
    }

    #[test]
    fn a_prompt_is_checked_against_what_the_agent_announces() {
        let o = Offer::of(Some(&info(serde_json::json!({
            "supports_streaming": false, "supports_nip59": true, "encryption": ["nip44"],
            "tool_names": ["calculator"], "supported_models": ["demo-1"], "default_model": "demo-1",
            "max_prompt_bytes": 10
        }))));
        assert!(o.announced && !o.streaming && o.nip59 && o.nip44);
        assert_eq!(o.tool_names, vec!["calculator"]);
        let mut p = PromptPayload::new("0123456789");
        assert_eq!(o.check(&p, true), Ok(()), "exactly the most it takes");
        p.message.push('!');
        assert!(o
            .check(&p, false)
            .unwrap_err()
            .to_string()
            .contains("11 bytes"));
        let mut p = PromptPayload::new("hi");
        p.model = Some("gpt-9".into());
        assert!(o
            .check(&p, false)
            .unwrap_err()
            .to_string()
            .contains("demo-1"));
        p.model = Some("demo-1".into());
        assert_eq!(o.check(&p, false), Ok(()));
        let other = Offer::of(Some(&info(
            serde_json::json!({"encryption": ["nip04"], "tool_names": []}),
        )));
        assert!(other
            .check(&p, false)
            .unwrap_err()
            .to_string()
            .contains("nip44"));
    }
}
