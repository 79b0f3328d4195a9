//! The resolution rules, one at a time: flag over file over default, list flags, switches, and a typed error
//! naming the flag or key for every bad value.

use super::*;
use crate::config::file;
use agentwire_acp::kind::AcpPlan;
use agentwire_agents::kinds::cmd::CmdPlan;
use agentwire_agents::kinds::demo::DemoPlan;
use agentwire_agents::kinds::openai::{OpenAiPlan, DEFAULT_MAX_CONTEXT_TOKENS};
use agentwire_agents::kinds::roost::RoostPlan;
use agentwire_fisk::settings::SettingError;
use agentwire_nostr::nipxx::policy::RateLimit;
use agentwire_remote::kinds::{a2a::A2aPlan, fisk::FiskPlan, nipxx::NipxxPlan};
use agentwire_roost::daemon::profile::TaskMode;
use clap::Parser;
use nostr::prelude::{Keys, ToBech32};
use std::path::Path;

/// `serve`'s flags as a user types them.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    flags: ServeFlags,
}

fn flags(args: &[&str]) -> ServeFlags {
    Cli::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
        .flags
}

/// The agent's plan as kind `T`'s, or a panic naming what it is.
fn plan<T: AgentPlan>(c: &AgentChoice) -> &T {
    c.plan
        .downcast_ref::<T>()
        .unwrap_or_else(|| panic!("{:?}", c.plan))
}

fn file(toml: &str) -> FileConfig {
    file::parse(Path::new("test.toml"), toml).unwrap_or_else(|e| panic!("{e}"))
}

fn env() -> Environment {
    Environment {
        data_dir: PathBuf::from("/home/me/.local/share/agentwire"),
        runtime_dir: Some(PathBuf::from("/run/user/1000")),
        host_name: "host-a".into(),
        set_vars: ["OPENAI_API_KEY".to_string()].into(),
        otlp_endpoint: None,
    }
}

fn no_roost_json(path: &Path) -> Result<HashMap<String, Profile>, ConfigError> {
    panic!("no roost.json is named, yet {} was read", path.display())
}

fn try_resolve(args: &[&str], toml: &str) -> Result<Resolved, ConfigError> {
    let (flags, file, env) = (flags(args), file(toml), env());
    resolve(
        Sources {
            data_dir: None,
            flags: &flags,
            file: &file,
            env: &env,
        },
        no_roost_json,
    )
}

fn resolved(args: &[&str], toml: &str) -> Resolved {
    try_resolve(args, toml).unwrap_or_else(|e| panic!("{args:?} over {toml:?}: {e}"))
}

fn error(args: &[&str], toml: &str) -> ConfigError {
    match try_resolve(args, toml) {
        Ok(r) => panic!("{args:?} over {toml:?} resolved to {r:?}"),
        Err(e) => e,
    }
}

fn key() -> PublicKey {
    Keys::generate().public_key()
}

fn profile(command: &str) -> Profile {
    Profile {
        command: vec![command.to_string()],
        task: TaskMode::Type,
        protocol: true,
        ..Profile::default()
    }
}

#[test]
fn without_flags_or_file_everything_is_the_default() {
    let r = resolved(&[], "");
    assert_eq!(r.data_dir, env().data_dir);
    assert_eq!(r.agent.name, "demo");
    assert_eq!(plan::<DemoPlan>(&r.agent), &DemoPlan);
    assert!(!r.agent.entry);
    assert_eq!(r.agent.max_concurrent_turns, None);
    assert_eq!(r.agent.pricing, None);
    let relay = r.relay.expect("the embedded relay is on by default");
    assert_eq!(relay.listen, DEFAULT_RELAY_LISTEN);
    assert_eq!(relay.listen.to_string(), "127.0.0.1:7777");
    assert_eq!(relay.db_path, env().data_dir.join("relay.sqlite"));
    assert_eq!(relay.name, "agentwire");
    assert_eq!(relay.limits, agentwire_relay::RelayLimits::default());
    assert!(r.relays.is_empty());
    assert_eq!(r.relay_ca_file, None);
    assert_eq!(
        r.nipxx,
        Nipxx {
            allow: None,
            block: BTreeSet::new(),
            rate: RateLimit {
                per_second: 50.0,
                burst: 100.0
            },
            backlog_horizon: Duration::from_secs(3600),
            nip59: false,
            text_envelope: false,
            key_file: None,
        }
    );
    assert!(r.nats.is_none());
    assert_eq!(
        r.roost,
        Roost {
            socket: PathBuf::from("/run/user/1000/agentwire/roost.sock"),
            config: None,
            profiles: HashMap::new(),
            hosted: vec!["demo".to_string()],
            concierge: Default::default(),
            zone: agentwire_roost::proto::when::Zone::system(),
        }
    );
}

#[test]
fn without_a_runtime_dir_the_roost_socket_is_in_the_data_dir() {
    let (flags, file, env) = (
        flags(&[]),
        file("data_dir = \"/srv/aw\""),
        Environment {
            runtime_dir: None,
            ..env()
        },
    );
    let sources = Sources {
        data_dir: None,
        flags: &flags,
        file: &file,
        env: &env,
    };
    let r = resolve(sources, no_roost_json).unwrap();
    assert_eq!(r.roost.socket, PathBuf::from("/srv/aw/run/roost.sock"));
}

#[test]
fn the_data_dir_is_the_flag_then_the_file_then_the_environment() {
    let (flags, file, env) = (flags(&[]), file("data_dir = \"/srv/aw\""), env());
    let mut sources = Sources {
        data_dir: Some(Path::new("/flag")),
        flags: &flags,
        file: &file,
        env: &env,
    };
    let r = resolve(sources, no_roost_json).unwrap();
    assert_eq!(r.data_dir, PathBuf::from("/flag"));
    assert_eq!(
        r.relay.unwrap().db_path,
        PathBuf::from("/flag/relay.sqlite")
    );
    sources.data_dir = None;
    assert_eq!(
        resolve(sources, no_roost_json).unwrap().data_dir,
        PathBuf::from("/srv/aw")
    );
    assert_eq!(resolved(&[], "").data_dir, env.data_dir);
}

const FILE: &str = r#"
[serve]
relay_listen = "0.0.0.0:8000"
relay_ca_file = "/etc/ca.pem"
agent = "roost:mine"

[nipxx]
rate_per_second = 5.0
rate_burst = 7.0
backlog_horizon_secs = 60
nip59 = true

[nats]
url = "nats://file:4222"
identity = "from-file"
workers = 3
elicit = true
request_timeout_secs = 30
system_prompt = "be brief"
max_tokens = 500
instance = "host-a"

[roost]
socket = "/file/roost.sock"
[roost.profiles.mine]
command = ["python3", "agent.py"]
protocol = true
[roost.profiles.other]
command = ["other"]

[relay]
name = "file relay"
[relay.limits]
max_connections = 9
"#;

#[test]
fn the_file_beats_the_defaults() {
    let r = resolved(&[], FILE);
    assert_eq!(plan::<RoostPlan>(&r.agent).profile, "mine");
    let relay = r.relay.unwrap();
    assert_eq!(relay.listen.to_string(), "0.0.0.0:8000");
    assert_eq!(relay.name, "file relay");
    assert_eq!(relay.limits.max_connections, 9);
    assert_eq!(
        relay.limits.max_event_bytes,
        agentwire_relay::RelayLimits::default().max_event_bytes,
        "a limit the file does not name keeps its default"
    );
    assert_eq!(r.relay_ca_file, Some(PathBuf::from("/etc/ca.pem")));
    assert_eq!(r.nipxx.rate.per_second, 5.0);
    assert_eq!(r.nipxx.rate.burst, 7.0);
    assert_eq!(r.nipxx.backlog_horizon, Duration::from_secs(60));
    assert!(r.nipxx.nip59);
    let nats = r.nats.expect("the worker is on with [nats] url");
    assert_eq!(nats.nats.servers, ["nats://file:4222"]);
    assert_eq!(nats.identity, "from-file");
    assert_eq!(nats.workers, 3);
    assert!(nats.elicit);
    assert_eq!(nats.request_timeout, Duration::from_secs(30));
    assert_eq!(nats.system_prompt, "be brief");
    assert_eq!(nats.max_tokens, Some(500));
    assert_eq!(nats.instance.as_deref(), Some("host-a"));
    assert_eq!(r.roost.socket, PathBuf::from("/file/roost.sock"));
    assert_eq!(r.roost.profiles.len(), 2);
}

