//! The fisk-ai front's configuration section, `[nats]`: its file shape, its resolution with the `serve`
//! flags into the worker's [`WorkerConfig`] (and into the NATS connection every client command and a
//! JetStream journal use), and what `agentwire config` shows of it. The daemon reads the file and reports
//! a [`SettingError`] naming the flag or key; the rules are the front's.

use crate::connection::{NatsAuth, NatsConnect, NatsTls};
use crate::context::NatsContext;
use crate::wire::Identity;
use crate::worker::{
    JobsConfig, WorkerConfig, DEFAULT_JOBS_ACK_WAIT, DEFAULT_REQUEST_TIMEOUT, DEFAULT_WORKERS,
    MAX_JOBS_ACK_WAIT_SECS, MAX_JOBS_REPLICAS, MAX_WORKERS,
};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where a value came from, as the user wrote it: a flag (`--nats-workers`) or a file key
/// (`[nats] workers`).
pub type Setting = &'static str;

/// `[nats]` in the configuration file: every key optional, unknown keys refused.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NatsSection {
    /// The NATS server URL, or several comma-separated; the worker runs when set.
    pub url: Option<String>,
    /// The fisk-ai identity.
    pub identity: Option<String>,
    /// Runs at a time.
    pub workers: Option<usize>,
    /// Questions on.
    pub elicit: Option<bool>,
    /// The question window in seconds.
    pub request_timeout_secs: Option<u64>,
    /// The system prompt (part of a conversation's fingerprint).
    pub system_prompt: Option<String>,
    /// The token allowance per conversation.
    pub max_tokens: Option<u64>,
    /// This instance's name (`sender.instance`).
    pub instance: Option<String>,
    /// A `.creds` file (a user JWT and its nkey seed).
    pub creds_file: Option<PathBuf>,
    /// A user (with `password_env`).
    pub user: Option<String>,
    /// The environment variable holding `user`'s password.
    pub password_env: Option<String>,
    /// The environment variable holding a token.
    pub token_env: Option<String>,
    /// A file holding an nkey seed.
    pub nkey_seed_file: Option<PathBuf>,
    /// A CA (PEM) the servers' certificates chain to.
    pub tls_ca_file: Option<PathBuf>,
    /// A client certificate (PEM), with `tls_key_file`.
    pub tls_cert_file: Option<PathBuf>,
    /// The client certificate's key (PEM).
    pub tls_key_file: Option<PathBuf>,
    /// The prefix of this process's reply subjects (`_INBOX.alice`), for servers that give each user its own.
    pub inbox_prefix: Option<String>,
    /// Only these callers (`sender.name`) are served; the rest are refused `rejected`.
    pub allowed_senders: Option<Vec<String>>,
    /// These callers (`sender.name`) are refused `rejected`.
    pub blocked_senders: Option<Vec<String>>,
    /// Serve the queued-jobs channel (a JetStream work-queue stream; the server must run JetStream).
    pub jobs: Option<bool>,
    /// Seconds the server waits for a taken job's ack or progress before handing it to another worker.
    pub jobs_ack_wait_secs: Option<u64>,
    /// Replicas of the jobs stream (on a cluster).
    pub jobs_replicas: Option<usize>,
    /// A NATS context of the `nats` CLI's (`~/.config/nats/context/<name>.json`): its servers,
    /// credentials and TLS, each under what these keys (and the flags) give.
    pub context: Option<String>,
}

/// The `serve` flags of this front.
#[derive(Debug, Default, Clone, Copy)]
pub struct FiskFlags<'a> {
    /// `--nats`: the servers.
    pub nats: Option<&'a str>,
    /// `--identity`.
    pub identity: Option<&'a str>,
    /// `--nats-workers`.
    pub workers: Option<usize>,
    /// `--nats-request-timeout`, seconds.
    pub request_timeout_secs: Option<u64>,
    /// `--nats-elicit`.
    pub elicit: bool,
    /// `--nats-jobs`: serve the queued-jobs channel, as `[nats] jobs = true`.
    pub jobs: bool,
    /// `--nats-context`: a NATS context of the `nats` CLI's, over `[nats] context`.
    pub context: Option<&'a str>,
}

