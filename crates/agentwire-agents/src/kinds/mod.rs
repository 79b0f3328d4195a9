//! The kinds of agents this crate runs, each a plug-in ([`crate::kind::AgentKind`]) owning its section of
//! `[agents.<name>]`: [`demo`], [`roost`], [`cmd`] and [`openai`].

pub mod cmd;
pub mod demo;
pub mod openai;
pub mod roost;