#[test]
fn a_flag_beats_the_file() {
    let r = resolved(
        &[
            "--relay-listen",
            "127.0.0.1:0",
            "--relay-ca-file",
            "/flag/ca.pem",
            "--agent",
            "roost:other",
            "--rate-per-second",
            "0.5",
            "--rate-burst",
            "2",
            "--backlog-horizon-secs",
            "0",
            "--nats",
            "nats://flag:4222",
            "--identity",
            "from-flag",
            "--nats-workers",
            "8",
            "--nats-request-timeout",
            "5",
            "--roost-socket",
            "/flag/roost.sock",
        ],
        FILE,
    );
    assert_eq!(plan::<RoostPlan>(&r.agent).profile, "other");
    assert_eq!(r.relay.unwrap().listen.to_string(), "127.0.0.1:0");
    assert_eq!(r.relay_ca_file, Some(PathBuf::from("/flag/ca.pem")));
    assert_eq!(r.nipxx.rate.per_second, 0.5);
    assert_eq!(r.nipxx.rate.burst, 2.0);
    assert_eq!(r.nipxx.backlog_horizon, Duration::ZERO);
    let nats = r.nats.unwrap();
    assert_eq!(nats.nats.servers, ["nats://flag:4222"]);
    assert_eq!(nats.identity, "from-flag");
    assert_eq!(nats.workers, 8);
    assert_eq!(nats.request_timeout, Duration::from_secs(5));
    assert_eq!(
        nats.max_tokens,
        Some(500),
        "a key without a flag still comes from the file"
    );
    assert_eq!(r.roost.socket, PathBuf::from("/flag/roost.sock"));
}

#[test]
fn a_switch_only_turns_its_feature_on() {
    assert!(resolved(&["--nip59"], "").nipxx.nip59);
    assert!(resolved(&[], "[nipxx]\nnip59 = true").nipxx.nip59);
    assert!(!resolved(&[], "[nipxx]\nnip59 = false").nipxx.nip59);
    let nats = "[nats]\nurl = \"nats://x\"\nidentity = \"i\"\n";
    assert!(!resolved(&[], nats).nats.unwrap().elicit);
    assert!(resolved(&["--nats-elicit"], nats).nats.unwrap().elicit);
    assert!(
        resolved(&[], &format!("{nats}elicit = true"))
            .nats
            .unwrap()
            .elicit
    );
}

#[test]
fn relay_flags_replace_the_files_relays_and_turn_the_embedded_relay_off() {
    let toml = "[serve]\nrelays = [\"wss://file.example\"]";
    let r = resolved(&[], toml);
    assert_eq!(r.relays, ["wss://file.example"]);
    assert!(
        r.relay.is_none(),
        "external relays turn the embedded one off"
    );
    let r = resolved(
        &["--relay", "ws://a.example", "--relay", "wss://b.example"],
        toml,
    );
    assert_eq!(r.relays, ["ws://a.example", "wss://b.example"]);
    assert!(r.relay.is_none());
    let r = resolved(
        &["--relay", "ws://a.example", "--relay-listen", "127.0.0.1:0"],
        toml,
    );
    assert_eq!(r.relays, ["ws://a.example"]);
    assert!(
        r.relay.is_some(),
        "relay_listen keeps the embedded relay on"
    );
    let r = resolved(
        &[],
        "[serve]\nrelays = [\"wss://file.example\"]\nrelay_listen = \"127.0.0.1:1\"",
    );
    assert_eq!(r.relay.unwrap().listen.to_string(), "127.0.0.1:1");
}

#[test]
fn allow_and_block_flags_replace_the_files_lists() {
    let (a, b, c) = (key(), key(), key());
    let toml = format!(
        "[nipxx]\nallow = [\"{}\"]\nblock = [\"{}\"]",
        a.to_bech32().unwrap(),
        b.to_hex()
    );
    let r = resolved(&[], &toml);
    assert_eq!(r.nipxx.allow, Some(BTreeSet::from([a])));
    assert_eq!(r.nipxx.block, BTreeSet::from([b]));
    let r = resolved(
        &[
            "--allow",
            &c.to_hex(),
            "--allow",
            &b.to_hex(),
            "--block",
            &c.to_hex(),
        ],
        &toml,
    );
    assert_eq!(r.nipxx.allow, Some(BTreeSet::from([b, c])));
    assert_eq!(r.nipxx.block, BTreeSet::from([c]));
    assert_eq!(
        resolved(&[], "[nipxx]\nallow = []").nipxx.allow,
        Some(BTreeSet::new()),
        "an empty allow list in the file allows nobody, as before"
    );
}

#[test]
fn an_agents_entry_names_the_agent() {
    let toml = "[agents.helper]\nkind = \"roost\"\nprofile = \"mine\"\n\
                [agents.plain]\nkind = \"demo\"\n\
                [roost.profiles.mine]\ncommand = [\"a\"]";
    let r = resolved(&["--agent", "helper"], toml);
    assert_eq!(r.agent.name, "helper");
    assert_eq!(plan::<RoostPlan>(&r.agent).profile, "mine");
    assert!(r.agent.entry);
    assert_eq!(r.agent.max_concurrent_turns, None);
    assert_eq!(r.agent.pricing, None);
    let r = resolved(&[], &format!("[serve]\nagent = \"plain\"\n{toml}"));
    assert_eq!(plan::<DemoPlan>(&r.agent), &DemoPlan);
    assert!(r.agent.entry);
}

#[test]
fn the_served_agents_own_nats_identity_names_its_worker() {
    let toml = "[agents.local]\nkind = \"demo\"\nnats_identity = \"local-id\"\n";
    let r = resolved(&["--agent", "local", "--nats", "nats://x"], toml);
    assert_eq!(r.nats.expect("the worker is on").identity, "local-id");
    // The flag and [nats] identity still come first.
    let r = resolved(
        &[
            "--agent",
            "local",
            "--nats",
            "nats://x",
            "--identity",
            "flag",
        ],
        toml,
    );
    assert_eq!(r.nats.unwrap().identity, "flag");
    let r = resolved(
        &["--agent", "local", "--nats", "nats://x"],
        &format!("[nats]\nidentity = \"file\"\n{toml}"),
    );
    assert_eq!(r.nats.unwrap().identity, "file");
    // Another agent's identity is not this one's.
    assert!(matches!(
        error(&["--nats", "nats://x"], toml),
        ConfigError::Fisk(SettingError::MissingIdentity)
    ));
}

#[test]
fn the_default_agent_and_those_exposed_on_roost_are_hosted_profiles_unless_a_profile_has_the_name()
{
    let toml = "[agents.helper]\nkind = \"roost\"\nprofile = \"mine\"\n\
                [agents.local]\nkind = \"demo\"\nexpose = [\"roost\"]\n\
                [agents.quiet]\nkind = \"demo\"\nexpose = [\"nipxx\"]\n\
                [roost.profiles.mine]\ncommand = [\"a\"]";
    assert_eq!(resolved(&[], toml).roost.hosted, ["demo", "local"]);
    // A roost agent is a roost job already; a profile of the default agent's name wins over it.
    assert_eq!(
        resolved(&["--agent", "helper"], toml).roost.hosted,
        ["local"]
    );
    let shadowed = format!("{toml}\n[roost.profiles.demo]\ncommand = [\"b\"]");
    assert_eq!(resolved(&[], &shadowed).roost.hosted, ["local"]);
    // An exposed agent whose name a profile has, or a roost agent exposed there, is refused.
    let clash = format!("{toml}\n[roost.profiles.local]\ncommand = [\"b\"]");
    assert!(matches!(
        error(&[], &clash),
        ConfigError::AgentSetting { key: "expose", .. }
    ));
    let roost_on_roost = toml.replace(
        "profile = \"mine\"\n",
        "profile = \"mine\"\nexpose = [\"roost\"]\n",
    );
    assert!(matches!(
        error(&[], &roost_on_roost),
        ConfigError::AgentSetting { key: "expose", .. }
    ));
}

