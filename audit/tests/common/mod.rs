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

/// A store of `db` with the default configuration and a manual clock at the fixed start (a second
/// writer, after the ledger a test built).
pub async fn default_store(
    db: &leasewright_impl::database::TestDatabase,
) -> leasewright_impl::Store {
    db.store(
        std::sync::Arc::new(leasewright_impl::ManualClock::at_fixed_start()),
        leasewright_impl::StoreConfig::default(),
    )
    .await
    .expect("a store")
}

/// A forger's full recomputation of every chain after an edit (common/rechain.sql, with the chain
/// hashing function of audit/src/multiply.sql defined first), one statement at a time on one
/// connection (`sql`).
pub fn rechain() -> Vec<String> {
    let multiply = include_str!("../../src/multiply.sql");
    let function = multiply
        .split_once("-- chain_hashes: begin\n")
        .and_then(|(_, rest)| rest.split_once("-- chain_hashes: end\n"))
        .map(|(function, _)| function.to_string())
        .expect("multiply.sql defines pg_temp.chain_hashes between its markers");
    std::iter::once(function)
        .chain(split_statements(include_str!("rechain.sql")))
        .collect()
}

/// `script`'s statements: split at a `;` that ends a line, outside a `$chain$` body; comment lines
/// dropped.
fn split_statements(script: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut in_body = false;
    for line in script.lines() {
        if line.trim_start().starts_with("--") {
            continue;
        }
        if line.matches("$chain$").count() % 2 == 1 {
            in_body = !in_body;
        }
        current.push_str(line);
        current.push('\n');
        if !in_body && line.trim_end().ends_with(';') {
            out.push(std::mem::take(&mut current));
        }
    }
    if !current.trim().is_empty() {
        out.push(current);
    }
    out
}
