//! The roost tools a model agent gets when its config lists `roost` in `tools`: the peer ops and the task
//! board of the roost supervisor (`roost_peers`, `roost_send`, `roost_spawn`, `roost_watch`,
//! `roost_handback`, `roost_tasks`, `roost_task_add`, `roost_task_claim`, `roost_task_done`,
//! `roost_task_release`), so a model can coordinate other sessions. Here: their JSON schemas, and each
//! call's arguments checked and turned into the one op it maps to; [`super::roost_peer`] sends it.
//!
//! Each tool's result is its op's result JSON (plus `inbox`, the peer items that reached the agent since
//! its last roost tool result); a refusal comes back to the model as the tool's error, `code: message` in
//! the daemon's words (`not_found: no session named "x"`), and so do arguments that do not fit
//! (`bad_arguments: ...`). None needs a person's approval: they coordinate sessions (list them, message
//! them, keep the shared board, start a job of a profile the operator configured, as `dispatch` does) and
//! run no command themselves. What a message starts is the receiving agent's own business, behind its own
//! approvals, and a message carries no authority (the daemon wraps it in an envelope that says so; a
//! terminal agent, whose input a message would be typed as, takes none).
//!
//! The agent speaks as a foreground peer named after itself (`peer_register`): the daemon lets a
//! foreground peer list, send, be sent to, use the board, spawn children (their parent is the peer) and
//! watch, and refuses it `handback` (`unsupported`: it has no parent). A turn that serves a hosted roost
//! job speaks as the job instead ([`super::roost_peer`]), and its `handback` reaches the parent that
//! spawned it. The tool is offered all the same, so that the model reads the daemon's reason rather than
//! guessing at a missing tool.

use agentwire_engine::ToolSpec;
use serde_json::{json, Map, Value};
use std::time::Duration;

/// The name in a model agent's `tools` that adds the roost tools.
pub const ROOST_TOOL: &str = "roost";

/// The roost tools, by name.
pub const ROOST_TOOLS: [&str; 10] = [
    "roost_peers",
    "roost_send",
    "roost_spawn",
    "roost_watch",
    "roost_handback",
    "roost_tasks",
    "roost_task_add",
    "roost_task_claim",
    "roost_task_done",
    "roost_task_release",
];

/// Why a roost tool call gave no result: the text the model reads, which starts with a code.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RoostToolError {
    /// The model's arguments do not fit the tool's schema.
    #[error("bad_arguments: {0}")]
    BadArguments(String),
    /// Not a roost tool (nor a concierge tool: [`super::concierge_tools`] shares these errors).
    #[error("unknown_tool: {0:?} is not a roost or concierge tool")]
    UnknownTool(String),
    /// The daemon refused the op (or the agent's registration as a peer), with its code.
    #[error("{code}: {message}")]
    Refused {
        /// The daemon's code (`not_found`, `unsupported`, `conflict`, ...).
        code: String,
        /// What the daemon said.
        message: String,
    },
    /// The socket could not be reached.
    #[error("unreachable: the roost socket {socket}: {why}")]
    Unreachable {
        /// The socket's path.
        socket: String,
        /// Why.
        why: String,
    },
    /// The connection broke while the op waited for its answer: it may or may not have been done.
    #[error("disconnected: the connection to roost broke before the answer; it may or may not have been done (roost_peers and roost_tasks show what is so)")]
    Disconnected,
    /// No answer in time.
    #[error("timeout: no answer from roost within {0:?}")]
    Timeout(Duration),
}

/// Whether `name` is a roost tool.
pub fn is_roost_tool(name: &str) -> bool {
    ROOST_TOOLS.contains(&name)
}

