//! The sans-IO half of one client connection: what each client message means and what to send.
//!
//! The connection driver feeds in client text (`handle_text`), store outcomes
//! (`handle_stored`), query results (`handle_query_result`) and live events (`handle_ring`,
//! `handle_lagged` for the shared ring; `handle_queued` and `handle_live` for an exempt
//! connection's own queue), passing the time in, and carries out the returned [`Command`]s in order.
//! Nothing here does I/O or reads a clock.
//!
//! Once a connection is exempt (it authenticated with NIP-42 as an unlimited key: the operator's agent)
//! its live events move from the shared ring, which drops what a slow reader misses, to a queue of its own that publishers wait on
//! (`fanout`). The session counts the ring events that precede the move (`handle_registered`), so
//! that each event is delivered once, and tells a publisher how to hand an event to an exempt
//! connection (`queue_delivery`).

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Instant;

use agentwire_core::TokenBucket;
use nostr::event::{Event, EventId, Kind};
use nostr::filter::{Filter, MatchEventOptions};
use nostr::key::PublicKey;
use nostr::message::{ClientMessage, SubscriptionId};
use nostr::types::Timestamp;
use serde_json::Value;

use crate::signed_here::SignedHere;

use crate::error::RelayError;
use crate::filter_sql::check_filter;
use crate::kind::Retention;
use crate::limits::{
    RelayLimits, AUTH_MAX_SKEW_SECS, LIVE_QUEUE_CAPACITY, MAX_AUTHED_KEYS_PER_CONNECTION,
    MAX_AUTH_MESSAGES_PER_CONNECTION, MAX_FUTURE_SKEW_SECS,
};
use crate::own_urls::OwnUrls;
use crate::rooms::{RoomRefusal, Rooms};
use crate::stats::{EventResult, RelayStats};
use crate::store::{event_json, InsertOutcome, StoredEvent};
use crate::tinyagent;
use crate::wire;

/// A verified event on its way to the store and to live subscribers, with its canonical JSON.
#[derive(Debug)]
pub(crate) struct Published {
    pub(crate) event: Event,
    pub(crate) json: String,
}

/// A stored-event query the driver must run for a subscription.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QueryRequest {
    pub(crate) subscription_id: SubscriptionId,
    /// Tells this query's result from that of an earlier `REQ` with the same id.
    pub(crate) generation: u64,
    /// The filters with `limit` capped at `max_query_limit`.
    pub(crate) filters: Vec<Filter>,
    /// Private rooms whose events this connection may not read.
    pub(crate) hidden: Vec<String>,
}

/// What the driver must do, in the order returned.
#[derive(Debug)]
pub(crate) enum Command {
    /// Send this text frame to the client.
    Send(String),
    /// Store the event; feed the outcome to [`Session::handle_stored`].
    Store(Arc<Published>),
    /// Hand the (ephemeral) event to every connection's live subscriptions.
    Broadcast(Arc<Published>),
    /// Run the query; feed the result to [`Session::handle_query_result`].
    Query(QueryRequest),
    /// Count what the filters match (NIP-45); feed the result to [`Session::handle_count_result`].
    Count {
        /// The `COUNT`'s id.
        subscription_id: SubscriptionId,
        /// Its filters.
        filters: Vec<Filter>,
        /// Private rooms whose events this connection may not read.
        hidden: Vec<String>,
    },
    /// The connection just became exempt: register its own live queue (before carrying out the
    /// commands that follow) and feed the ring backlog to [`Session::handle_registered`].
    Exempt,
}

/// How a publishing connection hands a live event to an exempt connection's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QueueDelivery {
    /// The queue is the publisher's own: deliver the event on this connection now. A connection
    /// never waits on its own queue, which only it empties.
    Inline,
    /// Wait for room, up to `EXEMPT_QUEUE_TIMEOUT`: the publisher slows down instead of the agent
    /// losing the event.
    Wait,
    /// Queue it only if there is room now. For exempt publishers (two agent connections waiting on
    /// each other's queue would stall both until the timeout, and the agent's own output is not what
    /// needs slowing down) and for a queue that already missed events (its connection is told to
    /// subscribe again anyway; waiting on it again would only hold up every publisher).
    TryOnly,
}

