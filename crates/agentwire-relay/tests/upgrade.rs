//! Who may open a WebSocket, over real sockets: a native client (no `Origin`) by any of the relay's names;
//! a web page only from the relay's own origins or `allowed_origins`; and nobody by a name that is not the
//! relay's (DNS rebinding). A refused upgrade gets HTTP 403 before any socket is handed over, so a page on
//! another site can neither read nor write, nor hold the relay's places.

mod common;

use std::time::Duration;

use common::{signed, Client, TestRelay};
use nostr::key::Keys;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Error as WsError;

/// A WebSocket upgrade to `relay` sent with these `Host` and `Origin` headers.
async fn upgrade(
    relay: &TestRelay,
    host: Option<&str>,
    origin: Option<&str>,
) -> Result<Client, WsError> {
    let mut request = relay.url().into_client_request().unwrap();
    if let Some(host) = host {
        request
            .headers_mut()
            .insert("Host", HeaderValue::from_str(host).unwrap());
    }
    if let Some(origin) = origin {
        request
            .headers_mut()
            .insert("Origin", HeaderValue::from_str(origin).unwrap());
    }
    let stream = tokio::net::TcpStream::connect(relay.addr()).await.unwrap();
    let (ws, _) =
        tokio_tungstenite::client_async(request, tokio_tungstenite::MaybeTlsStream::Plain(stream))
            .await?;
    Ok(Client {
        ws,
        challenge: None,
    })
}

/// The status and body of a refused upgrade.
fn refused(result: Result<Client, WsError>) -> (u16, String) {
    match result {
        Err(WsError::Http(response)) => (
            response.status().as_u16(),
            String::from_utf8_lossy(response.body().as_deref().unwrap_or_default()).into_owned(),
        ),
        Err(other) => panic!("expected an HTTP refusal, got {other}"),
        Ok(_) => panic!("expected an HTTP refusal, got a connection"),
    }
}

async fn works(client: Result<Client, WsError>) {
    let mut client = client.expect("a connection");
    let note = signed(&Keys::generate(), 1, "hello", vec![]);
    assert_eq!(client.publish(&note).await, (true, String::new()));
}

#[tokio::test]
async fn a_page_of_another_site_cannot_open_a_socket_and_native_clients_still_can() {
    let relay = TestRelay::with_config(|c| {
        c.allowed_origins = vec!["https://app.example.com".into()];
        c.public_urls = vec!["wss://relay.example.com".into()];
    })
    .await;
    let port = relay.addr().port();
    let own = format!("127.0.0.1:{port}");
    let stats = relay.handle.stats();

    // Native clients send no Origin: by the listen address, localhost, or the public name.
    works(upgrade(&relay, None, None).await).await;
    works(upgrade(&relay, Some(&format!("localhost:{port}")), None).await).await;
    works(upgrade(&relay, Some("relay.example.com"), None).await).await;
    // A page of an allowed origin, and of the relay's own.
    works(upgrade(&relay, Some(&own), Some("https://app.example.com")).await).await;
    works(
        upgrade(
            &relay,
            Some(&own),
            Some(&format!("http://127.0.0.1:{port}")),
        )
        .await,
    )
    .await;

    // Any other page: 403, saying what to configure.
    for origin in [
        "https://evil.example.com",
        "http://app.example.com",
        "https://app.example.com.evil.example.com",
        &format!("http://localhost:{}", port + 1),
        "null",
    ] {
        let (status, body) = refused(upgrade(&relay, Some(&own), Some(origin)).await);
        assert_eq!(status, 403, "{origin}");
        assert!(body.contains("allowed_origins"), "{origin}: {body}");
    }
    // A name that is not the relay's (a rebinding attacker's, resolving to 127.0.0.1), with or without a
    // page: 403.
    for host in [
        format!("rebind.example.com:{port}"),
        format!("127.0.0.1.rebind.example.com:{port}"),
        format!("localhost:{}", port + 1),
    ] {
        for origin in [None, Some(format!("http://{host}"))] {
            let (status, body) = refused(upgrade(&relay, Some(&host), origin.as_deref()).await);
            assert_eq!(status, 403, "{host}");
            assert!(body.contains("Host"), "{host}: {body}");
        }
    }
    // Refused before the handshake: none of them holds a connection (the accepted ones, dropped, close).
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while stats.connections() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} open",
            stats.connections()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_allowed_origin_that_is_no_origin_is_refused_at_start() {
    for bad in [
        "app.example.com",
        "https://app.example.com/page",
        "*.example.com",
    ] {
        let dir = tempfile::TempDir::new().unwrap();
        let mut config = common::config(&dir, Default::default());
        config.allowed_origins = vec![bad.into()];
        match agentwire_relay::start(config).await {
            Err(agentwire_relay::RelayError::InvalidOrigin(reason)) => {
                assert!(reason.to_string().contains(bad), "{reason}")
            }
            other => panic!("{bad}: expected InvalidOrigin, got {other:?}"),
        }
    }
}

/// `allowed_origins = ["*"]` opens the relay to every page (a relay serving web Nostr clients); the `Host`
/// is still checked.
#[tokio::test]
async fn any_origin_lets_every_page_connect_by_the_relays_names() {
    let relay = TestRelay::with_config(|c| c.allowed_origins = vec!["*".into()]).await;
    let own = format!("127.0.0.1:{}", relay.addr().port());
    works(upgrade(&relay, Some(&own), Some("https://client.example.com")).await).await;
    let (status, _) = refused(
        upgrade(
            &relay,
            Some("rebind.example.com"),
            Some("https://client.example.com"),
        )
        .await,
    );
    assert_eq!(status, 403);
}
