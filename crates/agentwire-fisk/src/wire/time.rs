//! RFC 3339 UTC timestamps with microseconds, for the advisory `time` field of messages we send.
//!
//! Hand-rolled rather than a dependency: formatting one UTC instant is a days-to-civil-date conversion
//! (Howard Hinnant's `civil_from_days`) and a fixed-width print, and inbound `time` is never parsed (it is
//! advisory and the schemas do not assert its format).

use std::time::{SystemTime, UNIX_EPOCH};

/// The last instant a four-digit year can spell (9999-12-31T23:59:59Z), where later clocks are clamped.
const MAX_FORMATTED_SECS: u64 = 253_402_300_799;
const SECS_PER_DAY: u64 = 86_400;

/// `now` as RFC 3339 UTC with microseconds, e.g. `2026-08-16T11:24:10.749134Z` (the fisk-ai worker's form).
/// Instants before 1970 print as the epoch and after 9999 as its last second: the field is advisory.
pub fn format_time(now: SystemTime) -> String {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let (secs, micros) = if since.as_secs() > MAX_FORMATTED_SECS {
        (MAX_FORMATTED_SECS, 999_999)
    } else {
        (since.as_secs(), since.subsec_micros())
    };
    let (year, month, day) = civil_from_days(secs / SECS_PER_DAY);
    let rem = secs % SECS_PER_DAY;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The proleptic Gregorian date of `days` since 1970-01-01 (days >= 0).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    // Shift the epoch to 0000-03-01 so a leap day ends each 400-year era's year.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097; // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11], March first
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
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

    #[test]
    fn every_day_for_a_few_centuries_round_trips_through_the_calendar() {
        // Count days forward with a plain month-length table and compare.
        let (mut y, mut m, mut d) = (1970u64, 1u64, 1u64);
        for days in 0..(366 * 400) {
            assert_eq!(civil_from_days(days), (y, m, d), "day {days}");
            let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
            let len = [
                31,
                if leap { 29 } else { 28 },
                31,
                30,
                31,
                30,
                31,
                31,
                30,
                31,
                30,
                31,
            ][(m - 1) as usize];
            d += 1;
            if d > len {
                d = 1;
                m += 1;
                if m > 12 {
                    m = 1;
                    y += 1;
                }
            }
        }
    }
}
