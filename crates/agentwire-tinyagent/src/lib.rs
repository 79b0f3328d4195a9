//! Tiny agent interactions (`shared/specs/tinyagent-interactions-and-task-cards.md`): the rules the relay
//! settles questions by and the task-card adapter writes cards by, in one small pure crate both use:
//! which kind 9 room messages are native question cards and whether one is well formed, and whether a
//! kind 1111 (NIP-22) reply answers one validly. Pure functions over events and the time; the store keeps
//! which answer settled which question (the first valid one).

use std::collections::HashSet;
use std::fmt;

use nostr::event::{Event, EventId, Kind};
use nostr::key::PublicKey;
use nostr::types::Timestamp;

mod reply;
pub use reply::{answer_content, answer_tags, AnswerError};

/// The spec's limit on options per question.
pub const MAX_OPTIONS: usize = 12;
/// The spec's bounds on an option id, in characters.
pub const OPTION_ID_CHARS: std::ops::RangeInclusive<usize> = 1..=64;
/// The spec's bounds on an option label, in characters.
pub const OPTION_LABEL_CHARS: std::ops::RangeInclusive<usize> = 1..=200;
/// The spec's limit on an answer's whole content, and on a text answer, in characters.
pub const MAX_ANSWER_CHARS: usize = 8_000;
/// How far in the future an answer's `created_at` may be: a little clock skew between a phone and the relay,
/// not an answer dated after the question's expiration.
pub const MAX_ANSWER_SKEW_SECS: u64 = 60;

/// The longest room id (a NIP-29 group's `h` value): ids are short (`[a-z0-9-_]`), and one is kept per room
/// in memory and in every room event's tag.
pub const MAX_ROOM_ID_LEN: usize = 64;

/// Whether `id` is a room id: 1 to [`MAX_ROOM_ID_LEN`] of a-z, 0-9, `-` and `_` (what the embedded relay
/// takes, and what the task-card adapter watches).
pub fn valid_room_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ROOM_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// The kind of a room message (NIP-29 chat), which a question card is.
pub const ROOM_MESSAGE: Kind = Kind::Custom(9);
/// The kind of a NIP-22 comment, which an answer is.
pub const COMMENT: Kind = Kind::Custom(1111);

/// What a question card asks for (`interaction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interaction {
    /// A question.
    Question,
    /// May something run (options such as approve once, for the session, always, deny).
    Approval,
    /// Yes or no.
    Confirmation,
}

/// How a question card is answered (`selection`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    /// One option id.
    Single,
    /// A JSON array of unique option ids.
    Multiple,
    /// Plain text, no options.
    Text,
}

/// A well-formed native question card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuestionCard {
    /// What it asks for.
    pub interaction: Interaction,
    /// How it is answered.
    pub selection: Selection,
    /// `(id, label)`, in order.
    pub options: Vec<(String, String)>,
    /// A text answer is offered beside the options.
    pub freeform: bool,
    /// Who may answer (`p` tags).
    pub asked: Vec<PublicKey>,
    /// Who is to be notified (`mention` tags).
    pub mentions: Vec<PublicKey>,
    /// The room (`h`).
    pub room: String,
    /// Its short title.
    pub subject: Option<String>,
    /// When it stops taking answers (NIP-40).
    pub expiration: Option<Timestamp>,
}

impl QuestionCard {
    /// The asked people also named by a `mention` tag: the only ones a notification goes to.
    pub fn to_notify(&self) -> Vec<PublicKey> {
        self.asked
            .iter()
            .filter(|p| self.mentions.contains(p))
            .copied()
            .collect()
    }
}

