//! The client's ai.info lookup follows the spec's: the newest kind 31340 event of the agent (by
//! `created_at`, then id), whatever its `d` tag says; another author's is never taken.

use agentwire_nostr::crypto::Crypto;
use agentwire_nostr::nipxx::kinds;
use nostr::prelude::{EventBuilder, Keys, Kind, Tag, Timestamp};
use std::time::Duration;

fn info(by: &Crypto, d: &str, age_secs: u64, note: &str) -> nostr::prelude::Event {
    let content = format!(r#"{{"ver":1,"encryption":["nip44"],"tool_names":[],"note":"{note}"}}"#);
    by.sign(
        EventBuilder::new(Kind::Custom(kinds::INFO), content)
            .tags([Tag::identifier(d)])
            .custom_created_at(Timestamp::from(Timestamp::now().as_secs() - age_secs)),
    )
}

#[tokio::test]
async fn the_newest_ai_info_of_the_agent_is_read_whatever_its_d_tag() {
    let dir = tempfile::tempdir().unwrap();
    let config = agentwire_relay::RelayConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        dir.path().join("relay.sqlite"),
    );
    let relay = agentwire_relay::start(config).await.unwrap();
    let url = relay.url();
    let agent = Crypto::new(Keys::generate());
    let other = Crypto::new(Keys::generate());
    let (conn, mut incoming) = agentwire_nostr::client::connect(&url).await.unwrap();
    let older = info(&agent, kinds::INFO_D, 20, "older");
    let newer = info(&agent, "profile", 10, "newer");
    let not_the_agents = info(&other, kinds::INFO_D, 1, "another author");
    for ev in [&older, &newer, &not_the_agents] {
        let ok = tokio::time::timeout(Duration::from_secs(5), conn.publish(ev))
            .await
            .expect("an OK in time")
            .expect("an OK");
        assert!(ok.accepted, "{}", ok.message);
    }
    let found = agentwire_nostr::client::info(&conn, &mut incoming, &agent.public_key())
        .await
        .unwrap()
        .expect("the agent's ai.info");
    assert_eq!(found.id, newer.id, "{}", found.content);
}
