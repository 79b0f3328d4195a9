//! One request's reply set on the wire: the driver of a [`ReplyStream`] (numbering, text coalescing),
//! publishing what it says in order to the request's inbox, the last message with `Fisk-AI-Stream-Final`,
//! and waking at its `poll_timeout` so held text goes out while the agent pauses. A task per reply set
//! drains a queue, so the engine's callbacks (which must not block) only enqueue.

use crate::stream::ReplyStream;
use crate::wire::{self, nats, Block, Header, Identity, Ksuid, Reply};
use async_nats::HeaderMap;
use std::time::{Instant, SystemTime};
use tokio::sync::{mpsc, oneshot};

/// Work to do before a reply set's final message is published.
pub(crate) type BeforeFinal =
    Box<dyn FnOnce() -> futures_util::future::BoxFuture<'static, ()> + Send>;

/// A message queued for a reply set.
#[derive(Debug)]
enum Out {
    Message(Reply),
    Event(Block),
    Text(String),
    Answer(String, Reply),
    Final(Reply),
}

/// The sending side of one reply set. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct ReplySet {
    tx: mpsc::UnboundedSender<Out>,
}

/// A fresh message id.
pub(crate) fn ksuid() -> Ksuid {
    let mut payload = [0u8; 16];
    // The OS generator does not fail on the platforms we run on; a zero payload would still be a valid id.
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut payload);
    Ksuid::new(SystemTime::now(), payload)
}

/// A service error (a refusal before any ack) on `reply`.
pub(crate) async fn service_error(
    client: &async_nats::Client,
    reply: async_nats::Subject,
    code: u16,
    text: &str,
) {
    let mut headers = HeaderMap::new();
    headers.insert(nats::HEADER_SERVICE_ERROR, text);
    headers.insert(nats::HEADER_SERVICE_ERROR_CODE, code.to_string().as_str());
    if let Err(e) = client
        .publish_with_headers(reply, headers, Vec::new().into())
        .await
    {
        tracing::warn!(error = %e, "could not send a service error");
    }
}

/// A one-message reply (an ack to a cancel or an elicit message): sequence 1, final.
pub(crate) async fn single(
    client: &async_nats::Client,
    reply: async_nats::Subject,
    to: &Header,
    me: &Identity,
    message: Reply,
) {
    let header = Header::reply_to(to, me.clone(), 1, ksuid(), SystemTime::now());
    let mut headers = HeaderMap::new();
    headers.insert(nats::HEADER_STREAM_FINAL, "true");
    let bytes = wire::encode_reply(&header, &message);
    if let Err(e) = client
        .publish_with_headers(reply, headers, bytes.into())
        .await
    {
        tracing::warn!(error = %e, "could not send a reply");
    }
}

impl ReplySet {
    /// Starts the reply set of `request` (its header) on `inbox` (none: a queued job that names no reply
    /// subject, whose set is built and sent nowhere). `done` fires once the final message is out.
    pub(crate) fn start(
        client: async_nats::Client,
        inbox: Option<async_nats::Subject>,
        request: Header,
        me: Identity,
    ) -> (ReplySet, oneshot::Receiver<()>) {
        Self::start_with(client, inbox, request, me, true, None, None)
    }

    /// Like [`start`](Self::start), streaming text and events only when `stream`, and running
    /// `before_final` just before the final message goes out (to unsubscribe a turn's cancel and elicit
    /// subjects first, so a caller that has the terminal finds nobody there). Nothing is published before
    /// `ready` fires (or its sender is dropped).
    pub(crate) fn start_with(
        client: async_nats::Client,
        inbox: Option<async_nats::Subject>,
        request: Header,
        me: Identity,
        stream: bool,
        mut before_final: Option<BeforeFinal>,
        ready: Option<oneshot::Receiver<()>>,
    ) -> (ReplySet, oneshot::Receiver<()>) {
        let (tx, mut rx) = mpsc::unbounded_channel::<Out>();
        let (done_tx, done_rx) = oneshot::channel();
        tokio::spawn(async move {
            if let Some(ready) = ready {
                let _ = ready.await;
            }
            let mut replies = ReplyStream::new(stream);
            'set: loop {
                let wake = replies.poll_timeout();
                let input = tokio::select! {
                    out = rx.recv() => match out {
                        Some(out) => Some(out),
                        None => break 'set,
                    },
                    _ = sleep_until(wake), if wake.is_some() => None,
                };
                let now = Instant::now();
                match input {
                    Some(Out::Message(r)) => replies.handle_reply(r),
                    Some(Out::Event(b)) => replies.handle_event(b),
                    Some(Out::Text(t)) => replies.handle_text(&t, now),
                    Some(Out::Answer(text, r)) => replies.handle_answer(&text, r),
                    Some(Out::Final(r)) => replies.handle_final(r),
                    None => replies.handle_timeout(now),
                }
                while let Some(out) = replies.poll_transmit() {
                    if out.last {
                        if let Some(hook) = before_final.take() {
                            hook().await;
                        }
                    }
                    let header = Header::reply_to(
                        &request,
                        me.clone(),
                        out.sequence,
                        ksuid(),
                        SystemTime::now(),
                    );
                    let bytes = wire::encode_reply(&header, &out.reply);
                    let mut headers = HeaderMap::new();
                    if out.last {
                        headers.insert(nats::HEADER_STREAM_FINAL, "true");
                    }
                    if let Some(inbox) = &inbox {
                        if let Err(e) = client
                            .publish_with_headers(inbox.clone(), headers, bytes.into())
                            .await
                        {
                            tracing::warn!(request = %request.request, error = %e, "could not publish to the reply inbox");
                        }
                    }
                    if out.last {
                        let _ = client.flush().await;
                        break 'set;
                    }
                }
            }
            let _ = done_tx.send(());
        });
        (ReplySet { tx }, done_rx)
    }

    /// Queues a message.
    pub(crate) fn send(&self, reply: Reply) {
        let _ = self.tx.send(Out::Message(reply));
    }

    /// Queues an event block (sent only when the set streams).
    pub(crate) fn event(&self, block: Block) {
        let _ = self.tx.send(Out::Event(block));
    }

    /// Queues a fragment of streamed text (coalesced into blocks).
    pub(crate) fn text(&self, text: String) {
        let _ = self.tx.send(Out::Text(text));
    }

    /// Queues the answer (its one final text block) and the terminal that ends the set.
    pub(crate) fn answer(&self, text: String, terminal: Reply) {
        let _ = self.tx.send(Out::Answer(text, terminal));
    }

    /// Queues the last message; nothing after it is sent.
    pub(crate) fn finish(&self, reply: Reply) {
        let _ = self.tx.send(Out::Final(reply));
    }
}

/// Sleeps until `at` (forever when there is nothing to wait for).
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}
