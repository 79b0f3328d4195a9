//! Idle WebSocket clients of the embedded relay: each connects, optionally opens one `REQ` subscription
//! and waits for its `EOSE`, then is held open without being read (an idle client: nothing is published
//! while they are held, so the relay has nothing to send them).

use futures_util::{SinkExt, StreamExt};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// One held client.
pub(crate) type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Connections opened at once: well under the kernel's accept backlog and the relay's pending-refusal
/// bound, so none is dropped for being early; enough that 10,000 open in seconds.
const CONNECT_CONCURRENCY: usize = 128;
/// How long one connect or one `EOSE` may take before the phase fails.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);
/// The client's read buffer: the client's own memory is not what is measured, and 10,000 clients at
/// tungstenite's default 128 KiB would hold 1.25 GiB in the benchmark for nothing.
const CLIENT_READ_BUFFER: usize = 4 * 1024;

/// The `REQ` client number `n` holds: a NIP-XX client's shape (kind and `#p` of its own key, nothing
/// stored to send back), a different key for each client so that no two subscriptions are alike.
fn req(n: usize) -> (String, String) {
    let sub = format!("idle{n}");
    let p = format!("{n:064x}");
    let frame = format!(r##"["REQ","{sub}",{{"kinds":[25803,1],"#p":["{p}"],"limit":0}}]"##);
    (sub, frame)
}

async fn next_text(ws: &mut Ws) -> Result<String, String> {
    loop {
        match tokio::time::timeout(STEP_TIMEOUT, ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => return Ok(t.to_string()),
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(e))) => return Err(e.to_string()),
            Ok(None) => return Err("the relay closed the connection".into()),
            Err(_) => return Err("no frame from the relay in time".into()),
        }
    }
}

/// Connects client `n`; with `subscribe`, opens its `REQ` and waits for the `EOSE`.
async fn client(url: String, n: usize, subscribe: bool) -> Result<Ws, String> {
    let config = WebSocketConfig::default().read_buffer_size(CLIENT_READ_BUFFER);
    let connect = tokio_tungstenite::connect_async_with_config(url.as_str(), Some(config), true);
    let (mut ws, _) = tokio::time::timeout(STEP_TIMEOUT, connect)
        .await
        .map_err(|_| format!("client {n}: no connection in time"))?
        .map_err(|e| format!("client {n}: connect {url}: {e}"))?;
    if subscribe {
        let (sub, frame) = req(n);
        ws.send(Message::text(frame))
            .await
            .map_err(|e| format!("client {n}: {e}"))?;
        let eose = format!(r#"["EOSE","{sub}"]"#);
        loop {
            let t = next_text(&mut ws)
                .await
                .map_err(|e| format!("client {n}: {e}"))?;
            if t == eose {
                break;
            }
            if t.starts_with("[\"CLOSED\"") {
                return Err(format!("client {n}: the relay closed its REQ: {t}"));
            }
        }
    }
    Ok(ws)
}

/// Opens `count` clients of `url`, each with one `REQ` open when `subscribe`.
pub(crate) async fn open(url: &str, count: usize, subscribe: bool) -> Result<Vec<Ws>, String> {
    let mut held = Vec::with_capacity(count);
    let mut connecting = futures_util::stream::iter(0..count)
        .map(|n| client(url.to_string(), n, subscribe))
        .buffer_unordered(CONNECT_CONCURRENCY);
    while let Some(ws) = connecting.next().await {
        held.push(ws?);
    }
    Ok(held)
}
