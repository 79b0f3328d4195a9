//! The load: publishers that each send pre-signed events one at a time, waiting for each `OK`; and a
//! fan-out probe (one event to many live subscriptions). Plain WebSocket clients over tokio-tungstenite,
//! reading only the frame prefixes they need, so the client side costs little of the shared two cores.

use futures_util::{SinkExt, StreamExt};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How long one `OK`, an `EOSE` or one fan-out delivery may take before the phase fails.
const FRAME_TIMEOUT: Duration = Duration::from_secs(30);

/// The clients' WebSocket read buffer: tungstenite zero-fills this much before every socket read (its
/// default, 128 KiB, made that memset the largest item of the clients' CPU in the fan-out probe, which
/// shares the two cores with the relay under test). The relays' frames here are well under it; a larger
/// one still gets room for its whole length.
const CLIENT_READ_BUFFER_BYTES: usize = 8 * 1024;

/// One event to publish: its id (hex) and its `["EVENT", ...]` frame.
pub(crate) struct Frame {
    pub(crate) id: String,
    pub(crate) json: String,
}

/// What a publishing phase did.
pub(crate) struct Ingest {
    /// Events sent.
    pub(crate) sent: usize,
    /// `OK true`.
    pub(crate) accepted: usize,
    /// The first few refusals' messages.
    pub(crate) refusals: Vec<String>,
    /// From the start signal to the last `OK`.
    pub(crate) elapsed: Duration,
}

impl Ingest {
    /// Accepted events per second.
    pub(crate) fn rate(&self) -> f64 {
        self.accepted as f64 / self.elapsed.as_secs_f64()
    }
}

async fn connect(url: &str) -> Result<Ws, String> {
    let config = WebSocketConfig::default().read_buffer_size(CLIENT_READ_BUFFER_BYTES);
    let (ws, _) = tokio_tungstenite::connect_async_with_config(url, Some(config), false)
        .await
        .map_err(|e| format!("connect {url}: {e}"))?;
    Ok(ws)
}

/// Whether `text` is the `OK` of `id`, and if so whether it accepted (and its message).
fn ok_of(text: &str, id: &str) -> Option<(bool, String)> {
    let rest = text.strip_prefix("[\"OK\",\"")?;
    let rest = rest.strip_prefix(id)?;
    let rest = rest.strip_prefix("\",")?;
    let accepted = rest.starts_with("true");
    Some((accepted, rest.to_string()))
}

async fn next_text(ws: &mut Ws) -> Result<String, String> {
    loop {
        match tokio::time::timeout(FRAME_TIMEOUT, ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => return Ok(t.to_string()),
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(e))) => return Err(e.to_string()),
            Ok(None) => return Err("the relay closed the connection".into()),
            Err(_) => return Err("no frame from the relay in time".into()),
        }
    }
}

/// Each publisher (one connection each) sends its frames in order, each after the `OK` of the one before.
pub(crate) async fn publish(url: &str, publishers: Vec<Vec<Frame>>) -> Result<Ingest, String> {
    let (go_tx, go_rx) = watch::channel(false);
    let (ready_tx, mut ready_rx) = mpsc::channel::<Result<(), String>>(publishers.len());
    let mut tasks = Vec::new();
    for frames in publishers {
        let url = url.to_string();
        let mut go = go_rx.clone();
        let ready = ready_tx.clone();
        tasks.push(tokio::spawn(async move {
            let mut ws = match connect(&url).await {
                Ok(ws) => {
                    let _ = ready.send(Ok(())).await;
                    ws
                }
                Err(e) => {
                    let _ = ready.send(Err(e.clone())).await;
                    return Err(e);
                }
            };
            drop(ready);
            let _ = go.wait_for(|g| *g).await;
            let (mut accepted, mut refusals, sent) = (0, Vec::new(), frames.len());
            for f in frames {
                ws.send(Message::text(f.json))
                    .await
                    .map_err(|e| e.to_string())?;
                loop {
                    let t = next_text(&mut ws).await?;
                    if let Some((ok, message)) = ok_of(&t, &f.id) {
                        if ok {
                            accepted += 1;
                        } else if refusals.len() < 3 {
                            refusals.push(message);
                        }
                        break;
                    }
                }
            }
            let _ = ws.close(None).await;
            Ok::<_, String>((sent, accepted, refusals, Instant::now()))
        }));
    }
    drop(ready_tx);
    for _ in 0..tasks.len() {
        match ready_rx.recv().await {
            Some(Ok(())) => {}
            Some(Err(e)) => return Err(format!("a publisher could not connect: {e}")),
            None => return Err("a publisher ended before connecting".into()),
        }
    }
    let start = Instant::now();
    let _ = go_tx.send(true);
    let mut ingest = Ingest {
        sent: 0,
        accepted: 0,
        refusals: Vec::new(),
        elapsed: Duration::ZERO,
    };
    for t in tasks {
        let (sent, accepted, refusals, done) = t.await.map_err(|e| e.to_string())??;
        ingest.sent += sent;
        ingest.accepted += accepted;
        ingest.refusals.extend(refusals);
        ingest.elapsed = ingest.elapsed.max(done - start);
    }
    ingest.refusals.truncate(3);
    Ok(ingest)
}

