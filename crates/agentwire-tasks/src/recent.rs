//! A set that remembers the newest entries only: what the adapter knows of ended and cancelled tasks,
//! bounded so a long-running daemon's memory levels off. Forgetting an old entry is safe: a request older
//! than the backlog horizon is not served again, and the journal runs a request id once whatever this set
//! forgot.

use std::collections::{HashSet, VecDeque};
use std::hash::Hash;

/// The most entries each set keeps: far more tasks than a room sees within the backlog horizon.
pub const MAX_REMEMBERED: usize = 16_384;

/// The newest [`MAX_REMEMBERED`] entries inserted (or `cap`), the oldest forgotten first.
#[derive(Debug, Clone)]
pub struct RecentSet<T> {
    cap: usize,
    members: HashSet<T>,
    order: VecDeque<T>,
}

impl<T: Eq + Hash + Clone> Default for RecentSet<T> {
    fn default() -> Self {
        Self::with_cap(MAX_REMEMBERED)
    }
}

impl<T: Eq + Hash + Clone> RecentSet<T> {
    /// A set keeping at most `cap` entries (at least one).
    pub fn with_cap(cap: usize) -> Self {
        RecentSet {
            cap: cap.max(1),
            members: HashSet::new(),
            order: VecDeque::new(),
        }
    }

    /// Remembers `value`, forgetting the oldest entry when full.
    pub fn insert(&mut self, value: T) {
        if !self.members.insert(value.clone()) {
            return;
        }
        self.order.push_back(value);
        if self.order.len() > self.cap {
            if let Some(old) = self.order.pop_front() {
                self.members.remove(&old);
            }
        }
    }

    /// Whether `value` is remembered.
    pub fn contains(&self, value: &T) -> bool {
        self.members.contains(value)
    }

    /// How many are remembered.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_is_forgotten_first_and_the_size_stays_at_its_cap() {
        let mut s = RecentSet::with_cap(3);
        for n in 0..10 {
            s.insert(n);
            s.insert(n);
        }
        assert_eq!(s.len(), 3);
        assert!(!s.contains(&6) && s.contains(&7) && s.contains(&9));
    }
}
