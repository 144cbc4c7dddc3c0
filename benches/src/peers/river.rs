//! A River-shaped contender: River's job table, its indexes, its fetch and its completion, as plain
//! SQL on the benchmark database (River is a Go library and cannot be installed here).
//!
//! Written for this benchmark from River's public schema and queries (github.com/riverqueue/river,
//! `riverdriver/riverpgxv5/migration/main/002_initial_schema.up.sql`, `004_pending_and_more.up.sql`,
//! `006_bulk_unique.up.sql` and `riverdriver/riverpgxv5/internal/dbsqlc/river_job.sql`:
//! `JobGetAvailable`, `JobSetStateIfRunningMany`): the same columns and types, the same five
//! secondary indexes (two of them GIN) and the unique-key index (without its state-bitmask
//! predicate: no benchmark job has a unique key, so it holds no entry), the fetch as one statement that
//! locks up to K available jobs `FOR UPDATE SKIP LOCKED` in River's order and marks them
//! running, and the completion as one statement over an array of ids that sets `completed` only
//! where the job is still running. River keeps every finished job (until its cleaner deletes
//! them, after a day by default), so this contender keeps them too. Left out: the notify trigger
//! (dropped by River's migration 004), leader election, the rescuer, the scheduler, unique jobs.
//! It lives in a schema of its own, `leasewright_bench_river`.

use sqlx::PgPool;

/// The schema the River-shaped table lives in.
pub const SCHEMA: &str = "leasewright_bench_river";

/// Creates (or recreates) the River-shaped table and its indexes.
pub async fn create(pool: &PgPool) -> Result<(), sqlx::Error> {
    for statement in [
        "DROP SCHEMA IF EXISTS leasewright_bench_river CASCADE",
        "CREATE SCHEMA leasewright_bench_river",
        "CREATE TYPE leasewright_bench_river.job_state AS ENUM
           ('available', 'cancelled', 'completed', 'discarded', 'pending', 'retryable',
            'running', 'scheduled')",
        "CREATE TABLE leasewright_bench_river.river_job (
           id bigserial PRIMARY KEY,
           state leasewright_bench_river.job_state NOT NULL DEFAULT 'available',
           attempt smallint NOT NULL DEFAULT 0,
           max_attempts smallint NOT NULL,
           attempted_at timestamptz,
           created_at timestamptz NOT NULL DEFAULT now(),
           finalized_at timestamptz,
           scheduled_at timestamptz NOT NULL DEFAULT now(),
           priority smallint NOT NULL DEFAULT 1,
           args jsonb NOT NULL,
           attempted_by text[],
           errors jsonb[],
           kind text NOT NULL,
           metadata jsonb NOT NULL DEFAULT '{}',
           queue text NOT NULL DEFAULT 'default',
           tags varchar(255)[] NOT NULL DEFAULT '{}',
           unique_key bytea,
           unique_states bit(8),
           CONSTRAINT finalized_or_finalized_at_null CHECK (
             (finalized_at IS NULL AND state NOT IN ('cancelled', 'completed', 'discarded')) OR
             (finalized_at IS NOT NULL AND state IN ('cancelled', 'completed', 'discarded'))),
           CONSTRAINT max_attempts_is_positive CHECK (max_attempts > 0),
           CONSTRAINT priority_in_range CHECK (priority >= 1 AND priority <= 4),
           CONSTRAINT queue_length CHECK (char_length(queue) > 0 AND char_length(queue) < 128),
           CONSTRAINT kind_length CHECK (char_length(kind) > 0 AND char_length(kind) < 128))",
        "CREATE INDEX river_job_kind ON leasewright_bench_river.river_job (kind)",
        "CREATE INDEX river_job_state_and_finalized_at_index ON leasewright_bench_river.river_job
           (state, finalized_at) WHERE finalized_at IS NOT NULL",
        "CREATE INDEX river_job_prioritized_fetching_index ON leasewright_bench_river.river_job
           (state, queue, priority, scheduled_at, id)",
        "CREATE INDEX river_job_args_index ON leasewright_bench_river.river_job USING gin (args)",
        "CREATE INDEX river_job_metadata_index ON leasewright_bench_river.river_job
           USING gin (metadata)",
        "CREATE UNIQUE INDEX river_job_unique_idx ON leasewright_bench_river.river_job
           (unique_key) WHERE unique_key IS NOT NULL AND unique_states IS NOT NULL",
    ] {
        sqlx::query(statement).execute(pool).await?;
    }
    Ok(())
}

/// Tops the queue up to `queued` available jobs, each with a `payload_bytes` payload in `args`,
/// as River's bulk insert writes them. The jobs inserted.
pub async fn top_up(pool: &PgPool, queued: i64, payload_bytes: usize) -> Result<i64, sqlx::Error> {
    let have: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM leasewright_bench_river.river_job WHERE state = 'available'",
    )
    .fetch_one(pool)
    .await?;
    let missing = (queued - have).max(0);
    if missing > 0 {
        sqlx::query(
            "INSERT INTO leasewright_bench_river.river_job (args, kind, max_attempts)
             SELECT jsonb_build_object('p', repeat('x', $2)), 'bench_noop', 25
             FROM generate_series(1, $1)",
        )
        .bind(missing)
        .bind(payload_bytes as i32)
        .execute(pool)
        .await?;
    }
    Ok(missing)
}

/// River's fetch: up to `k` available jobs of the default queue, in priority, schedule and id
/// order, locked `SKIP LOCKED` and marked running by `worker`, in one statement. Their ids.
pub async fn fetch(pool: &PgPool, worker: i32, k: i64) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar(
        "WITH locked_jobs AS (
           SELECT id FROM leasewright_bench_river.river_job
           WHERE state = 'available' AND queue = 'default' AND scheduled_at <= now()
           ORDER BY priority, scheduled_at, id
           LIMIT $2
           FOR UPDATE SKIP LOCKED)
         UPDATE leasewright_bench_river.river_job AS job
         SET state = 'running', attempt = job.attempt + 1, attempted_at = now(),
             attempted_by = array_append(job.attempted_by, 'worker-' || $1::text)
         FROM locked_jobs WHERE job.id = locked_jobs.id
         RETURNING job.id",
    )
    .bind(worker)
    .bind(k)
    .fetch_all(pool)
    .await
}

/// River's completion of several jobs at once: `completed`, finalized now, for every id whose job
/// is still running (locked first, as River's statement does). How many were completed.
pub async fn complete(pool: &PgPool, ids: &[i64]) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(
        "WITH job_to_update AS (
           SELECT job.id FROM leasewright_bench_river.river_job AS job
           WHERE job.id = ANY($1) AND job.state = 'running'
           FOR UPDATE)
         UPDATE leasewright_bench_river.river_job AS job
         SET state = 'completed', finalized_at = now()
         FROM job_to_update WHERE job.id = job_to_update.id",
    )
    .bind(ids)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}
