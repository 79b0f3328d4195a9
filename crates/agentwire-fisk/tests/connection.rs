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
