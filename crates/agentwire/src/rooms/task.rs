//! `agentwire task "<text>" --room R`: posts a task card (43001) to the agent serving the room, follows its
//! card to the end (accepted, progress, the result's full text or the error), answers the agent's question
//! cards at the terminal, and exits by the outcome. A task nobody takes is said so, with the reason when
//! the local serve's settings tell it.
//!
//! Only the task's own questions are asked: the cards in the thread rooted at its request. The prompt is a
//! read that can be dropped: the card's settling answer from elsewhere (the relay keeps the first valid
//! one only), or the task's end (a question answered outside the room leaves no answer on the relay),
//! takes the question off the screen, saying who answered what.

use super::cards::{answered_by, card_of, send_answer, shown, task_of};
use super::{tag, RelayTarget, Session};
use crate::ask_deadline::{AskDeadline, Paused};
use crate::fisk_questions::Person;
use agentwire_nostr::relay_conn::Incoming;
use agentwire_tasks::card::{
    TASK_ACCEPTED, TASK_CANCEL, TASK_ERROR, TASK_PROGRESS, TASK_REQUEST, TASK_RESULT,
};
use agentwire_tinyagent::{COMMENT, ROOM_MESSAGE};
use clap::Args;
use nostr::prelude::{Event, EventBuilder, EventId, Filter, Kind, PublicKey, SingleLetterTag, Tag};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// How long a task may wait for its 43002 before `task` says nobody has taken it. The adapter accepts a
/// task when its turn begins, at once unless the agent is busy with others.
const ACCEPT_WAIT: Duration = Duration::from_secs(10);
/// Exit code when the task ended in an error (43006).
const EXIT_FAILED: u8 = 2;
/// Exit code when no end came within `--timeout` (the task is cancelled).
const EXIT_TIMEOUT: u8 = 3;
/// Exit code when no agent took the task and the local serve's settings say why.
const EXIT_NOT_TAKEN: u8 = 4;
/// Exit code after Ctrl-C (the task is cancelled: 43005).
use crate::ask::EXIT_INTERRUPTED;

/// `task` flags.
#[derive(Debug, Args)]
pub(crate) struct TaskArgs {
    #[command(flatten)]
    target: RelayTarget,
    /// The room to post it in.
    #[arg(long)]
    room: String,
    /// The agent to give it to (hex or npub). Default: the local serve's agent.
    #[arg(long)]
    agent: Option<String>,
    /// Seconds to wait for the task's end (at least 1); then it is cancelled. Time spent answering the
    /// agent's questions does not count.
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
    timeout: u64,
    /// The task.
    #[arg(required = true, num_args = 1..)]
    text: Vec<String>,
}

/// Why nobody took the task, when the local serve's settings say: it does not watch the room, or does not
/// take tasks from this key.
fn why_not_taken(s: &Session, agent: &PublicKey, room: &str, me: &PublicKey) -> Option<String> {
    let serving = s.serving.as_ref()?;
    if serving.agent_pubkey() != Some(agent.to_hex().as_str()) {
        return None;
    }
    let Some((watch, allowed)) = serving.tasks() else {
        return Some(
            "the local agentwire takes no task cards ([tasks] watch names no room)".into(),
        );
    };
    if !watch.iter().any(|w| w == room) {
        return Some(format!(
            "the local agentwire does not watch room {room} ([tasks] watch: {})",
            watch.join(", ")
        ));
    }
    if !allowed.contains(&me.to_hex()) {
        return Some(format!(
            "the local agentwire takes tasks only from [tasks] allowed, and your key {} is not there (`agentwire whoami`)",
            crate::keys::npub(me)
        ));
    }
    None
}

