//! fisk-ai questions put to the person at the terminal for `ask --nats`: an answer that does not fit is
//! never taken as a refusal; the person is told why and asked again. Lines come from one reader thread, so
//! a question abandoned mid-read (Ctrl-C, a timeout, an answer given elsewhere) leaves nothing that holds
//! up the process's exit. [`OnScreen`] follows the question on screen through the reply set and says when
//! somebody else settled it, who and with what as far as the worker tells.

use crate::ask_deadline::AskDeadline;
use crate::tabular::printable;
use agentwire_fisk::client::{settles, Received, Reply};
use agentwire_fisk::wire::ElicitChoice;
use agentwire_fisk::worker::WARNING_QUESTION_ANSWERED;
use serde_json::Value;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// The person at the terminal.
#[derive(Debug)]
pub(crate) struct Person {
    /// Lines typed, from the reader thread; closed at end of input.
    lines: tokio::sync::Mutex<mpsc::UnboundedReceiver<String>>,
    /// The reader thread's end, until the first question starts the thread.
    unstarted: Mutex<Option<mpsc::UnboundedSender<String>>>,
    /// Kept still while a question is with the person.
    deadline: Arc<AskDeadline>,
    /// A question was taken off the screen unanswered: lines typed for it until the next one is asked are
    /// not answers to that one.
    abandoned: AtomicBool,
}

impl Person {
    /// The person at this process's terminal; time they spend on questions is kept off `deadline`.
    pub(crate) fn new(deadline: Arc<AskDeadline>) -> Arc<Person> {
        let (tx, rx) = mpsc::unbounded_channel();
        Arc::new(Person {
            lines: tokio::sync::Mutex::new(rx),
            unstarted: Mutex::new(Some(tx)),
            deadline,
            abandoned: AtomicBool::new(false),
        })
    }

    /// The question on screen was settled elsewhere: what was typed for it is dropped at the next one.
    pub(crate) fn abandoned(&self) {
        self.abandoned.store(true, Ordering::SeqCst);
    }

    /// Prints `prompt` and reads a line; `None` at end of input.
    pub(crate) async fn read_line(&self, prompt: &str) -> Option<String> {
        if let Some(tx) = self.unstarted.lock().ok().and_then(|mut u| u.take()) {
            // A plain thread, not the runtime's blocking pool: the runtime waits for its pool when it shuts
            // down, and a read nobody wants any more would hold the process open.
            std::thread::spawn(move || {
                for line in std::io::stdin().lock().lines() {
                    let Ok(line) = line else { return };
                    if tx.send(line).is_err() {
                        return;
                    }
                }
            });
        }
        let mut lines = self.lines.lock().await;
        if self.abandoned.swap(false, Ordering::SeqCst) {
            while lines.try_recv().is_ok() {}
        }
        eprint!("{prompt}");
        let _ = std::io::stderr().flush();
        let line = lines.recv().await?;
        Some(line.trim_end_matches('\r').to_string())
    }

    /// Puts a question (an `elicit.request.*` message) to the person, asking again until an answer fits.
    pub(crate) async fn ask(self: Arc<Self>, q: Value) -> Reply {
        let _paused = self.deadline.pause();
        let kind = q["protocol"]
            .as_str()
            .unwrap_or("")
            .rsplit('.')
            .next()
            .unwrap_or("")
            .to_string();
        // The worker's words (a model's, a peer's): read at the prompt, never obeyed by the terminal.
        let text = |k: &str| crate::tabular::printable(q[k].as_str().unwrap_or(""));
        match kind.as_str() {
            "approve" => {
                eprintln!("[approval] run: {}", text("display"));
                self.until_fits("allow? [no/once/always] ", |a| {
                    approve(a).map(Reply::Approve)
                })
                .await
            }
            "confirm" => {
                eprintln!("[question] {}", text("question"));
                self.until_fits("[y/n] ", |a| confirm(a).map(Reply::Confirm))
                    .await
            }
            "select" => {
                eprintln!("[question] {}", text("question"));
                let options: Vec<String> = q["options"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|o| o.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                for (i, o) in options.iter().enumerate() {
                    eprintln!("  {}) {}", i + 1, crate::tabular::printable(o));
                }
                self.until_fits("choose a number: ", |a| {
                    select(a, &options).map(Reply::Select)
                })
                .await
            }
            _ => {
                eprintln!("[question] {}", text("question"));
                match self.read_line("> ").await {
                    None => Reply::NoOperator,
                    Some(a) => Reply::Input(a),
                }
            }
        }
    }

    /// Reads answers until `fits` takes one, saying why each other one was not taken; end of input is
    /// `no_operator`.
    async fn until_fits(
        &self,
        prompt: &str,
        fits: impl Fn(&str) -> Result<Reply, String>,
    ) -> Reply {
        loop {
            let Some(a) = self.read_line(prompt).await else {
                return Reply::NoOperator;
            };
            match fits(&a) {
                Ok(r) => return r,
                Err(why) => eprintln!("{why}"),
            }
        }
    }
}

/// The question on screen, followed through the reply set as the caller follows it ([`settles`]): the
/// worker's [`WARNING_QUESTION_ANSWERED`] warning says who answered and with what; the call's result, a
/// next question or the set's end say only that it was settled. Pure: [`OnScreen::heard`] gives the lines
/// to print.
#[derive(Debug, Default)]
pub(crate) struct OnScreen {
    open: Option<Shown>,
    /// The question last taken off the screen, and whether the person had answered it: a warning naming it
    /// that comes after says who was first.
    last: Option<(String, bool)>,
}

#[derive(Debug)]
struct Shown {
    /// Its `elicit.request.*` message.
    question: Value,
    /// The person's answer went out.
    answered: bool,
}

/// What [`OnScreen::heard`] makes of a message.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Heard {
    /// Lines for stderr.
    pub(crate) lines: Vec<String>,
    /// The question on screen was settled elsewhere: stop asking it.
    pub(crate) abandoned: bool,
    /// The message says nothing more than these lines (the worker's warning): not shown again.
    pub(crate) consumed: bool,
}