/// Where this connection's live events come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Feed {
    /// The shared ring: everything a slow reader misses is dropped.
    Ring,
    /// Exempt, moving to its own queue: this many more ring events were sent before the move and
    /// are read from the ring; every later event comes through the queue.
    Handoff(u64),
    /// Exempt: every live event comes through its own queue; the ring is not read.
    Queue,
}

#[derive(Debug)]
struct Subscription {
    filters: Vec<Filter>,
    generation: u64,
    /// `Some` until the stored events are sent: live events that arrive meanwhile wait here.
    loading: Option<Vec<Arc<Published>>>,
    /// The newest stored events sent for it: one stored before the query ran may still reach this
    /// connection live afterwards (its broadcast follows its commit), and is not sent twice.
    sent_stored: Vec<EventId>,
    /// Its `EVENT` frames' start (`wire::event_head`), made once.
    head: String,
}

/// How many of a query's newest stored events a subscription remembers, so as not to send one again when
/// its live broadcast arrives after the query: an event committed just before the query is among the
/// newest, and 64 ids (2 KiB) a subscription is a small price.
const SENT_STORED_KEPT: usize = 64;

/// The state of one client connection.
#[derive(Debug)]
pub(crate) struct Session {
    limits: RelayLimits,
    unlimited_authors: Arc<HashSet<PublicKey>>,
    /// The event rate ([`RelayLimits::max_events_per_second_per_connection`]; `None`: zero, unlimited), on
    /// seconds since `began`.
    bucket: Option<TokenBucket>,
    began: Instant,
    /// Set once this connection has authenticated (NIP-42) as an unlimited author: from then on the
    /// connection is theirs and exempt from the event rate, also for events signed by other keys (the
    /// one-time keys of NIP-59 gift wraps an agent sends in the privacy-first profile). Never for carrying
    /// an event such a key signed: anyone can resend the agent's public events.
    exempt: bool,
    feed: Feed,
    subscriptions: HashMap<SubscriptionId, Subscription>,
    next_generation: u64,
    /// The relay's rooms.
    rooms: Arc<RwLock<Rooms>>,
    /// This connection's NIP-42 challenge.
    challenge: String,
    /// The keys this connection proved it holds (NIP-42).
    authed: HashSet<PublicKey>,
    /// How many `AUTH` messages it sent.
    auth_messages: usize,
    /// The URLs an `AUTH` event's `relay` tag may name: this relay's.
    own_urls: Arc<OwnUrls>,
    /// The relay's counters: each `EVENT` answered is counted by its result.
    stats: Arc<RelayStats>,
    /// When the client last sent a message (its connection opened, before the first).
    last_message: Instant,
    /// Signatures made in this process, not verified again ([`SignedHere`]).
    signed_here: Option<Arc<SignedHere>>,
}

fn send(frame: String) -> Vec<Command> {
    vec![Command::Send(frame)]
}

/// The `OK` answering an `EVENT`, counted in `stats` by its result.
fn event_ok(stats: &RelayStats, id: EventId, accepted: bool, message: &str) -> String {
    stats.answered(EventResult::of(accepted, message));
    wire::ok(id, accepted, message)
}

fn notice(message: &str) -> Vec<Command> {
    send(wire::notice(wire::truncate(message)))
}

impl Session {
    /// A new connection's state as of `now`, with its NIP-42 `challenge` (unguessable, one per
    /// connection), the URLs that name this relay in an `AUTH` and the relay's counters.
    pub(crate) fn new(
        limits: RelayLimits,
        unlimited_authors: Arc<HashSet<PublicKey>>,
        now: Instant,
        rooms: Arc<RwLock<Rooms>>,
        challenge: String,
        own_urls: Arc<OwnUrls>,
        stats: Arc<RelayStats>,
    ) -> Self {
        Self {
            rooms,
            challenge,
            own_urls,
            stats,
            authed: HashSet::new(),
            auth_messages: 0,
            bucket: match limits.max_events_per_second_per_connection {
                0 => None,
                rate => Some(TokenBucket::new(f64::from(rate), f64::from(rate))),
            },
            began: now,
            limits,
            unlimited_authors,
            exempt: false,
            feed: Feed::Ring,
            subscriptions: HashMap::new(),
            next_generation: 0,
            last_message: now,
            signed_here: None,
        }
    }