/// Why `[nats]` and its flags cannot be used; each names the flag or key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingError {
    /// NATS connection settings that cannot be used (a server list, a mix of ways to authenticate).
    #[error("{setting}: {reason}")]
    Nats {
        /// Where it came from.
        setting: Setting,
        /// What is wrong.
        reason: String,
    },
    /// Worker slots out of range.
    #[error("{setting} must be 1 to {max}, not {value}")]
    Workers {
        /// Where it came from.
        setting: Setting,
        /// The value.
        value: usize,
        /// The most allowed.
        max: usize,
    },
    /// A fisk-ai identity or instance name that cannot be part of a subject.
    #[error("{setting}: {value:?} must be letters, digits, '-' and '_'")]
    Identity {
        /// Where it came from.
        setting: Setting,
        /// The value.
        value: String,
    },
    /// A number out of its range.
    #[error("{setting} must be {min} to {max}, not {value}")]
    Range {
        /// Where it came from.
        setting: Setting,
        /// The value.
        value: u64,
        /// The least allowed.
        min: u64,
        /// The most allowed.
        max: u64,
    },
    /// A key that only means something beside another.
    #[error("{setting} needs {needs}")]
    Needs {
        /// The key given.
        setting: Setting,
        /// What it needs.
        needs: &'static str,
    },
    /// The worker is on but has no identity.
    #[error(
        "--nats needs --identity NAME (or [nats] identity, or nats_identity in the served agent's [agents.<name>])"
    )]
    MissingIdentity,
}

/// The worker's configuration from `flags` over `section` over the defaults, or `None` when no server is
/// given (the worker is off). The identity is `--identity`, then `[nats] identity`, then `agent_identity`
/// (the served agent's own `nats_identity`).
pub fn resolve(
    flags: FiskFlags<'_>,
    section: &NatsSection,
    agent_identity: Option<&str>,
) -> Result<Option<WorkerConfig>, SettingError> {
    let context = context(flags.context, section)?;
    let (url, setting_of_url) = match (flags.nats, &section.url, &context) {
        (Some(u), ..) => (u.to_string(), "--nats"),
        (None, Some(u), _) => (u.clone(), "[nats] url"),
        (None, None, Some(NatsContext { url: Some(u), .. })) => {
            (u.clone(), "the NATS context's url")
        }
        (None, None, _) => return Ok(None),
    };
    let (identity, setting) = match (flags.identity, section.identity.as_deref(), agent_identity) {
        (Some(i), ..) => (i, "--identity"),
        (None, Some(i), _) => (i, "[nats] identity"),
        (None, None, Some(i)) => (i, "[agents.<name>] nats_identity"),
        (None, None, None) => return Err(SettingError::MissingIdentity),
    };
    let identity = identity.to_string();
    let me = Identity::new(identity.clone()).map_err(|_| SettingError::Identity {
        setting,
        value: identity.clone(),
    })?;
    if let Some(instance) = &section.instance {
        me.with_instance(instance.clone())
            .map_err(|_| SettingError::Identity {
                setting: "[nats] instance",
                value: instance.clone(),
            })?;
    }
    let (workers, setting) = match (flags.workers, section.workers) {
        (Some(w), _) => (w, "--nats-workers"),
        (None, Some(w)) => (w, "[nats] workers"),
        (None, None) => (DEFAULT_WORKERS, "[nats] workers"),
    };
    if workers == 0 || workers > MAX_WORKERS {
        return Err(SettingError::Workers {
            setting,
            value: workers,
            max: MAX_WORKERS,
        });
    }
    let request_timeout = flags
        .request_timeout_secs
        .or(section.request_timeout_secs)
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_REQUEST_TIMEOUT);
    let names = |setting: Setting, list: &Option<Vec<String>>| -> Result<(), SettingError> {
        for name in list.iter().flatten() {
            Identity::new(name.clone()).map_err(|_| SettingError::Identity {
                setting,
                value: name.clone(),
            })?;
        }
        Ok(())
    };
    names("[nats] allowed_senders", &section.allowed_senders)?;
    names("[nats] blocked_senders", &section.blocked_senders)?;
    let jobs = jobs(section, flags.jobs)?;
    Ok(Some(WorkerConfig {
        nats: connect_in(&url, setting_of_url, section, context.as_ref())?,
        identity,
        workers,
        elicit: flags.elicit || section.elicit.unwrap_or(false),
        request_timeout,
        system_prompt: section.system_prompt.clone().unwrap_or_default(),
        max_tokens: section.max_tokens,
        instance: section.instance.clone(),
        senders: crate::worker::SenderPolicy {
            allowed: section.allowed_senders.clone(),
            blocked: section.blocked_senders.clone().unwrap_or_default(),
        },
        jobs,
    }))
}

