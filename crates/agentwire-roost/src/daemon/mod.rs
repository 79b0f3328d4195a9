//! The roost daemon: a unix stream socket (owner-only, in an owner-only directory), one JSON object per
//! line, requests on one connection answered in order. Agents `hello`, `report` and `ack`; controllers
//! `dispatch`, `reply`, `stop`, `rm`, `respawn`, `rows`, `subscribe` and `events`, and agentwire's own
//! `conversation` (below). Jobs and their replies are kept in the [`Store`](crate::daemon::store::Store) and
//! survive a restart (and `kill -9`); running jobs are re-adopted and reconnect, and a stop's pending
//! SIGKILL is re-armed.
//!
//! Profiles may also be hosted: served in this process rather than by a program ([`hosted`]).
//!
//! Each connection's peer is known by `SO_PEERCRED` ([`peer`]): the controller's ops are the owner's
//! outside the jobs' processes, who alone may take the last [`CONTROLLER_RESERVE`] places of the
//! connection cap; a connection must identify itself within [`IDENTIFY_TIMEOUT`] (the owner's controllers
//! up to [`SILENT_CONTROLLERS_KEPT`] of them excepted). A job's process gets the
//! allowlisted environment, never the daemon's ([`process`]), and runs as its profile's `user` when one is
//! named ([`run_as`]). See the crate's "Trust model".
//!
//! agentwire's extension: `dispatch` takes an optional `conversation` (1-256 bytes, no spaces), kept with
//! the job, and `conversation {profile, conversation}` answers `{job}`: the row of the job of that
//! profile dispatched last for it (null when there is none), whatever its state. agentwire's roost-backed
//! agent serves a conversation's turns as one job's replies and finds that job with it after a restart.
//! `about {}` answers what the daemon is (its version, its jobs' directory, its profiles), so that a
//! controller that knows only the socket (`agentwire jobs --roost-socket S profiles | log`) asks the daemon
//! behind it rather than guessing its data dir.

mod board_ops;
mod concierge_ops;
mod conn;
pub mod hosted;
mod housekeeping;
pub mod peer;
mod peers;
pub mod process;
pub mod profile;
pub mod retention;
pub mod run_as;
mod schedule_ops;
pub mod settings;
mod state;
mod stopping;
pub mod store;
pub mod terminal;
mod typist;

pub use conn::{IDENTIFY_TIMEOUT, PROTOCOL_VERSION, SILENT_CONTROLLERS_KEPT};
pub use state::row;

use crate::daemon::profile::Profile;
use crate::daemon::store::Store;
use crate::proto::wire::{CONTROLLER_RESERVE, MAX_CONNECTIONS};
use state::Shared;
use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UnixListener;

pub use crate::proto::escalation::STOP_GRACE;
/// How often lazily written rows are flushed and running jobs are checked on.
pub const HOUSEKEEPING_INTERVAL: Duration = Duration::from_secs(1);

/// How the daemon is set up.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// The socket's path (its directory is made owner-only).
    pub socket: PathBuf,
    /// Where jobs' dirs and `roost.sqlite` live.
    pub data_dir: PathBuf,
    /// The profiles jobs run.
    pub profiles: HashMap<String, Profile>,
    /// The profiles served in this process ([`hosted`]); a name here is not also in `profiles`.
    pub hosted: hosted::Hosted,
    /// How long a job may stay idle before it is removed with its dir ([`retention`]); none keeps every job.
    pub retention: Option<Duration>,
    /// The command that holds a terminal agent's terminal ([`crate::daemon::terminal`]; `agentwire roost-term`),
    /// program first. None runs terminal agents on plain output, where nothing can be typed to them: their
    /// replies wait.
    pub terminal_holder: Option<Vec<std::ffi::OsString>>,
    /// The concierge's launch and starting policy ([`concierge_ops`]).
    pub concierge: ConciergeSetup,
    /// When schedules and standing orders fall due.
    pub calendar: Calendar,
}

