//! `agentwire ask --nats`, `cancel --nats`, `read` and `discover`: a fisk-ai caller on the command line.
//! Answers stream to stdout, tool activity and questions go to stderr, and questions are answered at the
//! terminal while the question is held open with `elicit.waiting`. Ctrl-C, or `--timeout` passing, cancels
//! the run, so an abandoned run does not hold a worker slot.

use crate::ask::{EXIT_AGENT_ERROR, EXIT_INTERRUPTED, EXIT_TIMEOUT, EXIT_UNKNOWN_RUN};
use crate::ask_deadline::AskDeadline;
use crate::fisk_questions::{OnScreen, Person};
use crate::tabular::printable;
use agentwire_fisk::client::{
    new_request, AnswerCall, Caller, CancelReply, ClientError, PromptCall, Prompted, Received,
    CANCEL_FOLLOW,
};
use agentwire_fisk::connection::NatsConnect;
use clap::Args;
use serde_json::Value;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

/// The name this client sends as `sender`.
const CALLER_NAME: &str = "agentwire-cli";

/// `--nats-context`, taken by every fisk-ai client command (`ask`, `cancel`, `read`, `discover`, `session`).
#[derive(Debug, Args)]
pub(crate) struct NatsContextArg {
    /// A NATS context of the `nats` CLI's (`~/.config/nats/context/NAME.json`), over `[nats] context`:
    /// its servers, credentials and TLS, each under what --nats and `[nats]` give (with it, `ask` and
    /// `cancel` go over fisk-ai).
    #[arg(long, value_name = "NAME")]
    pub(crate) nats_context: Option<String>,
}

/// `read` flags.
#[derive(Debug, Args)]
pub(crate) struct ReadArgs {
    /// The NATS servers (a comma-separated list). Default: `[nats] url`, else the NATS context's url;
    /// `[nats]` and the context give credentials and TLS.
    #[arg(long)]
    pub(crate) nats: Option<String>,
    /// The worker's identity.
    #[arg(long)]
    identity: String,
    /// How many blocks to read back (the worker caps it at 200).
    #[arg(long, default_value_t = 200)]
    replay: u64,
    /// The conversation token (printed by `ask --nats`).
    token: String,
}

/// `discover` flags.
#[derive(Debug, Args)]
pub(crate) struct DiscoverArgs {
    /// The NATS servers (a comma-separated list). Default: `[nats] url`, else the NATS context's url;
    /// `[nats]` and the context give credentials and TLS.
    #[arg(long)]
    pub(crate) nats: Option<String>,
    /// The worker's identity.
    identity: String,
}

fn err(e: ClientError) -> String {
    e.to_string()
}

/// Why `ask --nats` stopped following a run before it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// Ctrl-C.
    Interrupted,
    /// `--timeout` passed.
    TimedOut,
}

/// What a followed request sends: a prompt (`ask --nats`) or an answer to a parked run's call
/// (`session answer`).
pub(crate) enum Sending<'a> {
    /// `request.prompt`, as a new conversation or, with a token, its next turn.
    Prompt {
        /// The conversation to continue.
        token: Option<&'a str>,
        /// The prompt.
        prompt: &'a str,
        /// Enqueued as a job on the worker's queue (`ask --nats --queue`).
        queued: bool,
    },
    /// `request.answer`: the run goes on with the answer.
    Answer {
        /// The conversation.
        token: &'a str,
        /// The answer, naming the call.
        answer: agentwire_fisk::wire::Answer,
    },
}

