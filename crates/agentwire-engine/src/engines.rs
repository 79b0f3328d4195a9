//! The engines of one daemon, one an agent, and the index of the engine each live turn runs in: a front
//! that serves several agents (the turn API) cancels or answers a turn in its own engine, found by the
//! turn's id, without asking every engine in turn or reading an observer's copy.

use crate::Engine;
use agentwire_core::RequestId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// Which engine each live turn runs in. Each engine of an [`Engines`] enters its turns as they become live
/// and takes them out as they leave (under its own lock, so the index never lags its live table).
#[derive(Default)]
pub struct TurnIndex {
    turns: Mutex<HashMap<RequestId, Weak<Engine>>>,
}

impl TurnIndex {
    /// Turn `id` is live in `engine`.
    pub(crate) fn enter(&self, id: &RequestId, engine: Weak<Engine>) {
        self.lock().insert(id.clone(), engine);
    }

    /// Turn `id` has left.
    pub(crate) fn leave(&self, id: &RequestId) {
        self.lock().remove(id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RequestId, Weak<Engine>>> {
        // The map holds no invariant a panicking holder could break half-way.
        self.turns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many turns are live in all the engines.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no turn is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A daemon's engines, the first the `--agent` agent's, with the index of their live turns.
#[derive(Clone)]
pub struct Engines {
    all: Vec<Arc<Engine>>,
    index: Arc<TurnIndex>,
}

impl Engines {
    /// The engines `all`, each entering its live turns into one index from now on. An engine joins one
    /// set only (a second is not told of its turns).
    pub fn new(all: Vec<Arc<Engine>>) -> Engines {
        let index = Arc::new(TurnIndex::default());
        for engine in &all {
            engine.join_index(&index);
        }
        Engines { all, index }
    }

    /// The engine turn `id` is live in.
    pub fn of_turn(&self, id: &RequestId) -> Option<Arc<Engine>> {
        let engine = self.index.lock().get(id).cloned()?;
        engine.upgrade()
    }

    /// Every engine, the `--agent` agent's first.
    pub fn all(&self) -> &[Arc<Engine>] {
        &self.all
    }

    /// The `--agent` agent's engine.
    pub fn first(&self) -> Option<&Arc<Engine>> {
        self.all.first()
    }

    /// The index of their live turns.
    pub fn index(&self) -> &TurnIndex {
        &self.index
    }
}