#[test]
fn nats_settings_take_a_server_list_one_way_to_authenticate_and_tls_in_pairs() {
    use agentwire_fisk::connection::NatsAuth;
    let base = "[nats]\nurl = \"nats://a:4222, nats://b:4222\"\nidentity = \"w\"\n";
    let n = resolved(&[], base).nats.unwrap().nats;
    assert_eq!(n.servers, ["nats://a:4222", "nats://b:4222"]);
    assert_eq!(n.auth, NatsAuth::None);
    let n = resolved(
        &[],
        &format!("{base}user = \"alice\"\npassword_env = \"PW\"\ntls_ca_file = \"/ca.pem\"\n"),
    )
    .nats
    .unwrap()
    .nats;
    assert_eq!(
        n.auth,
        NatsAuth::UserPassword {
            user: "alice".into(),
            password_env: "PW".into()
        }
    );
    assert_eq!(n.tls.ca_file, Some(PathBuf::from("/ca.pem")));
    let n = resolved(
        &["--nats", "nats://flag:1"],
        &format!("{base}token_env = \"T\"\n"),
    )
    .nats
    .unwrap()
    .nats;
    assert_eq!(n.servers, ["nats://flag:1"], "the flag's list wins");
    assert_eq!(n.auth, NatsAuth::TokenEnv("T".into()));
    for bad in [
        "token_env = \"T\"\ncreds_file = \"/c\"\n",
        "user = \"alice\"\n",
        "password_env = \"PW\"\n",
        "tls_cert_file = \"/c.pem\"\n",
    ] {
        assert!(
            matches!(
                error(&[], &format!("{base}{bad}")),
                ConfigError::Fisk(SettingError::Nats { .. })
            ),
            "{bad}"
        );
    }
    assert!(matches!(
        error(&["--nats", "nats://a:1,,http://[::1"], base),
        ConfigError::Fisk(SettingError::Nats {
            setting: "--nats",
            ..
        })
    ));
}

#[test]
fn a_nats_context_is_named_by_the_flag_over_the_file_and_one_not_there_names_its_file() {
    let base = "[nats]\nurl = \"nats://a:4222\"\nidentity = \"w\"\ncontext = \"aw-none-file\"\n";
    let e = error(&[], base).to_string();
    assert!(
        e.contains("[nats] context") && e.contains("aw-none-file.json"),
        "{e}"
    );
    let e = error(&["--nats-context", "aw-none-flag"], base).to_string();
    assert!(
        e.contains("--nats-context") && e.contains("aw-none-flag.json"),
        "the flag is over the file: {e}"
    );
    // A JetStream journal reads the flag's context too (its servers may come from it).
    let e = error(
        &["--nats-context", "aw-none-journal"],
        "[journal]\nkind = \"jetstream\"\n",
    )
    .to_string();
    assert!(
        e.contains("--nats-context") && e.contains("aw-none-journal.json"),
        "{e}"
    );
}

#[test]
fn the_journal_is_sqlite_unless_jetstream_is_named_with_servers_and_an_instance() {
    use super::JournalChoice;
    assert_eq!(resolved(&[], "").journal, JournalChoice::Sqlite);
    let js = "[journal]\nkind = \"jetstream\"\n";
    let flagged = resolved(&["--nats", "nats://a:1", "--identity", "w"], js).journal;
    match flagged {
        JournalChoice::JetStream(j) => {
            let super::SharedJournal {
                nats,
                prefix,
                replicas,
                instance,
                lease,
            } = *j;
            assert_eq!(lease, Duration::from_secs(10));
            assert_eq!(
                nats.servers,
                ["nats://a:1"],
                "the worker's servers by default"
            );
            assert_eq!(prefix, "AGENTWIRE");
            assert_eq!(replicas, 1);
            assert_eq!(
                instance,
                crate::config::InstanceName::PerDataDir {
                    host: "host-a".into()
                },
                "the host's name and the data dir's id by default"
            );
        }
        other => panic!("{other:?}"),
    }
    let own = resolved(
        &[],
        &format!("{js}url = \"nats://j:1,nats://k:1\"\nstream = \"FLEET\"\nreplicas = 3\ninstance = \"node-7\"\n"),
    )
    .journal;
    assert!(
        matches!(own, JournalChoice::JetStream(ref j) if j.replicas == 3 && j.instance == crate::config::InstanceName::Named { name: "node-7".into(), setting: "[journal] instance" } && j.prefix == "FLEET")
    );
    for bad in [
        js.to_string(),
        format!("{js}url = \"nats://j:1\"\nreplicas = 9\n"),
        format!("{js}url = \"nats://j:1\"\nstream = \"a.b\"\n"),
        format!("{js}url = \"nats://j:1\"\ninstance = \"a b\"\n"),
        format!("{js}url = \"nats://j:1\"\nlease_secs = 0\n"),
        "[journal]\nkind = \"sqlite\"\nreplicas = 3\n".to_string(),
        "[journal]\nkind = \"postgres\"\n".to_string(),
    ] {
        assert!(
            matches!(error(&[], &bad), ConfigError::Journal { .. }),
            "{bad}"
        );
    }
}

#[test]
fn a_roost_json_adds_profiles_and_wins_on_a_shared_name() {
    let (flags, file, env) = (
        flags(&["--roost-config", "/r/roost.json", "--agent", "roost:json"]),
        file("[roost.profiles.mine]\ncommand = [\"file\"]\n[roost.profiles.kept]\ncommand = [\"kept\"]"),
        env(),
    );
    let sources = Sources {
        data_dir: None,
        flags: &flags,
        file: &file,
        env: &env,
    };
    let r = resolve(sources, |path| {
        assert_eq!(path, Path::new("/r/roost.json"));
        Ok(HashMap::from([
            ("mine".to_string(), profile("json-mine")),
            ("json".to_string(), profile("json")),
        ]))
    })
    .unwrap();
    assert_eq!(r.roost.config, Some(PathBuf::from("/r/roost.json")));
    assert_eq!(r.roost.profiles["mine"].command, ["json-mine"]);
    assert_eq!(r.roost.profiles["kept"].command, ["kept"]);
    assert_eq!(r.roost.profiles["json"].command, ["json"]);

    let failing = resolve(sources, |path| {
        Err(ConfigError::Read {
            path: path.to_path_buf(),
            reason: "gone".into(),
        })
    });
    assert_eq!(
        failing.unwrap_err().to_string(),
        "cannot read /r/roost.json: gone"
    );
}

#[test]
fn bad_values_name_their_flag_or_key() {
    let pk = key().to_hex();
    let cases: Vec<(Vec<&str>, String, &str)> = vec![
        (
            vec![],
            "[serve]\nrelays = [\"http://x\"]".into(),
            "[serve] relays: \"http://x\" is not a relay URL",
        ),
        (
            vec!["--allow", "nope"],
            String::new(),
            "--allow: \"nope\" is not a public key",
        ),
        (
            vec![],
            "[nipxx]\nallow = [\"nope\"]".into(),
            "[nipxx] allow: \"nope\"",
        ),
        (
            vec!["--block", &pk, "--block", "x"],
            String::new(),
            "--block: \"x\"",
        ),
        (
            vec![],
            "[nipxx]\nblock = [\"x\"]".into(),
            "[nipxx] block: \"x\"",
        ),
        (
            vec!["--rate-per-second=-1"],
            String::new(),
            "--rate-per-second must be a finite number of at least 0, not -1",
        ),
        (
            vec![],
            "[nipxx]\nrate_per_second = nan".into(),
            "[nipxx] rate_per_second must be a finite number",
        ),
        (
            vec!["--rate-burst", "0.5"],
            String::new(),
            "--rate-burst must be a finite number of at least 1, not 0.5",
        ),
        (
            vec![],
            "[nipxx]\nrate_burst = inf".into(),
            "[nipxx] rate_burst must be a finite number",
        ),
        (
            vec!["--agent", "gpt"],
            String::new(),
            "--agent: unknown agent \"gpt\"",
        ),
        (
            vec![],
            "[serve]\nagent = \"gpt\"".into(),
            "[serve] agent: unknown agent \"gpt\"",
        ),
        (
            vec!["--agent", "x"],
            "[agents.x]\nkind = \"llm\"".into(),
            "[agents.x] kind: unknown kind \"llm\"",
        ),
        (
            vec!["--agent", "x"],
            "[agents.x]\nkind = \"roost\"".into(),
            "[agents.x] profile: missing: the roost profile whose jobs serve the turns",
        ),
        (
            vec!["--agent", "roost:none"],
            String::new(),
            "runs the roost profile \"none\", which is not configured",
        ),
        (
            vec![],
            "[roost.profiles.empty]\ncommand = []".into(),
            "roost profiles: profile \"empty\" has an empty command",
        ),
        (
            vec![],
            "[relay.limits]\nmax_connections = 0".into(),
            "[relay.limits]: max_connections must be at least 1",
        ),
        (
            vec!["--nats", "nats://x"],
            String::new(),
            "--nats needs --identity NAME (or [nats] identity, or nats_identity in the served agent's [agents.<name>])",
        ),
        (
            vec!["--nats", "nats://x", "--identity", "a.b"],
            String::new(),
            "--identity: \"a.b\" must be letters, digits, '-' and '_'",
        ),
        (
            vec![],
            "[nats]\nurl = \"nats://x\"\nidentity = \"a b\"".into(),
            "[nats] identity: \"a b\"",
        ),
        (
            vec![],
            "[nats]\nurl = \"nats://x\"\nidentity = \"a\"\ninstance = \"h.1\"".into(),
            "[nats] instance: \"h.1\"",
        ),
        (
            vec![],
            "[nats]\nurl = \"nats://x\"\nidentity = \"a\"\ninbox_prefix = \"_INBOX.>\"".into(),
            "[nats] inbox_prefix",
        ),
        (
            vec![],
            "[nats]\nurl = \"nats://x\"\nidentity = \"a\"\nblocked_senders = [\"ok\", \"not ok\"]".into(),
            "[nats] blocked_senders: \"not ok\"",
        ),
        (
            vec![],
            "[nats]\nurl = \"nats://x\"\nidentity = \"a\"\nallowed_senders = [\"*\"]".into(),
            "[nats] allowed_senders: \"*\"",
        ),
        (
            vec![
                "--nats",
                "nats://x",
                "--identity",
                "a",
                "--nats-workers",
                "0",
            ],
            String::new(),
            "--nats-workers must be 1 to 4096, not 0",
        ),
        (
            vec![],
            "[nats]\nurl = \"nats://x\"\nidentity = \"a\"\nworkers = 5000".into(),
            "[nats] workers must be 1 to 4096, not 5000",
        ),
    ];
    for (args, toml, expected) in cases {
        let message = error(&args, &toml).to_string();
        assert!(
            message.contains(expected),
            "{args:?} over {toml:?}: {message:?} does not say {expected:?}"
        );
    }
}

