//! A client on the daemon's event stream for the whole benchmark (`--watch-all`): raw HTTP/1.1 on a TCP
//! socket, counting the server-sent events it reads; and with `--hub-page`, what an open hub page and a
//! Prometheus scraper add to it: the page's roost view and `/metrics`, each read every second.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The running watcher.
pub(crate) struct Watcher {
    seen: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Watcher {
    /// Stops reading; how many events were read.
    pub(crate) async fn stop(self) -> u64 {
        self.task.abort();
        let _ = self.task.await;
        self.seen.load(Ordering::SeqCst)
    }
}

/// Opens `GET /api/v1/events` on the daemon at `url` with `token`, and reads it until stopped.
pub(crate) async fn spawn(url: &str, token: &str) -> Result<Watcher, String> {
    let addr = url.trim_start_matches("http://").to_string();
    let mut s = tokio::net::TcpStream::connect(&addr)
        .await
        .map_err(|e| format!("watcher: {addr}: {e}"))?;
    let req = format!(
        "GET /api/v1/events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n"
    );
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| format!("watcher: {e}"))?;
    let seen = Arc::new(AtomicU64::new(0));
    let counter = seen.clone();
    let task = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        let mut tail: Vec<u8> = Vec::new();
        loop {
            let n = match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            tail.extend_from_slice(&buf[..n]);
            // Each event carries one `id:` line.
            let mut at = 0;
            while let Some(i) = find(&tail[at..], b"\nid:") {
                counter.fetch_add(1, Ordering::Relaxed);
                at += i + 4;
            }
            tail.drain(..at.min(tail.len()));
        }
    });
    Ok(Watcher { seen, task })
}

/// How often the page reads its roost view and Prometheus scrapes: the page's own poll and a tight scrape.
const PAGE_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// The hub page's load beside the event stream: its roost view and a scrape of `/metrics`, every
/// [`PAGE_POLL`].
pub(crate) struct PageLoad {
    reads: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl PageLoad {
    /// Stops; how many reads answered 200.
    pub(crate) async fn stop(self) -> u64 {
        self.task.abort();
        let _ = self.task.await;
        self.reads.load(Ordering::SeqCst)
    }
}

/// One `GET path` on its own connection; whether it answered 200.
async fn get(addr: &str, path: &str, token: &str) -> bool {
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return false;
    };
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    if s.write_all(req.as_bytes()).await.is_err() {
        return false;
    }
    let mut body = Vec::new();
    let _ = s.read_to_end(&mut body).await;
    body.starts_with(b"HTTP/1.1 200")
}

/// Starts the page's reads of the daemon at `url`.
pub(crate) fn spawn_page_load(url: &str, token: &str) -> PageLoad {
    let addr = url.trim_start_matches("http://").to_string();
    let token = token.to_string();
    let reads = Arc::new(AtomicU64::new(0));
    let counter = reads.clone();
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(PAGE_POLL);
        loop {
            tick.tick().await;
            for path in ["/api/v1/roost", "/metrics"] {
                if get(&addr, path, &token).await {
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    });
    PageLoad { reads, task }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
