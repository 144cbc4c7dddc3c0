//! The pool settings of every store and of `serve` (`leasewright_impl::schema::pool_options`):
//! a pooled connection that sat idle for `IDLE_BEFORE_PING` or longer is tested before it is
//! handed out, so one that a failover or restart cut while it sat idle never meets a request,
//! while one in use within the last second is handed out without a round trip of its own
//! (docs/benchmarks.md, "What a claim costs before its jobs").

use leasewright_impl::database::TestDatabase;
use leasewright_impl::schema::{pool_options, IDLE_BEFORE_PING};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{Connection, PgConnection};
use std::time::Duration;

/// The backend of the pool's one connection, cut by another session; returns once it is gone
/// and the connection has sat idle past `IDLE_BEFORE_PING`.
async fn cut_its_connection(pool: &PgPool, url: &str) -> i32 {
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(pool)
        .await
        .expect("a first statement");
    let mut other = PgConnection::connect(url).await.expect("another session");
    let signalled: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(&mut other)
        .await
        .expect("terminate");
    assert!(signalled, "the pool's backend {pid} was signalled");
    // Bounded: a backend that outlives its signal this long is a broken server, not a slow one.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the pool's backend {pid} did not exit within 30 s of its signal"
        );
        let alive: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)")
                .bind(pid)
                .fetch_one(&mut other)
                .await
                .expect("pg_stat_activity");
        if !alive {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(IDLE_BEFORE_PING + Duration::from_millis(200)).await;
    pid
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_cut_while_it_sat_idle_never_meets_a_request() {
    let db = TestDatabase::create().await.expect("a test database");
    let pool = pool_options()
        .max_connections(1)
        .connect(db.url())
        .await
        .expect("the pool");
    let cut = cut_its_connection(&pool, db.url()).await;
    let now: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&pool)
        .await
        .expect("the request is served on a new connection, not the cut one");
    assert_ne!(now, cut);

    // The control: the same pool without the idle test hands the cut connection to the request.
    let untested = PgPoolOptions::new()
        .test_before_acquire(false)
        .max_connections(1)
        .connect(db.url())
        .await
        .expect("the untested pool");
    cut_its_connection(&untested, db.url()).await;
    let met = sqlx::query_scalar::<_, i32>("SELECT pg_backend_pid()")
        .fetch_one(&untested)
        .await;
    assert!(
        met.is_err(),
        "without the idle test the request meets the cut connection: {met:?}"
    );
}
