//! The two same-run baselines the implementation's claim is compared against:
//!
//! - `skip-locked`: what a typical PostgreSQL job queue does, a single-statement
//!   `FOR UPDATE SKIP LOCKED` claim on a minimal table, with no fencing and no ledger;
//! - `commit-rate`: a one-row `UPDATE` per transaction on a row of the worker's own, which no claim
//!   can beat on this machine: it is the cost of one commit.
//!
//! They live in their own schema (`leasewright_bench`) so they never touch the implementation's tables.

use sqlx::PgPool;

/// Creates (or recreates) the baseline tables.
pub async fn create(pool: &PgPool) -> Result<(), sqlx::Error> {
    for statement in [
        "CREATE SCHEMA IF NOT EXISTS leasewright_bench",
        "DROP TABLE IF EXISTS leasewright_bench.bare_queue",
        "DROP TABLE IF EXISTS leasewright_bench.commit_rate",
        // fillfactor 90 leaves room for HOT updates of `state` (the claimed row stays on its page).
        "CREATE TABLE leasewright_bench.bare_queue (
            id bigserial PRIMARY KEY,
            state smallint NOT NULL DEFAULT 0,
            claimed_by integer,
            claimed_at timestamptz,
            finished_at timestamptz
        ) WITH (fillfactor = 90)",
        "CREATE INDEX bare_queue_queued ON leasewright_bench.bare_queue (id) WHERE state = 0",
        "CREATE TABLE leasewright_bench.commit_rate (worker integer PRIMARY KEY, n bigint NOT NULL)
            WITH (fillfactor = 50)",
    ] {
        sqlx::query(statement).execute(pool).await?;
    }
    Ok(())
}

/// Tops the bare queue up to `queued` rows in state 0.
pub async fn fill_bare_queue(pool: &PgPool, queued: i64) -> Result<(), sqlx::Error> {
    let (have,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM leasewright_bench.bare_queue WHERE state = 0")
            .fetch_one(pool)
            .await?;
    if have < queued {
        sqlx::query(
            "INSERT INTO leasewright_bench.bare_queue (state) SELECT 0 FROM generate_series(1, $1)",
        )
        .bind(queued - have)
        .execute(pool)
        .await?;
    }
    Ok(())
}

/// Gives each of `workers` workers its own row to update.
pub async fn fill_commit_rate(pool: &PgPool, workers: i32) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO leasewright_bench.commit_rate (worker, n)
         SELECT w, 0 FROM generate_series(0, $1 - 1) AS w ON CONFLICT (worker) DO NOTHING",
    )
    .bind(workers)
    .execute(pool)
    .await?;
    Ok(())
}

/// One bare claim: the whole queue protocol of a typical PostgreSQL job queue. Returns whether a
/// job was claimed.
pub async fn bare_claim(pool: &PgPool, worker: i32) -> Result<bool, sqlx::Error> {
    Ok(claim_one(pool, worker).await?.is_some())
}

/// The bare claim's one statement: the id of the job claimed, if any.
async fn claim_one(pool: &PgPool, worker: i32) -> Result<Option<i64>, sqlx::Error> {
    let row: Option<(i64,)> = sqlx::query_as(
        "UPDATE leasewright_bench.bare_queue SET state = 1, claimed_by = $1, claimed_at = now()
         WHERE id = (SELECT id FROM leasewright_bench.bare_queue WHERE state = 0
                     ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1)
         RETURNING id",
    )
    .bind(worker)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|(id,)| id))
}

/// The typical queue's whole job: a bare claim, then the completion as one `UPDATE` of the
/// claimed row (state 2, the finish time), two transactions as River, Oban or graphile-worker
/// do per job (claim, run, complete). Returns whether a job was claimed and completed.
pub async fn claim_and_complete(pool: &PgPool, worker: i32) -> Result<bool, sqlx::Error> {
    let Some(id) = claim_one(pool, worker).await? else {
        return Ok(false);
    };
    let done = sqlx::query(
        "UPDATE leasewright_bench.bare_queue SET state = 2, finished_at = now()
         WHERE id = $1 AND state = 1 AND claimed_by = $2",
    )
    .bind(id)
    .bind(worker)
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// One bare batch claim of up to `k` jobs. Returns how many were claimed.
pub async fn bare_claim_batch(pool: &PgPool, worker: i32, k: i64) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE leasewright_bench.bare_queue SET state = 1, claimed_by = $1, claimed_at = now()
         WHERE id IN (SELECT id FROM leasewright_bench.bare_queue WHERE state = 0
                      ORDER BY id FOR UPDATE SKIP LOCKED LIMIT $2)",
    )
    .bind(worker)
    .bind(k)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// One commit: a one-row update of the worker's own row.
pub async fn one_row_update(pool: &PgPool, worker: i32) -> Result<bool, sqlx::Error> {
    let done = sqlx::query("UPDATE leasewright_bench.commit_rate SET n = n + 1 WHERE worker = $1")
        .bind(worker)
        .execute(pool)
        .await?;
    Ok(done.rows_affected() == 1)
}
