//! Text from elsewhere (a peer's prompt, an agent's name, a question) made safe to print at a terminal.
//!
//! A terminal obeys what it is given: ESC starts a sequence that can retitle the window, clear the screen
//! or move the cursor (`\e]0;PWNED\a\e[2J`), BEL rings, the C1 controls (U+0080-U+009F, CSI among them) are
//! sequences of their own on some terminals, and the bidi overrides and isolates (U+202A-U+202E,
//! U+2066-U+2069) reorder what follows so a line reads other than it is. [`printable`] shows each of those
//! as a space, so remote text is read, never obeyed; line breaks are kept for text shown as lines.

use std::borrow::Cow;

/// Whether `c` must not reach a terminal as it is: a control character (C0 with ESC and BEL, DEL, C1) or
/// a bidi control (the embeddings, overrides and isolates, and the implicit marks that can turn a run of
/// text round).
pub fn is_unprintable(c: char) -> bool {
    c.is_control() || is_bidi_control(c)
}

/// The bidi controls of Unicode's bidi algorithm: LRE, RLE, PDF, LRO, RLO (U+202A-U+202E), LRI, RLI, FSI,
/// PDI (U+2066-U+2069), and the marks ALM, LRM, RLM (U+061C, U+200E, U+200F).
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{061c}' | '\u{200e}' | '\u{200f}')
}

/// `text` with every character [`is_unprintable`] (line breaks `\n` and tabs kept: layout, which no terminal
/// obeys as a command) shown as a space: a peer's text, safe to print at a terminal. Borrowed when there is
/// nothing to change.
pub fn printable(text: &str) -> Cow<'_, str> {
    shown(text, true)
}

/// `text` on one line: as [`printable`], and line breaks as spaces too (a table's cell, a one-line
/// summary).
pub fn printable_line(text: &str) -> Cow<'_, str> {
    shown(text, false)
}

fn shown(text: &str, keep_lines: bool) -> Cow<'_, str> {
    let bad = |c: char| is_unprintable(c) && !(keep_lines && matches!(c, '\n' | '\t'));
    match text.chars().any(bad) {
        false => Cow::Borrowed(text),
        true => Cow::Owned(text.chars().map(|c| if bad(c) { ' ' } else { c }).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_bells_c1_and_bidi_overrides_are_shown_as_spaces() {
        let attack = "\u{1b}]0;PWNED\u{7}\u{1b}[2Jhi\u{9b}2J";
        assert_eq!(printable(attack), " ]0;PWNED  [2Jhi 2J");
        assert_eq!(printable("evil\u{202e}txt.exe"), "evil txt.exe");
        assert_eq!(printable("a\u{2066}b\u{2069}c\u{200f}"), "a b c ");
        assert_eq!(printable("line one\nline two\r\n"), "line one\nline two \n");
        assert_eq!(printable_line("line one\nline two"), "line one line two");
        assert_eq!(printable_line("tab\there"), "tab here");
        assert_eq!(printable("tab\there"), "tab\there");
    }

    #[test]
    fn clean_text_is_borrowed_and_other_scripts_are_kept() {
        let clean = "héllo, 世界 — مرحبا 🙂";
        assert!(matches!(printable(clean), Cow::Borrowed(_)));
        assert!(matches!(printable_line(clean), Cow::Borrowed(_)));
        assert!(matches!(printable("two\nlines"), Cow::Borrowed(_)));
    }
}
