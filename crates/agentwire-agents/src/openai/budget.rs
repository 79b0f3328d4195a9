//! The token budget a front gives a turn ([`TurnContext::token_budget`](agentwire_engine::TurnContext)):
//! whether the turn may make another model call. Pure.
//!
//! A call's cost is known only once it has been made, so the rule is the one that can be kept: no model
//! call once the turn has spent its budget. The call that crosses it is the last; its reply still counts
//! (an answer is the turn's result), but a tool round it asks for is not run, since its results could go
//! only to a call the budget forbids.

use agentwire_core::{Failure, TurnFailure, Usage};

/// The tokens `usage` counts against a budget: read and written alike.
pub fn tokens(usage: Usage) -> u64 {
    usage.input_tokens.saturating_add(usage.output_tokens)
}

/// The failure a turn that has spent `usage` ends with before its next model call, when `budget` (the
/// tokens it may spend; `None`, no budget) forbids that call; `None` when the call may be made.
pub fn exhausted(budget: Option<u64>, usage: Usage) -> Option<Failure> {
    let budget = budget?;
    let spent = tokens(usage);
    (spent >= budget).then(|| {
        Failure::new(
            TurnFailure::OverBudget,
            format!(
                "stopped before the next model call: the turn has spent {spent} tokens of the {budget} it had left"
            ),
        )
        .with_usage(usage)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(input_tokens: u64, output_tokens: u64) -> Usage {
        Usage {
            input_tokens,
            output_tokens,
        }
    }

    #[test]
    fn a_call_is_made_until_the_spent_tokens_reach_the_budget() {
        assert!(
            exhausted(None, u(u64::MAX, u64::MAX)).is_none(),
            "no budget"
        );
        assert!(exhausted(Some(100), u(0, 0)).is_none());
        assert!(exhausted(Some(100), u(60, 39)).is_none(), "99 of 100");
        let f = exhausted(Some(100), u(60, 40)).expect("100 of 100 leaves nothing");
        assert_eq!(f.code, TurnFailure::OverBudget);
        assert_eq!(f.usage, u(60, 40), "the usage spent stays on the failure");
        assert!(f.message.contains("100 tokens of the 100"), "{}", f.message);
        assert!(exhausted(Some(100), u(500, 1)).is_some(), "past it");
        assert!(exhausted(Some(0), u(0, 0)).is_some(), "nothing to spend");
        assert_eq!(tokens(u(u64::MAX, 1)), u64::MAX, "saturates");
    }
}
