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
    /// The server cannot give the benchmark the connections it needs.
    #[error(
        "the benchmark needs {needed} connections but the server allows {available} more \
         (max_connections = {max_connections}, {reserved} reserved for superusers, {in_use} in \
         use): lower --concurrency, or raise max_connections"
    )]
    TooFewConnections {
        needed: u32,
        available: u32,
        max_connections: u32,
        reserved: u32,
        in_use: u32,
    },
}

/// How many more client connections the server accepts now.
#[derive(Clone, Copy, Debug)]
pub struct Capacity {
    /// `max_connections`.
    pub max_connections: u32,
    /// `superuser_reserved_connections`.
    pub reserved: u32,
    /// Connections open now (every backend that counts against `max_connections`).
    pub in_use: u32,
}

impl Capacity {
    /// What the server holds right now.
    pub async fn of(pool: &PgPool) -> Result<Capacity, sqlx::Error> {
        let (max_connections, reserved, in_use): (i32, i32, i64) = sqlx::query_as(
            "SELECT current_setting('max_connections')::int,
                    current_setting('superuser_reserved_connections')::int,
                    (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')",
        )
        .fetch_one(pool)
        .await?;
        Ok(Capacity {
            max_connections: max_connections.max(0) as u32,
            reserved: reserved.max(0) as u32,
            in_use: in_use.max(0) as u32,
        })
    }

    /// Connections still available to a non-superuser (the benchmark may run as one).
    pub fn available(self) -> u32 {
        self.max_connections
            .saturating_sub(self.reserved)
            .saturating_sub(self.in_use)
    }

    /// `Ok` when `needed` more connections fit, else the refusal with the numbers.
    pub fn check(self, needed: u32) -> Result<(), BenchError> {
        if needed <= self.available() {
            return Ok(());
        }
        Err(BenchError::TooFewConnections {
            needed,
            available: self.available(),
            max_connections: self.max_connections,
            reserved: self.reserved,
            in_use: self.in_use,
        })
    }
}

/// Whether benchmarks will use `DATABASE_URL` (true) or start a throwaway cluster (false).
pub fn uses_database_url() -> bool {
    std::env::var("DATABASE_URL").is_ok_and(|url| !url.is_empty())
}

static SCHEMA: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Keep the implementation's tables of every benchmark database in `schema` (`bench --schema`)
/// instead of [`leasewright_impl::DEFAULT_SCHEMA`]: the store, the in-process control planes and
/// the `serve` processes all use it. Set once, before the first fixture; a second call is
/// ignored (the process's benchmarks share one schema, as they share `DATABASE_URL`).
pub fn set_schema(schema: &str) {
    let _ = SCHEMA.set(schema.to_owned());
}

/// The schema of [`set_schema`], else the default.
pub fn schema() -> &'static str {
    SCHEMA
        .get()
        .map_or(leasewright_impl::DEFAULT_SCHEMA, String::as_str)
}

/// A benchmark database with the implementation's schema (migrations applied) and the baselines'
/// tables (schema `leasewright_bench`).
pub struct Fixture {
    /// Keeps the database alive (dropped with the fixture on a `DATABASE_URL` server).
    pub database: TestDatabase,
    /// The implementation, with a pool of `workers` connections.
    pub store: Store,
    /// The baselines' pool: the store's own pool (one connection per worker serves every
    /// contender, which run one after another), so a run needs `workers` connections in all.
    pub pool: PgPool,
    /// The project every job and runner belongs to.
    pub project: ProjectId,
    /// One runner per worker.
    pub runners: Vec<RunnerId>,
    /// The runners' bearer tokens (for the HTTP contenders), in the order of `runners`.
    pub tokens: Vec<String>,
    /// The control planes started by [`Fixture::start_http`] (the real HTTP server of `serve`,
    /// each with a store of its own on this database).
    pub servers: Vec<leasewright_server::app::Server>,
    /// One runner-side HTTP client per worker, worker `w` talking to server `w % servers`.
    pub clients: Vec<leasewright_server::client::RunnerClient>,
    /// Whether loaded jobs get the HTTP server's spec row even without [`Fixture::start_http`]
    /// (control planes in other processes on this database).
    pub job_specs: bool,
    /// The operator token of the control planes of [`Fixture::start_http`].
    pub operator_token: String,
    /// A real source the loaded jobs name instead of the placeholder (a snapshot a submission
    /// stored, so a `leasewright runner` can verify and run them): see [`Source`].
    pub source: Option<Source>,
}