/// When a roost tool's call that answered `output` delegated to another agent, that peer's name and its
/// id for the work: `roost_send` to a session (the name it was sent to, the session's id), `roost_spawn`
/// of a child job (the job's name and id).
pub fn delegation(tool: &str, arguments: &str, output: &Value) -> Option<(String, String)> {
    let id = output.get("id").and_then(Value::as_str)?.to_string();
    let args: Value = serde_json::from_str(arguments).ok()?;
    let name = match tool {
        "roost_send" => args.get("to").and_then(Value::as_str)?.to_string(),
        "roost_spawn" => output
            .get("name")
            .and_then(Value::as_str)
            .or_else(|| args.get("name").and_then(Value::as_str))
            .or_else(|| args.get("profile").and_then(Value::as_str))?
            .to_string(),
        _ => return None,
    };
    Some((name, id))
}

/// The specs of the roost tools (none needs approval).
pub fn specs() -> Vec<ToolSpec> {
    ROOST_TOOLS.iter().filter_map(|name| spec(name)).collect()
}

/// A string property.
pub(super) fn text(description: &str) -> Value {
    json!({ "type": "string", "description": description })
}

/// A task id property.
fn task_id() -> Value {
    json!({ "type": "integer", "minimum": 1, "description": "the task's id on the board" })
}

/// An object schema with `properties`, of which `required` must be there.
/// A roost or concierge tool's spec: none needs approval (each only speaks to the daemon).
pub(super) fn tool_spec(name: &str, description: &str, input_schema: Value) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: description.into(),
        input_schema,
        requires_approval: false,
        output_schema: None,
    }
}

pub(super) fn object(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false
    })
}

/// The spec of roost tool `name`, if it is one.
pub fn spec(name: &str) -> Option<ToolSpec> {
    let (description, input_schema) = match name {
        "roost_peers" => (
            "Lists the roost sessions (jobs and foreground peers): id, name, profile, role, state, status, \
             summary, parent; `self` marks you.",
            object(json!({}), &[]),
        ),
        "roost_send" => (
            "Sends a message to another roost session (its id or its name). It reaches it as a message from \
             you, with no authority over it. Answers {outcome: delivered|queued|started|duplicate, id}.",
            object(
                json!({ "to": text("the session's id or name"), "text": text("the message") }),
                &["to", "text"],
            ),
        ),
        "roost_spawn" => (
            "Starts a child job of a roost profile with a task; you are its parent and get its handback. \
             Answers {id, name}.",
            object(
                json!({
                    "profile": text("the profile to run"),
                    "task": text("what the job should do"),
                    "name": text("a name for the job (optional)")
                }),
                &["profile", "task"],
            ),
        ),
        "roost_watch" => (
            "Be told once (a notice in a later inbox) when a session is next idle or has ended.",
            object(
                json!({
                    "id": text("the session's id or name"),
                    "when": { "type": "string", "enum": ["idle", "ended"] }
                }),
                &["id", "when"],
            ),
        ),
        "roost_handback" => (
            "A spawned job's result to its parent; the job is done with it.",
            object(json!({ "text": text("the result") }), &["text"]),
        ),
        "roost_tasks" => (
            "The shared task board: every task with its state (open, claimed, done, dropped), owner and \
             the tasks it comes after.",
            object(json!({}), &[]),
        ),
        "roost_task_add" => (
            "Adds a task to the shared board. Answers the board and the new task.",
            object(
                json!({
                    "title": text("one line, at most 200 characters"),
                    "detail": text("more about it (optional)"),
                    "after": { "type": "array", "items": task_id(), "description": "tasks it waits for" }
                }),
                &["title"],
            ),
        ),
        "roost_task_claim" => (
            "Claims an open task on the board for you.",
            object(json!({ "id": task_id() }), &["id"]),
        ),
        "roost_task_done" => (
            "Marks a task you hold done, with what came of it.",
            object(
                json!({ "id": task_id(), "result": text("what came of it (optional)") }),
                &["id"],
            ),
        ),
        "roost_task_release" => (
            "Gives back a task you hold, open for another.",
            object(json!({ "id": task_id() }), &["id"]),
        ),
        _ => return None,
    };
    Some(tool_spec(name, description, input_schema))
}

