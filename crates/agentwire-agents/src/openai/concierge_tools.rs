//! The concierge tools a model agent gets when its config lists `concierge` in `tools`: the ops of the roost
//! concierge (spec M44-M46) for a model that is the concierge, woken with digests (`<roost-digest>`), each
//! its turn's prompt. `concierge_say` tells the user something, `concierge_suggest` puts a suggested answer
//! on a waiting session's row, `concierge_reply` answers a session in the user's place, `concierge_policy`
//! says what the user allows, `concierge_act` stops, respawns or dispatches a job, and the standing orders
//! are read and kept with `concierge_orders`, `concierge_order_add`, `concierge_order_rm` and
//! `concierge_order_applied`. Here: their JSON schemas, and each call's arguments checked and turned into
//! the one op it maps to.
//!
//! The ops are the concierge's, on its own job's connection: a call is sent as the hosted roost job whose
//! turn calls it ([`super::roost_peer::as_job`], the roost tools' path as the job), so they work in a turn
//! of the agent's job once the hub made that job the concierge (`concierge {action: "on", launch:
//! {profile: "<agent>"}}`; the agent must be served on roost). Anywhere else they are refused, by the daemon
//! (`unsupported`: a roost job that is not the concierge) or here, before anything is sent (`unsupported`:
//! a turn that is no roost job's). They need no foreground peer, so unlike `roost` they open no connection
//! of their own; the two sets go together (`tools = ["roost", "concierge"]`) for a concierge that also
//! messages sessions and keeps the task board.
//!
//! Results and refusals read as the roost tools' do: the op's result JSON, or `code: message` in the
//! daemon's words (`policy: the policy is answer: never; suggest the answer instead`), and
//! `bad_arguments: ...` for arguments that do not fit. None needs a person's approval: they only speak to
//! the daemon, which holds `concierge_reply` and `concierge_act` to the policy the person set (`never`
//! answers by default, and no acts).

use super::roost_peer;
use super::roost_tools::{object, text, Args, RoostToolError};
use agentwire_engine::ToolSpec;
use agentwire_roost::front::HostedSessions;
use serde_json::{json, Value};
use std::sync::Arc;

/// The name in a model agent's `tools` that adds the concierge tools.
pub const CONCIERGE_TOOL: &str = "concierge";

/// The concierge tools, by name.
pub const CONCIERGE_TOOLS: [&str; 9] = [
    "concierge_say",
    "concierge_suggest",
    "concierge_reply",
    "concierge_policy",
    "concierge_act",
    "concierge_orders",
    "concierge_order_add",
    "concierge_order_rm",
    "concierge_order_applied",
];

/// What `concierge_say` may say: something for the user to know, something the user is needed for, or
/// the answer to what the user asked.
const SAY_KINDS: [&str; 3] = ["info", "need", "answer"];
/// What `concierge_act` may do.
const ACTS: [&str; 3] = ["stop", "respawn", "dispatch"];

/// Whether `name` is a concierge tool.
pub fn is_concierge_tool(name: &str) -> bool {
    CONCIERGE_TOOLS.contains(&name)
}

/// The specs of the concierge tools (none needs approval).
pub fn specs() -> Vec<ToolSpec> {
    CONCIERGE_TOOLS
        .iter()
        .filter_map(|name| spec(name))
        .collect()
}

/// A session property: an id or a name, as the digest lists them.
fn session() -> Value {
    text("the session's id or name, as the digest lists it")
}

/// A standing order's id property.
fn order_id() -> Value {
    json!({ "type": "integer", "minimum": 1, "description": "the order's id (#n in the digest)" })
}

/// A string property that is one of `values`.
fn one_of(values: &[&str], description: &str) -> Value {
    json!({ "type": "string", "enum": values, "description": description })
}