/// Sends `sending` and follows the run as `ask --nats` does: the answer on stdout, tool activity and
/// questions on stderr, the outcome's exit code.
pub(crate) async fn follow(
    nats: &NatsConnect,
    identity: &str,
    sending: Sending<'_>,
    timeout: Duration,
) -> Result<ExitCode, String> {
    let caller = Caller::connect_with(nats, CALLER_NAME).await.map_err(err)?;
    let request = new_request();
    let live = std::io::stdout().is_terminal();
    let deadline = AskDeadline::new(timeout);
    let person = Person::new(deadline.clone());
    let stopped = std::sync::OnceLock::new();
    let stop = async {
        let why = tokio::select! {
            Ok(()) = tokio::signal::ctrl_c() => Stop::Interrupted,
            () = deadline.passed() => Stop::TimedOut,
        };
        let _ = stopped.set(why);
    };
    let mut streamed_final = None;
    let mut printed_any = false;
    // The text printed since the last tool call or thought: the answer's final block holds all of it again.
    let mut shown = String::new();
    // The tools called, by call id: a result names only its call.
    let mut tools: std::collections::HashMap<String, String> = Default::default();
    let mut show = |m: &Received| match m.kind() {
        "ack" if m.json["accepted"] == true => eprintln!("run {request}"),
        "event.text" => {
            let text = m.json["block"]["text"].as_str().unwrap_or("");
            let fin = m.json["block"]["final"] == true;
            if fin {
                streamed_final = Some(text.to_string());
            }
            if live {
                let new = unshown(&shown, text, fin);
                print!("{}", printable(new));
                let _ = std::io::stdout().flush();
                shown.push_str(new);
                printed_any = true;
            }
        }
        "event.tool_call" => {
            shown.clear();
            let b = &m.json["block"];
            let name = b["name"].as_str().unwrap_or("?");
            if let Some(id) = b["id"].as_str() {
                tools.insert(id.to_string(), name.to_string());
            }
            eprintln!(
                "{}",
                printable(&agentwire_core::tool_start_line(name, &b["input"]))
            )
        }
        "event.tool_result" => {
            let b = &m.json["block"];
            let name = b["call_id"]
                .as_str()
                .and_then(|id| tools.get(id))
                .map_or("?", String::as_str);
            eprintln!(
                "{}",
                printable(&agentwire_core::tool_result_line(
                    name,
                    b["is_error"] != true,
                    &b["output"]
                ))
            )
        }
        "event.thinking" => eprintln!(
            "[thinking] {}",
            printable(m.json["block"]["text"].as_str().unwrap_or(""))
        ),
        "event.warning" => eprintln!("{}", printable(&warning_line(&m.json["block"]))),
        kind => {
            if let Some(line) = narration(kind, &m.json["block"]) {
                eprintln!("{line}");
            }
        }
    };
    // The question on screen, taken off it when somebody else settles it.
    let screen = std::sync::Arc::new(std::sync::Mutex::new(OnScreen::default()));
    let (watching, asker) = (screen.clone(), person.clone());
    let on = move |m: &Received| {
        let heard = watching.lock().unwrap_or_else(|p| p.into_inner()).heard(m);
        for line in &heard.lines {
            eprintln!("{line}");
        }
        if heard.abandoned {
            asker.abandoned();
        }
        if !heard.consumed {
            show(m);
        }
    };
    let answerer: agentwire_fisk::client::Answerer = Box::new(move |q| {
        let (person, screen) = (person.clone(), screen.clone());
        Box::pin(async move {
            let question_id = q["question_id"].as_str().unwrap_or("").to_string();
            let reply = person.ask(q).await;
            screen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .answered(&question_id);
            reply
        })
    });
    // Each message within the whole run's time: the deadline above is what gives up.
    let result = match sending {
        Sending::Prompt {
            token,
            prompt,
            queued,
        } => {
            let call = PromptCall {
                identity,
                request: &request,
                prompt,
                token,
                timeout,
            };
            match queued {
                true => caller.enqueue_until(call, stop, on, answerer).await,
                false => caller.prompt_until(call, stop, on, answerer).await,
            }
        }
        Sending::Answer { token, answer } => {
            let call = AnswerCall {
                identity,
                request: &request,
                token,
                answer,
                timeout,
            };
            caller.answer_until(call, stop, on, answerer).await
        }
    };
    let p = match result {
        Ok(p) => p,
        Err(ClientError::Timeout(_)) => {
            eprintln!("agentwire: no answer within {timeout:?}");
            return Ok(ExitCode::from(EXIT_TIMEOUT));
        }
        Err(e) => return Err(err(e)),
    };
    if live && printed_any {
        println!();
    }
    let stopped = stopped.get().copied();
    if let Some(why) = stopped {
        say_stopped(why, &p, &request, timeout);
    }
    let code = match p.ended {
        true => say_outcome(&p, live, streamed_final.as_deref()),
        false => ExitCode::SUCCESS,
    };
    let token = p
        .messages
        .first()
        .and_then(|a| a.json["conversation_token"].as_str());
    if let Some(t) = token {
        // A credential for this conversation: shown to the person who owns it, for `--conversation`.
        eprintln!("conversation {t}");
    }
    Ok(match stopped {
        Some(Stop::Interrupted) => ExitCode::from(EXIT_INTERRUPTED),
        Some(Stop::TimedOut) => ExitCode::from(EXIT_TIMEOUT),
        None => code,
    })
}

