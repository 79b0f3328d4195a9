//! `relay-bench`: the embedded relay of `agentwire serve` side by side with `nostr-rs-relay` on the same
//! machine, in one run. Every phase has 50 publishers (one connection each) sending pre-signed events one at
//! a time, each after the `OK` of the one before:
//!
//! - kind 1 notes, on both relays;
//! - kind 9 messages to a closed room whose members are the publishers (agentwire; nostr-rs-relay has no
//!   rooms, so it gets the same events as plain ones, for reference);
//! - kind 1111 comments with seven tags (`E`, `e`, `K`, `k`, `P`, `p`, `h`) to a plain note, on both: the
//!   answers' floor, every tag indexed and nothing settled;
//! - kind 1111 answers with the same seven tags, each settling one tiny agent question card stored before
//!   the phase (agentwire);
//!
//! and then a fan-out probe on both: one kind 1 event to 1,000 live subscriptions (50 connections × 20,
//! nostr-rs-relay's limit being 32 a connection), timed until every subscription has it.
//!
//! `relay-bench --nostr-rs-relay <binary> [--agentwire target/release/agentwire]` prints one JSON document.

use std::path::PathBuf;
use std::process::ExitCode;

use agentwire_nostr::crypto::Crypto;
use clap::Parser;
use nostr::prelude::{ClientMessage, EventBuilder, Keys, Kind, Tag};
use serde_json::json;

mod load;
mod servers;
// Shared with agentwire-bench: starting the daemon and reading its CPU time, and percentiles.
#[path = "../daemon.rs"]
#[allow(dead_code)]
mod daemon;
#[path = "../stats.rs"]
#[allow(dead_code)]
mod stats;

use load::{Frame, Ingest};
use servers::{Server, ROOM};

#[derive(Debug, Parser)]
#[command(name = "relay-bench", version, about)]
struct Args {
    /// The agentwire binary.
    #[arg(long, default_value = "target/release/agentwire")]
    agentwire: PathBuf,
    /// The nostr-rs-relay binary (`scripts/bench-relays.sh` installs 0.8.12).
    #[arg(long, default_value = "target/tools/nostr-rs-relay/bin/nostr-rs-relay")]
    nostr_rs_relay: PathBuf,
    /// Publishers, each on its own connection.
    #[arg(long, default_value_t = 50)]
    publishers: usize,
    /// Events each publisher sends per phase.
    #[arg(long, default_value_t = 400)]
    events: usize,
    /// Fan-out rounds.
    #[arg(long, default_value_t = 20)]
    fanout_rounds: usize,
    /// Run every phase this many times on each relay (alternating), reporting each round.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Only agentwire (for profiling it; the nostr-rs-relay binary is then not needed).
    #[arg(long)]
    only_agentwire: bool,
    /// Only the fan-out probe (no publishing phases).
    #[arg(long)]
    only_fanout: bool,
}

fn tag(parts: &[&str]) -> Tag {
    Tag::parse(parts.iter().map(|p| p.to_string()).collect::<Vec<_>>()).expect("a tag")
}

fn frame(crypto: &Crypto, kind: u16, content: String, tags: Vec<Tag>) -> Frame {
    let ev = crypto.sign(EventBuilder::new(Kind::Custom(kind), content).tags(tags));
    Frame {
        id: ev.id.to_hex(),
        json: ClientMessage::event(ev).as_json(),
    }
}

/// A 64-hex value that looks like an event id, different for every (round, publisher, event).
fn pseudo_id(round: usize, p: usize, i: usize) -> String {
    use std::hash::{BuildHasher, Hasher};
    let state = std::collections::hash_map::RandomState::new();
    (0..4)
        .map(|part| {
            let mut h = state.build_hasher();
            h.write_usize(round);
            h.write_usize(p);
            h.write_usize(i);
            h.write_usize(part);
            format!("{:016x}", h.finish())
        })
        .collect()
}

/// `events` frames per publisher from `make(publisher, i)`.
fn frames(
    publishers: &[Crypto],
    events: usize,
    make: impl Fn(usize, &Crypto, usize) -> Frame,
) -> Vec<Vec<Frame>> {
    publishers
        .iter()
        .enumerate()
        .map(|(p, c)| (0..events).map(|i| make(p, c, i)).collect())
        .collect()
}

