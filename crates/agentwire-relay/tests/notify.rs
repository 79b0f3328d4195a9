//! Notifications through the webhook, against a local HTTP receiver on a loopback port: a question card wakes
//! only the asked people it mentions, a room message the people it mentions; a receiver that fails at first
//! gets the notification again; a receiver that hangs fills a bounded queue and the rest are dropped, never
//! blocking.

mod common;

use agentwire_relay::notify::{Notifier, WebhookNotifier};
use common::{signed, TestRelay};
use nostr::prelude::{Keys, PublicKey, Tag};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

fn tag(parts: &[&str]) -> Tag {
    Tag::parse(parts.iter().map(|p| p.to_string()).collect::<Vec<_>>()).unwrap()
}

/// An HTTP/1.1 receiver: answers the first `failures` requests 503, the rest 204, and hands each body on.
async fn receiver(
    failures: usize,
) -> (
    String,
    mpsc::UnboundedReceiver<serde_json::Value>,
    Arc<AtomicUsize>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://{}/hook?token=secret-token",
        listener.local_addr().unwrap()
    );
    let (tx, rx) = mpsc::unbounded_channel();
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let tx = tx.clone();
            let count = count.clone();
            tokio::spawn(async move {
                let mut stream = BufReader::new(stream);
                loop {
                    let mut length = 0usize;
                    let mut line = String::new();
                    let mut first = true;
                    loop {
                        line.clear();
                        if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        if first {
                            assert!(line.starts_with("POST /hook?token=secret-token "), "{line}");
                            first = false;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap();
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let mut body = vec![0; length];
                    stream.read_exact(&mut body).await.unwrap();
                    let n = count.fetch_add(1, Ordering::SeqCst);
                    let status = if n < failures {
                        "503 Service Unavailable"
                    } else {
                        let _ = tx.send(serde_json::from_slice(&body).unwrap());
                        "204 No Content"
                    };
                    let reply = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n");
                    stream.get_mut().write_all(reply.as_bytes()).await.unwrap();
                }
            });
        }
    });
    (url, rx, seen)
}

fn card(agent: &Keys, asked: &[PublicKey], mention: &[PublicKey]) -> nostr::prelude::Event {
    let mut tags = vec![
        tag(&["h", "lab"]),
        tag(&["request", "question"]),
        tag(&["tinyagent", "1"]),
        tag(&["interaction", "confirmation"]),
        tag(&["selection", "single"]),
        tag(&["option", "yes", "Yes"]),
        tag(&["option", "no", "No"]),
    ];
    tags.extend(asked.iter().map(|p| tag(&["p", &p.to_hex()])));
    tags.extend(mention.iter().map(|p| tag(&["mention", &p.to_hex()])));
    signed(agent, 9, "Deploy now?", tags)
}

#[tokio::test]
async fn the_webhook_is_told_who_to_wake_and_gets_a_failed_post_again() {
    let (url, mut bodies, seen) = receiver(1).await;
    let notifier = WebhookNotifier::start(&url).unwrap();
    let relay = TestRelay::with_config(|c| {
        c.notifier = Some(notifier.clone());
        common::open_rooms(c, &["lab"]);
    })
    .await;
    let mut client = relay.client().await;
    let agent = Keys::generate();
    let (alice, bob, carol) = (Keys::generate(), Keys::generate(), Keys::generate());
    // Alice is asked and mentioned; Bob only asked; Carol only mentioned.
    let q = card(
        &agent,
        &[alice.public_key(), bob.public_key()],
        &[alice.public_key(), carol.public_key()],
    );
    assert!(client.publish(&q).await.0);
    let n = tokio::time::timeout(Duration::from_secs(10), bodies.recv())
        .await
        .expect("delivered after the 503")
        .unwrap();
    assert_eq!(n["recipient"], alice.public_key().to_hex());
    assert_eq!(n["reason"], "question");
    assert_eq!(n["event_id"], q.id.to_hex());
    assert_eq!(n["room"], "lab");
    assert_eq!(n["preview"], "Deploy now?");
    assert_eq!(
        seen.load(Ordering::SeqCst),
        2,
        "the first POST failed and was sent again"
    );

    let msg = signed(
        &alice,
        12,
        "see above",
        vec![
            tag(&["h", "lab"]),
            tag(&["mention", &carol.public_key().to_hex()]),
        ],
    );
    assert!(client.publish(&msg).await.0);
    let n = tokio::time::timeout(Duration::from_secs(10), bodies.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(n["recipient"], carol.public_key().to_hex());
    assert_eq!(n["reason"], "mention");
    // A card the relay refuses wakes nobody.
    let mut bad = card(&agent, &[], &[alice.public_key()]);
    bad = signed(&agent, 9, &bad.content, bad.tags.to_vec());
    assert!(!client.publish(&bad).await.0);
    assert!(
        tokio::time::timeout(Duration::from_millis(500), bodies.recv())
            .await
            .is_err(),
        "nothing for a refused card, nor for Bob"
    );
}

#[tokio::test]
async fn a_hanging_webhook_fills_a_bounded_queue_and_the_rest_is_dropped() {
    // Accepts connections and never answers; says when one arrives.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let (connected, mut connections) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
            let _ = connected.send(());
        }
    });
    let notifier = WebhookNotifier::with_queue(&url, 2).unwrap();
    let agent = Keys::generate();
    let alice = Keys::generate().public_key();
    let q = card(&agent, &[alice], &[alice]);
    let one = agentwire_relay::notify::notifications(&q).remove(0);
    notifier.notify(one.clone());
    // The first is in flight: its POST has connected.
    tokio::time::timeout(Duration::from_secs(10), connections.recv())
        .await
        .expect("the webhook was called");
    for _ in 0..10 {
        notifier.notify(one.clone());
    }
    assert_eq!(notifier.dropped(), 8, "two queued behind the one in flight");
}