/// The spec of concierge tool `name`, if it is one.
pub fn spec(name: &str) -> Option<ToolSpec> {
    let (description, input_schema) = match name {
        "concierge_say" => (
            "Tells the user something, in the roost feed: `info` (worth knowing), `need` (the user is \
             needed: a decision, a permission), or `answer` (your answer to what the user asked you). \
             Say nothing when nothing matters. Answers {seq}.",
            object(
                json!({
                    "kind": one_of(&SAY_KINDS, "info, need or answer"),
                    "text": text("what to tell the user, at most 4 KiB")
                }),
                &["kind", "text"],
            ),
        ),
        "concierge_suggest" => (
            "Suggests an answer for a session that waits for the user: it is shown on the session's row \
             for the user to take or not. Answers {id, suggested}.",
            object(
                json!({
                    "id": session(),
                    "text": text("the answer you suggest"),
                    "why": text("why, in a line (optional)")
                }),
                &["id", "text"],
            ),
        ),
        "concierge_reply" => (
            "Answers a session's question in the user's place, as far as your policy allows (see \
             concierge_policy): `routine`, only with one of the question's choices; `always`, any answer; \
             `never` (the default) refuses it: suggest instead. The user can undo it.",
            object(
                json!({
                    "id": session(),
                    "text": text("the answer"),
                    "why": text("why, in a line (optional)")
                }),
                &["id", "text"],
            ),
        ),
        "concierge_policy" => (
            "What the user allows you: {policy: {answer: never|routine|always, act: true|false}}.",
            object(json!({}), &[]),
        ),
        "concierge_act" => (
            "Stops or respawns a session (`id`), or dispatches a new job of a roost profile (`profile`, \
             `task`, `name`), when your policy allows acting (act: true).",
            object(
                json!({
                    "what": one_of(&ACTS, "stop, respawn or dispatch"),
                    "id": text("stop, respawn: the session's id or name"),
                    "profile": text("dispatch: the profile to run"),
                    "task": text("dispatch: what the job should do (optional)"),
                    "name": text("dispatch: a name for the job (optional)")
                }),
                &["what"],
            ),
        ),
        "concierge_orders" => (
            "The standing orders: {orders: [{id, text, when, by: user|concierge, at, lastAt, nextAt, \
             count}]}.",
            object(json!({}), &[]),
        ),
        "concierge_order_add" => (
            "Keeps a standing order of your own, on a clock when `when` is given. Answers the orders and \
             the new one.",
            object(
                json!({
                    "text": text("the instruction, at most 2 KiB"),
                    "when": text("every 30m | daily 18:00 | weekdays 09:00 | cron \"...\" (optional)")
                }),
                &["text"],
            ),
        ),
        "concierge_order_rm" => (
            "Drops a standing order of your own (the user's are the user's to drop).",
            object(json!({ "id": order_id() }), &["id"]),
        ),
        "concierge_order_applied" => (
            "Marks a standing order applied, with what you did (optional).",
            object(
                json!({ "id": order_id(), "text": text("what you did (optional)") }),
                &["id"],
            ),
        ),
        _ => return None,
    };
    Some(super::roost_tools::tool_spec(
        name,
        description,
        input_schema,
    ))
}

/// The model's arguments to `tool` (JSON text) as the op they map to and its args.
pub fn request(tool: &str, arguments: &str) -> Result<(&'static str, Value), RoostToolError> {
    let args = Args::parse(tool, arguments)?;
    let order = |action: &str, mut rest: Value| {
        rest["action"] = json!(action);
        Ok(("concierge-order", rest))
    };
    match tool {
        "concierge_say" => {
            let kind = args.text("kind")?;
            if !SAY_KINDS.contains(&kind.as_str()) {
                return Err(args.bad(format!("`kind` is info, need or answer, not {kind:?}")));
            }
            Ok((
                "concierge-say",
                json!({ "kind": kind, "text": args.text("text")? }),
            ))
        }
        "concierge_suggest" | "concierge_reply" => Ok((
            if tool == "concierge_suggest" {
                "concierge-suggest"
            } else {
                "concierge-reply"
            },
            json!({ "id": args.text("id")?, "text": args.text("text")?, "why": args.maybe_text("why")? }),
        )),
        "concierge_policy" => Ok(("concierge-policy", json!({}))),
        "concierge_act" => act(&args),
        "concierge_orders" => order("list", json!({})),
        "concierge_order_add" => order(
            "add",
            json!({ "text": args.text("text")?, "when": args.maybe_text("when")? }),
        ),
        "concierge_order_rm" => order("rm", json!({ "id": args.number("id", "an order id")? })),
        "concierge_order_applied" => order(
            "applied",
            json!({ "id": args.number("id", "an order id")?, "text": args.maybe_text("text")? }),
        ),
        other => Err(RoostToolError::UnknownTool(other.to_string())),
    }
}

