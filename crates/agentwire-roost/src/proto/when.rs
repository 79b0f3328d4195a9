//! `when`, a schedule's vocabulary (spec M46): `every 30m | daily 18:00 | weekdays 09:00 | cron "…"`, one
//! parser for the concierge's standing orders and the daemon's schedules. [`When::parse`] reads the text
//! (anything else is the protocol's `bad_request`, with a [`WhenError`] that says what is wrong), `Display`
//! gives the canonical text back (and serde keeps a `When` as that text), and [`When::next_after`] says when
//! it next falls due, read in a [`Zone`]. Pure: time comes in and goes out as unix milliseconds.
//!
//! # Times that do not exist, or exist twice
//!
//! A time of day (`daily`, `weekdays`, and a `cron` at a fixed minute and hour) is read on the zone's wall
//! clock. On a day the clock jumps forward over it (02:30 on the day Europe/Oslo goes from 02:00 to 03:00),
//! it falls due at the jump, the first instant after the gap (03:00 that day): a daily order is moved, not
//! skipped. On a day the clock goes back over it, so that it happens twice, it falls due once, at the
//! earlier. A `cron` that runs every few minutes or hours has no runs inside a gap and runs in both halves
//! of an overlap (croner's rules, which the times of day here follow too).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Datelike, Local, NaiveDateTime, NaiveTime, TimeDelta, TimeZone, Utc};
use croner::parser::{CronParser, Seconds, Year};

/// The longest `when` text, in bytes: it is kept with every order and schedule and echoed in digests, and
/// every accepted form fits in far less (a cron expression of five fields is rarely past 40).
pub const MAX_WHEN_BYTES: usize = 200;

/// The shortest `every`: a schedule wakes a daemon and a concierge, so it is minute-grained (as cron is),
/// and anything finer is a loop, not a schedule.
pub const MIN_EVERY: Duration = Duration::from_secs(60);

/// The longest `every`, 31 days: past a month, `cron` says what is meant (a day of the month), and the bound
/// keeps the arithmetic far from overflow.
pub const MAX_EVERY: Duration = Duration::from_secs(31 * SECS_PER_DAY);

/// The accepted forms, as error messages show them.
const FORMS: &str = r#"every 30m | daily 18:00 | weekdays 09:00 | cron "…""#;

const SECS_PER_MINUTE: u64 = 60;
const SECS_PER_HOUR: u64 = 60 * SECS_PER_MINUTE;
const SECS_PER_DAY: u64 = 24 * SECS_PER_HOUR;

/// How far past a time that falls in a gap the first instant after the jump is looked for: a day and an
/// hour, as a zone once skipped a whole day (Pacific/Apia, 2011-12-30).
const MAX_GAP_MINUTES: i64 = 25 * 60;

/// How much of a refused text or zone name an error shows.
const SHOWN_CHARS: usize = 40;

/// A schedule: when something falls due, again and again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum When {
    /// `every 30m`, `every 2h`, `every 1d`: this long after the previous time (or after it was set).
    /// [`When::parse`] makes whole minutes from [`MIN_EVERY`] to [`MAX_EVERY`]; a duration built otherwise
    /// shows as it is (`every 90s`, `every 40d`) and does not parse back.
    Every(Duration),
    /// `daily 18:00`: at that time of day, every day.
    Daily {
        /// 0-23.
        hour: u8,
        /// 0-59.
        minute: u8,
    },
    /// `weekdays 09:00`: at that time of day, Monday to Friday.
    Weekdays {
        /// 0-23.
        hour: u8,
        /// 0-59.
        minute: u8,
    },
    /// `cron "0 9 * * 1-5"`: a cron expression of five fields.
    Cron(CronExpr),
}

/// A cron expression of five fields (minute, hour, day of month, month, day of week) in croner's dialect:
/// the standard fields and names (`MON-FRI`, `JAN`), `L`, `W`, `#`, and `@daily`-style nicknames; no seconds
/// or years. Two are equal when their canonical texts are.
#[derive(Clone)]
pub struct CronExpr {
    /// The canonical text: the fields as given, one space apart.
    text: String,
    /// Boxed: croner's parsed pattern is some 300 bytes, which every [`When`] would otherwise carry.
    cron: Box<croner::Cron>,
}

impl CronExpr {
    /// The expression's canonical text (without the quotes): `0 9 * * 1-5`.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl PartialEq for CronExpr {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for CronExpr {}

impl fmt::Debug for CronExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CronExpr").field(&self.text).finish()
    }
}

impl fmt::Display for CronExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A `when` text (or a zone name) refused: what was given, and what is wrong with it. Its message names both
/// and the accepted form, as in `when "daily 25:00": the hour is 0-23`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{subject} {shown:?}: {kind}")]
pub struct WhenError {
    subject: &'static str,
    shown: String,
    kind: WhenErrorKind,
}

impl WhenError {
    fn when(text: &str, kind: WhenErrorKind) -> WhenError {
        WhenError {
            subject: "when",
            shown: shown(text),
            kind,
        }
    }

    /// What is wrong.
    pub fn kind(&self) -> &WhenErrorKind {
        &self.kind
    }
}