impl OnScreen {
    /// The person answered `question_id` (their answer is being sent).
    pub(crate) fn answered(&mut self, question_id: &str) {
        if let Some(s) = self
            .open
            .as_mut()
            .filter(|s| s.question["question_id"] == question_id)
        {
            s.answered = true;
        }
    }

    /// A message of the reply set, as `on` sees it (before a question is put to the person).
    pub(crate) fn heard(&mut self, m: &Received) -> Heard {
        let mut heard = Heard::default();
        let block = &m.json["block"];
        let warned = m.kind() == "event.warning" && block["kind"] == WARNING_QUESTION_ANSWERED;
        let said = warned.then(|| {
            let params: Vec<&str> = block["params"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let who = printable(params.first().copied().unwrap_or("somebody"));
            match params.get(1) {
                Some(what) => format!("answered elsewhere by {who}: {}", printable(what)),
                None => format!("answered elsewhere by {who}"),
            }
        });
        if let Some(s) = self.open.take_if(|s| settles(&s.question, m)) {
            let id = s.question["question_id"].as_str().unwrap_or("").to_string();
            match (&said, s.answered) {
                (Some(said), true) => heard
                    .lines
                    .push(format!("your answer was not taken: {said} first")),
                (Some(said), false) => heard.lines.push(format!("\n{said}")),
                (None, true) => {}
                (None, false) => heard.lines.push(
                    "\nthe question was settled elsewhere (the worker does not say by whom)".into(),
                ),
            }
            heard.abandoned = !s.answered;
            self.last = Some((id, s.answered));
        } else if let Some(said) = &said {
            // About a question no longer on screen: after its end was seen, this says who settled it.
            let named = block["name"].as_str().unwrap_or("");
            heard.lines.push(match &self.last {
                Some((id, true)) if id == named => {
                    format!("your answer was not taken: {said} first")
                }
                Some((id, false)) if id == named => format!("({said})"),
                _ => format!("[{said}]"),
            });
        }
        heard.consumed = warned;
        if m.kind().starts_with("elicit.request.") {
            self.open = Some(Shown {
                question: m.json.clone(),
                answered: false,
            });
        }
        heard
    }
}

/// An approval: `no` (or an empty line), `once` or `always`.
fn approve(a: &str) -> Result<ElicitChoice, String> {
    match a.trim().to_ascii_lowercase().as_str() {
        "once" | "o" | "y" | "yes" => Ok(ElicitChoice::Once),
        "always" | "a" => Ok(ElicitChoice::Always),
        "no" | "n" | "" => Ok(ElicitChoice::No),
        other => Err(format!(
            "{other:?} is not no, once or always; type one of them"
        )),
    }
}

/// A yes or no. Nothing else is taken: a slip must not answer for the person.
fn confirm(a: &str) -> Result<bool, String> {
    match a.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Ok(true),
        "n" | "no" => Ok(false),
        "" => Err("nothing typed; type y or n".into()),
        other => Err(format!("{other:?} is not yes or no; type y or n")),
    }
}