/// Why a question card was refused: each names the rule it breaks (sent as `OK false` with `invalid:`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuestionRule {
    /// An `interaction` other than question, approval or confirmation.
    UnknownInteraction(String),
    /// A `selection` other than single, multiple or text.
    UnknownSelection(String),
    /// A tag that may appear once appears again.
    Repeated(&'static str),
    /// More than [`MAX_OPTIONS`] options.
    TooManyOptions(usize),
    /// An option tag without both an id and a label.
    IncompleteOption,
    /// An option id outside [`OPTION_ID_CHARS`].
    OptionId(String),
    /// An option label outside [`OPTION_LABEL_CHARS`].
    OptionLabel(String),
    /// Two options with one id.
    DuplicateOption(String),
    /// Options on `selection=text`.
    OptionsOnText,
    /// A single or multiple selection without options.
    NoOptions,
    /// `freeform=true` without options.
    FreeformWithoutOptions,
    /// A `freeform` other than true or false.
    BadFreeform(String),
    /// An `expiration` that is not a Unix time.
    BadExpiration(String),
    /// No `p` tag: nobody could answer it.
    NoAskedPerson,
    /// A `p` or `mention` tag that is not a hex public key.
    BadPublicKey(&'static str),
    /// No `h` tag: a question belongs to a room.
    NoRoom,
}

impl fmt::Display for QuestionRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownInteraction(v) => write!(
                f,
                "unknown interaction {v:?} (question, approval or confirmation)"
            ),
            Self::UnknownSelection(v) => {
                write!(f, "unknown selection {v:?} (single, multiple or text)")
            }
            Self::Repeated(tag) => write!(f, "more than one {tag} tag"),
            Self::TooManyOptions(n) => write!(f, "{n} options; at most {MAX_OPTIONS}"),
            Self::IncompleteOption => write!(f, "an option tag needs an id and a label"),
            Self::OptionId(id) => write!(
                f,
                "option id {id:?} must be {} to {} characters",
                OPTION_ID_CHARS.start(),
                OPTION_ID_CHARS.end()
            ),
            Self::OptionLabel(id) => write!(
                f,
                "the label of option {id:?} must be {} to {} characters",
                OPTION_LABEL_CHARS.start(),
                OPTION_LABEL_CHARS.end()
            ),
            Self::DuplicateOption(id) => write!(f, "option id {id:?} appears twice"),
            Self::OptionsOnText => write!(f, "selection=text takes no options"),
            Self::NoOptions => write!(f, "selection=single and multiple need options"),
            Self::FreeformWithoutOptions => write!(
                f,
                "freeform=true needs options (use selection=text for a text answer alone)"
            ),
            Self::BadFreeform(v) => write!(f, "freeform must be true or false, not {v:?}"),
            Self::BadExpiration(v) => write!(f, "expiration {v:?} is not a Unix time in seconds"),
            Self::NoAskedPerson => write!(f, "a question needs a p tag naming who may answer"),
            Self::BadPublicKey(tag) => write!(f, "a {tag} tag must hold a hex public key"),
            Self::NoRoom => write!(f, "a question needs an h tag naming its room"),
        }
    }
}

/// The tags of `event` named `name`, in order, each as its parts.
pub fn tag_values<'a>(event: &'a Event, name: &'a str) -> impl Iterator<Item = &'a [String]> + 'a {
    event
        .tags
        .iter()
        .map(|t| t.as_slice())
        .filter(move |t| t.first().map(String::as_str) == Some(name))
}

/// The value of the first tag of `event` named `name`.
pub fn first_value<'a>(event: &'a Event, name: &'a str) -> Option<&'a str> {
    tag_values(event, name)
        .next()
        .and_then(|t| t.get(1))
        .map(String::as_str)
}

/// The value of a tag that may appear at most once.
fn once<'a>(event: &'a Event, name: &'static str) -> Result<Option<&'a str>, QuestionRule> {
    let mut values = tag_values(event, name);
    let first = values.next();
    if values.next().is_some() {
        return Err(QuestionRule::Repeated(name));
    }
    Ok(first.map(|t| t.get(1).map(String::as_str).unwrap_or_default()))
}

/// Whether `event` claims to be a native question card (kind 9 with `["request","question"]` and
/// `["tinyagent","1"]`). Other kind 9 messages, questions of older clients included, are plain messages.
pub fn is_question(event: &Event) -> bool {
    event.kind == ROOM_MESSAGE
        && tag_values(event, "request").any(|t| t.get(1).map(String::as_str) == Some("question"))
        && tag_values(event, "tinyagent").any(|t| t.get(1).map(String::as_str) == Some("1"))
}

fn public_keys(event: &Event, name: &'static str) -> Result<Vec<PublicKey>, QuestionRule> {
    tag_values(event, name)
        .map(|t| {
            t.get(1)
                .and_then(|v| PublicKey::from_hex(v).ok())
                .ok_or(QuestionRule::BadPublicKey(name))
        })
        .collect()
}