/// The queued-jobs channel from `section`: on with `jobs = true` (or `--nats-jobs`, `flag`), its two keys in
/// range and only beside it.
fn jobs(section: &NatsSection, flag: bool) -> Result<Option<JobsConfig>, SettingError> {
    if !flag && section.jobs != Some(true) {
        for (setting, given) in [
            (
                "[nats] jobs_ack_wait_secs",
                section.jobs_ack_wait_secs.is_some(),
            ),
            ("[nats] jobs_replicas", section.jobs_replicas.is_some()),
        ] {
            if given {
                return Err(SettingError::Needs {
                    setting,
                    needs: "[nats] jobs = true (or --nats-jobs)",
                });
            }
        }
        return Ok(None);
    }
    let ack_wait = section
        .jobs_ack_wait_secs
        .unwrap_or(DEFAULT_JOBS_ACK_WAIT.as_secs());
    if !(1..=MAX_JOBS_ACK_WAIT_SECS).contains(&ack_wait) {
        return Err(SettingError::Range {
            setting: "[nats] jobs_ack_wait_secs",
            value: ack_wait,
            min: 1,
            max: MAX_JOBS_ACK_WAIT_SECS,
        });
    }
    let replicas = section.jobs_replicas.unwrap_or(1);
    if !(1..=MAX_JOBS_REPLICAS).contains(&replicas) {
        return Err(SettingError::Range {
            setting: "[nats] jobs_replicas",
            value: replicas as u64,
            min: 1,
            max: MAX_JOBS_REPLICAS as u64,
        });
    }
    Ok(Some(JobsConfig {
        ack_wait: Duration::from_secs(ack_wait),
        replicas,
    }))
}

/// The NATS connection of server list `list` (from `setting`) with `section`'s credentials and TLS: for
/// the worker, a JetStream journal and every client command. One way to authenticate at most; secrets are
/// named here and read when connecting.
pub fn connect(
    list: &str,
    setting: Setting,
    section: &NatsSection,
) -> Result<NatsConnect, SettingError> {
    connect_as(list, setting, section, None)
}

/// [`connect`] with the NATS context `context_flag` (`--nats-context`) names over `section`'s `context`.
pub fn connect_as(
    list: &str,
    setting: Setting,
    section: &NatsSection,
    context_flag: Option<&str>,
) -> Result<NatsConnect, SettingError> {
    let context = context(context_flag, section)?;
    connect_in(list, setting, section, context.as_ref())
}

/// The NATS context `flag` (`--nats-context`) or `section`'s `context` names, read; `None` without one.
pub fn context(
    flag: Option<&str>,
    section: &NatsSection,
) -> Result<Option<NatsContext>, SettingError> {
    let (name, setting) = match (flag, section.context.as_deref()) {
        (Some(n), _) => (n, "--nats-context"),
        (None, Some(n)) => (n, "[nats] context"),
        (None, None) => return Ok(None),
    };
    crate::context::load(name)
        .map(Some)
        .map_err(|e| SettingError::Nats {
            setting,
            reason: e.to_string(),
        })
}