/// What is wrong with a refused `when` text or zone name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WhenErrorKind {
    /// Longer than [`MAX_WHEN_BYTES`].
    #[error("longer than {MAX_WHEN_BYTES} bytes")]
    TooLong,
    /// Not one of the forms.
    #[error("not one of {FORMS}")]
    Unknown,
    /// `every` without a whole number and a unit.
    #[error("the interval is a whole number and m, h or d, as in every 30m, every 2h or every 1d")]
    Interval,
    /// An interval under [`MIN_EVERY`].
    #[error("the interval is at least 1 minute")]
    IntervalTooShort,
    /// An interval over [`MAX_EVERY`].
    #[error("the interval is at most 31 days")]
    IntervalTooLong,
    /// `daily` or `weekdays` without a time of day.
    #[error("the time of day is HH:MM on the 24-hour clock, as in daily 18:00 or weekdays 09:00")]
    TimeOfDay,
    /// An hour past 23.
    #[error("the hour is 0-23")]
    Hour,
    /// A minute past 59.
    #[error("the minute is 0-59")]
    Minute,
    /// Text after a whole schedule (shown).
    #[error("{0:?} after the schedule; one of {FORMS}")]
    Trailing(String),
    /// `cron` without an expression in double quotes.
    #[error(r#"the cron expression is in double quotes, as in cron "0 9 * * 1-5""#)]
    CronQuotes,
    /// `cron ""`.
    #[error("the cron expression is empty")]
    CronEmpty,
    /// A cron expression of another number of fields (given): a sixth is seconds (or years), which a
    /// schedule does not have.
    #[error("cron has 5 fields (minute hour day-of-month month day-of-week, no seconds), not {0}")]
    CronFields(usize),
    /// A cron expression croner refuses, with its reason.
    #[error("the cron expression does not parse: {0}")]
    Cron(String),
    /// Not a zone name [`Zone::named`] knows.
    #[error("not an IANA time zone name, such as Europe/Oslo or UTC")]
    Zone,
}

/// At most [`SHOWN_CHARS`] of `text`, marked when cut.
fn shown(text: &str) -> String {
    match text.char_indices().nth(SHOWN_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

impl When {
    /// Reads a `when` text: surrounding whitespace is ignored, the keywords (`every`, `daily`, `weekdays`,
    /// `cron`) are lowercase. `every N` takes a unit `m`, `h` or `d`; a time of day is `HH:MM` or `H:MM`.
    pub fn parse(text: &str) -> Result<When, WhenError> {
        if text.len() > MAX_WHEN_BYTES {
            return Err(WhenError::when(text.trim(), WhenErrorKind::TooLong));
        }
        let text = text.trim();
        let (keyword, rest) = match text.split_once(char::is_whitespace) {
            Some((keyword, rest)) => (keyword, rest.trim_start()),
            None => (text, ""),
        };
        let parsed = match keyword {
            "every" => one_word(rest).and_then(parse_every).map(When::Every),
            "daily" => one_word(rest)
                .and_then(parse_time_of_day)
                .map(|(hour, minute)| When::Daily { hour, minute }),
            "weekdays" => one_word(rest)
                .and_then(parse_time_of_day)
                .map(|(hour, minute)| When::Weekdays { hour, minute }),
            "cron" => parse_cron(rest).map(When::Cron),
            _ => Err(WhenErrorKind::Unknown),
        };
        parsed.map_err(|kind| WhenError::when(text, kind))
    }

    /// The first time strictly after `after_ms` (unix milliseconds) at which this falls due, read in `zone`:
    /// `every` is that long after `after_ms`; a time of day and a cron expression are read on `zone`'s wall
    /// clock (see the module's doc for the days its clock jumps). `None` when there is none: a cron
    /// expression that never matches (`0 0 31 2 *`, or nothing before the year 5000), or a time past what
    /// the calendar holds.
    pub fn next_after(&self, after_ms: u64, zone: &Zone) -> Option<u64> {
        match zone.0 {
            ZoneKind::Named(tz) => self.next_in(after_ms, &tz),
            ZoneKind::System => self.next_in(after_ms, &Local),
        }
    }

    fn next_in<Z: TimeZone>(&self, after_ms: u64, zone: &Z) -> Option<u64> {
        let after = i64::try_from(after_ms)
            .ok()
            .and_then(DateTime::<Utc>::from_timestamp_millis)
            .map(|after| after.with_timezone(zone));
        let next = match self {
            // Never zero, so that it is strictly after even for a duration `parse` does not make.
            When::Every(every) => {
                return after_ms.checked_add(u64::try_from(every.as_millis()).ok()?.max(1))
            }
            When::Daily { hour, minute } => {
                next_time_of_day(after.as_ref()?, *hour, *minute, false)?
            }
            When::Weekdays { hour, minute } => {
                next_time_of_day(after.as_ref()?, *hour, *minute, true)?
            }
            When::Cron(expr) => expr
                .cron
                .find_next_occurrence(after.as_ref()?, false)
                .ok()?,
        };
        u64::try_from(next.timestamp_millis()).ok()
    }
}

/// The first `hour:minute` on `after`'s wall clock strictly after it, on any day or Monday to Friday only.
fn next_time_of_day<Z: TimeZone>(
    after: &DateTime<Z>,
    hour: u8,
    minute: u8,
    weekdays_only: bool,
) -> Option<DateTime<Z>> {
    let time = NaiveTime::from_hms_opt(hour.into(), minute.into(), 0)?;
    let zone = after.timezone();
    // From the day before `after`'s (a jump over midnight could put that day's time past `after`), the time
    // is due within five days (Friday after it to Monday); eight leave room for a skipped day.
    let mut day = after.date_naive().pred_opt()?;
    for _ in 0..8 {
        if !weekdays_only || day.weekday().number_from_monday() <= 5 {
            if let Some(at) = on_wall_clock(&zone, day.and_time(time)) {
                if at > *after {
                    return Some(at);
                }
            }
        }
        day = day.succ_opt()?;
    }
    None
}

/// The instant `zone`'s wall clock reads `local`: the earlier of two when the clock went back over it, the
/// jump (the first whole minute after the gap) when it jumped forward over it.
fn on_wall_clock<Z: TimeZone>(zone: &Z, local: NaiveDateTime) -> Option<DateTime<Z>> {
    zone.from_local_datetime(&local).earliest().or_else(|| {
        (1..=MAX_GAP_MINUTES).find_map(|minutes| {
            let later = local.checked_add_signed(TimeDelta::try_minutes(minutes)?)?;
            zone.from_local_datetime(&later).earliest()
        })
    })
}

/// The one word of `rest`: more is refused with what follows.
fn one_word(rest: &str) -> Result<&str, WhenErrorKind> {
    match rest.split_once(char::is_whitespace) {
        Some((_, more)) if !more.trim().is_empty() => {
            Err(WhenErrorKind::Trailing(shown(more.trim())))
        }
        Some((word, _)) => Ok(word),
        None => Ok(rest),
    }
}

/// `30m`, `2h`, `1d`.
fn parse_every(word: &str) -> Result<Duration, WhenErrorKind> {
    let unit_at = word
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(word.len());
    let (digits, unit) = word.split_at(unit_at);
    let unit_secs = match unit {
        "m" => SECS_PER_MINUTE,
        "h" => SECS_PER_HOUR,
        "d" => SECS_PER_DAY,
        _ => return Err(WhenErrorKind::Interval),
    };
    if digits.is_empty() {
        return Err(WhenErrorKind::Interval);
    }
    // Only digits are left, so a number that does not parse is one too large for a u64.
    let secs = digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit_secs))
        .ok_or(WhenErrorKind::IntervalTooLong)?;
    let every = Duration::from_secs(secs);
    if every < MIN_EVERY {
        Err(WhenErrorKind::IntervalTooShort)
    } else if every > MAX_EVERY {
        Err(WhenErrorKind::IntervalTooLong)
    } else {
        Ok(every)
    }
}

