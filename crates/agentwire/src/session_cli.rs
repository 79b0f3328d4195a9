//! `agentwire session`: an operator's tools over the fisk-ai conversations in the journal this data dir
//! serves from (the spec's `fisk session`, "on the worker holding the journal"): `list`, `show`, `answer`
//! and `rm`.
//!
//! - The journal never holds a conversation token (it is the caller's credential, journaled only as a
//!   hash), so `list` names conversations by their id (`fisk:` and that hash), which is no credential;
//!   `show` and `rm` take the id or the token, and `answer` the token, as a `request.answer` does.
//! - `list` and `show` read the journal `serve` opens with the same config: the SQLite file read-only
//!   beside a daemon that writes it (WAL lets a reader in), or the JetStream buckets.
//! - `answer` sends a `request.answer` to the fisk-ai worker serving this data dir (as `serving.json`
//!   names it, or `--nats` and `--identity`) and follows the run as `ask --nats` does: the run goes on in
//!   the daemon. With no worker it is refused, since nothing could run the rest of the turn.
//! - `rm` removes a conversation. The SQLite journal is the daemon's alone, so `rm` takes the data dir as
//!   `serve` does and is refused while a daemon serves it. A JetStream journal is shared by design: `rm`
//!   claims the conversation as a turn does (no instance starts one meanwhile) and is refused while a turn
//!   of it runs anywhere.

mod state;

use crate::config::{self, FileConfig, JournalChoice};
use crate::data_dir_lock::DataDirLock;
use crate::serving::Serving;
use crate::tabular::{cell, columns};
use agentwire_core::ConversationId;
use agentwire_fisk::conversation::{conversation_id, ConversationMeta};
use agentwire_fisk::wire::{self, AnswerField, ElicitChoice, QuestionKind};
use agentwire_store::{Journal, Removed};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{json, Value};
use state::{read, time, turn_json, Read, State};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// The protocol fisk-ai journals its turns under.
const FISK: &str = "fisk";
/// The longest conversation token the wire takes.
const MAX_TOKEN_CHARS: usize = 128;
/// Exit code of `show`, `answer` and `rm` for a conversation the journal does not hold.
const EXIT_UNKNOWN: u8 = 3;

/// `session` flags.
#[derive(Debug, Args)]
pub(crate) struct SessionArgs {
    /// NATS servers (comma-separated; `[nats]` in the config gives credentials and TLS): the JetStream
    /// journal's when `[journal]` names none (as `serve --nats`), and the worker `answer` sends to.
    #[arg(long, global = true)]
    nats: Option<String>,
    #[command(subcommand)]
    command: SessionCommand,
}

#[derive(Debug, Subcommand)]
enum SessionCommand {
    /// The fisk-ai conversations in the journal, most recently active first: turns, usage, state.
    #[command(after_help = "Example:\n  agentwire session list --limit 20")]
    List {
        /// One JSON object per conversation, a line each.
        #[arg(long)]
        json: bool,
        /// The most conversations to list.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// One conversation: its turns, usage, and the call it waits on with its question.
    #[command(
        after_help = "Example (the id `session list` printed):\n  agentwire session show fisk:3f9a…"
    )]
    Show {
        /// Its id (`fisk:…`, as `list` prints it) or its token.
        conversation: String,
        /// As one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Answer the call a parked conversation waits on: the run goes on in the daemon (`request.answer`).
    #[command(
        after_help = "Example (the token `ask --nats` printed as `conversation <token>`, the call `session show` printed):\n  agentwire session answer 3Hzmp8VqrKL42NmXcPd7bTgWfR1 call_1 once"
    )]
    Answer {
        /// The conversation token (the journal holds only its hash, so the id will not do).
        token: String,
        /// The call it waits on (`show` prints it).
        call_id: String,
        /// The answer: text for input, the option for select, yes or no for confirm, no, once or always
        /// for an approval.
        answer: String,
        /// The question's kind, when it cannot be told from the call (default: from the call's tool).
        #[arg(long, value_enum)]
        kind: Option<Kind>,
        /// The worker's identity (default: the one serving this data dir).
        #[arg(long)]
        identity: Option<String>,
        /// Seconds to wait for each next message of the run.
        #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..))]
        timeout: u64,
    },
    /// Remove a conversation from the journal: a later request naming it is `unknown_conversation`.
    #[command(
        after_help = "Example (with the daemon stopped):\n  agentwire session rm fisk:3f9a…"
    )]
    Rm {
        /// Its id (`fisk:…`) or its token.
        conversation: String,
    },
}

/// A question's kind, as `request.answer` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Kind {
    Approve,
    Confirm,
    Select,
    Input,
}

