//! The conformance suite over the SQLite journal, over the fault wrapper (transparent while it writes),
//! and what the wrapper does while it fails; plus SQLite's own migration of an older journal.

use agentwire_store::conformance::{self, turn, Opener};
use agentwire_store::{
    Accepted, FaultyJournal, Finish, Journal, SqliteJournal, StoreError, LOCAL_OWNER,
};
use std::sync::{Arc, Mutex};
use tempfile::TempDir;

/// Temp dirs kept until the test ends.
static DIRS: Mutex<Vec<TempDir>> = Mutex::new(Vec::new());

fn fresh_sqlite() -> Opener {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.sqlite");
    DIRS.lock().unwrap().push(dir);
    Arc::new(move || Arc::new(SqliteJournal::open(&path).unwrap()) as Arc<dyn Journal>)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_passes_the_conformance_suite() {
    conformance::run_all(fresh_sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fault_wrapper_passes_the_conformance_suite_while_it_writes() {
    conformance::run_all(|| {
        let inner = fresh_sqlite();
        Arc::new(move || FaultyJournal::new(inner()) as Arc<dyn Journal>) as Opener
    })
    .await;
}

#[tokio::test]
async fn a_failing_journal_writes_nothing_and_reads_on() {
    let open = fresh_sqlite();
    let j = FaultyJournal::new(open());
    j.accept(turn(1)).await.unwrap();
    j.fail_writes(true);
    let err = j.accept(turn(2)).await.unwrap_err();
    assert!(err.is_unwritable(), "{err:?}");
    assert!(j
        .finish(Finish::new(
            turn(1).request_id,
            conformance::result("a", Default::default()),
            1
        ))
        .await
        .unwrap_err()
        .is_unwritable());
    assert!(j.probe().await.is_err());
    assert!(
        j.lookup(turn(1).request_id).await.unwrap().is_some(),
        "reads pass"
    );
    assert_eq!(j.refused_writes(), 3);
    j.fail_writes(false);
    j.probe().await.unwrap();
    assert_eq!(j.accept(turn(2)).await.unwrap(), Accepted::New);
    // Nothing that failed reached the store.
    let stored = open().lookup(turn(1).request_id).await.unwrap().unwrap();
    assert_eq!(stored.outcome, None);
}

#[tokio::test]
async fn a_journal_from_before_owner_tool_call_and_agent_columns_migrates() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.sqlite");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE turns (request_id TEXT PRIMARY KEY, conversation_id TEXT NOT NULL,
                protocol TEXT NOT NULL, route TEXT NOT NULL, input TEXT NOT NULL,
                accepted_at INTEGER NOT NULL, outcome TEXT, wire TEXT, ended_at INTEGER);
             CREATE INDEX turns_live ON turns(protocol) WHERE outcome IS NULL;
             CREATE TABLE transcripts (request_id TEXT PRIMARY KEY, events TEXT NOT NULL);
             INSERT INTO turns VALUES ('fisk:1', 'c', 'fisk', '{}', '{}', 1,
                '{\"outcome\":\"result\",\"text\":\"a\",\"usage\":{\"input_tokens\":1,\"output_tokens\":2},\"stop_reason\":\"stop\"}', NULL, 2);
             INSERT INTO transcripts VALUES ('fisk:1', '[{\"type\":\"tool_call\"},{\"type\":\"text\"},{\"type\":\"tool_call\"}]');
             INSERT INTO turns VALUES ('nipxx:2', 'd', 'nipxx', '{}', '{}', 3, NULL, NULL, NULL);",
        )
        .unwrap();
    }
    let j = SqliteJournal::open(&path).unwrap();
    let t = j
        .lookup(agentwire_core::RequestId::new("fisk:1").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((t.owner.as_str(), t.tool_calls), (LOCAL_OWNER, 2));
    // No agent: it is nobody's history.
    assert_eq!(t.agent, "");
    let open = j.interrupted(LOCAL_OWNER.into()).await.unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].request_id.as_str(), "nipxx:2");
    assert!(matches!(
        j.finish(Finish::new(
            turn(9).request_id,
            conformance::result("x", Default::default()),
            1
        ))
        .await,
        Err(StoreError::UnknownTurn(_))
    ));
}