/// The variable that sets [`Tuning::fg_claim_grace`] (the spec's name), in milliseconds.
pub const FG_CLAIM_GRACE_ENV: &str = "PI_ROOST_FG_CLAIM_GRACE_MS";
/// A foreground peer's claims outlive its connection this long by default (the spec's five seconds): a pi
/// that reconnects at once keeps its tasks.
pub const DEFAULT_FG_CLAIM_GRACE: Duration = Duration::from_secs(5);
/// The longest grace [`FG_CLAIM_GRACE_ENV`] may set: a departed peer's claims block the task board
/// meanwhile, and a pi that is gone for an hour is not coming back for them.
pub const MAX_FG_CLAIM_GRACE: Duration = Duration::from_secs(3600);

/// The daemon's settings read from its environment when it starts, by the spec's names (not from the
/// configuration file: pi's daemon reads them so, and a script that sets them for it sets them for this
/// one). [`Daemon::start`] reads them; [`Daemon::start_with`] takes them as given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// How long a foreground peer's task claims outlive its connection ([`FG_CLAIM_GRACE_ENV`]; default
    /// [`DEFAULT_FG_CLAIM_GRACE`]). A peer that registers again under its name within it keeps them.
    pub fg_claim_grace: Duration,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            fg_claim_grace: DEFAULT_FG_CLAIM_GRACE,
        }
    }
}

/// A setting from the environment that does not fit: the daemon does not start (a typo would otherwise
/// pass unnoticed, and the grace be other than the one asked for).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}={value:?}: {why}")]
pub struct SettingError {
    /// The variable.
    pub name: &'static str,
    /// Its value, as set.
    pub value: String,
    /// What it must be.
    pub why: String,
}

impl Tuning {
    /// The settings in this process's environment (each unset or empty one at its default).
    pub fn from_env() -> Result<Tuning, SettingError> {
        Tuning::from_vars(|name| std::env::var_os(name))
    }

    /// The settings from `var` (a variable's value by name, none when unset).
    pub fn from_vars(
        var: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) -> Result<Tuning, SettingError> {
        let mut tuning = Tuning::default();
        if let Some(v) = var(FG_CLAIM_GRACE_ENV).filter(|v| !v.is_empty()) {
            tuning.fg_claim_grace = parse_grace_ms(&v.to_string_lossy())?;
        }
        Ok(tuning)
    }
}

/// `PI_ROOST_FG_CLAIM_GRACE_MS`: whole milliseconds, 0 to [`MAX_FG_CLAIM_GRACE`] (0 releases at the
/// next housekeeping tick, within [`HOUSEKEEPING_INTERVAL`]).
fn parse_grace_ms(value: &str) -> Result<Duration, SettingError> {
    let refuse = |why: String| SettingError {
        name: FG_CLAIM_GRACE_ENV,
        value: value.to_string(),
        why,
    };
    let max = MAX_FG_CLAIM_GRACE.as_millis();
    let ms: u128 = value.trim().parse().map_err(|_| {
        refuse(format!(
            "the grace is a whole number of milliseconds, 0 to {max}"
        ))
    })?;
    if ms > max {
        return Err(refuse(format!(
            "at most {max} milliseconds (an hour): a departed peer's claims block the board meanwhile"
        )));
    }
    Ok(Duration::from_millis(ms as u64))
}

/// The concierge as the config sets it up (`[roost] concierge`, `concierge_answer`, `concierge_act`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConciergeSetup {
    /// The profile (a roost profile or a hosted agent) `concierge {action: "on"}` starts when it names
    /// none.
    pub launch: Option<String>,
    /// The policy until the person sets one (kept by the daemon from then on).
    pub policy: crate::proto::concierge::Policy,
}

/// The time schedules and standing orders are read in: the zone of their times of day, and the clock.
#[derive(Clone)]
pub struct Calendar {
    /// `[roost] timezone`, else the system's.
    pub zone: crate::proto::when::Zone,
    /// Unix seconds now: the system clock, or a test's own, which it moves on at will.
    pub clock: std::sync::Arc<dyn Fn() -> u64 + Send + Sync>,
}

impl Calendar {
    /// Unix seconds now, by this calendar's clock.
    pub fn now(&self) -> u64 {
        (self.clock)()
    }
}