/// `HH:MM` or `H:MM`, 24-hour.
fn parse_time_of_day(word: &str) -> Result<(u8, u8), WhenErrorKind> {
    let (hour, minute) = word.split_once(':').ok_or(WhenErrorKind::TimeOfDay)?;
    let digits = |part: &str, lengths: std::ops::RangeInclusive<usize>| {
        if lengths.contains(&part.len()) && part.bytes().all(|b| b.is_ascii_digit()) {
            part.parse::<u8>().map_err(|_| WhenErrorKind::TimeOfDay)
        } else {
            Err(WhenErrorKind::TimeOfDay)
        }
    };
    let (hour, minute) = (digits(hour, 1..=2)?, digits(minute, 2..=2)?);
    if hour > 23 {
        Err(WhenErrorKind::Hour)
    } else if minute > 59 {
        Err(WhenErrorKind::Minute)
    } else {
        Ok((hour, minute))
    }
}

/// `"0 9 * * 1-5"`, quotes included.
fn parse_cron(rest: &str) -> Result<CronExpr, WhenErrorKind> {
    let inner = rest
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
        .filter(|inner| !inner.contains('"'))
        .ok_or(WhenErrorKind::CronQuotes)?;
    let fields: Vec<&str> = inner.split_whitespace().collect();
    let nickname = fields.len() == 1 && fields[0].starts_with('@');
    if fields.is_empty() {
        return Err(WhenErrorKind::CronEmpty);
    } else if fields.len() != 5 && !nickname {
        return Err(WhenErrorKind::CronFields(fields.len()));
    }
    let text = fields.join(" ");
    let cron = CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(&text)
        .map_err(|e| WhenErrorKind::Cron(e.to_string()))?;
    Ok(CronExpr {
        text,
        cron: Box::new(cron),
    })
}

impl fmt::Display for When {
    /// The canonical text: `every 30m` (in the largest whole unit), `daily 09:00`, `weekdays 18:30`,
    /// `cron "0 9 * * 1-5"`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            When::Every(every) => {
                let secs = every.as_secs();
                let whole_minutes =
                    every.subsec_nanos() == 0 && secs > 0 && secs % SECS_PER_MINUTE == 0;
                if !whole_minutes {
                    write!(f, "every {secs}s")
                } else if secs % SECS_PER_DAY == 0 {
                    write!(f, "every {}d", secs / SECS_PER_DAY)
                } else if secs % SECS_PER_HOUR == 0 {
                    write!(f, "every {}h", secs / SECS_PER_HOUR)
                } else {
                    write!(f, "every {}m", secs / SECS_PER_MINUTE)
                }
            }
            When::Daily { hour, minute } => write!(f, "daily {hour:02}:{minute:02}"),
            When::Weekdays { hour, minute } => write!(f, "weekdays {hour:02}:{minute:02}"),
            When::Cron(expr) => write!(f, "cron \"{expr}\""),
        }
    }
}

impl FromStr for When {
    type Err = WhenError;

    fn from_str(text: &str) -> Result<When, WhenError> {
        When::parse(text)
    }
}

impl serde::Serialize for When {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for When {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<When, D::Error> {
        let text = String::deserialize(deserializer)?;
        When::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// The time zone a schedule's times of day and cron expressions are read in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Zone(ZoneKind);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ZoneKind {
    /// An IANA zone, from the database compiled in.
    Named(chrono_tz::Tz),
    /// The machine's own, as chrono reads it (see [`Zone::system`]).
    System,
}

impl Zone {
    /// Coordinated Universal Time.
    pub const UTC: Zone = Zone(ZoneKind::Named(chrono_tz::Tz::UTC));

