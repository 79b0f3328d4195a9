//! The remote agents as kinds of `[agents.<name>]` ([`agentwire_agents::kind::AgentKind`]): each owns its
//! section, checks it, shows it and builds the agent that reaches the remote one. All three are served
//! elsewhere, so a model agent may take them as delegates.

pub mod a2a;
pub mod fisk;
pub mod nipxx;
