//! NATS connections against real `nats-server`s on loopback: a server list skips a server that is down,
//! and a client whose server dies reconnects to another listed one, its subscriptions with it.

use agentwire_fisk::connection::{ConnectError, NatsConnect};
use agentwire_testkit::NatsServer;
use futures_util::StreamExt;
use std::time::Duration;

/// How long a message (or a reconnect, with its backoff) may take on loopback.
const WAIT: Duration = Duration::from_secs(10);

/// A port nothing listens on: bound, then let go.
fn dead_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("nats://{}", l.local_addr().unwrap())
}

fn port_of(url: &str) -> u16 {
    url.rsplit(':').next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_server_that_is_down_is_skipped_and_an_empty_list_is_refused() {
    let live = NatsServer::start();
    let list = format!("{},{}", dead_url(), live.url);
    let nats = NatsConnect {
        servers: NatsConnect::parse_servers(&list).unwrap(),
        ..NatsConnect::to("")
    };
    let client = nats.connect("test").await.expect("the live server is used");
    assert_eq!(client.server_info().port, port_of(&live.url));
    let err = NatsConnect::to(dead_url())
        .connect("test")
        .await
        .unwrap_err();
    assert!(matches!(err, ConnectError::Connect { .. }), "{err}");
    assert!(NatsConnect::parse_servers("").is_err());
}

#[tokio::test]
async fn when_its_server_dies_the_client_moves_to_another_listed_one_with_its_subscriptions() {
    // Two servers that know nothing of each other: a message reaches a subscriber only on its own server.
    let mut a = NatsServer::start();
    let mut b = NatsServer::start();
    let nats = NatsConnect {
        servers: vec![a.url.clone(), b.url.clone()],
        ..NatsConnect::to("")
    };
    let client = nats.connect("mover").await.unwrap();
    let mut sub = client.subscribe("where").await.unwrap();
    client.flush().await.unwrap();
    let first = client.server_info().port;
    let (here, other) = if first == port_of(&a.url) {
        (&mut a, b.url.clone())
    } else {
        (&mut b, a.url.clone())
    };
    let sender = async_nats::connect(&other).await.unwrap();
    sender.publish("where", "before".into()).await.unwrap();
    sender.flush().await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(300), sub.next())
            .await
            .is_err(),
        "the other server's message does not reach a client on this one"
    );
    here.kill();
    // The client reconnects to the other server and subscribes again there; keep sending until it hears.
    let heard = tokio::time::timeout(WAIT, async {
        loop {
            sender.publish("where", "after".into()).await.unwrap();
            sender.flush().await.unwrap();
            if let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(200), sub.next()).await
            {
                return m;
            }
        }
    })
    .await
    .expect("the client moved to the other server");
    assert_eq!(&heard.payload[..], b"after");
    assert_eq!(client.server_info().port, port_of(&other));
}

/// A context file as `nats context save` writes it (every field, most empty).
fn context_json(url: &str, user: &str, password: &str) -> String {
    serde_json::json!({
        "description": "production", "url": url, "socks_proxy": "", "token": "", "user": user,
        "password": password, "creds": "", "nkey": "", "cert": "", "key": "", "ca": "", "nsc": "",
        "jetstream_domain": "", "jetstream_api_prefix": "", "jetstream_event_prefix": "",
        "inbox_prefix": "", "user_jwt": "", "color_scheme": "", "tls_first": false
    })
    .to_string()
}