/// A source snapshot stored by one submission through `POST /v1/projects/{p}/jobs`, which bulk
/// loaded jobs name as that submission's job does: its blob (in `server_source_blobs`), its
/// manifest digest and revision.
#[derive(Clone, Debug)]
pub struct Source {
    pub blob_sha256: String,
    pub digest: String,
    pub revision: String,
}

/// Connections a fixture of `workers` workers opens: the shared pool, plus one for setup
/// statements that may run while the pool is busy (the queue top-up between slots).
pub fn connections_needed(workers: usize) -> u32 {
    workers.max(1) as u32 + 1
}

impl Fixture {
    /// A fresh database for `workers` concurrent workers.
    pub async fn new(workers: usize) -> Result<Fixture, BenchError> {
        Fixture::with_pool(workers, workers, 0).await
    }

    /// A fresh database with `workers` runners and a pool of `pool` connections (at least 1),
    /// refused at once unless the server can give it those plus `also` more (what the caller
    /// will open besides: other fixtures, control planes, a sampler).
    pub async fn with_pool(workers: usize, pool: usize, also: u32) -> Result<Fixture, BenchError> {
        let workers = workers.max(1);
        let pool_size = pool.max(1);
        let database = TestDatabase::create().await?;
        // Refuse at once, with the numbers, when the server cannot hold the pool (a server as
        // users have it allows 100 connections, some of them in use by others).
        {
            let probe = PgPoolOptions::new()
                .max_connections(1)
                .connect(database.url())
                .await?;
            let capacity = Capacity::of(&probe).await;
            probe.close().await;
            // The probe's own connection is free again once it is closed.
            let mut capacity = capacity?;
            capacity.in_use = capacity.in_use.saturating_sub(1);
            capacity.check(connections_needed(pool_size) + also)?;
        }
        let config = StoreConfig {
            lease_ttl: Duration::from_secs(3600),
            max_connections: pool_size as u32,
            acquire_timeout: Duration::from_secs(60),
            schema: schema().to_owned(),
        };
        let store = database.store(Arc::new(SystemClock), config).await?;
        let pool = store.pool().clone();
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
        let mut tokens = Vec::with_capacity(workers);
        for i in 0..workers {
            let (runner, token) = store.create_runner(project, &format!("runner-{i}")).await?;
            runners.push(runner);
            tokens.push(token);
        }
        // Open every connection now, so that no measurement pays for a connect.
        warm_pool(&pool, pool_size).await?;
        Ok(Fixture {
            database,
            store,
            pool,
            project,
            runners,
            tokens,
            servers: Vec::new(),
            clients: Vec::new(),
            job_specs: false,
            operator_token: format!("bench-operator-{}", ProjectId::new_random().0.simple()),
            source: None,
        })
    }

