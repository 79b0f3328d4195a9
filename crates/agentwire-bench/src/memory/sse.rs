//! Watchers of the turn API's event stream (`GET /api/v1/events`, the hub page's stream): each a plain
//! HTTP/1.1 connection with the operator's token that reads the response head and is then held open
//! unread (no turn runs meanwhile, so only the 15-second keep-alive comments come).

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long one watcher's response head may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);
/// The most a response head may be before the benchmark calls it malformed.
const MAX_HEAD_BYTES: usize = 16 * 1024;

/// What opening the watchers came to.
pub(crate) struct Opened {
    /// Streams answered `200`, held open.
    pub(crate) held: Vec<TcpStream>,
    /// Streams refused (`503`: the server's cap on event streams or connections), with the first
    /// refusal's body.
    pub(crate) refused: usize,
    pub(crate) first_refusal: Option<String>,
}

/// The status and the head's text of one `GET /api/v1/events`.
async fn watch(host: &str, token: &str) -> Result<(TcpStream, u16, String), String> {
    let mut s = TcpStream::connect(host)
        .await
        .map_err(|e| format!("connect {host}: {e}"))?;
    let request = format!(
        "GET /api/v1/events HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n"
    );
    s.write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    let end = loop {
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        if head.len() > MAX_HEAD_BYTES {
            return Err("a response head over 16 KiB".into());
        }
        let n = tokio::time::timeout(STEP_TIMEOUT, s.read(&mut buf))
            .await
            .map_err(|_| "no response head in time".to_string())?
            .map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the server closed before its response head".into());
        }
        head.extend_from_slice(&buf[..n]);
    };
    let text = String::from_utf8_lossy(&head).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("not an HTTP response: {:?}", &text[..end.min(80)]))?;
    Ok((s, status, text))
}

/// Opens `count` watchers of the server at `url` (`http://host:port`) one after another; refused ones are
/// counted and closed.
pub(crate) async fn open(url: &str, token: &str, count: usize) -> Result<Opened, String> {
    let host = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url} is not http://"))?
        .trim_end_matches('/');
    let mut opened = Opened {
        held: Vec::with_capacity(count),
        refused: 0,
        first_refusal: None,
    };
    for _ in 0..count {
        let (s, status, head) = watch(host, token).await?;
        match status {
            200 => opened.held.push(s),
            503 => {
                opened.refused += 1;
                if opened.first_refusal.is_none() {
                    let mut body = head;
                    let mut rest = s;
                    let mut buf = [0u8; 512];
                    if let Ok(Ok(n)) =
                        tokio::time::timeout(Duration::from_millis(200), rest.read(&mut buf)).await
                    {
                        body.push_str(&String::from_utf8_lossy(&buf[..n]));
                    }
                    opened.first_refusal = body.rsplit("\r\n\r\n").next().map(str::to_string);
                }
            }
            other => return Err(format!("GET /api/v1/events answered {other}: {head}")),
        }
    }
    Ok(opened)
}