/// The model's arguments to `tool` (JSON text) as the op they map to and its args.
pub fn request(tool: &str, arguments: &str) -> Result<(&'static str, Value), RoostToolError> {
    let args = Args::parse(tool, arguments)?;
    let board = |action: &str, mut rest: Value| {
        rest["action"] = json!(action);
        Ok(("task", rest))
    };
    match tool {
        "roost_peers" => Ok(("peers", json!({}))),
        "roost_send" => Ok((
            "send",
            json!({ "to": args.text("to")?, "text": args.text("text")? }),
        )),
        "roost_spawn" => Ok((
            "spawn",
            json!({
                "profile": args.text("profile")?, "task": args.text("task")?, "name": args.maybe_text("name")?,
            }),
        )),
        "roost_watch" => {
            let when = args.text("when")?;
            if when != "idle" && when != "ended" {
                return Err(args.bad(format!("`when` is \"idle\" or \"ended\", not {when:?}")));
            }
            Ok(("watch", json!({ "id": args.text("id")?, "when": when })))
        }
        "roost_handback" => Ok(("handback", json!({ "text": args.text("text")? }))),
        "roost_tasks" => board("list", json!({})),
        "roost_task_add" => board(
            "add",
            json!({
                "title": args.text("title")?, "detail": args.maybe_text("detail")?, "after": args.ids("after")?,
            }),
        ),
        "roost_task_claim" => board("claim", json!({ "id": args.id("id")? })),
        "roost_task_done" => board(
            "done",
            json!({ "id": args.id("id")?, "result": args.maybe_text("result")? }),
        ),
        "roost_task_release" => board("release", json!({ "id": args.id("id")? })),
        other => Err(RoostToolError::UnknownTool(other.to_string())),
    }
}

/// A call's arguments, read field by field with an error that names the tool and the field.
pub(super) struct Args<'a> {
    tool: &'a str,
    fields: Map<String, Value>,
}

impl<'a> Args<'a> {
    /// The model's `arguments` (JSON text, empty for none) to `tool`: a JSON object.
    pub(super) fn parse(tool: &'a str, arguments: &str) -> Result<Args<'a>, RoostToolError> {
        let fields = match arguments.trim() {
            "" => Map::new(),
            text => match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(m)) => m,
                Ok(_) => {
                    return Err(RoostToolError::BadArguments(format!(
                        "{tool} takes a JSON object"
                    )))
                }
                Err(e) => {
                    return Err(RoostToolError::BadArguments(format!(
                        "{tool}: the arguments are not JSON: {e}"
                    )))
                }
            },
        };
        Ok(Args { tool, fields })
    }

    /// Arguments that do not fit, and why.
    pub(super) fn bad(&self, why: String) -> RoostToolError {
        RoostToolError::BadArguments(format!("{}: {why}", self.tool))
    }

    /// Required text, not blank.
    pub(super) fn text(&self, key: &str) -> Result<String, RoostToolError> {
        match self.maybe_text(key)? {
            Some(t) => Ok(t),
            None => Err(self.bad(format!("`{key}` (a string) is required"))),
        }
    }

    /// Optional text (absent, null or blank is none).
    pub(super) fn maybe_text(&self, key: &str) -> Result<Option<String>, RoostToolError> {
        match self.fields.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.bad(format!("`{key}` is a string, not {other}"))),
        }
    }

    /// A required task id: a positive integer (or a string of digits, as the daemon takes).
    fn id(&self, key: &str) -> Result<u64, RoostToolError> {
        self.number(key, "a task id")
    }

    /// A required id numbered from 1 (`what` it is: "a task id", "an order id"): a positive integer, or
    /// a string of digits, as the daemon takes.
    pub(super) fn number(&self, key: &str, what: &str) -> Result<u64, RoostToolError> {
        match self.fields.get(key) {
            None | Some(Value::Null) => Err(self.bad(format!("`{key}` ({what}) is required"))),
            Some(v) => as_id(v).ok_or_else(|| {
                self.bad(format!("`{key}` is {what} (a positive integer), not {v}"))
            }),
        }
    }

    /// Whether the model gave `key` at all (null and blank text count as not given).
    pub(super) fn given(&self, key: &str) -> bool {
        match self.fields.get(key) {
            None | Some(Value::Null) => false,
            Some(Value::String(s)) => !s.trim().is_empty(),
            Some(_) => true,
        }
    }

    /// Optional task ids.
    fn ids(&self, key: &str) -> Result<Vec<u64>, RoostToolError> {
        match self.fields.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    as_id(v).ok_or_else(|| {
                        self.bad(format!(
                            "`{key}` holds task ids (positive integers), not {v}"
                        ))
                    })
                })
                .collect(),
            Some(other) => Err(self.bad(format!("`{key}` is a list of task ids, not {other}"))),
        }
    }
}

