//! The agent's connection to its embedded relay is exempt from the relay's event rate once it has answered
//! the relay's NIP-42 challenge as the agent's key (as the runtime's connections do), and a connection that
//! only carries events the agent signed is not.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentwire_nostr::crypto::Crypto;
use agentwire_nostr::relay_conn::RelayConn;
use futures_util::future::join_all;
use nostr::prelude::{Event, EventBuilder, Keys, Kind, Tag};

/// The relay's event rate per connection in these tests.
const RATE: u32 = 10;

/// Publishes `count` events at once on `conn`, signed by `sign`; how many the relay refused as rate limited.
async fn rate_limited(conn: &RelayConn, count: usize, sign: impl Fn(usize) -> Event) -> usize {
    let events: Vec<_> = (0..count).map(sign).collect();
    let replies = join_all(events.iter().map(|e| conn.publish(e))).await;
    replies
        .into_iter()
        .map(|r| r.expect("an OK"))
        .filter(|r| {
            assert!(
                r.accepted || r.message.starts_with("rate-limited:"),
                "{}",
                r.message
            );
            !r.accepted
        })
        .count()
}

#[tokio::test]
async fn the_agents_authenticated_connection_is_exempt_and_a_plain_one_carrying_its_events_is_not()
{
    let dir = tempfile::tempdir().unwrap();
    let agent = Arc::new(Crypto::new(Keys::generate()));
    let mut config = agentwire_relay::RelayConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        dir.path().join("relay.sqlite"),
    );
    config.unlimited_authors.insert(agent.public_key());
    config.limits.max_events_per_second_per_connection = RATE;
    let relay = agentwire_relay::start(config).await.unwrap();
    let url = relay.url();

    let (conn, _incoming) = RelayConn::connect_authenticated(&url, agent.clone());
    assert!(conn.wait_connected(Duration::from_secs(5)).await);
    // The relay takes the agent's protected event (NIP-70) only once the connection authenticated as it.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let protected =
            agent.sign(EventBuilder::new(Kind::TextNote, "mine").tags([Tag::protected()]));
        let reply = conn.publish(&protected).await.expect("an OK");
        if reply.accepted {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never authenticated: {}",
            reply.message
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Exempt for any key it publishes (the one-time keys of gift wraps).
    let any_key = |i: usize| {
        Crypto::new(Keys::generate()).sign(EventBuilder::new(Kind::TextNote, format!("{i}")))
    };
    assert_eq!(rate_limited(&conn, 5 * RATE as usize, any_key).await, 0);

    // A plain connection publishing the agent's own events is held to the rate.
    let (plain, _incoming) = RelayConn::connect(&url);
    assert!(plain.wait_connected(Duration::from_secs(5)).await);
    let agents = |i: usize| agent.sign(EventBuilder::new(Kind::TextNote, format!("copy {i}")));
    assert!(rate_limited(&plain, 5 * RATE as usize, agents).await > 0);
    relay.shutdown().await;
}
