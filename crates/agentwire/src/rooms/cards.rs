//! `agentwire cards --room R` (the room's open question cards and its tasks still running) and `agentwire
//! answer <card> <choice|text>` (a kind 1111 answer the relay settles).

use super::{RelayTarget, Session};
use crate::tabular::{cell, columns, printable};
use agentwire_tasks::card::{TASK_ACCEPTED, TASK_CANCEL, TASK_ERROR, TASK_REQUEST, TASK_RESULT};
use agentwire_tinyagent::{QuestionCard, Selection, COMMENT, ROOM_MESSAGE};
use clap::Args;
use nostr::prelude::{Event, EventBuilder, EventId, Filter, SingleLetterTag, Timestamp};
use std::collections::HashSet;
use std::path::Path;
use std::process::ExitCode;

/// How far back `cards` looks for questions and tasks: a week of a room's life.
const LOOKBACK_SECS: u64 = 7 * 24 * 3600;
/// The most room messages (questions among them) and tasks `cards` reads.
const MAX_READ: usize = 1000;
/// The widest a question or a task's text is shown.
const MAX_TEXT_CHARS: usize = 60;
/// Exit code of an answer that fits none of the card's options.
const EXIT_NOT_AN_ANSWER: u8 = 2;

/// `cards` flags.
#[derive(Debug, Args)]
pub(crate) struct CardsArgs {
    #[command(flatten)]
    target: RelayTarget,
    /// The room.
    #[arg(long)]
    room: String,
}

/// `answer` flags.
#[derive(Debug, Args)]
pub(crate) struct AnswerArgs {
    #[command(flatten)]
    target: RelayTarget,
    /// The question card's event id (as `cards` lists it).
    card: String,
    /// The answer: an option's id, label or number (several with commas where the card takes several), or
    /// text where it takes text.
    #[arg(required = true, num_args = 1..)]
    answer: Vec<String>,
}

/// The question card `event` is, if it is a well-formed one.
pub(super) fn card_of(event: &Event) -> Option<QuestionCard> {
    agentwire_tinyagent::question(event).ok()
}

/// A card as a person reads it: the question, then its options numbered, then how to answer.
pub(super) fn shown(event: &Event, card: &QuestionCard) -> String {
    // What a room member wrote, printed at a terminal: no escape sequences.
    let mut out = String::new();
    if let Some(s) = &card.subject {
        out.push_str(&format!("{}\n", printable(s)));
    }
    out.push_str(printable(event.content.trim()).as_str());
    out.push('\n');
    for (i, (id, label)) in card.options.iter().enumerate() {
        out.push_str(&format!(
            "  {}. {} ({})\n",
            i + 1,
            printable(label),
            printable(id)
        ));
    }
    out.push_str(match (card.selection, card.freeform) {
        (Selection::Text, _) => "(answer with text)\n",
        (Selection::Single, false) => "(answer with one option: its number, id or label)\n",
        (Selection::Single, true) => "(answer with one option, or with text)\n",
        (Selection::Multiple, false) => "(answer with one or more options, separated by commas)\n",
        (Selection::Multiple, true) => "(answer with options separated by commas, or with text)\n",
    });
    out
}

/// Which of `cards` (question events) a valid answer among `answers` has settled.
fn settled(cards: &[(Event, QuestionCard)], answers: &[Event], now: Timestamp) -> HashSet<EventId> {
    cards
        .iter()
        .filter(|(q, card)| {
            answers.iter().any(|a| {
                agentwire_tinyagent::answered_request(a) == Some(q.id)
                    && agentwire_tinyagent::check_answer(q, card, a, now).is_ok()
            })
        })
        .map(|(q, _)| q.id)
        .collect()
}

