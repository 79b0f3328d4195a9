//! A connection's socket with a bound on how long a write may wait: a client that stops reading (its
//! window full, every write pending) has the connection closed after [`WRITE_STALL_TIMEOUT`] instead of
//! holding it for ever. Waiting with nothing to write (an event stream between events) is not a stall.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// How long a write may wait for the client to take bytes: 20 s. A client that reads drains its socket in
/// milliseconds (a browser's network stack reads for a tab in the background too); one that has taken
/// nothing for 20 s while the server had bytes for it is gone or holds the connection on purpose (a
/// pipelined burst of requests whose answers it never reads).
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(20);

/// A socket whose writes end in `TimedOut` once pending for [`WRITE_STALL_TIMEOUT`].
pub(crate) struct StallGuard<S> {
    inner: S,
    /// Set while a write is pending: when it fires, the write fails.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<S> StallGuard<S> {
    pub(crate) fn new(inner: S) -> StallGuard<S> {
        StallGuard {
            inner,
            stalled: None,
        }
    }

    /// After a write's poll: progress clears the stall; pending starts it (or checks it).
    fn after<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.stalled = None;
            return polled;
        }
        let since = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(WRITE_STALL_TIMEOUT)));
        match since.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took no bytes for the write stall timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for StallGuard<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for StallGuard<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.after(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.after(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.after(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_write_the_peer_never_takes_fails_after_the_stall_timeout_and_one_it_takes_does_not()
    {
        // A pipe with a small buffer: the reader's side is never read, so the writer fills it and waits.
        let (writer, mut reader) = tokio::io::duplex(64);
        let mut guarded = StallGuard::new(writer);
        guarded.write_all(&[0; 64]).await.unwrap();
        let started = tokio::time::Instant::now();
        let stuck = guarded.write_all(&[0; 1]).await.unwrap_err();
        assert_eq!(stuck.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= WRITE_STALL_TIMEOUT);
        // Once read, writes go through at once.
        let mut sink = vec![0; 64];
        tokio::io::AsyncReadExt::read_exact(&mut reader, &mut sink)
            .await
            .unwrap();
        guarded.write_all(&[0; 8]).await.unwrap();
    }
}