/// Says why the run was stopped and how the worker took the cancel.
fn say_stopped(why: Stop, p: &Prompted, request: &str, timeout: Duration) {
    if why == Stop::TimedOut {
        eprintln!("agentwire: no answer within {timeout:?}");
    }
    match &p.cancel {
        Some(CancelReply::Taken) => {
            eprintln!("cancel sent for run {request}");
            if !p.ended {
                eprintln!(
                    "agentwire: run {request} has not ended within {CANCEL_FOLLOW:?} of the cancel; \
                     it stops at its next boundary"
                );
            }
        }
        Some(CancelReply::NotRunning) => {
            eprintln!("run {request} is not running on any worker; nothing to cancel")
        }
        Some(CancelReply::Withdrawn) => {
            eprintln!(
                "job {request} was taken off the queue before a worker took it; it will not run"
            )
        }
        Some(CancelReply::StillQueued(why)) => eprintln!(
            "agentwire: job {request} could not be taken off the queue ({why}); it runs when a worker \
             takes it"
        ),
        Some(CancelReply::Failed(e)) => eprintln!(
            "agentwire: could not cancel run {request} ({e}); \
             try `agentwire cancel --nats URL --identity NAME {request}`"
        ),
        None => {}
    }
}

/// What of text block `text` a terminal has not shown yet, given the text `shown` since the last tool
/// call: the final block is the whole answer, whose start may have streamed in earlier blocks.
fn unshown<'a>(shown: &str, text: &'a str, is_final: bool) -> &'a str {
    match is_final {
        true => text.strip_prefix(shown).unwrap_or(text),
        false => text,
    }
}

/// Prints an ended set's outcome (the answer on stdout, an error on stderr, the usage) and its exit code.
fn say_outcome(p: &Prompted, live: bool, streamed_final: Option<&str>) -> ExitCode {
    let last = p
        .messages
        .last()
        .map(|m| m.json.clone())
        .unwrap_or(Value::Null);
    let code = match last["protocol"].as_str().unwrap_or("") {
        proto if proto.ends_with(".result") => {
            let text = last["text"].as_str().unwrap_or("");
            if !live || streamed_final != Some(text) {
                println!("{}", printable(text));
            }
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!(
                "error {}: {}",
                printable(last["code"].as_str().unwrap_or("?")),
                printable(last["error"].as_str().unwrap_or(""))
            );
            ExitCode::from(EXIT_AGENT_ERROR)
        }
    };
    if let Some(u) = last.get("usage").filter(|u| u.is_object()) {
        eprintln!(
            "[usage: {} in, {} out, whole conversation]",
            u["input_tokens"].as_u64().unwrap_or(0),
            u["output_tokens"].as_u64().unwrap_or(0)
        );
    }
    code
}

/// Runs `cancel --nats`: the spec's cancel gets an `ack` from the instance running the request, and a
/// no-responder error when none is: that one cannot tell a run that ended from one that never existed.
pub(crate) async fn cancel(
    nats: &NatsConnect,
    identity: &str,
    request: &str,
) -> Result<ExitCode, String> {
    let caller = Caller::connect_with(nats, CALLER_NAME).await.map_err(err)?;
    match CancelReply::from(caller.cancel(identity, request).await) {
        CancelReply::Taken => {
            eprintln!(
                "cancelled run {request}: the worker running it took the cancel, and it stops \
                 (suspended, to be continued) at its next boundary"
            );
            Ok(ExitCode::SUCCESS)
        }
        // `cancel` sends a cancel only; it never takes a job off a queue.
        CancelReply::NotRunning | CancelReply::Withdrawn | CancelReply::StillQueued(_) => {
            eprintln!(
                "agentwire: run {request} is not running on any worker of {identity}: it already \
                 ended, was never accepted, or never existed (fisk-ai does not say which)"
            );
            Ok(ExitCode::from(EXIT_UNKNOWN_RUN))
        }
        CancelReply::Failed(ClientError::Timeout(_)) => {
            eprintln!("agentwire: cancel sent for run {request}; no instance confirmed it");
            Ok(ExitCode::from(EXIT_TIMEOUT))
        }
        CancelReply::Failed(e) => Err(err(e)),
    }
}

