//! NIP-XX AI Agent Messages for agentwire: the pure protocol core ([`nipxx`]), NIP-44 and signing with cached
//! keys ([`crypto`]), NIP-59 gift wrap ([`nip59`]), a relay connection ([`relay_conn`]), the agent runtime ([`runtime`]) and the client
//! ([`client`]). The task-card adapter for Nostr rooms is a crate of its own, `agentwire-tasks`.

pub mod client;
pub mod crypto;
pub mod key_file;
pub mod nip59;
pub mod nipxx;
pub mod relay_conn;
pub mod runtime;
pub mod settings;
