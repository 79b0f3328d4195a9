//! The relay's decoders as one client connection meets them, for the fuzz targets (`fuzz/`): client
//! messages (`EVENT`, `REQ`, `CLOSE`, `COUNT`, `AUTH`) read and validated by a connection's session, and the
//! filters of the queries they ask for turned into SQL. Not part of the relay's API: hidden from its docs,
//! and kept small so the fuzzers reach the same code the connections run.

use crate::filter_sql::filter_to_sql;
use crate::limits::RelayLimits;
use crate::own_urls::OwnUrls;
use crate::rooms::Rooms;
use crate::session::{Command, Session};
use crate::stats::RelayStats;
use nostr::types::Timestamp;
use std::collections::HashSet;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// Feeds `messages` to one fresh connection's session, as text frames a client sent a millisecond apart,
/// with the relay's default limits and no rooms; each query it asks for has its filters turned into SQL as
/// the store would. Returns how many frames the session sent back. Must never panic.
pub fn client_messages<'a>(messages: impl IntoIterator<Item = &'a str>) -> usize {
    let own_urls = OwnUrls::new(([127, 0, 0, 1], 7777).into(), &[])
        .expect("a loopback address makes relay URLs");
    let rooms = Rooms::new(&[]).expect("no rooms are valid rooms");
    let start = Instant::now();
    let mut session = Session::new(
        RelayLimits::default(),
        Arc::new(HashSet::new()),
        start,
        Arc::new(RwLock::new(rooms)),
        "challenge".into(),
        Arc::new(own_urls),
        Arc::new(RelayStats::default()),
    );
    let wall = Timestamp::from(1_771_402_416);
    let mut sent = 0;
    for (i, text) in messages.into_iter().enumerate() {
        let now = start + Duration::from_millis(i as u64);
        for command in session.handle_text(text, now, wall) {
            match command {
                Command::Send(_) => sent += 1,
                Command::Query(q) => {
                    for f in &q.filters {
                        let _ = filter_to_sql(f, wall, &q.hidden);
                    }
                }
                Command::Count {
                    filters, hidden, ..
                } => {
                    for f in &filters {
                        let _ = filter_to_sql(f, wall, &hidden);
                    }
                }
                Command::Store(_) | Command::Broadcast(_) | Command::Exempt => {}
            }
        }
    }
    sent
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_answers_what_a_client_says_and_bad_frames_with_a_notice() {
        // A REQ gets its stored events by query (no frame yet), a CLOSE nothing, bad frames a NOTICE each.
        let sent = client_messages([
            r##"["REQ","s1",{"kinds":[1],"#e":["00"],"limit":5}]"##,
            r#"["CLOSE","s1"]"#,
            "not json",
            r#"["EVENT",{"id":"zz"}]"#,
        ]);
        assert_eq!(sent, 2);
    }
}