/// Runs `read`.
pub(crate) async fn read(args: ReadArgs, nats: &NatsConnect) -> Result<ExitCode, String> {
    let caller = Caller::connect_with(nats, CALLER_NAME).await.map_err(err)?;
    let set = caller
        .read(&args.identity, &args.token, args.replay)
        .await
        .map_err(err)?;
    if set.first().is_some_and(|a| a.json["accepted"] != true) {
        let last = set.last().map(|m| m.json.clone()).unwrap_or_default();
        eprintln!(
            "error {}: {}",
            last["code"].as_str().unwrap_or("?"),
            last["error"].as_str().unwrap_or("")
        );
        return Ok(ExitCode::from(EXIT_AGENT_ERROR));
    }
    for m in &set[1..] {
        let b = &m.json["block"];
        match m.kind() {
            "event.prompt" => println!("> {}", printable(b["text"].as_str().unwrap_or(""))),
            "event.text" if b["final"] == true => {
                println!("{}", printable(b["text"].as_str().unwrap_or("")))
            }
            "event.tool_call" => println!(
                "{}",
                printable(&agentwire_core::tool_start_line(
                    b["name"].as_str().unwrap_or("?"),
                    &b["input"]
                ))
            ),
            "event.status" if b["phase"] == "replay_end" => eprintln!(
                "[{} blocks{}; usage {} in, {} out]",
                b["count"],
                if b["truncated"] == true {
                    ", older ones left out"
                } else {
                    ""
                },
                b["usage"]["input_tokens"].as_u64().unwrap_or(0),
                b["usage"]["output_tokens"].as_u64().unwrap_or(0)
            ),
            kind => {
                if let Some(line) = narration(kind, b) {
                    eprintln!("{line}");
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The most characters of an event `narration` shows for a kind it does not know.
const UNKNOWN_EVENT_CHARS: usize = 300;

/// The line a person reads on stderr for an event `ask --nats` and `read` do not render otherwise: a model
/// call's usage (`event.status` with `usage`), a delegation (`event.agent_call`), and any event kind this
/// client does not know, shown by its name and fields rather than dropped. None for what is not an event
/// or says nothing (a bare status).
fn narration(kind: &str, block: &serde_json::Value) -> Option<String> {
    let text = |k: &str| block[k].as_str().unwrap_or("?").to_string();
    match kind {
        "event.status" => {
            let u = block.get("usage").filter(|u| u.is_object())?;
            Some(format!(
                "[model call {}: {} in, {} out]",
                block["iteration"].as_u64().unwrap_or(0),
                u["input_tokens"].as_u64().unwrap_or(0),
                u["output_tokens"].as_u64().unwrap_or(0)
            ))
        }
        "event.agent_call" => Some(format!("[asked {} ({})]", text("name"), text("task"))),
        "event.text" | "event.thinking" | "event.tool_call" | "event.tool_result"
        | "event.warning" | "event.prompt" => None,
        other => {
            let name = other.strip_prefix("event.")?;
            let fields = crate::tabular::cell(
                &crate::tabular::printable(&block.to_string()),
                UNKNOWN_EVENT_CHARS,
            );
            Some(format!("[{} {fields}]", crate::tabular::printable(name)))
        }
    }
}

/// The sentence of a warning (`event.warning`): the worker sends its kind and values, the words are this
/// client's (the spec's rule). A kind this client does not know is shown by its name and values.
fn warning_line(block: &Value) -> String {
    use agentwire_fisk::mapping as m;
    let text = |k: &str| block[k].as_str().map(str::to_string);
    let params: Vec<&str> = block["params"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let kind = block["kind"].as_str().unwrap_or("");
    let name = text("name");
    let count = block["count"].as_u64();
    let error = text("error");
    match (kind, name, count, error) {
        (m::WARNING_FILE_POSTED, Some(file), ..) => format!("[posted {file}]"),
        (m::WARNING_HANDOFF, thread, ..) => format!(
            "[handed off to {}]",
            thread.unwrap_or_else(|| "a new thread".into())
        ),
        (m::WARNING_UNKNOWN_TOOL_HINTS, ..) if !params.is_empty() => format!(
            "[warning] tool hints naming no tool of the agent's, left out: {}",
            params.join(", ")
        ),
        (m::WARNING_HISTORY_TRIMMED, _, Some(n), _) => format!(
            "[warning] the {n} oldest turns of this conversation were left out to fit the model's context window"
        ),
        (m::WARNING_MODEL_FALLBACK, Some(model), _, why) => format!(
            "[warning] {}; trying model {model}",
            why.unwrap_or_else(|| "the model call failed".into())
        ),
        (m::WARNING_AGENT, _, _, Some(said)) => format!("[warning] {said}"),
        (agentwire_fisk::worker::WARNING_QUESTION_ANSWERED, ..) => format!(
            "[question {} answered elsewhere by {}]",
            block["name"].as_str().unwrap_or("?"),
            params.first().copied().unwrap_or("somebody")
        ),
        (kind, name, count, error) => {
            let mut line = format!("[warning] {}", if kind.is_empty() { "?" } else { kind });
            for v in name
                .into_iter()
                .chain(count.map(|c| c.to_string()))
                .chain(params.iter().map(|p| p.to_string()))
            {
                line.push(' ');
                line.push_str(&v);
            }
            if let Some(e) = error {
                line.push_str(": ");
                line.push_str(&e);
            }
            crate::tabular::cell(&line, UNKNOWN_EVENT_CHARS)
        }
    }
}

#[cfg(test)]
mod narration_tests {
    use super::{narration, warning_line};
    use serde_json::json;

    #[test]
    fn each_warning_kind_is_worded_here_and_an_unknown_one_shows_its_values() {
        let cases = [
            (json!({"kind": "file_posted", "name": "notes.md"}), "[posted notes.md]"),
            (json!({"kind": "handoff", "name": "deploy"}), "[handed off to deploy]"),
            (json!({"kind": "handoff"}), "[handed off to a new thread]"),
            (
                json!({"kind": "unknown_tool_hints", "params": ["kv", "stream"]}),
                "[warning] tool hints naming no tool of the agent's, left out: kv, stream",
            ),
            (
                json!({"kind": "history_trimmed", "count": 3}),
                "[warning] the 3 oldest turns of this conversation were left out to fit the model's context window",
            ),
            (
                json!({"kind": "model_fallback", "name": "qwen2.5", "error": "m1 is busy"}),
                "[warning] m1 is busy; trying model qwen2.5",
            ),
            (json!({"kind": "agent", "error": "disk nearly full"}), "[warning] disk nearly full"),
            (
                json!({"kind": "question_answered", "name": "q1", "params": ["ops"]}),
                "[question q1 answered elsewhere by ops]",
            ),
            (
                json!({"kind": "tool_removed", "name": "kv", "count": 2, "params": ["x"], "error": "gone"}),
                "[warning] tool_removed kv 2 x: gone",
            ),
        ];
        for (block, line) in cases {
            assert_eq!(warning_line(&block), line, "{block}");
        }
    }

    #[test]
    fn usage_delegations_and_unknown_kinds_are_shown() {
        assert_eq!(
            narration(
                "event.status",
                &json!({"iteration": 2, "phase": "tool_use", "usage": {"input_tokens": 11, "output_tokens": 4}})
            )
            .as_deref(),
            Some("[model call 2: 11 in, 4 out]")
        );
        assert_eq!(
            narration(
                "event.status",
                &json!({"iteration": 1, "phase": "thinking"})
            ),
            None
        );
        assert_eq!(
            narration(
                "event.agent_call",
                &json!({"id": "c1", "name": "reviewer", "task": "j7"})
            )
            .as_deref(),
            Some("[asked reviewer (j7)]")
        );
        assert_eq!(
            narration("event.hologram", &json!({"depth": 3})).as_deref(),
            Some(r#"[hologram {"depth":3}]"#)
        );
        assert_eq!(narration("ack", &json!({})), None);
        assert_eq!(narration("event.text", &json!({"text": "x"})), None);
    }
}

/// Runs `discover`.
pub(crate) async fn discover(args: DiscoverArgs, nats: &NatsConnect) -> Result<ExitCode, String> {
    let caller = Caller::connect_with(nats, CALLER_NAME).await.map_err(err)?;
    let card = caller.discover(&args.identity).await.map_err(err)?;
    println!(
        "{}",
        serde_json::to_string_pretty(&card).unwrap_or_default()
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::unshown;

    #[test]
    fn an_answer_streamed_before_its_final_block_is_shown_once() {
        assert_eq!(unshown("", "The", false), "The");
        assert_eq!(unshown("The", " first words", false), " first words");
        assert_eq!(
            unshown("The first words", "The first words, and the rest.", true),
            ", and the rest."
        );
        assert_eq!(unshown("", "All at once.", true), "All at once.");
        assert_eq!(
            unshown("narration ", "Another answer.", true),
            "Another answer.",
            "a final block that does not continue what was shown is shown whole"
        );
    }
}