#[test]
fn what_is_not_in_force_is_not_checked() {
    let r = resolved(
        &["--relay", "ws://a.example"],
        "[relay.limits]\nmax_connections = 0\n[nats]\nworkers = 0\nidentity = \"a.b\"",
    );
    assert!(r.relay.is_none() && r.nats.is_none());
}

#[test]
fn the_file_refuses_unknown_keys_and_wrong_types_naming_them() {
    for (toml, expected) in [
        ("[nipxx]\nrate_burts = 3", "rate_burts"),
        ("[serve]\nrelay_listen = \"nowhere\"", "relay_listen"),
        (
            "[nipxx]\nbacklog_horizon_secs = \"soon\"",
            "backlog_horizon_secs",
        ),
        ("colour = true", "colour"),
    ] {
        match file::parse(Path::new("/etc/aw.toml"), toml) {
            Ok(_) => panic!("{toml:?} parsed"),
            Err(e @ ConfigError::Parse { .. }) => {
                let message = e.to_string();
                assert!(
                    message.starts_with("/etc/aw.toml: ") && message.contains(expected),
                    "{toml:?}: {message}"
                );
            }
            Err(other) => panic!("{toml:?}: {other:?}"),
        }
    }
}

#[test]
fn rooms_come_from_the_file_with_their_people() {
    let (member, admin) = (Keys::generate(), Keys::generate());
    let npub = admin.public_key().to_bech32().unwrap();
    let r = resolved(
        &[],
        &format!(
            "[[rooms]]\nid = \"lab\"\nname = \"Lab\"\nclosed = true\nmembers = [\"{}\"]\nadmins = [\"{npub}\"]\n\n[[rooms]]\nid = \"lobby\"\n",
            member.public_key().to_hex()
        ),
    );
    let rooms = &r.relay.unwrap().rooms;
    assert_eq!(rooms.len(), 2);
    assert_eq!(
        rooms[0],
        RoomConfig {
            id: "lab".into(),
            name: "Lab".into(),
            closed: true,
            private: false,
            members: vec![member.public_key()],
            admins: vec![admin.public_key()],
        }
    );
    // Defaults: named by its id, open, public.
    assert_eq!(
        (rooms[1].name.as_str(), rooms[1].closed, rooms[1].private),
        ("lobby", false, false)
    );
}

#[test]
fn a_bad_room_names_its_entry_and_what_is_wrong() {
    let e = error(
        &[],
        "[[rooms]]\nid = \"lab\"\n\n[[rooms]]\nid = \"x\"\nmembers = [\"nobody\"]\n",
    );
    assert_eq!(
        e.to_string(),
        "[[rooms]] entry 1: members entry \"nobody\" is not a public key (hex or npub)"
    );
    let e = error(&[], "[[rooms]]\nid = \"Lab Room\"\n");
    assert!(
        e.to_string()
            .starts_with("[[rooms]] entry 0: room id \"Lab Room\""),
        "{e}"
    );
    let e = error(&[], "[[rooms]]\nid = \"lab\"\n\n[[rooms]]\nid = \"lab\"\n");
    assert!(
        e.to_string().contains("entry 1") && e.to_string().contains("twice"),
        "{e}"
    );
    let e = file::parse(
        Path::new("t.toml"),
        "[[rooms]]\nid = \"lab\"\nowner = \"x\"\n",
    )
    .unwrap_err();
    assert!(e.to_string().contains("owner"), "{e}");
}

#[test]
fn relay_admins_come_from_the_file_and_a_bad_one_is_named() {
    let admin = key();
    let r = resolved(
        &[],
        &format!("[relay]\nadmins = [\"{}\"]\n", admin.to_hex()),
    );
    assert!(r.relay.unwrap().admins.contains(&admin));
    let e = error(&[], "[relay]\nadmins = [\"nope\"]\n");
    assert!(e.to_string().contains("[relay] admins"), "{e}");
}

#[test]
fn relay_public_urls_come_from_the_file_and_a_non_ws_one_is_named() {
    let r = resolved(
        &[],
        "[relay]\npublic_urls = [\"wss://relay.example.org\"]\n",
    );
    let shown = crate::show_config::render(&r, false).unwrap();
    assert!(
        shown.contains("public_urls = [\"wss://relay.example.org\"]"),
        "{shown}"
    );
    assert_eq!(
        r.relay.unwrap().public_urls,
        vec!["wss://relay.example.org"]
    );
    let e = error(
        &[],
        "[relay]\npublic_urls = [\"https://relay.example.org\"]\n",
    );
    let e = e.to_string();
    assert!(
        e.contains("[relay] public_urls") && e.contains("https://relay.example.org"),
        "{e}"
    );
}

#[test]
fn relay_allowed_origins_come_from_the_file_and_one_that_is_no_origin_is_named() {
    let r = resolved(
        &[],
        "[relay]\nallowed_origins = [\"https://app.example.org\"]\n",
    );
    let shown = crate::show_config::render(&r, false).unwrap();
    assert!(
        shown.contains("allowed_origins = [\"https://app.example.org\"]"),
        "{shown}"
    );
    assert_eq!(
        r.relay.unwrap().allowed_origins,
        vec!["https://app.example.org"]
    );
    for bad in ["app.example.org", "https://app.example.org/page"] {
        let e = error(&[], &format!("[relay]\nallowed_origins = [\"{bad}\"]\n")).to_string();
        assert!(
            e.starts_with("[relay] allowed_origins: ") && e.contains(bad),
            "{e}"
        );
    }
}

#[test]
fn retention_comes_from_the_file_with_defaults_for_the_rest() {
    let r = resolved(&[], "[relay.retention]\nagent_days = 7\n");
    let retention = r.relay.unwrap().retention;
    assert_eq!(retention.agent_days, 7.0);
    assert_eq!(
        retention.other_days,
        agentwire_relay::retention::DEFAULT_OTHER_DAYS
    );
    let e = file::parse(Path::new("t.toml"), "[relay.retention]\nforever = true\n").unwrap_err();
    assert!(e.to_string().contains("forever"), "{e}");
}

/// The rooms the task tests watch, as the embedded relay needs them.
const ROOMS: &str = "[[rooms]]\nid = \"lab\"\n[[rooms]]\nid = \"lobby\"\n";

#[test]
fn a_watched_room_the_embedded_relay_does_not_have_is_refused() {
    let alice = key().to_hex();
    let e = error(
        &[],
        &format!("[tasks]\nwatch = [\"lab\"]\nallowed = [\"{alice}\"]\n"),
    );
    assert!(
        e.to_string()
            .contains("[tasks] names room \"lab\", which is not a [[rooms]] entry"),
        "{e}"
    );
    let e = error(
        &[],
        &format!("[tasks]\nwatch = [\"lab\"]\nallowed = [\"{alice}\"]\nhome = \"hall\"\n{ROOMS}"),
    );
    assert!(e.to_string().contains("room \"hall\""), "{e}");
    // On an external relay the rooms are that relay's business.
    let r = resolved(
        &["--relay", "wss://relay.example.org"],
        &format!("[tasks]\nwatch = [\"lab\"]\nallowed = [\"{alice}\"]\n"),
    );
    assert!(r.tasks.is_some());
}