/// Runs `session`.
pub(crate) async fn run(
    args: SessionArgs,
    data_dir: &Path,
    file: &FileConfig,
    env: &config::Environment,
) -> Result<ExitCode, String> {
    let choice = config::journal_in_force(args.nats.as_deref(), file, env)?;
    match args.command {
        SessionCommand::List { json, limit } => list(&choice, data_dir, json, limit).await,
        SessionCommand::Show { conversation, json } => {
            show(&choice, data_dir, &conversation, json).await
        }
        SessionCommand::Answer {
            token,
            call_id,
            answer,
            kind,
            identity,
            timeout,
        } => {
            let said = Said {
                call_id,
                answer,
                kind,
            };
            let worker = Worker {
                nats: args.nats.as_deref(),
                identity: identity.as_deref(),
                timeout: Duration::from_secs(timeout),
            };
            answer_call(&choice, data_dir, file, &token, said, worker).await
        }
        SessionCommand::Rm { conversation } => rm(&choice, data_dir, &conversation).await,
    }
}

/// The journal as this command holds it.
struct Opened {
    journal: Arc<dyn Journal>,
    /// Whether a turn without an outcome may still be running: a daemon serves the data dir, or the
    /// journal is shared. Otherwise it was cut off (the next `serve` ends it).
    live: bool,
    /// The data dir, held while `rm` writes the SQLite journal.
    _lock: Option<DataDirLock>,
}

impl Opened {
    async fn close(self) {
        self.journal.close().await;
    }
}

/// Opens the journal `choice` names: to read (SQLite read-only, beside a daemon), or to remove from
/// (SQLite only with the data dir held, as `serve` holds it).
async fn open(choice: &JournalChoice, data_dir: &Path, remove: bool) -> Result<Opened, String> {
    match choice {
        JournalChoice::Sqlite => {
            let path = data_dir.join(crate::serve::JOURNAL_FILE);
            if !path.exists() {
                return Err(format!(
                    "no journal in data dir {} (nothing was served from it yet)",
                    data_dir.display()
                ));
            }
            let served = Serving::find(data_dir).is_ok();
            if !remove && served {
                // Beside the daemon that writes it: read-only, which WAL lets in.
                let j = agentwire_store::SqliteJournal::open_read_only(&path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                return Ok(Opened {
                    journal: Arc::new(j),
                    live: true,
                    _lock: None,
                });
            }
            if !remove {
                // No daemon: opened as `serve` opens it, and closed as cleanly (no -wal or -shm left).
                let j = agentwire_store::SqliteJournal::open(&path)
                    .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
                return Ok(Opened {
                    journal: Arc::new(j),
                    live: false,
                    _lock: None,
                });
            }
            let lock = DataDirLock::take(data_dir).map_err(|e| held(data_dir, e))?;
            let j = agentwire_store::SqliteJournal::open(&path)
                .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
            Ok(Opened {
                journal: Arc::new(j),
                live: false,
                _lock: Some(lock),
            })
        }
        JournalChoice::JetStream(shared) => {
            let client = shared
                .nats
                .connect("agentwire session")
                .await
                .map_err(|e| format!("[journal] {e}"))?;
            let config = agentwire_store::jetstream::JetStreamConfig {
                prefix: shared.prefix.clone(),
                replicas: shared.replicas,
                lease: shared.lease,
            };
            let j = agentwire_store::jetstream::JetStreamJournal::open(client, &config)
                .await
                .map_err(|e| format!("[journal] {e}"))?;
            Ok(Opened {
                journal: Arc::new(j),
                live: true,
                _lock: None,
            })
        }
    }
}

/// Why `rm` cannot take the data dir: said as what the operator does about it when a daemon holds it.
fn held(data_dir: &Path, e: String) -> String {
    let Some(holder) = e
        .split_once("in use by another agentwire serve (")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(who, _)| who.to_string())
    else {
        return e;
    };
    format!(
        "data dir {} is in use by agentwire serve ({holder}), which holds its SQLite journal alone and would not see a conversation removed under it: stop the daemon, run `agentwire session rm` again, then start it",
        data_dir.display()
    )
}

/// The conversation `arg` names: an id as `list` prints it, or a token.
fn conversation_of(arg: &str) -> Result<ConversationId, String> {
    if arg.starts_with("fisk:") {
        return ConversationId::new(arg).map_err(|e| format!("conversation {arg:?}: {e}"));
    }
    check_token(arg)?;
    Ok(conversation_id(arg))
}