    /// The IANA zone of that name, such as `Europe/Oslo` or `UTC` (as the database spells it: case
    /// matters).
    pub fn named(name: &str) -> Result<Zone, WhenError> {
        chrono_tz::Tz::from_str(name)
            .map(|tz| Zone(ZoneKind::Named(tz)))
            .map_err(|_| WhenError {
                subject: "time zone",
                shown: shown(name),
                kind: WhenErrorKind::Zone,
            })
    }

    /// The machine's own zone: the `TZ` variable, else `/etc/localtime` (UTC when neither is there), read
    /// by chrono, which notices when either changes.
    pub fn system() -> Zone {
        Zone(ZoneKind::System)
    }

    /// Unix seconds as a person reads them in this zone: `2026-12-04 18:00 CET`.
    pub fn show(&self, unix_secs: u64) -> String {
        let Some(utc) = DateTime::<Utc>::from_timestamp(unix_secs.min(i64::MAX as u64) as i64, 0)
        else {
            return unix_secs.to_string();
        };
        match self.0 {
            ZoneKind::Named(tz) => utc
                .with_timezone(&tz)
                .format("%Y-%m-%d %H:%M %Z")
                .to_string(),
            ZoneKind::System => utc
                .with_timezone(&chrono::Local)
                .format("%Y-%m-%d %H:%M %:z")
                .to_string(),
        }
    }

    /// The zone's IANA name, or `local` for [`Zone::system`].
    pub fn name(&self) -> &'static str {
        match self.0 {
            ZoneKind::Named(tz) => tz.name(),
            ZoneKind::System => "local",
        }
    }
}

impl fmt::Display for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Unix milliseconds of an RFC 3339 time.
    fn ms(rfc3339: &str) -> u64 {
        DateTime::parse_from_rfc3339(rfc3339)
            .unwrap()
            .timestamp_millis() as u64
    }

    /// The RFC 3339 text (UTC) of unix milliseconds, for readable failures.
    fn utc(ms: u64) -> String {
        DateTime::<Utc>::from_timestamp_millis(ms as i64)
            .unwrap()
            .to_rfc3339()
    }

    #[test]
    fn a_time_is_shown_in_its_zone() {
        let oslo = Zone::named("Europe/Oslo").unwrap();
        assert_eq!(oslo.show(1_796_407_200), "2026-12-04 19:00 CET");
        assert_eq!(Zone::UTC.show(1_796_407_200), "2026-12-04 18:00 UTC");
    }

    fn next(when: &str, after: &str, zone: &str) -> Option<String> {
        let when = When::parse(when).unwrap();
        when.next_after(ms(after), &Zone::named(zone).unwrap())
            .map(utc)
    }

    fn at(rfc3339: &str) -> Option<String> {
        Some(utc(ms(rfc3339)))
    }

    fn error(text: &str) -> String {
        When::parse(text).unwrap_err().to_string()
    }