/// `agentwire task`.
pub(crate) async fn task(args: TaskArgs, data_dir: &Path) -> Result<ExitCode, String> {
    if !agentwire_tinyagent::valid_room_id(&args.room) {
        return Err(format!("{:?} is not a room id", args.room));
    }
    let mut s = Session::open(&args.target, data_dir).await?;
    let agent = match (
        &args.agent,
        s.serving.as_ref().and_then(|v| v.agent_pubkey()),
    ) {
        (Some(a), _) => crate::keys::parse_public_key(a)?,
        (None, Some(hex)) => crate::keys::parse_public_key(hex)?,
        (None, None) => return Err("no --agent given and the local serve names none".into()),
    };
    let me = s.crypto.public_key();
    let room = args.room.clone();
    let text = args.text.join(" ");

    let request = s
        .publish(
            EventBuilder::new(TASK_REQUEST, text)
                .tags([tag(&["p", &agent.to_hex()])?, tag(&["h", &room])?]),
        )
        .await
        .map_err(|e| format!("the task was not posted: {e}"))?;
    eprintln!("task {}", request.id.to_hex());
    // The task's card, and the agent's questions to this key in the task's own thread (its root is the
    // request): never another task's.
    s.conn.subscribe(
        "card",
        vec![Filter::new()
            .kinds([TASK_ACCEPTED, TASK_PROGRESS, TASK_RESULT, TASK_ERROR])
            .event(request.id)
            .author(agent)],
    );
    s.conn
        .subscribe("asks", vec![asks_of(&request, &agent, &me, &room)?]);

    let deadline = AskDeadline::new(Duration::from_secs(args.timeout));
    let person = Person::new(deadline.clone());
    let mut accepted = false;
    let mut told_waiting = false;
    let accept_by = tokio::time::sleep(ACCEPT_WAIT);
    tokio::pin!(accept_by);
    let mut asked: std::collections::HashSet<EventId> = Default::default();
    // The question with the person, and their line being read (a read that can be dropped: the question
    // may be settled elsewhere while it waits).
    let mut open: Option<Asking> = None;
    let mut reading: Option<Reading> = None;
    // One listener for the whole command, made before anything waits: a Ctrl-C while a question is on
    // screen cancels the task too.
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|e| format!("cannot watch for Ctrl-C: {e}"))?;
    loop {
        let incoming = tokio::select! {
            m = s.rx.recv() => m,
            line = next_line(&mut reading) => {
                reading = None;
                let Some(q) = open.as_mut() else { continue };
                let Some(line) = line else {
                    eprintln!("[no answer given: the question stays open in the room]");
                    close(&s, &mut open);
                    continue;
                };
                match send_answer(&s, &q.event, &q.card, &line).await {
                    Ok(Ok(_)) => close(&s, &mut open),
                    Ok(Err(why)) => {
                        eprintln!("{why}");
                        reading = Some(read(&person));
                    }
                    // Settled meanwhile: its answer comes on the question's subscription and says by whom.
                    Err(e) if e.is_duplicate() => {
                        eprintln!("your answer was not taken: the question was settled first elsewhere");
                    }
                    Err(e) => {
                        eprintln!("the answer was not taken: {e}");
                        close(&s, &mut open);
                    }
                }
                continue;
            }
            _ = &mut accept_by, if !accepted && !told_waiting => {
                told_waiting = true;
                match why_not_taken(&s, &agent, &room, &me) {
                    Some(why) => {
                        eprintln!("agentwire: nobody took the task within {} s: {why}", ACCEPT_WAIT.as_secs());
                        cancel(&s, &request, &agent, &room).await;
                        return Ok(ExitCode::from(EXIT_NOT_TAKEN));
                    }
                    None => eprintln!(
                        "[not accepted within {} s: the agent may be busy with other tasks, or nobody watches {room}; still waiting]",
                        ACCEPT_WAIT.as_secs()
                    ),
                }
                continue;
            }
            _ = deadline.passed() => {
                eprintln!("agentwire: the task did not end within {} s; cancelling it", args.timeout);
                cancel(&s, &request, &agent, &room).await;
                return Ok(ExitCode::from(EXIT_TIMEOUT));
            }
            _ = interrupt.recv() => {
                cancel(&s, &request, &agent, &room).await;
                eprintln!("{}cancelled task {}", if open.is_some() { "\n" } else { "" }, request.id.to_hex());
                return Ok(ExitCode::from(EXIT_INTERRUPTED));
            }
        };
        let Some(Incoming::Event { sub, event }) = incoming else {
            if incoming.is_none() {
                return Err("the relay connection ended".into());
            }
            continue;
        };
        if event.verify().is_err() {
            continue;
        }
        if event.kind == Kind::EventDeletion {
            // The agent withdrew the card: it was answered outside the room (its reason says what).
            let Some(q) = open.as_ref().filter(|q| sub == q.answers) else {
                continue;
            };
            let withdraws = event.tags.event_ids().any(|id| id == q.event.id);
            if event.pubkey == agent && withdraws {
                reading = None;
                eprintln!(
                    "\nanswered elsewhere: {}",
                    crate::tabular::printable(event.content.trim())
                );
                person.abandoned();
                close(&s, &mut open);
            }
            continue;
        }
        if event.kind == COMMENT {
            // The answer that settled a question of this task (the relay keeps the first valid one only).
            let Some(q) = open.as_ref().filter(|q| sub == q.answers) else {
                continue;
            };
            if agentwire_tinyagent::answered_request(&event) == Some(q.event.id) {
                reading = None;
                eprintln!(
                    "\nanswered elsewhere by {}",
                    answered_by(&q.event, &q.card, &event, &me)
                );
                person.abandoned();
                close(&s, &mut open);
            }
            continue;
        }
        if event.pubkey != agent {
            continue;
        }
        match event.kind {
            k if k == TASK_ACCEPTED => {
                if !accepted {
                    eprintln!("[accepted]");
                }
                accepted = true;
            }
            k if k == TASK_PROGRESS => {
                for line in crate::tabular::printable(&event.content)
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                {
                    eprintln!("[progress] {line}");
                }
            }
            k if k == TASK_RESULT || k == TASK_ERROR => {
                if open.is_some() {
                    // Settled outside the room (the agent's hub or turn API), or its window closed: the relay
                    // holds no answer to it, and the task has ended.
                    eprintln!(
                        "\nthe question was closed elsewhere (not answered in the room): the task ended"
                    );
                }
                if k == TASK_ERROR {
                    eprintln!("error: {}", crate::tabular::printable(event.content.trim()));
                    return Ok(ExitCode::from(EXIT_FAILED));
                }
                print_result(&mut s, &event, &request.id).await;
                return Ok(ExitCode::SUCCESS);
            }
            k if k == ROOM_MESSAGE => {
                let Some(card) = card_of(&event) else {
                    continue;
                };
                if !card.asked.contains(&me)
                    // A filter on `#e` matches any `e` tag: the card's marked root is the request.
                    || task_of(&event) != Some(request.id)
                    || !asked.insert(event.id)
                {
                    continue;
                }
                // One at a time: the agent asks its next question once this one is settled.
                close(&s, &mut open);
                eprint!("\n{}", shown(&event, &card));
                // A subscription id is at most 64 characters: the card's id in short.
                let answers = format!("answers-{}", &event.id.to_hex()[..16]);
                s.conn.subscribe(
                    &answers,
                    vec![answers_to(&event)?, withdrawal_of(&event, &agent)],
                );
                open = Some(Asking {
                    event: *event,
                    card,
                    answers,
                    _paused: deadline.pause(),
                });
                reading = Some(read(&person));
            }
            _ => {}
        }
    }
}