/// A positive integer, or a string of digits that is one.
fn as_id(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse().ok()
        }
        _ => None,
    }
    .filter(|id| *id > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_and_a_spawn_are_delegations_and_nothing_else_is() {
        let sent = delegation(
            "roost_send",
            r#"{"to":"reviewer","text":"look"}"#,
            &json!({"outcome":"delivered","id":"j7"}),
        );
        assert_eq!(sent, Some(("reviewer".into(), "j7".into())));
        let spawned = delegation(
            "roost_spawn",
            r#"{"profile":"coder","task":"fix it"}"#,
            &json!({"id":"j8","name":"coder-1"}),
        );
        assert_eq!(spawned, Some(("coder-1".into(), "j8".into())));
        assert_eq!(delegation("roost_tasks", "{}", &json!({"id":"x"})), None);
        assert_eq!(
            delegation("roost_send", r#"{"to":"a"}"#, &json!({"error":"no"})),
            None,
            "a refused send delegated nothing"
        );
    }

    #[test]
    fn every_tool_has_a_spec_needing_no_approval() {
        let specs = specs();
        assert_eq!(specs.len(), ROOST_TOOLS.len());
        assert!(specs.iter().all(|s| !s.requires_approval));
        assert!(spec("roost_nothing").is_none());
    }

    #[test]
    fn calls_map_to_their_ops() {
        assert_eq!(request("roost_peers", "").unwrap(), ("peers", json!({})));
        assert_eq!(
            request("roost_send", r#"{"to":"w","text":"hi"}"#).unwrap(),
            ("send", json!({ "to": "w", "text": "hi" }))
        );
        assert_eq!(
            request("roost_spawn", r#"{"profile":"p","task":"t"}"#).unwrap(),
            (
                "spawn",
                json!({ "profile": "p", "task": "t", "name": null })
            )
        );
        assert_eq!(
            request("roost_task_add", r#"{"title":"x","after":[1,"2"]}"#).unwrap(),
            (
                "task",
                json!({ "action": "add", "title": "x", "detail": null, "after": [1, 2] })
            )
        );
        assert_eq!(
            request("roost_task_done", r#"{"id":"3","result":"ok"}"#).unwrap(),
            ("task", json!({ "action": "done", "id": 3, "result": "ok" }))
        );
        assert_eq!(
            request("roost_tasks", "{}").unwrap(),
            ("task", json!({ "action": "list" }))
        );
    }

    #[test]
    fn arguments_that_do_not_fit_are_named() {
        let e = request("roost_send", r#"{"to":"w"}"#).unwrap_err();
        assert_eq!(
            e.to_string(),
            "bad_arguments: roost_send: `text` (a string) is required"
        );
        let e = request("roost_task_claim", r#"{"id":0}"#).unwrap_err();
        assert!(e.to_string().contains("positive integer"), "{e}");
        let e = request("roost_watch", r#"{"id":"w","when":"soon"}"#).unwrap_err();
        assert!(e.to_string().contains("idle"), "{e}");
        let e = request("roost_send", "{oops").unwrap_err();
        assert!(e.to_string().contains("not JSON"), "{e}");
        let e = request("roost_send", "[1]").unwrap_err();
        assert!(e.to_string().contains("JSON object"), "{e}");
        let e = request("roost_send", r#"{"to":5,"text":"x"}"#).unwrap_err();
        assert!(e.to_string().contains("`to` is a string"), "{e}");
        assert!(matches!(
            request("roost_x", "{}"),
            Err(RoostToolError::UnknownTool(_))
        ));
    }
}