/// An option, by its number (from 1) or its label; its position (from 0) on the wire.
fn select(a: &str, options: &[String]) -> Result<u64, String> {
    let a = a.trim();
    let range = format!("1-{}", options.len());
    match (agentwire_core::typed_option(a, options), a.parse::<u64>()) {
        (Some(i), _) => Ok(i as u64),
        (None, Ok(n)) => Err(format!(
            "{n} is not one of {range}; type a number or an option's label"
        )),
        (None, Err(_)) => Err(format!(
            "{a:?} is not an option; type a number ({range}) or an option's label"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confirm_takes_only_yes_or_no() {
        assert_eq!(confirm("y"), Ok(true));
        assert_eq!(confirm(" YES "), Ok(true));
        assert_eq!(confirm("n"), Ok(false));
        assert_eq!(confirm("No"), Ok(false));
        assert_eq!(
            confirm("maybe"),
            Err("\"maybe\" is not yes or no; type y or n".into())
        );
        assert!(confirm("").is_err());
    }

    #[test]
    fn select_says_why_an_answer_was_not_taken() {
        let o = ["red".to_string(), "green".to_string()];
        assert_eq!(select("2", &o), Ok(1));
        assert_eq!(select("red", &o), Ok(0));
        assert_eq!(select("Green", &o), Ok(1));
        assert_eq!(
            select("3", &o),
            Err("3 is not one of 1-2; type a number or an option's label".into())
        );
        assert!(select("0", &o).is_err());
        assert_eq!(
            select("blue", &o),
            Err("\"blue\" is not an option; type a number (1-2) or an option's label".into())
        );
    }

    fn msg(json: Value) -> Received {
        Received { json, last: false }
    }

    fn question(id: &str) -> Received {
        msg(serde_json::json!({
            "protocol": "io.choria.fisk-ai.v1.elicit.request.approve",
            "question_id": id, "tool_use_id": "call-1", "display": "rm x",
        }))
    }

    fn warning(id: &str, params: &[&str]) -> Received {
        msg(serde_json::json!({
            "protocol": "io.choria.fisk-ai.v1.event.warning",
            "block": {"kind": WARNING_QUESTION_ANSWERED, "name": id, "params": params},
        }))
    }

    fn tool(kind: &str, field: &str, id: &str) -> Received {
        msg(serde_json::json!({
            "protocol": format!("io.choria.fisk-ai.v1.event.{kind}"),
            "block": {field: id, "name": "shell"},
        }))
    }

    #[test]
    fn a_question_settled_elsewhere_is_taken_off_the_screen_saying_who_and_what() {
        let mut s = OnScreen::default();
        assert_eq!(s.heard(&question("q1")), Heard::default());
        let h = s.heard(&warning("q1", &["fisk-ai caller ops", "once"]));
        assert!(h.abandoned && h.consumed);
        assert_eq!(
            h.lines,
            ["\nanswered elsewhere by fisk-ai caller ops: once"]
        );
        // Through the turn API the answer is not told.
        s.heard(&question("q2"));
        let h = s.heard(&warning("q2", &["the turn API (the hub)"]));
        assert_eq!(h.lines, ["\nanswered elsewhere by the turn API (the hub)"]);
    }

    #[test]
    fn only_what_settles_the_question_takes_it_off_the_screen() {
        let mut s = OnScreen::default();
        s.heard(&question("q1"));
        // The call's own start, sent by the run just before it asked, may come after the question.
        assert_eq!(
            s.heard(&tool("tool_call", "id", "call-1")),
            Heard::default()
        );
        assert_eq!(
            s.heard(&tool("tool_result", "call_id", "other")),
            Heard::default()
        );
        let h = s.heard(&tool("tool_result", "call_id", "call-1"));
        assert!(h.abandoned && !h.consumed);
        assert_eq!(
            h.lines,
            ["\nthe question was settled elsewhere (the worker does not say by whom)"]
        );
        // The worker's word that comes after says who.
        let h = s.heard(&warning("q1", &["the turn API (the hub)"]));
        assert!(!h.abandoned && h.consumed);
        assert_eq!(h.lines, ["(answered elsewhere by the turn API (the hub))"]);
        // The set's end settles a question too.
        s.heard(&question("q2"));
        let end = Received {
            json: serde_json::json!({"protocol": "io.choria.fisk-ai.v1.result", "text": "done"}),
            last: true,
        };
        assert!(s.heard(&end).abandoned);
    }

    #[test]
    fn an_answer_given_here_is_not_abandoned_and_one_that_came_second_is_told() {
        let mut s = OnScreen::default();
        s.heard(&question("q1"));
        s.answered("q1");
        let h = s.heard(&tool("tool_result", "call_id", "call-1"));
        assert_eq!(h, Heard::default(), "the run went on with this answer");

        s.heard(&question("q2"));
        s.answered("q2");
        let h = s.heard(&warning("q2", &["the turn API (the hub)"]));
        assert!(!h.abandoned);
        assert_eq!(
            h.lines,
            ["your answer was not taken: answered elsewhere by the turn API (the hub) first"]
        );
    }

    #[test]
    fn approve_defaults_to_no_and_refuses_anything_else() {
        assert_eq!(approve(""), Ok(ElicitChoice::No));
        assert_eq!(approve("once"), Ok(ElicitChoice::Once));
        assert_eq!(approve("A"), Ok(ElicitChoice::Always));
        assert!(approve("maybe").is_err());
    }
}