    /// Takes a signature made in this process as valid without verifying it again (see [`SignedHere`]).
    pub(crate) fn with_signed_here(mut self, signed_here: Option<Arc<SignedHere>>) -> Self {
        self.signed_here = signed_here;
        self
    }

    /// The first frame to send: the NIP-42 challenge.
    pub(crate) fn greeting(&self) -> String {
        wire::auth(&self.challenge)
    }

    /// How many subscriptions are open.
    pub(crate) fn subscription_count(&self) -> usize {
        self.subscriptions.len()
    }

    /// A text message from the client. `now` drives the rate limit, `wall` is the Unix time for
    /// NIP-40 expiration.
    pub(crate) fn handle_text(
        &mut self,
        text: &str,
        now: Instant,
        wall: Timestamp,
    ) -> Vec<Command> {
        self.last_message = self.last_message.max(now);
        let was_exempt = self.exempt;
        let mut commands = self.handle_message(text, now, wall);
        if self.exempt && !was_exempt {
            commands.insert(0, Command::Exempt);
        }
        commands
    }

    fn handle_message(&mut self, text: &str, now: Instant, wall: Timestamp) -> Vec<Command> {
        match ClientMessage::from_json(text) {
            Ok(ClientMessage::Event(event)) => self.handle_event(event.into_owned(), now, wall),
            Ok(ClientMessage::Req {
                subscription_id,
                filters,
            }) => self.handle_req(subscription_id.into_owned(), filters),
            Ok(ClientMessage::Close(subscription_id)) => {
                self.subscriptions.remove(subscription_id.as_ref());
                Vec::new()
            }
            // The nostr crate reads one filter per COUNT.
            Ok(ClientMessage::Count {
                subscription_id,
                filter,
            }) => self.handle_count(subscription_id.into_owned(), vec![filter]),
            Ok(ClientMessage::Auth(event)) => self.handle_auth(&event, wall),
            Ok(ClientMessage::NegOpen {
                subscription_id, ..
            })
            | Ok(ClientMessage::NegMsg {
                subscription_id, ..
            }) => send(wire::neg_err(
                &subscription_id,
                "unsupported: negentropy (NIP-77) is not supported",
            )),
            Ok(ClientMessage::NegClose { .. }) => Vec::new(),
            Err(error) => self.diagnose(text, &error),
        }
    }

    /// A NIP-42 `AUTH`: the connection proves it holds a key by signing its challenge.
    fn handle_auth(&mut self, event: &Event, wall: Timestamp) -> Vec<Command> {
        let refuse = |message: &str| send(wire::ok(event.id, false, message));
        self.auth_messages = self.auth_messages.saturating_add(1);
        if self.auth_messages > MAX_AUTH_MESSAGES_PER_CONNECTION {
            return refuse(&format!(
                "restricted: at most {MAX_AUTH_MESSAGES_PER_CONNECTION} AUTH messages per connection"
            ));
        }
        if event.kind != Kind::Authentication {
            return refuse("invalid: an AUTH event has kind 22242");
        }
        if !event.verify_id() {
            return refuse("invalid: event id does not match the event");
        }
        if !event.verify_signature() {
            return refuse("invalid: bad signature");
        }
        if event.created_at.as_secs().abs_diff(wall.as_secs()) > AUTH_MAX_SKEW_SECS {
            return refuse(&format!(
                "invalid: created_at is more than {AUTH_MAX_SKEW_SECS} s from the relay's clock"
            ));
        }
        if event.tags.challenge().as_deref() != Some(self.challenge.as_str()) {
            return refuse("invalid: the challenge tag does not match this connection's challenge");
        }
        // Bound to this relay, not only to its challenge: another relay can serve the same challenge to a
        // member's client and replay the signed answer here.
        let relay = event.tags.iter().find(|t| t.kind() == "relay");
        let relay = relay.and_then(|t| t.content()).unwrap_or_default();
        if !self.own_urls.accepts(relay) {
            return refuse(
                "invalid: the relay tag must be this relay's URL (its listen address or a public URL it is configured with)",
            );
        }
        if !self.authed.contains(&event.pubkey) {
            if self.authed.len() >= MAX_AUTHED_KEYS_PER_CONNECTION {
                return refuse(&format!(
                    "restricted: at most {MAX_AUTHED_KEYS_PER_CONNECTION} keys per connection"
                ));
            }
            self.authed.insert(event.pubkey);
        }
        // The connection proved it is the operator's agent: exempt from the rate and from losing live events.
        if self.unlimited_authors.contains(&event.pubkey) {
            self.exempt = true;
        }
        send(wire::ok(event.id, true, ""))
    }