/// Reads a native question card, or names the first rule it breaks.
pub fn question(event: &Event) -> Result<QuestionCard, QuestionRule> {
    let interaction = match once(event, "interaction")? {
        None | Some("question") => Interaction::Question,
        Some("approval") => Interaction::Approval,
        Some("confirmation") => Interaction::Confirmation,
        Some(other) => return Err(QuestionRule::UnknownInteraction(other.to_owned())),
    };
    let selection = match once(event, "selection")? {
        None | Some("single") => Selection::Single,
        Some("multiple") => Selection::Multiple,
        Some("text") => Selection::Text,
        Some(other) => return Err(QuestionRule::UnknownSelection(other.to_owned())),
    };
    let freeform = match once(event, "freeform")? {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => return Err(QuestionRule::BadFreeform(other.to_owned())),
    };
    let option_tags: Vec<&[String]> = tag_values(event, "option").collect();
    if option_tags.len() > MAX_OPTIONS {
        return Err(QuestionRule::TooManyOptions(option_tags.len()));
    }
    let mut options = Vec::with_capacity(option_tags.len());
    let mut seen = HashSet::new();
    for t in option_tags {
        let (Some(id), Some(label)) = (t.get(1), t.get(2)) else {
            return Err(QuestionRule::IncompleteOption);
        };
        if !OPTION_ID_CHARS.contains(&id.chars().count()) {
            return Err(QuestionRule::OptionId(id.clone()));
        }
        if !OPTION_LABEL_CHARS.contains(&label.chars().count()) {
            return Err(QuestionRule::OptionLabel(id.clone()));
        }
        if !seen.insert(id.as_str()) {
            return Err(QuestionRule::DuplicateOption(id.clone()));
        }
        options.push((id.clone(), label.clone()));
    }
    match selection {
        Selection::Text if !options.is_empty() => return Err(QuestionRule::OptionsOnText),
        Selection::Text if freeform => return Err(QuestionRule::FreeformWithoutOptions),
        Selection::Single | Selection::Multiple if options.is_empty() => {
            return Err(if freeform {
                QuestionRule::FreeformWithoutOptions
            } else {
                QuestionRule::NoOptions
            })
        }
        _ => {}
    }
    let expiration = match once(event, "expiration")? {
        None => None,
        Some(v) => Some(
            v.parse::<u64>()
                .ok()
                .filter(|_| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .map(Timestamp::from_secs)
                .ok_or_else(|| QuestionRule::BadExpiration(v.to_owned()))?,
        ),
    };
    let asked = public_keys(event, "p")?;
    if asked.is_empty() {
        return Err(QuestionRule::NoAskedPerson);
    }
    let mentions = public_keys(event, "mention")?;
    let room = first_value(event, "h")
        .filter(|h| !h.is_empty())
        .ok_or(QuestionRule::NoRoom)?
        .to_owned();
    Ok(QuestionCard {
        interaction,
        selection,
        options,
        freeform,
        asked,
        mentions,
        room,
        subject: first_value(event, "subject").map(str::to_owned),
        expiration,
    })
}

/// Whether a kind 1111 comment has the one root (`E`) and the one parent (`e`) NIP-22 gives it; the rule
/// it breaks if not. Any other kind passes.
///
/// Why refuse rather than pick one: with two `E` tags the store settled a card by one while a `#E` query
/// listed the comment under the other (a decoy first `E`, a question card second). With one of each there
/// is nothing to pick: the root the store settles, the one `#E` lists and the one the agent reads
/// ([`answered_request`]) are the same event.
pub fn check_comment(event: &Event) -> Result<(), &'static str> {
    if event.kind != COMMENT {
        return Ok(());
    }
    if tag_values(event, "E").nth(1).is_some() {
        return Err("a comment (kind 1111) has one root: one E tag");
    }
    if tag_values(event, "e").nth(1).is_some() {
        return Err("a comment (kind 1111) has one parent: one e tag");
    }
    Ok(())
}