/// [`connect`] with `context` under `section`: the section's way to authenticate when it gives one, else
/// the context's; each TLS file and the inbox prefix the section's, else the context's.
fn connect_in(
    list: &str,
    setting: Setting,
    section: &NatsSection,
    context: Option<&NatsContext>,
) -> Result<NatsConnect, SettingError> {
    let servers = NatsConnect::parse_servers(list).map_err(|e| SettingError::Nats {
        setting,
        reason: e.to_string(),
    })?;
    let bad = |reason: &str| SettingError::Nats {
        setting: "[nats]",
        reason: reason.into(),
    };
    let ways = [
        section.creds_file.is_some(),
        section.user.is_some() || section.password_env.is_some(),
        section.token_env.is_some(),
        section.nkey_seed_file.is_some(),
    ];
    if ways.iter().filter(|w| **w).count() > 1 {
        return Err(bad(
            "one way to authenticate: creds_file, user with password_env, token_env or nkey_seed_file",
        ));
    }
    let auth = match (
        &section.creds_file,
        &section.user,
        &section.password_env,
        &section.token_env,
        &section.nkey_seed_file,
    ) {
        (Some(c), ..) => NatsAuth::CredsFile(c.clone()),
        (_, Some(user), Some(var), ..) => NatsAuth::UserPassword {
            user: user.clone(),
            password_env: var.clone(),
        },
        (_, Some(_), None, ..) => return Err(bad("user needs password_env")),
        (_, None, Some(_), ..) => return Err(bad("password_env needs user")),
        (_, _, _, Some(var), _) => NatsAuth::TokenEnv(var.clone()),
        (_, _, _, _, Some(f)) => NatsAuth::NKeySeedFile(f.clone()),
        _ => match context {
            Some(c) => context_auth(c)?,
            None => NatsAuth::None,
        },
    };
    let client_cert = match (&section.tls_cert_file, &section.tls_key_file) {
        (Some(c), Some(k)) => Some((c.clone(), k.clone())),
        (None, None) => match context.map(|c| (c, &c.cert, &c.key)) {
            Some((_, Some(c), Some(k))) => Some((c.clone(), k.clone())),
            Some((c, Some(_), None) | (c, None, Some(_))) => {
                return Err(in_context(c, "cert and key go together"))
            }
            _ => None,
        },
        _ => return Err(bad("tls_cert_file and tls_key_file go together")),
    };
    let ca_file = section
        .tls_ca_file
        .clone()
        .or_else(|| context.and_then(|c| c.ca.clone()));
    let inbox_prefix = section
        .inbox_prefix
        .clone()
        .or_else(|| context.and_then(|c| c.inbox_prefix.clone()));
    if let Some(prefix) = &inbox_prefix {
        NatsConnect::check_inbox_prefix(prefix).map_err(|reason| SettingError::Nats {
            setting: "[nats] inbox_prefix",
            reason: reason.to_string(),
        })?;
    }
    Ok(NatsConnect {
        servers,
        auth,
        tls: NatsTls {
            ca_file,
            client_cert,
        },
        inbox_prefix,
    })
}

fn in_context(c: &NatsContext, reason: &str) -> SettingError {
    SettingError::Nats {
        setting: "the NATS context",
        reason: format!("{:?} ({}): {reason}", c.name, c.path.display()),
    }
}

/// A context's way to authenticate, as the `nats` CLI takes the first it has: a `.creds` file, an nkey
/// seed file, a user and password, a token. The password and token stay in the context's file.
fn context_auth(c: &NatsContext) -> Result<NatsAuth, SettingError> {
    Ok(
        match (&c.creds, &c.nkey, &c.user, c.has_password, c.has_token) {
            (Some(f), ..) => NatsAuth::CredsFile(f.clone()),
            (None, Some(f), ..) => NatsAuth::NKeySeedFile(f.clone()),
            (None, None, Some(user), true, _) => NatsAuth::ContextPassword {
                user: user.clone(),
                context: c.path.clone(),
            },
            (None, None, Some(_), false, _) => return Err(in_context(c, "user needs password")),
            (None, None, None, true, _) => return Err(in_context(c, "password needs user")),
            (None, None, None, false, true) => NatsAuth::ContextToken(c.path.clone()),
            (None, None, None, false, false) => NatsAuth::None,
        },
    )
}

