//! Beginning a transaction so that a caller dropped mid-`BEGIN` cannot leave a pooled connection
//! inside it.
//!
//! sqlx 0.8.6's `Pool::begin` (and `begin_with`) is not cancel-safe on PostgreSQL: it sends
//! `BEGIN` and raises the connection's transaction depth only after the answer, and its guard
//! queues a `ROLLBACK` only when that depth is above zero. A future dropped while `BEGIN` is on
//! the wire (an HTTP handler whose client disconnected, a `tokio::time::timeout`) returns the
//! connection to the pool inside an open transaction that nothing ends: the next borrowers'
//! statements run in it, uncommitted and holding their locks, until some later `BEGIN ... COMMIT`
//! on that connection commits them or a `ROLLBACK` discards them (transact-rs/sqlx#4393, fixed
//! upstream by #4394, after 0.8.6). A `leasewright runner` killed with requests in flight did
//! exactly that to the control plane (docs/benchmarks.md, run 2): claims it answered were never
//! committed (`unknown_attempt` on their result) and rules waited on locks a stale transaction
//! held (`500 internal_error`).
//!
//! [`begin`] runs the `BEGIN` in a task of its own: a dropped caller drops only its wait for it,
//! the task reads `BEGIN`'s answer, and the transaction it then drops queues its `ROLLBACK` as any
//! dropped transaction does, before the connection serves anyone else.

use sqlx::{PgPool, Postgres, Transaction};

/// `pool.begin()` (or `pool.begin_with(statement)`), safe to cancel at any point. Every
/// transaction of the store and of the server's handlers begins here.
pub async fn begin(
    pool: &PgPool,
    statement: Option<&'static str>,
) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
    let pool = pool.clone();
    let task = tokio::spawn(async move {
        match statement {
            Some(statement) => pool.begin_with(statement).await,
            None => pool.begin().await,
        }
    });
    match task.await {
        Ok(begun) => begun,
        Err(failed) if failed.is_panic() => std::panic::resume_unwind(failed.into_panic()),
        // The runtime is shutting down: no transaction, as when the connection is cut.
        Err(_) => Err(sqlx::Error::WorkerCrashed),
    }
}