/// The request a kind 1111 reply names as its root (its one `E`): the event whose card decides whether the
/// reply is a valid answer. `None` for another kind, without an `E`, or with more than one (no answer:
/// [`check_comment`]).
pub fn answered_request(event: &Event) -> Option<EventId> {
    if event.kind != COMMENT {
        return None;
    }
    let mut roots = tag_values(event, "E");
    let root = roots.next()?;
    if roots.next().is_some() {
        return None;
    }
    root.get(1).and_then(|v| EventId::from_hex(v).ok())
}

/// Every event a kind 1111 reply names as its root (`E`) or its parent (`e`), each once, roots first.
/// The relay holds the reply to every question card among them: one that names a card only as its parent
/// (no `E`, or another root) is an answer missing its root and refused for it ([`check_answer`]), not
/// stored as a plain comment next to the card.
pub fn named_requests(event: &Event) -> Vec<EventId> {
    if event.kind != COMMENT {
        return Vec::new();
    }
    let mut ids: Vec<EventId> = Vec::new();
    for name in ["E", "e"] {
        for id in tag_values(event, name).filter_map(|t| EventId::from_hex(t.get(1)?).ok()) {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    ids
}

/// What a valid answer chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    /// The chosen option ids (none for a text answer).
    pub choices: Vec<String>,
    /// The text given, if any.
    pub text: Option<String>,
}

/// Why a reply to a question card does not answer it. Sent as `OK false` with [`prefix`](Self::prefix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerRefusal {
    /// Its author is not among the asked people.
    NotAsked,
    /// Created before the question.
    BeforeQuestion,
    /// Created at or after the question's expiration.
    Expired(Timestamp),
    /// Created more than [`MAX_ANSWER_SKEW_SECS`] in the future.
    FromTheFuture,
    /// A NIP-22 tag is missing or names something else: which one.
    Tag(&'static str),
    /// The content does not fit the question: why.
    Content(ContentError),
    /// The question is settled already, by this answer.
    Settled(EventId),
    /// The question was deleted (NIP-09, or by a room's moderator).
    Deleted,
}

impl AnswerRefusal {
    /// The NIP-01 machine-readable prefix.
    pub fn prefix(&self) -> &'static str {
        match self {
            Self::NotAsked => "restricted",
            Self::Settled(_) => "duplicate",
            _ => "invalid",
        }
    }
}

impl fmt::Display for AnswerRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotAsked => write!(
                f,
                "only the people the question asks (its p tags) may answer it"
            ),
            Self::BeforeQuestion => write!(f, "the answer is dated before the question"),
            Self::Expired(at) => write!(f, "the question expired at {}", at.as_secs()),
            Self::FromTheFuture => write!(
                f,
                "the answer is dated more than {MAX_ANSWER_SKEW_SECS} s in the future"
            ),
            Self::Tag(rule) => write!(f, "{rule}"),
            Self::Content(why) => write!(f, "{why}"),
            Self::Settled(by) => write!(f, "the question is already settled by answer {by}"),
            Self::Deleted => write!(f, "the question was deleted"),
        }
    }
}

/// Why an answer's content does not fit its question card (sent inside [`AnswerRefusal::Content`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContentError {
    /// The answer is longer than [`MAX_ANSWER_CHARS`].
    #[error("the answer is {chars} characters; at most {max}", max = MAX_ANSWER_CHARS)]
    TooLong {
        /// Its length in characters.
        chars: usize,
    },
    /// A freeform answer in JSON that is not `{"text":...}` or `{"choices":[...],"text":...}`.
    #[error(
        "a freeform answer is {{\"text\":...}} or {{\"choices\":[...],\"text\":...}}, nothing else"
    )]
    Freeform,
    /// A `selection=multiple` answer that is not a JSON array of option ids.
    #[error("selection=multiple is answered with a JSON array of option ids")]
    NotAnArray,
    /// No option chosen.
    #[error("choose at least one option")]
    NoChoice,
    /// More than one option chosen for a `selection=single` question.
    #[error("selection=single takes exactly one option id")]
    NotOneChoice,
    /// An id that names no option of the question.
    #[error("{0:?} is not an option of the question")]
    NotAnOption(String),
    /// An option chosen twice.
    #[error("option {0:?} is chosen twice")]
    ChosenTwice(String),
    /// A text answer that is empty or only whitespace.
    #[error("the text answer is empty")]
    EmptyText,
    /// A text answer longer than [`MAX_ANSWER_CHARS`].
    #[error("the text answer is {chars} characters; at most {max}", max = MAX_ANSWER_CHARS)]
    TextTooLong {
        /// Its length in characters.
        chars: usize,
    },
}

