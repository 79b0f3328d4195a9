//! Text laid out for a person at a terminal: columns under a header, and cells cut to one short line.

/// `text` cut to `max` characters, with `…` when cut, on one line.
pub(crate) use agentwire_core::one_line as cell;

/// Lays `rows` out in columns under `header`, two spaces apart; the last column is not padded. Every cell
/// is shown on one line with a peer's control characters and bidi overrides as spaces (a room's name, a
/// prompt: remote text never reaches the terminal as a command, whichever table shows it).
pub(crate) fn columns(header: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            r.iter()
                .map(|c| agentwire_core::display::printable_line(c).into_owned())
                .collect()
        })
        .collect();
    let rows = &rows;
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let mut out = String::new();
        for (i, c) in cells.iter().enumerate() {
            out.push_str(c);
            if i < last {
                let pad = widths[i] - c.chars().count() + 2;
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.trim_end().to_string() + "\n"
    };
    let mut out = line(header.to_vec());
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out
}

/// How long ago `then` was at `now` (seconds since the epoch), short: `40s ago`, `5m ago`, `3h ago`,
/// `2d ago`; a time ahead of the clock (a peer's) is `now`.
pub(crate) fn ago(then: u64, now: u64) -> String {
    let s = now.saturating_sub(then);
    match s {
        0 => "now".into(),
        1..60 => format!("{s}s ago"),
        60..3600 => format!("{}m ago", s / 60),
        3600..86400 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86400),
    }
}

/// What a peer wrote, safe to print at a terminal (control characters and bidi overrides as spaces, lines
/// kept): the one sanitizer every command's output of remote text goes through.
pub(crate) fn printable(text: &str) -> String {
    agentwire_core::display::printable(text).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_are_short_and_never_negative() {
        assert_eq!(ago(100, 100), "now");
        assert_eq!(ago(200, 100), "now");
        assert_eq!(ago(60, 100), "40s ago");
        assert_eq!(ago(0, 300), "5m ago");
        assert_eq!(ago(0, 3 * 3600 + 5), "3h ago");
        assert_eq!(ago(0, 2 * 86400), "2d ago");
    }

    #[test]
    fn a_long_cell_is_cut_on_one_line_and_columns_line_up() {
        let long = "a\nb".repeat(100);
        let c = cell(&long, 10);
        assert_eq!(c.chars().count(), 10);
        assert!(c.ends_with('…') && !c.contains('\n'));
        assert_eq!(printable("a\u{1b}[2Jb\nc"), "a [2Jb\nc");
        let t = columns(&["A", "LONGER"], &[vec!["xyz".into(), "1".into()]]);
        assert_eq!(t, "A    LONGER\nxyz  1\n");
        let t = columns(
            &["ROOM", "NAME"],
            &[vec!["lab".into(), "\u{1b}]0;PWNED\u{7}x\u{202e}y".into()]],
        );
        assert_eq!(t, "ROOM  NAME\nlab    ]0;PWNED x y\n");
    }
}
