//! The embedded journal: every accepted turn and its outcome, kept in SQLite in the data directory.
//!
//! Writes go through one writer thread that commits everything waiting in one transaction (group commit)
//! with `synchronous=FULL` in WAL mode, so an acknowledged write survives a crash and thousands of turns a
//! second still fit. Reads use their own connection. The engine writes a turn here *before* it acknowledges
//! the turn on the wire, and the outcome *before* it sends it, so on restart nothing finished runs again and
//! every interrupted turn can be given a defined end.

mod journal;
mod writer;

pub use journal::{Accepted, Journal, NewTurn, StoreError, StoredTurn};