    /// Whether this connection authenticated as `key` (NIP-42).
    pub(crate) fn is_authed(&self, key: &PublicKey) -> bool {
        self.authed.contains(key)
    }

    /// When this connection counts as idle, closed after `timeout` with no open subscription and no
    /// message from the client ([`IDLE_TIMEOUT`](crate::limits::IDLE_TIMEOUT)); `None` while a subscription
    /// is open (it waits for events).
    pub(crate) fn idle_deadline(&self, timeout: std::time::Duration) -> Option<Instant> {
        self.subscriptions
            .is_empty()
            .then(|| self.last_message + timeout)
    }

    /// The `NOTICE` to send before the driver closes an idle connection.
    pub(crate) fn handle_idle(&self, timeout: std::time::Duration) -> String {
        wire::notice(&format!(
            "closing: no subscription and no message for {} s; connect again to go on",
            timeout.as_secs()
        ))
    }

    /// A binary message from the client: Nostr is text only.
    pub(crate) fn handle_binary(&self) -> Vec<Command> {
        notice("invalid: binary messages are not supported; send JSON text")
    }

    /// A message bigger than `max_message_bytes`: the `NOTICE` to send before the driver closes
    /// the connection (it cannot resynchronise with a stream it stopped reading mid-message).
    pub(crate) fn handle_oversized(&self) -> String {
        wire::notice(&format!(
            "invalid: message too large (at most {} bytes); closing",
            self.limits.max_message_bytes
        ))
    }

    /// The store's answer for an event sent with [`Command::Store`]: the `OK` frame.
    pub(crate) fn handle_stored(
        &self,
        id: EventId,
        outcome: Result<InsertOutcome, RelayError>,
    ) -> String {
        let (accepted, message): (bool, Cow<'_, str>) = match outcome {
            Ok(InsertOutcome::Inserted | InsertOutcome::Replaced | InsertOutcome::NotStored) => {
                (true, "".into())
            }
            Ok(InsertOutcome::Duplicate) => (true, "duplicate: already have this event".into()),
            // Not stored, but nothing the client can fix by resending: report it like a duplicate.
            Ok(InsertOutcome::Deleted) => (
                false,
                "blocked: its author deleted this event (NIP-09)".into(),
            ),
            Ok(InsertOutcome::Refused(refusal)) => {
                (false, format!("{}: {refusal}", refusal.prefix()).into())
            }
            Ok(InsertOutcome::RejectedOlder) => (
                true,
                "duplicate: a newer event with this replaceable address is stored".into(),
            ),
            Err(error) => {
                tracing::warn!(%id, %error, "relay could not store an event");
                (false, "error: could not store the event".into())
            }
        };
        event_ok(&self.stats, id, accepted, &message)
    }

    /// The stored events for a subscription's `REQ`: `EVENT`s, `EOSE`, then the live events
    /// that arrived meanwhile. A result for a subscription closed or replaced since is dropped.
    pub(crate) fn handle_query_result(
        &mut self,
        subscription_id: &SubscriptionId,
        generation: u64,
        result: Result<Vec<StoredEvent>, RelayError>,
    ) -> Vec<String> {
        let current = self
            .subscriptions
            .get(subscription_id)
            .is_some_and(|s| s.generation == generation);
        if !current {
            return Vec::new();
        }
        let stored = match result {
            Ok(stored) => stored,
            Err(error) => {
                tracing::warn!(%error, "relay query failed");
                self.subscriptions.remove(subscription_id);
                return vec![wire::closed(
                    subscription_id,
                    "error: could not query stored events",
                )];
            }
        };
        let mut frames: Vec<String> = stored
            .iter()
            .map(|s| wire::event(subscription_id, &s.json))
            .collect();
        frames.push(wire::eose(subscription_id));
        let waiting = match self.subscriptions.get_mut(subscription_id) {
            Some(s) => {
                // Stored events come newest first.
                s.sent_stored = stored.iter().take(SENT_STORED_KEPT).map(|e| e.id).collect();
                s.loading.take().unwrap_or_default()
            }
            None => Vec::new(),
        };
        if !waiting.is_empty() {
            let sent: HashSet<EventId> = stored.iter().map(|s| s.id).collect();
            frames.extend(
                waiting
                    .iter()
                    .filter(|p| !sent.contains(&p.event.id))
                    .map(|p| wire::event(subscription_id, &p.json)),
            );
        }
        frames
    }