/// One test for every use of `XDG_CONFIG_HOME`: the variable is the process's, and tests run at once.
#[tokio::test]
async fn a_nats_context_connects_with_its_user_and_password_and_explicit_settings_override_it() {
    use agentwire_fisk::settings::{self, FiskFlags, NatsSection, SettingError};
    const PASSWORD: &str = "s3cret-context-pw";
    let server = NatsServer::start_with_config(&format!(
        "authorization {{ user: alice, password: \"{PASSWORD}\" }}"
    ));
    let xdg = tempfile::tempdir().unwrap();
    let dir = xdg.path().join("nats").join("context");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("prod.json"),
        context_json(&server.url, "alice", PASSWORD),
    )
    .unwrap();
    std::env::set_var("XDG_CONFIG_HOME", xdg.path());

    // Nothing but the context: its servers and its user and password.
    let flags = FiskFlags {
        identity: Some("w1"),
        context: Some("prod"),
        ..Default::default()
    };
    let worker = settings::resolve(flags, &NatsSection::default(), None)
        .unwrap()
        .expect("the context's url turns the worker on");
    assert_eq!(worker.nats.servers, std::slice::from_ref(&server.url));
    let client = worker
        .nats
        .connect("ctx")
        .await
        .expect("the context's credentials are taken");
    let mut sub = client.subscribe("ping").await.unwrap();
    client.publish("ping", "pong".into()).await.unwrap();
    let got = tokio::time::timeout(WAIT, sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&got.payload[..], b"pong");
    // The password stays in the file: not in the settings, their Debug or what `config` shows.
    let shown = format!(
        "{:?} {:?} {}",
        worker.nats,
        worker,
        serde_json::to_string(&settings::view(&worker, |u| u.to_string())).unwrap()
    );
    assert!(!shown.contains(PASSWORD), "{shown}");
    assert!(
        shown.contains("prod.json"),
        "the view names the file holding it: {shown}"
    );

    // `[nats] context` works as the flag does, and the flag is over it.
    let section = NatsSection {
        context: Some("prod".into()),
        ..Default::default()
    };
    let c = settings::connect(&server.url, "--nats", &section).unwrap();
    c.connect("ctx-section")
        .await
        .expect("[nats] context is read");
    // A connection of its own (a JetStream journal's) takes the flag's context as the worker does.
    settings::connect_as(&server.url, "--nats", &NatsSection::default(), Some("prod"))
        .unwrap()
        .connect("ctx-journal")
        .await
        .expect("--nats-context is read for every connection of serve");
    let flags_over = FiskFlags {
        identity: Some("w1"),
        context: Some("missing"),
        ..Default::default()
    };
    assert!(
        settings::resolve(flags_over, &section, None).is_err(),
        "--nats-context names the context"
    );

    // Explicit settings override the context's: a user with another password fails where the
    // context's would connect, and [nats] url is used over the context's url.
    std::env::set_var("AW_CTX_TEST_PW", "not-the-password");
    let explicit = NatsSection {
        context: Some("prod".into()),
        user: Some("alice".into()),
        password_env: Some("AW_CTX_TEST_PW".into()),
        ..Default::default()
    };
    let err = settings::connect(&server.url, "--nats", &explicit)
        .unwrap()
        .connect("ctx-explicit")
        .await
        .unwrap_err();
    assert!(!err.to_string().contains(PASSWORD), "{err}");
    let dead = dead_url();
    let with_url = NatsSection {
        url: Some(dead.clone()),
        context: Some("prod".into()),
        ..Default::default()
    };
    let w = settings::resolve(
        FiskFlags {
            identity: Some("w1"),
            ..Default::default()
        },
        &with_url,
        None,
    )
    .unwrap()
    .unwrap();
    assert_eq!(w.nats.servers, [dead]);

    // A context that is not there, or not JSON, is refused naming its file (and no secret of it).
    let missing = settings::connect(
        &server.url,
        "--nats",
        &NatsSection {
            context: Some("staging".into()),
            ..Default::default()
        },
    )
    .unwrap_err();
    let path = dir.join("staging.json");
    assert!(
        matches!(
            &missing,
            SettingError::Nats {
                setting: "[nats] context",
                ..
            }
        ),
        "{missing:?}"
    );
    assert!(
        missing.to_string().contains(&path.display().to_string()),
        "{missing}"
    );
    std::fs::write(
        dir.join("broken.json"),
        format!("{{\"password\": \"{PASSWORD}\", \"url\": ["),
    )
    .unwrap();
    let broken = settings::connect(
        &server.url,
        "--nats",
        &NatsSection {
            context: Some("broken".into()),
            ..Default::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        broken.contains(&dir.join("broken.json").display().to_string()),
        "{broken}"
    );
    assert!(broken.contains("is not a NATS context file"), "{broken}");
    assert!(!broken.contains(PASSWORD), "{broken}");
    // A name that is a path is not a context's.
    let path_name = FiskFlags {
        identity: Some("w1"),
        context: Some("../prod"),
        ..Default::default()
    };
    assert!(settings::resolve(path_name, &NatsSection::default(), None).is_err());
}
