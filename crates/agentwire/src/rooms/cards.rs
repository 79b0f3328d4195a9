//! `agentwire cards --room R` (the room's open question cards and its tasks still running) and `agentwire
//! answer <card> <choice|text>` (a kind 1111 answer the relay settles). A card is open until the relay holds
//! the answer that settled it (the first valid one; any later one it refuses `duplicate:`) or until the task
//! that asked it has ended (a question answered outside the room, in the agent's hub or turn API, leaves no
//! answer on the relay, and the task's end closes it): neither is listed, and `answer` refuses both, saying
//! who answered what.

use super::{PublishError, RelayTarget, Session};
use crate::tabular::{cell, columns, printable};
use agentwire_tasks::card::{TASK_ACCEPTED, TASK_CANCEL, TASK_ERROR, TASK_REQUEST, TASK_RESULT};
use agentwire_tinyagent::{QuestionCard, Selection, COMMENT, ROOM_MESSAGE};
use clap::Args;
use nostr::prelude::{
    Event, EventBuilder, EventId, Filter, Kind, PublicKey, SingleLetterTag, Timestamp,
};
use std::collections::{HashMap, HashSet};
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
/// Exit code of an answer to a card already settled (answered, or its task ended).
const EXIT_SETTLED: u8 = 3;
/// The kinds that end a task: a result, an error, the requester's cancel.
const TASK_ENDS: [nostr::prelude::Kind; 3] = [TASK_RESULT, TASK_ERROR, TASK_CANCEL];

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
        .filter(|(q, card)| settling(q, card, answers, now).is_some())
        .map(|(q, _)| q.id)
        .collect()
}

/// The answer among `answers` that settled `question`: the relay keeps only that one, and of several (a
/// card stored before the relay judged answers) the first.
fn settling<'a>(
    question: &Event,
    card: &QuestionCard,
    answers: &'a [Event],
    now: Timestamp,
) -> Option<&'a Event> {
    answers
        .iter()
        .filter(|a| {
            agentwire_tinyagent::answered_request(a) == Some(question.id)
                && agentwire_tinyagent::check_answer(question, card, a, now).is_ok()
        })
        .min_by_key(|a| (a.created_at, a.id))
}

/// The thread root a question card names (its marked `root` `e` tag): the task that asked it.
pub(super) fn task_of(question: &Event) -> Option<EventId> {
    agentwire_tinyagent::tag_values(question, "e")
        .find(|t| t.get(3).map(String::as_str) == Some("root"))
        .and_then(|t| EventId::from_hex(t.get(1)?).ok())
}

/// Who answered `question` with what, as a person reads it: `npub1... (your key): Label, Other, "text"`.
pub(super) fn answered_by(
    question: &Event,
    card: &QuestionCard,
    answer: &Event,
    me: &PublicKey,
) -> String {
    let who = match answer.pubkey == *me {
        true => format!("{} (your key)", crate::keys::npub(&answer.pubkey)),
        false => crate::keys::npub(&answer.pubkey),
    };
    // The relay settled it by the same rules, so they hold; the raw content stands in if not.
    let what = match agentwire_tinyagent::check_answer(question, card, answer, answer.created_at) {
        Ok(s) => {
            let mut said: Vec<String> = s
                .choices
                .iter()
                .map(|id| {
                    card.options
                        .iter()
                        .find(|(o, _)| o == id)
                        .map_or(id.as_str(), |(_, label)| label.as_str())
                })
                .map(printable)
                .collect();
            if let Some(t) = &s.text {
                said.push(format!("{:?}", printable(t)));
            }
            said.join(", ")
        }
        Err(_) => printable(answer.content.trim()),
    };
    format!("{who}: {what}")
}

/// The end of the task that asked each of `questions` (by question id), for those whose task has ended.
async fn ended_tasks(
    s: &mut Session,
    questions: &[&Event],
) -> Result<HashMap<EventId, Event>, String> {
    let roots: Vec<EventId> = questions.iter().filter_map(|q| task_of(q)).collect();
    if roots.is_empty() {
        return Ok(HashMap::new());
    }
    let requests = s
        .query(vec![Filter::new().kind(TASK_REQUEST).ids(roots.clone())])
        .await?;
    let ends = s
        .query(vec![Filter::new().kinds(TASK_ENDS).events(roots)])
        .await?;
    Ok(questions
        .iter()
        .filter_map(|q| {
            let task = task_of(q)?;
            let requester = requests.iter().find(|r| r.id == task).map(|r| r.pubkey);
            let end = ends
                .iter()
                .find(|e| ends_task(e, &task, &q.pubkey, requester.as_ref()))?;
            Some((q.id, end.clone()))
        })
        .collect())
}

