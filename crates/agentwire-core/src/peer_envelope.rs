//! The envelope in which an agent receives an item from another session (a roost peer's message, a board
//! notice), and how a person reads text that carries one. The envelope is written by the roost
//! supervisor (`agentwire_roost::proto::peer_item::envelope`); every view for people (the job table, the
//! hub's runs, the turn API's prompt and answer as shown) reads it through [`for_people`] the same way.

/// The tag the envelope is written in.
pub const ENVELOPE_TAG: &str = "roost-item";

/// `text` as a person reads it: each envelope in it (an agent that echoes or quotes what it was sent
/// repeats one) shown as `[kind from name] body`, without the words the envelope has for the agent. A row's
/// summary is cut to its length, so an envelope may come without its end: what is there of its body is
/// shown. Text with no envelope is given back as it is.
pub fn for_people(text: &str) -> std::borrow::Cow<'_, str> {
    let open = format!("<{ENVELOPE_TAG}");
    if !text.contains(&open) {
        return std::borrow::Cow::Borrowed(text);
    }
    let close = format!("</{ENVELOPE_TAG}>");
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(&open) {
        out.push_str(&rest[..at]);
        let after = &rest[at + open.len()..];
        let (attrs, inner) = after.split_once('>').unwrap_or((after, ""));
        let (inner, next, closed) = match inner.find(&close) {
            Some(end) => (&inner[..end], &inner[end + close.len()..], true),
            None => (inner, "", false),
        };
        let attr = |key: &str| {
            let start = format!(" {key}=\"");
            let from = attrs.find(&start)? + start.len();
            attrs[from..].split('"').next()
        };
        // The envelope's own words to the agent end at its first blank line; the body follows.
        let body = inner.split_once("\n\n").map_or("", |(_, b)| b).trim();
        let body = body.replace(&format!("<\\/{ENVELOPE_TAG}"), &format!("</{ENVELOPE_TAG}"));
        out.push_str(&format!(
            "[{} from {}]",
            attr("kind").unwrap_or("item"),
            attr("from").unwrap_or("another session")
        ));
        match (body.is_empty(), closed) {
            (false, _) => out.push_str(&format!(" {body}")),
            (true, false) => out.push_str(" …"),
            (true, true) => {}
        }
        rest = next;
    }
    out.push_str(rest);
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_envelope_reads_as_who_sent_what_whole_cut_or_absent() {
        let e = "<roost-item kind=\"message\" from=\"lead\" from_id=\"j1\" relation=\"peer\">\n\
                 This message comes from another session.\n\nthe tests pass\n</roost-item>";
        assert_eq!(
            for_people(&format!("You said: {e}")),
            "You said: [message from lead] the tests pass"
        );
        assert_eq!(for_people(&e[..40]), "[message from lead] …");
        assert!(matches!(
            for_people("plain"),
            std::borrow::Cow::Borrowed("plain")
        ));
    }
}