/// `[nats]` as `agentwire config` prints what is in force: the file's keys; the servers with any
/// credentials in them replaced by what `redact` makes of them; secrets by the variable or file naming
/// them, never their value.
#[derive(Debug, Serialize)]
pub struct NatsView<'a> {
    url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    creds_file: Option<&'a Path>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    password_env: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    token_env: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    password_in_context: Option<&'a Path>,
    #[serde(skip_serializing_if = "Option::is_none")]
    token_in_context: Option<&'a Path>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nkey_seed_file: Option<&'a Path>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls_ca_file: Option<&'a Path>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls_cert_file: Option<&'a Path>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls_key_file: Option<&'a Path>,
    #[serde(skip_serializing_if = "Option::is_none")]
    inbox_prefix: Option<&'a str>,
    identity: &'a str,
    workers: usize,
    elicit: bool,
    request_timeout_secs: u64,
    system_prompt: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    instance: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    allowed_senders: Option<&'a [String]>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    blocked_senders: &'a [String],
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    jobs: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    jobs_ack_wait_secs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    jobs_replicas: Option<usize>,
}

/// What `agentwire config` shows of the worker's configuration `c`.
pub fn view(c: &WorkerConfig, redact: impl Fn(&str) -> String) -> NatsView<'_> {
    let a = &c.nats.auth;
    NatsView {
        url: redact(&c.nats.servers.join(",")),
        creds_file: match a {
            NatsAuth::CredsFile(p) => Some(p.as_path()),
            _ => None,
        },
        user: match a {
            NatsAuth::UserPassword { user, .. } | NatsAuth::ContextPassword { user, .. } => {
                Some(user.as_str())
            }
            _ => None,
        },
        password_in_context: match a {
            NatsAuth::ContextPassword { context, .. } => Some(context.as_path()),
            _ => None,
        },
        token_in_context: match a {
            NatsAuth::ContextToken(context) => Some(context.as_path()),
            _ => None,
        },
        password_env: match a {
            NatsAuth::UserPassword { password_env, .. } => Some(password_env.as_str()),
            _ => None,
        },
        token_env: match a {
            NatsAuth::TokenEnv(v) => Some(v.as_str()),
            _ => None,
        },
        nkey_seed_file: match a {
            NatsAuth::NKeySeedFile(p) => Some(p.as_path()),
            _ => None,
        },
        tls_ca_file: c.nats.tls.ca_file.as_deref(),
        tls_cert_file: c.nats.tls.client_cert.as_ref().map(|(c, _)| c.as_path()),
        tls_key_file: c.nats.tls.client_cert.as_ref().map(|(_, k)| k.as_path()),
        inbox_prefix: c.nats.inbox_prefix.as_deref(),
        identity: &c.identity,
        workers: c.workers,
        elicit: c.elicit,
        request_timeout_secs: c.request_timeout.as_secs(),
        system_prompt: &c.system_prompt,
        max_tokens: c.max_tokens,
        instance: c.instance.as_deref(),
        allowed_senders: c.senders.allowed.as_deref(),
        blocked_senders: &c.senders.blocked,
        jobs: c.jobs.is_some(),
        jobs_ack_wait_secs: c.jobs.as_ref().map(|j| j.ack_wait.as_secs()),
        jobs_replicas: c.jobs.as_ref().map(|j| j.replicas),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_without_a_server_and_flags_over_the_section_over_the_defaults() {
        assert!(matches!(
            resolve(FiskFlags::default(), &NatsSection::default(), None),
            Ok(None)
        ));
        let file = NatsSection {
            url: Some("nats://file:4222".into()),
            identity: Some("file-id".into()),
            workers: Some(3),
            ..Default::default()
        };
        let c = resolve(FiskFlags::default(), &file, Some("agent-id"))
            .unwrap()
            .unwrap();
        assert_eq!(
            (c.nats.servers.clone(), c.identity.as_str(), c.workers),
            (vec!["nats://file:4222".to_string()], "file-id", 3)
        );
        assert_eq!(c.request_timeout, DEFAULT_REQUEST_TIMEOUT);
        let flags = FiskFlags {
            nats: Some("nats://flag:4222"),
            identity: Some("flag-id"),
            workers: Some(7),
            request_timeout_secs: Some(9),
            elicit: true,
            jobs: true,
            context: None,
        };
        let c = resolve(flags, &file, None).unwrap().unwrap();
        assert_eq!(c.nats.servers, ["nats://flag:4222"]);
        assert_eq!((c.identity.as_str(), c.workers), ("flag-id", 7));
        assert_eq!(c.request_timeout, Duration::from_secs(9));
        assert!(c.elicit);
        assert_eq!(
            c.jobs,
            Some(JobsConfig::default()),
            "--nats-jobs serves jobs"
        );
    }

    #[test]
    fn each_refusal_names_its_setting() {
        let on = NatsSection {
            url: Some("nats://x:4222".into()),
            ..Default::default()
        };
        assert_eq!(
            resolve(FiskFlags::default(), &on, None).err(),
            Some(SettingError::MissingIdentity)
        );
        assert_eq!(
            resolve(FiskFlags::default(), &on, Some("agent-id"))
                .unwrap()
                .unwrap()
                .identity,
            "agent-id",
            "the served agent's own identity comes last"
        );
        let flags = FiskFlags {
            identity: Some("a.b"),
            ..Default::default()
        };
        assert_eq!(
            resolve(flags, &on, None).err(),
            Some(SettingError::Identity {
                setting: "--identity",
                value: "a.b".into()
            })
        );
        let flags = FiskFlags {
            identity: Some("ok"),
            workers: Some(0),
            ..Default::default()
        };
        assert_eq!(
            resolve(flags, &on, None).err(),
            Some(SettingError::Workers {
                setting: "--nats-workers",
                value: 0,
                max: MAX_WORKERS
            })
        );
        let two_ways = NatsSection {
            token_env: Some("T".into()),
            creds_file: Some("/c".into()),
            ..on.clone()
        };
        assert!(matches!(
            connect("nats://x:4222", "[nats] url", &two_ways),
            Err(SettingError::Nats {
                setting: "[nats]",
                ..
            })
        ));
    }

    #[test]
    fn the_jobs_channel_is_off_by_default_and_its_keys_are_checked() {
        let on = NatsSection {
            url: Some("nats://x:4222".into()),
            identity: Some("w".into()),
            ..Default::default()
        };
        let c = resolve(FiskFlags::default(), &on, None).unwrap().unwrap();
        assert_eq!(c.jobs, None);
        let jobs = NatsSection {
            jobs: Some(true),
            ..on.clone()
        };
        let c = resolve(FiskFlags::default(), &jobs, None).unwrap().unwrap();
        assert_eq!(c.jobs, Some(JobsConfig::default()));
        let tuned = NatsSection {
            jobs_ack_wait_secs: Some(5),
            jobs_replicas: Some(3),
            ..jobs.clone()
        };
        let c = resolve(FiskFlags::default(), &tuned, None)
            .unwrap()
            .unwrap();
        assert_eq!(
            c.jobs,
            Some(JobsConfig {
                ack_wait: Duration::from_secs(5),
                replicas: 3
            })
        );
        let err = |s: NatsSection| resolve(FiskFlags::default(), &s, None).err().unwrap();
        assert_eq!(
            err(NatsSection {
                jobs_ack_wait_secs: Some(0),
                ..jobs.clone()
            })
            .to_string(),
            "[nats] jobs_ack_wait_secs must be 1 to 3600, not 0"
        );
        assert_eq!(
            err(NatsSection {
                jobs_replicas: Some(6),
                ..jobs.clone()
            })
            .to_string(),
            "[nats] jobs_replicas must be 1 to 5, not 6"
        );
        assert_eq!(
            err(NatsSection {
                jobs_ack_wait_secs: Some(5),
                ..on.clone()
            })
            .to_string(),
            "[nats] jobs_ack_wait_secs needs [nats] jobs = true (or --nats-jobs)"
        );
    }
}