    #[test]
    fn each_form_parses_and_its_canonical_text_round_trips() {
        let cases: &[(&str, &str)] = &[
            ("every 30m", "every 30m"),
            ("  every 120m\t", "every 2h"),
            ("every 2h", "every 2h"),
            ("every 90m", "every 90m"),
            ("every 24h", "every 1d"),
            ("every 1440m", "every 1d"),
            ("every 031d", "every 31d"),
            ("every 1m", "every 1m"),
            ("daily 18:00", "daily 18:00"),
            ("daily 9:05", "daily 09:05"),
            ("daily 00:00", "daily 00:00"),
            ("weekdays 09:00", "weekdays 09:00"),
            ("weekdays   23:59", "weekdays 23:59"),
            (r#"cron "0 9 * * 1-5""#, r#"cron "0 9 * * 1-5""#),
            (r#"cron   " */15  *  * * * ""#, r#"cron "*/15 * * * *""#),
            (r#"cron "30 8 * * MON-FRI""#, r#"cron "30 8 * * MON-FRI""#),
            (r#"cron "@hourly""#, r#"cron "@hourly""#),
        ];
        for (text, canonical) in cases {
            let when = When::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(when.to_string(), *canonical, "{text}");
            assert_eq!(When::parse(canonical).unwrap(), when, "{canonical}");
            assert_eq!(canonical.parse::<When>().unwrap().to_string(), *canonical);
        }
        assert_eq!(
            When::parse("every 30m").unwrap(),
            When::Every(Duration::from_secs(1800))
        );
        assert_eq!(
            When::parse("every 1d").unwrap(),
            When::Every(Duration::from_secs(86_400))
        );
        assert_eq!(
            When::parse("daily 9:05").unwrap(),
            When::Daily { hour: 9, minute: 5 }
        );
        assert_eq!(
            When::parse("weekdays 18:30").unwrap(),
            When::Weekdays {
                hour: 18,
                minute: 30
            }
        );
        let When::Cron(expr) = When::parse(r#"cron "0  9 * * 1-5""#).unwrap() else {
            panic!("not cron")
        };
        assert_eq!(expr.as_str(), "0 9 * * 1-5");
        assert_eq!(
            When::Weekdays {
                hour: 18,
                minute: 30
            }
            .to_string(),
            "weekdays 18:30"
        );
        assert_ne!(
            When::parse(r#"cron "0 9 * * 1-5""#),
            When::parse(r#"cron "0 9 * * MON-FRI""#)
        );
    }

    #[test]
    fn a_duration_parse_does_not_make_shows_as_it_is_and_is_refused() {
        let odd = When::Every(Duration::from_secs(90));
        assert_eq!(odd.to_string(), "every 90s");
        assert!(When::parse(&odd.to_string()).is_err());
        assert_eq!(When::Every(Duration::ZERO).to_string(), "every 0s");
        let long = When::Every(MAX_EVERY + Duration::from_secs(86_400));
        assert_eq!(long.to_string(), "every 32d");
        assert!(When::parse(&long.to_string()).is_err());
    }

    #[test]
    fn errors_name_the_text_what_is_wrong_and_the_forms() {
        assert_eq!(
            error("every 0m"),
            r#"when "every 0m": the interval is at least 1 minute"#
        );
        assert_eq!(
            error("daily 25:00"),
            r#"when "daily 25:00": the hour is 0-23"#
        );
        assert_eq!(
            error("hourly"),
            r#"when "hourly": not one of every 30m | daily 18:00 | weekdays 09:00 | cron "…""#
        );
        let cases: &[(&str, WhenErrorKind, &str)] = &[
            ("", WhenErrorKind::Unknown, "not one of every 30m"),
            ("Daily 09:00", WhenErrorKind::Unknown, "not one of"),
            ("every", WhenErrorKind::Interval, "m, h or d"),
            ("every 30s", WhenErrorKind::Interval, "as in every 30m"),
            ("every m", WhenErrorKind::Interval, "whole number"),
            ("every -5m", WhenErrorKind::Interval, "whole number"),
            ("every 1.5h", WhenErrorKind::Interval, "whole number"),
            ("every 30M", WhenErrorKind::Interval, "m, h or d"),
            (
                "every 32d",
                WhenErrorKind::IntervalTooLong,
                "at most 31 days",
            ),
            (
                "every 745h",
                WhenErrorKind::IntervalTooLong,
                "at most 31 days",
            ),
            (
                "every 44641m",
                WhenErrorKind::IntervalTooLong,
                "at most 31 days",
            ),
            (
                "every 99999999999999999999m",
                WhenErrorKind::IntervalTooLong,
                "at most 31 days",
            ),
            (
                "every 999999999999999999d",
                WhenErrorKind::IntervalTooLong,
                "at most 31 days",
            ),
            (
                "every 30m please",
                WhenErrorKind::Trailing("please".into()),
                r#""please" after the schedule"#,
            ),
            ("daily", WhenErrorKind::TimeOfDay, "HH:MM"),
            ("daily 9", WhenErrorKind::TimeOfDay, "as in daily 18:00"),
            ("daily 9:5", WhenErrorKind::TimeOfDay, "HH:MM"),
            ("daily 123:00", WhenErrorKind::TimeOfDay, "HH:MM"),
            ("daily +9:00", WhenErrorKind::TimeOfDay, "HH:MM"),
            ("daily 6pm", WhenErrorKind::TimeOfDay, "24-hour"),
            ("daily 24:00", WhenErrorKind::Hour, "the hour is 0-23"),
            (
                "weekdays 09:60",
                WhenErrorKind::Minute,
                "the minute is 0-59",
            ),
            (
                "daily 09:00 extra",
                WhenErrorKind::Trailing("extra".into()),
                r#""extra" after the schedule"#,
            ),
            ("cron 0 9 * * *", WhenErrorKind::CronQuotes, "double quotes"),
            (r#"cron ""#, WhenErrorKind::CronQuotes, "double quotes"),
            (
                r#"cron "0 9 * * *" x"#,
                WhenErrorKind::CronQuotes,
                "double quotes",
            ),
            (
                r#"cron "0 "9" * * *""#,
                WhenErrorKind::CronQuotes,
                "double quotes",
            ),
            (r#"cron """#, WhenErrorKind::CronEmpty, "empty"),
            (r#"cron "   ""#, WhenErrorKind::CronEmpty, "empty"),
            (
                r#"cron "0 0 9 * * *""#,
                WhenErrorKind::CronFields(6),
                "5 fields (minute hour",
            ),
            (
                r#"cron "0 0 9 * * * 2030""#,
                WhenErrorKind::CronFields(7),
                "not 7",
            ),
            (r#"cron "0 9 * *""#, WhenErrorKind::CronFields(4), "not 4"),
        ];
        for (text, kind, part) in cases {
            let err = When::parse(text).unwrap_err();
            assert_eq!(err.kind(), kind, "{text}");
            let message = err.to_string();
            assert!(
                message.starts_with(&format!("when {:?}: ", text.trim())),
                "{message}"
            );
            assert!(message.contains(part), "{text}: {message} lacks {part}");
        }
        // croner's own reason, for what it refuses.
        for text in [
            r#"cron "61 * * * *""#,
            r#"cron "* 24 * * *""#,
            r#"cron "x * * * *""#,
            r#"cron "@often""#,
        ] {
            let err = When::parse(text).unwrap_err();
            assert!(
                matches!(err.kind(), WhenErrorKind::Cron(reason) if !reason.is_empty()),
                "{text}: {err}"
            );
            assert!(
                err.to_string()
                    .contains("the cron expression does not parse: "),
                "{err}"
            );
        }
    }

    #[test]
    fn a_text_past_the_bound_is_refused_and_shown_cut() {
        let long = format!("every {}m", "1".repeat(MAX_WHEN_BYTES));
        let err = When::parse(&long).unwrap_err();
        assert_eq!(err.kind(), &WhenErrorKind::TooLong);
        assert!(
            err.to_string().ends_with("…\": longer than 200 bytes"),
            "{err}"
        );
        assert!(err.to_string().len() < 100, "{err}");
        let cron = format!(r#"cron "{}""#, "1,".repeat(100));
        assert_eq!(
            When::parse(&cron).unwrap_err().kind(),
            &WhenErrorKind::TooLong
        );
        // At the bound itself, the text is read.
        let padded = format!("{:<width$}", "every 30m", width = MAX_WHEN_BYTES);
        assert_eq!(When::parse(&padded).unwrap().to_string(), "every 30m");
    }

    #[test]
    fn odd_texts_are_refused_without_panicking() {
        let odd = [
            "",
            " ",
            "\0",
            "every",
            "every ",
            "every 99999999999999999999m",
            "every 18446744073709551615m",
            "every 0d",
            "every ⅷm",
            "every ９m",
            "every 30m\u{2003}x",
            "daily ٠٩:٠٠",
            "daily 09:00:00",
            "daily :",
            "daily 9:",
            "daily :00",
            "daily 255:00",
            "weekdays 1:1:1",
            "cron",
            "cron \"",
            "cron \"\"",
            "cron \"\"\"",
            "cron \"*/0 * * * *\"",
            "cron \"5-1 * * * *\"",
            "cron \"0-99999999999 * * * *\"",
            "cron \"* * 0 * *\"",
            "cron \"* * * 13 *\"",
            "cron \"* * * * 8\"",
            "cron \"* * * * 1#9\"",
            "cron \"* * 32W * *\"",
            "cron \"L L L L L\"",
            "cron \"+ + + + +\"",
            "cron \"@\"",
            "cron \"/ / / / /\"",
            "cron \"- - - - -\"",
            "cron \", , , , ,\"",
            "cron \"ü * * * *\"",
            "cron \"* * * * ＭＯＮ\"",
            "every 30m 🦀",
            "🦀",
            "ℌ𝔬𝔲𝔯𝔩𝔶",
        ];
        for text in odd {
            // A refusal or a schedule, never a panic; a schedule round-trips.
            if let Ok(when) = When::parse(text) {
                assert_eq!(When::parse(&when.to_string()).unwrap(), when, "{text}");
                when.next_after(0, &Zone::UTC);
            }
        }
    }

    /// A cron field of values `low..=high`: any, one, a range, a step or a list.
    fn cron_field(low: u8, high: u8) -> impl Strategy<Value = String> {
        let value = move || low..=high;
        prop_oneof![
            Just("*".to_owned()),
            value().prop_map(|v| v.to_string()),
            (value(), value()).prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b))),
            (value(), value(), 1..=high).prop_map(|(a, b, step)| format!(
                "{}-{}/{step}",
                a.min(b),
                a.max(b)
            )),
            (1..=high).prop_map(|step| format!("*/{step}")),
            (value(), value()).prop_map(|(a, b)| format!("{a},{b}")),
        ]
    }

    proptest! {
        #[test]
        fn any_text_is_refused_or_round_trips(text in "\\PC{0,60}") {
            if let Ok(when) = When::parse(&text) {
                prop_assert_eq!(When::parse(&when.to_string()).unwrap(), when);
            }
        }

        #[test]
        fn cron_like_texts_never_panic(
            fields in proptest::collection::vec("[0-9*/,LW#?+@A-Z-]{1,6}", 1..8),
            after in 0u64..4_102_444_800_000,
        ) {
            let text = format!(r#"cron "{}""#, fields.join(" "));
            if let Ok(when) = When::parse(&text) {
                prop_assert_eq!(When::parse(&when.to_string()).unwrap(), when.clone());
                if let Some(next) = when.next_after(after, &Zone::UTC) {
                    prop_assert!(next > after);
                }
            }
        }

        #[test]
        fn cron_expressions_are_due_strictly_after(
            fields in (
                cron_field(0, 59),
                cron_field(0, 23),
                prop_oneof![cron_field(1, 31), "L|[1-9]W".prop_map(String::from)],
                prop_oneof![cron_field(1, 12), "JAN|DEC|MAR-OCT".prop_map(String::from)],
                prop_oneof![
                    cron_field(0, 7),
                    "[0-6]#[1-5]|[0-6]L|MON-FRI|SAT,SUN|\\+[1-5]".prop_map(String::from),
                ],
            ),
            after in 0u64..4_102_444_800_000,
        ) {
            let (minute, hour, day, month, weekday) = fields;
            let text = format!(r#"cron "{minute} {hour} {day} {month} {weekday}""#);
            // Every field is valid, so these parse (what croner might still refuse is not this test's).
            if let Ok(when) = When::parse(&text) {
                prop_assert_eq!(When::parse(&when.to_string()).unwrap(), when.clone());
                for zone in [Zone::UTC, Zone::named("Europe/Oslo").unwrap()] {
                    if let Some(next) = when.next_after(after, &zone) {
                        prop_assert!(next > after, "{}", text);
                    }
                }
            }
        }

        #[test]
        fn every_and_times_of_day_are_due_strictly_after(
            form in 0..3u8,
            hour in 0u8..24,
            minute in 0u8..60,
            after in 0u64..4_102_444_800_000,
        ) {
            let when = match form {
                0 => When::Every(Duration::from_secs(60 * (u64::from(hour) + 1) * (u64::from(minute) + 1))),
                1 => When::Daily { hour, minute },
                _ => When::Weekdays { hour, minute },
            };
            for zone in [Zone::UTC, Zone::named("Europe/Oslo").unwrap()] {
                let next = when.next_after(after, &zone).unwrap();
                prop_assert!(next > after);
                prop_assert!(next - after <= 4 * 24 * 3600 * 1000);
            }
        }
    }

    #[test]
    fn every_is_that_long_after() {
        let every = When::parse("every 30m").unwrap();
        let after = ms("2026-03-10T10:07:31.250Z");
        assert_eq!(
            every.next_after(after, &Zone::UTC),
            Some(after + 30 * 60 * 1000)
        );
        assert_eq!(every.next_after(u64::MAX - 1, &Zone::UTC), None);
        assert_eq!(
            When::Every(Duration::ZERO).next_after(5, &Zone::UTC),
            Some(6)
        );
    }

    #[test]
    fn daily_is_the_next_time_of_day_across_midnight() {
        assert_eq!(
            next("daily 09:00", "2026-03-10T10:00:00Z", "UTC"),
            at("2026-03-11T09:00:00Z")
        );
        assert_eq!(
            next("daily 09:00", "2026-03-10T08:59:59.999Z", "UTC"),
            at("2026-03-10T09:00:00Z")
        );
        assert_eq!(
            next("daily 00:00", "2026-03-10T23:59:59.999Z", "UTC"),
            at("2026-03-11T00:00:00Z")
        );
        assert_eq!(
            next("daily 23:30", "2026-12-31T23:45:00Z", "UTC"),
            at("2027-01-01T23:30:00Z")
        );
        // In Oslo: 09:00 is 08:00 UTC in winter and 07:00 UTC in summer.
        assert_eq!(
            next("daily 09:00", "2026-03-10T12:00:00Z", "Europe/Oslo"),
            at("2026-03-11T08:00:00Z")
        );
        assert_eq!(
            next("daily 09:00", "2026-07-10T12:00:00Z", "Europe/Oslo"),
            at("2026-07-11T07:00:00Z")
        );
        // 00:30 in Oslo is the day before in UTC.
        assert_eq!(
            next("daily 00:30", "2026-03-10T12:00:00Z", "Europe/Oslo"),
            at("2026-03-10T23:30:00Z")
        );
    }

    #[test]
    fn due_times_are_strictly_after() {
        assert_eq!(
            next("daily 09:00", "2026-03-10T09:00:00Z", "UTC"),
            at("2026-03-11T09:00:00Z")
        );
        assert_eq!(
            next("weekdays 09:00", "2026-03-10T09:00:00Z", "UTC"),
            at("2026-03-11T09:00:00Z")
        );
        assert_eq!(
            next(r#"cron "0 9 * * *""#, "2026-03-10T09:00:00Z", "UTC"),
            at("2026-03-11T09:00:00Z")
        );
        assert_eq!(
            next(r#"cron "0 9 * * *""#, "2026-03-10T09:00:00.001Z", "UTC"),
            at("2026-03-11T09:00:00Z")
        );
        assert_eq!(
            next(r#"cron "*/15 * * * *""#, "2026-03-10T10:15:00Z", "UTC"),
            at("2026-03-10T10:30:00Z")
        );
    }

    #[test]
    fn weekdays_skip_saturday_and_sunday() {
        // 2026-03-27 is a Friday.
        let friday_after = "2026-03-27T10:00:00Z";
        assert_eq!(
            next("weekdays 09:00", friday_after, "UTC"),
            at("2026-03-30T09:00:00Z")
        );
        assert_eq!(
            next("daily 09:00", friday_after, "UTC"),
            at("2026-03-28T09:00:00Z")
        );
        assert_eq!(
            next("weekdays 09:00", "2026-03-27T08:00:00Z", "UTC"),
            at("2026-03-27T09:00:00Z")
        );
        assert_eq!(
            next("weekdays 09:00", "2026-03-28T08:00:00Z", "UTC"),
            at("2026-03-30T09:00:00Z")
        );
        // Monday 00:30 in Oslo is Sunday 23:30 UTC (winter): due, though UTC says Sunday.
        assert_eq!(
            next("weekdays 00:30", "2026-03-06T12:00:00Z", "Europe/Oslo"),
            at("2026-03-08T23:30:00Z")
        );
    }

    #[test]
    fn cron_finds_the_next_match() {
        let weekdays = r#"cron "0 9 * * 1-5""#;
        assert_eq!(
            next(weekdays, "2026-03-27T10:00:00Z", "UTC"),
            at("2026-03-30T09:00:00Z")
        );
        assert_eq!(
            next(weekdays, "2026-03-27T10:00:00Z", "Europe/Oslo"),
            at("2026-03-30T07:00:00Z")
        );
        let quarter = r#"cron "*/15 * * * *""#;
        assert_eq!(
            next(quarter, "2026-03-10T10:07:30Z", "UTC"),
            at("2026-03-10T10:15:00Z")
        );
        assert_eq!(
            next(quarter, "2026-03-10T23:59:00Z", "Europe/Oslo"),
            at("2026-03-11T00:00:00Z")
        );
        // The same days and times as `weekdays 09:00`, a fortnight long, in a zone with DST.
        let (cron, plain) = (
            When::parse(weekdays).unwrap(),
            When::parse("weekdays 09:00").unwrap(),
        );
        let oslo = Zone::named("Europe/Oslo").unwrap();
        let (mut a, mut b) = (ms("2026-03-20T00:00:00Z"), ms("2026-03-20T00:00:00Z"));
        for _ in 0..10 {
            a = cron.next_after(a, &oslo).unwrap();
            b = plain.next_after(b, &oslo).unwrap();
            assert_eq!(utc(a), utc(b));
        }
    }

    #[test]
    fn a_cron_that_never_matches_has_no_next_time() {
        let oslo = Zone::named("Europe/Oslo").unwrap();
        for text in [
            r#"cron "0 0 31 2 *""#,
            r#"cron "* * 30 2 *""#,
            r#"cron "*/5 * 31 4,6,9,11 *""#,
        ] {
            let never = When::parse(text).unwrap();
            for zone in [Zone::UTC, oslo] {
                assert_eq!(
                    never.next_after(ms("2026-03-10T00:00:00Z"), &zone),
                    None,
                    "{text}"
                );
            }
        }
    }

    #[test]
    fn a_time_of_day_in_the_spring_gap_falls_due_at_the_jump() {
        // 2026-03-29: Oslo's clock goes from 02:00 (CET, UTC+1) to 03:00 (CEST, UTC+2); 02:30 does not exist.
        // The jump is 03:00 CEST, 01:00 UTC; the next day, 02:30 CEST is 00:30 UTC.
        for when in ["daily 02:30", r#"cron "30 2 * * *""#] {
            assert_eq!(
                next(when, "2026-03-28T12:00:00Z", "Europe/Oslo"),
                at("2026-03-29T01:00:00Z"),
                "{when}"
            );
            assert_eq!(
                next(when, "2026-03-29T01:00:00Z", "Europe/Oslo"),
                at("2026-03-30T00:30:00Z"),
                "{when}"
            );
        }
        // A weekday schedule does not run on that Sunday at all.
        assert_eq!(
            next("weekdays 02:30", "2026-03-28T12:00:00Z", "Europe/Oslo"),
            at("2026-03-30T00:30:00Z")
        );
        // A time beside the gap is not moved.
        assert_eq!(
            next("daily 03:00", "2026-03-28T12:00:00Z", "Europe/Oslo"),
            at("2026-03-29T01:00:00Z")
        );
        assert_eq!(
            next("daily 01:59", "2026-03-28T12:00:00Z", "Europe/Oslo"),
            at("2026-03-29T00:59:00Z")
        );
    }

    #[test]
    fn a_time_of_day_the_autumn_overlap_repeats_falls_due_once_at_the_earlier() {
        // 2026-10-25: Oslo's clock goes from 03:00 (CEST) back to 02:00 (CET); 02:30 is 00:30 and 01:30 UTC.
        for when in ["daily 02:30", r#"cron "30 2 * * *""#] {
            assert_eq!(
                next(when, "2026-10-24T12:00:00Z", "Europe/Oslo"),
                at("2026-10-25T00:30:00Z"),
                "{when}"
            );
            assert_eq!(
                next(when, "2026-10-25T00:30:00Z", "Europe/Oslo"),
                at("2026-10-26T01:30:00Z"),
                "{when}"
            );
        }
    }

    #[test]
    fn a_cron_every_few_minutes_skips_the_gap_and_runs_in_both_halves_of_the_overlap() {
        let half_hourly = When::parse(r#"cron "*/30 * * * *""#).unwrap();
        let oslo = Zone::named("Europe/Oslo").unwrap();
        let runs = |from: &str, n: usize| {
            let mut at = ms(from);
            (0..n)
                .map(|_| {
                    at = half_hourly.next_after(at, &oslo).unwrap();
                    utc(at)
                })
                .collect::<Vec<_>>()
        };
        // Spring: 01:30 CET, then 03:00 CEST (02:00 and 02:30 do not exist).
        let spring = ["2026-03-29T00:30:00+00:00", "2026-03-29T01:00:00+00:00"];
        assert_eq!(runs("2026-03-29T00:00:00Z", 2), spring);
        // Autumn: 02:00 and 02:30 CEST, then 02:00 and 02:30 again in CET, then 03:00 CET.
        let autumn = [
            "2026-10-25T00:00:00+00:00",
            "2026-10-25T00:30:00+00:00",
            "2026-10-25T01:00:00+00:00",
            "2026-10-25T01:30:00+00:00",
            "2026-10-25T02:00:00+00:00",
        ];
        assert_eq!(runs("2026-10-24T23:45:00Z", 5), autumn);
    }

    #[test]
    fn zones_are_iana_names() {
        assert_eq!(Zone::named("UTC").unwrap(), Zone::UTC);
        assert_eq!(
            Zone::named("Europe/Oslo").unwrap().to_string(),
            "Europe/Oslo"
        );
        let err = Zone::named("Mars/Olympus_Mons").unwrap_err();
        assert_eq!(err.kind(), &WhenErrorKind::Zone);
        assert_eq!(
            err.to_string(),
            r#"time zone "Mars/Olympus_Mons": not an IANA time zone name, such as Europe/Oslo or UTC"#
        );
        assert!(Zone::named("").is_err());
        assert!(
            Zone::named(&"x".repeat(10_000))
                .unwrap_err()
                .to_string()
                .len()
                < 150
        );
        // The machine's zone, whichever it is, has a daily time within a day and its DST hour.
        let local = Zone::system();
        assert_eq!(local.name(), "local");
        let after = ms("2026-03-10T12:00:00Z");
        let due = When::parse("daily 09:00")
            .unwrap()
            .next_after(after, &local)
            .unwrap();
        assert!(due > after && due - after <= 25 * 3600 * 1000);
    }

    #[test]
    fn serde_keeps_the_canonical_text() {
        #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
        struct Order {
            when: When,
        }
        for text in [
            "every 2h",
            "daily 18:00",
            "weekdays 09:00",
            r#"cron "0 9 * * 1-5""#,
        ] {
            let order = Order {
                when: When::parse(text).unwrap(),
            };
            let json = serde_json::to_string(&order).unwrap();
            assert_eq!(json, serde_json::json!({ "when": text }).to_string());
            assert_eq!(serde_json::from_str::<Order>(&json).unwrap(), order);
        }
        let read: Order = serde_json::from_str(r#"{"when":" every 120m "}"#).unwrap();
        assert_eq!(read.when.to_string(), "every 2h");
        let err = serde_json::from_str::<Order>(r#"{"when":"hourly"}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains(r#"when "hourly": not one of"#), "{err}");
        assert!(serde_json::from_str::<Order>(r#"{"when":30}"#).is_err());
    }
}