    /// The implementation's queued jobs of the project.
    pub async fn queued(&self) -> Result<i64, BenchError> {
        Ok(
            sqlx::query_scalar("SELECT count(*) FROM jobs WHERE project_id = $1 AND queued")
                .bind(self.project.0)
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// Bulk-loads `n` queued jobs, each with its own target slot, in one statement.
    ///
    /// Benchmark setup knows the implementation's schema (impl/migrations, tables `jobs` and
    /// `target_slots`): a million jobs submitted one `submit_job` at a time would take minutes.
    /// The rows are exactly what `job_insert` writes: `queued`, fence 0, no attempt, an
    /// `unfenced` target slot of their own (registered in `target_slots`).
    pub async fn load_queued(&self, n: i64) -> Result<(), BenchError> {
        if n <= 0 {
            return Ok(());
        }
        // With HTTP servers each job also gets the server's spec row, as a submission over HTTP
        // writes it (the server's claim waits for it).
        let (revision, digest) = match &self.source {
            Some(source) => (source.revision.as_str(), source.digest.as_str()),
            None => ("bench-revision", "bench-digest"),
        };
        let then = if self.servers.is_empty() && !self.job_specs {
            " SELECT count(*) FROM loaded".to_string()
        } else if self.source.is_some() {
            // The stored snapshot's blob exists already (its submission stored it).
            " INSERT INTO server_job_specs (job_id, blob_sha256, artifacts)
              SELECT id, $5, '{}' FROM loaded"
                .to_string()
        } else {
            // The spec names a source blob, which must exist (server/migrations/1002).
            ", blob AS (
               INSERT INTO server_source_blobs (sha256, manifest_digest, content, stored_at)
               VALUES (repeat('0', 64), 'bench-digest', '', now())
               ON CONFLICT (sha256) DO NOTHING)
             INSERT INTO server_job_specs (job_id, blob_sha256, artifacts)
             SELECT id, repeat('0', 64), '{}' FROM loaded"
                .to_string()
        };
        let sql = format!(
            "WITH new AS (
               SELECT gen_random_uuid() AS id, 'bench-' || gen_random_uuid() AS target
               FROM generate_series(1, $2)),
             slots AS (
               INSERT INTO target_slots (slot, kind) SELECT target, 'unfenced' FROM new),
             loaded AS (
               INSERT INTO jobs (id, project_id, submitted_at, source_revision, source_digest,
                                 command, target, target_kind)
               SELECT id, $1, now(), $3, $4, 'true', target, 'unfenced'
               FROM new
               RETURNING id)
             {then}"
        );
        let mut query = sqlx::query(&sql)
            .bind(self.project.0)
            .bind(n)
            .bind(revision)
            .bind(digest);
        if let (Some(source), true) = (&self.source, then.contains("$5")) {
            query = query.bind(source.blob_sha256.as_str());
        }
        query.execute(&self.pool).await?;
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

    /// The server's current WAL insert position (`pg_current_wal_insert_lsn()`), as text: the end
    /// of every record written so far. `pg_current_wal_lsn()` is the position written out to the
    /// kernel, which trails it under `synchronous_commit = off` (the throwaway cluster), so a
    /// window bounded by it lost its last operations' records to the next window (`bench writes
    /// --operations 20` counted 0.75 job updates per claim).
    pub async fn wal_lsn(&self) -> Result<String, BenchError> {
        Ok(
            sqlx::query_scalar("SELECT pg_current_wal_insert_lsn()::text")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// WAL bytes written since `lsn` (from [`Fixture::wal_lsn`]). Cluster-wide: on a shared
    /// server it counts other databases' writes too.
    pub async fn wal_bytes_since(&self, lsn: &str) -> Result<u64, BenchError> {
        let bytes: f64 = sqlx::query_scalar(
            "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::float8",
        )
        .bind(lsn)
        .fetch_one(&self.pool)
        .await?;
        Ok(bytes.max(0.0) as u64)
    }

    /// Starts `replicas` HTTP control planes on this database (each the server `leasewright
    /// serve` runs, on 127.0.0.1 and a free port, with a pool of its share of the workers plus
    /// one for its sweeper) and one runner client per worker, spread evenly over them. Refuses
    /// at once when the server cannot hold their pools.
    pub async fn start_http(&mut self, replicas: usize) -> Result<(), BenchError> {
        let workers = self.runners.len();
        let replicas = replicas.clamp(1, workers);
        let per_replica = workers.div_ceil(replicas) as u32 + 1;
        let capacity = Capacity::of(&self.pool).await?;
        capacity.check(per_replica * replicas as u32)?;
        for _ in 0..replicas {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(|e| BenchError::Invalid(format!("no local port: {e}")))?;
            let config = leasewright_server::app::ServerConfig {
                max_connections: per_replica,
                operator_token: Some(self.operator_token.clone()),
                schema: schema().to_owned(),
                ..Default::default()
            };
            let server = leasewright_server::app::start(
                self.database.url(),
                Duration::from_secs(3600),
                listener,
                config,
            )
            .await
            .map_err(|e| BenchError::Invalid(format!("the HTTP server did not start: {e:#}")))?;
            self.servers.push(server);
        }
        for (w, token) in self.tokens.iter().enumerate() {
            let server = &self.servers[w % self.servers.len()];
            let client = leasewright_server::client::RunnerClient::new(
                &server.url(),
                token,
                Duration::from_secs(60),
            )
            .map_err(|e| BenchError::Invalid(format!("an HTTP client: {e}")))?;
            self.clients.push(client);
        }
        Ok(())
    }

    /// Stops the servers of [`Fixture::start_http`].
    pub async fn stop_http(&mut self) -> Result<(), BenchError> {
        self.clients.clear();
        for server in self.servers.drain(..) {
            server
                .stop()
                .await
                .map_err(|e| BenchError::Invalid(format!("stopping the HTTP server: {e:#}")))?;
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
const LOADED_TABLES: [&str; 4] = [
    "jobs",
    "target_slots",
    "leasewright_bench.bare_queue",
    "leasewright_bench.commit_rate",
];

/// The tables the measured operations write.
const CLAIM_TABLES: [&str; 6] = [
    "jobs",
    "attempts",
    "target_slots",
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

/// The value of `name` among [`server_settings`]' pairs, `?` when absent.
pub fn setting<'a>(settings: &'a [(String, String)], name: &str) -> &'a str {
    settings
        .iter()
        .find(|(n, _)| n == name)
        .map_or("?", |(_, v)| v.as_str())
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
