//! A transaction whose caller is dropped while its `BEGIN` is on the wire leaves no pooled
//! connection inside a transaction (impl/src/transaction.rs; docs/benchmarks.md, run 2: a
//! `leasewright runner` killed with requests in flight made the control plane answer
//! `unknown_attempt` and `500 internal_error`).

use leasewright_impl::begin_transaction;
use leasewright_impl::database::TestDatabase;
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection};
use std::time::{Duration, Instant};

const LOCK: i64 = 350_001;

/// Whether a session of this database waits for the advisory lock `LOCK`.
async fn waits_for_the_lock(watcher: &mut PgConnection) -> bool {
    sqlx::query_scalar(
        "SELECT count(*) > 0 FROM pg_stat_activity
         WHERE datname = current_database() AND wait_event_type = 'Lock'
           AND wait_event = 'advisory' AND pid <> pg_backend_pid()",
    )
    .fetch_one(watcher)
    .await
    .expect("pg_stat_activity")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_begin_dropped_mid_flight_leaves_the_pooled_connection_out_of_any_transaction() {
    let db = TestDatabase::create().await.expect("a test database");
    // One connection: whatever the cancelled begin left on it, the next statement meets.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(db.url())
        .await
        .expect("the pool");
    let mut watcher = PgConnection::connect(db.url()).await.expect("a watcher");
    sqlx::query("CREATE TABLE public.written (x int)")
        .execute(&pool)
        .await
        .expect("a table");
    // The `BEGIN` below is followed by a wait for a lock the watcher holds: the begin stays on
    // the wire, answered by nothing, until the lock is released.
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(LOCK)
        .execute(&mut watcher)
        .await
        .expect("the lock");
    let mut begin = Box::pin(begin_transaction(
        &pool,
        Some("BEGIN; SELECT pg_advisory_xact_lock(350001)"),
    ));
    // Poll the begin until the database shows its session waiting (the `BEGIN` has run), then
    // drop it there, as a disconnected client's handler is dropped.
    let give_up = Instant::now() + Duration::from_secs(120);
    loop {
        tokio::select! {
            begun = &mut begin => panic!("the begin finished while blocked: {:?}", begun.map(|_| ())),
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
        if waits_for_the_lock(&mut watcher).await {
            break;
        }
        assert!(
            Instant::now() < give_up,
            "the begin never reached the database"
        );
    }
    drop(begin);
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(LOCK)
        .execute(&mut watcher)
        .await
        .expect("the unlock");
    // A plain statement through the pool (the same connection) is its own transaction: once it
    // returns, another session sees its row. Inside a transaction the cancelled begin left open,
    // it would not be.
    sqlx::query("INSERT INTO public.written VALUES (1)")
        .execute(&pool)
        .await
        .expect("the insert");
    let seen: i64 = sqlx::query_scalar("SELECT count(*) FROM public.written")
        .fetch_one(&mut watcher)
        .await
        .expect("the count");
    assert_eq!(
        seen, 1,
        "a statement after a cancelled begin ran inside the transaction that begin left open"
    );
    pool.close().await;
    watcher.close().await.expect("closing the watcher");
}