/// A token as the wire takes one (without saying it back: it is a credential).
fn check_token(token: &str) -> Result<(), String> {
    let fits = (1..=MAX_TOKEN_CHARS).contains(&token.len())
        && token
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    match fits {
        true => Ok(()),
        false => Err(format!(
            "not a conversation token or id: a token is 1-{} of A-Z a-z 0-9 - _, an id starts with fisk:",
            MAX_TOKEN_CHARS
        )),
    }
}

async fn list(
    choice: &JournalChoice,
    data_dir: &Path,
    as_json: bool,
    limit: usize,
) -> Result<ExitCode, String> {
    let opened = open(choice, data_dir, false).await?;
    let listed = list_in(&opened, limit).await;
    opened.close().await;
    let mut reads = listed?;
    reads.sort_by_key(|r| std::cmp::Reverse(r.last_activity()));
    if as_json {
        for r in &reads {
            println!("{}", r.summary());
        }
        return Ok(ExitCode::SUCCESS);
    }
    if reads.is_empty() {
        eprintln!("no fisk-ai conversations in the journal");
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = reads
        .iter()
        .map(|r| {
            let (usage, _) = r.view.usage();
            vec![
                r.id.to_string(),
                r.view.turns.len().to_string(),
                usage.input_tokens.to_string(),
                usage.output_tokens.to_string(),
                r.state.line(),
                time(r.last_activity()),
            ]
        })
        .collect();
    print!(
        "{}",
        columns(
            &[
                "CONVERSATION",
                "TURNS",
                "IN",
                "OUT",
                "STATE",
                "LAST ACTIVITY"
            ],
            &rows
        )
    );
    Ok(ExitCode::SUCCESS)
}

async fn list_in(opened: &Opened, limit: usize) -> Result<Vec<Read>, String> {
    let ids = opened
        .journal
        .conversations(FISK.into(), limit)
        .await
        .map_err(|e| format!("cannot list the journal's conversations: {e}"))?;
    let mut reads = Vec::with_capacity(ids.len());
    for id in ids {
        reads.push(read(opened.journal.as_ref(), id, opened.live).await?);
    }
    Ok(reads)
}

/// The conversation, or the exit for one the journal does not hold.
fn known(r: &Read) -> Option<ExitCode> {
    if r.view.turns.is_empty() && r.meta.is_none() {
        eprintln!(
            "agentwire: no conversation {} in the journal (removed, or never here)",
            r.id
        );
        return Some(ExitCode::from(EXIT_UNKNOWN));
    }
    None
}

async fn show(
    choice: &JournalChoice,
    data_dir: &Path,
    arg: &str,
    as_json: bool,
) -> Result<ExitCode, String> {
    let id = conversation_of(arg)?;
    let opened = open(choice, data_dir, false).await?;
    let got = read(opened.journal.as_ref(), id, opened.live).await;
    opened.close().await;
    let r = got?;
    if let Some(code) = known(&r) {
        return Ok(code);
    }
    let turns: Vec<Value> = r.view.turns.iter().map(|t| turn_json(&t.turn)).collect();
    let meta = r
        .meta
        .clone()
        .and_then(|m| serde_json::from_value::<ConversationMeta>(m).ok());
    if as_json {
        let mut v = r.summary();
        v["turns"] = turns.into();
        if let Some(m) = &meta {
            v["model"] = m.fingerprint.model.as_str().into();
            v["tools"] = json!(m.tools);
            v["approvals"] = json!(m.approvals);
            v["max_tokens"] = json!(m.max_tokens);
        }
        println!("{v}");
        return Ok(ExitCode::SUCCESS);
    }
    let (usage, tool_calls) = r.view.usage();
    println!("conversation  {}", r.id);
    println!("state         {}", r.state.word());
    println!(
        "usage         {} in, {} out, {tool_calls} tool calls",
        usage.input_tokens, usage.output_tokens
    );
    println!("last activity {}", time(r.last_activity()));
    if let Some(m) = &meta {
        println!("model         {}", m.fingerprint.model);
        if !m.approvals.is_empty() {
            println!("approved      {}", m.approvals.join(", "));
        }
        if let Some(max) = m.max_tokens {
            println!("allowance     {max} tokens");
        }
    }
    match &r.state {
        State::Parked(w) => {
            println!(
                "waiting       call {} ({})",
                w.call_id.as_deref().unwrap_or("-"),
                w.code
            );
            if let Some(tool) = &w.tool {
                let asked = w
                    .question
                    .as_ref()
                    .map(agentwire_core::arguments_summary)
                    .unwrap_or_default();
                println!("question      {}: {}", cell(tool, 64), cell(&asked, 200));
            }
        }
        State::Running(id) => println!("running       {id}"),
        State::Interrupted(id) => {
            println!("interrupted   {id} (no daemon serves the journal; the next serve ends it)")
        }
        _ => {}
    }
    println!();
    let rows: Vec<Vec<String>> = r
        .view
        .turns
        .iter()
        .map(|t| {
            let v = turn_json(&t.turn);
            vec![
                time(t.turn.accepted_at),
                cell(v["prompt"].as_str().unwrap_or(""), 50),
                cell(v["outcome"].as_str().unwrap_or(""), 70),
            ]
        })
        .collect();
    print!("{}", columns(&["ACCEPTED", "PROMPT", "OUTCOME"], &rows));
    Ok(ExitCode::SUCCESS)
}

/// What the operator said to a call.
struct Said {
    call_id: String,
    answer: String,
    kind: Option<Kind>,
}

/// Where `answer` sends.
struct Worker<'a> {
    nats: Option<&'a str>,
    identity: Option<&'a str>,
    timeout: Duration,
}