/// `concierge_act`'s arguments as `concierge-act`'s: `{what, id}` to stop or respawn, `{what: "dispatch",
/// launch}` to dispatch. A field of the other kind of act is refused, not dropped: the model meant
/// something else.
fn act(args: &Args<'_>) -> Result<(&'static str, Value), RoostToolError> {
    let what = args.text("what")?;
    let launch = ["profile", "task", "name"];
    match what.as_str() {
        "stop" | "respawn" => {
            if let Some(k) = launch.iter().find(|k| args.given(k)) {
                return Err(args.bad(format!("`{k}` is for dispatch, not {what}")));
            }
            Ok((
                "concierge-act",
                json!({ "what": what, "id": args.text("id")? }),
            ))
        }
        "dispatch" => {
            if args.given("id") {
                return Err(args.bad(
                    "`id` is for stop and respawn; dispatch takes profile, task and name".into(),
                ));
            }
            let launch = json!({
                "profile": args.text("profile")?, "task": args.maybe_text("task")?, "name": args.maybe_text("name")?,
            });
            Ok((
                "concierge-act",
                json!({ "what": "dispatch", "launch": launch }),
            ))
        }
        other => Err(args.bad(format!(
            "`what` is stop, respawn or dispatch, not {other:?}"
        ))),
    }
}

/// The concierge tools of a model agent: they speak as the hosted roost job whose turn calls them.
#[derive(Debug, Clone)]
pub struct ConciergeTools {
    hosted: Arc<HostedSessions>,
}

impl ConciergeTools {
    /// The tools over the hosted jobs served in this process.
    pub fn new(hosted: Arc<HostedSessions>) -> ConciergeTools {
        ConciergeTools { hosted }
    }

