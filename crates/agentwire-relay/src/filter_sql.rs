//! Turns one NIP-01 filter into one SQL query over the event tables, matching exactly what
//! `nostr::Filter::match_event` matches (so stored and live results agree).
//!
//! Semantics mirrored from `match_event`: an empty `ids`, `authors` or `kinds` list is no
//! constraint; an empty `#x` list matches nothing. Expired events (NIP-40) are never returned.

use std::fmt::Write as _;

use nostr::filter::Filter;
use nostr::types::Timestamp;
use rusqlite::types::Value;

use crate::limits::MAX_FILTER_VALUES;

/// Why a filter cannot be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FilterError {
    /// NIP-50 search is not implemented.
    #[error("unsupported: search (NIP-50) is not supported")]
    Search,
    /// The filter lists more values than [`MAX_FILTER_VALUES`].
    #[error("invalid: filter lists {0} values, at most {MAX_FILTER_VALUES} are allowed")]
    TooManyValues(usize),
}

/// Checks what the SQL translation cannot take; [`filter_to_sql`] runs the same check.
pub(crate) fn check_filter(filter: &Filter) -> Result<(), FilterError> {
    if filter.search.is_some() {
        return Err(FilterError::Search);
    }
    let values = filter.ids.as_ref().map_or(0, |s| s.len())
        + filter.authors.as_ref().map_or(0, |s| s.len())
        + filter.kinds.as_ref().map_or(0, |s| s.len())
        + filter
            .generic_tags
            .values()
            .map(|v| v.len() + 1)
            .sum::<usize>();
    if values > MAX_FILTER_VALUES {
        return Err(FilterError::TooManyValues(values));
    }
    Ok(())
}

/// One SQL statement and its parameters. Rows are `(seq, id, created_at, json)`, newest first
/// (by `created_at`, then lowest id).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SqlQuery {
    pub(crate) sql: String,
    pub(crate) params: Vec<Value>,
}

/// Converts a timestamp to SQLite's signed integer, saturating.
pub(crate) fn ts_to_sql(ts: Timestamp) -> i64 {
    i64::try_from(ts.as_secs()).unwrap_or(i64::MAX)
}

/// Builds the query for `filter`, hiding events expired at `now` (NIP-40: from the expiration second on)
/// and the events and member lists (39002) of the rooms in `hidden` (private rooms the reader may not see,
/// retired rooms).
///
/// `Ok(None)` when the filter can match nothing (limit 0, an empty tag list, an impossible time
/// range), so no query needs to run. The filter's own `limit` is used as is: callers cap it.
pub(crate) fn filter_to_sql(
    filter: &Filter,
    now: Timestamp,
    hidden: &[String],
) -> Result<Option<SqlQuery>, FilterError> {
    check_filter(filter)?;
    if filter.limit == Some(0) {
        return Ok(None);
    }
    if filter.generic_tags.values().any(|values| values.is_empty()) {
        return Ok(None);
    }
    // Stored `created_at` never exceeds i64::MAX (larger events are refused), so a `since`
    // beyond it matches nothing, and an `until` beyond it is no constraint.
    let since = match filter.since {
        Some(since) => match i64::try_from(since.as_secs()) {
            Ok(s) => Some(s),
            Err(_) => return Ok(None),
        },
        None => None,
    };
    let until = filter.until.and_then(|u| i64::try_from(u.as_secs()).ok());
    if let (Some(s), Some(u)) = (since, until) {
        if s > u {
            return Ok(None);
        }
    }

    let mut sql = String::from(
        "SELECT seq, id, created_at, json FROM events WHERE (expires_at IS NULL OR expires_at > ?)",
    );
    let mut params = vec![Value::Integer(ts_to_sql(now))];
    if !hidden.is_empty() {
        let list = vec!["?"; hidden.len()].join(", ");
        sql.push_str(" AND seq NOT IN (SELECT event_seq FROM tags WHERE name = 'h' AND value IN (");
        sql.push_str(&list);
        // A hidden room's member list (39002, addressed by its `d`) with it.
        sql.push_str(&format!(
            ")) AND NOT (kind = {} AND address IN ({list}))",
            crate::rooms::GROUP_MEMBERS
        ));
        params.extend(hidden.iter().map(|h| Value::Text(h.clone())));
        params.extend(hidden.iter().map(|h| Value::Text(h.clone())));
    }

    if let Some(ids) = filter.ids.as_ref().filter(|s| !s.is_empty()) {
        in_list(&mut sql, "id", ids.len());
        params.extend(ids.iter().map(|id| Value::Blob(id.as_bytes().to_vec())));
    }
    // With a tag condition, look events up by tag: a `#p`/`#e`/`#s` value names one recipient,
    // run or session, while an author or a kind can cover most of the database. The unary `+`
    // keeps SQLite (which has no statistics here) from driving the query by those indexes.
    let tagged = !filter.generic_tags.is_empty();
    if let Some(authors) = filter.authors.as_ref().filter(|s| !s.is_empty()) {
        in_list(
            &mut sql,
            if tagged { "+pubkey" } else { "pubkey" },
            authors.len(),
        );
        params.extend(authors.iter().map(|pk| Value::Blob(pk.as_bytes().to_vec())));
    }
    if let Some(kinds) = filter.kinds.as_ref().filter(|s| !s.is_empty()) {
        in_list(&mut sql, if tagged { "+kind" } else { "kind" }, kinds.len());
        params.extend(kinds.iter().map(|k| Value::Integer(i64::from(k.as_u16()))));
    }
    if let Some(since) = since {
        sql.push_str(" AND created_at >= ?");
        params.push(Value::Integer(since));
    }
    if let Some(until) = until {
        sql.push_str(" AND created_at <= ?");
        params.push(Value::Integer(until));
    }
    for (tag, values) in &filter.generic_tags {
        sql.push_str(" AND seq IN (SELECT event_seq FROM tags WHERE name = ? AND value IN (");
        push_placeholders(&mut sql, values.len());
        sql.push_str("))");
        params.push(Value::Text(tag.as_str().to_owned()));
        params.extend(values.iter().map(|v| Value::Text(v.clone())));
    }
    sql.push_str(" ORDER BY created_at DESC, id ASC");
    if let Some(limit) = filter.limit {
        let _ = write!(sql, " LIMIT {}", i64::try_from(limit).unwrap_or(i64::MAX));
    }
    Ok(Some(SqlQuery { sql, params }))
}