    /// The driver registered this (exempt) connection's own queue; `backlog` ring events were sent
    /// before it and are still to be read from the ring.
    pub(crate) fn handle_registered(&mut self, backlog: u64) {
        self.feed = if backlog == 0 {
            Feed::Queue
        } else {
            Feed::Handoff(backlog)
        };
    }

    /// Whether the driver must (still) read the shared ring: false once an exempt connection has
    /// read the ring's part, when it drops its ring receiver.
    pub(crate) fn reads_ring(&self) -> bool {
        self.feed != Feed::Queue
    }

    /// How to hand a live event to an exempt connection's queue, from this connection (the
    /// publisher). `own_queue`: the queue is this connection's; `behind`: it already missed events.
    pub(crate) fn queue_delivery(&self, own_queue: bool, behind: bool) -> QueueDelivery {
        if own_queue {
            QueueDelivery::Inline
        } else if self.exempt || behind {
            QueueDelivery::TryOnly
        } else {
            QueueDelivery::Wait
        }
    }

    /// An event from the shared ring: delivered like [`handle_live`](Self::handle_live), except
    /// that an exempt connection delivers only the ring events sent before its queue existed.
    pub(crate) fn handle_ring(&mut self, published: &Arc<Published>) -> Vec<String> {
        match self.feed {
            Feed::Ring => self.handle_live(published),
            Feed::Handoff(left) => {
                self.feed = if left <= 1 {
                    Feed::Queue
                } else {
                    Feed::Handoff(left - 1)
                };
                self.handle_live(published)
            }
            // The queue brings this one.
            Feed::Queue => Vec::new(),
        }
    }

    /// An event from this exempt connection's own queue; `missed` events could not be queued since
    /// the last one, which closes every subscription as too slow after this event.
    pub(crate) fn handle_queued(&mut self, published: &Arc<Published>, missed: u64) -> Vec<String> {
        let mut frames = self.handle_live(published);
        if missed > 0 {
            frames.extend(self.close_lagged(missed));
        }
        frames
    }

    /// A live event to deliver on this connection: an `EVENT` frame for each live subscription it
    /// matches.
    pub(crate) fn handle_live(&mut self, published: &Arc<Published>) -> Vec<String> {
        let mut frames = Vec::new();
        let mut overflowed = Vec::new();
        // Most connections want most events not at all: the rooms are asked, once, only about an event a
        // subscription wants.
        let mut readable = None;
        for (id, sub) in &mut self.subscriptions {
            let matches = sub
                .filters
                .iter()
                .any(|f| f.match_event(&published.event, MatchEventOptions::new()));
            if !matches {
                continue;
            }
            let may_read = *readable.get_or_insert_with(|| {
                self.rooms
                    .read()
                    .unwrap_or_else(PoisonError::into_inner)
                    .may_read(&published.event, &self.authed)
            });
            if !may_read {
                return Vec::new();
            }
            match &mut sub.loading {
                None if sub.sent_stored.contains(&published.event.id) => {}
                None => frames.push(wire::event_after(&sub.head, &published.json)),
                Some(waiting) if waiting.len() < LIVE_QUEUE_CAPACITY => {
                    waiting.push(Arc::clone(published));
                }
                Some(_) => overflowed.push(id.clone()),
            }
        }
        for id in overflowed {
            self.subscriptions.remove(&id);
            frames.push(wire::closed(
                &id,
                "error: too many live events arrived while loading stored events; subscribe again",
            ));
        }
        frames
    }

