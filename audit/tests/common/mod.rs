//! What the audit's test files share: running SQL against a test database by hand (the edits a
//! corruption makes) and reading one number back.

#![allow(dead_code)] // each test file uses what it needs

use sqlx::Connection as _;

/// Run `statements` in order on one connection (a `SET` holds for the ones after it).
pub async fn sql(url: &str, statements: &[String]) {
    let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
    for statement in statements {
        sqlx::query(statement)
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
}

/// The one number `query` returns.
pub async fn scalar(url: &str, query: &str) -> i64 {
    let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
    sqlx::query_scalar(query)
        .fetch_one(&mut conn)
        .await
        .unwrap()
}

/// The watermark `audited` recorded, then every finished job before `finished_before` whose
/// ledger it covers pruned (`leasewright prune --audited-through`); how many jobs.
pub async fn prune_audited(
    store: &leasewright_impl::Store,
    audited: i64,
    finished_before: chrono::DateTime<chrono::Utc>,
) -> u64 {
    store.record_audit_watermark(audited).await.unwrap();
    let policy = leasewright_impl::PrunePolicy {
        finished_before,
        unaudited: false,
        batch: 100,
        max_batches: None,
    };
    let pruned = store.prune_finished_jobs(policy).await.expect("the prune");
    pruned.jobs
}
