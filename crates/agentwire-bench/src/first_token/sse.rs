//! One HTTP/1.1 POST on a fresh connection whose answer is read as it comes: its head, its body (chunked or
//! not), and the body's server-sent `data:` lines, each handed to the caller with the time it arrived. The
//! benchmark's own minimal client, so that nothing between the socket and the clock buffers.

use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the answer's head said.
pub(crate) struct Head {
    pub(crate) status: u16,
    /// The headers, names in lower case.
    pub(crate) headers: Vec<(String, String)>,
}

impl Head {
    /// Header `name` (lower case).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Posts `body` to `path` of `addr` (`host:port`) with `headers`, and calls `on_data` with each `data:`
/// line's JSON (and when it arrived) until the answer ends. Returns the answer's head.
pub(crate) async fn post(
    addr: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    mut on_data: impl FnMut(&serde_json::Value, Instant),
) -> Result<Head, String> {
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        req.push_str(&format!("{name}: {value}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    let mut buf = vec![0u8; 16 * 1024];
    let mut raw: Vec<u8> = Vec::new();
    let mut head: Option<(Head, bool)> = None;
    let mut chunk_left: Option<usize> = None;
    let mut text = String::new();
    loop {
        let n = s.read(&mut buf).await.map_err(|e| format!("{addr}: {e}"))?;
        if n == 0 {
            break;
        }
        let now = Instant::now();
        raw.extend_from_slice(&buf[..n]);
        if head.is_none() {
            let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let lines = String::from_utf8_lossy(&raw[..end]).into_owned();
            raw.drain(..end + 4);
            let mut it = lines.split("\r\n");
            let status = it
                .next()
                .and_then(|l| l.split(' ').nth(1))
                .and_then(|c| c.parse().ok())
                .ok_or("no status line")?;
            let headers: Vec<(String, String)> = it
                .filter_map(|l| l.split_once(':'))
                .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
                .collect();
            let chunked = headers
                .iter()
                .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
            head = Some((Head { status, headers }, chunked));
        }
        let chunked = head.as_ref().is_some_and(|(_, c)| *c);
        // The body's bytes so far, de-chunked.
        let mut body_bytes = Vec::new();
        if chunked {
            loop {
                match chunk_left {
                    Some(0) => {
                        // The chunk's closing CRLF.
                        if raw.len() < 2 {
                            break;
                        }
                        raw.drain(..2);
                        chunk_left = None;
                    }
                    Some(left) => {
                        let take = left.min(raw.len());
                        if take == 0 {
                            break;
                        }
                        body_bytes.extend(raw.drain(..take));
                        chunk_left = Some(left - take);
                    }
                    None => {
                        let Some(end) = raw.windows(2).position(|w| w == b"\r\n") else {
                            break;
                        };
                        let size = String::from_utf8_lossy(&raw[..end]);
                        let size =
                            usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
                                .map_err(|_| "a bad chunk size".to_string())?;
                        raw.drain(..end + 2);
                        chunk_left = Some(size);
                    }
                }
            }
        } else {
            body_bytes.append(&mut raw);
        }
        text.push_str(&String::from_utf8_lossy(&body_bytes));
        while let Some(end) = text.find('\n') {
            let line: String = text.drain(..=end).collect();
            if let Some(data) = line.trim_end().strip_prefix("data:") {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(data.trim()) {
                    on_data(&v, now);
                }
            }
        }
    }
    head.map(|(h, _)| h)
        .ok_or_else(|| format!("{addr} sent no answer"))
}