impl Default for Calendar {
    fn default() -> Self {
        Calendar {
            zone: crate::proto::when::Zone::system(),
            clock: std::sync::Arc::new(agentwire_core::now_secs),
        }
    }
}

impl std::fmt::Debug for Calendar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Calendar")
            .field("zone", &self.zone)
            .field("now", &self.now())
            .finish()
    }
}

/// Why the daemon did not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The socket or its directory.
    #[error("roost socket {path}: {error}")]
    Socket {
        /// The path.
        path: String,
        /// What failed.
        error: String,
    },
    /// The store.
    #[error(transparent)]
    Store(#[from] crate::daemon::store::StoreError),
    /// A profile the daemon cannot serve (an empty command, a bad `env`, a `user` it cannot run jobs as).
    #[error(transparent)]
    Profile(#[from] crate::daemon::profile::ProfileError),
    /// A setting in the environment that does not fit ([`Tuning`]).
    #[error("roost setting {0}")]
    Setting(#[from] SettingError),
}

/// A running daemon.
pub struct Daemon {
    shared: Arc<Shared>,
    socket: PathBuf,
    stop: tokio::sync::watch::Sender<bool>,
}

impl Daemon {
    /// Reads its settings from the environment ([`Tuning::from_env`]: one that does not fit is an error
    /// here, before anything is opened), then [`start_with`](Self::start_with) them.
    pub async fn start(config: DaemonConfig) -> Result<Daemon, DaemonError> {
        let tuning = Tuning::from_env()?;
        Daemon::start_with(config, tuning).await
    }

    /// Opens the store, re-adopts running jobs, binds the socket and serves, with `tuning`.
    pub async fn start_with(config: DaemonConfig, tuning: Tuning) -> Result<Daemon, DaemonError> {
        let sock_err = |e: std::io::Error| DaemonError::Socket {
            path: config.socket.display().to_string(),
            error: e.to_string(),
        };
        crate::daemon::profile::check(&config.profiles)?;
        let run_as = run_as::resolve(&config.profiles)?;
        std::fs::create_dir_all(&config.data_dir).map_err(sock_err)?;
        // Jobs' dirs hold their transcripts (every reply typed to a terminal agent is echoed there) and
        // their terminals' sockets: the daemon's user's alone.
        let jobs = config.data_dir.join("jobs");
        std::fs::create_dir_all(&jobs).map_err(sock_err)?;
        std::fs::set_permissions(&jobs, std::fs::Permissions::from_mode(0o700))
            .map_err(sock_err)?;
        let store = Store::open(&config.data_dir.join("roost.sqlite"))?;
        let sup = store.load()?;
        let escalations = store.escalations()?;
        if let Some(dir) = config.socket.parent() {
            // Only a directory made here is made owner-only: an existing one (say /tmp or $HOME) is the
            // user's, and the socket itself is 0600 either way.
            if !dir.exists() {
                std::fs::create_dir_all(dir).map_err(sock_err)?;
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                    .map_err(sock_err)?;
            }
        }
        if config.socket.exists() {
            // A live daemon answers on it: do not take its socket away.
            if std::os::unix::net::UnixStream::connect(&config.socket).is_ok() {
                return Err(DaemonError::Socket {
                    path: config.socket.display().to_string(),
                    error: "another daemon is serving on it".into(),
                });
            }
            // A socket file left by a daemon that died is in the way.
            std::fs::remove_file(&config.socket).map_err(sock_err)?;
        }
        let listener = UnixListener::bind(&config.socket).map_err(sock_err)?;
        std::fs::set_permissions(&config.socket, std::fs::Permissions::from_mode(0o600))
            .map_err(sock_err)?;
        let shared = Shared::new(config.clone(), tuning, run_as, store, sup);
        shared.rearm(escalations);
        shared.readopt();
        shared.date_undated_jobs();
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let s = shared.clone();
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(HOUSEKEEPING_INTERVAL);
            loop {
                tokio::select! {
                    _ = tick.tick() => s.housekeeping(),
                    _ = stop.changed() => return,
                }
            }
        });
        tokio::spawn(typist::run(shared.clone(), stop_rx.clone()));
        let s = shared.clone();
        let open = Arc::new(AtomicUsize::new(0));
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    a = listener.accept() => a,
                    _ = stop.changed() => return,
                };
                let (stream, _) = match accepted {
                    Ok(x) => x,
                    Err(e) => {
                        tracing::warn!(error = %e, "roost accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let peer = peer::of(&stream, |pid| s.job_of_process(pid));
                // The last CONTROLLER_RESERVE places are the owner's controllers': jobs' processes (and
                // anyone else) filling the rest leave room to see and stop them.
                let limit = if peer.may_control() {
                    MAX_CONNECTIONS
                } else {
                    MAX_CONNECTIONS - CONTROLLER_RESERVE
                };
                if open.load(Ordering::SeqCst) >= limit {
                    // Over the limit: closed at once.
                    tracing::debug!(
                        controller = peer.may_control(),
                        "roost connection refused: at the limit"
                    );
                    drop(stream);
                    continue;
                }
                open.fetch_add(1, Ordering::SeqCst);
                let (s, open, stop) = (s.clone(), open.clone(), stop.clone());
                tokio::spawn(async move {
                    conn::serve(s, stream, peer, stop).await;
                    open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Ok(Daemon {
            shared,
            socket: config.socket,
            stop: stop_tx,
        })
    }

    /// Stops serving: the socket is closed, connections end, rows are written. Jobs keep running (a new
    /// daemon re-adopts them), and so do stopped ones inside their grace (a new daemon kills them at their
    /// deadline).
    pub fn shutdown(&self) {
        self.shared.housekeeping();
        self.shared.leave_hosted();
        self.stop.send_replace(true);
        let _ = std::fs::remove_file(&self.socket);
    }

    /// Returns once a controller has asked the daemon to shut down (the `shutdown` op): the caller drains
    /// what it serves and calls [`shutdown`](Self::shutdown).
    pub async fn shutdown_asked(&self) {
        let mut asked = self.shared.shutdown_asked.subscribe();
        let _ = asked.wait_for(|a| *a).await;
    }

    /// How many jobs' rows show each state now (`working`, `blocked`, `stopped`, ...), for metrics.
    pub fn job_states(&self) -> Vec<(&'static str, i64)> {
        let st = self.shared.lock();
        let mut counts: Vec<(&'static str, i64)> = Vec::new();
        for job in st.sup.jobs.values() {
            let state = job.row_state();
            match counts.iter_mut().find(|(s, _)| *s == state) {
                Some((_, n)) => *n += 1,
                None => counts.push((state, 1)),
            }
        }
        counts
    }

    /// The socket's path.
    pub fn socket(&self) -> &std::path::Path {
        &self.socket
    }

    /// Writes what is waiting to be written (lazy rows).
    pub fn flush(&self) {
        self.shared.housekeeping();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn with(value: Option<&str>) -> Result<Tuning, SettingError> {
        Tuning::from_vars(|name| {
            assert_eq!(name, FG_CLAIM_GRACE_ENV);
            value.map(OsString::from)
        })
    }

    #[test]
    fn the_claim_grace_is_read_in_milliseconds_and_a_bad_value_is_named() {
        assert_eq!(with(None).unwrap().fg_claim_grace, Duration::from_secs(5));
        assert_eq!(with(Some("")).unwrap(), Tuning::default(), "empty is unset");
        assert_eq!(
            with(Some("250")).unwrap().fg_claim_grace,
            Duration::from_millis(250)
        );
        assert_eq!(with(Some("0")).unwrap().fg_claim_grace, Duration::ZERO);
        assert_eq!(
            with(Some("3600000")).unwrap().fg_claim_grace,
            MAX_FG_CLAIM_GRACE
        );
        for bad in ["5s", "-1", "1.5", "3600001", "99999999999999999999999"] {
            let e = with(Some(bad)).unwrap_err();
            assert_eq!((e.name, e.value.as_str()), (FG_CLAIM_GRACE_ENV, bad));
            let said = DaemonError::from(e).to_string();
            assert!(
                said.contains("PI_ROOST_FG_CLAIM_GRACE_MS") && said.contains("milliseconds"),
                "{said}"
            );
        }
    }
}