#[test]
fn tasks_come_from_the_file_with_the_specs_defaults() {
    let alice = key();
    let r = resolved(
        &[],
        &format!(
            "[tasks]\nwatch = [\"lab\"]\nallowed = [\"{}\"]\nhome = \"lobby\"\n{ROOMS}",
            alice.to_hex()
        ),
    );
    let t = r.tasks.unwrap();
    assert_eq!(t.watch.iter().collect::<Vec<_>>(), ["lab"]);
    assert!(t.allowed.contains(&alice));
    assert_eq!(t.home.as_deref(), Some("lobby"));
    assert_eq!(t.progress_interval, Duration::from_secs(15));
    assert_eq!(t.question_window, agentwire_tasks::DEFAULT_QUESTION_WINDOW);
    assert_eq!(t.max_running, agentwire_tasks::DEFAULT_MAX_RUNNING_TASKS);
    assert!(
        resolved(&[], "").tasks.is_none(),
        "off without rooms to watch"
    );
}

#[test]
fn bad_tasks_settings_say_which_key_is_wrong() {
    let alice = key().to_hex();
    let cases = [
        ("watch = [\"lab\"]\n".to_string(), "allowed is empty"),
        (
            format!("watch = [\"Lab!\"]\nallowed = [\"{alice}\"]\n"),
            "\"Lab!\" is not a room id",
        ),
        (
            format!("watch = [\"lab\"]\nallowed = [\"{alice}\"]\nhome = \"a b\"\n"),
            "\"a b\" is not a room id",
        ),
        (
            format!("watch = [\"lab\"]\nallowed = [\"{alice}\"]\nprogress_interval_secs = 0\n"),
            "progress_interval_secs must be 15 to 3600, not 0",
        ),
        (
            format!("watch = [\"lab\"]\nallowed = [\"{alice}\"]\nprogress_interval_secs = 14\n"),
            "progress_interval_secs must be 15 to 3600, not 14",
        ),
        (
            format!("watch = [\"lab\"]\nallowed = [\"{alice}\"]\nquestion_window_secs = 5\n"),
            "question_window_secs must be 60 to 86400, not 5",
        ),
        (
            format!("watch = [\"lab\"]\nallowed = [\"{alice}\"]\nmax_running = 0\n"),
            "max_running must be 1 to 64, not 0",
        ),
        (
            "watch = [\"lab\"]\nallowed = [\"bob\"]\n".to_string(),
            "[tasks] allowed",
        ),
    ];
    for (body, expected) in cases {
        let e = error(&[], &format!("[tasks]\n{body}"));
        assert!(e.to_string().contains(expected), "{body:?}: {e}");
    }
}

#[test]
fn the_webhook_needs_an_http_url_and_the_embedded_relay() {
    let r = resolved(&[], "[notify]\nwebhook = \"http://127.0.0.1:9999/hook\"\n");
    assert_eq!(
        r.notify_webhook.as_deref(),
        Some("http://127.0.0.1:9999/hook")
    );
    let e = error(&[], "[notify]\nwebhook = \"mailto:me@example.com\"\n");
    assert!(e.to_string().starts_with("[notify] webhook"), "{e}");
    let e = error(
        &["--relay", "wss://relay.example"],
        "[notify]\nwebhook = \"http://127.0.0.1:9999/hook\"\n",
    );
    assert!(e.to_string().contains("embedded relay"), "{e}");
}

#[test]
fn a_cmd_agent_takes_its_command_and_timeout() {
    let toml = "[agents.shout]\nkind = \"cmd\"\ncommand = [\"tr\", \"a-z\", \"A-Z\"]\nrequest_timeout_secs = 30\n";
    let r = resolved(&["--agent", "shout"], toml);
    assert_eq!(
        plan::<CmdPlan>(&r.agent),
        &CmdPlan {
            command: vec!["tr".into(), "a-z".into(), "A-Z".into()],
            timeout: Duration::from_secs(30),
            env: Default::default(),
        }
    );
    let toml = "[agents.shout]\nkind = \"cmd\"\ncommand = [\"cat\"]\n";
    assert_eq!(
        plan::<CmdPlan>(&resolved(&["--agent", "shout"], toml).agent).timeout,
        agentwire_agents::DEFAULT_CMD_TIMEOUT
    );
}

#[test]
fn an_acp_agent_takes_its_command_an_absolute_cwd_and_its_env() {
    let toml = "[agents.coder]\nkind = \"acp\"\ncommand = [\"npx\", \"some-acp-adapter\"]\ncwd = \"/srv/code\"\n\
                pass_env = [\"ANTHROPIC_API_KEY\"]\n";
    let r = resolved(&["--agent", "coder"], toml);
    let AcpPlan { command, env, cwd } = plan(&r.agent);
    assert_eq!(command, &["npx", "some-acp-adapter"]);
    assert_eq!(cwd.as_deref(), Some(Path::new("/srv/code")));
    assert_eq!(env.pass, ["ANTHROPIC_API_KEY"]);
    let e = error(
        &["--agent", "coder"],
        "[agents.coder]\nkind = \"acp\"\ncommand = [\"x\"]\ncwd = \"work\"\n",
    );
    assert!(
        e.to_string().contains("cwd") && e.to_string().contains("absolute"),
        "{e}"
    );
    let e = error(&["--agent", "coder"], "[agents.coder]\nkind = \"acp\"\n");
    assert!(e.to_string().contains("command: missing"), "{e}");
    let e = error(
        &["--agent", "s"],
        "[agents.s]\nkind = \"cmd\"\ncommand = [\"x\"]\ncwd = \"/a\"\n",
    );
    assert!(e.to_string().contains("only of acp"), "{e}");
}

#[test]
fn a_remote_nipxx_agent_takes_its_key_and_relays() {
    let key = Keys::generate().public_key();
    let toml = format!(
        "[agents.far]\nkind = \"nipxx\"\npubkey = \"{}\"\nrelays = [\"wss://relay.example.org\"]\n",
        key.to_bech32().unwrap()
    );
    let r = resolved(&["--agent", "far"], &toml);
    let NipxxPlan { agent, relays, .. } = plan(&r.agent);
    assert_eq!(
        (*agent, relays.as_slice()),
        (key, ["wss://relay.example.org".to_string()].as_slice())
    );
    for (toml, says) in [
        (
            "[agents.far]\nkind = \"nipxx\"\nrelays = [\"wss://r\"]\n",
            "pubkey",
        ),
        (
            "[agents.far]\nkind = \"nipxx\"\npubkey = \"nope\"\nrelays = [\"wss://r\"]\n",
            "not a public key",
        ),
        (
            &format!(
                "[agents.far]\nkind = \"nipxx\"\npubkey = \"{}\"\n",
                key.to_hex()
            ),
            "relays",
        ),
        (
            &format!(
                "[agents.far]\nkind = \"nipxx\"\npubkey = \"{}\"\nrelays = [\"http://r\"]\n",
                key.to_hex()
            ),
            "relays",
        ),
    ] {
        let e = error(&["--agent", "far"], toml).to_string();
        assert!(e.contains(says), "{toml}: {e}");
    }
}