fn in_list(sql: &mut String, column: &str, n: usize) {
    let _ = write!(sql, " AND {column} IN (");
    push_placeholders(sql, n);
    sql.push(')');
}

fn push_placeholders(sql: &mut String, n: usize) {
    for i in 0..n {
        sql.push_str(if i == 0 { "?" } else { ",?" });
    }
}

#[cfg(test)]
mod tests {
    use nostr::event::Kind;
    use nostr::filter::SingleLetterTag;
    use nostr::key::Keys;

    use super::*;

    #[test]
    fn empty_filter_selects_unexpired_newest_first() {
        let q = filter_to_sql(&Filter::new(), Timestamp::from_secs(5), &[])
            .unwrap()
            .unwrap();
        assert_eq!(
            q.sql,
            "SELECT seq, id, created_at, json FROM events WHERE (expires_at IS NULL OR expires_at > ?) ORDER BY created_at DESC, id ASC"
        );
        assert_eq!(q.params, vec![Value::Integer(5)]);
    }

    #[test]
    fn all_fields() {
        let pk = Keys::generate().public_key();
        let f = Filter::new()
            .author(pk)
            .kinds([Kind::from_u16(1), Kind::from_u16(25802)])
            .since(Timestamp::from_secs(10))
            .until(Timestamp::from_secs(20))
            .pubkey(pk)
            .custom_tag(SingleLetterTag::LOWERCASE_S, "sess")
            .limit(3);
        let q = filter_to_sql(&f, Timestamp::from_secs(1), &[])
            .unwrap()
            .unwrap();
        assert!(q.sql.contains("AND +pubkey IN (?)"), "{}", q.sql);
        assert!(q.sql.contains("AND +kind IN (?,?)"), "{}", q.sql);
        assert!(q.sql.contains("created_at >= ? AND created_at <= ?"));
        assert_eq!(q.sql.matches("SELECT event_seq FROM tags").count(), 2);
        assert!(q.sql.ends_with("LIMIT 3"));
        // now, author, 2 kinds, since, until, (p + value), (s + value)
        assert_eq!(q.params.len(), 1 + 1 + 2 + 2 + 2 + 2);
    }

    #[test]
    fn impossible_filters_run_no_query() {
        let now = Timestamp::from_secs(1);
        assert_eq!(filter_to_sql(&Filter::new().limit(0), now, &[]), Ok(None));
        let empty_tag =
            Filter::new().custom_tags(SingleLetterTag::LOWERCASE_P, Vec::<String>::new());
        assert_eq!(filter_to_sql(&empty_tag, now, &[]), Ok(None));
        let backwards = Filter::new()
            .since(Timestamp::from_secs(10))
            .until(Timestamp::from_secs(5));
        assert_eq!(filter_to_sql(&backwards, now, &[]), Ok(None));
        let far = Filter::new().since(Timestamp::from_secs(u64::MAX));
        assert_eq!(filter_to_sql(&far, now, &[]), Ok(None));
    }

    #[test]
    fn refuses_search_and_huge_filters() {
        let now = Timestamp::from_secs(1);
        assert_eq!(
            filter_to_sql(&Filter::new().search("x"), now, &[]),
            Err(FilterError::Search)
        );
        let kinds = (0..=u16::MAX).map(Kind::from_u16);
        assert!(matches!(
            filter_to_sql(&Filter::new().kinds(kinds), now, &[]),
            Err(FilterError::TooManyValues(65_536))
        ));
    }
}