    /// The connection fell `missed` events behind the shared ring and they are lost: every
    /// subscription is closed so the client knows to subscribe again (with `since`). For an exempt
    /// connection only the lost events sent before its queue existed count; the queue brings the rest.
    pub(crate) fn handle_lagged(&mut self, missed: u64) -> Vec<String> {
        let lost = match self.feed {
            Feed::Ring => missed,
            Feed::Handoff(left) => {
                let lost = missed.min(left);
                self.feed = if lost == left {
                    Feed::Queue
                } else {
                    Feed::Handoff(left - lost)
                };
                lost
            }
            Feed::Queue => 0,
        };
        if lost == 0 {
            return Vec::new();
        }
        self.close_lagged(lost)
    }

    /// Closes every subscription because `missed` live events were lost.
    fn close_lagged(&mut self, missed: u64) -> Vec<String> {
        let message = format!(
            "error: too slow: {missed} live events were dropped for this connection; subscribe again"
        );
        let mut frames: Vec<String> = self
            .subscriptions
            .drain()
            .map(|(id, _)| wire::closed(&id, &message))
            .collect();
        if !frames.is_empty() {
            frames.push(wire::notice(&message));
        }
        frames
    }

    fn handle_event(&mut self, event: Event, now: Instant, wall: Timestamp) -> Vec<Command> {
        let id = event.id;
        let stats = Arc::clone(&self.stats);
        let refuse = |message: &str| send(event_ok(&stats, id, false, message));
        if i64::try_from(event.created_at.as_secs()).is_err() {
            return refuse("invalid: created_at is out of range");
        }
        // Dated ahead, an event would head every newest-first query and outlive retention for as long.
        if event.created_at.as_secs() > wall.as_secs().saturating_add(MAX_FUTURE_SKEW_SECS) {
            return refuse(&format!(
                "invalid: created_at is too far in the future (more than {MAX_FUTURE_SKEW_SECS} s ahead of the relay's clock)"
            ));
        }
        // Checked before the signature, which costs far more than anything else here. Keyed off the
        // connection's proven identity, never the event's author: anyone can resend the agent's events.
        let since_began = now.saturating_duration_since(self.began).as_secs_f64();
        if !self.exempt && !self.bucket.as_mut().is_none_or(|b| b.try_take(since_began)) {
            return refuse(&format!(
                "rate-limited: at most {} events per second per connection",
                self.limits.max_events_per_second_per_connection
            ));
        }
        // NIP-42: an AUTH event proves a key to one connection and is never stored or passed on; broadcast,
        // anyone subscribed to 22242 would collect signed answers to challenges.
        if event.kind == Kind::Authentication {
            return refuse("invalid: kind 22242 is sent with AUTH, never as an EVENT (NIP-42)");
        }
        let json = match event_json(&event) {
            Ok(json) => json,
            Err(_) => return refuse("invalid: event cannot be serialised"),
        };
        if json.len() > self.limits.max_event_bytes {
            return refuse(&format!(
                "invalid: event too large ({} bytes, at most {})",
                json.len(),
                self.limits.max_event_bytes
            ));
        }
        if !event.verify_id() {
            return refuse("invalid: event id does not match the event");
        }
        // The id is the hash of the event: a signature made here for it is the event's own.
        let vouched = self
            .signed_here
            .as_ref()
            .is_some_and(|s| s.vouches_for(&event));
        if !vouched && !event.verify_signature() {
            return refuse("invalid: bad signature");
        }
        // NIP-40: expired from the expiration second itself on (`Event::is_expired_at` says so only
        // a second later).
        if event.tags.expiration().is_some_and(|at| at <= wall) {
            return refuse("invalid: event is expired");
        }
        // NIP-70: a protected event only from a connection authenticated as its author.
        if event.tags.iter().any(|t| t.as_slice() == ["-"]) && !self.is_authed(&event.pubkey) {
            return refuse(if self.authed.is_empty() {
                "auth-required: this event is protected (NIP-70); authenticate as its author (NIP-42)"
            } else {
                "restricted: this event is protected (NIP-70); only its author may publish it"
            });
        }
        {
            let rooms = self.rooms.read().unwrap_or_else(PoisonError::into_inner);
            if let Err(reason) = rooms
                .check_write(&event)
                .and(rooms.moderate(&event).map(|_| ()))
            {
                return refuse(&reason.to_string());
            }
        }
        if let Err(rule) = tinyagent::check_comment(&event) {
            return refuse(&format!("invalid: {rule}"));
        }
        if tinyagent::is_question(&event) {
            if let Err(rule) = tinyagent::question(&event) {
                return refuse(&format!("invalid: {rule}"));
            }
        }
        let retention = Retention::of(event.kind);
        let published = Arc::new(Published { event, json });
        if retention.is_stored() {
            vec![Command::Store(published)]
        } else {
            vec![
                Command::Broadcast(published),
                Command::Send(event_ok(&stats, id, true, "")),
            ]
        }
    }