#[test]
fn env_and_pass_env_are_read_checked_and_never_name_a_secret() {
    let toml = "[agents.shout]\nkind = \"cmd\"\ncommand = [\"cat\"]\nenv = { MODE = \"loud\" }\npass_env = [\"GITHUB_TOKEN\"]\n\
                [roost.profiles.p]\ncommand = [\"sh\"]\nenv = { A = \"1\" }\npass_env = [\"LANGUAGE\"]\nuser = \"nobody\"\n";
    let r = resolved(&["--agent", "shout"], toml);
    let CmdPlan { env, .. } = plan(&r.agent);
    assert_eq!(env.set["MODE"], "loud");
    assert_eq!(env.pass, ["GITHUB_TOKEN"]);
    let p = &r.roost.profiles["p"];
    assert_eq!(
        (p.env["A"].as_str(), p.pass_env.as_slice()),
        ("1", ["LANGUAGE".to_string()].as_slice())
    );
    assert_eq!(p.user.as_deref(), Some("nobody"));
    let model = "[agents.m]\nkind = \"openai\"\nbase_url = \"http://h/v1\"\nmodels = [\"m\"]\napi_key_env = \"OPENAI_API_KEY\"\n";
    let mcp = "[[agents.m.mcp]]\nname = \"s\"\ncommand = [\"srv\"]\nenv = { T = \"x\" }\npass_env = [\"GITHUB_TOKEN\"]\n";
    let r = resolved(
        &["--agent", "m"],
        &format!("{model}pass_env = [\"HTTPS_PROXY\"]\n{mcp}"),
    );
    let s = plan::<OpenAiPlan>(&r.agent);
    assert_eq!(s.env.pass, ["HTTPS_PROXY"]);
    assert_eq!(
        (s.mcp[0].env.set["T"].as_str(), s.mcp[0].env.pass.as_slice()),
        ("x", ["GITHUB_TOKEN".to_string()].as_slice())
    );
    // A variable the configuration holds a secret in is never passed on, by any pass_env.
    let nats = "[nats]\nurl = \"nats://h:4222\"\nidentity = \"me\"\nuser = \"u\"\npassword_env = \"NATS_PW\"\n";
    for (args, toml, secret) in [
        (
            vec!["--agent", "m"],
            format!("{model}pass_env = [\"OPENAI_API_KEY\"]\n"),
            "OPENAI_API_KEY",
        ),
        (
            vec!["--agent", "m"],
            format!("{model}{}", mcp.replace("GITHUB_TOKEN", "OPENAI_API_KEY")),
            "OPENAI_API_KEY",
        ),
        (
            vec![],
            format!("{nats}[roost.profiles.p]\ncommand = [\"sh\"]\npass_env = [\"NATS_PW\"]\n"),
            "NATS_PW",
        ),
        (
            vec!["--agent", "shout"],
            format!("{nats}{}", toml.replace("GITHUB_TOKEN", "NATS_PW")),
            "NATS_PW",
        ),
    ] {
        let e = error(&args, &toml).to_string();
        assert!(e.contains(secret) && e.contains("never passed"), "{e}");
    }
    for (toml, key) in [
        ("[agents.d]\nkind = \"demo\"\nenv = { A = \"1\" }\n", "env"),
        (
            "[agents.d]\nkind = \"cmd\"\ncommand = [\"x\"]\npass_env = [\"NOT A NAME\"]\n",
            "env",
        ),
    ] {
        let e = error(&["--agent", "d"], toml).to_string();
        assert!(e.starts_with(&format!("[agents.d] {key}: ")), "{e}");
    }
    let e = error(
        &[],
        "[roost.profiles.p]\ncommand = [\"sh\"]\nuser = \"nobody\"\nprotocol = true\n",
    );
    assert!(e.to_string().contains("terminal agent"), "{e}");
}

#[test]
fn a_cmd_agent_without_a_command_or_with_a_bad_timeout_is_refused_by_name() {
    for toml in [
        "[agents.shout]\nkind = \"cmd\"\n",
        "[agents.shout]\nkind = \"cmd\"\ncommand = []\n",
        "[agents.shout]\nkind = \"cmd\"\ncommand = [\"\"]\n",
    ] {
        let e = error(&["--agent", "shout"], toml);
        assert!(
            matches!(&e, ConfigError::AgentSetting { name, key: "command", .. } if name == "shout"),
            "{e}"
        );
        assert!(e
            .to_string()
            .starts_with("[agents.shout] command: missing: a program and its arguments"));
    }
    for bad in [0, 86_401] {
        let toml = format!(
            "[agents.shout]\nkind = \"cmd\"\ncommand = [\"cat\"]\nrequest_timeout_secs = {bad}\n"
        );
        let e = error(&["--agent", "shout"], &toml);
        assert!(
            e.to_string().contains(&format!(
                "[agents.shout] request_timeout_secs: {bad} is out of range (1-86400)"
            )),
            "{e}"
        );
    }
}

const OPENAI: &str = "[agents.local]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:11434/v1\"\nmodels = [\"llama3.2\", \"qwen2.5\"]\n";

#[test]
fn an_openai_agent_takes_its_settings_and_defaults() {
    let r = resolved(&["--agent", "local"], OPENAI);
    let s = plan::<OpenAiPlan>(&r.agent);
    assert_eq!(s.models, vec!["llama3.2", "qwen2.5"]);
    assert_eq!(s.max_context_tokens, DEFAULT_MAX_CONTEXT_TOKENS);
    assert!(s.tools.is_empty() && s.api_key_env.is_none());
    let toml = format!("{OPENAI}tools = [\"clock\"]\napi_key_env = \"OPENAI_API_KEY\"\nmax_context_tokens = 128000\nrequest_timeout_secs = 60\n");
    let r = resolved(&["--agent", "local"], &toml);
    let s = plan::<OpenAiPlan>(&r.agent);
    assert_eq!(s.tools, vec!["clock"]);
    assert_eq!(s.api_key_env.as_deref(), Some("OPENAI_API_KEY"));
    assert_eq!(s.max_context_tokens, 128_000);
    assert_eq!(s.request_timeout, Duration::from_secs(60));
}

#[test]
fn a_bad_openai_setting_is_refused_by_its_key() {
    let base = "[agents.local]\nkind = \"openai\"\n";
    let cases = [
        (
            format!("{base}models = [\"m\"]\n"),
            "[agents.local] base_url: missing",
        ),
        (
            format!("{base}base_url = \"ftp://x\"\nmodels = [\"m\"]\n"),
            "[agents.local] base_url: not an http:// or https:// URL",
        ),
        (
            format!("{base}base_url = \"http://x/v1\"\nmodels = []\n"),
            "[agents.local] models: 1 to 32",
        ),
        (
            format!("{OPENAI}tools = [\"rm\"]\n"),
            "[agents.local] tools: no built-in tool \"rm\"",
        ),
        (
            format!("{OPENAI}max_context_tokens = 5\n"),
            "[agents.local] max_context_tokens: 5 is out of range",
        ),
        (
            format!("{OPENAI}command = [\"x\"]\n"),
            "[agents.local] command: not a setting of kind \"openai\"",
        ),
        (
            "[agents.local]\nkind = \"cmd\"\ncommand = [\"x\"]\nbase_url = \"http://x\"\n".into(),
            "[agents.local] base_url: not a setting of kind \"cmd\"",
        ),
    ];
    for (toml, want) in cases {
        let e = error(&["--agent", "local"], &toml).to_string();
        assert!(e.starts_with(want), "{e} (wanted {want})");
    }
}

#[test]
fn roost_in_tools_gives_the_roost_tools_but_not_to_an_agent_named_concierge() {
    let toml = format!("{OPENAI}tools = [\"clock\", \"roost\"]\n");
    let r = resolved(&["--agent", "local"], &toml);
    let s = plan::<OpenAiPlan>(&r.agent);
    assert_eq!(s.tools, vec!["clock", "roost"]);
    let toml = toml.replace("[agents.local]", "[agents.concierge]");
    let e = error(&["--agent", "concierge"], &toml).to_string();
    assert!(
        e.starts_with("[agents.concierge] tools: roost: ") && e.contains("concierge's name"),
        "{e}"
    );
}

#[test]
fn concierge_in_tools_gives_the_concierge_tools_whatever_the_agents_name() {
    let toml = format!("{OPENAI}tools = [\"roost\", \"concierge\"]\n");
    let r = resolved(&["--agent", "local"], &toml);
    let s = plan::<OpenAiPlan>(&r.agent);
    assert_eq!(s.tools, vec!["roost", "concierge"]);
    // They open no foreground peer of the agent's name, so the concierge's own name is no bar.
    let toml = format!("{OPENAI}tools = [\"concierge\"]\n")
        .replace("[agents.local]", "[agents.concierge]");
    let r = resolved(&["--agent", "concierge"], &toml);
    let s = plan::<OpenAiPlan>(&r.agent);
    assert_eq!(s.tools, vec!["concierge"]);
    let toml = format!("{OPENAI}tools = [\"concierges\"]\n");
    let e = error(&["--agent", "local"], &toml).to_string();
    assert!(
        e.contains("and concierge (the roost concierge's ops)"),
        "{e}"
    );
}

#[test]
fn mcp_servers_are_checked_by_name_and_command() {
    let good = format!(
        "{OPENAI}[[agents.local.mcp]]\nname = \"files\"\ncommand = [\"python3\", \"s.py\"]\n"
    );
    let r = resolved(&["--agent", "local"], &good);
    let s = plan::<OpenAiPlan>(&r.agent);
    assert_eq!(s.mcp[0].name, "files");
    assert_eq!(s.mcp[0].command, vec!["python3", "s.py"]);
    for (extra, want) in [
        ("[[agents.local.mcp]]\nname = \"a b\"\ncommand = [\"x\"]\n", "server name \"a b\""),
        (
            "[[agents.local.mcp]]\nname = \"a\"\ncommand = [\"x\"]\n[[agents.local.mcp]]\nname = \"a\"\ncommand = [\"y\"]\n",
            "given twice",
        ),
        ("[[agents.local.mcp]]\nname = \"a\"\ncommand = []\n", "needs a command"),
    ] {
        let e = error(&["--agent", "local"], &format!("{OPENAI}{extra}")).to_string();
        assert!(e.starts_with("[agents.local] mcp: ") && e.contains(want), "{e}");
    }
}