#[tokio::test]
async fn a_closed_journal_leaves_no_write_ahead_log_and_reopens_with_everything() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.sqlite");
    let j = SqliteJournal::open(&path).unwrap();
    j.accept(turn(1)).await.unwrap();
    j.finish(Finish::new(
        turn(1).request_id,
        conformance::result("done", Default::default()),
        2,
    ))
    .await
    .unwrap();
    let wal = dir.path().join("j.sqlite-wal");
    let shm = dir.path().join("j.sqlite-shm");
    assert!(wal.exists(), "a journal in use writes ahead");
    j.close().await;
    assert!(
        !wal.exists(),
        "the write-ahead log is checkpointed and removed"
    );
    assert!(!shm.exists(), "and so is the shared-memory index");
    assert_eq!(j.accept(turn(2)).await, Err(StoreError::WriterGone));
    assert_eq!(
        j.lookup(turn(1).request_id).await,
        Err(StoreError::WriterGone)
    );
    j.close().await;
    let reopened = SqliteJournal::open(&path).unwrap();
    let t = reopened.lookup(turn(1).request_id).await.unwrap().unwrap();
    assert!(
        t.outcome.is_some(),
        "what committed is there after the close"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_journal_reads_beside_its_writer_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.sqlite");
    assert!(
        SqliteJournal::open_read_only(&path).is_err(),
        "a journal that does not exist is not made"
    );
    let writer = SqliteJournal::open(&path).unwrap();
    writer.accept(turn(1)).await.unwrap();
    let reader = SqliteJournal::open_read_only(&path).unwrap();
    let c = turn(1).conversation_id;
    assert_eq!(
        reader
            .conversation(c.clone(), false)
            .await
            .unwrap()
            .turns
            .len(),
        1
    );
    // What the writer commits later is read too.
    writer.accept(turn(2)).await.unwrap();
    assert_eq!(
        reader
            .conversation(c.clone(), false)
            .await
            .unwrap()
            .turns
            .len(),
        2
    );
    assert_eq!(reader.accept(turn(3)).await, Err(StoreError::WriterGone));
    assert_eq!(
        reader.remove_conversation(c.clone()).await,
        Err(StoreError::WriterGone)
    );
    assert_eq!(
        reader.conversations("nipxx".into(), 10).await.unwrap(),
        vec![c.clone()]
    );
    reader.close().await;
    writer.close().await;
    // A journal closed cleanly (no write-ahead log left) is read too.
    assert!(!dir.path().join("j.sqlite-wal").exists());
    let reader = SqliteJournal::open_read_only(&path).unwrap();
    assert_eq!(reader.conversation(c, false).await.unwrap().turns.len(), 2);
    reader.close().await;
}

/// Synced commits the journal at `path` made for a sync: its probe row's count (the row a sync writes so
/// that its commit adds a frame, which SQLite syncs with every frame before it).
fn sync_writes(path: &std::path::Path) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("SELECT COALESCE(MAX(at) + 1, 0) FROM probe", [], |r| {
        r.get(0)
    })
    .unwrap()
}

#[tokio::test]
async fn an_accept_soon_is_made_durable_by_the_next_synced_commit_or_a_sync_and_a_sync_of_nothing_writes_nothing(
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.sqlite");
    let j = SqliteJournal::open(&path).unwrap();
    j.sync().await.unwrap();
    j.accept(turn(1)).await.unwrap();
    j.sync().await.unwrap();
    assert_eq!(sync_writes(&path), 0, "every commit so far was synced");
    assert_eq!(j.accept_soon(turn(2)).await.unwrap(), Accepted::New);
    j.sync().await.unwrap();
    assert_eq!(
        sync_writes(&path),
        1,
        "the unsynced accept made a sync commit"
    );
    j.sync().await.unwrap();
    assert_eq!(sync_writes(&path), 1, "and only one");
    // The outcome's synced commit carries an unsynced accept before it: no sync of its own after.
    j.accept_soon(turn(3)).await.unwrap();
    j.finish(Finish::new(
        turn(3).request_id,
        conformance::result("three", Default::default()),
        1,
    ))
    .await
    .unwrap();
    j.sync().await.unwrap();
    assert_eq!(sync_writes(&path), 1);
    // A synced commit that writes nothing syncs nothing: a prune that finds nothing to prune, a second
    // accept of a turn already there. The next sync still writes.
    j.accept_soon(turn(4)).await.unwrap();
    let nothing = agentwire_store::Prune {
        ended_before: 0,
        keep: Vec::new(),
        limit: 1000,
    };
    assert_eq!(j.prune(nothing).await.unwrap().forgotten, 0);
    assert!(matches!(
        j.accept(turn(4)).await.unwrap(),
        Accepted::Existing(_)
    ));
    j.sync().await.unwrap();
    assert_eq!(
        sync_writes(&path),
        2,
        "the unsynced accept was made durable"
    );
}
