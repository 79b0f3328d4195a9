//! The load: publishers that each send pre-signed events one at a time, waiting for each `OK`; and a
//! fan-out probe (one event to many live subscriptions). Plain WebSocket clients over tokio-tungstenite,
//! reading only the frame prefixes they need, so the client side costs little of the shared two cores.

use futures_util::{SinkExt, StreamExt};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How long one `OK`, an `EOSE` or one fan-out delivery may take before the phase fails.
const FRAME_TIMEOUT: Duration = Duration::from_secs(30);

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
    let (ws, _) = tokio_tungstenite::connect_async(url)
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

/// `connections` × `subs_per_connection` live subscriptions to kind 1 events of `author` (hex); then, each
/// round, one such event is published (by its frame) and timed until every subscription has it.
pub(crate) async fn fan_out(
    url: &str,
    connections: usize,
    subs_per_connection: usize,
    author: &str,
    rounds: Vec<Frame>,
) -> Result<Vec<Duration>, String> {
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
                    let t = next_text(&mut ws).await?;
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
                        current = round.borrow().clone();
                        seen = 0;
                    }
                    m = ws.next() => match m {
                        Some(Ok(Message::Text(t))) => {
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
    let mut publisher = connect(url).await?;
    let mut times = Vec::with_capacity(rounds.len());
    for (n, f) in rounds.into_iter().enumerate() {
        let _ = round_tx.send(Some((n, f.id.clone())));
        // Let every subscriber see the new round before the event can arrive.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let start = Instant::now();
        publisher
            .send(Message::text(f.json))
            .await
            .map_err(|e| e.to_string())?;
        let mut finished = 0;
        while finished < connections {
            match tokio::time::timeout(FRAME_TIMEOUT, done_rx.recv()).await {
                Ok(Some(r)) if r == n => finished += 1,
                Ok(Some(_)) => {}
                _ => return Err(format!("round {n}: not every subscription got the event")),
            }
        }
        times.push(start.elapsed());
    }
    Ok(times)
}