#[test]
fn max_concurrent_turns_is_taken_for_any_kind_within_its_range() {
    let toml = "[agents.d]\nkind = \"demo\"\nmax_concurrent_turns = 4\n";
    assert_eq!(
        resolved(&["--agent", "d"], toml).agent.max_concurrent_turns,
        Some(4)
    );
    for bad in [0, 1025] {
        let toml = format!("[agents.d]\nkind = \"demo\"\nmax_concurrent_turns = {bad}\n");
        let e = error(&["--agent", "d"], &toml).to_string();
        assert!(
            e.starts_with(&format!(
                "[agents.d] max_concurrent_turns: {bad} is out of range (1-1024)"
            )),
            "{e}"
        );
    }
}

#[test]
fn an_agent_name_that_would_be_a_path_is_refused() {
    for name in ["../agent", ".hidden", "a/b"] {
        let toml = format!("[agents.\"{name}\"]\nkind = \"demo\"\n");
        let e = error(&["--agent", name], &toml).to_string();
        assert!(e.contains("name: 1-64 of"), "{e}");
    }
    let toml = "[agents.\"llama3.2\"]\nkind = \"demo\"\n";
    assert_eq!(
        resolved(&["--agent", "llama3.2"], toml).agent.name,
        "llama3.2"
    );
}

#[test]
fn a_shared_key_file_is_the_default_agents_under_nipxx_and_a_further_agents_when_on_nipxx() {
    let toml = "[nipxx]\nkey_file = \"/etc/agentwire/agent.key\"\n\
                [agents.quiet]\nkind = \"demo\"\nexpose = [\"nipxx\"]\nkey_file = \"/etc/agentwire/quiet.key\"\n";
    let r = resolved(&[], toml);
    assert_eq!(
        r.nipxx.key_file.as_deref(),
        Some(Path::new("/etc/agentwire/agent.key"))
    );
    assert_eq!(
        r.more_agents[0].key_file.as_deref(),
        Some(Path::new("/etc/agentwire/quiet.key"))
    );
    // Off NIP-XX a key file means nothing, so it is a mistake; so is one on the --agent agent's entry.
    let off = toml.replace("expose = [\"nipxx\"]", "expose = [\"roost\"]");
    assert!(matches!(
        error(&[], &off),
        ConfigError::AgentSetting {
            key: "key_file",
            ..
        }
    ));
    assert!(matches!(
        error(&["--agent", "quiet"], toml),
        ConfigError::AgentSetting {
            key: "key_file",
            ..
        }
    ));
}

#[test]
fn the_journal_keeps_ended_turns_as_long_as_a_resend_must_be_known() {
    let day = Duration::from_secs(86_400);
    assert_eq!(resolved(&[], "").journal_retention, Some(day * 30));
    assert_eq!(
        resolved(&[], "[journal]\nretention_days = 0\n").journal_retention,
        None,
        "0 keeps for ever"
    );
    // Shorter than the relay keeps prompts: refused, naming both.
    let e = error(&[], "[journal]\nretention_days = 7\n").to_string();
    assert!(
        e.contains("[journal] retention_days") && e.contains("agent_days (30)"),
        "{e}"
    );
    // With the relay keeping them a day, a day is enough; the backlog horizon is the floor.
    let r = resolved(
        &[],
        "[journal]\nretention_days = 1\n[relay.retention]\nagent_days = 1\n",
    );
    assert_eq!(r.journal_retention, Some(day));
    let e = error(
        &["--backlog-horizon-secs", "7200"],
        "[journal]\nretention_days = 0.01\n[relay.retention]\nagent_days = 0.01\n",
    )
    .to_string();
    assert!(e.contains("backlog horizon (7200 s)"), "{e}");
    let short = resolved(
        &["--backlog-horizon-secs", "60"],
        "[journal]\nretention_days = 0.005\n[relay.retention]\nagent_days = 0.005\n",
    );
    assert_eq!(short.journal_retention, Some(Duration::from_secs(432)));
    for bad in ["-1", "nan"] {
        let e = error(&[], &format!("[journal]\nretention_days = {bad}\n")).to_string();
        assert!(e.contains("not a number of days"), "{e}");
    }
    let e = error(&[], "[relay.retention]\nagent_days = -2\n").to_string();
    assert!(e.contains("[relay.retention] agent_days"), "{e}");
}

#[test]
fn telemetry_is_shown_with_its_credentials_hidden_and_reads_back() {
    let r = resolved(
        &[],
        "[telemetry]\notlp_endpoint = \"http://user:tok@collector:4318\"\ncontent = true\n",
    );
    assert_eq!(
        r.telemetry.otlp_endpoint.as_deref(),
        Some("http://user:tok@collector:4318")
    );
    assert!(r.telemetry.content);
    let shown = crate::show_config::render(&r, false).unwrap();
    assert!(
        shown.contains(
            "[telemetry]\notlp_endpoint = \"http://<set>@collector:4318\"\ncontent = true"
        ),
        "{shown}"
    );
    assert!(!shown.contains("tok"), "{shown}");
    let plain = resolved(&[], "");
    assert_eq!(plain.telemetry, Default::default(), "off by default");
    assert!(!crate::show_config::render(&plain, false)
        .unwrap()
        .contains("[telemetry]"));
    let e = error(&[], "[telemetry]\notlp_endpoint = \"collector:4318\"\n");
    assert!(
        e.to_string().starts_with("[telemetry] otlp_endpoint:"),
        "{e}"
    );
}

#[test]
fn pricing_hints_are_checked_and_kept_for_the_agent() {
    let toml = |p: &str| format!("[agents.d]\nkind = \"demo\"\n[agents.d.pricing_hints]\n{p}\n");
    let ok = resolved(
        &["--agent", "d"],
        &toml("currency = \"EUR\"\nper_1k_prompt_tokens = 0.5\nper_1k_output_tokens = 1.5"),
    );
    let p = ok.agent.pricing.expect("kept");
    assert_eq!(
        (
            p.currency.as_str(),
            p.per_1k_prompt_tokens,
            p.per_1k_output_tokens
        ),
        ("EUR", 0.5, 1.5)
    );
    for bad in [
        "currency = \"dollars\"\nper_1k_prompt_tokens = 0.5\nper_1k_output_tokens = 1.5",
        "currency = \"USD\"\nper_1k_prompt_tokens = -1.0\nper_1k_output_tokens = 1.5",
        "currency = \"USD\"\nper_1k_prompt_tokens = 0.5\nper_1k_output_tokens = 5000.0",
    ] {
        assert!(
            matches!(
                error(&["--agent", "d"], &toml(bad)),
                ConfigError::AgentSetting {
                    key: "pricing_hints",
                    ..
                }
            ),
            "{bad}"
        );
    }
}

#[test]
fn fronts_are_checked_against_the_one_list() {
    let e = error(&[], "[agents.x]\nkind = \"demo\"\nexpose = [\"smtp\"]\n").to_string();
    for front in ["nipxx", "fisk", "roost", "openai"] {
        assert!(e.contains(front), "{e}");
    }
    let e = error(&[], "[agents.x]\nkind = \"demo\"\nexpose = [\"tasks\"]\n").to_string();
    assert!(e.contains("--agent agent only"), "{e}");
    // A plug-in front's section is its own: read, checked and printed by it.
    let r = resolved(
        &[],
        "[agents.x]\nkind = \"demo\"\nexpose = [\"openai\", \"roost\"]\n",
    );
    assert_eq!(r.more_agents[0].fronts, ["roost", "openai"]);
    let e = error(&[], "[openai]\nenabled = \"yes\"\n").to_string();
    assert!(e.starts_with("[openai]"), "{e}");
    let e = error(&[], "[openai]\nsurprise = 1\n").to_string();
    assert!(e.contains("surprise"), "{e}");
    let e = error(
        &[],
        "[openai]\nenabled = false\n[agents.x]\nkind = \"demo\"\nexpose = [\"openai\"]\n",
    )
    .to_string();
    assert!(e.contains("the openai front is off"), "{e}");
    let e = error(
        &["--http-listen", "off"],
        "[agents.x]\nkind = \"demo\"\nexpose = [\"openai\"]\n",
    )
    .to_string();
    assert!(e.contains("HTTP server, which is off"), "{e}");
    let printed = crate::show_config::render(&r, false).unwrap();
    assert!(printed.contains("[openai]\nenabled = true"), "{printed}");
    assert!(
        printed.contains("expose = [\"roost\", \"openai\"]"),
        "{printed}"
    );
}

