//! The one error type at this crate's boundary.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Why the relay, or its event store, could not do what was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RelayError {
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address from the configuration.
        addr: SocketAddr,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The event database could not be opened or created.
    #[error("cannot open the relay database {path}: {source}")]
    Open {
        /// The database file.
        path: PathBuf,
        /// What SQLite said.
        #[source]
        source: rusqlite::Error,
    },
    /// The database was written by a newer version of this crate.
    #[error(
        "the relay database has schema version {found}; this build understands up to {supported}"
    )]
    SchemaTooNew {
        /// The version stored in the file.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// A database operation failed after the database was opened.
    #[error("relay database error: {0}")]
    Database(#[from] rusqlite::Error),
    /// A stored event could not be read back; the database was changed by something else.
    #[error("a stored event cannot be read back: {0}")]
    CorruptEvent(String),
    /// A filter asks for something the store cannot query (NIP-50 search, too many values).
    #[error("unsupported filter: {0}")]
    UnsupportedFilter(String),
    /// An event could not be turned into JSON (cannot happen for events that were parsed).
    #[error("cannot serialise event: {0}")]
    Serialise(String),
    /// The configured limits contradict each other or are zero.
    #[error("invalid relay limits: {0}")]
    InvalidLimits(String),
    /// The configured rooms are not valid, or there are rooms but no relay key to sign their metadata.
    #[error("invalid rooms: {0}")]
    InvalidRooms(String),
    /// A configured public URL of the relay is not a `ws://` or `wss://` URL with a host.
    #[error("invalid relay public URL: {0}")]
    InvalidPublicUrl(#[source] crate::own_urls::RelayUrlError),
    /// A configured allowed origin is not a web origin (`scheme://host[:port]`).
    #[error("invalid relay allowed origin: {0}")]
    InvalidOrigin(#[source] crate::own_urls::OriginError),
    /// A background thread or task of the relay could not be started, or went away.
    #[error("relay internal error: {0}")]
    Internal(String),
    /// Some other I/O operation failed.
    #[error("relay I/O error: {0}")]
    Io(#[from] std::io::Error),
}