/// Whether `end` ends task `task` whose questions `agent` asks: its result or error from the agent, or
/// its requester's cancel. Nobody else's word ends it (a room member cannot hide a question by posting an
/// end of its task).
fn ends_task(
    end: &Event,
    task: &EventId,
    agent: &PublicKey,
    requester: Option<&PublicKey>,
) -> bool {
    agentwire_tasks::card::request_of(end) == Some(*task)
        && match end.kind {
            k if k == TASK_RESULT || k == TASK_ERROR => end.pubkey == *agent,
            k if k == TASK_CANCEL => requester == Some(&end.pubkey),
            _ => false,
        }
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
    let mut done = settled(&questions, &answers, now);
    // A question whose task has ended is closed, answered or not (in the hub, or its window with it).
    let unsettled: Vec<&Event> = questions
        .iter()
        .map(|(q, _)| q)
        .filter(|q| !done.contains(&q.id))
        .collect();
    done.extend(ended_tasks(&mut s, &unsettled).await?.into_keys());
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
            let ended = about.iter().any(|e| TASK_ENDS.contains(&e.kind));
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
) -> Result<Result<Event, String>, PublishError> {
    let content = match agentwire_tinyagent::answer_content(card, typed) {
        Ok(c) => c,
        Err(why) => return Ok(Err(why.to_string())),
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
    let Some(request) = found.into_iter().find(|e| e.id == id) else {
        // Withdrawn by the task-card agent of the serve on this data dir (it does when a card was answered
        // outside the room): said so, with its reason. Anybody may publish a deletion naming any id, so
        // only that agent's is believed.
        let agent = s
            .serving
            .as_ref()
            .and_then(|v| v.agent_pubkey())
            .and_then(|k| PublicKey::from_hex(k).ok());
        let withdrawn = match agent {
            Some(agent) => {
                s.query(vec![Filter::new()
                    .kind(Kind::EventDeletion)
                    .author(agent)
                    .event(id)])
                    .await?
            }
            None => Vec::new(),
        };
        if let Some(w) = withdrawn
            .iter()
            .find(|w| Some(w.pubkey) == agent && w.tags.event_ids().any(|e| e == id))
        {
            eprintln!(
                "agentwire: question {id} is settled: withdrawn by its author: {}",
                crate::tabular::printable(w.content.trim())
            );
            return Ok(ExitCode::from(EXIT_SETTLED));
        }
        return Err(format!(
            "no event {id} on the relay (or it is in a room you may not read)"
        ));
    };
    let card = card_of(&request).ok_or_else(|| format!("{id} is not a question card"))?;
    let me = s.crypto.public_key();
    // Settled already: said so, and by whom, without sending a second answer.
    if let Some(why) = closed(&mut s, &request, &card, &me).await? {
        eprintln!("agentwire: question {id} is settled: {why}");
        return Ok(ExitCode::from(EXIT_SETTLED));
    }
    let typed = args.answer.join(" ");
    match send_answer(&s, &request, &card, &typed).await {
        Ok(Ok(_)) => {
            println!("answered {id}");
            Ok(ExitCode::SUCCESS)
        }
        Ok(Err(why)) => {
            eprintln!("agentwire: {why}\n{}", shown(&request, &card));
            Ok(ExitCode::from(EXIT_NOT_AN_ANSWER))
        }
        // Settled in the meantime: the relay refused this one as a second answer.
        Err(e) if e.is_duplicate() => {
            let why = closed(&mut s, &request, &card, &me)
                .await?
                .unwrap_or_else(|| "the relay holds another answer to it".into());
            eprintln!("agentwire: question {id} is settled: {why}");
            Ok(ExitCode::from(EXIT_SETTLED))
        }
        Err(e) => Err(format!("the answer was not taken: {e}")),
    }
}

/// Why question card `question` takes no answer any more, if it does not: the answer the relay settled it
/// with (who answered what), or its task's end.
async fn closed(
    s: &mut Session,
    question: &Event,
    card: &QuestionCard,
    me: &PublicKey,
) -> Result<Option<String>, String> {
    let root = SingleLetterTag::from_char('E').map_err(|e| e.to_string())?;
    let answers = s
        .query(vec![Filter::new()
            .kind(COMMENT)
            .custom_tag(root, question.id.to_hex())])
        .await?;
    if let Some(a) = settling(question, card, &answers, Timestamp::now()) {
        return Ok(Some(format!(
            "answered by {}",
            answered_by(question, card, a, me)
        )));
    }
    let ended = ended_tasks(s, &[question]).await?;
    Ok(ended.get(&question.id).map(|e| {
        let task = agentwire_tasks::card::request_of(e).unwrap_or(question.id);
        let how = match e.kind {
            k if k == TASK_RESULT => "its result",
            k if k == TASK_ERROR => "its error",
            _ => "its requester's cancel",
        };
        format!(
            "its task {task} has ended ({how}), with no answer on the relay: it was settled outside the room (the agent's hub or turn API) or went with the task"
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::{FinalizeEvent, Keys, Tag};

    fn event(keys: &Keys, kind: nostr::prelude::Kind, content: &str, tags: &[&[&str]]) -> Event {
        EventBuilder::new(kind, content)
            .tags(tags.iter().map(|t| Tag::parse(t.iter().copied()).unwrap()))
            .finalize(keys)
            .unwrap()
    }

    #[test]
    fn only_the_agent_or_the_requester_ends_the_task_that_asked_a_card() {
        let (agent, alice, mallory) = (Keys::generate(), Keys::generate(), Keys::generate());
        let request = event(&alice, TASK_REQUEST, "confirm Deploy?", &[&["h", "lab"]]);
        let root = request.id.to_hex();
        let card = event(
            &agent,
            ROOM_MESSAGE,
            "Deploy?",
            &[&["h", "lab"], &["e", &root, "", "root"]],
        );
        assert_eq!(task_of(&card), Some(request.id));
        let (a, r) = (agent.public_key(), alice.public_key());
        let end = |who: &Keys, kind| event(who, kind, "", &[&["e", &root], &["h", "lab"]]);
        assert!(ends_task(
            &end(&agent, TASK_RESULT),
            &request.id,
            &a,
            Some(&r)
        ));
        assert!(ends_task(
            &end(&agent, TASK_ERROR),
            &request.id,
            &a,
            Some(&r)
        ));
        assert!(ends_task(
            &end(&alice, TASK_CANCEL),
            &request.id,
            &a,
            Some(&r)
        ));
        // Anyone else's end, or the requester's cancel when the request is not known, hides nothing.
        assert!(!ends_task(
            &end(&mallory, TASK_RESULT),
            &request.id,
            &a,
            Some(&r)
        ));
        assert!(!ends_task(
            &end(&mallory, TASK_CANCEL),
            &request.id,
            &a,
            Some(&r)
        ));
        assert!(!ends_task(&end(&alice, TASK_CANCEL), &request.id, &a, None));
        assert!(!ends_task(
            &end(&agent, TASK_ACCEPTED),
            &request.id,
            &a,
            Some(&r)
        ));
    }

    #[test]
    fn who_answered_what_reads_as_labels_and_text_with_escapes_taken_out() {
        let (agent, alice) = (Keys::generate(), Keys::generate());
        let p = alice.public_key().to_hex();
        let q = event(
            &agent,
            ROOM_MESSAGE,
            "Go on?",
            &[
                &["h", "lab"],
                &["request", "question"],
                &["tinyagent", "1"],
                &["interaction", "question"],
                &["selection", "multiple"],
                &["freeform", "true"],
                &["option", "go", "Go \u{1b}]0;on"],
                &["option", "stop", "Stop here"],
                &["p", &p],
            ],
        );
        let card = card_of(&q).expect("a card");
        let content = r#"{"choices":["go","stop"],"text":"after lunch"}"#;
        let answer = EventBuilder::new(COMMENT, content)
            .tags(agentwire_tinyagent::answer_tags(&q, "lab"))
            .finalize(&alice)
            .unwrap();
        let npub = crate::keys::npub(&alice.public_key());
        let said = answered_by(&q, &card, &answer, &alice.public_key());
        assert!(!said.contains('\u{1b}'), "{said:?}");
        assert!(
            said.starts_with(&format!("{npub} (your key): Go")),
            "{said}"
        );
        assert!(said.ends_with(r#", Stop here, "after lunch""#), "{said}");
        let other = answered_by(&q, &card, &answer, &agent.public_key());
        assert!(other.starts_with(&format!("{npub}: ")), "{other}");
    }
}