#[test]
fn callers_name_served_agents_and_variables_that_are_set() {
    let caller = |agents: &str, var: &str| {
        format!("[[http.callers]]\nname = \"alice\"\ntoken_env = \"{var}\"\nagents = {agents}\n")
    };
    let r = resolved(&[], &caller("[\"demo\"]", "OPENAI_API_KEY"));
    assert_eq!(r.http.unwrap().callers[0].name, "alice");
    let e = error(&[], &caller("[\"ghost\"]", "OPENAI_API_KEY")).to_string();
    assert!(e.contains("\"ghost\" is not an agent served here"), "{e}");
    let e = error(&[], &caller("[\"demo\"]", "ALICE_TOKEN")).to_string();
    assert!(e.contains("ALICE_TOKEN is not set"), "{e}");
    let printed = crate::show_config::render(
        &resolved(&[], &caller("[\"demo\"]", "OPENAI_API_KEY")),
        false,
    )
    .unwrap();
    assert!(
        printed.contains("token_env = \"OPENAI_API_KEY\""),
        "{printed}"
    );
}

#[test]
fn remote_fisk_and_a2a_agents_take_their_settings_checked() {
    let toml = "[agents.worker]\nkind = \"fisk\"\nurl = \"nats://127.0.0.1:4222\"\nidentity = \"docs\"\n\
                request_timeout_secs = 30\n[agents.worker.nats]\nuser = \"u\"\npassword_env = \"FAR_PW\"\n";
    let r = resolved(&["--agent", "worker"], toml);
    let FiskPlan {
        connect,
        identity,
        timeout,
        ..
    } = plan(&r.agent);
    assert_eq!(
        (identity.as_str(), timeout.as_secs(), connect.servers.len()),
        ("docs", 30, 1)
    );
    let toml = "[agents.far]\nkind = \"a2a\"\nurl = \"http://127.0.0.1:8080/a2a/demo/.well-known/agent-card.json\"\ntoken_env = \"FAR_TOKEN\"\n";
    let r = resolved(&["--agent", "far"], toml);
    let A2aPlan {
        card_url,
        token_env,
        ..
    } = plan(&r.agent);
    assert!(card_url.ends_with("agent-card.json"));
    assert_eq!(token_env.as_deref(), Some("FAR_TOKEN"));
    for (toml, says) in [
        ("[agents.w]\nkind = \"fisk\"\nidentity = \"d\"\n", "url"),
        ("[agents.w]\nkind = \"fisk\"\nurl = \"nats://h:4222\"\n", "identity"),
        (
            "[agents.w]\nkind = \"fisk\"\nurl = \"nats://h:4222\"\nidentity = \"a b\"\n",
            "not a fisk-ai identity",
        ),
        (
            "[agents.w]\nkind = \"fisk\"\nurl = \"nats://h:4222\"\nidentity = \"d\"\n[agents.w.nats]\ntoken_env = \"T\"\ncreds_file = \"/c\"\n",
            "one way to authenticate",
        ),
        ("[agents.w]\nkind = \"a2a\"\n", "url"),
        ("[agents.w]\nkind = \"a2a\"\nurl = \"ftp://h/card\"\n", "not an http(s) URL"),
        (
            "[agents.w]\nkind = \"a2a\"\nurl = \"http://h/card\"\nidentity = \"d\"\n",
            "only of fisk",
        ),
        (
            "[agents.w]\nkind = \"a2a\"\nurl = \"http://h/card\"\nrequest_timeout_secs = 0\n",
            "request_timeout_secs",
        ),
    ] {
        let e = error(&["--agent", "w"], toml).to_string();
        assert!(e.contains(says), "{toml}: {e}");
    }
    // A remote agent's secrets are never passed to a child.
    let e = error(
        &["--agent", "w"],
        "[agents.w]\nkind = \"a2a\"\nurl = \"http://h/card\"\ntoken_env = \"FAR_TOKEN\"\n\
         [agents.c]\nkind = \"cmd\"\ncommand = [\"x\"]\npass_env = [\"FAR_TOKEN\"]\nexpose = [\"nipxx\"]\n",
    )
    .to_string();
    assert!(e.contains("never passed"), "{e}");
}

#[test]
fn a_model_agent_delegates_to_remote_agents_only() {
    let model = "[agents.m]\nkind = \"openai\"\nbase_url = \"http://h/v1\"\nmodels = [\"m\"]\n";
    let far = "[agents.far]\nkind = \"a2a\"\nurl = \"http://h/card\"\n";
    let r = resolved(
        &["--agent", "m"],
        &format!("{model}delegates = [\"far\"]\n{far}"),
    );
    let s = plan::<OpenAiPlan>(&r.agent);
    assert_eq!(s.delegates.len(), 1);
    assert_eq!(
        (s.delegates[0].name.as_str(), s.delegates[0].plan.kind()),
        ("far", "a2a")
    );
    // Served through the model agent: no warning that it is served by nothing.
    assert!(
        r.warnings.iter().all(|w| !w.contains("far")),
        "{:?}",
        r.warnings
    );
    for (toml, says) in [
        (format!("{model}delegates = [\"nobody\"]\n"), "not another"),
        (format!("{model}delegates = [\"m\"]\n"), "not another"),
        (
            format!("{model}delegates = [\"c\"]\n[agents.c]\nkind = \"cmd\"\ncommand = [\"x\"]\n"),
            "served elsewhere",
        ),
        (
            format!("{model}delegates = [\"far\", \"far\"]\n{far}"),
            "twice",
        ),
        (
            // Two model agents naming each other: refused, not resolved round and round.
            format!("{model}delegates = [\"m2\"]\n[agents.m2]\nkind = \"openai\"\nbase_url = \"http://h/v1\"\nmodels = [\"m\"]\ndelegates = [\"m\"]\n"),
            "served elsewhere",
        ),
        (
            format!("{model}delegates = [\"calculator\"]\n[agents.calculator]\nkind = \"a2a\"\nurl = \"http://h/c\"\n"),
            "built-in tool",
        ),
        (
            format!("[agents.c]\nkind = \"cmd\"\ncommand = [\"x\"]\ndelegates = [\"far\"]\n{far}"),
            "only of openai",
        ),
    ] {
        let args = match toml.starts_with("[agents.c]") {
            true => ["--agent", "c"],
            false => ["--agent", "m"],
        };
        let e = error(&args, &toml).to_string();
        assert!(e.contains(says), "{toml}: {e}");
    }
}

#[test]
fn each_kind_reads_its_own_keys_and_refuses_the_rest_by_name() {
    // A key of another kind names the kinds that read it; one no kind reads names what this kind takes.
    let e = error(
        &["--agent", "x"],
        "[agents.x]\nkind = \"cmd\"\ncommand = [\"cat\"]\nfrobnicate = 1\n",
    );
    assert_eq!(
        e.to_string(),
        "[agents.x] frobnicate: not a setting of any kind; kind \"cmd\" takes command, request_timeout_secs, env, pass_env"
    );
    let e = error(
        &["--agent", "x"],
        "[agents.x]\nkind = \"demo\"\nprofile = \"p\"\n",
    );
    assert_eq!(
        e.to_string(),
        "[agents.x] profile: not a setting of kind \"demo\" (only of roost)"
    );
    // A value of the wrong type names its key and its place in it.
    let e = error(&["--agent", "local"], &OPENAI.replace("\"qwen2.5\"", "3"));
    assert!(
        e.to_string()
            .starts_with("[agents.local] models: models[1]: invalid type: integer `3`"),
        "{e}"
    );
    // An unknown kind is refused naming every kind there is.
    let e = error(&["--agent", "x"], "[agents.x]\nkind = \"llm\"\n").to_string();
    for kind in crate::agent_kinds::KINDS {
        assert!(e.contains(&format!("{} (", kind.name())), "{e}");
    }
}

#[test]
fn a_delegates_own_error_is_reported_as_its_own() {
    let toml =
        format!("{OPENAI}delegates = [\"far\"]\n[agents.far]\nkind = \"a2a\"\nurl = \"ftp://x\"\n");
    let e = error(&["--agent", "local"], &toml);
    assert_eq!(
        e.to_string(),
        "[agents.far] url: \"ftp://x\" is not an http(s) URL"
    );
    let toml = format!(
        "{OPENAI}delegates = [\"mine\"]\n[agents.mine]\nkind = \"cmd\"\ncommand = [\"x\"]\n"
    );
    let e = error(&["--agent", "local"], &toml).to_string();
    assert!(
        e.starts_with("[agents.local] delegates: \"mine\" is of kind \"cmd\""),
        "{e}"
    );
}