/// `agentwire cards --room R`.
pub(crate) async fn cards(args: CardsArgs, data_dir: &Path) -> Result<ExitCode, String> {
    let mut s = Session::open(&args.target, data_dir).await?;
    let room = args.room;
    let h = SingleLetterTag::from_char('h').map_err(|e| e.to_string())?;
    let since = Timestamp::from(Timestamp::now().as_secs().saturating_sub(LOOKBACK_SECS));
    let in_room = |f: Filter| f.custom_tag(h, room.clone()).since(since).limit(MAX_READ);
    let messages = s
        .query(vec![in_room(Filter::new().kind(ROOM_MESSAGE))])
        .await?;
    let now = Timestamp::now();
    let questions: Vec<(Event, QuestionCard)> = messages
        .into_iter()
        .filter_map(|e| card_of(&e).map(|c| (e, c)))
        .filter(|(_, c)| c.expiration.is_none_or(|at| at > now))
        .collect();
    let answers = match questions.is_empty() {
        true => vec![],
        false => {
            let e_root = SingleLetterTag::from_char('E').map_err(|e| e.to_string())?;
            let ids: Vec<String> = questions.iter().map(|(q, _)| q.id.to_hex()).collect();
            s.query(vec![Filter::new().kind(COMMENT).custom_tags(e_root, ids)])
                .await?
        }
    };
    let done = settled(&questions, &answers, now);
    let open: Vec<Vec<String>> = questions
        .iter()
        .filter(|(q, _)| !done.contains(&q.id))
        .map(|(q, c)| {
            let options: Vec<&str> = c.options.iter().map(|(_, l)| l.as_str()).collect();
            vec![
                q.id.to_hex(),
                cell(q.content.trim(), MAX_TEXT_CHARS),
                match c.selection {
                    Selection::Text => "(text)".into(),
                    _ => cell(&options.join(" | "), MAX_TEXT_CHARS),
                },
            ]
        })
        .collect();

    let tasks = s
        .query(vec![in_room(Filter::new().kind(TASK_REQUEST))])
        .await?;
    let states = match tasks.is_empty() {
        true => vec![],
        false => {
            let ids: Vec<EventId> = tasks.iter().map(|t| t.id).collect();
            s.query(vec![Filter::new()
                .kinds([TASK_ACCEPTED, TASK_RESULT, TASK_CANCEL, TASK_ERROR])
                .events(ids)])
                .await?
        }
    };
    let running: Vec<Vec<String>> = tasks
        .iter()
        .filter_map(|t| {
            let about: Vec<&Event> = states
                .iter()
                .filter(|e| agentwire_tasks::card::request_of(e) == Some(t.id))
                .collect();
            let ended = about
                .iter()
                .any(|e| [TASK_RESULT, TASK_ERROR, TASK_CANCEL].contains(&e.kind));
            let state = match about.iter().any(|e| e.kind == TASK_ACCEPTED) {
                true => "running",
                false => "waiting",
            };
            (!ended).then(|| {
                vec![
                    t.id.to_hex(),
                    state.into(),
                    cell(t.content.trim(), MAX_TEXT_CHARS),
                ]
            })
        })
        .collect();

    match open.is_empty() {
        true => println!("no open questions in {room}"),
        false => print!("{}", columns(&["QUESTION", "ASKS", "OPTIONS"], &open)),
    }
    println!();
    match running.is_empty() {
        true => println!("no running tasks in {room}"),
        false => print!("{}", columns(&["TASK", "STATE", "TEXT"], &running)),
    }
    Ok(ExitCode::SUCCESS)
}

/// Publishes the answer `typed` to the card `request`: `Err` with what fits when it fits none.
pub(super) async fn send_answer(
    s: &Session,
    request: &Event,
    card: &QuestionCard,
    typed: &str,
) -> Result<Result<Event, String>, String> {
    let content = match agentwire_tinyagent::answer_content(card, typed) {
        Ok(c) => c,
        Err(why) => return Ok(Err(why)),
    };
    let answer = EventBuilder::new(COMMENT, content)
        .tags(agentwire_tinyagent::answer_tags(request, &card.room));
    s.publish(answer).await.map(Ok)
}

/// `agentwire answer <card> <answer>`.
pub(crate) async fn answer(args: AnswerArgs, data_dir: &Path) -> Result<ExitCode, String> {
    let id = EventId::from_hex(args.card.trim()).map_err(|_| {
        format!(
            "{:?} is not a card's event id (64 hex, as `cards` lists it)",
            args.card
        )
    })?;
    let mut s = Session::open(&args.target, data_dir).await?;
    let found = s.query(vec![Filter::new().id(id).limit(1)]).await?;
    let request = found.into_iter().find(|e| e.id == id).ok_or_else(|| {
        format!("no event {id} on the relay (or it is in a room you may not read)")
    })?;
    let card = card_of(&request).ok_or_else(|| format!("{id} is not a question card"))?;
    let typed = args.answer.join(" ");
    match send_answer(&s, &request, &card, &typed)
        .await
        .map_err(|e| format!("the answer was not taken: {e}"))?
    {
        Ok(_) => {
            println!("answered {id}");
            Ok(ExitCode::SUCCESS)
        }
        Err(why) => {
            eprintln!("agentwire: {why}\n{}", shown(&request, &card));
            Ok(ExitCode::from(EXIT_NOT_AN_ANSWER))
        }
    }
}
