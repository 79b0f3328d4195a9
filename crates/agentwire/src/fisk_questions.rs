//! fisk-ai questions put to the person at the terminal for `ask --nats`: an answer that does not fit is
//! never taken as a refusal; the person is told why and asked again. Lines come from one reader thread, so
//! a question abandoned mid-read (Ctrl-C, a timeout) leaves nothing that holds up the process's exit.

use crate::ask_deadline::AskDeadline;
use agentwire_fisk::client::Reply;
use agentwire_fisk::wire::ElicitChoice;
use serde_json::Value;
use std::io::{BufRead, Write};
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
}

impl Person {
    /// The person at this process's terminal; time they spend on questions is kept off `deadline`.
    pub(crate) fn new(deadline: Arc<AskDeadline>) -> Arc<Person> {
        let (tx, rx) = mpsc::unbounded_channel();
        Arc::new(Person {
            lines: tokio::sync::Mutex::new(rx),
            unstarted: Mutex::new(Some(tx)),
            deadline,
        })
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
        eprint!("{prompt}");
        let _ = std::io::stderr().flush();
        let line = self.lines.lock().await.recv().await?;
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
        let text = |k: &str| q[k].as_str().unwrap_or("").to_string();
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
                    eprintln!("  {}) {o}", i + 1);
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

    #[test]
    fn approve_defaults_to_no_and_refuses_anything_else() {
        assert_eq!(approve(""), Ok(ElicitChoice::No));
        assert_eq!(approve("once"), Ok(ElicitChoice::Once));
        assert_eq!(approve("A"), Ok(ElicitChoice::Always));
        assert!(approve("maybe").is_err());
    }
}