async fn answer_call(
    choice: &JournalChoice,
    data_dir: &Path,
    file: &FileConfig,
    token: &str,
    said: Said,
    worker: Worker<'_>,
) -> Result<ExitCode, String> {
    if token.starts_with("fisk:") {
        return Err(format!(
            "`session answer` takes the conversation's token, not its id ({token}): the answer continues the run over fisk-ai, which asks for the token, and the journal keeps only the token's hash (the id). The token is what `ask --nats` printed as `conversation <token>`; whoever holds it answers"
        ));
    }
    check_token(token)?;
    let serving = Serving::find(data_dir);
    let named_identity = || {
        worker
            .identity
            .or_else(|| serving.as_ref().ok().and_then(|s| s.nats_identity()))
            .ok_or("name the worker with --identity")
    };
    // Servers as the other client commands take them: --nats, else [nats] url or a NATS context's url
    // (--nats-context, [nats] context), else those of the serve running on this data dir.
    let configured = file.nats.url.is_some() || file.nats.context.is_some();
    let (nats, identity) = match (worker.nats, &serving) {
        (Some(url), _) => (config::client_nats(url, file)?, named_identity()?.to_string()),
        (None, _) if configured => (
            config::client_nats_in_force(None, file)?,
            named_identity()?.to_string(),
        ),
        (None, Ok(s)) => match (s.nats_url(), worker.identity.or(s.nats_identity())) {
            (Some(url), Some(identity)) => (config::client_nats(url, file)?, identity.to_string()),
            _ => {
                return Err(format!(
                    "the agentwire serving data dir {} runs no fisk-ai worker, and an answer continues the run in one: start it with --nats and --identity",
                    data_dir.display()
                ))
            }
        },
        (None, Err(_)) => {
            return Err(format!(
                "no agentwire is serving data dir {}: an answer continues the run, and only a running fisk-ai worker can run it; start `agentwire serve --nats URL --identity NAME` on this data dir (the run continues there), or name a worker with --nats and --identity",
                data_dir.display()
            ))
        }
    };
    let kind = match said.kind {
        Some(k) => k,
        None => kind_from_journal(choice, data_dir, token, &said.call_id).await,
    };
    let answer = wire_answer(&said, kind)?;
    crate::fisk_cli::follow(
        &nats,
        &identity,
        crate::fisk_cli::Sending::Answer { token, answer },
        worker.timeout,
    )
    .await
}

/// The kind of the question call `call_id` asked, as the journal tells it: the demo's question tools are
/// named after their kinds, and an approval parks its run suspended rather than deferred. Input when the
/// journal cannot tell (`--kind` says otherwise).
async fn kind_from_journal(
    choice: &JournalChoice,
    data_dir: &Path,
    token: &str,
    call_id: &str,
) -> Kind {
    let Ok(opened) = open(choice, data_dir, false).await else {
        return Kind::Input;
    };
    let got = read(opened.journal.as_ref(), conversation_id(token), true).await;
    opened.close().await;
    let Ok(Read {
        state: State::Parked(w),
        ..
    }) = got
    else {
        return Kind::Input;
    };
    if w.call_id.as_deref() != Some(call_id) {
        return Kind::Input;
    }
    match w.tool.as_deref() {
        Some("confirm") => Kind::Confirm,
        Some("select") => Kind::Select,
        Some("input") => Kind::Input,
        _ if w.code == "suspended" => Kind::Approve,
        _ => Kind::Input,
    }
}