fn report(name: &str, i: &Ingest, cpu: Option<f64>) -> serde_json::Value {
    json!({
        "relay_cpu_us_per_event": cpu.map(|c| (c * 1e6 / i.accepted.max(1) as f64).round()),
        "phase": name,
        "sent": i.sent,
        "accepted": i.accepted,
        "seconds": stats::round3(i.elapsed.as_secs_f64()),
        "events_per_second": i.rate().round(),
        "refusals": i.refusals,
    })
}

/// One publishing phase, with the relay's CPU time per accepted event.
async fn timed(
    server: &Server,
    name: &str,
    frames: Vec<Vec<Frame>>,
) -> Result<serde_json::Value, String> {
    let before = server.cpu_seconds();
    let i = load::publish(&server.url, frames).await?;
    let cpu = server.cpu_seconds().zip(before).map(|(a, b)| a - b);
    Ok(report(name, &i, cpu))
}

async fn ingest_phases(
    server: &Server,
    publishers: &[Crypto],
    asker: &Crypto,
    args: &Args,
    round: usize,
) -> Result<Vec<serde_json::Value>, String> {
    let mut out = Vec::new();
    let notes = frames(publishers, args.events, |p, c, i| {
        frame(c, 1, format!("note {round} {p} {i}"), vec![])
    });
    eprintln!("{}: kind 1", server.name);
    out.push(timed(server, "kind1", notes).await?);

    let room = frames(publishers, args.events, |p, c, i| {
        frame(
            c,
            9,
            format!("room {round} {p} {i}"),
            vec![tag(&["h", ROOM])],
        )
    });
    eprintln!("{}: room messages", server.name);
    out.push(timed(server, "room_messages", room).await?);

    // The floor of the answers below: kind 1111 comments with the same seven tags, each to a root of its own
    // that is no question card (as each answer names a card of its own), so nothing is settled; both relays
    // index all seven.
    let agent = asker.public_key().to_hex();
    let comments = frames(publishers, args.events, |p, c, i| {
        let root = pseudo_id(round, p, i);
        frame(
            c,
            1111,
            // Distinct content, so that no two comments are one event.
            format!("comment {round} {p} {i}"),
            vec![
                tag(&["E", &root]),
                tag(&["e", &root]),
                tag(&["K", "1"]),
                tag(&["k", "1"]),
                tag(&["P", &agent]),
                tag(&["p", &agent]),
                tag(&["h", ROOM]),
            ],
        )
    });
    eprintln!("{}: comments with seven tags", server.name);
    out.push(timed(server, "tagged_comments", comments).await?);

    if server.name == "agentwire" {
        // The cards first (one per answer, asked of its publisher), stored by as many connections.
        let cards = frames(publishers, args.events, |p, c, i| {
            let _ = c;
            let asked = publishers[p].public_key().to_hex();
            frame(
                asker,
                9,
                format!("Proceed {round} {p} {i}?"),
                vec![
                    tag(&["h", ROOM]),
                    tag(&["request", "question"]),
                    tag(&["tinyagent", "1"]),
                    tag(&["interaction", "confirmation"]),
                    tag(&["selection", "single"]),
                    tag(&["option", "yes", "Yes"]),
                    tag(&["option", "no", "No"]),
                    tag(&["p", &asked]),
                ],
            )
        });
        let ids: Vec<Vec<String>> = cards
            .iter()
            .map(|fs| fs.iter().map(|f| f.id.clone()).collect())
            .collect();
        let stored = load::publish(&server.url, cards).await?;
        if stored.accepted != stored.sent {
            return Err(format!("question cards refused: {:?}", stored.refusals));
        }
        let answers = frames(publishers, args.events, |p, c, i| {
            let card = &ids[p][i];
            frame(
                c,
                1111,
                "yes".into(),
                vec![
                    tag(&["E", card]),
                    tag(&["e", card]),
                    tag(&["K", "9"]),
                    tag(&["k", "9"]),
                    tag(&["P", &agent]),
                    tag(&["p", &agent]),
                    tag(&["h", ROOM]),
                ],
            )
        });
        eprintln!("{}: settling answers", server.name);
        let r = timed(server, "settling_answers", answers).await?;
        if r["accepted"] != r["sent"] {
            return Err(format!("answers refused: {}", r["refusals"]));
        }
        out.push(r);
    }
    Ok(out)
}