fn has_tag(event: &Event, name: &str, value: &str) -> bool {
    tag_values(event, name).any(|t| t.get(1).map(String::as_str) == Some(value))
}

/// Whether `answer` (a kind 1111 reply naming `request` as its root) validly answers the question card
/// `card` of `request` at `now`; what it chose if so. Whether it is the first is the store's to say.
pub fn check_answer(
    request: &Event,
    card: &QuestionCard,
    answer: &Event,
    now: Timestamp,
) -> Result<Settlement, AnswerRefusal> {
    if !card.asked.contains(&answer.pubkey) {
        return Err(AnswerRefusal::NotAsked);
    }
    if answer.created_at < request.created_at {
        return Err(AnswerRefusal::BeforeQuestion);
    }
    if let Some(at) = card.expiration {
        if answer.created_at >= at {
            return Err(AnswerRefusal::Expired(at));
        }
    }
    if answer.created_at.as_secs() > now.as_secs().saturating_add(MAX_ANSWER_SKEW_SECS) {
        return Err(AnswerRefusal::FromTheFuture);
    }
    let id = request.id.to_hex();
    let author = request.pubkey.to_hex();
    let rules: [(&str, &str, &'static str); 7] = [
        ("E", &id, "E must name the question as the root"),
        ("e", &id, "e must name the question as the parent"),
        ("K", "9", "K must be 9, the question's kind"),
        ("k", "9", "k must be 9, the question's kind"),
        ("P", &author, "P must be the question's author"),
        ("p", &author, "p must be the question's author"),
        ("h", &card.room, "h must be the question's room"),
    ];
    for (name, value, rule) in rules {
        if !has_tag(answer, name, value) {
            return Err(AnswerRefusal::Tag(rule));
        }
    }
    content(card, &answer.content).map_err(AnswerRefusal::Content)
}

fn valid_choices(card: &QuestionCard, ids: &[String]) -> Result<Vec<String>, ContentError> {
    if ids.is_empty() {
        return Err(ContentError::NoChoice);
    }
    if card.selection == Selection::Single && ids.len() != 1 {
        return Err(ContentError::NotOneChoice);
    }
    let mut seen = HashSet::new();
    for id in ids {
        if !card.options.iter().any(|(o, _)| o == id) {
            return Err(ContentError::NotAnOption(id.clone()));
        }
        if !seen.insert(id.as_str()) {
            return Err(ContentError::ChosenTwice(id.clone()));
        }
    }
    Ok(ids.to_vec())
}

fn valid_text(text: &str) -> Result<String, ContentError> {
    let n = text.chars().count();
    if text.trim().is_empty() {
        return Err(ContentError::EmptyText);
    }
    if n > MAX_ANSWER_CHARS {
        return Err(ContentError::TextTooLong { chars: n });
    }
    Ok(text.to_owned())
}

/// The content of an answer, read against the card.
fn content(card: &QuestionCard, content: &str) -> Result<Settlement, ContentError> {
    let n = content.chars().count();
    if n > MAX_ANSWER_CHARS {
        return Err(ContentError::TooLong { chars: n });
    }
    if card.selection == Selection::Text {
        return Ok(Settlement {
            choices: vec![],
            text: Some(valid_text(content)?),
        });
    }
    if card.freeform && content.trim_start().starts_with('{') {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Freeform {
            choices: Option<Vec<String>>,
            text: String,
        }
        let form: Freeform = serde_json::from_str(content).map_err(|_| ContentError::Freeform)?;
        let choices = match form.choices {
            Some(ids) => valid_choices(card, &ids)?,
            None => vec![],
        };
        return Ok(Settlement {
            choices,
            text: Some(valid_text(&form.text)?),
        });
    }
    let ids = match card.selection {
        Selection::Single => vec![content.to_owned()],
        _ => serde_json::from_str::<Vec<String>>(content).map_err(|_| ContentError::NotAnArray)?,
    };
    Ok(Settlement {
        choices: valid_choices(card, &ids)?,
        text: None,
    })
}

#[cfg(test)]
mod tests;
