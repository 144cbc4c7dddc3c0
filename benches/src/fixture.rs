//! One benchmark database: the implementation's store and the baselines' tables side by side, a
//! project with one runner per worker, and a bulk loader of queued jobs.
//!
//! The database comes from impl's database module: a fresh database on `DATABASE_URL`'s server,
//! or on a throwaway cluster this process starts (and removes when it exits).

use leasewright_impl::database::{HarnessError, TestDatabase};
use leasewright_impl::{ProjectId, RunnerId, Store, StoreConfig, SystemClock};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use std::sync::Arc;
use std::time::Duration;

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// No database could be had.
    #[error(transparent)]
    Database(#[from] HarnessError),
    /// The implementation failed (an infrastructure error, never a rejection).
    #[error("the implementation failed: {0}")]
    Store(#[from] leasewright_impl::Error),
    /// A baseline or setup statement failed.
    #[error("a benchmark statement failed: {0}")]
    Sql(#[from] sqlx::Error),
    /// The options make no sense.
    #[error("invalid options: {0}")]
    Invalid(String),
}

/// Whether benchmarks will use `DATABASE_URL` (true) or start a throwaway cluster (false).
pub fn uses_database_url() -> bool {
    std::env::var("DATABASE_URL").is_ok_and(|url| !url.is_empty())
}

/// A benchmark database with the implementation's schema (migrations applied) and the baselines'
/// tables (schema `leasewright_bench`).
pub struct Fixture {
    /// Keeps the database alive (dropped with the fixture on a `DATABASE_URL` server).
    pub database: TestDatabase,
    /// The implementation, with a pool of `workers` connections.
    pub store: Store,
    /// The baselines' pool: as many connections as the store's.
    pub pool: PgPool,
    /// The project every job and runner belongs to.
    pub project: ProjectId,
    /// One runner per worker.
    pub runners: Vec<RunnerId>,
}

impl Fixture {
    /// A fresh database for `workers` concurrent workers.
    pub async fn new(workers: usize) -> Result<Fixture, BenchError> {
        let workers = workers.max(1);
        let database = TestDatabase::create().await?;
        let config = StoreConfig {
            lease_ttl: Duration::from_secs(3600),
            max_connections: workers as u32,
            acquire_timeout: Duration::from_secs(60),
        };
        let store = database.store(Arc::new(SystemClock), config).await?;
        let pool = PgPoolOptions::new()
            .max_connections(workers as u32)
            .acquire_timeout(Duration::from_secs(60))
            .connect(database.url())
            .await?;
        // For experiments (docs/benchmarks.md): statements run once after the migrations, e.g.
        // to measure without a migration's index. Separated by `;`.
        if let Ok(setup) = std::env::var("LEASEWRIGHT_BENCH_SETUP_SQL") {
            for statement in setup.split(';').filter(|s| !s.trim().is_empty()) {
                sqlx::query(statement).execute(&pool).await?;
            }
        }
        crate::baseline::create(&pool).await?;
        crate::baseline::fill_commit_rate(&pool, workers as i32).await?;
        let project = store.create_project("bench").await?;
        let mut runners = Vec::with_capacity(workers);
        for i in 0..workers {
            runners.push(
                store
                    .create_runner(project, &format!("runner-{i}"))
                    .await?
                    .0,
            );
        }
        // Open every connection now, so that no measurement pays for a connect.
        warm_pool(store.pool(), workers).await?;
        warm_pool(&pool, workers).await?;
        Ok(Fixture {
            database,
            store,
            pool,
            project,
            runners,
        })
    }

    /// The implementation's queued jobs of the project.
    pub async fn queued(&self) -> Result<i64, BenchError> {
        Ok(sqlx::query_scalar(
            "SELECT count(*) FROM jobs WHERE project_id = $1 AND state = 'queued'",
        )
        .bind(self.project.0)
        .fetch_one(&self.pool)
        .await?)
    }

    /// Bulk-loads `n` queued jobs, each with its own target slot, in one statement.
    ///
    /// Benchmark setup knows the implementation's schema (impl/migrations/0001_protocol.sql,
    /// table `jobs`): a million jobs submitted one `submit_job` at a time would take minutes. The
    /// rows are exactly what `job_insert` writes: `queued`, fence 0, no attempt, an `unfenced`
    /// target of their own.
    pub async fn load_queued(&self, n: i64) -> Result<(), BenchError> {
        if n <= 0 {
            return Ok(());
        }
        sqlx::query(
            "INSERT INTO jobs (id, project_id, submitted_at, source_revision, source_digest,
                               command, target, target_kind)
             SELECT gen_random_uuid(), $1, now(), 'bench-revision', 'bench-digest', 'true',
                    'bench-' || gen_random_uuid(), 'unfenced'
             FROM generate_series(1, $2)",
        )
        .bind(self.project.0)
        .bind(n)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Tops the implementation's queue up to `n` queued jobs and the bare queue to the same depth.
    pub async fn top_up(&self, n: i64) -> Result<(), BenchError> {
        let have = self.queued().await?;
        self.load_queued(n - have).await?;
        crate::baseline::fill_bare_queue(&self.pool, n).await?;
        Ok(())
    }

    /// `VACUUM (ANALYZE)` of the bulk-loaded tables (the queues), as autovacuum would after the
    /// load, so that every measurement starts from the same physical state. The empty tables are
    /// left alone: analyzing them empty would make the planner plan for empty tables (see
    /// docs/benchmarks.md, "cold statistics").
    pub async fn vacuum(&self) -> Result<(), BenchError> {
        for table in LOADED_TABLES {
            sqlx::query(&format!("VACUUM (ANALYZE) {table}"))
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }

    /// `ANALYZE` of the same tables: the planner's statistics of the current state.
    pub async fn analyze(&self) -> Result<(), BenchError> {
        for table in CLAIM_TABLES {
            sqlx::query(&format!("ANALYZE {table}"))
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }

    /// Closes both pools.
    pub async fn close(&self) {
        self.store.close().await;
        self.pool.close().await;
    }
}

/// The tables setup loads.
const LOADED_TABLES: [&str; 3] = [
    "jobs",
    "leasewright_bench.bare_queue",
    "leasewright_bench.commit_rate",
];

/// The tables the measured operations write.
const CLAIM_TABLES: [&str; 6] = [
    "jobs",
    "attempts",
    "target_reservations",
    "observations",
    "leasewright_bench.bare_queue",
    "leasewright_bench.commit_rate",
];

/// Opens `n` connections of `pool` at once.
async fn warm_pool(pool: &PgPool, n: usize) -> Result<(), sqlx::Error> {
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        held.push(pool.acquire().await?);
    }
    Ok(())
}

/// The server settings that bound the numbers, as `name = value` pairs.
pub async fn server_settings(pool: &PgPool) -> Result<Vec<(String, String)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT name, setting FROM pg_settings WHERE name IN
           ('server_version', 'fsync', 'synchronous_commit', 'full_page_writes', 'wal_level',
            'shared_buffers', 'max_connections', 'autovacuum', 'autovacuum_naptime',
            'autovacuum_vacuum_scale_factor', 'autovacuum_vacuum_cost_limit')
         ORDER BY name",
    )
    .fetch_all(pool)
    .await
}