/// The `answer` object of a `request.answer`.
fn wire_answer(said: &Said, kind: Kind) -> Result<wire::Answer, String> {
    let text = said.answer.trim();
    let mut a = wire::Answer {
        tool_use_id: said.call_id.clone(),
        kind: QuestionKind::Input,
        answer: AnswerField::Value,
        choice: None,
        confirmed: None,
        value: None,
    };
    match kind {
        Kind::Approve => {
            a.kind = QuestionKind::Approve;
            a.answer = AnswerField::Choice;
            a.choice = Some(match text {
                "no" => ElicitChoice::No,
                "once" => ElicitChoice::Once,
                "always" => ElicitChoice::Always,
                other => return Err(format!("an approval is no, once or always, not {other:?}")),
            });
        }
        Kind::Confirm => {
            a.kind = QuestionKind::Confirm;
            a.answer = AnswerField::Confirmed;
            a.confirmed = Some(match text.to_ascii_lowercase().as_str() {
                "yes" | "y" | "true" => true,
                "no" | "n" | "false" => false,
                other => return Err(format!("a confirmation is yes or no, not {other:?}")),
            });
        }
        Kind::Select | Kind::Input => {
            a.kind = match kind {
                Kind::Select => QuestionKind::Select,
                _ => QuestionKind::Input,
            };
            a.value = Some(said.answer.clone());
        }
    }
    Ok(a)
}

async fn rm(choice: &JournalChoice, data_dir: &Path, arg: &str) -> Result<ExitCode, String> {
    let id = conversation_of(arg)?;
    let opened = open(choice, data_dir, true).await?;
    let removed = remove_in(&opened, &id).await;
    opened.close().await;
    match removed? {
        None => {
            eprintln!("agentwire: no conversation {id} in the journal (removed, or never here)");
            Ok(ExitCode::from(EXIT_UNKNOWN))
        }
        Some(Removed::Gone { turns }) => {
            println!("removed conversation {id} ({turns} turns)");
            Ok(ExitCode::SUCCESS)
        }
        Some(Removed::Busy(turn)) => Err(format!(
            "conversation {id} has a turn running ({turn}); nothing was removed: wait for it to end and run this again"
        )),
    }
}

/// Removes conversation `id`: `None` when the journal does not hold it.
async fn remove_in(opened: &Opened, id: &ConversationId) -> Result<Option<Removed>, String> {
    let j = opened.journal.as_ref();
    let r = read(j, id.clone(), opened.live).await?;
    if r.view.turns.is_empty() && r.meta.is_none() {
        return Ok(None);
    }
    j.remove_conversation(id.clone())
        .await
        .map(Some)
        .map_err(|e| format!("cannot remove conversation {id}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_or_an_id_names_a_conversation_and_a_bad_one_is_not_said_back() {
        let token = "3Hzmp8VqrKL42NmXcPd7bTgWfR1";
        assert_eq!(conversation_of(token).unwrap(), conversation_id(token));
        let id = conversation_id(token);
        assert_eq!(conversation_of(id.as_str()).unwrap(), id);
        let e = conversation_of("secret token with spaces").unwrap_err();
        assert!(!e.contains("secret"), "{e}");
    }

    #[test]
    fn times_are_to_the_second_and_a_held_data_dir_says_what_to_do() {
        assert_eq!(time(0), "1970-01-01T00:00:00Z");
        let e = held(
            Path::new("/d"),
            "data dir /d is in use by another agentwire serve (pid 7); stop it, or give this one its own --data-dir".into(),
        );
        assert!(
            e.starts_with("data dir /d is in use by agentwire serve (pid 7), which holds")
                && e.contains("stop the daemon")
                && !e.contains("--data-dir"),
            "{e}"
        );
        assert_eq!(
            held(Path::new("/d"), "cannot open x".into()),
            "cannot open x"
        );
    }

    #[test]
    fn an_answer_fits_its_kind() {
        let said = |answer: &str| Said {
            call_id: "call_1".into(),
            answer: answer.into(),
            kind: None,
        };
        let a = wire_answer(&said("once"), Kind::Approve).unwrap();
        assert_eq!(a.choice, Some(ElicitChoice::Once));
        assert!(a.decision().is_ok());
        let a = wire_answer(&said("Yes"), Kind::Confirm).unwrap();
        assert_eq!(a.confirmed, Some(true));
        let a = wire_answer(&said("green"), Kind::Select).unwrap();
        assert_eq!(
            (a.kind, a.value.as_deref()),
            (QuestionKind::Select, Some("green"))
        );
        assert!(wire_answer(&said("maybe"), Kind::Approve).is_err());
        assert!(wire_answer(&said("maybe"), Kind::Confirm).is_err());
    }
}