/// The pause before each fan-out round.
const ROUND_PAUSE: Duration = Duration::from_millis(50);

/// What the fan-out probe measured, round by round.
pub(crate) struct FanOut {
    /// From sending the event to the last subscription having it.
    pub(crate) delivery: Vec<Duration>,
    /// From sending the event to its publisher's `OK` (the relay's check and commit, which come before any
    /// live delivery on both relays' durable path), read while the deliveries arrive.
    pub(crate) ok: Vec<Duration>,
    /// The same author's events published before any subscription exists, each from its send to its `OK`:
    /// the relay's check and commit alone, the part of a delivery no fan-out work can remove.
    pub(crate) ok_alone: Vec<Duration>,
    /// The relay's CPU time over all rounds (from `relay_cpu`), seconds.
    pub(crate) relay_cpu: Option<f64>,
    /// This process's CPU time over all rounds (the subscribers' and publisher's side), seconds.
    pub(crate) client_cpu: Option<f64>,
}

/// This process's CPU time, seconds.
fn own_cpu() -> Option<f64> {
    crate::servers::threads_cpu_seconds(std::process::id())
}

/// `connections` × `subs_per_connection` live subscriptions to kind 1 events of `author` (hex); then, each
/// round, one such event is published (by its frame) and timed until every subscription has it.
/// Before the subscribers connect, each of `alone` is published and timed to its `OK`. `relay_cpu` reads the
/// relay's CPU time (seconds).
pub(crate) async fn fan_out(
    url: &str,
    connections: usize,
    subs_per_connection: usize,
    author: &str,
    alone: Vec<Frame>,
    rounds: Vec<Frame>,
    relay_cpu: impl Fn() -> Option<f64>,
) -> Result<FanOut, String> {
    let mut publisher = connect(url).await?;
    let mut ok_alone = Vec::with_capacity(alone.len());
    for f in alone {
        // The same pause as the rounds below, so that both start from the same idle state.
        tokio::time::sleep(ROUND_PAUSE).await;
        let start = Instant::now();
        publisher
            .send(Message::text(f.json))
            .await
            .map_err(|e| e.to_string())?;
        loop {
            let t = next_text(&mut publisher)
                .await
                .map_err(|e| format!("the OK of an event without subscribers: {e}"))?;
            if ok_of(&t, &f.id).is_some() {
                break;
            }
        }
        ok_alone.push(start.elapsed());
    }
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<usize>();
    let (round_tx, round_rx) = watch::channel::<Option<(usize, String)>>(None);
    let (ready_tx, mut ready_rx) = mpsc::channel::<Result<(), String>>(connections);
    for c in 0..connections {
        let url = url.to_string();
        let author = author.to_string();
        let done = done_tx.clone();
        let ready = ready_tx.clone();
        let mut round = round_rx.clone();
        tokio::spawn(async move {
            let setup = async {
                let mut ws = connect(&url).await?;
                // No `limit`: nostr-rs-relay 0.8.12 sends no EOSE for `limit: 0`, and the author is new, so
                // nothing is stored to send.
                for s in 0..subs_per_connection {
                    let req = format!(
                        "[\"REQ\",\"f{c}-{s}\",{{\"kinds\":[1],\"authors\":[\"{author}\"]}}]"
                    );
                    ws.send(Message::text(req))
                        .await
                        .map_err(|e| e.to_string())?;
                }
                let mut eose = 0;
                while eose < subs_per_connection {
                    let t = next_text(&mut ws)
                        .await
                        .map_err(|e| format!("subscriber {c}'s EOSE: {e}"))?;
                    if t.starts_with("[\"EOSE\"") {
                        eose += 1;
                    } else if t.starts_with("[\"CLOSED\"") {
                        return Err(format!("subscription refused: {t}"));
                    }
                }
                Ok::<_, String>(ws)
            };
            let mut ws = match setup.await {
                Ok(ws) => {
                    let _ = ready.send(Ok(())).await;
                    ws
                }
                Err(e) => {
                    let _ = ready.send(Err(e)).await;
                    return;
                }
            };
            let mut seen = 0;
            let mut current: Option<(usize, String)> = None;
            loop {
                tokio::select! {
                    changed = round.changed() => {
                        if changed.is_err() { return }
                        current = round.borrow_and_update().clone();
                        seen = 0;
                    }
                    m = ws.next() => match m {
                        Some(Ok(Message::Text(t))) => {
                            // A task held up past the pause may read the new round's frames before its
                            // change: look at the round first, so that they are not counted for the old one.
                            if round.has_changed().unwrap_or(false) {
                                current = round.borrow_and_update().clone();
                                seen = 0;
                            }
                            if let Some((n, id)) = &current {
                                if t.starts_with("[\"EVENT\"") && t.contains(id.as_str()) {
                                    seen += 1;
                                    if seen == subs_per_connection {
                                        let _ = done.send(*n);
                                    }
                                }
                            }
                        }
                        Some(Ok(_)) => {}
                        _ => return,
                    },
                }
            }
        });
    }
    drop(ready_tx);
    for _ in 0..connections {
        ready_rx
            .recv()
            .await
            .ok_or("a subscriber ended before subscribing")??;
    }
    let mut out = FanOut {
        delivery: Vec::with_capacity(rounds.len()),
        ok: Vec::with_capacity(rounds.len()),
        ok_alone,
        relay_cpu: None,
        client_cpu: None,
    };
    let (relay_before, client_before) = (relay_cpu(), own_cpu());
    for (n, f) in rounds.into_iter().enumerate() {
        let _ = round_tx.send(Some((n, f.id.clone())));
        // Let every subscriber see the new round before the event can arrive.
        tokio::time::sleep(ROUND_PAUSE).await;
        let start = Instant::now();
        publisher
            .send(Message::text(f.json))
            .await
            .map_err(|e| e.to_string())?;
        let (mut finished, mut delivered, mut ok) = (0, None, None);
        while delivered.is_none() || ok.is_none() {
            tokio::select! {
                r = tokio::time::timeout(FRAME_TIMEOUT, done_rx.recv()), if delivered.is_none() => match r {
                    Ok(Some(r)) if r == n => {
                        finished += 1;
                        if finished == connections {
                            delivered = Some(start.elapsed());
                        }
                    }
                    Ok(Some(_)) => {}
                    _ => return Err(format!("round {n}: not every subscription got the event")),
                },
                t = next_text(&mut publisher), if ok.is_none() => {
                    let t = t.map_err(|e| format!("round {n}: the publisher's OK: {e}"))?;
                    if ok_of(&t, &f.id).is_some() {
                        ok = Some(start.elapsed());
                    }
                }
            }
        }
        out.delivery.extend(delivered);
        out.ok.extend(ok);
    }
    out.relay_cpu = relay_cpu().zip(relay_before).map(|(a, b)| a - b);
    out.client_cpu = own_cpu().zip(client_before).map(|(a, b)| a - b);
    Ok(out)
}
