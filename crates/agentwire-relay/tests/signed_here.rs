//! Signatures made in this process: the relay stores an event carrying one without verifying it again,
//! and still refuses any other signature for the same id, and an event altered after it was signed.

mod common;

use std::sync::Arc;

use agentwire_relay::SignedHere;
use common::{signed, TestRelay};
use nostr::prelude::{Filter, Keys, Kind};

#[tokio::test]
async fn a_signature_made_here_is_taken_and_only_that_signature() {
    let signed_here = Arc::new(SignedHere::new());
    let relay = {
        let signed_here = signed_here.clone();
        TestRelay::with_config(move |c| c.signed_here = Some(signed_here)).await
    };
    let keys = Keys::generate();
    let mut client = relay.client().await;

    // Remembered when signed, as the daemon's agents' signer does: stored, and taken from the cache.
    let made_here = signed(&keys, 1, "made here", vec![]);
    signed_here.remember(&made_here);
    assert_eq!(client.publish(&made_here).await, (true, String::new()));
    assert!(
        signed_here.is_empty(),
        "the relay took the remembered signature"
    );

    // The same id with a signature other than the one made here: refused, although the id is remembered.
    let target = signed(&keys, 1, "target", vec![]);
    signed_here.remember(&target);
    let other = signed(&keys, 1, "other", vec![]);
    let mut json: serde_json::Value = serde_json::from_str(&target.as_json()).unwrap();
    json["sig"] = other.sig.to_string().into();
    client.send_text(format!(r#"["EVENT",{json}]"#)).await;
    assert_eq!(
        client.ok_for(target.id).await,
        (false, "invalid: bad signature".to_string())
    );

    // Altered after signing (its id no longer its hash): refused before any signature is looked at.
    let mut json: serde_json::Value = serde_json::from_str(&target.as_json()).unwrap();
    json["content"] = "changed".into();
    client.send_text(format!(r#"["EVENT",{json}]"#)).await;
    let (ok, message) = client.ok_for(target.id).await;
    assert!(!ok && message.starts_with("invalid:"), "{message}");

    // Signed elsewhere and never remembered: verified and stored as always.
    let elsewhere = signed(&Keys::generate(), 1, "elsewhere", vec![]);
    assert_eq!(client.publish(&elsewhere).await, (true, String::new()));

    let stored = client
        .query("all", vec![Filter::new().kind(Kind::TextNote)])
        .await;
    let mut contents: Vec<&str> = stored.iter().map(|e| e.content.as_str()).collect();
    contents.sort();
    assert_eq!(contents, ["elsewhere", "made here"]);
}