/// A question card put to the person.
struct Asking {
    event: Event,
    card: agentwire_tinyagent::QuestionCard,
    /// The subscription to its answers: the one the relay settles it with.
    answers: String,
    /// The task's deadline stands still while it is with the person.
    _paused: Paused,
}

/// A line being read from the person.
type Reading = std::pin::Pin<Box<dyn std::future::Future<Output = Option<String>> + Send>>;

/// Reads the person's next line (an answer).
fn read(person: &Arc<Person>) -> Reading {
    let person = person.clone();
    Box::pin(async move { person.read_line("> ").await })
}

/// The line being read, if one is; never completes otherwise.
async fn next_line(reading: &mut Option<Reading>) -> Option<String> {
    match reading {
        Some(r) => r.await,
        None => std::future::pending().await,
    }
}

/// Takes the open question off the screen: its answers are no longer followed.
fn close(s: &Session, open: &mut Option<Asking>) {
    if let Some(q) = open.take() {
        s.conn.unsubscribe(&q.answers);
    }
}

/// The agent's question cards to `me` in the thread of `request`.
fn asks_of(
    request: &Event,
    agent: &PublicKey,
    me: &PublicKey,
    room: &str,
) -> Result<Filter, String> {
    let h = SingleLetterTag::from_char('h').map_err(|e| e.to_string())?;
    Ok(Filter::new()
        .kind(ROOM_MESSAGE)
        .author(*agent)
        .pubkey(*me)
        .custom_tag(h, room)
        .event(request.id))
}

/// The agent's withdrawal (NIP-09, kind 5) of `question`: how it says the card was answered outside the
/// room.
fn withdrawal_of(question: &Event, agent: &PublicKey) -> Filter {
    Filter::new()
        .kind(Kind::EventDeletion)
        .author(*agent)
        .event(question.id)
}

/// The answers (kind 1111) naming `question` as their root: the relay stores only the one that settles it.
fn answers_to(question: &Event) -> Result<Filter, String> {
    let root = SingleLetterTag::from_char('E').map_err(|e| e.to_string())?;
    Ok(Filter::new()
        .kind(COMMENT)
        .custom_tag(root, question.id.to_hex()))
}

/// The result: the full text of the thread message it links (the card keeps one line), else its content.
async fn print_result(s: &mut Session, result: &Event, request: &EventId) {
    let linked: Vec<EventId> = agentwire_tinyagent::tag_values(result, "e")
        .filter_map(|t| t.get(1).and_then(|v| EventId::from_hex(v).ok()))
        .filter(|id| id != request)
        .collect();
    let messages = match linked.is_empty() {
        true => vec![],
        false => s
            .query(vec![Filter::new().ids(linked.clone())])
            .await
            .unwrap_or_default(),
    };
    // In the order the result names them: the answer first, then any posted files.
    let texts: Vec<&str> = linked
        .iter()
        .filter_map(|id| {
            messages
                .iter()
                .find(|m| m.id == *id && m.pubkey == result.pubkey)
        })
        .map(|m| m.content.as_str())
        .collect();
    let mut out = std::io::stdout();
    match texts.first() {
        Some(text) => {
            let _ = writeln!(out, "{}", crate::tabular::printable(text.trim_end()));
        }
        None => {
            let _ = writeln!(
                out,
                "{}",
                crate::tabular::printable(result.content.trim_end())
            );
        }
    }
}

/// The requester's cancel (43005): the adapter stops the turn and publishes nothing further.
async fn cancel(s: &Session, request: &Event, agent: &PublicKey, room: &str) {
    let tags = [
        tag(&["e", &request.id.to_hex()]),
        tag(&["p", &agent.to_hex()]),
        tag(&["h", room]),
    ];
    let tags: Vec<Tag> = tags.into_iter().filter_map(Result::ok).collect();
    if let Err(e) = s
        .publish(EventBuilder::new(TASK_CANCEL, "").tags(tags))
        .await
    {
        eprintln!("agentwire: could not cancel the task: {e}");
    }
}