async fn fanout_phase(server: &Server, args: &Args) -> Result<serde_json::Value, String> {
    let author = Crypto::new(Keys::generate());
    let rounds: Vec<Frame> = (0..args.fanout_rounds)
        .map(|i| frame(&author, 1, format!("fan-out {i}"), vec![]))
        .collect();
    // Another author's: the subscriptions below neither get them stored nor live.
    let other = Crypto::new(Keys::generate());
    let alone: Vec<Frame> = (0..args.fanout_rounds)
        .map(|i| frame(&other, 1, format!("alone {i}"), vec![]))
        .collect();
    eprintln!("{}: fan-out", server.name);
    let n = rounds.len().max(1) as f64;
    let f = load::fan_out(
        &server.url,
        FANOUT_CONNECTIONS,
        FANOUT_SUBSCRIPTIONS_PER_CONNECTION,
        &author.public_key().to_hex(),
        alone,
        rounds,
        || server.cpu_seconds_exact(),
    )
    .await?;
    // CPU per round, both sides: on the shared cores their sum over the cores bounds the median from below.
    let per_round_us = |cpu: Option<f64>| cpu.map(|c| (c * 1e6 / n).round());
    Ok(json!({
        "phase": "fanout_1000",
        "delivery": stats::Summary::of(&f.delivery).json(),
        "publisher_ok": stats::Summary::of(&f.ok).json(),
        "ok_without_subscribers": stats::Summary::of(&f.ok_alone).json(),
        "relay_cpu_us_per_round": per_round_us(f.relay_cpu),
        "client_cpu_us_per_round": per_round_us(f.client_cpu),
    }))
}

/// The fan-out probe's connections: nostr-rs-relay allows 32 subscriptions a connection, so 1,000
/// subscriptions take 50 connections of 20.
const FANOUT_CONNECTIONS: usize = 50;
/// See [`FANOUT_CONNECTIONS`].
const FANOUT_SUBSCRIPTIONS_PER_CONNECTION: usize = 20;

async fn bench(args: Args) -> Result<serde_json::Value, String> {
    for b in [&args.agentwire, &args.nostr_rs_relay] {
        let needed = !(args.only_agentwire && b == &args.nostr_rs_relay);
        if needed && !b.exists() {
            return Err(format!("{} not found", b.display()));
        }
    }
    let publishers: Vec<Crypto> = (0..args.publishers)
        .map(|_| Crypto::new(Keys::generate()))
        .collect();
    let asker = Crypto::new(Keys::generate());
    let mut members: Vec<_> = publishers.iter().map(|c| c.public_key()).collect();
    members.push(asker.public_key());
    let mut rounds = Vec::new();
    for round in 0..args.repeat {
        let relays: &[&str] = if args.only_agentwire {
            &["agentwire"]
        } else {
            &["agentwire", "nostr-rs-relay"]
        };
        for &which in relays {
            let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
            let server = if which == "agentwire" {
                servers::agentwire(&args.agentwire, dir.path(), &members)?
            } else {
                servers::nostr_rs_relay(&args.nostr_rs_relay, dir.path())?
            };
            let phases = if args.only_fanout {
                Vec::new()
            } else {
                ingest_phases(&server, &publishers, &asker, &args, round).await?
            };
            let fanout = fanout_phase(&server, &args).await?;
            eprintln!("round {round} {which}: {phases:?} {fanout}");
            rounds.push(
                json!({ "round": round, "relay": which, "phases": phases, "fanout": fanout }),
            );
        }
    }
    Ok(json!({
        "machine": { "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()) },
        "publishers": args.publishers,
        "events_per_publisher": args.events,
        "rounds": rounds,
    }))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("relay-bench: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(bench(args)) {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("relay-bench: {e}");
            ExitCode::from(1)
        }
    }
}