    /// Runs concierge tool `tool` with the model's `arguments` (JSON text) for a turn of `conversation`:
    /// its op's result, or the error the model reads.
    pub async fn run(
        &self,
        tool: &str,
        arguments: &str,
        conversation: &str,
    ) -> Result<Value, String> {
        let (op, args) = request(tool, arguments).map_err(|e| e.to_string())?;
        match roost_peer::as_job(&self.hosted, conversation, op, args).await {
            Some(r) => r.map_err(|e| e.to_string()),
            None => Err(RoostToolError::Refused {
                code: "unsupported".into(),
                message: format!(
                    "{tool} is the roost concierge's, in a turn of its job: this turn is no roost job's \
                     (the hub makes this agent's job the concierge with concierge {{action: \"on\", \
                     launch: {{profile}}}})"
                ),
            }
            .to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_a_spec_needing_no_approval() {
        let specs = specs();
        assert_eq!(specs.len(), CONCIERGE_TOOLS.len());
        assert!(specs.iter().all(|s| !s.requires_approval));
        assert!(spec("concierge_nothing").is_none());
        assert!(CONCIERGE_TOOLS
            .iter()
            .all(|t| !super::super::roost_tools::is_roost_tool(t)));
    }

    #[test]
    fn calls_map_to_their_ops() {
        assert_eq!(
            request("concierge_say", r#"{"kind":"need","text":"deploy?"}"#).unwrap(),
            (
                "concierge-say",
                json!({ "kind": "need", "text": "deploy?" })
            )
        );
        assert_eq!(
            request("concierge_suggest", r#"{"id":"build","text":"yes"}"#).unwrap(),
            (
                "concierge-suggest",
                json!({ "id": "build", "text": "yes", "why": null })
            )
        );
        assert_eq!(
            request(
                "concierge_reply",
                r#"{"id":"a1","text":"no","why":"red CI"}"#
            )
            .unwrap(),
            (
                "concierge-reply",
                json!({ "id": "a1", "text": "no", "why": "red CI" })
            )
        );
        assert_eq!(
            request("concierge_policy", "").unwrap(),
            ("concierge-policy", json!({}))
        );
        assert_eq!(
            request("concierge_act", r#"{"what":"respawn","id":"a1"}"#).unwrap(),
            ("concierge-act", json!({ "what": "respawn", "id": "a1" }))
        );
        assert_eq!(
            request(
                "concierge_act",
                r#"{"what":"dispatch","profile":"p","task":"t"}"#
            )
            .unwrap(),
            (
                "concierge-act",
                json!({ "what": "dispatch", "launch": { "profile": "p", "task": "t", "name": null } })
            )
        );
        assert_eq!(
            request("concierge_orders", "{}").unwrap(),
            ("concierge-order", json!({ "action": "list" }))
        );
        assert_eq!(
            request(
                "concierge_order_add",
                r#"{"text":"check CI","when":"every 30m"}"#
            )
            .unwrap(),
            (
                "concierge-order",
                json!({ "action": "add", "text": "check CI", "when": "every 30m" })
            )
        );
        assert_eq!(
            request("concierge_order_rm", r#"{"id":"2"}"#).unwrap(),
            ("concierge-order", json!({ "action": "rm", "id": 2 }))
        );
        assert_eq!(
            request("concierge_order_applied", r#"{"id":3}"#).unwrap(),
            (
                "concierge-order",
                json!({ "action": "applied", "id": 3, "text": null })
            )
        );
    }

    #[test]
    fn arguments_that_do_not_fit_are_named() {
        let e = request("concierge_say", r#"{"kind":"shout","text":"x"}"#).unwrap_err();
        assert_eq!(
            e.to_string(),
            "bad_arguments: concierge_say: `kind` is info, need or answer, not \"shout\""
        );
        let e = request("concierge_reply", r#"{"id":"a1"}"#).unwrap_err();
        assert!(
            e.to_string().contains("`text` (a string) is required"),
            "{e}"
        );
        let e = request("concierge_act", r#"{"what":"stop"}"#).unwrap_err();
        assert!(e.to_string().contains("`id`"), "{e}");
        let e = request("concierge_act", r#"{"what":"stop","id":"a","profile":"p"}"#).unwrap_err();
        assert!(e.to_string().contains("`profile` is for dispatch"), "{e}");
        let e = request(
            "concierge_act",
            r#"{"what":"dispatch","id":"a","profile":"p"}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("`id` is for stop"), "{e}");
        let e = request("concierge_act", r#"{"what":"rm","id":"a"}"#).unwrap_err();
        assert!(e.to_string().contains("stop, respawn or dispatch"), "{e}");
        let e = request("concierge_order_rm", r#"{"id":0}"#).unwrap_err();
        assert!(
            e.to_string().contains("an order id (a positive integer)"),
            "{e}"
        );
        let e = request("concierge_order_applied", "{}").unwrap_err();
        assert!(e.to_string().contains("(an order id) is required"), "{e}");
        assert!(matches!(
            request("concierge_x", "{}"),
            Err(RoostToolError::UnknownTool(_))
        ));
    }

    #[tokio::test]
    async fn outside_a_roost_jobs_turn_nothing_is_sent() {
        let tools = ConciergeTools::new(Arc::default());
        let e = tools
            .run("concierge_policy", "{}", "nipxx:abc")
            .await
            .unwrap_err();
        assert!(
            e.starts_with("unsupported: concierge_policy is the roost concierge's"),
            "{e}"
        );
        let e = tools
            .run("concierge_say", "{}", "roost:j1")
            .await
            .unwrap_err();
        assert!(e.starts_with("bad_arguments: "), "arguments first: {e}");
    }
}
