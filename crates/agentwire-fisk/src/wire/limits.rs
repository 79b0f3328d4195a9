//! The bounds of the fisk-ai v1 wire, each with its reason, and the block-text trim that enforces one.

/// The most bytes an inbound message may have; larger is refused before it is parsed. The fisk-ai worker's
/// own bound: under the NATS default 1 MiB max payload with room for framing, and enough for a discovery
/// card listing a large command tree with a schema per tool.
pub const MAX_MESSAGE_BYTES: usize = 768 * 1024;

/// The most bytes an answer given after the run ended may have; over it the worker answers
/// `answer_too_large` (a check after decoding: the schema itself does not bound it). An answer becomes a
/// tool result in the journal and goes back to the model, so it is bounded well under a message.
pub const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// The most bytes of text one event block carries (text, thinking, tool output, a replayed prompt): longer
/// values are trimmed with [`trim_block_text`], so that one block, with its header and JSON escaping, stays
/// far inside [`MAX_MESSAGE_BYTES`] and a replay of many blocks stays cheap to render.
pub const MAX_BLOCK_TEXT_BYTES: usize = 64 * 1024;

/// The most blocks a replay sends however many were asked for (the spec's number), so a read of a long
/// conversation costs a bounded reply set.
pub const REPLAY_CAP: u64 = 200;

// Nesting is bounded too, by serde_json's recursion limit (128 levels): a deeper message is refused as not
// JSON. No v1 message nests more than four levels in the fields a schema names.

/// The longest `request` tag (the schema's `maxLength`): a worker builds subjects from it.
pub(crate) const MAX_REQUEST_CHARS: usize = 64;
/// The longest `conversation_token` (the schema's `maxLength`).
pub(crate) const MAX_TOKEN_CHARS: usize = 128;
/// The longest `tool_use_id` (the schema's `maxLength`).
pub(crate) const MAX_TOOL_USE_ID_CHARS: usize = 256;
/// The longest free-text answer (the schema's `maxLength`): third-party input that reaches a model and a
/// terminal.
pub(crate) const MAX_ELICIT_VALUE_CHARS: usize = 4096;

/// `text` cut to at most [`MAX_BLOCK_TEXT_BYTES`] bytes, on a character boundary (never inside one).
pub fn trim_block_text(text: &str) -> &str {
    &text[..text.floor_char_boundary(MAX_BLOCK_TEXT_BYTES)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn short_text_is_untouched_and_long_text_is_cut_to_the_bound() {
        assert_eq!(trim_block_text("hello"), "hello");
        let long = "x".repeat(MAX_BLOCK_TEXT_BYTES + 10);
        assert_eq!(trim_block_text(&long).len(), MAX_BLOCK_TEXT_BYTES);
        let exact = "y".repeat(MAX_BLOCK_TEXT_BYTES);
        assert_eq!(trim_block_text(&exact), exact);
    }

    #[test]
    fn a_cut_never_splits_a_character() {
        // 'é' is 2 bytes and '€' 3: push one across the bound.
        let mut s = "a".repeat(MAX_BLOCK_TEXT_BYTES - 1);
        s.push('€');
        let t = trim_block_text(&s);
        assert_eq!(t.len(), MAX_BLOCK_TEXT_BYTES - 1);
        assert!(t.chars().all(|c| c == 'a'));
    }

    proptest! {
        #[test]
        fn trim_is_a_prefix_on_a_boundary(prefix in 0usize..8, s in "\\PC{0,40}") {
            let text = format!("{}{}", "z".repeat(MAX_BLOCK_TEXT_BYTES - prefix), s);
            let t = trim_block_text(&text);
            prop_assert!(t.len() <= MAX_BLOCK_TEXT_BYTES);
            prop_assert!(text.starts_with(t));
            prop_assert!(t.len() + 3 >= MAX_BLOCK_TEXT_BYTES.min(text.len()));
        }
    }
}