    /// A NIP-45 `COUNT`: checked like a `REQ`, but it opens no subscription.
    fn handle_count(
        &self,
        subscription_id: SubscriptionId,
        filters: Vec<Cow<'_, Filter>>,
    ) -> Vec<Command> {
        let refuse = |message: &str| send(wire::closed(&subscription_id, wire::truncate(message)));
        if let Some(problem) = self.check_subscription_id(&subscription_id) {
            return refuse(&problem);
        }
        if filters.len() > self.limits.max_filters_per_req {
            return refuse(&format!(
                "error: too many filters ({}, at most {})",
                filters.len(),
                self.limits.max_filters_per_req
            ));
        }
        for filter in &filters {
            if let Err(problem) = check_filter(filter) {
                return refuse(&problem.to_string());
            }
        }
        if let Err(reason) = self.check_rooms_read(&filters) {
            return refuse(&reason.to_string());
        }
        vec![Command::Count {
            subscription_id,
            filters: filters.into_iter().map(Cow::into_owned).collect(),
            hidden: self.hidden_rooms(),
        }]
    }

    /// Whether this connection may read every room a filter names in `#h` (NIP-29 private rooms).
    fn check_rooms_read(&self, filters: &[Cow<'_, Filter>]) -> Result<(), RoomRefusal> {
        let rooms = self.rooms.read().unwrap_or_else(PoisonError::into_inner);
        let h = nostr::filter::SingleLetterTag::LOWERCASE_H;
        for filter in filters {
            for id in filter.generic_tags.get(&h).into_iter().flatten() {
                rooms.check_read(id, &self.authed)?;
            }
        }
        Ok(())
    }

    /// The private rooms this connection may not read.
    fn hidden_rooms(&self) -> Vec<String> {
        self.rooms
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .hidden_from(&self.authed)
    }

    /// The store's count for a `COUNT`: the `COUNT` answer, or `CLOSED` when it failed.
    pub(crate) fn handle_count_result(
        &self,
        subscription_id: &SubscriptionId,
        result: Result<u64, RelayError>,
    ) -> String {
        match result {
            Ok(n) => wire::count(subscription_id, n),
            Err(error) => {
                tracing::warn!(%error, "relay count failed");
                wire::closed(subscription_id, "error: could not count stored events")
            }
        }
    }

    fn handle_req(
        &mut self,
        subscription_id: SubscriptionId,
        filters: Vec<Cow<'_, Filter>>,
    ) -> Vec<Command> {
        if let Some(problem) = self.check_subscription_id(&subscription_id) {
            return self.refuse(subscription_id, &problem);
        }
        if filters.len() > self.limits.max_filters_per_req {
            let message = format!(
                "error: too many filters ({}, at most {})",
                filters.len(),
                self.limits.max_filters_per_req
            );
            return self.refuse(subscription_id, &message);
        }
        for filter in &filters {
            if let Err(problem) = check_filter(filter) {
                return self.refuse(subscription_id, &problem.to_string());
            }
        }
        if let Err(reason) = self.check_rooms_read(&filters) {
            return self.refuse(subscription_id, &reason.to_string());
        }
        if !self.subscriptions.contains_key(&subscription_id)
            && self.subscriptions.len() >= self.limits.max_subscriptions_per_connection
        {
            let message = format!(
                "error: too many subscriptions (at most {} per connection)",
                self.limits.max_subscriptions_per_connection
            );
            return self.refuse(subscription_id, &message);
        }
        let filters: Vec<Filter> = filters.into_iter().map(Cow::into_owned).collect();
        let cap = self.limits.max_query_limit;
        let capped = filters
            .iter()
            .map(|f| {
                let mut f = f.clone();
                f.limit = Some(f.limit.map_or(cap, |l| l.min(cap)));
                f
            })
            .collect();
        self.next_generation += 1;
        let generation = self.next_generation;
        self.subscriptions.insert(
            subscription_id.clone(),
            Subscription {
                filters,
                generation,
                loading: Some(Vec::new()),
                sent_stored: Vec::new(),
                head: wire::event_head(&subscription_id),
            },
        );
        vec![Command::Query(QueryRequest {
            subscription_id,
            generation,
            filters: capped,
            hidden: self.hidden_rooms(),
        })]
    }

    fn check_subscription_id(&self, subscription_id: &SubscriptionId) -> Option<String> {
        let id = subscription_id.as_str();
        if id.is_empty() {
            return Some("invalid: subscription id is empty".to_owned());
        }
        if id.chars().count() > self.limits.max_subscription_id_len {
            return Some(format!(
                "invalid: subscription id is longer than {} characters",
                self.limits.max_subscription_id_len
            ));
        }
        None
    }

    /// `CLOSED` for `subscription_id`; a subscription with that id, if any, is closed too.
    fn refuse(&mut self, subscription_id: SubscriptionId, message: &str) -> Vec<Command> {
        self.subscriptions.remove(&subscription_id);
        // An over-long id is echoed cut short: it is refused for its length anyway.
        let shown = if subscription_id.as_str().len() > wire::MAX_MESSAGE_TEXT {
            SubscriptionId::new(wire::truncate(subscription_id.as_str()))
        } else {
            subscription_id
        };
        send(wire::closed(&shown, wire::truncate(message)))
    }

    /// A message `ClientMessage` could not parse: find out what is wrong, and answer with an
    /// `OK false`, a `CLOSED` or a `NOTICE` as NIP-01 asks.
    fn diagnose(&mut self, text: &str, error: &nostr::error::Error) -> Vec<Command> {
        let value: Value = match serde_json::from_str(text) {
            Ok(value) => value,
            Err(e) => return notice(&format!("invalid: message is not JSON: {e}")),
        };
        let Some(items) = value.as_array() else {
            return notice("invalid: a message must be a JSON array");
        };
        let Some(verb) = items.first().and_then(Value::as_str) else {
            return notice("invalid: a message must start with its type as a string");
        };
        match verb {
            "EVENT" => {
                let reason = match items.get(1) {
                    None => "the event is missing".to_owned(),
                    Some(raw) => match serde_json::from_value::<Event>(raw.clone()) {
                        Err(e) => e.to_string(),
                        Ok(_) => error.to_string(),
                    },
                };
                let id = items
                    .get(1)
                    .and_then(|e| e.get("id"))
                    .and_then(Value::as_str)
                    .and_then(|id| EventId::from_hex(id).ok());
                match id {
                    Some(id) => send(event_ok(
                        &self.stats,
                        id,
                        false,
                        wire::truncate(&format!("invalid: malformed event: {reason}")),
                    )),
                    None => notice(&format!("invalid: malformed EVENT: {reason}")),
                }
            }
            "REQ" => {
                let Some(sub) = items.get(1).and_then(Value::as_str) else {
                    return notice("invalid: REQ needs a subscription id string");
                };
                let sub = SubscriptionId::new(sub);
                if let Some(problem) = self.check_subscription_id(&sub) {
                    return self.refuse(sub, &problem);
                }
                if items.len() < 3 {
                    return self.refuse(sub, "invalid: REQ needs at least one filter");
                }
                for raw in &items[2..] {
                    if let Err(e) = serde_json::from_value::<Filter>(raw.clone()) {
                        return self.refuse(sub, &format!("invalid: bad filter: {e}"));
                    }
                }
                self.refuse(sub, &format!("invalid: malformed REQ: {error}"))
            }
            "CLOSE" | "COUNT" | "AUTH" | "NEG-OPEN" | "NEG-MSG" | "NEG-CLOSE" => {
                notice(&format!("invalid: malformed {verb}: {error}"))
            }
            other => notice(&format!(
                "unsupported: unknown message type {:?}",
                wire::truncate(other)
            )),
        }
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
