//! RFC 3339 UTC timestamps with microseconds, for the advisory `time` field of messages we send (inbound
//! `time` is never parsed: it is advisory and the schemas do not assert its format).

use chrono::{DateTime, SecondsFormat, Utc};
use std::time::{SystemTime, UNIX_EPOCH};

/// The last instant a four-digit year can spell (9999-12-31T23:59:59Z), where later clocks are clamped.
const MAX_FORMATTED_SECS: u64 = 253_402_300_799;

/// `now` as RFC 3339 UTC with microseconds, e.g. `2026-08-16T11:24:10.749134Z` (the fisk-ai worker's form).
/// Instants before 1970 print as the epoch and after 9999 as its last second: the field is advisory.
pub fn format_time(now: SystemTime) -> String {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let (secs, micros) = if since.as_secs() > MAX_FORMATTED_SECS {
        (MAX_FORMATTED_SECS, 999_999)
    } else {
        (since.as_secs(), since.subsec_micros())
    };
    // Both parts are in range by the clamp above, so the epoch fallback is never taken.
    let at = DateTime::<Utc>::from_timestamp(secs as i64, micros * 1000).unwrap_or_default();
    at.to_rfc3339_opts(SecondsFormat::Micros, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(secs: u64, micros: u32) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(u64::from(micros))
    }

    #[test]
    fn known_instants() {
        assert_eq!(format_time(UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            format_time(at(1_400_000_000, 0)),
            "2014-05-13T16:53:20.000000Z"
        );
        // A leap day and the spec's own example instant.
        assert_eq!(
            format_time(at(951_782_400, 1)),
            "2000-02-29T00:00:00.000001Z"
        );
        assert_eq!(
            format_time(at(1_786_879_450, 749_134)),
            "2026-08-16T11:24:10.749134Z"
        );
        assert_eq!(
            format_time(at(4_102_444_799, 0)),
            "2099-12-31T23:59:59.000000Z"
        );
    }

    #[test]
    fn out_of_range_clocks_are_clamped() {
        assert_eq!(
            format_time(UNIX_EPOCH - Duration::from_secs(5)),
            "1970-01-01T00:00:00.000000Z"
        );
        assert_eq!(
            format_time(at(MAX_FORMATTED_SECS + 100, 0)),
            "9999-12-31T23:59:59.999999Z"
        );
    }
}
